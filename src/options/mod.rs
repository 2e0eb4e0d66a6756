//! Options for opening a database, reading and writing. Sizes carry their unit in the name.

use std::sync::Arc;

use crate::comparator::{Comparator, KeyOrder};
use crate::filter_policy::FilterPolicy;
use crate::fs::{PosixFs, Vfs};

mod recorded;
pub use crate::sst::compression::Compression;

/// What recovery does where the log after the manifest's head breaks off (damaged bytes, a
/// gap in the sequence numbers, a missing file). A break no completed sync covered — the log's
/// sync marks tell — is a *torn tail*, the normal end of a crash; a break a sync had covered is
/// damage to durable data. See docs/RELIABILITY.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// Drop a torn tail (with a warning naming what went); refuse to open, with
    /// `Error::Corruption` naming the file, offset and sequence numbers at stake, on damage to
    /// synced data. Nothing is changed on disk before refusing.
    #[default]
    TolerateCorruptTail,
    /// Refuse to open at any break, a torn tail included.
    AbsoluteConsistency,
    /// Salvage: keep the log up to the first damage (a consistent point in time) and leave
    /// out everything after it. What is lost (sequence numbers, keys) is reported
    /// (`Db::recovery_report`), and copies of the affected log files and the report are kept in
    /// `DIR/lost/` before anything changes.
    PointInTime,
    /// Salvage: keep every valid record group, also those after damaged stretches, in
    /// sequence order; report and archive like `PointInTime`. Writes lost in a damaged stretch
    /// are missing while later ones are kept, so keys the report lists may show older values.
    SkipDamaged,
}

