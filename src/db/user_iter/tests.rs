//! `DbIterator` against a model value source: the values a scan reads, the regions it asks
//! for, and when it reads ahead, probes the page cache or reads through a mapping.

use super::readahead::{Readahead, CACHED_PAUSE_STEPS};
use super::*;
use crate::error::Error;
use crate::key::MAX_SEQ;

fn depths(r: &mut Readahead, dir: Step, n: usize) -> Vec<usize> {
    (0..n).map(|_| r.step(dir)).collect()
}

/// Values are the pointer's offset as text; a read counts as cached when a region holding
/// it was requested (a model of the page cache) or `all_cached` says so.
struct ModelValues {
    regions: parking_lot::Mutex<Vec<Region>>,
    plain_reads: std::sync::atomic::AtomicUsize,
    mapped_reads: std::sync::atomic::AtomicUsize,
    all_cached: bool,
    /// What `is_warm` says.
    warm: bool,
    /// Values at lower offsets count as cached too.
    cached_below: u64,
    /// Offsets of the values read ahead, in order.
    prefetched: parking_lot::Mutex<Vec<u64>>,
    /// The page cache holds only this many of the regions requested last (`None`: all).
    holds_regions: Option<usize>,
    /// Values read ahead without read-around (`prefetch_alone`).
    alone: std::sync::atomic::AtomicUsize,
}

impl ModelValues {
    fn new(all_cached: bool) -> Self {
        ModelValues {
            regions: Default::default(),
            plain_reads: Default::default(),
            mapped_reads: Default::default(),
            all_cached,
            warm: false,
            cached_below: 0,
            prefetched: Default::default(),
            holds_regions: None,
            alone: Default::default(),
        }
    }

    fn value(p: &ValuePointer) -> Vec<u8> {
        p.offset.to_string().into_bytes()
    }
}

impl ValueSource for ModelValues {
    fn pointer(&self, stored: &[u8]) -> Result<ValuePointer> {
        ValuePointer::decode(stored).ok_or_else(|| Error::corruption("model", 0, "malformed value pointer"))
    }
    fn read(&self, _key: &[u8], p: &ValuePointer) -> Result<Value> {
        self.plain_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self::value(p).into())
    }
    fn prefetch(&self, _key: &[u8], p: &ValuePointer) -> Option<PendingRead> {
        let regions = self.regions.lock();
        let held = &regions[regions.len().saturating_sub(self.holds_regions.unwrap_or(usize::MAX))..];
        let in_region = held.iter().any(|r| r.file == p.file && (r.offset..r.offset + r.len).contains(&p.offset));
        drop(regions);
        self.prefetched.lock().push(p.offset);
        let cached = self.all_cached || in_region || p.offset < self.cached_below;
        Some(PendingRead::done_for_test(Self::value(p), cached))
    }
    fn prefetch_alone(&self, key: &[u8], p: &ValuePointer) -> Option<PendingRead> {
        self.alone.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.prefetch(key, p)
    }
    fn finish(&self, _key: &[u8], p: &ValuePointer, read: PendingRead) -> Result<Value> {
        let got = read.wait()?.unwrap_or_default();
        assert_eq!(got, Self::value(p));
        Ok(got.into())
    }
    fn read_region(&self, region: Region) {
        self.regions.lock().push(region);
    }
    fn is_warm(&self) -> bool {
        self.warm
    }
    fn read_mapped(&self, _key: &[u8], p: &ValuePointer) -> Option<Result<Value>> {
        self.mapped_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Ok(Self::value(p).into()))
    }
}

/// An iterator over `n` keys whose values sit at `offset(i)` of vLog file 1.
fn scan_over(n: u32, offset: impl Fn(u32) -> u64, values: std::sync::Arc<ModelValues>) -> DbIterator {
    let mem = std::sync::Arc::new(crate::memtable::Memtable::default());
    for i in 0..n {
        let ptr = ValuePointer { file: 1, offset: offset(i), op_len: 100, value_crc: 0 };
        mem.add(0, u64::from(i) + 1, ValueKind::Pointer, format!("k{i:06}").as_bytes(), &ptr.encoded());
    }
    DbIterator::new(Box::new(mem.iter(0)), (MAX_SEQ, Default::default()), (None, None), values, 32, Box::new(()))
}

