//! Per-thread benchmark counters and the output: db_bench's report line, an optional JSON
//! line, and the engine's `DbStats` rendered for the `stats` benchmark and subcommand.

use std::fmt::Write;
use std::time::Instant;

use indicatif::ProgressBar;
use wisckey::DbStats;

use super::histogram::Histogram;

/// Ops between progress-bar updates (keeps the bar off the hot path).
const PROGRESS_STEP: u64 = 1000;

/// Counters of one benchmark thread (db_bench's `Stats`), merged across threads at the end.
pub struct Stats {
    start: Instant,
    finish: Instant,
    /// Sum of the threads' elapsed seconds (micros/op divides this by the ops done).
    seconds: f64,
    done: u64,
    bytes: u64,
    last_op_finish: Instant,
    hist: Option<Histogram>,
    message: String,
    progress: Option<ProgressBar>,
}

impl Stats {
    pub fn new(histogram: bool, progress: Option<ProgressBar>) -> Self {
        let now = Instant::now();
        Stats {
            start: now,
            finish: now,
            seconds: 0.0,
            done: 0,
            bytes: 0,
            last_op_finish: now,
            hist: histogram.then(Histogram::default),
            message: String::new(),
            progress,
        }
    }

    /// Reset the clock (threads call this once all of them are ready).
    pub fn start(&mut self) {
        self.start = Instant::now();
        self.finish = self.start;
        self.last_op_finish = self.start;
    }

    pub fn stop(&mut self) {
        self.finish = Instant::now();
        self.seconds = (self.finish - self.start).as_secs_f64();
        if let Some(pb) = &self.progress {
            pb.inc(self.done % PROGRESS_STEP);
        }
    }

    #[inline]
    pub fn finished_single_op(&mut self) {
        if let Some(hist) = &mut self.hist {
            let now = Instant::now();
            hist.add((now - self.last_op_finish).as_secs_f64() * 1e6);
            self.last_op_finish = now;
        }
        self.done += 1;
        if self.done.is_multiple_of(PROGRESS_STEP) {
            if let Some(pb) = &self.progress {
                pb.inc(PROGRESS_STEP);
            }
        }
    }

    pub fn add_bytes(&mut self, n: u64) {
        self.bytes += n;
    }

    pub fn add_message(&mut self, msg: &str) {
        append_with_space(&mut self.message, msg);
    }

    pub fn merge(&mut self, other: &Stats) {
        if let (Some(a), Some(b)) = (&mut self.hist, &other.hist) {
            a.merge(b);
        }
        self.done += other.done;
        self.bytes += other.bytes;
        self.seconds += other.seconds;
        self.start = self.start.min(other.start);
        self.finish = self.finish.max(other.finish);
        // Like db_bench, keep the message of one thread only.
        if self.message.is_empty() {
            self.message.clone_from(&other.message);
        }
    }

    /// The figures of a finished (merged) benchmark.
    pub fn summary(&self, name: &str, threads: usize) -> Summary {
        // Pretend one op was done for benchmarks that count none (compact).
        let done = self.done.max(1);
        let elapsed = (self.finish - self.start).as_secs_f64();
        let mb_per_s = (self.bytes > 0).then(|| self.bytes as f64 / 1048576.0 / elapsed.max(1e-9));
        Summary {
            name: name.to_string(),
            threads,
            ops: self.done,
            micros_per_op: self.seconds * 1e6 / done as f64,
            elapsed_secs: elapsed,
            mb_per_s,
            message: self.message.clone(),
            hist: self.hist.clone(),
            waits: None,
        }
    }
}

/// Time user writes waited for the engine, in microseconds: for value-log GC (its pacing and
/// stall) and for flushes and compactions (the level-0 and memtable stalls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    pub gc_micros: u64,
    pub stall_micros: u64,
}

impl Waits {
    pub fn of(stats: &DbStats) -> Waits {
        Waits { gc_micros: stats.gc_stall_micros, stall_micros: stats.stall_micros }
    }

    /// The waits since `earlier`.
    pub fn since(&self, earlier: &Waits) -> Waits {
        Waits {
            gc_micros: self.gc_micros.saturating_sub(earlier.gc_micros),
            stall_micros: self.stall_micros.saturating_sub(earlier.stall_micros),
        }
    }
}

fn append_with_space(s: &mut String, msg: &str) {
    if msg.is_empty() {
        return;
    }
    if !s.is_empty() {
        s.push(' ');
    }
    s.push_str(msg);
}

