//! The key-value state machine on RocksDB (openraft's `RaftStateMachine`): keys and values in
//! column family `sm_data`, the last applied log id and the membership in `sm_meta`, written
//! in the same batch so a crash never separates them. A snapshot is `sm_data`'s pairs read at
//! one RocksDB snapshot, kept in `sm_meta` until the next; installing one replaces `sm_data`'s
//! contents in one synced batch.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError,
    StoredMembership,
};
use rocksdb::{IteratorMode, ReadOptions, SnapshotWithThreadMode, WriteBatch, DB};
use wisckey_raft::{Entry, Request, Response, SnapshotFile, TypeConfig};

use crate::{io_err, meta_key, synced, to_json, Shared, StorageResult, CF_SM_DATA, CF_SM_META};

/// Past every state key: keys are UTF-8, which never holds the byte 0xFF.
const PAST_LAST_KEY: [u8; 1] = [0xFF];

/// The last applied log id and the membership it brought.
type AppliedState = (Option<LogId<u64>>, StoredMembership<u64, BasicNode>);

/// A snapshot's data: the state's pairs in key order, as JSON.
type SnapshotPairs = Vec<(String, String)>;

/// The replicated key-value state of one node: a cheap handle (clones share the database),
/// which is also its own snapshot builder.
#[derive(Clone)]
pub struct RocksStateMachine {
    s: Shared,
    /// Snapshots built by this process, to make snapshot ids unique.
    built: Arc<AtomicU64>,
}

impl Debug for RocksStateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStateMachine").field("path", &self.s.db.path()).finish()
    }
}

/// Read options reading as of `snapshot`.
fn at(snapshot: &SnapshotWithThreadMode<'_, DB>) -> ReadOptions {
    let mut ro = ReadOptions::default();
    ro.set_snapshot(snapshot);
    ro
}

fn read_snapshot(e: openraft::AnyError) -> StorageIOError<u64> {
    StorageIOError::read_snapshot(None, e)
}

fn write_snapshot(e: openraft::AnyError) -> StorageIOError<u64> {
    StorageIOError::write_snapshot(None, e)
}

impl RocksStateMachine {
    pub(crate) fn new(s: Shared) -> RocksStateMachine {
        RocksStateMachine { s, built: Arc::default() }
    }

    /// The RocksDB database under the store (for its statistics).
    pub fn db(&self) -> &Arc<DB> {
        &self.s.db
    }

