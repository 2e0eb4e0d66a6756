//! A whole-key Bloom filter over the user keys of one memtable (RocksDB's
//! `memtable_whole_key_filtering`), so a lookup of a key the memtable does not hold costs one
//! cache line instead of a skiplist search. Most lookups are such misses: user `get`s of keys
//! written before the last flush, and value-log GC, which asks the newest entry of every key
//! in a chunk (the skiplist searches were a large share of GC's CPU time in a profile).
//!
//! Register-blocked: all probes of a key fall in one 64-bit word, so an insert is one atomic
//! `fetch_or` and a query one load. Inserts come from the single write leader, queries from
//! any thread; a bit is set before the entry goes into the skiplist, and readers find entries
//! only through the sequence number or lock that published them, so a reader never sees the
//! entry without its bits.

use std::sync::atomic::{AtomicU64, Ordering};

/// Words in the filter: 2^14 × 64 bits = 128 KiB per memtable, about 16 bits per key for the
/// 64k entries a default memtable holds at most (64 MiB of 1 KiB values), where five probes
/// give roughly 1 % false positives; small-value memtables hold fewer keys and do better.
const WORDS: usize = 1 << 14;

/// Bits set per key (all in one word).
const PROBES: u32 = 5;

pub(crate) struct KeyFilter {
    words: Box<[AtomicU64]>,
}

impl Default for KeyFilter {
    fn default() -> Self {
        KeyFilter { words: (0..WORDS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl KeyFilter {
    /// The word a key of keyspace `ks` has its bits in, and the bits (the keyspace seeds the
    /// hash: one filter serves every keyspace's list).
    fn locate(ks: u32, user_key: &[u8]) -> (usize, u64) {
        let seed = 0x6d65_6d74 ^ u64::from(ks).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let h = crate::sst::filter::xxh64(user_key, seed);
        let word = (h >> 50) as usize & (WORDS - 1);
        let mut mask = 0u64;
        let mut bits = h;
        for _ in 0..PROBES {
            mask |= 1 << (bits & 63);
            bits >>= 6;
        }
        (word, mask)
    }

    /// Record `user_key` (before its entry is inserted).
    pub(crate) fn insert(&self, ks: u32, user_key: &[u8]) {
        let (word, mask) = Self::locate(ks, user_key);
        // Skip the locked RMW when the bits are already there (a key written again).
        if self.words[word].load(Ordering::Relaxed) & mask != mask {
            self.words[word].fetch_or(mask, Ordering::Relaxed);
        }
    }

    /// False only when the memtable holds no entry for `user_key`.
    pub(crate) fn may_contain(&self, ks: u32, user_key: &[u8]) -> bool {
        let (word, mask) = Self::locate(ks, user_key);
        self.words[word].load(Ordering::Relaxed) & mask == mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserted_keys_are_always_found() {
        let f = KeyFilter::default();
        for i in 0..50_000u32 {
            f.insert(0, format!("key{i:08}").as_bytes());
        }
        for i in 0..50_000u32 {
            assert!(f.may_contain(0, format!("key{i:08}").as_bytes()), "key {i} lost");
        }
    }

    #[test]
    fn absent_keys_are_mostly_rejected_at_the_design_load() {
        let f = KeyFilter::default();
        for i in 0..65_536u32 {
            f.insert(0, format!("key{i:08}").as_bytes());
        }
        let false_positives = (0..100_000u32).filter(|i| f.may_contain(0, format!("other{i:08}").as_bytes())).count();
        // About 1 % expected at this load; 3 % leaves room for an unlucky hash spread.
        assert!(false_positives < 3_000, "{false_positives} false positives in 100000");
    }

    #[test]
    fn an_empty_filter_rejects_everything() {
        let f = KeyFilter::default();
        assert!(!f.may_contain(0, b"anything"));
        assert!(!f.may_contain(0, b""));
    }
}
