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
        let h = match Header::decode(self.bytes(at, HEADER_LEN)?, left) {
            Ok(h) => h,
            Err(reason) => return damaged(reason),
        };
        let pos = LogPos { file: self.number, offset: at };
        let whole = self.bytes(at, HEADER_LEN + h.len as usize)?;
        let mark = match h.check(whole) {
            Ok(mark) => mark,
            Err(reason) => return damaged(reason),
        };
        let body_len = h.len as usize;
        let ops = if mark.is_some() { Vec::new() } else { whole[HEADER_LEN..].to_vec() };
        self.offset = at + HEADER_LEN as u64 + h.len;
        Ok(Ok(LogRecord { pos, body_len, first_seq: h.first_seq, count: h.count, ops, mark }))
    }

    /// Whole record groups from the current offset on, read in place into `buf` (its old
    /// contents overwritten; one read, plus one for a group that runs past it) until at least `min_bytes`
    /// are read or reading stops: value-log GC's chunks, without a copy of every group
    /// (`next_record`'s) or a window's reads. Returns the groups' positions and their ops'
    /// ranges in `buf` (marks are checked and left out), and why reading stopped, if it did.
    pub fn read_groups_into(
        &mut self,
        min_bytes: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(Vec<GroupSpan>, Option<ReadOutcome>)> {
        let start = self.offset;
        let want = min_bytes.saturating_add(HEADER_LEN as u64).min(self.size - start.min(self.size)) as usize;
        // Reused as it is: only a grown tail is zeroed before the read overwrites it.
        buf.truncate(want);
        buf.resize(want, 0);
        self.file.read_exact_at(start, buf)?;
        let mut groups = Vec::new();
        while self.offset - start < min_bytes {
            let at = self.offset;
            let left = self.size - at.min(self.size);
            let damaged = |reason: &str| ReadOutcome::Damaged { offset: at, reason: reason.to_string() };
            if left == 0 {
                return Ok((groups, Some(ReadOutcome::Clean)));
            }
            if left < HEADER_LEN as u64 {
                return Ok((groups, Some(damaged("truncated record header"))));
            }
            let s = (at - start) as usize;
            self.extend(buf, start, s + HEADER_LEN)?;
            let h = match Header::decode(&buf[s..s + HEADER_LEN], left) {
                Ok(h) => h,
                Err(reason) => return Ok((groups, Some(damaged(reason)))),
            };
            let end = s + HEADER_LEN + h.len as usize;
            self.extend(buf, start, end)?;
            match h.check(&buf[s..end]) {
                Ok(Some(_mark)) => {}
                Ok(None) => {
                    groups.push(GroupSpan { pos: LogPos { file: self.number, offset: at }, ops: s + HEADER_LEN..end })
                }
                Err(reason) => return Ok((groups, Some(damaged(reason)))),
            }
            self.offset = at + HEADER_LEN as u64 + h.len;
        }
        Ok((groups, None))
    }

    /// Make `buf` (the file's bytes from `start`) hold at least `len` bytes.
    fn extend(&self, buf: &mut Vec<u8>, start: u64, len: usize) -> Result<()> {
        let have = buf.len();
        if len > have {
            buf.resize(len, 0);
            self.file.read_exact_at(start + have as u64, &mut buf[have..])?;
        }
        Ok(())
    }
}

/// One record group `read_groups_into` read: where it is in the file, and its ops' range in
/// the buffer.
#[derive(Debug, Clone)]
pub struct GroupSpan {
    pub pos: LogPos,
    pub ops: std::ops::Range<usize>,
}

/// A record's header fields.
struct Header {
    crc: u32,
    /// Bytes after the header.
    len: u64,
    first_seq: u64,
    count: u32,
}

