//! `wisckey ycsb`: YCSB's CoreWorkload A–F (or a YCSB property file) and db_bench-style micro
//! benchmarks, run through one `Engine` trait against wisckey or, with the `peers` feature,
//! fjall and RocksDB; reports throughput, latency percentiles and amplification.

mod client;
pub mod engine;
mod generators;
mod keys;
mod latency;
mod measure;
mod micro;
#[cfg(feature = "peers")]
mod peers;
#[cfg(feature = "plot")]
pub mod plot;
mod properties;
mod report;
mod values;
mod workload;

use std::path::{Path, PathBuf};

use clap::Args;

use crate::bench::CliResult;
use client::{Phase, Session};
use engine::{Engine, EngineKind};
use measure::ProcIo;
use report::{Amplification, Context};
use values::ValuePool;
use workload::Workload;

#[derive(Debug, Clone, Args)]
pub struct YcsbArgs {
    /// Built-in workloads a–f, comma-separated; one load, then each run phase in order.
    #[arg(long, value_delimiter = ',')]
    pub workload: Vec<String>,

    /// A YCSB property file (recordcount, operationcount, *proportion, requestdistribution, ...).
    #[arg(long = "workload-file", conflicts_with = "workload")]
    pub workload_file: Option<PathBuf>,

    /// Instead of YCSB, db_bench-style benchmarks through the same harness (memtables are flushed,
    /// untimed, after each write benchmark): fillseq,
    /// fillrandom, overwrite, readrandom, readseq, seekrandom, deleterandom (16-byte keys,
    /// `--records` keys; `--operations` reads, default `--records`).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["workload", "workload_file"])]
    pub micro: Vec<String>,

    /// Records to load (default: the workload's recordcount; 1000 for the built-in ones).
    #[arg(long)]
    pub records: Option<u64>,

    /// Operations of each run phase, all threads together (default: the workload's operationcount).
    #[arg(long)]
    pub operations: Option<u64>,

    /// Bytes per value (default: fieldcount * fieldlength, 1000 for the built-in workloads).
    #[arg(long = "value_size", alias = "value-size")]
    pub value_size: Option<usize>,

    /// Client threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: u32,

    /// Database directory, absent or empty (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub db: Option<PathBuf>,

    /// The engine under test.
    #[arg(long, value_enum, default_value_t = EngineKind::Wisckey)]
    pub engine: EngineKind,

    /// Seed of the per-thread generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Also print one JSON object per phase (and one for amplification) on stdout.
    #[arg(long)]
    pub json: bool,

    /// Total cache budget in bytes, the same for every engine (default: each engine's own
    /// default, 32 MiB for all three). wisckey's tables are uncompressed and read in place
    /// through the page cache, so its block cache holds only the blocks mapped tables keep
    /// made (about 100 B per 4 KiB block: an eighth of the budget covers tables 40 times its
    /// size) and its value cache gets the rest; fjall's one cache and RocksDB's block cache
    /// (shared with BlobDB's blob cache) get all of it.
    #[arg(long = "cache_bytes")]
    pub cache_bytes: Option<u64>,

    /// Memtable budget in bytes, the same for every engine (default: each engine's own: wisckey
    /// 8 MiB of entries covering up to 64 MiB of writes, fjall and RocksDB 64 MiB): the most
    /// bytes of writes one memtable holds (and serves reads from) before it is flushed.
    /// wisckey: `memtable_log_bytes` and `write_buffer_bytes`; fjall: `max_memtable_size`;
    /// RocksDB: `write_buffer_size`.
    #[arg(long = "memtable_bytes")]
    pub memtable_bytes: Option<u64>,

    /// wisckey only: `Options::write_buffer_bytes` (memtable size).
    #[arg(long = "write_buffer_bytes")]
    pub write_buffer_bytes: Option<usize>,

