//! `Db::open_read_only`: a handle that reads the database as it was when it opened, while a
//! writer (another process, or a handle of this one) goes on. It takes no `LOCK`; it registers
//! with a shared lock on `READERS` (held for its lifetime: the writer deletes and punches
//! nothing meanwhile, `sharing.rs`), reads the manifest, and replays the log from the head
//! into one in-memory memtable, stopping at the last whole record group (a group the writer
//! is appending reads as a torn tail). It writes nothing, runs no background thread, and
//! refuses every call that would change the database (`Error::ReadOnly`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::recovery::{self, Recovered};
use super::sharing::{ReadOnlyView, Sharing};
use super::{file_readers, policy_for, validate_options, Db, DbInner, Parts};
use crate::error::{Error, Result};
use crate::filename::{readers_file_name, vlog_file_name};
use crate::fs::{FileLock, Vfs, WritableFile};
use crate::log::{self, BufferedOps, DurableExtent, LogPos, LogReader, LogWriter};
use crate::memtable::Memtable;
use crate::options::{Options, RecoveryMode};
use crate::version::VersionSet;

/// How long an open waits to register while the writer holds `READERS` (it does only while it
/// deletes or punches: milliseconds).
const REGISTER_PATIENCE: Duration = Duration::from_secs(5);

/// Opens that find `CURRENT` naming a manifest the writer has just replaced try again.
const MANIFEST_TRIES: usize = 5;

impl Db {
    /// Open the database in `path` for reading only. The handle sees the database as it was
    /// when it opened (the manifest, and every whole record group of the log), while the
    /// process or handle that has it open for writing goes on; reopen to see newer writes.
    /// What it sees is what had reached the files: every synced write, and an unsynced one once
    /// its writer handed its log buffer to the file (a sync, a flush, or a full buffer).
    /// It takes no lock a writer needs, so it opens beside one, and several open at once.
    ///
    /// Writes, flushes, compactions and GC through it fail with `Error::ReadOnly`;
    /// `checkpoint` and `backup` work (copying the state it sees). While a read-only handle is
    /// open, the writer deletes no file and punches no hole (obsolete files and collected
    /// space come back once the last one closes): keep such handles short-lived.
    ///
    /// Errors: `NotADatabase` when `path` holds no database; `Corruption` for damage a
    /// read-write open would also refuse (salvaging a damaged log needs a read-write open).
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        validate_options(&options)?;
        let dir = path.as_ref().to_path_buf();
        let vfs = options.vfs.clone();
        if !vfs.is_dir(&dir) {
            let reason = "the directory does not exist".to_string();
            return Err(Error::NotADatabase { path: dir, reason });
        }
        let registration = register(&*vfs, &dir)?;
        let policy = policy_for(&options);
        let (table_cache, vlog) = file_readers(&vfs, &dir, &options);
        let (recovered, view) = replay_read_only(&vfs, &dir, &options)?;
        for n in cold_files(&*vfs, &dir)? {
            vlog.add_cold(n);
        }
        vlog.attach_log(Arc::new(ReadOnlyLog { extent: Arc::new(DurableExtent::sealed_below(view.log_end.file)) }));
        let parts = Parts { dir, options, policy, table_cache, vlog, sharing: Sharing::read_only(view) };
        let inner = DbInner::assemble(parts, recovered);
        tracing::debug!(dir = ?inner.dir, sequence = view.sequence, "opened read-only");
        Ok(Db { inner, threads: Mutex::new(Vec::new()), lock: Mutex::new(registration), recovery_report: None })
    }
}