impl Header {
    /// The header `h` of a record with `left` bytes of the file from its start on; the error
    /// says what is wrong.
    fn decode(h: &[u8], left: u64) -> std::result::Result<Header, &'static str> {
        let (crc, len) = (decode_fixed32(h), decode_fixed32(&h[4..]) as u64);
        let (first_seq, count) = (decode_fixed64(&h[8..]), decode_fixed32(&h[16..]));
        if len > left - HEADER_LEN as u64 {
            return Err("record length runs past the end of the file");
        }
        Ok(Header { crc, len, first_seq, count })
    }

    /// Check the whole record (`whole`: header and body) against these fields: the checksum,
    /// then a mark's body (returned) or a group's ops (every one well formed, as many as the
    /// header says). The error says what is wrong.
    fn check(&self, whole: &[u8]) -> std::result::Result<Option<Mark>, &'static str> {
        if crate::util::crc(&whole[4..]) != self.crc {
            return Err("record checksum mismatch");
        }
        let body = &whole[HEADER_LEN..];
        if self.first_seq == 0 && self.count == 0 {
            return Mark::decode(body).map(Some).ok_or("malformed mark");
        }
        if self.first_seq == 0 || self.count == 0 {
            return Err("record group with sequence number 0 or no operations");
        }
        let mut n = 0u32;
        for op in BatchIter::over(body) {
            if op.is_err() {
                return Err("malformed operation inside a record with a valid checksum");
            }
            n += 1;
        }
        if n != self.count {
            return Err("operation count does not match the record header");
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{MemFs, Vfs};
    use std::path::Path;

    /// A log file of `n` groups of puts of assorted sizes; returns its bytes.
    fn groups(n: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        for i in 0..n {
            let mut b = crate::WriteBatch::new();
            for j in 0..(i % 4 + 1) {
                b.put(format!("k{i}-{j}"), vec![i as u8; (i * 397 % 5000) as usize + 1]);
            }
            let (seq, count) = (i * 10 + 1, b.len() as u32);
            super::super::encode_group(&mut bytes, seq, count, &b.rep, super::super::group_crc(seq, count, &b.rep));
        }
        bytes
    }

    fn reader(vfs: &Arc<dyn Vfs>, bytes: &[u8]) -> LogReader {
        let path = Path::new("/g.vlog");
        let mut f = vfs.create(path).unwrap();
        f.append(bytes).unwrap();
        f.sync_data().unwrap();
        LogReader::new(vfs.open_read(path).unwrap(), 3, 0).unwrap()
    }

    /// Every group `next_record` returns, and where and why it stops.
    fn by_records(vfs: &Arc<dyn Vfs>, bytes: &[u8]) -> (Vec<(LogPos, Vec<u8>)>, ReadOutcome) {
        let mut r = reader(vfs, bytes);
        let mut out = Vec::new();
        loop {
            match r.next_record().unwrap() {
                Ok(rec) => out.push((rec.pos, rec.ops)),
                Err(why) => return (out, why),
            }
        }
    }

    /// The same through `read_groups_into` in steps of `min_bytes`.
    fn by_chunks(vfs: &Arc<dyn Vfs>, bytes: &[u8], min_bytes: u64) -> (Vec<(LogPos, Vec<u8>)>, ReadOutcome) {
        let mut r = reader(vfs, bytes);
        let (mut out, mut buf) = (Vec::new(), vec![0xEE; 3]);
        loop {
            let before = r.offset();
            let (spans, stop) = r.read_groups_into(min_bytes, &mut buf).unwrap();
            out.extend(spans.into_iter().map(|g| (g.pos, buf[g.ops].to_vec())));
            if let Some(why) = stop {
                return (out, why);
            }
            assert!(r.offset() - before >= min_bytes, "a chunk ended short of its size without a reason");
        }
    }

    #[test]
    fn groups_read_in_place_in_chunks_are_the_records_read_one_by_one_and_stop_at_the_same_damage() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut bytes = groups(40);
        let whole = by_records(&vfs, &bytes);
        assert_eq!((whole.0.len(), &whole.1), (40, &ReadOutcome::Clean));
        for min_bytes in [1, 700, 4096, 20_000, 1 << 30] {
            assert_eq!(by_chunks(&vfs, &bytes, min_bytes), whole, "chunks of {min_bytes}");
        }
        // A flipped byte in group 17's body, and a cut inside the last group's.
        let cut = bytes[..bytes.len() - 3].to_vec();
        let at = whole.0[17].0.offset as usize + HEADER_LEN + 5;
        bytes[at] ^= 0x40;
        for damaged in [&bytes[..], &cut[..]] {
            let want = by_records(&vfs, damaged);
            assert!(matches!(want.1, ReadOutcome::Damaged { .. }), "{:?}", want.1);
            for min_bytes in [1, 4096, 1 << 30] {
                assert_eq!(by_chunks(&vfs, damaged, min_bytes), want, "damaged, chunks of {min_bytes}");
            }
        }
    }
}