/// The result of one benchmark, ready to print.
pub struct Summary {
    pub name: String,
    pub threads: usize,
    pub ops: u64,
    pub micros_per_op: f64,
    pub elapsed_secs: f64,
    pub mb_per_s: Option<f64>,
    pub message: String,
    pub hist: Option<Histogram>,
    /// Writers' waits during the benchmark (write benchmarks only).
    pub waits: Option<Waits>,
}

impl Summary {
    /// `fillseq      :       2.345 micros/op;   47.2 MB/s (extra)`, exactly db_bench's layout,
    /// with the latency tail after it when latencies were kept (`(p99 8.1 µs, p99.9 95.0 µs)`)
    /// and, for writes, the writers' waits (`GC waits 0.12 s, stalls 0.00 s`).
    pub fn line(&self) -> String {
        let mut extra = self.mb_per_s.map_or(String::new(), |r| format!("{r:6.1} MB/s"));
        append_with_space(&mut extra, &self.message);
        if let Some(h) = self.hist.as_ref().filter(|h| h.count() > 0) {
            let tail = format!("(p99 {:.1} µs, p99.9 {:.1} µs)", h.percentile(99.0), h.percentile(99.9));
            append_with_space(&mut extra, &tail);
        }
        if let Some(w) = &self.waits {
            let waits =
                format!("GC waits {:.2} s, stalls {:.2} s", w.gc_micros as f64 / 1e6, w.stall_micros as f64 / 1e6);
            append_with_space(&mut extra, &waits);
        }
        let sep = if extra.is_empty() { "" } else { " " };
        format!("{:<12} : {:11.3} micros/op;{sep}{extra}", self.name, self.micros_per_op)
    }

    /// One JSON object on one line, for scripts.
    pub fn json(&self) -> String {
        let mut j = JsonObject::default();
        j.str("benchmark", &self.name)
            .num("micros_per_op", self.micros_per_op)
            .int("ops", self.ops)
            .int("threads", self.threads as u64)
            .num("elapsed_secs", self.elapsed_secs);
        match self.mb_per_s {
            Some(r) => j.num("mb_per_s", r),
            None => j.raw("mb_per_s", "null"),
        };
        j.str("message", &self.message);
        if let Some(h) = &self.hist {
            j.num("p50_micros", h.percentile(50.0))
                .num("p99_micros", h.percentile(99.0))
                .num("p999_micros", h.percentile(99.9))
                .num("max_micros", h.max());
        }
        if let Some(w) = &self.waits {
            j.num("gc_wait_secs", w.gc_micros as f64 / 1e6).num("stall_secs", w.stall_micros as f64 / 1e6);
        }
        j.finish()
    }
}

/// A flat JSON object built field by field (the CLI needs no serde for this).
#[derive(Default)]
pub struct JsonObject {
    body: String,
}

impl JsonObject {
    pub fn raw(&mut self, key: &str, value: &str) -> &mut Self {
        if !self.body.is_empty() {
            self.body.push(',');
        }
        let _ = write!(self.body, "{}:{value}", json_string(key));
        self
    }

    pub fn str(&mut self, key: &str, value: &str) -> &mut Self {
        self.raw(key, &json_string(value))
    }

    pub fn int(&mut self, key: &str, value: u64) -> &mut Self {
        self.raw(key, &value.to_string())
    }

    /// Non-finite numbers become `null` (JSON has no NaN).
    pub fn num(&mut self, key: &str, value: f64) -> &mut Self {
        if value.is_finite() {
            self.raw(key, &format!("{value:.4}"))
        } else {
            self.raw(key, "null")
        }
    }

