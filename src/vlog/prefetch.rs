//! Reads many value-log ops at once. Each read is handed to a background engine — an io_uring
//! ring when the kernel allows it and the file has a descriptor (`RandomAccessFile::raw_fd`),
//! otherwise a small fixed pool of threads doing `pread` through the `Vfs` handle — and the
//! caller collects the bytes later through a `PendingRead`. Verifying the bytes is the
//! caller's job (`VlogReader::verify_op`), exactly as for a synchronous read.

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::request::{Completion, ReadBytes, ReadRequest};
use super::uring::{self, UringEngine};
use crate::fs::RandomAccessFile;
use crate::value::Value;

/// Threads of the `pread` pool: enough to keep a device's queue busy for one or two scans,
/// few enough to cost nothing when idle.
const POOL_THREADS: usize = 8;
/// Reads waiting for an engine; a submitter blocks when the queue is full.
const QUEUE_DEPTH: usize = 1024;

/// A read in flight, or one already served from the page cache. Dropping it abandons the
/// result (the engine still completes the read).
pub struct PendingRead {
    state: ReadState,
}

enum ReadState {
    /// The value cache held the value: no read at all.
    Hit(Value),
    Cached(Vec<u8>),
    /// The file ends before the bytes do (they are still in the log writer's buffer).
    PastEnd,
    Waiting(Arc<Completion>),
}

impl PendingRead {
    /// A read already done, counted as a page-cache hit or not (tests of read-ahead policy).
    #[cfg(test)]
    pub(crate) fn done_for_test(bytes: Vec<u8>, cached: bool) -> PendingRead {
        if cached {
            return PendingRead { state: ReadState::Cached(bytes) };
        }
        let done = Arc::new(Completion::default());
        done.finish(Ok(Some(bytes)));
        PendingRead { state: ReadState::Waiting(done) }
    }

    /// A value the value cache held (verified when it entered).
    pub(crate) fn hit(value: Value) -> PendingRead {
        PendingRead { state: ReadState::Hit(value) }
    }

    /// Whether the value came from the value cache (says nothing about the page cache).
    pub fn is_hit(&self) -> bool {
        matches!(self.state, ReadState::Hit(_))
    }

    /// The value, when the value cache held it; the read to wait for otherwise.
    pub fn into_hit(self) -> std::result::Result<Value, PendingRead> {
        match self.state {
            ReadState::Hit(value) => Ok(value),
            state => Err(PendingRead { state }),
        }
    }

    /// Whether the bytes were in the page cache (or the value cache), so the read cost no more
    /// than a plain `pread` and reading ahead gained nothing.
    pub fn was_cached(&self) -> bool {
        matches!(self.state, ReadState::Hit(_) | ReadState::Cached(_) | ReadState::PastEnd)
    }

    /// Whether the file ended before the bytes (they are in the log writer's buffer): no
    /// device read, but nothing learned about the page cache either.
    pub fn past_end(&self) -> bool {
        matches!(self.state, ReadState::PastEnd)
    }

    /// Block until the read is done. A cache hit (`into_hit`) has no op bytes to give: it
    /// answers with its value's bytes, so callers take hits out first.
    pub fn wait(self) -> ReadBytes {
        match self.state {
            ReadState::Hit(value) => Ok(Some(value.to_vec())),
            ReadState::Cached(bytes) => Ok(Some(bytes)),
            ReadState::PastEnd => Ok(None),
            ReadState::Waiting(done) => done.wait(),
        }
    }

    fn waiting(done: Arc<Completion>) -> PendingRead {
        PendingRead { state: ReadState::Waiting(done) }
    }
}

/// `struct cachestat_range` of `cachestat(2)`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `cachestat(2)`.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat`'s system call number (the same on x86-64 and the generic table of arm64).
const SYS_CACHESTAT: libc::c_long = 451;

/// Whether the page cache holds every page of `[offset, offset + len)` of `fd`, asked with
/// `cachestat(2)` (Linux 6.5), which starts no I/O: a `preadv2(RWF_NOWAIT)` probe of bytes
/// not cached starts reading them in (and a direct read after it reads them twice). `None`
/// where the call is unsupported.
pub(crate) fn page_cache_holds(fd: i32, offset: u64, len: usize) -> Option<bool> {
    let first = offset / 4096 * 4096;
    let end = offset + len as u64;
    let range = CachestatRange { off: first, len: end - first };
    let mut stat = Cachestat::default();
    // SAFETY: both pointers are to live, properly laid out structs for the call's duration;
    // the kernel reads `range` and writes `stat` only.
    let rc =
        unsafe { libc::syscall(SYS_CACHESTAT, fd, &range as *const CachestatRange, &mut stat as *mut Cachestat, 0u32) };
    (rc == 0).then(|| stat.nr_cache >= end.div_ceil(4096) - first / 4096)
}

