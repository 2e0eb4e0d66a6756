//! Reads separated values from vLog files with positioned reads, checking the op's key and the
//! value's crc so a bad pointer or a damaged file is reported, never returned as data.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use super::cache::ValueCache;
use super::prefetch::{ParallelReader, PendingRead};
use super::request::read_full;
use super::ValuePointer;
use crate::error::{Error, Result};
use crate::filename::{cold_file_name, vlog_file_name};
use crate::fs::{Advice, FileMapping, RandomAccessFile, Vfs};
use crate::key::ValueKind;
use crate::log::{BufferedOps, DurableExtent};
use crate::util::coding::Reader;
use crate::value::Value;

/// Open vLog files, shared by all readers.
pub struct VlogReader {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    /// Numbers of the cold value files (`NNNNNN.cold`, GC's output); every other value file
    /// is a log file (`NNNNNN.vlog`).
    cold: RwLock<std::collections::HashSet<u64>>,
    /// Open handles by (file number, opened for scans). Point lookups and scans use separate
    /// handles so each gets its own read-ahead advice: none for scattered gets, sequential
    /// for iterators (after a key-order reorganization a scan reads the vLog in order).
    files: Mutex<HashMap<(u64, bool), Arc<dyn RandomAccessFile>>>,
    /// Reads many ops at once (iterator read-ahead, `multi_get`).
    parallel: ParallelReader,
    /// Read-only mappings of vLog files for scans of cached values (`read_mapped`); `None`
    /// where the file system maps nothing.
    maps: RwLock<HashMap<u64, Mapped>>,
    /// `Options::mmap_value_reads`.
    mapped_reads: bool,
    /// What of the log can never be truncated away (set at open): only those bytes, and cold
    /// files (`never_truncated`), are read through a mapping, as a mapped page past the end of
    /// a file faults with SIGBUS. The log head can shrink (a failed append or sync is cut
    /// away, with groups readers may already reach in the log buffer); rolled files and the
    /// head's synced bytes never do.
    extent: OnceLock<Arc<DurableExtent>>,
    /// The log appender, whose buffer holds the ops not yet handed to a file (set at open).
    log: OnceLock<Arc<dyn BufferedOps>>,
    /// Page-cache probes of scans in a row that found their value cached (saturating): a
    /// new scan trusts the cache (reads through mappings) when the last many did.
    warm_probes: AtomicU32,
    /// Whole-region read requests for a thread that passes them to the kernel
    /// (`POSIX_FADV_WILLNEED` takes tens of µs to queue 256 KiB: not on the scan's thread).
    region_reads: OnceLock<Option<SyncSender<RegionRead>>>,
    /// Values read and verified before (`Options::value_cache_bytes`).
    cache: ValueCache,
    /// `O_DIRECT` handles for point reads the page cache does not help (`None`: the file
    /// system has no direct reads).
    direct: Mutex<HashMap<u64, Option<Arc<dyn RandomAccessFile>>>>,
    /// Point reads that missed the value cache in the current window, and how many of them
    /// the page cache held: it decides `read_direct`.
    window_reads: AtomicU32,
    window_hits: AtomicU32,
    direct_mode: std::sync::atomic::AtomicBool,
    /// Point reads that missed both caches, for sampling the page cache in direct mode.
    misses: AtomicU32,
}

/// Point reads per window of the page cache's hit count.
const POINT_WINDOW: u32 = 256;

/// Point reads go around the page cache (`O_DIRECT`) while it holds fewer than one in this
/// many of the values the value cache misses: it then costs reads twice the value's size (a
/// 4 KiB value spans two pages) and evicts the tables' pages for values read once.
const DIRECT_BELOW: u32 = 8;

/// In direct mode, one read in this many still goes through the page cache, so a workload
/// whose hot values would stay there (a skewed one larger than the value cache) shows up in
/// the hit count and turns direct reads off again.
const DIRECT_SAMPLE: u32 = 8;

/// A region of a vLog file to read into the page cache; the handle keeps the file open.
type RegionRead = (Arc<dyn RandomAccessFile>, u64, u64);

/// The latest mapping of a vLog file (`None`: the file system mapped nothing), and the end of
/// the read it was made for.
type Mapped = (Option<Arc<FileMapping>>, u64);

/// Probes in a row that must find their value cached before new scans trust the cache.
const WARM_PROBES: u32 = 64;

/// While the page cache is trusted, every this many point reads one goes through the
/// page-cache probe instead of the mapping, so reads that left the cached part of the log
/// withdraw the trust.
const POINT_PROBE_EVERY: u32 = 8;

/// Point reads of ops up to this size may copy out of a mapping (while the page cache is
/// trusted to hold the log): a copy out of the mapping beat `pread`'s copy in the kernel even
/// for large values (docs/BENCHMARKS.md §11). Reads of pages that are not cached fault them in
/// a few pages at a time, which the probe of every `POINT_PROBE_EVERY`th read catches; larger
/// ops are read with one system call.
const MAPPED_POINT_MAX_BYTES: u32 = 1 << 20;

