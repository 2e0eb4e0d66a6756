//! Value-log garbage collection (WiscKey §3.3.2): pick a value file by cost and benefit
//! (garbage from compaction's discard statistics, and age; the most garbage past the space
//! target), move its live values to a cold file in chunks and log their new pointers through
//! the write leader, record progress in the manifest, then give the space back — punch a hole
//! over each chunk and delete the file once it is fully collected.
//!
//! Safety argument (docs/design.md has the crash table): a pointer is put only if the key's
//! newest entry still points at the old copy, checked by the write leader so a concurrent user
//! write wins; the cold file is synced before the pointers are logged, and space is freed only
//! once the log is durable past them, no snapshot older than the moves exists and no iterator
//! made before the free is left.

mod cold;
mod collect;
mod freer;
mod pacing;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

pub(super) use cold::find_cold_files;
use cold::ColdOutput;
pub(crate) use cold::Relocation;
use pacing::GcPacing;

use super::{add, DbInner};
use crate::error::{Error, Result};
use crate::write_batch::WriteBatch;

/// Under the space target, a file is picked by LFS's cost-benefit score (garbage, and age as
/// file numbers since it was written): a young file's live values are likely to die soon, so
/// collecting it later moves less. Over the target, the most garbage per byte read wins.
fn score(garbage_ratio: f64, age: u64, greedy: bool) -> f64 {
    if greedy {
        garbage_ratio
    } else {
        garbage_ratio * age.max(1) as f64 / (2.0 - garbage_ratio)
    }
}

/// Past `gc_space_amp_target`, background GC also takes files with this much garbage.
const EAGER_MIN_GARBAGE_RATIO: f64 = 0.2;

/// When a collection's outcome was installed, as its readers see it: its pointer puts were
/// visible from sequence number `seq` on, and readers that follow value pointers registered
/// from number `readers` on took their views after it. A reader from before either may still
/// read the collected copies: a snapshot at an older sequence number, through pointers GC
/// replaced; an iterator (or `multi_get`) made before, through pointers GC replaced or that a
/// compaction dropped without a newer write (a fold of merge operands into the separated value
/// beneath them, an expired entry), or whose value expired after the iterator judged expiry.
#[derive(Debug)]
pub(crate) struct Installed {
    seq: u64,
    readers: u64,
}

impl Installed {
    /// The newest state, read now.
    pub(super) fn now(db: &DbInner) -> Installed {
        Installed { seq: db.writes.visible_seq(), readers: db.snapshots.next_reader() }
    }
}

/// Whether a space amplification is above `limit` (`0` = no limit).
fn above(amp: f64, limit: f64) -> bool {
    limit > 0.0 && amp > limit
}

/// Value-log GC's own state: one collector at a time, the files it collected that old readers
/// still pin, the files it found damaged, its cold-file output, and the pacing that makes
/// writers wait for it. Its methods take the database they collect (`db`).
pub(crate) struct Gc {
    /// One collector at a time: two would punch holes under each other's reads.
    lock: Mutex<()>,
    /// Fully collected vLog files waiting for readers from before they were collected.
    pub(super) pending: Mutex<Vec<(u64, Installed)>>,
    /// vLog files GC found damaged; it leaves them alone (as evidence).
    damaged: Mutex<HashSet<u64>>,
    /// The cold value file output (hot/cold separation).
    cold: Mutex<ColdOutput>,
    /// Flush count when GC last compacted the whole tree to refresh discard statistics.
    stats_refreshed_at: Mutex<u64>,
    /// Writers wait here while GC is behind (`Options::gc_space_amp_stall`).
    pub(super) pacing: GcPacing,
    /// The live bytes the last space estimate divided by (`vlog_space_amp`), for the pacer.
    live_estimate: std::sync::atomic::AtomicU64,
    /// GC asks the next memtable switch to roll the log file, so the values in it can be
    /// collected once the memtable is flushed (the space stall is on and no file is behind
    /// the log head).
    pub(super) roll_requested: AtomicBool,
    /// Wakes the GC thread (a flush added value bytes or moved the head; shutdown).
    pub(super) cv: Condvar,
    /// Buffers the chunk reader reuses, kept from one file to the next: a fresh buffer of
    /// `gc_chunk_bytes` per file, and fresh relocation batches per chunk, cost a page fault
    /// per page of each, and the batches a zero fill (a profile of sustained overwrites in
    /// memory had them at a sixth of the reader's time). Given back when a round finds
    /// nothing to collect and at the end of `run_gc`.
    pub(super) buffers: Mutex<collect::Buffers>,
    /// Where collecting spends its time (`DbStats::gc_phase_micros`).
    pub(super) phases: PhaseTimers,
    /// The file the freer thread is freeing beside the collector, and how its free ended.
    in_flight: Mutex<freer::InFlight>,
    /// Signalled when the freer is done with its file.
    in_flight_cv: Condvar,
}