/// Read `len` bytes at `offset` of `fd` only if they are all in the page cache
/// (`preadv2(RWF_NOWAIT)`); `None` when the read would block, fall short or is unsupported.
fn read_if_cached(fd: i32, offset: u64, len: usize) -> Option<ReadState> {
    let buf = crate::fs::pread_fresh(fd, offset, len, libc::RWF_NOWAIT).ok()?;
    let n = buf.len();
    if n == len {
        return Some(ReadState::Cached(buf));
    }
    // Short: either the rest is not cached, or the file ends first (the op is still in the
    // log buffer, which the caller reads without any device read).
    let size = file_size(fd)?;
    (offset.saturating_add(n as u64) >= size).then_some(ReadState::PastEnd)
}

/// The size of the file behind `fd`.
fn file_size(fd: i32) -> Option<u64> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fstat` writes a `stat` into the pointer it is given, which is valid for one.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    // SAFETY: a zero return means `fstat` filled `st`.
    (rc == 0).then(|| u64::try_from(unsafe { st.assume_init() }.st_size).unwrap_or(0))
}

/// The `pread` pool: a queue and the threads serving it. Dropping it closes the queue and
/// waits for the threads, which finish every read already queued first.
struct Pool {
    tx: Option<Sender<ReadRequest>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    fn start() -> Pool {
        let (tx, rx) = bounded::<ReadRequest>(QUEUE_DEPTH);
        let threads = (0..POOL_THREADS)
            .filter_map(|i| {
                let rx: Receiver<ReadRequest> = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("wisckey-read-{i}"))
                    .spawn(move || rx.iter().for_each(ReadRequest::run_inline));
                spawned.map_err(|e| tracing::warn!(error = %e, "cannot start a value read thread")).ok()
            })
            .collect::<Vec<_>>();
        // Without any thread, `submit` reads inline.
        Pool { tx: (!threads.is_empty()).then_some(tx), threads }
    }

    /// Queue a read, or do it inline when the pool cannot take it.
    fn submit(&self, req: ReadRequest) {
        match &self.tx {
            Some(tx) => {
                if let Err(e) = tx.send(req) {
                    e.into_inner().run_inline();
                }
            }
            None => req.run_inline(),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn start_uring() -> Option<UringEngine> {
    UringEngine::start()
        .map_err(|e| tracing::info!(error = %e, "io_uring unavailable; value reads use a thread pool"))
        .ok()
}

/// Submits value reads to the best engine available; engines start on first use.
pub struct ParallelReader {
    /// io_uring was asked for (`Options::io_uring`) and a ring could be set up at open.
    uring_ok: bool,
    uring: OnceLock<Option<UringEngine>>,
    pool: OnceLock<Pool>,
    /// Serve reads whose bytes are in the page cache on the caller (off only in tests, so
    /// the engines see reads of freshly written files).
    cached_fast_path: bool,
}

impl ParallelReader {
    /// Decide once whether io_uring may be used: asked for, and a ring can be created here
    /// (it cannot under some seccomp profiles, old kernels, or `io_uring_disabled`).
    pub fn new(use_io_uring: bool) -> Self {
        let uring_ok = use_io_uring && uring::probe();
        ParallelReader { uring_ok, uring: OnceLock::new(), pool: OnceLock::new(), cached_fast_path: true }
    }

    /// Whether reads of descriptor-backed files go through io_uring.
    pub fn uses_io_uring(&self) -> bool {
        self.uring_ok && self.uring.get_or_init(start_uring).is_some()
    }

    /// Start reading `len` bytes at `offset` of `file`.
    pub fn submit(&self, file: Arc<dyn RandomAccessFile>, offset: u64, len: usize) -> PendingRead {
        // A warm scan comes here once per value: no allocation beyond the bytes themselves.
        if let Some(read) = self.probe_cache(&file, offset, len) {
            return read;
        }
        let (req, done) = ReadRequest::new(file, offset, len);
        match self.ring_for(&req) {
            Some(engine) => engine.submit_many(std::iter::once(req)),
            None => self.pool.get_or_init(Pool::start).submit(req),
        }
        PendingRead::waiting(done)
    }

    /// Start reading `len` bytes at `offset` of `file` without asking the page cache first
    /// (the caller did, or `file` reads around it: `Vfs::open_read_direct`).
    pub fn submit_unprobed(&self, file: Arc<dyn RandomAccessFile>, offset: u64, len: usize) -> PendingRead {
        let (req, done) = ReadRequest::new(file, offset, len);
        match self.ring_for(&req) {
            Some(engine) => engine.submit_many(std::iter::once(req)),
            None => self.pool.get_or_init(Pool::start).submit(req),
        }
        PendingRead::waiting(done)
    }

    /// Start reading each `(file, offset, len)`, in order. Reads that go to io_uring are
    /// submitted together, with one kernel entry.
    pub fn submit_many(
        &self,
        reads: impl IntoIterator<Item = (Arc<dyn RandomAccessFile>, u64, usize)>,
    ) -> Vec<PendingRead> {
        let (mut ring, mut ring_batch) = (None, Vec::new());
        let pending = reads
            .into_iter()
            .map(|(file, offset, len)| {
                if let Some(read) = self.probe_cache(&file, offset, len) {
                    return read;
                }
                let (req, done) = ReadRequest::new(file, offset, len);
                match self.ring_for(&req) {
                    Some(engine) => {
                        ring = Some(engine);
                        ring_batch.push(req);
                    }
                    None => self.pool.get_or_init(Pool::start).submit(req),
                }
                PendingRead::waiting(done)
            })
            .collect();
        if let Some(engine) = ring {
            engine.submit_many(ring_batch);
        }
        pending
    }

    /// The io_uring engine `req` goes to, or `None` for the pool: the one place that decides
    /// (it starts the engine on first use).
    fn ring_for(&self, req: &ReadRequest) -> Option<&UringEngine> {
        if req.file.raw_fd().is_none() || !self.uses_io_uring() {
            return None;
        }
        self.uring.get().and_then(Option::as_ref)
    }

    /// The bytes, when they are all in the page cache (or the file ends before them: the op is
    /// still in the log buffer), read on the caller; `None` when they are not cached or the
    /// file has no descriptor to probe through.
    pub fn read_if_cached(&self, file: &Arc<dyn RandomAccessFile>, offset: u64, len: usize) -> Option<PendingRead> {
        self.probe_cache(file, offset, len)
    }

    /// The bytes, when they are all in the page cache: cached bytes cost one syscall here;
    /// handing them to an engine would cost more.
    fn probe_cache(&self, file: &Arc<dyn RandomAccessFile>, offset: u64, len: usize) -> Option<PendingRead> {
        let fd = if self.cached_fast_path { file.raw_fd()? } else { return None };
        read_if_cached(fd, offset, len).map(|state| PendingRead { state })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{MemFs, PosixFs, Vfs};

    fn check_reads(vfs: &dyn Vfs, path: &std::path::Path, reader: &ParallelReader) {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = vfs.create(path).unwrap();
        w.append(&data).unwrap();
        w.sync().unwrap();
        let f = vfs.open_read(path).unwrap();
        let reads: Vec<_> = (0..200u64).map(|i| (i * 487 % 99_000, (i % 13 + 1) as usize * 50)).collect::<Vec<_>>();
        let pending: Vec<_> = reads.iter().map(|&(off, len)| reader.submit(f.clone(), off, len)).collect();
        for ((off, len), p) in reads.iter().zip(pending) {
            let got = p.wait().unwrap().unwrap();
            assert_eq!(got, &data[*off as usize..*off as usize + len]);
        }
        // The same reads as one batch (one kernel entry with io_uring), answered in order.
        let batch = reader.submit_many(reads.iter().map(|&(off, len)| (f.clone(), off, len)));
        assert_eq!(batch.len(), reads.len());
        for ((off, len), p) in reads.iter().zip(batch) {
            assert_eq!(p.wait().unwrap().unwrap(), &data[*off as usize..*off as usize + len]);
        }
        // Freshly written bytes are cached: with the fast path they never reach an engine.
        let p = reader.submit(f.clone(), 0, 100);
        assert_eq!(p.was_cached(), reader.cached_fast_path && f.raw_fd().is_some());
        // Past the end: `None`, not an error; with the fast path, no engine is involved (the op
        // is in the log buffer, which costs no device read).
        let past = reader.submit(f.clone(), 99_990, 20);
        assert_eq!(past.was_cached(), reader.cached_fast_path && f.raw_fd().is_some());
        assert!(past.wait().unwrap().is_none());
    }

    #[test]
    fn a_single_read_starts_the_uring_engine() {
        let dir = tempfile::tempdir().unwrap();
        let posix = PosixFs::new();
        let path = dir.path().join("f");
        let mut w = posix.create(&path).unwrap();
        w.append(&[7u8; 4096]).unwrap();
        w.sync().unwrap();
        let f = posix.open_read(&path).unwrap();
        let reader = ParallelReader { cached_fast_path: false, ..ParallelReader::new(true) };
        assert_eq!(reader.submit(f, 10, 20).wait().unwrap(), Some(vec![7u8; 20]));
        // Where the kernel allows a ring, the first read started it (not only batches do).
        if reader.uring_ok {
            assert!(reader.uring.get().is_some(), "the ring was never started");
        } else {
            assert!(reader.uring.get().is_none());
        }
    }

    #[test]
    fn pool_and_uring_read_the_right_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let posix = PosixFs::new();
        for use_uring in [false, true] {
            for fast in [false, true] {
                let reader = ParallelReader { cached_fast_path: fast, ..ParallelReader::new(use_uring) };
                check_reads(&posix, &dir.path().join(format!("f{use_uring}{fast}")), &reader);
            }
        }
        let mem = MemFs::new();
        mem.create_dir_all(std::path::Path::new("/d")).unwrap();
        check_reads(&mem, std::path::Path::new("/d/f"), &ParallelReader::new(true));
    }
}
