//! Runs one compaction (or memtable flush): merges the inputs, drops versions no reader can
//! see, and writes the survivors into new table files cut at the target size.
//!
//! Range tombstones: an entry an input tombstone every reader sees covers is dropped; the
//! inputs' tombstones go to the outputs, fragmented, cut at the outputs' boundaries (so a
//! run's files stay disjoint), and dropped once nothing older can hold their range.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::Arc;

use crate::compaction::CompactionTask;
use crate::error::{Error, Result};
use crate::filename::table_file_name;
use crate::fs::{SyncBatch, Vfs};
use crate::internal_iter::{InternalIterator, MergingIterator};
use crate::key::{self, compare_bytes, ValueKind, MAX_SEQ};
use crate::range_del::{Fragments, RangeTombstone};
use crate::sst::table_cache::TableCache;
use crate::sst::{TableBuilder, TableOptions};
use crate::ttl::{ExpiryIter, ExpiryMode};
use crate::version::run_iter::RunIterator;
use crate::version::{FileMeta, Version};

/// Reads a separated value: (user key, encoded pointer) to the value, checked.
pub type ReadValue<'a> = dyn Fn(&[u8], &[u8]) -> Result<Vec<u8>> + 'a;

/// Entries a job writes in place of ones it read (internal key, value), in order.
pub(crate) type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// What a job needs from the database.
pub struct JobContext<'a> {
    pub vfs: &'a Arc<dyn Vfs>,
    pub dir: &'a Path,
    pub table_cache: &'a Arc<TableCache>,
    pub table_options: TableOptions,
    pub target_file_bytes: u64,
    /// Versions at or below this sequence number are visible to no snapshot but the newest.
    pub smallest_snapshot: u64,
    /// The newest snapshot (or iterator) held, if any: the compaction filter sees only
    /// entries newer than it, so no snapshot sees the filter's effect.
    pub newest_snapshot: Option<u64>,
    /// Allocates a file number (and protects it from obsolete-file deletion).
    pub new_file_number: &'a dyn Fn() -> u64,
    /// Sync the outputs together at the job's end (`Options::defer_compaction_syncs`), not
    /// each as it is finished.
    pub defer_syncs: bool,
    /// Check every input block against its checksum again (`Options::paranoid_checks`).
    pub verify_inputs: bool,
    /// The keyspace's merge operator: folds merge operands every reader sees (`None`: they are
    /// kept as they are).
    pub merge_operator: crate::merge::Operator,
    /// Reads a separated value (user key, encoded pointer) checked against its checksum: the
    /// value beneath merge operands, which a full merge needs.
    pub read_value: &'a ReadValue<'a>,
    /// The keyspace's compaction filter, if any.
    pub compaction_filter: Option<Arc<dyn crate::compaction_filter::CompactionFilter>>,
    /// Now by the database's clock, in milliseconds: entries that expired by then are
    /// written as deletions (`ttl::ExpiryIter`).
    pub now_ms: u64,
    /// Whether value file `number` is a cold file (only GC's moves point there).
    pub is_cold: &'a dyn Fn(u64) -> bool,
}

impl JobContext<'_> {
    /// The merged inputs of `task`, with each entry expired by `now_ms` shown as a deletion at
    /// its sequence number: it then shadows what is older as a deletion would (so dropping it
    /// never brings an older version back), and goes where a deletion may go.
    pub(crate) fn merged_inputs(&self, task: &CompactionTask) -> ExpiryIter<MergingIterator> {
        let merged = MergingIterator::new(input_iterators(self, task), self.table_cache.order().clone());
        ExpiryIter::new(merged, self.now_ms, ExpiryMode::Compact)
    }

    /// How the job reads its input tables: nothing enters the block cache.
    pub fn input_reads(&self) -> crate::sst::BlockReads {
        crate::sst::BlockReads { fill_cache: false, verify_checksums: self.verify_inputs }
    }
}

