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
    /// Another process or handle holds the database lock.
    #[error("database {path:?} is locked by another process or handle")]
    Locked {
        /// The database directory.
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
            Error::Merge { operator, key, reason } => {
                Error::Merge { operator: operator.clone(), key: key.clone(), reason: reason.clone() }
            }
        }
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