    /// wisckey only: `Options::memtable_kept_value_max_bytes` (memtables keep values up to
    /// this size in memory; 0 = none).
    #[arg(long = "memtable_kept_value_max_bytes")]
    pub memtable_kept_value_max_bytes: Option<usize>,

    /// wisckey only: `Options::prepopulate_value_cache`: off, on-flush (the default) or on-write.
    #[arg(long = "prepopulate_value_cache", value_parser = ["off", "on-flush", "on-write"])]
    pub prepopulate_value_cache: Option<String>,

    /// wisckey only: `Options::gc_space_amp_target` (0 = no target).
    #[arg(long = "gc_space_amp_target")]
    pub gc_space_amp_target: Option<f64>,

    /// wisckey only: `Options::gc_space_amp_stall` (0 = no stall).
    #[arg(long = "gc_space_amp_stall")]
    pub gc_space_amp_stall: Option<f64>,

    /// wisckey only: `Options::gc_interval_ms` (0 turns background GC off).
    #[arg(long = "gc_interval_ms")]
    pub gc_interval_ms: Option<u64>,

    /// wisckey only: `Options::min_separated_value_bytes` (values this large go to the vLog).
    #[arg(long = "min_separated_value_bytes")]
    pub min_separated_value_bytes: Option<usize>,

    /// wisckey only: `Options::log_file_bytes` (value-log files roll at this size).
    #[arg(long = "log_file_bytes")]
    pub log_file_bytes: Option<u64>,

    /// wisckey only: `Options::memtable_log_bytes` (a memtable is switched once it spans this
    /// much log).
    #[arg(long = "memtable_log_bytes")]
    pub memtable_log_bytes: Option<u64>,
}

impl YcsbArgs {
    /// The wisckey options these flags set (the defaults otherwise).
    pub fn wisckey_options(&self) -> wisckey::Options {
        let mut o = wisckey::Options::default();
        if let Some(v) = self.gc_space_amp_target {
            o = o.gc_space_amp_target(v);
        }
        if let Some(v) = self.gc_space_amp_stall {
            o = o.gc_space_amp_stall(v);
        }
        if let Some(v) = self.gc_interval_ms {
            o = o.gc_interval_ms(v);
        }
        if let Some(v) = self.min_separated_value_bytes {
            o = o.min_separated_value_bytes(v);
        }
        if let Some(v) = self.log_file_bytes {
            o = o.log_file_bytes(v);
        }
        if let Some(v) = self.memtable_bytes {
            o = o.memtable_log_bytes(v).write_buffer_bytes(usize::try_from(v).unwrap_or(usize::MAX));
        }
        if let Some(v) = self.memtable_log_bytes {
            o = o.memtable_log_bytes(v);
        }
        if let Some(v) = self.write_buffer_bytes {
            o = o.write_buffer_bytes(v);
        }
        if let Some(v) = self.memtable_kept_value_max_bytes {
            o = o.memtable_kept_value_max_bytes(v);
        }
        if let Some(v) = &self.prepopulate_value_cache {
            o = o.prepopulate_value_cache(match v.as_str() {
                "off" => wisckey::PrepopulateValueCache::Off,
                "on-write" => wisckey::PrepopulateValueCache::OnWrite,
                _ => wisckey::PrepopulateValueCache::OnFlush,
            });
        }
        if let Some(total) = self.cache_bytes {
            let blocks = total / 8;
            o = o.block_cache_bytes(blocks as usize).value_cache_bytes(total - blocks);
        }
        o
    }
}