thread_local! {
    /// Point reads on this thread, for `POINT_PROBE_EVERY`.
    static POINT_READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A mapping of a growing file is replaced once the file has grown this much past it (the log
/// head gets a few fresh mappings as it fills, not one per read).
const REMAP_GROWTH: u64 = 4 << 20;

/// Region reads waiting for the advising thread; more are dropped (they are hints).
const REGION_QUEUE: usize = 256;

/// How a value is being read: a point lookup or part of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Point,
    Scan,
}

/// How a read uses the value cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// Take a cached value; cache what is read (`ReadOptions::fill_cache`, the default).
    Fill,
    /// Take a cached value; cache nothing new (a big scan that would flush the hot values out).
    Lookup,
    /// Read and check the bytes on disk (`Db::verify`).
    Bypass,
}

impl CacheUse {
    /// `Fill` or `Lookup` as a read's `fill_cache` says.
    pub fn filling(fill: bool) -> CacheUse {
        if fill {
            CacheUse::Fill
        } else {
            CacheUse::Lookup
        }
    }
}

impl VlogReader {
    /// `use_io_uring`: read in parallel through io_uring if this process may (`Options::io_uring`).
    pub fn new(vfs: Arc<dyn Vfs>, dir: PathBuf, use_io_uring: bool) -> Self {
        VlogReader {
            vfs,
            dir,
            cold: RwLock::new(std::collections::HashSet::new()),
            files: Mutex::new(HashMap::new()),
            parallel: ParallelReader::new(use_io_uring),
            region_reads: OnceLock::new(),
            maps: RwLock::new(HashMap::new()),
            mapped_reads: true,
            extent: OnceLock::new(),
            log: OnceLock::new(),
            warm_probes: AtomicU32::new(0),
            cache: ValueCache::new(0),
            direct: Mutex::new(HashMap::new()),
            window_reads: AtomicU32::new(0),
            window_hits: AtomicU32::new(0),
            direct_mode: std::sync::atomic::AtomicBool::new(false),
            misses: AtomicU32::new(0),
        }
    }

    /// Keep up to `bytes` of verified values in memory (`Options::value_cache_bytes`).
    #[must_use]
    pub fn with_value_cache(mut self, bytes: u64) -> Self {
        self.cache = ValueCache::new(bytes);
        self
    }

    /// What the value cache holds and how it served lookups.
    pub fn cache_usage(&self) -> super::cache::CacheUsage {
        self.cache.usage()
    }

    /// Put the separated values of a record group just written at `pos` (its `ops` and their
    /// `separated` list) into the value cache (`Options::prepopulate_value_cache`).
    pub fn prepopulate(&self, pos: crate::log::LogPos, ops: &[u8], separated: &[crate::log::SeparatedValue]) {
        for v in separated {
            let ptr = ValuePointer {
                file: pos.file,
                offset: pos.offset + v.op_offset,
                op_len: v.op_len,
                value_crc: v.value_crc,
            };
            if let Some(Ok((_, crate::write_batch::BatchOp::Put { key, value, .. }))) =
                crate::write_batch::BatchIter::over(v.op_bytes(ops)).next()
            {
                self.cache.insert(&ptr, key, bytes::Bytes::copy_from_slice(value));
            }
        }
    }

    /// Forget cached values in `[start, end)` of value file `number` (GC freed the range).
    pub fn forget_range(&self, number: u64, start: u64, end: u64) {
        self.cache.forget_range(number, start, end);
    }

    /// Whether `read_mapped` may map files (`Options::mmap_value_reads`).
    #[must_use]
    pub fn with_mapped_reads(mut self, on: bool) -> Self {
        self.mapped_reads = on;
        self
    }

    /// Read through the log appender `log` (set once at open): ops still in its buffer are
    /// read from there, and only its durable extent of the log is ever mapped (until then,
    /// nothing is).
    pub fn attach_log(&self, log: Arc<dyn BufferedOps>) {
        let _ = self.extent.set(log.extent());
        let _ = self.log.set(log);
    }

    /// Record that value file `number` is a cold value file (before any pointer into it is
    /// read).
    pub fn add_cold(&self, number: u64) {
        self.cold.write().insert(number);
    }

