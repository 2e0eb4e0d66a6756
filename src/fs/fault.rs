//! `FaultFs`: a fault-injecting wrapper around another `Vfs` (normally `MemFs`) for crash
//! and error-handling tests.
//!
//! # Crash model (LevelDB `fault_injection_test` semantics, plus undone renames/removes)
//!
//! * **File data.** For every file written through this wrapper, `FaultFs` remembers how many
//!   bytes are durable: `sync_data`/`sync` on a handle make everything appended so far
//!   durable. Files this wrapper never wrote (they existed before, or survived a crash) are
//!   fully durable. `truncate` lowers the durable length to the new size. Durability belongs
//!   to the file, not the name: a hard link (`link`) shares it, so a sync through either name
//!   counts for both.
//! * **Directory entries.** Creating a new file, renaming and removing are *pending* until
//!   `sync_dir` of the directory holding the (destination) name. A crash undoes pending
//!   operations in reverse order: new files and new links vanish, renames move back (restoring
//!   what they replaced), removed files reappear with their durable contents. Directories themselves
//!   (`create_dir_all`, `remove_dir`) and punched holes are durable at once.
//! * **`crash(mode)`** simulates power loss: it undoes pending directory operations, then
//!   treats the unsynced suffix of every file according to [`CrashMode`], invalidates every
//!   handle opened before it (their calls fail with `EIO`; held locks are released), clears
//!   all injected faults, and leaves the filesystem usable for a fresh open.
//! * **The process dying.** `halt()` (or the countdown of `set_crash_after_ops`) makes every
//!   further call fail with `EIO`, like a process killed at that instant: the dead engine
//!   can neither write nor delete anything while the test drops it.
//! * **Tracing.** With `WISCKEY_FS_TRACE` set, every mutating call and every crash is printed
//!   to stderr: the story of a failing crash test. Typical test:
//!
//! ```
//! # use std::sync::Arc;
//! # use wisckey::fs::{fault::{CrashMode, FaultFs}, Vfs};
//! # use std::path::Path;
//! let fs = Arc::new(FaultFs::in_memory(42));
//! fs.create_dir_all(Path::new("/db"))?;
//! let mut f = fs.create(Path::new("/db/a.log"))?;
//! f.append(b"durable")?;
//! f.sync_data()?;
//! fs.sync_dir(Path::new("/db"))?;
//! f.append(b" lost")?;
//! fs.halt(); // the process dies: `f` and `fs` fail from now on
//! drop(f);
//! fs.crash(CrashMode::DropUnsynced)?; // power loss; the fs is usable again
//! assert_eq!(fs.file_size(Path::new("/db/a.log"))?, 7);
//! # Ok::<(), wisckey::Error>(())
//! ```
//!
//! Everything random (torn lengths, corrupted bytes, read bit flips) derives from the seed
//! given to [`FaultFs::new`], so a failing seed reproduces.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Advice, FileLock, FileSyncer, MemFs, RandomAccessFile, Vfs, WritableFile};
use crate::error::{Error, Result};

/// What happens to data appended but not synced when `crash` simulates power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// The unsynced suffix of every file is lost.
    DropUnsynced,
    /// A random prefix of every unsynced suffix survives (a torn write).
    TearUnsynced,
    /// The unsynced suffix survives but 1 to 4 random bytes in it are corrupted.
    CorruptUnsynced,
    /// Only the process died (the OS kept its page cache): data and pending directory
    /// operations all survive; handles are still invalidated.
    KeepUnsynced,
}