/// Result of a compaction job.
#[derive(Debug, Default)]
pub struct JobOutput {
    pub files: Vec<FileMeta>,
    /// Bytes of separated values whose last reference this job dropped, per value-log file
    /// (discard statistics for value-log GC).
    pub vlog_garbage: std::collections::BTreeMap<u64, u64>,
    /// The part of `vlog_garbage` dropped under a newer version GC moved: GC's doing, not an
    /// overwrite by a user (the space estimate's overwrite ratio leaves it out).
    pub vlog_garbage_under_moves: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// Writes a stream of entries into table files of about `target_file_bytes` each.
struct OutputWriter<'a> {
    ctx: &'a JobContext<'a>,
    run: u64,
    builder: Option<(u64, TableBuilder)>,
    /// The current output is full (or should end here): close it at the next new user key.
    want_cut: bool,
    last_key: Vec<u8>,
    /// Finished outputs, synced at once or at the job's end (`JobContext::defer_syncs`).
    unsynced: SyncBatch,
    out: JobOutput,
    /// Range tombstones not yet given to an output, in key order (disjoint fragments, each
    /// range's pieces newest first).
    tombstones: VecDeque<RangeTombstone>,
}

impl<'a> OutputWriter<'a> {
    fn new(ctx: &'a JobContext<'a>, run: u64) -> Self {
        OutputWriter {
            ctx,
            run,
            builder: None,
            want_cut: false,
            last_key: Vec::new(),
            unsynced: SyncBatch::new(ctx.defer_syncs),
            out: JobOutput::default(),
            tombstones: VecDeque::new(),
        }
    }

    /// Range tombstones to write with the outputs (`output_tombstones`).
    fn with_tombstones(mut self, tombstones: Vec<RangeTombstone>) -> Self {
        self.tombstones = tombstones.into();
        self
    }

    /// Add an entry. A full output is closed only at a user-key boundary: the versions of
    /// one key never straddle two files, so a later compaction can never move the newer
    /// versions of a key below older ones left in a sibling file.
    fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        // Outputs of one job form one sorted run: keys strictly ascend across all of them.
        debug_assert!(
            self.last_key.is_empty()
                || self.ctx.table_options.order.compare_internal(&self.last_key, ikey) == Ordering::Less,
            "compaction output out of order"
        );
        if self.want_cut && key::user_key(ikey) != key::user_key(&self.last_key) {
            self.finish(Some(key::user_key(ikey)))?;
        }
        if self.builder.is_none() {
            self.open()?;
        }
        if let Some((_, b)) = &mut self.builder {
            b.add(ikey, value)?;
            self.want_cut |= b.estimated_file_size() >= self.ctx.target_file_bytes;
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        Ok(())
    }

    fn open(&mut self) -> Result<()> {
        let number = (self.ctx.new_file_number)();
        let path = table_file_name(self.ctx.dir, number);
        let file = self.ctx.vfs.create(&path)?;
        self.builder = Some((number, TableBuilder::new(file, self.ctx.table_options.clone())));
        Ok(())
    }

    /// Close the current output before the next user key.
    fn cut_before_next_key(&mut self) {
        self.want_cut = self.builder.is_some();
    }

    /// Close the current output, whose successor starts at user key `next` (`None`: the
    /// last output). It takes the range tombstones before `next`, a tombstone reaching past
    /// it cut there; the last output takes every one left, and is made for them when no entry
    /// needed it.
    fn finish(&mut self, next: Option<&[u8]>) -> Result<()> {
        self.want_cut = false;
        let tombstones = take_before(&mut self.tombstones, next);
        if self.builder.is_none() && !tombstones.is_empty() {
            self.open()?;
        }
        let Some((number, mut b)) = self.builder.take() else {
            return Ok(());
        };
        b.set_range_tombstones(tombstones);
        let (s, file) = b.finish_unsynced()?;
        self.unsynced.push(file)?;
        self.out.bytes_written += s.file_size;
        self.out.files.push(FileMeta {
            number,
            size: s.file_size,
            smallest: s.smallest,
            largest: s.largest,
            run: self.run,
            num_entries: s.num_entries,
            num_deletions: s.num_deletions,
            raw_value_bytes: s.raw_value_bytes,
            segments: 1,
            range_tombstones: s.range_tombstones,
        });
        Ok(())
    }
}

