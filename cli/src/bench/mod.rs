//! `wisckey bench`: a port of LevelDB 1.23's db_bench (same flags, benchmarks, key sequence
//! and output lines), so our figures sit beside LevelDB's and RocksDB's own db_bench runs.

pub(crate) mod flags;
mod histogram;
mod keys;
mod live;
mod report;
mod values;
mod workloads;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

use indicatif::{ProgressBar, ProgressStyle};
use wisckey::{Db, ReadOptions, WriteOptions};

pub use flags::{parse_bool, BenchArgs};
pub use report::{db_stats_json, render_db_stats, JsonObject};

use keys::{KeyFormat, Random};
use live::LiveKeys;
use report::Stats;
use workloads::{Ctx, Method, ThreadState};

/// Result of CLI work: any error, printed with its Display by `main`.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How one named benchmark runs (db_bench's per-name parameter overrides).
struct Spec {
    method: Method,
    /// Destroy and re-create the database first.
    fresh_db: bool,
    num: u64,
    reads: u64,
    value_size: usize,
    entries_per_batch: u64,
    sync: bool,
    /// readwhilewriting adds a writer thread.
    extra_threads: usize,
    /// A write or delete benchmark: does `num` ops per thread, not `reads`.
    writes: bool,
}

/// What a benchmark name asks for.
enum Step {
    Run(Spec),
    Stats,
}

const NAMES: &[&str] = &[
    "fillseq",
    "fillbatch",
    "fillrandom",
    "fillcrossks",
    "fillshuffle",
    "overwrite",
    "fillsync",
    "fill100K",
    "readseq",
    "readreverse",
    "readrandom",
    "multireadrandom",
    "readmissing",
    "readhot",
    "readrandomsmall",
    "seekrandom",
    "seekordered",
    "readwhilewriting",
    "readrandomwriterandom",
    "seekrandomwriterandom",
    "shiftwrites",
    "shiftreads",
    "shiftscans",
    "txnrmw",
    "batchrmw",
    "deleteseq",
    "deleterandom",
    "mergerandom",
    "compact",
    "waitforcompaction",
    "reorganize",
    "stats",
];

fn step_for(name: &str, args: &BenchArgs) -> Option<Step> {
    let mut s = Spec {
        method: workloads::write_seq,
        fresh_db: false,
        num: args.num,
        reads: args.reads_per_thread(),
        value_size: args.value_size,
        entries_per_batch: 1,
        sync: false,
        extra_threads: 0,
        writes: false,
    };
    match name {
        "fillseq" => (s.fresh_db, s.writes) = (true, true),
        "fillbatch" => (s.fresh_db, s.writes, s.entries_per_batch) = (true, true, 1000),
        "fillrandom" => (s.fresh_db, s.writes, s.method) = (true, true, workloads::write_random),
        "fillcrossks" => (s.fresh_db, s.writes, s.method) = (true, true, workloads::write_cross_keyspace),
        "fillshuffle" => (s.fresh_db, s.writes, s.method) = (true, true, workloads::write_shuffled),
        "overwrite" => (s.writes, s.method) = (true, workloads::write_random),
        "fillsync" => {
            (s.fresh_db, s.writes, s.method) = (true, true, workloads::write_random);
            (s.num, s.sync) = (s.num / 1000, true);
        }
        "fill100K" => {
            (s.fresh_db, s.writes, s.method) = (true, true, workloads::write_random);
            (s.num, s.value_size) = (s.num / 1000, 100_000);
        }
        "readseq" => s.method = workloads::read_seq,
        "readreverse" => s.method = workloads::read_reverse,
        "readrandom" => s.method = workloads::read_random,
        "multireadrandom" => s.method = workloads::multi_read_random,
        "readrandomsmall" => (s.method, s.reads) = (workloads::read_random, s.reads / 1000),
        "readmissing" => s.method = workloads::read_missing,
        "readhot" => s.method = workloads::read_hot,
        "seekrandom" => s.method = workloads::seek_random,
        "seekordered" => s.method = workloads::seek_ordered,
        "readwhilewriting" => (s.method, s.extra_threads) = (workloads::read_while_writing, 1),
        "readrandomwriterandom" => (s.writes, s.method) = (true, workloads::read_random_write_random),
        "seekrandomwriterandom" => (s.writes, s.method) = (true, workloads::seek_random_write_random),
        "shiftwrites" => (s.writes, s.method) = (true, workloads::shift_writes),
        "shiftreads" => (s.writes, s.method) = (true, workloads::shift_reads),
        "shiftscans" => (s.writes, s.method) = (true, workloads::shift_scans),
        "txnrmw" => (s.writes, s.method) = (true, workloads::txn_rmw),
        "batchrmw" => (s.writes, s.method) = (true, workloads::batch_rmw),
        "deleteseq" => (s.writes, s.method) = (true, workloads::delete_seq),
        "deleterandom" => (s.writes, s.method) = (true, workloads::delete_random),
        "mergerandom" => (s.writes, s.method) = (true, workloads::merge_random),
        // One call per thread; zero reads also keeps the progress bar off.
        "compact" => (s.method, s.reads) = (workloads::compact, 0),
        "waitforcompaction" => (s.method, s.reads) = (workloads::wait_for_compaction, 0),
        "reorganize" => (s.method, s.reads) = (workloads::reorganize, 0),
        "stats" => return Some(Step::Stats),
        _ => return None,
    }
    Some(Step::Run(s))
}

