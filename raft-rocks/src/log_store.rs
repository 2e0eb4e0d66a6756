//! The Raft log on RocksDB (openraft's `RaftLogStorage`): entries in column family `logs`
//! under their big-endian index, the vote, committed and purged log ids in `meta`. Appends and
//! votes are synced before they are acknowledged; purges and truncations are range deletes.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, OptionalSend, RaftLogReader, StorageIOError, Vote};
use rocksdb::{IteratorMode, ReadOptions, WriteBatch};
use wisckey_raft::{Entry, TypeConfig};

use crate::{io_err, meta_key, synced, to_json, Shared, StorageResult, CF_LOGS, CF_META};

/// Past every log key (keys are 8 bytes): the exclusive end of a range up to the last index.
const PAST_LAST_INDEX: [u8; 9] = [0xFF; 9];

/// The Raft log of one node: a cheap handle (clones share the database), which is also its
/// own log reader.
#[derive(Clone)]
pub struct RocksLogStore {
    s: Shared,
}

impl Debug for RocksLogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksLogStore").field("path", &self.s.db.path()).finish()
    }
}

/// The key of the entry at `index`: big-endian, so that key order is index order.
fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn decode_entry(bytes: &[u8]) -> StorageResult<Entry> {
    serde_json::from_slice(bytes).map_err(|e| io_err(StorageIOError::read_logs, &e).into())
}

/// `range` as the keys `[begin, end)` of the log; `None` when it holds no index.
fn key_bounds<RB: RangeBounds<u64>>(range: &RB) -> Option<([u8; 8], Option<[u8; 8]>)> {
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
    Some((index_key(start), end.map(index_key)))
}

impl RocksLogStore {
    pub(crate) fn new(s: Shared) -> RocksLogStore {
        RocksLogStore { s }
    }

    /// The RocksDB database under the store (for its statistics).
    pub fn db(&self) -> &std::sync::Arc<rocksdb::DB> {
        &self.s.db
    }

    /// The entry with the highest index, if the log holds any.
    fn last_entry(&self) -> StorageResult<Option<Entry>> {
        let mut newest = self.s.db.iterator_cf(self.s.cf(CF_LOGS), IteratorMode::End);
        match newest.next() {
            None => Ok(None),
            Some(item) => {
                let (_, bytes) = item.map_err(|e| io_err(StorageIOError::read_logs, &e))?;
                Ok(Some(decode_entry(&bytes)?))
            }
        }
    }

    /// Write `meta` key `key`; `kind` names what failed.
    fn write_meta<T: serde::Serialize>(
        &self,
        key: &[u8],
        value: &T,
        wo: &rocksdb::WriteOptions,
        kind: fn(openraft::AnyError) -> StorageIOError<u64>,
    ) -> StorageResult<()> {
        let bytes = to_json(value, kind)?;
        self.s.db.put_cf_opt(self.s.cf(CF_META), key, bytes, wo).map_err(|e| io_err(kind, &e))?;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for RocksLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let Some((lower, upper)) = key_bounds(&range) else {
            return Ok(Vec::new());
        };
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(lower);
        if let Some(upper) = upper {
            ro.set_iterate_upper_bound(upper);
        }
        let entries = self.s.db.iterator_cf_opt(self.s.cf(CF_LOGS), ro, IteratorMode::Start);
        entries
            .map(|item| {
                let (_, bytes) = item.map_err(|e| io_err(StorageIOError::read_logs, &e))?;
                decode_entry(&bytes)
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for RocksLogStore {
    type LogReader = RocksLogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<u64>> = self.s.read_json(CF_META, meta_key::PURGED, StorageIOError::read_logs)?;
        // An empty log's last id is the last purged one.
        let last = self.last_entry()?.map(|e| e.log_id).or(last_purged);
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Synced: a vote must survive a crash before the node answers with it.
    async fn save_vote(&mut self, vote: &Vote<u64>) -> StorageResult<()> {
        self.write_meta(meta_key::VOTE, vote, &synced(), StorageIOError::write_vote)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<u64>>> {
        self.s.read_json(CF_META, meta_key::VOTE, StorageIOError::read_vote)
    }

    /// Not synced: losing it in a crash only makes the node learn it again from the leader.
    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> StorageResult<()> {
        let wo = rocksdb::WriteOptions::default();
        self.write_meta(meta_key::COMMITTED, &committed, &wo, StorageIOError::write)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<u64>>> {
        Ok(self.s.read_json(CF_META, meta_key::COMMITTED, StorageIOError::read)?.flatten())
    }

    /// One synced batch; openraft hears of the flush only once it has returned.
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let cf = self.s.cf(CF_LOGS);
        let mut batch = WriteBatch::default();
        for entry in entries {
            batch.put_cf(cf, index_key(entry.log_id.index), to_json(&entry, StorageIOError::write_logs)?);
        }
        if !batch.is_empty() {
            self.s.db.write_opt(batch, &synced()).map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    /// Removes the entries from `log_id`'s index on: one range delete. Not synced: the
    /// appends that follow are, and a synced write makes every earlier one durable.
    async fn truncate(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        let cf = self.s.cf(CF_LOGS);
        self.s
            .db
            .delete_range_cf(cf, &index_key(log_id.index)[..], &PAST_LAST_INDEX[..])
            .map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        Ok(())
    }

    /// Removes the entries up to `log_id` and records it as the last purged, in one batch.
    async fn purge(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.s.cf(CF_META), meta_key::PURGED, to_json(&log_id, StorageIOError::write_logs)?);
        let cf = self.s.cf(CF_LOGS);
        match log_id.index.checked_add(1) {
            Some(end) => batch.delete_range_cf(cf, index_key(0), index_key(end)),
            None => batch.delete_range_cf(cf, &index_key(0)[..], &PAST_LAST_INDEX[..]),
        }
        self.s.db.write(batch).map_err(|e| io_err(StorageIOError::write_logs, &e))?;
        Ok(())
    }
}