fn walk(it: &mut DbIterator, offset: impl Fn(u32) -> u64) -> u32 {
    let mut seen = 0;
    it.seek_to_first().unwrap();
    while it.valid() {
        assert_eq!(it.value(), offset(seen).to_string().as_bytes(), "entry {seen}");
        seen += 1;
        it.next().unwrap();
    }
    seen
}

#[test]
fn a_long_scan_over_scattered_values_reads_each_region_once() {
    use super::regions::REGION_BYTES;
    // A random load: neighbouring keys' values are far apart, each region holds many.
    let regions = 40u64;
    let offset = move |i: u32| (u64::from(i) * 7919 % regions) * REGION_BYTES + u64::from(i) * 101 % 200_000;
    let values = std::sync::Arc::new(ModelValues::new(false));
    let mut it = scan_over(4000, offset, values.clone());
    assert_eq!(walk(&mut it, offset), 4000);
    let asked = values.regions.lock().clone();
    let mut starts: Vec<u64> = asked.iter().map(|r| r.offset).collect();
    starts.sort_unstable();
    starts.dedup();
    assert_eq!(starts.len(), asked.len(), "a region is requested once: {asked:?}");
    assert_eq!(asked.len() as u64, regions, "every region the scan keeps coming back to");
    assert_eq!(values.alone.load(std::sync::atomic::Ordering::Relaxed), 0, "regions paid: read-around stays");
}

#[test]
fn a_scan_whose_regions_are_evicted_before_it_returns_reads_values_alone_after_that() {
    use super::regions::REGION_BYTES;
    // A random load many times the memory: the page cache keeps the last 4 regions asked for.
    let regions = 400u64;
    let offset = move |i: u32| (u64::from(i) * 7919 % regions) * REGION_BYTES + u64::from(i) * 101 % 200_000;
    let mut model = ModelValues::new(false);
    model.holds_regions = Some(4);
    let values = std::sync::Arc::new(model);
    let mut it = scan_over(40_000, offset, values.clone());
    assert_eq!(walk(&mut it, offset), 40_000);
    let asked = values.regions.lock().len();
    let alone = values.alone.load(std::sync::atomic::Ordering::Relaxed);
    assert!(asked > 0, "regions were tried");
    assert!(alone > 30_000, "most values read without read-around once regions did not pay: {alone}");
    // The next seek starts a new scan, which tries regions again.
    it.seek(b"k000000").unwrap();
    for _ in 0..3000 {
        it.next().unwrap();
    }
    assert!(values.regions.lock().len() > asked, "a new scan asks for regions again");
}

#[test]
fn a_short_scan_over_scattered_values_reads_no_region() {
    use super::regions::REGION_BYTES;
    let offset = |i: u32| u64::from(i) * REGION_BYTES;
    let values = std::sync::Arc::new(ModelValues::new(false));
    let mut it = scan_over(100, offset, values.clone());
    assert_eq!(walk(&mut it, offset), 100);
    assert!(values.regions.lock().is_empty(), "one value per region: read value by value");
}

