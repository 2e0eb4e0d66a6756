//! YCSB's number generators, ported from `site.ycsb.generator` with the same constants and
//! formulas: Uniform, Zipfian (Gray et al.), ScrambledZipfian (FNV-hashed zipfian over 10^10
//! items), SkewedLatest, the operation chooser (DiscreteGenerator) and the acknowledged insert
//! counter that tells readers which records exist.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::keys::fnvhash64;

/// A small, fast, seedable generator (SplitMix64); YCSB's `ThreadLocalRandom` stand-in.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits, like Java's `nextDouble`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)` (`n > 0`), by multiply-shift (bias below 2^-64 · n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// `UniformLongGenerator(lb, ub)`: uniform over the inclusive range.
#[derive(Debug, Clone)]
pub struct Uniform {
    lb: u64,
    interval: u64,
}

impl Uniform {
    pub fn new(lb: u64, ub: u64) -> Self {
        Uniform { lb, interval: ub.saturating_sub(lb) + 1 }
    }

    pub fn next(&self, rng: &mut Rng) -> u64 {
        self.lb + rng.below(self.interval)
    }
}

/// YCSB's default zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// `ZipfianGenerator`: item `base` is the most popular, then `base + 1`, and so on.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

/// `zetastatic(st, n, theta, initialsum)`: the sum of `1 / (i + 1)^theta` for `i` in `st..n`.
pub fn zeta(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    (st..n).fold(initial, |sum, i| sum + 1.0 / ((i + 1) as f64).powf(theta))
}

impl Zipfian {
    /// Over `[min, max]`, computing zeta (O(items): fine up to tens of millions).
    pub fn new(min: u64, max: u64, theta: f64) -> Self {
        let items = max.saturating_sub(min) + 1;
        Self::with_zetan(min, max, theta, zeta(0, items, theta, 0.0))
    }

    /// Over `[min, max]` with zeta precomputed (ScrambledZipfian's 10^10 items).
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Self {
        let items = max.saturating_sub(min) + 1;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: 0.0,
            count_for_zeta: items,
        };
        z.eta = z.eta_for(zetan);
        z
    }

    /// YCSB computes eta from the item count fixed at construction (`items`), even after
    /// `nextLong(itemcount)` grows zeta; kept as is so the distributions match.
    fn eta_for(&self, zetan: f64) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / zetan)
    }

    /// `nextLong(itemcount)`: zeta grows incrementally when `itemcount` grows (never shrinks).
    pub fn next_long(&mut self, itemcount: u64, rng: &mut Rng) -> u64 {
        if itemcount > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, itemcount, self.theta, self.zetan);
            self.count_for_zeta = itemcount;
            self.eta = self.eta_for(self.zetan);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        // Java's `(long)` of a double truncates toward zero, as `as u64` does for positives.
        self.base + (itemcount as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }

    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        self.next_long(self.items, rng)
    }

    /// Probability of the most popular item: `1 / zeta(items)`.
    #[cfg(test)]
    pub fn top_probability(&self) -> f64 {
        1.0 / self.zetan
    }
}

/// `ScrambledZipfianGenerator`: zipfian popularity spread over the key space by FNV hashing.
#[derive(Debug, Clone)]
pub struct ScrambledZipfian {
    gen: Zipfian,
    min: u64,
    itemcount: u64,
}

impl ScrambledZipfian {
    /// zeta(10^10, 0.99), precomputed by YCSB.
    pub const ZETAN: f64 = 26.469_028_201_783_02;
    pub const ITEM_COUNT: u64 = 10_000_000_000;

    pub fn new(min: u64, max: u64) -> Self {
        ScrambledZipfian {
            gen: Zipfian::with_zetan(0, Self::ITEM_COUNT, ZIPFIAN_CONSTANT, Self::ZETAN),
            min,
            itemcount: max.saturating_sub(min) + 1,
        }
    }

    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let ret = self.gen.next(rng);
        // Java's `%` keeps the sign; fnvhash64 is non-negative except for i64::MIN.
        self.min + (fnvhash64(ret as i64) % self.itemcount as i64).unsigned_abs()
    }
}

