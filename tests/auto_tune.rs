//! Online self-tuning: with `Options::auto_tune` a keyspace moves along the Wacky continuum as
//! its workload shifts, records each move in the manifest (a reopen keeps the policy in force)
//! and says why in `stats`; the data stays exactly the model's through every reshape.

mod common;

use std::sync::Arc;

use common::crash_points::{halting_after, prefix_state};
use common::{assert_view_matches, make_value, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{FaultFs, MemFs};
use wisckey::{Db, Options, ReadOptions, WriteOptions};

fn options(fs: &Arc<MemFs>) -> Options {
    common::tiny_options(fs.clone())
        .gc_interval_ms(0)
        .auto_tune(true)
        .auto_tune_interval_ms(20)
        .write_buffer_bytes(64 << 10)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// Writes only, then lookups of absent keys only: the tuner leaves leveling for a design
/// that writes less, then moves back towards one that probes fewer runs per lookup.
#[test]
fn a_shifting_workload_moves_the_policy_and_the_data_survives_every_reshape() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/tune", options(&fs)).expect("open");
    assert_eq!(db.stats().merge_policy, "leveling");
    let mut model = Model::new();
    let mut rng = StdRng::seed_from_u64(3);
    let start = std::time::Instant::now();
    let mut moved_away = None;
    for i in 0..600_000u64 {
        let k = key(rng.gen_range(0..50_000));
        let v = i.to_le_bytes().to_vec();
        db.put(&k, &v).expect("put");
        model.insert(k, v);
        if i % 50_000 == 0 && db.stats().merge_policy != "leveling" {
            moved_away = Some(db.stats());
            break;
        }
    }
    let moved = moved_away.unwrap_or_else(|| panic!("writes alone never moved the policy: {:?}", db.stats().auto_tune));
    assert!(moved.auto_tune.starts_with("moved from leveling to"), "{}", moved.auto_tune);
    let write_policy = moved.merge_policy.clone();
    // Lookups of absent keys: fewer runs per lookup pay now.
    let mut back = None;
    for i in 0..2_000_000u64 {
        assert!(db.get(format!("absent{i}")).expect("get").is_none());
        if i % 50_000 == 0 && db.stats().merge_policy != write_policy {
            back = Some(db.stats());
            break;
        }
    }
    let back = back.unwrap_or_else(|| panic!("absent-key lookups never moved the policy: {}", db.stats().auto_tune));
    eprintln!("{} then {} ({:?})", moved.auto_tune, back.auto_tune, start.elapsed());
    db.wait_for_background_work().expect("settle");
    for (k, v) in model.iter().step_by(97) {
        assert_eq!(db.get(k).expect("get").as_deref(), Some(&v[..]));
    }
    let scanned: Model =
        db.range::<&[u8], _>(..).expect("range").map(|r| r.map(|(k, v)| (k, v.to_vec())).expect("entry")).collect();
    assert!(scanned == model, "the data after two reshapes differs from the model");
    let policy = back.merge_policy.clone();
    let moves = db.stats().auto_tune_moves;
    assert!(moves.len() >= 2 && moves.iter().all(|m| m.starts_with("moved from")), "{moves:?}");
    drop(db);
    let db = Db::open("/tune", options(&fs)).expect("reopen");
    let reopened = db.stats();
    assert_eq!(reopened.merge_policy, policy, "the move is recorded: a reopen keeps it");
    let last = moves.last().expect("a move");
    assert_eq!(reopened.auto_tune, format!("{last} (recorded)"), "the manifest keeps the last move's reason");
}

/// A steady workload settles: at most one move.
#[test]
fn a_steady_workload_makes_at_most_one_move() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/steady", options(&fs)).expect("open");
    let mut rng = StdRng::seed_from_u64(5);
    let mut policies = vec![db.stats().merge_policy];
    for i in 0..400_000u64 {
        let k = key(rng.gen_range(0..40_000));
        if i % 2 == 0 {
            db.put(&k, b"value").expect("put");
        } else {
            db.get(&k).expect("get");
        }
        if i % 20_000 == 0 {
            let p = db.stats().merge_policy;
            if policies.last() != Some(&p) {
                policies.push(p);
            }
        }
    }
    assert!(policies.len() <= 2, "a steady mix moved more than once: {policies:?}");
}

// ---------------------------------------------------------------- crashes over a move

/// One step of the crash script over auto-tuner moves.
#[derive(Debug, Clone)]
enum Step {
    /// Puts (`Some`) and deletes (`None`) as one batch, synced or not.
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>, bool),
    /// Lookups of keys never written: the workload the tuner sees next (no file changes).
    AbsentLookups(u64),
    /// Flush, then wait for the compactions it sets off.
    Settle,
    /// One tuner step (`auto_tune_now`), then wait for the compactions that reshape the tree
    /// if it moved; the clean run checks which steps move.
    Tune { moves: bool },
    /// Clean close and open (not a durability point: close need not sync).
    Reopen,
}