    /// The value of `key` in the applied state (a local read: linearizable reads go through
    /// openraft first).
    pub fn get(&self, key: &str) -> Result<Option<String>, rocksdb::Error> {
        let value = self.s.db.get_pinned_cf(self.s.cf(CF_SM_DATA), key)?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// The applied state's pairs with `start <= key < end` (`end` `None`: to the last key), at
    /// most `limit` of them, in key order.
    pub fn scan(&self, start: &str, end: Option<&str>, limit: usize) -> Result<SnapshotPairs, rocksdb::Error> {
        let mut ro = ReadOptions::default();
        if let Some(end) = end {
            ro.set_iterate_upper_bound(end.as_bytes());
        }
        let mode = IteratorMode::From(start.as_bytes(), rocksdb::Direction::Forward);
        let mut pairs = Vec::new();
        for item in self.s.db.iterator_cf_opt(self.s.cf(CF_SM_DATA), ro, mode).take(limit) {
            let (k, v) = item?;
            pairs.push((String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned()));
        }
        Ok(pairs)
    }

    fn applied_at(&self, ro: &ReadOptions) -> StorageResult<AppliedState> {
        let read = StorageIOError::read_state_machine;
        let applied = self.s.read_json_opt(CF_SM_META, meta_key::APPLIED, ro, read)?.flatten();
        let membership = self.s.read_json_opt(CF_SM_META, meta_key::MEMBERSHIP, ro, read)?;
        Ok((applied, membership.unwrap_or_default()))
    }

    /// The state's pairs as of `ro`, in key order.
    fn pairs_at(&self, ro: ReadOptions) -> StorageResult<SnapshotPairs> {
        let read = |e: &dyn std::error::Error| StorageIOError::read_state_machine(openraft::AnyError::error(e));
        let entries = self.s.db.iterator_cf_opt(self.s.cf(CF_SM_DATA), ro, IteratorMode::Start);
        entries
            .map(|item| {
                let (k, v) = item.map_err(|e| read(&e))?;
                let k = String::from_utf8(k.into_vec()).map_err(|e| read(&e))?;
                Ok((k, String::from_utf8_lossy(&v).into_owned()))
            })
            .collect()
    }

    /// The current snapshot's metadata and data.
    fn stored_snapshot(&self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let Some(meta) = self.s.read_json(CF_SM_META, meta_key::SNAPSHOT_META, read_snapshot)? else {
            return Ok(None);
        };
        let data =
            self.s.db.get_cf(self.s.cf(CF_SM_META), meta_key::SNAPSHOT_DATA).map_err(|e| io_err(read_snapshot, &e))?;
        Ok(Some(Snapshot { meta, snapshot: Box::new(SnapshotFile::from_bytes(data.unwrap_or_default())) }))
    }

    /// Queue `meta` and `data` as the current snapshot into `batch`.
    fn put_snapshot(
        &self,
        batch: &mut WriteBatch,
        meta: &SnapshotMeta<u64, BasicNode>,
        data: &[u8],
    ) -> StorageResult<()> {
        let cf = self.s.cf(CF_SM_META);
        batch.put_cf(cf, meta_key::SNAPSHOT_META, to_json(meta, write_snapshot)?);
        batch.put_cf(cf, meta_key::SNAPSHOT_DATA, data);
        Ok(())
    }

    /// Queue the writes of `request` into `batch` and say what applying it answers.
    fn queue(&self, batch: &mut WriteBatch, request: Request) -> Response {
        let cf = self.s.cf(CF_SM_DATA);
        match request {
            Request::Set { key, value } => {
                batch.put_cf(cf, &key, &value);
                Response { value: Some(value) }
            }
            Request::Delete { key } => {
                batch.delete_cf(cf, &key);
                Response::default()
            }
            // Its writes join the entry's batch, so they land together; a batch holds only
            // sets and deletes (the server builds no nested ones), as the wisckey store assumes.
            Request::Batch(requests) => {
                for request in requests {
                    if !matches!(request, Request::Batch(_)) {
                        self.queue(batch, request);
                    }
                }
                Response::default()
            }
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for RocksStateMachine {
    /// The applied state and the pairs read at one RocksDB snapshot, so they agree whatever is
    /// applied meanwhile.
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let snap = self.s.db.snapshot();
        let (last_log_id, last_membership) = self.applied_at(&at(&snap))?;
        let data = to_json(&self.pairs_at(at(&snap))?, write_snapshot)?;
        drop(snap);
        let n = self.built.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = match &last_log_id {
            Some(id) => format!("{}-{}-{n}", id.leader_id, id.index),
            None => format!("--{n}"),
        };
        let meta = SnapshotMeta { last_log_id, last_membership, snapshot_id };
        let mut batch = WriteBatch::default();
        self.put_snapshot(&mut batch, &meta, &data)?;
        // Not synced: a crash that loses it also loses the purge that would follow it.
        self.s.db.write(batch).map_err(|e| io_err(write_snapshot, &e))?;
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotFile::from_bytes(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for RocksStateMachine {
    type SnapshotBuilder = RocksStateMachine;

    async fn applied_state(&mut self) -> StorageResult<AppliedState> {
        self.applied_at(&ReadOptions::default())
    }

    /// One batch for all `entries`: their writes, the last applied id and any new membership
    /// land together. Not synced: the entries are in the synced log and are applied again
    /// after a crash that loses this.
    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::default();
        let mut replies = Vec::new();
        let mut last_applied = None;
        let mut membership = None;
        for entry in entries {
            last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(request) => self.queue(&mut batch, request),
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(entry.log_id), m));
                    Response::default()
                }
            };
            replies.push(reply);
        }
        let Some(applied) = last_applied else {
            return Ok(replies);
        };
        let write = StorageIOError::write_state_machine;
        let cf = self.s.cf(CF_SM_META);
        batch.put_cf(cf, meta_key::APPLIED, to_json(&Some(applied), write)?);
        if let Some(m) = &membership {
            batch.put_cf(cf, meta_key::MEMBERSHIP, to_json(m, write)?);
        }
        self.s.db.write(batch).map_err(|e| StorageIOError::apply(applied, openraft::AnyError::new(&e)))?;
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<SnapshotFile>> {
        Ok(Box::new(SnapshotFile::from_bytes(Vec::new())))
    }

    /// Replaces the state with the snapshot's pairs in one synced batch: a range delete over
    /// all of `sm_data`, the pairs, the applied id, the membership, and the snapshot itself as
    /// the current one. Data that does not decode is an error and changes nothing.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<SnapshotFile>,
    ) -> StorageResult<()> {
        let data = snapshot
            .into_bytes()
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), openraft::AnyError::new(&e)))?;
        let pairs: SnapshotPairs = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), openraft::AnyError::new(&e)))?;
        let mut batch = WriteBatch::default();
        let cf = self.s.cf(CF_SM_DATA);
        batch.delete_range_cf(cf, &b""[..], &PAST_LAST_KEY[..]);
        for (k, v) in &pairs {
            batch.put_cf(cf, k, v);
        }
        let write = StorageIOError::write_state_machine;
        let meta_cf = self.s.cf(CF_SM_META);
        batch.put_cf(meta_cf, meta_key::APPLIED, to_json(&meta.last_log_id, write)?);
        batch.put_cf(meta_cf, meta_key::MEMBERSHIP, to_json(&meta.last_membership, write)?);
        self.put_snapshot(&mut batch, meta, &data)?;
        self.s.db.write_opt(batch, &synced()).map_err(|e| io_err(write_snapshot, &e))?;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        self.stored_snapshot()
    }
}
