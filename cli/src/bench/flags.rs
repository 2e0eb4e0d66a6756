//! The `bench` flags, spelled exactly like LevelDB db_bench's (`--value_size=100`,
//! `--use_existing_db=1`), and their conversion to engine options.

use std::path::PathBuf;

use clap::{ArgAction, Args};
use wisckey::{Compression, FilterAllocation, MergePolicy, Options, ReadOptions};

/// The suite run when `--benchmarks` is not given.
pub const DEFAULT_BENCHMARKS: &str =
    "fillseq,fillrandom,overwrite,readrandom,readseq,readreverse,seekrandom,fillsync,stats";

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Comma-separated benchmarks, run in order: fillseq, fillbatch, fillrandom, fillshuffle
    /// (every key once, in a scattered order), overwrite, fillsync, fill100K, readrandom,
    /// multireadrandom, readseq, readreverse, readmissing, readhot, seekrandom, seekordered,
    /// readwhilewriting, readrandomwriterandom, seekrandomwriterandom (its reads are seeks
    /// with --seek_nexts steps), txnrmw (2-key read-modify-write transactions, --reads each)
    /// and batchrmw (the same as gets and a batch), deleteseq, deleterandom, mergerandom,
    /// compact, waitforcompaction, stats.
    #[arg(long = "benchmarks", value_delimiter = ',', default_value = DEFAULT_BENCHMARKS)]
    pub benchmarks: Vec<String>,

    /// Number of key/value pairs to place in the database (and ops per thread for writes).
    #[arg(long = "num", default_value_t = 1_000_000)]
    pub num: u64,

    /// Read operations per thread; negative means --num.
    #[arg(long = "reads", default_value_t = -1, allow_negative_numbers = true)]
    pub reads: i64,

    /// readrandomwriterandom: the share of operations that are reads, in percent.
    #[arg(long = "readwritepercent", default_value_t = 90, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub readwritepercent: u32,

    /// Concurrent threads running each benchmark.
    #[arg(long = "threads", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: u32,

    /// Size of each value in bytes.
    #[arg(long = "value_size", default_value_t = 100)]
    pub value_size: usize,

    /// Size of each key in bytes (a zero-padded decimal number, db_bench's %016d at 16).
    #[arg(long = "key_size", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub key_size: u32,

    /// db_bench's --prefix_size: keys begin with a prefix of this many bytes (digits), and the
    /// engine gets a fixed-length prefix extractor of it (prefix Bloom filters; seeks are
    /// bounded to the target's prefix, as in RocksDB's prefix seek mode). 0: none.
    #[arg(long = "prefix_size", default_value_t = 0)]
    pub prefix_size: u32,

    /// db_bench's --keys_per_prefix: with --prefix_size, keys share prefixes this many at a
    /// time (key k's prefix is k mod num/keys_per_prefix). 0: every key's prefix is its own.
    #[arg(long = "keys_per_prefix", default_value_t = 0)]
    pub keys_per_prefix: u64,

    /// Build and use prefix Bloom filters when --prefix_size is set (false: the same keys and
    /// seeks without them, to measure what they save).
    #[arg(long = "prefix_bloom", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub prefix_bloom: bool,

    /// Values compress to about this fraction of their size.
    #[arg(long = "compression_ratio", default_value_t = 0.5)]
    pub compression_ratio: f64,

    /// Database directory (default: a fresh temporary directory, removed at the end).
    #[arg(long = "db")]
    pub db: Option<PathBuf>,

    /// Keep and use the existing database: fill benchmarks are skipped.
    #[arg(long = "use_existing_db", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub use_existing_db: bool,

    /// Block cache capacity in bytes (default: the engine's, as LevelDB's db_bench does).
    #[arg(long = "cache_size")]
    pub cache_size: Option<usize>,

    /// Memtable size in bytes (default: the engine's).
    #[arg(long = "write_buffer_size")]
    pub write_buffer_size: Option<usize>,

    /// Level 1's target size in bytes (`Options::max_bytes_for_level_base`; default: the
    /// engine's). RocksDB db_bench's flag.
    #[arg(long = "max_bytes_for_level_base")]
    pub max_bytes_for_level_base: Option<u64>,

    /// Table files at level 0 that start a compaction (`Options::l0_compaction_trigger`).
    #[arg(long = "level0_file_num_compaction_trigger")]
    pub level0_file_num_compaction_trigger: Option<usize>,

    /// Level-0 files at which writes slow down (`Options::l0_slowdown_trigger`).
    #[arg(long = "level0_slowdown_writes_trigger")]
    pub level0_slowdown_writes_trigger: Option<usize>,

    /// Level-0 files at which writes stop (`Options::l0_stop_trigger`).
    #[arg(long = "level0_stop_writes_trigger")]
    pub level0_stop_writes_trigger: Option<usize>,

    /// Value cache capacity in bytes (`Options::value_cache_bytes`; default: the engine's).
    #[arg(long = "value_cache_size")]
    pub value_cache_size: Option<u64>,

    /// `Options::memtable_kept_value_max_bytes` (default: the engine's; 0 keeps none).
    #[arg(long = "memtable_kept_value_max_bytes")]
    pub memtable_kept_value_max_bytes: Option<usize>,

    /// Target SSTable size in bytes (default: the engine's).
    #[arg(long = "max_file_size")]
    pub max_file_size: Option<u64>,

    /// SSTable data block size in bytes (default: the engine's).
    #[arg(long = "block_size")]
    pub block_size: Option<usize>,

    /// Table files kept open (default: the engine's).
    #[arg(long = "open_files")]
    pub open_files: Option<usize>,

    /// Before each read benchmark: wait for pending flushes and compactions (data at rest on
    /// the device, as after a load in the WiscKey paper), close the database, evict its files
    /// from the page cache and open it again (a restart on a cold cache; an open database's
    /// memory mappings would keep their pages cached).
    #[arg(long = "cold", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub cold: bool,

    /// Values of at least this many bytes are kept in the value log (default: the engine's;
    /// 0 separates every value as the WiscKey paper does). Spelled like RocksDB db_bench's
    /// flag; sets `Options::min_separated_value_bytes`.
    #[arg(long = "min_blob_size")]
    pub min_separated_value_bytes: Option<usize>,

    /// Garbage ratio at which background value-log GC collects a file (default: the engine's).
    #[arg(long = "gc_garbage_ratio")]
    pub gc_garbage_ratio: Option<f64>,

    /// Background value-log GC interval in ms; 0 turns automatic GC off (default: the engine's).
    #[arg(long = "gc_interval_ms")]
    pub gc_interval_ms: Option<u64>,

    /// Bytes of value log one GC step reads (default: the engine's).
    #[arg(long = "gc_chunk_bytes")]
    pub gc_chunk_bytes: Option<u64>,

    /// vLog space amplification above which GC works eagerly; 0 = off (default: the engine's).
    #[arg(long = "gc_space_amp_target")]
    pub gc_space_amp_target: Option<f64>,

    /// vLog space amplification above which writes wait for GC; 0 = off (default: the engine's).
    #[arg(long = "gc_space_amp_stall")]
    pub gc_space_amp_stall: Option<f64>,

    /// seekrandom: after each seek, step this many times with `next`, reading each value.
    #[arg(long = "seek_nexts", default_value_t = 0)]
    pub seek_nexts: u64,

    /// multireadrandom: keys per `multi_get` call.
    #[arg(long = "multiget_batch_size", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    pub multiget_batch_size: u64,

    /// Read separated values ahead of iterators and in parallel in multi_get; 0 reads one
    /// value at a time (to measure the difference).
    #[arg(long = "prefetch", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub prefetch: bool,

    /// The merge operator of the default keyspace (db_bench's `--merge_operator`): `uint64add`
    /// (8-byte little-endian counters: mergerandom then writes 8-byte operands, whatever
    /// `--value_size`) or `stringappend` / `append`.
    #[arg(long = "merge_operator")]
    pub merge_operator: Option<String>,

    /// A time-to-live in seconds for every put (the default keyspace's
    /// `Options::default_ttl_ms`; RocksDB's `DBWithTTL` open with a TTL); 0, the default: none.
    #[arg(long = "ttl_secs", default_value_t = 0)]
    pub ttl_secs: u64,

    /// Most values read in parallel with --prefetch (`ReadOptions::readahead_values`; default
    /// the engine's).
    #[arg(long = "readahead_values", value_parser = clap::value_parser!(u64).range(1..4097))]
    pub readahead_values: Option<u64>,

    /// Use io_uring for parallel value reads when the kernel allows it; 0 forces the thread pool.
    #[arg(long = "io_uring", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub io_uring: bool,

    /// Read cached values of scans through memory mappings of the value log; 0 uses pread.
    #[arg(long = "mmap_value_reads", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub mmap_value_reads: bool,

    /// Block compression: none, lz4, zstd or zstd:LEVEL.
    #[arg(long = "compression", default_value = "none", value_parser = parse_compression)]
    pub compression: Compression,

    /// Start data blocks of uncompressed tables at page boundaries (default: the engine's, on).
    #[arg(long = "block_align", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub block_align: Option<bool>,

    /// Bloom filter bits per key; 0 or negative disables filters.
    #[arg(long = "bloom_bits", default_value_t = 10.0, allow_negative_numbers = true)]
    pub bloom_bits: f64,

    /// How filter memory is spread over the tree: monkey (the engine's default: `--bloom_bits`
    /// on average, fewer in the largest level, more above it) or uniform (the same bits per
    /// key everywhere, as LevelDB's db_bench).
    #[arg(long = "filter_allocation", default_value = "monkey", value_parser = parse_filter_allocation)]
    pub filter_allocation: FilterAllocation,

    /// Merge policy: leveling (the default, LevelDB's), tiering (T = 10), tiering:N,
    /// lazy-leveling (T = 10), scll (T = 4, C = L), bush (QLSM-bush: T = 2, C = 1, X = 2) or
    /// wacky:T=..,K=..,Z=..,C=..,X=.. (missing knobs: lazy leveling's; C=L, C=T-1 allowed).
    #[arg(long = "merge_policy", default_value = "leveling", value_parser = parse_merge_policy)]
    pub merge_policy: MergePolicy,

    /// Online self-tuning: the engine moves the tree along the merge-policy continuum as the
    /// workload shifts, starting from `--merge_policy` (default: the engine's).
    #[arg(long = "auto_tune", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub auto_tune: Option<bool>,

    /// Under `--auto_tune`: milliseconds between the tuner's looks at the workload.
    #[arg(long = "auto_tune_interval_ms")]
    pub auto_tune_interval_ms: Option<u64>,

    /// Light-weight compaction (LWC-tree) on leveled levels: append to the tables below
    /// instead of rewriting them (default: the engine's).
    #[arg(long = "lwc", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub lwc: Option<bool>,

    /// Under `--lwc`: segments a table may hold before it is rewritten (default: the engine's).
    #[arg(long = "lwc_max_segments")]
    pub lwc_max_segments: Option<u64>,

    /// Under `--lwc`: bytes a table may grow to before it is rewritten (default: the engine's).
    #[arg(long = "lwc_max_table_bytes")]
    pub lwc_max_table_bytes: Option<u64>,

    /// During fill benchmarks, every this many writes wait for compaction to catch up and look
    /// up 100 absent keys (0: never), so `stats` shows the filters probed per lookup averaged
    /// over the load; the fill's line adds the filter bits per entry the tables held, averaged
    /// over the same probes.
    #[arg(long = "probe_every", default_value_t = 0)]
    pub probe_every: u64,
    /// Write benchmarks issue a range delete every this many writes per thread (0: never), as
    /// db_bench does: `[k, k + --range_tombstone_width)` from the key generator's next key.
    #[arg(long = "writes_per_range_tombstone", default_value_t = 0)]
    pub writes_per_range_tombstone: u64,
    /// Keys each range delete of `--writes_per_range_tombstone` spans.
    #[arg(long = "range_tombstone_width", default_value_t = 100)]
    pub range_tombstone_width: u64,
    /// At most this many range deletes per thread and benchmark (db_bench's cap).
    #[arg(long = "max_num_range_tombstones", default_value_t = 0)]
    pub max_num_range_tombstones: u64,
    /// Writes per thread before the first range delete (db_bench's
    /// `--writes_before_delete_range`).
    #[arg(long = "writes_before_delete_range", default_value_t = 0)]
    pub writes_before_delete_range: u64,
    /// Keyspaces open during the benchmarks (default 1: the default keyspace alone): the
    /// others (`ks1`, `ks2`, ...) are created and given 1000 entries each, and the
    /// benchmarks run on the default keyspace (`fillcrossks` writes to `ks1` too).
    #[arg(long = "keyspaces", default_value_t = 1)]
    pub keyspaces: u32,

    /// Compaction threads (compactions of disjoint levels run at once; default: the engine's).
    #[arg(long = "max_background_compactions")]
    pub max_background_compactions: Option<usize>,

    /// Nice value added to the compaction threads (`Options::compaction_nice`; default: the engine's).
    #[arg(long = "compaction_nice")]
    pub compaction_nice: Option<i32>,
    /// Compactions sync their outputs together at their end, 0 or 1
    /// (`Options::defer_compaction_syncs`; default: the engine's, on under --lwc=1).
    #[arg(long = "defer_compaction_syncs")]
    pub defer_compaction_syncs: Option<u8>,

    /// Print a latency histogram after each benchmark.
    #[arg(long = "histogram", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub histogram: bool,

    /// Base seed of the per-thread generators (1000 draws LevelDB db_bench's key sequence).
    #[arg(long = "seed", default_value_t = 1000)]
    pub seed: u32,

    /// Also print one JSON line per benchmark.
    #[arg(long = "json", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, value_parser = parse_bool)]
    pub json: bool,
}