/// Drop the database's files from the page cache (`--cold`), so the next benchmark reads from
/// the device as in the WiscKey paper: write dirty pages back, then `POSIX_FADV_DONTNEED`.
fn evict_page_cache(dir: &std::path::Path) -> CliResult {
    use std::os::unix::io::AsRawFd;
    for entry in std::fs::read_dir(dir)? {
        let file = match std::fs::File::open(entry?.path()) {
            Ok(f) => f,
            // Deleted meanwhile (value-log GC, compaction): nothing to evict.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        file.sync_all()?;
        // SAFETY: plain syscall on a descriptor we own; it only advises the kernel.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(format!("posix_fadvise(DONTNEED) failed with {rc}").into());
        }
    }
    Ok(())
}

/// `--keyspaces=N`: the keyspaces `ks1` .. `ks{N-1}` besides the default one, each created (or
/// opened) with the benchmark's options and given 1000 entries, so every memtable holds a
/// list per keyspace as an application with several keyspaces has.
fn open_keyspaces(db: &Db, args: &BenchArgs) -> CliResult {
    for i in 1..args.keyspaces {
        let ks = db.open_keyspace(&format!("ks{i}"), args.options())?;
        let mut key = args.key_format();
        let value = vec![b'x'; args.value_size];
        for k in 0..1000 {
            ks.put(key.key(k), &value)?;
        }
    }
    Ok(())
}

/// Run `wisckey bench`.
pub fn run(args: BenchArgs) -> CliResult {
    let steps = plan(&args)?;
    let mut bench = Bench::new(args)?;
    bench.print_header();
    for (name, step) in steps {
        match step {
            Step::Run(spec) => bench.run_one(&name, spec)?,
            Step::Stats => bench.print_stats()?,
        }
    }
    bench.finish()
}

/// Check the flags and resolve every benchmark name before anything runs.
fn plan(args: &BenchArgs) -> CliResult<Vec<(String, Step)>> {
    validate(args)?;
    args.benchmark_names()
        .map(|name| match step_for(name, args) {
            Some(step) => Ok((name.to_string(), step)),
            None => Err(format!("unknown benchmark '{name}' (known: {})", NAMES.join(", ")).into()),
        })
        .collect()
}

fn validate(args: &BenchArgs) -> CliResult {
    if args.num == 0 {
        return Err("--num must be at least 1".into());
    }
    let key_size = args.key_size as usize;
    if args.num > KeyFormat::capacity(key_size) {
        return Err(format!("--num={} keys do not fit in --key_size={key_size} digits", args.num).into());
    }
    if args.keys_per_prefix > 0 {
        let rest = key_size.saturating_sub(args.prefix_size as usize);
        if args.prefix_size == 0 || rest == 0 || args.num > KeyFormat::capacity(rest) {
            return Err(format!(
                "--keys_per_prefix needs 0 < --prefix_size < --key_size with --num={} fitting in the other digits",
                args.num
            )
            .into());
        }
    }
    if args.value_size > wisckey::MAX_VALUE_BYTES {
        return Err(format!("--value_size must be at most {}", wisckey::MAX_VALUE_BYTES).into());
    }
    if args.keyspaces == 0 {
        return Err("--keyspaces must be at least 1 (the default keyspace)".into());
    }
    if args.keyspaces < 2 && args.benchmark_names().any(|n| n == "fillcrossks") {
        return Err("fillcrossks writes to two keyspaces: give --keyspaces=2 or more".into());
    }
    if args.use_existing_db && args.db.is_none() {
        return Err("--use_existing_db needs --db=DIR".into());
    }
    Ok(())
}

