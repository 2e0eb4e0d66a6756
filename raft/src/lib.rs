//! openraft's storage on one wisckey database: the Raft log ([`LogStore`], openraft's
//! `RaftLogStorage`) and a key-value state machine ([`StateMachineStore`], openraft's
//! `RaftStateMachine`) share one [`wisckey::Db`], each in keyspaces of its own:
//!
//! - `raft-log`: one entry per index, the key the index in big-endian (so key order is index
//!   order), the value the entry as JSON. Appends are written with `sync` before openraft is
//!   told they are flushed; a purge is one range tombstone over the log's prefix (value-log GC
//!   then gives the space back); a truncation one over its suffix.
//! - `raft-meta`: the vote, the committed log id, the last purged log id, and the state
//!   machine's last applied log id, its membership, its current snapshot (a checkpoint
//!   of the database in `raft-snapshots/`, module `snapshots`) and the snapshot install in
//!   progress, if any (module `install`).
//! - `raft-values`: the value of each `Set` in the log, written once when its entry is
//!   appended; the state refers to it rather than copying it (module `values`).
//! - `raft-state`: the state machine's keys, each with its value or a reference into
//!   `raft-values`.
//!
//! One database means one write-ahead log: a batch spanning keyspaces is atomic (an applied
//! entry's writes and the new last-applied id land together), and a synced write makes every
//! earlier write durable, so a crash takes back at most a suffix of what was applied, never a
//! part of it. docs/format/raft.md has the keys and values byte by byte.
//!
//! The calls are synchronous: a wisckey write returns when it is in the log (and synced when
//! asked), as openraft's RocksDB examples call RocksDB from their async methods.
#![deny(missing_docs)]
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

mod install;
mod log_store;
#[cfg(feature = "server")]
pub mod server;
mod snapshot_file;
mod snapshots;
mod state_machine;
mod stream;
mod values;

pub use snapshot_file::SnapshotFile;
pub use snapshots::SNAPSHOTS_DIR;

use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::{AnyError, LogId, StorageError, StorageIOError};
use serde::{Deserialize, Serialize};
use wisckey::{Db, Keyspace, Options, ReadOptions};

pub use log_store::LogStore;
pub use state_machine::StateMachineStore;

/// The keyspace holding the Raft log.
pub const LOG_KEYSPACE: &str = "raft-log";
/// The keyspace holding the vote, the committed and purged log ids and the state machine's
/// applied state and snapshot.
pub const META_KEYSPACE: &str = "raft-meta";
/// The keyspace holding the state machine's keys and values (or references into
/// [`VALUES_KEYSPACE`]).
pub const STATE_KEYSPACE: &str = "raft-state";
/// The keyspace holding the values of the log's `Set`s, written once.
pub const VALUES_KEYSPACE: &str = "raft-values";

/// The layout of the keyspaces this version writes (in `raft-meta` under `format`): a
/// database written by another layout is refused rather than misread. Layout 4 adds the
/// install intent (`sm/installing`): a build that does not know it would open a database
/// whose install a crash cut short and run on a part-replaced state, so it must refuse it.
const FORMAT: u32 = 4;
/// The older layouts this version opens and moves to [`FORMAT`]: 2 (snapshots kept as data in
/// `raft-meta`, still served until the next build) and 3 (snapshots as checkpoints, no
/// install intent).
const OLDER_FORMATS: [u32; 2] = [2, 3];

openraft::declare_raft_types!(
    /// The Raft types of a wisckey-raft node: key-value requests, `u64` node ids, snapshots
    /// sent and received as streams in files (never whole in memory).
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotFile,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry of this store.
pub type Entry = openraft::Entry<TypeConfig>;
/// A storage error of this store (node ids are `u64`).
pub type StorageResult<T> = Result<T, StorageError<u64>>;

/// A write to the replicated key-value state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Set `key` to `value`.
    Set {
        /// The key.
        key: String,
        /// Its new value.
        value: String,
    },
    /// Remove `key` (nothing happens if it is absent).
    Delete {
        /// The key.
        key: String,
    },
    /// These requests (`Set`s and `Delete`s), applied together: all or none, in order.
    Batch(Vec<Request>),
}

