//! Crash consistency on `FaultFs` over `MemFs`: random workloads crashed at random points,
//! every crash point of a scripted workload, and injected EIO/ENOSPC and read bit flips.
//! After a crash the recovered database must equal the model after some prefix of the
//! attempted operations that includes every acknowledged durable one (synced writes, flushes):
//! unsynced writes are lost only as a suffix and nothing is invented.
//! Iterations: env `WISCKEY_CRASH_ITERS` (default 150 random workloads; the enumeration test
//! tries every crash point, up to 4 * ITERS of them, in each crash mode);
//! `WISCKEY_CRASH_SEED=n` replays one random workload.

mod common;

use std::sync::Arc;

use common::{assert_view_matches, make_value, show, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::FaultFs;
use wisckey::fs::{CrashMode, FaultKind, FaultOp, FaultRule};
use wisckey::{Db, Error, Options, ReadOptions, WriteOptions};

const DB: &str = "/crashdb";

/// One step of a workload.
#[derive(Debug, Clone)]
enum Step {
    Put(Vec<u8>, Vec<u8>, bool),
    Delete(Vec<u8>, bool),
    /// `None` value = delete.
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>, bool),
    Flush,
    /// Flush, then wait for the compactions it sets off.
    Settle,
    Compact,
    /// Clean close and open (not a durability point: close need not sync).
    Reopen,
}

impl Step {
    /// Whether a successful return promises the effects so far survive any crash.
    fn is_durable(&self) -> bool {
        match self {
            Step::Put(_, _, sync) | Step::Delete(_, sync) | Step::Batch(_, sync) => *sync,
            Step::Flush | Step::Settle => true,
            Step::Compact | Step::Reopen => false,
        }
    }

    fn apply_to(&self, model: &mut Model) {
        match self {
            Step::Put(k, v, _) => {
                model.insert(k.clone(), v.clone());
            }
            Step::Delete(k, _) => {
                model.remove(k);
            }
            Step::Batch(ops, _) => {
                for (k, v) in ops {
                    match v {
                        Some(v) => model.insert(k.clone(), v.clone()),
                        None => model.remove(k),
                    };
                }
            }
            Step::Flush | Step::Settle | Step::Compact | Step::Reopen => {}
        }
    }
}

/// Run one step against `db`; `Reopen` replaces it (leaving `None` if the open fails).
fn run_step(db: &mut Option<Db>, step: &Step, options: &Options) -> wisckey::Result<()> {
    let d = db.as_ref().ok_or(Error::Closed)?;
    match step {
        Step::Put(k, v, sync) => d.put_opt(&WriteOptions { sync: *sync }, k, v),
        Step::Delete(k, sync) => d.delete_opt(&WriteOptions { sync: *sync }, k),
        Step::Batch(ops, sync) => d.write(&WriteOptions { sync: *sync }, &common::batch_of(ops)),
        Step::Flush => d.flush(),
        Step::Settle => d.flush().and_then(|_| d.wait_for_background_work()),
        Step::Compact => d.compact_range(None, None),
        Step::Reopen => {
            db.take().expect("open").close()?;
            *db = Some(Db::open(DB, options.clone())?);
            Ok(())
        }
    }
}

/// What a workload run promised: the model after every prefix of attempted steps, and the
/// shortest prefix that must survive.
struct Outcome {
    models: Vec<Model>,
    floor: usize,
}

/// Open the database and run `steps` until one fails (the simulated process died).
fn run_workload(fs: &FaultFs, options: &Options, steps: &[Step]) -> (Option<Db>, Outcome) {
    let mut out = Outcome { models: vec![Model::new()], floor: 0 };
    let mut db = match Db::open(DB, options.clone()) {
        Ok(db) => Some(db),
        Err(e) => {
            assert!(fs.is_halted(), "open failed without a fault: {e}");
            return (None, out);
        }
    };
    for (i, step) in steps.iter().enumerate() {
        let mut next = out.models.last().expect("models").clone();
        step.apply_to(&mut next);
        out.models.push(next); // attempted: may survive even if it fails
        match run_step(&mut db, step, options) {
            Ok(()) if step.is_durable() => out.floor = out.models.len() - 1,
            Ok(()) => {}
            Err(e) => {
                assert!(fs.is_halted(), "step {i} {step:?} failed without a fault: {e}");
                break;
            }
        }
    }
    (db, out)
}