/// Options for `Db::open`. Build with `Options::default()` and the `#[must_use]` setters.
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// Create the database when the directory holds none (default: on).
    pub create_if_missing: bool,
    /// Refuse to open a database that already exists (default: off).
    pub error_if_exists: bool,
    /// Check every table block against its checksum at every read — gets, iterators and
    /// compaction inputs — as `ReadOptions::verify_checksums` does for one read (default: off,
    /// as LevelDB's). What is always checked: every log record group and manifest record
    /// when it is read, a table's index, filter and footer when it is opened, a data block
    /// read with `pread` or from a compressed table when it is read, an uncompressed block
    /// read in place from its mapping at its first load, and every separated value read from
    /// a file, a mapping or the log buffer (the value cache holds values already checked).
    /// Without this option, damage done to a mapped table after one of its blocks was first
    /// loaded goes unnoticed until `Db::verify` or a reopen.
    pub paranoid_checks: bool,
    /// Size at which the active memtable becomes immutable and is flushed (its entries: keys,
    /// inline values and value pointers). Default 8 MiB: with separated values an entry is a
    /// key and a pointer (about 120 bytes with its skiplist node), so a memtable then holds the
    /// newest ~70k writes,
    /// whose values it keeps in memory (`memtable_kept_value_max_bytes`, up to `memtable_log_bytes`):
    /// 50k records of 1 KB, a dataset that fits in RocksDB's and fjall's 64 MiB memtables,
    /// are read from memory here too (docs/BENCHMARKS.md §11).
    pub write_buffer_bytes: usize,
    /// A memtable is also switched once it covers this many bytes of log: with separated
    /// values it holds only small pointers, and this bounds how much log a recovery replays
    /// (and how much of the newest values a memtable keeps in memory).
    pub memtable_log_bytes: u64,
    /// A memtable keeps the separated values of its writes of up to this many bytes in memory
    /// until it is flushed (default 2 KiB; `0` keeps none): the newest writes are read from
    /// memory, without a value-log read, copy or checksum — as LevelDB's, RocksDB's and
    /// fjall's memtables serve them — while the log stays the only copy on disk. Kept values are
    /// copied into 1 MiB chunks that are reused once a flushed memtable's values are all
    /// dropped; up to `memtable_log_bytes` of memory per memtable. The memory's first touch
    /// costs a page fault per 4 KiB, which a write of a large value would pay for little gain
    /// (a read of a large value is mostly the copy), while keeping small values makes reads of
    /// recent writes much faster (docs/BENCHMARKS.md §11 measures both).
    pub memtable_kept_value_max_bytes: usize,
    /// Immutable memtables allowed to wait for flush before writers stall.
    pub max_immutable_memtables: usize,
    /// Capacity of the block cache (default 8 MiB): decoded blocks of compressed tables.
    /// Uncompressed tables are read in place from their memory mapping; for them the same
    /// capacity bounds the blocks they keep made (about 100 B each, so 8 MiB covers 330 MB of
    /// tables), which spare a lookup validating its block again. Past it, blocks are made at
    /// each use: a scan of a tree larger than memory no longer leaves 2.6 % of its table
    /// bytes behind on the heap (docs/BENCHMARKS.md §16).
    pub block_cache_bytes: usize,
    /// Capacity of the value cache: separated values already read and verified, handed out
    /// without a system call, copy or checksum (`0` turns it off). Default 32 MiB, the cache
    /// fjall and RocksDB have by default (uncompressed tables, the default, are read in place
    /// through the page cache: the block cache then holds nothing, and this is all the cache
    /// there is).
    pub value_cache_bytes: u64,
    /// When separated values enter the value cache before anyone reads them (RocksDB's
    /// `prepopulate_blob_cache`). Default `OnFlush`: a memtable being flushed hands the values
    /// it kept over to the cache, so data written lately stays in memory after its memtable is
    /// gone.
    pub prepopulate_value_cache: PrepopulateValueCache,
    /// Table readers kept open at once (the table cache: each holds its index and filter in
    /// memory, about 2 % of its size at 100 B values; a mapped table holds no file descriptor).
    /// Default 8192, 16 GiB of 2 MiB tables: LevelDB's 1000 was too few for the trees of
    /// light-weight compaction, whose splits write smaller tables, and every lookup past 1000
    /// tables reopened one (docs/BENCHMARKS.md §13).
    pub max_open_files: usize,
    /// Uncompressed size of an SSTable data block.
    pub block_size_bytes: usize,
    /// Start each data block of an uncompressed table at a page boundary, closing it before
    /// it would cross into one more page than `block_size_bytes` (a multiple of 4096 B) holds
    /// (default: on, as RocksDB's `block_align`). A block read from the device is then one
    /// page, where an unaligned 4 KiB block spans two: at eight times the memory a 100 B
    /// lookup or seek reads half the bytes, and the page cache holds twice the blocks
    /// (docs/BENCHMARKS.md §16). The padding costs about half an entry per block. Compressed
    /// tables, and block sizes that are not a multiple of the page, are written unaligned.
    pub block_align: bool,
    /// Entries between restart points in a data block.
    pub block_restart_interval: usize,
    /// Target size of one SSTable written by compaction.
    pub target_file_size_bytes: u64,
    /// Compression of table blocks (default: none; values in the value log are never
    /// compressed).
    pub compression: Compression,
    /// Bloom filter bits per key for each level (index = level; the last entry repeats for
    /// deeper levels). `0.0` disables the filter at that level. Under
    /// `FilterAllocation::Monkey` the first entry is the average over the whole tree instead.
    pub bloom_bits_per_key: Vec<f64>,
    /// How filter memory is spread over the tree's runs (default: Monkey, at
    /// `bloom_bits_per_key[0]` bits per key on average; `Uniform` gives every level its entry
    /// of `bloom_bits_per_key`, as LevelDB and RocksDB do).
    pub filter_allocation: FilterAllocation,
    /// The merge policy: how many sorted runs a level keeps and when they merge (default:
    /// leveling, LevelDB's).
    pub merge_policy: MergePolicy,
    /// Light-weight compaction (LWC-tree) on leveled levels: a compaction appends the victim's
    /// entries to the overlapping tables of the next level as sorted segments instead of
    /// rewriting those tables (docs/design.md, "Light-weight compaction"). Default off. It works
    /// with `MergePolicy::Leveling` only: opening with a Wacky policy and this on is an error.
    pub light_weight_compaction: bool,
    /// Under light-weight compaction, a table with more segments than this is compacted down
    /// (or, in the deepest level, rewritten into tables of `target_file_size_bytes`) before more
    /// is appended to it. Each segment is one more filter probe per lookup and one more cursor
    /// per seek. Default 2: the only limit whose seeks kept up with leveling's, while more
    /// segments per table saved the load hardly any compaction bytes (docs/BENCHMARKS.md §13).
    pub lwc_max_segments: u64,
    /// Under light-weight compaction, a table grown past this many bytes is rewritten the same
    /// way. `0` (the default) means 4 × `target_file_size_bytes`; at least 2 × that size is
    /// used (a split writes tables of the target size, which must come out under the limit).
    pub lwc_max_table_bytes: u64,
    /// Threads carrying out compactions; more than one lets compactions of disjoint levels run
    /// at once (a long merge into the largest level need not hold up level 0). Default 2, as
    /// RocksDB's two background jobs: even on 2 cores, loads ran faster under leveling and
    /// tiering than with one thread, and writers stalled less (docs/BENCHMARKS.md §8).
    pub compaction_threads: usize,
    /// Added to the compaction threads' nice value (Linux; 0 leaves them at the process's
    /// priority, up to 19). A positive value lets foreground readers and writers take the CPU
    /// first on a machine with fewer cores than busy threads, and compaction gets the rest.
    /// `None` (the default): 10 under light-weight compaction, 0 otherwise. Light-weight
    /// compaction writes fewer bytes, so it keeps up from the leftover CPU, and lookups and
    /// seeks right after a load got faster; leveling's merges bound how fast a load can go,
    /// and at a lower priority they fell behind and the seeks after a load got slower
    /// (docs/BENCHMARKS.md §13).
    pub compaction_nice: Option<i32>,
    /// Whether a compaction syncs its output files together at its end (each handed to the
    /// device's writeback as it is finished) instead of each as it is finished. `None` (the
    /// default): on under light-weight compaction, off otherwise. Deferred, a compaction
    /// thread encodes the next table while the device writes the last; synced one by one it
    /// waits through every write. Deferred syncs made sustained loads faster with and without
    /// light-weight compaction, but a short burst under leveling, whose compactions mostly
    /// run after it, got slower (the background took the CPU from the writer sooner), so
    /// leveling keeps one sync per table by default (docs/BENCHMARKS.md §13).
    pub defer_compaction_syncs: Option<bool>,
    /// L0 file count that triggers a compaction.
    pub l0_compaction_trigger: usize,
    /// L0 file count at which each write is delayed by 1 ms. Default 20 (and a stop at 36),
    /// RocksDB's, not LevelDB's 8 and 12: a level 0 that may grow while a compaction runs is
    /// merged into level 1 in fewer, larger compactions, each rewriting level 1 once for more
    /// new data: loads write fewer compaction bytes, stall less and run faster, for lookups a
    /// little slower right after a load (more level-0 tables to probe until compaction catches
    /// up; docs/BENCHMARKS.md §12).
    pub l0_slowdown_trigger: usize,
    /// L0 file count at which writes stop until compaction catches up (default 36).
    pub l0_stop_trigger: usize,
    /// Total bytes of level 1 (each deeper level is `level_size_ratio` times larger).
    pub max_bytes_for_level_base: u64,
    /// How many times larger each level below level 1 is than the one above it.
    pub level_size_ratio: u64,
    /// Levels of the tree (2 to 64).
    pub num_levels: usize,
    /// Size of one log file before the writer rolls over to a new one.
    pub log_file_bytes: u64,
    /// Userspace buffer of the log writer: unsynced writes are handed to the OS when it fills
    /// (or on a sync write / flush). A process crash loses at most this much unsynced data.
    pub log_buffer_bytes: usize,
    /// What recovery does with a damaged log tail.
    pub recovery_mode: RecoveryMode,
    /// Values of at least this many bytes stay in the value log and the LSM-tree holds a
    /// pointer to them (WiscKey); smaller values are stored inline in the LSM-tree too.
    /// `0` separates every value, as the paper does; `usize::MAX` never separates.
    pub min_separated_value_bytes: usize,
    /// Garbage ratio of a vLog file at which background GC collects it.
    pub gc_garbage_ratio: f64,
    /// How often the background GC thread looks for work; `0` turns automatic GC off
    /// (`Db::run_gc` still works). While users only read (no write for five intervals, at
    /// least a second), background GC collects nothing below `gc_space_amp_stall`: it leaves
    /// the disk to the readers until the next write or an idle spell.
    pub gc_interval_ms: u64,
    /// Bytes of vLog one GC step reads before it moves the live values to a cold value file
    /// and frees space.
    pub gc_chunk_bytes: u64,
    /// Pause between GC steps, leaving the disk to foreground writes.
    pub gc_pause_ms: u64,
    /// Value-log space amplification (bytes on disk / estimated live value bytes) above which
    /// background GC also collects files below `gc_garbage_ratio` (down to 0.2) and works
    /// without pauses (default 1.35). `0` turns it off.
    pub gc_space_amp_target: f64,
    /// Space amplification above which user writes wait for GC to free space (while GC has
    /// a file it can collect); between `gc_space_amp_target` and this, writers are paced to a
    /// rate that keeps the space from reaching it. Trades write throughput for a bound on disk
    /// use; `0` turns pacing and the stall off. The default, 1.45, was chosen from sustained
    /// 4 KB overwrites: `du` stays under 1.5 times the live bytes, less than RocksDB BlobDB with
    /// its GC on, and writes go faster; a tighter bound holds less space at a lower write
    /// throughput (docs/BENCHMARKS.md).
    pub gc_space_amp_stall: f64,
    /// Read separated values in parallel through io_uring when the kernel allows it (checked
    /// once at open; a thread pool of `pread`s is used otherwise, and for non-POSIX files).
    /// `false` forces the thread pool.
    pub io_uring: bool,
    /// Let scans read cached values through read-only memory mappings of the value-log files
    /// (no system call per value) while read-ahead pauses because the values are cached.
    /// Like every mmap reader (LevelDB's tables, RocksDB's `allow_mmap_reads`), a device
    /// error while the kernel faults a mapped page in raises SIGBUS instead of returning
    /// an error; `false` reads every value with `pread`.
    pub mmap_value_reads: bool,
    /// The order of user keys (LevelDB's `Options::comparator`); `None`, the default, is
    /// bytewise order, compared inline. Recorded by name when the database is created: opening
    /// it with a comparator of another name is `Error::IncompatibleOptions`, with nothing on
    /// disk changed. Equal keys must be equal bytes (see `Comparator`).
    pub comparator: Option<Arc<dyn Comparator>>,
    /// A custom table filter (LevelDB's `Options::filter_policy`) built for every table in
    /// place of the built-in Bloom filter (`bloom_bits_per_key` then only says which levels get
    /// a filter: those with more than 0 bits). `None`, the default: the built-in filter, sized
    /// by `filter_allocation`. A table records the policy's name; one written by another policy
    /// is read without its filter.
    pub filter_policy: Option<Arc<dyn FilterPolicy>>,
    /// Let the engine move the merge policy along the Wacky continuum by itself as the
    /// workload shifts (per keyspace; recorded with the shaping settings): it counts the
    /// operations over a sliding window, re-runs the cost model every
    /// `auto_tune_interval_ms`, and moves to the predicted cheapest design when that saves
    /// more than `AUTO_TUNE_HYSTERESIS` of the design in force, while the model's predictions
    /// for the design in force match what the tree measures. Off by default (see
    /// docs/BENCHMARKS.md for what it buys). With it on, the policy the database recorded
    /// wins over a named `merge_policy`, which only sets where a new database starts.
    pub auto_tune: bool,
    /// How often the auto-tuner looks at each keyspace's workload (default 1000 ms).
    pub auto_tune_interval_ms: u64,
    /// Operations the auto-tuner's window must hold before it judges a keyspace's workload
    /// (per keyspace; default 100,000): fewer let a small or slow database (synced writes at
    /// a few thousand a second) move sooner, at the price of judging a shorter stretch.
    pub auto_tune_window_ops: u64,
    /// The filesystem to use (real files by default; in-memory or fault-injecting in tests).
    pub vfs: Arc<dyn Vfs>,
    /// The keyspace's merge operator (RocksDB's `merge_operator`): what `merge` ops are folded
    /// with on reads, in compaction and by value-log GC. `None`, the default: `merge` is refused
    /// with `Error::InvalidArgument`. Per keyspace (`Db::open` sets the default keyspace's;
    /// `create_keyspace` / `open_keyspace` another's). Its name is recorded: reopening a
    /// keyspace with an operator of another name is `Error::IncompatibleOptions`; without one,
    /// reads that meet merge operands fail with `Error::Merge` and compaction keeps them.
    pub merge_operator: Option<Arc<dyn crate::merge::MergeOperator>>,
    /// The keyspace's compaction filter (RocksDB's `compaction_filter`): asked by compaction
    /// about the newest version of each key every reader sees, to keep, remove or change it.
    /// `None`, the default: none. Per keyspace, like `merge_operator`; not recorded.
    pub compaction_filter: Option<Arc<dyn crate::compaction_filter::CompactionFilter>>,
    /// The keyspace's prefix extractor (RocksDB's `prefix_extractor`): tables built while it is
    /// set keep a Bloom filter over their keys' prefixes beside the whole-key filter (at the
    /// same bits per entry, counted per distinct prefix), and `prefix` iterations and seeks
    /// with `ReadOptions::prefix_same_as_start` skip the tables whose prefix filter rules the
    /// prefix out. `None`, the default: none. Per keyspace, like `merge_operator`; not
    /// recorded: each table records its extractor's name, and a table built under another name
    /// is read without its prefix filter.
    pub prefix_extractor: Option<Arc<dyn crate::prefix::PrefixExtractor>>,
    /// The keyspace's default time-to-live in milliseconds (0, the default: none): each plain
    /// put written to the keyspace expires this long after it is written, as if written with
    /// `put_with_ttl`. Per keyspace, like `merge_operator`; not recorded (entries keep the
    /// expiry they were written with).
    pub default_ttl_ms: u64,
    /// The clock expiry times are set and judged by (default: the system's wall clock;
    /// `ManualClock` lets tests move time). Shared by every keyspace: the database's.
    pub clock: Arc<dyn crate::ttl::Clock>,
    /// The merge operator name the keyspace recorded when it was opened without one (kept in
    /// the record, so a later open with another operator is still refused).
    pub(crate) recorded_merge_operator: Option<String>,
    /// The shaping settings named through their setters (`recorded.rs`): those win over what
    /// the manifest recorded; the others take the recorded value at open.
    named_shape: std::collections::BTreeSet<&'static str>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("create_if_missing", &self.create_if_missing)
            .field("write_buffer_bytes", &self.write_buffer_bytes)
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("compression", &self.compression)
            .field("comparator", &self.comparator)
            .field("filter_policy", &self.filter_policy)
            .field("merge_operator", &self.merge_operator.as_ref().map(|m| m.name().to_string()))
            .finish_non_exhaustive()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            default_ttl_ms: 0,
            clock: Arc::new(crate::ttl::SystemClock),
            error_if_exists: false,
            paranoid_checks: false,
            write_buffer_bytes: 8 << 20,
            max_immutable_memtables: 2,
            memtable_log_bytes: 64 << 20,
            memtable_kept_value_max_bytes: 2 << 10,
            block_cache_bytes: 8 << 20,
            value_cache_bytes: 32 << 20,
            prepopulate_value_cache: PrepopulateValueCache::OnFlush,
            max_open_files: 8192,
            block_size_bytes: 4096,
            block_align: true,
            block_restart_interval: 16,
            target_file_size_bytes: 2 << 20,
            compression: Compression::None,
            bloom_bits_per_key: vec![10.0],
            filter_allocation: FilterAllocation::default(),
            merge_policy: MergePolicy::default(),
            light_weight_compaction: false,
            lwc_max_segments: 2,
            lwc_max_table_bytes: 0,
            compaction_threads: 2,
            compaction_nice: None,
            defer_compaction_syncs: None,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 20,
            l0_stop_trigger: 36,
            max_bytes_for_level_base: 10 << 20,
            level_size_ratio: 10,
            num_levels: 7,
            log_file_bytes: 64 << 20,
            log_buffer_bytes: 1 << 20,
            recovery_mode: RecoveryMode::TolerateCorruptTail,
            min_separated_value_bytes: 1024,
            gc_garbage_ratio: 0.5,
            gc_interval_ms: 1000,
            gc_chunk_bytes: 16 << 20,
            gc_pause_ms: 5,
            gc_space_amp_target: 1.35,
            gc_space_amp_stall: 1.45,
            io_uring: true,
            mmap_value_reads: true,
            comparator: None,
            filter_policy: None,
            auto_tune: false,
            auto_tune_interval_ms: 1000,
            auto_tune_window_ops: 100_000,
            vfs: Arc::new(PosixFs::new()),
            merge_operator: None,
            compaction_filter: None,
            prefix_extractor: None,
            recorded_merge_operator: None,
            named_shape: std::collections::BTreeSet::new(),
        }
    }
}

