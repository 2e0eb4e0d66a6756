//! The snapshot stream: the bytes a snapshot travels as between nodes — the state's pairs in
//! key order, each key and value as bytes behind a little-endian length, between a header
//! (magic, format version) and a trailer (record count, crc32c of every byte before the crc).
//! This module's one job is to write that stream into a file and to read it back, checking
//! it; docs/format/raft.md has the byte diagram.
//!
//! Both sides work one pair at a time through a fixed buffer, so the memory a stream costs is
//! its largest pair plus 64 KiB whatever the state's size. A reader checks the whole stream
//! before the caller trusts anything it read: [`verify`] reads it to the end without keeping
//! the values; [`Reader`] hands out pairs and fails at the end if the trailer disagrees.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crc_fast::{CrcAlgorithm, Digest};
use wisckey::fs::{RandomAccessFile, WritableFile};

/// The first 8 bytes of every snapshot stream.
pub(crate) const MAGIC: [u8; 8] = *b"WKRAFTSS";
/// The stream format this version writes and reads.
pub(crate) const VERSION: u32 = 1;
/// Magic and version.
const HEADER_BYTES: u64 = 12;
/// Record count (u64) and crc32c (u32).
const TRAILER_BYTES: u64 = 12;
/// Bytes buffered between the stream and the file on either side.
const BUF_BYTES: usize = 64 << 10;

fn crc32c() -> Digest {
    Digest::new(CrcAlgorithm::Crc32Iscsi)
}

/// Writes a snapshot stream into a file, one pair at a time.
pub(crate) struct Writer {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    buf: Vec<u8>,
    crc: Digest,
    count: u64,
    /// The last key written: keys must come in strictly increasing order.
    last: Option<Vec<u8>>,
}

impl Writer {
    /// Start the stream (its header) in `file`, which is at `path` (for errors).
    pub(crate) fn new(file: Box<dyn WritableFile>, path: &Path) -> wisckey::Result<Writer> {
        let mut w = Writer {
            file,
            path: path.to_owned(),
            buf: Vec::with_capacity(BUF_BYTES),
            crc: crc32c(),
            count: 0,
            last: None,
        };
        w.put(&MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        Ok(w)
    }

    /// Append one pair; keys must come in strictly increasing byte order.
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) -> wisckey::Result<()> {
        if self.last.as_deref().is_some_and(|last| last >= key) {
            return Err(wisckey::Error::invalid(format!("snapshot stream {:?}: keys out of order", self.path)));
        }
        self.put(&len_u32(key.len(), &self.path)?.to_le_bytes())?;
        self.put(key)?;
        self.put(&len_u32(value.len(), &self.path)?.to_le_bytes())?;
        self.put(value)?;
        self.count += 1;
        self.last = Some(key.to_vec());
        Ok(())
    }

    /// Write the trailer and hand back the file (appended to, not synced).
    pub(crate) fn finish(mut self) -> wisckey::Result<Box<dyn WritableFile>> {
        self.put(&self.count.to_le_bytes())?;
        let crc = self.crc.finalize() as u32;
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.flush()?;
        Ok(self.file)
    }