/// Everything in the database, read with a forward scan.
fn contents(db: &Db, ctx: &str) -> Model {
    db.scan(&ReadOptions::default())
        .and_then(common::owned_map)
        .unwrap_or_else(|e| panic!("{ctx}: scan after recovery failed: {e}"))
}

/// Kill the process, crash the machine, reopen, and check the prefix rule. Returns the
/// reopened database and its state.
fn crash_and_verify(
    fs: &FaultFs,
    options: &Options,
    db: Option<Db>,
    out: &Outcome,
    mode: CrashMode,
    ctx: &str,
) -> (Db, Model) {
    fs.halt();
    drop(db);
    fs.crash(mode).expect("crash");
    let db = Db::open(DB, options.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen after {mode:?} crash failed: {e}"));
    let state = contents(&db, ctx);
    let matched = (out.floor..out.models.len()).rev().find(|&j| out.models[j] == state);
    let Some(j) = matched else {
        panic!(
            "{ctx}: state after {mode:?} crash is not a prefix state including all durable writes \
             (must survive: first {} steps of {} attempted). {}",
            out.floor,
            out.models.len() - 1,
            describe_gap(&state, &out.models[out.floor], &out.models[out.models.len() - 1])
        );
    };
    assert_view_matches(&db, &ReadOptions::default(), &out.models[j], &format!("{ctx}: recovered state"));
    (db, state)
}

/// A short explanation of how `state` differs from the two ends of the allowed range.
fn describe_gap(state: &Model, floor: &Model, last: &Model) -> String {
    let diff = |want: &Model| -> String {
        let missing: Vec<_> = want.keys().filter(|k| !state.contains_key(*k)).take(5).map(|k| show(k)).collect();
        let extra: Vec<_> = state.keys().filter(|k| !want.contains_key(*k)).take(5).map(|k| show(k)).collect();
        let changed: Vec<_> =
            want.iter().filter(|(k, v)| state.get(*k).is_some_and(|s| s != *v)).take(5).map(|(k, _)| show(k)).collect();
        format!("missing {missing:?}, extra {extra:?}, different value {changed:?}")
    };
    format!("vs the durable prefix: {}; vs all attempted: {}", diff(floor), diff(last))
}

/// After recovery the database must take new durable writes that survive another crash
/// (catches a torn log tail left in place, with new records appended after the garbage).
fn write_after_recovery_survives_next_crash(fs: &FaultFs, options: &Options, db: Db, mut state: Model, ctx: &str) {
    for i in 0..3u64 {
        let k = format!("post-crash-{i}").into_bytes();
        let v = make_value(&k, i, 40);
        db.put_opt(&WriteOptions::synced(), &k, &v).unwrap_or_else(|e| panic!("{ctx}: write after recovery: {e}"));
        state.insert(k, v);
    }
    fs.halt();
    drop(db);
    fs.crash(CrashMode::DropUnsynced).expect("crash");
    let db = Db::open(DB, options.clone()).unwrap_or_else(|e| panic!("{ctx}: second reopen: {e}"));
    let got = contents(&db, ctx);
    assert!(
        got == state,
        "{ctx}: synced writes made after recovery were lost by the next crash: {}",
        describe_gap(&got, &state, &state)
    );
    db.close().unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
}

fn random_key(rng: &mut StdRng) -> Vec<u8> {
    format!("key{:02}", rng.gen_range(0..30)).into_bytes()
}

fn random_value(rng: &mut StdRng, k: &[u8], version: u64) -> Vec<u8> {
    let len = if rng.gen_bool(0.2) { rng.gen_range(1500..2500) } else { rng.gen_range(0..60) };
    make_value(k, version, len)
}

/// `n` random steps; each write is synced with probability `sync_p`.
fn random_steps(rng: &mut StdRng, n: usize, sync_p: f64) -> Vec<Step> {
    let mut steps = Vec::with_capacity(n);
    for version in 0..n as u64 {
        let sync = rng.gen_bool(sync_p);
        let step = match rng.gen_range(0..100) {
            0..=59 => {
                let k = random_key(rng);
                let v = random_value(rng, &k, version);
                Step::Put(k, v, sync)
            }
            60..=74 => Step::Delete(random_key(rng), sync),
            75..=91 => {
                let ops = (0..rng.gen_range(1..6))
                    .map(|_| {
                        let k = random_key(rng);
                        let v = rng.gen_bool(0.7).then(|| random_value(rng, &k, version));
                        (k, v)
                    })
                    .collect();
                Step::Batch(ops, sync)
            }
            92..=95 => Step::Flush,
            96..=97 => Step::Compact,
            _ => Step::Reopen,
        };
        steps.push(step);
    }
    steps
}

const MODES: [CrashMode; 3] = [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced];

/// Small buffers (frequent flushes and compactions) and frequent value-log GC, so crashes hit
/// background work too.
fn fault_options(fs: &FaultFs) -> Options {
    common::tiny_options(Arc::new(fs.clone())).gc_interval_ms(20)
}

#[test]
fn random_workload_crashed_at_random_point_keeps_synced_writes_and_a_prefix() {
    let iters = common::env_u64("WISCKEY_CRASH_ITERS", 150);
    // `WISCKEY_CRASH_SEED=n` replays one failing seed.
    let seeds = match std::env::var("WISCKEY_CRASH_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(one) => one..one + 1,
        None => 0..iters,
    };
    let (mut attempted, mut durable) = (0, 0);
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let fs = FaultFs::in_memory(seed);
        let options = fault_options(&fs);
        let n = rng.gen_range(10..120);
        // Some runs sync rarely, so crashes have long unsynced suffixes to lose.
        let sync_p = [0.02, 0.1, 0.3][(seed / 3) as usize % 3];
        let steps = random_steps(&mut rng, n, sync_p);
        // Half the runs die at a random filesystem call (maybe inside a flush or compaction),
        // the others after the last step.
        if rng.gen_bool(0.5) {
            fs.set_crash_after_ops(rng.gen_range(0..400));
        }
        let mode = MODES[seed as usize % MODES.len()];
        let ctx = format!("seed {seed} ({} steps, {mode:?})", steps.len());
        let (db, out) = run_workload(&fs, &options, &steps);
        attempted += out.models.len() - 1;
        durable += out.floor;
        let (db, state) = crash_and_verify(&fs, &options, db, &out, mode, &ctx);
        write_after_recovery_survives_next_crash(&fs, &options, db, state, &ctx);
    }
    eprintln!("random crashes: {attempted} steps attempted, {durable} of them inside the durable prefix");
    assert!(attempted > 0, "no workload ran");
}

