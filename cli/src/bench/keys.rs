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
    /// db_bench's `--prefix_size` and the number of distinct prefixes (0: no shared prefixes).
    prefix_size: usize,
    prefixes: u64,
}

impl KeyFormat {
    #[cfg(test)]
    pub fn new(size: usize) -> Self {
        Self::with_prefixes(size, 0, 0)
    }

    /// Keys whose first `prefix_size` digits are `k mod prefixes` (db_bench's
    /// `--keys_per_prefix`: `prefixes = num / keys_per_prefix`) and the rest `k`; plain keys
    /// when `prefixes` is 0.
    pub fn with_prefixes(size: usize, prefix_size: usize, prefixes: u64) -> Self {
        let prefix_size = if prefixes > 0 { prefix_size.min(size) } else { 0 };
        KeyFormat { buf: vec![b'0'; size], prefix_size, prefixes }
    }

    /// Largest key number that fits in `size` digits without losing uniqueness.
    pub fn capacity(size: usize) -> u64 {
        10u64.checked_pow(size as u32).unwrap_or(u64::MAX)
    }

    /// The key for number `k` (the low `size` digits when `k` has more).
    pub fn key(&mut self, k: u64) -> &[u8] {
        let (head, tail) = self.buf.split_at_mut(self.prefix_size);
        if self.prefixes > 0 {
            fill_digits(head, k % self.prefixes);
        }
        fill_digits(tail, k);
        &self.buf
    }
}

/// `k`'s low decimal digits, zero padded, filling `out`.
fn fill_digits(out: &mut [u8], mut k: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (k % 10) as u8;
        k /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_per_prefix_share_a_prefix_of_the_given_digits() {
        let mut f = KeyFormat::with_prefixes(16, 8, 100);
        assert_eq!(f.key(5), b"0000000500000005");
        assert_eq!(f.key(105), b"0000000500000105");
        assert_eq!(f.key(99), b"0000009900000099");
    }

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
