//! Checkpoints: a checkpoint holds exactly the source's state at its sequence number, opens
//! and verifies, and nothing the source does afterwards (GC and its hole punches, compaction,
//! light-weight compaction's appends) changes it — nor does the checkpoint, opened as a
//! database of its own, change the source. Crash enumeration: every filesystem call of a
//! script that takes a checkpoint between writes and GC, crashed, leaves the source with a
//! durable prefix and the checkpoint either complete or plainly unfinished (no `CURRENT`).
//! `WISCKEY_CKPT_LOAD_SECS` lengthens the under-load test (60: the acceptance run).

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_view_matches, make_value, owned_map, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{CrashMode, FaultFs, MemFs, Vfs};
use wisckey::{Db, Error, Options, ReadOptions, WriteOptions};

const SRC: &str = "/src";
const CKPT: &str = "/ckpt";

fn contents(db: &Db, ro: &ReadOptions, ctx: &str) -> Model {
    db.scan(ro).and_then(owned_map).unwrap_or_else(|e| panic!("{ctx}: scan failed: {e}"))
}

fn assert_healthy(db: &Db, ctx: &str) {
    let report = db.verify().unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
    assert!(report.is_healthy(), "{ctx}: {report}");
}

/// Separated values, small log files and tables: a short script fills several log files,
/// flushes, compacts and collects; no background thread, so every run makes the same calls.
fn script_options(vfs: Arc<dyn Vfs>) -> Options {
    common::small_log_options(vfs, 64)
        .log_file_bytes(8 << 10)
        .gc_chunk_bytes(2 << 10)
        .write_buffer_bytes(1 << 20)
        .l0_compaction_trigger(8)
}