    pub fn finish(&self) -> String {
        format!("{{{}}}", self.body)
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Bytes in binary units (db_bench's "MB" is MiB too).
fn mb(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..=0x3ff => format!("{bytes} B"),
        0x400..=0xf_ffff => format!("{:.1} KB", b / 1024.0),
        0x10_0000..=0x3fff_ffff => format!("{:.1} MB", b / 1048576.0),
        _ => format!("{:.2} GB", b / 1073741824.0),
    }
}

/// `L0=a L1=b ...` up to the deepest non-empty level.
fn per_level<T: Copy>(values: &[T], show: impl Fn(T) -> String, nonzero: impl Fn(T) -> bool) -> String {
    let deepest = values.iter().rposition(|&v| nonzero(v)).unwrap_or(0);
    let shown: Vec<String> =
        values.iter().take(deepest + 1).enumerate().map(|(i, &v)| format!("L{i}={}", show(v))).collect();
    if shown.is_empty() {
        "-".to_string()
    } else {
        shown.join(" ")
    }
}

/// The engine's counters, one topic a line; `live_bytes` (user bytes of the keys present)
/// gives the space amplification when known.
pub fn render_db_stats(s: &DbStats, live_bytes: Option<u64>) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "merge_policy:     {}", s.merge_policy);
    if !s.auto_tune.is_empty() {
        let _ = writeln!(r, "auto_tune:        {}", s.auto_tune);
    }
    for (i, m) in s.auto_tune_moves.iter().enumerate() {
        let _ = writeln!(r, "auto_tune_move {}: {m}", i + 1);
    }
    let _ = writeln!(r, "write_amp:        {:.2}", s.write_amp());
    match live_bytes {
        Some(live) => {
            let amp = s.disk_bytes as f64 / live.max(1) as f64;
            let _ = writeln!(r, "space_amp:        {amp:.2} ({} on disk / {} live)", mb(s.disk_bytes), mb(live));
        }
        None => {
            let _ = writeln!(r, "space_amp:        n/a ({} on disk)", mb(s.disk_bytes));
        }
    }
    let _ = writeln!(r, "level_files:      {}", per_level(&s.level_files, |v| v.to_string(), |v| v > 0));
    let _ = writeln!(r, "level_runs:       {}", per_level(&s.level_runs, |v| v.to_string(), |v| v > 0));
    let _ = writeln!(r, "level_bytes:      {}", per_level(&s.level_bytes, mb, |v| v > 0));
    let bits: Vec<f64> = s
        .level_filter_bytes
        .iter()
        .zip(&s.level_entries)
        .map(|(&b, &n)| if n == 0 { 0.0 } else { b as f64 * 8.0 / n as f64 })
        .collect();
    let all_bits =
        s.level_filter_bytes.iter().sum::<u64>() as f64 * 8.0 / s.level_entries.iter().sum::<u64>().max(1) as f64;
    let _ = writeln!(
        r,
        "filter_bits/key:  {} (all levels {all_bits:.2})",
        per_level(&bits, |v| format!("{v:.2}"), |v| v > 0.0)
    );
    let _ = writeln!(r, "compacted_into:   {}", per_level(&s.level_compaction_bytes_written, mb, |v| v > 0));
    let _ = writeln!(r, "compaction_read:  {}", per_level(&s.level_compaction_bytes_read, mb, |v| v > 0));
    let _ = writeln!(r, "moved_into:       {}", per_level(&s.level_bytes_moved, mb, |v| v > 0));
    let per_table: Vec<f64> =
        s.level_segments.iter().zip(&s.level_files).map(|(&g, &f)| g as f64 / f.max(1) as f64).collect();
    let _ = writeln!(
        r,
        "segments/table:   {} ({} appended, {} tables split, {} collapsed by seeks)",
        per_level(&per_table, |v| format!("{v:.2}"), |v| v > 0.0),
        s.num_segments_appended,
        s.num_table_splits,
        s.num_table_collapses
    );
    let _ = writeln!(r, "user_written:     {}", mb(s.user_bytes_written));
    let _ = writeln!(r, "log_written:      {}", mb(s.log_bytes_written));
    let _ = writeln!(r, "flush_written:    {} in {} flushes", mb(s.flush_bytes_written), s.num_flushes);
    let _ = writeln!(
        r,
        "compaction:       {} read, {} written in {} compactions",
        mb(s.compaction_bytes_read),
        mb(s.compaction_bytes_written),
        s.num_compactions
    );
    let _ = writeln!(r, "stall:            {:.3} s", s.stall_micros as f64 / 1e6);
    let _ = writeln!(r, "gc_stall:         {:.3} s", s.gc_stall_micros as f64 / 1e6);
    let g = &s.gc_phase_micros;
    let secs = |us: u64| us as f64 / 1e6;
    let _ = writeln!(
        r,
        "gc_time:          {:.1} s waiting for chunks, {:.1} s appending, {:.1} s logging pointers, {:.1} s freeing, {:.1} s pausing, {:.1} s refreshing",
        secs(g.waiting_for_chunks),
        secs(g.appending),
        secs(g.logging_pointers),
        secs(g.freeing),
        secs(g.pausing),
        secs(g.refreshing)
    );
    let _ = writeln!(r, "vlog_space_amp:   {:.2} (GC's estimate)", s.vlog_space_amp_estimate);
    let _ = writeln!(r, "memtable:         {}", mb(s.memtable_bytes));
    let m = &s.memory;
    let _ = writeln!(
        r,
        "memory:           {} in all: memtables {}, block cache {} of {}, value cache {} of {}, table filters and indexes {}",
        mb(m.total()),
        mb(m.memtables),
        mb(m.block_cache),
        mb(m.block_cache_capacity),
        mb(m.value_cache),
        mb(m.value_cache_capacity),
        mb(m.table_metadata)
    );
    let _ = writeln!(
        r,
        "vlog:             {} on disk, {} values, {} garbage",
        mb(s.vlog_disk_bytes),
        mb(s.vlog_value_bytes),
        mb(s.vlog_garbage_bytes)
    );
    let _ = writeln!(
        r,
        "gc:               {} files, {} read, {} rewritten, {} freed",
        s.gc_runs,
        mb(s.gc_bytes_read),
        mb(s.gc_bytes_rewritten),
        mb(s.gc_bytes_freed)
    );
    let _ = writeln!(
        r,
        "filters:          {} false positives in {} point lookups ({:.4} per lookup), {} tables let in, {:.2} probed per lookup",
        s.filter_false_positives,
        s.point_lookups,
        s.filter_false_positives as f64 / s.point_lookups.max(1) as f64,
        s.filter_passes,
        s.filter_probes as f64 / s.point_lookups.max(1) as f64
    );
    let lookups = s.value_cache_hits + s.value_cache_misses;
    let _ = writeln!(
        r,
        "value cache:      {} values, {} held; {} hits / {} lookups ({:.1}%)",
        s.value_cache_entries,
        mb(s.value_cache_bytes),
        s.value_cache_hits,
        lookups,
        100.0 * s.value_cache_hits as f64 / lookups.max(1) as f64
    );
    r
}

