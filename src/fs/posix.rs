//! `PosixFs`: the real filesystem (std::fs + libc for fdatasync, flock, fallocate, fadvise).
//! Writes go straight to the kernel (no userspace buffering: the engine buffers itself).
//! Immutable table files can be opened memory-mapped (`open_read_mapped`), so readers use
//! the page cache's bytes in place instead of a `pread` copy per block.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::Deref;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Advice, FileLock, FileSyncer, RandomAccessFile, Vfs, WritableFile};
use crate::error::{Error, Result};

/// Paths (canonicalized) locked by this process. `flock` locks belong to an open file
/// description, so a second `open` + `flock` in the same process would conflict too — but
/// only if it uses a separate description; this set makes the rule explicit and portable.
static LOCKED_PATHS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Most table files mapped at once, over every database of the process (two at the default
/// `Options::max_open_files`); tables opened beyond it are read with `pread` (and hold a file
/// descriptor), so the kernel's map count (65530 by default, `vm.max_map_count`) stays far.
/// LevelDB's 1000 was too few for light-weight compaction's trees (docs/BENCHMARKS.md §13).
const MAX_MAPPED_FILES: usize = 16384;

/// Live `FileMapping`s of this process.
static MAPPED_FILES: AtomicUsize = AtomicUsize::new(0);

/// Most value-log files mapped at once (`Vfs::map_for_reads`; 64 MiB files: 256 GiB of
/// address space), counted apart so value logs never take the tables' slots.
const MAX_MAPPED_LOGS: usize = 4096;

/// Live value-log mappings of this process.
static MAPPED_LOGS: AtomicUsize = AtomicUsize::new(0);

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct PosixFs;

impl PosixFs {
    /// A handle to the real filesystem (stateless; cheap to create).
    pub fn new() -> Self {
        PosixFs
    }
}

/// Turn a libc return value (`-1` + errno) into an `io::Result`.
fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Offsets and lengths handed to libc must fit `off_t`.
fn to_off(v: u64, path: &Path, op: &'static str) -> Result<libc::off_t> {
    libc::off_t::try_from(v)
        .map_err(|_| Error::io(op, path, io::Error::new(io::ErrorKind::InvalidInput, format!("offset {v} too large"))))
}

/// A write-through append-only file.
struct PosixWritable {
    file: File,
    path: PathBuf,
    len: u64,
    /// Where the last `start_writeback` left off.
    written_back: u64,
}

impl WritableFile for PosixWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.file.write_all(data).map_err(|e| Error::io("append", &self.path, e))?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn sync_data(&mut self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io("fdatasync", &self.path, e))
    }

    fn sync(&mut self) -> Result<()> {
        self.file.sync_all().map_err(|e| Error::io("fsync", &self.path, e))
    }

    fn start_writeback(&mut self) {
        let (Ok(from), Ok(len)) = (libc::off_t::try_from(self.written_back), libc::off_t::try_from(self.len)) else {
            return;
        };
        if len > from {
            // SAFETY: sync_file_range only reads the descriptor, which `self.file` keeps open.
            // A failure is ignored on purpose: this only starts writeback early, and an I/O
            // error it would have met is reported by the `sync` that must follow.
            unsafe { libc::sync_file_range(self.file.as_raw_fd(), from, len - from, libc::SYNC_FILE_RANGE_WRITE) };
            self.written_back = self.len;
        }
    }

    fn syncer(&self) -> Option<Arc<dyn FileSyncer>> {
        let file = self.file.try_clone().ok()?;
        Some(Arc::new(PosixSyncer { file, path: self.path.clone() }))
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(|e| Error::io("truncate", &self.path, e))?;
        self.len = len;
        self.written_back = self.written_back.min(len);
        Ok(())
    }
}

/// A second descriptor of a file being appended to, for `fdatasync` from another thread.
struct PosixSyncer {
    file: File,
    path: PathBuf,
}

impl FileSyncer for PosixSyncer {
    fn sync_data(&self, _appended: u64) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io("fdatasync", &self.path, e))
    }
}

/// A file read with `pread`; shareable between threads.
struct PosixReadable {
    file: File,
    path: PathBuf,
}

