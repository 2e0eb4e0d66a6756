//! The key-value state machine on wisckey (openraft's `RaftStateMachine`): keys in the
//! `raft-state` keyspace, each with a reference to its value where the log entry that set it
//! stored it (`raft-values`, written once) or, when small, with the value itself; the last
//! applied log id and the membership beside them in `raft-meta`, written in the same batch so
//! a crash never separates them. A snapshot is a checkpoint of the database (module
//! `snapshots`), sent as a stream of the state's pairs read out of it; installing one
//! replaces the state keyspace's contents from the received stream (module `install`), then
//! checkpoints the result as this node's snapshot.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError,
    StoredMembership,
};
use wisckey::{Keyspace, ReadOptions, WriteBatch, WriteOptions};

use crate::install::{self, Plan};
use crate::snapshot_file::SnapshotFile;
use crate::snapshots::{self, AppliedState};
use crate::values::{self, StateValue, ValueAt};
use crate::{io_err, meta_key, to_json, Entry, Request, Response, Shared, StorageResult, TypeConfig};

/// The replicated key-value state of one node: a cheap handle (clones share the database),
/// which is also its own snapshot builder.
#[derive(Clone)]
pub struct StateMachineStore {
    s: Shared,
}

impl Debug for StateMachineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachineStore").field("state", &self.s.state).finish()
    }
}

impl StateMachineStore {
    pub(crate) fn new(s: Shared) -> StateMachineStore {
        StateMachineStore { s }
    }

    /// The shared store (for tests of its locks).
    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Shared {
        &self.s
    }

    /// The value of `key` in the applied state (a local read: linearizable reads go through
    /// openraft first).
    pub fn get(&self, key: &str) -> wisckey::Result<Option<String>> {
        let ro = ReadOptions { snapshot: Some(self.s.db.snapshot()), ..ReadOptions::default() };
        let Some(stored) = self.s.state.get_opt(&ro, key)? else { return Ok(None) };
        resolve_in(&self.s.values, &ro, key.as_bytes(), &stored).map(Some)
    }

    /// The applied state's pairs with `start <= key < end` (`end` `None`: to the last key),
    /// at most `limit` of them, in key order, read at one database snapshot.
    pub fn scan(&self, start: &str, end: Option<&str>, limit: usize) -> wisckey::Result<Vec<(String, String)>> {
        let ro = ReadOptions {
            snapshot: Some(self.s.db.snapshot()),
            lower_bound: Some(start.as_bytes().to_vec()),
            upper_bound: end.map(|e| e.as_bytes().to_vec()),
            ..ReadOptions::default()
        };
        let mut out = Vec::new();
        for item in self.s.state.scan(&ro)?.take(limit) {
            let (k, stored) = item?;
            let v = resolve_in(&self.s.values, &ro, &k, &stored)?;
            out.push((String::from_utf8_lossy(&k).into_owned(), v));
        }
        Ok(out)
    }

    /// The database under the state machine (for its statistics).
    pub fn db(&self) -> &Arc<wisckey::Db> {
        &self.s.db
    }

    /// Install `data` as the state (see `install_snapshot`), writing as `plan` says.
    pub(crate) fn install_with(
        &self,
        meta: &SnapshotMeta<u64, BasicNode>,
        data: SnapshotFile,
        plan: Plan,
    ) -> StorageResult<()> {
        let sig = || Some(meta.signature());
        // Before anything can fail: openraft's purge up to the snapshot may run from now on.
        self.s.installing.store(true, std::sync::atomic::Ordering::Release);
        let checked = install::check(&self.s, data)
            .map_err(|e| StorageIOError::read_snapshot(sig(), openraft::AnyError::new(&e)))?;
        {
            let _owner = self.s.own_values();
            let applied = install::apply(&self.s, meta, checked, plan);
            applied.map_err(|e| StorageIOError::write_snapshot(sig(), openraft::AnyError::new(&e)))?;
        }
        // The install purged the log up to the snapshot (`install::purge_to_snapshot`).
        self.s.installing.store(false, std::sync::atomic::Ordering::Release);
        snapshots::record(&self.s, Some(meta))?;
        Ok(())
    }

    /// The last purged log index (0 when none was purged; index 0 is never a `Set`).
    fn purged_index(&self) -> StorageResult<u64> {
        Ok(self.s.purged(StorageIOError::read_state_machine)?.map_or(0, |p| p.index))
    }

    /// Queue into `step`'s batch what applying `request` (the entry at `index`) writes to
    /// the state, and the deletes of values whose last holder it drops. The caller holds the
    /// value-ownership lock.
    fn apply_request(&self, index: u64, request: &Request, step: &mut ApplyStep<'_>) -> StorageResult<()> {
        // `Set`s are numbered in `values::ops`' order, as the append numbered them.
        let mut pos = 0u32;
        for op in values::ops(request) {
            let (key, stored) = match op {
                Request::Set { key, value } => {
                    let at = ValueAt { index, pos };
                    pos += 1;
                    // A value the engine keeps in its tree anyway is copied into the state (one
                    // lookup to read it back) rather than referred to.
                    let stored = if value.len() < self.s.options.min_separated_value_bytes {
                        StateValue::Inline(value.as_bytes()).encode()
                    } else {
                        StateValue::Ref(at).encode()
                    };
                    (key, Some(stored))
                }
                Request::Delete { key } => (key, None),
                Request::Batch(_) => continue,
            };
            self.drop_old_value(key, step)?;
            match &stored {
                Some(v) => step.batch.put_in(&self.s.state, key, v),
                None => step.batch.delete_in(&self.s.state, key),
            };
            step.pending.insert(key.clone(), stored);
        }
        Ok(())
    }