/// `SkewedLatestGenerator`: the newest records (highest acknowledged numbers) are the most popular.
#[derive(Debug, Clone)]
pub struct SkewedLatest {
    zipfian: Zipfian,
}

impl SkewedLatest {
    /// `new ZipfianGenerator(basis.lastValue())`, i.e. items `0..last`.
    pub fn new(last: u64) -> Self {
        SkewedLatest { zipfian: Zipfian::new(0, last.max(1) - 1, ZIPFIAN_CONSTANT) }
    }

    /// `max - zipfian.nextLong(max)` with `max` the highest acknowledged record.
    pub fn next(&mut self, last: u64, rng: &mut Rng) -> u64 {
        last.saturating_sub(self.zipfian.next_long(last, rng))
    }
}

/// `DiscreteGenerator`: picks a value with probability proportional to its weight.
#[derive(Debug, Clone)]
pub struct Discrete<T: Copy> {
    values: Vec<(f64, T)>,
    sum: f64,
}

impl<T: Copy> Discrete<T> {
    /// Entries with a weight of zero or less are left out, as CoreWorkload does.
    pub fn new(weights: &[(f64, T)]) -> Self {
        let values: Vec<(f64, T)> = weights.iter().copied().filter(|(w, _)| *w > 0.0).collect();
        let sum = values.iter().map(|(w, _)| w).sum();
        Discrete { values, sum }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn next(&self, rng: &mut Rng) -> Option<T> {
        let mut val = rng.next_f64();
        for &(w, v) in &self.values {
            let pw = w / self.sum;
            if val < pw {
                return Some(v);
            }
            val -= pw;
        }
        // Rounding can leave `val` a hair above the last share.
        self.values.last().map(|&(_, v)| v)
    }
}

/// `AcknowledgedCounterGenerator`: hands out insert numbers; `last_value` is the highest number
/// below which every insert has finished, so readers never pick a record still being written.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicU64,
    /// One past the highest contiguous acknowledged number (YCSB's `limit + 1`).
    acked_end: AtomicU64,
    pending: Mutex<BTreeSet<u64>>,
}

impl AcknowledgedCounter {
    pub fn new(start: u64) -> Self {
        AcknowledgedCounter { next: AtomicU64::new(start), acked_end: AtomicU64::new(start), pending: Mutex::default() }
    }

    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Highest record known to exist (`limit`); `start - 1` before any acknowledgement.
    pub fn last_value(&self) -> u64 {
        self.acked_end.load(Ordering::Acquire).saturating_sub(1)
    }