/// db_bench booleans: `1/0`, `true/false` (also `yes/no`, `on/off`).
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("expected 0, 1, true or false, got {s:?}")),
    }
}

fn parse_merge_policy(s: &str) -> Result<MergePolicy, String> {
    s.parse()
}

fn parse_filter_allocation(s: &str) -> Result<FilterAllocation, String> {
    match s {
        "uniform" => Ok(FilterAllocation::Uniform),
        "monkey" => Ok(FilterAllocation::Monkey),
        _ => Err(format!("expected uniform or monkey, got {s:?}")),
    }
}

fn parse_compression(s: &str) -> Result<Compression, String> {
    Compression::parse(s).ok_or_else(|| format!("expected none, lz4, zstd or zstd:LEVEL, got {s:?}"))
}

impl BenchArgs {
    /// The benchmark names, empty entries (a trailing comma) dropped as db_bench does.
    pub fn benchmark_names(&self) -> impl Iterator<Item = &str> {
        self.benchmarks.iter().map(|s| s.trim()).filter(|s| !s.is_empty())
    }

    /// Reads per thread (`--reads`, or `--num` when negative).
    pub fn reads_per_thread(&self) -> u64 {
        u64::try_from(self.reads).unwrap_or(self.num)
    }

    /// Read options of the read benchmarks (`--prefetch`).
    pub fn read_options(&self) -> ReadOptions {
        let depth = self.readahead_values.map_or(ReadOptions::DEFAULT_READAHEAD_VALUES, |n| n as usize);
        let readahead_values = if self.prefetch { depth } else { 0 };
        ReadOptions { readahead_values, prefix_same_as_start: self.prefix_size > 0, ..ReadOptions::default() }
    }

