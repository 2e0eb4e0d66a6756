//! Pacing value-log GC against writers, like a concurrent collector's pacer: GC works in
//! the background while the space estimate is under `Options::gc_space_amp_target`; past it,
//! GC runs flat out and writers are held to a rate (a token bucket: each write books its
//! bytes' time, and a writer that is ahead by more than a few milliseconds sleeps it off) that
//! the pacer lowers while the estimate keeps rising through the band up to
//! `gc_space_amp_stall` and raises while it falls: RocksDB's delayed write rate. The delay
//! falls on a few writes in a thousand (a sleep of 16–32 ms each), not on every write: the
//! p99 of writes stays that of unpaced ones. Past the stall, and while GC has work it can do, writes
//! wait for GC to free space — the last resort (RocksDB stalls writers on pending compaction
//! bytes the same way). Without pacing, writers that fill the page cache outrun a collector
//! that must read, check and move every live value, and the space never comes back while the
//! load lasts.
//!
//! The estimate counts what the disk counts (`Gc::vlog_space_amp`): every value file's
//! allocated bytes, the tables, files awaiting deletion, over the estimated live bytes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{above, Gc};
use crate::db::DbInner;
use crate::error::Result;

/// The longest one write waits for GC. Reaching it means GC is not making progress (a bug or
/// an I/O problem GC reports itself); the write then goes ahead rather than hang.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// A writer sleeps once it is this far ahead of its rate, and then sleeps off all of it: a few
/// writes in a thousand wait some milliseconds, and the rest none. Spread as sleeps of tens of
/// microseconds over every write, the same delay made every write slower by that much, which
/// is what p99 sees (and each short sleep cost as much in wake-ups as it held back); in sleeps
/// of 4 ms, holding 4 KiB writers back by 70 µs each on average put a sleep on 1.8 % of
/// writes, so p99 was the sleep. At 16 ms the same delay falls on 0.4 %: p99 is an unpaced
/// write's, and p99.9 the sleep, still shorter than the stalls of tens of milliseconds RocksDB
/// BlobDB's writers see on the same load.
const MIN_SLEEP_NS: u64 = 16_000_000;

/// The longest a paced write sleeps (a huge batch is not held for seconds).
const MAX_SLOWDOWN: Duration = Duration::from_millis(32);

/// Credit a writer below its rate keeps (a short burst after a quiet spell goes through).
const BURST_NS: u64 = 4_000_000;

/// The lowest rate the pacer holds writers to, bytes per second.
const MIN_RATE: u64 = 4 << 20;

/// The pacer lets the space estimate rise through its band at a speed that would reach the
/// stall in this many seconds (slower the deeper it is).
const HORIZON: f64 = 4.0;

/// The shortest reading the pacer acts on, seconds: GC frees space a chunk or a file at a
/// time, and over shorter spans the estimate moves in steps, not at a speed.
const MIN_READING: f64 = 0.25;

/// Set by the GC thread, waited on by user writers.
pub(crate) struct GcPacing {
    stalled: AtomicBool,
    /// Bytes per second writers are held to (0: no limit).
    rate: AtomicU64,
    /// The writers' clock: nanoseconds after `epoch` when the bytes admitted so far are due.
    due_ns: AtomicU64,
    epoch: Instant,
    lock: Mutex<()>,
    cv: Condvar,
    overwrites: Mutex<OverwriteEstimate>,
    /// Bytes flushed between two updates of the overwrite estimate (a few memtables).
    window_bytes: u64,
    /// The pacer's last reading (GC's thread steers).
    steer: Mutex<Reading>,
}

/// What the pacer saw when it last adjusted the rate.
struct Reading {
    amp: f64,
    at: Instant,
    user_bytes: u64,
}

