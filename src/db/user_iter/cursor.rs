//! LevelDB's DBIter without value reads: walks the merged stream of internal entries and stops
//! at the newest version of each live user key visible at the iterator's sequence number,
//! within bounds, yielding its kind and stored bytes (an inline value or an encoded pointer).
//! An entry a range tombstone covers (`range_del::Coverage`) counts as a deletion.

use std::cmp::Ordering;

use super::sampling::ReadSampler;
use super::Step;
use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::internal_iter::InternalIterator;
use crate::key::{self, ValueKind, MAX_SEQ};
use crate::range_del::Coverage;
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq)]
enum CursorDir {
    /// The inner iterator is at the entry that yields `key()`.
    Forward,
    /// The inner iterator is just before all entries of `key()`, which is in `saved_key`.
    Reverse,
}

/// LevelDB's DBIter without value reads: walks the merged stream and stops at the newest
/// visible version of each live user key within bounds, yielding its kind and stored bytes
/// (an inline value or an encoded pointer).
pub(super) struct Cursor {
    inner: Box<dyn InternalIterator>,
    seq: u64,
    /// The order of the user keys (and of the bounds).
    order: KeyOrder,
    direction: CursorDir,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    /// The kept value of the saved entry (`InternalIterator::kept_value`).
    saved_kept: Option<bytes::Bytes>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    /// Kind of the current entry.
    kind: ValueKind,
    /// Reports a key about every MiB read (`sampling`), when the DB wants samples.
    sampler: Option<ReadSampler>,
    /// The range tombstones of the iterator's sources (`None`: there are none).
    coverage: Option<Coverage>,
    /// Folds merge operands (`None`: an operand is an error to read).
    merges: Option<Arc<dyn MergeSource>>,
    /// Forward: the current entry is a folded merge, in `saved_key` and `saved_value`; the
    /// inner iterator is past the entries it folded.
    merged: bool,
    /// Reverse, with a merge operator: the visible entries of the key being walked, oldest
    /// first (a merge at its newest folds them).
    rev_key: Vec<u8>,
    rev_versions: Vec<(ValueKind, Vec<u8>, Option<bytes::Bytes>)>,
}

/// Folds a key's merge operands for the cursor: reads a separated value beneath them and
/// applies the keyspace's merge operator.
pub(crate) trait MergeSource: Send + Sync {
    /// Whether the keyspace has an operator (without one every fold is an error).
    fn has_operator(&self) -> bool;
    /// `user_key`'s value: `operands` (newest first) folded into `base` (its kind, stored
    /// bytes and any value a memtable keeps for a pointer; `None`: no value or deleted).
    fn fold(
        &self,
        user_key: &[u8],
        base: Option<(ValueKind, &[u8], Option<&bytes::Bytes>)>,
        operands: &[Vec<u8>],
    ) -> Result<Vec<u8>>;
}

impl Cursor {
    /// The bounds `[lower, upper)`.
    pub(super) fn bounds(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (self.lower.clone(), self.upper.clone())
    }

    /// Replace the bounds (before a seek).
    pub(super) fn set_bounds(&mut self, lower: Option<Vec<u8>>, upper: Option<Vec<u8>>) {
        (self.lower, self.upper) = (lower, upper);
    }

