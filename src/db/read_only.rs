//! `Db::open_read_only`: a handle that reads the database as it was when it opened, while a
//! writer (another process, or a handle of this one) goes on. It takes no `LOCK`; it registers
//! with a shared lock on `READERS` (held for its lifetime: the writer deletes and punches
//! nothing meanwhile, `sharing.rs`), reads the manifest, and replays the log from the head
//! into one in-memory memtable, stopping at the last whole record group (a group the writer
//! is appending reads as a torn tail): `recovery::recover_read_only`. It writes nothing, runs
//! no background thread, and refuses every call that would change the database
//! (`Error::ReadOnly`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::recovery;
use super::sharing::{ReadOnlyView, Sharing};
use super::{file_readers, validate_options, Db, DbInner, Parts, DEFAULT_KEYSPACE_NAME};
use crate::error::{Error, Result};
use crate::filename::readers_file_name;
use crate::fs::{FileLock, Vfs, WritableFile};
use crate::log::{BufferedOps, DurableExtent, LogPos, LogWriter};
use crate::options::Options;

/// How long an open waits to register while the writer holds `READERS` (it does only while it
/// deletes or punches: milliseconds).
const REGISTER_PATIENCE: Duration = Duration::from_secs(5);

impl Db {
    /// Open the database in `path` for reading only. The handle sees the database as it was
    /// when it opened (the manifest, and every whole record group of the log), while the
    /// process or handle that has it open for writing goes on; reopen to see newer writes.
    /// What it sees is what had reached the files: every synced write, and an unsynced one once
    /// its writer handed its log buffer to the file (a sync, a flush, or a full buffer).
    /// It takes no lock a writer needs, so it opens beside one, and several open at once.
    ///
    /// Writes, flushes, compactions, GC and keyspace changes through it fail with
    /// `Error::ReadOnly`; `checkpoint` and `backup` work (copying the state it sees). While a
    /// read-only handle is open, the writer deletes no file and punches no hole (obsolete files
    /// and collected space come back once the last one closes): keep such handles short-lived.
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
        let (table_cache, vlog) = file_readers(&vfs, &dir, &options);
        let (recovered, log_end) = recovery::recover_read_only(&vfs, &dir, options)?;
        for n in cold_files(&*vfs, &dir)? {
            vlog.add_cold(n);
        }
        vlog.attach_log(Arc::new(ReadOnlyLog { extent: Arc::new(DurableExtent::sealed_below(log_end.file)) }));
        let view = ReadOnlyView { log_end, sequence: recovered.last_seq };
        let inner = DbInner::assemble(Parts { dir, table_cache, vlog, sharing: Sharing::read_only(view) }, recovered);
        let default = inner.keyspace(DEFAULT_KEYSPACE_NAME)?;
        tracing::debug!(dir = ?inner.dir, sequence = view.sequence, "opened read-only");
        Ok(Db {
            inner,
            default,
            threads: Mutex::new(Vec::new()),
            lock: Mutex::new(registration),
            recovery_report: None,
        })
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

/// The read-only handle's stand-in for the log appender: a writer over a file that refuses
/// every change, at the end of the view (`end`), numbering on after `last_seq`.
pub(super) fn refusing_log(vfs: &Arc<dyn Vfs>, dir: &Path, end: LogPos, last_seq: u64) -> LogWriter {
    let file: Box<dyn WritableFile> = Box::new(RefuseWrites { path: dir.to_path_buf(), len: end.offset });
    LogWriter::new(vfs.clone(), dir, end.file, file, end.offset, 4096, u64::MAX, last_seq + 1)
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

/// The file under a read-only handle's log appender: every change is refused.
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
