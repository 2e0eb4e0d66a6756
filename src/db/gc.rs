//! Value-log garbage collection (WiscKey §3.3.2): pick the vLog file with the most garbage
//! (discard statistics kept by compaction), re-put its live values at the head in chunks,
//! record progress in the manifest, then give the space back — punch a hole over each chunk
//! and delete the file once it is fully collected.
//!
//! Safety argument (docs/design.md has the crash table): a value is re-put only if the key's
//! newest entry still points at the old copy, checked by the write leader so a concurrent
//! user write wins; the re-put is synced before the manifest moves the GC tail, and space is
//! freed only after that and only when no snapshot or iterator older than the re-put exists.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::cold::Relocation;
use super::read::{CheckedAt, LatestView};
use super::{add, DbInner};
use crate::error::{Error, Result};
use crate::key::ValueKind;
use crate::log::LogPos;
use crate::log::{LogReader, LogRecord, ReadOutcome, HEADER_LEN};
use crate::version::VersionEdit;
use crate::vlog::ValuePointer;
use crate::write_batch::{BatchIter, BatchOp, WriteBatch};

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

/// Whether a space amplification is above `limit` (`0` = no limit).
fn above(amp: f64, limit: f64) -> bool {
    limit > 0.0 && amp > limit
}

/// What one `Db::run_gc` call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// vLog files fully collected (deleted or waiting for old snapshots to go).
    pub files_collected: u64,
    /// Bytes of vLog read.
    pub bytes_read: u64,
    /// Bytes of live values re-put at the head.
    pub bytes_rewritten: u64,
    /// Set when collection stopped because a snapshot or iterator older than GC's re-puts
    /// (reading at this sequence number) pins what was collected: collecting more would only
    /// copy live values again without freeing anything. GC resumes once it is released.
    pub stopped_by_reader_at: Option<u64>,
}

/// How long GC waits for readers older than its re-puts before it stops: short scans and
/// snapshot reads finish within it, a held snapshot does not. (It is the longest a `run_gc`
/// call or a round blocks on a reader.)
const READER_WAIT: Duration = Duration::from_millis(20);

/// How collecting one chunk ended.
enum ChunkDone {
    /// Go on with the next chunk.
    More,
    /// The file is collected (or GC is shutting down).
    FileDone,
    /// A reader at this sequence number pins the re-put chunk: stop collecting for now.
    Pinned(u64),
}

/// Bytes of live values one GC write moves at most: its pointer batch leads the write queue
/// alone, and user writers wait behind it.
const GC_WRITE_BYTES: usize = 4 << 20;

/// Chunks moved but not yet freed at most, before GC syncs the log itself (each is
/// `gc_chunk_bytes` of the file it collects, still on disk).
const MOVED_CHUNKS_UNSYNCED: usize = 3;

/// A chunk whose live values were moved: freeing it waits until the log is durable to
/// `log_at`.
#[derive(Clone, Copy)]
struct MovedChunk {
    start: u64,
    end: u64,
    end_of_file: bool,
    log_at: LogPos,
}

/// One chunk's work: live values to move and where the chunk ends.
struct Chunk {
    /// Moves of at most `GC_WRITE_BYTES` each.
    pieces: Vec<Relocation>,
    end: u64,
    end_of_file: bool,
    /// A cold file's group at `end` is not whole: a torn tail from a crash (GC syncs a cold
    /// file before any pointer names its bytes) unless a pointer names bytes past it.
    torn: bool,
    bytes_read: u64,
    /// The view the liveness answers came from: the write leader re-checks only what was
    /// written after it.
    checked: Option<CheckedAt>,
}

/// A put found in a chunk: its record, where its key and value sit in the record's ops, and
/// the pointer a live entry would hold.
struct ChunkPut {
    rec: usize,
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    here: ValuePointer,
}

/// `live` cut into pieces whose ops add up to `GC_WRITE_BYTES` (each piece's last op takes it
/// past that).
fn pieces_of<'a, 'b>(live: &'a [&'b ChunkPut]) -> impl Iterator<Item = &'a [&'b ChunkPut]> {
    let mut rest = live;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0usize;
        let n = rest
            .iter()
            .position(|p| {
                let full = bytes >= GC_WRITE_BYTES;
                bytes += p.here.op_len as usize;
                full
            })
            .unwrap_or(rest.len());
        let (piece, tail) = rest.split_at(n);
        rest = tail;
        Some(piece)
    })
}

