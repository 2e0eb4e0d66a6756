//! The YCSB client: CoreWorkload's load phase (insert records 0..recordcount) and run phase
//! (operations drawn from the mix, keys from the request distribution) over any `Engine`,
//! with one generator set per thread and latencies per operation type.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::engine::Engine;
use super::generators::ZIPFIAN_CONSTANT;
use super::generators::{AcknowledgedCounter, Discrete, Rng, ScrambledZipfian, SkewedLatest, Uniform, Zipfian};
use super::keys::key_name;
use super::latency::Latencies;
use super::values::ValuePool;
use super::workload::{Op, RequestDistribution, ScanLengthDistribution, Workload};
use crate::bench::CliResult;

/// What the phases of one session share: the engine, and what has been written so far.
pub struct Session<'a> {
    pub engine: &'a dyn Engine,
    pub threads: usize,
    pub seed: u64,
    /// Insert numbers: starts at `recordcount` after the load; carries over between workloads.
    pub inserts: AcknowledgedCounter,
    /// Key + value bytes handed to `put` (the denominator of write amplification).
    pub user_bytes: AtomicU64,
    /// Key + value bytes of the records present (the denominator of space amplification).
    pub live_bytes: AtomicU64,
}

impl<'a> Session<'a> {
    pub fn new(engine: &'a dyn Engine, threads: usize, seed: u64, record_count: u64) -> Self {
        Session {
            engine,
            threads,
            seed,
            inserts: AcknowledgedCounter::new(record_count),
            user_bytes: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
        }
    }
}

/// One timed phase.
pub struct Phase {
    pub elapsed: Duration,
    pub latencies: Latencies,
}

impl Phase {
    /// Operations that look a key up (reads, scans, read-modify-writes): read amplification's unit.
    pub fn lookups(&self) -> u64 {
        [Op::Read, Op::Scan, Op::ReadModifyWrite]
            .iter()
            .filter_map(|op| self.latencies.get(op.name()))
            .map(|l| l.count())
            .sum()
    }
}

/// `CoreWorkload.nextKeynum`: draw until the record is known to exist.
enum KeyChooser {
    Uniform(Uniform),
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest),
}

impl KeyChooser {
    fn new(w: &Workload, last: u64) -> Self {
        match w.request_distribution {
            RequestDistribution::Uniform => KeyChooser::Uniform(Uniform::new(0, w.record_count.max(1) - 1)),
            RequestDistribution::Zipfian => KeyChooser::Zipfian(ScrambledZipfian::new(0, w.zipfian_span())),
            RequestDistribution::Latest => KeyChooser::Latest(SkewedLatest::new(last)),
        }
    }

    fn next(&mut self, rng: &mut Rng, inserts: &AcknowledgedCounter) -> u64 {
        loop {
            let last = inserts.last_value();
            let k = match self {
                KeyChooser::Uniform(u) => u.next(rng),
                KeyChooser::Zipfian(z) => z.next(rng),
                KeyChooser::Latest(l) => l.next(last, rng),
            };
            if k <= last {
                return k;
            }
        }
    }
}

enum ScanLength {
    Uniform(Uniform),
    Zipfian(Zipfian),
}

impl ScanLength {
    fn new(w: &Workload) -> Self {
        match w.scan_length_distribution {
            ScanLengthDistribution::Uniform => ScanLength::Uniform(Uniform::new(w.min_scan_length, w.max_scan_length)),
            ScanLengthDistribution::Zipfian => {
                ScanLength::Zipfian(Zipfian::new(w.min_scan_length, w.max_scan_length, ZIPFIAN_CONSTANT))
            }
        }
    }

    fn next(&mut self, rng: &mut Rng) -> usize {
        match self {
            ScanLength::Uniform(u) => u.next(rng) as usize,
            ScanLength::Zipfian(z) => z.next(rng) as usize,
        }
    }
}

