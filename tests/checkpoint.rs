//! Checkpoints: a checkpoint holds exactly the source's state at its sequence number, opens
//! and verifies, and nothing the source does afterwards (GC and its hole punches, compaction,
//! light-weight compaction's appends) changes it — nor does the checkpoint, opened as a
//! database of its own, change the source. Crash enumeration: every filesystem call of a
//! script that takes a checkpoint between writes and GC, crashed, leaves the source with a
//! durable prefix and the checkpoint either complete or plainly unfinished (no `CURRENT`).
//! `WISCKEY_CKPT_LOAD_SECS` lengthens the under-load test (60: the acceptance run).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_view_matches, make_value, owned_map, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{CrashMode, FaultFs, MemFs, Vfs};
use wisckey::{Db, Error, Options, ReadOptions, WriteBatch, WriteOptions};

const SRC: &str = "/src";
const CKPT: &str = "/ckpt";

/// Every keyspace's contents by name.
type Models = BTreeMap<String, Model>;

/// Every keyspace of `db` and what it holds at `ro`'s snapshot (the names as of now).
fn all_contents(db: &Db, ro: &ReadOptions, ctx: &str) -> Models {
    (db.keyspaces().into_iter())
        .map(|name| {
            let ks = db.keyspace(&name).unwrap_or_else(|e| panic!("{ctx}: keyspace {name}: {e}"));
            let model = ks.scan(ro).and_then(owned_map).unwrap_or_else(|e| panic!("{ctx}: scan {name}: {e}"));
            (name, model)
        })
        .collect()
}

