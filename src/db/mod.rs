//! The database handle: opening (with recovery), the public API, and the shared state
//! (`DbInner`) that the read path (`read.rs`) and the three jobs work on — the write queue
//! (`write.rs`), the background scheduler (`scheduler.rs`) and value-log GC (`gc/`).

mod backup;
mod checkpoint;
mod flush;
mod gc;
pub(crate) mod keyspace;
mod properties;
mod read;
mod read_only;
mod recovery;
mod repair;
mod scheduler;
mod sharing;
mod sweep;
mod tuner;
mod txn;
mod txn_cursor;
mod user_iter;
mod verify;
mod workload;
mod write;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

pub use backup::{list_backups, restore_backup, BackupInfo};
pub use checkpoint::CheckpointInfo;
pub use gc::{GcPhaseMicros, GcReport};
pub use keyspace::{Keyspace, Range, DEFAULT_KEYSPACE_NAME, MAX_KEYSPACE_NAME_BYTES};
pub use repair::{LostRange, RecoveryReport, LOST_DIR};
pub use txn::{Isolation, Transaction, TransactionOptions, TxnRange};
pub use txn_cursor::TxnCursor;
pub use user_iter::{DbIterator, Entries};
pub use verify::VerifyReport;
pub use workload::WorkloadCounts;

use crate::compaction::policy::{LeveledPolicy, WackyPolicy};
use crate::compaction::CompactionPolicy;
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{FileLock, Vfs};
use crate::memtable::Memtable;
use crate::options::{Options, ReadOptions, WriteOptions};
use crate::snapshot::{Snapshot, SnapshotList};
use crate::sst::table_cache::TableCache;
use crate::value::Value;
use crate::version::VersionSet;
use crate::write_batch::WriteBatch;
use write::WriterSlot;

/// Counters and shape of the database, for `wisckey bench ... stats` and monitoring.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DbStats {
    /// The merge policy in force (`leveling` or the Wacky knobs, as `MergePolicy` parses them).
    pub merge_policy: String,
    /// What the auto-tuner (`Options::auto_tune`) last did or found, e.g. `moved from tiering
    /// to lazy-leveling at op N, predicted -23 %`; empty when it has done nothing.
    pub auto_tune: String,
    /// The auto-tuner's moves since the database was opened, oldest first (at most the last
    /// `AUTO_TUNE_HISTORY`), each as `auto_tune` states it.
    pub auto_tune_moves: Vec<String>,
    /// Key + value bytes handed to put/delete/write by the user.
    pub user_bytes_written: u64,
    /// Bytes appended to the log (value log).
    pub log_bytes_written: u64,
    /// Bytes of SSTables written by memtable flushes.
    pub flush_bytes_written: u64,
    /// Bytes of SSTables written by compactions.
    pub compaction_bytes_written: u64,
    /// Bytes of SSTables read by compactions.
    pub compaction_bytes_read: u64,
    /// Memtables flushed to tables.
    pub num_flushes: u64,
    /// Compactions run (trivial moves included).
    pub num_compactions: u64,
    /// Compactions done by moving tables down a level without rewriting them.
    pub num_trivial_moves: u64,
    /// Tables deleted without being read: they held only tombstones nothing older could hold.
    pub num_tables_dropped: u64,
    /// Microseconds writers spent stalled waiting for flush/compaction.
    pub stall_micros: u64,
    /// GC's estimate of the value log's space amplification (on-disk / live separated bytes),
    /// the figure `gc_space_amp_target` and `gc_space_amp_stall` act on.
    pub vlog_space_amp_estimate: f64,
    /// Time user writes waited for value-log GC (`Options::gc_space_amp_stall`).
    pub gc_stall_micros: u64,
    /// Where value-log GC's collector spent its time since the open.
    pub gc_phase_micros: GcPhaseMicros,
    /// What the engine holds in memory now, by what holds it.
    pub memory: MemoryUsage,
    /// Bytes of SSTables compactions wrote, by the level they wrote to.
    pub level_compaction_bytes_written: Vec<u64>,
    /// Bytes of SSTables compactions read, by the level they wrote to.
    pub level_compaction_bytes_read: Vec<u64>,
    /// Bytes of SSTables trivial moves re-parented without a rewrite, by the level they moved
    /// to (RocksDB's `Moved(GB)`): the bytes that reached a level without being written there.
    pub level_bytes_moved: Vec<u64>,
    /// Segments light-weight compaction appended to tables (`Options::light_weight_compaction`).
    pub num_segments_appended: u64,
    /// Tables light-weight compaction grew past its limits and rewrote (`Reason::Split`).
    pub num_table_splits: u64,
    /// Tables of several segments rewritten in place because seeks into them were charged too
    /// often (`Reason::Collapse`).
    pub num_table_collapses: u64,
    /// Segments per level, summed over its tables (a plain table is one segment): divided by
    /// `level_files`, the segments a lookup in that level may probe per table.
    pub level_segments: Vec<u64>,
    /// Table files per level.
    pub level_files: Vec<usize>,
    /// Entries per level (every version and tombstone), summed over its tables.
    pub level_entries: Vec<u64>,
    /// Range tombstones per level, summed over its tables (pieces cut at file boundaries
    /// count once per file).
    pub level_range_tombstones: Vec<u64>,
    /// Bytes of Bloom filter per level, as the open tables hold them in memory: with
    /// `level_entries`, the filter bits per entry each level got (Monkey's allocation).
    pub level_filter_bytes: Vec<u64>,
    /// Sorted runs per level.
    pub level_runs: Vec<usize>,
    /// Table bytes per level.
    pub level_bytes: Vec<u64>,
    /// Bytes all the database's files occupy on the device (`st_blocks`), i.e. what `du` shows.
    pub disk_bytes: u64,
    /// Bytes the value-log files occupy on the device (`st_blocks`).
    pub vlog_disk_bytes: u64,
    /// Bytes of separated values the value log holds (as whole log ops: header, key and
    /// value) that tables have referenced.
    pub vlog_value_bytes: u64,
    /// Of `vlog_value_bytes`, the bytes no table references any more (GC's to collect).
    pub vlog_garbage_bytes: u64,
    /// Bytes in memtables (active + immutable).
    pub memtable_bytes: u64,
    /// Bytes of separated values the memtables keep readable from memory
    /// (`Options::memtable_kept_value_max_bytes`), besides `memtable_bytes`.
    pub memtable_kept_bytes: u64,
    /// Sequence number of the newest visible write.
    pub last_sequence: u64,
    /// Value-log files GC collected.
    pub gc_runs: u64,
    /// Bytes of value log GC read.
    pub gc_bytes_read: u64,
    /// Bytes of live values GC moved to cold value files (collections and `reorganize_vlog`).
    pub gc_bytes_rewritten: u64,
    /// Bytes GC gave back to the file system (holes punched, files deleted).
    pub gc_bytes_freed: u64,
    /// Bytes GC appended to cold value files (the values it moved, with their headers).
    pub cold_bytes_written: u64,
    /// Point lookups that reached the LSM-tree (`get`, `multi_get`, GC's liveness checks).
    pub point_lookups: u64,
    /// Tables point lookups consulted (asked their filter, or read, when they have none): one
    /// per sorted run that may hold the key.
    pub filter_probes: u64,
    /// Tables whose Bloom filter let a point lookup in (or that have none).
    pub filter_passes: u64,
    /// Of those, tables that then held no visible entry of the key: what filter memory (and
    /// Monkey's allocation of it) is there to save.
    pub filter_false_positives: u64,
    /// Tables iterator seeks positioned in (one per sorted run that has a table at or after
    /// the target, unless a prefix filter ruled it out).
    pub seek_tables_probed: u64,
    /// Tables a prefix filter (`Options::prefix_extractor`) let `prefix` iterations and
    /// prefix-bounded seeks (`ReadOptions::prefix_same_as_start`) skip.
    pub prefix_tables_skipped: u64,
    /// Transactions committed (with at least one write).
    pub transactions_committed: u64,
    /// Transaction commits refused with `Error::Conflict`.
    pub transaction_conflicts: u64,
    /// Separated values the value cache holds.
    pub value_cache_entries: u64,
    /// Bytes the value cache holds (`Options::value_cache_bytes` at most).
    pub value_cache_bytes: u64,
    /// Value reads the value cache answered (no system call, copy or checksum).
    pub value_cache_hits: u64,
    /// Value reads it could not answer.
    pub value_cache_misses: u64,
    /// The operations the database served over its whole life (kept across opens in the
    /// `WORKLOAD` file; what `wisckey tune --db` tunes for).
    pub workload: WorkloadCounts,
}

