//! LevelDB's read sampling (`DBIter::ParseKey`, `Version::RecordReadSample`): about once per
//! `SAMPLE_PERIOD_BYTES` an iterator reads, it reports the key it is at. The DB charges the
//! level-0 table every iterator there must merge with the levels below, so a scan-heavy
//! workload compacts level-0 tables that no flush will push past the trigger (a load that
//! stopped with three of them leaves every later seek merging three extra tables).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Mean bytes read between two samples (LevelDB's `kReadBytesPeriod`).
pub(crate) const SAMPLE_PERIOD_BYTES: u64 = 1 << 20;

/// Where an iterator's samples go.
pub(crate) trait ReadSampleSink: Send + Sync {
    /// The iterator read about `SAMPLE_PERIOD_BYTES` since the last sample and is at
    /// `internal_key`.
    fn sampled(&self, internal_key: &[u8]);
}

/// Counts the bytes an iterator reads and samples at random intervals averaging
/// `SAMPLE_PERIOD_BYTES` (uniform in `[0, 2 × period)`, as LevelDB: a fixed period could
/// line up with a scan's stride and sample the same table every time).
pub(crate) struct ReadSampler {
    until_sample: u64,
    rng: u64,
    sink: Box<dyn ReadSampleSink>,
}

impl ReadSampler {
    pub(crate) fn new(sink: Box<dyn ReadSampleSink>) -> Self {
        // A random seed per iterator; `| 1` keeps xorshift off its one fixed point, zero.
        let rng = RandomState::new().build_hasher().finish() | 1;
        let mut s = ReadSampler { until_sample: 0, rng, sink };
        s.until_sample = s.period();
        s
    }

    /// The iterator passed an entry of `bytes` (key and stored value) at `internal_key`.
    #[inline]
    pub(crate) fn read(&mut self, internal_key: &[u8], bytes: usize) {
        let bytes = bytes as u64;
        while self.until_sample < bytes {
            self.until_sample += self.period();
            self.sink.sampled(internal_key);
        }
        self.until_sample -= bytes;
    }

    /// xorshift64: sampling needs spread, not quality.
    fn period(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % (2 * SAMPLE_PERIOD_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    struct Count(Arc<AtomicU64>);
    impl ReadSampleSink for Count {
        fn sampled(&self, _: &[u8]) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn samples_come_about_once_per_period_of_bytes_read() {
        let n = Arc::new(AtomicU64::new(0));
        let mut s = ReadSampler::new(Box::new(Count(n.clone())));
        // 200 MiB in 1 KiB entries: about 200 samples.
        for _ in 0..200 * 1024 {
            s.read(b"k", 1024);
        }
        let got = n.load(Ordering::Relaxed);
        assert!((150..=250).contains(&got), "{got} samples for 200 periods");
        // One entry far larger than the period is sampled several times, as LevelDB does.
        let before = n.load(Ordering::Relaxed);
        s.read(b"k", 64 << 20);
        assert!(n.load(Ordering::Relaxed) - before >= 20);
    }
}