#[derive(Debug, Clone)]
enum Step {
    Put(u32, u64, bool),
    Delete(u32),
    Flush,
    Compact,
    /// `run_gc` at this garbage ratio (percent).
    Gc(u32),
    Checkpoint,
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

/// Rounds of overwrites (some synced) each flushed, a compaction that counts the garbage, a
/// collection of the files that are all garbage, unsynced overwrites, the checkpoint (which
/// links the last round's value file), then more overwrites, deletes and collections that
/// punch and delete the files the checkpoint links.
fn script() -> Vec<Step> {
    let mut steps = Vec::new();
    let mut version = 0;
    let mut round = |steps: &mut Vec<Step>, n: u32, sync_every: u32| {
        for i in 0..n {
            version += 1;
            steps.push(Step::Put(i, version, sync_every > 0 && i % sync_every == 0));
        }
    };
    for _ in 0..4 {
        round(&mut steps, 24, 7);
        steps.push(Step::Flush);
    }
    steps.extend([Step::Compact, Step::Gc(90)]);
    round(&mut steps, 12, 0);
    steps.push(Step::Delete(20));
    steps.push(Step::Checkpoint);
    for _ in 0..2 {
        round(&mut steps, 24, 5);
        steps.push(Step::Flush);
    }
    steps.extend([Step::Delete(3), Step::Compact, Step::Gc(0), Step::Compact, Step::Gc(0)]);
    steps
}

/// What a run of the script did: the model after every attempted step, the last one
/// whose success promised durability, and how the checkpoint step ended.
struct Run {
    models: Vec<Model>,
    floor: usize,
    gc_runs_at_checkpoint: u64,
    checkpoint: Option<(Model, Result<wisckey::CheckpointInfo, String>)>,
}

fn run(fs: &FaultFs, options: &Options, steps: &[Step]) -> (Option<Db>, Run) {
    let mut out = Run { models: vec![Model::new()], floor: 0, gc_runs_at_checkpoint: 0, checkpoint: None };
    let db = match Db::open(SRC, options.clone()) {
        Ok(db) => db,
        Err(e) => {
            assert!(fs.is_halted(), "open failed without a fault: {e}");
            return (None, out);
        }
    };
    for (i, step) in steps.iter().enumerate() {
        let mut next = out.models.last().expect("models").clone();
        let r = match step {
            Step::Put(k, v, sync) => {
                next.insert(key(*k), make_value(&key(*k), *v, 300));
                db.put_opt(&WriteOptions { sync: *sync }, &key(*k), &make_value(&key(*k), *v, 300))
            }
            Step::Delete(k) => {
                next.remove(&key(*k));
                db.delete(&key(*k))
            }
            Step::Flush => db.flush(),
            Step::Compact => db.compact_range(None, None),
            Step::Gc(percent) => db.run_gc(f64::from(*percent) / 100.0).map(|_| ()),
            Step::Checkpoint => {
                out.gc_runs_at_checkpoint = db.stats().gc_runs;
                let r = db.checkpoint(CKPT);
                out.checkpoint = Some((next.clone(), r.as_ref().map(|i| i.clone()).map_err(|e| e.to_string())));
                r.map(|_| ())
            }
        };
        out.models.push(next);
        let durable = matches!(step, Step::Put(_, _, true) | Step::Flush | Step::Checkpoint);
        match r {
            Ok(()) if durable => out.floor = out.models.len() - 1,
            Ok(()) => {}
            Err(e) => {
                assert!(fs.is_halted(), "step {i} {step:?} failed without a fault: {e}");
                break;
            }
        }
    }
    (Some(db), out)
}

/// The checkpoint after a crash: complete (opens, verifies, holds exactly `want`) or
/// unfinished (no open takes it for a database). Returns whether it is complete.
fn check_checkpoint(fs: &FaultFs, options: &Options, want: &Model, finished: bool, ctx: &str) -> bool {
    let has_current = fs.exists(&Path::new(CKPT).join("CURRENT"));
    assert!(has_current || !finished, "{ctx}: the checkpoint returned Ok but left no CURRENT");
    if !has_current {
        let r = Db::open(CKPT, options.clone().create_if_missing(false));
        assert!(matches!(r, Err(Error::NotADatabase { .. })), "{ctx}: an unfinished checkpoint opened: {:?}", r.err());
        return false;
    }
    let ro = Db::open_read_only(CKPT, options.clone()).unwrap_or_else(|e| panic!("{ctx}: checkpoint open: {e}"));
    assert_view_matches(&ro, &ReadOptions::default(), want, &format!("{ctx}: checkpoint (read-only)"));
    assert_healthy(&ro, &format!("{ctx}: checkpoint"));
    true
}

#[test]
fn every_crash_point_of_a_checkpoint_between_writes_and_gc_leaves_both_databases_whole() {
    let steps = script();
    let dry = FaultFs::in_memory(0);
    let (db, out) = run(&dry, &script_options(Arc::new(dry.clone())), &steps);
    let db = db.expect("dry run opens");
    assert_eq!(out.models.len(), steps.len() + 1, "the dry run must complete");
    let (_, info) = out.checkpoint.clone().expect("the script checkpoints");
    let info = info.expect("dry-run checkpoint");
    let gc_before = out.gc_runs_at_checkpoint;
    let gc_after = db.stats().gc_runs - gc_before;
    assert!(
        gc_before >= 1 && gc_after >= 1,
        "GC must collect before and after the checkpoint: {gc_before}, {gc_after}"
    );
    assert!(info.files_linked >= 3, "the checkpoint must link tables and value files: {info:?}");
    drop(db);
    let total = dry.ops_count();
    let max_points = common::env_u64("WISCKEY_CRASH_ITERS", 150);
    let stride = (total / max_points.max(1)).max(1);
    eprintln!("checkpoint script: {total} mutating fs calls; crashing after every {stride}");
    const MODES: [CrashMode; 3] = [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced];
    let mut complete = 0;
    for n in (0..=total).step_by(stride as usize) {
        let mode = MODES[(n / stride) as usize % MODES.len()];
        let fs = FaultFs::in_memory(n);
        let options = script_options(Arc::new(fs.clone()));
        fs.set_crash_after_ops(n);
        let (db, out) = run(&fs, &options, &steps);
        let ctx = format!("crash after {n} of {total} fs calls ({} steps, {mode:?})", out.models.len() - 1);
        fs.halt();
        drop(db);
        fs.crash(mode).expect("crash");
        let src = Db::open(SRC, options.clone()).unwrap_or_else(|e| panic!("{ctx}: source reopen: {e}"));
        let state = contents(&src, &ReadOptions::default(), &ctx);
        assert!(
            (out.floor..out.models.len()).any(|j| out.models[j] == state),
            "{ctx}: the source is not a durable prefix of the script (floor {})",
            out.floor
        );
        let Some((want, result)) = &out.checkpoint else { continue };
        if !check_checkpoint(&fs, &options, want, result.is_ok(), &ctx) {
            continue;
        }
        complete += 1;
        // The source goes on overwriting and collecting everything the checkpoint links.
        for i in 0..30 {
            src.put(&key(i), &make_value(&key(i), 10_000 + u64::from(i), 300)).expect("write after reopen");
        }
        src.flush().and_then(|_| src.compact_range(None, None)).expect("flush and compact");
        src.run_gc(0.0).and_then(|_| src.compact_range(None, None)).and_then(|_| src.run_gc(0.0)).expect("gc");
        check_checkpoint(&fs, &options, want, true, &format!("{ctx}, after the source's GC"));
    }
    assert!(complete > 0, "no crash point left a complete checkpoint");
}

/// Every file of the database directory `dir` with its size and allocated bytes.
fn file_shapes(fs: &dyn Vfs, dir: &str) -> Vec<(String, u64, u64)> {
    let mut names = fs.list(Path::new(dir)).expect("list");
    names.sort();
    names
        .into_iter()
        .filter(|n| n.ends_with(".sst") || n.ends_with(".vlog") || n.ends_with(".cold"))
        .map(|n| {
            let p = Path::new(dir).join(&n);
            (n, fs.file_size(&p).expect("size"), fs.disk_usage(&p).expect("usage"))
        })
        .collect()
}

#[test]
fn later_punches_compactions_and_appends_in_either_database_leave_the_other_alone() {
    let fs = Arc::new(MemFs::new());
    let options = || {
        common::small_log_options(fs.clone(), 64)
            .log_file_bytes(8 << 10)
            .gc_chunk_bytes(2 << 10)
            .light_weight_compaction(true)
            .lwc_max_segments(8)
            .compaction_threads(1)
            .l0_compaction_trigger(2)
            .target_file_size_bytes(4 << 10)
            .max_bytes_for_level_base(16 << 10)
    };
    let src = Db::open(SRC, options()).expect("open");
    let mut model = Model::new();
    let write_round = |db: &Db, model: &mut Model, round: u64| {
        for i in 0..60u32 {
            let v = make_value(&key(i), round * 100 + u64::from(i), 200);
            db.put(&key(i), &v).expect("put");
            model.insert(key(i), v);
        }
        db.flush().and_then(|_| db.wait_for_background_work()).expect("settle");
    };
    for round in 0..6 {
        write_round(&src, &mut model, round);
    }
    src.compact_range(None, None).expect("compact");
    let appended = src.stats().num_segments_appended;
    assert!(appended > 0, "light-weight compaction must have appended before the checkpoint");
    let info = src.checkpoint(CKPT).expect("checkpoint");
    let at_checkpoint = model.clone();
    let shapes = file_shapes(&*fs, CKPT);
    for round in 6..14 {
        write_round(&src, &mut model, round);
        src.run_gc(0.0).expect("gc");
    }
    src.compact_range(None, None).and_then(|_| src.run_gc(0.0).map(|_| ())).expect("compact and gc");
    let s = src.stats();
    assert!(s.num_segments_appended > appended && s.gc_runs > 0, "the source must append and collect: {s:?}");
    // Same sizes and allocation: nothing appended to a linked table, nothing punched.
    let after = file_shapes(&*fs, CKPT);
    let tables_and_logs =
        |v: &[(String, u64, u64)]| v.iter().filter(|f| !f.0.ends_with(".cold")).cloned().collect::<Vec<_>>();
    assert_eq!(tables_and_logs(&after), tables_and_logs(&shapes), "the source changed a file the checkpoint holds");
    let ckpt = Db::open(CKPT, options()).expect("open the checkpoint");
    assert_view_matches(&ckpt, &ReadOptions::default(), &at_checkpoint, "checkpoint after the source went on");
    assert_eq!(ckpt.stats().last_sequence, info.sequence, "the checkpoint's sequence number");
    // The checkpoint, a database of its own, now compacts and collects what it shares.
    let mut ck_model = at_checkpoint.clone();
    for round in 20..26 {
        write_round(&ckpt, &mut ck_model, round);
        ckpt.run_gc(0.0).expect("checkpoint gc");
    }
    assert_view_matches(&ckpt, &ReadOptions::default(), &ck_model, "checkpoint after its own writes");
    assert_healthy(&ckpt, "checkpoint");
    assert_view_matches(&src, &ReadOptions::default(), &model, "source after the checkpoint's writes and GC");
    assert_healthy(&src, "source");
}

#[test]
fn a_checkpoint_under_overwrites_gc_and_lwc_reads_exactly_the_source_at_its_sequence_number() {
    let secs = common::env_u64("WISCKEY_CKPT_LOAD_SECS", 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src_dir, ckpt_dir) = (tmp.path().join("src"), tmp.path().join("ckpt"));
    let options = || {
        Options::default()
            .min_separated_value_bytes(64)
            .write_buffer_bytes(64 << 10)
            .target_file_size_bytes(32 << 10)
            .max_bytes_for_level_base(128 << 10)
            .log_file_bytes(128 << 10)
            .gc_chunk_bytes(32 << 10)
            .gc_interval_ms(5)
            .light_weight_compaction(true)
            .l0_compaction_trigger(2)
    };
    let db = Arc::new(Db::open(&src_dir, options()).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(7);
            let mut model = Model::new();
            let mut version = 0u64;
            while !stop.load(Ordering::Relaxed) {
                version += 1;
                let k = format!("key{:04}", rng.gen_range(0..800)).into_bytes();
                if rng.gen_bool(0.05) {
                    db.delete(&k).expect("delete");
                    model.remove(&k);
                } else {
                    let v = make_value(&k, version, rng.gen_range(80..600));
                    db.put(&k, &v).expect("put");
                    model.insert(k, v);
                }
            }
            model
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let (info, snap) = db.checkpoint_with_snapshot(&ckpt_dir).expect("checkpoint under load");
    let at = ReadOptions { snapshot: Some(snap), ..Default::default() };
    let want = contents(&db, &at, "source at the checkpoint's sequence number");
    drop(at);
    let before = db.stats();
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        db.run_gc(0.2).expect("gc");
        std::thread::sleep(Duration::from_millis(20));
    }
    db.compact_range(None, None).expect("compact");
    db.run_gc(0.0).expect("gc");
    let s = db.stats();
    eprintln!(
        "checkpoint at sequence {} ({} files linked, {} copied, {} bytes); then {secs} s of load: sequence {} -> {}, \
         GC collected {} files, {} segments appended, {} compactions",
        info.sequence,
        info.files_linked,
        info.files_copied,
        info.bytes_copied,
        before.last_sequence,
        s.last_sequence,
        s.gc_runs - before.gc_runs,
        s.num_segments_appended - before.num_segments_appended,
        s.num_compactions - before.num_compactions
    );
    assert!(s.gc_runs > before.gc_runs, "the source must collect after the checkpoint");
    assert!(s.last_sequence > info.sequence, "the writer must go on after the checkpoint");
    let ckpt = Db::open(&ckpt_dir, options()).expect("open the checkpoint");
    assert_healthy(&ckpt, "checkpoint");
    assert_view_matches(&ckpt, &ReadOptions::default(), &want, "checkpoint");
    stop.store(true, Ordering::Relaxed);
    let model = writer.join().expect("writer");
    assert_view_matches(&db, &ReadOptions::default(), &model, "source after the load");
    assert_healthy(&db, "source");
}