impl Step {
    /// Whether a successful return promises every earlier write survives any crash.
    fn is_durable(&self) -> bool {
        matches!(self, Step::Batch(_, true) | Step::Settle)
    }

    fn apply_to(&self, model: &mut Model) {
        if let Step::Batch(ops, _) = self {
            for (k, v) in ops {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
        }
    }
}

const CRASH_DB: &str = "/tunecrash";

/// Small memtables and levels so a few dozen flushes build a tree of several levels; the
/// tuner's timer effectively off (the script steps it) and its window a few hundred ops.
/// Every batch between two settles fits in the memtable, so nothing flushes by itself and
/// the script's filesystem calls come in the same order every run.
fn crash_options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .write_buffer_bytes(8 << 10)
        .target_file_size_bytes(4 << 10)
        .block_size_bytes(512)
        .max_bytes_for_level_base(16 << 10)
        .l0_compaction_trigger(2)
        .min_separated_value_bytes(512)
        .compaction_threads(1)
        .gc_interval_ms(0)
        .auto_tune(true)
        .auto_tune_interval_ms(3_600_000)
        .auto_tune_window_ops(300)
}

fn run_step(db: &mut Option<Db>, step: &Step, options: &Options) -> wisckey::Result<()> {
    let d = db.as_ref().ok_or(wisckey::Error::Closed)?;
    match step {
        Step::Batch(ops, sync) => d.write(&WriteOptions { sync: *sync }, &common::batch_of(ops)),
        Step::AbsentLookups(n) => {
            for i in 0..*n {
                if d.get(format!("absent{i}"))?.is_some() {
                    panic!("a key never written was found");
                }
            }
            Ok(())
        }
        Step::Settle => d.flush().and_then(|_| d.wait_for_background_work()),
        Step::Tune { .. } => {
            d.auto_tune_now()?;
            d.wait_for_background_work()
        }
        Step::Reopen => {
            db.take().expect("open").close()?;
            *db = Some(Db::open(CRASH_DB, options.clone())?);
            Ok(())
        }
    }
}

/// Writes alone (with some deletes) under leveling until the tuner leaves it for a design
/// that writes less; more writes under that design, a reopen, then lookups of absent keys
/// until it moves towards fewer runs per lookup, with the compactions that merge the runs the
/// write-optimized design left; then writes under the new design.
fn crash_script() -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(11);
    let mut version = 0u64;
    let mut round = |rng: &mut StdRng, n: usize, sync: bool| {
        let ops = (0..n)
            .map(|_| {
                let k = format!("k{:04}", rng.gen_range(0..600)).into_bytes();
                version += 1;
                let v = if rng.gen_bool(0.1) {
                    None
                } else {
                    Some(make_value(&k, version, if rng.gen_bool(0.2) { 700 } else { 40 }))
                };
                (k, v)
            })
            .collect();
        Step::Batch(ops, sync)
    };
    let mut s = vec![Step::Tune { moves: false }];
    for i in 0..10 {
        s.push(round(&mut rng, 40, i % 3 == 0));
        s.push(round(&mut rng, 30, false));
        s.push(Step::Settle);
    }
    s.push(Step::Tune { moves: true });
    for i in 0..6 {
        s.push(round(&mut rng, 40, i % 2 == 0));
        s.push(Step::Settle);
    }
    s.push(Step::Reopen);
    s.push(Step::Tune { moves: false });
    s.push(Step::AbsentLookups(8000));
    s.push(round(&mut rng, 20, true));
    s.push(Step::Tune { moves: true });
    for i in 0..3 {
        s.push(round(&mut rng, 40, i != 1));
        s.push(Step::Settle);
    }
    s.push(round(&mut rng, 10, false));
    s
}

/// The runs each level holds are within what the policy `stats` names allows, once its
/// compactions are done: one per level under leveling, the Wacky shape's a_i otherwise.
fn assert_shape_fits_policy(db: &Db, options: &Options, ctx: &str) {
    let stats = db.stats();
    let policy: wisckey::MergePolicy =
        stats.merge_policy.parse().unwrap_or_else(|e| panic!("{ctx}: policy {}: {e}", stats.merge_policy));
    let max_runs: Vec<usize> = match policy {
        wisckey::MergePolicy::Leveling => {
            (0..stats.level_runs.len()).map(|l| if l == 0 { options.l0_compaction_trigger - 1 } else { 1 }).collect()
        }
        wisckey::MergePolicy::Wacky(knobs) => {
            let deepest = stats.level_runs.iter().rposition(|&r| r > 0).unwrap_or(0);
            let largest = if deepest >= 1 { stats.level_bytes[deepest] as f64 } else { 0.0 };
            let shape = wisckey::continuum::Shape::top_down(
                knobs,
                largest,
                options.write_buffer_bytes as f64,
                deepest + 1,
                options.num_levels,
            );
            shape.levels.iter().map(|l| l.max_runs).collect()
        }
        other => panic!("{ctx}: a policy this test does not know: {other:?}"),
    };
    for (l, &runs) in stats.level_runs.iter().enumerate() {
        let max = max_runs.get(l).copied().unwrap_or(0);
        assert!(
            runs <= max.max(1),
            "{ctx}: level {l} holds {runs} runs, {} allows {max} (runs per level {:?})",
            stats.merge_policy,
            stats.level_runs
        );
    }
}

