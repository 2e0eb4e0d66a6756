//! Collecting one value-log file, chunk by chunk: read a chunk and decide which of its puts
//! are live (one pinned view, in key order), move the live values to a cold file and log their
//! new pointers through the write leader, then — once the log is durable past those writes and
//! no older reader can follow a pointer there — record the progress in the manifest and punch
//! the chunk out (the file is deleted at its end).

use std::ops::Range;
use std::time::Duration;

use super::cold::Relocation;
use super::{above, Gc, GcReport, Phase};
use crate::db::read::{CheckedAt, LatestView};
use crate::db::{add, DbInner};
use crate::error::{Error, Result};
use crate::fs::{Advice, RandomAccessFile};
use crate::key::ValueKind;
use crate::log::{GroupSpan, LogPos, LogReader, ReadOutcome, HEADER_LEN};
use crate::version::VersionEdit;
use crate::vlog::ValuePointer;
use crate::write_batch::{BatchIter, BatchOp, WriteBatch};

/// What of a value file the page cache held when GC began to read it, so that GC can drop
/// from the cache the pages its own reads brought in (read-ahead included) and leave the rest.
/// Those are of no use to anyone: a chunk's live values are about to move and the rest is
/// dead, and left cached they push out the table blocks the liveness lookups need (with data
/// eight times the memory, GC's reads were what evicted them). Pages that were cached before
/// stay: an iterator or snapshot older than the moves still reads the live values there, and
/// with the data in memory, dropping them turned a scan running beside GC into major faults
/// (the first `readseq` after a 200k × 4 KB load took 2.6–4.6 µs per entry instead of 1.5).
struct CachedBefore {
    /// The file's length when probed: bytes past it were not looked at.
    end: u64,
    /// The parts not cached then; `None`: the file could not tell, all taken as brought in.
    uncached: Option<Vec<Range<u64>>>,
}

impl CachedBefore {
    fn probe(file: &dyn RandomAccessFile, from: u64) -> CachedBefore {
        let end = file.len().unwrap_or(0);
        CachedBefore { end, uncached: file.uncached_ranges(from, end.saturating_sub(from)) }
    }

    /// After GC read `read` (a chunk): drop the pages of it that were not cached before.
    /// `DONTNEED` drops whole pages only, so the page a chunk boundary cuts is dropped with
    /// the chunk that reads the rest of it (from the page's start).
    fn drop_brought_in(&self, file: &dyn RandomAccessFile, read: Range<u64>) {
        let page = crate::fs::page_bytes();
        let from = read.start / page * page;
        let drop = |r: &Range<u64>| {
            let (start, end) = (r.start.max(from), r.end.min(read.end));
            if start < end {
                let _ = file.advise(start, end - start, Advice::DontNeed);
            }
        };
        match &self.uncached {
            None => drop(&read),
            Some(ranges) => ranges.iter().chain([&(self.end..u64::MAX)]).for_each(drop),
        }
    }
}

/// The chunk reader's buffers between uses (`Gc::buffers`).
#[derive(Default)]
pub(crate) struct Buffers {
    /// The chunk buffer (`LogReader::read_groups_into`'s).
    chunk: Vec<u8>,
    /// Relocation batches whose values were appended to a cold file.
    batches: Vec<WriteBatch>,
}

/// Relocation batches kept for reuse: a chunk's live values fill a few (`GC_WRITE_BYTES`
/// each), and up to two chunks are in flight.
const SPARE_BATCHES: usize = 4;

impl Buffers {
    /// Keep `batch` (its values appended) for the next chunk, unless it grew past a GC
    /// write's size (one huge value, or `reorganize`'s batches): kept, it would pin that much.
    pub(super) fn give_back(&mut self, batch: WriteBatch) {
        if self.batches.len() < SPARE_BATCHES && batch.rep.capacity() <= 2 * GC_WRITE_BYTES {
            self.batches.push(batch);
        }
    }

    /// Keep the chunk buffer for the next file, unless a record group running past the chunk
    /// grew it well beyond `chunk_bytes`.
    fn keep_chunk(&mut self, buf: Vec<u8>, chunk_bytes: u64) {
        if buf.capacity() as u64 <= chunk_bytes.saturating_mul(2) {
            self.chunk = buf;
        }
    }

    /// Give the memory back: GC found nothing to collect (it keeps the buffers only while
    /// it goes from one file to the next).
    pub(super) fn release(&mut self) {
        *self = Buffers::default();
    }
}

