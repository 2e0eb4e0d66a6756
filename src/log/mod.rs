//! The log (value log): append-only files `NNNNNN.vlog` of record groups. Every write batch
//! (or group-committed set of batches) becomes one record group; the log is the write-ahead
//! log, and the home of large values (WiscKey's value log). Format: `docs/format/log.md`.
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
pub use reader::{GroupSpan, LogReader, LogRecord, ReadOutcome};
pub use survey::{LogBreak, LogSurvey, Segment};
pub use writer::{DurableExtent, LogWriter};

/// What a reader of the value log needs from the appender, and nothing more: the ops still in
/// its buffer (not yet handed to their file) and the extent of the log no truncation can reach.
/// The value-log reader holds this trait, so it does not know the writer.
pub trait BufferedOps: Send + Sync {
    /// The `len` op bytes at `offset` of log file `file`, if they are still in the buffer.
    fn read_buffered(&self, file: u64, offset: u64, len: usize) -> Option<Vec<u8>>;
    /// The part of the log that can never be truncated away (safe to map).
    fn extent(&self) -> std::sync::Arc<DurableExtent>;
}

impl BufferedOps for parking_lot::Mutex<LogWriter> {
    fn read_buffered(&self, file: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
        self.lock().read_buffered(file, offset, len)
    }

    fn extent(&self) -> std::sync::Arc<DurableExtent> {
        self.lock().extent()
    }
}

use crate::write_batch::{BatchIter, BatchOp};

/// Bytes of a record group's header.
pub const HEADER_LEN: usize = 20;

/// A position in the log: file number and byte offset inside that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogPos {
    /// Number of the log file (`NNNNNN.vlog`).
    pub file: u64,
    /// Byte offset in that file.
    pub offset: u64,
}

/// A value that stays in the value log (key-value separation, WiscKey): which op of its
/// record group holds it, where that op is, and the value's crc32c (its pointer carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeparatedValue {
    /// Index of the op among the group's ops.
    pub op_index: u32,
    /// Offset of the op from the start of the record group (its header included).
    pub op_offset: u64,
    /// Bytes of the whole op (`kind | klen | vlen | key | value`).
    pub op_len: u32,
    /// Bytes of the value, the op's last bytes.
    pub value_len: u32,
    /// crc32c of the value.
    pub value_crc: u32,
}

impl SeparatedValue {
    /// The op's bytes within the group's `ops` (the group's ops without its header).
    pub fn op_bytes<'a>(&self, ops: &'a [u8]) -> &'a [u8] {
        let start = self.op_offset as usize - HEADER_LEN;
        &ops[start..start + self.op_len as usize]
    }
}

/// The puts among a record group's `ops` whose value is at least `min_separated_value_bytes` bytes: the
/// one place that decides which values are separated. The memtable's pointers
/// (`Memtable::apply_group`) and GC's relocated copies are made from this list.
pub fn separated_values(ops: &[u8], min_separated_value_bytes: usize) -> Vec<SeparatedValue> {
    separated_values_by(ops, |_| min_separated_value_bytes)
}

/// `separated_values` with each keyspace's threshold (`threshold(keyspace id)`): a group may
/// hold ops of keyspaces with different separation thresholds.
pub fn separated_values_by(ops: &[u8], threshold: impl Fn(u32) -> usize) -> Vec<SeparatedValue> {
    let mut out = Vec::new();
    let mut it = BatchIter::over(ops);
    let mut op_index = 0u32;
    loop {
        let start = it.offset();
        let Some(Ok((ks, op))) = it.next() else { break };
        if let BatchOp::Put { value, .. } = op {
            if value.len() >= threshold(ks) {
                out.push(SeparatedValue {
                    op_index,
                    op_offset: (HEADER_LEN + start) as u64,
                    op_len: (it.offset() - start) as u32,
                    value_len: value.len() as u32,
                    value_crc: crate::util::crc(value),
                });
            }
        }
        op_index += 1;
    }
    out
}

/// The crc of a record group: over the header fields and all ops, in one pass. For a
/// separated value this is the second pass over its bytes (`separated_values` computed its
/// own crc first): folding that crc in with `crc32c_combine` cost more than reading the value
/// again (docs/BENCHMARKS.md §11).
pub fn group_crc(first_seq: u64, count: u32, ops: &[u8]) -> u32 {
    crate::util::crc_extend(crate::util::crc(&header_fields(first_seq, count, ops.len())), ops)
}

/// Bytes a record group with `ops_len` bytes of ops takes in the log.
pub fn group_len(ops_len: usize) -> u64 {
    (HEADER_LEN + ops_len) as u64
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
    fn group_crc_equals_plain_crc_of_the_encoded_group() {
        let mut b = crate::WriteBatch::new();
        b.put(b"k1", [7u8; 3000]).delete(b"k2").put(b"k3", b"small").put(b"k4", [9u8; 1500]);
        b.put(b"k5", vec![3u8; 100 << 10]);
        for min_separated in [0, 100, 2000, usize::MAX] {
            let values = separated_values(&b.rep, min_separated);
            let crc = group_crc(5, 5, &b.rep);
            let mut g = Vec::new();
            encode_group(&mut g, 5, 5, &b.rep, crc);
            assert_eq!(crate::util::crc(&g[4..]).to_le_bytes(), g[..4], "group crc");
            let expect = match min_separated {
                0 => 4,
                100 => 3,
                2000 => 2,
                _ => 0,
            };
            assert_eq!(values.len(), expect);
        }
    }

    #[test]
    fn separated_values_name_their_ops_in_the_encoded_group() {
        let mut b = crate::WriteBatch::new();
        b.put(b"a", [1u8; 300]).delete(b"b").put(b"c", b"tiny").put(b"d", [4u8; 200]);
        let values = separated_values(&b.rep, 100);
        assert_eq!(values.iter().map(|v| v.op_index).collect::<Vec<_>>(), [0, 3]);
        let mut g = Vec::new();
        encode_group(&mut g, 1, 4, &b.rep, group_crc(1, 4, &b.rep));
        for (v, (key, value)) in values.iter().zip([(b"a", [1u8; 300].as_slice()), (b"d", [4u8; 200].as_slice())]) {
            let op = &g[v.op_offset as usize..][..v.op_len as usize];
            let decoded: Vec<_> = BatchIter::over(op).collect();
            assert_eq!(
                decoded,
                [Ok((0, BatchOp::Put { key: &key[..], value, expires_at_ms: None }))],
                "op {}",
                v.op_index
            );
            assert_eq!((v.value_len as usize, v.value_crc), (value.len(), crate::util::crc(value)));
        }
        assert_eq!(group_len(b.rep.len()), g.len() as u64);
    }
}
