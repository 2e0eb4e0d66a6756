//! Keyspaces (RocksDB's column families, fjall's keyspaces): named LSM-trees of one database.
//! Each has its own tree, merge policy and shaping options; all share one value log (the
//! write-ahead log), one manifest, one memtable budget (a memtable holds a list per keyspace
//! and is switched as a whole), the block cache and the value cache. A batch may span
//! keyspaces and is atomic across them; snapshots and iterators see all of them at one
//! sequence number.
//!
//! This file holds the user's handle (`Keyspace`), the runtime state of a tree (`TreeState`,
//! under the DB mutex) and creating and dropping keyspaces. A keyspace is created through the
//! write queue (its manifest record, then a fresh memtable with a list for it, before any
//! write can name it) and dropped in one manifest edit (it is invisible at once; a background
//! job counts its separated values as garbage and deletes its tables later).

use std::ops::{Bound, RangeBounds};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::workload::WorkloadCounters;
use super::{DbInner, DbIterator, Entries};
use crate::compaction::{CompactionPolicy, WritePressure};
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::options::{Options, ReadOptions, WriteOptions};
use crate::value::Value;
use crate::version::VersionEdit;
use crate::write_batch::WriteBatch;

/// The name of the default keyspace, the database's tree before keyspaces existed.
pub const DEFAULT_KEYSPACE_NAME: &str = "default";

/// Longest keyspace name, in bytes.
pub const MAX_KEYSPACE_NAME_BYTES: usize = 255;

/// A keyspace's runtime state, under the DB mutex: its settled options, its compaction
/// policy, what running compactions hold of it, and its operation counts.
pub(crate) struct TreeState {
    pub(crate) name: Arc<str>,
    pub(crate) opts: Arc<Options>,
    pub(crate) policy: Arc<dyn CompactionPolicy>,
    /// Levels running compactions (automatic or manual) read or write; empty when none runs.
    pub(crate) busy_levels: Vec<usize>,
    /// The policy's write pressure on the version `current_id_of` names: asked once per
    /// version, not per write group (a policy may sum every level's bytes to answer).
    pub(crate) pressure: (u64, WritePressure),
    /// Dropped: invisible to users; the background finishes the drop (`finish_drop`).
    pub(crate) dropped: bool,
    pub(crate) workload: Arc<WorkloadCounters>,
    /// Table bytes written and lookups' probes, for the auto-tuner's model checks.
    pub(crate) counters: Arc<super::tuner::TreeCounters>,
    /// The auto-tuner's window and what it last did.
    pub(crate) tuner: parking_lot::Mutex<super::tuner::TunerState>,
}

impl TreeState {
    pub(crate) fn new(name: &str, opts: Options, policy: Arc<dyn CompactionPolicy>) -> TreeState {
        TreeState {
            name: name.into(),
            opts: Arc::new(opts),
            policy,
            busy_levels: Vec::new(),
            pressure: (u64::MAX, WritePressure::None),
            dropped: false,
            workload: Arc::new(WorkloadCounters::default()),
            counters: Arc::default(),
            tuner: parking_lot::Mutex::default(),
        }
    }
}

/// Check a keyspace name: 1 to 255 bytes, no path separator, no control character.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("keyspace name {name:?} {why}")));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_KEYSPACE_NAME_BYTES {
        return bad(&format!("is longer than {MAX_KEYSPACE_NAME_BYTES} bytes"));
    }
    if name.contains(['/', '\\']) || name.chars().any(char::is_control) {
        return bad("has a path separator or a control character");
    }
    Ok(())
}

/// A handle to one keyspace of an open database: cheap to clone, `Send + Sync`, usable from
/// any thread. It stays valid while the database is open; once the keyspace is dropped every
/// call returns `Error::KeyspaceDropped`, and once the database is closed `Error::Closed`.
#[derive(Clone)]
pub struct Keyspace {
    db: Arc<DbInner>,
    id: u32,
    name: Arc<str>,
    workload: Arc<WorkloadCounters>,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace").field("id", &self.id).field("name", &self.name).finish()
    }
}

