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

use super::{add, DbInner};
use crate::error::{Error, Result};
use crate::key::ValueKind;
use crate::log::{LogReader, ReadOutcome, HEADER_LEN};
use crate::version::{log_file_name, LogPosition, VersionEdit};
use crate::vlog::ValuePointer;
use crate::write_batch::{BatchIter, BatchOp, WriteBatch};

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
}

/// One chunk's work: live values to re-put and where the chunk ends.
struct Chunk {
    batch: WriteBatch,
    old: Vec<ValuePointer>,
    end: u64,
    end_of_file: bool,
    bytes_read: u64,
}

impl DbInner {
    /// Collect every vLog file whose garbage ratio is at least `min_garbage_ratio`.
    pub(crate) fn run_gc(&self, min_garbage_ratio: f64) -> Result<GcReport> {
        // One collector at a time: two would punch holes under each other's reads.
        let _one = self.gc_lock.lock();
        let mut report = GcReport::default();
        self.finish_pending_gc_deletes();
        let mut tried = std::collections::HashSet::new();
        while let Some((file, start)) = self.pick_gc_file(min_garbage_ratio) {
            if !tried.insert(file) || self.is_shutting_down() {
                break;
            }
            self.gc_file(file, start, &mut report)?;
        }
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
            let (mut batch, mut old) = (WriteBatch::new(), Vec::new());
            while it.valid() {
                if let Some(ptr) = it.current_pointer() {
                    batch.put(it.key(), it.value());
                    old.push(ptr);
                    report.bytes_read += u64::from(ptr.op_len);
                }
                if batch.approximate_size() as u64 >= self.opts.gc_chunk_bytes {
                    report.bytes_rewritten += batch.user_bytes;
                    self.gc_write(std::mem::take(&mut batch), std::mem::take(&mut old))?;
                }
                it.next()?;
            }
            report.bytes_rewritten += batch.user_bytes;
            if !batch.is_empty() {
                self.gc_write(batch, old)?;
            }
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

    /// A file partly collected before (the manifest's GC tail) comes first; otherwise the file
    /// with the highest garbage ratio among those wholly before the log head.
    fn pick_gc_file(&self, min_ratio: f64) -> Option<(u64, u64)> {
        let st = self.state.lock();
        let head = st.versions.log_head();
        let tail = st.versions.vlog_tail();
        let blobs = st.versions.blob_files();
        if tail.offset > 0 && blobs.contains_key(&tail.file) {
            return Some((tail.file, tail.offset));
        }
        blobs
            .iter()
            .filter(|(f, s)| **f < head.file && s.total_bytes > 0 && s.garbage_ratio() >= min_ratio)
            .max_by(|a, b| a.1.garbage_ratio().total_cmp(&b.1.garbage_ratio()))
            .map(|(f, _)| (*f, 0))
    }

    fn gc_file(&self, file: u64, start: u64, report: &mut GcReport) -> Result<()> {
        let path = log_file_name(&self.dir, file);
        let mut reader = LogReader::new(self.vfs.open_read(&path)?, file, start)?;
        let mut chunk_start = start;
        loop {
            let chunk = self.read_chunk(&mut reader)?;
            report.bytes_read += chunk.bytes_read;
            add(&self.counters.gc_bytes_read, chunk.bytes_read);
            if !chunk.batch.is_empty() {
                let bytes = chunk.batch.user_bytes;
                self.gc_write(chunk.batch, chunk.old)?;
                report.bytes_rewritten += bytes;
                add(&self.counters.gc_bytes_rewritten, bytes);
            }
            let install_seq = self.visible_seq.load(Ordering::Acquire);
            self.record_gc_progress(file, chunk.end, chunk.end_of_file, install_seq)?;
            if chunk.end_of_file {
                tracing::info!(file, bytes_read = report.bytes_read, "value-log file collected");
                report.files_collected += 1;
                add(&self.counters.gc_runs, 1);
                return Ok(());
            }
            if self.no_reader_older_than(install_seq) {
                self.punch(file, chunk_start, chunk.end);
            }
            chunk_start = chunk.end;
            if self.is_shutting_down() {
                return Ok(());
            }
            // Leave the disk and the CPU to foreground work between chunks.
            std::thread::sleep(Duration::from_millis(self.opts.gc_pause_ms));
        }
    }

    /// Read groups until `gc_chunk_bytes`, keeping the puts whose key still points here.
    fn read_chunk(&self, reader: &mut LogReader) -> Result<Chunk> {
        let start = reader.offset();
        let mut c = Chunk { batch: WriteBatch::new(), old: Vec::new(), end: start, end_of_file: false, bytes_read: 0 };
        while reader.offset() - start < self.opts.gc_chunk_bytes {
            let rec = match reader.next_record()? {
                Ok(rec) => rec,
                Err(ReadOutcome::Clean) => {
                    c.end_of_file = true;
                    break;
                }
                Err(ReadOutcome::Damaged { offset, reason }) => {
                    return Err(Error::corruption(reader.path().clone(), offset, format!("value-log GC: {reason}")));
                }
            };
            let mut ops = BatchIter::over(&rec.ops);
            loop {
                let op_start = ops.offset();
                let Some(Ok(op)) = ops.next() else { break };
                let BatchOp::Put { key, value } = op else { continue };
                let here = ValuePointer {
                    file: rec.pos.file,
                    offset: rec.pos.offset + (HEADER_LEN + op_start) as u64,
                    op_len: (ops.offset() - op_start) as u32,
                    value_crc: 0,
                };
                if self.points_at(key, &here)? {
                    c.batch.put(key, value);
                    c.old.push(here);
                }
            }
        }
        c.end = reader.offset();
        c.bytes_read = c.end - start;
        Ok(c)
    }

    /// Whether the newest entry of `key` is a pointer to `at`.
    fn points_at(&self, key: &[u8], at: &ValuePointer) -> Result<bool> {
        Ok(match self.get_latest_entry(key)? {
            Some((ValueKind::Pointer, cur)) => {
                ValuePointer::decode(&cur).is_some_and(|p| p.file == at.file && p.offset == at.offset)
            }
            _ => false,
        })
    }

    /// Persist the GC tail; at the end of a file also drop it from the manifest — unless an
    /// older reader still needs it, in which case that waits in `gc_pending`.
    fn record_gc_progress(&self, file: u64, end: u64, end_of_file: bool, install_seq: u64) -> Result<()> {
        let mut edit = VersionEdit { vlog_tail: Some(LogPosition { file, offset: end }), ..Default::default() };
        // A collected file leaves the manifest at once, so GC never picks it again (its
        // punched chunks would read back as zeros). While an older reader may still need it,
        // only the in-memory `gc_pending` set keeps the sweep from deleting it; after a
        // restart there are no such readers and the sweep removes it.
        let free_now = end_of_file && self.no_reader_older_than(install_seq);
        if end_of_file {
            edit.blob_files_deleted.push(file);
            if !free_now {
                self.gc_pending.lock().push((file, install_seq));
            }
        }
        let mut st = self.state.lock();
        let size = self.vfs.file_size(&log_file_name(&self.dir, file)).unwrap_or(0);
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
        let sizes: u64 = ready.iter().map(|f| self.vfs.file_size(&log_file_name(&self.dir, *f)).unwrap_or(0)).sum();
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
    fn refresh_discard_stats(&self) -> Result<()> {
        let (tree_bytes, flushes) = {
            let st = self.state.lock();
            let v = st.versions.current();
            ((0..v.num_levels()).map(|l| v.level_bytes(l)).sum::<u64>(), self.counters.flushes.load(Ordering::Relaxed))
        };
        let values: u64 = self.state.lock().versions.blob_files().values().map(|b| b.total_bytes).sum();
        let mut last = self.gc_stats_refreshed_at.lock();
        if flushes < *last + 4 || tree_bytes.saturating_mul(20) > values {
            return Ok(());
        }
        *last = flushes;
        drop(last);
        self.compact_range(None, None)
    }

    /// True when no snapshot or iterator reads at a sequence number below `seq`.
    fn no_reader_older_than(&self, seq: u64) -> bool {
        self.snapshots.oldest().is_none_or(|s| s >= seq)
    }

    /// Free `[start, end)` of a collected vLog file; without hole punching the space comes
    /// back when the whole file is deleted.
    fn punch(&self, file: u64, start: u64, end: u64) {
        let path = log_file_name(&self.dir, file);
        match self.vfs.punch_hole(&path, start, end - start) {
            Ok(true) => add(&self.counters.gc_bytes_freed, end - start),
            Ok(false) => {
                tracing::info!(file = ?path, "filesystem cannot punch holes; space returns when the file is deleted")
            }
            Err(e) => tracing::warn!(file = ?path, error = %e, "punching a hole into a collected vLog range failed"),
        }
    }

    /// The background GC thread: every `gc_interval_ms`, collect files past the ratio.
    pub(super) fn gc_loop(&self) {
        let mut st = self.state.lock();
        loop {
            if st.shutting_down {
                return;
            }
            self.gc_cv.wait_for(&mut st, Duration::from_millis(self.opts.gc_interval_ms.max(1)));
            if st.shutting_down {
                return;
            }
            if st.bg_error.is_some() || self.opts.gc_interval_ms == 0 {
                continue;
            }
            let ratio = self.opts.gc_garbage_ratio;
            let r = parking_lot::MutexGuard::unlocked(&mut st, || {
                self.refresh_discard_stats()?;
                self.run_gc(ratio)
            });
            if let Err(e) = r {
                tracing::warn!(error = %e, "value-log GC failed; will retry");
            }
        }
    }
}
