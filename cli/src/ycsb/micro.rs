//! db_bench-style micro benchmarks (fillseq, fillrandom, overwrite, readrandom, readseq,
//! seekrandom, deleterandom) through the same `Engine` harness, so wisckey and the in-process peers run the
//! very same loop: 16-byte zero-padded decimal keys, uniform random key numbers below `num`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::client::{on_threads, Phase, Session};
use super::generators::Rng;
use super::keys::bench_key;
use super::latency::Latencies;
use super::values::ValuePool;
use crate::bench::CliResult;

pub const NAMES: &[&str] =
    &["fillseq", "fillrandom", "overwrite", "readrandom", "readseq", "seekrandom", "deleterandom"];

/// Which key numbers hold a value, to know the live bytes after random fills.
pub struct LiveSet {
    words: Vec<AtomicU64>,
}

impl LiveSet {
    pub fn new(num: u64) -> Self {
        LiveSet { words: (0..num.div_ceil(64)).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Mark `k` live; true when it was not live before.
    fn insert(&self, k: u64) -> bool {
        let bit = 1u64 << (k % 64);
        self.words[(k / 64) as usize].fetch_or(bit, Ordering::Relaxed) & bit == 0
    }

    /// Mark `k` deleted; true when it was live.
    fn remove(&self, k: u64) -> bool {
        let bit = 1u64 << (k % 64);
        self.words[(k / 64) as usize].fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }
}

/// Parameters of one micro benchmark run.
pub struct Micro<'a> {
    pub num: u64,
    /// Operations of the read benchmarks (all threads together).
    pub reads: u64,
    pub values: &'a ValuePool,
    pub live: &'a LiveSet,
}

/// Run benchmark `name`; the `Phase` counts one latency sample per operation, except readseq,
/// which is one timed scan per thread (its op count is the entries it read).
/// `round` (the benchmark's position in the list) varies the seeds, so readrandom draws other
/// keys than the fill before it, as db_bench's do.
pub fn run(s: &Session, m: &Micro, name: &str, round: u64) -> CliResult<(Phase, u64)> {
    let name: &'static str =
        NAMES.iter().copied().find(|n| *n == name).ok_or_else(|| format!("unknown micro benchmark '{name}'"))?;
    let threads = s.threads as u64;
    let writes = matches!(name, "fillseq" | "fillrandom" | "overwrite" | "deleterandom");
    let total = if writes { m.num } else { m.reads };
    let scanned = AtomicU64::new(0);
    let phase = on_threads(s, |tid, lat| {
        let share = total / threads + u64::from((tid as u64) < total % threads);
        // Contiguous key ranges per thread for fillseq.
        let first = tid as u64 * (total / threads) + (tid as u64).min(total % threads);
        let seed = s.seed.wrapping_add(round << 16).wrapping_add(tid as u64);
        let mut t = Thread { s, m, rng: Rng::new(seed), key: Vec::new() };
        t.ops(name, first, share, lat, &scanned)
    })?;
    let ops = if name == "readseq" { scanned.load(Ordering::Relaxed) } else { phase.latencies.total_ops() };
    Ok((phase, ops))
}

struct Thread<'a, 's> {
    s: &'a Session<'s>,
    m: &'a Micro<'a>,
    rng: Rng,
    key: Vec<u8>,
}

impl Thread<'_, '_> {
    fn ops(&mut self, name: &'static str, first: u64, n: u64, lat: &mut Latencies, scanned: &AtomicU64) -> CliResult {
        let engine = self.s.engine;
        if name == "readseq" {
            let t0 = Instant::now();
            let (entries, _) = engine.scan(b"", n as usize)?;
            lat.record(name, t0.elapsed().as_nanos() as u64);
            scanned.fetch_add(entries, Ordering::Relaxed);
            return Ok(());
        }
        for i in 0..n {
            let k = if name == "fillseq" { first + i } else { self.rng.below(self.m.num) };
            bench_key(k, &mut self.key);
            let value = self.m.values.next(&mut self.rng);
            let t0 = Instant::now();
            let found = match name {
                "readrandom" => engine.get(&self.key)?.is_some(),
                "seekrandom" => engine.scan(&self.key, 1)?.0 > 0,
                "deleterandom" => engine.delete(&self.key).map(|()| true)?,
                _ => engine.put(&self.key, value).map(|()| true)?,
            };
            lat.record(name, t0.elapsed().as_nanos() as u64);
            if !found {
                lat.miss(name);
            }
            match name {
                "fillseq" | "fillrandom" | "overwrite" => self.account(k, value.len()),
                "deleterandom" if self.m.live.remove(k) => {
                    self.s.live_bytes.fetch_sub((self.key.len() + value.len()) as u64, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn account(&self, k: u64, value_len: usize) {
        let n = (self.key.len() + value_len) as u64;
        self.s.user_bytes.fetch_add(n, Ordering::Relaxed);
        if self.m.live.insert(k) {
            self.s.live_bytes.fetch_add(n, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_set_counts_each_key_once() {
        let l = LiveSet::new(130);
        assert!(l.insert(0) && l.insert(129) && !l.insert(0) && l.insert(64));
        assert!(l.remove(0) && !l.remove(0) && !l.remove(1) && l.insert(0));
    }
}