    fn put(&mut self, bytes: &[u8]) -> wisckey::Result<()> {
        self.crc.update(bytes);
        if self.buf.len() + bytes.len() > BUF_BYTES {
            self.flush()?;
        }
        if bytes.len() >= BUF_BYTES {
            return self.file.append(bytes);
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> wisckey::Result<()> {
        if !self.buf.is_empty() {
            self.file.append(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

fn len_u32(len: usize, path: &Path) -> wisckey::Result<u32> {
    u32::try_from(len)
        .map_err(|_| wisckey::Error::invalid(format!("snapshot stream {path:?}: a key or value of {len} bytes")))
}

/// Reads a snapshot stream out of a file, checking it as it goes: the header first, each
/// record's lengths against what is left and the keys' order, and at the end the trailer's
/// count and crc32c. Nothing read is to be trusted before [`Reader::next`] answers `None`
/// (or [`verify`] has checked the whole file first).
pub(crate) struct Reader {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    /// The file offset `buf[at..]` starts at is `pos - (buf.len() - at)`.
    pos: u64,
    /// Where the records end and the trailer starts.
    records_end: u64,
    buf: Vec<u8>,
    at: usize,
    crc: Digest,
    count: u64,
    /// The last key read, and a buffer for the next.
    key: Vec<u8>,
    spare: Vec<u8>,
}

impl Reader {
    /// Open the stream in `file` (at `path`, for errors) and check its header.
    pub(crate) fn new(file: Arc<dyn RandomAccessFile>, path: &Path) -> wisckey::Result<Reader> {
        let len = file.len()?;
        let mut r = Reader {
            file,
            path: path.to_owned(),
            pos: 0,
            records_end: len.saturating_sub(TRAILER_BYTES),
            buf: Vec::with_capacity(BUF_BYTES),
            at: 0,
            crc: crc32c(),
            count: 0,
            key: Vec::new(),
            spare: Vec::new(),
        };
        if len < HEADER_BYTES + TRAILER_BYTES {
            return Err(r.damaged(0, format!("{len} bytes, shorter than a header and a trailer")));
        }
        let mut header = [0u8; HEADER_BYTES as usize];
        r.read_exact(&mut header)?;
        if header[..8] != MAGIC {
            return Err(r.damaged(0, "not a snapshot stream (bad magic)".into()));
        }
        let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if version != VERSION {
            return Err(r.damaged(8, format!("stream format {version}, this version reads {VERSION}")));
        }
        Ok(r)
    }

    /// The next pair, `None` after the last one once the trailer checked out. The key is
    /// borrowed until the next call; the value is read into `value` (cleared first) or, when
    /// `value` is `None`, only run through the checksum.
    pub(crate) fn next(&mut self, value: Option<&mut Vec<u8>>) -> wisckey::Result<Option<&[u8]>> {
        if self.offset() == self.records_end {
            self.check_trailer()?;
            return Ok(None);
        }
        let key_len = self.read_len(wisckey::MAX_KEY_BYTES)?;
        let mut key = std::mem::take(&mut self.spare);
        key.resize(key_len, 0);
        self.read_exact(&mut key)?;
        self.check_key(&key)?;
        // The previous key's buffer is the next one's.
        self.spare = std::mem::replace(&mut self.key, key);
        let value_len = self.read_len(wisckey::MAX_VALUE_BYTES)?;
        match value {
            Some(v) => {
                v.clear();
                v.resize(value_len, 0);
                self.read_exact(v)?;
            }
            None => self.skip(value_len)?,
        }
        self.count += 1;
        Ok(Some(&self.key))
    }

    /// A state key: UTF-8 (so the range tombstone `["", FF)` covers it) and after the last.
    fn check_key(&self, key: &[u8]) -> wisckey::Result<()> {
        let at = self.offset() - key.len() as u64;
        if std::str::from_utf8(key).is_err() {
            return Err(self.damaged(at, "a key that is not UTF-8".into()));
        }
        if self.count > 0 && key <= self.key.as_slice() {
            return Err(self.damaged(at, "keys out of order".into()));
        }
        Ok(())
    }

    /// A record's length field, at most `max` and within the records.
    fn read_len(&mut self, max: usize) -> wisckey::Result<usize> {
        let at = self.offset();
        let mut b = [0u8; 4];
        self.read_exact(&mut b)?;
        let len = u32::from_le_bytes(b) as u64;
        if len > max as u64 || len > self.records_end - self.offset() {
            return Err(self.damaged(at, format!("a length of {len} bytes runs past the records")));
        }
        Ok(len as usize)
    }

    fn check_trailer(&mut self) -> wisckey::Result<()> {
        let mut count = [0u8; 8];
        self.fill(&mut count)?;
        self.crc.update(&count);
        let want = self.crc.finalize() as u32;
        let mut crc = [0u8; 4];
        self.fill(&mut crc)?;
        let (count, crc) = (u64::from_le_bytes(count), u32::from_le_bytes(crc));
        if count != self.count {
            return Err(self.damaged(
                self.records_end,
                format!("the trailer counts {count} records, the stream holds {}", self.count),
            ));
        }
        if crc != want {
            return Err(self.damaged(self.records_end + 8, format!("crc32c {crc:#010x}, the bytes give {want:#010x}")));
        }
        Ok(())
    }

    fn offset(&self) -> u64 {
        self.pos - (self.buf.len() - self.at) as u64
    }

    /// Read `out.len()` bytes of the header or the records and run them through the
    /// checksum; a record cut by the trailer's start is damage (also a record that starts at
    /// it: a key that ends where the trailer starts has no value length).
    fn read_exact(&mut self, out: &mut [u8]) -> wisckey::Result<()> {
        if self.offset() + out.len() as u64 > self.records_end {
            return Err(self.damaged(self.offset(), "a record runs into the trailer".into()));
        }
        self.fill(out)?;
        self.crc.update(out);
        Ok(())
    }

    /// Run `len` bytes through the checksum without keeping them.
    fn skip(&mut self, mut len: usize) -> wisckey::Result<()> {
        let mut chunk = [0u8; 4096];
        while len > 0 {
            let n = len.min(chunk.len());
            self.read_exact(&mut chunk[..n])?;
            len -= n;
        }
        Ok(())
    }

    /// Copy the next `out.len()` bytes out of the buffer, refilling it from the file.
    fn fill(&mut self, out: &mut [u8]) -> wisckey::Result<()> {
        let mut done = 0;
        while done < out.len() {
            if self.at == self.buf.len() {
                self.refill()?;
            }
            let n = (out.len() - done).min(self.buf.len() - self.at);
            out[done..done + n].copy_from_slice(&self.buf[self.at..self.at + n]);
            (done, self.at) = (done + n, self.at + n);
        }
        Ok(())
    }

    fn refill(&mut self) -> wisckey::Result<()> {
        self.buf.resize(BUF_BYTES, 0);
        let n = self.file.read_at(self.pos, &mut self.buf)?;
        self.buf.truncate(n);
        self.at = 0;
        if n == 0 {
            return Err(self.damaged(self.pos, "the file ends inside the stream".into()));
        }
        self.pos += n as u64;
        Ok(())
    }

    fn damaged(&self, offset: u64, reason: String) -> wisckey::Error {
        wisckey::Error::corruption(&self.path, offset, format!("snapshot stream: {reason}"))
    }
}

/// Check the whole stream in `file` (at `path`): header, every record's framing and key
/// order, the trailer's count and crc32c. Returns the number of pairs. Memory: one key and
/// a fixed buffer (values are checksummed, not kept).
pub(crate) fn verify(file: Arc<dyn RandomAccessFile>, path: &Path) -> wisckey::Result<u64> {
    let mut r = Reader::new(file, path)?;
    while r.next(None)?.is_some() {}
    Ok(r.count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wisckey::fs::{MemFs, Vfs};

    fn written(fs: &MemFs, path: &Path, pairs: &[(&str, &str)]) -> wisckey::Result<()> {
        let mut w = Writer::new(fs.create(path)?, path)?;
        for (k, v) in pairs {
            w.push(k.as_bytes(), v.as_bytes())?;
        }
        w.finish()?.sync()
    }

    fn read_all(fs: &MemFs, path: &Path) -> wisckey::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut r = Reader::new(fs.open_read(path)?, path)?;
        let (mut out, mut v) = (Vec::new(), Vec::new());
        while let Some(k) = r.next(Some(&mut v))? {
            out.push((k.to_vec(), v.clone()));
        }
        Ok(out)
    }

    #[test]
    fn pairs_round_trip_and_every_damage_is_caught() -> wisckey::Result<()> {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/s"))?;
        let path = Path::new("/s/stream");
        let big = "v".repeat(3 * BUF_BYTES);
        let pairs = [("", "empty key"), ("a", ""), ("b", big.as_str()), ("c", "3")];
        written(&fs, path, &pairs)?;
        let back = read_all(&fs, path)?;
        let want: Vec<_> = pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
        assert_eq!(back, want);
        assert_eq!(verify(fs.open_read(path)?, path)?, 4);
        let bytes = fs.open_read(path)?.read_new(0, fs.file_size(path)? as usize)?.unwrap_or_default();
        for at in (0..bytes.len()).step_by(997).chain([bytes.len() - 1]) {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            let mut f = fs.create(path)?;
            f.append(&bad)?;
            assert!(verify(fs.open_read(path)?, path).is_err(), "a flipped byte at {at} went unnoticed");
        }
        for len in [0, 11, 12, 23, 30, bytes.len() - 1] {
            let mut f = fs.create(path)?;
            f.append(&bytes[..len])?;
            assert!(verify(fs.open_read(path)?, path).is_err(), "a stream cut at {len} went unnoticed");
        }
        Ok(())
    }

    /// A stream's bytes, its count and crc32c after them.
    fn sealed(mut out: Vec<u8>, count: u64) -> Vec<u8> {
        out.extend_from_slice(&count.to_le_bytes());
        let mut crc = crc32c();
        crc.update(&out);
        out.extend_from_slice(&(crc.finalize() as u32).to_le_bytes());
        out
    }

    #[test]
    fn a_record_cut_where_the_trailer_starts_is_damage_not_a_panic() -> wisckey::Result<()> {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/s"))?;
        let path = Path::new("/s/stream");
        let header = [&MAGIC[..], &VERSION.to_le_bytes()].concat();
        // A key that ends where the trailer starts (no value length), the empty key too, and
        // a key length alone.
        let cases = [
            [&header[..], &1u32.to_le_bytes(), b"a"].concat(),
            [&header[..], &0u32.to_le_bytes()].concat(),
            [&header[..], &[1, 0]].concat(),
        ];
        for (n, records) in cases.into_iter().enumerate() {
            fs.create(path)?.append(&sealed(records, 1))?;
            assert!(verify(fs.open_read(path)?, path).is_err(), "case {n} went unnoticed");
        }
        Ok(())
    }

    /// A stream of `keys` (values empty) with a good count and crc, whatever their order.
    fn raw_stream(keys: &[&[u8]]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&VERSION.to_le_bytes());
        for k in keys {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(&0u32.to_le_bytes());
        }
        out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        let mut crc = crc32c();
        crc.update(&out);
        out.extend_from_slice(&(crc.finalize() as u32).to_le_bytes());
        out
    }

    #[test]
    fn keys_out_of_order_or_not_utf8_are_refused_on_both_sides() -> wisckey::Result<()> {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/s"))?;
        let path = Path::new("/s/stream");
        let mut w = Writer::new(fs.create(path)?, path)?;
        w.push(b"b", b"1")?;
        assert!(w.push(b"a", b"2").is_err());
        assert!(w.push(b"b", b"2").is_err());
        let cases: [(&str, &[&[u8]]); 4] = [
            ("in order", &[b"a", b"b", b"c"]),
            ("out of order", &[b"a", b"c", b"b"]),
            ("a key twice", &[b"a", b"b", b"b"]),
            ("not UTF-8", &[b"a", b"\xff"]),
        ];
        for (what, keys) in cases {
            fs.create(path)?.append(&raw_stream(keys))?;
            let verified = verify(fs.open_read(path)?, path);
            assert_eq!(verified.is_ok(), what == "in order", "{what}: {verified:?}");
        }
        Ok(())
    }
}