/// Take from `pending` (range tombstones in key order, disjoint fragments) every piece
/// before user key `next` (all of them when `None`), cutting a piece that reaches past
/// `next` there: its part from `next` on stays in front.
pub(crate) fn take_before(pending: &mut VecDeque<RangeTombstone>, next: Option<&[u8]>) -> Vec<RangeTombstone> {
    let Some(next) = next else { return pending.drain(..).collect() };
    let (mut taken, mut rest) = (Vec::new(), Vec::new());
    while let Some(t) = pending.pop_front() {
        if compare_bytes(&t.begin, next).is_ge() {
            pending.push_front(t);
            break;
        }
        if compare_bytes(&t.end, next).is_gt() {
            // Only the pieces of one fragment reach past `next` (fragments are disjoint).
            rest.push(RangeTombstone { begin: next.to_vec(), end: t.end.clone(), seq: t.seq });
            taken.push(RangeTombstone { end: next.to_vec(), ..t });
        } else {
            taken.push(t);
        }
    }
    for t in rest.into_iter().rev() {
        pending.push_front(t);
    }
    taken
}

/// Cuts outputs where they would overlap too many grandparent bytes (LevelDB's
/// ShouldStopBefore), so that compacting an output later stays cheap.
struct GrandparentCutter<'a> {
    order: &'a crate::comparator::KeyOrder,
    files: &'a [Arc<FileMeta>],
    idx: usize,
    overlap: u64,
    seen_key: bool,
    limit: u64,
}

impl GrandparentCutter<'_> {
    fn should_stop_before(&mut self, ikey: &[u8]) -> bool {
        while self.idx < self.files.len()
            && self.order.compare_internal(ikey, &self.files[self.idx].largest) == Ordering::Greater
        {
            if self.seen_key {
                self.overlap += self.files[self.idx].size;
            }
            self.idx += 1;
        }
        self.seen_key = true;
        if self.overlap > self.limit {
            self.overlap = 0;
            return true;
        }
        false
    }
}

/// True when no table that may hold data older than the inputs can hold `user_key`, so a
/// tombstone for it can go. Older data lives in the levels below the output, and — once a level
/// holds several sorted runs — in runs of the input and output levels that are not inputs (an
/// older run the compaction left out: dropping the tombstone would bring its value back).
/// Tables in levels above the topmost input are newer and shadow nothing. Under leveling the
/// extra checks cost nothing: the non-input tables of those levels never overlap the inputs.
/// `inputs` is the task's input file numbers (`input_numbers`), built once per job: a
/// whole-level merge has thousands of inputs and may meet a tombstone per entry.
fn is_base_level_for_key(v: &Version, task: &CompactionTask, inputs: &HashSet<u64>, user_key: &[u8]) -> bool {
    let top = task.inputs.iter().map(|i| i.level).min().unwrap_or(task.output_level);
    (top..v.num_levels()).all(|l| {
        v.levels[l]
            .runs
            .iter()
            .all(|r| r.overlapping(&v.order, Some(user_key), Some(user_key)).iter().all(|f| inputs.contains(&f.number)))
    })
}

/// `is_base_level_for_key` for every key of `[begin, end)` (checked as `[begin, end]`, which
/// only keeps a tombstone a little more often).
fn is_base_level_for_range(
    v: &Version,
    task: &CompactionTask,
    inputs: &HashSet<u64>,
    begin: &[u8],
    end: &[u8],
) -> bool {
    let top = task.inputs.iter().map(|i| i.level).min().unwrap_or(task.output_level);
    (top..v.num_levels()).all(|l| {
        v.levels[l]
            .runs
            .iter()
            .all(|r| r.overlapping(&v.order, Some(begin), Some(end)).iter().all(|f| inputs.contains(&f.number)))
    })
}

/// The range tombstones of the task's input tables.
pub(crate) fn input_tombstones(ctx: &JobContext<'_>, task: &CompactionTask) -> Result<Vec<RangeTombstone>> {
    let mut out = Vec::new();
    for (_, f) in task.input_files().filter(|(_, f)| f.range_tombstones > 0) {
        out.extend(ctx.table_cache.get(f.number, f.size)?.range_tombstones());
    }
    Ok(out)
}