/// Bytes the engine holds in memory, by what holds it (`DbStats::memory`; the total is
/// LevelDB's `leveldb.approximate-memory-usage` property). Each part is bounded by an option:
/// the memtables by `write_buffer_bytes` (and the immutable ones waiting for a flush), the
/// caches by their capacities, the tables' metadata by `max_open_files`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryUsage {
    /// Memtables, active and immutable: nodes, keys, inline values and kept separated values.
    pub memtables: u64,
    /// Data blocks in the block cache, and its capacity (`Options::block_cache_bytes`): the
    /// decoded blocks of compressed tables, and the blocks uncompressed tables keep made from
    /// their mapping (about 100 B each), each within the capacity.
    pub block_cache: u64,
    pub block_cache_capacity: u64,
    /// Separated values in the value cache, and its capacity (`Options::value_cache_bytes`).
    pub value_cache: u64,
    pub value_cache_capacity: u64,
    /// Filters and index blocks of the tables held open (`Options::max_open_files` of them),
    /// and their slots for made blocks (16 B per data block of a mapped table).
    pub table_metadata: u64,
}

impl MemoryUsage {
    /// Every part added up.
    pub fn total(&self) -> u64 {
        self.memtables + self.block_cache + self.value_cache + self.table_metadata
    }
}

impl DbStats {
    /// Bytes the engine wrote to files per user byte written.
    pub fn write_amp(&self) -> f64 {
        let written =
            self.log_bytes_written + self.cold_bytes_written + self.flush_bytes_written + self.compaction_bytes_written;
        written as f64 / self.user_bytes_written.max(1) as f64
    }
}

/// Monotonic counters updated by the write path and background jobs.
#[derive(Default)]
pub(crate) struct Counters {
    user_bytes: AtomicU64,
    flush_bytes: AtomicU64,
    compaction_written: AtomicU64,
    compaction_read: AtomicU64,
    /// Compaction bytes written, by output level.
    compaction_written_by_level: Mutex<Vec<u64>>,
    /// Compaction bytes read, by output level.
    compaction_read_by_level: Mutex<Vec<u64>>,
    /// Bytes of tables trivial moves re-parented, by output level.
    moved_by_level: Mutex<Vec<u64>>,
    segments_appended: AtomicU64,
    table_splits: AtomicU64,
    table_collapses: AtomicU64,
    flushes: AtomicU64,
    compactions: AtomicU64,
    trivial_moves: AtomicU64,
    tables_dropped: AtomicU64,
    stall_micros: AtomicU64,
    gc_stall_micros: AtomicU64,
    /// Separated bytes of users' writes (not GC's moves) that flushes handed to tables, and the
    /// garbage compaction found: their recent ratio tells how much of the memtables' user
    /// values is overwrites (`GcPacing`).
    vlog_user_bytes_flushed: AtomicU64,
    vlog_garbage_counted: AtomicU64,
    gc_runs: AtomicU64,
    gc_bytes_read: AtomicU64,
    gc_bytes_rewritten: AtomicU64,
    gc_bytes_freed: AtomicU64,
    cold_bytes: AtomicU64,
    point_lookups: AtomicU64,
    filter_probes: AtomicU64,
    filter_passes: AtomicU64,
    filter_false_positives: AtomicU64,
    /// Tables iterator seeks positioned in, and tables prefix filters let them skip.
    seeks: Arc<crate::version::run_iter::SeekCounts>,
    transactions_committed: AtomicU64,
    transaction_conflicts: AtomicU64,
}

fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

/// Add `bytes` to a per-level counter of `Counters`, growing it to hold `level`.
fn add_at_level(counter: &Mutex<Vec<u64>>, level: usize, bytes: u64) {
    let mut by_level = counter.lock();
    if by_level.len() <= level {
        by_level.resize(level + 1, 0);
    }
    by_level[level] += bytes;
}

/// State guarded by the DB mutex.
pub(crate) struct State {
    mem: Arc<Memtable>,
    /// Memtables waiting to be flushed, oldest first.
    imms: VecDeque<Arc<Memtable>>,
    versions: VersionSet,
    /// Highest sequence number handed out to a write group.
    last_seq: u64,
    /// Set when a background job or the log failed; writes fail until `resume`.
    bg_error: Option<Error>,
    shutting_down: bool,
    /// Writers waiting to commit, the leader at the front.
    writers: VecDeque<Arc<WriterSlot>>,
    /// Table numbers being written by running jobs (not yet in any Version).
    pending_outputs: HashSet<u64>,
    /// Every keyspace's runtime state by id, the default keyspace's (0) first; dropped ones
    /// until their drop is finished.
    trees: std::collections::BTreeMap<u32, keyspace::TreeState>,
    /// The names of keyspaces whose drop finished while this handle was open: a `Keyspace`
    /// handle kept past the drop still gets `KeyspaceDropped`, not a bare unknown id.
    forgotten: HashMap<u32, Arc<str>>,
}

impl State {
    /// Keyspace `id`'s runtime state; every tree the version set knows has one.
    fn tree(&self, id: u32) -> Option<&keyspace::TreeState> {
        self.trees.get(&id)
    }

    /// The error for keyspace `id` when it has no live tree: dropped (whether or not the
    /// background has finished the drop) or never known.
    fn missing_keyspace(&self, id: u32) -> Error {
        match (self.trees.get(&id), self.forgotten.get(&id)) {
            (Some(t), _) => Error::KeyspaceDropped { name: t.name.to_string() },
            (None, Some(name)) => Error::KeyspaceDropped { name: name.to_string() },
            (None, None) => Error::UnknownKeyspace { name: format!("#{id}") },
        }
    }