/// Read up to `len` bytes at `offset` of `fd` with `preadv2(flags)` into a new buffer without
/// zero-filling it first; the buffer holds what was read. With `flags` 0 it reads on until
/// `len` bytes or the end of the file; otherwise (`RWF_NOWAIT`) it stops at the first short read.
pub(crate) fn pread_fresh(fd: i32, offset: u64, len: usize, flags: i32) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    while buf.len() < len {
        let done = buf.len();
        let at = i64::try_from(offset + done as u64).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: the iovec covers the vector's spare capacity from `done` on (`len - done`
        // bytes, allocated above), which nothing else references while the call runs; the
        // kernel writes at most that many bytes there.
        let iov = libc::iovec { iov_base: unsafe { buf.as_mut_ptr().add(done) }.cast(), iov_len: len - done };
        // SAFETY: `iov` is valid for this call (see above); a bad descriptor only fails it.
        let n = unsafe { libc::preadv2(fd, &iov, 1, at, flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: the kernel initialized the `n` bytes after `done` (n <= len - done).
        unsafe { buf.set_len(done + n as usize) };
        if n == 0 || flags != 0 {
            break;
        }
    }
    Ok(buf)
}

/// A file opened with `O_DIRECT`: each read covers the aligned sectors around the bytes
/// asked for, into an aligned buffer, and copies them out.
struct PosixDirect {
    file: File,
    path: PathBuf,
    /// `O_DIRECT` alignment of file offsets and lengths, and of buffers in memory.
    offset_align: u64,
    mem_align: usize,
}

impl PosixDirect {
    /// Open `path` for direct reads, when the file system says how to align them (`statx`'s
    /// `STATX_DIOALIGN`: 0 or missing means direct I/O is not supported for this file).
    fn open(path: &Path) -> Option<PosixDirect> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::OpenOptionsExt;
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
        // SAFETY: `c_path` is a valid C string and `stx` a writable statx buffer for the call.
        let rc = unsafe { libc::statx(libc::AT_FDCWD, c_path.as_ptr(), 0, libc::STATX_DIOALIGN, stx.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: statx returned 0, so it filled the buffer (zeroed before: fields it did not
        // fill read as 0).
        let stx = unsafe { stx.assume_init() };
        if stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 || stx.stx_dio_mem_align == 0 {
            return None;
        }
        let file = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).ok()?;
        Some(PosixDirect {
            file,
            path: path.to_path_buf(),
            offset_align: u64::from(stx.stx_dio_offset_align),
            mem_align: stx.stx_dio_mem_align as usize,
        })
    }
}

impl RandomAccessFile for PosixDirect {
    fn raw_fd(&self) -> Option<i32> {
        Some(self.file.as_raw_fd())
    }

    fn direct_alignment(&self) -> Option<(u64, usize)> {
        Some((self.offset_align, self.mem_align))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let a = self.offset_align;
        let start = offset / a * a;
        let end = (offset + buf.len() as u64).div_ceil(a) * a;
        let span = usize::try_from(end - start).map_err(|_| {
            Error::io("pread", &self.path, io::Error::new(io::ErrorKind::InvalidInput, "read too large"))
        })?;
        // An aligned window of a zeroed vector (no allocator call with a custom layout).
        let mut raw = vec![0u8; span + self.mem_align];
        let skip = raw.as_ptr().align_offset(self.mem_align);
        let window = &mut raw[skip..skip + span];
        let mut got = 0;
        while got < span {
            match self.file.read_at(&mut window[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("pread", &self.path, e)),
            }
            // A short read ends at the end of the file; reading on past it returns 0.
            if got % self.offset_align as usize != 0 {
                break;
            }
        }
        let lead = (offset - start) as usize;
        let n = got.saturating_sub(lead).min(buf.len());
        buf[..n].copy_from_slice(&window[lead..lead + n]);
        Ok(n)
    }

    fn len(&self) -> Result<u64> {
        self.file.metadata().map(|m| m.len()).map_err(|e| Error::io("fstat", &self.path, e))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl RandomAccessFile for PosixReadable {
    fn read_new(&self, offset: u64, len: usize) -> Result<Option<Vec<u8>>> {
        match pread_fresh(self.file.as_raw_fd(), offset, len, 0) {
            Ok(buf) => Ok((buf.len() == len).then_some(buf)),
            Err(e) => Err(Error::io("pread", &self.path, e)),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        loop {
            match self.file.read_at(buf, offset) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("pread", &self.path, e)),
            }
        }
    }

    fn len(&self) -> Result<u64> {
        self.file.metadata().map(|m| m.len()).map_err(|e| Error::io("fstat", &self.path, e))
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn advise(&self, offset: u64, len: u64, advice: Advice) -> Result<()> {
        fadvise(&self.file, &self.path, offset, len, advice)
    }

    fn uncached_ranges(&self, offset: u64, len: u64) -> Option<Vec<std::ops::Range<u64>>> {
        uncached_ranges(&self.file, offset, len)
    }

    fn raw_fd(&self) -> Option<i32> {
        Some(self.file.as_raw_fd())
    }
}

/// The page size: the unit of the page cache, `mincore` and `fadvise` (4 KiB where the system
/// will not say).
pub(crate) fn page_bytes() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf takes no pointers.
    *PAGE.get_or_init(|| {
        u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|&p| p > 0).unwrap_or(4096)
    })
}

/// `mincore` over `[offset, offset + len)` of `file` (clipped to its size), through a
/// transient mapping that is never read, so asking faults nothing in. `None` when the kernel
/// will not tell (the mapping or the call failed).
fn uncached_ranges(file: &File, offset: u64, len: u64) -> Option<Vec<std::ops::Range<u64>>> {
    let page = page_bytes();
    let end = offset.saturating_add(len).min(file.metadata().ok()?.len());
    let start = offset / page * page;
    if offset >= end {
        return Some(Vec::new());
    }
    let map_len = usize::try_from(end - start).ok()?;
    // A raw mapping: no `&[u8]` is ever made over it (mincore only looks at its page tables),
    // so a concurrent truncation (SIGBUS) or write cannot be observed through it.
    let map = memmap2::MmapOptions::new().offset(start).len(map_len).map_raw_read_only(file).ok()?;
    // SAFETY: `map` is a live mapping of `map_len` bytes from a page-aligned start (`start` is
    // a multiple of the page size).
    let resident = unsafe { mincore_pages(map.as_ptr(), map_len) }?;
    let mut out: Vec<std::ops::Range<u64>> = Vec::new();
    for (i, _) in resident.iter().enumerate().filter(|(_, &b)| b & 1 == 0) {
        let s = (start + i as u64 * page).max(offset);
        let e = (start + (i as u64 + 1) * page).min(end);
        match out.last_mut() {
            Some(last) if last.end == s => last.end = e,
            _ => out.push(s..e),
        }
    }
    Some(out)
}

/// One byte per page of the `len` bytes mapped at `addr` whose low bit says the page is in the
/// page cache (`mincore`: it looks at page tables and the cache only, faulting nothing in).
/// `None` when the kernel will not tell.
///
/// # Safety
/// `addr` must be page-aligned and `[addr, addr + len)` lie within one live mapping.
unsafe fn mincore_pages(addr: *const u8, len: usize) -> Option<Vec<u8>> {
    let mut flags = vec![0u8; len.div_ceil(page_bytes() as usize)];
    // SAFETY: the caller vouches for the range; `flags` has a byte per page of it, as mincore
    // requires.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, flags.as_mut_ptr()) };
    (r == 0).then_some(flags)
}

/// `posix_fadvise` on `file`'s descriptor.
fn fadvise(file: &File, path: &Path, offset: u64, len: u64, advice: Advice) -> Result<()> {
    let advice = match advice {
        Advice::Normal => libc::POSIX_FADV_NORMAL,
        Advice::Random => libc::POSIX_FADV_RANDOM,
        Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
        Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
        Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
    };
    let off = to_off(offset, path, "fadvise")?;
    let len = to_off(len, path, "fadvise")?;
    // SAFETY: the fd is owned by `file` and stays open for the call; fadvise only reads its
    // integer arguments.
    let ret = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, advice) };
    // posix_fadvise returns the error number instead of setting errno; it is a hint, so
    // "unsupported" is not an error.
    match ret {
        0 | libc::ENOSYS | libc::EOPNOTSUPP => Ok(()),
        e => Err(Error::io("fadvise", path, io::Error::from_raw_os_error(e))),
    }
}

