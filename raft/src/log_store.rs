//! The Raft log on wisckey (openraft's `RaftLogStorage`): entries in the `raft-log` keyspace
//! under their big-endian index without their `Set`s' values, which go to `raft-values`
//! (written once: the state refers to them, module `values`); the vote, committed and purged
//! log ids in `raft-meta`. Appends and votes are synced before they are acknowledged; purges
//! and truncations are range tombstones (a purge keeps the values the state still refers to),
//! whose space value-log GC then reclaims.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, OptionalSend, RaftLogReader, StorageIOError, Vote};
use wisckey::{ReadOptions, WriteBatch, WriteOptions};

use crate::values::{self, StateValue, ValueAt};
use crate::{io_err, meta_key, to_json, Entry, Shared, StorageResult, TypeConfig};

/// Past every log key (keys are 8 bytes): the exclusive end of a range up to the last index.
const PAST_LAST_INDEX: [u8; 9] = [0xFF; 9];
/// Past every `raft-values` key (keys are 12 bytes).
const PAST_LAST_VALUE: [u8; 13] = [0xFF; 13];

/// The exclusive ends of the keys of the entries up to `index` (inclusive): in `raft-log`, and
/// of their values in `raft-values` (past every key when `index` is the last one there is).
pub(crate) fn ends_through(index: u64) -> (Vec<u8>, Vec<u8>) {
    match index.checked_add(1) {
        Some(next) => (index_key(next).to_vec(), ValueAt::first_of(next).to_vec()),
        None => (PAST_LAST_INDEX.to_vec(), PAST_LAST_VALUE.to_vec()),
    }
}

/// The Raft log of one node: a cheap handle (clones share the database), which is also its
/// own log reader.
#[derive(Clone)]
pub struct LogStore {
    s: Shared,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("log", &self.s.log).finish()
    }
}

/// The key of the entry at `index`: big-endian, so that key order is index order.
pub(crate) fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The first `raft-values` key of the entry whose `raft-log` key is `log_key` (8 bytes).
fn lower_value_key(log_key: &[u8]) -> [u8; 12] {
    let mut index = [0u8; 8];
    index.copy_from_slice(&log_key[..8]);
    ValueAt::first_of(u64::from_be_bytes(index))
}

impl LogStore {
    pub(crate) fn new(s: Shared) -> LogStore {
        LogStore { s }
    }

    /// The database under the store (for its statistics, flushes and GC).
    pub fn db(&self) -> &std::sync::Arc<wisckey::Db> {
        &self.s.db
    }

    /// The entry with the highest index, if the log holds any.
    fn last_entry(&self) -> StorageResult<Option<Entry>> {
        let mut newest =
            self.s.log.scan_rev(&ReadOptions::default()).map_err(|e| io_err(StorageIOError::read_logs, &e))?;
        match newest.next() {
            None => Ok(None),
            Some(item) => {
                let (_, bytes) = item.map_err(|e| io_err(StorageIOError::read_logs, &e))?;
                Ok(Some(decode_entry(&bytes)?))
            }
        }
    }

    /// Write metadata key `key`; `kind` names what failed.
    fn write_meta<T: serde::Serialize>(
        &self,
        key: &[u8],
        value: &T,
        wo: &WriteOptions,
        kind: fn(openraft::AnyError) -> StorageIOError<u64>,
    ) -> StorageResult<()> {
        let bytes = to_json(value, kind)?;
        self.s.meta.put_opt(wo, key, bytes).map_err(|e| io_err(kind, &e))?;
        Ok(())
    }
}

/// An entry as `raft-log` keeps it: its `Set`s' values are empty (they are in `raft-values`).
fn decode_entry(bytes: &[u8]) -> StorageResult<Entry> {
    serde_json::from_slice(bytes).map_err(|e| io_err(StorageIOError::read_logs, &e).into())
}

