//! Online self-tuning (`Options::auto_tune`): the step the Wacky paper leaves as future work.
//! For each keyspace that asks for it, a thread samples the operation counts every
//! `auto_tune_interval_ms` into a sliding window, re-runs the cost model on the window's mix
//! and the tree's size, and moves the keyspace to the predicted cheapest design when
//!
//! - the window holds enough operations to say what the workload is
//!   (`Options::auto_tune_window_ops`),
//! - the saving predicted against the design in force passes `AUTO_TUNE_HYSTERESIS` (the
//!   model ranks designs only that finely, and a move costs the compactions that reshape the
//!   tree: near-equal designs must not flap),
//! - the last move is at least `MIN_DWELL_TICKS` ticks old and the window holds only
//!   operations served since (the samples start again at a move), so the figures judged are
//!   the new design's, and
//! - the model's predictions for the design in force hold for what the tree measures over the
//!   window — write amplification, and tables probed per point lookup (the model's runs plus
//!   the level-0 tables the compaction trigger lets pile up) — within `MODEL_TOLERANCE` (a
//!   prediction the tree contradicts is not one to move on). Both are
//!   bounds the tree must stay under: the model counts every write as a new entry, so a
//!   workload of overwrites, whose duplicates compaction drops, writes less than predicted
//!   under every design alike; a tree that writes or probes more than predicted is one the
//!   model does not describe.
//!
//! A move swaps the keyspace's policy and records it in the manifest (the policy and the
//! options record) in one edit; the new policy reshapes the tree through its ordinary
//! compactions, level by level, while reads and writes go on. A crash leaves the keyspace under
//! one policy or the other, and either policy compacts any tree shape.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::DbInner;
use crate::continuum::{self, Knobs, TuningInput, Workload};
use crate::options::MergePolicy;
use crate::version::VersionEdit;

/// A move must be predicted to save more than this share of the design in force's cost.
pub const AUTO_TUNE_HYSTERESIS: f64 = 0.15;

/// Samples kept at most: the window is the newest stretch of them holding
/// `Options::auto_tune_window_ops`.
const MAX_SAMPLES: usize = 1000;

/// Moves `stats` lists at most (the newest).
pub const AUTO_TUNE_HISTORY: usize = 16;

/// Ticks after a move before the next may happen. Two is also the least a window needs (the
/// samples start again at a move, and a window spans two of them), so the dwell is really a
/// window's worth of operations served under the new design; ten ticks held a workload that
/// shifted back within seconds under the design it had left (docs/BENCHMARKS.md §23).
const MIN_DWELL_TICKS: u64 = 2;

/// How far the window's mix (shares of found reads, missing reads, writes, scans; L1 distance,
/// 0 to 2) may drift from the mix the tuner last settled on before it counts as a new
/// workload whose age starts again.
const MIX_SHIFT: f64 = 0.3;

/// A move must be predicted to repay this many times the compactions that reshape the tree,
/// over as many operations as the mix has lasted so far (a workload that has lasted N
/// operations is as likely to last N more as not; the margin covers the model's optimism).
const PAYBACK_MARGIN: f64 = 2.0;

/// How far a measured figure may stray from the model's prediction (as a share of the larger
/// one) before the tuner stops trusting the model for this keyspace.
const MODEL_TOLERANCE: f64 = 0.25;

/// Counts one keyspace's tree keeps for the tuner's model checks (besides its `WorkloadCounters`).
#[derive(Default)]
pub(crate) struct TreeCounters {
    /// Bytes of tables flushes wrote for the keyspace.
    pub flush_bytes: AtomicU64,
    /// Bytes of tables compactions wrote for the keyspace.
    pub compaction_bytes: AtomicU64,
    /// Point lookups that reached the keyspace's tables.
    pub point_lookups: AtomicU64,
    /// Tables those lookups probed (asked the filter of).
    pub filter_probes: AtomicU64,
}

