//! The user-facing iterator: turns the merged stream of internal entries into the user's view
//! at one sequence number (newest visible version per key, deletions hidden), within bounds.
//! The direction-switching logic follows LevelDB's DBIter.

use std::cmp::Ordering;

use super::InternalIterator;
use crate::error::Result;
use crate::key::{self, ValueKind, KIND_FOR_SEEK, MAX_SEQ};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// The inner iterator is at the entry that yields `key()`.
    Forward,
    /// The inner iterator is just before all entries of `key()`, which is in `saved_key`.
    Reverse,
}

/// Keeps alive whatever the iterator reads from (a Version, memtables, a snapshot).
pub trait Pin: Send {}
impl<T: Send> Pin for T {}

/// Reads a separated value: `(user key, encoded pointer) -> value`.
pub type Resolver = std::sync::Arc<dyn Fn(&[u8], &[u8]) -> Result<Vec<u8>> + Send + Sync>;

/// A cursor over user keys and values (LevelDB's Iterator).
pub struct DbIterator {
    inner: Box<dyn InternalIterator>,
    seq: u64,
    direction: Direction,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    /// Kind of the current entry (a pointer's value is read through `resolver`).
    cur_kind: u8,
    resolver: Resolver,
    resolved: Option<Vec<u8>>,
    _pins: Box<dyn Pin>,
}

impl DbIterator {
    pub(crate) fn new(
        inner: Box<dyn InternalIterator>,
        seq: u64,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        resolver: Resolver,
        pins: Box<dyn Pin>,
    ) -> Self {
        DbIterator {
            inner,
            seq,
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            lower,
            upper,
            cur_kind: ValueKind::Value as u8,
            resolver,
            resolved: None,
            _pins: pins,
        }
    }

    /// Whether the iterator is at an entry.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current key; only while `valid()`.
    pub fn key(&self) -> &[u8] {
        match self.direction {
            Direction::Forward => key::user_key(self.inner.key()),
            Direction::Reverse => &self.saved_key,
        }
    }

    /// The current value; only while `valid()`.
    pub fn value(&self) -> &[u8] {
        if let Some(v) = &self.resolved {
            return v;
        }
        self.raw_value()
    }

    fn raw_value(&self) -> &[u8] {
        match self.direction {
            Direction::Forward => self.inner.value(),
            Direction::Reverse => &self.saved_value,
        }
    }

    /// The value pointer of the current entry, when its value lives in the value log.
    pub(crate) fn current_pointer(&self) -> Option<crate::vlog::ValuePointer> {
        if !self.valid || self.cur_kind != ValueKind::Pointer as u8 {
            return None;
        }
        crate::vlog::ValuePointer::decode(self.raw_value())
    }

    /// Read the value of the current entry if it is a pointer into the value log.
    fn resolve(&mut self) -> Result<()> {
        self.resolved = None;
        if self.valid && self.cur_kind == ValueKind::Pointer as u8 {
            let v = (self.resolver)(self.key(), self.raw_value())?;
            self.resolved = Some(v);
        }
        Ok(())
    }

    pub fn seek_to_first(&mut self) -> Result<()> {
        if let Some(lower) = self.lower.clone() {
            return self.seek(&lower);
        }
        self.direction = Direction::Forward;
        self.inner.seek_to_first()?;
        self.find_next_user_entry(false)?;
        self.check_upper();
        self.resolve()
    }

    pub fn seek_to_last(&mut self) -> Result<()> {
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
        self.resolve()
    }

    /// Position at the first key >= `target` (and >= the lower bound).
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        let target = match &self.lower {
            Some(l) if l.as_slice() > target => l.clone(),
            _ => target.to_vec(),
        };
        self.direction = Direction::Forward;
        self.inner.seek(&key::make_internal_key(&target, self.seq, KIND_FOR_SEEK))?;
        self.find_next_user_entry(false)?;
        self.check_upper();
        self.resolve()
    }

    /// Move to the next key (LevelDB's `Next`; use `Db::scan` for a Rust `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<()> {
        if !self.valid {
            self.resolved = None;
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
        self.resolve()
    }

    pub fn prev(&mut self) -> Result<()> {
        if !self.valid {
            self.resolved = None;
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
        self.resolve()
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
                        self.cur_kind = p.kind;
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
            self.cur_kind = last_kind;
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
