//! The user-facing iterator: turns the merged stream of internal entries into the user's view
//! at one sequence number (newest visible version per key, deletions hidden), within bounds,
//! and reads separated values — ahead of the position, in parallel, once the iterator is seen
//! moving sequentially (WiscKey §3.3.1). The direction-switching logic follows LevelDB's DBIter.

pub(crate) mod regions;

use std::cmp::Ordering;
use std::collections::VecDeque;

use self::regions::{Region, ValueRegions};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, ValueKind, KIND_FOR_SEEK, MAX_SEQ};
use crate::vlog::{PendingRead, ValuePointer};

/// Keeps alive whatever the iterator reads from (a Version, memtables, a snapshot).
pub trait Pin: Send {}
impl<T: Send> Pin for T {}

/// Reads separated values for an iterator, given the user key and the encoded pointer.
pub trait ValueSource: Send + Sync {
    /// Read the value now.
    fn read(&self, user_key: &[u8], encoded: &[u8]) -> Result<Vec<u8>>;
    /// Start reading it in the background; `None` when that cannot start (the value is then
    /// read with `read` when the iterator reaches it, which reports any error).
    fn prefetch(&self, encoded: &[u8]) -> Option<PendingRead>;
    /// Finish a read `prefetch` started, with the same checks as `read`.
    fn finish(&self, user_key: &[u8], encoded: &[u8], read: PendingRead) -> Result<Vec<u8>>;
    /// Read the value from a memory mapping of its file, when there is one that covers it
    /// (`None`: use `prefetch` or `read`). For values the page cache holds: no system call.
    fn read_mapped(&self, _user_key: &[u8], _encoded: &[u8]) -> Option<Result<Vec<u8>>> {
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
}

/// A direction of travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Forward,
    Backward,
}

/// Entries after the first this many steps in one direction are read ahead.
const SEQUENTIAL_AFTER_STEPS: usize = 2;
/// Values read ahead when read-ahead starts; doubles while the scan goes on.
const FIRST_DEPTH: usize = 2;
/// Steps read-ahead pauses for after a fill found every value in the page cache; then it
/// probes again at `FIRST_DEPTH`.
const CACHED_PAUSE_STEPS: usize = 64;
/// While read-ahead pauses, every this many steps reads through the page-cache probe (the
/// others through the file's mapping, when there is one), to notice a scan leaving the cache.
const PROBE_EVERY: usize = 8;
/// Bytes of values read ahead at most, whatever the depth (bounds memory for huge values).
const MAX_AHEAD_BYTES: u64 = 8 << 20;

/// How many values to read ahead: none until the iterator has moved `SEQUENTIAL_AFTER_STEPS`
/// times in one direction, then `FIRST_DEPTH`, doubling each time that many more steps are
/// taken, up to `max`. A seek or a change of direction starts over.
#[derive(Debug, Clone)]
pub struct Readahead {
    max: usize,
    last: Option<Step>,
    run: usize,
    depth: usize,
    steps_at_depth: usize,
    /// Steps left without read-ahead because the values were in the page cache.
    paused: usize,
    /// The last step was one of those.
    pausing: bool,
    /// Values read ahead in a row that were in the page cache.
    cached_run: usize,
    /// The depth when the pause began, taken up again when a miss ends it.
    resume_depth: usize,
    /// A pause ran its course with no value missing the page cache since: the scan is in
    /// cached data, and paused steps may read through the mapping between probes.
    trusted: bool,
}

impl Readahead {
    /// `max`: the most values in flight (`ReadOptions::readahead_values`); 0 turns it off.
    pub fn new(max: usize) -> Self {
        Readahead {
            max,
            last: None,
            run: 0,
            depth: 0,
            steps_at_depth: 0,
            paused: 0,
            pausing: false,
            cached_run: 0,
            resume_depth: 0,
            trusted: false,
        }
    }

    /// Forget the access pattern (after a seek).
    pub fn reset(&mut self) {
        // Whether the cache holds the data does not change with the position.
        let trusted = self.trusted;
        *self = Readahead::new(self.max);
        self.trusted = trusted;
    }

    /// Start out trusting the page cache (the values scans read lately were all cached).
    pub fn trust_cache(&mut self) {
        self.trusted = self.max > 0;
    }