/// How collecting one chunk ended.
pub(super) enum ChunkDone {
    /// Go on with the next chunk.
    More,
    /// The file is collected (or GC is shutting down).
    FileDone,
    /// A reader at this sequence number pins the moved chunk: stop collecting for now.
    Pinned(u64),
}

/// Bytes of live values one GC write moves at most: its pointer batch leads the write queue
/// alone, and user writers wait behind it.
const GC_WRITE_BYTES: usize = 4 << 20;

/// Chunks whose live values GC appends to the cold file before it syncs it, logs their
/// pointers, syncs the log and frees them together (each is `gc_chunk_bytes` of the file it
/// collects, still on disk until then): every `fdatasync`, and the manifest record written
/// under the state lock every writer takes, serves this many chunks.
const CHUNKS_PER_SYNC: usize = 4;

/// A chunk whose live values were moved: freeing it waits until the log is durable to
/// `log_at`.
#[derive(Clone, Copy)]
pub(super) struct MovedChunk {
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

/// A put found in a chunk: where its key and value sit in the chunk's bytes, and the pointer
/// a live entry would hold.
struct ChunkPut {
    /// The keyspace the put wrote.
    ks: u32,
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    /// The put's expiry time, kept by the moved copy.
    expires_at_ms: Option<u64>,
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

/// The puts of record group `g`, read into `buf`, as `ChunkPut`s.
fn collect_puts(buf: &[u8], g: &GroupSpan, out: &mut Vec<ChunkPut>) {
    let base = buf.as_ptr() as usize;
    let mut ops = BatchIter::over(&buf[g.ops.clone()]);
    loop {
        let op_start = ops.offset();
        let Some(Ok((ks, op))) = ops.next() else { break };
        let BatchOp::Put { key, value, expires_at_ms } = op else { continue };
        let range = |s: &[u8]| (s.as_ptr() as usize - base)..(s.as_ptr() as usize - base + s.len());
        out.push(ChunkPut {
            ks,
            key: range(key),
            value: range(value),
            expires_at_ms,
            here: ValuePointer {
                file: g.pos.file,
                offset: g.pos.offset + (HEADER_LEN + op_start) as u64,
                op_len: (ops.offset() - op_start) as u32,
                value_crc: 0,
            },
        });
    }
}

impl Gc {
    /// Collect `file` from `start`. A helper thread reads and checks the next chunk while
    /// this one is moved and freed, so each half keeps a core busy (at most three chunks are
    /// in memory). A liveness answer that went stale meanwhile is safe: the write leader
    /// re-checks every key before it logs a pointer.
    /// With `hand_off`, the file's last chunks are freed by the freer thread while the next
    /// file is collected (`freer.rs`); otherwise in line, before this returns.
    /// Returns the sequence number of a reader that made it stop early, if one did.
    pub(super) fn gc_file(
        &self,
        db: &DbInner,
        file: u64,
        start: u64,
        hand_off: bool,
        report: &mut GcReport,
    ) -> Result<Option<u64>> {
        let r = self.gc_file_chunks(db, file, start, hand_off, report);
        if let Err(e) = &r {
            if e.is_corruption() {
                tracing::warn!(file, error = %e, "value-log GC found damage; leaving this file alone from now on");
                self.damaged.lock().insert(file);
            }
        }
        r
    }

