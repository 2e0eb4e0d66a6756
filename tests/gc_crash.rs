//! Crash safety of value-log garbage collection on `FaultFs` over `MemFs`: the process dies
//! at every filesystem call of `Db::run_gc` (and at random calls while GC races user
//! overwrites and deletes), the machine loses or tears unsynced data, and after recovery
//! every synced write must be there, no deleted key may come back, no key may show an older
//! value, and GC resumed after the crash must be just as safe (docs/design.md, "Value-log
//! garbage collection" and its crash table).
//! Iterations: env `WISCKEY_CRASH_ITERS` (default 60: the enumeration test tries up to that
//! many crash points per crash mode, evenly spread over all of GC's calls; the race test
//! runs ITERS / 3 seeded races).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_view_matches, make_value, show, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::fault::{CrashMode, FaultKind, FaultOp, FaultRule};
use wisckey::fs::{FaultFs, Vfs};
use wisckey::{Db, Options, ReadOptions, WriteOptions};

const DB: &str = "/gcdb";
/// Keys the workloads write; every one of them is checked after each crash, so a deleted
/// key that comes back is caught even though the model no longer lists it.
const KEYS: u64 = 60;
/// Seed of the setup workload of the enumeration test (the same database every time).
const SETUP_SEED: u64 = 7;

fn key(i: u64) -> Vec<u8> {
    format!("gc{i:03}").into_bytes()
}

fn universe() -> Vec<Vec<u8>> {
    (0..KEYS).map(key).collect()
}

/// Small buffers (many flushes and compactions, hence discard statistics), every value of
/// 64 bytes or more separated, small log files (several to collect) and chunks (several
/// per file), and no background GC, so only `run_gc` collects and crash point `n` means
/// the same call on every run.
fn gc_options(fs: &FaultFs) -> Options {
    common::tiny_options(Arc::new(fs.clone()))
        .min_blob_size(64)
        .log_file_bytes(16 << 10)
        .gc_interval_ms(0)
        .gc_chunk_bytes(4 << 10)
        .gc_pause_ms(0)
}

/// A value: mostly separated (~200 bytes), sometimes inline (below `min_blob_size`).
fn random_value(rng: &mut StdRng, k: &[u8], version: u64) -> Vec<u8> {
    let len = if rng.gen_bool(0.1) { rng.gen_range(10..60) } else { rng.gen_range(150..250) };
    make_value(k, version, len)
}

/// An open database whose value log holds many overwritten and deleted values, compacted
/// so the discard statistics know about them, and the model of what it must contain.
struct Fixture {
    fs: FaultFs,
    options: Options,
    db: Db,
    model: Model,
}

/// Build the fixture from scratch: every key written once (cold values that stay live in
/// the oldest vLog file, so GC has values to move), then ~240 synced overwrites (about 10%
/// deletes) of the hot half, then synced deletes of every 7th key (cold ones too, so GC
/// meets dead values next to live ones), then a full compaction. `fs_seed` only seeds the
/// filesystem's randomness (torn lengths), not the workload.
fn setup(workload_seed: u64, fs_seed: u64) -> Fixture {
    let fs = FaultFs::in_memory(fs_seed);
    let options = gc_options(&fs);
    let db = Db::open(DB, options.clone()).expect("open");
    let mut rng = StdRng::seed_from_u64(workload_seed);
    let mut model = Model::new();
    let sync = WriteOptions::synced();
    for version in 0..300u64 {
        let k = key(if version < KEYS { version } else { rng.gen_range(0..KEYS / 2) });
        if version >= KEYS && rng.gen_bool(0.1) {
            db.delete_opt(&sync, &k).expect("setup delete");
            model.remove(&k);
        } else {
            let v = random_value(&mut rng, &k, version);
            db.put_opt(&sync, &k, &v).expect("setup put");
            model.insert(k, v);
        }
    }
    for i in (0..KEYS).step_by(7) {
        db.delete_opt(&sync, &key(i)).expect("setup delete");
        model.remove(&key(i));
    }
    db.compact_range(None, None).expect("setup compaction");
    // A clean reopen deletes the tables the compactions left behind, whose number depends
    // on background timing: the file set GC starts from, and so its calls, are the same
    // on every run.
    db.close().expect("setup close");
    let db = Db::open(DB, options.clone()).expect("setup reopen");
    db.wait_for_background_work().expect("setup background work");
    let stats = db.stats();
    assert!(stats.vlog_garbage_bytes > 0, "setup must leave discard statistics: {stats:?}");
    Fixture { fs, options, db, model }
}

