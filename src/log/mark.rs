//! Marks: small records the log writer puts between record groups so recovery can tell a torn
//! tail (bytes no completed sync covered) from damage to bytes that were already durable, and
//! can check that sequence numbers run on without a gap from one file to the next.
//!
//! A mark is a record with `first_seq = 0` and `count = 0` (groups start at sequence 1), whose
//! body is `kind u8 | varint64 durable_file | varint64 durable_offset` followed, for a start
//! mark, by `varint64 next_seq | varint64 prev_file`:
//!
//! * **sync mark** (kind 1), appended right after an `fdatasync` of the log completed: the log
//!   was durable up to `(durable_file, durable_offset)` — every earlier file entirely — when
//!   the mark was written. It is written after the sync, so it never claims more than a
//!   completed sync made durable.
//! * **start mark** (kind 2), the first record of every log file: `next_seq` is the sequence
//!   number of the next group, `prev_file` the log file written before this one (0: none
//!   known), and `(durable_file, durable_offset)` what was durable when the file was started
//!   (`(0, 0)`: no claim).

use super::LogPos;
use crate::util::coding::{get_varint64, put_varint64};

const KIND_SYNC: u8 = 1;
const KIND_START: u8 = 2;

/// A decoded mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Written after a completed sync: the log was durable up to `durable`.
    Sync { durable: LogPos },
    /// First record of a file: the next group has sequence number `next_seq`; the file
    /// before it was `prev_file`.
    Start { next_seq: u64, prev_file: u64, durable: LogPos },
}

impl Mark {
    /// The mark's body (the bytes after the record header).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32);
        let (kind, durable) = match *self {
            Mark::Sync { durable } => (KIND_SYNC, durable),
            Mark::Start { durable, .. } => (KIND_START, durable),
        };
        b.push(kind);
        put_varint64(&mut b, durable.file);
        put_varint64(&mut b, durable.offset);
        if let Mark::Start { next_seq, prev_file, .. } = *self {
            put_varint64(&mut b, next_seq);
            put_varint64(&mut b, prev_file);
        }
        b
    }

    /// Decode a mark's body; `None` if it is malformed (unknown kind, short, trailing bytes).
    pub fn decode(body: &[u8]) -> Option<Mark> {
        let (&kind, mut rest) = body.split_first()?;
        let mut next = || {
            let (v, n) = get_varint64(rest)?;
            rest = &rest[n..];
            Some(v)
        };
        let durable = LogPos { file: next()?, offset: next()? };
        let mark = match kind {
            KIND_SYNC => Mark::Sync { durable },
            KIND_START => Mark::Start { next_seq: next()?, prev_file: next()?, durable },
            _ => return None,
        };
        rest.is_empty().then_some(mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_and_reject_garbage() {
        let marks = [
            Mark::Sync { durable: LogPos { file: 7, offset: 123_456 } },
            Mark::Start { next_seq: 1 << 40, prev_file: 6, durable: LogPos { file: 6, offset: 9 } },
            Mark::Start { next_seq: 1, prev_file: 0, durable: LogPos::default() },
        ];
        for m in marks {
            let b = m.encode();
            assert_eq!(Mark::decode(&b), Some(m));
            assert_eq!(Mark::decode(&b[..b.len() - 1]), None, "short body");
            let mut long = b.clone();
            long.push(0);
            assert_eq!(Mark::decode(&long), None, "trailing byte");
        }
        assert_eq!(Mark::decode(&[3, 0, 0, 0]), None, "unknown kind");
        assert_eq!(Mark::decode(&[]), None);
    }
}
