//! Backpressure from value-log GC to writers: in the last quarter of the band between
//! `Options::gc_space_amp_target` and `gc_space_amp_stall`, each user write sleeps in
//! proportion to its size and to how deep into that quarter the estimate is (RocksDB's
//! delayed write rate); past the stall, and while GC has work it can do, writes wait for GC
//! to free space (RocksDB stalls writers on pending compaction bytes the same way). Without it,
//! writers that fill the page cache at 1 GB/s outrun a collector that must read, check and
//! re-put every live value, and the space never comes back while the load lasts.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The longest one write waits for GC. Reaching it means GC is not making progress (a bug or
/// an I/O problem GC reports itself); the write then goes ahead rather than hang.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// Write bytes per microsecond of delay at the full slowdown: 16 MB/s of writes at most per
/// writer just below the stall, a 4 KiB write waiting 256 µs.
const SLOWDOWN_BYTES_PER_MICRO: u64 = 16;

/// The longest a slowed-down write sleeps (a huge batch is not held for seconds).
const MAX_SLOWDOWN: Duration = Duration::from_millis(10);

/// Set by the GC thread, waited on by user writers.
pub(crate) struct GcPacing {
    stalled: AtomicBool,
    /// How deep into the slowdown band the estimate is, in thousandths (0: no slowdown).
    slowdown_permille: AtomicU32,
    lock: Mutex<()>,
    cv: Condvar,
    overwrites: Mutex<OverwriteEstimate>,
    /// Bytes flushed between two updates of the overwrite estimate (a few memtables).
    window_bytes: u64,
}

/// How much of what users write overwrites a live value, from the garbage compaction found
/// per byte of users' separated values flushed lately (GC's moves are left out of both). The
/// memtables' user values are that much garbage-to-be: counting them as live makes the space
/// estimate lag an overwrite-heavy load by a memtable or more.
#[derive(Default)]
struct OverwriteEstimate {
    flushed_mark: u64,
    garbage_mark: u64,
    ratio: f64,
    /// Users' flushed bytes when GC last compacted the whole tree: later ones have not met
    /// the versions they overwrite, so their garbage is not counted yet either.
    flushed_at_refresh: u64,
}

impl GcPacing {
    pub(crate) fn new(memtable_log_bytes: u64) -> Self {
        GcPacing {
            stalled: AtomicBool::new(false),
            slowdown_permille: AtomicU32::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            overwrites: Mutex::new(OverwriteEstimate::default()),
            window_bytes: memtable_log_bytes.saturating_mul(2).max(1 << 20),
        }
    }

    /// Whether writers must currently wait for GC.
    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Acquire)
    }

    /// Start or end the stall; ending it (or GC freeing space) wakes the waiting writers.
    pub(crate) fn set_stalled(&self, on: bool) {
        let was = self.stalled.swap(on, Ordering::AcqRel);
        if was && !on {
            self.notify_progress();
        }
    }

    /// Slow writes down by `fraction` (0 to 1) of the full slowdown.
    pub(crate) fn set_slowdown(&self, fraction: f64) {
        let permille = (fraction.clamp(0.0, 1.0) * 1000.0) as u32;
        self.slowdown_permille.store(permille, Ordering::Relaxed);
    }

    /// Before a user write of `bytes`: wait out a stall, or sleep the slowdown's share.
    /// Returns the microseconds waited.
    pub(crate) fn wait_for_gc(&self, bytes: usize) -> u64 {
        if self.is_stalled() {
            return self.wait_while_stalled();
        }
        let permille = u64::from(self.slowdown_permille.load(Ordering::Relaxed));
        if permille == 0 {
            return 0;
        }
        let micros = (bytes as u64 / SLOWDOWN_BYTES_PER_MICRO).saturating_mul(permille) / 1000;
        let pause = Duration::from_micros(micros).min(MAX_SLOWDOWN);
        if pause.is_zero() {
            return 0;
        }
        std::thread::sleep(pause);
        pause.as_micros() as u64
    }

    /// GC freed some space: waiting writers re-check.
    pub(crate) fn notify_progress(&self) {
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    /// Fold in the cumulative flushed and garbage byte counters; returns the estimated
    /// fraction of newly written separated bytes that overwrite live ones (0 at first).
    pub(crate) fn overwrite_ratio(&self, flushed: u64, garbage: u64) -> f64 {
        let mut e = self.overwrites.lock();
        let added = flushed.saturating_sub(e.flushed_mark);
        if added >= self.window_bytes {
            let sample = (garbage.saturating_sub(e.garbage_mark) as f64 / added as f64).min(1.0);
            e.ratio = 0.5 * e.ratio + 0.5 * sample;
            e.flushed_mark = flushed;
            e.garbage_mark = garbage;
        }
        e.ratio
    }

    /// GC compacted every table that held the first `flushed` bytes.
    pub(crate) fn mark_refreshed(&self, flushed: u64) {
        let mut e = self.overwrites.lock();
        e.flushed_at_refresh = e.flushed_at_refresh.max(flushed);
    }

    /// Flushed bytes whose overwrites compaction has not counted for sure.
    pub(crate) fn flushed_since_refresh(&self, flushed: u64) -> u64 {
        flushed.saturating_sub(self.overwrites.lock().flushed_at_refresh)
    }

    /// Block while the stall lasts (bounded by `MAX_WAIT`); returns the microseconds waited.
    pub(crate) fn wait_while_stalled(&self) -> u64 {
        if !self.is_stalled() {
            return 0;
        }
        let start = Instant::now();
        let mut g = self.lock.lock();
        while self.is_stalled() && start.elapsed() < MAX_WAIT {
            self.cv.wait_for(&mut g, Duration::from_millis(10));
        }
        start.elapsed().as_micros() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn overwrite_ratio_follows_the_workload() {
        let p = GcPacing::new(8 << 20);
        let w = 16 << 20;
        assert_eq!(p.overwrite_ratio(1 << 20, 0), 0.0, "no window yet");
        assert_eq!(p.overwrite_ratio(w, 0), 0.0, "a fresh load overwrites nothing");
        let mut r = 0.0;
        for i in 2..10 {
            r = p.overwrite_ratio(i * w, (i - 1) * w);
        }
        assert!(r > 0.99, "pure overwrites: {r}");
        assert!(p.overwrite_ratio(11 * w, 8 * w) < 0.6, "a new load pulls it down");
    }

    #[test]
    fn slowdown_delays_writes_in_proportion_to_size_and_depth() {
        let p = GcPacing::new(1 << 20);
        assert_eq!(p.wait_for_gc(1 << 20), 0, "no slowdown, no wait");
        p.set_slowdown(0.5);
        let waited = p.wait_for_gc(64 << 10);
        assert!((2048..10_000).contains(&waited), "half of 4096 µs for 64 KiB: {waited}");
        p.set_slowdown(1.0);
        assert!(p.wait_for_gc(1 << 30) <= MAX_SLOWDOWN.as_micros() as u64 + 2_000, "capped");
        p.set_slowdown(0.0);
        assert_eq!(p.wait_for_gc(1 << 20), 0);
    }

    #[test]
    fn writer_waits_until_gc_ends_the_stall() {
        let p = Arc::new(GcPacing::new(1 << 20));
        assert_eq!(p.wait_while_stalled(), 0, "no stall, no wait");
        p.set_stalled(true);
        let p2 = p.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            p2.set_stalled(false);
        });
        let waited = p.wait_while_stalled();
        t.join().unwrap();
        assert!(waited >= 40_000, "returned before the stall ended: {waited} µs");
        assert!(!p.is_stalled());
    }
}
