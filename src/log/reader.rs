//! Reads record groups back from log files at recovery, verifying each group's crc, and says
//! exactly where and why reading stopped.

use std::path::PathBuf;
use std::sync::Arc;

use super::{LogPos, Mark, HEADER_LEN};
use crate::error::Result;
use crate::fs::RandomAccessFile;
use crate::util::coding::{decode_fixed32, decode_fixed64};
use crate::write_batch::BatchIter;

/// One record group read from the log.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub pos: LogPos,
    /// Bytes after the header (ops, or a mark's body).
    pub body_len: usize,
    pub first_seq: u64,
    pub count: u32,
    /// Encoded ops (the `WriteBatch` encoding); empty for a mark.
    pub ops: Vec<u8>,
    /// Set when the record is a mark (`first_seq` and `count` are 0) rather than a group.
    pub mark: Option<Mark>,
}

impl LogRecord {
    /// Offset just past this record.
    pub fn end(&self) -> u64 {
        self.pos.offset + (HEADER_LEN + self.body_len) as u64
    }
}

/// Why a reader stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The file ended exactly at a group boundary.
    Clean,
    /// The bytes at `offset` are not a whole, valid group (torn write or corruption).
    Damaged { offset: u64, reason: String },
}

/// Sequential reader of one log file.
pub struct LogReader {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    number: u64,
    offset: u64,
    size: u64,
    chunk: Vec<u8>,
    chunk_start: u64,
}

const READ_CHUNK: usize = 1 << 20;

impl LogReader {
    /// Read file `number` from `offset` on.
    pub fn new(file: Arc<dyn RandomAccessFile>, number: u64, offset: u64) -> Result<Self> {
        let size = file.len()?;
        let path = file.path().to_path_buf();
        Ok(LogReader { file, path, number, offset, size, chunk: Vec::new(), chunk_start: offset })
    }

    /// Offset just past the last valid group returned.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Continue reading at `offset` (a resync point found after damage).
    pub fn seek(&mut self, offset: u64) {
        self.offset = offset;
    }

    /// Size of the file when the reader was made.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file being read.
    pub fn file(&self) -> &Arc<dyn RandomAccessFile> {
        &self.file
    }

    /// File number being read.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Path of the file being read.
    pub fn path(&self) -> &PathBuf {
        &self.path
    }

    /// Bytes `[at, at+n)` of the file, read through a 1 MiB window.
    fn bytes(&mut self, at: u64, n: usize) -> Result<&[u8]> {
        let end_in_chunk = at + n as u64 <= self.chunk_start + self.chunk.len() as u64;
        if at < self.chunk_start || !end_in_chunk {
            let len = n.max(READ_CHUNK).min((self.size - at) as usize);
            self.chunk.resize(len, 0);
            self.file.read_exact_at(at, &mut self.chunk)?;
            self.chunk_start = at;
        }
        let s = (at - self.chunk_start) as usize;
        Ok(&self.chunk[s..s + n])
    }

    /// The next valid group, or the reason reading stops.
    pub fn next_record(&mut self) -> Result<std::result::Result<LogRecord, ReadOutcome>> {
        let at = self.offset;
        let left = self.size - at.min(self.size);
        if left == 0 {
            return Ok(Err(ReadOutcome::Clean));
        }
        let damaged = |reason: &str| Ok(Err(ReadOutcome::Damaged { offset: at, reason: reason.to_string() }));
        if left < HEADER_LEN as u64 {
            return damaged("truncated record header");
        }
        let h = self.bytes(at, HEADER_LEN)?;
        let (crc, len) = (decode_fixed32(h), decode_fixed32(&h[4..]) as u64);
        let (first_seq, count) = (decode_fixed64(&h[8..]), decode_fixed32(&h[16..]));
        if len > left - HEADER_LEN as u64 {
            return damaged("record length runs past the end of the file");
        }
        let pos = LogPos { file: self.number, offset: at };
        let whole = self.bytes(at, HEADER_LEN + len as usize)?;
        if crate::util::crc(&whole[4..]) != crc {
            return damaged("record checksum mismatch");
        }
        let body_len = len as usize;
        if first_seq == 0 && count == 0 {
            let Some(mark) = Mark::decode(&whole[HEADER_LEN..]) else {
                return damaged("malformed mark");
            };
            self.offset = at + HEADER_LEN as u64 + len;
            return Ok(Ok(LogRecord { pos, body_len, first_seq, count, ops: Vec::new(), mark: Some(mark) }));
        }
        if first_seq == 0 || count == 0 {
            return damaged("record group with sequence number 0 or no operations");
        }
        let ops = whole[HEADER_LEN..].to_vec();
        let mut n = 0u32;
        for op in BatchIter::over(&ops) {
            if op.is_err() {
                return damaged("malformed operation inside a record with a valid checksum");
            }
            n += 1;
        }
        if n != count {
            return damaged("operation count does not match the record header");
        }
        self.offset = at + HEADER_LEN as u64 + len;
        Ok(Ok(LogRecord { pos, body_len, first_seq, count, ops, mark: None }))
    }
}