/// The puts of one record group, as `ChunkPut`s of record number `rec`.
fn collect_puts(rec: &LogRecord, index: usize, out: &mut Vec<ChunkPut>) {
    let base = rec.ops.as_ptr() as usize;
    let mut ops = BatchIter::over(&rec.ops);
    loop {
        let op_start = ops.offset();
        let Some(Ok(op)) = ops.next() else { break };
        let BatchOp::Put { key, value } = op else { continue };
        let range = |s: &[u8]| (s.as_ptr() as usize - base)..(s.as_ptr() as usize - base + s.len());
        out.push(ChunkPut {
            rec: index,
            key: range(key),
            value: range(value),
            here: ValuePointer {
                file: rec.pos.file,
                offset: rec.pos.offset + (HEADER_LEN + op_start) as u64,
                op_len: (ops.offset() - op_start) as u32,
                value_crc: 0,
            },
        });
    }
}

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

impl DbInner {
    /// Collect every vLog file whose garbage ratio is at least `min_garbage_ratio`.
    pub(crate) fn run_gc(&self, min_garbage_ratio: f64) -> Result<GcReport> {
        // One collector at a time: two would punch holes under each other's reads.
        let _one = self.gc_lock.lock();
        let mut report = GcReport::default();
        self.finish_pending_gc_deletes();
        // Only the files wholly before the head now: GC's re-puts go to the head, so a call
        // never collects its own output, and its work is bounded by what exists when it starts.
        let mut candidates = self.gc_candidates();
        while let Some((file, start)) = self.pick_gc_file(min_garbage_ratio, Some(&candidates), true) {
            if self.is_shutting_down() {
                break;
            }
            candidates.remove(&file);
            if let Some(seq) = self.readers_pin_collected_files() {
                report.stopped_by_reader_at = Some(seq);
                break;
            }
            if let Some(seq) = self.gc_file(file, start, &mut report)? {
                report.stopped_by_reader_at = Some(seq);
                break;
            }
        }
        if let Some(seq) = report.stopped_by_reader_at {
            tracing::info!(reader_seq = seq, "value-log GC stopped: a snapshot or iterator older than its re-puts pins the collected data; it resumes once that reader is gone");
        }
        // Background GC re-arms the stall if the value log is still past its limit.
        self.release_writers();
        Ok(report)
    }

    /// Key-order reorganization (beyond the paper, which suggests it for scans after random
    /// loads): re-put every separated value in key order, so a
    /// scan then reads the value log sequentially; the old copies become garbage and are
    /// collected right after. Same safety as GC: each re-put is conditional on the key still
    /// pointing at the old copy.
    pub(crate) fn reorganize(self: &std::sync::Arc<Self>) -> Result<GcReport> {
        let mut report = GcReport::default();
        {
            let _one = self.gc_lock.lock();
            let mut it = self.iter(&crate::options::ReadOptions::default())?;
            it.seek_to_first()?;
            let mut r = Relocation { puts: WriteBatch::new(), old: Vec::new() };
            while it.valid() {
                if let Some(ptr) = it.current_pointer() {
                    r.puts.put(it.key(), it.value());
                    r.old.push(ptr);
                    report.bytes_read += u64::from(ptr.op_len);
                }
                if r.puts.approximate_size() as u64 >= self.opts.gc_chunk_bytes {
                    let full = std::mem::replace(&mut r, Relocation { puts: WriteBatch::new(), old: Vec::new() });
                    report.bytes_rewritten += self.relocate(vec![full], None, true)?;
                }
                it.next()?;
            }
            report.bytes_rewritten += self.relocate(vec![r], None, true)?;
        }
        add(&self.counters.gc_bytes_rewritten, report.bytes_rewritten);
        // The old copies' pointers are now shadowed: compaction turns them into discard
        // statistics, and GC then drops the emptied files.
        self.compact_range(None, None)?;
        let collected = self.run_gc(0.9)?;
        report.files_collected = collected.files_collected;
        Ok(report)
    }

    fn is_shutting_down(&self) -> bool {
        self.state.lock().shutting_down
    }

