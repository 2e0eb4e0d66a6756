//! The log (value log): append-only files `NNNNNN.vlog` of record groups. Every write batch
//! (or group-committed set of batches) becomes one record group; the log is the write-ahead
//! log, and later issues keep large values in it (WiscKey). Format: `docs/format/log.md`.
//!
//! ```text
//! record group := crc32c u32 | len u32 | first_seq u64 | count u32 | ops[len]
//! op           := kind u8 | varint32 klen | varint32 vlen | key | value
//! crc32c covers len ‖ first_seq ‖ count ‖ ops.
//! ```

pub mod reader;
pub mod writer;

pub use reader::{LogReader, LogRecord, ReadOutcome};
pub use writer::LogWriter;

use crate::util::coding::{put_fixed32, put_fixed64};

/// Bytes of a record group's header.
pub const HEADER_LEN: usize = 20;

/// A position in the log: file number and byte offset inside that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogPos {
    pub file: u64,
    pub offset: u64,
}

/// Encode a whole record group (header + ops) into `dst`.
pub fn encode_group(dst: &mut Vec<u8>, first_seq: u64, count: u32, ops: &[u8]) {
    let start = dst.len();
    put_fixed32(dst, 0); // crc placeholder
    put_fixed32(dst, ops.len() as u32);
    put_fixed64(dst, first_seq);
    put_fixed32(dst, count);
    dst.extend_from_slice(ops);
    let crc = crate::util::crc(&dst[start + 4..]);
    dst[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}
