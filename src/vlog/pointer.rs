//! The value pointer stored in the LSM-tree in place of a separated value.
//!
//! ```text
//! varint64 file | varint64 offset | varint32 op_len | u32 value_crc32c
//! ```
//! `offset` is where the op (`kind | klen | vlen | key | value`) starts inside log file
//! `file`; `op_len` is its whole length. The crc of the value lets a read detect a pointer
//! that leads to the wrong bytes.

use crate::util::coding::{put_fixed32, put_varint32, put_varint64, Reader};

/// Address and checksum of one separated value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValuePointer {
    pub file: u64,
    pub offset: u64,
    pub op_len: u32,
    pub value_crc: u32,
}

impl ValuePointer {
    pub fn encode(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.file);
        put_varint64(dst, self.offset);
        put_varint32(dst, self.op_len);
        put_fixed32(dst, self.value_crc);
    }

    pub fn encoded(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24);
        self.encode(&mut v);
        v
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