    /// Record one step in `dir`; returns how many values to keep read ahead now.
    pub fn step(&mut self, dir: Step) -> usize {
        if self.last != Some(dir) {
            self.reset();
            self.last = Some(dir);
        }
        self.run += 1;
        if self.max == 0 || self.run < SEQUENTIAL_AFTER_STEPS {
            return 0;
        }
        self.pausing = self.paused > 0;
        if self.pausing {
            self.paused -= 1;
            self.trusted |= self.paused == 0;
            return 0;
        }
        if self.depth == 0 {
            self.depth = FIRST_DEPTH.min(self.max);
        } else {
            self.steps_at_depth += 1;
            if self.steps_at_depth >= self.depth {
                self.depth = (self.depth * 2).min(self.max);
                self.steps_at_depth = 0;
            }
        }
        self.depth
    }

    /// Record whether a value read ahead was in the page cache. A window's worth of cached
    /// values in a row pauses read-ahead (`note_cached`); a single one does not, as a scan
    /// half through a log being read into the cache meets both kinds.
    pub fn note_read(&mut self, cached: bool) {
        if !cached {
            self.cached_run = 0;
            self.trusted = false;
            return;
        }
        self.cached_run += 1;
        if self.cached_run >= self.depth.max(FIRST_DEPTH) {
            self.note_cached();
        }
    }

    /// The values just read ahead were all in the page cache: reading further ahead gains
    /// nothing, so read-ahead pauses for `CACHED_PAUSE_STEPS` and then probes again at its
    /// first depth (a warm short scan then wastes at most that many reads when it stops).
    pub fn note_cached(&mut self) {
        if self.depth > 0 {
            self.resume_depth = self.depth;
            self.depth = 0;
            self.steps_at_depth = 0;
            self.cached_run = 0;
            self.paused = CACHED_PAUSE_STEPS;
        }
    }

    /// Whether the last step went without read-ahead because the values were cached.
    pub fn pausing(&self) -> bool {
        self.pausing
    }

    /// Whether a whole pause went by with every value cached (and none missed since): reads
    /// through a mapping are then very likely cached too. A scan entering a half-cached log
    /// keeps probing every step instead, so a value that is not cached costs no blocking
    /// page fault.
    pub fn trusts_cache(&self) -> bool {
        self.trusted
    }

    /// A value read while paused was not in the page cache: the pause ends, and read-ahead
    /// goes on from the next step at the depth it had.
    pub fn note_miss(&mut self) {
        self.trusted = false;
        if self.pausing {
            self.paused = 0;
            self.pausing = false;
            self.depth = self.resume_depth;
            self.steps_at_depth = 0;
        }
    }
}

/// An entry the cursor has passed ahead of the user's position; its value may be on its way.
struct Ahead {
    key: Vec<u8>,
    kind: u8,
    stored: Vec<u8>,
    read: Option<PendingRead>,
    /// Bytes of the value being read ahead (0 for inline values).
    read_bytes: u64,
}

/// Read-ahead state: the user's entry is `entries[0]`; the cursor sits at the last entry,
/// and the ones in between have their values on the way.
struct Window {
    dir: Step,
    entries: VecDeque<Ahead>,
    /// Bytes of values being read ahead.
    bytes: u64,
    /// The cursor has reached the end (or failed: the error waits in `error` until the user
    /// reaches that position).
    done: bool,
    error: Option<Error>,
}

/// A cursor over user keys and values (LevelDB's Iterator).
pub struct DbIterator {
    cursor: Cursor,
    values: std::sync::Arc<dyn ValueSource>,
    readahead: Readahead,
    /// Where this scan's read-ahead missed the page cache (regions worth reading whole).
    regions: ValueRegions,
    /// Values read through the mapping or the probe, outside read-ahead (every
    /// `PROBE_EVERY`th probes the page cache).
    reads_outside_window: usize,
    /// `Some` while reading ahead; `None`: the user's entry is the cursor's.
    window: Option<Window>,
    /// The current entry's value, when it is separated.
    resolved: Option<Vec<u8>>,
    /// A move failed: invalid until the next seek.
    failed: bool,
    _pins: Box<dyn Pin>,
}

impl DbIterator {
    /// `readahead_values`: the most values read ahead at once (0: none).
    pub(crate) fn new(
        inner: Box<dyn InternalIterator>,
        seq: u64,
        bounds: (Option<Vec<u8>>, Option<Vec<u8>>),
        values: std::sync::Arc<dyn ValueSource>,
        readahead_values: usize,
        pins: Box<dyn Pin>,
    ) -> Self {
        let (lower, upper) = bounds;
        let mut readahead = Readahead::new(readahead_values);
        if values.is_warm() {
            readahead.trust_cache();
        }
        let cursor = Cursor {
            inner,
            seq,
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            lower,
            upper,
            kind: ValueKind::Value as u8,
        };
        DbIterator {
            cursor,
            values,
            readahead,
            regions: ValueRegions::default(),
            reads_outside_window: 0,
            window: None,
            resolved: None,
            failed: false,
            _pins: pins,
        }
    }

