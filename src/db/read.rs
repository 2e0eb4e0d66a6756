//! The read path: point lookups (memtables, then tables newest first), batched lookups whose
//! value-log reads run in parallel, iterators over a pinned view, and statistics.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{add, DbInner, DbStats};
use crate::db::user_iter::sampling::{ReadSampleSink, ReadSampler};
use crate::db::user_iter::{DbIterator, ValueSource};
use crate::error::Result;
use crate::internal_iter::{InternalIterator, MergingIterator};
use crate::key::{self, ValueKind};
use crate::memtable::{Lookup, Memtable};
use crate::options::ReadOptions;
use crate::sst::filter::FilterHash;
use crate::sst::BlockReads;
use crate::value::Value;
use crate::version::run_iter::{PrefixScope, RunIterator, SeekObserver};
use crate::version::{FileMeta, Version};
use crate::vlog::{Access, CacheUse, PendingRead, ValuePointer};

/// LevelDB's seek compaction: a lookup that searched more than one table charges the first
/// one it searched in vain; a table charged more than `max(100, size / 16 KiB)` times is
/// compacted. Searched means past the table's filter (a block read): LevelDB charges a table
/// whose filter turned the lookup away too, so every lookup of a key deep in a settled tree
/// charged level 1's table for a probe that cost a filter's cache line: a read-only workload
/// rewrote a settled tree, and under light-weight compaction each such compaction led on to
/// splits and collapses (docs/BENCHMARKS.md §12).
/// Under light-weight compaction also its read-side counterpart: an iterator's seek into a
/// table of `n` segments charges it `n - 1` (one block read per extra segment), and a table
/// charged as much is collapsed in place (`Reason::Collapse`).
#[derive(Default)]
pub(crate) struct SeekStats {
    charges: HashMap<u64, u64>,
    pub(crate) candidate: Candidate,
    segment_charges: HashMap<u64, u64>,
    pub(crate) collapse: Candidate,
}

/// A table (and its level) a compaction should take up, if any.
pub(crate) type Candidate = Option<(usize, Arc<FileMeta>)>;

impl SeekStats {
    /// The candidates for `v`. One no longer in its level (compacted, moved) is dropped: it
    /// would hold its slot for good, and no table after it could be charged in.
    pub(crate) fn candidates(&mut self, v: &Version) -> (Candidate, Candidate) {
        let live = |c: &(usize, Arc<FileMeta>)| v.file(c.0, c.1.number).is_some();
        self.candidate = self.candidate.take().filter(live);
        self.collapse = self.collapse.take().filter(live);
        (self.candidate.clone(), self.collapse.clone())
    }
}

/// Add `weight` to `file`'s charges; once they reach its allowance and `slot` is free, it
/// becomes the candidate. True when it did.
fn charge(
    charges: &mut HashMap<u64, u64>,
    slot: &mut Candidate,
    level: usize,
    file: &Arc<FileMeta>,
    weight: u64,
) -> bool {
    let allowed = (file.size / (16 << 10)).max(100);
    if charges.len() > 100_000 {
        // Mostly files compacted away since: start counting afresh.
        charges.clear();
    }
    let n = charges.entry(file.number).or_insert(0);
    *n += weight;
    if *n < allowed || slot.is_some() {
        return false;
    }
    charges.remove(&file.number);
    *slot = Some((level, file.clone()));
    true
}

/// Most value reads `multi_get` submits together (half the io_uring submission queue, so
/// other readers keep room).
const MULTI_GET_BATCH: usize = 128;

/// The memtables a read works on, newest first: on the stack for the usual one to three (a
/// point lookup allocates nothing here).
pub(super) type Mems = smallvec::SmallVec<[Arc<Memtable>; 4]>;

/// A registered reader's holds (`registered_view`), released when dropped.
struct Reader {
    _registration: crate::snapshot::ReaderPin,
    _snapshot: crate::snapshot::Snapshot,
}

/// What one read of a keyspace works on: memtables (newest first) and the keyspace's Version,
/// all pinned.
struct View {
    mems: Mems,
    version: Arc<Version>,
    seq: u64,
    ks: u32,
    /// The keyspace's counters when the auto-tuner needs its lookups counted.
    counters: Option<Arc<super::tuner::TreeCounters>>,
    /// The keyspace's merge operator (`None`: merge operands are an error to read).
    merge: crate::merge::Operator,
}

/// A pinned view of the newest state of every keyspace, for value-log GC's liveness checks of
/// a whole chunk.
pub(crate) struct LatestView {
    mems: Mems,
    versions: std::collections::BTreeMap<u32, Arc<Version>>,
    seq: u64,
}

/// Where a liveness check stood: its sequence number and the memtable that was active then
/// (every later write went into it or into a newer one).
#[derive(Clone)]
pub(crate) struct CheckedAt {
    pub(crate) seq: u64,
    pub(crate) mem: Arc<Memtable>,
}

impl DbInner {
    /// One view for many lookups of the newest entries (`latest_entry_in`).
    pub(crate) fn liveness_view(&self) -> (LatestView, CheckedAt) {
        let st = self.state.lock();
        let mems = st.mems();
        // Dropped keyspaces are left out: their values are garbage.
        let live = st.trees.iter().filter(|(_, t)| !t.dropped).map(|(&ks, _)| ks);
        let versions = live.filter_map(|ks| Some((ks, st.versions.current_of(ks)?))).collect();
        // Read under the lock that fixed the memtables (see `view`).
        let seq = self.writes.visible_seq();
        drop(st);
        let checked = CheckedAt { seq, mem: mems[0].clone() };
        (LatestView { mems, versions, seq }, checked)
    }

