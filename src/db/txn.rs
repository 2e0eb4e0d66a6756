//! Optimistic transactions (RocksDB's `OptimisticTransactionDB`, fjall's write transactions):
//! a transaction reads at a snapshot with its own writes visible, buffers its writes in
//! memory, and at commit the write leader checks that nothing it depends on was written after
//! its snapshot and writes its batch, in one step no other write can come between
//! (`WriteQueue::commit_transaction`). Snapshot isolation checks the keys it writes (and those
//! read with `get_for_update`); serializable also checks every key it read and every range it
//! scanned. A conflict writes nothing; dropping a transaction rolls it back.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::RangeBounds;
use std::sync::Arc;
use std::time::Duration;

use super::keyspace::Bounds;
use super::read::CheckedAt;
use super::txn_cursor::TxnCursor;
use super::write::{KeyRange, TxnCheck};
use super::{add, DbInner, Keyspace, Range};
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::options::ReadOptions;
use crate::value::Value;
use crate::write_batch::WriteBatch;

/// What a transaction's commit checks against the writes committed since its snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Isolation {
    /// The commit fails if another commit after the snapshot wrote a key this transaction
    /// writes (or read with `get_for_update`). Reads are consistent but may be stale: two
    /// transactions that each read what the other writes can both commit (write skew).
    #[default]
    Snapshot,
    /// Snapshot isolation, and the commit also fails if another commit after the snapshot
    /// wrote a key this transaction read or a key in a range it scanned (phantoms included):
    /// committed transactions behave as if each ran alone at its commit.
    Serializable,
}

/// Options of a transaction (`Db::transaction_with`).
#[derive(Debug, Clone, Default)]
pub struct TransactionOptions {
    /// What the commit checks (default: snapshot isolation).
    pub isolation: Isolation,
    /// `fdatasync` the log before `commit` returns; the transaction then survives any crash.
    pub sync: bool,
}

impl TransactionOptions {
    /// Serializable isolation (`Isolation::Serializable`).
    #[must_use]
    pub fn serializable(mut self) -> Self {
        self.isolation = Isolation::Serializable;
        self
    }

    /// Durable when `commit` returns (`sync`).
    #[must_use]
    pub fn synced(mut self) -> Self {
        self.sync = true;
        self
    }
}

/// A transaction's buffered writes to one keyspace.
#[derive(Default)]
struct Pending {
    /// Point writes by key: a value to put, or `None` to delete.
    points: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Range deletes `[begin, end)`. A point write made before one is dropped from `points`,
    /// so the commit writes the ranges first and the points after them.
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// The time-to-live of each key in `points` put with `put_with_ttl`: its expiry is set
    /// when the commit is written, as a batch's is.
    ttls: BTreeMap<Vec<u8>, Duration>,
}

impl Pending {
    /// What the transaction's own writes say of `key`: `Some(None)` deleted, `Some(Some(v))`
    /// written, `None` untouched (read the snapshot).
    fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        match self.points.get(key) {
            Some(v) => Some(v.as_deref()),
            None => range_deleted(&self.ranges, key).then_some(None),
        }
    }
}

/// Whether one of `ranges` (bytewise, as range deletes are) holds `key`.
pub(super) fn range_deleted(ranges: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> bool {
    ranges.iter().any(|(b, e)| b.as_slice() <= key && key < e.as_slice())
}

/// An optimistic transaction (`Db::transaction`): reads see the database as of the moment it
/// began plus its own writes; writes stay in memory until `commit`, which writes all of them
/// atomically (across keyspaces) or, on a conflict, none (`Error::Conflict`: run it again).
/// Dropping it without committing rolls it back. Reads and writes name the keyspace they
/// use; `Db::default_keyspace` is the database's own.
///
/// `commit` and `rollback` consume the transaction, so using one after it ended does not
/// compile:
///
/// ```compile_fail
/// # let db = wisckey::Db::open("/tmp/never-opened", wisckey::Options::default())?;
/// let ks = db.default_keyspace().clone();
/// let mut txn = db.transaction();
/// txn.put(&ks, "k", "v")?;
/// txn.commit()?;
/// txn.put(&ks, "k", "w")?; // error[E0382]: borrow of moved value: `txn`
/// # Ok::<(), wisckey::Error>(())
/// ```
pub struct Transaction {
    db: Arc<DbInner>,
    /// Reads at the snapshot (held until the transaction ends).
    ro: ReadOptions,
    /// The snapshot's sequence number and the memtable active at it.
    seq: u64,
    mem: Arc<Memtable>,
    opts: TransactionOptions,
    pending: BTreeMap<u32, Pending>,
    /// Keys the commit checks besides the written ones: `get_for_update`'s, and in
    /// serializable mode every key read.
    reads: BTreeSet<(u32, Vec<u8>)>,
    /// Ranges scanned (serializable mode).
    scanned: Vec<KeyRange>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("snapshot", &self.seq)
            .field("isolation", &self.opts.isolation)
            .field("keyspaces_written", &self.pending.len())
            .finish()
    }
}

