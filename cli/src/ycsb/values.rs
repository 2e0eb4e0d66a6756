//! Record values: slices of a pre-generated pool of random printable bytes (like YCSB's
//! RandomByteIterator, and incompressible enough that no engine gains from compression).

use super::generators::Rng;

/// Pool size: large enough that consecutive values differ, small enough to stay in cache.
const POOL_BYTES: usize = 1 << 20;

pub struct ValuePool {
    pool: Vec<u8>,
    size: usize,
}

impl ValuePool {
    pub fn new(size: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        // Printable ASCII ' '..'~', as YCSB's values are.
        let pool = (0..POOL_BYTES + size).map(|_| b' ' + rng.below(95) as u8).collect();
        ValuePool { pool, size }
    }

    /// A value of the configured size at a random offset of the pool.
    pub fn next(&self, rng: &mut Rng) -> &[u8] {
        let start = rng.below(POOL_BYTES as u64) as usize;
        &self.pool[start..start + self.size]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_the_size_and_are_printable() {
        let p = ValuePool::new(1000, 1);
        let mut rng = Rng::new(2);
        let (a, b) = (p.next(&mut rng).to_vec(), p.next(&mut rng).to_vec());
        assert_eq!((a.len(), b.len()), (1000, 1000));
        assert_ne!(a, b);
        assert!(a.iter().all(|c| (b' '..=b'~').contains(c)));
        assert!(ValuePool::new(0, 1).next(&mut rng).is_empty());
    }
}
