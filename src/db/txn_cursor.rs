//! A transaction's cursor (`Transaction::iter`, RocksDB's `Transaction::GetIterator`): the
//! snapshot's entries of one keyspace merged with the transaction's own writes, with
//! LevelDB's cursor moves (`seek`, `seek_to_first`, `seek_to_last`, `next`, `prev`).
//!
//! Two sources step side by side, as a merging iterator's children do: the snapshot's
//! `DbIterator` (entries the transaction's range deletes cover skipped) and the transaction's
//! point writes, sorted. Where both hold a key the transaction's write wins; its deletes hide
//! the key. When the direction changes, both sources are put back on the other side of the
//! current key.

use crate::comparator::KeyOrder;
use crate::error::Result;

use super::txn::range_deleted;
use super::DbIterator;

/// Which source the cursor's current entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Snapshot,
    Own,
}

/// A cursor over one keyspace as a transaction sees it (`Transaction::iter`). It holds the
/// transaction's writes made before it was created; later writes of the transaction are seen
/// by a new cursor.
pub struct TxnCursor {
    base: DbIterator,
    /// The transaction's point writes in key order (`None`: deleted).
    own: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The transaction's range deletes `[begin, end)`: they hide the snapshot's entries.
    deleted: Vec<(Vec<u8>, Vec<u8>)>,
    order: KeyOrder,
    /// The position in `own` (`None`: before its start or past its end).
    at: Option<usize>,
    forward: bool,
    current: Option<Side>,
}

impl TxnCursor {
    pub(super) fn new(
        base: DbIterator,
        own: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        deleted: Vec<(Vec<u8>, Vec<u8>)>,
        order: KeyOrder,
    ) -> TxnCursor {
        TxnCursor { base, own, deleted, order, at: None, forward: true, current: None }
    }

    /// Whether the cursor is at an entry.
    pub fn valid(&self) -> bool {
        self.current.is_some()
    }

    /// The current key; only while `valid()`.
    pub fn key(&self) -> &[u8] {
        match (self.current, self.at) {
            (Some(Side::Own), Some(i)) => &self.own[i].0,
            _ => self.base.key(),
        }
    }

    /// The current value; only while `valid()`.
    pub fn value(&self) -> &[u8] {
        match (self.current, self.at) {
            (Some(Side::Own), Some(i)) => self.own[i].1.as_deref().unwrap_or_default(),
            _ => self.base.value(),
        }
    }

    /// Position at the first key.
    pub fn seek_to_first(&mut self) -> Result<()> {
        self.base.seek_to_first()?;
        self.at = (!self.own.is_empty()).then_some(0);
        self.settle(true)
    }

    /// Position at the last key.
    pub fn seek_to_last(&mut self) -> Result<()> {
        self.base.seek_to_last()?;
        self.at = self.own.len().checked_sub(1);
        self.settle(false)
    }

    /// Position at the first key >= `target`.
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.base.seek(target)?;
        let i = self.own.partition_point(|(k, _)| self.order.compare_user(k, target).is_lt());
        self.at = (i < self.own.len()).then_some(i);
        self.settle(true)
    }

    /// Move to the next key (nothing when not `valid()`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<()> {
        let Some(side) = self.current else { return Ok(()) };
        if !self.forward {
            // Both sources go to the first entry after the current key.
            let key = self.key().to_vec();
            self.base.seek(&key)?;
            if self.base.valid() && self.order.compare_user(self.base.key(), &key).is_eq() {
                self.base.next()?;
            }
            let i = self.own.partition_point(|(k, _)| self.order.compare_user(k, &key).is_le());
            self.at = (i < self.own.len()).then_some(i);
        } else {
            self.step_current(side, true)?;
        }
        self.settle(true)
    }

    /// Move to the previous key (nothing when not `valid()`).
    pub fn prev(&mut self) -> Result<()> {
        let Some(side) = self.current else { return Ok(()) };
        if self.forward {
            // Both sources go to the last entry before the current key.
            let key = self.key().to_vec();
            self.base.seek(&key)?;
            if self.base.valid() {
                self.base.prev()?;
            } else {
                self.base.seek_to_last()?;
            }
            let i = self.own.partition_point(|(k, _)| self.order.compare_user(k, &key).is_lt());
            self.at = i.checked_sub(1);
        } else {
            self.step_current(side, false)?;
        }
        self.settle(false)
    }

    /// Step past the current entry in the cursor's direction: its source, and the snapshot
    /// too when the transaction's write shadows the snapshot's entry of the same key.
    fn step_current(&mut self, side: Side, forward: bool) -> Result<()> {
        if side == Side::Own && self.base.valid() && self.order.compare_user(self.base.key(), self.key()).is_eq() {
            self.step_base(forward)?;
        }
        match side {
            Side::Own => self.step_own(forward),
            Side::Snapshot => self.step_base(forward)?,
        }
        Ok(())
    }

    fn step_base(&mut self, forward: bool) -> Result<()> {
        match forward {
            true => self.base.next(),
            false => self.base.prev(),
        }
    }

    fn step_own(&mut self, forward: bool) {
        self.at = match (self.at, forward) {
            (Some(i), true) => Some(i + 1).filter(|&j| j < self.own.len()),
            (Some(i), false) => i.checked_sub(1),
            (None, _) => None,
        };
    }

    /// Make the current entry the next one in `forward`'s direction from where both sources
    /// stand: the snapshot's entries under the transaction's range deletes and the keys it
    /// deleted are passed over.
    fn settle(&mut self, forward: bool) -> Result<()> {
        self.forward = forward;
        loop {
            while self.base.valid() && range_deleted(&self.deleted, self.base.key()) {
                self.step_base(forward)?;
            }
            let own = self.at.map(|i| &self.own[i]);
            let side = match (self.base.valid(), own) {
                (false, None) => None,
                (true, None) => Some(Side::Snapshot),
                (false, Some(_)) => Some(Side::Own),
                (true, Some((k, _))) => {
                    let ord = self.order.compare_user(self.base.key(), k);
                    let snapshot_first = if forward { ord.is_lt() } else { ord.is_gt() };
                    Some(if snapshot_first { Side::Snapshot } else { Side::Own })
                }
            };
            self.current = side;
            if side == Some(Side::Own) && own.is_some_and(|(_, v)| v.is_none()) {
                // A key the transaction deleted: pass it (and the snapshot's entry of it).
                self.step_current(Side::Own, forward)?;
                continue;
            }
            return Ok(());
        }
    }
}
