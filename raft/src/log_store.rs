//! The Raft log on wisckey (openraft's `RaftLogStorage`): entries in the `raft-log` keyspace
//! under their big-endian index, the vote, committed and purged log ids in `raft-meta`.
//! Appends and votes are synced before they are acknowledged; purges and truncations are
//! range tombstones, whose values value-log GC then reclaims.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, OptionalSend, RaftLogReader, StorageIOError, Vote};
use wisckey::{ReadOptions, WriteBatch, WriteOptions};

use crate::{io_err, meta_key, to_json, Entry, Shared, StorageResult, TypeConfig};

/// Past every log key (keys are 8 bytes): the exclusive end of a range up to the last index.
const PAST_LAST_INDEX: [u8; 9] = [0xFF; 9];

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
fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
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

fn decode_entry(bytes: &[u8]) -> StorageResult<Entry> {
    serde_json::from_slice(bytes).map_err(|e| io_err(StorageIOError::read_logs, &e).into())
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

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let Some((lower, upper)) = key_bounds(&range) else {
            return Ok(Vec::new());
        };
        let ro = ReadOptions { lower_bound: Some(lower), upper_bound: upper, ..ReadOptions::default() };
        let entries = self.s.log.scan(&ro).map_err(|e| io_err(StorageIOError::read_logs, &e))?;
        entries
            .map(|item| {
                let (_, bytes) = item.map_err(|e| io_err(StorageIOError::read_logs, &e))?;
                decode_entry(&bytes)
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<u64>> =
            self.s.read_meta(&ReadOptions::default(), meta_key::PURGED, StorageIOError::read_logs)?;
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
        for entry in entries {
            let bytes = to_json(&entry, StorageIOError::write_logs)?;
            batch.put_in(&self.s.log, index_key(entry.log_id.index), bytes);
        }
        if !batch.is_empty() {
            self.s.db.write(&WriteOptions::synced(), &batch).map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    /// Removes the entries from `log_id`'s index on: one range tombstone. Not synced: the
    /// appends that follow are, and a synced write makes every earlier one durable.
    async fn truncate(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        self.s
            .log
            .delete_range(index_key(log_id.index), PAST_LAST_INDEX)
            .map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        Ok(())
    }

    /// Removes the entries up to `log_id` and records it as the last purged, in one batch.
    async fn purge(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        let mut batch = WriteBatch::new();
        batch.put_in(&self.s.meta, meta_key::PURGED, to_json(&log_id, StorageIOError::write_logs)?);
        match log_id.index.checked_add(1) {
            Some(end) => batch.delete_range_in(&self.s.log, index_key(0), index_key(end)),
            None => batch.delete_range_in(&self.s.log, index_key(0), PAST_LAST_INDEX),
        };
        self.s.db.write(&WriteOptions::default(), &batch).map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        Ok(())
    }
}