/// How much of what users write overwrites a live value, from the garbage compaction found
/// per byte of users' separated values flushed lately (GC's moves are left out of both). The
/// memtables' user values are that much garbage-to-be: counting them as live makes the space
/// estimate lag an overwrite-heavy load by a memtable or more.
///
/// The ratio is one of decayed sums (garbage over flushed bytes), not an average of per-window
/// ratios: compaction counts garbage in bursts (a whole-tree refresh every few flushes), and
/// averaging windows that each saw a burst or none, each capped at 1, read 0.67 under pure
/// overwrites — the live bytes then read 11 % high and the space estimate 6 % under `du`.
#[derive(Default)]
struct OverwriteEstimate {
    flushed_mark: u64,
    garbage_mark: u64,
    /// Users' flushed bytes and the garbage counted for them, decayed at each sample: by half
    /// at a refresh (each sample is exact), by a fifth per window (a window's count is a burst
    /// or a lull, so the sums must span several).
    flushed_sum: f64,
    garbage_sum: f64,
    /// Users' flushed bytes when GC last compacted the whole tree: later ones have not met
    /// the versions they overwrite, so their garbage is not counted yet either.
    flushed_at_refresh: u64,
    /// Samples are taken at whole-tree refreshes, where the garbage of every byte flushed
    /// before it is counted, rather than every `window_bytes`.
    at_refreshes: bool,
}

impl OverwriteEstimate {
    /// Fold in the bytes since the last sample, the sums so far weighed by `keep`.
    fn sample(&mut self, flushed: u64, garbage: u64, keep: f64) {
        let added = flushed.saturating_sub(self.flushed_mark);
        self.flushed_sum = keep * self.flushed_sum + added as f64;
        self.garbage_sum = keep * self.garbage_sum + garbage.saturating_sub(self.garbage_mark) as f64;
        self.flushed_mark = flushed;
        self.garbage_mark = garbage;
    }

    fn ratio(&self) -> f64 {
        if self.flushed_sum <= 0.0 {
            return 0.0;
        }
        (self.garbage_sum / self.flushed_sum).min(1.0)
    }
}

/// Sleep `d` with a timer slack of a microsecond, not the thread's default of 50: a paced
/// write's sleep is tens of microseconds, and the slack would double it. The caller's slack
/// is restored after.
fn sleep_precisely(d: Duration) {
    // SAFETY: PR_GET_TIMERSLACK and PR_SET_TIMERSLACK read and set an integer attribute of the
    // calling thread; no memory is passed.
    let old = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK) };
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    std::thread::sleep(d);
    if old > 0 {
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, old as libc::c_ulong) };
    }
}