    fn gc_file_chunks(
        &self,
        db: &DbInner,
        file: u64,
        start: u64,
        hand_off: bool,
        report: &mut GcReport,
    ) -> Result<Option<u64>> {
        let path = db.vlog.path(file);
        let mut reader = LogReader::new(db.vfs.open_read(&path)?, file, start)?;
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Chunk>>(1);
            // The reader's chunk buffer, reused: the live values are copied out of it.
            let mut buf = std::mem::take(&mut self.buffers.lock().chunk);
            let cached_before = CachedBefore::probe(reader.file().as_ref(), start);
            let read = move || loop {
                let chunk = self.read_chunk(db, &mut reader, &cached_before, &mut buf);
                let last = !matches!(&chunk, Ok(c) if !c.end_of_file);
                // A closed channel means the collector stopped (error or shutdown).
                if tx.send(chunk).is_err() || last {
                    self.buffers.lock().keep_chunk(std::mem::take(&mut buf), db.opts.gc_chunk_bytes);
                    return;
                }
            };
            let named = std::thread::Builder::new().name("wisckey-gc-read".into());
            named.spawn_scoped(s, read).map_err(|e| Error::io("spawn value-log GC's chunk reader", &path, e))?;
            let mut chunk_start = start;
            let mut appended = Vec::new();
            let t = &self.phases;
            while let Ok(chunk) = t.time(Phase::WaitingForChunks, || rx.recv()) {
                let chunk = chunk?;
                let end_of_file = chunk.end_of_file;
                appended.push(t.time(Phase::Appending, || self.append_chunk(db, file, chunk_start, chunk, report))?);
                chunk_start = appended.last().map_or(chunk_start, |(_, m): &(_, MovedChunk)| m.end);
                let due = end_of_file
                    || appended.len() >= CHUNKS_PER_SYNC
                    || self.pacing.is_stalled()
                    || self.is_shutting_down(db);
                if !due {
                    t.time(Phase::Pausing, || self.pause_between_chunks(db));
                    continue;
                }
                let mut moved =
                    t.time(Phase::LoggingPointers, || self.log_chunks(db, std::mem::take(&mut appended), report))?;
                // The previous file's free first: GC's progress is recorded in order.
                if let Some(seq) = self.settle_for_collector()? {
                    return Ok(Some(seq));
                }
                if end_of_file && hand_off {
                    match self.hand_off(file, moved) {
                        None => return Ok(None),
                        Some(back) => moved = back,
                    }
                }
                match t.time(Phase::Freeing, || self.free_moved_chunks(db, file, &mut moved, report))? {
                    ChunkDone::More => t.time(Phase::Pausing, || self.pause_between_chunks(db)),
                    ChunkDone::FileDone => return Ok(None),
                    ChunkDone::Pinned(seq) => return Ok(Some(seq)),
                }
            }
            Ok(None)
        })
    }

    /// Append a chunk's live values to a cold file (unsynced); say which range of the file it
    /// covers (`log_at` is filled in when its pointers are logged).
    fn append_chunk(
        &self,
        db: &DbInner,
        file: u64,
        chunk_start: u64,
        chunk: Chunk,
        report: &mut GcReport,
    ) -> Result<(super::cold::Appended, MovedChunk)> {
        report.bytes_read += chunk.bytes_read;
        add(&db.counters.gc_bytes_read, chunk.bytes_read);
        if chunk.torn && db.points_past(file, chunk.end)? {
            let path = db.vlog.path(file);
            return Err(Error::corruption(
                path,
                chunk.end,
                "value-log GC: damaged record group in a cold value file holding live values",
            ));
        }
        tracing::debug!(file, chunk_start, bytes_read = chunk.bytes_read, "value-log GC chunk");
        let moved = MovedChunk {
            start: chunk_start,
            end: chunk.end,
            end_of_file: chunk.end_of_file,
            log_at: LogPos::default(),
        };
        Ok((self.append_relocations(db, chunk.pieces, chunk.checked)?, moved))
    }

    /// Sync the cold file once for the appended chunks and log their pointers (not synced);
    /// the chunks, with what freeing them waits for.
    fn log_chunks(
        &self,
        db: &DbInner,
        appended: Vec<(super::cold::Appended, MovedChunk)>,
        report: &mut GcReport,
    ) -> Result<std::collections::VecDeque<MovedChunk>> {
        let (batches, mut chunks): (Vec<_>, Vec<_>) = appended.into_iter().unzip();
        let bytes = self.log_appended(db, batches, false)?;
        report.bytes_rewritten += bytes;
        add(&db.counters.gc_bytes_rewritten, bytes);
        // Every write the liveness views saw and every pointer put is before the log's end now.
        let log_at = db.writes.log.lock().groups_end();
        for c in &mut chunks {
            c.log_at = log_at;
        }
        Ok(chunks.into())
    }

    /// Leave the disk and the CPU to foreground work between chunks, unless the value log is
    /// past its space target (writers may be waiting for this very chunk); pace writers by
    /// the space as it is now.
    fn pause_between_chunks(&self, db: &DbInner) {
        let amp = self.vlog_space_amp(db);
        self.pace(db, amp);
        if !self.pacing.is_stalled() && !above(amp, db.opts.gc_space_amp_target) {
            std::thread::sleep(Duration::from_millis(db.opts.gc_pause_ms));
        }
    }