/// The workloads to run, with `--records/--operations/--value_size` applied.
fn workloads(a: &YcsbArgs) -> CliResult<Vec<Workload>> {
    let mut list = match &a.workload_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let name = path.file_name().map_or("file".into(), |n| n.to_string_lossy().into_owned());
            vec![Workload::from_properties(&name, &properties::parse(&text))?]
        }
        None if a.workload.is_empty() => vec![Workload::preset("a")?],
        None => a.workload.iter().map(|w| Workload::preset(w.trim())).collect::<Result<_, _>>()?,
    };
    for w in &mut list {
        w.record_count = a.records.unwrap_or(w.record_count);
        w.operation_count = a.operations.unwrap_or(w.operation_count);
        w.value_size = a.value_size.unwrap_or(w.value_size);
        if w.record_count == 0 {
            return Err("recordcount must be at least 1".into());
        }
        if w.value_size > wisckey::MAX_VALUE_BYTES {
            return Err(format!("value size must be at most {}", wisckey::MAX_VALUE_BYTES).into());
        }
    }
    Ok(list)
}

/// The database directory: `--db` if absent or empty, else a temporary one.
fn db_dir(a: &YcsbArgs) -> CliResult<(PathBuf, Option<tempfile::TempDir>)> {
    match &a.db {
        Some(p) => {
            if p.exists() && std::fs::read_dir(p)?.next().is_some() {
                return Err(format!("--db {} is not empty (engines must not share files)", p.display()).into());
            }
            Ok((p.clone(), None))
        }
        None => {
            let tmp = tempfile::Builder::new().prefix("wisckey-ycsb-").tempdir()?;
            Ok((tmp.path().join("db"), Some(tmp)))
        }
    }
}

/// Run `wisckey ycsb`.
pub fn run(a: YcsbArgs) -> CliResult {
    for m in &a.micro {
        if !micro::NAMES.contains(&m.as_str()) {
            return Err(format!("unknown micro benchmark '{m}' (known: {})", micro::NAMES.join(", ")).into());
        }
    }
    let list = workloads(&a)?;
    let (path, _tmp) = db_dir(&a)?;
    std::fs::create_dir_all(&path)?;
    let first = &list[0];
    let ctx = Context {
        engine: a.engine.name(),
        threads: a.threads as usize,
        value_size: first.value_size,
        records: first.record_count,
        json: a.json,
    };
    let io_start = ProcIo::now();
    let budget = engine::Budget { cache_bytes: a.cache_bytes, memtable_bytes: a.memtable_bytes };
    let engine = engine::open(a.engine, &path, a.wisckey_options(), budget)?;
    eprintln!(
        "{}: db={} threads={} value_size={} records={}",
        ctx.engine,
        path.display(),
        ctx.threads,
        ctx.value_size,
        ctx.records
    );
    let result = drive(&a, &ctx, engine.as_ref(), &list, io_start, &path);
    let closed = engine.close();
    result.and(closed)
}