/// Register as a reader: a shared lock on `READERS`, taken while no writer is deleting or
/// punching (it holds the lock exclusively for that, briefly). A directory that does not let
/// this process create `READERS` (a read-only mount, another owner) cannot have a writer
/// changing it either: the open goes on unregistered.
fn register(vfs: &dyn Vfs, dir: &Path) -> Result<Option<Box<dyn FileLock>>> {
    let path = readers_file_name(dir);
    let start = Instant::now();
    loop {
        match vfs.lock_shared(&path) {
            Ok(lock) => return Ok(Some(lock)),
            Err(Error::Locked { .. }) if start.elapsed() < REGISTER_PATIENCE => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e @ Error::Locked { .. }) => return Err(e),
            Err(Error::Io { source, .. })
                if matches!(source.raw_os_error(), Some(libc::EACCES) | Some(libc::EROFS) | Some(libc::ENOENT)) =>
            {
                tracing::warn!(dir = ?dir, error = %source, "cannot register as a reader in READERS; opening unregistered");
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The manifest's state and the log from its head replayed into one memtable (no table is
/// written: the handle writes nothing), and where that view ends.
fn replay_read_only(vfs: &Arc<dyn Vfs>, dir: &Path, opts: &Options) -> Result<(Recovered, ReadOnlyView)> {
    let mut versions = load_manifest(vfs, dir, opts.num_levels)?;
    let head = versions.log_head();
    let logs = recovery::log_files_from(&**vfs, dir, head.file)?;
    if head.offset > 0 && !logs.contains(&head.file) {
        let why = "the log file holding the manifest's log head is missing";
        return Err(Error::corruption(vlog_file_name(dir, head.file), head.offset, why));
    }
    let survey = log::survey::survey(&**vfs, dir, &logs, head, versions.log_durable())?;
    // A read-only handle cannot salvage (that writes the evidence and a new log): damage is
    // refused as the default open refuses it.
    let mode = match opts.recovery_mode {
        RecoveryMode::AbsoluteConsistency => RecoveryMode::AbsoluteConsistency,
        _ => RecoveryMode::TolerateCorruptTail,
    };
    let plan = recovery::plan(dir, &survey, mode)?;
    let mem = Arc::new(Memtable::default());
    let mut applied = None;
    for seg in &plan.apply {
        applied = applied.max(replay_segment(vfs, dir, seg, &mem, opts.min_separated_value_bytes)?);
    }
    let manifest_seq = versions.last_sequence();
    let next = plan.apply.last().and_then(|s| s.next_seq);
    let last_seq = next.map(|n| n - 1).or(applied).unwrap_or(manifest_seq).max(manifest_seq);
    versions.set_last_sequence(last_seq);
    let log_end = plan.apply.last().map_or(head, |s| LogPos { file: s.file, offset: s.end });
    let file: Box<dyn WritableFile> = Box::new(RefuseWrites { path: dir.to_path_buf(), len: log_end.offset });
    let log = LogWriter::new(vfs.clone(), dir, log_end.file, file, log_end.offset, 4096, u64::MAX, last_seq + 1);
    let recovered = Recovered { mem, versions, last_seq, log, report: None };
    Ok((recovered, ReadOnlyView { log_end, sequence: last_seq }))
}

/// The manifest `CURRENT` names, read without writing anything. A writer that just started a
/// new manifest may have deleted the one `CURRENT` named a moment before: read again.
fn load_manifest(vfs: &Arc<dyn Vfs>, dir: &Path, num_levels: usize) -> Result<VersionSet> {
    let mut tries = 0;
    loop {
        match VersionSet::load(vfs.clone(), dir, num_levels) {
            Err(e) if tries + 1 < MANIFEST_TRIES && manifest_vanished(&e) => tries += 1,
            r => return r,
        }
    }
}

fn manifest_vanished(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        Error::Corruption { reason, .. } => reason.contains("which does not exist"),
        _ => false,
    }
}

/// Insert one valid run of the log into `mem`; returns the last sequence number it held.
fn replay_segment(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    seg: &log::Segment,
    mem: &Memtable,
    min_separated: usize,
) -> Result<Option<u64>> {
    let path = vlog_file_name(dir, seg.file);
    let mut reader = LogReader::new(vfs.open_read(&path)?, seg.file, seg.start)?;
    let mut last = None;
    while reader.offset() < seg.end {
        let rec = reader.next_record()?.map_err(|_| {
            Error::corruption(&path, reader.offset(), "the log changed while the database was being opened")
        })?;
        if rec.mark.is_some() {
            continue;
        }
        // Which values stay in the log decides only how the memtable holds them (a read-only
        // handle never flushes it), so its own threshold serves.
        let separated = log::separated_values(&rec.ops, min_separated);
        mem.apply_group(rec.pos, rec.first_seq, &rec.ops, &separated, None);
        last = last.max(Some(rec.first_seq + u64::from(rec.count) - 1));
    }
    Ok(last)
}

/// The cold value files in `dir` (the value-log reader maps them whole).
fn cold_files(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<u64>> {
    Ok(vfs
        .list(dir)?
        .iter()
        .filter_map(|n| crate::filename::parse_file_name(n))
        .filter(|(k, _)| *k == crate::filename::FileKind::Cold)
        .map(|(_, n)| n)
        .collect())
}

/// The read-only handle's stand-in for the log appender's file: every change is refused.
struct RefuseWrites {
    path: PathBuf,
    len: u64,
}

impl WritableFile for RefuseWrites {
    fn append(&mut self, _data: &[u8]) -> Result<()> {
        Err(Error::ReadOnly { path: self.path.clone(), op: "append to the log" })
    }

    fn sync_data(&mut self) -> Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn truncate(&mut self, _len: u64) -> Result<()> {
        Err(Error::ReadOnly { path: self.path.clone(), op: "truncate the log" })
    }
}

/// The log as the value-log reader of a read-only handle sees it: nothing buffered (the
/// values are in the files), and only files below the newest one safe to map (its writer
/// may still cut that one back after a failed sync).
struct ReadOnlyLog {
    extent: Arc<DurableExtent>,
}

impl BufferedOps for ReadOnlyLog {
    fn read_buffered(&self, _file: u64, _offset: u64, _len: usize) -> Option<Vec<u8>> {
        None
    }

    fn extent(&self) -> Arc<DurableExtent> {
        self.extent.clone()
    }
}