/// The benchmark driver: the open database and what the benchmarks know about its contents.
struct Bench {
    // Field order matters: the database closes before the temporary directory is removed.
    db: Option<Db>,
    args: BenchArgs,
    path: PathBuf,
    live: LiveKeys,
    /// False when the database held data this run did not write (--use_existing_db).
    live_known: bool,
    /// Threads started so far: seeds are `seed + count`, as in db_bench.
    thread_count: u32,
    _tmp: Option<tempfile::TempDir>,
}

impl Bench {
    fn new(args: BenchArgs) -> CliResult<Bench> {
        let (path, tmp) = match &args.db {
            Some(p) => (p.clone(), None),
            None => {
                let tmp = tempfile::Builder::new().prefix("wisckey-bench-").tempdir()?;
                (tmp.path().join("db"), Some(tmp))
            }
        };
        if !args.use_existing_db {
            wisckey::destroy(&path, &args.options())?;
        }
        let started = std::time::Instant::now();
        let db = Db::open(&path, args.options())?;
        open_keyspaces(&db, &args)?;
        if args.use_existing_db {
            // Opening an existing database replays its log: report how long recovery took.
            println!(
                "open         : {:11.3} ms (recovery of the existing database)",
                started.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(Bench {
            db: Some(db),
            // A byte per key, only when `stats` will report space: at 100 M keys it would
            // otherwise be 100 MB of the benchmark's own memory beside the engine's.
            live: LiveKeys::new(
                if args.benchmark_names().any(|n| n == "stats") { args.num } else { 0 },
                args.key_size as usize,
            ),
            live_known: !args.use_existing_db,
            args,
            path,
            thread_count: 0,
            _tmp: tmp,
        })
    }

    fn db(&self) -> CliResult<&Db> {
        self.db.as_ref().ok_or_else(|| "database is not open".into())
    }

    fn print_header(&self) {
        let a = &self.args;
        let o = a.options();
        eprintln!("wisckey:    version {}", env!("CARGO_PKG_VERSION"));
        print_cpu_info();
        eprintln!(
            "Options:    db={} compression={:?} write_buffer_size={} cache_size={} value_cache_size={} bloom_bits={} threads={}",
            self.path.display(),
            a.compression,
            o.write_buffer_bytes,
            o.block_cache_bytes,
            o.value_cache_bytes,
            a.bloom_bits,
            a.threads
        );
        if let Some(db) = &self.db {
            let engine = if db.uses_io_uring() { "io_uring" } else { "thread pool" };
            let prefetch = if a.prefetch { "on" } else { "off" };
            eprintln!("Prefetch:   {prefetch} (parallel value reads: {engine})");
        }
        let key = a.key_size as f64;
        let value = a.value_size as f64;
        let num = a.num as f64;
        println!("Keys:       {} bytes each", a.key_size);
        println!(
            "Values:     {} bytes each ({} bytes after compression)",
            a.value_size,
            (value * a.compression_ratio + 0.5) as i64
        );
        println!("Entries:    {}", a.num);
        println!("RawSize:    {:.1} MB (estimated)", (key + value) * num / 1048576.0);
        println!("FileSize:   {:.1} MB (estimated)", (key + value * a.compression_ratio) * num / 1048576.0);
        if cfg!(debug_assertions) {
            println!("WARNING: Optimization is disabled: benchmarks unnecessarily slow");
        }
        println!("------------------------------------------------");
    }

    fn run_one(&mut self, name: &str, spec: Spec) -> CliResult {
        if spec.fresh_db {
            if self.args.use_existing_db {
                println!("{name:<12} : skipped (--use_existing_db is true)");
                return Ok(());
            }
            self.reopen_fresh()?;
        }
        if self.args.cold && !spec.writes {
            self.reopen_cold()?;
        }
        let value_class = self.live.class_for(spec.value_size);
        let threads = self.args.threads as usize + spec.extra_threads;
        let ctx = Ctx {
            db: self.db()?,
            args: &self.args,
            num: spec.num,
            reads: spec.reads,
            value_size: spec.value_size,
            entries_per_batch: spec.entries_per_batch,
            write_options: WriteOptions { sync: spec.sync },
            live: &self.live,
            value_class,
            threads_done: AtomicUsize::new(0),
            threads,
        };
        let per_thread = if spec.writes { spec.num } else { spec.reads };
        let progress = progress_bar(name, per_thread * self.args.threads as u64);
        let seeds: Vec<u32> =
            (1..=threads as u32).map(|i| self.args.seed.wrapping_add(self.thread_count + i)).collect();
        // Write benchmarks always keep latencies: their tail (p99, p99.9) is where stalls show.
        let latencies = self.args.histogram || spec.writes;
        // Write benchmarks also report how long writers waited for the engine (GC's pacing,
        // flush and compaction stalls) while they ran.
        let waits_before = spec.writes.then(|| self.db().map(|db| report::Waits::of(&db.stats()))).transpose()?;
        let stats = run_threads(&ctx, spec.method, &seeds, progress.as_ref(), latencies)?;
        if let Some(pb) = progress {
            pb.finish_and_clear();
        }
        self.thread_count += threads as u32;
        let mut summary = stats.summary(name, threads);
        if let Some(before) = waits_before {
            summary.waits = Some(report::Waits::of(&self.db()?.stats()).since(&before));
        }
        self.report(&summary);
        Ok(())
    }

    fn report(&self, summary: &report::Summary) {
        println!("{}", summary.line());
        if let (Some(h), true) = (&summary.hist, self.args.histogram) {
            println!("Microseconds per op:\n{}", h.render());
        }
        if self.args.json {
            println!("{}", summary.json());
        }
    }

    /// Close, destroy and re-create the database (db_bench's `fresh_db`).
    fn reopen_fresh(&mut self) -> CliResult {
        if let Some(db) = self.db.take() {
            db.close()?;
        }
        let options = self.args.options();
        wisckey::destroy(&self.path, &options)?;
        let db = Db::open(&self.path, options)?;
        open_keyspaces(&db, &self.args)?;
        self.db = Some(db);
        self.live.clear();
        self.live_known = true;
        Ok(())
    }

    /// `--cold`: let pending flushes and compactions finish (data at rest), close the
    /// database so no memory mapping of its files pins pages in the cache (mapped pages
    /// survive `POSIX_FADV_DONTNEED`), evict its files, and open it again: a restart on a
    /// cold cache.
    fn reopen_cold(&mut self) -> CliResult {
        if let Some(db) = self.db.take() {
            db.wait_for_background_work()?;
            db.close()?;
        }
        evict_page_cache(&self.path)?;
        let options = self.args.options().create_if_missing(false);
        self.db = Some(Db::open(&self.path, options)?);
        Ok(())
    }

    fn print_stats(&self) -> CliResult {
        let db = self.db()?;
        let live = if self.live_known { self.live.bytes() } else { live_bytes_by_scan(db)? };
        let stats = db.stats();
        println!("\n{}", render_db_stats(&stats, Some(live)));
        if self.args.json {
            println!("{}", db_stats_json(&stats, Some(live)));
        }
        Ok(())
    }

    fn finish(mut self) -> CliResult {
        if let Some(db) = self.db.take() {
            db.close()?;
        }
        Ok(())
    }
}

/// Key + value bytes of every entry, read without filling the block cache.
pub fn live_bytes_by_scan(db: &Db) -> CliResult<u64> {
    let ro = ReadOptions { fill_cache: Some(false), ..ReadOptions::default() };
    let mut it = db.iter(&ro)?;
    it.seek_to_first()?;
    let mut bytes = 0u64;
    while it.valid() {
        bytes += (it.key().len() + it.value().len()) as u64;
        it.next()?;
    }
    Ok(bytes)
}

/// A bar on stderr, only when stderr is a terminal (logs and pipes stay clean).
fn progress_bar(name: &str, total: u64) -> Option<ProgressBar> {
    if total == 0 || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{msg:12} [{bar:30}] {human_pos}/{human_len} ops, eta {eta}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(name.to_string());
    Some(pb)
}

/// Run `method` in one thread per seed, started together; returns the merged stats.
fn run_threads(
    ctx: &Ctx,
    method: Method,
    seeds: &[u32],
    progress: Option<&ProgressBar>,
    latencies: bool,
) -> CliResult<Stats> {
    let barrier = Barrier::new(seeds.len());
    let results: Vec<CliResult<Stats>> = std::thread::scope(|scope| {
        let handles: Vec<_> = seeds
            .iter()
            .enumerate()
            .map(|(tid, &seed)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut t =
                        ThreadState { tid, rand: Random::new(seed), stats: Stats::new(latencies, progress.cloned()) };
                    barrier.wait();
                    let _done = DoneOnDrop(&ctx.threads_done);
                    t.stats.start();
                    let r = method(ctx, &mut t);
                    t.stats.stop();
                    r.map(|()| t.stats)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a benchmark thread panicked".into()))).collect()
    });
    let mut merged: Option<Stats> = None;
    for r in results {
        let s = r?;
        match &mut merged {
            Some(m) => m.merge(&s),
            None => merged = Some(s),
        }
    }
    merged.ok_or_else(|| "no benchmark threads ran".into())
}

/// Counts a thread as done even when it panics, so readwhilewriting's writer always stops.
struct DoneOnDrop<'a>(&'a AtomicUsize);

impl Drop for DoneOnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// db_bench's environment lines (stderr): CPU count, model and cache size.
fn print_cpu_info() {
    let Ok(info) = std::fs::read_to_string(Path::new("/proc/cpuinfo")) else {
        return;
    };
    let field = |line: &str, name: &str| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == name).then(|| v.trim().to_string())
    };
    let models: Vec<String> = info.lines().filter_map(|l| field(l, "model name")).collect();
    let cache = info.lines().find_map(|l| field(l, "cache size")).unwrap_or_default();
    if let Some(model) = models.first() {
        eprintln!("CPU:        {} * {model}", models.len());
        eprintln!("CPUCache:   {cache}");
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

    fn args(a: &[&str]) -> BenchArgs {
        T::try_parse_from(std::iter::once("t").chain(a.iter().copied())).unwrap().b
    }

    fn spec(name: &str, a: &BenchArgs) -> Spec {
        match step_for(name, a) {
            Some(Step::Run(s)) => s,
            _ => panic!("{name} is not a runnable benchmark"),
        }
    }

    #[test]
    fn db_bench_overrides_apply_per_benchmark() {
        let a = args(&["--num=10000"]);
        let sync = spec("fillsync", &a);
        assert_eq!((sync.num, sync.sync, sync.fresh_db), (10, true, true));
        let big = spec("fill100K", &a);
        assert_eq!((big.num, big.value_size), (10, 100_000));
        assert_eq!(spec("fillbatch", &a).entries_per_batch, 1000);
        assert!(!spec("overwrite", &a).fresh_db);
        assert!(spec("overwrite", &a).writes && !spec("readseq", &a).writes);
        assert!(matches!(step_for("stats", &a), Some(Step::Stats)));
    }

    #[test]
    fn range_deletes_come_every_n_writes_up_to_the_cap_as_db_bench_issues_them() {
        let a = args(&["--writes_per_range_tombstone=10", "--max_num_range_tombstones=3"]);
        let due: Vec<u64> = (1..=100).filter(|&w| workloads::range_delete_due(&a, w)).collect();
        assert_eq!(due, vec![10, 20, 30]);
        let later = args(&[
            "--writes_per_range_tombstone=10",
            "--max_num_range_tombstones=2",
            "--writes_before_delete_range=5",
        ]);
        let due: Vec<u64> = (1..=100).filter(|&w| workloads::range_delete_due(&later, w)).collect();
        assert_eq!(due, vec![15, 25]);
        assert!(!(1..=100).any(|w| workloads::range_delete_due(&args(&[]), w)), "off by default");
    }

    #[test]
    fn every_listed_name_is_known() {
        let a = args(&[]);
        assert!(NAMES.iter().all(|n| step_for(n, &a).is_some()));
    }

    #[test]
    fn bad_flag_combinations_are_errors_not_panics() {
        assert!(plan(&args(&["--benchmarks=fillseq,nope"])).is_err());
        assert_eq!(plan(&args(&["--benchmarks=fillseq,,stats"])).unwrap().len(), 2);
        assert!(validate(&args(&["--use_existing_db=1"])).is_err());
        assert!(validate(&args(&["--num=0"])).is_err());
        assert!(validate(&args(&["--num=100000", "--key_size=4"])).is_err());
        assert!(validate(&args(&["--num=10000", "--key_size=4"])).is_ok());
    }
}