/// Run `body(tid, latencies)` on every thread, started together; merge their latencies.
pub(super) fn on_threads(s: &Session, body: impl Fn(usize, &mut Latencies) -> CliResult + Sync) -> CliResult<Phase> {
    let barrier = std::sync::Barrier::new(s.threads);
    let started = Instant::now();
    let results: Vec<CliResult<Latencies>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..s.threads)
            .map(|tid| {
                let (body, barrier) = (&body, &barrier);
                scope.spawn(move || {
                    let mut lat = Latencies::default();
                    barrier.wait();
                    body(tid, &mut lat).map(|()| lat)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a client thread panicked".into()))).collect()
    });
    let elapsed = started.elapsed();
    let mut latencies = Latencies::default();
    for r in results {
        latencies.merge(&r?);
    }
    Ok(Phase { elapsed, latencies })
}

/// Insert records `0..recordcount` (threads take the next number from a shared counter).
pub fn load(s: &Session, w: &Workload, values: &ValuePool) -> CliResult<Phase> {
    let next = AtomicU64::new(0);
    on_threads(s, |tid, lat| {
        let mut rng = Rng::new(s.seed.wrapping_add(tid as u64));
        let mut key = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= w.record_count {
                return Ok(());
            }
            key_name(k, w.hashed_inserts, &mut key);
            let value = values.next(&mut rng);
            let t0 = Instant::now();
            s.engine.put(&key, value)?;
            lat.record(Op::Insert.name(), t0.elapsed().as_nanos() as u64);
            let n = (key.len() + value.len()) as u64;
            s.user_bytes.fetch_add(n, Ordering::Relaxed);
            s.live_bytes.fetch_add(n, Ordering::Relaxed);
        }
    })
}

/// `operationcount` operations split over the threads.
pub fn run(s: &Session, w: &Workload, values: &ValuePool) -> CliResult<Phase> {
    let ops = Discrete::new(&w.mix);
    if ops.is_empty() {
        return Err("the workload has no operations".into());
    }
    let threads = s.threads as u64;
    on_threads(s, |tid, lat| {
        let mine = w.operation_count / threads + u64::from((tid as u64) < w.operation_count % threads);
        let mut t = Worker {
            s,
            w,
            values,
            rng: Rng::new(s.seed.wrapping_add(1000 + tid as u64)),
            keys: KeyChooser::new(w, s.inserts.last_value()),
            scan_length: ScanLength::new(w),
            key: Vec::new(),
        };
        for _ in 0..mine {
            if let Some(op) = ops.next(&mut t.rng) {
                t.one(op, lat)?;
            }
        }
        Ok(())
    })
}

/// One run-phase thread's generators.
struct Worker<'a, 's> {
    s: &'a Session<'s>,
    w: &'a Workload,
    values: &'a ValuePool,
    rng: Rng,
    keys: KeyChooser,
    scan_length: ScanLength,
    key: Vec<u8>,
}

impl Worker<'_, '_> {
    /// Do `op`; only the engine calls are timed (YCSB's DBWrapper measures the same span).
    fn one(&mut self, op: Op, lat: &mut Latencies) -> CliResult {
        let engine = self.s.engine;
        let mut inserted = None;
        let keynum = match op {
            Op::Insert => {
                let k = self.s.inserts.next_value();
                inserted = Some(k);
                k
            }
            _ => self.keys.next(&mut self.rng, &self.s.inserts),
        };
        key_name(keynum, self.w.hashed_inserts, &mut self.key);
        let value = self.values.next(&mut self.rng);
        let scan_len = if op == Op::Scan { self.scan_length.next(&mut self.rng) } else { 0 };
        let t0 = Instant::now();
        let found = match op {
            Op::Read => engine.get(&self.key)?.is_some(),
            Op::Update | Op::Insert => engine.put(&self.key, value).map(|()| true)?,
            Op::Scan => engine.scan(&self.key, scan_len)?.0 > 0,
            Op::ReadModifyWrite => {
                let found = engine.get(&self.key)?.is_some();
                engine.put(&self.key, value)?;
                found
            }
        };
        lat.record(op.name(), t0.elapsed().as_nanos() as u64);
        if !found {
            lat.miss(op.name());
        }
        self.account(op, value.len(), inserted);
        Ok(())
    }

    fn account(&self, op: Op, value_len: usize, inserted: Option<u64>) {
        let n = (self.key.len() + value_len) as u64;
        if matches!(op, Op::Update | Op::Insert | Op::ReadModifyWrite) {
            self.s.user_bytes.fetch_add(n, Ordering::Relaxed);
        }
        if let Some(k) = inserted {
            self.s.live_bytes.fetch_add(n, Ordering::Relaxed);
            self.s.inserts.acknowledge(k);
        }
    }
}
