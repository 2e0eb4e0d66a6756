//! Whether a mapped table's blocks are read from the device, and if so asking for a block's
//! pages together. A data block of ~4 KiB at an arbitrary offset spans two pages; touched
//! through the mapping (advised `RANDOM`, so no read-around), a block the page cache does not
//! hold then costs two faults, each a device read, one after the other: with data eight times
//! the memory a 100 B lookup took 2.1 major faults. Asked for with `WILLNEED` first, the
//! block's pages are read in one request. The syscall is not free where the pages are cached
//! (a lookup in memory takes ~2 µs), so it is made only while the table's blocks were lately
//! found on the device: a touch is timed every `PROBE_EVERY` loads while the table is warm,
//! and every load while it is cold. A seek asks for its block before it touches it (`prefetch`,
//! so a merge's runs read together); the touch after that is not timed, since the wait it
//! shows is the others' reads'. One seek in `PROBE_EVERY_COLD` looks the block up in the page
//! cache first: found, it is not asked for and its touch is timed, so a table whose blocks came
//! back into memory is found warm again; not found, the table stays cold.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fs::{Advice, FileMapping, RandomAccessFile};

/// A touch that took this long waited for the device (a page-cache hit takes well under a
/// microsecond; an SSD read tens of them).
const SLOW_TOUCH: Duration = Duration::from_micros(20);

/// While warm, one block load in this many is timed.
const PROBE_EVERY: u32 = 64;

/// How many fast touches in a row a cold table needs to be warm again.
const COLD_CREDIT: u32 = 8;

/// While cold, one seek's block in this many is looked up in the page cache first (`mincore`):
/// found there, it is not asked for ahead and its touch is timed.
const PROBE_EVERY_COLD: u32 = 8;

/// `Residency::prefetched` when no block is.
const NONE: u64 = u64::MAX;

/// How many tables are cold, shared by the tables of one database (`TableReadOptions`).
#[derive(Debug, Clone, Default)]
pub struct ColdCount(Arc<AtomicU64>);

impl ColdCount {
    /// Count `n` more tables cold (a test's stand-in for slow touches).
    #[cfg(test)]
    pub fn add_for_test(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether any table is taken as cold now.
    #[inline]
    pub fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }
}

/// A table's residency guess.
pub(super) struct Residency {
    /// > 0: cold (blocks were lately read from the device); counts down on fast touches.
    cold: AtomicU32,
    loads: AtomicU32,
    prefetches: AtomicU32,
    /// The offset of the block last asked for ahead of its seek (`NONE`: none since).
    prefetched: AtomicU64,
    /// Counts this table while it is cold.
    cold_tables: ColdCount,
}

impl Default for Residency {
    fn default() -> Self {
        Residency::counted_in(&ColdCount::default())
    }
}