/// The same counters as one JSON line.
pub fn db_stats_json(s: &DbStats, live_bytes: Option<u64>) -> String {
    let mut j = JsonObject::default();
    j.str("benchmark", "stats")
        .str("merge_policy", &s.merge_policy)
        .str("auto_tune", &s.auto_tune)
        .raw(
            "auto_tune_moves",
            &format!("[{}]", s.auto_tune_moves.iter().map(|m| json_string(m)).collect::<Vec<_>>().join(",")),
        )
        .num("write_amp", s.write_amp());
    match live_bytes {
        Some(live) => j.num("space_amp", s.disk_bytes as f64 / live.max(1) as f64).int("live_bytes", live),
        None => j.raw("space_amp", "null"),
    };
    let list = |v: Vec<String>| format!("[{}]", v.join(","));
    j.int("disk_bytes", s.disk_bytes)
        .raw("level_files", &list(s.level_files.iter().map(|v| v.to_string()).collect()))
        .raw("level_runs", &list(s.level_runs.iter().map(|v| v.to_string()).collect()))
        .raw("level_bytes", &list(s.level_bytes.iter().map(|v| v.to_string()).collect()))
        .raw(
            "level_compaction_bytes_written",
            &list(s.level_compaction_bytes_written.iter().map(|v| v.to_string()).collect()),
        )
        .raw(
            "level_compaction_bytes_read",
            &list(s.level_compaction_bytes_read.iter().map(|v| v.to_string()).collect()),
        )
        .raw("level_segments", &list(s.level_segments.iter().map(|v| v.to_string()).collect()))
        .raw("level_entries", &list(s.level_entries.iter().map(|v| v.to_string()).collect()))
        .raw("level_filter_bytes", &list(s.level_filter_bytes.iter().map(|v| v.to_string()).collect()))
        .int("num_segments_appended", s.num_segments_appended)
        .int("num_table_splits", s.num_table_splits)
        .int("num_table_collapses", s.num_table_collapses)
        .int("user_bytes_written", s.user_bytes_written)
        .int("log_bytes_written", s.log_bytes_written)
        .int("flush_bytes_written", s.flush_bytes_written)
        .int("compaction_bytes_read", s.compaction_bytes_read)
        .int("compaction_bytes_written", s.compaction_bytes_written)
        .int("num_flushes", s.num_flushes)
        .int("num_compactions", s.num_compactions)
        .int("stall_micros", s.stall_micros)
        .int("gc_stall_micros", s.gc_stall_micros)
        .int("gc_waiting_for_chunks_micros", s.gc_phase_micros.waiting_for_chunks)
        .int("gc_appending_micros", s.gc_phase_micros.appending)
        .int("gc_logging_pointers_micros", s.gc_phase_micros.logging_pointers)
        .int("gc_freeing_micros", s.gc_phase_micros.freeing)
        .int("gc_pausing_micros", s.gc_phase_micros.pausing)
        .int("gc_refreshing_micros", s.gc_phase_micros.refreshing)
        .int("memtable_bytes", s.memtable_bytes)
        .int("memory_bytes", s.memory.total())
        .int("memory_table_metadata_bytes", s.memory.table_metadata)
        .int("memtable_kept_bytes", s.memtable_kept_bytes)
        .int("vlog_disk_bytes", s.vlog_disk_bytes)
        .int("vlog_value_bytes", s.vlog_value_bytes)
        .int("vlog_garbage_bytes", s.vlog_garbage_bytes)
        .int("gc_runs", s.gc_runs)
        .int("gc_bytes_read", s.gc_bytes_read)
        .int("gc_bytes_rewritten", s.gc_bytes_rewritten)
        .int("point_lookups", s.point_lookups)
        .int("filter_passes", s.filter_passes)
        .int("filter_probes", s.filter_probes)
        .int("filter_false_positives", s.filter_false_positives)
        .int("gc_bytes_freed", s.gc_bytes_freed)
        .int("cold_bytes_written", s.cold_bytes_written)
        .int("value_cache_entries", s.value_cache_entries)
        .int("value_cache_bytes", s.value_cache_bytes)
        .int("value_cache_hits", s.value_cache_hits)
        .int("value_cache_misses", s.value_cache_misses);
    j.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(mb_per_s: Option<f64>, message: &str) -> Summary {
        Summary {
            name: "fillseq".into(),
            threads: 1,
            ops: 1000,
            micros_per_op: 2.3454,
            elapsed_secs: 0.002,
            mb_per_s,
            message: message.into(),
            hist: None,
            waits: None,
        }
    }

    #[test]
    fn report_line_has_db_bench_layout() {
        assert_eq!(summary(Some(47.2), "").line(), "fillseq      :       2.345 micros/op;   47.2 MB/s");
        assert_eq!(
            summary(None, "(999 of 1000 found)").line(),
            "fillseq      :       2.345 micros/op; (999 of 1000 found)"
        );
        assert_eq!(summary(None, "").line(), "fillseq      :       2.345 micros/op;");
    }

    #[test]
    fn json_line_escapes_and_nulls() {
        let j = summary(None, "say \"hi\"\n").json();
        assert!(j.starts_with("{\"benchmark\":\"fillseq\",\"micros_per_op\":2.3454,"), "{j}");
        assert!(j.contains("\"mb_per_s\":null"));
        assert!(j.contains("\"message\":\"say \\\"hi\\\"\\u000a\""));
    }

    #[test]
    fn merged_stats_sum_ops_and_keep_one_message() {
        let mut a = Stats::new(false, None);
        let mut b = Stats::new(false, None);
        a.finished_single_op();
        b.finished_single_op();
        b.add_bytes(10);
        b.add_message("(x)");
        a.stop();
        b.stop();
        a.merge(&b);
        let s = a.summary("t", 2);
        assert_eq!(s.ops, 2);
        assert_eq!(s.message, "(x)");
        assert!(s.mb_per_s.is_some());
    }

    #[test]
    fn db_stats_show_levels_up_to_the_deepest_non_empty_one() {
        let mut s = DbStats::default();
        s.level_files = vec![2, 0, 5, 0, 0];
        s.level_bytes = vec![0, 0];
        s.user_bytes_written = 100;
        s.flush_bytes_written = 250;
        s.disk_bytes = 300;
        let r = render_db_stats(&s, Some(200));
        assert!(r.contains("write_amp:        2.50\n"), "{r}");
        assert!(r.contains("space_amp:        1.50 "), "{r}");
        assert!(r.contains("level_files:      L0=2 L1=0 L2=5\n"), "{r}");
        assert!(r.contains("level_bytes:      L0=0 B\n"), "{r}");
        assert!(r.contains("level_runs:       -\n"), "{r}");
        assert_eq!((mb(2048), mb(3 << 20), mb(5 << 30)), ("2.0 KB".into(), "3.0 MB".into(), "5.00 GB".into()));
        assert!(db_stats_json(&s, None).contains("\"space_amp\":null"));
    }
}