    /// Numbers handed out so far (the next insert's number).
    #[cfg(test)]
    pub fn issued(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    pub fn acknowledge(&self, value: u64) {
        let mut pending = self.pending.lock();
        pending.insert(value);
        let mut end = self.acked_end.load(Ordering::Relaxed);
        while pending.remove(&end) {
            end += 1;
        }
        self.acked_end.store(end, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn counts(mut draw: impl FnMut() -> u64, n: usize) -> HashMap<u64, usize> {
        let mut m = HashMap::new();
        for _ in 0..n {
            *m.entry(draw()).or_default() += 1;
        }
        m
    }

    #[test]
    fn zipfian_top_item_frequency_matches_theory() {
        let mut rng = Rng::new(7);
        let mut z = Zipfian::new(0, 999, ZIPFIAN_CONSTANT);
        let expect = z.top_probability();
        let n = 100_000;
        let c = counts(|| z.next(&mut rng), n);
        let top = c[&0] as f64 / n as f64;
        // Binomial standard deviation at p≈0.13, n=1e5 is ≈0.001; allow 5σ.
        assert!((top - expect).abs() < 0.005, "top {top} vs theory {expect}");
        // Item 1 has probability 1/(2^0.99 · zeta).
        let second = c[&1] as f64 / n as f64;
        assert!((second - expect / 2f64.powf(0.99)).abs() < 0.005, "second {second}");
        assert!(c.keys().all(|&k| k < 1000));
    }

    #[test]
    fn scrambled_zipfian_hot_key_has_the_rank_zero_share() {
        let mut rng = Rng::new(11);
        let mut z = ScrambledZipfian::new(0, 9_999);
        let n = 100_000;
        let c = counts(|| z.next(&mut rng), n);
        assert!(c.keys().all(|&k| k < 10_000));
        let hottest = *c.values().max().unwrap() as f64 / n as f64;
        // Rank 0 of the 10^10-item zipfian has probability 1/ZETAN ≈ 0.0378; the hashed bucket
        // it lands in also collects ≈ 1/10_000 of the rest.
        let expect = 1.0 / ScrambledZipfian::ZETAN;
        assert!((hottest - expect).abs() < 0.004, "hottest {hottest} vs {expect}");
        // Hot keys are scattered, not the low numbers.
        let hot = c.iter().max_by_key(|(_, &v)| v).map(|(&k, _)| k).unwrap();
        assert_eq!(hot, fnvhash64(0) as u64 % 10_000);
    }

    #[test]
    fn latest_favours_recent_inserts() {
        let mut rng = Rng::new(3);
        let mut l = SkewedLatest::new(999);
        let n = 100_000;
        let c = counts(|| l.next(999, &mut rng), n);
        let newest = c.get(&999).copied().unwrap_or(0);
        let tenth =
            |lo: u64, hi: u64| -> usize { c.iter().filter(|(&k, _)| (lo..hi).contains(&k)).map(|(_, &v)| v).sum() };
        // P(newest) = 1 / zeta(999) ≈ 0.135; the newest tenth is drawn ≈ 0.69 of the time, the
        // oldest tenth ≈ 0.014.
        assert!(newest as f64 / n as f64 > 0.1, "newest record drawn {newest} times");
        let (old, new) = (tenth(0, 100), tenth(900, 1000));
        assert!(new > 20 * old, "newest tenth {new}, oldest tenth {old}");
        // After more inserts, the new newest record becomes the favourite.
        let c2 = counts(|| l.next(1999, &mut rng), n);
        assert!(c2.get(&1999).copied().unwrap_or(0) > c2.get(&999).copied().unwrap_or(0) * 10);
        assert!(c2.keys().all(|&k| k <= 1999));
    }

    #[test]
    fn discrete_proportions_within_two_percent() {
        let mut rng = Rng::new(5);
        let d = Discrete::new(&[(0.5, 'r'), (0.3, 'u'), (0.15, 'i'), (0.05, 's'), (0.0, 'x')]);
        let n = 100_000;
        let c = counts(|| d.next(&mut rng).map(|c| c as u64).unwrap(), n);
        for (p, ch) in [(0.5, 'r'), (0.3, 'u'), (0.15, 'i'), (0.05, 's')] {
            let got = c[&(ch as u64)] as f64 / n as f64;
            assert!((got - p).abs() < 0.02, "{ch}: {got} vs {p}");
        }
        assert!(!c.contains_key(&('x' as u64)));
        assert!(Discrete::<char>::new(&[(0.0, 'x')]).is_empty());
    }

    #[test]
    fn uniform_covers_the_inclusive_range() {
        let mut rng = Rng::new(9);
        let u = Uniform::new(1, 100);
        let c = counts(|| u.next(&mut rng), 100_000);
        assert_eq!(c.len(), 100);
        assert!(c.contains_key(&1) && c.contains_key(&100) && !c.contains_key(&0));
    }

    #[test]
    fn acknowledged_counter_only_advances_over_contiguous_acks() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!(c.last_value(), 9);
        let (a, b, d) = (c.next_value(), c.next_value(), c.next_value());
        assert_eq!((a, b, d), (10, 11, 12));
        c.acknowledge(11);
        assert_eq!(c.last_value(), 9);
        c.acknowledge(10);
        assert_eq!(c.last_value(), 11);
        c.acknowledge(12);
        assert_eq!((c.last_value(), c.issued()), (12, 13));
    }
}