/// What applying a request answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The value a `Set` wrote; `None` for a `Delete`, a `Batch` and Raft's own entries.
    pub value: Option<String>,
}

/// Open (or create) the database at `path` with the Raft keyspaces and return the log store
/// and the state machine over it. The keyspaces are created with `options`' shaping settings
/// (merge policy, `min_separated_value_bytes`, ...); an existing one keeps those it was
/// created with. Both stores hold the database open; it closes when both are dropped.
pub fn open(path: impl AsRef<Path>, options: Options) -> wisckey::Result<(LogStore, StateMachineStore)> {
    let db = Arc::new(Db::open(path, options.clone())?);
    let shared = Shared::open(db, &options)?;
    Ok((LogStore::new(shared.clone()), StateMachineStore::new(shared)))
}

/// The database and its three Raft keyspaces, shared by the log store and the state machine.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) db: Arc<Db>,
    pub(crate) log: Keyspace,
    pub(crate) meta: Keyspace,
    pub(crate) state: Keyspace,
    pub(crate) values: Keyspace,
    /// Held by whoever may delete a value of `raft-values` (purge, apply, snapshot install)
    /// while it decides: each reads the others' effects whole.
    pub(crate) owner: Arc<Mutex<()>>,
    /// The current snapshot's checkpoint: one build, install or read at a time.
    pub(crate) snapshots: Arc<snapshots::Snapshots>,
    /// The options the database was opened with (a snapshot's checkpoint opens with them;
    /// `min_separated_value_bytes` says which values the state copies).
    pub(crate) options: Options,
    /// Set once a snapshot is being received or installed, until an install succeeds: a purge
    /// goes no further than the applied state meanwhile (`LogStore::purge`).
    pub(crate) installing: Arc<std::sync::atomic::AtomicBool>,
}

impl Shared {
    fn open(db: Arc<Db>, options: &Options) -> wisckey::Result<Shared> {
        let log = db.open_keyspace(LOG_KEYSPACE, options.clone())?;
        let meta = db.open_keyspace(META_KEYSPACE, options.clone())?;
        let state = db.open_keyspace(STATE_KEYSPACE, options.clone())?;
        let values = db.open_keyspace(VALUES_KEYSPACE, options.clone())?;
        check_format(&meta, &log, &state)?;
        let snapshots = Arc::default();
        let options = options.clone();
        let shared = Shared {
            db,
            log,
            meta,
            state,
            values,
            owner: Arc::default(),
            snapshots,
            options,
            installing: Arc::default(),
        };
        // What a crash during a snapshot's build, serve or install left; an install it cut
        // short is finished before openraft reads the applied id.
        snapshots::remove_others(&shared, snapshots::current_name(&shared)?.as_deref());
        install::resume(&shared)?;
        Ok(shared)
    }

    /// Hold the value-ownership lock (a poisoned lock only means a panic elsewhere: the data
    /// it guards is in the database, whole).
    pub(crate) fn own_values(&self) -> std::sync::MutexGuard<'_, ()> {
        self.owner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The last purged log id, `err` naming the side that asks.
    pub(crate) fn purged(&self, err: fn(AnyError) -> StorageIOError<u64>) -> StorageResult<Option<LogId<u64>>> {
        self.read_meta(&ReadOptions::default(), meta_key::PURGED, err)
    }