/// Where value-log GC's collector spent its time, in microseconds of wall-clock time since
/// the open (`DbStats::gc_phase_micros`): what to look at when writers wait for GC. The phases
/// of one file run in a pipeline, so a helper's reading overlaps the collector's work; the
/// figures are the collector's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcPhaseMicros {
    /// Waiting for the helper to read, checksum and check the next chunk.
    pub waiting_for_chunks: u64,
    /// Appending a chunk's live values to a cold file.
    pub appending: u64,
    /// Syncing the cold file and logging the moved values' pointers through the write queue.
    pub logging_pointers: u64,
    /// Waiting for the log to be durable past those pointers, recording the progress in the
    /// manifest, punching the chunks out and deleting collected files. A collected file's last
    /// chunks are freed by a freer thread beside the next file's collection: only the time
    /// the collector waits for it counts here.
    pub freeing: u64,
    /// Pacing writers and pausing between chunks (`Options::gc_pause_ms`).
    pub pausing: u64,
    /// Compacting the whole tree to refresh the discard statistics (beside collecting).
    pub refreshing: u64,
}

/// The running sums behind `GcPhaseMicros`, in nanoseconds, one per `Phase`.
#[derive(Default)]
pub(super) struct PhaseTimers {
    sums: [std::sync::atomic::AtomicU64; 6],
}

/// One of `PhaseTimers`' sums (its index).
#[derive(Clone, Copy)]
pub(super) enum Phase {
    WaitingForChunks,
    Appending,
    LoggingPointers,
    Freeing,
    Pausing,
    Refreshing,
}

impl PhaseTimers {
    /// Run `f`, adding its wall-clock time to `phase`.
    pub(super) fn time<T>(&self, phase: Phase, f: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let r = f();
        // Nanoseconds: a phase that took less than a microsecond still shows (rounded up).
        add(&self.sums[phase as usize], start.elapsed().as_nanos().max(1) as u64);
        r
    }

    pub(crate) fn snapshot(&self) -> GcPhaseMicros {
        let load = |p: Phase| self.sums[p as usize].load(Ordering::Relaxed).div_ceil(1000);
        GcPhaseMicros {
            waiting_for_chunks: load(Phase::WaitingForChunks),
            appending: load(Phase::Appending),
            logging_pointers: load(Phase::LoggingPointers),
            freeing: load(Phase::Freeing),
            pausing: load(Phase::Pausing),
            refreshing: load(Phase::Refreshing),
        }
    }
}

impl Gc {
    /// GC's state at open: pointer ops the replayed memtable holds into cold files keep those
    /// files until the log head passes `log_file` (see `ColdOutput::after_recovery`).
    pub(super) fn after_recovery(
        mem: &crate::memtable::Memtable,
        vlog: &crate::vlog::VlogReader,
        log_file: u64,
        memtable_log_bytes: u64,
    ) -> Self {
        Gc {
            lock: Mutex::new(()),
            pending: Mutex::new(Vec::new()),
            damaged: Mutex::new(HashSet::new()),
            cold: Mutex::new(ColdOutput::after_recovery(mem, vlog, log_file)),
            stats_refreshed_at: Mutex::new(0),
            pacing: GcPacing::new(memtable_log_bytes),
            live_estimate: std::sync::atomic::AtomicU64::new(0),
            roll_requested: AtomicBool::new(false),
            cv: Condvar::new(),
            phases: PhaseTimers::default(),
            buffers: Mutex::new(collect::Buffers::default()),
            in_flight: Mutex::new(freer::InFlight::default()),
            in_flight_cv: Condvar::new(),
        }
    }
}