/// What one tick saw: the keyspace's counts then.
#[derive(Clone, Copy, Default)]
struct Sample {
    reads_found: u64,
    reads_missing: u64,
    writes: u64,
    scans: u64,
    flush_bytes: u64,
    compaction_bytes: u64,
    point_lookups: u64,
    filter_probes: u64,
}

impl Sample {
    fn ops(&self) -> u64 {
        self.reads_found + self.reads_missing + self.writes + self.scans
    }

    /// Shares of found reads, missing reads, writes and scans.
    fn mix(&self) -> [f64; 4] {
        let ops = self.ops().max(1) as f64;
        [self.reads_found, self.reads_missing, self.writes, self.scans].map(|n| n as f64 / ops)
    }

    fn minus(&self, o: &Sample) -> Sample {
        Sample {
            reads_found: self.reads_found.saturating_sub(o.reads_found),
            reads_missing: self.reads_missing.saturating_sub(o.reads_missing),
            writes: self.writes.saturating_sub(o.writes),
            scans: self.scans.saturating_sub(o.scans),
            flush_bytes: self.flush_bytes.saturating_sub(o.flush_bytes),
            compaction_bytes: self.compaction_bytes.saturating_sub(o.compaction_bytes),
            point_lookups: self.point_lookups.saturating_sub(o.point_lookups),
            filter_probes: self.filter_probes.saturating_sub(o.filter_probes),
        }
    }
}

/// One keyspace's tuner: its window of samples and what it last did.
#[derive(Default)]
pub(crate) struct TunerState {
    samples: VecDeque<Sample>,
    ticks: u64,
    last_move_tick: Option<u64>,
    /// The mix the workload settled on, and the operation count it has held since.
    mix: Option<([f64; 4], u64)>,
    /// The moves made since the open, newest last (at most `AUTO_TUNE_HISTORY`).
    moves: VecDeque<String>,
    /// What the tuner last did or found, for `stats` (`auto_tune: ...`).
    note: String,
}

impl TunerState {
    /// `stats`' view: the last note (else the reason the manifest recorded for the policy in
    /// force, from an earlier open) and the moves of this open.
    pub(crate) fn report(&self, recorded_reason: Option<&str>) -> (String, Vec<String>) {
        let note = match (self.note.is_empty(), recorded_reason) {
            (true, Some(r)) => format!("{r} (recorded)"),
            _ => self.note.clone(),
        };
        (note, self.moves.iter().cloned().collect())
    }

    /// Operations the window's mix has held for (restarting the count when it shifted).
    fn mix_age(&mut self, window: &Sample, since: &Sample, now: &Sample) -> u64 {
        let mix = window.mix();
        let from = match self.mix {
            Some((m, from)) if m.iter().zip(mix).map(|(a, b)| (a - b).abs()).sum::<f64>() <= MIX_SHIFT => from,
            _ => {
                self.mix = Some((mix, since.ops()));
                since.ops()
            }
        };
        now.ops() - from
    }

    fn record_move(&mut self, note: String) {
        if self.moves.len() == AUTO_TUNE_HISTORY {
            self.moves.pop_front();
        }
        self.moves.push_back(note.clone());
        self.note = note;
    }
}

/// The design a set of knobs builds (the leveling preset is LevelDB's leveling).
fn policy_of(knobs: Knobs) -> MergePolicy {
    if knobs == Knobs::leveling(10.0) {
        MergePolicy::Leveling
    } else {
        MergePolicy::Wacky(knobs)
    }
}

/// The knobs of the design in force, as the model sees it (leveling at the options' ratio).
fn knobs_of(policy: MergePolicy, level_size_ratio: u64) -> Knobs {
    match policy {
        MergePolicy::Leveling => Knobs::leveling(level_size_ratio as f64),
        MergePolicy::Wacky(k) => k,
    }
}

fn describe(p: MergePolicy) -> String {
    match p {
        MergePolicy::Leveling => "leveling".into(),
        MergePolicy::Wacky(k) => continuum::tune::presets()
            .into_iter()
            .find(|(_, pk)| *pk == k)
            .map_or_else(|| k.to_string(), |(name, _)| name.to_string()),
    }
}