    /// The id of keyspace `id` if it may be written now; else the error a writer gets.
    pub(crate) fn check_writable(&self, id: u32) -> Result<()> {
        match self.trees.get(&id) {
            Some(t) if !t.dropped => Ok(()),
            _ => Err(self.missing_keyspace(id)),
        }
    }

    /// The id of every keyspace a memtable made now holds a list for.
    pub(crate) fn live_keyspace_ids(&self) -> Vec<u32> {
        self.trees.iter().filter(|(_, t)| !t.dropped).map(|(&id, _)| id).collect()
    }

    /// The memtables, newest first.
    pub(super) fn mems(&self) -> read::Mems {
        let mut mems = smallvec::SmallVec::with_capacity(1 + self.imms.len());
        mems.push(self.mem.clone());
        mems.extend(self.imms.iter().rev().cloned());
        mems
    }

    /// Whether any running compaction holds a level of any keyspace.
    fn compactions_running(&self) -> bool {
        self.trees.values().any(|t| !t.busy_levels.is_empty())
    }
}

/// Everything the handle and the background threads share: the state under the DB mutex, the
/// files, caches and counters every path uses, and the three jobs that own their own fields —
/// the write queue (group commit and the log), the background scheduler (flushes and
/// compactions) and value-log GC.
pub(crate) struct DbInner {
    dir: PathBuf,
    opts: Options,
    /// Puts with a time-to-live were written since the database was opened: `compact_range`
    /// then rewrites the deepest level too, so it drops the expired entries there.
    ttl_written: std::sync::atomic::AtomicBool,
    vfs: Arc<dyn Vfs>,
    state: Mutex<State>,
    /// Group commit: the log appender and the sequence number readers may see.
    writes: write::WriteQueue,
    /// Flush and compaction threads, and what they wait on.
    scheduler: scheduler::Scheduler,
    /// Value-log garbage collection.
    gc: gc::Gc,
    /// When users last wrote and read, as GC and compaction look at it (`users_active`).
    activity: workload::UserActivity,
    table_cache: Arc<TableCache>,
    /// Chunks the memtables copy the values they keep into, reused across memtables.
    chunk_pool: Arc<crate::memtable::ChunkPool>,
    vlog: crate::vlog::VlogReader,
    snapshots: Arc<SnapshotList>,
    counters: Counters,
    /// What the files owe to checkpoints, backups and read-only handles (`sharing.rs`); a
    /// read-only handle's view.
    sharing: sharing::Sharing,
}

/// What an open builds before it recovers: the database's directory, the readers of its
/// tables and value files, and its file-sharing state.
struct Parts {
    dir: PathBuf,
    table_cache: Arc<TableCache>,
    vlog: crate::vlog::VlogReader,
    sharing: sharing::Sharing,
}

/// The table cache (with its block cache) and the value-log reader of the database in `dir`.
fn file_readers(vfs: &Arc<dyn Vfs>, dir: &Path, o: &Options) -> (Arc<TableCache>, crate::vlog::VlogReader) {
    let block_cache = (o.block_cache_bytes > 0).then(|| crate::sst::block_cache::new_block_cache(o.block_cache_bytes));
    let read_options = crate::sst::TableReadOptions::from_options(o);
    let table_cache =
        Arc::new(TableCache::new(vfs.clone(), dir.to_path_buf(), o.max_open_files, block_cache, read_options));
    let vlog = crate::vlog::VlogReader::new(vfs.clone(), dir.to_path_buf(), o.io_uring)
        .with_mapped_reads(o.mmap_value_reads)
        .with_value_cache(o.value_cache_bytes);
    (table_cache, vlog)
}

impl DbInner {
    /// The shared state of a database `recovered` from its files (the keyspaces' workload
    /// counts taken from `WORKLOAD`). The value-log reader reads the log appender's buffer,
    /// except for a read-only handle (which has no appender: its open attached the log's view).
    fn assemble(p: Parts, mut recovered: recovery::Recovered) -> Arc<DbInner> {
        let Parts { dir, table_cache, vlog, sharing } = p;
        let options = recovered.options.clone();
        let vfs = options.vfs.clone();
        let mut trees = std::mem::take(&mut recovered.trees);
        for (name, counts) in workload::load(&*vfs, &dir) {
            if let Some(t) = trees.values_mut().find(|t| !t.dropped && *t.name == *name) {
                t.workload = Arc::new(workload::WorkloadCounters::starting_at(counts));
            }
        }
        let gc = gc::Gc::after_recovery(&recovered.mem, &vlog, recovered.log.file_number(), options.memtable_log_bytes);
        let writes = write::WriteQueue::new(recovered.log, recovered.last_seq);
        if sharing.read_only_view().is_none() {
            vlog.attach_log(writes.log.clone());
        }
        // The active memtable, the immutable ones, and as much again being reclaimed.
        let memtables = options.max_immutable_memtables as u64 + 2;
        let pool_bytes = options.memtable_log_bytes.saturating_mul(memtables);
        let node_bytes = (options.write_buffer_bytes as u64).saturating_mul(memtables);
        let chunk_pool = Arc::new(crate::memtable::ChunkPool::new(pool_bytes, node_bytes));
        Arc::new(DbInner {
            state: Mutex::new(State {
                mem: recovered.mem,
                imms: VecDeque::new(),
                versions: recovered.versions,
                last_seq: recovered.last_seq,
                bg_error: None,
                shutting_down: false,
                writers: VecDeque::new(),
                pending_outputs: HashSet::new(),
                trees,
                forgotten: HashMap::new(),
            }),
            writes,
            scheduler: scheduler::Scheduler::default(),
            gc,
            activity: workload::UserActivity::default(),
            dir,
            opts: options,
            ttl_written: std::sync::atomic::AtomicBool::new(false),
            vfs,
            table_cache,
            chunk_pool,
            vlog,
            snapshots: Arc::new(SnapshotList::default()),
            counters: Counters::default(),
            sharing,
        })
    }

    fn background_error(&self, st: &State) -> Result<()> {
        match &st.bg_error {
            Some(e) => Err(Error::Background { reason: e.to_string() }),
            None if st.shutting_down => Err(Error::Closed),
            None => Ok(()),
        }
    }
}

/// An open database. `Send + Sync`: share it between threads with `Arc<Db>` or by reference.
pub struct Db {
    inner: Arc<DbInner>,
    /// The default keyspace: the database's own reads and writes go to it.
    default: Keyspace,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Held by the handle, not the shared state: an iterator that outlives the handle must
    /// not keep the database locked. The `LOCK` file's lock for the writer; for a read-only
    /// handle its registration on `READERS` (if the directory let it register).
    lock: Mutex<Option<Box<dyn FileLock>>>,
    /// What a salvaging open left out.
    recovery_report: Option<RecoveryReport>,
}