    /// Free the moved chunks, oldest first: values were judged dead against a view that
    /// includes unsynced writes, a crash can lose those (as a suffix), and the old values they
    /// shadow must then still be there; the pointer puts must survive too. So GC syncs the log
    /// first (without holding it: `WriteQueue::sync_log_for_gc`), then frees the chunks in one
    /// go: one manifest record (written under the state lock, which every writer takes too)
    /// and one hole for all of them.
    /// A reader from before the free (`Installed`) pins the old copies: GC waits a little for it, then
    /// stops (the chunks stay, the tail is recorded, the next round resumes after it), so disk
    /// use grows by at most a few chunks while old readers last.
    pub(super) fn free_moved_chunks(
        &self,
        db: &DbInner,
        file: u64,
        moved: &mut std::collections::VecDeque<MovedChunk>,
        report: &mut GcReport,
    ) -> Result<ChunkDone> {
        let Some(newest) = moved.back().map(|m| m.log_at) else { return Ok(ChunkDone::More) };
        if *db.writes.durable.lock() < newest {
            db.writes.sync_log_for_gc(db)?;
        }
        let durable = *db.writes.durable.lock();
        let ready = moved.iter().take_while(|m| durable >= m.log_at).count();
        if ready > 0 {
            let batch: Vec<MovedChunk> = moved.drain(..ready).collect();
            if let done @ (ChunkDone::FileDone | ChunkDone::Pinned(_)) = self.free_chunks(db, file, &batch, report)? {
                return Ok(done);
            }
        }
        if self.is_shutting_down(db) {
            return Ok(ChunkDone::FileDone);
        }
        Ok(ChunkDone::More)
    }