    /// The value files GC may collect now: log files wholly before the head, and cold files
    /// GC is not filling and no log record past the head points into.
    fn gc_candidates(&self) -> std::collections::BTreeSet<u64> {
        let head = self.state.lock().versions.log_head().file;
        let in_use = self.cold_files_in_use(head);
        let st = self.state.lock();
        st.versions.vlog_files().keys().copied().filter(|&f| self.collectable(f, head, &in_use)).collect()
    }

    /// Whether GC may collect value file `f` now (see `gc_candidates`).
    fn collectable(&self, f: u64, head: u64, cold_in_use: &std::collections::HashSet<u64>) -> bool {
        if self.vlog.is_cold(f) {
            !cold_in_use.contains(&f)
        } else {
            f < head
        }
    }

    /// The share of file `f` that is garbage. A cold file's is measured against its size: its
    /// moves that a user write overtook were never referenced, so the statistics never see them.
    fn garbage_ratio_of(&self, f: u64, s: &crate::version::set::VlogFileStats) -> f64 {
        if !self.vlog.is_cold(f) {
            return s.garbage_ratio();
        }
        let size = self.vfs.file_size(&self.vlog.path(f)).unwrap_or(0);
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
        min_ratio: f64,
        only: Option<&std::collections::BTreeSet<u64>>,
        greedy: bool,
    ) -> Option<(u64, u64)> {
        let damaged = self.gc_damaged.lock().clone();
        let head = self.state.lock().versions.log_head().file;
        let in_use = self.cold_files_in_use(head);
        let allowed = |f: &u64| only.is_none_or(|o| o.contains(f)) && !damaged.contains(f);
        let st = self.state.lock();
        let tail = st.versions.vlog_tail();
        let vlog_files = st.versions.vlog_files();
        if tail.offset > 0 && vlog_files.contains_key(&tail.file) && allowed(&tail.file) {
            return Some((tail.file, tail.offset));
        }
        let newest = st.versions.next_file_number();
        vlog_files
            .iter()
            .filter(|(f, _)| self.collectable(**f, head, &in_use) && allowed(f))
            .map(|(f, s)| (*f, self.garbage_ratio_of(*f, s)))
            .filter(|&(_, ratio)| ratio > 0.0 || only.is_some())
            .filter(|&(_, ratio)| ratio >= min_ratio)
            .map(|(f, ratio)| (f, score(ratio, newest.saturating_sub(f), greedy)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(f, _)| (f, 0))
    }

    /// The sequence number of a reader that keeps files GC already collected alive: while
    /// one does, collecting more only copies live values again without freeing anything.
    fn readers_pin_collected_files(&self) -> Option<u64> {
        if self.gc_pending.lock().is_empty() {
            return None;
        }
        self.snapshots.oldest()
    }

    /// Wait (at most `READER_WAIT`) until no reader older than `seq` is left; false if one is.
    fn wait_for_readers(&self, seq: u64) -> bool {
        if self.no_reader_older_than(seq) {
            return true;
        }
        // Writers must not wait for GC while GC waits for a reader: nothing frees meanwhile.
        self.release_writers();
        let start = std::time::Instant::now();
        while !self.no_reader_older_than(seq) {
            if start.elapsed() >= READER_WAIT || self.is_shutting_down() {
                return false;
            }
            // Short scans end within a millisecond or so: poll often, hold `gc_lock` briefly.
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Collect `file` from `start`. A helper thread reads and checks the next chunk while
    /// this one is re-put and freed, so each half keeps a core busy (at most three chunks are
    /// in memory). A liveness answer that went stale meanwhile is safe: the write leader
    /// re-checks every key before it re-puts.
    /// Returns the sequence number of a reader that made it stop early, if one did.
    fn gc_file(&self, file: u64, start: u64, report: &mut GcReport) -> Result<Option<u64>> {
        let r = self.gc_file_chunks(file, start, report);
        if let Err(e) = &r {
            if e.is_corruption() {
                tracing::warn!(file, error = %e, "value-log GC found damage; leaving this file alone from now on");
                self.gc_damaged.lock().insert(file);
            }
        }
        r
    }

    fn gc_file_chunks(&self, file: u64, start: u64, report: &mut GcReport) -> Result<Option<u64>> {
        let path = self.vlog.path(file);
        let mut reader = LogReader::new(self.vfs.open_read(&path)?, file, start)?;
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Chunk>>(1);
            s.spawn(move || loop {
                let chunk = self.read_chunk(&mut reader);
                let last = !matches!(&chunk, Ok(c) if !c.end_of_file);
                // A closed channel means the collector stopped (error or shutdown).
                if tx.send(chunk).is_err() || last {
                    return;
                }
            });
            let mut chunk_start = start;
            let mut moved = std::collections::VecDeque::new();
            for chunk in rx {
                let chunk = chunk?;
                let end = chunk.end;
                moved.push_back(self.move_chunk(file, chunk_start, chunk, report)?);
                match self.free_moved_chunks(file, &mut moved, report)? {
                    ChunkDone::More => chunk_start = end,
                    ChunkDone::FileDone => return Ok(None),
                    ChunkDone::Pinned(seq) => return Ok(Some(seq)),
                }
            }
            Ok(None)
        })
    }

    /// Re-put a chunk's live values (cold file synced, pointer puts logged but not synced) and
    /// say what freeing the chunk waits for.
    fn move_chunk(&self, file: u64, chunk_start: u64, chunk: Chunk, report: &mut GcReport) -> Result<MovedChunk> {
        report.bytes_read += chunk.bytes_read;
        add(&self.counters.gc_bytes_read, chunk.bytes_read);
        if chunk.torn && self.points_past(file, chunk.end)? {
            let path = self.vlog.path(file);
            return Err(Error::corruption(
                path,
                chunk.end,
                "value-log GC: damaged record group in a cold value file holding live values",
            ));
        }
        let bytes = self.relocate(chunk.pieces, chunk.checked, false)?;
        tracing::debug!(file, chunk_start, bytes_read = chunk.bytes_read, bytes_moved = bytes, "value-log GC chunk");
        report.bytes_rewritten += bytes;
        add(&self.counters.gc_bytes_rewritten, bytes);
        // Every write the liveness view saw and every pointer put is before the log's end now.
        let log_at = self.log.lock().groups_end();
        Ok(MovedChunk { start: chunk_start, end: chunk.end, end_of_file: chunk.end_of_file, log_at })
    }

    /// Free the moved chunks, oldest first, whose writes are durable: values were judged dead
    /// against a view that includes unsynced writes, a crash can lose those (as a suffix), and
    /// the old values they shadow must then still be there; the pointer puts must survive too.
    /// The log becomes durable by itself at every memtable flush and synced write, so GC waits
    /// for that instead of forcing each chunk's unsynced user writes to disk (measured: a log
    /// sync per chunk made 4 KiB overwrites under GC 1.5× slower). It syncs the log itself at
    /// the end of a file, when writers wait for space, or past `MOVED_CHUNKS_UNSYNCED` chunks.
    /// A reader older than the re-puts pins the old copies: GC waits a little for it, then
    /// stops (the chunk stays, the tail is recorded, the next round resumes after it), so disk
    /// use grows by at most a few chunks while old readers last.
    fn free_moved_chunks(
        &self,
        file: u64,
        moved: &mut std::collections::VecDeque<MovedChunk>,
        report: &mut GcReport,
    ) -> Result<ChunkDone> {
        let last = moved.back().map(|m| (m.end_of_file, m.log_at));
        let Some((end_of_file, newest)) = last else { return Ok(ChunkDone::More) };
        let force = end_of_file
            || moved.len() > MOVED_CHUNKS_UNSYNCED
            || self.gc_pacing.is_stalled()
            || self.is_shutting_down();
        if force && *self.log_durable.lock() < newest {
            self.sync_log_for_gc()?;
        }
        while let Some(m) = moved.front().copied() {
            if *self.log_durable.lock() < m.log_at {
                break;
            }
            moved.pop_front();
            if let done @ (ChunkDone::FileDone | ChunkDone::Pinned(_)) = self.free_chunk(file, m, report)? {
                return Ok(done);
            }
        }
        if self.is_shutting_down() {
            return Ok(ChunkDone::FileDone);
        }
        // Leave the disk and the CPU to foreground work between chunks, unless the value
        // log is past its space target (writers may be waiting for this very chunk).
        let amp = self.vlog_space_amp();
        self.pace(amp);
        if !self.gc_pacing.is_stalled() && !above(amp, self.opts.gc_space_amp_target) {
            std::thread::sleep(Duration::from_millis(self.opts.gc_pause_ms));
        }
        Ok(ChunkDone::More)
    }

    /// Record a moved chunk as collected and give its space back (the file at its end).
    fn free_chunk(&self, file: u64, m: MovedChunk, report: &mut GcReport) -> Result<ChunkDone> {
        let install_seq = self.visible_seq.load(Ordering::Acquire);
        let free = self.wait_for_readers(install_seq);
        self.record_gc_progress(file, m.end, m.end_of_file, install_seq, free)?;
        let pinned = || ChunkDone::Pinned(self.snapshots.oldest().unwrap_or(0));
        if m.end_of_file {
            tracing::info!(file, bytes_read = report.bytes_read, "value-log file collected");
            report.files_collected += 1;
            add(&self.counters.gc_runs, 1);
            return Ok(if free { ChunkDone::FileDone } else { pinned() });
        }
        if !free {
            return Ok(pinned());
        }
        self.punch(file, m.start, m.end);
        Ok(ChunkDone::More)
    }
    /// Read groups until `gc_chunk_bytes`, keeping the puts whose key still points here.
    /// Liveness is decided for the whole chunk against one pinned view, in key order (one
    /// trip through the state lock, and neighbouring keys share table blocks); the live
    /// values are re-put in that order too, so collected data comes out sorted by key.
    fn read_chunk(&self, reader: &mut LogReader) -> Result<Chunk> {
        let start = reader.offset();
        let mut recs: Vec<Vec<u8>> = Vec::new();
        let mut puts: Vec<ChunkPut> = Vec::new();
        let (mut end_of_file, mut torn) = (false, false);
        while reader.offset() - start < self.opts.gc_chunk_bytes {
            let rec = match reader.next_record()? {
                Ok(rec) => rec,
                Err(ReadOutcome::Clean) => {
                    end_of_file = true;
                    break;
                }
                Err(ReadOutcome::Damaged { .. }) if self.vlog.is_cold(reader.number()) => {
                    (end_of_file, torn) = (true, true);
                    break;
                }
                Err(ReadOutcome::Damaged { offset, reason }) => {
                    return Err(Error::corruption(reader.path().clone(), offset, format!("value-log GC: {reason}")));
                }
            };
            collect_puts(&rec, recs.len(), &mut puts);
            recs.push(rec.ops);
        }
        let end = reader.offset();
        let key_of = |p: &ChunkPut| &recs[p.rec][p.key.clone()];
        puts.sort_by(|a, b| key_of(a).cmp(key_of(b)));
        let (view, checked) = self.liveness_view();
        let mut live = Vec::with_capacity(puts.len());
        for p in &puts {
            if self.points_at(&view, key_of(p), &p.here)? {
                live.push(p);
            }
        }
        let mut c =
            Chunk { pieces: Vec::new(), end, end_of_file, torn, bytes_read: end - start, checked: Some(checked) };
        // Each piece's batch is sized once: a growing one copied its values again at every
        // doubling and faulted in fresh pages for them (measured: a third of this thread's
        // time went to moving 4 KiB values that way).
        for piece in pieces_of(&live) {
            let bytes = piece.iter().map(|p| p.here.op_len as usize).sum();
            let mut r = Relocation { puts: WriteBatch::with_capacity(bytes), old: Vec::with_capacity(piece.len()) };
            for p in piece {
                r.puts.put(key_of(p), &recs[p.rec][p.value.clone()]);
                r.old.push(p.here);
            }
            c.pieces.push(r);
        }
        Ok(c)
    }

    /// Whether the newest entry of `key` in `view` is a pointer to `at`.
    fn points_at(&self, view: &LatestView, key: &[u8], at: &ValuePointer) -> Result<bool> {
        Ok(match self.latest_entry_in(view, key)? {
            Some((ValueKind::Pointer, cur)) => {
                ValuePointer::decode(&cur).is_some_and(|p| p.file == at.file && p.offset == at.offset)
            }
            _ => false,
        })
    }

    /// Persist the GC tail; at the end of a file also drop it from the manifest — unless an
    /// older reader still needs it, in which case that waits in `gc_pending`.
    fn record_gc_progress(&self, file: u64, end: u64, end_of_file: bool, install_seq: u64, free: bool) -> Result<()> {
        let mut edit = VersionEdit { vlog_tail: Some(LogPos { file, offset: end }), ..Default::default() };
        // A collected file leaves the manifest at once, so GC never picks it again (its
        // punched chunks would read back as zeros). While an older reader may still need it,
        // only the in-memory `gc_pending` set keeps the sweep from deleting it; after a
        // restart there are no such readers and the sweep removes it.
        let free_now = end_of_file && free;
        if end_of_file {
            edit.vlog_files_deleted.push(file);
            if !free_now {
                self.gc_pending.lock().push((file, install_seq));
            }
        }
        let mut st = self.state.lock();
        // What is still allocated: punched chunks were counted when they were punched.
        let size = self.vfs.disk_usage(&self.vlog.path(file)).unwrap_or(0);
        st.versions.log_and_apply(edit)?;
        if free_now {
            add(&self.counters.gc_bytes_freed, size);
            self.vlog.evict(file);
            self.delete_obsolete_files(&mut st);
        }
        Ok(())
    }

    /// Let the sweep delete collected files whose old readers have gone.
    pub(crate) fn finish_pending_gc_deletes(&self) {
        let ready: Vec<u64> = {
            let mut pending = self.gc_pending.lock();
            let (ready, wait): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(_, s)| self.no_reader_older_than(*s));
            *pending = wait;
            ready.into_iter().map(|(f, _)| f).collect()
        };
        if ready.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        let sizes: u64 = ready.iter().map(|f| self.vfs.disk_usage(&self.vlog.path(*f)).unwrap_or(0)).sum();
        add(&self.counters.gc_bytes_freed, sizes);
        for f in ready {
            self.vlog.evict(f);
        }
        self.delete_obsolete_files(&mut st);
    }