/// Every key ever written reads as the model says (a key the model lacks must read as
/// absent: a resurrected delete or a GC-copied stale value is caught here), and every
/// way of reading the whole database matches the model.
fn assert_state(db: &Db, model: &Model, ctx: &str) {
    for k in universe() {
        let got = db.get(&k).unwrap_or_else(|e| panic!("{ctx}: get {} failed: {e}", show(&k)));
        match (model.get(&k), got) {
            (Some(want), Some(got)) => assert!(
                &got == want,
                "{ctx}: {} reads {:?}, the model has {:?}",
                show(&k),
                show(&got[..got.len().min(24)]),
                show(&want[..want.len().min(24)])
            ),
            (Some(_), None) => panic!("{ctx}: synced write of {} LOST", show(&k)),
            (None, Some(got)) => {
                panic!("{ctx}: deleted key {} RESURRECTED as {:?}", show(&k), show(&got[..got.len().min(24)]))
            }
            (None, None) => {}
        }
    }
    assert_view_matches(db, &ReadOptions::default(), model, ctx);
}

/// The simulated process dies (if it has not already), the machine loses power, and the
/// database is opened again.
fn crash_and_reopen(fs: &FaultFs, options: &Options, db: Db, mode: CrashMode, ctx: &str) -> Db {
    fs.halt();
    drop(db);
    fs.crash(mode).expect("crash");
    Db::open(DB, options.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen after {mode:?} crash failed: {e}"))
}

/// After a crash: the state is the model; GC run again to completion keeps it so; and it
/// survives one more crash.
fn verify_recovery_and_resumed_gc(fs: &FaultFs, options: &Options, db: Db, model: &Model, ctx: &str) {
    assert_state(&db, model, &format!("{ctx}, after recovery"));
    let report = db.run_gc(0.0).unwrap_or_else(|e| panic!("{ctx}: GC after recovery failed: {e}"));
    assert_state(&db, model, &format!("{ctx}, after resumed GC ({report:?})"));
    let db = crash_and_reopen(fs, options, db, CrashMode::DropUnsynced, ctx);
    assert_state(&db, model, &format!("{ctx}, after resumed GC and another crash"));
    db.close().unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
}

/// Power loss that drops, tears or corrupts unsynced data, and a bare process crash.
const MODES: [CrashMode; 4] =
    [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced, CrashMode::KeepUnsynced];

/// One crash point of the enumeration: returns whether the process died inside `run_gc`.
fn crash_gc_after(n: u64, total: u64, mode: CrashMode) -> bool {
    let fx = setup(SETUP_SEED, n);
    let ctx = format!("GC crashed after {n} of {total} fs calls ({mode:?})");
    fx.fs.reset_ops_count();
    fx.fs.set_crash_after_ops(n);
    let result = fx.db.run_gc(0.0);
    let died = fx.fs.is_halted();
    if let Err(e) = &result {
        assert!(died, "{ctx}: run_gc failed without a fault: {e}");
    }
    // GC never changes what users see, crash or not.
    let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, mode, &ctx);
    verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &fx.model, &ctx);
    died
}

