//! Installing a received snapshot stream as the node's state, in bounded memory and
//! crash-atomically. The stream is written in many batches (a state of gigabytes does not fit
//! one), so a crash can fall between them; an intent record makes that safe:
//!
//! 1. the received file is synced and checked whole (a file that does not check out is an
//!    error and changes nothing), and its directory synced;
//! 2. `sm/installing` = {snapshot meta, file name} is written, synced;
//! 3. the old state goes (range tombstones over `raft-state` and over the values of purged
//!    entries, which only the old state could refer to), then the pairs, in batches of at
//!    most [`BATCH_BYTES`], unsynced;
//! 4. one synced batch writes the applied id and membership, purges the log up to the
//!    snapshot's last entry (the purge openraft asked for beside the install, which
//!    `LogStore::purge` held back at the applied entry) and deletes `sm/installing`;
//! 5. the file is removed.
//!
//! A crash after 2 and before 4 leaves the intent: the next open ([`resume`]) does 3–5 again
//! from the file (still there: it goes only after 4), before openraft reads the applied id,
//! which is the old one until 4. Nothing reads the state meanwhile but the node's own stale
//! reads.

use std::path::Path;
use std::sync::Arc;

use openraft::{BasicNode, LogId, SnapshotMeta};
use serde::{Deserialize, Serialize};
use wisckey::fs::RandomAccessFile;
use wisckey::{WriteBatch, WriteOptions};

use crate::log_store::{ends_through, index_key};
use crate::snapshot_file::{Received, Receiving, SnapshotFile};
use crate::snapshots::{self, root};
use crate::stream;
use crate::values::{StateValue, ValueAt};
use crate::{meta_key, Shared};

/// The bound on one batch of an install's pairs (the memory an install holds beyond one pair).
pub(crate) const BATCH_BYTES: usize = 4 << 20;

/// Past every state key: keys are UTF-8, which never holds the byte 0xFF.
const PAST_LAST_KEY: [u8; 1] = [0xFF];

/// The install in progress (`sm/installing`, JSON): what it installs and from which file of
/// `raft-snapshots/`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Intent {
    pub(crate) meta: SnapshotMeta<u64, BasicNode>,
    pub(crate) file: String,
}

/// How an install writes its pairs: at most `batch_bytes` a batch; tests stop it after
/// `stop_after` pair batches, as a crash would.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) batch_bytes: usize,
    pub(crate) stop_after: Option<usize>,
}

impl Default for Plan {
    fn default() -> Plan {
        Plan { batch_bytes: BATCH_BYTES, stop_after: None }
    }
}

/// A received stream in a file of `raft-snapshots/`, synced and checked, not yet named by an
/// intent (dropping it removes the file).
pub(crate) struct Checked {
    file: Receiving,
    name: String,
}

/// Step 1: make the received data a synced, checked file of `raft-snapshots/`. Data that
/// is not such a file (a served stream handed over whole) is copied into one first.
pub(crate) fn check(s: &Shared, data: SnapshotFile) -> wisckey::Result<Checked> {
    let mut file = match data.into_received()? {
        Received::File(r) if r.path.parent() == Some(root(s).as_path()) => r,
        Received::File(mut r) => copy_in(s, r.readable()?)?,
        Received::Readable(file) => copy_in(s, file)?,
        Received::Empty => return Err(wisckey::Error::invalid("an install was handed no snapshot data")),
    };
    file.file.sync()?;
    let name = file.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if !file.verified {
        stream::verify(s.options.vfs.open_read(&file.path)?, &file.path)?;
    }
    s.options.vfs.sync_dir(&root(s))?;
    Ok(Checked { file, name })
}

/// A new incoming file holding `from`'s bytes, copied 64 KiB at a time.
fn copy_in(s: &Shared, from: Arc<dyn RandomAccessFile>) -> wisckey::Result<Receiving> {
    let path = snapshots::new_incoming(s)?;
    let mut to = Receiving::create(&s.options.vfs, &path)?;
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0;
    loop {
        let n = from.read_at(at, &mut buf)?;
        if n == 0 {
            return Ok(to);
        }
        to.file.append(&buf[..n])?;
        at += n as u64;
    }
}

/// Steps 2–5: replace the state with the checked stream's pairs, `meta` its applied id and
/// membership. The caller holds the value-ownership lock.
pub(crate) fn apply(
    s: &Shared,
    meta: &SnapshotMeta<u64, BasicNode>,
    checked: Checked,
    plan: Plan,
) -> wisckey::Result<()> {
    let Checked { mut file, name } = checked;
    let intent = Intent { meta: meta.clone(), file: name };
    // Kept from before the intent is written: a write that fails may still reach the disk,
    // and an intent must never name a file that is gone (an open that finds none named
    // removes it).
    file.keep();
    drop(file);
    s.meta.put_opt(&WriteOptions::synced(), meta_key::INSTALLING, json(&intent)?)?;
    // A crash from here on finishes the install from the file at the next open.
    replace_state(s, &intent, plan)
}