/// The scripted workload of the enumeration test: writes of all kinds, a flush, a
/// compaction and a clean reopen, with durable points in between.
fn scripted_steps() -> Vec<Step> {
    let kv = |i: u32, version: u64, len: usize| {
        let k = format!("s{i:02}").into_bytes();
        let v = make_value(&k, version, len);
        (k, v)
    };
    let mut steps = Vec::new();
    for i in 0..6 {
        let (k, v) = kv(i, 1, if i == 2 { 2000 } else { 30 });
        steps.push(Step::Put(k, v, i == 3));
    }
    let batch = (0..5)
        .map(|i| {
            let (k, v) = kv(i * 2, 2, 50);
            (k, (i != 1).then_some(v))
        })
        .collect();
    steps.push(Step::Batch(batch, true));
    steps.push(Step::Flush);
    for i in 3..10 {
        let (k, v) = kv(i, 3, if i == 5 { 1800 } else { 20 });
        steps.push(Step::Put(k, v, i == 7));
    }
    steps.push(Step::Delete(b"s04".to_vec(), false));
    steps.push(Step::Compact);
    steps.push(Step::Put(b"s11".to_vec(), b"after-compact".to_vec(), false));
    steps.push(Step::Reopen);
    for i in 0..4 {
        let (k, v) = kv(i, 4, 25);
        steps.push(Step::Put(k, v, i == 2));
    }
    steps.push(Step::Delete(b"s00".to_vec(), true));
    steps.push(Step::Put(b"s12".to_vec(), b"unsynced-tail".to_vec(), false));
    steps
}

/// Options without automatic flushes or compactions, so the filesystem calls of the
/// script are the same on every run and crash point `n` means the same place each time.
fn deterministic_options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .write_buffer_bytes(1 << 20)
        .l0_compaction_trigger(8)
        .block_size_bytes(512)
        .gc_interval_ms(0)
}