#[test]
fn crash_at_every_fs_call_of_gc_loses_nothing_and_resurrects_nothing() {
    // Dry run: count GC's mutating filesystem calls on the fixture.
    let fx = setup(SETUP_SEED, 0);
    fx.fs.reset_ops_count();
    let report = fx.db.run_gc(0.0).expect("dry-run GC");
    let total = fx.fs.ops_count();
    assert!(report.files_collected >= 1, "the dry run must collect a file: {report:?}");
    assert!(total > 10, "suspiciously few filesystem calls in GC: {total} ({report:?})");
    assert_state(&fx.db, &fx.model, "dry run");
    drop(fx);

    let max_points = common::env_u64("WISCKEY_CRASH_ITERS", 60).max(1);
    let stride = total.div_ceil(max_points).max(1);
    let (mut runs, mut died) = (0u64, 0u64);
    for n in (0..total).step_by(stride as usize) {
        for mode in MODES {
            runs += 1;
            died += u64::from(crash_gc_after(n, total, mode));
        }
    }
    eprintln!(
        "GC crash enumeration: {total} fs calls per GC ({report:?}); {runs} crashed runs (stride {stride}), \
         {died} died inside run_gc"
    );
    assert_eq!(died, runs, "every crash point must land inside GC (is GC's I/O deterministic?)");
}

/// What the writer of a race managed: the model of its acknowledged writes, and the write
/// that failed when the process died (it may or may not have reached the disk).
struct Acked {
    model: Model,
    in_doubt: Option<(Vec<u8>, Option<Vec<u8>>)>,
    writes: u64,
}

/// Synced overwrites and deletes of the fixture's keys until one fails or `ops` are done.
fn racing_writer(db: &Db, fs: &FaultFs, mut model: Model, rng: &mut StdRng, ops: u64) -> Acked {
    let sync = WriteOptions::synced();
    for version in 1000..1000 + ops {
        let k = key(rng.gen_range(0..KEYS));
        let v = (!rng.gen_bool(0.3)).then(|| random_value(rng, &k, version));
        let r = match &v {
            Some(v) => db.put_opt(&sync, &k, v),
            None => db.delete_opt(&sync, &k),
        };
        if let Err(e) = r {
            assert!(fs.is_halted(), "write {version} failed without a fault: {e}");
            return Acked { model, in_doubt: Some((k, v)), writes: version - 1000 };
        }
        match v {
            Some(v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
    Acked { model, in_doubt: None, writes: ops }
}

/// `run_gc(0.0)` over and over until `stop` (or the process dies); when nothing is left to
/// collect, a flush moves the log head so the values just written become collectable.
/// Returns the passes that collected something.
fn gc_until(db: &Db, fs: &FaultFs, stop: &AtomicBool) -> u64 {
    let mut passes = 0;
    while !stop.load(Ordering::Acquire) {
        let r = db.run_gc(0.0).and_then(|r| match r.files_collected {
            0 => {
                std::thread::sleep(Duration::from_millis(1));
                db.flush()
            }
            _ => {
                passes += 1;
                Ok(())
            }
        });
        if let Err(e) = r {
            assert!(fs.is_halted(), "racing GC or flush failed without a fault: {e}");
            break;
        }
    }
    passes
}

/// Run writer and GC side by side (with the crash countdown, if any, already armed).
fn race(fx: &Fixture, seed: u64, ops: u64) -> (Acked, u64) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let gc = s.spawn(|| gc_until(&fx.db, &fx.fs, &stop));
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED);
        let acked = racing_writer(&fx.db, &fx.fs, fx.model.clone(), &mut rng, ops);
        stop.store(true, Ordering::Release);
        (acked, gc.join().expect("GC thread panicked"))
    })
}

/// The recovered state must be the acknowledged model, or that plus the one write in doubt.
fn resolve_in_doubt(db: &Db, acked: &Acked, ctx: &str) -> Model {
    let Some((k, v)) = &acked.in_doubt else {
        return acked.model.clone();
    };
    let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {} failed: {e}", show(k)));
    let mut with = acked.model.clone();
    match v {
        Some(v) => with.insert(k.clone(), v.clone()),
        None => with.remove(k),
    };
    if got.as_ref() == with.get(k) {
        with
    } else {
        acked.model.clone()
    }
}

const RACE_OPS: u64 = 150;