macro_rules! setter {
    ($(#[$m:meta])* $name:ident: $ty:ty) => {
        $(#[$m])*
        #[doc = concat!("Set [`Options::", stringify!($name), "`].")]
        #[must_use]
        pub fn $name(mut self, v: $ty) -> Self {
            self.$name = v;
            self
        }
    };
}

/// A setter of a setting that shapes files (`recorded.rs`): naming it overrides the record.
macro_rules! shape_setter {
    ($name:ident: $ty:ty) => {
        #[doc = concat!("Set [`Options::", stringify!($name), "`] (overriding the value the database recorded).")]
        #[must_use]
        pub fn $name(mut self, v: $ty) -> Self {
            self.$name = v;
            self.named_shape.insert(stringify!($name));
            self
        }
    };
}

impl Options {
    /// What the compaction threads add to their nice value (`compaction_nice`, or its default).
    pub fn compaction_nice_in_force(&self) -> i32 {
        self.compaction_nice.unwrap_or(if self.light_weight_compaction { 10 } else { 0 })
    }

    /// Whether compactions sync their outputs together (`defer_compaction_syncs`, or its default).
    pub fn defer_compaction_syncs_in_force(&self) -> bool {
        self.defer_compaction_syncs.unwrap_or(self.light_weight_compaction)
    }

    setter!(create_if_missing: bool);
    setter!(error_if_exists: bool);
    setter!(paranoid_checks: bool);
    setter!(write_buffer_bytes: usize);
    setter!(max_immutable_memtables: usize);
    setter!(memtable_log_bytes: u64);
    setter!(memtable_kept_value_max_bytes: usize);
    setter!(block_cache_bytes: usize);
    setter!(value_cache_bytes: u64);
    setter!(prepopulate_value_cache: PrepopulateValueCache);
    setter!(max_open_files: usize);
    shape_setter!(block_size_bytes: usize);
    shape_setter!(block_align: bool);
    shape_setter!(block_restart_interval: usize);
    shape_setter!(target_file_size_bytes: u64);
    shape_setter!(compression: Compression);
    shape_setter!(bloom_bits_per_key: Vec<f64>);
    shape_setter!(filter_allocation: FilterAllocation);
    shape_setter!(merge_policy: MergePolicy);
    shape_setter!(light_weight_compaction: bool);
    shape_setter!(lwc_max_segments: u64);
    shape_setter!(lwc_max_table_bytes: u64);
    setter!(compaction_threads: usize);
    setter!(compaction_nice: Option<i32>);
    setter!(defer_compaction_syncs: Option<bool>);
    setter!(l0_compaction_trigger: usize);
    setter!(l0_slowdown_trigger: usize);
    setter!(l0_stop_trigger: usize);
    shape_setter!(max_bytes_for_level_base: u64);
    shape_setter!(level_size_ratio: u64);
    shape_setter!(num_levels: usize);
    setter!(log_file_bytes: u64);
    setter!(log_buffer_bytes: usize);
    setter!(recovery_mode: RecoveryMode);
    shape_setter!(min_separated_value_bytes: usize);
    setter!(gc_garbage_ratio: f64);
    setter!(gc_interval_ms: u64);
    setter!(gc_chunk_bytes: u64);
    setter!(gc_pause_ms: u64);
    setter!(gc_space_amp_target: f64);
    setter!(gc_space_amp_stall: f64);
    setter!(io_uring: bool);
    setter!(mmap_value_reads: bool);
    setter!(comparator: Option<Arc<dyn Comparator>>);
    setter!(filter_policy: Option<Arc<dyn FilterPolicy>>);
    shape_setter!(auto_tune: bool);
    setter!(auto_tune_interval_ms: u64);
    setter!(auto_tune_window_ops: u64);
    setter!(vfs: Arc<dyn Vfs>);
    setter!(default_ttl_ms: u64);
    setter!(clock: Arc<dyn crate::ttl::Clock>);

    /// Set [`Options::merge_operator`].
    #[must_use]
    pub fn merge_operator(mut self, op: Arc<dyn crate::merge::MergeOperator>) -> Self {
        self.merge_operator = Some(op);
        self
    }

    /// Set [`Options::compaction_filter`].
    #[must_use]
    pub fn compaction_filter(mut self, filter: Arc<dyn crate::compaction_filter::CompactionFilter>) -> Self {
        self.compaction_filter = Some(filter);
        self
    }

    /// Set [`Options::prefix_extractor`].
    #[must_use]
    pub fn prefix_extractor(mut self, extractor: Arc<dyn crate::prefix::PrefixExtractor>) -> Self {
        self.prefix_extractor = Some(extractor);
        self
    }

    /// The merge operator's name as the keyspace records it: the one set, or the one recorded.
    pub(crate) fn merge_operator_name(&self) -> Option<String> {
        self.merge_operator.as_ref().map(|m| m.name().to_string()).or_else(|| self.recorded_merge_operator.clone())
    }

    /// The key order `comparator` names.
    pub(crate) fn key_order(&self) -> KeyOrder {
        KeyOrder::new(self.comparator.as_ref())
    }

    /// Table-building options for a table written to `level`.
    pub(crate) fn table_options(&self, level: usize) -> crate::sst::TableOptions {
        crate::sst::TableOptions {
            block_size_bytes: self.block_size_bytes,
            block_align: self.block_align,
            restart_interval: self.block_restart_interval,
            compression: self.compression,
            bloom_bits_per_key: self.bloom_bits_for_level(level),
            order: self.key_order(),
            filter_policy: self.filter_policy.clone(),
            prefix_extractor: self.prefix_extractor.clone(),
        }
    }

    /// Bloom bits per key used at `level`.
    pub fn bloom_bits_for_level(&self, level: usize) -> f64 {
        self.bloom_bits_per_key.get(level).or(self.bloom_bits_per_key.last()).copied().unwrap_or(0.0)
    }
}

/// How sorted runs merge: LevelDB's leveling, or a point of the Wacky continuum (Dayan &
/// Idreos, SIGMOD'19; `continuum::Knobs`) — tiering, lazy leveling, SCLL, LSM-bush or any
/// other setting of T, K, Z, C and X.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum MergePolicy {
    /// One run per level below L0; level i+1 holds `level_size_ratio` times more than level i
    /// (LevelDB's: partial merges a table at a time, seek compaction, trivial moves). Reads
    /// probe few runs; each entry is rewritten about ratio/2 times per level.
    #[default]
    Leveling,
    /// The Wacky continuum's policy: level capacities set top-down from the largest level,
    /// whole-level merges, up to (r_i − 1)^K runs per smaller level and C^Z at the largest.
    Wacky(crate::continuum::Knobs),
}

impl MergePolicy {
    /// Tiering with `t` as the base ratio: up to `t − 1` runs per level (each entry rewritten
    /// about once per level; lookups probe up to `t − 1` runs per level).
    pub fn tiering(t: usize) -> Self {
        MergePolicy::Wacky(crate::continuum::Knobs::tiering(t as f64))
    }

    /// The named designs and their default knobs: `leveling`, `tiering` (T = 10), `tiering:N`,
    /// `lazy-leveling` (T = 10), `scll` (T = 4, C = L), `bush` (QLSM-bush, T = 2, C = 1,
    /// X = 2) and `wacky:T=..,K=..,Z=..,C=..,X=..`.
    pub const NAMES: &'static str =
        "leveling, tiering, tiering:N, lazy-leveling, scll, bush or wacky:T=..,K=..,Z=..,C=..,X=..";
}

impl std::str::FromStr for MergePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        use crate::continuum::tune::presets;
        if s == "leveling" {
            return Ok(MergePolicy::Leveling);
        }
        if let Some((_, k)) = presets().into_iter().find(|(name, _)| *name == s) {
            return Ok(MergePolicy::Wacky(k));
        }
        if let Some(n) = s.strip_prefix("tiering:") {
            return match n.parse::<usize>() {
                Ok(t) if t >= 2 => Ok(MergePolicy::tiering(t)),
                _ => Err(format!("tiering:N needs N >= 2, got {n:?}")),
            };
        }
        if s.starts_with("wacky") {
            return crate::continuum::Knobs::parse_wacky(s).map(MergePolicy::Wacky);
        }
        Err(format!("expected {}, got {s:?}", MergePolicy::NAMES))
    }
}

