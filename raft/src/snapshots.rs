//! Snapshots as checkpoints of the node's database, and the streams they travel as. Building
//! one is a wisckey checkpoint in `raft-snapshots/<name>/` inside the database directory (hard
//! links and a few KiB written, whatever the state's size), recorded as the current snapshot
//! in `raft-meta` with the applied id and membership it holds; recording a new one lets the
//! previous go. Serving one names that checkpoint and pins it; when openraft first reads the
//! data, the state's pairs are streamed out of the checkpoint (opened read-only), one pair at
//! a time, into a file `raft-snapshots/serving-*` (module `stream`'s format), which is opened
//! for reading and unlinked at once: openraft reads it chunk by chunk and the bytes go when
//! it drops the handle. A follower receives a stream into
//! `raft-snapshots/incoming-*` and installs it (module `install`), then records its own
//! checkpoint of the installed state the same way.
//!
//! Why a checkpoint rather than the pairs written out at each build: every node builds a
//! snapshot every few thousand entries, and writing the whole state each time cost more device
//! bytes than the puts themselves (docs/replication.md); a checkpoint shares the files the
//! state is already in, and only a follower that needs the state pays for the stream. What it
//! costs instead: while a checkpoint links a file, GC punches no hole in it (a range collected
//! meanwhile comes back only when GC deletes the whole file, after the checkpoint has let it
//! go) and light-weight compaction merges instead of appending to it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use openraft::{BasicNode, LogId, Snapshot, SnapshotMeta, StorageIOError, StoredMembership};
use wisckey::fs::RandomAccessFile;
use wisckey::{Db, ReadOptions, WriteBatch, WriteOptions};

use crate::snapshot_file::SnapshotFile;
use crate::state_machine::resolve_raw_in;
use crate::stream;
use crate::{io_err, meta_key, to_json, Shared, StorageResult, TypeConfig, STATE_KEYSPACE, VALUES_KEYSPACE};

/// The directory, inside the database's, that holds the snapshots' checkpoints and the
/// streams being served or received.
pub const SNAPSHOTS_DIR: &str = "raft-snapshots";
/// The name prefix of a stream being received (a file; a checkpoint's name starts with a digit).
pub(crate) const INCOMING_PREFIX: &str = "incoming-";
/// The name prefix of a stream being written to be served (a file, unlinked once opened).
const SERVING_PREFIX: &str = "serving-";

/// The last applied log id and the membership it brought.
pub(crate) type AppliedState = (Option<LogId<u64>>, StoredMembership<u64, BasicNode>);

/// Layout 2's snapshot data: the state's pairs in key order, as JSON.
type LegacyPairs = Vec<(String, String)>;

/// The snapshots of one node: one build, install or read at a time.
#[derive(Default)]
pub(crate) struct Snapshots {
    lock: Mutex<()>,
    /// Snapshots recorded by this process, to make names and ids unique.
    made: AtomicU64,
    /// Checkpoints a served snapshot has yet to stream, with how many: kept until then even
    /// when no longer current (removed by the next record or open after).
    pinned: Mutex<HashMap<String, usize>>,
}

impl Snapshots {
    pub(crate) fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.pinned.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_pinned(&self, name: &str) -> bool {
        self.pins().contains_key(name)
    }
}

/// A served snapshot not streamed yet: its checkpoint, kept (pinned) until the stream is
/// written or the snapshot dropped.
pub(crate) struct Pending {
    s: Shared,
    name: String,
}

impl Pending {
    fn new(s: &Shared, name: String) -> Pending {
        *s.snapshots.pins().entry(name.clone()).or_default() += 1;
        Pending { s: s.clone(), name }
    }

    /// Stream the checkpoint's pairs into a file (see [`current`]). Without the snapshots'
    /// lock: the pin keeps the checkpoint, a record leaves `serving-*` files alone, and a
    /// stream of the whole state must not hold up builds, installs and other serves (openraft
    /// asks for the current snapshot from its state-machine worker).
    pub(crate) fn stream(&self) -> wisckey::Result<Arc<dyn RandomAccessFile>> {
        let dir = root(&self.s).join(&self.name);
        stream_out(&self.s, |w| pairs_of_checkpoint(&self.s, &dir, w))
    }

    /// The checkpoint's name (for `Debug`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut pins = self.s.snapshots.pins();
        if let Some(n) = pins.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.name);
            }
        }
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

/// `raft-snapshots/` of the database.
pub(crate) fn root(s: &Shared) -> PathBuf {
    s.db.path().join(SNAPSHOTS_DIR)
}

/// `raft-snapshots/`, made (and its parent synced) if it is not there yet.
fn made_root(s: &Shared) -> wisckey::Result<PathBuf> {
    let (vfs, root) = (&s.options.vfs, root(s));
    if !vfs.is_dir(&root) {
        vfs.create_dir_all(&root)?;
        vfs.sync_dir(s.db.path())?;
    }
    Ok(root)
}

/// A name in `raft-snapshots/` no other of this database has: `prefix`, the nanoseconds
/// since the epoch (20 digits), `-` and a counter of this process.
fn new_name(s: &Shared, prefix: &str) -> String {
    let n = s.snapshots.made.fetch_add(1, Ordering::Relaxed) + 1;
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}{nanos:020}-{n}")
}

