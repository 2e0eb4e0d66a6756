//! Snapshots as checkpoints of the node's database. Building one is a wisckey checkpoint in
//! `raft-snapshots/<name>/` inside the database directory (hard links and a few KiB written,
//! whatever the state's size), recorded as the current snapshot in `raft-meta` with the
//! applied id and membership it holds; serving one reads the state's pairs out of that
//! checkpoint (opened read-only); recording a new one lets the previous go. A follower that
//! installs a snapshot records its own checkpoint of the installed state the same way.
//!
//! Why a checkpoint rather than the pairs written out: every node builds a snapshot every few
//! thousand entries, and writing the whole state each time cost more device bytes than the
//! puts themselves (docs/replication.md); a checkpoint shares the files the state is already
//! in. What it costs instead: while a checkpoint links a file, GC punches no hole in it (a
//! range collected meanwhile comes back only when GC deletes the whole file, after the
//! checkpoint has let it go) and light-weight compaction merges instead of appending to it.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use openraft::{BasicNode, LogId, Snapshot, SnapshotMeta, StorageIOError, StoredMembership};
use wisckey::{Db, ReadOptions, WriteBatch, WriteOptions};

use crate::state_machine::resolve_in;
use crate::{io_err, meta_key, to_json, Shared, StorageResult, TypeConfig, STATE_KEYSPACE, VALUES_KEYSPACE};

/// The directory, inside the database's, that holds the snapshots' checkpoints.
pub const SNAPSHOTS_DIR: &str = "raft-snapshots";

/// The last applied log id and the membership it brought.
pub(crate) type AppliedState = (Option<LogId<u64>>, StoredMembership<u64, BasicNode>);

/// A snapshot's data: the state's pairs in key order, as JSON.
pub(crate) type SnapshotPairs = Vec<(String, String)>;

/// The snapshots of one node: one build, install or read at a time.
#[derive(Default)]
pub(crate) struct Snapshots {
    lock: Mutex<()>,
    /// Snapshots recorded by this process, to make names and ids unique.
    made: AtomicU64,
}