/// When separated values enter the value cache before anyone reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PrepopulateValueCache {
    /// Only values read are cached.
    Off,
    /// A memtable being flushed hands the values it kept in memory (`memtable_kept_value_max_bytes`)
    /// over to the cache (as copies, made by the flush thread: a slice would keep the
    /// memtable's whole chunk alive; a large value written alone goes in as it is).
    #[default]
    OnFlush,
    /// Every separated value is copied into the cache as it is written, for workloads that
    /// read what they just wrote. A value is then first read from memory, so damage on disk
    /// shows only once the cache has let it go (or under `Db::verify`).
    OnWrite,
}

/// How Bloom filter memory is spread over the runs of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FilterAllocation {
    /// `bloom_bits_per_key` as given, per level.
    Uniform,
    /// Monkey (Dayan et al.): for the same total memory (`bloom_bits_per_key[0]` bits per key
    /// on average), each new run gets the bits that minimise the false positives a lookup of
    /// an absent key meets, summed over all runs: small runs (L0 files, upper levels) get
    /// more bits, the largest level slightly fewer. Decided when a table is written, for the
    /// policy's steady tree (a load's backlog of L0 files drains; a tiered level fills up).
    /// The default: over a load it meets far fewer false positives per absent-key lookup than
    /// `Uniform`, on leveled and tiered trees alike, holding at most the same memory. A tree of
    /// one run, or of runs of similar size, leaves Monkey little to gain, and a small tree may
    /// end with more (docs/BENCHMARKS.md §7).
    #[default]
    Monkey,
}