impl Transaction {
    pub(crate) fn begin(db: Arc<DbInner>, opts: TransactionOptions) -> Transaction {
        let (snapshot, mem) = db.transaction_start();
        let seq = snapshot.sequence();
        let ro = ReadOptions { snapshot: Some(snapshot), ..ReadOptions::default() };
        Transaction { db, ro, seq, mem, opts, pending: BTreeMap::new(), reads: BTreeSet::new(), scanned: Vec::new() }
    }

    /// The sequence number of the snapshot the transaction reads at.
    pub fn snapshot_sequence(&self) -> u64 {
        self.seq
    }

    /// The transaction's isolation level.
    pub fn isolation(&self) -> Isolation {
        self.opts.isolation
    }

    fn check_handle(&self, ks: &Keyspace) -> Result<()> {
        match Arc::ptr_eq(ks.db(), &self.db) {
            true => Ok(()),
            false => Err(Error::invalid(format!("keyspace {:?} is a handle of another database", ks.name()))),
        }
    }

    fn serializable(&self) -> bool {
        self.opts.isolation == Isolation::Serializable
    }

    /// The value of `key` in keyspace `ks`: the transaction's own write if it made one, else
    /// the snapshot's. Serializable transactions check at commit that it did not change.
    pub fn get(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.check_handle(ks)?;
        let key = key.as_ref();
        if self.serializable() {
            self.reads.insert((ks.id(), key.to_vec()));
        }
        self.read(ks, key)
    }

    /// `get`, and at any isolation level the commit fails if another commit wrote `key` after
    /// the snapshot (RocksDB's `GetForUpdate`): a snapshot-isolated transaction uses it for
    /// the keys its writes depend on.
    pub fn get_for_update(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.check_handle(ks)?;
        let key = key.as_ref();
        self.reads.insert((ks.id(), key.to_vec()));
        self.read(ks, key)
    }

    fn read(&self, ks: &Keyspace, key: &[u8]) -> Result<Option<Value>> {
        if let Some(own) = self.pending.get(&ks.id()).and_then(|p| p.lookup(key)) {
            return Ok(own.map(Value::from));
        }
        ks.get_opt(&self.ro, key)
    }

