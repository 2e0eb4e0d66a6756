//! The one error type of the engine: every failure names what went wrong and where.

use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error the engine reports. Variants carry named fields so a caller (or a log line)
/// can tell *what* failed and *where* (file and offset) without parsing a message.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call failed.
    #[error("I/O error during {op} on {path:?}: {source}")]
    Io {
        /// The operation that failed (`"append"`, `"fdatasync"`, ...).
        op: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Stored bytes do not match their checksum or their format.
    #[error("corruption in {file:?} at offset {offset}: {reason}")]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Where in the file the damage was found.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The caller passed something the engine cannot accept (oversized key, bad option...).
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What was wrong with it.
        reason: String,
    },
    /// A write with a time-to-live that cannot be honoured: zero (expired when written), or
    /// one whose expiry time overflows. Nothing of the write is written.
    #[error("invalid time-to-live of {ttl_ms} ms for key {key:?}: {reason}")]
    InvalidTtl {
        /// The key written.
        key: Vec<u8>,
        /// The time-to-live asked for, in milliseconds.
        ttl_ms: u128,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Another process or handle holds a lock this call needs: the database's `LOCK` (a
    /// second read-write open), or its `READERS` file.
    #[error("lock file {path:?} is held by another process or handle")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The path exists but is not a wisckey database (or is missing and `create_if_missing` is off).
    #[error("{path:?} is not a wisckey database: {reason}")]
    NotADatabase {
        /// The path given to `Db::open`.
        path: PathBuf,
        /// Why it is not a database.
        reason: String,
    },
    /// `error_if_exists` was set and the database exists.
    #[error("database {path:?} already exists")]
    AlreadyExists {
        /// The database directory.
        path: PathBuf,
    },
    /// The options given contradict what the existing database was created with.
    #[error("option {option} = {given} contradicts the existing database ({existing})")]
    IncompatibleOptions {
        /// The option's name.
        option: &'static str,
        /// The value the database was created with.
        existing: String,
        /// The value given now.
        given: String,
    },
    /// A background job (flush, compaction) failed; the database is read-only until `resume`.
    #[error("database is read-only after a background error: {reason}")]
    Background {
        /// The error the background job or the log write met.
        reason: String,
    },
    /// The database was closed.
    #[error("database is closed")]
    Closed,
    /// No keyspace of this name exists (never created, or dropped).
    #[error("no keyspace named {name:?}")]
    UnknownKeyspace {
        /// The name asked for.
        name: String,
    },
    /// The keyspace was dropped while a handle to it (or a batch naming it) was still in use.
    #[error("keyspace {name:?} was dropped")]
    KeyspaceDropped {
        /// The keyspace's name.
        name: String,
    },
    /// A keyspace of this name exists already.
    #[error("a keyspace named {name:?} exists already")]
    KeyspaceExists {
        /// The name.
        name: String,
    },
    /// The handle was opened with `Db::open_read_only`: it reads, and refuses what would
    /// change the database.
    #[error("database {path:?} is open read-only: {op} is refused")]
    ReadOnly {
        /// The database directory.
        path: PathBuf,
        /// What was asked (`"put"`, `"flush"`, ...).
        op: &'static str,
    },
    /// A checkpoint or a restore was pointed at a directory that already holds something: it
    /// only fills a new or empty directory (and changed nothing).
    #[error("{what} target {path:?} is not empty (it holds {entries} entries, e.g. {example:?})")]
    TargetNotEmpty {
        /// `"checkpoint"` or `"restore"`.
        what: &'static str,
        /// The directory given.
        path: PathBuf,
        /// How many entries it holds.
        entries: usize,
        /// One of them.
        example: String,
    },
    /// A transaction's commit found that a key it wrote (or, as its isolation level asks, read
    /// or scanned) was written by another commit after the transaction's snapshot. Nothing of
    /// the transaction was written; run it again from the start (`Error::is_retryable`).
    #[error("transaction conflict on key \"{}\" of keyspace {keyspace:?}: {reason}; nothing was written, retry", escaped(.key))]
    Conflict {
        /// The keyspace of the key.
        keyspace: String,
        /// The key (a scanned range's first changed key, or its start).
        key: Vec<u8>,
        /// What the commit found.
        reason: String,
    },
    /// Folding a key's merge operands failed: the keyspace has no merge operator, or its
    /// operator returned an error or panicked. Nothing stored was changed.
    #[error("merge of key {key:?} with operator {operator:?} failed: {reason}")]
    Merge {
        /// The merge operator's name (empty: none is set).
        operator: String,
        /// The user key whose operands were being folded.
        key: Vec<u8>,
        /// What went wrong.
        reason: String,
    },
}

/// A key as text, its non-printable bytes escaped (`\x00`).
fn escaped(key: &[u8]) -> String {
    key.iter().flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect()
}

impl Error {
    /// Build an `Io` error from the operation name and the path it touched.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }

    /// Build a `Corruption` error.
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { file: file.into(), offset, reason: reason.into() }
    }

    /// Build an `InvalidArgument` error.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Error::InvalidArgument { reason: reason.into() }
    }

    /// A copy of this error for a second recipient (a group-commit follower, a later caller
    /// after a background failure). I/O errors keep their OS error code.
    pub fn duplicate(&self) -> Error {
        match self {
            Error::Io { op, path, source } => Error::Io {
                op,
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Corruption { file, offset, reason } => Error::corruption(file.clone(), *offset, reason.clone()),
            Error::InvalidArgument { reason } => Error::invalid(reason.clone()),
            Error::InvalidTtl { key, ttl_ms, reason } => {
                Error::InvalidTtl { key: key.clone(), ttl_ms: *ttl_ms, reason }
            }
            Error::Locked { path } => Error::Locked { path: path.clone() },
            Error::NotADatabase { path, reason } => Error::NotADatabase { path: path.clone(), reason: reason.clone() },
            Error::AlreadyExists { path } => Error::AlreadyExists { path: path.clone() },
            Error::IncompatibleOptions { option, existing, given } => {
                Error::IncompatibleOptions { option, existing: existing.clone(), given: given.clone() }
            }
            Error::Background { reason } => Error::Background { reason: reason.clone() },
            Error::Closed => Error::Closed,
            Error::UnknownKeyspace { name } => Error::UnknownKeyspace { name: name.clone() },
            Error::KeyspaceDropped { name } => Error::KeyspaceDropped { name: name.clone() },
            Error::KeyspaceExists { name } => Error::KeyspaceExists { name: name.clone() },
            Error::ReadOnly { path, op } => Error::ReadOnly { path: path.clone(), op },
            Error::TargetNotEmpty { what, path, entries, example } => {
                Error::TargetNotEmpty { what, path: path.clone(), entries: *entries, example: example.clone() }
            }
            Error::Conflict { keyspace, key, reason } => {
                Error::Conflict { keyspace: keyspace.clone(), key: key.clone(), reason: reason.clone() }
            }
            Error::Merge { operator, key, reason } => {
                Error::Merge { operator: operator.clone(), key: key.clone(), reason: reason.clone() }
            }
        }
    }

    /// True when running the operation again may succeed: a transaction's `Conflict`.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// True when this is a `Corruption` error.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// True when the underlying OS error is "no space left on device".
    pub fn is_no_space(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
    }
}
