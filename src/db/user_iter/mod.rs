//! The user-facing iterator (LevelDB's db/db_iter): the user's view of the merged stream of
//! internal entries at one sequence number (newest visible version per key, deletions hidden),
//! within bounds, reading separated values — ahead of the position, in parallel, once the
//! iterator is seen moving sequentially (WiscKey §3.3.1).
//!
//! One job per file: `cursor` walks the internal stream (LevelDB's DBIter, no value reads),
//! `readahead` decides how many values to read ahead, `window` holds the entries read ahead,
//! `regions` decides when a long scan reads a whole value-log region.

mod cursor;
mod readahead;
pub(crate) mod regions;
pub(crate) mod sampling;
#[cfg(test)]
mod tests;
mod window;

use std::sync::Arc;

use crate::version::run_iter::PrefixScope;

use self::cursor::Cursor;
pub(crate) use self::cursor::MergeSource;
use self::readahead::Readahead;
use self::regions::{Region, ValueRegions};
use self::window::Window;
use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::internal_iter::InternalIterator;
use crate::key::ValueKind;
use crate::value::Value;
use crate::vlog::{PendingRead, ValuePointer};

/// Keeps alive whatever the iterator reads from (a Version, memtables, a snapshot).
pub(crate) trait Pin: Send {}
impl<T: Send> Pin for T {}

/// Reads separated values for an iterator. An entry's pointer is decoded once (`pointer`);
/// every read takes it decoded.
pub(crate) trait ValueSource: Send + Sync {
    /// Decode the pointer an entry stores; a malformed one is corruption, reported with where
    /// it was found.
    fn pointer(&self, stored: &[u8]) -> Result<ValuePointer>;
    /// Read the value now.
    fn read(&self, user_key: &[u8], ptr: &ValuePointer) -> Result<Value>;
    /// Start reading it in the background (or take it from the value cache); `None` when that
    /// cannot start (the value is then read with `read` when the iterator reaches it, which
    /// reports any error).
    fn prefetch(&self, user_key: &[u8], ptr: &ValuePointer) -> Option<PendingRead>;
    /// `prefetch` without the kernel's read-around of the value (the scan found the regions it
    /// read evicted before it came back to them: what read-around brings in would be too).
    fn prefetch_alone(&self, user_key: &[u8], ptr: &ValuePointer) -> Option<PendingRead> {
        self.prefetch(user_key, ptr)
    }
    /// Finish a read `prefetch` started, with the same checks as `read`.
    fn finish(&self, user_key: &[u8], ptr: &ValuePointer, read: PendingRead) -> Result<Value>;
    /// Read the value from a memory mapping of its file, when there is one that covers it
    /// (`None`: use `prefetch` or `read`). For values the page cache holds: no system call.
    fn read_mapped(&self, _user_key: &[u8], _ptr: &ValuePointer) -> Option<Result<Value>> {
        None
    }
    /// Whether the page cache has held the values scans read lately: a new iterator then
    /// trusts it from the start (`Readahead::trusts_cache`).
    fn is_warm(&self) -> bool {
        false
    }
    /// Start reading a whole region of a value-log file into the page cache (a long scan keeps
    /// coming back to it); a hint, so it reports nothing.
    fn read_region(&self, _region: Region) {}
    /// The values of many entries at once (a short scan of known length), in order; by default
    /// one `read` each.
    fn read_batch(&self, wanted: &[(&[u8], ValuePointer)]) -> Vec<Result<Value>> {
        wanted.iter().map(|(key, ptr)| self.read(key, ptr)).collect()
    }
}

/// A direction of travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Forward,
    Backward,
}

/// A batch of `Db::scan_from` reads at most about this many bytes of separated values at once
/// (one buffer and one submission per batch).
const BATCH_VALUE_BYTES: u64 = 4 << 20;

/// While read-ahead pauses, every this many steps reads through the page-cache probe (the
/// others through the file's mapping, when there is one), to notice a scan leaving the cache.
const PROBE_EVERY: usize = 8;

/// A cursor over the database's keys and values (LevelDB's `Iterator`), from `Db::iter`.
/// Position it with a seek before reading; after any error it is invalid until the next seek.
pub struct DbIterator {
    cursor: Cursor,
    values: Arc<dyn ValueSource>,
    readahead: Readahead,
    /// Where this scan's read-ahead missed the page cache (regions worth reading whole).
    regions: ValueRegions,
    /// Values read through the mapping or the probe, outside read-ahead (every
    /// `PROBE_EVERY`th probes the page cache).
    reads_outside_window: usize,
    /// `Some` while reading ahead; `None`: the user's entry is the cursor's.
    window: Option<Window>,
    /// The current entry's pointer and value, when the value is separated and was read.
    resolved: Option<(ValuePointer, Value)>,
    /// The cursor's entry is separated and its memtable keeps the value: `value()` borrows it
    /// there (no read, no reference count).
    kept: bool,
    /// A move failed: invalid until the next seek.
    failed: bool,
    /// `ReadOptions::prefix_same_as_start`: the scope the runs share, and the iterator's own
    /// bounds (each seek narrows them to the target's prefix).
    prefix: Option<(Arc<PrefixScope>, Bounds)>,
    _pins: Box<dyn Pin>,
}