#[test]
fn every_crash_point_of_scripted_workload_recovers_a_durable_prefix() {
    let steps = scripted_steps();
    // Dry run: count the mutating filesystem calls of the whole script.
    let dry = FaultFs::in_memory(0);
    let (db, out) = run_workload(&dry, &deterministic_options(&dry), &steps);
    assert_eq!(out.models.len(), steps.len() + 1, "the dry run must complete");
    db.expect("open").close().expect("close");
    let total = dry.ops_count();
    assert!(total > steps.len() as u64, "suspiciously few filesystem calls: {total}");
    let max_points = common::env_u64("WISCKEY_CRASH_ITERS", 150) * 4;
    let stride = (total / max_points.max(1)).max(1);
    eprintln!("scripted workload: {total} mutating fs calls; crashing after every {stride}");
    for n in (0..=total).step_by(stride as usize) {
        for (m, mode) in MODES.into_iter().enumerate() {
            let fs = FaultFs::in_memory(n * 3 + m as u64);
            let options = deterministic_options(&fs);
            fs.set_crash_after_ops(n);
            let (db, out) = run_workload(&fs, &options, &steps);
            let ctx = format!("crash after {n} of {total} fs calls ({} steps attempted)", out.models.len() - 1);
            let (db, state) = crash_and_verify(&fs, &options, db, &out, mode, &ctx);
            write_after_recovery_survives_next_crash(&fs, &options, db, state, &ctx);
        }
    }
}

/// Light-weight compaction with tables so small and a segment limit so low that a few
/// flushes append to tables at two levels and split them; one compaction thread and no GC,
/// so the filesystem calls are the same on every run.
fn lwc_options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .light_weight_compaction(true)
        .lwc_max_segments(2)
        .compaction_threads(1)
        .write_buffer_bytes(1 << 20)
        .l0_compaction_trigger(2)
        .block_size_bytes(256)
        .target_file_size_bytes(1 << 10)
        .max_bytes_for_level_base(3 << 10)
        .gc_interval_ms(0)
}

/// Rounds of overwrites and deletes, each ending in a flush that the next compaction appends
/// down; some writes synced, the last round's left unsynced.
fn lwc_steps() -> Vec<Step> {
    let mut steps = Vec::new();
    for round in 0..12u64 {
        for i in (round as u32 % 3..48).step_by(2) {
            let k = format!("l{i:02}").into_bytes();
            if (i + round as u32).is_multiple_of(9) {
                steps.push(Step::Delete(k, i % 5 == 0));
            } else {
                let v = make_value(&k, round, 24);
                steps.push(Step::Put(k, v, i % 7 == 0));
            }
        }
        steps.push(Step::Settle);
    }
    steps.push(Step::Put(b"l99".to_vec(), b"unsynced-tail".to_vec(), false));
    steps
}

#[test]
fn every_crash_point_of_light_weight_compactions_and_splits_recovers_a_durable_prefix() {
    let steps = lwc_steps();
    let dry = FaultFs::in_memory(0);
    let (db, out) = run_workload(&dry, &lwc_options(&dry), &steps);
    assert_eq!(out.models.len(), steps.len() + 1, "the dry run must complete");
    let db = db.expect("open");
    let st = db.stats();
    assert!(st.num_segments_appended >= 4 && st.num_table_splits >= 1, "the script must append and split: {st:?}");
    db.close().expect("close");
    let total = dry.ops_count();
    let max_points = common::env_u64("WISCKEY_CRASH_ITERS", 150);
    let stride = (total / max_points.max(1)).max(1);
    eprintln!("light-weight compaction script: {total} mutating fs calls; crashing after every {stride}");
    for n in (0..=total).step_by(stride as usize) {
        let mode = MODES[(n / stride) as usize % MODES.len()];
        let fs = FaultFs::in_memory(n);
        let options = lwc_options(&fs);
        fs.set_crash_after_ops(n);
        let (db, out) = run_workload(&fs, &options, &steps);
        let ctx = format!("crash after {n} of {total} fs calls ({} steps attempted, {mode:?})", out.models.len() - 1);
        let (db, state) = crash_and_verify(&fs, &options, db, &out, mode, &ctx);
        write_after_recovery_survives_next_crash(&fs, &options, db, state, &ctx);
    }
}