/// One tick of the tuner: sample every auto-tuned keyspace and move one whose workload
/// calls for another design.
pub(crate) fn tick(db: &DbInner) {
    let ids: Vec<u32> = {
        let st = db.state.lock();
        st.trees.iter().filter(|(_, t)| !t.dropped && t.opts.auto_tune).map(|(&id, _)| id).collect()
    };
    for ks in ids {
        if let Err(e) = tune_keyspace(db, ks) {
            tracing::warn!(keyspace = ks, error = %e, "auto-tune could not move the keyspace");
        }
    }
}

/// One tuning step for keyspace `ks` (the timer's, or `Keyspace::auto_tune_now`'s): sample
/// its counts and move it when the window calls for another design. Whether it moved.
pub(crate) fn tune_keyspace(db: &DbInner, ks: u32) -> crate::Result<bool> {
    let mut st = db.state.lock();
    let Some(t) = st.trees.get(&ks).filter(|t| !t.dropped && t.opts.auto_tune) else { return Ok(false) };
    let window_ops = t.opts.auto_tune_window_ops.max(1);
    let (w, c) = (t.workload.counts(), &t.counters);
    let now = Sample {
        reads_found: w.reads_found,
        reads_missing: w.reads_missing,
        writes: w.writes,
        scans: w.scans,
        flush_bytes: c.flush_bytes.load(Ordering::Relaxed),
        compaction_bytes: c.compaction_bytes.load(Ordering::Relaxed),
        point_lookups: c.point_lookups.load(Ordering::Relaxed),
        filter_probes: c.filter_probes.load(Ordering::Relaxed),
    };
    let mut tuner = t.tuner.lock();
    tuner.ticks += 1;
    tuner.samples.push_back(now);
    while tuner.samples.len() > MAX_SAMPLES {
        tuner.samples.pop_front();
    }
    // The newest stretch of samples that holds enough operations: the workload of late.
    let Some(since) = tuner.samples.iter().rev().find(|s| now.ops() - s.ops() >= window_ops) else {
        return Ok(false);
    };
    let window = now.minus(since);
    let since = *since;
    let age = tuner.mix_age(&window, &since, &now);
    if tuner.last_move_tick.is_some_and(|m| tuner.ticks < m + MIN_DWELL_TICKS) {
        return Ok(false);
    }
    let Some(version) = st.versions.current_of(ks) else { return Ok(false) };
    let opts = t.opts.clone();
    let data_bytes: f64 = (0..version.num_levels()).map(|l| version.level_bytes(l) as f64).sum();
    let entries: u64 = version.all_files().map(|(_, f)| f.num_entries).sum();
    let entry_bytes = if entries > 0 { data_bytes / entries as f64 } else { 64.0 };
    let input = TuningInput {
        workload: Workload {
            reads: window.reads_found as f64,
            zero_result_reads: window.reads_missing as f64,
            writes: window.writes as f64,
            scans: window.scans as f64,
        },
        data_bytes: data_bytes.max(opts.write_buffer_bytes as f64),
        buffer_bytes: opts.write_buffer_bytes as f64,
        filter_bits_per_entry: opts.bloom_bits_per_key.first().copied().unwrap_or(10.0),
        entries_per_block: (opts.block_size_bytes as f64 / entry_bytes).max(1.0),
        write_cost_ratio: continuum::cost::DEFAULT_WRITE_COST_RATIO,
        max_levels: opts.num_levels,
        preset_margin: continuum::tune::DEFAULT_PRESET_MARGIN,
    };
    let current = knobs_of(opts.merge_policy, opts.level_size_ratio);
    let in_force = continuum::tune::candidate(describe(opts.merge_policy), current, &input);
    let best = continuum::tune(&input).best;
    let saving = 1.0 - best.cost / in_force.cost.max(f64::MIN_POSITIVE);
    if best.knobs == current || saving <= AUTO_TUNE_HYSTERESIS {
        return Ok(false);
    }
    // What the move costs up front: a greedier design (fewer runs) merges the tree's runs
    // into its own shape, about one rewrite of every entry; a lazier one lets the runs it
    // finds stand and only stops merging new ones.
    let rewrite = if best.costs.runs < in_force.costs.runs { entries as f64 } else { 0.0 };
    let reshape_cost = rewrite * input.write_cost_ratio / input.entries_per_block;
    let repaid = (in_force.cost - best.cost) * age as f64;
    if repaid < PAYBACK_MARGIN * reshape_cost {
        tuner.note = format!(
            "waiting to move to {}: predicted -{:.0} % per operation repays the reshape (about {entries} \
             entries rewritten) only after the mix has lasted {:.0} operations; it has lasted {age}",
            best.name,
            saving * 100.0,
            PAYBACK_MARGIN * reshape_cost / (in_force.cost - best.cost)
        );
        return Ok(false);
    }
    // The model's figures for the design in force against the tree's own.
    let measured_wa = (window.flush_bytes + window.compaction_bytes) as f64 / window.flush_bytes.max(1) as f64;
    let measured_probes = window.filter_probes as f64 / window.point_lookups.max(1) as f64;
    let wa_ok = window.flush_bytes == 0 || measured_wa <= in_force.costs.write_amp * (1.0 + MODEL_TOLERANCE);
    // The model's runs are its levels'; level 0's flushed tables, up to the compaction
    // trigger, come on top of them under every design.
    let max_runs = in_force.costs.runs + opts.l0_compaction_trigger as f64;
    let probes_ok = window.point_lookups == 0 || measured_probes <= max_runs * (1.0 + MODEL_TOLERANCE);
    if !(wa_ok && probes_ok) {
        tuner.note = format!(
            "model disagrees with the tree under {}: write amp {measured_wa:.2} measured vs at most {:.2} predicted, \
             {measured_probes:.2} tables probed per lookup vs at most {:.2}; not moving to {} (predicted -{:.0} %)",
            in_force.name,
            in_force.costs.write_amp,
            max_runs,
            best.name,
            saving * 100.0
        );
        return Ok(false);
    }
    let to = policy_of(best.knobs);
    let ops = now.ops();
    let note = format!(
        "moved from {} to {} at op {ops}, predicted -{:.0} %",
        describe(opts.merge_policy),
        describe(to),
        saving * 100.0
    );
    tuner.last_move_tick = Some(tuner.ticks);
    // The next judgement is of the tree under the new design: its window starts now.
    tuner.samples.clear();
    tuner.record_move(note.clone());
    drop(tuner);
    let mut moved = (*opts).clone();
    moved.merge_policy = to;
    let policy: Arc<dyn crate::compaction::CompactionPolicy> = super::policy_for(&moved).into();
    let edit = VersionEdit {
        policy: Some(policy.name()),
        options: Some(moved.shape_record()),
        policy_reason: Some(note.clone()),
        ..VersionEdit::of_keyspace(ks)
    };
    st.versions.log_and_apply(edit)?;
    if let Some(t) = st.trees.get_mut(&ks) {
        t.opts = Arc::new(moved);
        t.policy = policy;
        t.pressure = (u64::MAX, crate::compaction::WritePressure::None);
    }
    tracing::info!(keyspace = ks, "auto_tune: {note}");
    db.scheduler.compact_cv.notify_all();
    Ok(true)
}

/// The tuner thread: a tick every `auto_tune_interval_ms` while the database is open.
pub(crate) fn run(db: &DbInner) {
    let interval = std::time::Duration::from_millis(db.opts.auto_tune_interval_ms.max(10));
    let mut st = db.state.lock();
    loop {
        let deadline = std::time::Instant::now() + interval;
        while !st.shutting_down && std::time::Instant::now() < deadline {
            db.scheduler.tune_cv.wait_until(&mut st, deadline);
        }
        if st.shutting_down {
            return;
        }
        let tuned = st.trees.values().any(|t| !t.dropped && t.opts.auto_tune);
        if !tuned || st.bg_error.is_some() {
            continue;
        }
        drop(st);
        tick(db);
        st = db.state.lock();
    }
}