impl Keyspace {
    pub(crate) fn new(db: Arc<DbInner>, id: u32, name: Arc<str>, workload: Arc<WorkloadCounters>) -> Keyspace {
        Keyspace { db, id, name, workload }
    }

    /// The keyspace's id: stable for its life, never reused after it is dropped (`0` is the
    /// default keyspace). Ops of a `WriteBatch` carry it (`WriteBatch::iter`).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Set `key` to `value` (not synced: see `put_opt`).
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(&WriteOptions::default(), key, value)
    }

    /// Set `key` to `value`; with `wo.sync` the write survives a crash once this returns.
    pub fn put_opt(&self, wo: &WriteOptions, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        // Exactly the op's size: the ops then move into a shared buffer without another
        // allocation (`bytes::Bytes` of a full vector).
        let mut b = WriteBatch::with_capacity(crate::write_batch::op_len(key.len(), value.len()) + 5);
        b.put_raw(self.id, key, value);
        self.apply(wo, b)
    }

    /// Set `key` to `value` until `ttl` has passed (by `Options::clock`): from then on reads
    /// see the key as deleted, compaction drops it, and value-log GC reclaims a separated
    /// value. A TTL of zero, or one whose expiry time overflows, is `Error::InvalidTtl` and
    /// nothing is written. Not synced: see `put_with_ttl_opt`.
    pub fn put_with_ttl(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, ttl: Duration) -> Result<()> {
        self.put_with_ttl_opt(&WriteOptions::default(), key, value, ttl)
    }

    /// `put_with_ttl` with write options.
    pub fn put_with_ttl_opt(
        &self,
        wo: &WriteOptions,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        let mut b = WriteBatch::with_capacity(crate::write_batch::op_len(key.len(), value.len() + 8) + 5);
        b.push_with_ttl(self.id, key, value, ttl);
        self.apply(wo, b)
    }

    /// Remove `key` (not synced: see `delete_opt`). Deleting a missing key is not an error.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(&WriteOptions::default(), key)
    }

    /// Remove `key`; with `wo.sync` the deletion survives a crash once this returns.
    pub fn delete_opt(&self, wo: &WriteOptions, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_raw(self.id, key.as_ref());
        self.apply(wo, b)
    }

    /// Remove every key in `[begin, end)` with one range tombstone: the cost does not grow
    /// with what the range holds. `begin > end` is an invalid argument.
    pub fn delete_range(&self, begin: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.delete_range_opt(&WriteOptions::default(), begin, end)
    }

    /// `delete_range` with write options.
    pub fn delete_range_opt(&self, wo: &WriteOptions, begin: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range_raw(self.id, begin.as_ref(), end.as_ref());
        self.apply(wo, b)
    }

    /// The database the handle belongs to.
    pub(crate) fn db(&self) -> &Arc<DbInner> {
        &self.db
    }

    /// Merge `operand` into `key` with the keyspace's merge operator (not synced: see
    /// `merge_opt`). A keyspace without an operator refuses it (`Error::InvalidArgument`).
    pub fn merge(&self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        self.merge_opt(&WriteOptions::default(), key, operand)
    }

    /// `merge` with write options.
    pub fn merge_opt(&self, wo: &WriteOptions, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        let (key, operand) = (key.as_ref(), operand.as_ref());
        let mut b = WriteBatch::with_capacity(crate::write_batch::op_len(key.len(), operand.len()) + 5);
        b.merge_raw(self.id, key, operand);
        self.apply(wo, b)
    }

    pub(crate) fn count_writes(&self, n: u64) {
        self.workload.writes.fetch_add(n, Ordering::Relaxed);
    }

    fn apply(&self, wo: &WriteOptions, b: WriteBatch) -> Result<()> {
        self.count_writes(b.len() as u64);
        self.db.writes.write(&self.db, wo.sync, b)
    }

    /// The value of `key` now, `None` if it is absent or deleted. The value is a shared handle
    /// (`Value` derefs to `[u8]`): a value the value cache holds is handed out without a copy.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.get_opt(&ReadOptions::default(), key)
    }

    /// The value of `key` as `ro` asks (at its snapshot, if any).
    pub fn get_opt(&self, ro: &ReadOptions, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let v = self.db.get(ro, self.id, key.as_ref())?;
        self.count_reads(std::slice::from_ref(&v));
        Ok(v)
    }

    fn count_reads(&self, results: &[Option<Value>]) {
        let found = results.iter().filter(|v| v.is_some()).count() as u64;
        self.workload.reads_found.fetch_add(found, Ordering::Relaxed);
        self.workload.reads_missing.fetch_add(results.len() as u64 - found, Ordering::Relaxed);
    }

    /// Look up many keys at once: the LSM-tree lookups come first, then the separated values
    /// are read in parallel (`ro.readahead_values` at a time; io_uring or a thread pool).
    /// Returns one entry per key, in order; all reads see the same state.
    pub fn multi_get<K: AsRef<[u8]>>(&self, ro: &ReadOptions, keys: &[K]) -> Result<Vec<Option<Value>>> {
        let keys: Vec<&[u8]> = keys.iter().map(AsRef::as_ref).collect();
        let v = self.db.multi_get(ro, self.id, &keys)?;
        self.count_reads(&v);
        Ok(v)
    }

    /// A cursor (LevelDB's iterator: `seek`, `next`, `prev`); call a seek method before
    /// reading from it.
    pub fn iter(&self, ro: &ReadOptions) -> Result<DbIterator> {
        self.workload.scans.fetch_add(1, Ordering::Relaxed);
        self.db.iter(ro, self.id)
    }

    /// The entries whose keys fall in `range` (any `RangeBounds` of byte strings: `a..b`,
    /// `a..=b`, `a..`, `..`), as a double-ended Rust iterator: `next()` walks up from the
    /// start, `next_back()` down from the end, and the two meet without overlap. Reads at
    /// one sequence number (the snapshot `ReadOptions::default()` takes: now). Under a custom
    /// key order (`Options::comparator`) the range is of that order, and an excluded start or
    /// an included end is `Error::InvalidArgument` (there is no next key to bound by).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<Range> {
        self.range_opt(&ReadOptions::default(), range)
    }

    /// `range` with read options (a snapshot, cache use, read-ahead). `ro`'s own bounds are
    /// replaced by the range's.
    pub fn range_opt<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, ro: &ReadOptions, range: R) -> Result<Range> {
        let (lower, upper) = self.range_bounds(range)?;
        self.bounded(ro, lower, upper)
    }

    /// `range` as an inclusive lower and an exclusive upper bound (`None`: unbounded).
    pub(crate) fn range_bounds<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<Bounds> {
        let successor_needed =
            matches!(range.start_bound(), Bound::Excluded(_)) || matches!(range.end_bound(), Bound::Included(_));
        if successor_needed && !self.db.table_cache.order().is_bytewise() {
            return Err(Error::invalid(
                "an excluded start or an included end needs the bytewise key order (a custom comparator has no next key)",
            ));
        }
        let lower = match range.start_bound() {
            Bound::Included(k) => Some(k.as_ref().to_vec()),
            // The first key after k: k followed by a zero byte.
            Bound::Excluded(k) => Some([k.as_ref(), &[0]].concat()),
            Bound::Unbounded => None,
        };
        let upper = match range.end_bound() {
            Bound::Excluded(k) => Some(k.as_ref().to_vec()),
            Bound::Included(k) => Some([k.as_ref(), &[0]].concat()),
            Bound::Unbounded => None,
        };
        Ok((lower, upper))
    }

    /// The entries whose keys start with `prefix`, as a double-ended iterator (see `range`).
    /// Bytewise key order only: under a custom comparator, `Error::InvalidArgument`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<Range> {
        self.prefix_opt(&ReadOptions::default(), prefix)
    }

    /// `prefix` with read options.
    pub fn prefix_opt(&self, ro: &ReadOptions, prefix: impl AsRef<[u8]>) -> Result<Range> {
        let (lower, upper) = self.prefix_bounds(prefix.as_ref())?;
        self.bounded(ro, lower, upper)
    }

    /// The bounds of the keys starting with `prefix` (see `range_bounds`).
    pub(crate) fn prefix_bounds(&self, prefix: &[u8]) -> Result<Bounds> {
        if !self.db.table_cache.order().is_bytewise() {
            return Err(Error::invalid(
                "prefix() needs the bytewise key order (keys of a prefix are one range only there)",
            ));
        }
        Ok((Some(prefix.to_vec()), prefix_successor(prefix)))
    }

    /// The entries in `[lower, upper)` as `ro` reads them.
    pub(crate) fn bounded(&self, ro: &ReadOptions, lower: Option<Vec<u8>>, upper: Option<Vec<u8>>) -> Result<Range> {
        let order = self.db.table_cache.order().clone();
        let empty = matches!((&lower, &upper), (Some(l), Some(u)) if order.compare_user(l, u).is_ge());
        // One snapshot for both ends: they must see the same state to meet correctly.
        let snapshot =
            ro.snapshot.clone().unwrap_or_else(|| self.db.snapshots.acquire_newest(|| self.db.writes.visible_seq()));
        let ro = ReadOptions { snapshot: Some(snapshot), lower_bound: lower, upper_bound: upper, ..ro.clone() };
        let cursor = |forward| -> Result<Option<Entries>> {
            if empty {
                return Ok(None);
            }
            Ok(Some(Entries::new(self.iter(&ro)?, forward)))
        };
        Ok(Range { front: cursor(true)?, back: cursor(false)?, last_front: None, last_back: None, order })
    }

    /// Up to `limit` entries from the first key >= `from` (within `ro`'s bounds), in ascending
    /// key order, with their values: a short scan whose length is known. The keys and value
    /// pointers are collected first and the separated values then read as one batch, so a scan
    /// of n values costs about one lookup plus n cache hits or one parallel read, not n
    /// sequential reads.
    pub fn scan_from(&self, ro: &ReadOptions, from: impl AsRef<[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Value)>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.iter(ro)?.collect_from(from.as_ref(), limit)
    }

    /// All entries in `[ro.lower_bound, ro.upper_bound)` in ascending key order.
    pub fn scan(&self, ro: &ReadOptions) -> Result<Entries> {
        Ok(Entries::new(self.iter(ro)?, true))
    }

    /// All entries in `[ro.lower_bound, ro.upper_bound)` in descending key order.
    pub fn scan_rev(&self, ro: &ReadOptions) -> Result<Entries> {
        Ok(Entries::new(self.iter(ro)?, false))
    }

    /// Compact every file of this keyspace overlapping `[begin, end]` (None = unbounded) down
    /// to the deepest level holding data in that range.
    pub fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.db.sharing.writable(&self.db.dir, "compact_range")?;
        self.db.scheduler.compact_range(&self.db, self.id, begin, end)
    }

    /// Run one step of the auto-tuner for this keyspace now, as its timer does every
    /// `Options::auto_tune_interval_ms`: sample the keyspace's counts into the window and, when
    /// the window calls for another design, move to it (recorded in the manifest before this
    /// returns; the compactions that reshape the tree follow in the background). For an
    /// application that knows its workload has just changed, and for tests that need the move
    /// at a known point. Whether it moved; `false` without `Options::auto_tune`.
    pub fn auto_tune_now(&self) -> Result<bool> {
        self.db.sharing.writable(&self.db.dir, "auto_tune_now")?;
        self.db.background_error(&self.db.state.lock())?;
        super::tuner::tune_keyspace(&self.db, self.id)
    }

    /// The database's counters and this keyspace's tree shape (levels, runs, files, bytes,
    /// filters) and merge policy.
    pub fn stats(&self) -> super::DbStats {
        super::DbStats { vlog_space_amp_estimate: self.db.gc.vlog_space_amp(&self.db), ..self.db.stats(self.id) }
    }

    /// The operations this keyspace served (this open's and, for the default keyspace, the
    /// earlier ones the `WORKLOAD` file kept).
    pub fn workload(&self) -> super::WorkloadCounts {
        self.workload.counts()
    }
}