    /// The cold value files known now, in ascending order (a job's snapshot: a compaction's
    /// inputs point only into files registered before they were written).
    pub fn cold_files(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.cold.read().iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// Whether value file `number` is a cold value file.
    pub fn is_cold(&self, number: u64) -> bool {
        self.cold.read().contains(&number)
    }

    /// The path of value file `number`: a cold value file or a log file.
    pub fn path(&self, number: u64) -> PathBuf {
        if self.is_cold(number) {
            cold_file_name(&self.dir, number)
        } else {
            vlog_file_name(&self.dir, number)
        }
    }

    /// Record whether a scan's page-cache probe found its value cached.
    pub fn note_probe(&self, cached: bool) {
        let n = self.warm_probes.load(Ordering::Relaxed);
        // Written only when it changes: parallel warm scans do not bounce the line.
        if !cached && n != 0 {
            self.warm_probes.store(0, Ordering::Relaxed);
        } else if cached && n < WARM_PROBES {
            self.warm_probes.store(n + 1, Ordering::Relaxed);
        }
    }

    /// Whether the last `WARM_PROBES` probes all found their values cached.
    pub fn is_warm(&self) -> bool {
        self.warm_probes.load(Ordering::Relaxed) >= WARM_PROBES
    }

    /// Whether parallel reads of real files go through io_uring (else a `pread` thread pool).
    pub fn uses_io_uring(&self) -> bool {
        self.parallel.uses_io_uring()
    }

    fn file(&self, number: u64, access: Access) -> Result<Arc<dyn RandomAccessFile>> {
        let scan = access == Access::Scan;
        if let Some(f) = self.files.lock().get(&(number, scan)) {
            return Ok(f.clone());
        }
        let path = self.path(number);
        if !self.vfs.exists(&path) {
            return Err(Error::corruption(path, 0, "a value pointer names a value-log file that does not exist"));
        }
        let f = self.vfs.open_read(&path)?;
        // Point lookups read scattered values: no read-ahead. Scans: read ahead.
        let _ = f.advise(0, 0, if scan { Advice::Sequential } else { Advice::Random });
        self.files.lock().insert((number, scan), f.clone());
        Ok(f)
    }

    /// Forget an open handle (the file was deleted or rewritten).
    pub fn evict(&self, number: u64) {
        let mut files = self.files.lock();
        files.remove(&(number, false));
        files.remove(&(number, true));
        drop(files);
        self.direct.lock().remove(&number);
        self.maps.write().remove(&number);
        self.cache.forget_file(number);
    }

    /// The value a pointer names, checked like `verify_op` and copied out of a memory mapping
    /// of its file: a read of cached bytes without a system call, for scans whose values the page cache holds (a page that
    /// is not cached is read by the fault, one page at a time). `None` when the file system
    /// maps nothing or the op lies past the mapping (the file grew since): use `try_read_op`.
    pub fn read_mapped(&self, ptr: &ValuePointer, user_key: &[u8], cache: CacheUse) -> Option<Result<Value>> {
        self.cached(ptr, user_key, cache).or_else(|| self.copy_mapped(ptr, user_key, cache))
    }

    /// `read_mapped` without the value cache (the caller looked there already). The op is
    /// copied out before it is checked: a crc over mapped memory runs at memory latency, over
    /// the fresh copy at cache speed (half a warm scan's time otherwise).
    fn copy_mapped(&self, ptr: &ValuePointer, user_key: &[u8], cache: CacheUse) -> Option<Result<Value>> {
        let op = self.with_mapped_op(ptr, <[u8]>::to_vec)?;
        Some(self.verify_op(ptr, op, user_key, cache))
    }

    /// The value `ptr` names from the value cache, checked to be a put of `user_key` (a
    /// pointer into another key's record is corruption, cached or not).
    #[inline]
    pub(super) fn cached(&self, ptr: &ValuePointer, user_key: &[u8], cache: CacheUse) -> Option<Result<Value>> {
        if cache == CacheUse::Bypass {
            return None;
        }
        self.cache.get(ptr, user_key).map(|value| Ok(Value::from(value)))
    }

    /// `f` of the op's bytes in a mapping of its file, when `read_mapped` may use one.
    fn with_mapped_op<T>(&self, ptr: &ValuePointer, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        self.with_mapped_op_in(ptr, &mut None, f)
    }

    /// `with_mapped_op`, reusing the mapping `held` (of the last file read) while it covers the
    /// op: a batch of reads takes the mapping table's lock once per file, not once per op.
    pub(super) fn with_mapped_op_in<T>(
        &self,
        ptr: &ValuePointer,
        held: &mut Option<(u64, Arc<FileMapping>)>,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Option<T> {
        let end = ptr.offset.checked_add(u64::from(ptr.op_len))?;
        if !self.mapped_reads || !self.never_truncated(ptr.file, end) {
            return None;
        }
        let reuse = held.as_ref().is_some_and(|(file, m)| *file == ptr.file && m.len() as u64 >= end);
        if !reuse {
            *held = Some((ptr.file, self.mapping(ptr.file, end)?));
        }
        let map = &held.as_ref()?.1;
        let start = usize::try_from(ptr.offset).ok()?;
        Some(f(map.get(start..start + ptr.op_len as usize)?))
    }

    /// Whether bytes up to `end` of value file `number` can never be cut away (a mapped page
    /// past the end of a file faults with SIGBUS): the log's durable extent, and all of a cold
    /// file, which GC only appends to (a failed append leaves its bytes; nothing truncates a
    /// cold file) and syncs before any pointer into it is logged. Cold files are numbered
    /// after the log file being written when GC starts them, so the log's extent alone left
    /// every value GC moved to `pread`, and reads during GC ran slower (docs/BENCHMARKS.md §11).
    fn never_truncated(&self, number: u64, end: u64) -> bool {
        self.extent.get().is_some_and(|e| e.covers(number, end)) || self.is_cold(number)
    }

    /// A mapping of vLog file `number` covering bytes up to `end`. One is made when none
    /// covers them, unless the last attempt was for a read less than `REMAP_GROWTH` earlier in
    /// the file (a growing log head is remapped a few times as it fills, not at every read, and
    /// a file system that maps nothing is asked once per `REMAP_GROWTH`).
    fn mapping(&self, number: u64, end: u64) -> Option<Arc<FileMapping>> {
        // Shared lock for the common case: parallel scans do not queue behind each other.
        if let Some((map, tried)) = self.maps.read().get(&number) {
            if let Some(m) = map.as_ref().filter(|m| m.len() as u64 >= end) {
                return Some(m.clone());
            }
            if end < tried.saturating_add(REMAP_GROWTH) {
                return None;
            }
        }
        // Mapped outside the lock; a racing reader may map it too, and one mapping wins.
        let fresh = self.vfs.map_for_reads(&self.path(number));
        self.maps.write().insert(number, (fresh.clone(), end));
        fresh.filter(|m| m.len() as u64 >= end)
    }

    /// The value `ptr` names, checked to be a put of `user_key` whose value matches the
    /// pointer's crc: read from its file, or from the log appender's buffer when the op has
    /// not been handed to the file yet. Every read of a separated value ends here or in
    /// `finish_read` / `read_mapped`, which check the same way.
    pub fn read_value(&self, ptr: &ValuePointer, user_key: &[u8], access: Access, cache: CacheUse) -> Result<Value> {
        if !ptr.in_bounds() {
            return Err(self.corruption(ptr, "value pointer out of bounds"));
        }
        match self.cached(ptr, user_key, cache) {
            Some(hit) => hit,
            None => self.read_uncached(ptr, user_key, access, cache),
        }
    }

    /// `read_value` of a pointer in bounds, without the value cache (the caller looked there
    /// already: a miss is looked up, and counted, once).
    fn read_uncached(&self, ptr: &ValuePointer, user_key: &[u8], access: Access, cache: CacheUse) -> Result<Value> {
        let op = match self.try_read_op(ptr, access)? {
            Some(op) => op,
            None => match self.read_buffered(ptr) {
                Some(op) => op,
                // Handed to the file between the two checks.
                None => self.read_op(ptr, access)?,
            },
        };
        self.verify_op(ptr, op, user_key, cache)
    }

    /// `read_value` for a point lookup: from the value cache; while the page cache is trusted to
    /// hold the log (`is_warm`), copied out of the file's mapping (no system call) but for
    /// every `POINT_PROBE_EVERY`th read, which probes the page cache; otherwise a probe
    /// (`RWF_NOWAIT`: cached bytes are read by it, and it tells whether the cache holds the
    /// log) and, on a miss, one read of exactly the op.
    pub fn read_point(&self, ptr: &ValuePointer, user_key: &[u8], cache: CacheUse) -> Result<Value> {
        if !ptr.in_bounds() {
            return Err(self.corruption(ptr, "value pointer out of bounds"));
        }
        if let Some(hit) = self.cached(ptr, user_key, cache) {
            return hit;
        }
        if self.mapped_reads && ptr.op_len <= MAPPED_POINT_MAX_BYTES {
            let probe = POINT_READS.with(|n| {
                n.set(n.get().wrapping_add(1));
                n.get() % POINT_PROBE_EVERY == 0
            });
            if !probe && self.is_warm() {
                if let Some(v) = self.copy_mapped(ptr, user_key, cache) {
                    return v;
                }
            } else if let Ok(f) = self.file(ptr.file, Access::Point) {
                if let Some(v) = self.read_point_direct(&f, ptr, user_key, cache) {
                    return v;
                }
                match self.parallel.read_if_cached(&f, ptr.offset, ptr.op_len as usize) {
                    Some(read) => {
                        if !read.past_end() {
                            self.note_probe(true);
                            self.note_point_read(true);
                        }
                        return self.finish_read(ptr, user_key, read, Access::Point, cache);
                    }
                    None if f.raw_fd().is_some() => {
                        self.note_probe(false);
                        self.note_point_read(false);
                    }
                    None => {}
                }
            }
        }
        self.read_uncached(ptr, user_key, Access::Point, cache)
    }

    /// Count a read (a point read or a scan's) that missed the value cache (`cached`: the page
    /// cache held it); at the end of each window decide whether such reads go around the page
    /// cache. Only with a value cache: without one the page cache is the only place hot
    /// values stay.
    fn note_point_read(&self, cached: bool) {
        if cached {
            self.window_hits.fetch_add(1, Ordering::Relaxed);
        }
        if self.window_reads.fetch_add(1, Ordering::Relaxed) + 1 < POINT_WINDOW {
            return;
        }
        let hits = self.window_hits.swap(0, Ordering::Relaxed);
        self.window_reads.store(0, Ordering::Relaxed);
        let direct = self.cache.is_on() && hits * DIRECT_BELOW < POINT_WINDOW;
        self.direct_mode.store(direct, Ordering::Relaxed);
    }

    /// A point read while the page cache holds few of the values point reads want
    /// (`note_point_read`): the page cache is asked without reading anything in
    /// (`page_cache_holds`); what it holds is read through it, the rest around it (`O_DIRECT`)
    /// but for a sample (`sampled_direct_file`). `None` when not in direct mode or the page
    /// cache cannot be asked (the caller probes and reads through the page cache).
    fn read_point_direct(
        &self,
        f: &Arc<dyn RandomAccessFile>,
        ptr: &ValuePointer,
        user_key: &[u8],
        cache: CacheUse,
    ) -> Option<Result<Value>> {
        if !self.direct_mode.load(Ordering::Relaxed) {
            return None;
        }
        let cached = super::prefetch::page_cache_holds(f.raw_fd()?, ptr.offset, ptr.op_len as usize)?;
        self.note_point_read(cached);
        if !cached {
            if let Some(direct) = self.sampled_direct_file(ptr.file) {
                match direct.read_new(ptr.offset, ptr.op_len as usize) {
                    Ok(Some(op)) => return Some(self.verify_op(ptr, op, user_key, cache)),
                    // Past the end of the file: the op is still in the log buffer.
                    Ok(None) => {}
                    Err(e) => return Some(Err(e)),
                }
            }
        }
        Some(self.read_uncached(ptr, user_key, Access::Point, cache))
    }

    /// In direct mode, the `O_DIRECT` handle for the next read that missed the page cache;
    /// `None` for one in `DIRECT_SAMPLE` of them (read through the page cache, so its hit
    /// count can turn direct mode off) and where direct reads are unsupported.
    fn sampled_direct_file(&self, number: u64) -> Option<Arc<dyn RandomAccessFile>> {
        if self.misses.fetch_add(1, Ordering::Relaxed).is_multiple_of(DIRECT_SAMPLE) {
            return None;
        }
        self.direct_file(number)
    }

    /// The `O_DIRECT` handle of value file `number` (opened once; `None` if unsupported).
    fn direct_file(&self, number: u64) -> Option<Arc<dyn RandomAccessFile>> {
        if let Some(f) = self.direct.lock().get(&number) {
            return f.clone();
        }
        let f = self.vfs.open_read_direct(&self.path(number));
        self.direct.lock().insert(number, f.clone());
        f
    }

    /// Finish a read `start_read` began, with `read_value`'s checks; an op that was not in the
    /// file yet is read by `read_value` (from the log buffer).
    pub fn finish_read(
        &self,
        ptr: &ValuePointer,
        user_key: &[u8],
        read: PendingRead,
        access: Access,
        cache: CacheUse,
    ) -> Result<Value> {
        let read = match read.into_hit() {
            Ok(value) => return Ok(value),
            Err(read) => read,
        };
        // Started (by `start_read`, `start_reads` or a probe) after the cache missed.
        match read.wait()? {
            Some(op) => self.verify_op(ptr, op, user_key, cache),
            None => self.read_uncached(ptr, user_key, access, cache),
        }
    }

    /// Decode a pointer stored in the LSM-tree; a malformed one is corruption.
    pub fn decode_pointer(&self, encoded: &[u8]) -> Result<ValuePointer> {
        ValuePointer::decode(encoded)
            .ok_or_else(|| Error::corruption(&self.dir, 0, "malformed value pointer in the LSM-tree"))
    }

    /// The op bytes at `ptr` if they are still in the log appender's buffer.
    fn read_buffered(&self, ptr: &ValuePointer) -> Option<Vec<u8>> {
        self.log.get()?.read_buffered(ptr.file, ptr.offset, ptr.op_len as usize)
    }

    /// Read the op bytes a pointer names from its file.
    fn read_op(&self, ptr: &ValuePointer, access: Access) -> Result<Vec<u8>> {
        debug_assert!(ptr.in_bounds(), "{ptr:?} read before its bounds were checked");
        let f = self.file(ptr.file, access)?;
        let mut buf = vec![0u8; ptr.op_len as usize];
        f.read_exact_at(ptr.offset, &mut buf)?;
        Ok(buf)
    }

    /// Like `read_op`, but `Ok(None)` when the file ends before the op does (the op may still
    /// be in the log writer's buffer).
    fn try_read_op(&self, ptr: &ValuePointer, access: Access) -> Result<Option<Vec<u8>>> {
        debug_assert!(ptr.in_bounds(), "{ptr:?} read before its bounds were checked");
        let f = self.file(ptr.file, access)?;
        read_full(&*f, ptr.offset, ptr.op_len as usize)
    }

    /// Start reading the op a pointer names in the background; `finish_read` then checks it.
    /// An error (a missing file, a pointer out of bounds) means the read did not start:
    /// `read_value` then reports it.
    /// A value in the value cache needs no read: the answer holds it (`PendingRead::is_hit`).
    pub fn start_read(
        &self,
        ptr: &ValuePointer,
        user_key: &[u8],
        access: Access,
        cache: CacheUse,
    ) -> Result<PendingRead> {
        if !ptr.in_bounds() {
            return Err(self.corruption(ptr, "value pointer out of bounds"));
        }
        if let Some(Ok(value)) = self.cached(ptr, user_key, cache) {
            return Ok(PendingRead::hit(value));
        }
        let f = self.file(ptr.file, access)?;
        let len = ptr.op_len as usize;
        let fd = f.raw_fd().filter(|_| self.direct_mode.load(Ordering::Relaxed));
        if let Some(cached) = fd.and_then(|fd| super::prefetch::page_cache_holds(fd, ptr.offset, len)) {
            // Direct mode (see `read_point_direct`): what the page cache misses goes around it.
            self.note_point_read(cached);
            if !cached {
                if let Some(direct) = self.sampled_direct_file(ptr.file) {
                    return Ok(self.parallel.submit_unprobed(direct, ptr.offset, len));
                }
            }
            return Ok(self.parallel.submit(f, ptr.offset, len));
        }
        // Reads of files with a descriptor ask the page cache first: count what it held.
        let probed = f.raw_fd().is_some();
        let read = self.parallel.submit(f, ptr.offset, len);
        if probed && !read.past_end() {
            self.note_point_read(read.was_cached());
        }
        Ok(read)
    }

    /// `start_read` for each pointer given (with the key it must lead to), submitted together
    /// (one kernel entry for those that go to io_uring); the answer is aligned with `ptrs`,
    /// `None` where no pointer was given or the read cannot start (its file is missing or the
    /// pointer out of bounds: `read_value` then reports it). Cached values need no read.
    pub fn start_reads(
        &self,
        ptrs: &[Option<(ValuePointer, &[u8])>],
        access: Access,
        cache: CacheUse,
    ) -> Vec<Option<PendingRead>> {
        // Cache hits need no read; the rest (pointers in bounds) are submitted together.
        let hits: Vec<Option<Value>> =
            ptrs.iter().map(|p| p.and_then(|(ptr, key)| self.cached(&ptr, key, cache)?.ok())).collect();
        let to_read = |(p, hit): (&Option<(ValuePointer, &[u8])>, &Option<Value>)| {
            p.filter(|(ptr, _)| hit.is_none() && ptr.in_bounds()).map(|(ptr, _)| ptr)
        };
        let ranges = ptrs.iter().zip(&hits).filter_map(to_read).map(|p| (p.file, p.offset, p.op_len as usize));
        let mut started = self.start_ranges(ranges, access).into_iter();
        ptrs.iter()
            .zip(hits)
            .map(|(p, hit)| match hit {
                Some(value) => Some(PendingRead::hit(value)),
                None => to_read((p, &None)).and_then(|_| started.next().flatten()),
            })
            .collect()
    }

    /// Start reading each `(file, offset, len)` range, submitted together; `None` where the
    /// file cannot be opened (the caller's single reads then report it).
    pub(super) fn start_ranges(
        &self,
        ranges: impl Iterator<Item = (u64, u64, usize)>,
        access: Access,
    ) -> Vec<Option<PendingRead>> {
        let files: Vec<_> = ranges.map(|(file, offset, len)| (self.file(file, access).ok(), offset, len)).collect();
        let reads = files.iter().filter_map(|(f, offset, len)| Some((f.clone()?, *offset, *len)));
        let mut started = self.parallel.submit_many(reads).into_iter();
        files.iter().map(|(f, ..)| f.as_ref().and_then(|_| started.next())).collect()
    }

    /// Ask the kernel to read `len` bytes at `offset` of a vLog file into the page cache in the
    /// background (`POSIX_FADV_WILLNEED` through the scan handle, from a helper thread). A
    /// hint: a file gone, a full queue or a refused advice only means the values are read one
    /// by one.
    pub fn will_need(&self, number: u64, offset: u64, len: u64) {
        let Ok(f) = self.file(number, Access::Scan) else { return };
        match self.region_reads.get_or_init(start_region_reader) {
            Some(queue) => {
                let _ = queue.try_send((f, offset, len));
            }
            None => {
                let _ = f.advise(offset, len, Advice::WillNeed);
            }
        }
    }

    /// Check that `op` (read at `ptr`) is a put of `user_key` whose value matches the pointer's
    /// crc, and return the value: a slice of the op's own buffer (a scan reads gigabytes, and a
    /// second allocation and copy per value was a large share of a warm scan: docs/BENCHMARKS.md
    /// §6), which the value cache keeps too.
    fn verify_op(&self, ptr: &ValuePointer, op: Vec<u8>, user_key: &[u8], cache: CacheUse) -> Result<Value> {
        self.verify_shared(ptr, Value::from(op), user_key, cache)
    }

    /// `verify_op` of an op in a shared buffer (a slice of a larger read).
    pub(super) fn verify_shared(
        &self,
        ptr: &ValuePointer,
        op: Value,
        user_key: &[u8],
        cache: CacheUse,
    ) -> Result<Value> {
        let range = self.put_value_range(ptr, &op, user_key)?;
        self.check_crc(ptr, &op[range.clone()])?;
        let value = op.slice(range);
        if cache == CacheUse::Fill {
            self.cache.insert(ptr, user_key, value.as_bytes().clone());
        }
        Ok(value)
    }

    /// Put a copy of a verified value into the value cache.
    pub(super) fn fill(&self, ptr: &ValuePointer, user_key: &[u8], value: &[u8]) {
        self.cache.insert(ptr, user_key, bytes::Bytes::copy_from_slice(value));
    }

    /// Put a value of `user_key` that `ptr` names into the value cache as it is (a memtable
    /// being flushed hands over the values it kept).
    pub fn cache_value(&self, ptr: &ValuePointer, user_key: &[u8], value: bytes::Bytes) {
        self.cache.insert(ptr, user_key, value);
    }

    /// Whether the value cache keeps anything at all.
    pub fn caches_values(&self) -> bool {
        self.cache.is_on()
    }

    /// Where the value lies within `op`, if `op` is a put of `user_key` that fits the
    /// pointer's length.
    fn put_value_range(&self, ptr: &ValuePointer, op: &[u8], user_key: &[u8]) -> Result<std::ops::Range<usize>> {
        let value = self.put_value(ptr, op, user_key)?;
        let start = value.as_ptr() as usize - op.as_ptr() as usize;
        Ok(start..start + value.len())
    }

    /// The value within `op`, if `op` is a put of `user_key` that fits the pointer's length.
    fn put_value<'a>(&self, ptr: &ValuePointer, op: &'a [u8], user_key: &[u8]) -> Result<&'a [u8]> {
        let bad = |reason: &str| self.corruption(ptr, reason);
        let mut r = Reader::new(op);
        let byte = r.u8().ok_or_else(|| bad("value pointer leads past the end of the op"))?;
        // An op of a keyspace other than the default one names it after the kind byte.
        if byte & crate::write_batch::KIND_KEYSPACE_FLAG != 0 {
            r.varint32().ok_or_else(|| bad("malformed op header at value pointer"))?;
        }
        let kind = byte & !crate::write_batch::KIND_KEYSPACE_FLAG;
        let klen = r.varint32().ok_or_else(|| bad("malformed op header at value pointer"))? as usize;
        let vlen = r.varint32().ok_or_else(|| bad("malformed op header at value pointer"))? as usize;
        let key = r.bytes(klen).ok_or_else(|| bad("op key runs past the pointer's length"))?;
        let value = r.bytes(vlen).ok_or_else(|| bad("op value runs past the pointer's length"))?;
        // An expiring put's value starts with its expiry time (the tree entry holds it too).
        let value = match ValueKind::from_u8(kind) {
            Some(ValueKind::Value) => value,
            Some(ValueKind::ExpiringValue) => {
                crate::ttl::split_expiry(value).ok_or_else(|| bad("expiring op shorter than its expiry time"))?.1
            }
            _ => return Err(bad("value pointer does not lead to a put")),
        };
        if key != user_key {
            return Err(bad("value pointer leads to another key's record"));
        }
        Ok(value)
    }

