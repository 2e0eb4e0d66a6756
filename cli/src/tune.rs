//! `wisckey tune`: the Wacky continuum's cost model (`wisckey::continuum`) searched for the
//! merge policy that makes a workload cheapest (§5 of the paper), printed with its predicted
//! costs next to the named designs'. The workload is given as shares of operations or read
//! from a database's recorded counts (`--db`: one answer per keyspace, each for its own mix
//! and size).

use std::path::PathBuf;

use clap::Args;
use wisckey::continuum::{self, tune::presets, Candidate, Knobs, TuningInput, Workload};
use wisckey::{MergePolicy, WorkloadCounts};

use crate::bench::CliResult;

#[derive(Debug, Clone, Args)]
pub struct TuneArgs {
    /// Share of point lookups of keys that exist (any scale: shares are normalised).
    #[arg(long, default_value_t = 0.0)]
    reads: f64,
    /// Share of point lookups of keys that do not exist.
    #[arg(long = "zero_reads", default_value_t = 0.0)]
    zero_reads: f64,
    /// Share of writes.
    #[arg(long, default_value_t = 0.0)]
    writes: f64,
    /// Share of short range scans.
    #[arg(long, default_value_t = 0.0)]
    scans: f64,
    /// Take the mix from this (closed) database's recorded counts and its size from its tables,
    /// and answer for each keyspace (or only `--keyspace`).
    #[arg(long)]
    db: Option<PathBuf>,
    /// With --db: answer for this keyspace only.
    #[arg(long)]
    keyspace: Option<String>,
    /// Entries the tree will hold (with --key_size and --value_size; ignored with --data_bytes).
    #[arg(long, default_value_t = 10_000_000)]
    num: u64,
    #[arg(long = "key_size", default_value_t = 16)]
    key_size: u64,
    #[arg(long = "value_size", default_value_t = 100)]
    value_size: u64,
    /// Values at least this large live in the value log (the tree holds a pointer).
    #[arg(long = "min_separated_value_bytes", default_value_t = 1024)]
    min_separated_value_bytes: u64,
    /// Bytes of tables the tree will hold (default: from --num and the entry size).
    #[arg(long = "data_bytes")]
    data_bytes: Option<u64>,
    /// F: the write buffer in bytes.
    #[arg(long = "write_buffer_size", default_value_t = 4 << 20)]
    write_buffer_size: u64,
    /// Bytes a flush actually writes (for `--predict`'s averages over a load; default F).
    #[arg(long = "flush_bytes")]
    flush_bytes: Option<u64>,
    /// M: filter bits per entry on average.
    #[arg(long = "bloom_bits", default_value_t = 10.0)]
    bloom_bits: f64,
    #[arg(long = "block_size", default_value_t = 4096)]
    block_size: u64,
    /// ϕ: what a compaction's write of one block costs in lookup I/Os (1: the paper's
    /// storage-bound tree; the default is measured for a tree in memory, see
    /// `wisckey::continuum::cost::DEFAULT_WRITE_COST_RATIO`).
    #[arg(long = "write_cost_ratio", default_value_t = continuum::cost::DEFAULT_WRITE_COST_RATIO)]
    write_cost_ratio: f64,
    #[arg(long = "num_levels", default_value_t = 7)]
    num_levels: usize,
    /// Answer with the cheapest preset when it is predicted within this fraction of the
    /// optimum's cost (the model's resolution; 0 answers with the optimum).
    #[arg(long = "preset_margin", default_value_t = continuum::tune::DEFAULT_PRESET_MARGIN)]
    preset_margin: f64,
    /// Also predict these merge policies (repeatable; `--merge_policy` names).
    #[arg(long = "predict", value_parser = parse_knobs)]
    predict: Vec<Knobs>,
    /// One JSON object per configuration instead of the table.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = crate::bench::parse_bool)]
    json: bool,
}

/// A merge policy name as the model's knobs (LevelDB's leveling as Wacky leveling at T = 10).
fn parse_knobs(s: &str) -> Result<Knobs, String> {
    match s.parse::<MergePolicy>()? {
        MergePolicy::Wacky(k) => Ok(k),
        _ => Ok(Knobs::leveling(10.0)),
    }
}

impl TuneArgs {
    /// Bytes one entry takes in a table (key, 8-byte tag, inline value or value pointer).
    fn entry_bytes(&self) -> f64 {
        let value = if self.value_size >= self.min_separated_value_bytes { 20 } else { self.value_size };
        (self.key_size + 8 + value + 4) as f64
    }

