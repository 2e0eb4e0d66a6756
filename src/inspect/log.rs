//! What a log file (`NNNNNN.vlog`) or a cold value file (`NNNNNN.cold`) holds: record groups
//! and marks in file order, read with recovery's own reader (`log::LogReader`, which checks
//! every crc, length and op count). After damage, reading resumes where recovery's survey
//! would (`log::survey::find_resync`); a span of zero bytes is reported as such, since value-
//! log GC punches holes (which read back as zeros) in files it has collected from.

use std::path::{Path, PathBuf};

use super::{open_nonempty, LogPosition};
use crate::error::{Error, Result};
use crate::log::survey::{find_resync, plausible_header};
use crate::log::{LogReader, LogRecord, Mark, ReadOutcome, HEADER_LEN};
use crate::write_batch::{BatchIter, BatchOp};

/// A log or cold value file opened for inspection; iterate it for its records.
pub struct LogFile {
    reader: LogReader,
    path: PathBuf,
    size: u64,
    /// A cold value file: its groups' sequence numbers need not follow each other.
    cold: bool,
    done: bool,
}

impl std::fmt::Debug for LogFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogFile").field("path", &self.path).field("size", &self.size).finish_non_exhaustive()
    }
}

impl LogFile {
    /// Open the log or cold value file at `path` (a name ending in `.cold` is read as a cold
    /// file). An empty file is refused (a log file starts with a start mark, a cold file with
    /// a group).
    pub fn open(path: impl AsRef<Path>) -> Result<LogFile> {
        let path = path.as_ref();
        let (file, size) = open_nonempty(path, "log record")?;
        // The number only labels positions in the reader; the dump reports offsets.
        let reader = LogReader::new(file, 0, 0)?;
        let cold = path.extension().is_some_and(|e| e == "cold");
        Ok(LogFile { reader, path: path.to_path_buf(), size, cold, done: false })
    }

    /// The path the file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the file.
    pub fn file_size(&self) -> u64 {
        self.size
    }

    /// After damaged bytes at `at`: where valid records resume (if anywhere), and the entry or
    /// error reporting the span in between.
    fn damaged(&mut self, at: u64, reason: String) -> Result<LogEntry> {
        let resume = match self.cold {
            true => self.resync_any_order(at + 1)?,
            false => find_resync(&mut self.reader, at + 1, None, false)?,
        };
        let end = resume.unwrap_or(self.size);
        self.reader.seek(end);
        self.done = resume.is_none();
        if self.all_zero(at, end)? {
            return Ok(LogEntry::Zeros { offset: at, bytes: end - at });
        }
        let why = match resume {
            None if at == 0 => format!("no valid log record anywhere in the file ({reason} at its start)"),
            Some(r) => format!("{reason}; {} bytes unreadable, valid records resume at offset {r}", r - at),
            None => format!("{reason}; no valid record after it (the last {} bytes of the file)", end - at),
        };
        Err(Error::corruption(&self.path, at, why))
    }

    /// `find_resync` for a cold file, whose groups are numbered by the sequence number
    /// visible when GC wrote them (so one group's numbers may overlap the next's): the first
    /// offset from `from` on where a valid group starts that is followed by the end of the
    /// file or by another valid group.
    fn resync_any_order(&mut self, from: u64) -> Result<Option<u64>> {
        const WINDOW: usize = 1 << 16;
        let mut window = vec![0u8; WINDOW + HEADER_LEN];
        let mut base = from;
        while base + HEADER_LEN as u64 <= self.size {
            let len = ((self.size - base) as usize).min(window.len());
            self.reader.file().read_exact_at(base, &mut window[..len])?;
            let last = (len - HEADER_LEN).min(WINDOW - 1);
            for i in 0..=last {
                let at = base + i as u64;
                if plausible_header(&window[i..i + HEADER_LEN], self.size - at, None) && self.valid_pair_at(at)? {
                    return Ok(Some(at));
                }
            }
            base += (last + 1) as u64;
        }
        Ok(None)
    }

    /// Whether a valid record starts at `at`, followed by the end of the file or another one.
    fn valid_pair_at(&mut self, at: u64) -> Result<bool> {
        self.reader.seek(at);
        if self.reader.next_record()?.is_err() {
            return Ok(false);
        }
        Ok(!matches!(self.reader.next_record()?, Err(ReadOutcome::Damaged { .. })))
    }