/// The range tombstones the outputs of `task` carry: the inputs', fragmented, keeping of the
/// numbers every reader sees (at or below the smallest snapshot) only the newest, and that
/// one only while an older table that is not an input may hold a key of its range (with none
/// left, every entry it covered was dropped here: it hides nothing any more).
pub(crate) fn output_tombstones(
    ctx: &JobContext<'_>,
    task: &CompactionTask,
    version: &Version,
    inputs: &[RangeTombstone],
) -> Vec<RangeTombstone> {
    if inputs.is_empty() {
        return Vec::new();
    }
    let numbers = input_numbers(task);
    let floor = ctx.smallest_snapshot;
    let fragments = Fragments::build(inputs, Some(floor));
    let mut base: Option<(Vec<u8>, Vec<u8>, bool)> = None;
    let mut out = Vec::new();
    for t in fragments.tombstones() {
        if t.seq <= floor {
            let same = base.as_ref().is_some_and(|(b, e, _)| *b == t.begin && *e == t.end);
            if !same {
                let at_base = is_base_level_for_range(version, task, &numbers, &t.begin, &t.end);
                base = Some((t.begin.clone(), t.end.clone(), at_base));
            }
            if base.as_ref().is_some_and(|(_, _, at_base)| *at_base) {
                continue;
            }
        }
        out.push(t);
    }
    out
}

fn input_numbers(task: &CompactionTask) -> HashSet<u64> {
    task.input_files().map(|(_, f)| f.number).collect()
}

/// One child iterator per sorted run among the inputs (each L0 file is its own run).
pub(crate) fn input_iterators(ctx: &JobContext<'_>, task: &CompactionTask) -> Vec<Box<dyn InternalIterator>> {
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    for input in &task.inputs {
        let mut runs: Vec<(u64, Vec<Arc<FileMeta>>)> = Vec::new();
        for f in &input.files {
            match runs.iter_mut().find(|(r, _)| *r == f.run) {
                Some((_, files)) => files.push(f.clone()),
                None => runs.push((f.run, vec![f.clone()])),
            }
        }
        // Newest run first, so equal internal keys (never expected) resolve to the newest.
        runs.sort_by_key(|r| std::cmp::Reverse(r.0));
        for (_, mut files) in runs {
            files.sort_by(|a, b| ctx.table_cache.order().compare_internal(&a.smallest, &b.smallest));
            children.push(Box::new(RunIterator::new(ctx.table_cache.clone(), files.into(), ctx.input_reads())));
        }
    }
    children
}

/// Decides, entry by entry in merge order, which versions a compaction keeps: a version
/// shadowed by a newer one every reader sees goes, and so does a tombstone nothing older can
/// hold the key under. Counts the separated values it drops per value-log file.
pub(crate) struct VersionFilter<'a> {
    version: &'a Version,
    task: &'a CompactionTask,
    inputs: HashSet<u64>,
    smallest_snapshot: u64,
    dir: &'a Path,
    current_user_key: Option<Vec<u8>>,
    last_seq_for_key: u64,
    /// The entry `keep` last saw is the first (newest) of its key in the inputs.
    newest_of_key: bool,
    newest_snapshot: Option<u64>,
    /// The inputs' range tombstones (an entry one that every reader sees covers is dropped),
    /// and where the last lookup in them landed.
    tombstones: Fragments,
    hint: usize,
    /// Bytes of separated values dropped, per value-log file (discard statistics for GC).
    pub vlog_garbage: std::collections::BTreeMap<u64, u64>,
    /// Of those, bytes a GC move shadowed (`JobOutput::vlog_garbage_under_moves`).
    pub garbage_under_moves: u64,
    /// The entry `keep` last saw is a GC move (a pointer into a cold file).
    last_was_move: bool,
    is_cold: &'a dyn Fn(u64) -> bool,
}