type Bounds = (Option<Vec<u8>>, Option<Vec<u8>>);

impl DbIterator {
    /// `readahead_values`: the most values read ahead at once (0: none). `inner`'s keys and
    /// the bounds are in `order`.
    pub(crate) fn new(
        inner: Box<dyn InternalIterator>,
        (seq, order): (u64, KeyOrder),
        bounds: (Option<Vec<u8>>, Option<Vec<u8>>),
        values: Arc<dyn ValueSource>,
        readahead_values: usize,
        pins: Box<dyn Pin>,
    ) -> Self {
        let (lower, upper) = bounds;
        let mut readahead = Readahead::new(readahead_values);
        if values.is_warm() {
            readahead.trust_cache();
        }
        DbIterator {
            cursor: Cursor::new(inner, (seq, order), lower, upper),
            values,
            readahead,
            regions: ValueRegions::default(),
            reads_outside_window: 0,
            window: None,
            resolved: None,
            kept: false,
            failed: false,
            prefix: None,
            _pins: pins,
        }
    }

    /// Bound every seek to the target's prefix under `scope`'s extractor
    /// (`ReadOptions::prefix_same_as_start`), telling the runs (which share `scope`) so.
    pub(crate) fn prefix_scoped(mut self, scope: Arc<PrefixScope>) -> Self {
        self.prefix = Some((scope, self.cursor.bounds()));
        self
    }

    /// Before a seek to `target` (`None`: a seek to the first or last key) or a step back:
    /// the bounds and the runs' prefix filtering that move needs.
    fn scope_to(&mut self, target: Option<&[u8]>) {
        let Some((scope, (lower, upper))) = &self.prefix else { return };
        let prefix = target.and_then(|t| scope.extractor.prefix(t));
        scope.active.store(prefix.is_some(), std::sync::atomic::Ordering::Relaxed);
        let (mut lo, mut hi) = (lower.clone(), upper.clone());
        if let Some(p) = prefix {
            if lo.as_deref().is_none_or(|l| l < p) {
                lo = Some(p.to_vec());
            }
            if let Some(end) = crate::prefix::successor(p) {
                if hi.as_deref().is_none_or(|h| h > end.as_slice()) {
                    hi = Some(end);
                }
            }
        }
        self.cursor.set_bounds(lo, hi);
    }

    /// Hide the entries range tombstones cover (`range_del::Coverage`).
    pub(crate) fn range_deleted(mut self, coverage: crate::range_del::Coverage) -> Self {
        self.cursor.set_coverage(coverage);
        self
    }

    /// Fold merge operands with `merges`.
    pub(crate) fn merged_by(mut self, merges: Arc<dyn MergeSource>) -> Self {
        self.cursor.set_merges(merges);
        self
    }

    /// Report a key about every MiB this iterator reads (LevelDB's read sampling).
    pub(crate) fn sampled(mut self, sampler: sampling::ReadSampler) -> Self {
        self.cursor.set_sampler(sampler);
        self
    }

    /// Whether the iterator is at an entry.
    pub fn valid(&self) -> bool {
        match &self.window {
            _ if self.failed => false,
            Some(w) => !w.entries.is_empty(),
            None => self.cursor.valid(),
        }
    }

    /// The current key; only while `valid()`.
    pub fn key(&self) -> &[u8] {
        match &self.window {
            Some(w) => &w.entries[0].key,
            None => self.cursor.key(),
        }
    }

    /// The current value; only while `valid()`.
    pub fn value(&self) -> &[u8] {
        match (&self.resolved, &self.window) {
            (Some((_, v)), _) => v,
            (None, Some(w)) => &w.entries[0].stored,
            (None, None) if self.kept => self.cursor.kept_slice().unwrap_or_default(),
            (None, None) => self.cursor.stored(),
        }
    }

    /// The current value as a handle that outlives the iterator: a separated value is shared
    /// (no copy); an inline one (smaller than `Options::min_separated_value_bytes`) is copied
    /// out of its table block. Only while `valid()`.
    pub fn value_handle(&self) -> Value {
        match &self.resolved {
            Some((_, v)) => v.clone(),
            None if self.kept && self.window.is_none() => self.cursor.kept_value().unwrap_or_default(),
            None => Value::copy_from_slice(self.value()),
        }
    }

