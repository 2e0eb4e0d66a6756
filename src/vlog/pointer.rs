//! The value pointer stored in the LSM-tree in place of a separated value.
//!
//! ```text
//! varint64 file | varint64 offset | varint32 op_len | u32 value_crc32c
//! ```
//! `offset` is where the op (`kind | klen | vlen | key | value`) starts inside log file
//! `file`; `op_len` is its whole length. The crc of the value lets a read detect a pointer
//! that leads to the wrong bytes.

use crate::key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::util::coding::{put_fixed32, put_varint32, put_varint64, Reader};

/// The longest op a pointer can name: kind, two varint32 lengths, the largest key and value.
const MAX_OP_BYTES: u64 = (1 + 5 + 5 + MAX_KEY_BYTES + MAX_VALUE_BYTES) as u64;

/// Address and checksum of one separated value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValuePointer {
    /// Number of the value-log file.
    pub file: u64,
    /// Where the op holding the value starts in that file.
    pub offset: u64,
    /// Bytes of the whole op.
    pub op_len: u32,
    /// crc32c of the value.
    pub value_crc: u32,
}

impl ValuePointer {
    /// Append the encoding to `dst`.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.file);
        put_varint64(dst, self.offset);
        put_varint32(dst, self.op_len);
        put_fixed32(dst, self.value_crc);
    }

    /// The encoding in a fresh buffer.
    pub fn encoded(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24);
        self.encode(&mut v);
        v
    }

    /// Whether the op lies within what a log file can hold: no longer than the longest op and
    /// ending before `u64::MAX`. A pointer decoded from a damaged entry may not; every read
    /// checks this before it sizes a buffer or computes an end offset.
    pub fn in_bounds(&self) -> bool {
        u64::from(self.op_len) <= MAX_OP_BYTES && self.offset.checked_add(u64::from(self.op_len)).is_some()
    }

    /// `None` for malformed input (the caller reports it as corruption).
    pub fn decode(src: &[u8]) -> Option<ValuePointer> {
        let mut r = Reader::new(src);
        let p =
            ValuePointer { file: r.varint64()?, offset: r.varint64()?, op_len: r.varint32()?, value_crc: r.fixed32()? };
        r.is_empty().then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_past_any_log_file_are_out_of_bounds() {
        let p = |offset: u64, op_len: u32| ValuePointer { file: 1, offset, op_len, value_crc: 0 };
        assert!(p(1 << 40, 4100).in_bounds());
        assert!(p(0, MAX_OP_BYTES as u32).in_bounds());
        assert!(!p(0, MAX_OP_BYTES as u32 + 1).in_bounds(), "longer than the longest op");
        assert!(!p(u64::MAX - 10, 11).in_bounds(), "ends past u64::MAX");
        assert!(p(u64::MAX - 11, 11).in_bounds());
    }

    #[test]
    fn pointer_round_trips_and_rejects_garbage() {
        let p = ValuePointer { file: 7, offset: 1 << 40, op_len: 4100, value_crc: 0xdead_beef };
        assert_eq!(ValuePointer::decode(&p.encoded()), Some(p));
        let e = p.encoded();
        for cut in 0..e.len() {
            assert_eq!(ValuePointer::decode(&e[..cut]), None);
        }
        let mut long = e.clone();
        long.push(0);
        assert_eq!(ValuePointer::decode(&long), None);
    }
}