impl<'a> VersionFilter<'a> {
    /// A filter for `task`'s inputs, whose range tombstones are `tombstones`.
    pub(crate) fn new(
        ctx: &'a JobContext<'a>,
        task: &'a CompactionTask,
        version: &'a Version,
        tombstones: &[RangeTombstone],
    ) -> Self {
        VersionFilter {
            version,
            task,
            inputs: input_numbers(task),
            smallest_snapshot: ctx.smallest_snapshot,
            dir: ctx.dir,
            current_user_key: None,
            last_seq_for_key: MAX_SEQ,
            newest_of_key: false,
            newest_snapshot: ctx.newest_snapshot,
            tombstones: Fragments::build(tombstones, None),
            hint: 0,
            vlog_garbage: Default::default(),
            garbage_under_moves: 0,
            last_was_move: false,
            is_cold: ctx.is_cold,
        }
    }

    /// Whether an input range tombstone that every reader sees covers this entry.
    fn range_deleted(&mut self, user_key: &[u8], seq: u64) -> bool {
        !self.tombstones.is_empty()
            && self.tombstones.max_seq() > seq
            && self.tombstones.covering_seq_near(user_key, self.smallest_snapshot, &mut self.hint) > seq
    }

    /// Whether the entry at `ikey` survives; entries must come in internal-key order.
    pub(crate) fn keep(&mut self, ikey: &[u8], value: &[u8]) -> Result<bool> {
        let p = key::parse_internal_key(ikey).ok_or_else(|| {
            let why = format!("compaction input holds a bad internal key: {}", key::malformed_reason(ikey));
            Error::corruption(self.dir, 0, why)
        })?;
        self.newest_of_key = self.current_user_key.as_deref() != Some(p.user_key);
        if self.newest_of_key {
            self.current_user_key = Some(p.user_key.to_vec());
            self.last_seq_for_key = MAX_SEQ;
        }
        let shadowed = self.last_seq_for_key <= self.smallest_snapshot;
        let drop = if shadowed {
            // A newer version of this key is visible to every reader: this one is shadowed.
            true
        } else if self.range_deleted(p.user_key, p.seq) {
            // So is a version a range tombstone every reader sees covers.
            true
        } else {
            p.kind == ValueKind::Deletion
                && p.seq <= self.smallest_snapshot
                && is_base_level_for_key(self.version, self.task, &self.inputs, p.user_key)
        };
        self.last_seq_for_key = p.seq;
        // The version just newer (which set `last_seq_for_key`) is a GC move.
        let shadowed_by_move = shadowed && !self.newest_of_key && self.last_was_move;
        let pointer = crate::ttl::pointer_bytes(p.kind, value).and_then(crate::vlog::ValuePointer::decode);
        self.last_was_move = pointer.is_some_and(|ptr| (self.is_cold)(ptr.file));
        if drop {
            if let Some(ptr) = pointer {
                *self.vlog_garbage.entry(ptr.file).or_insert(0) += u64::from(ptr.op_len);
                // Under a range tombstone or as a bottom deletion it is the user's doing.
                if shadowed_by_move {
                    self.garbage_under_moves += u64::from(ptr.op_len);
                }
            }
        }
        Ok(!drop)
    }

    /// Whether `keep` kept a merge operand every reader sees: the caller folds it with
    /// `fold_merges` instead of writing it.
    pub(crate) fn should_fold(&self, ikey: &[u8]) -> bool {
        key::parse_internal_key(ikey).is_some_and(|p| p.kind == ValueKind::Merge && p.seq <= self.smallest_snapshot)
    }

