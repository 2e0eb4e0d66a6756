//! What a manifest holds: its records in file order, each edit with every field, framed and
//! decoded by the manifest's own reader (`version::manifest::record_at`, `VersionEdit::decode`).
//! Unlike recovery, which stops at the first damaged record, the iterator reports the damage
//! and goes on at the next intact record.

use std::path::{Path, PathBuf};

use super::{open_nonempty, InternalKey, LogPosition};
use crate::error::{Error, Result};
use crate::filename::manifest_file_name;
use crate::fs::PosixFs;
use crate::version::edit::{FileMeta, VersionEdit};
use crate::version::manifest::{read_current, record_at, RECORD_HEADER_LEN};

/// A manifest file read for inspection (the whole file is held in memory).
#[derive(Debug, Clone)]
pub struct ManifestFile {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl ManifestFile {
    /// Read the manifest at `path`. An empty file is refused (a manifest starts with a
    /// snapshot record).
    pub fn open(path: impl AsRef<Path>) -> Result<ManifestFile> {
        let path = path.as_ref();
        let (file, size) = open_nonempty(path, "manifest record")?;
        let len = usize::try_from(size)
            .map_err(|_| Error::corruption(path, 0, format!("file of {size} bytes is too large to read")))?;
        let mut bytes = vec![0u8; len];
        file.read_exact_at(0, &mut bytes)?;
        Ok(ManifestFile { path: path.to_path_buf(), bytes })
    }

    /// Read the manifest the `CURRENT` file of database directory `dir` names.
    pub fn open_current(dir: impl AsRef<Path>) -> Result<ManifestFile> {
        let dir = dir.as_ref();
        let number = read_current(&PosixFs::new(), dir)?;
        ManifestFile::open(manifest_file_name(dir, number))
    }

    /// The path the manifest was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the file.
    pub fn file_size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The records in file order. A damaged record is reported as `Error::Corruption` at its
    /// offset (saying whether an intact record follows, or whether it is a torn tail, which
    /// recovery ignores), and iteration goes on at the next intact record.
    pub fn records(&self) -> ManifestRecords<'_> {
        ManifestRecords { file: self, pos: 0 }
    }
}

/// Iterator over a manifest's records (`ManifestFile::records`).
#[derive(Debug)]
pub struct ManifestRecords<'a> {
    file: &'a ManifestFile,
    pos: usize,
}

impl Iterator for ManifestRecords<'_> {
    type Item = Result<ManifestRecord>;

    fn next(&mut self) -> Option<Result<ManifestRecord>> {
        let buf = &self.file.bytes;
        let path = &self.file.path;
        let at = self.pos;
        if at >= buf.len() {
            return None;
        }
        match record_at(buf, at) {
            Ok((payload, next)) => {
                self.pos = next;
                let record = match VersionEdit::decode(payload) {
                    Ok(edit) => Ok(ManifestRecord {
                        offset: at as u64,
                        payload_bytes: payload.len() as u64,
                        edit: ManifestEdit::from(&edit),
                    }),
                    // The frame is intact, so the next record starts after it.
                    Err(e) => Err(Error::corruption(path, at as u64, format!("intact record, but {e}"))),
                };
                Some(record)
            }
            Err(reason) => {
                let good = (at + 1..buf.len()).find(|&p| record_at(buf, p).is_ok());
                self.pos = good.unwrap_or(buf.len());
                let why = match good {
                    None if at == 0 => {
                        format!("no intact manifest record anywhere in the file ({reason} at its start)")
                    }
                    Some(good) => format!(
                        "damaged record ({reason}); {} bytes skipped, the next intact record is at offset {good}",
                        good - at
                    ),
                    None => format!(
                        "damaged record ({reason}) and no intact record after it: a torn tail of {} bytes \
                         (a crash during the last append leaves one; recovery ignores it)",
                        buf.len() - at
                    ),
                };
                Some(Err(Error::corruption(path, at as u64, why)))
            }
        }
    }
}

/// One manifest record: where it is and the edit it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ManifestRecord {
    /// Offset of the record (its 8-byte header: crc32c and length).
    pub offset: u64,
    /// Bytes of the encoded edit after the header.
    pub payload_bytes: u64,
    /// The edit.
    pub edit: ManifestEdit,
}

impl ManifestRecord {
    /// Offset just past the record.
    pub fn end(&self) -> u64 {
        self.offset + RECORD_HEADER_LEN as u64 + self.payload_bytes
    }
}

