//! The table's one Bloom filter over user keys (a "full filter", RocksDB style), laid out
//! cache-locally: each key's probes all fall in one 64-byte line, so a lookup touches one
//! cache line instead of `k`.
//!
//! Hash: XXH64 (seed 0) of the user key, implemented here so the on-disk format never
//! depends on a library's hash choice. The high 32 bits pick the line
//! (`line = (h >> 32) * num_lines >> 32`); the low 32 bits `g` pick the bits inside the line:
//! probe `i` sets bit `g_i >> 23` (0..511) where `g_0 = g`, `g_{i+1} = g_i * 0x9e3779b9 mod 2^32`.
//! Block contents: `num_lines * 64` bytes of bits, then 1 byte `k`.

use std::path::Path;

use crate::error::{Error, Result};

/// Bytes in one filter line (one CPU cache line).
const LINE_BYTES: usize = 64;
const LINE_BITS: u64 = (LINE_BYTES * 8) as u64;
/// Multiplier that moves from one probe to the next inside a line (golden ratio, 32-bit).
const PROBE_MUL: u32 = 0x9e37_79b9;

/// Number of probes for `bits_per_key`: round(bits * ln 2), clamped to 1..=30.
pub fn num_probes(bits_per_key: f64) -> u32 {
    let k = (bits_per_key * std::f64::consts::LN_2).round();
    k.clamp(1.0, 30.0) as u32
}

/// Collects key hashes while a table is built; `finish` lays out the filter.
#[derive(Debug)]
pub struct FilterBuilder {
    bits_per_key: f64,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    pub fn new(bits_per_key: f64) -> Self {
        FilterBuilder { bits_per_key, hashes: Vec::new() }
    }

    /// Add a user key (callers skip repeats of the same user key).
    pub fn add_key(&mut self, user_key: &[u8]) {
        self.hashes.push(xxh64(user_key, 0));
    }

    fn num_lines(&self) -> usize {
        let bits = (self.hashes.len() as f64 * self.bits_per_key).ceil() as u64;
        bits.div_ceil(LINE_BITS).max(1) as usize
    }

    /// The filter block contents.
    pub fn finish(&self) -> Vec<u8> {
        let lines = self.num_lines();
        let k = num_probes(self.bits_per_key);
        let mut out = vec![0u8; lines * LINE_BYTES + 1];
        for &h in &self.hashes {
            let base = line_of(h, lines as u64) as usize * LINE_BYTES;
            let mut g = h as u32;
            for _ in 0..k {
                let bit = (g >> 23) as usize;
                out[base + bit / 8] |= 1 << (bit % 8);
                g = g.wrapping_mul(PROBE_MUL);
            }
        }
        out[lines * LINE_BYTES] = k as u8;
        out
    }
}

#[inline]
fn line_of(h: u64, num_lines: u64) -> u64 {
    (((h >> 32) as u128 * num_lines as u128) >> 32) as u64
}

/// A user key's filter hash: every filter (every table, every segment) hashes a key the same
/// way, so a point lookup hashes it once for all the filters it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterHash(u64);

impl FilterHash {
    pub fn of(user_key: &[u8]) -> Self {
        FilterHash(xxh64(user_key, 0))
    }
}

/// A decoded filter, kept in memory by the table reader.
#[derive(Debug, Clone)]
pub struct BloomFilter {
    bits: Vec<u8>,
    num_lines: u64,
    k: u32,
}

impl BloomFilter {
    /// Parse filter block contents; a length that is not whole lines + 1, or `k` outside
    /// 1..=30, is corruption (reported at `offset` of `file`).
    pub fn new(mut data: Vec<u8>, file: &Path, offset: u64) -> Result<BloomFilter> {
        let k = data.pop().unwrap_or(0) as u32;
        if data.is_empty() || !data.len().is_multiple_of(LINE_BYTES) || !(1..=30).contains(&k) {
            let why = format!("malformed filter block ({} bytes, k = {k})", data.len() + 1);
            return Err(Error::corruption(file, offset, why));
        }
        let num_lines = (data.len() / LINE_BYTES) as u64;
        Ok(BloomFilter { bits: data, num_lines, k })
    }

    /// Bytes of filter bits held in memory.
    pub fn len_bytes(&self) -> u64 {
        self.bits.len() as u64
    }