    /// The workloads to tune for: each keyspace's recorded mix and size with `--db` (named),
    /// else the one the flags give (unnamed).
    fn workloads(&self) -> CliResult<Vec<(Option<String>, Workload, f64)>> {
        match &self.db {
            Some(dir) => db_workloads(dir, self.keyspace.as_deref()),
            None => {
                let w = Workload {
                    reads: self.reads,
                    zero_result_reads: self.zero_reads,
                    writes: self.writes,
                    scans: self.scans,
                };
                Ok(vec![(None, w, self.data_bytes.map_or(self.num as f64 * self.entry_bytes(), |b| b as f64))])
            }
        }
    }

    fn input(&self, workload: Workload, data_bytes: f64) -> CliResult<TuningInput> {
        if workload.reads + workload.zero_result_reads + workload.writes + workload.scans <= 0.0 {
            return Err("give the workload's shares (--reads, --zero_reads, --writes, --scans) or --db".into());
        }
        if !(self.preset_margin.is_finite() && self.preset_margin >= 0.0) {
            return Err(format!("--preset_margin {}: give a fraction of at least 0", self.preset_margin).into());
        }
        if !(self.write_cost_ratio.is_finite() && self.write_cost_ratio > 0.0) {
            return Err(format!("--write_cost_ratio {}: give a positive number", self.write_cost_ratio).into());
        }
        Ok(TuningInput {
            workload,
            data_bytes,
            buffer_bytes: self.write_buffer_size as f64,
            filter_bits_per_entry: self.bloom_bits,
            entries_per_block: (self.block_size as f64 / self.entry_bytes()).max(1.0),
            write_cost_ratio: self.write_cost_ratio,
            max_levels: self.num_levels,
            preset_margin: self.preset_margin,
        })
    }
}

/// The mix each keyspace of a closed database recorded and the bytes of its tables (opening
/// it: its keyspaces and their shapes are the manifest's).
fn db_workloads(dir: &std::path::Path, only: Option<&str>) -> CliResult<Vec<(Option<String>, Workload, f64)>> {
    let counts = WorkloadCounts::read_keyspaces(dir)
        .ok_or_else(|| format!("{}: no WORKLOAD file (open and close it once)", dir.display()))?;
    let db = wisckey::Db::open(dir, wisckey::Options::default().create_if_missing(false))?;
    let mut out = Vec::new();
    for name in db.keyspaces().into_iter().filter(|n| only.is_none_or(|o| o == n)) {
        let c = counts.get(&name).copied().unwrap_or_default();
        let bytes: u64 = db.keyspace(&name)?.stats().level_bytes.iter().sum();
        let w = Workload {
            reads: c.reads_found as f64,
            zero_result_reads: c.reads_missing as f64,
            writes: c.writes as f64,
            scans: c.scans as f64,
        };
        out.push((Some(name), w, bytes as f64));
    }
    db.close()?;
    match (out.is_empty(), only) {
        (true, Some(name)) => Err(format!("{}: no keyspace named {name:?}", dir.display()).into()),
        _ => Ok(out),
    }
}

pub fn run(args: TuneArgs) -> CliResult {
    let workloads = args.workloads()?;
    let many = workloads.len() > 1;
    for (name, workload, data_bytes) in workloads {
        let input = match args.input(workload, data_bytes) {
            // A keyspace that served nothing yet has no mix to tune for.
            Err(e) if many => {
                println!("keyspace {}: {e}\n", name.as_deref().unwrap_or("?"));
                continue;
            }
            r => r?,
        };
        if let Some(name) = name.as_deref().filter(|_| many && !args.json) {
            println!("keyspace {name}:");
        }
        answer(&args, &input, name.as_deref());
    }
    Ok(())
}

