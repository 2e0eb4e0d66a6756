//! The log (value log): append-only files `NNNNNN.vlog` of record groups. Every write batch
//! (or group-committed set of batches) becomes one record group; the log is the write-ahead
//! log, and later issues keep large values in it (WiscKey). Format: `docs/format/log.md`.
//!
//! ```text
//! record group := crc32c u32 | len u32 | first_seq u64 | count u32 | ops[len]
//! op           := kind u8 | varint32 klen | varint32 vlen | key | value
//! crc32c covers len ‖ first_seq ‖ count ‖ ops.
//! mark         := a record with first_seq = 0 and count = 0 whose body is a `Mark` (mark.rs)
//! ```

pub mod mark;
pub mod reader;
pub mod survey;
pub mod writer;

pub use mark::Mark;
pub use reader::{LogReader, LogRecord, ReadOutcome};
pub use survey::{DurableProof, LogBreak, LogSurvey, Segment};
pub use writer::{DurableExtent, LogWriter};

/// Bytes of a record group's header.
pub const HEADER_LEN: usize = 20;

/// A position in the log: file number and byte offset inside that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogPos {
    pub file: u64,
    pub offset: u64,
}

/// Values at least this large have their crc folded into the group's with `crc32c_combine`
/// (a fixed cost of a few µs) instead of a second pass over their bytes.
const COMBINE_MIN_BYTES: usize = 64 << 10;

/// Checksums of a record group: the group crc (over the header fields and all ops) and the
/// crc32c of each value of at least `min_blob_size` bytes, in order (its pointer carries it).
pub fn group_crc(first_seq: u64, count: u32, ops: &[u8], min_blob_size: usize) -> (u32, Vec<u32>) {
    let mut crc = crate::util::crc(&header_fields(first_seq, count, ops.len()));
    let mut it = crate::write_batch::BatchIter::over(ops);
    let (mut value_crcs, mut done) = (Vec::new(), 0usize);
    while let Some(Ok(op)) = it.next() {
        let crate::write_batch::BatchOp::Put { value, .. } = op else { continue };
        if value.len() < min_blob_size {
            continue;
        }
        let v = crate::util::crc(value);
        value_crcs.push(v);
        if value.len() >= COMBINE_MIN_BYTES {
            let value_start = it.offset() - value.len();
            crc = crate::util::crc_extend(crc, &ops[done..value_start]);
            crc = crc32c::crc32c_combine(crc, v, value.len());
            done = it.offset();
        }
    }
    (crate::util::crc_extend(crc, &ops[done..]), value_crcs)
}

/// The 16 header bytes after the crc: `len | first_seq | count`.
fn header_fields(first_seq: u64, count: u32, ops_len: usize) -> [u8; HEADER_LEN - 4] {
    let mut h = [0u8; HEADER_LEN - 4];
    h[..4].copy_from_slice(&(ops_len as u32).to_le_bytes());
    h[4..12].copy_from_slice(&first_seq.to_le_bytes());
    h[12..].copy_from_slice(&count.to_le_bytes());
    h
}

/// The header of a record group whose crc is `crc` (from `group_crc`).
pub fn encode_header(first_seq: u64, count: u32, ops_len: usize, crc: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&crc.to_le_bytes());
    h[4..].copy_from_slice(&header_fields(first_seq, count, ops_len));
    h
}

/// Encode a mark record (header with `first_seq = 0`, `count = 0`, then the mark's body).
pub fn encode_mark(dst: &mut Vec<u8>, mark: &Mark) {
    let body = mark.encode();
    let crc = crate::util::crc_extend(crate::util::crc(&header_fields(0, 0, body.len())), &body);
    encode_group(dst, 0, 0, &body, crc);
}

/// Encode a whole record group (header + ops) into `dst`.
pub fn encode_group(dst: &mut Vec<u8>, first_seq: u64, count: u32, ops: &[u8], crc: u32) {
    dst.extend_from_slice(&encode_header(first_seq, count, ops.len(), crc));
    dst.extend_from_slice(ops);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_crc_equals_plain_crc_of_the_group() {
        let mut b = crate::WriteBatch::new();
        b.put(b"k1", &[7u8; 3000]).delete(b"k2").put(b"k3", b"small").put(b"k4", &[9u8; 1500]);
        b.put(b"k5", &vec![3u8; COMBINE_MIN_BYTES + 10]);
        for min_blob in [0, 100, 2000, usize::MAX] {
            let (crc, values) = group_crc(5, 5, &b.rep, min_blob);
            let mut g = Vec::new();
            encode_group(&mut g, 5, 5, &b.rep, crc);
            assert_eq!(crate::util::crc(&g[4..]).to_le_bytes(), g[..4], "group crc");
            let expect = match min_blob {
                0 => 4,
                100 => 3,
                2000 => 2,
                _ => 0,
            };
            assert_eq!(values.len(), expect);
        }
    }
}
