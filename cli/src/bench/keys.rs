//! Benchmark keys and randomness: LevelDB's `Random` (so a run draws the same key sequence
//! as LevelDB's own db_bench) and db_bench's zero-padded decimal keys.

/// LevelDB's Lehmer generator (`util/random.h`): `seed = seed * 16807 % (2^31 - 1)`.
#[derive(Debug, Clone)]
pub struct Random {
    seed: u32,
}

impl Random {
    const M: u32 = 2_147_483_647;

    pub fn new(seed: u32) -> Self {
        let seed = seed & Self::M;
        let seed = if seed == 0 || seed == Self::M { 1 } else { seed };
        Random { seed }
    }

    pub fn next_u32(&mut self) -> u32 {
        let product = self.seed as u64 * 16807;
        // (product % M) via ((x << 31) % M) == x, as LevelDB does.
        let mut seed = ((product >> 31) + (product & Self::M as u64)) as u32;
        if seed > Self::M {
            seed -= Self::M;
        }
        self.seed = seed;
        seed
    }

    /// Uniform in `[0, n)`; `n` must be > 0.
    pub fn uniform(&mut self, n: u64) -> u64 {
        self.next_u32() as u64 % n
    }
}

/// Formats key number `k` as a zero-padded decimal of exactly `size` digits (db_bench's
/// `%016d` when `size` is 16), so byte order equals numeric order.
#[derive(Debug, Clone)]
pub struct KeyFormat {
    buf: Vec<u8>,
}

impl KeyFormat {
    pub fn new(size: usize) -> Self {
        KeyFormat { buf: vec![b'0'; size] }
    }

    /// Largest key number that fits in `size` digits without losing uniqueness.
    pub fn capacity(size: usize) -> u64 {
        10u64.checked_pow(size as u32).unwrap_or(u64::MAX)
    }

    /// The key for number `k` (the low `size` digits when `k` has more).
    pub fn key(&mut self, mut k: u64) -> &[u8] {
        for b in self.buf.iter_mut().rev() {
            *b = b'0' + (k % 10) as u8;
            k /= 10;
        }
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_byte_keys_match_db_bench_printf_format() {
        let mut f = KeyFormat::new(16);
        assert_eq!(f.key(0), b"0000000000000000");
        assert_eq!(f.key(123_456), format!("{:016}", 123_456).as_bytes());
        assert_eq!(f.key(999_999), b"0000000000999999");
    }

    #[test]
    fn other_key_sizes_pad_or_keep_low_digits() {
        assert_eq!(KeyFormat::new(20).key(42), b"00000000000000000042");
        assert_eq!(KeyFormat::new(4).key(42), b"0042");
        assert_eq!(KeyFormat::new(4).key(123_456), b"3456");
        assert_eq!(KeyFormat::capacity(4), 10_000);
        assert_eq!(KeyFormat::capacity(30), u64::MAX);
    }

    #[test]
    fn key_order_is_numeric_order() {
        let mut f = KeyFormat::new(16);
        let a = f.key(99).to_vec();
        assert!(a.as_slice() < f.key(100));
    }

    #[test]
    fn random_matches_leveldb_sequence() {
        // Random(301): 301 * 16807 = 5058907, and the next step is reduced mod 2^31-1.
        let mut r = Random::new(301);
        assert_eq!(r.next_u32(), 5_058_907);
        assert_eq!(r.next_u32(), ((5_058_907u64 * 16807) % 2_147_483_647) as u32);
        // Thread 1's draws in LevelDB's db_bench (seed 1000 + 1), printed by util/random.h.
        let mut t1 = Random::new(1001);
        let draws: Vec<u64> = (0..5).map(|_| t1.uniform(1_000_000)).collect();
        assert_eq!(draws, [823_807, 366_492, 85_941, 607_685, 255_079]);
        let mut z = Random::new(0);
        assert_eq!(z.next_u32(), 16807);
    }
}