impl Snapshots {
    fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn read_snapshot(e: openraft::AnyError) -> StorageIOError<u64> {
    StorageIOError::read_snapshot(None, e)
}

fn write_snapshot(e: openraft::AnyError) -> StorageIOError<u64> {
    StorageIOError::write_snapshot(None, e)
}

/// The applied id and membership as of `ro`.
pub(crate) fn applied_at(s: &Shared, ro: &ReadOptions) -> StorageResult<AppliedState> {
    let applied = s.read_meta(ro, meta_key::APPLIED, StorageIOError::read_state_machine)?.flatten();
    let membership = s.read_meta(ro, meta_key::MEMBERSHIP, StorageIOError::read_state_machine)?;
    Ok((applied, membership.unwrap_or_default()))
}

fn root(s: &Shared) -> PathBuf {
    s.db.path().join(SNAPSHOTS_DIR)
}

/// Checkpoint the database as the current snapshot. `given`: the metadata of the snapshot
/// just installed (the checkpoint holds exactly it); `None`: a new snapshot of the applied
/// state, whose metadata is read at the checkpoint's sequence number. A snapshot older than
/// the current one (a build that raced an install) is dropped and the current one kept.
pub(crate) fn record(
    s: &Shared,
    given: Option<&SnapshotMeta<u64, BasicNode>>,
) -> StorageResult<SnapshotMeta<u64, BasicNode>> {
    let _one = s.snapshots.hold();
    let n = s.snapshots.made.fetch_add(1, Ordering::Relaxed) + 1;
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let name = format!("{nanos:020}-{n}");
    let (vfs, root) = (&s.options.vfs, root(s));
    let dir = root.join(&name);
    if !vfs.is_dir(&root) {
        let made = vfs.create_dir_all(&root).and_then(|()| vfs.sync_dir(s.db.path()));
        made.map_err(|e| io_err(write_snapshot, &e))?;
    }
    let (_info, at) = s.db.checkpoint_with_snapshot(&dir).map_err(|e| io_err(write_snapshot, &e))?;
    let meta = match given {
        Some(meta) => meta.clone(),
        None => {
            let (last_log_id, last_membership) =
                applied_at(s, &ReadOptions { snapshot: Some(at), ..ReadOptions::default() })?;
            let snapshot_id = match &last_log_id {
                Some(id) => format!("{}-{}-{n}", id.leader_id, id.index),
                None => format!("--{n}"),
            };
            SnapshotMeta { last_log_id, last_membership, snapshot_id }
        }
    };
    let current: Option<SnapshotMeta<u64, BasicNode>> =
        s.read_meta(&ReadOptions::default(), meta_key::SNAPSHOT_META, read_snapshot)?;
    if let Some(current) = current.filter(|c| c.last_log_id > meta.last_log_id) {
        remove_checkpoint(s, &name);
        return Ok(current);
    }
    let mut batch = WriteBatch::new();
    batch.put_in(&s.meta, meta_key::SNAPSHOT_META, to_json(&meta, write_snapshot)?);
    batch.put_in(&s.meta, meta_key::SNAPSHOT_DIR, name.as_bytes());
    batch.delete_in(&s.meta, meta_key::SNAPSHOT_DATA);
    // Synced before the previous checkpoint goes: a crash never leaves the record naming a
    // checkpoint that is gone.
    s.db.write(&WriteOptions::synced(), &batch).map_err(|e| io_err(write_snapshot, &e))?;
    remove_others(s, Some(&name));
    Ok(meta)
}

/// The current snapshot with its data, read out of its checkpoint; `None` when there is none,
/// or when its checkpoint is missing (a copy of the database taken without `raft-snapshots/`:
/// openraft then builds a new one).
pub(crate) fn current(s: &Shared) -> StorageResult<Option<Snapshot<TypeConfig>>> {
    let _one = s.snapshots.hold();
    let ro = ReadOptions::default();
    let Some(meta) = s.read_meta::<SnapshotMeta<u64, BasicNode>>(&ro, meta_key::SNAPSHOT_META, read_snapshot)? else {
        return Ok(None);
    };
    // An install writes the state (synced), then records its checkpoint: a crash between the
    // two leaves the previous snapshot recorded while openraft purges the log up to the
    // installed state. A snapshot behind the purged log cannot serve a follower; reporting
    // none makes openraft build one of the state as it is.
    let purged = s.purged(read_snapshot)?.map(|p| p.index);
    if meta.last_log_id.map(|l| l.index) < purged {
        tracing::warn!(snapshot = ?meta.last_log_id, ?purged, "the recorded snapshot is behind the purged log; reporting none");
        return Ok(None);
    }
    let data = match current_name(s).map_err(|e| io_err(read_snapshot, &e))? {
        Some(name) => {
            let dir = root(s).join(name);
            if !s.options.vfs.is_dir(&dir) {
                tracing::warn!(?dir, "the current snapshot's checkpoint is missing; reporting no snapshot");
                return Ok(None);
            }
            let pairs = pairs_in_checkpoint(s, &dir).map_err(|e| io_err(read_snapshot, &e))?;
            to_json(&pairs, read_snapshot)?
        }
        // A snapshot recorded by layout 2, which kept the data itself.
        None => {
            let data = s.meta.get_opt(&ro, meta_key::SNAPSHOT_DATA).map_err(|e| io_err(read_snapshot, &e))?;
            data.map(|d| d.to_vec()).unwrap_or_default()
        }
    };
    Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
}

/// The state's pairs a snapshot's checkpoint holds, in key order.
fn pairs_in_checkpoint(s: &Shared, dir: &std::path::Path) -> wisckey::Result<SnapshotPairs> {
    let db = Db::open_read_only(dir, s.options.clone())?;
    let (state, values) = (db.keyspace(STATE_KEYSPACE)?, db.keyspace(VALUES_KEYSPACE)?);
    let ro = ReadOptions { snapshot: Some(db.snapshot()), ..ReadOptions::default() };
    let mut pairs = Vec::new();
    for item in state.scan(&ro)? {
        let (k, stored) = item?;
        let v = resolve_in(&values, &ro, &k, &stored)?;
        let k =
            String::from_utf8(k).map_err(|e| wisckey::Error::invalid(format!("a raft-state key in {dir:?}: {e}")))?;
        pairs.push((k, v));
    }
    Ok(pairs)
}

/// Remove every snapshot checkpoint but `keep` (at open: what a crash during a build left).
pub(crate) fn remove_others(s: &Shared, keep: Option<&str>) {
    let Ok(names) = s.options.vfs.list(&root(s)) else { return };
    for name in names.iter().filter(|n| Some(n.as_str()) != keep) {
        remove_checkpoint(s, name);
    }
}

/// The name of the current snapshot's checkpoint, if one is recorded.
pub(crate) fn current_name(s: &Shared) -> wisckey::Result<Option<String>> {
    let name = s.meta.get_opt(&ReadOptions::default(), meta_key::SNAPSHOT_DIR)?;
    Ok(name.map(|n| String::from_utf8_lossy(&n).into_owned()))
}

/// Remove one checkpoint directory (flat: its files, then itself). Best effort: what is left
/// is removed at the next open or the next snapshot.
fn remove_checkpoint(s: &Shared, name: &str) {
    let (vfs, dir) = (&s.options.vfs, root(s).join(name));
    let files = vfs.list(&dir).unwrap_or_default();
    // The removals are made durable before the directory goes, as a directory must be empty
    // to go and a crash must not bring back files into a directory that is gone.
    let removed = (files.iter().try_for_each(|f| vfs.remove(&dir.join(f))))
        .and_then(|()| vfs.sync_dir(&dir))
        .and_then(|()| vfs.remove_dir(&dir))
        .and_then(|()| vfs.sync_dir(&root(s)));
    if let Err(e) = removed {
        tracing::warn!(?dir, error = %e, "an old snapshot checkpoint could not be removed; retried later");
    }
}