/// The kinds of calls that error rules can target (and that `halt` stops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    /// `Vfs::create`.
    Create,
    /// `Vfs::open_append`.
    OpenAppend,
    /// `Vfs::open_read`.
    OpenRead,
    /// `WritableFile::append`.
    Append,
    /// `WritableFile::sync_data` and `WritableFile::sync`.
    Sync,
    /// `WritableFile::truncate`.
    Truncate,
    /// `Vfs::rename` (the rule's path filter matches either name).
    Rename,
    /// `Vfs::remove`.
    Remove,
    /// `Vfs::sync_dir`.
    SyncDir,
    /// `RandomAccessFile::read_at` (and `len`, `advise`).
    Read,
    /// `Vfs::punch_hole`.
    PunchHole,
    /// `Vfs::link` (the rule's path filter matches either name).
    Link,
    /// Everything else: `list`, `create_dir_all`, `remove_dir`, `file_size`, `disk_usage`,
    /// `link_count` and the locks.
    Meta,
    /// Matches every call (only meaningful as a rule target).
    Any,
}

impl FaultOp {
    /// Calls that change the filesystem: these are counted by `ops_count` and consume
    /// the `set_crash_after_ops` countdown.
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            FaultOp::Create
                | FaultOp::Append
                | FaultOp::Sync
                | FaultOp::Truncate
                | FaultOp::Rename
                | FaultOp::Remove
                | FaultOp::SyncDir
                | FaultOp::PunchHole
                | FaultOp::Link
        )
    }

    fn matches(self, op: FaultOp) -> bool {
        self == FaultOp::Any || self == op
    }
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`: a failing device.
    Io,
    /// `ENOSPC`: a full disk (`Error::is_no_space()` is true).
    NoSpace,
}

impl FaultKind {
    fn errno(self) -> i32 {
        match self {
            FaultKind::Io => libc::EIO,
            FaultKind::NoSpace => libc::ENOSPC,
        }
    }
}

/// One error-injection rule: calls matching `op` (and `path_contains`, if set) fail with
/// `kind`, after letting `skip` matching calls through, `times` times (`None`: until
/// `clear_faults`). A matching call that fails has no effect on the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// The calls the rule applies to.
    pub op: FaultOp,
    /// How a matching call fails.
    pub kind: FaultKind,
    /// Only calls on a path containing this string match (`None`: every path).
    pub path_contains: Option<String>,
    /// Matching calls let through before the rule fires.
    pub skip: u64,
    /// How many matching calls fail (`None`: every one until `clear_faults`).
    pub times: Option<u64>,
}

impl FaultRule {
    /// Fail the next matching call once.
    pub fn once(op: FaultOp, kind: FaultKind) -> Self {
        FaultRule { op, kind, path_contains: None, skip: 0, times: Some(1) }
    }

    /// Fail every matching call until `clear_faults`.
    pub fn always(op: FaultOp, kind: FaultKind) -> Self {
        FaultRule { times: None, ..Self::once(op, kind) }
    }

    /// Only match calls whose path contains `s` (e.g. `".log"`, `"MANIFEST"`).
    pub fn on_path(mut self, s: &str) -> Self {
        self.path_contains = Some(s.to_string());
        self
    }

    /// Let the first `n` matching calls succeed before failing.
    pub fn after(mut self, n: u64) -> Self {
        self.skip = n;
        self
    }

    /// Fail `n` matching calls, then disarm.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    fn matches(&self, op: FaultOp, paths: &[&Path]) -> bool {
        self.op.matches(op)
            && self.path_contains.as_deref().is_none_or(|s| paths.iter().any(|p| p.to_string_lossy().contains(s)))
    }
}

/// A directory operation not yet made durable by `sync_dir`; undone by a crash.
enum PendingDirOp {
    Create {
        dir: PathBuf,
        path: PathBuf,
    },
    Rename {
        dir: PathBuf,
        from: PathBuf,
        to: PathBuf,
        /// Durable contents of the file `to` replaced, if any.
        replaced: Option<Vec<u8>>,
    },
    Remove {
        dir: PathBuf,
        path: PathBuf,
        durable: Vec<u8>,
    },
}

impl PendingDirOp {
    fn dir(&self) -> &Path {
        match self {
            PendingDirOp::Create { dir, .. } | PendingDirOp::Rename { dir, .. } | PendingDirOp::Remove { dir, .. } => {
                dir
            }
        }
    }
}

/// Read-corruption setting: flip one bit with `probability` per read of a matching path.
#[derive(Debug, Clone)]
struct ReadCorruption {
    probability: f64,
    path_contains: Option<String>,
}

type LockSlot = Mutex<Option<Box<dyn FileLock>>>;

/// Everything the wrapper tracks; one mutex so a crash is atomic w.r.t. every call.
struct FaultState {
    /// Bumped by `crash`; handles from an older epoch fail.
    epoch: u64,
    halted: bool,
    /// Mutating calls still allowed before the simulated process death.
    crash_after: Option<u64>,
    ops: u64,
    rules: Vec<FaultRule>,
    read_corruption: Option<ReadCorruption>,
    rng: StdRng,
    next_id: u64,
    /// Files written through this wrapper (path -> file id); absent files are fully durable.
    ids: BTreeMap<PathBuf, u64>,
    /// Durable length per file id.
    synced: HashMap<u64, u64>,
    pending: Vec<PendingDirOp>,
    locks: Vec<Weak<LockSlot>>,
    /// `WISCKEY_FS_TRACE` set: print every mutating call and crash to stderr (to see what a
    /// failing crash test did, e.g. which file was removed before the crash).
    trace: bool,
}

struct Shared {
    inner: Arc<dyn Vfs>,
    seed: u64,
    state: Mutex<FaultState>,
}

/// The fault-injecting filesystem wrapper. Clones share the same state.
#[derive(Clone)]
pub struct FaultFs {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.state.lock();
        f.debug_struct("FaultFs")
            .field("seed", &self.shared.seed)
            .field("epoch", &st.epoch)
            .field("halted", &st.halted)
            .field("ops", &st.ops)
            .field("pending_dir_ops", &st.pending.len())
            .finish()
    }
}

fn os_err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn eio(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, os_err(libc::EIO))
}

/// Same normalization as `MemFs`, so `a/./b` and `a/b` are the same tracked file.
fn norm(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// SplitMix64: a tiny, good-enough hash for deterministic per-read decisions.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn hash_path(path: &Path) -> u64 {
    path.to_string_lossy().bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| mix(h ^ u64::from(b)))
}

impl FaultState {
    /// Admit or refuse a call: stale handle, halted process, countdown, error rules.
    fn gate(&mut self, op: FaultOp, name: &'static str, paths: &[&Path], epoch: Option<u64>) -> Result<()> {
        let path = paths.first().copied().unwrap_or(Path::new(""));
        if self.halted || epoch.is_some_and(|e| e != self.epoch) {
            return Err(eio(name, path));
        }
        if op.is_mutating() {
            if self.trace {
                eprintln!("fault-fs: {name} {paths:?}");
            }
            match self.crash_after {
                Some(0) => {
                    self.halted = true;
                    return Err(eio(name, path));
                }
                Some(n) => self.crash_after = Some(n - 1),
                None => {}
            }
            self.ops += 1;
        }
        self.apply_rules(op, name, paths)
    }

    fn apply_rules(&mut self, op: FaultOp, name: &'static str, paths: &[&Path]) -> Result<()> {
        let path = paths.first().copied().unwrap_or(Path::new(""));
        let Some(i) = self.rules.iter().position(|r| r.matches(op, paths) && (r.skip > 0 || r.times != Some(0))) else {
            return Ok(());
        };
        let rule = &mut self.rules[i];
        if rule.skip > 0 {
            rule.skip -= 1;
            return Ok(());
        }
        let kind = rule.kind;
        if let Some(t) = rule.times.as_mut() {
            *t -= 1;
            if *t == 0 {
                self.rules.remove(i);
            }
        }
        Err(Error::io(name, path, os_err(kind.errno())))
    }

    /// Start tracking `path` (if not yet) with `durable` bytes durable; returns its id.
    fn track(&mut self, path: &Path, durable: u64) -> u64 {
        if let Some(&id) = self.ids.get(path) {
            return id;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert(path.to_path_buf(), id);
        self.synced.insert(id, durable);
        id
    }

    /// Forget `path`; its file's durable length stays known while another name (a hard link)
    /// still has it.
    fn untrack(&mut self, path: &Path) {
        if let Some(id) = self.ids.remove(path) {
            if !self.ids.values().any(|&other| other == id) {
                self.synced.remove(&id);
            }
        }
    }
}

impl Shared {
    /// The contents of `path` that would survive a crash (`None` if it does not exist).
    fn durable_contents(&self, st: &FaultState, path: &Path) -> Result<Option<Vec<u8>>> {
        if !self.inner.exists(path) || self.inner.is_dir(path) {
            return Ok(None);
        }
        let size = self.inner.file_size(path)?;
        let keep = match st.ids.get(path) {
            Some(id) => st.synced.get(id).copied().unwrap_or(0).min(size),
            None => size,
        };
        let mut buf = vec![0u8; usize::try_from(keep).map_err(|_| Error::invalid("file too large"))?];
        self.inner.open_read(path)?.read_exact_at(0, &mut buf)?;
        Ok(Some(buf))
    }

    /// Replace `path` with `data` as a fully durable file.
    fn write_whole(&self, st: &mut FaultState, path: &Path, data: &[u8]) -> Result<()> {
        let mut f = self.inner.create(path)?;
        f.append(data)?;
        f.sync()?;
        st.untrack(path);
        Ok(())
    }

    /// Undo pending directory operations, newest first. Errors are ignored where the
    /// name was since moved by an operation that was made durable (then nothing to undo).
    fn undo_pending(&self, st: &mut FaultState) -> Result<()> {
        while let Some(op) = st.pending.pop() {
            match op {
                PendingDirOp::Create { path, .. } => {
                    let _ = self.inner.remove(&path);
                    st.untrack(&path);
                }
                PendingDirOp::Rename { from, to, replaced, .. } => {
                    if self.inner.rename(&to, &from).is_ok() {
                        st.untrack(&from);
                        if let Some(id) = st.ids.remove(&to) {
                            st.ids.insert(from, id);
                        }
                    }
                    if let Some(data) = replaced {
                        self.write_whole(st, &to, &data)?;
                    }
                }
                PendingDirOp::Remove { path, durable, .. } => self.write_whole(st, &path, &durable)?,
            }
        }
        Ok(())
    }

    /// Apply `mode` to the unsynced suffix of every tracked file (sorted: deterministic).
    fn lose_unsynced(&self, st: &mut FaultState, mode: CrashMode) -> Result<()> {
        let files: Vec<(PathBuf, u64)> = st.ids.iter().map(|(p, &id)| (p.clone(), id)).collect();
        for (path, id) in files {
            if !self.inner.exists(&path) {
                continue;
            }
            let size = self.inner.file_size(&path)?;
            let synced = st.synced.get(&id).copied().unwrap_or(0).min(size);
            if synced == size {
                continue;
            }
            match mode {
                CrashMode::DropUnsynced => self.inner.open_append(&path)?.truncate(synced)?,
                CrashMode::TearUnsynced => {
                    let keep = st.rng.gen_range(synced..=size);
                    self.inner.open_append(&path)?.truncate(keep)?;
                }
                CrashMode::CorruptUnsynced => self.corrupt_range(st, &path, synced, size)?,
                CrashMode::KeepUnsynced => {}
            }
        }
        Ok(())
    }

    /// Overwrite 1 to 4 random bytes of `[from, to)` with different values.
    fn corrupt_range(&self, st: &mut FaultState, path: &Path, from: u64, to: u64) -> Result<()> {
        let mut data = vec![0u8; usize::try_from(to).map_err(|_| Error::invalid("file too large"))?];
        self.inner.open_read(path)?.read_exact_at(0, &mut data)?;
        for _ in 0..st.rng.gen_range(1..=4) {
            // `from < to <= data.len()`, so the index fits usize.
            let at = st.rng.gen_range(from..to) as usize;
            data[at] ^= st.rng.gen_range(1..=255u8);
        }
        self.write_whole(st, path, &data)
    }

    /// Flip one bit of `buf` if read corruption is on and the dice (hashed from the seed,
    /// path and offset, so the same read is corrupted the same way) say so.
    fn maybe_corrupt(&self, path: &Path, offset: u64, buf: &mut [u8]) {
        let Some(rc) = self.state.lock().read_corruption.clone() else {
            return;
        };
        if buf.is_empty() || rc.path_contains.as_deref().is_some_and(|s| !path.to_string_lossy().contains(s)) {
            return;
        }
        let h = mix(self.seed ^ hash_path(path) ^ mix(offset) ^ mix(buf.len() as u64));
        // Top 53 bits as a uniform float in [0, 1).
        let dice = (h >> 11) as f64 / (1u64 << 53) as f64;
        if dice < rc.probability {
            let bit = mix(h) % (buf.len() as u64 * 8);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
    }
}

impl FaultFs {
    /// Wrap `inner`; `seed` makes every random choice reproducible.
    pub fn new(inner: Arc<dyn Vfs>, seed: u64) -> Self {
        let state = FaultState {
            epoch: 0,
            halted: false,
            crash_after: None,
            ops: 0,
            rules: Vec::new(),
            read_corruption: None,
            rng: StdRng::seed_from_u64(seed),
            next_id: 0,
            ids: BTreeMap::new(),
            synced: HashMap::new(),
            pending: Vec::new(),
            locks: Vec::new(),
            trace: std::env::var_os("WISCKEY_FS_TRACE").is_some(),
        };
        FaultFs { shared: Arc::new(Shared { inner, seed, state: Mutex::new(state) }) }
    }

    /// A `FaultFs` over a fresh `MemFs`.
    pub fn in_memory(seed: u64) -> Self {
        Self::new(Arc::new(MemFs::new()), seed)
    }

    /// The wrapped filesystem (bypasses all fault injection and tracking).
    pub fn inner(&self) -> &Arc<dyn Vfs> {
        &self.shared.inner
    }

    /// Simulate power loss (see the module docs): undo pending directory operations, treat
    /// unsynced data per `mode`, invalidate all earlier handles and locks, clear the halt,
    /// the countdown, error rules and read corruption. Errors only if the inner fs fails.
    pub fn crash(&self, mode: CrashMode) -> Result<()> {
        let mut st = self.shared.state.lock();
        if st.trace {
            eprintln!("fault-fs: crash ({mode:?})");
        }
        if mode != CrashMode::KeepUnsynced {
            self.shared.undo_pending(&mut st)?;
        }
        self.shared.lose_unsynced(&mut st, mode)?;
        st.pending.clear();
        st.ids.clear();
        st.synced.clear();
        st.epoch += 1;
        st.halted = false;
        st.crash_after = None;
        st.rules.clear();
        st.read_corruption = None;
        for slot in st.locks.drain(..).filter_map(|w| w.upgrade()) {
            slot.lock().take();
        }
        Ok(())
    }

    /// The process dies now: every further call (through this fs or any handle) fails with
    /// `EIO` until `crash`.
    pub fn halt(&self) {
        self.shared.state.lock().halted = true;
    }

    /// Whether the simulated process is dead (`halt` or the countdown ran out).
    pub fn is_halted(&self) -> bool {
        self.shared.state.lock().halted
    }

    /// Let `n` more mutating calls (see [`FaultOp::is_mutating`]) succeed, then halt: the
    /// `n+1`-th and every later call fail with `EIO`. For crash-point enumeration.
    pub fn set_crash_after_ops(&self, n: u64) {
        self.shared.state.lock().crash_after = Some(n);
    }

    /// Cancel a `set_crash_after_ops` countdown (does not revive a halted fs).
    pub fn clear_crash_after_ops(&self) {
        self.shared.state.lock().crash_after = None;
    }

    /// Mutating calls admitted so far (since creation or `reset_ops_count`).
    pub fn ops_count(&self) -> u64 {
        self.shared.state.lock().ops
    }

    /// Restart the `ops_count` counter at zero.
    pub fn reset_ops_count(&self) {
        self.shared.state.lock().ops = 0;
    }

    /// Make the next call of kind `op` fail with `kind`, once.
    pub fn fail_next(&self, op: FaultOp, kind: FaultKind) {
        self.inject(FaultRule::once(op, kind));
    }

    /// Make every call of kind `op` fail with `kind` until `clear_faults`.
    pub fn fail_always(&self, op: FaultOp, kind: FaultKind) {
        self.inject(FaultRule::always(op, kind));
    }

    /// Add an error rule (path filter, skip count, repetitions). The first armed rule that
    /// matches a call decides it.
    pub fn inject(&self, rule: FaultRule) {
        self.shared.state.lock().rules.push(rule);
    }

    /// Remove every error rule.
    pub fn clear_faults(&self) {
        self.shared.state.lock().rules.clear();
    }

    /// Flip one bit in the data returned by `read_at` with `probability` (0.0 to 1.0) per
    /// call, only for paths containing `path_contains` if given. The decision is a hash of
    /// the seed, path, offset and length: re-reading the same range gives the same bytes.
    pub fn set_read_corruption(&self, probability: f64, path_contains: Option<&str>) {
        self.shared.state.lock().read_corruption =
            Some(ReadCorruption { probability, path_contains: path_contains.map(str::to_string) });
    }

    /// Stop corrupting reads.
    pub fn clear_read_corruption(&self) {
        self.shared.state.lock().read_corruption = None;
    }

    /// Bytes of `path` that a crash would treat as unsynced (0 for untracked files).
    pub fn unsynced_bytes(&self, path: &Path) -> Result<u64> {
        let path = norm(path);
        let st = self.shared.state.lock();
        let Some(id) = st.ids.get(&path) else {
            return Ok(0);
        };
        let size = self.shared.inner.file_size(&path)?;
        Ok(size.saturating_sub(st.synced.get(id).copied().unwrap_or(0)))
    }

    /// Number of directory operations a crash would currently undo.
    pub fn pending_dir_ops(&self) -> usize {
        self.shared.state.lock().pending.len()
    }

    /// A lock the next crash releases (the dead process lets go of it).
    fn held_lock(st: &mut FaultState, inner: Box<dyn FileLock>) -> Box<dyn FileLock> {
        let slot: Arc<LockSlot> = Arc::new(Mutex::new(Some(inner)));
        st.locks.retain(|w| w.strong_count() > 0);
        st.locks.push(Arc::downgrade(&slot));
        Box::new(FaultLock { _slot: slot })
    }

    fn writable(&self, inner: Box<dyn WritableFile>, path: PathBuf, id: u64, epoch: u64) -> Box<dyn WritableFile> {
        Box::new(FaultWritable { inner, shared: self.shared.clone(), path, id, epoch })
    }
}

/// A writable handle that tracks durability and dies at a crash.
struct FaultWritable {
    inner: Box<dyn WritableFile>,
    shared: Arc<Shared>,
    path: PathBuf,
    id: u64,
    epoch: u64,
}

/// `FaultWritable`'s syncer: the same gate as its `sync_data`; what it makes durable is what
/// had been appended when it was asked (`appended`), as a racing append may miss the sync.
struct FaultSyncer {
    inner: Arc<dyn FileSyncer>,
    shared: Arc<Shared>,
    path: PathBuf,
    id: u64,
    epoch: u64,
}

impl FileSyncer for FaultSyncer {
    fn sync_data(&self, appended: u64) -> Result<()> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Sync, "fdatasync", &[&self.path], Some(self.epoch))?;
        self.inner.sync_data(appended)?;
        if let Some(s) = st.synced.get_mut(&self.id) {
            *s = (*s).max(appended);
        }
        Ok(())
    }
}

impl FaultWritable {
    fn sync_with(&mut self, name: &'static str, full: bool) -> Result<()> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Sync, name, &[&self.path], Some(self.epoch))?;
        if full {
            self.inner.sync()?;
        } else {
            self.inner.sync_data()?;
        }
        let len = self.inner.len();
        if let Some(s) = st.synced.get_mut(&self.id) {
            *s = len;
        }
        Ok(())
    }
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Append, "append", &[&self.path], Some(self.epoch))?;
        self.inner.append(data)
    }

    fn sync_data(&mut self) -> Result<()> {
        self.sync_with("fdatasync", false)
    }

    fn sync(&mut self) -> Result<()> {
        self.sync_with("fsync", true)
    }

    /// Passed through ungated: it makes nothing durable, so a crash treats the bytes as unsynced.
    fn start_writeback(&mut self) {
        self.inner.start_writeback();
    }

    fn syncer(&self) -> Option<Arc<dyn FileSyncer>> {
        let inner = self.inner.syncer()?;
        Some(Arc::new(FaultSyncer {
            inner,
            shared: self.shared.clone(),
            path: self.path.clone(),
            id: self.id,
            epoch: self.epoch,
        }))
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Truncate, "truncate", &[&self.path], Some(self.epoch))?;
        self.inner.truncate(len)?;
        if let Some(s) = st.synced.get_mut(&self.id) {
            *s = (*s).min(len);
        }
        Ok(())
    }
}

/// A read handle that can corrupt reads and dies at a crash.
struct FaultReadable {
    inner: Arc<dyn RandomAccessFile>,
    shared: Arc<Shared>,
    epoch: u64,
}

impl FaultReadable {
    fn check(&self, name: &'static str) -> Result<()> {
        let path = self.inner.path();
        self.shared.state.lock().gate(FaultOp::Read, name, &[path], Some(self.epoch))
    }
}

impl RandomAccessFile for FaultReadable {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.check("pread")?;
        let n = self.inner.read_at(offset, buf)?;
        self.shared.maybe_corrupt(self.inner.path(), offset, &mut buf[..n]);
        Ok(n)
    }

    fn len(&self) -> Result<u64> {
        self.check("fstat")?;
        self.inner.len()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn advise(&self, offset: u64, len: u64, advice: Advice) -> Result<()> {
        self.check("fadvise")?;
        self.inner.advise(offset, len, advice)
    }

    fn uncached_ranges(&self, offset: u64, len: u64) -> Option<Vec<std::ops::Range<u64>>> {
        self.inner.uncached_ranges(offset, len)
    }
}

/// A lock whose inner lock is released by a crash (the dead process lets go of it).
struct FaultLock {
    _slot: Arc<LockSlot>,
}

impl FileLock for FaultLock {}

impl Vfs for FaultFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let path = norm(path);
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Create, "create", &[&path], None)?;
        let existed = self.shared.inner.exists(&path);
        let file = self.shared.inner.create(&path)?;
        if !existed {
            st.pending.push(PendingDirOp::Create { dir: parent(&path), path: path.clone() });
        }
        let id = st.track(&path, 0);
        st.synced.insert(id, 0);
        let epoch = st.epoch;
        Ok(self.writable(file, path, id, epoch))
    }

    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let path = norm(path);
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::OpenAppend, "open_append", &[&path], None)?;
        let file = self.shared.inner.open_append(&path)?;
        let id = st.track(&path, file.len());
        let epoch = st.epoch;
        Ok(self.writable(file, path, id, epoch))
    }

    fn open_read(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::OpenRead, "open_read", &[path], None)?;
        let inner = self.shared.inner.open_read(path)?;
        Ok(Arc::new(FaultReadable { inner, shared: self.shared.clone(), epoch: st.epoch }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let (from, to) = (norm(from), norm(to));
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Rename, "rename", &[&from, &to], None)?;
        let replaced = self.shared.durable_contents(&st, &to)?;
        self.shared.inner.rename(&from, &to)?;
        st.untrack(&to);
        if let Some(id) = st.ids.remove(&from) {
            st.ids.insert(to.clone(), id);
        }
        st.pending.push(PendingDirOp::Rename { dir: parent(&to), from, to, replaced });
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let path = norm(path);
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Remove, "remove", &[&path], None)?;
        let durable = self.shared.durable_contents(&st, &path)?;
        self.shared.inner.remove(&path)?;
        st.untrack(&path);
        if let Some(durable) = durable {
            st.pending.push(PendingDirOp::Remove { dir: parent(&path), path, durable });
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.shared.state.lock().gate(FaultOp::Meta, "list", &[dir], None)?;
        self.shared.inner.list(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.shared.state.lock().gate(FaultOp::Meta, "create_dir_all", &[dir], None)?;
        self.shared.inner.create_dir_all(dir)
    }

    fn remove_dir(&self, dir: &Path) -> Result<()> {
        self.shared.state.lock().gate(FaultOp::Meta, "remove_dir", &[dir], None)?;
        self.shared.inner.remove_dir(dir)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let dir = norm(dir);
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::SyncDir, "sync_dir", &[&dir], None)?;
        self.shared.inner.sync_dir(&dir)?;
        st.pending.retain(|p| p.dir() != dir);
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        self.shared.inner.exists(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.shared.inner.is_dir(path)
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        self.shared.state.lock().gate(FaultOp::Meta, "stat", &[path], None)?;
        self.shared.inner.file_size(path)
    }

    fn disk_usage(&self, path: &Path) -> Result<u64> {
        self.shared.state.lock().gate(FaultOp::Meta, "stat", &[path], None)?;
        self.shared.inner.disk_usage(path)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Meta, "lock", &[path], None)?;
        let inner = self.shared.inner.lock(path)?;
        Ok(Self::held_lock(&mut st, inner))
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        self.shared.state.lock().gate(FaultOp::PunchHole, "punch_hole", &[path], None)?;
        self.shared.inner.punch_hole(path, offset, len)
    }

    fn link(&self, from: &Path, to: &Path) -> Result<()> {
        let (from, to) = (norm(from), norm(to));
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Link, "link", &[&from, &to], None)?;
        self.shared.inner.link(&from, &to)?;
        // One file under two names: a sync through either makes it durable for both.
        if let Some(&id) = st.ids.get(&from) {
            st.ids.insert(to.clone(), id);
        }
        st.pending.push(PendingDirOp::Create { dir: parent(&to), path: to });
        Ok(())
    }

    fn link_count(&self, path: &Path) -> Result<u64> {
        self.shared.state.lock().gate(FaultOp::Meta, "stat", &[path], None)?;
        self.shared.inner.link_count(path)
    }

    fn lock_shared(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Meta, "lock", &[path], None)?;
        let inner = self.shared.inner.lock_shared(path)?;
        Ok(Self::held_lock(&mut st, inner))
    }

    fn try_lock_exclusive(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let mut st = self.shared.state.lock();
        st.gate(FaultOp::Meta, "lock", &[path], None)?;
        let inner = self.shared.inner.try_lock_exclusive(path)?;
        Ok(Self::held_lock(&mut st, inner))
    }
}

#[cfg(test)]
mod tests;