    /// Whether the iterator is at an entry.
    pub fn valid(&self) -> bool {
        match &self.window {
            _ if self.failed => false,
            Some(w) => !w.entries.is_empty(),
            None => self.cursor.valid,
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
            (Some(v), _) => v,
            (None, Some(w)) => &w.entries[0].stored,
            (None, None) => self.cursor.stored(),
        }
    }

    fn kind(&self) -> u8 {
        match &self.window {
            Some(w) => w.entries[0].kind,
            None => self.cursor.kind,
        }
    }

    /// The value pointer of the current entry, when its value lives in the value log.
    pub(crate) fn current_pointer(&self) -> Option<ValuePointer> {
        if !self.valid() || self.kind() != ValueKind::Pointer as u8 {
            return None;
        }
        let stored = match &self.window {
            Some(w) => &w.entries[0].stored,
            None => self.cursor.stored(),
        };
        ValuePointer::decode(stored)
    }

    pub fn seek_to_first(&mut self) -> Result<()> {
        self.reposition(|c| c.seek_to_first())
    }

    pub fn seek_to_last(&mut self) -> Result<()> {
        self.reposition(|c| c.seek_to_last())
    }

    /// Position at the first key >= `target` (and >= the lower bound).
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.reposition(|c| c.seek(target))
    }

    /// Move to the next key (LevelDB's `Next`; use `Db::scan` for a Rust `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<()> {
        self.step(Step::Forward)
    }

    pub fn prev(&mut self) -> Result<()> {
        self.step(Step::Backward)
    }

    /// A seek: drop any read-ahead, move the cursor, read the value there.
    fn reposition(&mut self, seek: impl FnOnce(&mut Cursor) -> Result<()>) -> Result<()> {
        self.window = None;
        self.readahead.reset();
        self.regions.reset();
        self.failed = false;
        self.resolved = None;
        let r = seek(&mut self.cursor).and_then(|()| self.resolve_cursor());
        self.fail_on_error(r)
    }

    fn step(&mut self, dir: Step) -> Result<()> {
        if !self.valid() {
            self.resolved = None;
            return Ok(());
        }
        self.resolved = None;
        let r = self.step_inner(dir);
        self.fail_on_error(r)
    }

    /// After an error the iterator is invalid (not left showing a stale or unread value).
    fn fail_on_error(&mut self, r: Result<()>) -> Result<()> {
        if r.is_err() {
            self.window = None;
            self.failed = true;
            self.resolved = None;
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
        if depth > 0 && self.cursor.valid {
            self.open_window(dir, depth);
            return self.resolve_front();
        }
        if self.readahead.pausing() {
            return self.resolve_cursor_paused();
        }
        self.resolve_cursor()
    }

    /// Start reading ahead from the cursor's entry, which becomes the user's.
    fn open_window(&mut self, dir: Step, depth: usize) {
        let mut w = Window { dir, entries: VecDeque::with_capacity(depth + 1), bytes: 0, done: false, error: None };
        // The user's entry is read right away, so only the ones after it are prefetched.
        w.entries.push_back(Ahead {
            key: self.cursor.key().to_vec(),
            kind: self.cursor.kind,
            stored: self.cursor.stored().to_vec(),
            read: None,
            read_bytes: 0,
        });
        self.window = Some(w);
        self.fill(depth);
    }

    /// Drop the user's entry, top the window up, and show the next entry.
    fn advance_window(&mut self, dir: Step) -> Result<()> {
        let depth = self.readahead.step(dir);
        // Read-ahead paused and nothing left ahead: the cursor is at the user's entry, so
        // drop the window and step plainly (no per-entry copies or pending reads).
        if depth == 0 && self.window.as_ref().is_some_and(|w| w.entries.len() == 1 && !w.done) {
            self.window = None;
            self.cursor.step(dir)?;
            return self.resolve_cursor_paused();
        }
        if let Some(w) = &mut self.window {
            if let Some(gone) = w.entries.pop_front() {
                w.bytes -= gone.read_bytes;
            }
        }
        // Depth 0 (paused): drain the window; the step above drops it once it is down to the
        // user's entry.
        self.fill(depth);
        let Some(w) = &mut self.window else { return Ok(()) };
        if w.entries.is_empty() {
            // Past the last entry: invalid, or the error the cursor met there.
            return w.error.take().map_or(Ok(()), Err);
        }
        self.resolve_front()
    }

    /// Move the cursor on until `depth` entries are ahead of the user's (or the bytes being
    /// read ahead reach `MAX_AHEAD_BYTES`), starting a read for each separated value.
    fn fill(&mut self, depth: usize) {
        let Some(w) = &mut self.window else { return };
        while !w.done && w.entries.len() <= depth && (w.entries.is_empty() || w.bytes < MAX_AHEAD_BYTES) {
            if let Err(e) = self.cursor.step(w.dir) {
                (w.done, w.error) = (true, Some(e));
            } else if !self.cursor.valid {
                w.done = true;
            } else {
                let (kind, stored) = (self.cursor.kind, self.cursor.stored().to_vec());
                let pointer = (kind == ValueKind::Pointer as u8).then(|| ValuePointer::decode(&stored)).flatten();
                let read = pointer.and_then(|_| self.values.prefetch(&stored));
                if let (Some(r), Some(p)) = (&read, &pointer) {
                    self.readahead.note_read(r.was_cached());
                    if let Some(region) = self.regions.visit(p, !r.was_cached()) {
                        self.values.read_region(region);
                    }
                }
                let read_bytes = if read.is_some() { pointer.map_or(0, |p| u64::from(p.op_len)) } else { 0 };
                w.bytes += read_bytes;
                w.entries.push_back(Ahead { key: self.cursor.key().to_vec(), kind, stored, read, read_bytes });
            }
        }
    }

    /// Read the value of the user's entry in the window (waiting for its prefetch).
    fn resolve_front(&mut self) -> Result<()> {
        let Some(front) = self.window.as_mut().and_then(|w| w.entries.front_mut()) else { return Ok(()) };
        if front.kind != ValueKind::Pointer as u8 {
            return Ok(());
        }
        let v = match front.read.take() {
            Some(read) => self.values.finish(&front.key, &front.stored, read)?,
            None if self.readahead.trusts_cache() => read_probing(
                &*self.values,
                (&mut self.readahead, &mut self.reads_outside_window, None),
                &front.key,
                &front.stored,
            )?,
            None => self.values.read(&front.key, &front.stored)?,
        };
        self.resolved = Some(v);
        Ok(())
    }

    /// `resolve_cursor` while read-ahead pauses for cached values: the read goes through the
    /// page-cache probe (or, while the cache is trusted, mostly through the mapping), and a
    /// value that was not cached ends the pause (the scan has left the cached part of the log,
    /// and plain reads from the device would be one at a time) and counts toward its region.
    fn resolve_cursor_paused(&mut self) -> Result<()> {
        if self.cursor.valid && self.cursor.kind == ValueKind::Pointer as u8 {
            let (key, stored) = (self.cursor.key(), self.cursor.stored());
            let counts = (&mut self.readahead, &mut self.reads_outside_window, Some(&mut self.regions));
            self.resolved = Some(read_probing(&*self.values, counts, key, stored)?);
        }
        Ok(())
    }

    /// Read the value of the cursor's entry if it is a pointer into the value log (through
    /// the file's mapping while the page cache is trusted to hold it).
    fn resolve_cursor(&mut self) -> Result<()> {
        if self.cursor.valid && self.cursor.kind == ValueKind::Pointer as u8 {
            let (key, stored) = (self.cursor.key(), self.cursor.stored());
            self.resolved = Some(match self.readahead.trusts_cache() {
                true => read_probing(
                    &*self.values,
                    (&mut self.readahead, &mut self.reads_outside_window, None),
                    key,
                    stored,
                )?,
                false => self.values.read(key, stored)?,
            });
        }
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
    stored: &[u8],
) -> Result<Vec<u8>> {
    *reads += 1;
    if readahead.trusts_cache() && *reads % PROBE_EVERY != 0 {
        if let Some(v) = values.read_mapped(key, stored) {
            return v;
        }
    }
    let Some(read) = values.prefetch(stored) else { return values.read(key, stored) };
    if !read.was_cached() {
        readahead.note_miss();
        let region = regions.zip(ValuePointer::decode(stored)).and_then(|(r, p)| r.visit(&p, true));
        if let Some(region) = region {
            values.read_region(region);
        }
    }
    values.finish(key, stored, read)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// The inner iterator is at the entry that yields `key()`.
    Forward,
    /// The inner iterator is just before all entries of `key()`, which is in `saved_key`.
    Reverse,
}

/// LevelDB's DBIter without value reads: walks the merged stream and stops at the newest
/// visible version of each live user key within bounds, yielding its kind and stored bytes
/// (an inline value or an encoded pointer).
struct Cursor {
    inner: Box<dyn InternalIterator>,
    seq: u64,
    direction: Direction,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    /// Kind of the current entry.
    kind: u8,
}

impl Cursor {
    fn key(&self) -> &[u8] {
        match self.direction {
            Direction::Forward => key::user_key(self.inner.key()),
            Direction::Reverse => &self.saved_key,
        }
    }

    fn stored(&self) -> &[u8] {
        match self.direction {
            Direction::Forward => self.inner.value(),
            Direction::Reverse => &self.saved_value,
        }
    }

    fn seek_to_first(&mut self) -> Result<()> {
        if let Some(lower) = self.lower.clone() {
            return self.seek(&lower);
        }
        self.direction = Direction::Forward;
        self.inner.seek_to_first()?;
        self.find_next_user_entry(false)?;
        self.check_upper();
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.direction = Direction::Reverse;
        match &self.upper {
            Some(upper) => {
                let target = key::make_internal_key(upper, MAX_SEQ, KIND_FOR_SEEK);
                self.inner.seek(&target)?;
                if self.inner.valid() {
                    self.inner.prev()?;
                } else {
                    self.inner.seek_to_last()?;
                }
            }
            None => self.inner.seek_to_last()?,
        }
        self.find_prev_user_entry()?;
        self.check_lower();
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let target = match &self.lower {
            Some(l) if l.as_slice() > target => l.clone(),
            _ => target.to_vec(),
        };
        self.direction = Direction::Forward;
        self.inner.seek(&key::make_internal_key(&target, self.seq, KIND_FOR_SEEK))?;
        self.find_next_user_entry(false)?;
        self.check_upper();
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        if self.direction == Direction::Reverse {
            self.direction = Direction::Forward;
            // The inner iterator is before the entries of saved_key: step into them; the
            // skipping below then passes over them.
            if self.inner.valid() {
                self.inner.next()?;
            } else {
                self.inner.seek_to_first()?;
            }
        } else {
            self.saved_key.clear();
            self.saved_key.extend_from_slice(key::user_key(self.inner.key()));
            self.inner.next()?;
        }
        if !self.inner.valid() {
            self.valid = false;
            return Ok(());
        }
        self.find_next_user_entry(true)?;
        self.check_upper();
        Ok(())
    }

    fn prev(&mut self) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        if self.direction == Direction::Forward {
            // Walk back past every entry of the current key.
            self.saved_key.clear();
            self.saved_key.extend_from_slice(key::user_key(self.inner.key()));
            loop {
                self.inner.prev()?;
                if !self.inner.valid() {
                    self.valid = false;
                    return Ok(());
                }
                if key::user_key(self.inner.key()) < self.saved_key.as_slice() {
                    break;
                }
            }
            self.direction = Direction::Reverse;
        }
        self.find_prev_user_entry()?;
        self.check_lower();
        Ok(())
    }

    /// Move one entry in `dir`.
    fn step(&mut self, dir: Step) -> Result<()> {
        match dir {
            Step::Forward => self.next(),
            Step::Backward => self.prev(),
        }
    }

    /// Forward: skip to the newest visible non-deleted entry, skipping keys <= saved_key when
    /// `skipping`.
    fn find_next_user_entry(&mut self, mut skipping: bool) -> Result<()> {
        while self.inner.valid() {
            if let Some(p) = key::parse_internal_key(self.inner.key()) {
                if p.seq <= self.seq {
                    if p.kind == ValueKind::Deletion as u8 {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(p.user_key);
                        skipping = true;
                    } else if !(skipping && p.user_key <= self.saved_key.as_slice()) {
                        self.valid = true;
                        self.kind = p.kind;
                        self.saved_key.clear();
                        return Ok(());
                    }
                }
            }
            self.inner.next()?;
        }
        self.saved_key.clear();
        self.valid = false;
        Ok(())
    }

    /// Reverse: find the newest visible version of the previous live key, leaving the inner
    /// iterator just before all of that key's entries.
    fn find_prev_user_entry(&mut self) -> Result<()> {
        let mut last_kind = ValueKind::Deletion as u8;
        while self.inner.valid() {
            if let Some(p) = key::parse_internal_key(self.inner.key()) {
                if p.seq <= self.seq {
                    if last_kind != ValueKind::Deletion as u8 && p.user_key.cmp(&self.saved_key) == Ordering::Less {
                        break;
                    }
                    last_kind = p.kind;
                    if p.kind == ValueKind::Deletion as u8 {
                        self.saved_key.clear();
                        self.saved_value.clear();
                    } else {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(p.user_key);
                        self.saved_value.clear();
                        self.saved_value.extend_from_slice(self.inner.value());
                    }
                }
            }
            self.inner.prev()?;
        }
        if last_kind == ValueKind::Deletion as u8 {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.direction = Direction::Forward;
        } else {
            self.valid = true;
            self.kind = last_kind;
        }
        Ok(())
    }

    fn check_upper(&mut self) {
        if self.valid {
            if let Some(u) = &self.upper {
                if self.key() >= u.as_slice() {
                    self.valid = false;
                }
            }
        }
    }

    fn check_lower(&mut self) {
        if self.valid {
            if let Some(l) = &self.lower {
                if self.key() < l.as_slice() {
                    self.valid = false;
                }
            }
        }
    }
}