/// One edit of the manifest, every field (`docs/format/manifest.md`, "VersionEdit encoding").
/// Scalars are `None` when the edit does not carry them; list fields are empty then.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ManifestEdit {
    /// Key order name (tag 1).
    pub comparator: Option<String>,
    /// Database format version (tag 2).
    pub format_version: Option<u32>,
    /// Next unused file number (tag 3).
    pub next_file_number: Option<u64>,
    /// Last sequence number in use (tag 4).
    pub last_sequence: Option<u64>,
    /// Log head: every log record before it is in tables (tag 5).
    pub log_head: Option<LogPosition>,
    /// Value-log GC tail: the oldest live value-log address (tag 6).
    pub vlog_tail: Option<LogPosition>,
    /// At a clean close: the log was durable up to here (tag 14).
    pub log_durable: Option<LogPosition>,
    /// `(level, key)`: where the next compaction of a level starts (tag 7).
    pub compact_pointers: Vec<(u32, InternalKey)>,
    /// `(level, file number)` of tables removed (tag 8); applied before the additions.
    pub deleted_tables: Vec<(u32, u64)>,
    /// Tables added (tag 9; tag 15 for a DTable of several segments).
    pub added_tables: Vec<TableRecord>,
    /// Name and knobs of the merge policy (tag 10).
    pub policy: Option<String>,
    /// The settings that shape the tree's files, one `name=value` line each (tag 16).
    pub options: Option<String>,
    /// Why the policy changed: the auto-tuner's note for a move (tag 24).
    pub policy_reason: Option<String>,
    /// `(value-log file, bytes)`: separated values tables now point to (tag 11).
    pub vlog_added: Vec<(u64, u64)>,
    /// `(value-log file, bytes)`: separated values no table points to any more (tag 12).
    pub vlog_garbage: Vec<(u64, u64)>,
    /// Value files removed whole by GC (tag 13).
    pub vlog_files_deleted: Vec<u64>,
}

impl From<&VersionEdit> for ManifestEdit {
    fn from(e: &VersionEdit) -> Self {
        let key = |k: &[u8]| InternalKey::parse(k).unwrap_or_else(|| InternalKey::short(k));
        ManifestEdit {
            comparator: e.comparator.clone(),
            format_version: e.format_version,
            next_file_number: e.next_file_number,
            last_sequence: e.last_sequence,
            log_head: e.log_head.map(Into::into),
            vlog_tail: e.vlog_tail.map(Into::into),
            log_durable: e.log_durable.map(Into::into),
            compact_pointers: e.compact_pointers.iter().map(|(l, k)| (*l, key(k))).collect(),
            deleted_tables: e.deleted_files.clone(),
            added_tables: e.added_files.iter().map(|(l, f)| TableRecord::new(*l, f)).collect(),
            policy: e.policy.clone(),
            options: e.options.clone(),
            policy_reason: e.policy_reason.clone(),
            vlog_added: e.vlog_added.clone(),
            vlog_garbage: e.vlog_garbage.clone(),
            vlog_files_deleted: e.vlog_files_deleted.clone(),
        }
    }
}

/// What the manifest records about a table: where it is in the tree and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableRecord {
    /// The level.
    pub level: u32,
    /// The file number: the table is `NNNNNN.sst`.
    pub number: u64,
    /// The length the manifest records (a DTable's footer is at this length).
    pub size: u64,
    /// The smallest internal key.
    pub smallest: InternalKey,
    /// The largest internal key.
    pub largest: InternalKey,
    /// The sorted run it belongs to in its level (newer runs have larger ids).
    pub run: u64,
    /// Entries of every kind.
    pub num_entries: u64,
    /// Deletions.
    pub num_deletions: u64,
    /// Bytes of values the table accounts for (inline values and the lengths of the values it
    /// points to).
    pub raw_value_bytes: u64,
    /// Segments (1 for a plain table; more for a DTable).
    pub segments: u64,
}

impl TableRecord {
    pub(super) fn new(level: u32, f: &FileMeta) -> Self {
        let key = |k: &[u8]| InternalKey::parse(k).unwrap_or_else(|| InternalKey::short(k));
        TableRecord {
            level,
            number: f.number,
            size: f.size,
            smallest: key(&f.smallest),
            largest: key(&f.largest),
            run: f.run,
            num_entries: f.num_entries,
            num_deletions: f.num_deletions,
            raw_value_bytes: f.raw_value_bytes,
            segments: f.segments.max(1),
        }
    }
}

impl InternalKey {
    /// A key too short for a trailer, kept whole as the user key (the edit decoder refuses
    /// such keys, so this only stands in where a decoded key cannot be one).
    fn short(bytes: &[u8]) -> InternalKey {
        InternalKey { user_key: bytes.to_vec(), seq: 0, kind: super::KeyKind::Other(0) }
    }
}
