//! Appends record groups to the current log file through a userspace buffer, rolls to a new
//! file past `log_file_bytes`, and makes the log durable on request.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{encode_group, encode_mark, LogPos, Mark};
use crate::error::Result;
use crate::filename::vlog_file_name;
use crate::fs::{FileSyncer, Vfs, WritableFile};

/// The part of the log no truncation can ever take back, for readers that map log files
/// (a mapped page past the end of a file faults with SIGBUS): every file below the one being
/// appended to, and that file's fdatasync'ed bytes. Only bytes past them are ever cut (a
/// failed append or sync), and the synced length of a file never goes down.
#[derive(Debug, Default)]
pub struct DurableExtent {
    file: AtomicU64,
    len: AtomicU64,
}

impl DurableExtent {
    /// `file` is the file being appended to, with `len` bytes durable.
    fn publish(&self, file: u64, len: u64) {
        if self.file.load(Ordering::Acquire) != file {
            // Zeroed before the file changes: a reader that sees the new file never pairs it
            // with the old file's length.
            self.len.store(0, Ordering::Release);
            self.file.store(file, Ordering::Release);
        }
        self.len.fetch_max(len, Ordering::AcqRel);
    }

    /// Every file below `file` and nothing of `file` or later: the log as a read-only handle
    /// sees it, whose writer may still cut the newest file back (after a failed sync).
    pub fn sealed_below(file: u64) -> Self {
        let extent = DurableExtent::default();
        extent.publish(file, 0);
        extent
    }

    /// Whether the bytes of log file `file` up to `end` will never be truncated away.
    pub fn covers(&self, file: u64, end: u64) -> bool {
        let head = self.file.load(Ordering::Acquire);
        if file != head {
            return file < head;
        }
        let len = self.len.load(Ordering::Acquire);
        // A roll between the two loads would pair `len` with the wrong file.
        end <= len && self.file.load(Ordering::Acquire) == head
    }
}

/// The single appender of the log. Callers serialize access (the DB's write leader owns it).
/// Bytes between two `start_writeback` calls on the log file.
const WRITEBACK_BYTES: u64 = 1 << 20;

pub struct LogWriter {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    file: Box<dyn WritableFile>,
    number: u64,
    /// Bytes already handed to the file (the buffer starts here).
    written: u64,
    /// Bytes known durable (fdatasync'ed) in the current file.
    synced: u64,
    buf: Vec<u8>,
    buf_bytes: usize,
    roll_bytes: u64,
    /// A failed append may have left part of the buffer in the file: cut the file back to
    /// `written` before the next append, so no torn bytes sit between valid groups.
    needs_truncate: bool,
    /// Rolled-over files with unsynced bytes, oldest first.
    unsynced_old: Arc<Mutex<Vec<Box<dyn WritableFile>>>>,
    /// A file was created since the directory was last synced.
    dir_dirty: bool,
    /// Total bytes appended to log files since open (for write-amp accounting).
    pub bytes_appended: u64,
    /// What of the log is durable, published for readers that map log files.
    extent: Arc<DurableExtent>,
    /// A group was appended since the last sync mark: the next completed sync writes one.
    unclaimed: bool,
    /// Set once the file has passed the roll size: the write leader reads it without the
    /// writer's lock (which a flush may hold through an `fdatasync`).
    roll_due: Arc<AtomicBool>,
    /// Offset just past the last group in the current file (0: none yet); marks after it do
    /// not count.
    groups_end: u64,
    /// Everything of the log before this position is durable (older files included); published
    /// for value-log GC, which frees old copies only once the writes that made them dead are.
    durable: Arc<Mutex<LogPos>>,
}