/// Synced overwrites of the `l` keys: each acknowledged one goes into `model`; a failed one
/// (it may or may not have reached the log) into `maybe`, as a value the key may also show.
fn synced_round(db: &Db, model: &mut Model, maybe: &mut Vec<(Vec<u8>, Vec<u8>)>, round: u64) {
    for i in (round as u32 % 3..48).step_by(2) {
        let k = format!("l{i:02}").into_bytes();
        let v = make_value(&k, round, 24);
        match db.put_opt(&WriteOptions::synced(), &k, &v) {
            Ok(()) => {
                // Failed attempts before an acknowledged write are older than it: not allowed.
                maybe.retain(|(mk, _)| *mk != k);
                model.insert(k, v);
            }
            Err(_) => maybe.push((k, v)),
        }
    }
}

#[test]
fn an_append_whose_manifest_sync_failed_is_never_written_over_after_resume() {
    // The manifest sync of an append fails, yet its record reached the file (a crash that keeps
    // the page cache keeps it): that manifest names the longer table. After `resume`, the next
    // append must not write over those bytes before a new manifest replaces the old one, so
    // every crash point after the resume recovers every synced write.
    let mut checked = 0;
    for skip in 0..3u64 {
        for crash_at in (0..120).step_by(7) {
            let fs = FaultFs::in_memory(skip * 1000 + crash_at);
            let options = lwc_options(&fs);
            let db = Db::open(DB, options.clone()).expect("open");
            let (mut model, mut maybe) = (Model::new(), Vec::new());
            for round in 0..4 {
                synced_round(&db, &mut model, &mut maybe, round);
                db.flush().and_then(|_| db.wait_for_background_work()).expect("settle");
            }
            fs.inject(FaultRule::once(FaultOp::Sync, FaultKind::Io).on_path("MANIFEST").after(skip));
            let mut failed = false;
            for round in 4..7 {
                synced_round(&db, &mut model, &mut maybe, round);
                if db.flush().and_then(|_| db.wait_for_background_work()).is_err() {
                    failed = true;
                    db.resume().expect("resume");
                }
            }
            assert!(failed, "the injected manifest sync failure must surface (skip {skip})");
            fs.set_crash_after_ops(crash_at);
            for round in 7..10 {
                synced_round(&db, &mut model, &mut maybe, round);
                let _ = db.flush().and_then(|_| db.wait_for_background_work());
            }
            fs.halt();
            drop(db);
            fs.crash(CrashMode::KeepUnsynced).expect("crash");
            let ctx = format!("manifest sync failure {skip}, crash after {crash_at} calls past the resume");
            let db = Db::open(DB, options.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let got = contents(&db, &ctx);
            // Each key shows its last acknowledged value or a value a failed write attempted.
            let keys_match = got.keys().eq(model.keys());
            let values_ok = model
                .iter()
                .all(|(k, v)| got.get(k).is_some_and(|g| g == v || maybe.iter().any(|(mk, mv)| mk == k && mv == g)));
            assert!(keys_match && values_ok, "{ctx}: synced writes lost: {}", describe_gap(&got, &model, &model));
            let report = db.verify().unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
            assert!(report.errors.is_empty(), "{ctx}: {report:?}");
            checked += 1;
        }
    }
    assert!(checked > 0);
}

/// A database with some durable data, on a fresh `FaultFs`.
fn durable_fixture(seed: u64) -> (FaultFs, Options, Db, Model) {
    let fs = FaultFs::in_memory(seed);
    let options = fault_options(&fs);
    let db = Db::open(DB, options.clone()).expect("open");
    let mut model = Model::new();
    for i in 0..60u64 {
        let k = format!("d{i:03}").into_bytes();
        let v = make_value(&k, i, if i % 9 == 0 { 2000 } else { 40 });
        db.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    db.flush().expect("flush");
    let k = b"last-synced".to_vec();
    db.put_opt(&WriteOptions::synced(), &k, b"yes").expect("synced put");
    model.insert(k, b"yes".to_vec());
    (fs, options, db, model)
}

/// With `rule` injected, a synced write fails (returning the error to `check`), reads keep
/// working, and after the fault is gone and the machine crashes nothing acknowledged is lost.
fn write_fault_scenario(rule: FaultRule, check: impl Fn(&Error), seed: u64) {
    let (fs, options, db, mut model) = durable_fixture(seed);
    fs.inject(rule.clone());
    let e = db
        .put_opt(&WriteOptions::synced(), b"doomed", b"value")
        .expect_err(&format!("synced put must fail under {rule:?}"));
    check(&e);
    fs.clear_faults();
    assert_view_matches(&db, &ReadOptions::default(), &model, &format!("reads after failed write ({rule:?})"));
    // The failed write was not acknowledged: it may or may not survive, but only intact.
    let doomed = db.get(b"doomed").expect("get");
    assert!(doomed.is_none() || doomed.as_deref() == Some(&b"value"[..]), "failed write left a wrong value");
    // Later writes may be refused (read-only after an error) until resume; if accepted and
    // synced they must survive.
    let _ = db.resume();
    if db.put_opt(&WriteOptions::synced(), b"after-fault", b"ok").is_ok() {
        model.insert(b"after-fault".to_vec(), b"ok".to_vec());
    }
    fs.halt();
    drop(db);
    fs.crash(CrashMode::DropUnsynced).expect("crash");
    let db = Db::open(DB, options).expect("reopen after the fault");
    let mut state = contents(&db, &format!("after {rule:?}"));
    if let Some(v) = state.remove(b"doomed".as_slice()) {
        assert_eq!(v, b"value", "failed write recovered with a wrong value");
    }
    assert!(state == model, "acknowledged writes lost after {rule:?}: {}", describe_gap(&state, &model, &model));
}

#[test]
fn enospc_on_log_append_fails_the_write_with_no_space_and_loses_nothing() {
    let rule = FaultRule::always(FaultOp::Append, FaultKind::NoSpace);
    write_fault_scenario(rule, |e| assert!(e.is_no_space(), "expected ENOSPC, got {e:?}"), 1);
}

#[test]
fn eio_on_log_sync_fails_the_write_and_loses_nothing() {
    let rule = FaultRule::always(FaultOp::Sync, FaultKind::Io);
    write_fault_scenario(rule, |e| assert!(!e.is_no_space(), "EIO reported as ENOSPC: {e:?}"), 2);
}

#[test]
fn single_eio_on_append_fails_only_that_write_and_loses_nothing() {
    let rule = FaultRule::once(FaultOp::Append, FaultKind::Io);
    write_fault_scenario(rule, |e| assert!(matches!(e, Error::Io { .. } | Error::Background { .. }), "{e:?}"), 3);
}

#[test]
fn enospc_during_flush_fails_the_flush_keeps_reads_and_recovers_after_resume() {
    let (fs, options, db, mut model) = durable_fixture(4);
    for i in 0..20u64 {
        let k = format!("m{i:03}").into_bytes();
        let v = make_value(&k, i, 30);
        db.put_opt(&WriteOptions::synced(), &k, &v).expect("put");
        model.insert(k, v);
    }
    fs.inject(FaultRule::always(FaultOp::Create, FaultKind::NoSpace));
    fs.inject(FaultRule::always(FaultOp::Append, FaultKind::NoSpace));
    let e = db.flush().expect_err("flush must fail when no file can be written");
    assert!(e.is_no_space() || matches!(e, Error::Background { .. }), "flush under ENOSPC failed with {e:?}");
    assert_view_matches(&db, &ReadOptions::default(), &model, "reads while the disk is full");
    fs.clear_faults();
    db.resume().expect("resume once space is back");
    db.put_opt(&WriteOptions::synced(), b"after-resume", b"1").expect("write after resume");
    model.insert(b"after-resume".to_vec(), b"1".to_vec());
    db.flush().expect("flush after resume");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after resume");
    fs.halt();
    drop(db);
    fs.crash(CrashMode::DropUnsynced).expect("crash");
    let db = Db::open(DB, options).expect("reopen");
    let state = contents(&db, "after ENOSPC during flush");
    assert!(state == model, "acknowledged writes lost: {}", describe_gap(&state, &model, &model));
}

#[test]
fn read_bit_flips_are_reported_as_corruption_never_wrong_values() {
    let (fs, options, db, model) = durable_fixture(5);
    db.compact_range(None, None).expect("compact");
    db.close().expect("close");
    let db = Db::open(DB, options.block_cache_bytes(0)).expect("reopen cold");
    fs.set_read_corruption(0.3, None);
    let mut corrupt = 0;
    for round in 0..3 {
        for (k, v) in &model {
            match db.get(k) {
                Ok(Some(got)) => assert!(&got == v, "round {round}: WRONG VALUE for {}", show(k)),
                Ok(None) => panic!("round {round}: {} silently missing under read bit flips", show(k)),
                Err(e) => {
                    assert!(e.is_corruption(), "round {round}: get {}: {e:?}", show(k));
                    corrupt += 1;
                }
            }
        }
    }
    assert!(corrupt > 0, "30% of reads flipped a bit, yet no read reported corruption");
    fs.clear_read_corruption();
    assert_view_matches(&db, &ReadOptions::default(), &model, "after read corruption stops");
}

/// The database is usable after a crash during its very first open (nothing acknowledged).
#[test]
fn crash_during_creation_leaves_an_openable_empty_database() {
    for n in 0..30 {
        let fs = FaultFs::in_memory(n);
        let options = deterministic_options(&fs);
        fs.set_crash_after_ops(n);
        let db = Db::open(DB, options.clone()).ok();
        let completed = db.is_some() && !fs.is_halted();
        fs.halt();
        drop(db);
        fs.crash(CrashMode::DropUnsynced).expect("crash");
        let db = Db::open(DB, options).unwrap_or_else(|e| panic!("crash after {n} calls of the first open: {e}"));
        assert!(
            contents(&db, &format!("crash after {n} calls of the first open")).is_empty(),
            "crash after {n} calls: data appeared from nowhere"
        );
        if completed {
            break;
        }
    }
}

#[test]
fn unsynced_writes_lost_on_crash_are_a_suffix_of_acknowledged_writes() {
    // A focused, deterministic version of the prefix rule: one synced write, then unsynced
    // ones; a torn crash may keep any prefix of the unsynced ones, never a subset with holes.
    for seed in 0..8 {
        let mut steps = vec![Step::Put(b"a".to_vec(), b"1".to_vec(), true)];
        for i in 0..50u64 {
            let k = format!("u{i:02}").into_bytes();
            let v = make_value(&k, i, 100);
            steps.push(Step::Put(k, v, false));
        }
        let fs = FaultFs::in_memory(seed);
        let options = fault_options(&fs);
        let (db, out) = run_workload(&fs, &options, &steps);
        let ctx = format!("seed {seed}: synced then 50 unsynced puts");
        crash_and_verify(&fs, &options, db, &out, CrashMode::TearUnsynced, &ctx);
    }
}

/// After a synced write's sync fails, the log forgets the failed group (`discard_from`) but its
/// bytes stay in the file until the next append truncates them, and a new write lands at the
/// same offset. Writes are refused until `resume`, which truncates them first: a get of the new
/// value must never find the failed group's bytes (a false checksum mismatch) in the file.
#[test]
fn a_value_written_after_a_failed_sync_and_resume_reads_back_intact() {
    let fs = FaultFs::in_memory(5);
    let options = Options::default().vfs(Arc::new(fs.clone())).min_separated_value_bytes(64).gc_interval_ms(0);
    let db = Db::open("/db", options).expect("open");
    let mut model = Model::new();
    let v = make_value(b"before", 1, 300);
    db.put(b"before", &v).expect("put");
    model.insert(b"before".to_vec(), v);
    db.put_opt(&WriteOptions::synced(), b"synced", b"yes").expect("synced put");
    model.insert(b"synced".to_vec(), b"yes".to_vec());
    fs.inject(FaultRule::once(FaultOp::Sync, FaultKind::Io));
    let doomed = make_value(b"doomed", 2, 300);
    db.put_opt(&WriteOptions::synced(), b"doomed", &doomed).expect_err("the sync fails");
    db.resume().expect("resume");
    // Same size as the failed group, so the new value sits exactly where its bytes are.
    let after = make_value(b"doomed", 3, 300);
    db.put(b"doomed", &after).expect("put after the failed sync");
    model.insert(b"doomed".to_vec(), after.clone());
    assert_eq!(db.get(b"doomed").expect("get").as_deref(), Some(after.as_slice()), "value after the failed sync");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after the failed sync");
}