/// What one `Db::run_gc` call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// vLog files fully collected (deleted or waiting for older readers to go).
    pub files_collected: u64,
    /// Bytes of vLog read.
    pub bytes_read: u64,
    /// Bytes of live values moved to cold value files.
    pub bytes_rewritten: u64,
    /// Set when collection stopped because a snapshot older than GC's moves, or an iterator
    /// made before it freed, pins what was collected (the oldest snapshot reads at this
    /// sequence number): collecting more would only copy live values again without freeing
    /// anything. GC resumes once it is released.
    pub stopped_by_reader_at: Option<u64>,
}

/// How long GC waits for readers from before it frees (`Installed`) before it stops: short scans and
/// snapshot reads finish within it, a held snapshot does not. (It is the longest a `run_gc`
/// call or a round blocks on a reader.)
const READER_WAIT: Duration = Duration::from_millis(20);

/// What one round of background GC did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GcRound {
    /// Collected a file; there may be more to do.
    Collected,
    /// Found nothing to collect at the ratio the space calls for.
    Idle,
    /// Found nothing, but rolled the log so the next flush leaves a file to collect.
    Rolled,
    /// Stopped: an old snapshot or iterator pins what GC would copy.
    Pinned,
}

impl Gc {
    /// Collect every vLog file whose garbage ratio is at least `min_garbage_ratio`.
    pub(crate) fn run_gc(&self, db: &DbInner, min_garbage_ratio: f64) -> Result<GcReport> {
        // One collector at a time: two would punch holes under each other's reads.
        let _one = self.lock.lock();
        let mut report = GcReport::default();
        // A file background GC handed to the freer is freed before this call picks: the
        // background's outcome is its own (an error there is retried by the next round).
        if let Some(Err(e)) = self.settle_freer() {
            tracing::warn!(error = %e, "value-log GC: freeing a collected file failed; will retry");
        }
        self.finish_pending_gc_deletes(db);
        // Only the files that exist now: GC's own output goes to the cold file it is filling,
        // which is not a candidate, so a call never collects its own output, and its work is bounded by what exists when it starts.
        let mut candidates = self.gc_candidates(db);
        while let Some((file, start)) = self.pick_gc_file(db, min_garbage_ratio, Some(&candidates), true) {
            if self.is_shutting_down(db) {
                break;
            }
            candidates.remove(&file);
            if let Some(seq) = self.readers_pin_collected_files(db) {
                report.stopped_by_reader_at = Some(seq);
                break;
            }
            if let Some(seq) = self.gc_file(db, file, start, false, &mut report)? {
                report.stopped_by_reader_at = Some(seq);
                break;
            }
        }
        if let Some(seq) = report.stopped_by_reader_at {
            tracing::info!(reader_seq = seq, "value-log GC stopped: a snapshot or iterator from before its moves (an older sequence number, or made before it freed) pins the collected data; it resumes once that reader is gone");
        }
        // Background GC re-arms the stall if the value log is still past its limit.
        self.release_writers();
        self.buffers.lock().release();
        Ok(report)
    }

    /// Key-order reorganization (beyond the paper, which suggests it for scans after random
    /// loads): move every separated value, in key order, to cold value files, so a
    /// scan then reads the value log sequentially; the old copies become garbage and are
    /// collected right after. Same safety as GC: each pointer put is conditional on the key still
    /// pointing at the old copy.
    pub(crate) fn reorganize(&self, db: &std::sync::Arc<DbInner>) -> Result<GcReport> {
        let mut report = GcReport::default();
        let keyspaces = {
            let st = db.state.lock();
            st.live_keyspace_ids()
        };
        {
            let _one = self.lock.lock();
            for &ks in &keyspaces {
                self.reorganize_keyspace(db, ks, &mut report)?;
            }
        }
        add(&db.counters.gc_bytes_rewritten, report.bytes_rewritten);
        // The old copies' pointers are now shadowed: compaction turns them into discard
        // statistics, and GC then drops the emptied files.
        db.scheduler.flush(db)?;
        db.scheduler.compact_all_tables(db)?;
        let collected = self.run_gc(db, 0.9)?;
        report.files_collected = collected.files_collected;
        Ok(report)
    }