    /// The JSON value of metadata key `key` as of `ro`, `None` when absent; `err` names what
    /// failed to read.
    pub(crate) fn read_meta<T>(
        &self,
        ro: &ReadOptions,
        key: &[u8],
        err: fn(AnyError) -> StorageIOError<u64>,
    ) -> StorageResult<Option<T>>
    where
        T: for<'de> Deserialize<'de>,
    {
        let Some(bytes) = self.meta.get_opt(ro, key).map_err(|e| io_err(err, &e))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| io_err(err, &e).into())
    }
}

/// Record this version's layout in a new database; refuse one written with another.
fn check_format(meta: &Keyspace, log: &Keyspace, state: &Keyspace) -> wisckey::Result<()> {
    let found = meta.get(meta_key::FORMAT)?;
    let found = match found {
        Some(bytes) => std::str::from_utf8(&bytes).ok().and_then(|s| s.parse::<u32>().ok()),
        None if log.scan(&ReadOptions::default())?.next().is_none()
            && state.scan(&ReadOptions::default())?.next().is_none() =>
        {
            meta.put_opt(&wisckey::WriteOptions::synced(), meta_key::FORMAT, FORMAT.to_string())?;
            return Ok(());
        }
        None => None,
    };
    if found == Some(FORMAT) {
        return Ok(());
    }
    if found.is_some_and(|f| OLDER_FORMATS.contains(&f)) {
        // Layout 2's snapshot (data in `raft-meta`) is still served; the next one is a
        // checkpoint. Synced, so no older version misreads what this one writes next.
        meta.put_opt(&wisckey::WriteOptions::synced(), meta_key::FORMAT, FORMAT.to_string())?;
        return Ok(());
    }
    Err(wisckey::Error::invalid(format!(
        "this database's Raft store layout is {} but this wisckey-raft reads layout {FORMAT}",
        found.map_or("an earlier one (no `format` record)".to_owned(), |f| f.to_string())
    )))
}

/// Metadata keys (in `raft-meta`).
pub(crate) mod meta_key {
    /// The layout of the Raft keyspaces (decimal ASCII).
    pub const FORMAT: &[u8] = b"format";
    /// The vote (JSON `Vote`).
    pub const VOTE: &[u8] = b"vote";
    /// The committed log id (JSON `Option<LogId>`).
    pub const COMMITTED: &[u8] = b"committed";
    /// The last purged log id (JSON `LogId`).
    pub const PURGED: &[u8] = b"purged";
    /// The state machine's last applied log id (JSON `Option<LogId>`).
    pub const APPLIED: &[u8] = b"sm/applied";
    /// The state machine's membership (JSON `StoredMembership`).
    pub const MEMBERSHIP: &[u8] = b"sm/membership";
    /// The current snapshot's metadata (JSON `SnapshotMeta`).
    pub const SNAPSHOT_META: &[u8] = b"sm/snapshot-meta";
    /// The name of the current snapshot's checkpoint in `raft-snapshots/` (UTF-8).
    pub const SNAPSHOT_DIR: &[u8] = b"sm/snapshot-dir";
    /// Layout 2's snapshot data (the bytes sent to followers): read while it is the current
    /// snapshot, deleted when the next is recorded.
    pub const SNAPSHOT_DATA: &[u8] = b"sm/snapshot-data";
    /// The snapshot install in progress (JSON `install::Intent`: its metadata and the name of
    /// its stream's file in `raft-snapshots/`), from before its first write to the state to
    /// its last batch.
    pub const INSTALLING: &[u8] = b"sm/installing";
}

/// A storage I/O error of kind `kind` (one of `StorageIOError`'s constructors) caused by `e`.
pub(crate) fn io_err<E: std::error::Error + 'static>(
    kind: fn(AnyError) -> StorageIOError<u64>,
    e: &E,
) -> StorageIOError<u64> {
    kind(AnyError::new(e))
}

/// JSON of `value` (the types written here always serialize).
pub(crate) fn to_json<T: Serialize>(value: &T, kind: fn(AnyError) -> StorageIOError<u64>) -> StorageResult<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| io_err(kind, &e).into())
}