    /// Whether any entry (of any version) points into value file `file` at `offset` or past
    /// it: a walk over keys and pointers only (the tree is small next to the values), for
    /// telling a cold file's torn, never-referenced tail from damage to values it holds.
    pub(crate) fn points_past(&self, file: u64, offset: u64) -> Result<bool> {
        let view = self.liveness_view().0;
        for (&ks, version) in &view.versions {
            let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
            for m in &view.mems {
                children.push(Box::new(m.iter(ks)));
            }
            for level in &version.levels {
                for run in &level.runs {
                    let files = run.files.clone();
                    children.push(Box::new(RunIterator::new(
                        self.table_cache.clone(),
                        files,
                        BlockReads::filling(false),
                    )));
                }
            }
            let mut it = MergingIterator::new(children, self.table_cache.order().clone());
            it.seek_to_first()?;
            while it.valid() {
                // Expired or not: an expiring pointer names its value until compaction drops it.
                let pointer =
                    key::parse_internal_key(it.key()).and_then(|k| crate::ttl::pointer_bytes(k.kind, it.value()));
                if pointer.and_then(ValuePointer::decode).is_some_and(|p| p.file == file && p.offset >= offset) {
                    return Ok(true);
                }
                it.next()?;
            }
        }
        Ok(false)
    }

    /// The newest entry for `user_key` of keyspace `ks` in `view` (see `get_latest_entry`); a
    /// keyspace the view does not hold (dropped) holds nothing.
    pub(crate) fn latest_entry_in(
        &self,
        view: &LatestView,
        ks: u32,
        user_key: &[u8],
    ) -> Result<Option<(ValueKind, Value)>> {
        let Some(version) = view.versions.get(&ks) else { return Ok(None) };
        self.get_entry(&view.mems, version, view.seq, (ks, None), user_key, BlockReads::filling(true), false)
    }

    /// An error when the newest entry of `user_key` in `view` is a merge operand with the
    /// separated value `at` beneath: value-log GC may not move it (a pointer put would hide
    /// the operands) nor free it (the operands need it). A compaction that reaches the key
    /// folds the operands and the value into one inline value; until then GC leaves the file.
    pub(crate) fn check_not_under_merges(
        &self,
        view: &LatestView,
        ks: u32,
        user_key: &[u8],
        at: &ValuePointer,
    ) -> Result<()> {
        let Some(version) = view.versions.get(&ks) else { return Ok(()) };
        self.check_base(&view.mems, version, view.seq, ks, user_key, at)
    }