/// `entries` (as `raft-log` keeps them, in index order) with their values put back from
/// `found`, the `raft-values` pairs of their indexes in key order, read at the same snapshot.
fn join_values(entries: Vec<Entry>, found: Vec<(Vec<u8>, wisckey::Value)>) -> StorageResult<Vec<Entry>> {
    let mut found = found.into_iter().peekable();
    entries
        .into_iter()
        .map(|mut entry| {
            let index = entry.log_id.index;
            let mut next = |pos: u32| {
                let want = ValueAt { index, pos }.key();
                // Skip values of entries that are not asked for (none are, but a stray one
                // must not shift the rest).
                while found.peek().is_some_and(|(k, _)| k.as_slice() < want.as_slice()) {
                    found.next();
                }
                match found.peek() {
                    Some((k, _)) if k.as_slice() == want.as_slice() => {
                        found.next().map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
                    }
                    _ => None,
                }
            };
            values::put_values(&mut entry, &mut next).map_err(|pos| {
                let what = format!("the value of log entry {index}'s Set #{pos} is missing from raft-values");
                io_err(StorageIOError::read_logs, &std::io::Error::new(std::io::ErrorKind::NotFound, what))
            })?;
            Ok(entry)
        })
        .collect()
}

/// `range` as the keys `[begin, end)` of the log keyspace; `None` when it holds no index.
fn key_bounds<RB: RangeBounds<u64>>(range: &RB) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let start = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&i) => i.checked_add(1),
        Bound::Excluded(&i) => Some(i),
        Bound::Unbounded => None,
    };
    if end.is_some_and(|end| start >= end) {
        return None;
    }
    Some((index_key(start).to_vec(), end.map(|e| index_key(e).to_vec())))
}

