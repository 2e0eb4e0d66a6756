//! `wisckey dump shape --db DIR`: the tree the manifest records — runs per level with their
//! tables and sizes — beside what the recorded merge policy compacts towards and the Wacky
//! cost model's shape and predicted costs for a tree of this size.

use std::path::PathBuf;

use clap::Args;
use wisckey::inspect::{LevelTarget, Tree, TreeLevel, TreeModel};
use wisckey::Options;

use super::{bytes_text, key_text};
use crate::bench::{CliResult, JsonObject};

#[derive(Args)]
pub struct ShapeArgs {
    /// Database directory.
    #[arg(long)]
    db: PathBuf,
    /// The write buffer the database runs with (F, which sets the model's level count; not
    /// recorded in the manifest).
    #[arg(long, default_value_t = Options::default().write_buffer_bytes)]
    write_buffer_bytes: usize,
    /// Leveling's level-1 byte budget (default: the one the manifest records).
    #[arg(long)]
    max_bytes_for_level_base: Option<u64>,
    /// Level-0 runs at which leveling merges level 0.
    #[arg(long, default_value_t = Options::default().l0_compaction_trigger)]
    l0_compaction_trigger: usize,
    /// Filter bits per key on average, for the model's lookup costs (default: the recorded).
    #[arg(long)]
    bloom_bits: Option<f64>,
    /// Do not list every table of every run.
    #[arg(long)]
    no_tables: bool,
    /// One JSON object per level, then the model's.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ShapeArgs) -> CliResult {
    let tree = Tree::load(&a.db)?;
    // Settings given here stand in for the recorded ones; the others are the database's own.
    let mut options =
        Options::default().write_buffer_bytes(a.write_buffer_bytes).l0_compaction_trigger(a.l0_compaction_trigger);
    if let Some(b) = a.max_bytes_for_level_base {
        options = options.max_bytes_for_level_base(b);
    }
    if let Some(b) = a.bloom_bits {
        options = options.bloom_bits_per_key(vec![b]);
    }
    let model = tree.model(&options);
    if a.json {
        print_json(&tree, model.as_ref());
        return Ok(());
    }
    print_header(&a, &tree);
    print_levels(&tree, model.as_ref(), !a.no_tables);
    match &model {
        Some(m) => print_model(m, &a),
        None => outln!("model: none (this build does not know the policy {:?})", tree.policy),
    }
    Ok(())
}

fn print_header(a: &ShapeArgs, t: &Tree) {
    let tables: usize = t.levels.iter().map(TreeLevel::tables).sum();
    outln!("database {}: manifest {}", a.db.display(), t.manifest.display());
    outln!("  policy {}, {} in {tables} tables", t.policy, bytes_text(t.bytes()));
    outln!(
        "  last sequence {}, next file {}, log head {}:{}, vlog tail {}:{}, log durable {}:{}",
        t.last_sequence,
        t.next_file_number,
        t.log_head.file,
        t.log_head.offset,
        t.vlog_tail.file,
        t.vlog_tail.offset,
        t.log_durable.file,
        t.log_durable.offset
    );
    if !t.recorded_options.is_empty() {
        outln!("  recorded options: {}", t.recorded_options.lines().collect::<Vec<_>>().join(" "));
    }
    for v in &t.vlog_files {
        outln!("  value file {:06}: {} B of separated values, {} B garbage", v.number, v.total_bytes, v.garbage_bytes);
    }
}

/// Bytes in the largest unit that keeps the figure at or above 1.
fn size(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut unit) = (b, 0);
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{v:.0} B"),
        _ => format!("{v:.2} {}", UNITS[unit]),
    }
}

fn runs(n: usize) -> String {
    format!("{n} run{}", if n == 1 { "" } else { "s" })
}

fn target_text(t: Option<&LevelTarget>) -> String {
    match t {
        None => "-".into(),
        Some(t) => match t.capacity_bytes {
            Some(c) => format!("{}, {}", size(c), runs(t.max_runs)),
            None => runs(t.max_runs),
        },
    }
}