    /// Move keyspace `ks`'s separated values in key order (`reorganize`).
    fn reorganize_keyspace(&self, db: &std::sync::Arc<DbInner>, ks: u32, report: &mut GcReport) -> Result<()> {
        let mut it = db.iter(&crate::options::ReadOptions::default(), ks)?;
        it.seek_to_first()?;
        let mut r = Relocation { puts: WriteBatch::new(), old: Vec::new() };
        while it.valid() {
            if let Some(ptr) = it.current_pointer() {
                // The iterator shows a value with its expiry time stripped: a plain put would
                // make a TTL value permanent. (Looked up again, the newest entry may be a newer
                // write; its pointer then differs, and the conditional put is dropped.)
                match db.newest_expiry(ks, it.key())? {
                    Some(at) => r.puts.put_expiring_raw(ks, it.key(), it.value(), at),
                    None => r.puts.put_raw(ks, it.key(), it.value()),
                };
                r.old.push(ptr);
                report.bytes_read += u64::from(ptr.op_len);
            }
            if r.puts.approximate_size() as u64 >= db.opts.gc_chunk_bytes {
                let full = std::mem::replace(&mut r, Relocation { puts: WriteBatch::new(), old: Vec::new() });
                report.bytes_rewritten += self.relocate(db, vec![full], None, true)?;
            }
            it.next()?;
        }
        report.bytes_rewritten += self.relocate(db, vec![r], None, true)?;
        Ok(())
    }

    fn is_shutting_down(&self, db: &DbInner) -> bool {
        db.state.lock().shutting_down
    }

    /// The value files GC may collect now: log files wholly before the head, and cold files
    /// GC is not filling and no log record past the head points into.
    fn gc_candidates(&self, db: &DbInner) -> std::collections::BTreeSet<u64> {
        let head = db.state.lock().versions.log_head().file;
        let in_use = self.cold_files_in_use(head);
        let st = db.state.lock();
        st.versions.vlog_files().keys().copied().filter(|&f| self.collectable(db, f, head, &in_use)).collect()
    }

    /// Whether GC may collect value file `f` now (see `gc_candidates`).
    fn collectable(&self, db: &DbInner, f: u64, head: u64, cold_in_use: &std::collections::HashSet<u64>) -> bool {
        if db.vlog.is_cold(f) {
            !cold_in_use.contains(&f)
        } else {
            f < head
        }
    }

    /// The share of file `f` that is garbage. A cold file's is measured against its size: its
    /// moves that a user write overtook were never referenced, so the statistics never see them.
    fn garbage_ratio_of(&self, db: &DbInner, f: u64, s: &crate::version::set::VlogFileStats) -> f64 {
        if !db.vlog.is_cold(f) {
            return s.garbage_ratio();
        }
        let size = db.vfs.file_size(&db.vlog.path(f)).unwrap_or(0);
        if size == 0 {
            return s.garbage_ratio();
        }
        (1.0_f64 - s.live_bytes() as f64 / size as f64).clamp(0.0, 1.0)
    }