    /// The value pointer of the current entry, when its value lives in the value log.
    pub(crate) fn current_pointer(&self) -> Option<ValuePointer> {
        self.resolved.as_ref().filter(|_| self.valid()).map(|(ptr, _)| *ptr)
    }

    /// Position at the first key (or the lower bound).
    pub fn seek_to_first(&mut self) -> Result<()> {
        self.scope_to(None);
        self.reposition(|c| c.seek_to_first())
    }

    /// Position at the last key (before the upper bound).
    pub fn seek_to_last(&mut self) -> Result<()> {
        self.scope_to(None);
        self.reposition(|c| c.seek_to_last())
    }

    /// Position at the first key >= `target` (and >= the lower bound; with
    /// `ReadOptions::prefix_same_as_start`, among the keys of `target`'s prefix).
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.scope_to(Some(target));
        self.reposition(|c| c.seek(target))
    }

    /// Move to the next key (LevelDB's `Next`; use `Db::scan` for a Rust `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<()> {
        self.step(Step::Forward)
    }

    /// Move to the previous key.
    pub fn prev(&mut self) -> Result<()> {
        self.step(Step::Backward)
    }

    /// `Db::scan_from`: up to `limit` entries from the first key >= `from`, with their values.
    /// The cursor passes them first, collecting keys and pointers without reading a value;
    /// then the separated values are read as one batch (`ValueSource::read_batch`). The
    /// iterator is used up.
    pub(crate) fn collect_from(mut self, from: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Value)>> {
        let mut out = Vec::with_capacity(limit.min(1024));
        self.scope_to(Some(from));
        self.cursor.seek(from)?;
        while self.cursor.valid() && out.len() < limit {
            self.collect_batch(&mut out, limit)?;
        }
        Ok(out)
    }

    /// `collect_from`'s next batch: entries from the cursor's position until `limit` entries
    /// are out or the batch's separated values reach `BATCH_VALUE_BYTES`, then their values.
    fn collect_batch(&mut self, out: &mut Vec<(Vec<u8>, Value)>, limit: usize) -> Result<()> {
        let mut pointers: Vec<(usize, ValuePointer)> = Vec::new();
        let mut value_bytes = 0u64;
        while self.cursor.valid() {
            let value = match (self.cursor_pointer()?, self.cursor.kept_value()) {
                (Some(_), Some(kept)) => kept,
                (Some(ptr), None) => {
                    pointers.push((out.len(), ptr));
                    value_bytes += u64::from(ptr.op_len);
                    Value::new()
                }
                (None, _) => Value::copy_from_slice(self.cursor.stored()),
            };
            out.push((self.cursor.key().to_vec(), value));
            if out.len() == limit {
                break;
            }
            self.cursor.step(Step::Forward)?;
            if value_bytes >= BATCH_VALUE_BYTES {
                break;
            }
        }
        let wanted: Vec<(&[u8], ValuePointer)> = pointers.iter().map(|&(i, ptr)| (&out[i].0[..], ptr)).collect();
        let values = self.values.read_batch(&wanted);
        drop(wanted);
        for ((i, _), value) in pointers.into_iter().zip(values) {
            out[i].1 = value?;
        }
        Ok(())
    }

    /// A seek: drop any read-ahead, move the cursor, read the value there.
    fn reposition(&mut self, seek: impl FnOnce(&mut Cursor) -> Result<()>) -> Result<()> {
        self.window = None;
        self.readahead.reset();
        self.regions.reset();
        self.failed = false;
        self.resolved = None;
        self.kept = false;
        let r = seek(&mut self.cursor).and_then(|()| self.resolve_cursor());
        self.fail_on_error(r)
    }

    fn step(&mut self, dir: Step) -> Result<()> {
        if !self.valid() {
            self.resolved = None;
            self.kept = false;
            self.kept = false;
            return Ok(());
        }
        self.resolved = None;
        self.kept = false;
        if dir == Step::Backward {
            // Turning back re-seeks the runs to the current key and steps them back; a run
            // that skipped its tables by prefix would have no position to step back from.
            if let Some((scope, _)) = &self.prefix {
                scope.active.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let r = self.step_inner(dir);
        self.fail_on_error(r)
    }

    /// After an error the iterator is invalid (not left showing a stale or unread value).
    fn fail_on_error(&mut self, r: Result<()>) -> Result<()> {
        if r.is_err() {
            self.window = None;
            self.failed = true;
            self.resolved = None;
            self.kept = false;
            self.kept = false;
        }
        r
    }

    fn step_inner(&mut self, dir: Step) -> Result<()> {
        if let Some(w) = &self.window {
            if w.dir == dir {
                return self.advance_window(dir);
            }
            // Turning around: the cursor is ahead of the user; put it back at the user's
            // entry (the newest visible version of that key, which a seek finds again).
            let key = w.entries[0].key.clone();
            self.window = None;
            self.cursor.seek(&key)?;
        }
        let depth = self.readahead.step(dir);
        self.cursor.step(dir)?;
        if depth > 0 && self.cursor.valid() {
            self.open_window(dir, depth);
            return self.resolve_front();
        }
        if self.readahead.pausing() {
            return self.resolve_cursor_paused();
        }
        self.resolve_cursor()
    }

    /// The cursor's pointer, when its entry is separated.
    fn cursor_pointer(&self) -> Result<Option<ValuePointer>> {
        match self.cursor.valid() && self.cursor.kind() == ValueKind::Pointer {
            true => self.values.pointer(self.cursor.stored()).map(Some),
            false => Ok(None),
        }
    }

    /// `resolve_cursor` while read-ahead pauses for cached values: the read goes through the
    /// page-cache probe (or, while the cache is trusted, mostly through the mapping), and a
    /// value that was not cached ends the pause (the scan has left the cached part of the log,
    /// and plain reads from the device would be one at a time) and counts toward its region.
    fn resolve_cursor_paused(&mut self) -> Result<()> {
        let Some(ptr) = self.cursor_pointer()? else { return Ok(()) };
        if self.cursor.kept_slice().is_some() {
            self.kept = true;
            return Ok(());
        }
        let counts = (&mut self.readahead, &mut self.reads_outside_window, Some(&mut self.regions));
        let value = read_probing(&*self.values, counts, self.cursor.key(), &ptr)?;
        self.resolved = Some((ptr, value));
        Ok(())
    }

    /// Read the value of the cursor's entry if it is a pointer into the value log (through
    /// the file's mapping while the page cache is trusted to hold it).
    fn resolve_cursor(&mut self) -> Result<()> {
        let Some(ptr) = self.cursor_pointer()? else { return Ok(()) };
        if self.cursor.kept_slice().is_some() {
            self.kept = true;
            return Ok(());
        }
        let key = self.cursor.key();
        let value = match self.readahead.trusts_cache() {
            true => {
                read_probing(&*self.values, (&mut self.readahead, &mut self.reads_outside_window, None), key, &ptr)?
            }
            false => self.values.read(key, &ptr)?,
        };
        self.resolved = Some((ptr, value));
        Ok(())
    }
}

/// A value read outside read-ahead's window, through the page-cache probe, except that while
/// the cache is trusted every read but each `PROBE_EVERY`th goes through the file's mapping.
/// So a scan (or a run of seeks) that has left the cached data notices within a few reads: a
/// probe that misses withdraws the trust and ends a pause (`Readahead::note_miss`) and, with
/// `regions`, counts toward reading the value's region whole.
fn read_probing(
    values: &dyn ValueSource,
    (readahead, reads, regions): (&mut Readahead, &mut usize, Option<&mut ValueRegions>),
    key: &[u8],
    ptr: &ValuePointer,
) -> Result<Value> {
    *reads += 1;
    if readahead.trusts_cache() && *reads % PROBE_EVERY != 0 {
        if let Some(v) = values.read_mapped(key, ptr) {
            return v;
        }
    }
    let Some(read) = values.prefetch(key, ptr) else { return values.read(key, ptr) };
    if !read.was_cached() {
        readahead.note_miss();
        if let Some(region) = regions.and_then(|r| r.visit(ptr, true)) {
            values.read_region(region);
        }
    }
    values.finish(key, ptr, read)
}

/// A Rust iterator over `(key, value)` pairs, from `Db::scan` (forward) or `Db::scan_rev`;
/// it ends after the first error it yields.
pub struct Entries {
    it: DbIterator,
    forward: bool,
    started: bool,
    done: bool,
}

impl Entries {
    pub(crate) fn new(it: DbIterator, forward: bool) -> Self {
        Entries { it, forward, started: false, done: false }
    }

    fn step(&mut self) -> Result<()> {
        match (self.started, self.forward) {
            (false, true) => self.it.seek_to_first(),
            (false, false) => self.it.seek_to_last(),
            (true, true) => self.it.next(),
            (true, false) => self.it.prev(),
        }
    }
}

impl Iterator for Entries {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step();
        self.started = true;
        if let Err(e) = r {
            self.done = true;
            return Some(Err(e));
        }
        if !self.it.valid() {
            self.done = true;
            return None;
        }
        Some(Ok((self.it.key().to_vec(), self.it.value_handle())))
    }
}