/// `db` holds exactly `want`: the same keyspaces, the default one read every way
/// (`assert_view_matches`), the others scanned both ways.
fn assert_keyspaces_match(db: &Db, want: &Models, ctx: &str) {
    let names = sorted(db.keyspaces());
    assert!(names.iter().eq(want.keys()), "{ctx}: keyspaces {names:?}");
    for (name, model) in want {
        if name == wisckey::DEFAULT_KEYSPACE_NAME {
            assert_view_matches(db, &ReadOptions::default(), model, &format!("{ctx}: default keyspace"));
            continue;
        }
        let ks = db.keyspace(name).unwrap_or_else(|e| panic!("{ctx}: keyspace {name}: {e}"));
        let fwd = ks.scan(&ReadOptions::default()).and_then(owned_map).expect("scan");
        assert!(fwd == *model, "{ctx}: keyspace {name} holds {} entries, its model {}", fwd.len(), model.len());
        let back: Vec<Vec<u8>> = ks.range::<&[u8], _>(..).expect("range").rev().map(|r| r.expect("entry").0).collect();
        assert!(back.iter().eq(model.keys().rev()), "{ctx}: keyspace {name} read backwards");
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn assert_healthy(db: &Db, ctx: &str) {
    let report = db.verify().unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
    assert!(report.is_healthy(), "{ctx}: {report}");
}

/// Separated values, small log files and tables: a short script fills several log files,
/// flushes, compacts and collects; background work has nothing to do but finish a dropped
/// keyspace (the script waits for that), so every run makes the same calls.
fn script_options(vfs: Arc<dyn Vfs>) -> Options {
    common::small_log_options(vfs, 64)
        .log_file_bytes(8 << 10)
        .gc_chunk_bytes(2 << 10)
        .write_buffer_bytes(1 << 20)
        .l0_compaction_trigger(8)
}

/// The keyspaces of the script besides the default one: `EVENTS` (tiered, its own separation
/// threshold) lives on; `DOOMED` is dropped after the checkpoint, which must still hold it.
const EVENTS: &str = "events";
const DOOMED: &str = "doomed";

#[derive(Debug, Clone)]
enum Step {
    CreateKeyspace(&'static str),
    /// Put key, version, synced, in a keyspace.
    Put(&'static str, u32, u64, bool),
    Delete(&'static str, u32),
    /// One batch putting the key in the default keyspace and in `EVENTS`.
    CrossBatch(u32, u64),
    Flush,
    Compact(&'static str),
    /// `run_gc` at this garbage ratio (percent).
    Gc(u32),
    Checkpoint,
    DropKeyspace(&'static str),
    /// `wait_for_background_work` (a dropped keyspace's tables go).
    Settle,
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

fn keyspace(db: &Db, name: &str) -> wisckey::Result<wisckey::Keyspace> {
    db.keyspace(name)
}

/// Rounds of overwrites (some synced) in three keyspaces, each flushed, a compaction that
/// counts the garbage, a collection of the files that are all garbage, unsynced overwrites
/// and batches across keyspaces, the checkpoint (which links the last round's value file),
/// then more overwrites, deletes, a dropped keyspace and collections that punch and delete
/// the files the checkpoint links.
fn script() -> Vec<Step> {
    let mut steps = vec![Step::CreateKeyspace(EVENTS), Step::CreateKeyspace(DOOMED)];
    let mut version = 0;
    let mut round = |steps: &mut Vec<Step>, n: u32, sync_every: u32| {
        for i in 0..n {
            version += 1;
            let ks = [wisckey::DEFAULT_KEYSPACE_NAME, EVENTS, DOOMED][(i % 3) as usize];
            steps.push(Step::Put(ks, i, version, sync_every > 0 && i % sync_every == 0));
        }
    };
    for _ in 0..4 {
        round(&mut steps, 24, 7);
        steps.push(Step::Flush);
    }
    // Every keyspace is compacted before the collection: GC picks files by the garbage that
    // compactions counted, and `DOOMED`'s overwrites count only once its runs merge (left to a
    // background compaction, the first log file was sometimes under 90 % garbage).
    steps.extend([
        Step::Compact(wisckey::DEFAULT_KEYSPACE_NAME),
        Step::Compact(EVENTS),
        Step::Compact(DOOMED),
        Step::Gc(90),
    ]);
    round(&mut steps, 12, 0);
    steps.extend([Step::CrossBatch(30, 1), Step::CrossBatch(31, 2)]);
    steps.push(Step::Delete(wisckey::DEFAULT_KEYSPACE_NAME, 21));
    steps.push(Step::Checkpoint);
    for _ in 0..2 {
        round(&mut steps, 24, 5);
        steps.push(Step::Flush);
    }
    steps.extend([Step::DropKeyspace(DOOMED), Step::Settle, Step::CrossBatch(30, 3)]);
    steps.extend([Step::Delete(EVENTS, 4), Step::Compact(wisckey::DEFAULT_KEYSPACE_NAME), Step::Compact(EVENTS)]);
    steps.extend([Step::Gc(0), Step::Compact(wisckey::DEFAULT_KEYSPACE_NAME), Step::Gc(0)]);
    steps
}

/// What a run of the script did: the models after every attempted step, the last one
/// whose success promised durability, and how the checkpoint step ended.
struct Run {
    models: Vec<Models>,
    floor: usize,
    gc_runs_at_checkpoint: u64,
    checkpoint: Option<(Models, Result<wisckey::CheckpointInfo, String>)>,
}

/// Apply `step` to `db`, and to `next` what it does.
fn apply(db: &Db, step: &Step, next: &mut Models) -> wisckey::Result<()> {
    let value = |k: u32, v: u64| make_value(&key(k), v, 300);
    match *step {
        Step::CreateKeyspace(name) => {
            next.insert(name.to_string(), Model::new());
            let opts = Options::default().merge_policy(wisckey::MergePolicy::tiering(3)).min_separated_value_bytes(128);
            db.create_keyspace(name, opts).map(|_| ())
        }
        Step::Put(ks, k, v, sync) => {
            next.get_mut(ks).expect("model").insert(key(k), value(k, v));
            keyspace(db, ks)?.put_opt(&WriteOptions { sync }, key(k), value(k, v))
        }
        Step::Delete(ks, k) => {
            next.get_mut(ks).expect("model").remove(&key(k));
            keyspace(db, ks)?.delete(key(k))
        }
        Step::CrossBatch(k, v) => {
            let events = keyspace(db, EVENTS)?;
            let mut batch = WriteBatch::new();
            batch.put(key(k), value(k, v)).put_in(&events, key(k), value(k, v + 1));
            next.get_mut(wisckey::DEFAULT_KEYSPACE_NAME).expect("model").insert(key(k), value(k, v));
            next.get_mut(EVENTS).expect("model").insert(key(k), value(k, v + 1));
            db.write(&WriteOptions::default(), &batch)
        }
        Step::Flush => db.flush(),
        Step::Compact(ks) => keyspace(db, ks)?.compact_range(None, None),
        Step::Gc(percent) => db.run_gc(f64::from(percent) / 100.0).map(|_| ()),
        Step::Checkpoint => unreachable!("run() takes the checkpoint"),
        Step::DropKeyspace(name) => {
            next.remove(name);
            db.drop_keyspace(name)
        }
        Step::Settle => db.wait_for_background_work(),
    }
}

fn run(fs: &FaultFs, options: &Options, steps: &[Step]) -> (Option<Db>, Run) {
    let first: Models = [(wisckey::DEFAULT_KEYSPACE_NAME.to_string(), Model::new())].into();
    let mut out = Run { models: vec![first], floor: 0, gc_runs_at_checkpoint: 0, checkpoint: None };
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
            Step::Checkpoint => {
                out.gc_runs_at_checkpoint = db.stats().gc_runs;
                let r = db.checkpoint(CKPT);
                out.checkpoint = Some((next.clone(), r.as_ref().map(|i| i.clone()).map_err(|e| e.to_string())));
                r.map(|_| ())
            }
            step => apply(&db, step, &mut next),
        };
        out.models.push(next);
        let durable = matches!(
            step,
            Step::Put(_, _, _, true) | Step::Flush | Step::Checkpoint | Step::CreateKeyspace(_) | Step::DropKeyspace(_)
        );
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

/// The checkpoint after a crash: complete (opens, verifies, holds exactly `want` in every
/// keyspace) or unfinished (no open takes it for a database). Returns whether it is complete.
fn check_checkpoint(fs: &FaultFs, options: &Options, want: &Models, finished: bool, ctx: &str) -> bool {
    let has_current = fs.exists(&Path::new(CKPT).join("CURRENT"));
    assert!(has_current || !finished, "{ctx}: the checkpoint returned Ok but left no CURRENT");
    if !has_current {
        let r = Db::open(CKPT, options.clone().create_if_missing(false));
        assert!(matches!(r, Err(Error::NotADatabase { .. })), "{ctx}: an unfinished checkpoint opened: {:?}", r.err());
        return false;
    }
    let ro = Db::open_read_only(CKPT, options.clone()).unwrap_or_else(|e| panic!("{ctx}: checkpoint open: {e}"));
    assert_keyspaces_match(&ro, want, &format!("{ctx}: checkpoint (read-only)"));
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
    let (want, info) = out.checkpoint.clone().expect("the script checkpoints");
    let info = info.expect("dry-run checkpoint");
    assert_eq!(want.len(), 3, "the checkpoint holds three keyspaces");
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
    let (mut complete, mut points) = (0, 0);
    for n in (0..=total).step_by(stride as usize) {
        points += 1;
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
        let state = all_contents(&src, &ReadOptions::default(), &ctx);
        assert!(
            (out.floor..out.models.len()).any(|j| out.models[j] == state),
            "{ctx}: the source is not a durable prefix of the script (floor {}); keyspaces {:?}",
            out.floor,
            state.keys().collect::<Vec<_>>()
        );
        let Some((want, result)) = &out.checkpoint else { continue };
        if !check_checkpoint(&fs, &options, want, result.is_ok(), &ctx) {
            continue;
        }
        complete += 1;
        // The source goes on overwriting, dropping and collecting everything the checkpoint
        // links.
        for name in src.keyspaces() {
            let ks = src.keyspace(&name).expect("keyspace");
            for i in 0..30 {
                ks.put(key(i), make_value(&key(i), 10_000 + u64::from(i), 300)).expect("write after reopen");
            }
            ks.compact_range(None, None).expect("compact");
        }
        if src.keyspaces().iter().any(|n| n == DOOMED) {
            src.drop_keyspace(DOOMED).expect("drop");
        }
        src.flush().and_then(|_| src.compact_range(None, None)).expect("flush and compact");
        src.run_gc(0.0).and_then(|_| src.compact_range(None, None)).and_then(|_| src.run_gc(0.0)).expect("gc");
        src.wait_for_background_work().expect("settle");
        check_checkpoint(&fs, &options, want, true, &format!("{ctx}, after the source's GC"));
    }
    eprintln!("{points} crash points; {complete} left a complete checkpoint, checked again after the source's GC");
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
            db.put(key(i), &v).expect("put");
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
    // A tiered keyspace written with the default one (cross-keyspace batches), and one the
    // source drops after the checkpoint.
    let events = db.create_keyspace(EVENTS, Options::default().merge_policy(wisckey::MergePolicy::tiering(3)));
    let doomed = db.create_keyspace(DOOMED, Options::default()).expect("create");
    let events = events.expect("create");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(7);
            let mut models = Models::new();
            let mut version = 0u64;
            while !stop.load(Ordering::Relaxed) {
                version += 1;
                let k = format!("key{:04}", rng.gen_range(0..800)).into_bytes();
                let model = models.entry(wisckey::DEFAULT_KEYSPACE_NAME.to_string()).or_default();
                if rng.gen_bool(0.05) {
                    db.delete(&k).expect("delete");
                    model.remove(&k);
                } else if rng.gen_bool(0.3) {
                    let (v, e) = (make_value(&k, version, rng.gen_range(80..600)), make_value(&k, version, 90));
                    let mut batch = WriteBatch::new();
                    batch.put(&k, &v).put_in(&events, &k, &e);
                    db.write(&WriteOptions::default(), &batch).expect("batch");
                    model.insert(k.clone(), v);
                    models.entry(EVENTS.to_string()).or_default().insert(k, e);
                } else {
                    let v = make_value(&k, version, rng.gen_range(80..600));
                    db.put(&k, &v).expect("put");
                    model.insert(k, v);
                }
            }
            models
        })
    };
    for i in 0..300u32 {
        doomed.put(key(i), make_value(&key(i), 1, 200)).expect("put");
    }
    std::thread::sleep(Duration::from_millis(300));
    let (info, snap) = db.checkpoint_with_snapshot(&ckpt_dir).expect("checkpoint under load");
    let at = ReadOptions { snapshot: Some(snap), ..Default::default() };
    let want = all_contents(&db, &at, "source at the checkpoint's sequence number");
    drop(at);
    assert_eq!(want[DOOMED].len(), 300, "the dropped keyspace is in the checkpoint");
    let before = db.stats();
    db.drop_keyspace(DOOMED).expect("drop");
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        db.run_gc(0.2).expect("gc");
        std::thread::sleep(Duration::from_millis(20));
    }
    db.compact_range(None, None).expect("compact");
    db.keyspace(EVENTS).and_then(|ks| ks.compact_range(None, None)).expect("compact events");
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
    assert!(s.num_segments_appended > before.num_segments_appended, "light-weight compaction must append");
    let ckpt = Db::open(&ckpt_dir, options()).expect("open the checkpoint");
    assert_healthy(&ckpt, "checkpoint");
    assert_keyspaces_match(&ckpt, &want, "checkpoint");
    stop.store(true, Ordering::Relaxed);
    let models = writer.join().expect("writer");
    for (name, model) in &models {
        let got = db.keyspace(name).and_then(|ks| ks.scan(&ReadOptions::default())).and_then(owned_map);
        assert!(got.expect("scan") == *model, "source keyspace {name} after the load");
    }
    assert_healthy(&db, "source");
}

#[test]
fn a_checkpoint_past_a_long_log_tail_rolls_the_log_and_links_it_instead_of_copying_it() {
    let fs = Arc::new(MemFs::new());
    // Large memtable, default 64 MiB log files: the whole load is one unflushed log tail.
    let options = || Options::default().vfs(fs.clone()).min_separated_value_bytes(64).write_buffer_bytes(64 << 20);
    let src = Db::open(SRC, options()).expect("open");
    let mut model = Model::new();
    for i in 0..3_000u32 {
        let v = make_value(&key(i), 1, 1_000);
        src.put(key(i), &v).expect("put");
        model.insert(key(i), v);
    }
    let info = src.checkpoint(CKPT).expect("checkpoint");
    assert!(info.bytes_copied < 64 << 10, "a 3 MB log tail must be linked after a roll, not copied: {info:?}");
    let at_checkpoint = model.clone();
    // The source goes on in its new log file; the linked one never changes again.
    let shapes = file_shapes(&*fs, CKPT);
    for i in 0..3_000u32 {
        let v = make_value(&key(i), 2, 1_000);
        src.put(key(i), &v).expect("put after the checkpoint");
        model.insert(key(i), v);
    }
    assert_eq!(file_shapes(&*fs, CKPT), shapes, "the source appended to a file the checkpoint links");
    // Right after a roll the tail is short: it is copied, and the checkpoints open whole.
    src.checkpoint("/ckpt-rolled-again").expect("second checkpoint");
    src.put(key(0), b"short tail").expect("put");
    model.insert(key(0), b"short tail".to_vec());
    let small = src.checkpoint("/ckpt2").expect("third checkpoint");
    assert!(small.bytes_copied > 0, "a short tail is copied: {small:?}");
    let ckpt = Db::open(CKPT, options()).expect("open the checkpoint");
    assert_view_matches(&ckpt, &ReadOptions::default(), &at_checkpoint, "checkpoint of a rolled log");
    assert_healthy(&ckpt, "checkpoint");
    // The checkpoint, a database of its own, writes to a log file of its own: its first
    // groups must not land in the sealed file it shares with the source.
    let mut ck_model = at_checkpoint.clone();
    for i in 0..50u32 {
        let v = make_value(&key(i), 3, 1_000);
        ckpt.put_opt(&WriteOptions::synced(), key(i), &v).expect("put into the checkpoint");
        ck_model.insert(key(i), v);
    }
    assert_eq!(file_shapes(&*fs, CKPT).iter().filter(|f| f.0.ends_with(".vlog")).count(), 2);
    drop(ckpt);
    let ckpt = Db::open(CKPT, options()).expect("reopen the checkpoint");
    assert_view_matches(&ckpt, &ReadOptions::default(), &ck_model, "checkpoint after its own writes");
    let ckpt2 = Db::open("/ckpt2", options()).expect("open the second checkpoint");
    assert_view_matches(&ckpt2, &ReadOptions::default(), &model, "checkpoint of a short tail");
    // The source, reopened, replays across the roll.
    drop(src);
    let src = Db::open(SRC, options()).expect("reopen the source");
    assert_view_matches(&src, &ReadOptions::default(), &model, "source after the roll and a reopen");
    assert_healthy(&src, "source");
}