impl Db {
    /// Open (or create, with `create_if_missing`) the database in directory `path`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        validate_options(&options)?;
        let dir = path.as_ref().to_path_buf();
        let vfs = options.vfs.clone();
        let lock = prepare_dir(&*vfs, &dir, &options)?;
        let (table_cache, vlog) = file_readers(&vfs, &dir, &options);
        // Recovery settles the options: what the caller did not name comes from the manifest.
        let mut recovered = recovery::recover(&vfs, &dir, options)?;
        gc::find_cold_files(&*vfs, &dir, &mut recovered.versions, &vlog)?;
        let recovery_report = recovered.report.take();
        let inner =
            DbInner::assemble(Parts { dir, table_cache, vlog, sharing: sharing::Sharing::default() }, recovered);
        let threads = scheduler::spawn(&inner)?;
        inner.delete_obsolete_files(&mut inner.state.lock());
        let default = inner.keyspace(DEFAULT_KEYSPACE_NAME)?;
        Ok(Db { inner, default, threads: Mutex::new(threads), lock: Mutex::new(Some(lock)), recovery_report })
    }

    /// Begin an optimistic transaction with snapshot isolation, not synced (see
    /// `transaction_with`): it reads at a snapshot of now with its own writes visible, and
    /// `Transaction::commit` writes all its writes atomically, in any keyspaces, unless another
    /// commit wrote one of its keys after its snapshot (`Error::Conflict`).
    pub fn transaction(&self) -> Transaction {
        self.transaction_with(TransactionOptions::default())
    }

    /// Begin an optimistic transaction with `opts` (serializable isolation, synced commit).
    pub fn transaction_with(&self, opts: TransactionOptions) -> Transaction {
        Transaction::begin(self.inner.clone(), opts)
    }

    /// The default keyspace: what `Db`'s own reads and writes use.
    pub fn default_keyspace(&self) -> &Keyspace {
        &self.default
    }

    /// The keyspace named `name` (`Error::UnknownKeyspace` if there is none).
    pub fn keyspace(&self, name: &str) -> Result<Keyspace> {
        self.inner.keyspace(name)
    }

    /// Create keyspace `name`, an LSM-tree of its own shaped by `options`' shaping settings
    /// (merge policy, separation threshold, filters, block and table sizes, compression,
    /// light-weight compaction, level sizes; `docs/format/manifest.md` lists them); the
    /// database's memory, caches, log and GC settings, its key order (`Options::comparator`)
    /// and its filter policy apply to it as to every keyspace. The settings are recorded: the
    /// keyspace reopens with them. A name is 1 to 255 bytes, with no path separator or control
    /// character; `Error::KeyspaceExists` if it is taken.
    pub fn create_keyspace(&self, name: &str, options: Options) -> Result<Keyspace> {
        self.inner.create_keyspace(name, options)
    }

    /// The keyspace named `name`, created with `options` if it does not exist.
    pub fn open_keyspace(&self, name: &str, options: Options) -> Result<Keyspace> {
        // An existing keyspace takes the merge operator given (merge operators are code: the
        // manifest records only their names).
        if let Ok(ks) = self.inner.keyspace(name) {
            self.inner.install_merge_operator(ks.id(), &options)?;
            return Ok(ks);
        }
        match self.inner.keyspace(name) {
            Err(Error::UnknownKeyspace { .. }) => match self.inner.create_keyspace(name, options) {
                // Another thread created it first.
                Err(Error::KeyspaceExists { .. }) => self.inner.keyspace(name),
                r => r,
            },
            r => r,
        }
    }

    /// Drop keyspace `name`: it is gone for readers and writers at once (one manifest record);
    /// its tables are deleted and its values in the value log become garbage for GC in the
    /// background. Handles to it then fail with `Error::KeyspaceDropped`. The default
    /// keyspace cannot be dropped.
    pub fn drop_keyspace(&self, name: &str) -> Result<()> {
        self.inner.drop_keyspace(name)
    }

    /// The names of the database's keyspaces, `default` first.
    pub fn keyspaces(&self) -> Vec<String> {
        self.inner.keyspace_names()
    }

    /// Set `key` to `value` (not synced: see `put_opt`).
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.default.put(key, value)
    }

    /// Set `key` to `value`; with `wo.sync` the write survives a crash once this returns.
    pub fn put_opt(&self, wo: &WriteOptions, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.default.put_opt(wo, key, value)
    }

    /// Set `key` to `value` until `ttl` has passed (see `Keyspace::put_with_ttl`).
    pub fn put_with_ttl(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, ttl: std::time::Duration) -> Result<()> {
        self.default.put_with_ttl(key, value, ttl)
    }

    /// `put_with_ttl` with write options.
    pub fn put_with_ttl_opt(
        &self,
        wo: &WriteOptions,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) -> Result<()> {
        self.default.put_with_ttl_opt(wo, key, value, ttl)
    }

    /// Remove `key` (not synced: see `delete_opt`). Deleting a missing key is not an error.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.default.delete(key)
    }

    /// Remove `key`; with `wo.sync` the deletion survives a crash once this returns.
    pub fn delete_opt(&self, wo: &WriteOptions, key: impl AsRef<[u8]>) -> Result<()> {
        self.default.delete_opt(wo, key)
    }

    /// Remove every key in `[begin, end)` with one range tombstone (see
    /// `Keyspace::delete_range`).
    pub fn delete_range(&self, begin: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.default.delete_range(begin, end)
    }

    /// `delete_range` with write options.
    pub fn delete_range_opt(&self, wo: &WriteOptions, begin: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.default.delete_range_opt(wo, begin, end)
    }

    /// Merge `operand` into `key` with `Options::merge_operator` (see `Keyspace::merge`).
    pub fn merge(&self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        self.default.merge(key, operand)
    }

    /// `merge` with write options.
    pub fn merge_opt(&self, wo: &WriteOptions, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        self.default.merge_opt(wo, key, operand)
    }

    /// Apply a batch atomically, across every keyspace it names: after a crash either all of
    /// it or none of it is there. A batch naming a dropped keyspace fails whole.
    pub fn write(&self, wo: &WriteOptions, batch: &WriteBatch) -> Result<()> {
        self.inner.count_batch_writes(&self.default, batch);
        self.inner.writes.write(&self.inner, wo.sync, batch.clone())
    }

    /// The value of `key` now, `None` if it is absent or deleted. The value is a shared handle
    /// (`Value` derefs to `[u8]`): a value the value cache holds is handed out without a copy.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.default.get(key)
    }

    /// The value of `key` as `ro` asks (at its snapshot, if any).
    pub fn get_opt(&self, ro: &ReadOptions, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.default.get_opt(ro, key)
    }

    /// Look up many keys at once: the LSM-tree lookups come first, then the separated values
    /// are read in parallel (`ro.readahead_values` at a time; io_uring or a thread pool).
    /// Returns one entry per key, in order; all reads see the same state.
    pub fn multi_get<K: AsRef<[u8]>>(&self, ro: &ReadOptions, keys: &[K]) -> Result<Vec<Option<Value>>> {
        self.default.multi_get(ro, keys)
    }

    /// Look up keys of several keyspaces at one sequence number: `(keyspace, key)` pairs,
    /// one result each, in order.
    pub fn multi_get_in<K: AsRef<[u8]>>(
        &self,
        ro: &ReadOptions,
        keys: &[(&Keyspace, K)],
    ) -> Result<Vec<Option<Value>>> {
        // One snapshot for all of them, then each keyspace's batch.
        let snapshot = ro.snapshot.clone().unwrap_or_else(|| self.snapshot());
        let ro = ReadOptions { snapshot: Some(snapshot), ..ro.clone() };
        keys.iter().map(|(ks, k)| ks.get_opt(&ro, k)).collect()
    }

    /// Whether parallel value reads (iterator read-ahead, `multi_get`) of real files go through
    /// io_uring; `false` when `Options::io_uring` is off or the kernel refused a ring at open.
    pub fn uses_io_uring(&self) -> bool {
        self.inner.uses_io_uring()
    }

    /// A cursor over the default keyspace; call a seek method before reading from it.
    pub fn iter(&self, ro: &ReadOptions) -> Result<DbIterator> {
        self.default.iter(ro)
    }

    /// The entries of the default keyspace in `range`, as a double-ended iterator (see
    /// `Keyspace::range`).
    pub fn range<K: AsRef<[u8]>, R: std::ops::RangeBounds<K>>(&self, range: R) -> Result<Range> {
        self.default.range(range)
    }

    /// The entries of the default keyspace whose keys start with `prefix` (see
    /// `Keyspace::prefix`).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<Range> {
        self.default.prefix(prefix)
    }

    /// Up to `limit` entries from the first key >= `from` (within `ro`'s bounds), in ascending
    /// key order, with their values: a short scan whose length is known. The keys and value
    /// pointers are collected first and the separated values then read as one batch (cached
    /// ones from the value cache; the others with one submission, sorted by position, ops lying
    /// back to back read as one range), so a scan of n values costs about one lookup plus n
    /// cache hits or one parallel read, not n sequential reads.
    pub fn scan_from(&self, ro: &ReadOptions, from: impl AsRef<[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Value)>> {
        self.default.scan_from(ro, from, limit)
    }

    /// All entries in `[ro.lower_bound, ro.upper_bound)` in ascending key order.
    pub fn scan(&self, ro: &ReadOptions) -> Result<Entries> {
        self.default.scan(ro)
    }

    /// All entries in `[ro.lower_bound, ro.upper_bound)` in descending key order.
    pub fn scan_rev(&self, ro: &ReadOptions) -> Result<Entries> {
        self.default.scan_rev(ro)
    }

    /// A consistent view of the database as of now.
    pub fn snapshot(&self) -> Snapshot {
        self.inner.snapshots.acquire_newest(|| self.inner.writes.visible_seq())
    }

    /// Flush the memtable to an SSTable and wait for it.
    pub fn flush(&self) -> Result<()> {
        self.writable("flush")?;
        self.inner.scheduler.flush(&self.inner)
    }

    /// Compact every file overlapping `[begin, end]` (user keys; None = unbounded) down to
    /// the deepest level holding data in that range.
    pub fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.default.compact_range(begin, end)
    }

    /// Block until no flush, automatic compaction or value-log GC is pending: the GC rounds
    /// background GC would run now run in the calling thread (as RocksDB's `WaitForCompact`
    /// waits for BlobDB's GC, part of its compactions), at most one per value file. A round
    /// stopped by an old snapshot or iterator ends the wait; a GC error is logged and left to
    /// the GC thread's retry, not returned.
    pub fn wait_for_background_work(&self) -> Result<()> {
        if self.is_read_only() {
            // A read-only handle runs no background work.
            return Ok(());
        }
        self.inner.scheduler.wait_for_background_work(&self.inner)
    }

    /// One step of the auto-tuner for the default keyspace now (`Keyspace::auto_tune_now`).
    pub fn auto_tune_now(&self) -> Result<bool> {
        self.default.auto_tune_now()
    }

    /// Counters and shape of the database now.
    pub fn stats(&self) -> DbStats {
        DbStats { vlog_space_amp_estimate: self.inner.gc.vlog_space_amp(&self.inner), ..self.inner.stats(0) }
    }

    /// Collect value-log files whose garbage ratio is at least `min_garbage_ratio` now
    /// (background GC does the same with `Options::gc_garbage_ratio`).
    pub fn run_gc(&self, min_garbage_ratio: f64) -> Result<GcReport> {
        self.writable("run_gc")?;
        self.inner.gc.run_gc(&self.inner, min_garbage_ratio)
    }

    /// Rewrite every separated value in key order (then collect the old copies), so range
    /// scans after a random load read the value log sequentially.
    pub fn reorganize_vlog(&self) -> Result<GcReport> {
        self.writable("reorganize_vlog")?;
        self.inner.gc.reorganize(&self.inner)
    }

    /// What the open left out of the database when it salvaged a damaged log
    /// (`RecoveryMode::PointInTime` / `SkipDamaged`); `None` when nothing was lost.
    pub fn recovery_report(&self) -> Option<&RecoveryReport> {
        self.recovery_report.as_ref()
    }

    /// Check every checksum and every live value pointer; see `VerifyReport`.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.inner.verify()
    }

    /// Leave the read-only state entered after a background I/O error (e.g. once space is freed).
    pub fn resume(&self) -> Result<()> {
        self.writable("resume")?;
        self.inner.writes.resume(&self.inner)
    }

    /// Write the log buffer out, stop background work and release the lock.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// The database's directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Whether this handle was opened with `open_read_only`.
    pub fn is_read_only(&self) -> bool {
        self.inner.sharing.read_only_view().is_some()
    }

    /// `Err(ReadOnly)` on a read-only handle: `op` would change the database.
    fn writable(&self, op: &'static str) -> Result<()> {
        self.inner.sharing.writable(&self.inner.dir, op)
    }

    fn shutdown(&self) -> Result<()> {
        {
            let mut st = self.inner.state.lock();
            if st.shutting_down {
                return Ok(());
            }
            // Let queued writers finish before the log is closed.
            while !st.writers.is_empty() {
                self.inner.scheduler.progress.wait_for(&mut st, std::time::Duration::from_millis(10));
            }
            st.shutting_down = true;
            self.inner.scheduler.flush_cv.notify_all();
            self.inner.scheduler.compact_cv.notify_all();
            self.inner.scheduler.tune_cv.notify_all();
            self.inner.gc.cv.notify_all();
            self.inner.scheduler.progress.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        if self.is_read_only() {
            // Nothing to save: the handle wrote nothing. Dropping the registration lets the
            // writer delete and punch again.
            self.lock.lock().take();
            return Ok(());
        }
        let counts: Vec<(String, WorkloadCounts)> = {
            let st = self.inner.state.lock();
            st.trees.values().filter(|t| !t.dropped).map(|t| (t.name.to_string(), t.workload.counts())).collect()
        };
        if let Err(e) = workload::save(&*self.inner.vfs, &self.inner.dir, &counts) {
            tracing::warn!(error = %e, "could not save the workload counts");
        }
        let r = self.record_clean_close();
        self.lock.lock().take();
        r
    }
}