/// A Rust iterator over `(key, value)` pairs, from `Db::scan` (forward) or `Db::scan_rev`.
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
    type Item = Result<(Vec<u8>, Vec<u8>)>;

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
        Some(Ok((self.it.key().to_vec(), self.it.value().to_vec())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_reads_pause_read_ahead() {
        let mut r = Readahead::new(32);
        depths(&mut r, Step::Forward, 20);
        r.note_cached();
        let paused = depths(&mut r, Step::Forward, CACHED_PAUSE_STEPS);
        assert!(paused.iter().all(|&d| d == 0), "paused while values are cached: {paused:?}");
        assert_eq!(depths(&mut r, Step::Forward, 1), [2], "then probes again at the first depth");
        let mut fresh = Readahead::new(32);
        fresh.note_cached();
        assert_eq!(depths(&mut fresh, Step::Forward, 1), [0], "no read-ahead before a run starts");
    }

    fn depths(r: &mut Readahead, dir: Step, n: usize) -> Vec<usize> {
        (0..n).map(|_| r.step(dir)).collect()
    }

    #[test]
    fn readahead_starts_after_sequential_steps_and_doubles_to_the_max() {
        let mut r = Readahead::new(16);
        assert_eq!(depths(&mut r, Step::Forward, 2), [0, 2]);
        // Doubles once as many steps as the current depth have been taken.
        assert_eq!(depths(&mut r, Step::Forward, 2), [2, 4]);
        assert_eq!(depths(&mut r, Step::Forward, 4), [4, 4, 4, 8]);
        assert_eq!(depths(&mut r, Step::Forward, 8), [8, 8, 8, 8, 8, 8, 8, 16]);
        assert!(depths(&mut r, Step::Forward, 100).iter().all(|&d| d == 16));
    }

    #[test]
    fn readahead_resets_on_seek_and_on_turning_around() {
        let mut r = Readahead::new(64);
        depths(&mut r, Step::Forward, 20);
        assert_eq!(r.step(Step::Backward), 0, "a change of direction starts over");
        assert_eq!(r.step(Step::Backward), 2, "reverse scans read ahead too");
        r.reset();
        assert_eq!(depths(&mut r, Step::Backward, 2), [0, 2]);
        assert_eq!(r.step(Step::Forward), 0);
    }

    /// Values are the pointer's offset as text; a read counts as cached when a region holding
    /// it was requested (a model of the page cache) or `all_cached` says so.
    struct ModelValues {
        regions: parking_lot::Mutex<Vec<Region>>,
        plain_reads: std::sync::atomic::AtomicUsize,
        mapped_reads: std::sync::atomic::AtomicUsize,
        all_cached: bool,
        /// What `is_warm` says.
        warm: bool,
        /// Values at lower offsets count as cached too.
        cached_below: u64,
        /// Offsets of the values read ahead, in order.
        prefetched: parking_lot::Mutex<Vec<u64>>,
    }

    impl ModelValues {
        fn new(all_cached: bool) -> Self {
            ModelValues {
                regions: Default::default(),
                plain_reads: Default::default(),
                mapped_reads: Default::default(),
                all_cached,
                warm: false,
                cached_below: 0,
                prefetched: Default::default(),
            }
        }

        fn value(encoded: &[u8]) -> Vec<u8> {
            ValuePointer::decode(encoded).map(|p| p.offset.to_string().into_bytes()).unwrap_or_default()
        }
    }

    impl ValueSource for ModelValues {
        fn read(&self, _key: &[u8], encoded: &[u8]) -> Result<Vec<u8>> {
            self.plain_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Self::value(encoded))
        }
        fn prefetch(&self, encoded: &[u8]) -> Option<PendingRead> {
            let p = ValuePointer::decode(encoded)?;
            let in_region = self
                .regions
                .lock()
                .iter()
                .any(|r| r.file == p.file && (r.offset..r.offset + r.len).contains(&p.offset));
            self.prefetched.lock().push(p.offset);
            let cached = self.all_cached || in_region || p.offset < self.cached_below;
            Some(PendingRead::done_for_test(Self::value(encoded), cached))
        }
        fn finish(&self, _key: &[u8], encoded: &[u8], read: PendingRead) -> Result<Vec<u8>> {
            let got = read.wait()?.unwrap_or_default();
            assert_eq!(got, Self::value(encoded));
            Ok(got)
        }
        fn read_region(&self, region: Region) {
            self.regions.lock().push(region);
        }
        fn is_warm(&self) -> bool {
            self.warm
        }
        fn read_mapped(&self, _key: &[u8], encoded: &[u8]) -> Option<Result<Vec<u8>>> {
            self.mapped_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Some(Ok(Self::value(encoded)))
        }
    }

    /// An iterator over `n` keys whose values sit at `offset(i)` of vLog file 1.
    fn scan_over(n: u32, offset: impl Fn(u32) -> u64, values: std::sync::Arc<ModelValues>) -> DbIterator {
        let mem = std::sync::Arc::new(crate::memtable::Memtable::default());
        for i in 0..n {
            let ptr = ValuePointer { file: 1, offset: offset(i), op_len: 100, value_crc: 0 };
            mem.add(u64::from(i) + 1, ValueKind::Pointer, format!("k{i:06}").as_bytes(), &ptr.encoded());
        }
        DbIterator::new(Box::new(mem.iter()), MAX_SEQ, (None, None), values, 32, Box::new(()))
    }

    fn walk(it: &mut DbIterator, offset: impl Fn(u32) -> u64) -> u32 {
        let mut seen = 0;
        it.seek_to_first().unwrap();
        while it.valid() {
            assert_eq!(it.value(), offset(seen).to_string().as_bytes(), "entry {seen}");
            seen += 1;
            it.next().unwrap();
        }
        seen
    }

    #[test]
    fn a_long_scan_over_scattered_values_reads_each_region_once() {
        use super::regions::REGION_BYTES;
        // A random load: neighbouring keys' values are far apart, each region holds many.
        let regions = 40u64;
        let offset = move |i: u32| (u64::from(i) * 7919 % regions) * REGION_BYTES + u64::from(i) * 101 % 200_000;
        let values = std::sync::Arc::new(ModelValues::new(false));
        let mut it = scan_over(4000, offset, values.clone());
        assert_eq!(walk(&mut it, offset), 4000);
        let asked = values.regions.lock().clone();
        let mut starts: Vec<u64> = asked.iter().map(|r| r.offset).collect();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), asked.len(), "a region is requested once: {asked:?}");
        assert_eq!(asked.len() as u64, regions, "every region the scan keeps coming back to");
    }

    #[test]
    fn a_short_scan_over_scattered_values_reads_no_region() {
        use super::regions::REGION_BYTES;
        let offset = |i: u32| u64::from(i) * REGION_BYTES;
        let values = std::sync::Arc::new(ModelValues::new(false));
        let mut it = scan_over(100, offset, values.clone());
        assert_eq!(walk(&mut it, offset), 100);
        assert!(values.regions.lock().is_empty(), "one value per region: read value by value");
    }

    #[test]
    fn a_miss_while_paused_resumes_read_ahead() {
        // Warm: read-ahead pauses, and paused steps probe the cache instead of plain reads.
        let offset = |i: u32| u64::from(i) * 5000;
        let warm = std::sync::Arc::new(ModelValues::new(true));
        let mut it = scan_over(1000, offset, warm.clone());
        assert_eq!(walk(&mut it, offset), 1000);
        // Plain reads: the steps before read-ahead starts, and the first entry of each probe.
        let plain = warm.plain_reads.load(std::sync::atomic::Ordering::Relaxed);
        assert!(plain <= 3 + 1000 / CACHED_PAUSE_STEPS, "{plain} plain reads: paused steps must probe");
        // Most paused steps read through the mapping; every PROBE_EVERY-th probes the cache.
        let mapped = warm.mapped_reads.load(std::sync::atomic::Ordering::Relaxed);
        assert!(mapped > 600, "{mapped} of 1000 values read through the mapping");
        let mut r = Readahead::new(32);
        depths(&mut r, Step::Forward, 20);
        r.note_cached();
        depths(&mut r, Step::Forward, CACHED_PAUSE_STEPS - 1);
        assert!(!r.trusts_cache(), "not before a pause has run its course");
        depths(&mut r, Step::Forward, 1);
        assert!(r.trusts_cache(), "a pause ran its course with every value cached");
        r.note_read(false);
        assert!(!r.trusts_cache(), "a miss withdraws the trust");
        let mut r = Readahead::new(32);
        depths(&mut r, Step::Forward, 20);
        r.note_cached();
        depths(&mut r, Step::Forward, 3);
        assert!(r.pausing());
        r.note_miss();
        assert_eq!(depths(&mut r, Step::Forward, 1), [16], "a miss ends the pause at the depth it had");
        let mut r = Readahead::new(32);
        depths(&mut r, Step::Forward, 40);
        for i in 0..31 {
            r.note_read(i % 8 != 0);
        }
        assert_eq!(r.step(Step::Forward), 32, "cached reads mixed with misses do not pause");
        for _ in 0..32 {
            r.note_read(true);
        }
        assert_eq!(r.step(Step::Forward), 0, "a window's worth of cached reads in a row does");
    }

    #[test]
    fn a_scan_starts_out_on_the_mapping_when_scans_found_the_cache_warm() {
        let offset = |i: u32| u64::from(i) * 5000;
        for warm in [false, true] {
            let values = std::sync::Arc::new(ModelValues { warm, ..ModelValues::new(true) });
            let mut it = scan_over(40, offset, values.clone());
            assert_eq!(walk(&mut it, offset), 40);
            let plain = values.plain_reads.load(std::sync::atomic::Ordering::Relaxed);
            let mapped = values.mapped_reads.load(std::sync::atomic::Ordering::Relaxed);
            if warm {
                assert_eq!(plain, 0, "a warm start reads through the mapping from the first value");
                assert!(mapped > 25, "{mapped} of 40 values through the mapping");
            } else {
                assert_eq!(mapped, 0, "a short scan never proves the cache warm by itself");
            }
        }
        // Trust that turns out wrong is withdrawn by the next probe, even when the iterator
        // only seeks (it never reads ahead, so only the probes among its reads can tell).
        let cold = std::sync::Arc::new(ModelValues { warm: true, ..ModelValues::new(false) });
        let mut it = scan_over(200, offset, cold.clone());
        for i in (0..200).step_by(3) {
            it.seek(format!("k{i:06}").as_bytes()).unwrap();
            assert_eq!(it.value(), offset(i).to_string().as_bytes());
        }
        let mapped = cold.mapped_reads.load(std::sync::atomic::Ordering::Relaxed);
        assert!(mapped < PROBE_EVERY, "{mapped} mapped reads after the first probe missed");
        // A seek keeps the trust: whether the cache holds the data does not depend on where.
        let mut r = Readahead::new(32);
        r.trust_cache();
        r.reset();
        assert!(r.trusts_cache());
        let mut off = Readahead::new(0);
        off.trust_cache();
        assert!(!off.trusts_cache(), "read-ahead off: plain reads, as asked");
    }

    #[test]
    fn a_scan_leaving_cached_data_resumes_read_ahead_at_once() {
        // The first half of the values is cached: read-ahead pauses there (and trusts the
        // mapping); the first probe in the second half must end the pause. One value per
        // region, so no region is read whole (which would cache the values after it).
        let offset = |i: u32| u64::from(i) * super::regions::REGION_BYTES;
        let half = 1000u32;
        let values = std::sync::Arc::new(ModelValues { cached_below: offset(half), ..ModelValues::new(false) });
        let mut it = scan_over(2 * half, offset, values.clone());
        assert_eq!(walk(&mut it, offset), 2 * half);
        assert!(values.mapped_reads.load(std::sync::atomic::Ordering::Relaxed) > 0, "never trusted the cache");
        let prefetched = values.prefetched.lock().clone();
        let resume = offset(half + PROBE_EVERY as u32 + 1);
        let missing: Vec<u64> =
            (half + PROBE_EVERY as u32 + 1..2 * half).map(offset).filter(|o| !prefetched.contains(o)).collect();
        assert!(missing.is_empty(), "values past {resume} not read ahead: {missing:?}");
    }

    #[test]
    fn readahead_off_and_small_maxima() {
        let mut off = Readahead::new(0);
        assert!(depths(&mut off, Step::Forward, 50).iter().all(|&d| d == 0));
        let mut one = Readahead::new(1);
        assert_eq!(depths(&mut one, Step::Forward, 5), [0, 1, 1, 1, 1]);
        let mut three = Readahead::new(3);
        assert_eq!(*depths(&mut three, Step::Forward, 10).last().unwrap(), 3);
    }
}
