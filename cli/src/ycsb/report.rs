//! `wisckey ycsb` output: a text block per phase (throughput, p50/p99/p99.9 per operation
//! type), the amplification figures, and with `--json` one JSON object per phase on stdout.

use super::engine::EngineCounters;
use super::latency::{Latencies, OpLatency};
use super::measure::ProcIo;
use crate::bench::JsonObject;

/// What every JSON object of a run carries, so results from many runs can be pooled.
pub struct Context<'a> {
    pub engine: &'a str,
    pub threads: usize,
    pub value_size: usize,
    pub records: u64,
    pub json: bool,
}

impl Context<'_> {
    fn object(&self) -> JsonObject {
        let mut j = JsonObject::default();
        j.str("engine", self.engine)
            .int("threads", self.threads as u64)
            .int("value_size", self.value_size as u64)
            .int("records", self.records);
        j
    }
}

fn op_json(l: &OpLatency, secs: f64) -> String {
    let mut j = JsonObject::default();
    j.int("count", l.count())
        .num("ops_per_sec", l.count() as f64 / secs)
        .num("mean_micros", l.mean_micros())
        .num("p50_micros", l.percentile_micros(50.0))
        .num("p99_micros", l.percentile_micros(99.0))
        .num("p999_micros", l.percentile_micros(99.9))
        .num("max_micros", l.max_micros())
        .int("not_found", l.not_found);
    j.finish()
}

fn op_line(name: &str, l: &OpLatency, secs: f64) -> String {
    format!(
        "  {name:<18} {:>10} ops {:>11.0} ops/s   p50 {:>9.1} µs   p99 {:>9.1} µs   p99.9 {:>9.1} µs   max {:>10.1} µs{}",
        l.count(),
        l.count() as f64 / secs,
        l.percentile_micros(50.0),
        l.percentile_micros(99.0),
        l.percentile_micros(99.9),
        l.max_micros(),
        if l.not_found > 0 { format!("   ({} not found)", l.not_found) } else { String::new() }
    )
}

/// A YCSB load or run phase.
pub fn phase(ctx: &Context, workload: &str, phase: &str, secs: f64, lat: &Latencies) {
    let ops = lat.total_ops();
    let secs = secs.max(1e-9);
    println!(
        "[{}] workload {workload} {phase}: {ops} ops in {secs:.3} s = {:.0} ops/s ({} threads)",
        ctx.engine,
        ops as f64 / secs,
        ctx.threads
    );
    for (name, l) in lat.iter() {
        println!("{}", op_line(name, l, secs));
    }
    if ctx.json {
        let mut j = ctx.object();
        let by_type: Vec<String> = lat.iter().map(|(n, l)| format!("\"{n}\":{}", op_json(l, secs))).collect();
        j.str("workload", workload)
            .str("phase", phase)
            .int("ops", ops)
            .num("elapsed_secs", secs)
            .num("ops_per_sec", ops as f64 / secs)
            .raw("ops_by_type", &format!("{{{}}}", by_type.join(",")));
        println!("{}", j.finish());
    }
}

/// A micro benchmark, in db_bench's line layout (micros/op summed over threads, per op).
pub fn micro(ctx: &Context, name: &str, secs: f64, ops: u64, lat: &Latencies) {
    let micros_per_op = secs * 1e6 * ctx.threads as f64 / ops.max(1) as f64;
    let l = lat.get(name);
    let misses = l.map_or(0, |l| l.not_found);
    let found = if misses > 0 { format!(" ({} of {ops} found)", ops - misses) } else { String::new() };
    println!("[{}] {name:<12} : {micros_per_op:11.3} micros/op;{found}", ctx.engine);
    if ctx.json {
        let mut j = ctx.object();
        j.str("benchmark", name)
            .num("micros_per_op", micros_per_op)
            .int("ops", ops)
            .num("elapsed_secs", secs)
            .num("ops_per_sec", ops as f64 / secs.max(1e-9))
            .int("not_found", misses);
        if let Some(l) = l.filter(|_| name != "readseq") {
            j.num("p50_micros", l.percentile_micros(50.0))
                .num("p99_micros", l.percentile_micros(99.0))
                .num("p999_micros", l.percentile_micros(99.9));
        }
        println!("{}", j.finish());
    }
}

/// Everything amplification is computed from, gathered at the end of a session.
pub struct Amplification<'a> {
    /// Key + value bytes the benchmark wrote (the harness's own count).
    pub user_bytes: u64,
    /// `/proc/self/io` from before the engine opened to after its final flush.
    pub io_session: Option<ProcIo>,
    /// `/proc/self/io` over the read phases only.
    pub io_reads: Option<ProcIo>,
    pub lookups: u64,
    pub disk_bytes: u64,
    pub live_bytes: u64,
    pub engine: &'a EngineCounters,
}

impl Amplification<'_> {
    fn ratio(num: u64, den: u64) -> f64 {
        num as f64 / den.max(1) as f64
    }

    pub fn print(&self, ctx: &Context, workload: &str) {
        let mb = |b: u64| b as f64 / 1048576.0;
        let fmt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
        let io_w = self.io_session.map(|io| io.write_bytes);
        let write_amp_io = io_w.map(|w| Self::ratio(w, self.user_bytes));
        let space_amp = Self::ratio(self.disk_bytes, self.live_bytes);
        let read_per_lookup = self.io_reads.map(|io| Self::ratio(io.read_bytes, self.lookups));
        let rchar_per_lookup = self.io_reads.map(|io| Self::ratio(io.rchar, self.lookups));
        println!(
            "[{}] write_amp: {} by /proc/self/io ({:.1} MB written / {:.1} MB user), {} by the engine's counters",
            ctx.engine,
            fmt(write_amp_io),
            mb(io_w.unwrap_or(0)),
            mb(self.user_bytes),
            fmt(self.engine.write_amp())
        );
        println!(
            "[{}] space_amp: {space_amp:.2} ({:.1} MB on disk / {:.1} MB live)",
            ctx.engine,
            mb(self.disk_bytes),
            mb(self.live_bytes)
        );
        println!(
            "[{}] read_amp:  {} device bytes per lookup, {} bytes read through read(2) per lookup ({} lookups)",
            ctx.engine,
            fmt(read_per_lookup),
            fmt(rchar_per_lookup),
            self.lookups
        );
        if ctx.json {
            let opt = |v: Option<f64>| v.filter(|v| v.is_finite()).map_or("null".to_string(), |v| format!("{v:.4}"));
            let mut j = ctx.object();
            j.str("workload", workload)
                .str("phase", "amplification")
                .int("user_bytes_written", self.user_bytes)
                .raw("io_write_bytes", &io_w.map_or("null".into(), |v| v.to_string()))
                .raw("write_amp_io", &opt(write_amp_io))
                .raw("write_amp_engine", &opt(self.engine.write_amp()))
                .int("disk_bytes", self.disk_bytes)
                .int("live_bytes", self.live_bytes)
                .num("space_amp", space_amp)
                .int("lookups", self.lookups)
                .raw("read_bytes_per_lookup", &opt(read_per_lookup))
                .raw("rchar_per_lookup", &opt(rchar_per_lookup))
                .raw("engine_stats", self.engine.detail_json.as_deref().unwrap_or("null"));
            println!("{}", j.finish());
        }
    }
}