    /// Discard statistics only learn about overwritten values when compaction merges the old
    /// and new versions, and a key-value separated LSM-tree is tiny, so its upper levels rarely
    /// fill up enough to be merged. When the tree is small next to the value log, compacting
    /// all of it is cheap (a few MB against GBs of vLog) and makes the statistics exact.
    /// Near the space target it refreshes after every flush instead of every fourth. Returns
    /// whether the space estimate's inputs changed (it compacted, or moved the refresh mark).
    fn refresh_discard_stats(&self, eager: bool) -> Result<bool> {
        let (tree_bytes, flushes) = {
            let st = self.state.lock();
            let v = st.versions.current();
            ((0..v.num_levels()).map(|l| v.level_bytes(l)).sum::<u64>(), self.counters.flushes.load(Ordering::Relaxed))
        };
        let values: u64 = self.state.lock().versions.vlog_files().values().map(|b| b.total_bytes).sum();
        let mut last = self.gc_stats_refreshed_at.lock();
        let every = if eager { 1 } else { 4 };
        if tree_bytes.saturating_mul(20) > values {
            // No whole-tree refresh at this size: the estimate relies on compaction's own
            // counts and corrects only the memtables.
            self.gc_pacing.mark_refreshed(self.counters.vlog_user_bytes_flushed.load(Ordering::Relaxed));
            return Ok(true);
        }
        if flushes < *last + every {
            return Ok(false);
        }
        *last = flushes;
        drop(last);
        let flushed = self.counters.vlog_user_bytes_flushed.load(Ordering::Relaxed);
        // The memtables stay: their overwrites are counted once they are flushed.
        self.compact_tables(None, None)?;
        self.gc_pacing.mark_refreshed(flushed);
        Ok(true)
    }