    /// A cursor over `inner` at sequence number `seq`, within `[lower, upper)` (keys in
    /// `order`); not positioned.
    pub(super) fn new(
        inner: Box<dyn InternalIterator>,
        (seq, order): (u64, KeyOrder),
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Self {
        Cursor {
            inner,
            seq,
            order,
            direction: CursorDir::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            saved_kept: None,
            lower,
            upper,
            kind: ValueKind::Value,
            sampler: None,
            coverage: None,
            merges: None,
            merged: false,
            rev_key: Vec::new(),
            rev_versions: Vec::new(),
        }
    }

    /// Fold merge operands with `merges`.
    pub(super) fn set_merges(&mut self, merges: Arc<dyn MergeSource>) {
        self.merges = Some(merges);
    }

    /// Treat entries `coverage` covers as deleted.
    pub(super) fn set_coverage(&mut self, coverage: Coverage) {
        self.coverage = (!coverage.is_empty()).then_some(coverage);
    }

    /// Sample what this cursor reads (LevelDB's read sampling).
    pub(super) fn set_sampler(&mut self, sampler: ReadSampler) {
        self.sampler = Some(sampler);
    }

    /// Count the inner iterator's current entry as read.
    #[inline]
    fn sample(&mut self) {
        if let Some(s) = &mut self.sampler {
            let k = self.inner.key();
            s.read(k, k.len() + self.inner.value().len());
        }
    }

    /// Whether the cursor is at an entry.
    pub(super) fn valid(&self) -> bool {
        self.valid
    }

    /// What the current entry holds: an inline value or a pointer (never a deletion).
    pub(super) fn kind(&self) -> ValueKind {
        self.kind
    }

    /// The current user key.
    pub(super) fn key(&self) -> &[u8] {
        match self.direction {
            CursorDir::Forward if self.merged => &self.saved_key,
            CursorDir::Forward => key::user_key(self.inner.key()),
            CursorDir::Reverse => &self.saved_key,
        }
    }

    /// The value of the current pointer entry when its source keeps it in memory (a memtable
    /// holding the write): no value-log read needed.
    pub(super) fn kept_value(&self) -> Option<crate::value::Value> {
        self.kept_bytes().cloned().map(crate::value::Value::from)
    }

    /// `kept_value`, borrowed (no reference count taken).
    pub(super) fn kept_slice(&self) -> Option<&[u8]> {
        self.kept_bytes().map(|b| &b[..])
    }

    fn kept_bytes(&self) -> Option<&bytes::Bytes> {
        match self.direction {
            CursorDir::Forward if self.merged => None,
            CursorDir::Forward => self.inner.kept_value(),
            CursorDir::Reverse => self.saved_kept.as_ref(),
        }
    }

    /// The current entry's stored bytes: the value, or the encoded pointer to it.
    pub(super) fn stored(&self) -> &[u8] {
        match self.direction {
            CursorDir::Forward if self.merged => &self.saved_value,
            CursorDir::Forward => self.inner.value(),
            CursorDir::Reverse => &self.saved_value,
        }
    }

    pub(super) fn seek_to_first(&mut self) -> Result<()> {
        if let Some(lower) = self.lower.clone() {
            return self.seek(&lower);
        }
        self.direction = CursorDir::Forward;
        self.inner.seek_to_first()?;
        self.find_next_user_entry(false)?;
        self.check_upper();
        Ok(())
    }

    pub(super) fn seek_to_last(&mut self) -> Result<()> {
        self.direction = CursorDir::Reverse;
        match &self.upper {
            Some(upper) => {
                let target = key::seek_key(upper, MAX_SEQ);
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

    /// Position at the first live key >= `target` (and >= the lower bound).
    pub(super) fn seek(&mut self, target: &[u8]) -> Result<()> {
        let target = match &self.lower {
            Some(l) if self.order.compare_user(l, target) == Ordering::Greater => l.clone(),
            _ => target.to_vec(),
        };
        self.direction = CursorDir::Forward;
        self.inner.seek(&key::seek_key(&target, self.seq))?;
        self.find_next_user_entry(false)?;
        self.check_upper();
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        if self.direction == CursorDir::Reverse {
            self.direction = CursorDir::Forward;
            // The inner iterator is before the entries of saved_key: step into them; the
            // skipping below then passes over them.
            if self.inner.valid() {
                self.inner.next()?;
            } else {
                self.inner.seek_to_first()?;
            }
        } else if self.merged {
            // `saved_key` is the folded key; the inner iterator is past what it folded.
            self.merged = false;
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
        if self.direction == CursorDir::Forward {
            // Walk back past every entry of the current key.
            if std::mem::take(&mut self.merged) {
                // `saved_key` is the folded key; the inner iterator is past its entries.
                if !self.inner.valid() {
                    self.inner.seek_to_last()?;
                }
            } else {
                self.saved_key.clear();
                self.saved_key.extend_from_slice(key::user_key(self.inner.key()));
            }
            loop {
                self.inner.prev()?;
                if !self.inner.valid() {
                    self.valid = false;
                    return Ok(());
                }
                if self.order.compare_user(key::user_key(self.inner.key()), &self.saved_key) == Ordering::Less {
                    break;
                }
            }
            self.direction = CursorDir::Reverse;
        }
        self.find_prev_user_entry()?;
        self.check_lower();
        Ok(())
    }

    /// Move one entry in `dir`.
    pub(super) fn step(&mut self, dir: Step) -> Result<()> {
        match dir {
            Step::Forward => self.next(),
            Step::Backward => self.prev(),
        }
    }

    /// Forward: skip to the newest visible non-deleted entry, skipping keys <= saved_key when
    /// `skipping`.
    fn find_next_user_entry(&mut self, mut skipping: bool) -> Result<()> {
        self.merged = false;
        while self.inner.valid() {
            self.sample();
            if let Some(p) = key::parse_internal_key(self.inner.key()) {
                if p.seq <= self.seq
                    && !(skipping && self.order.compare_user(p.user_key, &self.saved_key) != Ordering::Greater)
                {
                    let deleted = p.kind == ValueKind::Deletion
                        || self.coverage.as_mut().is_some_and(|c| c.covers(p.user_key, p.seq));
                    if deleted {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(p.user_key);
                        skipping = true;
                    } else if p.kind == ValueKind::Merge {
                        self.valid = true;
                        return self.fold_forward();
                    } else {
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
        self.merged = false;
        let track = self.merges.as_ref().is_some_and(|m| m.has_operator());
        self.rev_key.clear();
        self.rev_versions.clear();
        let mut last_kind = ValueKind::Deletion;
        while self.inner.valid() {
            self.sample();
            if let Some(p) = key::parse_internal_key(self.inner.key()) {
                if p.seq <= self.seq {
                    if last_kind != ValueKind::Deletion
                        && self.order.compare_user(p.user_key, &self.saved_key) == Ordering::Less
                    {
                        break;
                    }
                    last_kind = match p.kind {
                        ValueKind::Deletion => ValueKind::Deletion,
                        _ if self.coverage.as_mut().is_some_and(|c| c.covers(p.user_key, p.seq)) => ValueKind::Deletion,
                        kind => kind,
                    };
                    if track {
                        if self.rev_versions.is_empty() || self.rev_key != p.user_key {
                            self.rev_key.clear();
                            self.rev_key.extend_from_slice(p.user_key);
                            self.rev_versions.clear();
                        }
                        let kept = self.inner.kept_value().cloned();
                        self.rev_versions.push((last_kind, self.inner.value().to_vec(), kept));
                    }
                    if last_kind == ValueKind::Deletion {
                        self.saved_key.clear();
                        self.saved_value.clear();
                        self.saved_kept = None;
                    } else {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(p.user_key);
                        self.saved_value.clear();
                        self.saved_value.extend_from_slice(self.inner.value());
                        self.saved_kept = self.inner.kept_value().cloned();
                    }
                }
            }
            self.inner.prev()?;
        }
        if last_kind == ValueKind::Deletion {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.saved_kept = None;
            self.direction = CursorDir::Forward;
        } else {
            self.valid = true;
            self.kind = last_kind;
            if last_kind == ValueKind::Merge {
                self.fold_reverse()?;
            }
        }
        Ok(())
    }

    /// Forward, at the newest visible entry of a key, a merge operand: fold it with the
    /// key's older entries down to the first that is not an operand, leaving the inner
    /// iterator at that entry (or past the key).
    fn fold_forward(&mut self) -> Result<()> {
        let user_key = key::user_key(self.inner.key()).to_vec();
        let mut operands = vec![self.inner.value().to_vec()];
        let mut base: Option<(ValueKind, Vec<u8>, Option<bytes::Bytes>)> = None;
        self.inner.next()?;
        while self.inner.valid() {
            let Some(p) = key::parse_internal_key(self.inner.key()) else { break };
            if p.user_key != &user_key[..] {
                break;
            }
            if p.seq <= self.seq {
                if p.kind == ValueKind::Deletion || self.coverage.as_mut().is_some_and(|c| c.covers(p.user_key, p.seq))
                {
                    break;
                }
                if p.kind != ValueKind::Merge {
                    base = Some((p.kind, self.inner.value().to_vec(), self.inner.kept_value().cloned()));
                    break;
                }
                operands.push(self.inner.value().to_vec());
            }
            self.inner.next()?;
        }
        let base = base.as_ref().map(|(k, v, kept)| (*k, &v[..], kept.as_ref()));
        self.saved_value = self.fold(&user_key, base, &operands)?;
        self.saved_key = user_key;
        self.saved_kept = None;
        self.kind = ValueKind::Value;
        self.merged = true;
        Ok(())
    }

    /// Reverse, the walk over a key ended at a merge operand: fold the key's entries
    /// (`rev_versions`, oldest first) from the newest down.
    fn fold_reverse(&mut self) -> Result<()> {
        let versions = std::mem::take(&mut self.rev_versions);
        let mut operands = Vec::new();
        let mut base = None;
        for (kind, stored, kept) in versions.iter().rev() {
            match kind {
                ValueKind::Merge => operands.push(stored.clone()),
                ValueKind::Deletion => break,
                kind => {
                    base = Some((*kind, &stored[..], kept.as_ref()));
                    break;
                }
            }
        }
        if operands.is_empty() {
            // No operator: the walk kept nothing; the operand is folded alone (an error).
            operands.push(self.saved_value.clone());
        }
        let key = self.saved_key.clone();
        self.saved_value = self.fold(&key, base, &operands)?;
        self.saved_kept = None;
        self.kind = ValueKind::Value;
        self.rev_versions = versions;
        Ok(())
    }

    fn fold(
        &self,
        user_key: &[u8],
        base: Option<(ValueKind, &[u8], Option<&bytes::Bytes>)>,
        operands: &[Vec<u8>],
    ) -> Result<Vec<u8>> {
        match &self.merges {
            Some(m) => m.fold(user_key, base, operands),
            None => crate::merge::full_merge(&None, user_key, None, operands),
        }
    }

    fn check_upper(&mut self) {
        if self.valid {
            if let Some(u) = &self.upper {
                if self.order.compare_user(self.key(), u) != Ordering::Less {
                    self.valid = false;
                }
            }
        }
    }

    fn check_lower(&mut self) {
        if self.valid {
            if let Some(l) = &self.lower {
                if self.order.compare_user(self.key(), l) == Ordering::Less {
                    self.valid = false;
                }
            }
        }
    }
}