impl GcPacing {
    pub(crate) fn new(memtable_log_bytes: u64) -> Self {
        GcPacing {
            stalled: AtomicBool::new(false),
            rate: AtomicU64::new(0),
            due_ns: AtomicU64::new(0),
            epoch: Instant::now(),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            overwrites: Mutex::new(OverwriteEstimate::default()),
            window_bytes: memtable_log_bytes.saturating_mul(2).max(1 << 20),
            steer: Mutex::new(Reading { amp: 0.0, at: Instant::now(), user_bytes: 0 }),
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

    /// Hold writers to `bytes_per_sec` (0: no limit).
    pub(crate) fn set_rate(&self, bytes_per_sec: u64) {
        self.rate.store(bytes_per_sec, Ordering::Relaxed);
    }

    /// The rate writers are held to (0: none).
    pub(crate) fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Before a user write of `bytes`: wait out a stall, or book the write's time at the
    /// paced rate and sleep once the writers are ahead of it by `MIN_SLEEP_NS`. Returns the
    /// microseconds waited.
    pub(crate) fn wait_for_gc(&self, bytes: usize) -> u64 {
        if self.is_stalled() {
            return self.wait_while_stalled();
        }
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return 0;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let cost = (bytes as u128 * 1_000_000_000 / u128::from(rate)) as u64;
        let mut due = self.due_ns.load(Ordering::Relaxed);
        loop {
            let booked = due.max(now.saturating_sub(BURST_NS)).saturating_add(cost);
            match self.due_ns.compare_exchange_weak(due, booked, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    due = booked;
                    break;
                }
                Err(seen) => due = seen,
            }
        }
        let ahead = due.saturating_sub(now);
        if ahead < MIN_SLEEP_NS {
            return 0;
        }
        let pause = Duration::from_nanos(ahead).min(MAX_SLOWDOWN);
        sleep_precisely(pause);
        pause.as_micros() as u64
    }

    /// Steer the writers' rate from the estimate `amp` (`live`: the live bytes it divides by;
    /// `user_bytes`: users' bytes written so far). Under `target` there is no limit. In the
    /// band up to `stall`, the estimate may rise at most at a speed that falls to zero at the
    /// stall (`HORIZON` from reaching it at the present depth); over each reading (at least
    /// `MIN_READING`) the pacer measures how fast it rises and how fast users write, and sets
    /// the rate that would have kept the rise at the allowed speed: each byte written faster
    /// raises the estimate by `1 / live`. Half of each correction is taken at a time.
    pub(crate) fn steer(&self, amp: f64, target: f64, stall: f64, live: u64, user_bytes: u64) {
        let mut last = self.steer.lock();
        let now = Instant::now();
        let secs = now.duration_since(last.at).as_secs_f64();
        let band = stall - target;
        let depth = if band > 0.0 { (amp - target) / band } else { 0.0 };
        if depth <= 0.0 || band <= 0.0 {
            self.set_rate(0);
            *last = Reading { amp, at: now, user_bytes };
            return;
        }
        if secs < MIN_READING {
            return;
        }
        let written = (user_bytes.saturating_sub(last.user_bytes) as f64 / secs).max(1.0);
        let rising = (amp - last.amp) / secs;
        let allowed = band * (1.0 - depth).max(0.0) / HORIZON;
        let wanted = (written + (allowed - rising) * live as f64).max(MIN_RATE as f64);
        let cur = self.rate();
        // From no limit, the writers' pace is where the rate starts.
        let from = if cur == 0 { written } else { cur as f64 };
        let next = (from + (wanted - from) / 2.0).max(MIN_RATE as f64) as u64;
        tracing::debug!(amp, depth, rising, allowed, written, rate = next, "GC pacing");
        self.set_rate(next);
        *last = Reading { amp, at: now, user_bytes };
    }

    /// GC freed some space: waiting writers re-check.
    pub(crate) fn notify_progress(&self) {
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    /// Fold in the cumulative flushed and garbage byte counters; returns the estimated
    /// fraction of newly written separated bytes that overwrite live ones (0 at first).
    /// Between whole-tree refreshes a sample is taken every `window_bytes` flushed.
    pub(crate) fn overwrite_ratio(&self, flushed: u64, garbage: u64) -> f64 {
        let mut e = self.overwrites.lock();
        if !e.at_refreshes && flushed.saturating_sub(e.flushed_mark) >= self.window_bytes {
            e.sample(flushed, garbage, 0.8);
        }
        e.ratio()
    }

    /// Compaction has counted the garbage of the first `flushed` bytes (`garbage` so far):
    /// `whole_tree` when GC compacted every table for it, which is when the ratio is sampled;
    /// otherwise compaction's own counts stand and sampling goes back to windows.
    pub(crate) fn mark_refreshed(&self, flushed: u64, garbage: u64, whole_tree: bool) {
        let mut e = self.overwrites.lock();
        e.flushed_at_refresh = e.flushed_at_refresh.max(flushed);
        e.at_refreshes = whole_tree;
        if whole_tree && flushed > e.flushed_mark {
            e.sample(flushed, garbage, 0.5);
        }
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
    /// Pace writers by the space estimate `amp`: held to the pacer's rate past
    /// `gc_space_amp_target`, stalled past `gc_space_amp_stall`. Called only while GC has a
    /// file to collect, so a stall always ends with GC freeing space. While a reader keeps
    /// collected files alive, collecting more frees nothing: no stall and no pacing.
    pub(super) fn pace(&self, db: &DbInner, amp: f64) {
        let readers_block_freeing = !self.pending.lock().is_empty();
        let active = db.opts.gc_interval_ms > 0 && !readers_block_freeing;
        let (target, stall) = (db.opts.gc_space_amp_target, db.opts.gc_space_amp_stall);
        if active && target > 0.0 && stall > target {
            let live = self.live_estimate.load(Ordering::Relaxed);
            self.pacing.steer(amp, target, stall, live, db.counters.user_bytes.load(Ordering::Relaxed));
        } else {
            self.pacing.set_rate(0);
        }
        self.pacing.set_stalled(active && above(amp, stall));
        self.pacing.notify_progress();
    }

    /// The space amplification as the disk counts it: the bytes every value file holds on
    /// the device (holes punched out; files collected but kept for old readers included; the
    /// memtables' values in log files no flush has recorded yet), plus the tables, over the
    /// estimated live separated bytes — flushed ones minus discard statistics, plus those only
    /// the memtables reference yet, minus the share (the recent overwrite ratio) of the bytes
    /// whose overwrites compaction has not counted yet: the memtables' and those flushed since
    /// GC last compacted the tree. Tables are counted as live when they outweigh the separated
    /// values (a database of small values is the tree's business, not GC's). 0 with no live
    /// separated bytes.
    pub(crate) fn vlog_space_amp(&self, db: &DbInner) -> f64 {
        let c = &db.counters;
        // Users' writes only: GC's moves overwrite no live value (the copies they shadow go
        // with the collected file), and counting them diluted the ratio by however much GC
        // happened to be moving.
        let user_flushed = c.vlog_user_bytes_flushed.load(Ordering::Relaxed);
        let overwrites = self.pacing.overwrite_ratio(user_flushed, c.vlog_garbage_counted.load(Ordering::Relaxed));
        let (live, mut files, unrecorded, tables) = {
            let st = db.state.lock();
            let recorded = st.versions.vlog_files();
            let flushed: u64 = recorded.values().map(|b| b.live_bytes()).sum();
            let mems = || std::iter::once(&st.mem).chain(st.imms.iter());
            let per_file: Vec<_> = mems().map(|m| m.vlog_bytes()).collect();
            let unflushed: u64 = per_file.iter().flat_map(|m| m.values()).sum();
            // Values in log files no flush has recorded yet are on disk but in no file below.
            let unrecorded: u64 =
                per_file.iter().flat_map(|m| m.iter()).filter(|(f, _)| !recorded.contains_key(f)).map(|(_, b)| b).sum();
            let unflushed_user: u64 = unflushed.saturating_sub(mems().map(|m| m.moved_vlog_bytes()).sum());
            // What users wrote in the memtables and in the tables flushed since the last full
            // compaction overwrites values still counted live.
            let uncounted = unflushed_user + self.pacing.flushed_since_refresh(user_flushed);
            let live = flushed.saturating_sub((uncounted as f64 * overwrites) as u64) + unflushed;
            // Every keyspace's tables (dropped ones too, until their files go).
            let tables: u64 = st
                .versions
                .trees()
                .keys()
                .filter_map(|&ks| st.versions.current_of(ks))
                .map(|v| (0..v.num_levels()).map(|l| v.level_bytes(l)).sum::<u64>())
                .sum();
            (live, recorded.keys().copied().collect::<Vec<u64>>(), unrecorded, tables)
        };
        self.live_estimate.store(live, Ordering::Relaxed);
        if live == 0 {
            return 0.0;
        }
        files.extend(self.pending.lock().iter().map(|(f, _)| *f));
        let values: u64 =
            files.iter().map(|&f| db.vfs.disk_usage(&db.vlog.path(f)).unwrap_or(0)).sum::<u64>() + unrecorded;
        values as f64 / live as f64 + tables as f64 / live.max(tables) as f64
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
            let c = &db.counters;
            let (flushed, garbage) = (&c.vlog_user_bytes_flushed, &c.vlog_garbage_counted);
            self.pacing.mark_refreshed(flushed.load(Ordering::Relaxed), garbage.load(Ordering::Relaxed), false);
            return Ok(true);
        }
        if flushes < *last + every {
            return Ok(false);
        }
        *last = flushes;
        drop(last);
        let flushed = db.counters.vlog_user_bytes_flushed.load(Ordering::Relaxed);
        // The memtables stay: their overwrites are counted once they are flushed.
        self.phases.time(super::Phase::Refreshing, || db.scheduler.compact_all_tables(db))?;
        self.pacing.mark_refreshed(flushed, db.counters.vlog_garbage_counted.load(Ordering::Relaxed), true);
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
        for i in 2..30 {
            r = p.overwrite_ratio(i * w, (i - 1) * w);
        }
        assert!(r > 0.99, "pure overwrites: {r}");
        assert!(p.overwrite_ratio(33 * w, 28 * w) < 0.6, "a new load pulls it down");
    }

    #[test]
    fn overwrite_ratio_reads_bursty_garbage_counts_as_their_mean() {
        // Pure overwrites whose garbage compaction counts every other window, two windows'
        // worth at a time (an average of capped per-window ratios read 0.67 here).
        let p = GcPacing::new(8 << 20);
        let w = 16 << 20;
        for i in 1..40u64 {
            let r = p.overwrite_ratio(i * w, (i / 2) * 2 * w);
            assert!(i < 20 || r > 0.85, "windows of 0 and 2 average 1: {r} after window {i}");
        }
        // Sampled at whole-tree refreshes: every byte since the last one overwrote a live one.
        let q = GcPacing::new(8 << 20);
        for i in 1..10u64 {
            q.mark_refreshed(i * 3 * w, i * 3 * w, true);
            assert_eq!(q.overwrite_ratio(i * 3 * w + w, i * 3 * w), 1.0, "no window sample between refreshes");
        }
        q.mark_refreshed(40 * w, 27 * w, true);
        assert!(q.overwrite_ratio(40 * w, 27 * w) < 0.6, "a load since the last refresh pulls it down");
    }

    #[test]
    fn paced_writers_are_held_to_the_rate_with_short_sleeps() {
        let p = GcPacing::new(1 << 20);
        assert_eq!(p.wait_for_gc(1 << 20), 0, "no rate, no wait");
        p.set_rate(64 << 20);
        let start_ns = p.epoch.elapsed().as_nanos() as u64;
        for _ in 0..64 {
            p.wait_for_gc(16 << 10);
        }
        // 1 MiB at 64 MiB/s is 15.6 ms of the writers' clock, less the burst credit, however
        // fast or slow the calls ran (the clock books time; it does not measure it).
        let booked = p.due_ns.load(Ordering::Relaxed);
        assert!(booked >= start_ns + 15_625_000 - BURST_NS, "not booked at the rate: {booked} < {start_ns}");
        p.set_rate(MIN_RATE);
        let one = p.wait_for_gc(1 << 20);
        assert!(one >= MIN_SLEEP_NS / 1000, "a write far ahead of its rate sleeps: {one} µs");
        assert!(one <= MAX_SLOWDOWN.as_micros() as u64, "one sleep is capped: {one} µs");
        p.set_rate(0);
        assert_eq!(p.wait_for_gc(1 << 20), 0);
    }

    #[test]
    fn the_pacer_holds_writers_to_the_rise_the_band_allows_and_lets_go_below_the_target() {
        let p = GcPacing::new(1 << 20);
        let live = 1u64 << 30;
        let mut written = 0;
        let mut feed = |amp: f64| {
            // Readings of at least `MIN_READING`: 100 MiB each, whatever they take.
            p.steer.lock().at = Instant::now() - Duration::from_secs_f64(MIN_READING);
            written += 100 << 20;
            p.steer(amp, 1.3, 1.5, live, written);
            p.rate()
        };
        assert_eq!(feed(1.2), 0, "under the target: no limit");
        let first = feed(1.35);
        assert!(first > 0, "entering the band sets a rate");
        let slower = feed(1.45);
        assert!(slower < first, "rising too fast: slower ({slower} !< {first})");
        let faster = feed(1.40);
        assert!(faster > slower, "falling: faster ({faster} !> {slower})");
        assert!(feed(1.60) >= MIN_RATE);
        assert_eq!(feed(1.25), 0, "back under the target: no limit");
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