impl LogWriter {
    /// Start writing to `file` (number `number`), which already holds `len` valid bytes (they
    /// must be durable: recovery syncs them). An empty file gets a start mark saying the next
    /// group has sequence number `next_seq`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        number: u64,
        file: Box<dyn WritableFile>,
        len: u64,
        buf_bytes: usize,
        roll_bytes: u64,
        next_seq: u64,
    ) -> Self {
        let extent = Arc::new(DurableExtent::default());
        // The valid bytes found at open were read back from the file: nothing cuts them now.
        extent.publish(number, len);
        let mut w = LogWriter {
            vfs,
            dir: dir.to_path_buf(),
            file,
            number,
            written: len,
            synced: len,
            buf: Vec::with_capacity(buf_bytes.min(4 << 20)),
            buf_bytes,
            roll_bytes,
            needs_truncate: false,
            unsynced_old: Arc::new(Mutex::new(Vec::new())),
            dir_dirty: false,
            bytes_appended: 0,
            extent,
            unclaimed: false,
            roll_due: Arc::new(AtomicBool::new(false)),
            groups_end: len,
            durable: Arc::new(Mutex::new(LogPos { file: number, offset: len })),
        };
        w.note_size();
        if len == 0 {
            w.push_mark(&Mark::Start { next_seq, prev_file: 0, durable: LogPos::default() });
            w.write_mark_now();
        }
        w
    }

    /// Hand a mark just put into the buffer to the file at once (one small write), so it
    /// survives a process crash even if no group follows it. Failing is not fatal: the mark
    /// stays in the buffer and goes out with the next flush.
    fn write_mark_now(&mut self) {
        if let Err(e) = self.flush_buffer() {
            tracing::debug!(error = %e, "writing a log mark failed; it goes out with the next flush");
        }
    }

    /// How far the log is durable, readable without this writer's lock.
    pub fn durable(&self) -> Arc<Mutex<LogPos>> {
        self.durable.clone()
    }

    /// Record that the log is durable up to `pos`.
    fn note_durable(&self, pos: LogPos) {
        let mut d = self.durable.lock();
        *d = (*d).max(pos);
    }

    /// Whether the current file has passed the roll size, readable without this writer's lock.
    pub fn roll_due(&self) -> Arc<AtomicBool> {
        self.roll_due.clone()
    }

    fn note_size(&self) {
        if self.should_roll() {
            self.roll_due.store(true, Ordering::Release);
        }
    }

    /// Put a mark into the buffer (it reaches the file with the next flush).
    fn push_mark(&mut self, mark: &Mark) {
        let before = self.buf.len();
        encode_mark(&mut self.buf, mark);
        self.bytes_appended += (self.buf.len() - before) as u64;
    }

    /// The durable part of the log, kept current as the log is synced and rolled.
    pub fn extent(&self) -> Arc<DurableExtent> {
        self.extent.clone()
    }

    /// The position the next record group will be written at.
    pub fn end(&self) -> LogPos {
        LogPos { file: self.number, offset: self.written + self.buf.len() as u64 }
    }

    /// Where the groups appended so far end, as a log head: marks after the last group (a sync
    /// mark, a new file's start mark) are left out. A head recorded there needs no sync of
    /// bytes no group needs — the flush recording it would otherwise `fdatasync` the file,
    /// under this writer's lock, with everything written to it meanwhile, just for a mark.
    pub fn groups_end(&self) -> LogPos {
        LogPos { file: self.number, offset: self.groups_end }
    }

    /// Number of the file being appended to.
    pub fn file_number(&self) -> u64 {
        self.number
    }

    /// Append one record group; returns where it starts. The group is in the buffer (or the
    /// OS) afterwards; call `sync` to make it durable.
    pub fn append(&mut self, first_seq: u64, count: u32, ops: &[u8], crc: u32) -> Result<LogPos> {
        self.unclaimed = true;
        if ops.len() >= self.buf_bytes / 2 {
            let r = self.append_direct(first_seq, count, ops, crc);
            self.note_size();
            return r;
        }
        let pos = self.end();
        let before = self.buf.len();
        encode_group(&mut self.buf, first_seq, count, ops, crc);
        self.groups_end = pos.offset + (self.buf.len() - before) as u64;
        self.bytes_appended += (self.buf.len() - before) as u64;
        if self.buf.len() >= self.buf_bytes {
            if let Err(e) = self.flush_buffer() {
                // The caller reports this group as failed: it must not reach the file later.
                self.buf.truncate(before);
                self.groups_end = self.groups_end.min(pos.offset);
                return Err(e);
            }
        }
        self.note_size();
        Ok(pos)
    }

    /// A large group skips the buffer (one copy less): the buffer goes out first, then the
    /// group's header and ops straight from the caller's memory.
    fn append_direct(&mut self, first_seq: u64, count: u32, ops: &[u8], crc: u32) -> Result<LogPos> {
        self.flush_buffer()?;
        let pos = self.end();
        let header = super::encode_header(first_seq, count, ops.len(), crc);
        let r = self.file.append(&header).and_then(|_| self.file.append(ops));
        if let Err(e) = r {
            self.needs_truncate = true;
            return Err(e);
        }
        let n = (header.len() + ops.len()) as u64;
        self.written += n;
        self.bytes_appended += n;
        self.groups_end = self.written;
        Ok(pos)
    }

    /// Hand buffered bytes to the file (no durability).
    pub fn flush_buffer(&mut self) -> Result<()> {
        if self.needs_truncate {
            self.file.truncate(self.written)?;
            self.needs_truncate = false;
        }
        if !self.buf.is_empty() {
            if let Err(e) = self.file.append(&self.buf) {
                self.needs_truncate = true;
                return Err(e);
            }
            let before = self.written;
            self.written += self.buf.len() as u64;
            self.buf.clear();
            // Start the device on each MiB as it is written (RocksDB's `wal_bytes_per_sync`):
            // a sync then waits for the last MiB, not for everything since the one before —
            // value-log GC syncs the log before it frees what it moved, and waited for every
            // user byte written meanwhile.
            if before / WRITEBACK_BYTES != self.written / WRITEBACK_BYTES {
                self.file.start_writeback();
            }
        }
        Ok(())
    }

    /// Write the buffer and fdatasync: every group appended so far survives a crash. Then a
    /// sync mark recording what is now durable is handed to the file (not synced: it only
    /// vouches for bytes before it), so recovery can tell later damage to these bytes from a
    /// torn tail.
    pub fn sync(&mut self) -> Result<()> {
        self.sync_then_mark(true)
    }

    /// `sync` for a write leader with more writers queued behind it: the sync mark stays in the
    /// buffer and reaches the file with the next group's bytes (one `write` instead of two;
    /// under a stream of synced writes the mark trails its sync by one group).
    pub fn sync_mark_with_next_write(&mut self) -> Result<()> {
        self.sync_then_mark(false)
    }

    fn sync_then_mark(&mut self, write_mark: bool) -> Result<()> {
        sync_old_files(&self.unsynced_old)?;
        if self.dir_dirty {
            // The new file's directory entry must be durable before data in it is.
            self.vfs.sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        self.flush_buffer()?;
        if self.synced < self.written {
            self.file.sync_data()?;
            self.synced = self.written;
            self.extent.publish(self.number, self.synced);
        }
        self.note_durable(LogPos { file: self.number, offset: self.synced });
        if self.unclaimed {
            self.unclaimed = false;
            self.push_mark(&Mark::Sync { durable: LogPos { file: self.number, offset: self.synced } });
            // The sync itself succeeded; a mark that cannot be written now goes out (after the
            // failed bytes are cut) with the next flush.
            if write_mark {
                self.write_mark_now();
            }
        }
        Ok(())
    }

    /// Start a sync that runs without this writer (`SyncTicket::run`, then `finish_sync`):
    /// the buffer goes to the file here, and the ticket makes everything appended so far
    /// durable — rolled files, the directory entry of a new file, the current file — while
    /// the write leader goes on appending. `None` when the file has no detached syncer: then
    /// this did the whole sync (`sync`) already.
    pub fn begin_sync(&mut self) -> Result<Option<SyncTicket>> {
        let Some(syncer) = self.file.syncer() else {
            self.sync()?;
            return Ok(None);
        };
        self.flush_buffer()?;
        Ok(Some(SyncTicket {
            pos: LogPos { file: self.number, offset: self.written },
            syncer,
            old: self.unsynced_old.clone(),
            dir: self.dir_dirty.then(|| (self.vfs.clone(), self.dir.clone())),
        }))
    }

    /// Record what a ticket's `run` made durable; a sync mark saying so goes out with the next
    /// write (it only vouches for bytes before it).
    pub fn finish_sync(&mut self, ticket: &SyncTicket) {
        let pos = ticket.pos;
        if pos.file == self.number {
            if ticket.dir.is_some() {
                self.dir_dirty = false;
            }
            // A failed write may have cut the file back meanwhile.
            let synced = pos.offset.min(self.written);
            if synced > self.synced {
                self.synced = synced;
                self.extent.publish(self.number, synced);
            }
        }
        self.note_durable(pos);
        if self.unclaimed && pos.file == self.number {
            // Groups appended while the sync ran are still unclaimed: the next sync marks them.
            self.unclaimed = self.groups_end > self.synced;
            self.push_mark(&Mark::Sync { durable: LogPos { file: self.number, offset: self.synced } });
        }
    }

    /// `sync`, then sync once more so the sync mark it wrote is durable too (at close: a later
    /// open then finds every byte of the log vouched for).
    pub fn sync_sealed(&mut self) -> Result<()> {
        self.sync()?;
        if self.synced < self.written {
            self.sync()?;
        }
        Ok(())
    }

    /// Forget everything from `pos` on (a group whose sync failed is reported as failed, so
    /// it must not survive in the buffer or the file).
    pub fn discard_from(&mut self, pos: LogPos) {
        if pos.file != self.number {
            return;
        }
        self.groups_end = self.groups_end.min(pos.offset);
        if pos.offset >= self.written {
            self.buf.truncate((pos.offset - self.written) as usize);
        } else {
            self.buf.clear();
            self.written = pos.offset;
            self.synced = self.synced.min(pos.offset);
            self.needs_truncate = true;
        }
    }

    /// Bytes `[offset, offset + len)` of file `file` if they are still in the buffer (not yet
    /// handed to the file), so reads of just-written values need no flush.
    pub fn read_buffered(&self, file: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
        if file != self.number || offset < self.written {
            return None;
        }
        let start = (offset - self.written) as usize;
        self.buf.get(start..start.checked_add(len)?).map(|b| b.to_vec())
    }

    /// True when the current file has grown past the roll size.
    pub fn should_roll(&self) -> bool {
        self.written + self.buf.len() as u64 >= self.roll_bytes
    }

    /// Continue in a new file numbered `number`, whose first group will have sequence number
    /// `next_seq`. The old file is not synced here (that would stall writers for an fdatasync
    /// per roll): it joins `unsynced_old`, and every later `sync` syncs it before the new
    /// file, so a synced write is never durable while an older write is not — damage can only
    /// ever be at the tail of the newest data. The new file starts with a start mark (the
    /// sequence number and what of the old files is durable).
    pub fn roll(&mut self, number: u64, next_seq: u64) -> Result<()> {
        self.flush_buffer()?;
        let durable = if self.unsynced_old.lock().is_empty() {
            LogPos { file: self.number, offset: self.synced }
        } else {
            LogPos::default()
        };
        let path = vlog_file_name(&self.dir, number);
        let file = self.vfs.create(&path)?;
        let old_number = self.number;
        let old = std::mem::replace(&mut self.file, file);
        if self.synced < self.written {
            self.unsynced_old.lock().push(old);
        }
        self.dir_dirty = true;
        self.number = number;
        self.written = 0;
        self.synced = 0;
        self.extent.publish(number, 0);
        self.roll_due.store(false, Ordering::Release);
        self.groups_end = 0;
        self.push_mark(&Mark::Start { next_seq, prev_file: old_number, durable });
        // Written at once: after a crash, the new file vouches for the old one even when no
        // group reached it.
        self.write_mark_now();
        Ok(())
    }

    /// The list of rolled-over files still to be synced; a flush syncs them without holding
    /// the writer (see `sync_old_files`).
    pub fn unsynced_old(&self) -> Arc<Mutex<Vec<Box<dyn WritableFile>>>> {
        self.unsynced_old.clone()
    }

    /// Make the log durable up to `pos` (used before the manifest records `pos` as the head).
    /// Callers sync older files with `sync_old_files` first, without this writer's lock; a
    /// file that rolled over since is synced here (rare: one roll in that window).
    pub fn sync_to(&mut self, pos: LogPos) -> Result<()> {
        if pos.file == self.number && pos.offset > self.synced {
            return self.sync();
        }
        sync_old_files(&self.unsynced_old)?;
        if self.dir_dirty {
            self.vfs.sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        self.note_durable(pos);
        Ok(())
    }
}

/// A sync of the log begun under the writer's lock (`LogWriter::begin_sync`) and run
/// without it.
pub struct SyncTicket {
    /// Everything of the log before this is durable once `run` returns.
    pos: LogPos,
    syncer: Arc<dyn FileSyncer>,
    old: Arc<Mutex<Vec<Box<dyn WritableFile>>>>,
    /// The directory to sync: the current file is new since the last sync.
    dir: Option<(Arc<dyn Vfs>, PathBuf)>,
}

impl SyncTicket {
    /// Make the log durable up to the ticket's position: older files first (so a synced write
    /// is never durable while an older one is not), then the directory entry, then the file.
    pub fn run(&self) -> Result<()> {
        sync_old_files(&self.old)?;
        if let Some((vfs, dir)) = &self.dir {
            vfs.sync_dir(dir)?;
        }
        self.syncer.sync_data(self.pos.offset)
    }
}

/// Sync every rolled-over file, oldest first; a file leaves the list only once synced.
pub fn sync_old_files(old: &Mutex<Vec<Box<dyn WritableFile>>>) -> Result<()> {
    let mut files = old.lock();
    while let Some(f) = files.first_mut() {
        f.sync_data()?;
        files.remove(0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    fn writer(vfs: &Arc<dyn Vfs>, number: u64) -> LogWriter {
        let dir = Path::new("/d");
        vfs.create_dir_all(dir).unwrap();
        let file = vfs.create(&vlog_file_name(dir, number)).unwrap();
        LogWriter::new(vfs.clone(), dir, number, file, 0, 1 << 10, 1 << 20, 1)
    }

    #[test]
    fn the_durable_extent_covers_synced_bytes_and_rolled_files_only() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut w = writer(&vfs, 7);
        let extent = w.extent();
        w.append(1, 1, &[5u8; 300], 0).unwrap();
        let end = w.end().offset;
        w.flush_buffer().unwrap();
        assert!(!extent.covers(7, end), "handed to the file but not synced: a failed sync may cut it");
        assert!(extent.covers(6, u64::MAX), "files below the head are sealed");
        w.sync().unwrap();
        assert!(extent.covers(7, end) && !extent.covers(7, end + 1));
        w.roll(9, 2).unwrap();
        assert!(extent.covers(7, u64::MAX), "the rolled file is sealed");
        assert!(!extent.covers(9, 1), "nothing of the new head is durable yet");
        assert!(!extent.covers(10, 1), "files above the head are never covered");
    }

    #[test]
    fn the_durable_position_moves_only_with_syncs() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut w = writer(&vfs, 7);
        let durable = w.durable();
        let start = *durable.lock();
        w.append(1, 1, &[5u8; 300], 0).unwrap();
        w.flush_buffer().unwrap();
        assert_eq!(*durable.lock(), start, "handed to the file is not durable");
        w.sync().unwrap();
        let synced = *durable.lock();
        assert!(synced >= w.groups_end(), "{synced:?} must cover the group ending at {:?}", w.groups_end());
        w.roll(9, 2).unwrap();
        w.append(2, 1, &[6u8; 300], 0).unwrap();
        assert_eq!(*durable.lock(), synced, "a roll makes nothing durable");
        w.sync().unwrap();
        assert!(*durable.lock() >= w.groups_end());
    }

    #[test]
    fn sync_to_a_file_that_rolled_over_since_makes_it_durable() {
        use crate::fs::{CrashMode, FaultFs};
        let fs = FaultFs::in_memory(1);
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        let mut w = writer(&vfs, 7);
        w.append(1, 1, &[5u8; 300], 0).unwrap();
        let end = w.groups_end();
        // The file rolls after the caller synced the older files but before it asked for
        // `end` (the flush's window): `sync_to` must sync it anyway.
        w.roll(8, 2).unwrap();
        w.sync_to(end).unwrap();
        assert!(*w.durable().lock() >= end);
        fs.crash(CrashMode::DropUnsynced).unwrap();
        let len = vfs.file_size(&vlog_file_name(Path::new("/d"), 7)).unwrap();
        assert!(len >= end.offset, "file 7 kept {len} bytes, the sync promised {}", end.offset);
    }
}
