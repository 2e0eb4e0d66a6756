//! Backpressure from value-log GC to writers: in the last quarter of the band between
//! `Options::gc_space_amp_target` and `gc_space_amp_stall`, each user write sleeps in
//! proportion to its size and to how deep into that quarter the estimate is (RocksDB's
//! delayed write rate); past the stall, and while GC has work it can do, writes wait for GC
//! to free space (RocksDB stalls writers on pending compaction bytes the same way). Without it,
//! writers that fill the page cache outrun a collector that must read, check and move every
//! live value, and the space never comes back while the load lasts.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{above, Gc};
use crate::db::DbInner;
use crate::error::Result;

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

impl Gc {
    /// Stall writers while the value log's space amplification `amp` is past
    /// `gc_space_amp_stall`. Called only while GC has a file to collect, so a stall always
    /// ends with GC freeing space. While a reader keeps collected files alive, collecting
    /// more frees nothing: no stall.
    pub(super) fn pace(&self, db: &DbInner, amp: f64) {
        let readers_block_freeing = !self.pending.lock().is_empty();
        let active = db.opts.gc_interval_ms > 0 && !readers_block_freeing;
        let (target, stall) = (db.opts.gc_space_amp_target, db.opts.gc_space_amp_stall);
        // The slowdown band: the last quarter before the stall.
        let slow_from = stall - (stall - target).max(0.0) / 4.0;
        let slowdown =
            if active && target > 0.0 && stall > slow_from { (amp - slow_from) / (stall - slow_from) } else { 0.0 };
        self.pacing.set_slowdown(slowdown);
        self.pacing.set_stalled(active && above(amp, stall));
        self.pacing.notify_progress();
    }

    /// Bytes the value-log files take on disk over the estimated live separated bytes: flushed
    /// ones minus discard statistics, plus those only the memtables reference yet, minus the
    /// share (the recent overwrite ratio) of the bytes whose overwrites compaction has not
    /// counted yet: the memtables' and those flushed since GC last compacted the tree.
    pub(crate) fn vlog_space_amp(&self, db: &DbInner) -> f64 {
        let c = &db.counters;
        // Users' writes only: GC's moves overwrite no live value (the copies they shadow go
        // with the collected file), and counting them diluted the ratio by however much GC
        // happened to be moving (the ratio came out well under the true one: docs/BENCHMARKS.md §5).
        let user_flushed = c.vlog_user_bytes_flushed.load(Ordering::Relaxed);
        let overwrites = self.pacing.overwrite_ratio(user_flushed, c.vlog_garbage_counted.load(Ordering::Relaxed));
        let (live, files, unflushed) = {
            let st = db.state.lock();
            let flushed: u64 = st.versions.vlog_files().values().map(|b| b.live_bytes()).sum();
            let mems = || std::iter::once(&st.mem).chain(st.imms.iter());
            let unflushed: u64 = mems().map(|m| m.vlog_bytes().values().sum::<u64>()).sum();
            let unflushed_user: u64 = unflushed.saturating_sub(mems().map(|m| m.moved_vlog_bytes()).sum());
            // What users wrote in the memtables and in the tables flushed since the last full
            // compaction overwrites values still counted live.
            let uncounted = unflushed_user + self.pacing.flushed_since_refresh(user_flushed);
            let live = flushed.saturating_sub((uncounted as f64 * overwrites) as u64) + unflushed;
            let files: Vec<(u64, u64)> = st.versions.vlog_files().iter().map(|(f, b)| (*f, b.total_bytes)).collect();
            (live, files, unflushed)
        };
        if live == 0 {
            return 0.0;
        }
        // Each file's allocated bytes (holes punched out) times its separated share: inline
        // values, deletes and WAL-only logs are not GC's to free, and files collected but
        // kept for old readers are out of the manifest.
        let disk: u64 = files
            .iter()
            .map(|&(f, separated)| {
                let path = db.vlog.path(f);
                let size = db.vfs.file_size(&path).unwrap_or(0);
                let used = db.vfs.disk_usage(&path).unwrap_or(0).min(size);
                if size == 0 {
                    0
                } else {
                    (used as f64 * (separated.min(size) as f64 / size as f64)) as u64
                }
            })
            .sum::<u64>()
            + unflushed;
        disk as f64 / live as f64
    }

    /// Discard statistics only learn about overwritten values when compaction merges the old
    /// and new versions, and a key-value separated LSM-tree is tiny, so its upper levels rarely
    /// fill up enough to be merged. When the tree is small next to the value log, compacting
    /// all of it is cheap (a few MB against GBs of vLog) and makes the statistics exact.
    /// Near the space target it refreshes after every flush instead of every fourth. Returns
    /// whether the space estimate's inputs changed (it compacted, or moved the refresh mark).
    pub(super) fn refresh_discard_stats(&self, db: &DbInner, eager: bool) -> Result<bool> {
        let (tree_bytes, flushes) = {
            let st = db.state.lock();
            let v = st.versions.current();
            ((0..v.num_levels()).map(|l| v.level_bytes(l)).sum::<u64>(), db.counters.flushes.load(Ordering::Relaxed))
        };
        let values: u64 = db.state.lock().versions.vlog_files().values().map(|b| b.total_bytes).sum();
        let mut last = self.stats_refreshed_at.lock();
        let every = if eager { 1 } else { 4 };
        if tree_bytes.saturating_mul(20) > values {
            // No whole-tree refresh at this size: the estimate relies on compaction's own
            // counts and corrects only the memtables.
            self.pacing.mark_refreshed(db.counters.vlog_user_bytes_flushed.load(Ordering::Relaxed));
            return Ok(true);
        }
        if flushes < *last + every {
            return Ok(false);
        }
        *last = flushes;
        drop(last);
        let flushed = db.counters.vlog_user_bytes_flushed.load(Ordering::Relaxed);
        // The memtables stay: their overwrites are counted once they are flushed.
        db.scheduler.compact_all_tables(db)?;
        self.pacing.mark_refreshed(flushed);
        Ok(true)
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