/// Options for one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// `fdatasync` the log before the write returns; the write then survives any crash.
    pub sync: bool,
}

impl WriteOptions {
    /// A write that is durable when it returns.
    pub fn synced() -> Self {
        WriteOptions { sync: true }
    }
}

/// Options for reads and iterators.
#[derive(Clone)]
pub struct ReadOptions {
    /// Read as of this snapshot (default: the latest state).
    pub snapshot: Option<crate::snapshot::Snapshot>,
    /// Keep blocks and separated values read by this call in the block and value caches
    /// (turn off for big scans, so they do not push the hot data out). Cached values are used
    /// either way. `None` (the default): gets, `multi_get` and `scan_from` fill both caches;
    /// an iterator fills the block cache but not the value cache with the values it streams
    /// through (`Some(true)` makes it fill that too).
    pub fill_cache: Option<bool>,
    /// Check every table block this read touches against its checksum, even one checked
    /// before (by default a block read in place from a mapped table is checked at its first
    /// load only; see `Options::paranoid_checks` for what is always checked). Default: off.
    pub verify_checksums: bool,
    /// Iterator lower bound (inclusive), user key.
    pub lower_bound: Option<Vec<u8>>,
    /// Iterator upper bound (exclusive), user key.
    pub upper_bound: Option<Vec<u8>>,
    /// Most separated values read in parallel: an iterator moving sequentially reads up to this
    /// many values ahead of its position (starting at 2 and doubling while the scan goes on),
    /// and `Db::multi_get` keeps up to this many reads in flight. `0` reads every value on its
    /// own, when it is reached.
    pub readahead_values: usize,
    /// With `Options::prefix_extractor` set: each `seek` bounds the iterator to the keys that
    /// share the target's prefix (RocksDB's `prefix_same_as_start`), so it can skip every table
    /// whose prefix filter rules that prefix out. A target out of the extractor's domain seeks
    /// in total order; `seek_to_first`/`seek_to_last` ignore it. Default: off.
    pub prefix_same_as_start: bool,
}

impl ReadOptions {
    /// The default of `readahead_values`.
    pub const DEFAULT_READAHEAD_VALUES: usize = 32;
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            snapshot: None,
            fill_cache: None,
            verify_checksums: false,
            lower_bound: None,
            upper_bound: None,
            readahead_values: Self::DEFAULT_READAHEAD_VALUES,
            prefix_same_as_start: false,
        }
    }
}