    /// At a merge operand every reader sees (the newest such entry of its key, which `keep`
    /// kept): fold it with its key's older operands, and with the value or deletion beneath
    /// them when one is among the inputs, or when nothing older can hold the key. Returns the
    /// entries to write in their place, in order, and leaves `it` at the first entry it did
    /// not take (the key's older entries, which `keep` then drops as shadowed, or the next
    /// key).
    ///
    /// A value in the value log beneath the operands is read (checked) and folded too, its
    /// copy in the log becoming garbage; when that read fails the value stays, and the
    /// operands above it are combined by `partial_merge` where the operator offers one. An
    /// operator that fails or panics leaves every entry as it was: nothing is lost, and the
    /// read that folds them reports the error.
    pub(crate) fn fold_merges(&mut self, it: &mut dyn InternalIterator, ctx: &JobContext<'_>) -> Result<Entries> {
        let op = &ctx.merge_operator;
        let first = key::parse_internal_key(it.key()).map(|p| (p.user_key.to_vec(), p.seq));
        let Some((user_key, top_seq)) = first else { return Err(Error::corruption(self.dir, 0, "bad merge key")) };
        // Operands newest first, with their sequence numbers.
        let mut operands: Vec<(u64, Vec<u8>)> = vec![(top_seq, it.value().to_vec())];
        // What lies beneath: a value or deletion taken (kind, seq, bytes), or a pointer or an
        // expiring entry kept as it is (the operands fold into it only when read: until it
        // expires, then into nothing).
        let mut base: Option<(ValueKind, u64, Vec<u8>)> = None;
        let mut deleted = false;
        let mut kept_below: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut expiring_below: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut last_seq = top_seq;
        it.next()?;
        while it.valid() {
            let p = key::parse_internal_key(it.key()).ok_or_else(|| {
                let why = format!("compaction input holds a bad internal key: {}", key::malformed_reason(it.key()));
                Error::corruption(self.dir, 0, why)
            })?;
            if p.user_key != &user_key[..] {
                break;
            }
            if self.range_deleted(&user_key, p.seq) {
                // Left for `keep`, which drops it (and counts its separated value).
                deleted = true;
                break;
            }
            last_seq = p.seq;
            let kind = p.kind;
            match kind {
                ValueKind::Merge => operands.push((p.seq, it.value().to_vec())),
                ValueKind::Pointer => kept_below = Some((it.key().to_vec(), it.value().to_vec())),
                ValueKind::ExpiringValue | ValueKind::ExpiringPointer => {
                    expiring_below = Some((it.key().to_vec(), it.value().to_vec()))
                }
                kind => base = Some((kind, p.seq, it.value().to_vec())),
            }
            it.next()?;
            if kind != ValueKind::Merge {
                break;
            }
        }
        self.current_user_key = Some(user_key.clone());
        self.last_seq_for_key = last_seq;
        // A separated value beneath: read it (checked) so the operands fold into one value;
        // a read that fails (a value GC moved since) keeps everything as it is.
        let separated_base =
            kept_below.as_ref().and_then(|(_, ptr)| Some(((ctx.read_value)(&user_key, ptr).ok()?, ptr)));
        if let Some((v, ptr)) = separated_base {
            let newest_first: Vec<Vec<u8>> = operands.iter().map(|(_, v)| v.clone()).collect();
            if let Ok(merged) = crate::merge::full_merge(op, &user_key, Some(&v), &newest_first) {
                if let Some(p) = crate::vlog::ValuePointer::decode(ptr) {
                    *self.vlog_garbage.entry(p.file).or_insert(0) += u64::from(p.op_len);
                }
                return Ok(vec![(internal_key(&user_key, top_seq, ValueKind::Value), merged)]);
            }
        }
        let newest_first: Vec<Vec<u8>> = operands.iter().map(|(_, v)| v.clone()).collect();
        let full = kept_below.is_none()
            && expiring_below.is_none()
            && (base.is_some() || deleted || is_base_level_for_key(self.version, self.task, &self.inputs, &user_key));
        let mut out = Vec::new();
        let entry = |seq, kind: ValueKind, v: Vec<u8>| (internal_key(&user_key, seq, kind), v);
        if full {
            let existing = base.as_ref().filter(|b| b.0 == ValueKind::Value).map(|b| &b.2[..]);
            match crate::merge::full_merge(op, &user_key, existing, &newest_first) {
                Ok(v) => return Ok(vec![entry(top_seq, ValueKind::Value, v)]),
                Err(e) => tracing::warn!(error = %e, "compaction keeps merge operands it could not fold"),
            }
        } else if operands.len() > 1 {
            if let Some(v) = crate::merge::partial_merge(op, &user_key, &newest_first) {
                operands = vec![(top_seq, v)];
            }
        }
        out.extend(operands.into_iter().map(|(seq, v)| entry(seq, ValueKind::Merge, v)));
        if let Some((kind, seq, v)) = base {
            out.push(entry(seq, kind, v));
        }
        out.extend(kept_below);
        out.extend(expiring_below);
        Ok(out)
    }
}