/// Print the tuning of `input` (for keyspace `keyspace`, when one is named).
fn answer(args: &TuneArgs, input: &TuningInput, keyspace: Option<&str>) {
    let input = *input;
    let tuning = continuum::tune(&input);
    let flush = args.flush_bytes.unwrap_or(args.write_buffer_size) as f64;
    let predicted: Vec<Candidate> =
        args.predict.iter().map(|k| continuum::tune::candidate(k.to_string(), *k, &input)).collect();
    // By knobs, not by candidate: a projection at a preset's knobs is the same design under
    // another name (bush X=2 C=1 at T = 2 is the bush preset), and no line should explain it.
    let optimum = (tuning.optimum.knobs != tuning.best.knobs).then_some(("optimum", &tuning.optimum));
    let rows = std::iter::once(("chosen", &tuning.best))
        .chain(optimum)
        .chain(tuning.presets.iter().map(|c| ("preset", c)))
        .chain(predicted.iter().map(|c| ("predict", c)));
    if args.json {
        for (role, c) in rows {
            let load =
                continuum::cost::load_average(c.knobs, input.data_bytes, input.buffer_bytes, flush, input.max_levels);
            println!("{}", json_row(role, c, &load, keyspace));
        }
        return;
    }
    print_header(&input);
    println!("chosen: {} ({}), --merge_policy={}", tuning.best.knobs, tuning.best.name, tuning.best.knobs);
    if let Some((_, o)) = optimum {
        println!(
            "  a preset: the search's optimum {} ({}) is predicted only {:.1} % cheaper, within --preset_margin {} %, too close for the model to rank",
            o.knobs,
            o.name,
            (tuning.best.cost / o.cost - 1.0) * 100.0,
            input.preset_margin * 100.0
        );
    }
    println!();
    println!(
        "{:<22} {:<34} {:>2} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "design", "knobs", "L", "runs", "write_amp", "zero_ios", "read_ios", "filter_MB", "cost"
    );
    for (role, c) in rows {
        let mark = match role {
            "chosen" => "* ",
            "optimum" => "o ",
            _ => "  ",
        };
        println!(
            "{mark}{:<20} {:<34} {:>2} {:>6.0} {:>9.2} {:>9.4} {:>9.4} {:>9.1} {:>9.4}",
            c.name,
            c.knobs.to_string(),
            c.shape.levels.len(),
            c.costs.runs,
            c.costs.write_amp,
            c.costs.zero_result_ios,
            c.costs.existing_ios,
            c.costs.filter_bits_per_entry * input.data_bytes / args.entry_bytes() / 8.0 / 1e6,
            c.cost
        );
    }
    println!();
    println!("write_amp: times each entry is written, its flush included, counted for the policy as built (the model's stand-in for the paper's Eq 14 x B, which --json prints as paper_write_amp); zero_ios / read_ios: I/Os of a lookup of an absent / existing key (Eq 15); runs: runs a short scan seeks (V); cost: Eq 16's average lookup I/Os per operation, with this write_amp for W and a block written counting --write_cost_ratio.");
    println!();
}

fn print_header(input: &TuningInput) {
    let w = &input.workload;
    let total = (w.reads + w.zero_result_reads + w.writes + w.scans).max(f64::MIN_POSITIVE);
    println!(
        "workload: reads {:.2}, zero-result reads {:.2}, writes {:.2}, short scans {:.2}",
        w.reads / total,
        w.zero_result_reads / total,
        w.writes / total,
        w.scans / total
    );
    println!(
        "data: {:.1} MB of tables (N/F = {:.0}), {} bits of filter per entry, {:.0} entries per block, a block written costs {} lookup I/Os",
        input.data_bytes / 1e6,
        input.data_bytes / input.buffer_bytes,
        input.filter_bits_per_entry,
        input.entries_per_block,
        input.write_cost_ratio
    );
    println!("presets: {}", presets().iter().map(|(n, k)| format!("{n}={k}")).collect::<Vec<_>>().join(" "));
    println!();
}

fn json_row(role: &str, c: &Candidate, load: &continuum::cost::LoadAverage, keyspace: Option<&str>) -> String {
    let keyspace = keyspace.map(|k| format!("\"keyspace\":\"{}\",", k.replace('"', "\\\""))).unwrap_or_default();
    format!(
        "{{{keyspace}\"role\":\"{role}\",\"name\":\"{}\",\"knobs\":\"{}\",\"levels\":{},\"runs\":{},\"write_amp\":{},\"paper_write_amp\":{},\"zero_result_ios\":{},\"existing_ios\":{},\"cost\":{},\"load_write_amp\":{},\"load_expected_runs\":{}}}",
        c.name,
        c.knobs,
        c.shape.levels.len(),
        c.costs.runs,
        c.costs.write_amp,
        c.costs.paper_write_amp,
        c.costs.zero_result_ios,
        c.costs.existing_ios,
        c.cost,
        load.write_amp,
        load.expected_runs
    )
}