#[test]
fn gc_racing_overwrites_and_deletes_crashed_at_random_calls_keeps_synced_writes() {
    // Dry run: how many mutating calls an uncrashed race makes, to aim the crash points.
    let fx = setup(1, 0);
    fx.fs.reset_ops_count();
    let (acked, passes) = race(&fx, 1, RACE_OPS);
    let total = fx.fs.ops_count();
    assert_eq!(acked.writes, RACE_OPS, "the dry run must complete");
    assert_state(&fx.db, &acked.model, "race dry run");
    drop(fx);

    let iters = (common::env_u64("WISCKEY_CRASH_ITERS", 60) / 3).max(1);
    let (mut died, mut gc_passes, mut in_doubt) = (0u64, 0u64, 0u64);
    for seed in 0..iters {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(0..total);
        let mode = MODES[seed as usize % MODES.len()];
        let ctx = format!("race seed {seed}: crash after {n} of ~{total} fs calls ({mode:?})");
        let fx = setup(seed, seed);
        fx.fs.reset_ops_count();
        fx.fs.set_crash_after_ops(n);
        let (acked, passes) = race(&fx, seed, RACE_OPS);
        died += u64::from(fx.fs.is_halted());
        gc_passes += passes;
        let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, mode, &ctx);
        let model = resolve_in_doubt(&db, &acked, &ctx);
        in_doubt += u64::from(acked.in_doubt.is_some() && model != acked.model);
        verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &model, &ctx);
    }
    eprintln!(
        "GC race: dry run {total} fs calls, {passes} GC passes; {iters} crashed races, {died} died mid-race, \
         {gc_passes} GC passes completed, {in_doubt} in-doubt writes survived"
    );
    assert!(died * 2 >= iters, "most races must be cut by the crash: {died} of {iters}");
}

/// A single I/O error (not a crash) at one of GC's calls: GC may fail, but the database
/// keeps serving the model, GC works again after `resume`, and a crash loses nothing.
fn gc_with_one_fault(rule: FaultRule) {
    let ctx = format!("one fault {rule:?}");
    let fx = setup(SETUP_SEED, 3);
    fx.fs.inject(rule.clone());
    let first = fx.db.run_gc(0.0);
    fx.fs.clear_faults();
    assert_state(&fx.db, &fx.model, &format!("{ctx}: after GC returned {first:?}"));
    let _ = fx.db.resume();
    let again = fx.db.run_gc(0.0);
    if first.is_err() || again.is_err() {
        // A failed manifest or log write may leave the database read-only until reopen.
        assert_state(&fx.db, &fx.model, &format!("{ctx}: after second GC returned {again:?}"));
    }
    let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, CrashMode::DropUnsynced, &ctx);
    verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &fx.model, &ctx);
}

#[test]
fn single_io_error_at_each_kind_of_gc_call_keeps_every_value() {
    let rules = [
        FaultRule::once(FaultOp::Read, FaultKind::Io).on_path(".vlog").after(3),
        FaultRule::once(FaultOp::Append, FaultKind::Io).on_path(".vlog"),
        FaultRule::once(FaultOp::Sync, FaultKind::Io).on_path(".vlog"),
        FaultRule::once(FaultOp::Append, FaultKind::Io).on_path("MANIFEST"),
        FaultRule::once(FaultOp::Sync, FaultKind::Io).on_path("MANIFEST").after(1),
        FaultRule::once(FaultOp::PunchHole, FaultKind::Io),
        FaultRule::once(FaultOp::Remove, FaultKind::Io).on_path(".vlog"),
        FaultRule::once(FaultOp::Create, FaultKind::NoSpace),
    ];
    for rule in rules {
        gc_with_one_fault(rule);
    }
}

#[test]
fn zz_debug() {
    let fx = setup(1, 0);
    let t = std::time::Instant::now();
    let r = fx.db.run_gc(0.0);
    eprintln!("{r:?} {:?}", t.elapsed());
    let fx = setup(1, 0);
    let stop = AtomicBool::new(true);
    let t = std::time::Instant::now();
    let mut rng = StdRng::seed_from_u64(3);
    racing_writer(&fx.db, &fx.fs, fx.model.clone(), &mut rng, 150);
    eprintln!("writer {:?}", t.elapsed());
    gc_until(&fx.db, &fx.fs, &stop);
}
