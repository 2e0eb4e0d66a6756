//! Read-ahead's window: the entries the cursor has passed ahead of the user's position, each
//! with its separated value's read on the way, topped up as the user steps.

use std::collections::VecDeque;

use super::cursor::Cursor;
use super::{read_probing, DbIterator, Step, ValueSource};
use crate::error::{Error, Result};
use crate::key::ValueKind;
use crate::value::Value;
use crate::vlog::{PendingRead, ValuePointer};

/// Bytes of values read ahead at most, whatever the depth (bounds memory for huge values).
const MAX_AHEAD_BYTES: u64 = 8 << 20;

/// An entry the cursor has passed ahead of the user's position; its value may be on its way.
pub(super) struct Ahead {
    pub(super) key: Vec<u8>,
    pub(super) stored: Vec<u8>,
    /// The pointer of a separated value, decoded once (an error waits until the user reaches
    /// the entry); `None` for an inline value, and once the value is read.
    pointer: Option<Result<ValuePointer>>,
    /// The value, when the memtable holding the entry keeps it (no read needed).
    kept: Option<Value>,
    read: Option<PendingRead>,
    /// Bytes of the value being read ahead (0 for inline values).
    read_bytes: u64,
}

impl Ahead {
    /// The cursor's entry, its pointer decoded.
    fn at(cursor: &Cursor, values: &dyn ValueSource) -> Ahead {
        let stored = cursor.stored().to_vec();
        let pointer = (cursor.kind() == ValueKind::Pointer).then(|| values.pointer(&stored));
        let kept = pointer.as_ref().and_then(|_| cursor.kept_value());
        Ahead { key: cursor.key().to_vec(), stored, pointer, kept, read: None, read_bytes: 0 }
    }
}

/// Read-ahead state: the user's entry is `entries[0]`; the cursor sits at the last entry,
/// and the ones in between have their values on the way.
pub(super) struct Window {
    pub(super) dir: Step,
    pub(super) entries: VecDeque<Ahead>,
    /// Bytes of values being read ahead.
    bytes: u64,
    /// The cursor has reached the end (or failed: the error waits in `error` until the user
    /// reaches that position).
    done: bool,
    error: Option<Error>,
}

impl DbIterator {
    /// Start reading ahead from the cursor's entry, which becomes the user's.
    pub(super) fn open_window(&mut self, dir: Step, depth: usize) {
        let mut w = Window { dir, entries: VecDeque::with_capacity(depth + 1), bytes: 0, done: false, error: None };
        // The user's entry is read right away, so only the ones after it are prefetched.
        w.entries.push_back(Ahead::at(&self.cursor, &*self.values));
        self.window = Some(w);
        self.fill(depth);
    }

    /// Drop the user's entry, top the window up, and show the next entry.
    pub(super) fn advance_window(&mut self, dir: Step) -> Result<()> {
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
            } else if !self.cursor.valid() {
                w.done = true;
            } else {
                let mut ahead = Ahead::at(&self.cursor, &*self.values);
                if ahead.pointer.is_none() || ahead.kept.is_some() {
                    // Inline or kept by its memtable: nothing to read ahead, as if cached (a
                    // window's worth of them in a row pauses read-ahead).
                    self.readahead.note_read(true);
                }
                if let (Some(Ok(ptr)), None) = (&ahead.pointer, &ahead.kept) {
                    ahead.read = match self.regions.is_off() {
                        false => self.values.prefetch(&ahead.key, ptr),
                        true => self.values.prefetch_alone(&ahead.key, ptr),
                    };
                    if let Some(r) = &ahead.read {
                        self.readahead.note_read(r.was_cached());
                        if let Some(region) = self.regions.visit(ptr, !r.was_cached()) {
                            self.values.read_region(region);
                        }
                        ahead.read_bytes = u64::from(ptr.op_len);
                    }
                }
                w.bytes += ahead.read_bytes;
                w.entries.push_back(ahead);
            }
        }
    }

    /// Read the value of the user's entry in the window (waiting for its prefetch).
    pub(super) fn resolve_front(&mut self) -> Result<()> {
        let Some(front) = self.window.as_mut().and_then(|w| w.entries.front_mut()) else { return Ok(()) };
        let Some(ptr) = front.pointer.take() else { return Ok(()) };
        let ptr = ptr?;
        if let Some(kept) = front.kept.take() {
            self.resolved = Some((ptr, kept));
            return Ok(());
        }
        let v = match front.read.take() {
            Some(read) => self.values.finish(&front.key, &ptr, read)?,
            None if self.readahead.trusts_cache() => read_probing(
                &*self.values,
                (&mut self.readahead, &mut self.reads_outside_window, None),
                &front.key,
                &ptr,
            )?,
            None => self.values.read(&front.key, &ptr)?,
        };
        self.resolved = Some((ptr, v));
        Ok(())
    }
}