/// A read-only mapping of a whole file. Holds one of the `MAX_MAPPED_FILES` slots until
/// dropped (by the last reader: blocks of a table share its mapping through `Arc`).
pub struct FileMapping {
    map: memmap2::Mmap,
    slots: &'static AtomicUsize,
}

impl Deref for FileMapping {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl FileMapping {
    /// Whether every page of `len` bytes from `offset` is in the page cache: `mincore` on this
    /// mapping, which looks the pages up and faults nothing in. `None` when it will not tell.
    pub fn resident(&self, offset: u64, len: u64) -> Option<bool> {
        let page = page_bytes() as usize;
        let start = usize::try_from(offset).ok()?.min(self.map.len()) / page * page;
        let end = usize::try_from(offset.saturating_add(len)).ok()?.min(self.map.len());
        if start >= end {
            return Some(true);
        }
        // SAFETY: `[start, end)` lies within this live mapping and starts on a page boundary
        // (the mapping does, and `start` is a multiple of the page size).
        let flags = unsafe { mincore_pages(self.map.as_ptr().add(start), end - start) }?;
        Some(flags.iter().all(|f| f & 1 == 1))
    }

    /// `madvise` over `len` bytes from `offset` (0: to the end), `fadvise`'s counterpart for a
    /// file read through its mapping. `DontNeed` is skipped: on a mapping it unmaps the pages,
    /// it does not drop them from the page cache as `fadvise` does.
    fn advise(&self, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
        let advice = match advice {
            Advice::Normal => memmap2::Advice::Normal,
            Advice::Random => memmap2::Advice::Random,
            Advice::Sequential => memmap2::Advice::Sequential,
            Advice::WillNeed => memmap2::Advice::WillNeed,
            Advice::DontNeed => return Ok(()),
        };
        let start = usize::try_from(offset).map_or(self.map.len(), |o| o.min(self.map.len()));
        let room = self.map.len() - start;
        let len = match usize::try_from(len) {
            Ok(0) | Err(_) => room,
            Ok(n) => n.min(room),
        };
        if len == 0 {
            return Ok(());
        }
        self.map.advise_range(advice, start, len)
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        self.slots.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for FileMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileMapping").field("len", &self.map.len()).finish()
    }
}

/// Take one of `limit` slots of `slots`; false when all are taken.
fn reserve_slot(slots: &AtomicUsize, limit: usize) -> bool {
    slots.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1)).is_ok()
}