/// Load and run (or the micro benchmarks), then measure amplification.
fn drive(
    a: &YcsbArgs,
    ctx: &Context,
    engine: &dyn Engine,
    list: &[Workload],
    io_start: Option<ProcIo>,
    path: &Path,
) -> CliResult {
    let first = &list[0];
    let session = Session::new(engine, ctx.threads, a.seed, first.record_count);
    let values = ValuePool::new(first.value_size, a.seed);
    let mut reads = ReadTotals::default();
    let label = if a.micro.is_empty() {
        let load = client::load(&session, first, &values)?;
        report::phase(ctx, &first.name, "load", load.elapsed.as_secs_f64(), &load.latencies);
        // Untimed, as after the micro benchmarks' writes (and as YCSB's own `load` and `run`,
        // two processes, leave the data): the run then reads each engine's files and caches
        // within the budget. fjall seals a full memtable and keeps it, whole values and all,
        // until its flush catches up, with no bound on how many wait (its total write-buffer
        // limit is unimplemented): 100 KB zipfian reads over 64 MiB ran at 167k-308k ops/s
        // while sealed memtables held part of the data, against 7 300 `pread`s of whole values
        // per 20 000 reads once flushed.
        engine.flush()?;
        for w in list {
            let run = reads.measure(|| client::run(&session, w, &values))?;
            report::phase(ctx, &w.name, "run", run.elapsed.as_secs_f64(), &run.latencies);
        }
        list.iter().map(|w| w.name.as_str()).collect::<Vec<_>>().join(",")
    } else {
        let live = micro::LiveSet::new(first.record_count);
        let read_ops = a.operations.unwrap_or(first.record_count);
        let m = micro::Micro { num: first.record_count, reads: read_ops, values: &values, live: &live };
        for (round, name) in a.micro.iter().enumerate() {
            let round = round as u64;
            let writes = matches!(name.as_str(), "fillseq" | "fillrandom" | "overwrite" | "deleterandom");
            let (phase, ops) = if writes {
                micro::run(&session, &m, name, round)?
            } else {
                reads.measure_micro(|| micro::run(&session, &m, name, round))?
            };
            report::micro(ctx, name, phase.elapsed.as_secs_f64(), ops, &phase.latencies);
            if writes {
                // Untimed: the reads that follow measure each engine's files, not whatever its
                // memtable happens to hold (RocksDB's default memtable is 64 MiB, wisckey's 4).
                engine.flush()?;
            }
        }
        "micro".to_string()
    };
    engine.flush()?;
    let counters = engine.stats();
    let amp = Amplification {
        user_bytes: session.user_bytes.load(std::sync::atomic::Ordering::Relaxed),
        io_session: ProcIo::now().zip(io_start).map(|(end, start)| end.since(&start)),
        io_reads: reads.io,
        lookups: reads.lookups,
        disk_bytes: measure::disk_usage(path)?,
        live_bytes: session.live_bytes.load(std::sync::atomic::Ordering::Relaxed),
        engine: &counters,
    };
    amp.print(ctx, &label);
    Ok(())
}

/// `/proc/self/io` summed over the phases that read, and the lookups they did.
#[derive(Default)]
struct ReadTotals {
    io: Option<ProcIo>,
    lookups: u64,
}

impl ReadTotals {
    fn add(&mut self, before: Option<ProcIo>, lookups: u64) {
        if let Some(delta) = ProcIo::now().zip(before).map(|(after, before)| after.since(&before)) {
            let sum = self.io.get_or_insert_with(ProcIo::default);
            sum.read_bytes += delta.read_bytes;
            sum.rchar += delta.rchar;
        }
        self.lookups += lookups;
    }

    fn measure(&mut self, f: impl FnOnce() -> CliResult<Phase>) -> CliResult<Phase> {
        let before = ProcIo::now();
        let phase = f()?;
        self.add(before, phase.lookups());
        Ok(phase)
    }