/// A key range as an inclusive lower and an exclusive upper bound (`None`: unbounded).
pub(crate) type Bounds = (Option<Vec<u8>>, Option<Vec<u8>>);

use crate::prefix::successor as prefix_successor;

/// A double-ended iterator over a key range of a keyspace (`Keyspace::range`, `prefix`):
/// `(key, value)` pairs in ascending order from the front and descending from the back. Two
/// cursors at one snapshot walk towards each other; once their keys meet the iterator ends,
/// so no entry comes out twice.
pub struct Range {
    front: Option<Entries>,
    back: Option<Entries>,
    last_front: Option<Vec<u8>>,
    last_back: Option<Vec<u8>>,
    /// The database's key order (where the two cursors meet).
    order: KeyOrder,
}

impl Iterator for Range {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.front.as_mut()?.next()?;
        if let Ok((k, _)) = &item {
            if self.last_back.as_ref().is_some_and(|b| self.order.compare_user(k, b).is_ge()) {
                self.front = None;
                return None;
            }
            self.last_front = Some(k.clone());
        }
        Some(item)
    }
}

impl DoubleEndedIterator for Range {
    fn next_back(&mut self) -> Option<Self::Item> {
        let item = self.back.as_mut()?.next()?;
        if let Ok((k, _)) = &item {
            if self.last_front.as_ref().is_some_and(|f| self.order.compare_user(k, f).is_le()) {
                self.back = None;
                return None;
            }
            self.last_back = Some(k.clone());
        }
        Some(item)
    }
}

