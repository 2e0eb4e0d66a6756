//! Builds one block: prefix-compressed entries, then the restart array and its count.
//!
//! Entry: `shared varint32 ‖ unshared varint32 ‖ value_len varint32 ‖ key[shared..] ‖ value`.
//! Every `restart_interval` entries the key is stored whole (`shared == 0`) and its offset is
//! recorded, so a reader can binary-search the restart points.

use crate::util::coding::{put_fixed32, put_varint32};

/// Bytes `put_varint32` takes for `n`.
fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - (n | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

/// Accumulates entries for one block; `finish` returns the encoded block.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    /// Entries since the last restart point.
    counter: usize,
    restart_interval: usize,
    last_key: Vec<u8>,
    finished: bool,
}

impl BlockBuilder {
    /// A builder that stores a whole key every `restart_interval` entries (at least 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            restart_interval: restart_interval.max(1),
            last_key: Vec::new(),
            finished: false,
        }
    }

    /// Forget everything added so far (keeps the allocations).
    pub fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.last_key.clear();
        self.finished = false;
    }

    /// True when no entry was added since the last reset.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Size of the block if it were finished now.
    pub fn current_size_estimate(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// Bytes of `key` the next entry shares with the last one (0 at a restart point).
    fn shared_with(&self, key: &[u8]) -> usize {
        if self.counter >= self.restart_interval {
            return 0;
        }
        self.last_key.iter().zip(key).take_while(|(a, b)| a == b).count()
    }

    /// Size of the block if `key` and `value` were added and it were finished then (what
    /// the table builder checks before an entry that might not fit in a page).
    pub fn size_with(&self, key: &[u8], value: &[u8]) -> usize {
        let restart = self.counter >= self.restart_interval;
        let shared = self.shared_with(key);
        let unshared = key.len() - shared;
        let lens = varint_len(shared) + varint_len(unshared) + varint_len(value.len());
        self.current_size_estimate() + lens + unshared + value.len() + if restart { 4 } else { 0 }
    }

    /// Append an entry. Keys must be added in strictly increasing order (checked by the
    /// table builder, which knows the comparator).
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        debug_assert!(!self.finished, "add after finish without reset");
        let shared = self.shared_with(key);
        if self.counter >= self.restart_interval {
            debug_assert!(self.buf.len() <= u32::MAX as usize, "block larger than 4 GiB");
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        }
        let unshared = &key[shared..];
        put_varint32(&mut self.buf, shared as u32);
        put_varint32(&mut self.buf, unshared.len() as u32);
        put_varint32(&mut self.buf, value.len() as u32);
        self.buf.extend_from_slice(unshared);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(unshared);
        self.counter += 1;
    }

    /// Append the restart array and count; returns the whole block. Call `reset` before
    /// adding again.
    pub fn finish(&mut self) -> &[u8] {
        if !self.finished {
            for &r in &self.restarts {
                put_fixed32(&mut self.buf, r);
            }
            put_fixed32(&mut self.buf, self.restarts.len() as u32);
            self.finished = true;
        }
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_with_is_the_size_the_block_has_after_the_entry() {
        let mut b = BlockBuilder::new(3);
        let long = vec![7u8; 300];
        for i in 0..40u32 {
            let key = format!("key{:05}", i * 37);
            let value: &[u8] = if i % 5 == 0 { &long } else { b"v" };
            let predicted = b.size_with(key.as_bytes(), value);
            b.add(key.as_bytes(), value);
            assert_eq!(predicted, b.current_size_estimate(), "entry {i}");
        }
        let estimate = b.current_size_estimate();
        assert_eq!(b.finish().len(), estimate);
    }

    #[test]
    fn varint_len_counts_seven_bits_a_byte() {
        for n in [0usize, 1, 127, 128, 16_383, 16_384, u32::MAX as usize] {
            let mut buf = Vec::new();
            put_varint32(&mut buf, n as u32);
            assert_eq!(varint_len(n), buf.len(), "{n}");
        }
    }
}