impl Db {
    /// Sync the log, sealed (the sync mark vouching for the last writes is durable too), and
    /// record in the manifest how far it is durable: recovery then knows that damage anywhere
    /// before that point — even damage that took the last marks with it — is not a torn tail.
    fn record_clean_close(&self) -> Result<()> {
        let end = {
            let mut log = self.inner.writes.log.lock();
            log.sync_sealed()?;
            log.end()
        };
        let mut st = self.inner.state.lock();
        if st.bg_error.is_some() {
            return Ok(());
        }
        let edit = crate::version::VersionEdit { log_durable: Some(end), ..Default::default() };
        st.versions.log_and_apply(edit).map(|_| ())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(dir = ?self.inner.dir, error = %e, "closing the database failed");
        }
    }
}

/// Users count as writing (or reading) while they did so within this many GC intervals
/// (`Options::gc_interval_ms`), and at least a second.
const ACTIVE_INTERVALS: u64 = 5;

impl DbInner {
    /// Whether users wrote, and whether they read (a lookup, an iterator opened, or a snapshot
    /// or iterator still open), lately (`ACTIVE_INTERVALS`). `st`: the state, locked.
    pub(super) fn users_active(&self, st: &State) -> (bool, bool) {
        let written = self.counters.user_bytes.load(std::sync::atomic::Ordering::Relaxed);
        let read: u64 = st.trees.values().map(|t| t.workload.reads()).sum();
        let window =
            std::time::Duration::from_millis(self.opts.gc_interval_ms.saturating_mul(ACTIVE_INTERVALS).max(1000));
        let (wrote, read) = self.activity.recent(written, read, window);
        (wrote, read || self.snapshots.oldest().is_some())
    }
}