    /// A file partly collected before (the manifest's GC tail) comes first; otherwise the best
    /// collectable file by `score` whose garbage ratio is at least `min_ratio`. An explicit
    /// call (`only`: the files that existed when it started) may take any of those; a
    /// background round never takes a file without garbage — files full of GC's own fresh
    /// copies look like that, and chasing them would copy the same values forever. Files GC
    /// found damaged are left alone (as evidence; reads of values in them report the damage).
    fn pick_gc_file(
        &self,
        db: &DbInner,
        min_ratio: f64,
        only: Option<&std::collections::BTreeSet<u64>>,
        greedy: bool,
    ) -> Option<(u64, u64)> {
        let damaged = self.damaged.lock().clone();
        let freeing = self.file_in_flight();
        let head = db.state.lock().versions.log_head().file;
        let in_use = self.cold_files_in_use(head);
        let allowed = |f: &u64| only.is_none_or(|o| o.contains(f)) && !damaged.contains(f) && freeing != Some(*f);
        let st = db.state.lock();
        let tail = st.versions.vlog_tail();
        let vlog_files = st.versions.vlog_files();
        if tail.offset > 0 && vlog_files.contains_key(&tail.file) && allowed(&tail.file) {
            return Some((tail.file, tail.offset));
        }
        let newest = st.versions.next_file_number();
        vlog_files
            .iter()
            .filter(|(f, _)| self.collectable(db, **f, head, &in_use) && allowed(f))
            .map(|(f, s)| (*f, self.garbage_ratio_of(db, *f, s)))
            .filter(|&(_, ratio)| ratio > 0.0 || only.is_some())
            .filter(|&(_, ratio)| ratio >= min_ratio)
            .map(|(f, ratio)| (f, score(ratio, newest.saturating_sub(f), greedy)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(f, _)| (f, 0))
    }

    /// The sequence number of a reader that keeps files GC already collected alive: while
    /// one does, collecting more only copies live values again without freeing anything.
    fn readers_pin_collected_files(&self, db: &DbInner) -> Option<u64> {
        if self.pending.lock().is_empty() {
            return None;
        }
        db.snapshots.oldest()
    }

    /// Wait (at most `READER_WAIT`) until no reader from before `at` is left; false if one is.
    fn wait_for_readers(&self, db: &DbInner, at: &Installed) -> bool {
        if self.no_reader_before(db, at) {
            return true;
        }
        // Writers must not wait for GC while GC waits for a reader: nothing frees meanwhile.
        self.release_writers();
        let start = std::time::Instant::now();
        while !self.no_reader_before(db, at) {
            if start.elapsed() >= READER_WAIT || self.is_shutting_down(db) {
                return false;
            }
            // Short scans end within a millisecond or so: poll often, hold `gc_lock` briefly.
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Let the sweep delete collected files whose old readers have gone.
    pub(crate) fn finish_pending_gc_deletes(&self, db: &DbInner) {
        let ready: Vec<u64> = {
            let mut pending = self.pending.lock();
            let (ready, wait): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(_, at)| self.no_reader_before(db, at));
            *pending = wait;
            ready.into_iter().map(|(f, _)| f).collect()
        };
        if ready.is_empty() {
            return;
        }
        let mut st = db.state.lock();
        let sizes: u64 = ready.iter().map(|f| db.vfs.disk_usage(&db.vlog.path(*f)).unwrap_or(0)).sum();
        add(&db.counters.gc_bytes_freed, sizes);
        for f in ready {
            db.vlog.evict(f);
        }
        db.delete_obsolete_files(&mut st);
    }

    /// True when no snapshot or iterator reads at a sequence number below `at.seq`, and no
    /// reader that follows value pointers registered before `at` is left.
    fn no_reader_before(&self, db: &DbInner, at: &Installed) -> bool {
        db.snapshots.oldest().is_none_or(|s| s >= at.seq) && !db.snapshots.reader_registered_before(at.readers)
    }

    /// The background GC thread: collects one file per round and starts the next round at
    /// once while there is work; otherwise sleeps `gc_interval_ms` (a flush wakes it early).
    /// A collected file is freed by a freer thread beside the next round (`freer.rs`).
    pub(super) fn gc_loop(&self, db: &DbInner) {
        self.with_freer(db, || self.gc_rounds(db));
        // The freer's last outcome: a failure there was already logged by the round after it,
        // or is retried at the next open.
        if let Some(Err(e)) = self.settle_freer() {
            tracing::warn!(error = %e, "value-log GC: freeing the last collected file failed");
        }
    }

    fn gc_rounds(&self, db: &DbInner) {
        // Even if this thread dies (a panic), writers must not wait for it.
        struct EndStall<'a>(&'a GcPacing);
        impl Drop for EndStall<'_> {
            fn drop(&mut self) {
                self.0.set_rate(0);
                self.0.set_stalled(false);
            }
        }
        let _end_stall = EndStall(&self.pacing);
        let mut busy = false;
        loop {
            {
                let mut st = db.state.lock();
                if !busy && !st.shutting_down {
                    self.cv.wait_for(&mut st, Duration::from_millis(db.opts.gc_interval_ms.max(1)));
                }
                if st.shutting_down {
                    break;
                }
                // Files a pin or a read-only handle kept: try again.
                if db.sharing.take_deferred() {
                    db.delete_obsolete_files(&mut st);
                }
                if st.bg_error.is_some() || db.opts.gc_interval_ms == 0 {
                    self.release_writers();
                    busy = false;
                    continue;
                }
            }
            busy = match self.gc_round(db, false) {
                Ok(round) => round == GcRound::Collected,
                // Shutting down mid-round is not a failure.
                Err(Error::Closed) => false,
                Err(e) => {
                    tracing::warn!(error = %e, "value-log GC failed; will retry");
                    self.release_writers();
                    false
                }
            };
        }
        self.release_writers();
    }

