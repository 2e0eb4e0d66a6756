//! wisckey: an embedded key-value store. An LSM-tree holds keys (and small values, or
//! addresses of large values in an append-only value log), following WiscKey (FAST '16),
//! with pluggable merge policies (LSM-bush / Wacky) and light-weight compaction (LWC-tree).
//!
//! ```no_run
//! use wisckey::{Db, Options};
//! let db = Db::open("/tmp/example-db", Options::default())?;
//! db.put(b"key", b"value")?;
//! assert_eq!(db.get(b"key")?.as_deref(), Some(&b"value"[..]));
//! # Ok::<(), wisckey::Error>(())
//! ```

// DENY_MISSING_DOCS

mod compaction;
mod db;
mod error;
mod filename;
pub mod fs;
mod iter;
mod key;
mod log;
mod memtable;
mod options;
mod sst;
mod util;
mod version;
mod vlog;
mod write_batch;

pub use db::{destroy, Db, DbIterator, DbStats, Entries, GcReport, Snapshot, VerifyReport};
pub use error::{Error, Result};
pub use key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use options::{Compression, Options, ReadOptions, RecoveryMode, WriteOptions};
pub use write_batch::{BatchIter, BatchOp, WriteBatch};

/// The engine's internal encoders and decoders, for this crate's tests and fuzz targets
/// (feature `test-util`). Not part of the stable API: anything here may change in any release.
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub mod internals {
    pub use crate::iter::InternalIterator;
    pub use crate::key::{make_internal_key, seek_key, user_key, ValueKind, MAX_SEQ};
    pub use crate::log::{encode_group, group_crc, LogPos, LogReader};
    pub use crate::sst::block::{Block, BlockIter};
    pub use crate::sst::block_builder::BlockBuilder;
    pub use crate::sst::{Table, TableBuilder, TableOptions};
    pub use crate::util::crc;
    pub use crate::version::{FileMeta, VersionEdit};
    pub use crate::vlog::ValuePointer;
}
