//! The filesystem layer: every file operation of the engine goes through `Vfs`, so tests can
//! swap in an in-memory or fault-injecting implementation without touching the engine.

use std::path::Path;
use std::sync::Arc;

use crate::error::Result;

#[cfg(any(test, feature = "test-util"))]
pub mod fault;
pub mod mem;
pub mod posix;
pub(crate) mod sync_batch;

#[cfg(any(test, feature = "test-util"))]
pub use fault::{CrashMode, FaultFs, FaultKind, FaultOp, FaultRule};
pub use mem::MemFs;
pub(crate) use posix::{page_bytes, pread_fresh};
pub use posix::{FileMapping, PosixFs};
pub(crate) use sync_batch::SyncBatch;

/// Access pattern hints passed to `posix_fadvise` (no-ops where unsupported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// No particular pattern (`POSIX_FADV_NORMAL`).
    Normal,
    /// Scattered reads: no read-ahead (`POSIX_FADV_RANDOM`).
    Random,
    /// Reads in file order: read ahead aggressively (`POSIX_FADV_SEQUENTIAL`).
    Sequential,
    /// The range will be read soon: start reading it into the page cache (`POSIX_FADV_WILLNEED`).
    WillNeed,
    /// The range will not be read again: drop it from the page cache (`POSIX_FADV_DONTNEED`).
    DontNeed,
}

/// Makes the bytes appended to a file durable from another thread than the one appending to
/// it (`WritableFile::syncer`): the log is synced while its writer goes on appending, so an
/// `fdatasync` of megabytes does not hold up every write behind it.
pub trait FileSyncer: Send + Sync {
    /// `fdatasync`: every byte appended before the call is durable once it returns.
    /// `appended` is how many bytes the caller had appended then (what a fault-injecting file
    /// system may count as durable; appends racing with the call may or may not be).
    fn sync_data(&self, appended: u64) -> Result<()>;
}

/// A file opened for appending (logs, tables being built, the manifest).
pub trait WritableFile: Send + Sync {
    /// Append bytes at the end of the file.
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Make appended data durable (`fdatasync`).
    fn sync_data(&mut self) -> Result<()>;
    /// Make data and metadata durable (`fsync`).
    fn sync(&mut self) -> Result<()>;
    /// Start writing the bytes appended so far to the device without waiting for them: a
    /// hint that promises nothing (only `sync` makes bytes durable), so that a later `sync`
    /// finds them written and waits less. Default: nothing.
    fn start_writeback(&mut self) {}
    /// A handle that syncs this file without `&mut self` (see `FileSyncer`); `None` where the
    /// file system has none (the caller then syncs through the file itself).
    fn syncer(&self) -> Option<Arc<dyn FileSyncer>> {
        None
    }
    /// Bytes in the file (including unsynced appends).
    fn len(&self) -> u64;
    /// Whether the file holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Shrink the file to `len` bytes (used to cut a torn log tail before appending).
    fn truncate(&mut self, len: u64) -> Result<()>;
}

/// A file opened for positioned reads; shared between threads.
#[allow(clippy::len_without_is_empty)]
pub trait RandomAccessFile: Send + Sync {
    /// Read up to `buf.len()` bytes at `offset`; returns how many were read (0 at EOF).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// Read `len` bytes at `offset` into a new buffer; `Ok(None)` when the file ends first.
    /// Real files read into the buffer without zero-filling it first (a 100 KB value would
    /// otherwise be written twice).
    fn read_new(&self, offset: u64, len: usize) -> Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let n = self.read_at(offset + done as u64, &mut buf[done..])?;
            if n == 0 {
                return Ok(None);
            }
            done += n;
        }
        Ok(Some(buf))
    }
    /// Read exactly `buf.len()` bytes at `offset` or fail with `Corruption` (short file).
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_at(offset + done as u64, &mut buf[done..])?;
            if n == 0 {
                return Err(crate::error::Error::corruption(
                    self.path(),
                    offset + done as u64,
                    format!("file ends before {} bytes could be read at offset {offset}", buf.len()),
                ));
            }
            done += n;
        }
        Ok(())
    }
    /// Current size of the file in bytes.
    fn len(&self) -> Result<u64>;
    /// Path the file was opened at (for error messages).
    fn path(&self) -> &Path;
    /// Hint the kernel about the access pattern of a range (`len == 0`: to the end).
    fn advise(&self, _offset: u64, _len: u64, _advice: Advice) -> Result<()> {
        Ok(())
    }
    /// The parts of `len` bytes from `offset` (clipped to the file) that the page cache does
    /// not hold, in order, at page granularity. `None` (the default): this handle cannot tell.
    /// A reader that only passes through a range (GC) drops from the cache what it brought in
    /// and leaves what was there before it, which other readers may still want.
    fn uncached_ranges(&self, _offset: u64, _len: u64) -> Option<Vec<std::ops::Range<u64>>> {
        None
    }
    /// The whole file's bytes, when this handle has the file memory-mapped (only handles from
    /// `Vfs::open_read_mapped` may). Readers can then use the bytes in place instead of
    /// copying them out with `read_at`; `None` means "use `read_at`".
    fn mapping(&self) -> Option<&Arc<FileMapping>> {
        None
    }
    /// The OS file descriptor behind this handle, for reads submitted to the kernel directly
    /// (io_uring). `None` (the default) means every read must go through `read_at`, so
    /// in-memory and fault-injecting files see all of them.
    fn raw_fd(&self) -> Option<i32> {
        None
    }
    /// For a handle from `Vfs::open_read_direct`: the alignment its reads need (of file
    /// offsets and lengths, and of buffers in memory), so a read submitted to the kernel
    /// directly can cover the aligned sectors around the bytes. `None`: a page-cache handle.
    fn direct_alignment(&self) -> Option<(u64, usize)> {
        None
    }
}

