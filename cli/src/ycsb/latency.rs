//! Per-operation latency recording with HdrHistogram (nanosecond values, 3 significant
//! digits), merged across threads at the end of a phase.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

/// Longest latency tracked exactly: one hour; anything longer is recorded as one hour.
const MAX_NANOS: u64 = 3_600_000_000_000;

/// One operation type's latencies and misses.
#[derive(Clone)]
pub struct OpLatency {
    pub hist: Histogram<u64>,
    /// Reads that found no value (a read of a missing key still counts as an op).
    pub not_found: u64,
}

impl OpLatency {
    fn new() -> Self {
        let hist = Histogram::new_with_bounds(1, MAX_NANOS, 3).expect("constant bounds within hdrhistogram's limits");
        OpLatency { hist, not_found: 0 }
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Latency at `q` (0..=100) in microseconds.
    pub fn percentile_micros(&self, q: f64) -> f64 {
        self.hist.value_at_percentile(q) as f64 / 1e3
    }

    pub fn max_micros(&self) -> f64 {
        self.hist.max() as f64 / 1e3
    }

    pub fn mean_micros(&self) -> f64 {
        self.hist.mean() / 1e3
    }
}

/// Latencies of every operation type of one phase, keyed by the operation's report name.
#[derive(Default, Clone)]
pub struct Latencies {
    ops: BTreeMap<&'static str, OpLatency>,
}

impl Latencies {
    pub fn record(&mut self, op: &'static str, nanos: u64) {
        self.ops.entry(op).or_insert_with(OpLatency::new).hist.saturating_record(nanos.clamp(1, MAX_NANOS));
    }

    pub fn miss(&mut self, op: &'static str) {
        self.ops.entry(op).or_insert_with(OpLatency::new).not_found += 1;
    }

    pub fn merge(&mut self, other: &Latencies) {
        for (op, l) in &other.ops {
            let mine = self.ops.entry(op).or_insert_with(OpLatency::new);
            // Same bounds on both sides: adding cannot fail.
            let _ = mine.hist.add(&l.hist);
            mine.not_found += l.not_found;
        }
    }

    pub fn total_ops(&self) -> u64 {
        self.ops.values().map(OpLatency::count).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &OpLatency)> {
        self.ops.iter().map(|(k, v)| (*k, v))
    }

    pub fn get(&self, op: &str) -> Option<&OpLatency> {
        self.ops.get(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_merge() {
        let mut a = Latencies::default();
        let mut b = Latencies::default();
        for i in 1..=1000u64 {
            a.record("READ", i * 1000);
        }
        b.record("READ", 5_000_000);
        b.miss("READ");
        b.record("UPDATE", 0);
        a.merge(&b);
        let r = a.get("READ").unwrap();
        assert_eq!((r.count(), r.not_found), (1001, 1));
        // The 501st of 1001 samples, to within the histogram's 3 significant digits.
        assert!((r.percentile_micros(50.0) - 501.0).abs() < 1.0, "{}", r.percentile_micros(50.0));
        assert!((r.max_micros() - 5000.0).abs() < 5.0);
        assert_eq!(a.total_ops(), 1002);
        assert_eq!(a.iter().map(|(k, _)| k).collect::<Vec<_>>(), vec!["READ", "UPDATE"]);
    }
}