impl DbInner {
    /// The keyspace named `name`, if it exists and is not dropped.
    pub(crate) fn keyspace(self: &Arc<Self>, name: &str) -> Result<Keyspace> {
        let st = self.state.lock();
        self.background_error(&st)?;
        let (&id, t) = st
            .trees
            .iter()
            .find(|(_, t)| !t.dropped && &*t.name == name)
            .ok_or_else(|| Error::UnknownKeyspace { name: name.to_string() })?;
        Ok(Keyspace::new(Arc::clone(self), id, t.name.clone(), t.workload.clone()))
    }

    /// Give keyspace `id` the merge operator and compaction filter `opts` sets, if any
    /// (`Db::open_keyspace` of an existing keyspace): an operator of another name than the
    /// keyspace's is refused.
    pub(crate) fn install_merge_operator(&self, id: u32, opts: &Options) -> Result<()> {
        let mut st = self.state.lock();
        let Some(t) = st.trees.get_mut(&id) else { return Ok(()) };
        if let Some(f) = &opts.compaction_filter {
            let mut o = (*t.opts).clone();
            o.compaction_filter = Some(f.clone());
            t.opts = Arc::new(o);
        }
        if let Some(p) = &opts.prefix_extractor {
            let mut o = (*t.opts).clone();
            o.prefix_extractor = Some(p.clone());
            t.opts = Arc::new(o);
        }
        if opts.default_ttl_ms != t.opts.default_ttl_ms {
            let mut o = (*t.opts).clone();
            o.default_ttl_ms = opts.default_ttl_ms;
            t.opts = Arc::new(o);
        }
        let Some(op) = &opts.merge_operator else { return Ok(()) };
        match t.opts.merge_operator_name() {
            Some(name) if name != op.name() => Err(Error::IncompatibleOptions {
                option: "merge_operator",
                existing: format!("{name:?}, the merge operator of keyspace {:?}", &*t.name),
                given: format!("{:?}", op.name()),
            }),
            _ => {
                let mut o = (*t.opts).clone();
                o.merge_operator = Some(op.clone());
                t.opts = Arc::new(o);
                Ok(())
            }
        }
    }