/// Map all of `file` read-only, or `None` (empty file, no free slot, mmap failed): the
/// caller then reads with `pread`, which is always correct, only slower.
fn map_file(file: &File, slots: &'static AtomicUsize, limit: usize) -> Option<FileMapping> {
    let len = file.metadata().ok()?.len();
    if len == 0 || usize::try_from(len).is_err() || !reserve_slot(slots, limit) {
        return None;
    }
    // SAFETY: the mapped bytes do not change under the `&[u8]` handed out and no access runs
    // past the end of the file (SIGBUS): a table (`Vfs::open_read_mapped`) is never truncated
    // and its bytes up to any length a manifest recorded are never written again (light-weight
    // compaction only appends after them); value-log files (`Vfs::map_for_reads`) are read
    // through a mapping only where `log::DurableExtent` says no truncation can reach or in
    // cold files, which nothing truncates (`VlogReader::never_truncated`), and GC
    // punches a range (it then reads as zeros) only once no registered reader can read it. Deleting the
    // file does not invalidate the mapping: its pages live until unmapped.
    match unsafe { memmap2::Mmap::map(file) } {
        Ok(map) => Some(FileMapping { map, slots }),
        Err(e) => {
            slots.fetch_sub(1, Ordering::Relaxed);
            tracing::debug!("mmap failed, reading with pread: {e}");
            None
        }
    }
}

/// An immutable file read through its memory mapping.
struct PosixMapped {
    // No file descriptor: the mapping outlives it, so an open table costs a mapping slot and
    // no descriptor, and the table cache can keep every table of a large tree open without
    // running into the process's descriptor limit.
    path: PathBuf,
    map: Arc<FileMapping>,
}

impl RandomAccessFile for PosixMapped {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let start = usize::try_from(offset).map_or(self.map.len(), |o| o.min(self.map.len()));
        let n = buf.len().min(self.map.len() - start);
        buf[..n].copy_from_slice(&self.map[start..start + n]);
        Ok(n)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.map.len() as u64)
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn advise(&self, offset: u64, len: u64, advice: Advice) -> Result<()> {
        self.map.advise(offset, len, advice).map_err(|e| Error::io("madvise", &self.path, e))
    }

    fn mapping(&self) -> Option<&Arc<FileMapping>> {
        Some(&self.map)
    }
}

/// The database lock: an `flock`ed file plus an entry in `LOCKED_PATHS`.
struct PosixLock {
    // Closing the file releases the flock.
    _file: File,
    key: PathBuf,
}

impl FileLock for PosixLock {}

impl Drop for PosixLock {
    fn drop(&mut self) {
        LOCKED_PATHS.lock().remove(&self.key);
    }
}

/// A shared or short exclusive `flock` (`Vfs::lock_shared`, `Vfs::try_lock_exclusive`): the
/// lock belongs to the open file, so closing it releases the lock. Unlike `PosixLock` no
/// in-process reservation: two descriptions of one file in this process conflict as two
/// processes would (`flock` semantics), which is what read-only handles and the writer's
/// probe need.
struct FlockHold {
    _file: File,
}

impl FileLock for FlockHold {}