    /// The benchmark's keys: `--key_size` digits, the first `--prefix_size` of them shared by
    /// `--keys_per_prefix` keys.
    pub fn key_format(&self) -> super::keys::KeyFormat {
        let prefixes = match self.keys_per_prefix {
            0 => 0,
            n => (self.num / n).max(1),
        };
        super::keys::KeyFormat::with_prefixes(self.key_size as usize, self.prefix_size as usize, prefixes)
    }

    /// Engine options for these flags; `create` is false when reusing an existing database.
    pub fn options(&self) -> Options {
        let mut o = Options::default()
            .create_if_missing(!self.use_existing_db)
            .compression(self.compression)
            .bloom_bits_per_key(vec![self.bloom_bits.max(0.0)])
            .filter_allocation(self.filter_allocation)
            .merge_policy(self.merge_policy)
            .io_uring(self.io_uring)
            .mmap_value_reads(self.mmap_value_reads);
        if self.prefix_size > 0 && self.prefix_bloom {
            o = o.prefix_extractor(std::sync::Arc::new(wisckey::FixedPrefix::new(self.prefix_size as usize)));
        }
        if let Some(v) = self.cache_size {
            o = o.block_cache_bytes(v);
        }
        if let Some(v) = self.max_background_compactions {
            o = o.compaction_threads(v);
        }
        if let Some(v) = self.defer_compaction_syncs {
            o = o.defer_compaction_syncs(Some(v != 0));
        }
        if let Some(v) = self.compaction_nice {
            o = o.compaction_nice(Some(v));
        }
        if let Some(v) = self.block_align {
            o = o.block_align(v);
        }
        if let Some(v) = self.lwc {
            o = o.light_weight_compaction(v);
        }
        if let Some(v) = self.auto_tune {
            o = o.auto_tune(v);
        }
        if let Some(v) = self.auto_tune_interval_ms {
            o = o.auto_tune_interval_ms(v);
        }
        if let Some(v) = self.lwc_max_segments {
            o = o.lwc_max_segments(v);
        }
        if let Some(v) = self.lwc_max_table_bytes {
            o = o.lwc_max_table_bytes(v);
        }
        if let Some(v) = self.write_buffer_size {
            o = o.write_buffer_bytes(v);
        }
        match self.merge_operator.as_deref() {
            Some("uint64add") => o = o.merge_operator(std::sync::Arc::new(wisckey::U64AddOperator)),
            Some("stringappend" | "append") => {
                o = o.merge_operator(std::sync::Arc::new(wisckey::AppendOperator::with_delimiter(",")))
            }
            _ => {}
        }
        if self.ttl_secs > 0 {
            o = o.default_ttl_ms(self.ttl_secs.saturating_mul(1000));
        }
        if let Some(v) = self.value_cache_size {
            o = o.value_cache_bytes(v);
        }
        if let Some(v) = self.max_bytes_for_level_base {
            o = o.max_bytes_for_level_base(v);
        }
        if let Some(v) = self.level0_file_num_compaction_trigger {
            o = o.l0_compaction_trigger(v);
        }
        if let Some(v) = self.level0_slowdown_writes_trigger {
            o = o.l0_slowdown_trigger(v);
        }
        if let Some(v) = self.level0_stop_writes_trigger {
            o = o.l0_stop_trigger(v);
        }
        if let Some(v) = self.memtable_kept_value_max_bytes {
            o = o.memtable_kept_value_max_bytes(v);
        }
        if let Some(v) = self.max_file_size {
            o = o.target_file_size_bytes(v);
        }
        if let Some(v) = self.block_size {
            o = o.block_size_bytes(v);
        }
        if let Some(v) = self.open_files {
            o = o.max_open_files(v);
        }
        if let Some(v) = self.min_separated_value_bytes {
            o = o.min_separated_value_bytes(v);
        }
        if let Some(v) = self.gc_garbage_ratio {
            o = o.gc_garbage_ratio(v);
        }
        if let Some(v) = self.gc_interval_ms {
            o = o.gc_interval_ms(v);
        }
        if let Some(v) = self.gc_chunk_bytes {
            o = o.gc_chunk_bytes(v);
        }
        if let Some(v) = self.gc_space_amp_target {
            o = o.gc_space_amp_target(v);
        }
        if let Some(v) = self.gc_space_amp_stall {
            o = o.gc_space_amp_stall(v);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        b: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        T::try_parse_from(std::iter::once("t").chain(args.iter().copied())).map(|t| t.b)
    }

    #[test]
    fn benchmarks_flag_is_a_comma_list() {
        let b = parse(&["--benchmarks=fillseq,readrandom,"]).unwrap();
        assert_eq!(b.benchmark_names().collect::<Vec<_>>(), ["fillseq", "readrandom"]);
        let d = parse(&[]).unwrap();
        assert_eq!(d.benchmark_names().collect::<Vec<_>>().join(","), DEFAULT_BENCHMARKS);
    }

    #[test]
    fn booleans_take_db_bench_spellings() {
        assert!(parse(&["--use_existing_db=1"]).unwrap().use_existing_db);
        assert!(!parse(&["--use_existing_db=0"]).unwrap().use_existing_db);
        assert!(parse(&["--use_existing_db=true"]).unwrap().use_existing_db);
        assert!(parse(&["--use_existing_db"]).unwrap().use_existing_db);
        assert!(!parse(&[]).unwrap().use_existing_db);
        assert!(parse(&["--histogram=1", "--json"]).unwrap().histogram);
        assert!(parse(&["--use_existing_db=maybe"]).is_err());
    }

    #[test]
    fn numeric_flags_use_underscores_and_db_bench_defaults() {
        let b = parse(&["--num=500", "--value_size=1000", "--key_size=20", "--reads=7"]).unwrap();
        assert_eq!((b.num, b.value_size, b.key_size, b.reads_per_thread()), (500, 1000, 20, 7));
        let d = parse(&[]).unwrap();
        assert_eq!((d.num, d.value_size, d.key_size, d.threads), (1_000_000, 100, 16, 1));
        assert_eq!(d.reads_per_thread(), 1_000_000);
        assert_eq!((d.cache_size, d.write_buffer_size), (None, None), "the engine's defaults");
        assert!(parse(&["--value-size=10"]).is_err());
        assert!(parse(&["--threads=0"]).is_err());
    }

    #[test]
    fn read_flags_map_to_read_options() {
        let d = parse(&[]).unwrap();
        assert_eq!((d.seek_nexts, d.multiget_batch_size), (0, 32));
        assert_eq!(d.read_options().readahead_values, ReadOptions::DEFAULT_READAHEAD_VALUES);
        assert!(d.options().io_uring);
        let off = parse(&["--prefetch=0", "--io_uring=0", "--seek_nexts=100", "--multiget_batch_size=8"]).unwrap();
        assert_eq!(off.read_options().readahead_values, 0);
        assert!(!off.options().io_uring);
        assert_eq!((off.seek_nexts, off.multiget_batch_size), (100, 8));
        assert!(parse(&["--multiget_batch_size=0"]).is_err());
    }

    #[test]
    fn compression_and_bloom_flags_map_to_options() {
        assert_eq!(parse(&["--merge_policy=tiering:4"]).unwrap().options().merge_policy, MergePolicy::tiering(4));
        assert!(parse(&["--lwc=1"]).unwrap().options().light_weight_compaction);
        assert!(parse(&["--lwc"]).unwrap().options().light_weight_compaction);
        assert!(!parse(&["--lwc=0"]).unwrap().options().light_weight_compaction);
        assert_eq!(parse(&["--merge_policy=tiering"]).unwrap().options().merge_policy, MergePolicy::tiering(10));
        assert!(parse(&["--merge_policy=tiering:1"]).is_err());
        let bush = parse(&["--merge_policy=bush"]).unwrap().options().merge_policy;
        assert_eq!(bush, MergePolicy::Wacky(wisckey::continuum::Knobs::bush(2.0, 1.0)));
        let w = parse(&["--merge_policy=wacky:T=5,K=0.5,Z=0,C=2,X=1.5"]).unwrap().options().merge_policy;
        let k =
            wisckey::continuum::Knobs { t: 5.0, k: 0.5, z: 0.0, c: wisckey::continuum::Capping::Ratio(2.0), x: 1.5 };
        assert_eq!(w, MergePolicy::Wacky(k));
        assert!(parse(&["--merge_policy=wacky:T=0.5"]).is_err());
        assert!(parse(&["--merge_policy=bushy"]).is_err());
        assert_eq!(parse(&["--max_background_compactions=2"]).unwrap().options().compaction_threads, 2);
        let m = parse(&["--filter_allocation=monkey"]).unwrap();
        assert_eq!(m.options().filter_allocation, FilterAllocation::Monkey);
        assert!(parse(&["--filter_allocation=lopsided"]).is_err());
        let b = parse(&["--compression=zstd:7", "--bloom_bits=-1"]).unwrap();
        let o = b.options();
        assert_eq!(o.compression, Compression::Zstd(7));
        assert_eq!(o.bloom_bits_for_level(0), 0.0);
        assert!(parse(&["--compression=brotli"]).is_err());
    }
}