    /// The names of the keyspaces (not dropped), the default one first.
    pub(crate) fn keyspace_names(&self) -> Vec<String> {
        let st = self.state.lock();
        st.trees.values().filter(|t| !t.dropped).map(|t| t.name.to_string()).collect()
    }

    /// Create keyspace `name` with the shaping settings of `opts` (the database's others
    /// apply). Through the write queue: its manifest record and a fresh memtable with a list
    /// for it are in place before any write can name it.
    pub(crate) fn create_keyspace(self: &Arc<Self>, name: &str, opts: Options) -> Result<Keyspace> {
        check_name(name)?;
        let opts = self.keyspace_options(opts);
        super::validate_options(&opts)?;
        {
            let st = self.state.lock();
            if st.trees.values().any(|t| !t.dropped && &*t.name == name) {
                return Err(Error::KeyspaceExists { name: name.to_string() });
            }
        }
        self.writes.create_keyspace(self, name, opts)?;
        self.keyspace(name)
    }

    /// The database's options with the shaping settings of `named` (what a keyspace takes of
    /// its own: `options/recorded.rs` lists them).
    fn keyspace_options(&self, named: Options) -> Options {
        self.opts.with_shape_of(&named)
    }

    /// Drop keyspace `name`: invisible at once (one manifest edit); the background counts its
    /// separated values as garbage and deletes its tables (`finish_drop`). Through the write
    /// queue, like a create: ordered with the writes around it.
    pub(crate) fn drop_keyspace(&self, name: &str) -> Result<()> {
        if name == DEFAULT_KEYSPACE_NAME {
            return Err(Error::invalid("the default keyspace cannot be dropped"));
        }
        let name = name.to_string();
        self.writes.run_exclusive(self, move |db, st| {
            let id = st
                .trees
                .iter()
                .find(|(_, t)| !t.dropped && *t.name == *name)
                .map(|(&id, _)| id)
                .ok_or_else(|| Error::UnknownKeyspace { name: name.clone() })?;
            // The manifest records the drop durably: every write before it must be durable
            // too, or a crash could keep the drop and lose earlier writes (not a prefix).
            db.writes.sync_log_locked(st)?;
            let edit = VersionEdit { keyspaces_dropped: vec![id], ..Default::default() };
            if let Err(e) = st.versions.log_and_apply(edit) {
                st.bg_error = Some(e.duplicate());
                return Err(e);
            }
            if let Some(t) = st.trees.get_mut(&id) {
                t.dropped = true;
            }
            tracing::info!(keyspace = %name, id, "keyspace dropped; its tables go in the background");
            db.scheduler.compact_cv.notify_all();
            Ok(())
        })
    }
}