    /// Record consecutive moved chunks as collected and give their space back with one hole
    /// (the file, at its end).
    fn free_chunks(&self, db: &DbInner, file: u64, batch: &[MovedChunk], report: &mut GcReport) -> Result<ChunkDone> {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(ChunkDone::More) };
        let installed = super::Installed::now(db);
        let free = self.wait_for_readers(db, &installed);
        self.record_gc_progress(db, file, last.end, last.end_of_file, installed, free)?;
        let pinned = || ChunkDone::Pinned(db.snapshots.oldest().unwrap_or(0));
        if last.end_of_file {
            tracing::info!(file, bytes_read = report.bytes_read, "value-log file collected");
            report.files_collected += 1;
            add(&db.counters.gc_runs, 1);
            return Ok(if free { ChunkDone::FileDone } else { pinned() });
        }
        if !free {
            return Ok(pinned());
        }
        self.punch(db, file, first.start, last.end);
        Ok(ChunkDone::More)
    }

    /// Read groups until `gc_chunk_bytes`, keeping the puts whose key still points here.
    /// Liveness is decided for the whole chunk against one pinned view, in key order (one
    /// trip through the state lock, and neighbouring keys share table blocks); the live
    /// values are moved in that order too, so collected data comes out sorted by key.
    fn read_chunk(
        &self,
        db: &DbInner,
        reader: &mut LogReader,
        cached_before: &CachedBefore,
        buf: &mut Vec<u8>,
    ) -> Result<Chunk> {
        let start = reader.offset();
        let (groups, stop) = reader.read_groups_into(db.opts.gc_chunk_bytes, buf)?;
        let (end_of_file, torn) = match stop {
            None => (false, false),
            Some(ReadOutcome::Clean) => (true, false),
            Some(ReadOutcome::Damaged { .. }) if db.vlog.is_cold(reader.number()) => (true, true),
            Some(ReadOutcome::Damaged { offset, reason }) => {
                return Err(Error::corruption(reader.path().clone(), offset, format!("value-log GC: {reason}")));
            }
        };
        cached_before.drop_brought_in(reader.file().as_ref(), start..reader.offset());
        let buf = &buf[..];
        let mut puts: Vec<ChunkPut> = Vec::new();
        for g in &groups {
            collect_puts(buf, g, &mut puts);
        }
        let end = reader.offset();
        let key_of = |p: &ChunkPut| &buf[p.key.clone()];
        puts.sort_by(|a, b| (a.ks, key_of(a)).cmp(&(b.ks, key_of(b))));
        let (view, checked) = db.liveness_view();
        let mut live = Vec::with_capacity(puts.len());
        for p in &puts {
            if self.points_at(db, &view, p.ks, key_of(p), &p.here)? {
                live.push(p);
            }
        }
        let mut c =
            Chunk { pieces: Vec::new(), end, end_of_file, torn, bytes_read: end - start, checked: Some(checked) };
        // Each piece's batch is sized once: a growing one copied its values again at every
        // doubling and faulted in fresh pages for them.
        for piece in pieces_of(&live) {
            let bytes = piece.iter().map(|p| p.here.op_len as usize).sum();
            let spare = self.buffers.lock().batches.pop().unwrap_or_default();
            let mut r = Relocation { puts: WriteBatch::reuse(spare, bytes), old: Vec::with_capacity(piece.len()) };
            for p in piece {
                match p.expires_at_ms {
                    None => r.puts.put_raw(p.ks, key_of(p), &buf[p.value.clone()]),
                    Some(at) => r.puts.put_expiring_raw(p.ks, key_of(p), &buf[p.value.clone()], at),
                };
                r.old.push(p.here);
            }
            c.pieces.push(r);
        }
        Ok(c)
    }

    /// Whether the newest entry of `key` in `view` is a pointer to `at`.
    fn points_at(&self, db: &DbInner, view: &LatestView, ks: u32, key: &[u8], at: &ValuePointer) -> Result<bool> {
        Ok(match db.latest_entry_in(view, ks, key)? {
            Some((ValueKind::Pointer, cur)) => {
                ValuePointer::decode(&cur).is_some_and(|p| p.file == at.file && p.offset == at.offset)
            }
            Some((ValueKind::Merge, _)) => {
                db.check_not_under_merges(view, ks, key, at)?;
                false
            }
            _ => false,
        })
    }

    /// Persist the GC tail; at the end of a file also drop it from the manifest — unless an
    /// older reader still needs it, in which case that waits in `gc_pending`.
    fn record_gc_progress(
        &self,
        db: &DbInner,
        file: u64,
        end: u64,
        end_of_file: bool,
        installed: super::Installed,
        free: bool,
    ) -> Result<()> {
        let mut edit = VersionEdit { vlog_tail: Some(LogPos { file, offset: end }), ..Default::default() };
        // A collected file leaves the manifest at once, so GC never picks it again (its
        // punched chunks would read back as zeros). While an older reader may still need it,
        // only the in-memory `gc_pending` set keeps the sweep from deleting it; after a
        // restart there are no such readers and the sweep removes it.
        let free_now = end_of_file && free;
        if end_of_file {
            edit.vlog_files_deleted.push(file);
            if !free_now {
                self.pending.lock().push((file, installed));
            }
        }
        let mut st = db.state.lock();
        // What is still allocated: punched chunks were counted when they were punched.
        let size = db.vfs.disk_usage(&db.vlog.path(file)).unwrap_or(0);
        st.versions.log_and_apply(edit)?;
        if free_now {
            add(&db.counters.gc_bytes_freed, size);
            db.vlog.evict(file);
            db.delete_obsolete_files(&mut st);
        }
        Ok(())
    }

    /// Free `[start, end)` of a collected vLog file; without hole punching the space comes
    /// back when the whole file is deleted.
    fn punch(&self, db: &DbInner, file: u64, start: u64, end: u64) {
        // Cached copies of the values there are of no use to anyone now (every reader that
        // could follow a pointer here is gone), only taking space.
        db.vlog.forget_range(file, start, end);
        let path = db.vlog.path(file);
        // Another holder of the file's bytes may still read the range: they come back when
        // the file is deleted instead.
        let _no_readers = match db.sharing.may_change_in_place(&*db.vfs, &db.dir, file, &path) {
            Ok(guard) => guard,
            Err(why) => return tracing::debug!(file = ?path, start, end, why, "collected range not punched"),
        };
        match db.vfs.punch_hole(&path, start, end - start) {
            Ok(true) => add(&db.counters.gc_bytes_freed, end - start),
            Ok(false) => {
                tracing::info!(file = ?path, "filesystem cannot punch holes; space returns when the file is deleted")
            }
            Err(e) => tracing::warn!(file = ?path, error = %e, "punching a hole into a collected vLog range failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_of(op_len: u32) -> ChunkPut {
        ChunkPut {
            ks: 0,
            key: 0..0,
            value: 0..0,
            expires_at_ms: None,
            here: ValuePointer { file: 1, offset: 0, op_len, value_crc: 0 },
        }
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