    fn check_crc(&self, ptr: &ValuePointer, value: &[u8]) -> Result<()> {
        match crate::util::crc(value) == ptr.value_crc {
            true => Ok(()),
            false => Err(self.corruption(ptr, "value checksum mismatch")),
        }
    }

    fn corruption(&self, ptr: &ValuePointer, reason: &str) -> Error {
        Error::corruption(self.path(ptr.file), ptr.offset, reason.to_string())
    }
}

/// The thread that passes region reads to the kernel; it ends when the reader is dropped.
/// `None` if it cannot be started (the caller then advises inline).
fn start_region_reader() -> Option<SyncSender<RegionRead>> {
    let (tx, rx) = sync_channel::<RegionRead>(REGION_QUEUE);
    let spawned = std::thread::Builder::new().name("wisckey-region".into()).spawn(move || {
        for (file, offset, len) in rx {
            let _ = file.advise(offset, len, Advice::WillNeed);
        }
    });
    spawned.ok().map(|_| tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{MemFs, PosixFs};
    use crate::log::LogWriter;

    fn bytes(reader: &VlogReader, ptr: &ValuePointer) -> Option<Vec<u8>> {
        reader.with_mapped_op(ptr, <[u8]>::to_vec)
    }

    /// A log appender at file `head` with nothing durable in it yet.
    fn sealed_below(head: u64) -> Arc<Mutex<LogWriter>> {
        let dir = tempfile::tempdir().unwrap();
        let mem: Arc<dyn Vfs> = Arc::new(MemFs::new());
        mem.create_dir_all(dir.path()).unwrap();
        let file = mem.create(&vlog_file_name(dir.path(), head)).unwrap();
        Arc::new(Mutex::new(LogWriter::new(mem, dir.path(), head, file, 0, 4096, 1 << 20, 1)))
    }

    #[test]
    fn warmth_needs_a_run_of_cached_probes_and_one_miss_ends_it() {
        let reader = VlogReader::new(Arc::new(MemFs::new()), "/d".into(), false);
        for _ in 0..WARM_PROBES - 1 {
            reader.note_probe(true);
        }
        assert!(!reader.is_warm());
        reader.note_probe(true);
        assert!(reader.is_warm());
        reader.note_probe(false);
        assert!(!reader.is_warm(), "a miss ends it");
    }

    fn append(vfs: &dyn Vfs, path: &std::path::Path, bytes: usize, fill: u8) {
        let mut w = if vfs.exists(path) { vfs.open_append(path) } else { vfs.create(path) }.unwrap();
        w.append(&vec![fill; bytes]).unwrap();
        w.sync().unwrap();
    }

    #[test]
    fn mapped_reads_follow_a_growing_file_and_skip_unmapped_file_systems() {
        let dir = tempfile::tempdir().unwrap();
        let vfs: Arc<dyn Vfs> = Arc::new(PosixFs::new());
        let path = vlog_file_name(dir.path(), 5);
        append(&*vfs, &path, 1 << 20, 1);
        let reader = VlogReader::new(vfs.clone(), dir.path().to_path_buf(), false);
        let ptr = |offset: u64, op_len: u32| ValuePointer { file: 5, offset, op_len, value_crc: 0 };
        assert_eq!(bytes(&reader, &ptr(100, 50)), None, "nothing is mapped before the extent is known");
        reader.attach_log(sealed_below(6));
        assert_eq!(bytes(&reader, &ptr(100, 50)), Some(vec![1; 50]));
        // The file grows past the mapping: a little, no new mapping; a lot, a new one.
        append(&*vfs, &path, 1 << 20, 2);
        assert_eq!(bytes(&reader, &ptr((1 << 20) + 10, 50)), None, "grown by less than REMAP_GROWTH");
        append(&*vfs, &path, REMAP_GROWTH as usize, 3);
        let far = (2 << 20) + REMAP_GROWTH - 100;
        assert_eq!(bytes(&reader, &ptr(far, 50)), Some(vec![3; 50]), "remapped once grown enough");
        assert_eq!(bytes(&reader, &ptr((1 << 20) + 10, 50)), Some(vec![2; 50]));
        assert_eq!(bytes(&reader, &ptr(far + 90, 50)), None, "past the end of the file");
        reader.evict(5);
        assert_eq!(bytes(&reader, &ptr(0, 8)), Some(vec![1; 8]), "mapped again after eviction");

        let mem: Arc<dyn Vfs> = Arc::new(MemFs::new());
        mem.create_dir_all(std::path::Path::new("/d")).unwrap();
        append(&*mem, &vlog_file_name(std::path::Path::new("/d"), 5), 4096, 1);
        let reader = VlogReader::new(mem, "/d".into(), false);
        reader.attach_log(sealed_below(6));
        assert_eq!(bytes(&reader, &ptr(0, 8)), None, "in-memory files are never mapped");
        let off = VlogReader::new(vfs, dir.path().to_path_buf(), false).with_mapped_reads(false);
        off.attach_log(sealed_below(6));
        assert_eq!(bytes(&off, &ptr(0, 8)), None, "mapped reads turned off");
    }

    #[test]
    fn values_gc_moved_to_a_cold_file_numbered_past_the_log_head_are_read_through_its_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let vfs: Arc<dyn Vfs> = Arc::new(PosixFs::new());
        append(&*vfs, &crate::filename::cold_file_name(dir.path(), 9), 8192, 4);
        append(&*vfs, &vlog_file_name(dir.path(), 11), 8192, 5);
        let reader = VlogReader::new(vfs, dir.path().to_path_buf(), false);
        reader.attach_log(sealed_below(7));
        let ptr = |file: u64| ValuePointer { file, offset: 100, op_len: 50, value_crc: 0 };
        assert_eq!(bytes(&reader, &ptr(9)), None, "not known to be cold yet: past the log head");
        reader.add_cold(9);
        assert_eq!(bytes(&reader, &ptr(9)), Some(vec![4; 50]), "a cold file is never cut back");
        assert_eq!(bytes(&reader, &ptr(11)), None, "a log file past the head still is not mapped");
    }

    #[test]
    fn a_value_is_read_from_the_log_buffer_until_it_reaches_the_file() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let dir = std::path::Path::new("/d");
        vfs.create_dir_all(dir).unwrap();
        let file = vfs.create(&vlog_file_name(dir, 3)).unwrap();
        let log = Arc::new(Mutex::new(LogWriter::new(vfs.clone(), dir, 3, file, 0, 1 << 20, 1 << 30, 1)));
        let reader = VlogReader::new(vfs, dir.to_path_buf(), false);
        reader.attach_log(log.clone());
        let mut batch = crate::WriteBatch::new();
        batch.put(b"key", [7u8; 500]);
        let values = crate::log::separated_values(&batch.rep, 100);
        let crc = crate::log::group_crc(1, 1, &batch.rep);
        let pos = log.lock().append(1, 1, &batch.rep, crc).unwrap();
        let v = values[0];
        let ptr = ValuePointer { file: 3, offset: pos.offset + v.op_offset, op_len: v.op_len, value_crc: v.value_crc };
        let read = |key: &[u8], access| reader.read_value(&ptr, key, access, CacheUse::Bypass);
        assert_eq!(read(b"key", Access::Point).unwrap(), [7u8; 500], "from the buffer");
        log.lock().flush_buffer().unwrap();
        assert_eq!(read(b"key", Access::Scan).unwrap(), [7u8; 500], "from the file");
        let err = read(b"other", Access::Point).unwrap_err();
        assert!(err.to_string().contains("another key"), "{err}");
        let far = ValuePointer { offset: u64::MAX - 2, ..ptr };
        let err = reader.read_value(&far, b"key", Access::Point, CacheUse::Fill).unwrap_err();
        assert!(err.is_corruption() && err.to_string().contains("out of bounds"), "{err}");
        assert!(reader.start_read(&far, b"key", Access::Scan, CacheUse::Fill).is_err());
    }
}
