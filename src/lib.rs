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

pub mod cache;
pub mod compaction;
pub mod db;
pub mod error;
pub mod fs;
pub mod iter;
pub mod key;
pub mod log;
pub mod memtable;
pub mod options;
pub mod sst;
pub mod table_cache;
pub mod util;
pub mod version;
pub mod vlog;
pub mod write_batch;

pub use db::{destroy, Db, DbIterator, DbStats, GcReport, LostRange, RecoveryReport, Snapshot};
pub use error::{Error, Result};
pub use options::{Compression, Options, ReadOptions, RecoveryMode, WriteOptions};
pub use write_batch::WriteBatch;

/// Largest user key accepted (bytes).
pub const MAX_KEY_BYTES: usize = 64 << 10;
/// Largest value accepted (bytes).
pub const MAX_VALUE_BYTES: usize = 256 << 20;