/// Levels up to the deepest holding data or shaped by the model, one line each, with their
/// runs and tables below.
fn print_levels(t: &Tree, model: Option<&TreeModel>, tables: bool) {
    let deepest = t.levels.iter().rposition(|l| !l.runs.is_empty()).unwrap_or(0);
    let shaped = model.map_or(0, |m| m.shape.levels.len().saturating_sub(1));
    outln!("level  runs  tables        bytes   policy target            model shape");
    for (l, level) in t.levels.iter().enumerate().take(deepest.max(shaped) + 1) {
        let target = model.and_then(|m| m.targets.get(l));
        let shape = model.and_then(|m| m.shape.levels.get(l));
        let shape = shape.map_or("-".into(), |s| format!("{}, {}", size(s.capacity_bytes), runs(s.max_runs)));
        outln!(
            "L{l:<4} {:>5} {:>7} {:>12}   {:<24} {shape}",
            level.runs.len(),
            level.tables(),
            size(level.bytes() as f64),
            target_text(target)
        );
        if !tables {
            continue;
        }
        for run in &level.runs {
            let n = run.tables.len();
            outln!("  run {}: {n} table{}, {}", run.id, if n == 1 { "" } else { "s" }, bytes_text(run.bytes()));
            for f in &run.tables {
                let segs = if f.segments > 1 { format!(" [{} segments]", f.segments) } else { String::new() };
                outln!(
                    "    {:06}.sst {:>10} B {:>8} entries  {} .. {}{segs}",
                    f.number,
                    f.size,
                    f.num_entries,
                    key_text(&f.smallest),
                    key_text(&f.largest)
                );
            }
        }
    }
}

fn print_model(m: &TreeModel, a: &ShapeArgs) {
    let c = &m.costs;
    outln!(
        "model: {} (C resolved to {:.2}) for {} of tables, write buffer {}",
        m.knobs,
        m.shape.capping,
        size(m.shape.total_bytes),
        size(a.write_buffer_bytes as f64)
    );
    outln!(
        "  predicted: write amp {:.2} (Eq 14: {:.2}), zero-result lookup I/Os {:.4}, existing-key I/Os {:.4}, runs per scan {} (at {} bits/key)",
        c.write_amp, c.paper_write_amp, c.zero_result_ios, c.existing_ios, c.runs, c.filter_bits_per_entry
    );
}

fn print_json(t: &Tree, model: Option<&TreeModel>) {
    let mut j = JsonObject::default();
    j.str("type", "tree")
        .str("manifest", &t.manifest.display().to_string())
        .str("policy", &t.policy)
        .str("recorded_options", &t.recorded_options)
        .int("bytes", t.bytes())
        .int("last_sequence", t.last_sequence)
        .int("next_file_number", t.next_file_number)
        .raw("log_head", &format!("[{},{}]", t.log_head.file, t.log_head.offset))
        .raw("vlog_tail", &format!("[{},{}]", t.vlog_tail.file, t.vlog_tail.offset));
    outln!("{}", j.finish());
    for (l, level) in t.levels.iter().enumerate() {
        let mut j = JsonObject::default();
        j.str("type", "level")
            .int("level", l as u64)
            .int("runs", level.runs.len() as u64)
            .int("tables", level.tables() as u64)
            .int("bytes", level.bytes());
        let runs: Vec<String> =
            level.runs.iter().map(|r| format!("[{},{},{}]", r.id, r.tables.len(), r.bytes())).collect();
        j.raw("run_id_tables_bytes", &format!("[{}]", runs.join(",")));
        if let Some(t) = model.and_then(|m| m.targets.get(l)) {
            j.num("target_bytes", t.capacity_bytes.unwrap_or(f64::NAN)).int("target_runs", t.max_runs as u64);
        }
        if let Some(s) = model.and_then(|m| m.shape.levels.get(l)) {
            j.num("model_capacity_bytes", s.capacity_bytes).int("model_max_runs", s.max_runs as u64);
        }
        outln!("{}", j.finish());
    }
    if let Some(m) = model {
        let mut j = JsonObject::default();
        j.str("type", "model")
            .str("knobs", &m.knobs.to_string())
            .num("write_amp", m.costs.write_amp)
            .num("zero_result_ios", m.costs.zero_result_ios)
            .num("existing_ios", m.costs.existing_ios)
            .num("runs", m.costs.runs);
        outln!("{}", j.finish());
    }
}
