//! wisckey: an embedded key-value store with LevelDB's API. An LSM-tree holds the keys and
//! small values; values of at least [`Options::min_separated_value_bytes`] stay in an
//! append-only value log that is also the write-ahead log, and the tree holds checked
//! pointers to them (WiscKey, FAST '16). Value-log garbage collection runs online, and scans
//! read separated values ahead in parallel.
//!
//! ```no_run
//! use wisckey::{Db, Options, ReadOptions, WriteBatch, WriteOptions};
//!
//! let db = Db::open("/tmp/example-db", Options::default())?;
//! db.put(b"key", b"value")?;
//! assert_eq!(db.get(b"key")?.as_deref(), Some(&b"value"[..]));
//!
//! // Several writes at once, durable when `write` returns.
//! let mut batch = WriteBatch::new();
//! batch.put(b"a", b"1").delete(b"key");
//! db.write(&WriteOptions::synced(), &batch)?;
//!
//! for entry in db.scan(&ReadOptions::default())? {
//!     let (key, value) = entry?;
//!     println!("{key:?} = {value:?}");
//! }
//! db.close()?;
//! # Ok::<(), wisckey::Error>(())
//! ```
//!
//! The API: [`Db`] (open, read, write, iterate, snapshots, optimistic [`Transaction`]s, flush
//! and compaction, value-log GC, verification), its [`Options`], [`ReadOptions`] and [`WriteOptions`], [`WriteBatch`],
//! the one [`Error`] type, and the [`fs`] layer every file operation goes through (real files
//! by default, in memory for tests). `examples/` shows each in a small program.
//!
//! A log damaged where a sync had made it durable is refused at open with
//! [`Error::Corruption`]; opening with [`RecoveryMode::PointInTime`] or
//! [`RecoveryMode::SkipDamaged`] salvages what can be kept and [`Db::recovery_report`] says
//! what was lost ([`RecoveryReport`], [`LostRange`]).
//!
//! [`inspect`] reads a database's files one by one (tables, the manifest, log files) and its
//! tree's shape, read-only, for diagnostic tools such as `wisckey dump`.
//!
//! Cargo feature `test-util` adds `fs::FaultFs`, a file system that injects crashes, I/O
//! errors and bit flips, for testing code built on the engine.

#![deny(missing_docs)]

mod compaction;
mod compaction_filter;
mod comparator;
pub mod continuum;
mod db;
mod error;
mod filename;
mod filter_policy;
pub mod fs;
pub mod inspect;
mod internal_iter;
mod key;
mod log;
mod memtable;
mod merge;
mod options;
mod prefix;
mod range_del;
mod snapshot;
mod sst;
mod ttl;
mod util;
mod value;
mod version;
mod vlog;
mod write_batch;

pub use compaction_filter::{CompactionFilter, FilterDecision};
pub use comparator::{BytewiseComparator, Comparator};
pub use db::{
    destroy, list_backups, restore_backup, BackupInfo, CheckpointInfo, Db, DbIterator, DbStats, Entries, GcPhaseMicros,
    GcReport, Isolation, Keyspace, LostRange, Range, RecoveryReport, Transaction, TransactionOptions, TxnCursor,
    TxnRange, VerifyReport, WorkloadCounts, DEFAULT_KEYSPACE_NAME, MAX_KEYSPACE_NAME_BYTES,
};
pub use error::{Error, Result};
pub use filter_policy::FilterPolicy;
pub use key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use merge::{AppendOperator, MergeOperator, MergeResult, U64AddOperator};
pub use options::{
    Compression, FilterAllocation, MergePolicy, Options, PrepopulateValueCache, ReadOptions, RecoveryMode, WriteOptions,
};
pub use prefix::{FixedPrefix, PrefixExtractor};
pub use snapshot::Snapshot;
pub use ttl::{Clock, ManualClock, SystemClock};
pub use value::Value;
pub use write_batch::{BatchIter, BatchOp, WriteBatch};

/// The engine's internal encoders and decoders, for this crate's tests and fuzz targets
/// (feature `test-util`). Not part of the stable API: anything here may change in any release.
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod internals {
    pub use crate::internal_iter::InternalIterator;
    pub use crate::key::{make_internal_key, seek_key, user_key, ValueKind, MAX_SEQ};
    pub use crate::log::{encode_group, group_crc, LogPos, LogReader};
    pub use crate::sst::block::{Block, BlockIter};
    pub use crate::sst::block_builder::BlockBuilder;
    pub use crate::sst::dtable::SegmentWriter;
    pub use crate::sst::{BlockReads, Table, TableBuilder, TableOptions, TableReadOptions};
    pub use crate::util::crc;
    pub use crate::version::{FileMeta, VersionEdit, VersionSet};
    pub use crate::vlog::ValuePointer;
}