#[test]
fn a_miss_while_paused_resumes_read_ahead() {
    // Warm: read-ahead pauses, and paused steps probe the cache instead of plain reads.
    let offset = |i: u32| u64::from(i) * 5000;
    let warm = std::sync::Arc::new(ModelValues::new(true));
    let mut it = scan_over(1000, offset, warm.clone());
    assert_eq!(walk(&mut it, offset), 1000);
    // Plain reads: the steps before read-ahead starts, and the first entry of each probe.
    let plain = warm.plain_reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(plain <= 3 + 1000 / CACHED_PAUSE_STEPS, "{plain} plain reads: paused steps must probe");
    // Most paused steps read through the mapping; every PROBE_EVERY-th probes the cache.
    let mapped = warm.mapped_reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(mapped > 600, "{mapped} of 1000 values read through the mapping");
    let mut r = Readahead::new(32);
    depths(&mut r, Step::Forward, 20);
    r.note_cached();
    depths(&mut r, Step::Forward, CACHED_PAUSE_STEPS - 1);
    assert!(!r.trusts_cache(), "not before a pause has run its course");
    depths(&mut r, Step::Forward, 1);
    assert!(r.trusts_cache(), "a pause ran its course with every value cached");
    r.note_read(false);
    assert!(!r.trusts_cache(), "a miss withdraws the trust");
    let mut r = Readahead::new(32);
    depths(&mut r, Step::Forward, 20);
    r.note_cached();
    depths(&mut r, Step::Forward, 3);
    assert!(r.pausing());
    r.note_miss();
    assert_eq!(depths(&mut r, Step::Forward, 1), [16], "a miss ends the pause at the depth it had");
    let mut r = Readahead::new(32);
    depths(&mut r, Step::Forward, 40);
    for i in 0..31 {
        r.note_read(i % 8 != 0);
    }
    assert_eq!(r.step(Step::Forward), 32, "cached reads mixed with misses do not pause");
    for _ in 0..32 {
        r.note_read(true);
    }
    assert_eq!(r.step(Step::Forward), 0, "a window's worth of cached reads in a row does");
}

#[test]
fn a_scan_starts_out_on_the_mapping_when_scans_found_the_cache_warm() {
    let offset = |i: u32| u64::from(i) * 5000;
    for warm in [false, true] {
        let values = std::sync::Arc::new(ModelValues { warm, ..ModelValues::new(true) });
        let mut it = scan_over(40, offset, values.clone());
        assert_eq!(walk(&mut it, offset), 40);
        let plain = values.plain_reads.load(std::sync::atomic::Ordering::Relaxed);
        let mapped = values.mapped_reads.load(std::sync::atomic::Ordering::Relaxed);
        if warm {
            assert_eq!(plain, 0, "a warm start reads through the mapping from the first value");
            assert!(mapped > 25, "{mapped} of 40 values through the mapping");
        } else {
            assert_eq!(mapped, 0, "a short scan never proves the cache warm by itself");
        }
    }
    // Trust that turns out wrong is withdrawn by the next probe, even when the iterator
    // only seeks (it never reads ahead, so only the probes among its reads can tell).
    let cold = std::sync::Arc::new(ModelValues { warm: true, ..ModelValues::new(false) });
    let mut it = scan_over(200, offset, cold.clone());
    for i in (0..200).step_by(3) {
        it.seek(format!("k{i:06}").as_bytes()).unwrap();
        assert_eq!(it.value(), offset(i).to_string().as_bytes());
    }
    let mapped = cold.mapped_reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(mapped < PROBE_EVERY, "{mapped} mapped reads after the first probe missed");
    // A seek keeps the trust: whether the cache holds the data does not depend on where.
    let mut r = Readahead::new(32);
    r.trust_cache();
    r.reset();
    assert!(r.trusts_cache());
    let mut off = Readahead::new(0);
    off.trust_cache();
    assert!(!off.trusts_cache(), "read-ahead off: plain reads, as asked");
}

#[test]
fn a_scan_leaving_cached_data_resumes_read_ahead_at_once() {
    // The first half of the values is cached: read-ahead pauses there (and trusts the
    // mapping); the first probe in the second half must end the pause. One value per
    // region, so no region is read whole (which would cache the values after it).
    let offset = |i: u32| u64::from(i) * super::regions::REGION_BYTES;
    let half = 1000u32;
    let values = std::sync::Arc::new(ModelValues { cached_below: offset(half), ..ModelValues::new(false) });
    let mut it = scan_over(2 * half, offset, values.clone());
    assert_eq!(walk(&mut it, offset), 2 * half);
    assert!(values.mapped_reads.load(std::sync::atomic::Ordering::Relaxed) > 0, "never trusted the cache");
    let prefetched = values.prefetched.lock().clone();
    let resume = offset(half + PROBE_EVERY as u32 + 1);
    let missing: Vec<u64> =
        (half + PROBE_EVERY as u32 + 1..2 * half).map(offset).filter(|o| !prefetched.contains(o)).collect();
    assert!(missing.is_empty(), "values past {resume} not read ahead: {missing:?}");
}