/// Open `path` for `flock`, creating it when the directory allows; in a directory the caller
/// cannot write (a read-only mount) an existing file is opened read-only (`flock` needs no
/// write access).
fn open_lock_file(path: &Path) -> Result<File> {
    let rw = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path);
    match rw {
        Ok(f) => Ok(f),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EROFS)) => {
            File::open(path).map_err(|_| Error::io("lock", path, e))
        }
        Err(e) => Err(Error::io("lock", path, e)),
    }
}

/// `flock` `path` in `mode` (`LOCK_SH` or `LOCK_EX`) without waiting.
fn flock_now(path: &Path, mode: libc::c_int) -> Result<Box<dyn FileLock>> {
    let file = open_lock_file(path)?;
    // SAFETY: the fd is owned by `file`, open for the duration of the call.
    let ret = unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) };
    match check(ret) {
        Ok(()) => Ok(Box::new(FlockHold { _file: file })),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Err(Error::Locked { path: path.to_path_buf() }),
        Err(e) => Err(Error::io("flock", path, e)),
    }
}

impl Vfs for PosixFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io("create", path, e))?;
        Ok(Box::new(PosixWritable { file, path: path.to_path_buf(), len: 0, written_back: 0 }))
    }

    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().append(true).open(path).map_err(|e| Error::io("open_append", path, e))?;
        let len = file.metadata().map_err(|e| Error::io("fstat", path, e))?.len();
        Ok(Box::new(PosixWritable { file, path: path.to_path_buf(), len, written_back: len }))
    }

    fn open_read(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let file = File::open(path).map_err(|e| Error::io("open_read", path, e))?;
        Ok(Arc::new(PosixReadable { file, path: path.to_path_buf() }))
    }

    fn open_read_mapped(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let file = File::open(path).map_err(|e| Error::io("open_read", path, e))?;
        let path = path.to_path_buf();
        Ok(match map_file(&file, &MAPPED_FILES, MAX_MAPPED_FILES) {
            Some(map) => Arc::new(PosixMapped { path, map: Arc::new(map) }),
            None => Arc::new(PosixReadable { file, path }),
        })
    }

    fn map_for_reads(&self, path: &Path) -> Option<Arc<FileMapping>> {
        let file = File::open(path).ok()?;
        let map = map_file(&file, &MAPPED_LOGS, MAX_MAPPED_LOGS)?;
        // Values are scattered: a fault should read its own page, not megabytes around it.
        let _ = map.map.advise(memmap2::Advice::Random);
        Some(Arc::new(map))
    }

    fn open_read_direct(&self, path: &Path) -> Option<Arc<dyn RandomAccessFile>> {
        PosixDirect::open(path).map(|f| Arc::new(f) as Arc<dyn RandomAccessFile>)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("remove", path, e))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let entry = entry.map_err(|e| Error::io("list", dir, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create_dir_all", dir, e))
    }

    fn remove_dir(&self, dir: &Path) -> Result<()> {
        std::fs::remove_dir(dir).map_err(|e| Error::io("remove_dir", dir, e))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let d = File::open(dir).map_err(|e| Error::io("open_dir", dir, e))?;
        d.sync_all().map_err(|e| Error::io("sync_dir", dir, e))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        std::fs::metadata(path).map(|m| m.len()).map_err(|e| Error::io("stat", path, e))
    }

    fn disk_usage(&self, path: &Path) -> Result<u64> {
        std::fs::metadata(path).map(|m| m.blocks() * 512).map_err(|e| Error::io("stat", path, e))
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("lock", path, e))?;
        let key = std::fs::canonicalize(path).map_err(|e| Error::io("lock", path, e))?;
        // Reserve the path in-process first, so two handles of this process conflict even
        // though each would get its own open file description.
        if !LOCKED_PATHS.lock().insert(key.clone()) {
            return Err(Error::Locked { path: path.to_path_buf() });
        }
        // SAFETY: the fd is owned by `file`, open for the duration of the call.
        let ret = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if let Err(e) = check(ret) {
            LOCKED_PATHS.lock().remove(&key);
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                Error::Locked { path: path.to_path_buf() }
            } else {
                Error::io("flock", path, e)
            });
        }
        Ok(Box::new(PosixLock { _file: file, key }))
    }

    fn link(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::hard_link(from, to).map_err(|e| Error::io("link", from, e))
    }

    fn link_count(&self, path: &Path) -> Result<u64> {
        std::fs::metadata(path).map(|m| m.nlink()).map_err(|e| Error::io("stat", path, e))
    }

    fn lock_shared(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        flock_now(path, libc::LOCK_SH)
    }

    fn try_lock_exclusive(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        flock_now(path, libc::LOCK_EX)
    }

    /// `copy_file_range` through `std::io::copy`: the kernel copies (or shares the extents, on
    /// filesystems that reflink), nothing passes through this process.
    fn copy_prefix(&self, from: &Path, to: &Path, len: u64) -> Result<()> {
        let src = File::open(from).map_err(|e| Error::io("open_read", from, e))?;
        let mut dst =
            OpenOptions::new().write(true).create_new(true).open(to).map_err(|e| Error::io("create", to, e))?;
        let copied = io::copy(&mut io::Read::take(&src, len), &mut dst).map_err(|e| Error::io("copy", from, e))?;
        if copied < len {
            let why = format!("file ends after {copied} bytes; {len} were to be copied");
            return Err(Error::corruption(from, copied, why));
        }
        dst.sync_data().map_err(|e| Error::io("fdatasync", to, e))
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        if len == 0 {
            return Ok(true);
        }
        let file = OpenOptions::new().write(true).open(path).map_err(|e| Error::io("punch_hole", path, e))?;
        let off = to_off(offset, path, "punch_hole")?;
        let len = to_off(len, path, "punch_hole")?;
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: the fd is owned by `file`, open for the duration of the call; fallocate
        // only reads its integer arguments.
        let ret = unsafe { libc::fallocate(file.as_raw_fd(), mode, off, len) };
        match check(ret) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)) => Ok(false),
            Err(e) => Err(Error::io("punch_hole", path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(fs: &PosixFs, path: &Path, data: &[u8]) -> Result<()> {
        let mut f = fs.create(path)?;
        f.append(data)?;
        f.sync_data()
    }

    #[test]
    fn uncached_ranges_name_the_dropped_pages_clipped_to_the_asked_range_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (fs, path) = (PosixFs::new(), dir.path().join("f"));
        let page = page_bytes();
        write(&fs, &path, &vec![7u8; (10 * page + 100) as usize]).unwrap();
        let f = fs.open_read(&path).unwrap();
        let len = f.len().unwrap();
        f.advise(0, 0, Advice::DontNeed).unwrap();
        if f.uncached_ranges(0, len).unwrap().is_empty() {
            eprintln!("skipped: the filesystem under {} ignores DONTNEED", dir.path().display());
            return;
        }
        assert_eq!(f.uncached_ranges(0, len).unwrap(), vec![0..len], "all dropped, up to the file's end");
        // Pages 3 and 4 read back in (asked for with WILLNEED, then read to wait for them).
        f.advise(3 * page, 2 * page, Advice::WillNeed).unwrap();
        let mut buf = vec![0u8; 2 * page as usize];
        f.read_exact_at(3 * page, &mut buf).unwrap();
        assert_eq!(f.uncached_ranges(0, len).unwrap(), vec![0..3 * page, 5 * page..len]);
        // Clipped to the range asked for (which need not start on a page) and to the file.
        assert_eq!(f.uncached_ranges(page + 10, 3 * page).unwrap(), vec![page + 10..3 * page]);
        assert_eq!(f.uncached_ranges(9 * page, u64::MAX).unwrap(), vec![9 * page..len]);
        assert_eq!(f.uncached_ranges(len + 5, 100).unwrap(), vec![], "past the end");
        assert_eq!(f.uncached_ranges(3 * page, 0).unwrap(), vec![], "nothing asked");
    }

    fn read_all(fs: &PosixFs, path: &Path) -> Result<Vec<u8>> {
        let f = fs.open_read(path)?;
        let mut buf = vec![0u8; f.len()? as usize];
        f.read_exact_at(0, &mut buf)?;
        Ok(buf)
    }

    #[test]
    fn appended_bytes_read_back_at_offsets() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("a.log");
        let mut f = fs.create(&p)?;
        f.append(b"hello ")?;
        // A writeback hint in the middle changes nothing a reader or a later append sees.
        f.start_writeback();
        f.append(b"world")?;
        assert_eq!(f.len(), 11);
        f.start_writeback();
        f.sync()?;
        let r = fs.open_read(&p)?;
        let mut buf = [0u8; 5];
        r.read_exact_at(6, &mut buf)?;
        assert_eq!(&buf, b"world");
        assert_eq!(r.read_at(11, &mut buf)?, 0, "read at EOF returns 0");
        assert!(r.read_exact_at(8, &mut buf).unwrap_err().is_corruption());
        r.advise(0, 0, Advice::Sequential)?;
        assert_eq!(fs.file_size(&p)?, 11);
        Ok(())
    }

    #[test]
    fn reopened_for_append_continues_at_end_and_truncate_cuts() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("x");
        write(&fs, &p, b"abcdef")?;
        let mut f = fs.open_append(&p)?;
        assert_eq!(f.len(), 6);
        f.truncate(3)?;
        f.append(b"XY")?;
        assert_eq!(read_all(&fs, &p)?, b"abcXY");
        // create truncates an existing file.
        let f = fs.create(&p)?;
        assert!(f.is_empty());
        assert_eq!(fs.file_size(&p)?, 0);
        Ok(())
    }

    #[test]
    fn rename_replaces_and_remove_deletes() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write(&fs, &a, b"new")?;
        write(&fs, &b, b"old contents")?;
        fs.rename(&a, &b)?;
        fs.sync_dir(dir.path())?;
        assert!(!fs.exists(&a));
        assert_eq!(read_all(&fs, &b)?, b"new");
        fs.remove(&b)?;
        assert!(!fs.exists(&b));
        let err = fs.remove(&b).unwrap_err();
        assert!(matches!(err, Error::Io { op: "remove", .. }), "{err}");
        assert!(fs.open_read(&b).is_err());
        Ok(())
    }

    #[test]
    fn dirs_are_created_listed_and_removed() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let sub = dir.path().join("x/y");
        fs.create_dir_all(&sub)?;
        assert!(fs.is_dir(&sub));
        write(&fs, &sub.join("f1"), b"1")?;
        write(&fs, &sub.join("f2"), b"2")?;
        let mut names = fs.list(&sub)?;
        names.sort();
        assert_eq!(names, ["f1", "f2"]);
        assert!(fs.remove_dir(&sub).is_err(), "non-empty dir must not be removed");
        fs.remove(&sub.join("f1"))?;
        fs.remove(&sub.join("f2"))?;
        fs.remove_dir(&sub)?;
        assert!(!fs.exists(&sub));
        assert!(fs.list(&sub).is_err());
        Ok(())
    }

    /// A second lock from this process fails via `LOCKED_PATHS`; a second *process* fails
    /// because `flock(LOCK_EX|LOCK_NB)` is held on the file for as long as the lock lives.
    #[test]
    fn second_lock_of_same_path_fails_until_first_is_dropped() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("LOCK");
        let first = fs.lock(&p)?;
        // A different spelling of the same path is the same lock.
        let alias = dir.path().join(".").join("LOCK");
        assert!(matches!(fs.lock(&alias), Err(Error::Locked { .. })));
        // The flock itself is held: a fresh open file description cannot take it.
        let f = File::open(&p).map_err(|e| Error::io("open", &p, e))?;
        // SAFETY: fd owned by `f`, open for the call.
        let ret = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(ret, -1, "flock must be held by the first lock");
        drop(first);
        let again = fs.lock(&p)?;
        drop(again);
        Ok(())
    }

    /// Cross-process exclusion, checked with util-linux `flock(1)` (skipped if absent).
    #[test]
    fn lock_held_here_blocks_another_process() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("LOCK");
        let other = |p: &Path| std::process::Command::new("flock").arg("-n").arg(p).arg("true").status();
        let lock = fs.lock(&p)?;
        let Ok(status) = other(&p) else {
            eprintln!("flock(1) not available; skipping");
            return Ok(());
        };
        assert!(!status.success(), "another process took a held lock");
        drop(lock);
        let status = other(&p).map_err(|e| Error::io("spawn", "flock", e))?;
        assert!(status.success(), "lock not released on drop");
        Ok(())
    }

    #[test]
    fn shared_locks_coexist_and_keep_an_exclusive_probe_out_until_the_last_goes() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("READERS");
        let probe = fs.try_lock_exclusive(&p)?;
        assert!(matches!(fs.lock_shared(&p), Err(Error::Locked { .. })), "a reader registered during a probe");
        drop(probe);
        let (a, b) = (fs.lock_shared(&p)?, fs.lock_shared(&p)?);
        assert!(matches!(fs.try_lock_exclusive(&p), Err(Error::Locked { .. })));
        drop(a);
        assert!(matches!(fs.try_lock_exclusive(&p), Err(Error::Locked { .. })), "one reader is still there");
        drop(b);
        drop(fs.try_lock_exclusive(&p)?);
        Ok(())
    }

    #[test]
    fn a_link_shares_the_file_and_counts_as_a_second_name() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write(&fs, &a, b"shared bytes")?;
        assert_eq!(fs.link_count(&a)?, 1);
        fs.link(&a, &b)?;
        assert_eq!((fs.link_count(&a)?, fs.link_count(&b)?), (2, 2));
        assert_eq!(read_all(&fs, &b)?, b"shared bytes");
        assert!(fs.link(&a, &b).is_err(), "linking over an existing name must fail");
        fs.remove(&a)?;
        assert_eq!(fs.link_count(&b)?, 1);
        Ok(())
    }

    #[test]
    fn copy_prefix_copies_exactly_the_prefix_and_refuses_a_short_source() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        write(&fs, &a, &data)?;
        fs.copy_prefix(&a, &b, 200_001)?;
        assert_eq!(read_all(&fs, &b)?, &data[..200_001]);
        assert!(fs.copy_prefix(&a, &c, 400_000).is_err_and(|e| e.is_corruption()));
        assert!(fs.copy_prefix(&a, &b, 10).is_err(), "the target must be new");
        Ok(())
    }

    #[test]
    fn punch_hole_reduces_disk_usage_but_not_size() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("vlog");
        write(&fs, &p, &vec![7u8; 1 << 20])?;
        let before = fs.disk_usage(&p)?;
        assert!(before >= 1 << 20, "usage {before}");
        if !fs.punch_hole(&p, 0, 512 << 10)? {
            eprintln!("filesystem cannot punch holes; skipping");
            return Ok(());
        }
        let after = fs.disk_usage(&p)?;
        assert!(after <= before - (500 << 10), "before {before}, after {after}");
        assert_eq!(fs.file_size(&p)?, 1 << 20);
        let data = read_all(&fs, &p)?;
        assert!(data[..512 << 10].iter().all(|&b| b == 0));
        assert!(data[512 << 10..].iter().all(|&b| b == 7));
        Ok(())
    }

    #[test]
    fn mapped_file_reads_like_pread_and_survives_deletion() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("000001.sst");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        write(&fs, &p, &data)?;
        let r = fs.open_read_mapped(&p)?;
        assert_eq!(r.mapping().map(|m| &m[..]), Some(&data[..]));
        assert!(fs.open_read(&p)?.mapping().is_none(), "plain open_read never maps");
        assert_eq!(r.len()?, 10_000);
        let mut buf = [0u8; 100];
        r.read_exact_at(9_000, &mut buf)?;
        assert_eq!(&buf[..], &data[9_000..9_100]);
        assert_eq!(r.read_at(9_950, &mut buf)?, 50, "short read at the end");
        assert_eq!(r.read_at(10_000, &mut buf)?, 0, "read at EOF returns 0");
        assert_eq!(r.read_at(u64::MAX, &mut buf)?, 0);
        assert!(r.read_exact_at(9_950, &mut buf).unwrap_err().is_corruption());
        r.advise(0, 0, Advice::Random)?;
        fs.remove(&p)?;
        r.read_exact_at(0, &mut buf)?;
        assert_eq!(&buf[..], &data[..100], "a deleted file stays readable while mapped");
        Ok(())
    }

    #[test]
    fn empty_file_is_read_without_a_mapping() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("empty");
        write(&fs, &p, b"")?;
        let r = fs.open_read_mapped(&p)?;
        assert!(r.mapping().is_none());
        assert_eq!(r.read_at(0, &mut [0u8; 4])?, 0);
        Ok(())
    }

    /// Beyond the limit files are read with pread; a dropped mapping frees its slot.
    #[test]
    fn mapped_file_limit_falls_back_to_pread_until_a_mapping_is_dropped() -> Result<()> {
        static SLOTS: AtomicUsize = AtomicUsize::new(0);
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", "/tmp", e))?;
        let fs = PosixFs::new();
        let p = dir.path().join("t");
        write(&fs, &p, b"table bytes")?;
        let open = || File::open(&p).map_err(|e| Error::io("open", &p, e));
        let first = map_file(&open()?, &SLOTS, 2).map(Arc::new);
        let second = map_file(&open()?, &SLOTS, 2);
        assert!(first.is_some() && second.is_some());
        assert!(map_file(&open()?, &SLOTS, 2).is_none(), "limit reached");
        let shared = first.clone();
        drop(first);
        assert!(map_file(&open()?, &SLOTS, 2).is_none(), "a shared mapping still holds its slot");
        drop(shared);
        let third = map_file(&open()?, &SLOTS, 2);
        assert_eq!(third.as_deref(), Some(&b"table bytes"[..]));
        assert_eq!(SLOTS.load(Ordering::Relaxed), 2);
        drop((second, third));
        assert_eq!(SLOTS.load(Ordering::Relaxed), 0);
        Ok(())
    }

    #[test]
    fn errors_name_the_operation_and_path() {
        let fs = PosixFs::new();
        let p = Path::new("/nonexistent-wisckey-dir/file");
        match fs.open_read(p) {
            Err(Error::Io { op, path, .. }) => {
                assert_eq!(op, "open_read");
                assert_eq!(path, p);
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("opened a missing file"),
        }
    }
}