impl DbInner {
    /// Count a user batch's ops against the keyspaces they write (the default keyspace's
    /// without a lock: most batches write nothing else).
    fn count_batch_writes(&self, default: &Keyspace, batch: &WriteBatch) {
        let mut others = Vec::new();
        let mut defaults = 0;
        for (ks, _) in batch.iter().flatten() {
            match ks {
                0 => defaults += 1,
                _ => others.push(ks),
            }
        }
        default.count_writes(defaults);
        if !others.is_empty() {
            let st = self.state.lock();
            for ks in others {
                if let Some(t) = st.trees.get(&ks) {
                    t.workload.writes.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The compaction policy `o` asks for.
pub(super) fn policy_for(o: &Options) -> Box<dyn CompactionPolicy> {
    match o.merge_policy {
        crate::options::MergePolicy::Leveling => Box::new(LeveledPolicy::from_options(o)),
        crate::options::MergePolicy::Wacky(knobs) => Box::new(WackyPolicy::new(o, knobs)),
    }
}

/// Reject option values that cannot work.
pub(super) fn validate_options(o: &Options) -> Result<()> {
    let bad = |what: &str| Err(Error::invalid(what.to_string()));
    if o.write_buffer_bytes < 1024 {
        return bad("write_buffer_bytes must be at least 1 KiB");
    }
    if o.num_levels < 2 || o.num_levels > 64 {
        return bad("num_levels must be between 2 and 64");
    }
    if o.block_size_bytes < 64 || o.block_restart_interval == 0 {
        return bad("block_size_bytes must be >= 64 and block_restart_interval >= 1");
    }
    if o.l0_slowdown_trigger < o.l0_compaction_trigger || o.l0_stop_trigger < o.l0_slowdown_trigger {
        return bad("l0 triggers must satisfy compaction <= slowdown <= stop");
    }
    if (o.gc_space_amp_target != 0.0 && o.gc_space_amp_target <= 1.0)
        || (o.gc_space_amp_stall != 0.0 && o.gc_space_amp_stall <= 1.0)
    {
        return bad("gc_space_amp_target and gc_space_amp_stall must be 0 (off) or above 1.0");
    }
    if o.gc_space_amp_stall != 0.0 && o.gc_space_amp_stall < o.gc_space_amp_target {
        return bad("gc_space_amp_stall must be 0 (off) or at least gc_space_amp_target");
    }
    if let crate::options::MergePolicy::Wacky(k) = &o.merge_policy {
        k.validate().map_err(|e| Error::invalid(format!("merge policy: {e}")))?;
        if o.light_weight_compaction {
            return Err(Error::invalid(format!(
                "light_weight_compaction appends to the tables of a leveled level; merge policy {k} keeps \
                 several runs per level: use MergePolicy::Leveling with it, or turn it off"
            )));
        }
    }
    if o.compaction_threads == 0 || o.compaction_threads > 16 {
        return bad("compaction_threads must be between 1 and 16");
    }
    if !(0..=19).contains(&o.compaction_nice_in_force()) {
        return bad("compaction_nice must be between 0 and 19");
    }
    if o.max_immutable_memtables == 0 {
        return bad("max_immutable_memtables must be at least 1");
    }
    Ok(())
}

/// Check the directory, create it if allowed, and take the lock.
fn prepare_dir(vfs: &dyn Vfs, dir: &Path, o: &Options) -> Result<Box<dyn FileLock>> {
    let not_db = |reason: &str| Error::NotADatabase { path: dir.to_path_buf(), reason: reason.to_string() };
    if vfs.exists(dir) && !vfs.is_dir(dir) {
        return Err(not_db("the path exists and is not a directory"));
    }
    if !vfs.exists(dir) {
        if !o.create_if_missing {
            return Err(not_db("the directory does not exist (create_if_missing is off)"));
        }
        vfs.create_dir_all(dir)?;
    }
    let lock = vfs.lock(&filename::lock_file_name(dir))?;
    let current = vfs.exists(&filename::current_file_name(dir));
    if current && o.error_if_exists {
        return Err(Error::AlreadyExists { path: dir.to_path_buf() });
    }
    if !current {
        if !o.create_if_missing {
            return Err(not_db("no CURRENT file (create_if_missing is off)"));
        }
        let has_data = vfs.list(dir)?.iter().any(|n| {
            matches!(filename::parse_file_name(n), Some((FileKind::Table, _)) | Some((FileKind::Manifest, _)))
        });
        if has_data {
            return Err(not_db("table or manifest files exist but CURRENT is missing"));
        }
    }
    Ok(lock)
}

/// Delete a database directory's files (LevelDB's DestroyDB). Fails with `Error::Locked` if
/// the database is open, for writing or (a handle registered on `READERS`) for reading.
pub fn destroy(path: impl AsRef<Path>, options: &Options) -> Result<()> {
    let dir = path.as_ref();
    let vfs = &options.vfs;
    if !vfs.exists(dir) {
        return Ok(());
    }
    let lock_path = filename::lock_file_name(dir);
    let lock = vfs.lock(&lock_path)?;
    let readers = vfs.try_lock_exclusive(&filename::readers_file_name(dir))?;
    for name in vfs.list(dir)? {
        if let Some((kind, _)) = filename::parse_file_name(&name) {
            if !matches!(kind, FileKind::Lock | FileKind::Readers) {
                vfs.remove(&dir.join(&name))?;
            }
        }
    }
    // Salvage evidence (`lost/`) goes with the database.
    let lost = dir.join(LOST_DIR);
    if vfs.is_dir(&lost) {
        for name in vfs.list(&lost)? {
            vfs.remove(&lost.join(&name))?;
        }
        vfs.remove_dir(&lost)?;
    }
    drop(readers);
    drop(lock);
    let _ = vfs.remove(&lock_path);
    let _ = vfs.remove(&filename::readers_file_name(dir));
    let _ = vfs.remove_dir(dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use std::collections::BTreeMap;

    fn small_opts(fs: &Arc<MemFs>) -> Options {
        Options::default()
            .vfs(fs.clone())
            .write_buffer_bytes(4 << 10)
            .target_file_size_bytes(8 << 10)
            .max_bytes_for_level_base(32 << 10)
    }

    fn check_all(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
        for (k, v) in model {
            assert_eq!(db.get(k).unwrap().as_deref(), Some(&v[..]), "key {k:?}");
        }
        let owned = |r: Result<(Vec<u8>, Value)>| r.map(|(k, v)| (k, v.to_vec())).unwrap();
        let got: Vec<_> = db.scan(&ReadOptions::default()).unwrap().map(owned).collect();
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "forward scan differs from the model");
        let mut back: Vec<_> = db.scan_rev(&ReadOptions::default()).unwrap().map(owned).collect();
        back.reverse();
        assert!(back == want, "backward scan differs from the model");
    }

    #[test]
    fn writes_survive_flushes_compactions_and_reopen() {
        let fs = Arc::new(MemFs::new());
        let mut model = BTreeMap::new();
        let db = Db::open("/db", small_opts(&fs)).unwrap();
        for i in 0..3000u32 {
            let k = format!("key{:05}", (i * 7919) % 2000).into_bytes();
            if i % 5 == 4 {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        db.wait_for_background_work().unwrap();
        check_all(&db, &model);
        let s = db.stats();
        assert!(s.num_flushes > 0, "{s:?}");
        assert!(s.level_files.iter().skip(1).sum::<usize>() > 0, "{s:?}");
        drop(db);
        let db = Db::open("/db", small_opts(&fs)).unwrap();
        check_all(&db, &model);
        db.compact_range(None, None).unwrap();
        check_all(&db, &model);
        assert_eq!(db.get(b"missing").unwrap(), None);
    }

    #[test]
    fn separated_values_are_read_back_from_buffer_file_and_after_reopen() {
        let fs = Arc::new(MemFs::new());
        let opts = || small_opts(&fs).min_separated_value_bytes(100).log_file_bytes(4096);
        let mut model = BTreeMap::new();
        let db = Db::open("/db", opts()).unwrap();
        for i in 0..600u32 {
            let k = format!("k{:04}", i % 250).into_bytes();
            let v = vec![b'a' + (i % 26) as u8; if i % 2 == 0 { 150 } else { 20 }];
            db.put(&k, &v).unwrap();
            assert_eq!(db.get(&k).unwrap().as_deref(), Some(&v[..]), "read-your-write of {k:?}");
            model.insert(k, v);
        }
        check_all(&db, &model);
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        check_all(&db, &model);
        drop(db);
        let db = Db::open("/db", opts()).unwrap();
        check_all(&db, &model);
    }

    fn gc_opts(fs: &Arc<MemFs>) -> Options {
        small_opts(fs).min_separated_value_bytes(64).log_file_bytes(32 << 10).gc_interval_ms(0).gc_chunk_bytes(8 << 10)
    }

    fn overwrite_rounds(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, rounds: u32) {
        for r in 0..rounds {
            for i in 0..200u32 {
                let k = format!("key{i:04}").into_bytes();
                let v = format!("{r}-{i}-{}", "v".repeat(200)).into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
    }

    #[test]
    fn memory_usage_adds_up_its_parts_and_stays_within_the_caches_capacities() {
        let fs = Arc::new(MemFs::new());
        let opts = small_opts(&fs)
            .block_cache_bytes(64 << 10)
            .value_cache_bytes(32 << 10)
            .min_separated_value_bytes(64)
            .gc_interval_ms(0);
        let db = Db::open("/db", opts).unwrap();
        let empty = db.stats().memory;
        assert_eq!((empty.block_cache, empty.value_cache, empty.table_metadata), (0, 0, 0), "{empty:?}");
        for i in 0..2000u32 {
            db.put(format!("key{i:05}"), vec![i as u8; 200]).unwrap();
        }
        db.flush().unwrap();
        // Nothing runs in the background from here on (no GC, no compaction left to do).
        db.wait_for_background_work().unwrap();
        for i in 0..2000u32 {
            assert_eq!(db.get(format!("key{i:05}")).unwrap().map(|v| v.len()), Some(200));
        }
        let m = db.stats().memory;
        assert!(m.table_metadata > 0, "the open tables' filters and indexes: {m:?}");
        assert!(m.value_cache > 0 && m.value_cache <= m.value_cache_capacity, "{m:?}");
        assert!(m.block_cache <= m.block_cache_capacity, "{m:?}");
        assert_eq!(m.total(), m.memtables + m.block_cache + m.value_cache + m.table_metadata);
        let property = db.property("leveldb.approximate-memory-usage").unwrap();
        // Read a moment later, with nothing running: the same parts.
        assert_eq!(property.parse::<u64>().unwrap(), db.stats().memory.total());
    }

    /// Mapped tables keep the blocks a read made for the next read, within the block cache's
    /// capacity over all tables: a scan of every block leaves no more than that behind.
    #[test]
    fn a_scan_of_mapped_tables_keeps_made_blocks_within_the_block_cache_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let held_after_scan = |capacity: usize| {
            let path = dir.path().join(format!("db{capacity}"));
            let opts = Options::default().block_cache_bytes(capacity).gc_interval_ms(0);
            let db = Db::open(&path, opts).unwrap();
            for i in 0..20_000u32 {
                db.put(format!("key{i:06}"), vec![i as u8; 100]).unwrap();
            }
            db.flush().unwrap();
            db.wait_for_background_work().unwrap();
            let mut it = db.iter(&ReadOptions::default()).unwrap();
            it.seek_to_first().unwrap();
            let mut n = 0;
            while it.valid() {
                n += 1;
                it.next().unwrap();
            }
            assert_eq!(n, 20_000);
            db.stats().memory
        };
        let small = held_after_scan(4096);
        assert!(small.block_cache > 0 && small.block_cache <= 4096, "{small:?}");
        let none = held_after_scan(0);
        assert_eq!(none.block_cache, 0, "{none:?}");
        // Unbounded in effect (8 MiB): every one of the ~600 blocks scanned is kept.
        let all = held_after_scan(8 << 20);
        assert!(all.block_cache > 10 * small.block_cache, "{all:?} against {small:?}");
    }

    /// 100 values written once, in the oldest files (live values GC must move), then six
    /// rounds of overwrites of other keys, compacted so the garbage is counted.
    fn stable_values_under_overwrites(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
        for i in 0..100u32 {
            let (k, v) = (format!("stable{i:04}").into_bytes(), vec![b's'; 300]);
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        overwrite_rounds(db, model, 6);
        db.compact_range(None, None).unwrap();
    }

    #[test]
    fn gc_reports_where_its_collector_spent_its_time() {
        let fs = Arc::new(MemFs::new());
        let mut model = BTreeMap::new();
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        assert_eq!(db.stats().gc_phase_micros, GcPhaseMicros::default(), "nothing collected yet");
        stable_values_under_overwrites(&db, &mut model);
        let report = db.run_gc(0.3).unwrap();
        assert!(report.bytes_rewritten > 0, "{report:?}");
        let p = db.stats().gc_phase_micros;
        // Each phase of a collection that moved values ran (any time shows as a microsecond).
        assert!(p.appending > 0 && p.logging_pointers > 0 && p.freeing > 0, "{p:?}");
        check_all(&db, &model);
    }

    #[test]
    fn garbage_a_gc_move_shadows_is_not_counted_as_a_users_overwrite() {
        let fs = Arc::new(MemFs::new());
        let mut model = BTreeMap::new();
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        stable_values_under_overwrites(&db, &mut model);
        let counted = || db.inner.counters.vlog_garbage_counted.load(std::sync::atomic::Ordering::Relaxed);
        let before_gc = counted();
        assert!(before_gc > 0, "five rounds of overwrites are counted");
        let report = db.run_gc(0.3).unwrap();
        assert!(report.bytes_rewritten > 0, "GC moved live values: {report:?}");
        // The moves shadow the values they copied: garbage, but GC's, not the users'.
        db.compact_range(None, None).unwrap();
        assert!(db.stats().vlog_garbage_bytes > 0);
        assert_eq!(counted(), before_gc, "a move's shadowed original counted as an overwrite");
        // A user's overwrite of a moved value is one.
        overwrite_rounds(&db, &mut model, 1);
        db.compact_range(None, None).unwrap();
        assert!(counted() >= before_gc + 200 * 200, "the overwrite of 200 values: {before_gc} -> {}", counted());
        check_all(&db, &model);
    }

    #[test]
    fn gc_gives_space_back_and_keeps_every_live_value() {
        let fs = Arc::new(MemFs::new());
        let mut model = BTreeMap::new();
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        overwrite_rounds(&db, &mut model, 6);
        db.compact_range(None, None).unwrap();
        let before = db.stats();
        assert!(before.vlog_garbage_bytes > 0, "compaction must count garbage: {before:?}");
        let report = db.run_gc(0.3).unwrap();
        assert!(report.files_collected > 0, "{report:?}");
        check_all(&db, &model);
        let after = db.stats();
        assert!(
            after.vlog_disk_bytes < before.vlog_disk_bytes,
            "{} !< {}",
            after.vlog_disk_bytes,
            before.vlog_disk_bytes
        );
        drop(db);
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        check_all(&db, &model);
        overwrite_rounds(&db, &mut model, 2);
        db.compact_range(None, None).unwrap();
        db.run_gc(0.3).unwrap();
        check_all(&db, &model);
    }

    #[test]
    fn gc_keeps_values_a_snapshot_still_reads() {
        let fs = Arc::new(MemFs::new());
        let mut model = BTreeMap::new();
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        overwrite_rounds(&db, &mut model, 1);
        let old_model = model.clone();
        let snap = db.snapshot();
        overwrite_rounds(&db, &mut model, 4);
        db.compact_range(None, None).unwrap();
        db.run_gc(0.1).unwrap();
        let ro = ReadOptions { snapshot: Some(snap), ..Default::default() };
        for (k, v) in &old_model {
            assert_eq!(db.get_opt(&ro, k).unwrap().as_deref(), Some(&v[..]));
        }
        drop(ro);
        db.run_gc(0.1).unwrap();
        check_all(&db, &model);
    }

    #[test]
    fn gc_racing_overwrites_never_resurrects_an_old_value() {
        let fs = Arc::new(MemFs::new());
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        let mut model = BTreeMap::new();
        overwrite_rounds(&db, &mut model, 3);
        db.compact_range(None, None).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..5 {
                    db.run_gc(0.0).unwrap();
                }
            });
            overwrite_rounds(&db, &mut model, 5);
        });
        db.run_gc(0.0).unwrap();
        check_all(&db, &model);
        drop(db);
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        check_all(&db, &model);
    }

    #[test]
    fn reorganize_puts_values_in_key_order_and_frees_the_old_copies() {
        let fs = Arc::new(MemFs::new());
        let mut model = BTreeMap::new();
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        overwrite_rounds(&db, &mut model, 3);
        db.flush().unwrap();
        let before = db.stats().vlog_disk_bytes;
        db.reorganize_vlog().unwrap();
        check_all(&db, &model);
        let after = db.stats();
        assert!(after.vlog_disk_bytes < before, "{} !< {before}", after.vlog_disk_bytes);
        // Values now sit in the log in key order: pointers ascend with the keys.
        db.flush().unwrap();
        let mut it = db.iter(&ReadOptions::default()).unwrap();
        it.seek_to_first().unwrap();
        let mut last = None;
        while it.valid() {
            let p = it.current_pointer().expect("every value is separated");
            let at = (p.file, p.offset);
            assert!(last.is_none_or(|l| l < at), "{last:?} then {at:?}");
            last = Some(at);
            it.next().unwrap();
        }
        drop(it);
        drop(db);
        let db = Db::open("/db", gc_opts(&fs)).unwrap();
        check_all(&db, &model);
    }

    #[test]
    fn compact_range_deletes_the_tables_it_replaced() {
        let fs = Arc::new(MemFs::new());
        let mut model = BTreeMap::new();
        // No GC: its discard-statistics refresh may compact the tree itself, concurrently, and
        // the tables that compaction has in flight are not the ones this test is about.
        let db = Db::open("/db", small_opts(&fs).gc_interval_ms(0)).unwrap();
        overwrite_rounds(&db, &mut model, 3);
        db.compact_range(None, None).unwrap();
        let live: usize = db.stats().level_files.iter().sum();
        let on_disk = fs.list(std::path::Path::new("/db")).unwrap().iter().filter(|n| n.ends_with(".sst")).count();
        assert_eq!(on_disk, live, "obsolete tables left behind");
        check_all(&db, &model);
    }

    #[test]
    fn snapshot_sees_the_past() {
        let fs = Arc::new(MemFs::new());
        let db = Db::open("/db", small_opts(&fs)).unwrap();
        db.put(b"a", b"1").unwrap();
        let snap = db.snapshot();
        db.put(b"a", b"2").unwrap();
        db.delete(b"a").unwrap();
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        let ro = ReadOptions { snapshot: Some(snap), ..Default::default() };
        assert_eq!(db.get_opt(&ro, b"a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(db.get(b"a").unwrap(), None);
    }
}