impl Drop for Residency {
    fn drop(&mut self) {
        if self.is_cold() {
            self.cold_tables.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Residency {
    /// A table taken as warm, counted in `cold_tables` while it is cold.
    pub(super) fn counted_in(cold_tables: &ColdCount) -> Self {
        Residency {
            cold: AtomicU32::new(0),
            loads: AtomicU32::new(0),
            prefetches: AtomicU32::new(0),
            prefetched: AtomicU64::new(NONE),
            cold_tables: cold_tables.clone(),
        }
    }

    /// Before a point lookup reads the data block `[start, end)` of `map`: while the table is
    /// cold, ask for the block's pages together; time a touch of its first and last byte
    /// (every load while cold, one in `PROBE_EVERY` while warm) and update the guess.
    pub(super) fn touch(&self, file: &dyn RandomAccessFile, map: &FileMapping, start: u64, end: u64) {
        self.touch_with(file, map, start, end, SLOW_TOUCH);
    }

    /// Before a seek reads the data block `[start, end)` of `map`: while the table is cold,
    /// ask for the block's pages now, without waiting (but for one seek in
    /// `PROBE_EVERY_COLD` whose block the page cache holds: its touch is left to tell that
    /// the table is warm again).
    pub(super) fn prefetch(&self, file: &dyn RandomAccessFile, map: &FileMapping, start: u64, end: u64) {
        let end = end.min(map.len() as u64);
        if start >= end || !self.is_cold() {
            return;
        }
        if self.prefetches.fetch_add(1, Ordering::Relaxed).is_multiple_of(PROBE_EVERY_COLD) {
            match map.resident(start, end - start) {
                // In memory: the touch is fast, and timed, and counts toward warm.
                Some(true) => {
                    self.prefetched.store(NONE, Ordering::Relaxed);
                    return;
                }
                // On the device: still cold, however many touches lately were fast.
                Some(false) => {
                    let cold = self.cold.load(Ordering::Relaxed);
                    if cold > 0 {
                        let _ = self.cold.compare_exchange(cold, COLD_CREDIT, Ordering::Relaxed, Ordering::Relaxed);
                    }
                }
                // Cannot tell: leave the block to its touch.
                None => {
                    self.prefetched.store(NONE, Ordering::Relaxed);
                    return;
                }
            }
        }
        let _ = file.advise(start, end - start, Advice::WillNeed);
        self.prefetched.store(start, Ordering::Relaxed);
    }

    pub(super) fn touch_with(
        &self,
        file: &dyn RandomAccessFile,
        map: &FileMapping,
        start: u64,
        end: u64,
        slow: Duration,
    ) {
        let end = end.min(map.len() as u64);
        if start >= end {
            return;
        }
        // Asked for ahead: its pages are on their way, and how long they take says nothing.
        if self.prefetched.load(Ordering::Relaxed) == start
            && self.prefetched.compare_exchange(start, NONE, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            return;
        }
        let cold = self.cold.load(Ordering::Relaxed);
        if cold == 0 && !self.loads.fetch_add(1, Ordering::Relaxed).is_multiple_of(PROBE_EVERY) {
            return;
        }
        if cold > 0 {
            let _ = file.advise(start, end - start, Advice::WillNeed);
        }
        let t = Instant::now();
        std::hint::black_box(map[start as usize]);
        std::hint::black_box(map[end as usize - 1]);
        let next = if t.elapsed() >= slow { COLD_CREDIT } else { cold.saturating_sub(1) };
        // One thread wins each change, so the shared count moves once per turn.
        if next != cold && self.cold.compare_exchange(cold, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            match (cold, next) {
                (0, _) => self.cold_tables.0.fetch_add(1, Ordering::Relaxed),
                (_, 0) => self.cold_tables.0.fetch_sub(1, Ordering::Relaxed),
                _ => 0,
            };
        }
    }

    /// Whether the table is taken as cold now.
    #[inline]
    pub(super) fn is_cold(&self) -> bool {
        self.cold.load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{mapped_file, AdviceLog};
    use super::*;

    #[test]
    fn a_slow_touch_makes_a_table_cold_its_blocks_are_then_asked_for_whole_and_fast_touches_warm_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = AdviceLog::new(mapped_file(dir.path(), &[7u8; 64 << 10]));
        let map = file.inner.mapping().unwrap().clone();
        let r = Residency::default();
        let (always_slow, never_slow) = (Duration::ZERO, Duration::from_secs(3600));
        // Warm: nothing asked; the first load is a probe, and a slow one turns the table cold.
        r.touch_with(&file, &map, 100, 4200, always_slow);
        assert!(r.is_cold() && file.will_need.lock().is_empty());
        // Cold: every block is asked for whole before its first byte is touched.
        r.touch_with(&file, &map, 5000, 9200, always_slow);
        r.touch_with(&file, &map, 60_000, 70_000, never_slow);
        assert_eq!(*file.will_need.lock(), vec![(5000, 4200), (60_000, 65_536 - 60_000)], "clipped to the file");
        // Fast touches count it warm again; then only a probe in PROBE_EVERY is timed.
        for _ in 1..COLD_CREDIT {
            r.touch_with(&file, &map, 0, 4096, never_slow);
        }
        assert!(!r.is_cold(), "{COLD_CREDIT} fast touches in a row make it warm");
        let asked = file.will_need.lock().len();
        for _ in 0..3 * PROBE_EVERY {
            r.touch_with(&file, &map, 0, 4096, never_slow);
        }
        assert_eq!(file.will_need.lock().len(), asked, "a warm table asks for nothing");
        // A slow probe while warm turns it cold within PROBE_EVERY loads.
        for _ in 0..PROBE_EVERY {
            r.touch_with(&file, &map, 0, 4096, always_slow);
        }
        assert!(r.is_cold());
        // An empty or out-of-file range is left alone.
        r.touch_with(&file, &map, 70_000, 80_000, always_slow);
        assert_eq!(file.will_need.lock().len(), asked);
    }

    #[test]
    fn a_cold_table_reads_a_seeks_block_ahead_without_judging_itself_by_that_touch() {
        let dir = tempfile::tempdir().unwrap();
        let file = AdviceLog::new(mapped_file(dir.path(), &[7u8; 64 << 10]));
        let map = file.inner.mapping().unwrap().clone();
        let count = ColdCount::default();
        let r = Residency::counted_in(&count);
        let never_slow = Duration::from_secs(3600);
        r.prefetch(&file, &map, 0, 4096);
        assert!(file.will_need.lock().is_empty() && !count.any(), "warm: nothing asked for ahead");
        r.touch_with(&file, &map, 100, 4200, Duration::ZERO);
        assert!(r.is_cold() && count.any(), "a slow touch counts the table cold");
        // Cold: seeks ask ahead, but for one in PROBE_EVERY_COLD whose block is in the page
        // cache (this file was just written); touches after asking are not timed, so fast
        // ones (the pages came while other runs were read) do not warm it.
        for n in 0..PROBE_EVERY_COLD {
            let at = 8192 * u64::from(n % 4);
            r.prefetch(&file, &map, at, at + 4096);
            if n % PROBE_EVERY_COLD != 0 {
                r.touch_with(&file, &map, at, at + 4096, never_slow);
            }
        }
        assert_eq!(file.will_need.lock().len() as u32, PROBE_EVERY_COLD - 1);
        assert!(r.is_cold(), "touches of blocks asked for ahead say nothing");
        // The probes' touches are timed: fast ones warm the table, and the count drops.
        for _ in 0..COLD_CREDIT {
            r.touch_with(&file, &map, 30_000, 34_096, never_slow);
        }
        assert!(!r.is_cold() && !count.any(), "fast timed touches warm it");
        for _ in 0..PROBE_EVERY {
            r.touch_with(&file, &map, 100, 4200, Duration::ZERO);
        }
        assert!(count.any(), "a slow probe while warm counts it cold again, once");
        drop(r);
        assert!(!count.any(), "a cold table closed is counted no more");
    }
}