impl VersionFilter<'_> {
    /// Whether the compaction filter is to see the entry `keep` kept: the newest version of
    /// its key in the inputs, a value (inline or separated), newer than every snapshot.
    pub(crate) fn should_filter(&self, ikey: &[u8], ctx: &JobContext<'_>) -> bool {
        ctx.compaction_filter.is_some()
            && self.newest_of_key
            && key::parse_internal_key(ikey).is_some_and(|p| {
                matches!(p.kind, ValueKind::Value | ValueKind::Pointer)
                    && self.newest_snapshot.is_none_or(|s| p.seq > s)
            })
    }

    /// Ask the compaction filter about the entry at `ikey` (`should_filter`): `None` keeps it,
    /// otherwise the entries to write in its place — a value changed (inline), a deletion at
    /// its sequence number, or nothing when nothing older can hold the key and no reader needs
    /// an older version. A separated value is read (checked) for the filter, and counted as
    /// garbage when replaced; one that cannot be read is kept.
    pub(crate) fn apply_filter(&mut self, ikey: &[u8], value: &[u8], ctx: &JobContext<'_>) -> Result<Option<Entries>> {
        let (Some(f), Some(p)) = (&ctx.compaction_filter, key::parse_internal_key(ikey)) else { return Ok(None) };
        let separated = match p.kind {
            ValueKind::Pointer => match (ctx.read_value)(p.user_key, value) {
                Ok(v) => Some(v),
                Err(_) => return Ok(None),
            },
            _ => None,
        };
        let shown = separated.as_deref().unwrap_or(value);
        let decision = crate::compaction_filter::decide(f, self.task.output_level, p.user_key, shown);
        let replaced = match decision {
            crate::compaction_filter::FilterDecision::Keep => return Ok(None),
            crate::compaction_filter::FilterDecision::ChangeValue(v) => {
                vec![(internal_key(p.user_key, p.seq, ValueKind::Value), v)]
            }
            crate::compaction_filter::FilterDecision::Remove => {
                let shadows_all = p.seq <= self.smallest_snapshot;
                match shadows_all && is_base_level_for_key(self.version, self.task, &self.inputs, p.user_key) {
                    true => Vec::new(),
                    false => vec![(internal_key(p.user_key, p.seq, ValueKind::Deletion), Vec::new())],
                }
            }
        };
        if p.kind == ValueKind::Pointer {
            if let Some(ptr) = crate::vlog::ValuePointer::decode(value) {
                *self.vlog_garbage.entry(ptr.file).or_insert(0) += u64::from(ptr.op_len);
            }
        }
        Ok(Some(replaced))
    }
}

/// The garbage a job counted, with that of the expired entries it dropped added.
pub(crate) fn with_expired(mut garbage: BTreeMap<u64, u64>, expired: BTreeMap<u64, u64>) -> BTreeMap<u64, u64> {
    for (file, bytes) in expired {
        *garbage.entry(file).or_insert(0) += bytes;
    }
    garbage
}

/// `user_key` with a trailer of `seq` and `kind`.
fn internal_key(user_key: &[u8], seq: u64, kind: ValueKind) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + key::TRAILER_LEN);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&key::pack_trailer(seq, kind as u8).to_le_bytes());
    k
}