    fn measure_micro(&mut self, f: impl FnOnce() -> CliResult<(Phase, u64)>) -> CliResult<(Phase, u64)> {
        let before = ProcIo::now();
        let (phase, ops) = f()?;
        self.add(before, ops);
        Ok((phase, ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: YcsbArgs,
    }

    fn args(v: &[&str]) -> YcsbArgs {
        Cli::try_parse_from(std::iter::once("ycsb").chain(v.iter().copied())).unwrap().a
    }

    /// Every core workload end to end through the harness against wisckey, checked against a
    /// model: after the load every record is readable, and the session's counters add up.
    #[test]
    fn every_core_workload_runs_against_wisckey() {
        let dir = tempfile::tempdir().unwrap();
        let engine =
            engine::open(EngineKind::Wisckey, dir.path(), wisckey::Options::default(), engine::Budget::default())
                .unwrap();
        let a =
            args(&["--workload=a,b,c,d,e,f", "--records=500", "--operations=400", "--value_size=200", "--threads=2"]);
        let list = workloads(&a).unwrap();
        assert_eq!(list.len(), 6);
        let session = Session::new(engine.as_ref(), 2, 7, 500);
        let values = ValuePool::new(200, 7);
        let load = client::load(&session, &list[0], &values).unwrap();
        assert_eq!(load.latencies.get("INSERT").unwrap().count(), 500);
        for w in &list {
            let run = client::run(&session, w, &values).unwrap();
            assert_eq!(run.latencies.total_ops(), 400, "workload {}", w.name);
            // Records are never deleted: every read finds its record.
            for (op, l) in run.latencies.iter() {
                assert_eq!(l.not_found, 0, "workload {} op {op}", w.name);
            }
        }
        // D and E inserted ≈ 5 % of 400 each; each insert is a new live record.
        let inserted = session.inserts.issued() - 500;
        assert!((5..=60).contains(&inserted), "{inserted}");
        assert_eq!(session.inserts.last_value(), 500 + inserted - 1);
        let mut key = Vec::new();
        for k in 0..500 + inserted {
            keys::key_name(k, true, &mut key);
            assert_eq!(engine.get(&key).unwrap(), Some(200), "record {k}");
        }
        let live = session.live_bytes.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            live,
            (0..500 + inserted).map(|k| 4 + keys::fnvhash64(k as i64).to_string().len() as u64 + 200).sum::<u64>()
        );
        engine.flush().unwrap();
        assert!(engine.stats().write_amp().is_some());
        engine.close().unwrap();
    }

    #[test]
    fn micro_benchmarks_run_against_wisckey() {
        let dir = tempfile::tempdir().unwrap();
        let engine =
            engine::open(EngineKind::Wisckey, dir.path(), wisckey::Options::default(), engine::Budget::default())
                .unwrap();
        let session = Session::new(engine.as_ref(), 2, 3, 1000);
        let values = ValuePool::new(100, 3);
        let live = micro::LiveSet::new(1000);
        let m = micro::Micro { num: 1000, reads: 1000, values: &values, live: &live };
        let (_, ops) = micro::run(&session, &m, "fillseq", 0).unwrap();
        assert_eq!(ops, 1000);
        let (p, _) = micro::run(&session, &m, "readrandom", 1).unwrap();
        assert_eq!(p.latencies.get("readrandom").unwrap().not_found, 0);
        // Each of the two threads scans 500 entries.
        assert_eq!(micro::run(&session, &m, "readseq", 2).unwrap().1, 1000);
        assert_eq!(micro::run(&session, &m, "seekrandom", 3).unwrap().1, 1000);
        assert_eq!(session.live_bytes.load(std::sync::atomic::Ordering::Relaxed), 1000 * 116);
        let (d, _) = micro::run(&session, &m, "deleterandom", 4).unwrap();
        let deleted = (0..1000u64)
            .filter(|&k| {
                let mut key = Vec::new();
                keys::bench_key(k, &mut key);
                engine.get(&key).unwrap().is_none()
            })
            .count() as u64;
        assert!(deleted > 0 && d.latencies.total_ops() == 1000);
        assert_eq!(session.live_bytes.load(std::sync::atomic::Ordering::Relaxed), (1000 - deleted) * 116);
        engine.close().unwrap();
    }

    #[test]
    fn flags_pick_workloads_and_overrides() {
        assert_eq!(workloads(&args(&[])).unwrap()[0].name, "a");
        let w = &workloads(&args(&["--workload=E", "--records=10", "--value_size=64"])).unwrap()[0];
        assert_eq!((w.name.as_str(), w.record_count, w.value_size, w.operation_count), ("e", 10, 64, 1000));
        assert!(workloads(&args(&["--workload=z"])).is_err());
        assert!(workloads(&args(&["--records=0"])).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("workloadx");
        std::fs::write(&file, "recordcount=77\nreadproportion=1\nupdateproportion=0\nfieldcount=1\nfieldlength=10\n")
            .unwrap();
        let w = &workloads(&args(&["--workload-file", file.to_str().unwrap()])).unwrap()[0];
        assert_eq!((w.name.as_str(), w.record_count, w.value_size), ("workloadx", 77, 10));
        assert!(Cli::try_parse_from(["ycsb", "--workload=a", "--micro=readseq"]).is_err());
    }
}