    /// Many `get`s at once: the keys the transaction did not write are looked up together
    /// (`Keyspace::multi_get`). One entry per key, in order.
    pub fn multi_get<K: AsRef<[u8]>>(&mut self, ks: &Keyspace, keys: &[K]) -> Result<Vec<Option<Value>>> {
        self.check_handle(ks)?;
        if self.serializable() {
            self.reads.extend(keys.iter().map(|k| (ks.id(), k.as_ref().to_vec())));
        }
        let mut out: Vec<Option<Value>> = vec![None; keys.len()];
        let (mut asked_at, mut asked) = (Vec::new(), Vec::new());
        let own = self.pending.get(&ks.id());
        for (i, k) in keys.iter().map(AsRef::as_ref).enumerate() {
            match own.and_then(|p| p.lookup(k)) {
                Some(v) => out[i] = v.map(Value::from),
                None => {
                    asked_at.push(i);
                    asked.push(k);
                }
            }
        }
        if !asked.is_empty() {
            for (i, v) in asked_at.into_iter().zip(ks.multi_get(&self.ro, &asked)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// The entries of keyspace `ks` whose keys fall in `range`, the transaction's own writes
    /// merged in, as a double-ended iterator (see `Keyspace::range`). Serializable
    /// transactions check at commit that no key in the whole range was written since the
    /// snapshot (a phantom included), however far the iterator was read.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&mut self, ks: &Keyspace, range: R) -> Result<TxnRange> {
        self.check_handle(ks)?;
        let bounds = ks.range_bounds(range)?;
        self.bounded(ks, bounds)
    }

    /// The entries of `ks` whose keys start with `prefix` (see `range`).
    pub fn prefix(&mut self, ks: &Keyspace, prefix: impl AsRef<[u8]>) -> Result<TxnRange> {
        self.check_handle(ks)?;
        let bounds = ks.prefix_bounds(prefix.as_ref())?;
        self.bounded(ks, bounds)
    }

    /// A cursor over keyspace `ks` as the transaction sees it (RocksDB's
    /// `Transaction::GetIterator`): the snapshot's entries with the transaction's writes made
    /// so far merged in, moved with `seek`, `next` and `prev` like `Db::iter`'s. A cursor may
    /// go anywhere, so a serializable transaction that makes one checks at commit that no key
    /// of the whole keyspace was written since the snapshot (`range` bounds that check).
    pub fn iter(&mut self, ks: &Keyspace) -> Result<TxnCursor> {
        self.check_handle(ks)?;
        if self.serializable() {
            self.scanned.push((ks.id(), None, None));
        }
        let order = self.db.table_cache.order().clone();
        let (own, deleted) = self.own_writes(ks, &order, |_| true);
        Ok(TxnCursor::new(ks.iter(&self.ro)?, own, deleted, order))
    }

    fn bounded(&mut self, ks: &Keyspace, (lower, upper): Bounds) -> Result<TxnRange> {
        if self.serializable() {
            self.scanned.push((ks.id(), lower.clone(), upper.clone()));
        }
        let order = self.db.table_cache.order().clone();
        let inner = ks.bounded(&self.ro, lower.clone(), upper.clone())?;
        let within = |k: &[u8]| {
            lower.as_deref().is_none_or(|l| order.compare_user(k, l).is_ge())
                && upper.as_deref().is_none_or(|u| order.compare_user(k, u).is_lt())
        };
        let (own, deleted) = self.own_writes(ks, &order, within);
        Ok(TxnRange { inner, own: own.into(), deleted, order, front: None, back: None })
    }

    /// The transaction's point writes in `ks` whose keys pass `within`, in `order` (`None`:
    /// deleted), and its range deletes there: what a range or cursor merges with the snapshot.
    #[allow(clippy::type_complexity)]
    fn own_writes(
        &self,
        ks: &Keyspace,
        order: &KeyOrder,
        within: impl Fn(&[u8]) -> bool,
    ) -> (Vec<(Vec<u8>, Option<Vec<u8>>)>, Vec<(Vec<u8>, Vec<u8>)>) {
        let Some(p) = self.pending.get(&ks.id()) else { return (Vec::new(), Vec::new()) };
        let mut own: Vec<_> = p.points.iter().filter(|(k, _)| within(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        own.sort_by(|a, b| order.compare_user(&a.0, &b.0));
        (own, p.ranges.clone())
    }

    fn pending(&mut self, ks: &Keyspace) -> Result<&mut Pending> {
        self.check_handle(ks)?;
        Ok(self.pending.entry(ks.id()).or_default())
    }

    /// Set `key` to `value` in keyspace `ks` when the transaction commits.
    pub fn put(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref().to_vec(), value.as_ref().to_vec());
        let p = self.pending(ks)?;
        p.ttls.remove(&key);
        p.points.insert(key, Some(value));
        Ok(())
    }

    /// Set `key` to `value` in keyspace `ks` when the transaction commits, expiring `ttl`
    /// after the commit is written (`Db::put_with_ttl`). Within the transaction the value reads
    /// as written. A zero or overflowing `ttl` is `Error::InvalidTtl` at once.
    pub fn put_with_ttl(
        &mut self,
        ks: &Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        let (key, value) = (key.as_ref().to_vec(), value.as_ref().to_vec());
        crate::ttl::ttl_ms(&key, ttl)?;
        let p = self.pending(ks)?;
        p.ttls.insert(key.clone(), ttl);
        p.points.insert(key, Some(value));
        Ok(())
    }

    /// Remove `key` from keyspace `ks` when the transaction commits.
    pub fn delete(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<()> {
        let p = self.pending(ks)?;
        p.ttls.remove(key.as_ref());
        p.points.insert(key.as_ref().to_vec(), None);
        Ok(())
    }

    /// Remove every key in `[begin, end)` of keyspace `ks` when the transaction commits (one
    /// range tombstone). The commit fails if another commit wrote in the range after the
    /// snapshot, at either isolation level. Bytewise key order only; `begin > end` is an
    /// invalid argument.
    pub fn delete_range(&mut self, ks: &Keyspace, begin: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let (begin, end) = (begin.as_ref(), end.as_ref());
        if !self.db.table_cache.order().is_bytewise() {
            return Err(Error::invalid("delete_range is not supported under a custom comparator"));
        }
        if begin > end {
            return Err(Error::invalid(format!("delete_range: begin {begin:?} is past end {end:?}")));
        }
        let p = self.pending(ks)?;
        p.points.retain(|k, _| !(begin <= k.as_slice() && k.as_slice() < end));
        p.ttls.retain(|k, _| !(begin <= k.as_slice() && k.as_slice() < end));
        p.ranges.push((begin.to_vec(), end.to_vec()));
        Ok(())
    }

    /// Check and write: `Error::Conflict` (nothing written; run the transaction again) if
    /// another commit after the snapshot wrote what the isolation level checks, else every
    /// write of the transaction, atomically, as one batch. A transaction that wrote nothing
    /// commits at once: its reads were of one snapshot.
    pub fn commit(self) -> Result<()> {
        let Transaction { db, ro, seq, mem, opts, pending, reads, scanned } = self;
        if pending.values().all(|p| p.points.is_empty() && p.ranges.is_empty()) {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        let mut keys = reads;
        let mut ranges = scanned;
        for (&ks, p) in &pending {
            for (b, e) in &p.ranges {
                batch.delete_range_raw(ks, b, e);
                ranges.push((ks, Some(b.clone()), Some(e.clone())));
            }
            for (k, v) in &p.points {
                match (v, p.ttls.get(k)) {
                    (Some(v), Some(&ttl)) => batch.push_with_ttl(ks, k, v, ttl),
                    (Some(v), None) => batch.put_raw(ks, k, v),
                    (None, _) => batch.delete_raw(ks, k),
                };
                keys.insert((ks, k.clone()));
            }
        }
        let check = TxnCheck { at: CheckedAt { seq, mem }, keys: keys.into_iter().collect(), ranges };
        db.writes.commit_transaction(&db, opts.sync, batch, check)?;
        add(&db.counters.transactions_committed, 1);
        // The snapshot is held to here: compaction keeps every entry newer than it.
        drop(ro);
        Ok(())
    }

    /// End the transaction without writing anything (dropping it does the same).
    pub fn rollback(self) {}
}

/// A transaction's view of a key range (`Transaction::range`, `prefix`): the snapshot's
/// entries merged with the transaction's own writes (which win; its deletes hide entries),
/// ascending from the front and descending from the back.
pub struct TxnRange {
    inner: Range,
    /// The transaction's point writes in the range, in key order (`None`: deleted).
    own: VecDeque<(Vec<u8>, Option<Vec<u8>>)>,
    /// The transaction's range deletes in this keyspace: they hide the snapshot's entries.
    deleted: Vec<(Vec<u8>, Vec<u8>)>,
    order: KeyOrder,
    /// The snapshot's entry the front (back) end took from `inner` and has not returned yet.
    /// The unreturned snapshot entries are `front`, then what `inner` still holds, then
    /// `back`: once `inner` is used up, one end's next entry may be the other end's.
    front: Option<(Vec<u8>, Value)>,
    back: Option<(Vec<u8>, Value)>,
}

/// Which source an end of a `TxnRange` takes its next entry from.
enum Next {
    Own,
    Snapshot,
    Done,
}

impl TxnRange {
    /// Fill the front (`forward`) or back slot from the snapshot; `Err` on a read error.
    fn fill(&mut self, forward: bool) -> Result<()> {
        loop {
            let slot_full = if forward { self.front.is_some() } else { self.back.is_some() };
            if slot_full {
                return Ok(());
            }
            let item = if forward { self.inner.next() } else { self.inner.next_back() };
            let entry = match item {
                Some(r) => r?,
                None => {
                    // `inner` is used up: the other end's entry is the last one left.
                    if forward {
                        self.front = self.back.take();
                    } else {
                        self.back = self.front.take();
                    }
                    return Ok(());
                }
            };
            if !range_deleted(&self.deleted, &entry.0) {
                if forward {
                    self.front = Some(entry);
                } else {
                    self.back = Some(entry);
                }
            }
        }
    }

    fn step(&mut self, forward: bool) -> Option<Result<(Vec<u8>, Value)>> {
        loop {
            if let Err(e) = self.fill(forward) {
                return Some(Err(e));
            }
            let (snap, own) = match forward {
                true => (self.front.as_ref().map(|e| &e.0), self.own.front().map(|e| &e.0)),
                false => (self.back.as_ref().map(|e| &e.0), self.own.back().map(|e| &e.0)),
            };
            let next = match (snap, own) {
                (None, None) => Next::Done,
                (None, Some(_)) => Next::Own,
                (Some(_), None) => Next::Snapshot,
                (Some(s), Some(o)) => match (self.order.compare_user(o, s), forward) {
                    (std::cmp::Ordering::Equal, _) => {
                        // The transaction's write replaces the snapshot's entry.
                        if forward {
                            self.front = None;
                        } else {
                            self.back = None;
                        }
                        Next::Own
                    }
                    (std::cmp::Ordering::Less, true) | (std::cmp::Ordering::Greater, false) => Next::Own,
                    _ => Next::Snapshot,
                },
            };
            match next {
                Next::Done => return None,
                Next::Snapshot => return (if forward { self.front.take() } else { self.back.take() }).map(Ok),
                Next::Own => {
                    let (k, v) = (if forward { self.own.pop_front() } else { self.own.pop_back() })?;
                    if let Some(v) = v {
                        return Some(Ok((k, Value::from(v))));
                    }
                }
            }
        }
    }
}

impl Iterator for TxnRange {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

impl DoubleEndedIterator for TxnRange {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}