impl super::write::WriteQueue {
    /// Create keyspace `name` as a write: under the leader, record it in the manifest, add its
    /// runtime state, and start a memtable with a list for it (the memtable in force has
    /// none; a non-empty one becomes immutable).
    pub(crate) fn create_keyspace(&self, db: &DbInner, name: &str, opts: Options) -> Result<()> {
        let name = name.to_string();
        self.run_exclusive(db, move |db, st| {
            if st.trees.values().any(|t| !t.dropped && *t.name == *name) {
                return Err(Error::KeyspaceExists { name: name.clone() });
            }
            // Durable in the manifest: the writes before it must be durable too (see the drop).
            db.writes.sync_log_locked(st)?;
            let id = st.versions.new_keyspace_id();
            let policy: Arc<dyn CompactionPolicy> = super::policy_for(&opts).into();
            let mut edit = VersionEdit::of_keyspace(id);
            edit.keyspaces_created.push((id, name.clone(), opts.shape_record()));
            edit.policy = Some(policy.name());
            edit.next_keyspace_id = Some(id + 1);
            st.versions.log_and_apply(edit)?;
            st.trees.insert(id, TreeState::new(&name, opts, policy));
            tracing::info!(keyspace = %name, id, "keyspace created");
            db.writes.start_memtable(db, st)
        })
    }
}