/// A crash at every filesystem call of the tuner's moves and of the compactions that reshape
/// the tree after them, and at a sample of the calls of every other step (writes, flushes,
/// compactions, reopen), in every crash mode: the reopened database holds the state after a
/// prefix of the steps with every durable one, answers every read as the model does, runs the
/// policy in force before or after the step the crash hit, verifies, and its policy's
/// compactions bring the tree to that policy's shape.
#[test]
fn a_crash_at_any_step_of_an_auto_tune_move_and_its_reshape_keeps_a_whole_prefix_and_a_consistent_tree() {
    let steps = crash_script();
    // A clean run: which steps move, the policy after each, and the calls each step makes.
    let (policies, step_ops) = {
        let fs = FaultFs::in_memory(1);
        let options = crash_options(&fs);
        let mut db = Some(Db::open(CRASH_DB, options.clone()).expect("open"));
        let mut policies = vec![db.as_ref().expect("open").stats().merge_policy];
        let mut step_ops = vec![fs.ops_count()];
        for s in &steps {
            run_step(&mut db, s, &options).unwrap_or_else(|e| panic!("clean run: {s:?}: {e}"));
            let stats = db.as_ref().expect("open").stats();
            if let Step::Tune { moves } = s {
                let moved = stats.merge_policy != *policies.last().expect("policy");
                assert_eq!(
                    moved, *moves,
                    "clean run: {s:?} left the policy at {} ({})",
                    stats.merge_policy, stats.auto_tune
                );
            }
            policies.push(stats.merge_policy);
            step_ops.push(fs.ops_count());
        }
        (policies, step_ops)
    };
    eprintln!("policies along the script: {:?}; {} filesystem calls", policies, step_ops.last().expect("ops"));
    // Every call of the moves and their reshapes; a stride over the other steps' calls, at
    // least one point in each.
    let mut points = std::collections::BTreeSet::new();
    for (i, s) in steps.iter().enumerate() {
        let (from, to) = (step_ops[i], step_ops[i + 1]);
        let stride = if matches!(s, Step::Tune { moves: true }) { 1 } else { 12 };
        points.extend((from..=to).step_by(stride));
        points.insert(to);
    }
    let points: Vec<u64> = points.into_iter().collect();
    let mut by_step = vec![0usize; steps.len()];
    for (n, &at) in points.iter().enumerate() {
        let mode = common::crash_points::MODES[n % common::crash_points::MODES.len()];
        let ctx = format!("crash point {at} ({mode:?})");
        let fs = halting_after(at);
        let options = crash_options(&fs);
        let mut models = vec![Model::new()];
        let (mut floor, mut done) = (0, 0);
        let mut db = Db::open(CRASH_DB, options.clone()).ok();
        if db.is_some() {
            for step in &steps {
                let mut next = models.last().expect("models").clone();
                step.apply_to(&mut next);
                models.push(next);
                match run_step(&mut db, step, &options) {
                    Ok(()) => {
                        done += 1;
                        if step.is_durable() {
                            floor = models.len() - 1;
                        }
                    }
                    Err(e) => {
                        assert!(fs.is_halted(), "{ctx}: {step:?} failed without a fault: {e}");
                        break;
                    }
                }
            }
        }
        by_step[done.min(steps.len() - 1)] += 1;
        fs.halt();
        drop(db);
        fs.crash(mode).expect("crash");
        let db = Db::open(CRASH_DB, options.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let got = db
            .scan(&ReadOptions::default())
            .and_then(common::owned_map)
            .unwrap_or_else(|e| panic!("{ctx}: scan after the reopen: {e}"));
        let j = prefix_state(&models, floor, &got, &ctx);
        assert_view_matches(&db, &ReadOptions::default(), &models[j], &ctx);
        let policy = db.stats().merge_policy;
        let allowed = &policies[done..(done + 2).min(policies.len())];
        assert!(
            allowed.contains(&policy),
            "{ctx}: recovered under {policy}, but the crash hit step {done} ({:?}), which runs under {allowed:?}",
            steps.get(done)
        );
        let report = db.verify().unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
        assert!(report.errors.is_empty(), "{ctx}: {report:?}");
        // The recovered tree, whatever the crash left of a reshape, is one its policy compacts.
        db.wait_for_background_work().unwrap_or_else(|e| panic!("{ctx}: compactions after the crash: {e}"));
        assert_shape_fits_policy(&db, &options, &ctx);
        assert_view_matches(&db, &ReadOptions::default(), &models[j], &format!("{ctx}, compacted"));
    }
    eprintln!("{} crash points; by the step they hit: {by_step:?}", points.len());
    let moving: usize = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Step::Tune { moves: true }))
        .map(|(i, _)| by_step[i])
        .sum();
    assert!(moving > 4, "only {moving} crash points hit a move or its reshape");
}
