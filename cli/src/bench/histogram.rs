//! LevelDB's latency histogram (`util/histogram.cc`): fixed buckets 1, 2, ..., 10, 12, 14, ...,
//! with the same text layout, so `--histogram` output reads like db_bench's.

use std::fmt::Write;

const NUM_BUCKETS: usize = 154;

/// Upper bounds of the buckets: 1..=10, then 1.2, 1.4, ..., 9, 10 times each power of ten.
fn bucket_limits() -> &'static [f64; NUM_BUCKETS] {
    static LIMITS: std::sync::OnceLock<[f64; NUM_BUCKETS]> = std::sync::OnceLock::new();
    LIMITS.get_or_init(|| {
        const STEPS: [f64; 16] = [1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let mut l = [0.0; NUM_BUCKETS];
        let mut i = 0;
        for v in 1..=10 {
            l[i] = v as f64;
            i += 1;
        }
        for exp in 1..=9 {
            for s in STEPS {
                l[i] = (s * 10f64.powi(exp)).round();
                i += 1;
            }
        }
        l[NUM_BUCKETS - 1] = 1e200;
        l
    })
}

/// Microsecond latencies of one benchmark.
#[derive(Clone)]
pub struct Histogram {
    min: f64,
    max: f64,
    num: f64,
    sum: f64,
    sum_squares: f64,
    buckets: [f64; NUM_BUCKETS],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { min: 1e200, max: 0.0, num: 0.0, sum: 0.0, sum_squares: 0.0, buckets: [0.0; NUM_BUCKETS] }
    }
}

impl Histogram {
    pub fn add(&mut self, value: f64) {
        let limits = bucket_limits();
        let b = limits[..NUM_BUCKETS - 1].partition_point(|&l| l <= value);
        self.buckets[b] += 1.0;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.num += 1.0;
        self.sum += value;
        self.sum_squares += value * value;
    }

    pub fn merge(&mut self, other: &Histogram) {
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.num += other.num;
        self.sum += other.sum;
        self.sum_squares += other.sum_squares;
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }

    /// Samples added.
    pub fn count(&self) -> u64 {
        self.num as u64
    }

    pub fn average(&self) -> f64 {
        if self.num == 0.0 {
            0.0
        } else {
            self.sum / self.num
        }
    }

    pub fn std_dev(&self) -> f64 {
        if self.num == 0.0 {
            return 0.0;
        }
        let variance = (self.sum_squares * self.num - self.sum * self.sum) / (self.num * self.num);
        variance.max(0.0).sqrt()
    }

    pub fn max(&self) -> f64 {
        self.max
    }

    /// Value below which `p` percent of the samples fall, interpolated within its bucket.
    pub fn percentile(&self, p: f64) -> f64 {
        let limits = bucket_limits();
        let threshold = self.num * (p / 100.0);
        let mut sum = 0.0;
        for (b, &count) in self.buckets.iter().enumerate() {
            sum += count;
            if sum >= threshold && count > 0.0 {
                let left = if b == 0 { 0.0 } else { limits[b - 1] };
                let pos = (threshold - (sum - count)) / count;
                return (left + (limits[b] - left) * pos).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// db_bench's multi-line rendering.
    pub fn render(&self) -> String {
        let limits = bucket_limits();
        let mut r = String::new();
        let _ = writeln!(r, "Count: {:.0}  Average: {:.4}  StdDev: {:.2}", self.num, self.average(), self.std_dev());
        let min = if self.num == 0.0 { 0.0 } else { self.min };
        let _ = writeln!(r, "Min: {:.4}  Median: {:.4}  Max: {:.4}", min, self.percentile(50.0), self.max);
        r.push_str("------------------------------------------------------\n");
        let mult = 100.0 / self.num.max(1.0);
        let mut cumulative = 0.0;
        for (b, &count) in self.buckets.iter().enumerate() {
            if count <= 0.0 {
                continue;
            }
            cumulative += count;
            let left = if b == 0 { 0.0 } else { limits[b - 1] };
            let _ = write!(
                r,
                "[ {:>7.0}, {:>7.0} ) {:>7.0} {:>7.3}% {:>7.3}% ",
                left,
                limits[b],
                count,
                mult * count,
                mult * cumulative
            );
            let marks = (20.0 * (count / self.num) + 0.5) as usize;
            r.push_str(&"#".repeat(marks));
            r.push('\n');
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_limits_match_leveldb_table() {
        let l = bucket_limits();
        assert_eq!(&l[..12], &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 12., 14.]);
        assert_eq!(l[25], 100.0);
        assert_eq!(l[NUM_BUCKETS - 2], 9e9);
        assert!(l.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn percentiles_of_uniform_samples_are_close() {
        let mut h = Histogram::default();
        for v in 1..=1000 {
            h.add(v as f64);
        }
        assert_eq!(h.num, 1000.0);
        assert!((h.average() - 500.5).abs() < 1e-9);
        let median = h.percentile(50.0);
        assert!((450.0..=550.0).contains(&median), "median {median}");
        assert!(h.percentile(99.0) > 900.0);
        assert!(h.render().starts_with("Count: 1000  Average: 500.5000"));
    }

    #[test]
    fn merge_adds_counts_and_keeps_extremes() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.add(3.0);
        b.add(70_000.0);
        a.merge(&b);
        assert_eq!(a.num, 2.0);
        assert_eq!(a.max(), 70_000.0);
        assert_eq!(a.percentile(0.0), 3.0);
    }
}