/// The path of a new file to receive a snapshot stream into.
pub(crate) fn new_incoming(s: &Shared) -> wisckey::Result<PathBuf> {
    Ok(made_root(s)?.join(new_name(s, INCOMING_PREFIX)))
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
    let name = new_name(s, "");
    let dir = made_root(s).map_err(|e| io_err(write_snapshot, &e))?.join(&name);
    let (_info, at) = s.db.checkpoint_with_snapshot(&dir).map_err(|e| io_err(write_snapshot, &e))?;
    let meta = match given {
        Some(meta) => meta.clone(),
        None => {
            let (last_log_id, last_membership) =
                applied_at(s, &ReadOptions { snapshot: Some(at), ..ReadOptions::default() })?;
            // The name's counter makes the id unique among this node's snapshots.
            let n = name.rsplit('-').next().unwrap_or_default();
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

/// The current snapshot; `None` when there is none, or when its checkpoint is missing (a copy
/// of the database taken without `raft-snapshots/`: openraft then builds a new one). Its data
/// is streamed out of the checkpoint into a file when first read or sought, not here:
/// openraft asks for the current snapshot at every start for its metadata alone, and asks
/// from its state-machine worker, whose applies would wait for a stream of the whole state;
/// it reads the data from the task that sends it. The checkpoint is pinned until then.
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
    let read = |e: wisckey::Error| io_err(read_snapshot, &e);
    let data = match current_name(s).map_err(read)? {
        Some(name) => {
            let dir = root(s).join(&name);
            if !s.options.vfs.is_dir(&dir) {
                tracing::warn!(?dir, "the current snapshot's checkpoint is missing; reporting no snapshot");
                return Ok(None);
            }
            SnapshotFile::pending(Pending::new(s, name))
        }
        // A snapshot recorded by layout 2, which kept the data itself, as JSON: streamed now,
        // as the next record deletes that data.
        None => SnapshotFile::serving(stream_out(s, |w| legacy_pairs(s, w)).map_err(read)?),
    };
    Ok(Some(Snapshot { meta, snapshot: Box::new(data) }))
}

/// A stream written by `fill` into a new `serving-*` file, opened for reading and unlinked:
/// the handle keeps the bytes until it is dropped, and a crash leaves at most the file,
/// which the next open removes.
fn stream_out(
    s: &Shared,
    fill: impl FnOnce(&mut stream::Writer) -> wisckey::Result<()>,
) -> wisckey::Result<Arc<dyn RandomAccessFile>> {
    let (vfs, path) = (&s.options.vfs, made_root(s)?.join(new_name(s, SERVING_PREFIX)));
    let written = vfs.create(&path).and_then(|file| {
        let mut w = stream::Writer::new(file, &path)?;
        fill(&mut w)?;
        drop(w.finish()?);
        vfs.open_read(&path)
    });
    let removed = vfs.remove(&path);
    let file = written?;
    removed?;
    Ok(file)
}

/// Write the state's pairs a snapshot's checkpoint holds into `w`, in key order, one at a
/// time (references followed into the checkpoint's `raft-values`).
fn pairs_of_checkpoint(s: &Shared, dir: &Path, w: &mut stream::Writer) -> wisckey::Result<()> {
    let db = Db::open_read_only(dir, s.options.clone())?;
    let (state, values) = (db.keyspace(STATE_KEYSPACE)?, db.keyspace(VALUES_KEYSPACE)?);
    let ro = ReadOptions { snapshot: Some(db.snapshot()), ..ReadOptions::default() };
    for item in state.scan(&ro)? {
        let (k, stored) = item?;
        w.push(&k, &resolve_raw_in(&values, &ro, &k, &stored)?)?;
    }
    Ok(())
}

/// Write layout 2's snapshot data (JSON pairs in `raft-meta`, in key order) into `w`. That
/// data is one record, read whole: the one place a snapshot is held in memory, until the
/// next build replaces it.
fn legacy_pairs(s: &Shared, w: &mut stream::Writer) -> wisckey::Result<()> {
    let Some(data) = s.meta.get(meta_key::SNAPSHOT_DATA)? else { return Ok(()) };
    let pairs: LegacyPairs = serde_json::from_slice(&data)
        .map_err(|e| wisckey::Error::invalid(format!("raft-meta `sm/snapshot-data` is not JSON pairs: {e}")))?;
    pairs.iter().try_for_each(|(k, v)| w.push(k.as_bytes(), v.as_bytes()))
}

/// Remove every snapshot checkpoint but `keep` and those pinned by a served snapshot not
/// streamed yet (at open: what a crash during a build left). Streams' files stay: one may be
/// being received or written to be served (open removes them with [`remove_streams`], after
/// finishing an install that needs one).
pub(crate) fn remove_others(s: &Shared, keep: Option<&str>) {
    let Ok(names) = s.options.vfs.list(&root(s)) else { return };
    let others = names
        .iter()
        .filter(|n| Some(n.as_str()) != keep && !n.starts_with(INCOMING_PREFIX) && !n.starts_with(SERVING_PREFIX));
    for name in others.filter(|n| !s.snapshots.is_pinned(n)) {
        remove_checkpoint(s, name);
    }
}

/// Remove every received or served stream's file (at open, when none is in use).
pub(crate) fn remove_streams(s: &Shared) {
    let Ok(names) = s.options.vfs.list(&root(s)) else { return };
    let streams = names.iter().filter(|n| n.starts_with(INCOMING_PREFIX) || n.starts_with(SERVING_PREFIX));
    streams.for_each(|name| remove_file(s, name));
}

/// Remove one file of `raft-snapshots/`. Best effort: what is left is removed at the next open.
fn remove_file(s: &Shared, name: &str) {
    let (vfs, path) = (&s.options.vfs, root(s).join(name));
    if let Err(e) = vfs.remove(&path).and_then(|()| vfs.sync_dir(&root(s))) {
        tracing::warn!(?path, error = %e, "a leftover snapshot stream could not be removed; retried at the next open");
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
