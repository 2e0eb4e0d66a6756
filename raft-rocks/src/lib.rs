//! The comparison build of the replicated server: openraft's log storage ([`RocksLogStore`],
//! `RaftLogStorage`) and key-value state machine ([`RocksStateMachine`], `RaftStateMachine`)
//! on one RocksDB database, laid out as openraft's RocksDB examples (`rocksstore-v2`,
//! `raft-kv-rocksdb`, `log-rocks`/`sm-rocks`) lay it out, with the same Raft types
//! ([`wisckey_raft::TypeConfig`]) and the same durability as the wisckey store, so the two
//! builds differ only in the engine under them:
//!
//! - column family `logs`: one entry per index, the key the index in big-endian, the value the
//!   entry as JSON. Appends are one write batch, synced before openraft hears they are flushed.
//! - `meta`: the vote (synced), the committed log id and the last purged log id.
//! - `sm_data`: the state machine's keys and values.
//! - `sm_meta`: the last applied log id and membership (written in the same batch as the
//!   applied entries' writes, not synced: the entries are in the synced log and are applied
//!   again after a crash that loses them) and the current snapshot.
//!
//! Every value is thus written to RocksDB's write-ahead log twice (once in the log entry,
//! once when applied) and again by flushes and compactions; that is what the wisckey build is
//! measured against.
#![deny(missing_docs)]
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

mod kv;
mod log_store;
mod state_machine;

use std::path::Path;
use std::sync::Arc;

use openraft::{AnyError, StorageError, StorageIOError};
use rocksdb::{ColumnFamily, ColumnFamilyDescriptor, Options, DB};
use serde::{Deserialize, Serialize};

pub use log_store::RocksLogStore;
pub use state_machine::RocksStateMachine;

/// The column family holding the Raft log.
pub const CF_LOGS: &str = "logs";
/// The column family holding the vote and the committed and purged log ids.
pub const CF_META: &str = "meta";
/// The column family holding the state machine's keys and values.
pub const CF_SM_DATA: &str = "sm_data";
/// The column family holding the state machine's applied state and current snapshot.
pub const CF_SM_META: &str = "sm_meta";

const COLUMN_FAMILIES: [&str; 4] = [CF_LOGS, CF_META, CF_SM_DATA, CF_SM_META];

/// A storage error of this store (node ids are `u64`).
pub type StorageResult<T> = Result<T, StorageError<u64>>;

/// Open (or create) the RocksDB database at `path` with its four column families, all with
/// RocksDB's default options as openraft's examples open them, and return the log store and
/// the state machine over it.
pub fn open(path: impl AsRef<Path>) -> Result<(RocksLogStore, RocksStateMachine), rocksdb::Error> {
    let mut db_opts = Options::default();
    db_opts.create_if_missing(true);
    db_opts.create_missing_column_families(true);
    let cfs = COLUMN_FAMILIES.map(|name| ColumnFamilyDescriptor::new(name, Options::default()));
    let db = Arc::new(DB::open_cf_descriptors(&db_opts, path, cfs)?);
    let shared = Shared { db };
    Ok((RocksLogStore::new(shared.clone()), RocksStateMachine::new(shared)))
}

/// The database shared by the log store and the state machine.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) db: Arc<DB>,
}

impl Shared {
    /// Column family `name`: one of [`COLUMN_FAMILIES`], which [`open`] creates, so it is
    /// always there.
    pub(crate) fn cf(&self, name: &str) -> &ColumnFamily {
        self.db.cf_handle(name).unwrap_or_else(|| unreachable!("column family {name} is created by open()"))
    }

    /// The JSON value of key `key` in column family `cf`, `None` when absent; `err` names what
    /// failed to read.
    pub(crate) fn read_json<T>(
        &self,
        cf: &str,
        key: &[u8],
        err: fn(AnyError) -> StorageIOError<u64>,
    ) -> StorageResult<Option<T>>
    where
        T: for<'de> Deserialize<'de>,
    {
        self.read_json_opt(cf, key, &rocksdb::ReadOptions::default(), err)
    }

    /// [`Shared::read_json`] as of `ro` (a snapshot's read options).
    pub(crate) fn read_json_opt<T>(
        &self,
        cf: &str,
        key: &[u8],
        ro: &rocksdb::ReadOptions,
        err: fn(AnyError) -> StorageIOError<u64>,
    ) -> StorageResult<Option<T>>
    where
        T: for<'de> Deserialize<'de>,
    {
        let Some(bytes) = self.db.get_pinned_cf_opt(self.cf(cf), key, ro).map_err(|e| io_err(err, &e))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| io_err(err, &e).into())
    }
}

/// Keys of the `meta` and `sm_meta` column families.
pub(crate) mod meta_key {
    /// The vote (JSON `Vote`), in `meta`.
    pub const VOTE: &[u8] = b"vote";
    /// The committed log id (JSON `Option<LogId>`), in `meta`.
    pub const COMMITTED: &[u8] = b"committed";
    /// The last purged log id (JSON `LogId`), in `meta`.
    pub const PURGED: &[u8] = b"last_purged_log_id";
    /// The last applied log id (JSON `Option<LogId>`), in `sm_meta`.
    pub const APPLIED: &[u8] = b"last_applied_log";
    /// The membership (JSON `StoredMembership`), in `sm_meta`.
    pub const MEMBERSHIP: &[u8] = b"last_membership";
    /// The current snapshot's metadata (JSON `SnapshotMeta`), in `sm_meta`.
    pub const SNAPSHOT_META: &[u8] = b"snapshot_meta";
    /// The current snapshot's data (the bytes sent to followers), in `sm_meta`.
    pub const SNAPSHOT_DATA: &[u8] = b"snapshot_data";
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

/// Write options that sync RocksDB's write-ahead log before the write returns.
pub(crate) fn synced() -> rocksdb::WriteOptions {
    let mut wo = rocksdb::WriteOptions::default();
    wo.set_sync(true);
    wo
}