    /// Before `key` is overwritten or deleted: when its current value is a reference into a
    /// purged entry, nothing else holds that value, so queue its delete.
    fn drop_old_value(&self, key: &str, step: &mut ApplyStep<'_>) -> StorageResult<()> {
        let old = match step.pending.get(key) {
            Some(stored) => stored.clone(),
            None => {
                self.s.state.get(key).map_err(|e| io_err(StorageIOError::read_state_machine, &e))?.map(|v| v.to_vec())
            }
        };
        if let Some(at) = old.as_deref().and_then(StateValue::place) {
            if at.index <= step.purged {
                step.batch.delete_in(&self.s.values, at.key());
            }
        }
        Ok(())
    }
}

/// The value a stored state value stands for, as text (values are the UTF-8 of `Set`s).
pub(crate) fn resolve_in(values: &Keyspace, ro: &ReadOptions, key: &[u8], stored: &[u8]) -> wisckey::Result<String> {
    let raw = resolve_raw_in(values, ro, key, stored)?;
    Ok(String::from_utf8(raw).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// The bytes a stored state value stands for, its references followed in `values` at `ro`'s
/// snapshot (the one the state value was read at, so a reference always finds its value).
pub(crate) fn resolve_raw_in(
    values: &Keyspace,
    ro: &ReadOptions,
    key: &[u8],
    stored: &[u8],
) -> wisckey::Result<Vec<u8>> {
    let damaged = |what: String| wisckey::Error::invalid(what);
    match StateValue::decode(stored) {
        Some(StateValue::Inline(v)) => Ok(v.to_vec()),
        Some(StateValue::Ref(at)) => match values.get_opt(ro, at.key())? {
            Some(v) => Ok(v.to_vec()),
            None => Err(damaged(format!(
                "raft-state key {:?} refers to the value of log entry {} Set #{}, which raft-values does not hold",
                String::from_utf8_lossy(key),
                at.index,
                at.pos
            ))),
        },
        None => Err(damaged(format!(
            "raft-state key {:?} holds {} bytes that are not a state value",
            String::from_utf8_lossy(key),
            stored.len()
        ))),
    }
}

/// One `apply` call's batch in the making.
struct ApplyStep<'a> {
    batch: &'a mut WriteBatch,
    /// State values written earlier in this batch (`None`: deleted).
    pending: HashMap<String, Option<Vec<u8>>>,
    /// The last purged log index, read under the value-ownership lock.
    purged: u64,
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    /// A checkpoint of the database, recorded as the current snapshot with the applied id and
    /// membership it holds. The data returned is empty: openraft keeps only a built snapshot's
    /// metadata (its state-machine worker maps the result to `meta`), and the data is read out
    /// of the checkpoint by `get_current_snapshot` when a follower needs it, so a build reads
    /// nothing and writes a few KiB whatever the state's size.
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let meta = snapshots::record(&self.s, None)?;
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotFile::empty()) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(&mut self) -> StorageResult<AppliedState> {
        snapshots::applied_at(&self.s, &ReadOptions::default())
    }

    /// One batch for all `entries`: their writes, the last applied id and any new membership
    /// land together. Not synced: the entries are in the synced log and are applied again
    /// after a crash that loses this.
    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let _owner = self.s.own_values();
        let mut batch = WriteBatch::new();
        let mut step = ApplyStep { batch: &mut batch, pending: HashMap::new(), purged: self.purged_index()? };
        let mut replies = Vec::new();
        let mut last_applied = None;
        let mut membership = None;
        for entry in entries {
            last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(request) => {
                    self.apply_request(entry.log_id.index, &request, &mut step)?;
                    match request {
                        Request::Set { value, .. } => Response { value: Some(value) },
                        _ => Response::default(),
                    }
                }
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
        batch.put_in(&self.s.meta, meta_key::APPLIED, to_json(&Some(applied), write)?);
        if let Some(m) = &membership {
            batch.put_in(&self.s.meta, meta_key::MEMBERSHIP, to_json(m, write)?);
        }
        self.s
            .db
            .write(&WriteOptions::default(), &batch)
            .map_err(|e| StorageIOError::apply(applied, openraft::AnyError::new(&e)))?;
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    /// A new file `raft-snapshots/incoming-*`, which openraft writes the chunks into.
    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<SnapshotFile>> {
        let write = |e: wisckey::Error| StorageIOError::write_snapshot(None, openraft::AnyError::new(&e));
        self.s.installing.store(true, std::sync::atomic::Ordering::Release);
        let path = snapshots::new_incoming(&self.s).map_err(write)?;
        Ok(Box::new(SnapshotFile::receiving(&self.s.options.vfs, &path).map_err(write)?))
    }

    /// Replaces the state with the received stream's pairs (module `install`: checked whole
    /// first, then written in bounded batches under an intent record a crash cannot split),
    /// then records a checkpoint of the result as the current snapshot. A stream that does
    /// not check out is an error and changes nothing.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<SnapshotFile>,
    ) -> StorageResult<()> {
        // Checking and writing a whole state: the runtime's other tasks move off this worker.
        crate::snapshot_file::off_the_runtime(|| self.install_with(meta, *snapshot, Plan::default()))
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        snapshots::current(&self.s)
    }
}