    /// Whether bytes `[from, to)` are all zero (a punched hole, or a never-written extent).
    fn all_zero(&self, from: u64, to: u64) -> Result<bool> {
        let mut buf = vec![0u8; 1 << 16];
        let mut at = from;
        while at < to {
            let n = ((to - at) as usize).min(buf.len());
            self.reader.file().read_exact_at(at, &mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }
}

impl Iterator for LogFile {
    type Item = Result<LogEntry>;

    /// The next record, a span of zeros, or `Error::Corruption` at the offset of damaged bytes
    /// (saying where valid records resume, and iteration goes on there).
    fn next(&mut self) -> Option<Result<LogEntry>> {
        if self.done {
            return None;
        }
        let record = match self.reader.next_record() {
            Ok(r) => r,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        match record {
            Ok(rec) => Some(Ok(LogEntry::from(rec))),
            Err(ReadOutcome::Clean) => {
                self.done = true;
                None
            }
            Err(ReadOutcome::Damaged { offset, reason }) => Some(self.damaged(offset, reason)),
        }
    }
}

/// What a log file holds at one offset.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogEntry {
    /// A record group: one write batch, or several committed together (crc verified).
    Group(RecordGroup),
    /// Written after a completed sync: the log was durable up to `durable`.
    SyncMark {
        /// Offset of the mark.
        offset: u64,
        /// Every earlier log file entirely, and this position's file up to its offset.
        durable: LogPosition,
    },
    /// The first record of a log file.
    StartMark {
        /// Offset of the mark (0).
        offset: u64,
        /// Sequence number of the file's first group.
        next_seq: u64,
        /// The log file written before this one (0: none known).
        prev_file: u64,
        /// What was durable when the file was started (`(0, 0)`: no claim).
        durable: LogPosition,
    },
    /// Bytes that are all zero where a record should be: a hole value-log GC punched, or an
    /// extent allocated but never written (a crash).
    Zeros {
        /// Offset of the first zero byte.
        offset: u64,
        /// Bytes of zeros, up to the next valid record or the end of the file.
        bytes: u64,
    },
}

impl From<LogRecord> for LogEntry {
    fn from(rec: LogRecord) -> Self {
        let offset = rec.pos.offset;
        match rec.mark {
            Some(Mark::Sync { durable }) => LogEntry::SyncMark { offset, durable: durable.into() },
            Some(Mark::Start { next_seq, prev_file, durable }) => {
                LogEntry::StartMark { offset, next_seq, prev_file, durable: durable.into() }
            }
            None => LogEntry::Group(RecordGroup {
                offset,
                bytes: (HEADER_LEN + rec.body_len) as u64,
                first_seq: rec.first_seq,
                count: rec.count,
                ops: rec.ops,
            }),
        }
    }
}

/// A record group: a header (crc32c, length, first sequence number, op count) and its ops,
/// encoded as a write batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordGroup {
    /// Offset of the group's header.
    pub offset: u64,
    /// Bytes of the whole group, its 20-byte header included.
    pub bytes: u64,
    /// Sequence number of the first op; op i has `first_seq + i` (in a cold file, any
    /// non-zero number: its values' sequence numbers are those of the pointer puts GC logs).
    pub first_seq: u64,
    /// Ops in the group.
    pub count: u32,
    ops: Vec<u8>,
}

impl RecordGroup {
    /// The ops in order, each with its file offset (what a value pointer names) and
    /// sequence number.
    pub fn ops(&self) -> LogOps<'_> {
        LogOps { it: BatchIter::over(&self.ops), base: self.offset + HEADER_LEN as u64, seq: self.first_seq }
    }
}

/// Iterator over a record group's ops (`RecordGroup::ops`).
pub struct LogOps<'a> {
    it: BatchIter<'a>,
    base: u64,
    seq: u64,
}

impl std::fmt::Debug for LogOps<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogOps").field("offset", &(self.base + self.it.offset() as u64)).finish_non_exhaustive()
    }
}

impl<'a> Iterator for LogOps<'a> {
    type Item = LogOp<'a>;

    fn next(&mut self) -> Option<LogOp<'a>> {
        let start = self.it.offset();
        // The reader decoded every op of the group before handing it out.
        let (keyspace, op) = self.it.next()?.ok()?;
        let out = LogOp {
            offset: self.base + start as u64,
            bytes: (self.it.offset() - start) as u64,
            seq: self.seq,
            keyspace,
            op,
        };
        self.seq += 1;
        Some(out)
    }
}

/// One op of a record group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOp<'a> {
    /// File offset of the op (a value pointer to it names this offset).
    pub offset: u64,
    /// Bytes of the op (`kind | klen | vlen | key | value`): a pointer's `op_len`.
    pub bytes: u64,
    /// Its sequence number.
    pub seq: u64,
    /// The id of the keyspace it writes (0: the default keyspace).
    pub keyspace: u32,
    /// What it does: a put, a delete, a range delete, or (written by value-log GC) a pointer
    /// put.
    pub op: BatchOp<'a>,
}
