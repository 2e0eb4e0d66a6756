//! A lock-free set of the data blocks of one memory-mapped table whose checksum has passed,
//! so a block used in place from the mapping is verified on its first load only.
//!
//! It lives in the `Table` (not in the block cache) so that nothing outlives the table: a
//! cached block would keep the table's mapping — and a deleted file's disk space — alive.

use std::sync::atomic::{AtomicU64, Ordering};

/// Most slots one set allocates (8 MiB); a table with more blocks records only some.
const MAX_SLOTS: usize = 1 << 20;

/// Block offsets, stored `+ 1` in an open-addressing table (0 = empty slot). Inserting into
/// a full table silently records nothing: the block is then verified again next time.
pub struct VerifiedBlocks {
    slots: Box<[AtomicU64]>,
    /// `64 - log2(slots.len())`: Fibonacci hashing keeps the top bits of the product.
    shift: u32,
}

impl VerifiedBlocks {
    /// A set sized for about `blocks` blocks (load factor at most 1/2).
    pub fn with_capacity(blocks: usize) -> VerifiedBlocks {
        let n = (blocks.min(MAX_SLOTS) * 2).next_power_of_two().clamp(2, MAX_SLOTS);
        VerifiedBlocks { slots: (0..n).map(|_| AtomicU64::new(0)).collect(), shift: 64 - n.trailing_zeros() }
    }

    /// Slot indices to probe for `key`, in order (every slot once).
    #[inline]
    fn probe(&self, key: u64) -> impl Iterator<Item = usize> {
        let mask = self.slots.len() - 1;
        let home = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        (0..self.slots.len()).map(move |i| (home + i) & mask)
    }

    /// Whether the block at `offset` was recorded as verified.
    #[inline]
    pub fn contains(&self, offset: u64) -> bool {
        let Some(key) = offset.checked_add(1) else { return false };
        for i in self.probe(key) {
            match self.slots[i].load(Ordering::Acquire) {
                0 => return false,
                k if k == key => return true,
                _ => {}
            }
        }
        false
    }

    /// Record that the block at `offset` passed its checksum.
    pub fn insert(&self, offset: u64) {
        let Some(key) = offset.checked_add(1) else { return };
        for i in self.probe(key) {
            match self.slots[i].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(k) if k == key => return,
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_offsets_are_found_and_others_are_not() {
        let set = VerifiedBlocks::with_capacity(100);
        for i in 0..100u64 {
            set.insert(i * 4101);
        }
        for i in 0..100u64 {
            assert!(set.contains(i * 4101), "offset {}", i * 4101);
            assert!(!set.contains(i * 4101 + 1));
        }
        assert!(set.slots.len() >= 200, "{} slots", set.slots.len());
    }

    #[test]
    fn overfull_set_stays_correct_and_terminates() {
        let set = VerifiedBlocks::with_capacity(1);
        for i in 0..10u64 {
            set.insert(i);
        }
        let found = (0..10u64).filter(|&i| set.contains(i)).count();
        assert_eq!(found, set.slots.len(), "a full set holds exactly its slots");
        set.insert(u64::MAX);
        assert!(!set.contains(u64::MAX));
    }

    #[test]
    fn concurrent_inserts_are_all_recorded() {
        let set = std::sync::Arc::new(VerifiedBlocks::with_capacity(4000));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let set = std::sync::Arc::clone(&set);
                std::thread::spawn(move || (0..1000u64).for_each(|i| set.insert((i * 4 + t) * 512)))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!((0..4000u64).all(|i| set.contains(i * 512)));
    }
}