/// At open: finish an install a crash cut short (its intent is still recorded), then remove
/// every received or served stream's file (none is in use before openraft starts). The file
/// named is checked whole again first: if it no longer checks out the open fails, as the
/// state is part replaced and only that file can complete it.
pub(crate) fn resume(s: &Shared) -> wisckey::Result<()> {
    if let Some(bytes) = s.meta.get(meta_key::INSTALLING)? {
        let intent: Intent = serde_json::from_slice(&bytes)
            .map_err(|e| wisckey::Error::invalid(format!("raft-meta `sm/installing` is not an install intent: {e}")))?;
        let path = root(s).join(&intent.file);
        tracing::warn!(?path, snapshot = ?intent.meta.last_log_id, "finishing a snapshot install a crash cut short");
        stream::verify(s.options.vfs.open_read(&path)?, &path)?;
        {
            let _owner = s.own_values();
            replace_state(s, &intent, Plan::default())?;
        }
        snapshots::record(s, Some(&intent.meta))
            .map_err(|e| wisckey::Error::invalid(format!("recording the checkpoint of a resumed install: {e}")))?;
    }
    snapshots::remove_streams(s);
    Ok(())
}

/// Steps 3–5 from the intent's file.
fn replace_state(s: &Shared, intent: &Intent, plan: Plan) -> wisckey::Result<()> {
    let path = root(s).join(&intent.file);
    let mut batch = WriteBatch::new();
    clear_state(s, &mut batch)?;
    write_pairs(s, &path, &mut batch, plan)?;
    batch.put_in(&s.meta, meta_key::APPLIED, json(&intent.meta.last_log_id)?);
    batch.put_in(&s.meta, meta_key::MEMBERSHIP, json(&intent.meta.last_membership)?);
    purge_to_snapshot(s, intent, &mut batch)?;
    batch.delete_in(&s.meta, meta_key::INSTALLING);
    s.db.write(&WriteOptions::synced(), &batch)?;
    let (vfs, root) = (&s.options.vfs, root(s));
    if let Err(e) = vfs.remove(&path).and_then(|()| vfs.sync_dir(&root)) {
        tracing::warn!(?path, error = %e, "an installed snapshot's file could not be removed; the next open removes it");
    }
    Ok(())
}

/// Queue the old state's removal: a range tombstone over `raft-state`, and one over the
/// values of purged entries — the old state was all that could still refer to them (the
/// log no longer holds them), and the new state refers to none (it holds its values inline).
fn clear_state(s: &Shared, batch: &mut WriteBatch) -> wisckey::Result<()> {
    batch.delete_range_in(&s.state, b"", PAST_LAST_KEY);
    if let Some(purged) = purged_index(s)? {
        batch.delete_range_in(&s.values, ValueAt::first_of(0), ends_through(purged).1);
    }
    Ok(())
}

/// Add the stream's pairs to `batch` (which holds the old state's removal), writing it
/// unsynced each time it reaches `plan.batch_bytes`; the last pairs stay in `batch`.
fn write_pairs(s: &Shared, path: &Path, batch: &mut WriteBatch, plan: Plan) -> wisckey::Result<()> {
    let mut pairs = stream::Reader::new(s.options.vfs.open_read(path)?, path)?;
    let (mut value, mut bytes, mut written) = (Vec::new(), 0, 0);
    while let Some(key) = pairs.next(Some(&mut value))? {
        batch.put_in(&s.state, key, StateValue::Inline(&value).encode());
        bytes += key.len() + value.len() + 16;
        if bytes >= plan.batch_bytes {
            s.db.write(&WriteOptions::default(), batch)?;
            (*batch, bytes, written) = (WriteBatch::new(), 0, written + 1);
            if plan.stop_after == Some(written) {
                return Err(wisckey::Error::invalid(format!("install stopped after {written} pair batches (test)")));
            }
        }
    }
    Ok(())
}

/// Queue the purge of the log up to the snapshot's last entry, with the values of those
/// entries (the new state holds its values inline; the old state is gone): openraft asked for
/// it when it handed the snapshot over, and `LogStore::purge` held back past the applied entry
/// so that it lands only with the state it belongs to, in the same synced batch.
fn purge_to_snapshot(s: &Shared, intent: &Intent, batch: &mut WriteBatch) -> wisckey::Result<()> {
    let Some(last) = intent.meta.last_log_id else { return Ok(()) };
    if purged_index(s)?.is_some_and(|p| p >= last.index) {
        return Ok(());
    }
    batch.put_in(&s.meta, meta_key::PURGED, json(&last)?);
    let (log_end, values_end) = ends_through(last.index);
    batch.delete_range_in(&s.log, index_key(0), log_end);
    batch.delete_range_in(&s.values, ValueAt::first_of(0), values_end);
    Ok(())
}

fn purged_index(s: &Shared) -> wisckey::Result<Option<u64>> {
    let Some(bytes) = s.meta.get(meta_key::PURGED)? else { return Ok(None) };
    let purged: Option<LogId<u64>> = serde_json::from_slice(&bytes)
        .map_err(|e| wisckey::Error::invalid(format!("raft-meta `purged` is not a log id: {e}")))?;
    Ok(purged.map(|p| p.index))
}

fn json<T: Serialize>(value: &T) -> wisckey::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| wisckey::Error::invalid(format!("encoding a Raft record: {e}")))
}

#[cfg(test)]
#[path = "install_tests.rs"]
mod tests;