    /// `check_not_under_merges` against the newest state.
    pub(crate) fn check_latest_not_under_merges(&self, ks: u32, user_key: &[u8], at: &ValuePointer) -> Result<()> {
        let view = match self.view(&ReadOptions::default(), ks) {
            Ok(view) => view,
            Err(crate::error::Error::KeyspaceDropped { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        self.check_base(&view.mems, &view.version, view.seq, ks, user_key, at)
    }

    fn check_base(
        &self,
        mems: &[Arc<Memtable>],
        version: &Version,
        seq: u64,
        ks: u32,
        user_key: &[u8],
        at: &ValuePointer,
    ) -> Result<()> {
        let versions = self.versions_to_base(mems, version, seq, ks, user_key, BlockReads::filling(true))?;
        let under = versions.first().is_some_and(|(k, _)| *k == ValueKind::Merge)
            && versions.last().is_some_and(|(k, v)| {
                *k == ValueKind::Pointer
                    && ValuePointer::decode(v).is_some_and(|p| p.file == at.file && p.offset == at.offset)
            });
        match under {
            false => Ok(()),
            true => Err(crate::error::Error::Merge {
                operator: String::new(),
                key: user_key.to_vec(),
                reason: format!(
                    "value-log GC leaves value file {} alone: its value at offset {} lies beneath merge operands \
                     (a compaction that reaches the key folds them)",
                    at.file, at.offset
                ),
            }),
        }
    }

    fn view(&self, ro: &ReadOptions, ks: u32) -> Result<View> {
        let st = self.state.lock();
        let (version, counters, merge) = match (st.versions.current_of(ks), st.tree(ks)) {
            (Some(v), Some(t)) if !t.dropped => {
                (v, t.opts.auto_tune.then(|| t.counters.clone()), t.opts.merge_operator.clone())
            }
            _ => return Err(st.missing_keyspace(ks)),
        };
        let mems = st.mems();
        // Read under the lock that fixed the memtables: a leader publishes `visible_seq` and
        // switches memtables only while holding it. So every write at or below `seq` is in
        // these memtables or this Version, and every later one goes into `mems[0]` or a newer
        // memtable — which GC's conditional pointer puts rely on (`CheckedAt`).
        let seq = match &ro.snapshot {
            Some(s) => s.sequence(),
            None => self.writes.visible_seq(),
        };
        drop(st);
        Ok(View { mems, version, seq, ks, counters, merge })
    }

    /// A transaction's start: a registered snapshot of the newest state and the memtable
    /// active at it, read under the lock that fixes both (see `view`): every later write goes
    /// into that memtable or a newer one, which the commit's check relies on.
    pub(crate) fn transaction_start(&self) -> (crate::snapshot::Snapshot, Arc<Memtable>) {
        let st = self.state.lock();
        let seq = self.writes.visible_seq();
        let snapshot = self.snapshots.acquire(seq);
        (snapshot, st.mem.clone())
    }

    /// The sequence number of the newest write of `user_key` in keyspace `ks` in `mems` and
    /// `version` (range deletes covering it included; 0: none). A full lookup: a
    /// transaction's commit asks it when the memtable of its snapshot has been flushed.
    pub(crate) fn newest_write_seq(
        &self,
        mems: &[Arc<Memtable>],
        version: &Version,
        ks: u32,
        user_key: &[u8],
    ) -> Result<u64> {
        let in_mems = mems.iter().filter_map(|m| m.newest_seq(ks, user_key)).max().unwrap_or(0);
        let in_tables = self
            .newest_entry(&[], version, key::MAX_SEQ, (ks, None), user_key, BlockReads::filling(true), false)?
            .map_or(0, |(_, _, s)| s);
        let deleted = self.version_tombstones(version)?.map_or(0, |f| f.covering_seq(user_key, key::MAX_SEQ));
        Ok(in_mems.max(in_tables).max(deleted))
    }

    /// A view for a reader that must keep its separated values readable (iterators,
    /// `multi_get`), with its registration as a reader, made *before* the view is taken (and
    /// before an iterator reads the clock it judges expiry by): value-log GC frees nothing
    /// while a reader registered before it decided to is left (`SnapshotList::register_reader`).
    /// A sequence number alone is not enough: a compaction that folds merge operands into the
    /// separated value beneath them, or drops an expired entry, makes a value garbage without
    /// a newer write, and a reader at the newest sequence number on the tables from before (or
    /// one that judged expiry earlier) still reads it. The snapshot is the reader's sequence
    /// number in the registry GC's sequence-number rule (and its pacing) looks at.
    fn registered_view(&self, ro: &ReadOptions, ks: u32) -> Result<(View, Reader)> {
        let registration = self.snapshots.register_reader();
        let snapshot = match &ro.snapshot {
            Some(s) => s.clone(),
            None => self.snapshots.acquire_newest(|| self.writes.visible_seq()),
        };
        Ok((self.view(ro, ks)?, Reader { _registration: registration, _snapshot: snapshot }))
    }

    /// How `ro`'s table reads use blocks: the block cache as it asks, and every block checked
    /// again when it asks for that or the database was opened with `paranoid_checks`.
    fn block_reads(&self, ro: &ReadOptions) -> BlockReads {
        BlockReads {
            fill_cache: ro.fill_cache.unwrap_or(true),
            verify_checksums: ro.verify_checksums || self.opts.paranoid_checks,
        }
    }

    pub(crate) fn get(&self, ro: &ReadOptions, ks: u32, user_key: &[u8]) -> Result<Option<Value>> {
        let reads = self.block_reads(ro);
        let cache = CacheUse::filling(reads.fill_cache);
        let view = self.view(ro, ks)?;
        let mut entry = self.get_in(&view, user_key, reads, true)?;
        if matches!(entry, Some((ValueKind::Merge, _))) {
            return self.get_merged(ro, view, user_key, reads);
        }
        drop(view);
        // A get does not register as a reader (that would cost every lookup two trips through
        // the snapshot list), so value-log GC may move the value and delete its old file
        // between the lookup and the read. GC deletes only after the new copy is visible:
        // a failed read whose key now points elsewhere is retried there. At a snapshot too: a
        // compaction may have dropped the pointer without a newer write (a fold of merge
        // operands, an expiry), and a fresh view at the same sequence number shows that.
        for _ in 0..3 {
            let Some((ValueKind::Pointer, stored)) = &entry else { break };
            let ptr = self.vlog.decode_pointer(stored);
            match ptr.and_then(|ptr| self.vlog.read_point(&ptr, user_key, cache)) {
                Ok(v) => return Ok(Some(v)),
                Err(e) => {
                    let again = self.get_in(&self.view(ro, ks)?, user_key, reads, true)?;
                    if again == entry {
                        return Err(e);
                    }
                    entry = again;
                }
            }
        }
        match entry {
            Some((kind, v)) => self.resolve(user_key, kind, v, cache),
            None => Ok(None),
        }
    }

    /// The newest entry for `user_key` visible at the latest sequence number, without
    /// reading a separated value (GC compares the pointer itself).
    pub(crate) fn get_latest_entry(&self, ks: u32, user_key: &[u8]) -> Result<Option<(ValueKind, Value)>> {
        match self.view(&ReadOptions::default(), ks) {
            Ok(view) => self.get_in(&view, user_key, BlockReads::filling(true), false),
            // A dropped keyspace holds nothing any more.
            Err(crate::error::Error::KeyspaceDropped { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The expiry time of `user_key`'s newest entry in keyspace `ks` (`None`: it has none, or
    /// there is no entry): read raw, expired or not, for a rewrite that must keep it.
    pub(crate) fn newest_expiry(&self, ks: u32, user_key: &[u8]) -> Result<Option<u64>> {
        let view = self.view(&ReadOptions::default(), ks)?;
        let found = self.newest_entry(
            &view.mems,
            &view.version,
            view.seq,
            (ks, None),
            user_key,
            BlockReads::filling(true),
            false,
        )?;
        Ok(found
            .filter(|(kind, _, _)| crate::ttl::is_expiring(*kind))
            .and_then(|(_, v, _)| crate::ttl::split_expiry(&v).map(|(at, _)| at)))
    }

    /// `get_entry` in a view of one keyspace.
    fn get_in(
        &self,
        view: &View,
        user_key: &[u8],
        reads: BlockReads,
        kept: bool,
    ) -> Result<Option<(ValueKind, Value)>> {
        self.get_entry(&view.mems, &view.version, view.seq, (view.ks, view.counters.as_deref()), user_key, reads, kept)
    }

    /// The newest entry for `user_key` visible in `view`: `None` when absent, the kind and
    /// stored bytes otherwise (deletions included). With `kept`, a pointer whose value a
    /// memtable keeps comes back as that value (kind `Value`): the user's reads want the value;
    /// GC and verification want the pointer.
    #[allow(clippy::too_many_arguments)]
    fn get_entry(
        &self,
        mems: &[Arc<Memtable>],
        version: &Version,
        seq: u64,
        (ks, tree): (u32, Option<&super::tuner::TreeCounters>),
        user_key: &[u8],
        reads: BlockReads,
        kept: bool,
    ) -> Result<Option<(ValueKind, Value)>> {
        let found = self.newest_entry(mems, version, seq, (ks, tree), user_key, reads, kept)?;
        // An expiring entry reads as its plain kind until it expires, then as a deletion.
        let found = match found {
            Some((kind, v, s)) if crate::ttl::is_expiring(kind) => Some(self.as_read(kind, v, s)?),
            other => other,
        };
        // The newest visible entry is deleted when a range tombstone newer than it covers it.
        if let Some((kind, _, entry_seq)) = found {
            if kind != ValueKind::Deletion && self.range_deleted(mems, version, seq, ks, user_key, entry_seq)? {
                return Ok(Some((ValueKind::Deletion, Value::new())));
            }
        }
        Ok(found.map(|(kind, v, _)| (kind, v)))
    }

    /// Whether a range tombstone visible at `seq` in `mems` or `version` deletes the entry of
    /// `user_key` written at `entry_seq`. A keyspace without range tombstones pays an atomic
    /// load per memtable and a field read.
    fn range_deleted(
        &self,
        mems: &[Arc<Memtable>],
        version: &Version,
        seq: u64,
        ks: u32,
        user_key: &[u8],
        entry_seq: u64,
    ) -> Result<bool> {
        for m in mems {
            if let Some(f) = m.range_tombstones(ks) {
                if f.max_seq() > entry_seq && f.covering_seq(user_key, seq) > entry_seq {
                    return Ok(true);
                }
            }
        }
        Ok(self
            .version_tombstones(version)?
            .is_some_and(|f| f.max_seq() > entry_seq && f.covering_seq(user_key, seq) > entry_seq))
    }

    /// The range tombstones of `version`'s tables, fragmented (made once per Version).
    pub(crate) fn version_tombstones(&self, version: &Version) -> Result<Option<Arc<crate::range_del::Fragments>>> {
        version.range_tombstones(|f| Ok(self.table_cache.get(f.number, f.size)?.range_tombstones()))
    }

    /// Every range tombstone source of a read at `seq` (the memtables', the Version's), for an
    /// iterator's `Coverage`.
    fn coverage(
        &self,
        mems: &[Arc<Memtable>],
        version: &Version,
        ks: u32,
        seq: u64,
    ) -> Result<crate::range_del::Coverage> {
        let mut sources: Vec<_> = mems.iter().filter_map(|m| m.range_tombstones(ks)).collect();
        sources.extend(self.version_tombstones(version)?);
        Ok(crate::range_del::Coverage::new(sources, seq))
    }

    /// The newest entry of `user_key` visible at `seq`, with its sequence number, before range
    /// tombstones are considered (`get_entry`).
    #[allow(clippy::too_many_arguments)]
    fn newest_entry(
        &self,
        mems: &[Arc<Memtable>],
        version: &Version,
        seq: u64,
        (ks, tree): (u32, Option<&super::tuner::TreeCounters>),
        user_key: &[u8],
        reads: BlockReads,
        kept: bool,
    ) -> Result<Option<(ValueKind, Value, u64)>> {
        for m in mems {
            match m.get(ks, user_key, seq, kept) {
                Lookup::Found(kind, v, s) => return Ok(Some((kind, Value::from(v), s))),
                Lookup::Kept(value, s) => return Ok(Some((ValueKind::Value, value, s))),
                Lookup::Deleted => return Ok(Some((ValueKind::Deletion, Value::new(), 0))),
                Lookup::Absent => {}
            }
        }
        add(&self.counters.point_lookups, 1);
        if let Some(c) = tree {
            add(&c.point_lookups, 1);
        }
        let seek = key::seek_key_inline(user_key, seq);
        // Hashed once for every filter the lookup asks (level 0's files, every segment).
        let hash = FilterHash::of(user_key);
        // The first table searched in vain, charged once a second one is searched too.
        let (mut first_searched, mut searched) = (None, 0u32);
        for (level, file) in version.files_for_key(user_key) {
            let table = self.table_cache.get(file.number, file.size)?;
            add(&self.counters.filter_probes, 1);
            if let Some(c) = tree {
                add(&c.filter_probes, 1);
            }
            let probe = table.get_filtered(&seek, hash, reads)?;
            if !probe.passed {
                continue;
            }
            add(&self.counters.filter_passes, 1);
            searched += 1;
            if searched == 1 {
                first_searched = Some((level, file));
            } else if let Some((l, f)) = first_searched.take() {
                self.charge_seek(ks, l, f);
            }
            if let Some((kind, v)) = probe.found {
                return Ok(Some((kind, v, probe.seq)));
            }
            // The filter let the lookup in, but the table has no visible entry of the key
            // (counted for Monkey's figure; a key only newer than a snapshot counts too).
            add(&self.counters.filter_false_positives, 1);
        }
        Ok(None)
    }

    fn charge_seek(&self, ks: u32, level: usize, file: &Arc<FileMeta>) {
        let stats = &mut *self.scheduler.seek_stats.lock();
        let s = stats.entry(ks).or_default();
        if charge(&mut s.charges, &mut s.candidate, level, file, 1) {
            self.scheduler.compact_cv.notify_one();
        }
    }

    /// The value of `user_key` whose newest entry in `view` is a merge operand: its entries
    /// down to the first that is not an operand, folded. A separated value beneath the
    /// operands that value-log GC moved meanwhile is looked up again (as `get` does).
    fn get_merged(
        &self,
        ro: &ReadOptions,
        mut view: View,
        user_key: &[u8],
        reads: BlockReads,
    ) -> Result<Option<Value>> {
        let cache = CacheUse::filling(reads.fill_cache);
        for attempt in 0.. {
            let versions = self.versions_to_base(&view.mems, &view.version, view.seq, view.ks, user_key, reads)?;
            match self.fold_versions(&view.merge, user_key, versions, cache) {
                Err(e) if attempt < 2 && !matches!(e, crate::error::Error::Merge { .. }) => {
                    view = self.view(ro, view.ks)?;
                }
                r => return r,
            }
        }
        unreachable!("the loop returns")
    }

    /// The entries of `user_key` visible at `seq`, newest first, down to the first that is
    /// not a merge operand (a value, a pointer or a deletion; an entry a range tombstone
    /// covers ends the list as a deletion). Only the tables that may hold the key are read.
    pub(crate) fn versions_to_base(
        &self,
        mems: &[Arc<Memtable>],
        version: &Version,
        seq: u64,
        ks: u32,
        user_key: &[u8],
        reads: BlockReads,
    ) -> Result<Vec<(ValueKind, Value)>> {
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
        for m in mems {
            children.push(Box::new(m.iter(ks)));
        }
        for (_, file) in version.files_for_key(user_key) {
            let files: Arc<[Arc<FileMeta>]> = Arc::from(vec![file.clone()]);
            children.push(Box::new(RunIterator::new(self.table_cache.clone(), files, reads)));
        }
        let mut it = MergingIterator::new(children, self.table_cache.order().clone());
        it.seek(&key::seek_key(user_key, seq))?;
        let mut out = Vec::new();
        while it.valid() {
            let Some(p) = key::parse_internal_key(it.key()).filter(|p| p.user_key == user_key) else { break };
            if p.seq <= seq {
                if p.kind != ValueKind::Deletion && self.range_deleted(mems, version, seq, ks, user_key, p.seq)? {
                    out.push((ValueKind::Deletion, Value::new()));
                    break;
                }
                let (kind, v, _) = self.as_read(p.kind, Value::copy_from_slice(it.value()), p.seq)?;
                out.push((kind, v));
                if p.kind != ValueKind::Merge {
                    break;
                }
            }
            it.next()?;
        }
        Ok(out)
    }

    /// Fold `versions` (newest first, as `versions_to_base` lists them) into the user's value.
    fn fold_versions(
        &self,
        op: &crate::merge::Operator,
        user_key: &[u8],
        versions: Vec<(ValueKind, Value)>,
        cache: CacheUse,
    ) -> Result<Option<Value>> {
        let mut operands = Vec::new();
        let mut base = None;
        for (kind, v) in versions {
            match kind {
                ValueKind::Merge => operands.push(v.to_vec()),
                ValueKind::Deletion => break,
                kind => {
                    base = self.resolve(user_key, kind, v, cache)?;
                    break;
                }
            }
        }
        if operands.is_empty() {
            return Ok(base);
        }
        crate::merge::full_merge(op, user_key, base.as_deref(), &operands).map(|v| Some(Value::from(v)))
    }

    /// An entry (`kind`, stored bytes `v`, written at `seq`) as a reader sees it now: an
    /// expiring one as its plain kind with its expiry time stripped, or a deletion once it
    /// has expired (`ttl::as_read`); any other as it is.
    pub(crate) fn as_read(&self, kind: ValueKind, v: Value, seq: u64) -> Result<(ValueKind, Value, u64)> {
        if !crate::ttl::is_expiring(kind) {
            return Ok((kind, v, seq));
        }
        let now = self.opts.clock.now_ms();
        match crate::ttl::as_read(kind, &v, now) {
            Some((ValueKind::Deletion, _)) => Ok((ValueKind::Deletion, Value::new(), seq)),
            Some((plain, _)) => Ok((plain, v.slice(crate::ttl::EXPIRY_LEN..), seq)),
            None => Err(crate::error::Error::corruption(
                &self.dir,
                0,
                format!("an expiring entry of seq {seq} is shorter than its expiry time"),
            )),
        }
    }

    /// Turn a stored entry into the user's value (a merge operand is folded by the caller,
    /// `get_merged`: alone it is an error).
    fn resolve(&self, user_key: &[u8], kind: ValueKind, v: Value, cache: CacheUse) -> Result<Option<Value>> {
        match kind {
            ValueKind::ExpiringValue | ValueKind::ExpiringPointer => {
                let (kind, v, _) = self.as_read(kind, v, 0)?;
                self.resolve(user_key, kind, v, cache)
            }
            ValueKind::Value => Ok(Some(v)),
            ValueKind::Deletion => Ok(None),
            ValueKind::Merge => Err(crate::error::Error::Merge {
                operator: String::new(),
                key: user_key.to_vec(),
                reason: "a merge operand reached the read path unfolded".into(),
            }),
            ValueKind::Pointer => {
                let ptr = self.vlog.decode_pointer(&v)?;
                self.vlog.read_point(&ptr, user_key, cache).map(Some)
            }
        }
    }

    /// Point lookups of many keys, `ro.readahead_values` at a time: the keys are looked up in
    /// the LSM-tree, then their value reads are submitted together (one kernel entry with
    /// io_uring) and collected in order, each verified as `get` verifies it.
    pub(crate) fn multi_get(&self, ro: &ReadOptions, ks: u32, keys: &[&[u8]]) -> Result<Vec<Option<Value>>> {
        // Registered as a reader: value-log GC keeps what these pointers name until the reads
        // are done.
        let (view, _reader) = self.registered_view(ro, ks)?;
        let block_reads = self.block_reads(ro);
        let reads = block_reads;
        let cache = CacheUse::filling(reads.fill_cache);
        let mut out = Vec::with_capacity(keys.len());
        // At most `MULTI_GET_BATCH` per batch: more would not fit the ring at once.
        for chunk in keys.chunks(ro.readahead_values.clamp(1, MULTI_GET_BATCH)) {
            let entries = chunk.iter().map(|k| self.get_in(&view, k, reads, true)).collect::<Result<Vec<_>>>()?;
            // Entries whose value is read in the background; the others are resolved in place.
            let ptrs: Vec<Option<(ValuePointer, &[u8])>> = entries
                .iter()
                .zip(chunk)
                .map(|(e, key)| match e {
                    Some((ValueKind::Pointer, enc)) if ro.readahead_values > 0 => {
                        Some((ValuePointer::decode(enc)?, *key))
                    }
                    _ => None,
                })
                .collect();
            let reads = self.vlog.start_reads(&ptrs, Access::Point, cache);
            for (((key, entry), read), ptr) in chunk.iter().zip(entries).zip(reads).zip(&ptrs) {
                out.push(match (entry, read.zip(*ptr)) {
                    (Some((ValueKind::Merge, _)), _) => {
                        let versions =
                            self.versions_to_base(&view.mems, &view.version, view.seq, ks, key, block_reads)?;
                        self.fold_versions(&view.merge, key, versions, cache)?
                    }
                    (Some(_), Some((read, (ptr, _)))) => {
                        Some(self.vlog.finish_read(&ptr, key, read, Access::Point, cache)?)
                    }
                    (Some((kind, v)), None) => self.resolve(key, kind, v, cache)?,
                    (None, _) => None,
                });
            }
        }
        Ok(out)
    }

    pub(crate) fn iter(self: &Arc<Self>, ro: &ReadOptions, ks: u32) -> Result<DbIterator> {
        let (view, reader) = self.registered_view(ro, ks)?;
        // Taken after the view's sequence number was read: every range delete at or below it
        // is in these memtables or this Version.
        let coverage = self.coverage(&view.mems, &view.version, ks, view.seq)?;
        let reads = self.block_reads(ro);
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
        for m in &view.mems {
            children.push(Box::new(m.iter(ks)));
        }
        // Seeks charge the tables of several segments they land in (`SeekStats`).
        let (lwc, extractor) = match self.state.lock().tree(ks) {
            Some(t) => (t.opts.light_weight_compaction, t.opts.prefix_extractor.clone()),
            None => (false, None),
        };
        // A prefix's keys are one key range only in the bytewise order.
        let extractor = extractor.filter(|_| self.table_cache.order().is_bytewise());
        let observer = lwc.then(|| Arc::new(TreeSeeks { db: Arc::clone(self), ks }) as Arc<dyn SeekObserver>);
        let within = extractor.as_deref().and_then(|e| prefix_of_bounds(e, ro));
        let scope = extractor
            .filter(|_| ro.prefix_same_as_start)
            .map(|extractor| Arc::new(PrefixScope { extractor, active: false.into() }));
        for (l, level) in view.version.levels.iter().enumerate() {
            for run in &level.runs {
                let files = match &within {
                    Some((name, prefix)) => self.files_with_prefix(&run.files, ro, name, prefix)?,
                    None => run.files.clone(),
                };
                if files.is_empty() {
                    continue;
                }
                let mut it =
                    RunIterator::new(self.table_cache.clone(), files, reads).counted(self.counters.seeks.clone());
                if let Some(o) = observer.as_ref().filter(|_| l > 0) {
                    it = it.observed(l, Arc::clone(o));
                }
                if let Some(s) = &scope {
                    it = it.prefix_scoped(Arc::clone(s));
                }
                children.push(Box::new(it));
            }
        }
        // An iterator is registered as a reader, so value-log GC keeps every value it may
        // still read.
        let pins = (view.mems, view.version.clone(), reader);
        let samples = IterSamples { db: Arc::clone(self), version: view.version.clone(), ks };
        let merges = Arc::new(ScanMerges {
            db: Arc::clone(self),
            op: view.merge.clone(),
            cache: CacheUse::filling(ro.fill_cache.unwrap_or(false)),
        });
        let order = self.table_cache.order().clone();
        // Expiry is judged once, when the iterator is made: it reads one instant, as it reads
        // one sequence number.
        let now = self.opts.clock.now_ms();
        let merged = MergingIterator::new(children, order.clone());
        let it = DbIterator::new(
            Box::new(crate::ttl::ExpiryIter::new(merged, now, crate::ttl::ExpiryMode::Read)),
            (view.seq, order),
            (ro.lower_bound.clone(), ro.upper_bound.clone()),
            Arc::new(ScanValues {
                db: Arc::clone(self),
                stream: CacheUse::filling(ro.fill_cache.unwrap_or(false)),
                batch: CacheUse::filling(reads.fill_cache),
            }),
            ro.readahead_values,
            Box::new(pins),
        )
        .range_deleted(coverage)
        .merged_by(merges)
        .sampled(ReadSampler::new(Box::new(samples)));
        Ok(match scope {
            Some(s) => it.prefix_scoped(s),
            None => it,
        })
    }

    /// Of a run's `files`, those that may hold keys in `ro`'s bounds, which lie within the
    /// keys of `prefix` (`prefix_of_bounds`): those overlapping the bounds whose prefix filter
    /// (built under the extractor named `extractor`) may hold the prefix. Counts the others
    /// that overlap as skipped.
    fn files_with_prefix(
        &self,
        files: &Arc<[Arc<FileMeta>]>,
        ro: &ReadOptions,
        extractor: &str,
        prefix: &[u8],
    ) -> Result<Arc<[Arc<FileMeta>]>> {
        let (lower, upper) = (ro.lower_bound.as_deref(), ro.upper_bound.as_deref());
        let mut kept = Vec::new();
        for f in files.iter() {
            let (first, last) = (crate::key::user_key(&f.smallest), crate::key::user_key(&f.largest));
            if lower.is_some_and(|l| last < l) || upper.is_some_and(|u| first >= u) {
                continue;
            }
            if self.table_cache.get(f.number, f.size)?.prefix_may_match(extractor, prefix) {
                kept.push(Arc::clone(f));
            } else {
                self.counters.seeks.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(kept.into())
    }

    /// Hand the values a memtable being flushed kept to the value cache
    /// (`PrepopulateValueCache::OnFlush`): data written lately stays readable from memory.
    /// A value in one of the memtable's chunks goes in as a copy (the slice would keep the
    /// whole chunk alive).
    pub(crate) fn cache_flushed_values(&self, mem: &Memtable) {
        if self.opts.prepopulate_value_cache != crate::options::PrepopulateValueCache::OnFlush
            || !self.vlog.caches_values()
            || mem.kept_bytes() == 0
        {
            return;
        }
        mem.for_each_kept(|ikey, stored, value, alone| {
            let pointer = key::parse_internal_key(ikey).and_then(|k| crate::ttl::pointer_bytes(k.kind, stored));
            if let Some(ptr) = pointer.and_then(ValuePointer::decode) {
                let value = if alone { value.clone() } else { bytes::Bytes::copy_from_slice(value) };
                self.vlog.cache_value(&ptr, key::user_key(ikey), value);
            }
        });
    }

    /// Whether parallel value reads of real files go through io_uring.
    pub(crate) fn uses_io_uring(&self) -> bool {
        self.vlog.uses_io_uring()
    }

    /// Filter bytes of `files`' tables (a table that cannot be opened counts 0: stats
    /// report, they do not fail).
    fn filter_bytes<'a>(&self, files: impl Iterator<Item = &'a Arc<crate::version::FileMeta>>) -> u64 {
        files.filter_map(|f| self.table_cache.get(f.number, f.size).ok()).map(|t| t.filter_bytes()).sum()
    }

    /// Counters of the database and the shape of keyspace `ks`'s tree.
    pub(crate) fn stats(&self, ks: u32) -> DbStats {
        let st = self.state.lock();
        let (v, workload, policy, (auto_tune, auto_tune_moves)) = match (st.versions.current_of(ks), st.tree(ks)) {
            (Some(v), Some(t)) => (
                v,
                t.workload.counts(),
                t.opts.shape_value("merge_policy").unwrap_or_default(),
                t.tuner.lock().report(st.versions.policy_reason_of(ks)),
            ),
            _ => (st.versions.current(), Default::default(), String::new(), Default::default()),
        };
        let memtable_bytes = st.mem.approximate_bytes() + st.imms.iter().map(|m| m.approximate_bytes()).sum::<u64>();
        let memtable_kept_bytes = st.mem.kept_bytes() + st.imms.iter().map(|m| m.kept_bytes()).sum::<u64>();
        let vlog_files = st.versions.vlog_files();
        let vlog_value_bytes = vlog_files.values().map(|b| b.total_bytes).sum();
        let vlog_garbage_bytes = vlog_files.values().map(|b| b.garbage_bytes).sum();
        drop(st);
        let c = &self.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let values = self.vlog.cache_usage();
        let (mut disk_bytes, mut vlog_disk_bytes) = (0, 0);
        for name in self.vfs.list(&self.dir).unwrap_or_default() {
            let used = self.vfs.disk_usage(&self.dir.join(&name)).unwrap_or(0);
            disk_bytes += used;
            use crate::filename::FileKind;
            if matches!(crate::filename::parse_file_name(&name), Some((FileKind::Vlog | FileKind::Cold, _))) {
                vlog_disk_bytes += used;
            }
        }
        // From the memtable sums and cache usage read above: no second pass under the state
        // lock (which, inside the literal below, whose counters' guards live to the end of the
        // statement, deadlocked against compaction).
        let memory = self.memory_beside(memtable_bytes + memtable_kept_bytes, values.bytes);
        DbStats {
            merge_policy: policy,
            auto_tune,
            auto_tune_moves,
            user_bytes_written: load(&c.user_bytes),
            log_bytes_written: self.writes.log.lock().bytes_appended,
            flush_bytes_written: load(&c.flush_bytes),
            compaction_bytes_written: load(&c.compaction_written),
            compaction_bytes_read: load(&c.compaction_read),
            level_compaction_bytes_written: c.compaction_written_by_level.lock().clone(),
            level_compaction_bytes_read: c.compaction_read_by_level.lock().clone(),
            level_bytes_moved: c.moved_by_level.lock().clone(),
            num_segments_appended: load(&c.segments_appended),
            num_table_splits: load(&c.table_splits),
            num_table_collapses: load(&c.table_collapses),
            level_segments: (0..v.num_levels()).map(|l| v.levels[l].files().map(|f| f.segments.max(1)).sum()).collect(),
            num_flushes: load(&c.flushes),
            num_compactions: load(&c.compactions),
            num_trivial_moves: load(&c.trivial_moves),
            num_tables_dropped: load(&c.tables_dropped),
            stall_micros: load(&c.stall_micros),
            gc_stall_micros: load(&c.gc_stall_micros),
            gc_phase_micros: self.gc.phases.snapshot(),
            memory,
            transactions_committed: load(&c.transactions_committed),
            transaction_conflicts: load(&c.transaction_conflicts),
            vlog_space_amp_estimate: 0.0,
            level_files: (0..v.num_levels()).map(|l| v.level_files(l)).collect(),
            level_entries: (0..v.num_levels()).map(|l| v.levels[l].files().map(|f| f.num_entries).sum()).collect(),
            level_range_tombstones: (0..v.num_levels())
                .map(|l| v.levels[l].files().map(|f| f.range_tombstones).sum())
                .collect(),
            level_filter_bytes: (0..v.num_levels()).map(|l| self.filter_bytes(v.levels[l].files())).collect(),
            level_runs: (0..v.num_levels()).map(|l| v.num_runs(l)).collect(),
            level_bytes: (0..v.num_levels()).map(|l| v.level_bytes(l)).collect(),
            disk_bytes,
            vlog_disk_bytes,
            vlog_value_bytes,
            vlog_garbage_bytes,
            memtable_bytes,
            memtable_kept_bytes,
            last_sequence: self.writes.visible_seq(),
            gc_runs: load(&c.gc_runs),
            gc_bytes_read: load(&c.gc_bytes_read),
            gc_bytes_rewritten: load(&c.gc_bytes_rewritten),
            gc_bytes_freed: load(&c.gc_bytes_freed),
            cold_bytes_written: load(&c.cold_bytes),
            point_lookups: load(&c.point_lookups),
            filter_probes: load(&c.filter_probes),
            workload,
            filter_passes: load(&c.filter_passes),
            filter_false_positives: load(&c.filter_false_positives),
            seek_tables_probed: load(&c.seeks.probed),
            prefix_tables_skipped: load(&c.seeks.skipped),
            value_cache_entries: values.entries,
            value_cache_bytes: values.bytes,
            value_cache_hits: values.hits,
            value_cache_misses: values.misses,
        }
    }
}

/// How an iterator reads separated values: through scan handles (read-ahead advice), using the
/// value cache as its `fill_cache` says. Unless `fill_cache` asks for it, values read one by
/// one as the iterator streams along do not enter the value cache (a long scan would push the
/// hot values out, and the churn slowed the scan itself: docs/BENCHMARKS.md §6); the batches of `scan_from`, whose length is known and short, do.
struct ScanValues {
    db: Arc<DbInner>,
    stream: CacheUse,
    batch: CacheUse,
}

impl ScanValues {
    fn start(&self, user_key: &[u8], ptr: &ValuePointer, access: Access) -> Option<PendingRead> {
        let read = self.db.vlog.start_read(ptr, user_key, access, self.stream).ok()?;
        // Buffered values and value-cache hits say nothing about whether the page cache holds
        // the sealed files.
        if !read.past_end() && !read.is_hit() {
            self.db.vlog.note_probe(read.was_cached());
        }
        Some(read)
    }
}

impl ValueSource for ScanValues {
    fn pointer(&self, stored: &[u8]) -> Result<ValuePointer> {
        self.db.vlog.decode_pointer(stored)
    }

    fn read(&self, user_key: &[u8], ptr: &ValuePointer) -> Result<Value> {
        self.db.vlog.read_value(ptr, user_key, Access::Scan, self.stream)
    }

    fn prefetch(&self, user_key: &[u8], ptr: &ValuePointer) -> Option<PendingRead> {
        self.start(user_key, ptr, Access::Scan)
    }

    /// Through the point lookups' handle, which is advised against read-ahead.
    fn prefetch_alone(&self, user_key: &[u8], ptr: &ValuePointer) -> Option<PendingRead> {
        self.start(user_key, ptr, Access::Point)
    }

    fn finish(&self, user_key: &[u8], ptr: &ValuePointer, read: PendingRead) -> Result<Value> {
        self.db.vlog.finish_read(ptr, user_key, read, Access::Scan, self.stream)
    }

    fn read_mapped(&self, user_key: &[u8], ptr: &ValuePointer) -> Option<Result<Value>> {
        self.db.vlog.read_mapped(ptr, user_key, self.stream)
    }

    fn is_warm(&self) -> bool {
        self.db.vlog.is_warm()
    }

    fn read_batch(&self, wanted: &[(&[u8], ValuePointer)]) -> Vec<Result<Value>> {
        self.db.vlog.read_batch(wanted, self.batch)
    }

    fn read_region(&self, region: crate::db::user_iter::regions::Region) {
        self.db.vlog.will_need(region.file, region.offset, region.len);
    }
}

/// How an iterator folds merge operands: the keyspace's operator, a separated value beneath
/// the operands read from the value log (or the memtable that keeps it).
struct ScanMerges {
    db: Arc<DbInner>,
    op: crate::merge::Operator,
    cache: CacheUse,
}

impl crate::db::user_iter::MergeSource for ScanMerges {
    fn has_operator(&self) -> bool {
        self.op.is_some()
    }

    fn fold(
        &self,
        user_key: &[u8],
        base: Option<(ValueKind, &[u8], Option<&bytes::Bytes>)>,
        operands: &[Vec<u8>],
    ) -> Result<Vec<u8>> {
        let value = match base {
            Some((ValueKind::Pointer, _, Some(kept))) => Some(Value::from(kept.clone())),
            Some((ValueKind::Pointer, stored, None)) => {
                let ptr = self.db.vlog.decode_pointer(stored)?;
                Some(self.db.vlog.read_point(&ptr, user_key, self.cache)?)
            }
            Some((_, stored, _)) => Some(Value::copy_from_slice(stored)),
            None => None,
        };
        crate::merge::full_merge(&self.op, user_key, value.as_deref(), operands)
    }
}

/// Where an iterator's read samples go: the Version it reads, of keyspace `ks`.
struct IterSamples {
    db: Arc<DbInner>,
    version: Arc<Version>,
    ks: u32,
}

impl ReadSampleSink for IterSamples {
    /// LevelDB's `RecordReadSample`, for level 0 only: a key two tables hold charges the first
    /// when that one is in level 0 (or another level of several runs). Every seek merges each
    /// such table as one more run, and compacting it down takes that run away; a table of a
    /// leveled level compacted down would leave its level's run in every seek (LevelDB charges
    /// it too, but with filters on point lookups that only buys rewrites).
    fn sampled(&self, internal_key: &[u8]) {
        let mut files = self.version.files_for_key(key::user_key(internal_key));
        let (Some((level, first)), Some(_)) = (files.next(), files.next()) else {
            return;
        };
        if self.version.files_may_overlap(level) {
            self.db.charge_seek(self.ks, level, first);
        }
    }
}

/// The extractor's name and the prefix all keys in `ro`'s bounds share, when they lie within
/// the keys of one prefix (`prefix(p)` with `p` at least a prefix long, or a range inside one
/// prefix): the lower bound's prefix, with the upper bound at most its successor.
fn prefix_of_bounds(e: &dyn crate::prefix::PrefixExtractor, ro: &ReadOptions) -> Option<(String, Vec<u8>)> {
    let prefix = e.prefix(ro.lower_bound.as_deref()?)?;
    let end = crate::prefix::successor(prefix)?;
    ro.upper_bound.as_deref().is_some_and(|u| u <= end.as_slice()).then(|| (e.name().to_string(), prefix.to_vec()))
}

/// Who hears of an iterator's seeks into tables of several segments: keyspace `ks`'s
/// seek statistics.
struct TreeSeeks {
    db: Arc<DbInner>,
    ks: u32,
}

impl SeekObserver for TreeSeeks {
    fn sought(&self, level: usize, file: &Arc<FileMeta>) {
        let stats = &mut *self.db.scheduler.seek_stats.lock();
        let s = stats.entry(self.ks).or_default();
        if charge(&mut s.segment_charges, &mut s.collapse, level, file, file.segments.saturating_sub(1)) {
            self.db.scheduler.compact_cv.notify_one();
        }
    }
}