    /// False only when the key was certainly not added.
    #[cfg(test)]
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(FilterHash::of(user_key))
    }

    /// Start loading the line `may_contain_hash(hash)` will read, so that the cache misses of
    /// several filters one lookup asks (a DTable's segments) overlap instead of queueing.
    #[inline]
    pub fn prefetch(&self, hash: FilterHash) {
        #[cfg(target_arch = "x86_64")]
        if let Some(line) = self.bits.get(line_of(hash.0, self.num_lines) as usize * LINE_BYTES..) {
            // SAFETY: a prefetch is only a hint to the cache: it never faults and never changes
            // memory, and the pointer is inside `bits`.
            #[allow(unused_unsafe)]
            unsafe {
                std::arch::x86_64::_mm_prefetch(line.as_ptr().cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
            }
        }
    }

    /// `may_contain` for a key hashed once (a lookup asks many tables' filters).
    #[inline]
    pub fn may_contain_hash(&self, hash: FilterHash) -> bool {
        let h = hash.0;
        let base = line_of(h, self.num_lines) as usize * LINE_BYTES;
        let Some(line) = self.bits.get(base..base + LINE_BYTES) else {
            return true;
        };
        let mut g = h as u32;
        for _ in 0..self.k {
            let bit = (g >> 23) as usize;
            if line[bit / 8] & (1 << (bit % 8)) == 0 {
                return false;
            }
            g = g.wrapping_mul(PROBE_MUL);
        }
        true
    }
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline]
fn read64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[inline]
fn xxh_round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}

#[inline]
fn xxh_merge(acc: u64, v: u64) -> u64 {
    (acc ^ xxh_round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

/// XXH64 of `data` with `seed` (the reference algorithm, byte-for-byte).
pub fn xxh64(data: &[u8], seed: u64) -> u64 {
    let mut rest = data;
    let mut h = if data.len() >= 32 {
        let mut v = [seed.wrapping_add(P1).wrapping_add(P2), seed.wrapping_add(P2), seed, seed.wrapping_sub(P1)];
        while rest.len() >= 32 {
            for (i, acc) in v.iter_mut().enumerate() {
                *acc = xxh_round(*acc, read64(&rest[8 * i..]));
            }
            rest = &rest[32..];
        }
        let h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        v.iter().fold(h, |h, &x| xxh_merge(h, x))
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(data.len() as u64);
    while rest.len() >= 8 {
        h ^= xxh_round(0, read64(rest));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        let w = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
        h ^= w.wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        h ^= (b as u64).wrapping_mul(P5);
        h = h.rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_matches_reference_vectors() {
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
        let long = b"Nobody inspects the spammish repetition";
        assert_eq!(xxh64(long, 0), 0xFBCE_A83C_8A37_8BF1);
    }

    fn build(keys: impl Iterator<Item = Vec<u8>>, bits: f64) -> BloomFilter {
        let mut b = FilterBuilder::new(bits);
        for k in keys {
            b.add_key(&k);
        }
        BloomFilter::new(b.finish(), Path::new("f"), 0).unwrap()
    }

    #[test]
    fn every_added_key_may_match() {
        for n in [0usize, 1, 10, 1000, 50_000] {
            let f = build((0..n).map(|i| format!("key{i}").into_bytes()), 10.0);
            for i in 0..n {
                assert!(f.may_contain(format!("key{i}").as_bytes()), "n={n} key{i}");
            }
        }
    }

    #[test]
    fn false_positive_rate_at_10_bits_per_key_is_under_2_percent() {
        let n = 100_000;
        let f = build((0..n).map(|i: u32| i.to_be_bytes().to_vec()), 10.0);
        let fp = (n..n + 100_000).filter(|i: &u32| f.may_contain(&i.to_be_bytes())).count();
        let rate = fp as f64 / 100_000.0;
        assert!(rate < 0.02, "false positive rate {rate}");
        assert!(rate > 0.001, "suspiciously low rate {rate}: are probes set?");
    }

    #[test]
    fn malformed_filter_blocks_are_corruption() {
        for data in [vec![], vec![6], vec![0; 64 + 2], {
            let mut v = vec![0; 65];
            v[64] = 31;
            v
        }] {
            assert!(BloomFilter::new(data, Path::new("f"), 9).unwrap_err().is_corruption());
        }
    }

    #[test]
    fn probe_count_follows_bits_per_key() {
        assert_eq!(num_probes(10.0), 7);
        assert_eq!(num_probes(0.5), 1);
        assert_eq!(num_probes(100.0), 30);
    }
}