    /// One background round: refresh the discard statistics when due, and collect a file
    /// (`collect_one`). Returns what the round did. `asked`: a caller waits for the work GC
    /// has (`wait_for_background_work`), whoever is reading.
    pub(super) fn gc_round(&self, db: &DbInner, asked: bool) -> Result<GcRound> {
        // Near the space target, statistics must be fresh: every flush's overwrites counted.
        // The refresh (a compaction of the whole tree when it is small) runs beside this
        // round's collection, for the next round's pick: in line, it held GC up for as long as
        // collecting a file took.
        let target = db.opts.gc_space_amp_target;
        let amp = self.vlog_space_amp(db);
        let eager = target > 0.0 && above(amp, 1.0 + (target - 1.0) / 2.0);
        // Looked at once per round: the second pick below sees the same users.
        let readers_only = !asked && db.users_active(&db.state.lock()) == (false, true);
        std::thread::scope(|s| {
            let refresh = s.spawn(|| self.refresh_discard_stats(db, eager));
            let round = self.collect_one(db, amp, readers_only);
            let refreshed = refresh.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            // A round that found nothing may find something once the statistics are fresh.
            match (round, refreshed) {
                (Ok(GcRound::Idle), Ok(true)) => self.collect_one(db, self.vlog_space_amp(db), readers_only),
                (round, Ok(_)) => round,
                (Ok(_), Err(e)) => Err(e),
                (Err(e), Err(_)) => Err(e),
            }
        })
    }

    /// Collect the best file by `score` (cost-benefit under the space target, most garbage
    /// above it) if it passes the ratio the space amplification `amp` calls for. While users
    /// only read, a background round leaves the disk to them below the stall bound: writes
    /// are what make the space grow, and GC's reads and moves under a read-only phase added
    /// 1.4 KB of device reads to each 4 KB lookup (docs/BENCHMARKS.md §16). RocksDB's
    /// BlobDB collects only inside compactions, and Titan in jobs its compactions queue,
    /// which reads alone do not start. `readers_only`: users read and did not write lately
    /// (`users_active`), and no caller asked for the work.
    fn collect_one(&self, db: &DbInner, amp: f64, readers_only: bool) -> Result<GcRound> {
        let _one = self.lock.lock();
        // Deleting files already collected costs readers nothing: it is done whoever reads.
        self.phases.time(Phase::Freeing, || self.finish_pending_gc_deletes(db));
        if readers_only && !above(amp, db.opts.gc_space_amp_stall) {
            self.release_writers();
            return Ok(GcRound::Idle);
        }
        let over_target = above(amp, db.opts.gc_space_amp_target);
        let min_ratio =
            if over_target { db.opts.gc_garbage_ratio.min(EAGER_MIN_GARBAGE_RATIO) } else { db.opts.gc_garbage_ratio };
        // While readers keep collected files alive, collecting more frees nothing.
        let pick = match self.readers_pin_collected_files(db) {
            Some(_) => None,
            None => self.pick_gc_file(db, min_ratio, None, over_target),
        };
        let Some((file, start)) = pick else {
            if above(amp, db.opts.gc_space_amp_stall) && self.roll_for_gc(db)? {
                // Writers stay stalled (at most the stall's bound): the flush makes the
                // rolled file collectable and wakes the next round.
                return Ok(GcRound::Rolled);
            }
            self.release_writers();
            self.buffers.lock().release();
            return Ok(GcRound::Idle);
        };
        tracing::debug!(file, start, amp, over_target, cold = db.vlog.is_cold(file), "value-log GC picked a file");
        // Fresh: the pending deletes just finished may have freed space.
        self.pace(db, self.vlog_space_amp(db));
        let stopped = self.gc_file(db, file, start, true, &mut GcReport::default())?;
        if stopped.is_some() {
            // An old reader pins what GC copies: writers must not wait for space GC cannot free.
            self.release_writers();
            return Ok(GcRound::Pinned);
        }
        self.pace(db, self.vlog_space_amp(db));
        Ok(GcRound::Collected)
    }

    /// With nothing to collect but the space past the stall: when the log file being written
    /// holds a good share of a file's worth, switch the memtable and roll the log, so the
    /// next flush leaves that file wholly behind the log head. Returns whether it did.
    fn roll_for_gc(&self, db: &DbInner) -> Result<bool> {
        let head = db.writes.log.lock().groups_end();
        if head.offset < db.opts.log_file_bytes / 4 {
            return Ok(false);
        }
        self.roll_requested.store(true, Ordering::Release);
        db.writes.force_switch(db)?;
        Ok(true)
    }

    /// Lift the stall and the pacing (GC has nothing it can free now).
    pub(super) fn release_writers(&self) {
        self.pacing.set_rate(0);
        self.pacing.set_stalled(false);
    }
}