    /// True when no snapshot or iterator reads at a sequence number below `seq`.
    fn no_reader_older_than(&self, seq: u64) -> bool {
        self.snapshots.oldest().is_none_or(|s| s >= seq)
    }

    /// Free `[start, end)` of a collected vLog file; without hole punching the space comes
    /// back when the whole file is deleted.
    fn punch(&self, file: u64, start: u64, end: u64) {
        // Cached copies of the values there are of no use to anyone now (every reader that
        // could follow a pointer here is gone), only taking space.
        self.vlog.forget_range(file, start, end);
        let path = self.vlog.path(file);
        match self.vfs.punch_hole(&path, start, end - start) {
            Ok(true) => add(&self.counters.gc_bytes_freed, end - start),
            Ok(false) => {
                tracing::info!(file = ?path, "filesystem cannot punch holes; space returns when the file is deleted")
            }
            Err(e) => tracing::warn!(file = ?path, error = %e, "punching a hole into a collected vLog range failed"),
        }
    }

    /// The background GC thread: collects one file per round and starts the next round at
    /// once while there is work; otherwise sleeps `gc_interval_ms` (a flush wakes it early).
    pub(super) fn gc_loop(&self) {
        // Even if this thread dies (a panic), writers must not wait for it.
        struct EndStall<'a>(&'a super::gc_pacing::GcPacing);
        impl Drop for EndStall<'_> {
            fn drop(&mut self) {
                self.0.set_slowdown(0.0);
                self.0.set_stalled(false);
            }
        }
        let _end_stall = EndStall(&self.gc_pacing);
        let mut busy = false;
        loop {
            {
                let mut st = self.state.lock();
                if !busy && !st.shutting_down {
                    self.gc_cv.wait_for(&mut st, Duration::from_millis(self.opts.gc_interval_ms.max(1)));
                }
                if st.shutting_down {
                    break;
                }
                if st.bg_error.is_some() || self.opts.gc_interval_ms == 0 {
                    self.release_writers();
                    busy = false;
                    continue;
                }
            }
            busy = match self.gc_round() {
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

    /// One background round: refresh the discard statistics when due, then collect the file
    /// with the most garbage if it passes the ratio the current space amplification calls
    /// for. Returns what the round did.
    pub(super) fn gc_round(&self) -> Result<GcRound> {
        // A stall stays on through the refresh: it is part of GC's work (the tree is under
        // 1/20 of the value bytes, so it is short) and ends with a pick below, or is lifted.
        // Near the space target, statistics must be fresh: every flush's overwrites counted.
        let target = self.opts.gc_space_amp_target;
        let mut amp = self.vlog_space_amp();
        if self.refresh_discard_stats(target > 0.0 && above(amp, 1.0 + (target - 1.0) / 2.0))? {
            amp = self.vlog_space_amp();
        }
        let over_target = above(amp, target);
        let min_ratio = if over_target {
            self.opts.gc_garbage_ratio.min(EAGER_MIN_GARBAGE_RATIO)
        } else {
            self.opts.gc_garbage_ratio
        };
        let _one = self.gc_lock.lock();
        self.finish_pending_gc_deletes();
        // While readers keep collected files alive, collecting more frees nothing.
        let pick = match self.readers_pin_collected_files() {
            Some(_) => None,
            None => self.pick_gc_file(min_ratio, None, over_target),
        };
        let Some((file, start)) = pick else {
            if above(amp, self.opts.gc_space_amp_stall) && self.roll_for_gc()? {
                // Writers stay stalled (at most the stall's bound): the flush makes the
                // rolled file collectable and wakes the next round.
                return Ok(GcRound::Rolled);
            }
            self.release_writers();
            return Ok(GcRound::Idle);
        };
        tracing::debug!(file, start, amp, over_target, cold = self.vlog.is_cold(file), "value-log GC picked a file");
        // Fresh: the pending deletes just finished may have freed space.
        self.pace(self.vlog_space_amp());
        let stopped = self.gc_file(file, start, &mut GcReport::default())?;
        if stopped.is_some() {
            // An old reader pins what GC copies: writers must not wait for space GC cannot free.
            self.release_writers();
            return Ok(GcRound::Pinned);
        }
        self.pace(self.vlog_space_amp());
        Ok(GcRound::Collected)
    }

    /// With nothing to collect but the space past the stall: when the log file being written
    /// holds a good share of a file's worth, switch the memtable and roll the log, so the
    /// next flush leaves that file wholly behind the log head. Returns whether it did.
    fn roll_for_gc(&self) -> Result<bool> {
        let head = self.log.lock().groups_end();
        if head.offset < self.opts.log_file_bytes / 4 {
            return Ok(false);
        }
        self.gc_roll_requested.store(true, Ordering::Release);
        self.force_switch()?;
        Ok(true)
    }

    /// Stall writers while the value log's space amplification `amp` is past
    /// `gc_space_amp_stall`. Called only while GC has a file to collect, so a stall always
    /// ends with GC freeing space. While a reader keeps collected files alive, collecting
    /// more frees nothing: no stall.
    fn pace(&self, amp: f64) {
        let readers_block_freeing = !self.gc_pending.lock().is_empty();
        let active = self.opts.gc_interval_ms > 0 && !readers_block_freeing;
        let (target, stall) = (self.opts.gc_space_amp_target, self.opts.gc_space_amp_stall);
        // The slowdown band: the last quarter before the stall.
        let slow_from = stall - (stall - target).max(0.0) / 4.0;
        let slowdown =
            if active && target > 0.0 && stall > slow_from { (amp - slow_from) / (stall - slow_from) } else { 0.0 };
        self.gc_pacing.set_slowdown(slowdown);
        self.gc_pacing.set_stalled(active && above(amp, stall));
        self.gc_pacing.notify_progress();
    }

    /// Lift the stall and the slowdown (GC has nothing it can free now).
    pub(super) fn release_writers(&self) {
        self.gc_pacing.set_slowdown(0.0);
        self.gc_pacing.set_stalled(false);
    }

    /// Bytes the value-log files take on disk over the estimated live separated bytes: flushed
    /// ones minus discard statistics, plus those only the memtables reference yet, minus the
    /// share (the recent overwrite ratio) of the bytes whose overwrites compaction has not
    /// counted yet: the memtables' and those flushed since GC last compacted the tree.
    pub(crate) fn vlog_space_amp(&self) -> f64 {
        let c = &self.counters;
        // Users' writes only: GC's moves overwrite no live value (the copies they shadow go
        // with the collected file), and counting them diluted the ratio by however much GC
        // happened to be moving (measured: 0.34-0.50 under pure overwrites, for a true 1.0).
        let user_flushed = c.vlog_user_bytes_flushed.load(Ordering::Relaxed);
        let overwrites = self.gc_pacing.overwrite_ratio(user_flushed, c.vlog_garbage_counted.load(Ordering::Relaxed));
        let (live, files, unflushed) = {
            let st = self.state.lock();
            let flushed: u64 = st.versions.vlog_files().values().map(|b| b.live_bytes()).sum();
            let mems = || std::iter::once(&st.mem).chain(st.imms.iter());
            let unflushed: u64 = mems().map(|m| m.vlog_bytes().values().sum::<u64>()).sum();
            let unflushed_user: u64 = unflushed.saturating_sub(mems().map(|m| m.moved_vlog_bytes()).sum());
            // What users wrote in the memtables and in the tables flushed since the last full
            // compaction overwrites values still counted live.
            let uncounted = unflushed_user + self.gc_pacing.flushed_since_refresh(user_flushed);
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
                let path = self.vlog.path(f);
                let size = self.vfs.file_size(&path).unwrap_or(0);
                let used = self.vfs.disk_usage(&path).unwrap_or(0).min(size);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_of(op_len: u32) -> ChunkPut {
        ChunkPut { rec: 0, key: 0..0, value: 0..0, here: ValuePointer { file: 1, offset: 0, op_len, value_crc: 0 } }
    }

    #[test]
    fn pieces_cover_every_live_put_in_order_and_close_once_past_the_write_bound() {
        let sizes = [3 << 20, 2 << 20, 100, 5 << 20, 1 << 20, 4 << 20, 7];
        let puts: Vec<ChunkPut> = sizes.iter().map(|&n| put_of(n)).collect();
        let live: Vec<&ChunkPut> = puts.iter().collect();
        let pieces: Vec<&[&ChunkPut]> = pieces_of(&live).collect();
        let flat: Vec<u32> = pieces.iter().flat_map(|p| p.iter().map(|c| c.here.op_len)).collect();
        assert_eq!(flat, sizes, "every put once, in order");
        for (i, piece) in pieces.iter().enumerate() {
            let bytes: usize = piece.iter().map(|p| p.here.op_len as usize).sum();
            let before_last = bytes - piece.last().map_or(0, |p| p.here.op_len as usize);
            assert!(before_last < GC_WRITE_BYTES, "piece {i} went on past the bound");
            if i + 1 < pieces.len() {
                assert!(bytes >= GC_WRITE_BYTES, "piece {i} closed early at {bytes} bytes");
            }
        }
        assert_eq!(pieces_of(&[]).count(), 0);
    }
}