/// A held database lock; dropping it releases the lock.
pub trait FileLock: Send + Sync {}

/// The filesystem interface of the engine.
pub trait Vfs: Send + Sync + 'static {
    /// Create (or truncate) a file for appending.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Open an existing file for appending at its end (a log reopened after recovery).
    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Open an existing file for positioned reads.
    fn open_read(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>>;
    /// Open an immutable file (a finished table) for reads, memory-mapped when the
    /// implementation supports it (`RandomAccessFile::mapping`). The file must not shrink
    /// while open. Default: `open_read` (no mapping), so wrappers see every read.
    fn open_read_mapped(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        self.open_read(path)
    }
    /// Map a value-log file read-only for scans of cached values, advised for random access
    /// (a fault reads only its page), or `None` (unsupported, no free slot, empty file). The
    /// mapping covers the file as it is now; the caller must only read bytes that will never
    /// be truncated away. Default: `None`, so wrappers see every read.
    fn map_for_reads(&self, _path: &Path) -> Option<Arc<FileMapping>> {
        None
    }
    /// Open a file for reads that bypass the page cache (`O_DIRECT`): for values a lookup
    /// reads once, where the device then reads only the sectors the bytes lie in (a 4 KiB
    /// value at an odd offset spans two pages, twice its size through the page cache) and the
    /// page cache stays with what is read again. `None` where unsupported (the caller reads
    /// through `open_read`). Default: `None`, so wrappers see every read.
    fn open_read_direct(&self, _path: &Path) -> Option<Arc<dyn RandomAccessFile>> {
        None
    }
    /// Atomically replace `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Delete a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Names (not paths) of the entries in a directory.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Create a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Remove an empty directory.
    fn remove_dir(&self, dir: &Path) -> Result<()>;
    /// Make a directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Whether a path exists (file or directory).
    fn exists(&self, path: &Path) -> bool;
    /// Whether a path is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Size of a file in bytes.
    fn file_size(&self, path: &Path) -> Result<u64>;
    /// Bytes the file occupies on the device (`st_blocks * 512`): what `du` shows.
    fn disk_usage(&self, path: &Path) -> Result<u64>;
    /// Take an exclusive lock on `path` (created if missing). Fails with `Error::Locked`
    /// if another process or another handle in this process holds it.
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>>;
    /// Free the byte range of a file without changing its size (`fallocate` PUNCH_HOLE |
    /// KEEP_SIZE). Returns `Ok(false)` when the filesystem cannot punch holes.
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool>;
    /// Give the file `from` a second name `to` (a hard link: both names are one file, and a
    /// change through either is seen through both). Fails if `to` exists. Default: fails with
    /// `Unsupported`, so callers copy instead.
    fn link(&self, from: &Path, _to: &Path) -> Result<()> {
        Err(crate::error::Error::io("link", from, std::io::Error::from(std::io::ErrorKind::Unsupported)))
    }
    /// How many names the file has (`st_nlink`). More than one means a checkpoint shares its
    /// bytes, which must then not be changed in place. Default: 1 (a filesystem without `link`
    /// never shares a file).
    fn link_count(&self, _path: &Path) -> Result<u64> {
        Ok(1)
    }
    /// Take a shared lock on `path` (created if missing) without waiting: any number of shared
    /// holders at once, none while an exclusive holder (`try_lock_exclusive`, `lock`) has it
    /// (`Error::Locked`). Read-only handles register this way. Default: `lock` (one holder).
    fn lock_shared(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        self.lock(path)
    }
    /// Take an exclusive lock on `path` (created if missing) without waiting, for a short hold:
    /// `Error::Locked` while any other holder, shared or exclusive, has it. Default: `lock`.
    fn try_lock_exclusive(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        self.lock(path)
    }
    /// Copy the first `len` bytes of `from` into a new file `to` and sync it (`Corruption` if
    /// `from` is shorter). Default: read and append in 1 MiB pieces.
    fn copy_prefix(&self, from: &Path, to: &Path, len: u64) -> Result<()> {
        let src = self.open_read(from)?;
        let mut dst = self.create(to)?;
        let mut buf = vec![0u8; COPY_CHUNK_BYTES.min(usize::try_from(len).unwrap_or(COPY_CHUNK_BYTES))];
        let mut at = 0u64;
        while at < len {
            let n = buf.len().min(usize::try_from(len - at).unwrap_or(usize::MAX));
            src.read_exact_at(at, &mut buf[..n])?;
            dst.append(&buf[..n])?;
            at += n as u64;
        }
        dst.sync()
    }
}

/// The piece `Vfs::copy_prefix` reads and appends at a time.
const COPY_CHUNK_BYTES: usize = 1 << 20;