/// Merge the task's inputs into new files at the output level.
pub fn run_compaction(ctx: &JobContext<'_>, task: &CompactionTask, version: &Version) -> Result<JobOutput> {
    let run = task.output_run.unwrap_or_else(|| (ctx.new_file_number)());
    let mut it = ctx.merged_inputs(task);
    let mut w = OutputWriter::new(ctx, run);
    w.out.bytes_read = task.input_bytes();
    let mut cutter = GrandparentCutter {
        order: ctx.table_cache.order(),
        files: &task.grandparents,
        idx: 0,
        overlap: 0,
        seen_key: false,
        limit: 10 * ctx.target_file_bytes,
    };
    let tombstones = input_tombstones(ctx, task)?;
    let mut filter = VersionFilter::new(ctx, task, version, &tombstones);
    let mut w = w.with_tombstones(output_tombstones(ctx, task, version, &tombstones));
    it.seek_to_first()?;
    while it.valid() {
        let ikey = it.key();
        if cutter.should_stop_before(ikey) {
            w.cut_before_next_key();
        }
        if filter.keep(ikey, it.value())? {
            if filter.should_fold(ikey) {
                for (k, v) in filter.fold_merges(&mut it, ctx)? {
                    w.add(&k, &v)?;
                }
                continue;
            }
            if filter.should_filter(ikey, ctx) {
                if let Some(replaced) = filter.apply_filter(ikey, it.value(), ctx)? {
                    for (k, v) in replaced {
                        w.add(&k, &v)?;
                    }
                    it.next()?;
                    continue;
                }
            }
            w.add(ikey, it.value())?;
        }
        it.next()?;
    }
    w.finish(None)?;
    w.unsynced.sync_all()?;
    w.out.vlog_garbage = with_expired(filter.vlog_garbage, it.take_garbage());
    w.out.vlog_garbage_under_moves = filter.garbage_under_moves;
    Ok(w.out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::testutil::file;
    use crate::compaction::CompactionInput;

    fn version(files: &[(u32, FileMeta)]) -> Version {
        crate::compaction::testutil::version(4, files)
    }

    fn task(v: &Version, inputs: &[(usize, u64)], output_level: usize) -> CompactionTask {
        let pick = |level: usize| -> Vec<Arc<FileMeta>> {
            let numbers: Vec<u64> = inputs.iter().filter(|(l, _)| *l == level).map(|(_, n)| *n).collect();
            v.levels[level]
                .runs
                .iter()
                .flat_map(|r| r.files.iter())
                .filter(|f| numbers.contains(&f.number))
                .cloned()
                .collect()
        };
        let mut levels: Vec<usize> = inputs.iter().map(|(l, _)| *l).collect();
        levels.dedup();
        CompactionTask {
            inputs: levels.into_iter().map(|level| CompactionInput { level, files: pick(level) }).collect(),
            output_level,
            output_run: None,
            grandparents: Vec::new(),
            compact_pointer: None,
            reason: crate::compaction::Reason::Test,
        }
    }

    #[test]
    fn a_tombstone_stays_while_an_older_run_of_the_output_level_left_out_may_hold_the_key() {
        // Level 1 holds two runs: run 5 (older, "a".."m") and run 7 (newer, "k".."z"). Merging
        // run 7 alone into a new run of level 1 must keep its tombstone for "l": run 5 may hold
        // an older value of "l" that the tombstone still hides.
        let v = version(&[(1, file(10, 5, "a", "m")), (1, file(11, 7, "k", "z"))]);
        let t = task(&v, &[(1, 11)], 1);
        assert!(!is_base_level_for_key(&v, &t, &input_numbers(&t), b"l"), "older run 5 overlaps l");
        assert!(is_base_level_for_key(&v, &t, &input_numbers(&t), b"x"), "nothing older holds x");
        // With both runs as inputs nothing older is left.
        let both = task(&v, &[(1, 10), (1, 11)], 1);
        assert!(is_base_level_for_key(&v, &both, &input_numbers(&both), b"l"));
    }

    #[test]
    fn a_tombstone_stays_while_a_level_below_or_a_left_out_input_level_file_may_hold_the_key() {
        let v = version(&[(0, file(20, 20, "a", "c")), (0, file(21, 21, "b", "d")), (2, file(30, 1, "p", "q"))]);
        // L0 -> L1 with only file 21: file 20 (another L0 run) may hold an older "b".
        let t = task(&v, &[(0, 21)], 1);
        assert!(!is_base_level_for_key(&v, &t, &input_numbers(&t), b"b"));
        assert!(is_base_level_for_key(&v, &t, &input_numbers(&t), b"d"));
        // A deeper level holding the key keeps the tombstone too.
        assert!(!is_base_level_for_key(&v, &t, &input_numbers(&t), b"p"));
    }

    #[test]
    fn tables_above_the_inputs_are_newer_and_do_not_keep_a_tombstone() {
        let v = version(&[(0, file(40, 40, "a", "z")), (1, file(41, 1, "a", "z"))]);
        let t = task(&v, &[(1, 41)], 2);
        assert!(is_base_level_for_key(&v, &t, &input_numbers(&t), b"k"), "L0 is newer than the L1 input");
    }
}