impl LogStore {
    /// Queue deletes of the values of entries up to `upto` (from the last purged on) that
    /// the state does not refer to. The caller holds the value-ownership lock.
    /// How far a purge asked to reach `log_id` goes. openraft purges the log up to a
    /// snapshot's last entry as soon as it hands the snapshot to the state machine to
    /// install, before the install has checked its file, let alone written its intent: were
    /// that purge to land and the install then fail (openraft stops on it) or a crash come
    /// first, the node would restart with its state at A and its log gone past A, unable to
    /// apply again. So while a snapshot is received or installed a purge stops at the applied
    /// entry (`None`: nothing to purge), and the install's last batch purges up to the
    /// snapshot's last entry itself, in the batch that moves the applied id there.
    /// The caller holds the value-ownership lock.
    fn purge_bound(&self, log_id: LogId<u64>) -> StorageResult<Option<LogId<u64>>> {
        if !self.s.installing.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(Some(log_id));
        }
        let ro = ReadOptions::default();
        let applied = self.s.read_meta::<Option<LogId<u64>>>(&ro, meta_key::APPLIED, StorageIOError::read_logs)?;
        let bound = match applied.flatten() {
            Some(a) if a.index < log_id.index => Some(a),
            Some(_) => Some(log_id),
            None => None,
        };
        let purged = self.s.purged(StorageIOError::read_logs)?;
        let bound = bound.filter(|b| Some(b.index) > purged.map(|p| p.index));
        if bound != Some(log_id) {
            tracing::info!(asked = %log_id, ?bound, "a snapshot is being installed: the log is purged no further than the applied state");
        }
        Ok(bound)
    }

    fn drop_unreferenced_values(&self, upto: u64, batch: &mut WriteBatch) -> StorageResult<()> {
        let read = |e: wisckey::Error| io_err(StorageIOError::read_logs, &e);
        let purged = self.s.purged(StorageIOError::read_logs)?;
        let from = purged.map_or(0, |p| p.index.saturating_add(1));
        let Some(end) = upto.checked_add(1) else { return Ok(()) };
        if from >= end {
            return Ok(());
        }
        let ro = ReadOptions {
            lower_bound: Some(index_key(from).to_vec()),
            upper_bound: Some(index_key(end).to_vec()),
            ..ReadOptions::default()
        };
        for item in self.s.log.scan(&ro).map_err(read)? {
            let (_, bytes) = item.map_err(read)?;
            let entry = decode_entry(&bytes)?;
            let openraft::EntryPayload::Normal(request) = &entry.payload else { continue };
            let index = entry.log_id.index;
            let mut sets = Vec::new();
            values::for_each_set(request, &mut |pos, key, _| sets.push((pos, key.to_owned())));
            for (pos, key) in sets {
                let at = ValueAt { index, pos };
                let current = self.s.state.get(&key).map_err(read)?;
                if current.as_deref().and_then(StateValue::place) != Some(at) {
                    batch.delete_in(&self.s.values, at.key());
                }
            }
        }
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let Some((lower, upper)) = key_bounds(&range) else {
            return Ok(Vec::new());
        };
        let read = |e: wisckey::Error| io_err(StorageIOError::read_logs, &e);
        // One snapshot for the entries and their values: a purge between the two reads
        // could otherwise take values away from entries already read.
        let snapshot = Some(self.s.db.snapshot());
        let value_bounds = (lower_value_key(&lower), upper.as_deref().map(lower_value_key));
        let ro = ReadOptions {
            lower_bound: Some(lower),
            upper_bound: upper,
            snapshot: snapshot.clone(),
            ..ReadOptions::default()
        };
        let entries = self.s.log.scan(&ro).map_err(read)?;
        let entries = entries
            .map(|item| {
                let (_, bytes) = item.map_err(read)?;
                decode_entry(&bytes)
            })
            .collect::<StorageResult<Vec<Entry>>>()?;
        let ro = ReadOptions {
            lower_bound: Some(value_bounds.0.to_vec()),
            upper_bound: value_bounds.1.map(|k| k.to_vec()),
            snapshot,
            ..ReadOptions::default()
        };
        let found = self.s.values.scan(&ro).map_err(read)?.collect::<Result<Vec<_>, _>>().map_err(read)?;
        join_values(entries, found)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged = self.s.purged(StorageIOError::read_logs)?;
        // An empty log's last id is the last purged one.
        let last = self.last_entry()?.map(|e| e.log_id).or(last_purged);
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Synced: a vote must survive a crash before the node answers with it.
    async fn save_vote(&mut self, vote: &Vote<u64>) -> StorageResult<()> {
        self.write_meta(meta_key::VOTE, vote, &WriteOptions::synced(), StorageIOError::write_vote)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<u64>>> {
        self.s.read_meta(&ReadOptions::default(), meta_key::VOTE, StorageIOError::read_vote)
    }

    /// Not synced: losing it in a crash only makes the node learn it again from the leader.
    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> StorageResult<()> {
        self.write_meta(meta_key::COMMITTED, &committed, &WriteOptions::default(), StorageIOError::write)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<u64>>> {
        Ok(self.s.read_meta(&ReadOptions::default(), meta_key::COMMITTED, StorageIOError::read)?.flatten())
    }

    /// One synced batch; openraft hears of the flush only once it has returned.
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::new();
        for mut entry in entries {
            let index = entry.log_id.index;
            for (pos, value) in (0u32..).zip(values::take_values(&mut entry)) {
                batch.put_in(&self.s.values, ValueAt { index, pos }.key(), value);
            }
            let bytes = to_json(&entry, StorageIOError::write_logs)?;
            batch.put_in(&self.s.log, index_key(index), bytes);
        }
        if !batch.is_empty() {
            self.s.db.write(&WriteOptions::synced(), &batch).map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    /// Removes the entries from `log_id`'s index on and their values: two range tombstones
    /// in one batch (uncommitted entries were never applied, so the state refers to none of
    /// their values). Not synced: the appends that follow are, and a synced write makes every
    /// earlier one durable.
    async fn truncate(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        let mut batch = WriteBatch::new();
        batch.delete_range_in(&self.s.log, index_key(log_id.index), PAST_LAST_INDEX);
        batch.delete_range_in(&self.s.values, ValueAt::first_of(log_id.index), PAST_LAST_VALUE);
        self.s.db.write(&WriteOptions::default(), &batch).map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        Ok(())
    }

    /// Removes the entries up to `log_id`, and the values of theirs the state does not refer
    /// to, and records `log_id` as the last purged, in one batch (under the value-ownership
    /// lock: from then on, whoever drops a reference to one of these values deletes it).
    /// While a snapshot is received or installed, no further than the applied state (see
    /// `purge_bound`).
    async fn purge(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        let _owner = self.s.own_values();
        let Some(log_id) = self.purge_bound(log_id)? else { return Ok(()) };
        let mut batch = WriteBatch::new();
        self.drop_unreferenced_values(log_id.index, &mut batch)?;
        batch.put_in(&self.s.meta, meta_key::PURGED, to_json(&log_id, StorageIOError::write_logs)?);
        batch.delete_range_in(&self.s.log, index_key(0), ends_through(log_id.index).0);
        self.s.db.write(&WriteOptions::default(), &batch).map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        Ok(())
    }
}
