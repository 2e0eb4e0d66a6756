//! Keyspaces: named trees of one database, each with its own shaping options, one log and one
//! memtable budget for all. Checked against a `BTreeMap` model per keyspace through flushes,
//! compactions, GC and reopens; batches across keyspaces are atomic (a crash at every
//! filesystem call of a scripted workload leaves each batch whole or absent); a dropped
//! keyspace is gone at once, its tables go in the background and its values become garbage.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::crash_points::{crash_points, halting_after, prefix_state};
use common::{make_value, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{FaultFs, MemFs, Vfs};
use wisckey::{Db, Error, Keyspace, MergePolicy, Options, ReadOptions, WriteBatch, WriteOptions};

/// Every keyspace's contents by name.
type Models = BTreeMap<String, Model>;

fn options(fs: Arc<dyn wisckey::fs::Vfs>) -> Options {
    common::tiny_options(fs).gc_interval_ms(0)
}

fn contents(ks: &Keyspace) -> Model {
    ks.range::<&[u8], _>(..).expect("range").map(|r| r.map(|(k, v)| (k, v.to_vec())).expect("entry")).collect()
}

fn check(db: &Db, models: &Models, ctx: &str) {
    let mut names = db.keyspaces();
    names.sort();
    let mut want: Vec<String> = models.keys().cloned().collect();
    want.sort();
    assert_eq!(names, want, "{ctx}: keyspaces");
    for (name, model) in models {
        let ks = db.keyspace(name).unwrap_or_else(|e| panic!("{ctx}: keyspace {name}: {e}"));
        assert!(contents(&ks) == *model, "{ctx}: keyspace {name} differs from its model");
        let back: Vec<_> = ks.range::<&[u8], _>(..).expect("range").rev().map(|r| r.expect("entry").0).collect();
        assert!(back.iter().eq(model.keys().rev()), "{ctx}: {name} backwards");
        for (k, v) in model.iter().step_by(7) {
            assert_eq!(ks.get(k).expect("get").as_deref(), Some(&v[..]), "{ctx}: {name} get");
        }
    }
}

#[test]
fn keyspaces_are_created_listed_reopened_with_their_options_and_dropped() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/ks", options(fs.clone())).expect("open");
    assert_eq!(db.keyspaces(), vec!["default".to_string()]);
    let tiered =
        db.create_keyspace("events", Options::default().merge_policy(MergePolicy::tiering(3))).expect("create");
    let small = db.create_keyspace("blobs", Options::default().min_separated_value_bytes(16)).expect("create");
    assert!(matches!(db.create_keyspace("events", Options::default()), Err(Error::KeyspaceExists { .. })));
    tiered.put("e1", "one").expect("put");
    small.put("b1", vec![7u8; 100]).expect("put");
    db.put("d1", "default").expect("put");
    assert_eq!(db.get("e1").expect("get"), None, "keyspaces do not see each other's keys");
    drop((tiered, small));
    drop(db);

    let db = Db::open("/ks", options(fs.clone())).expect("reopen");
    let mut names = db.keyspaces();
    names.sort();
    assert_eq!(names, vec!["blobs", "default", "events"]);
    let events = db.keyspace("events").expect("events");
    assert_eq!(events.get("e1").expect("get").as_deref(), Some(&b"one"[..]));
    let s = events.stats();
    assert!(s.merge_policy.starts_with("wacky:T=3"), "the keyspace kept its policy: {}", s.merge_policy);
    assert_eq!(db.stats().merge_policy, "leveling", "and the default keyspace its own");
    db.drop_keyspace("events").expect("drop");
    assert!(matches!(events.get("e1"), Err(Error::KeyspaceDropped { .. })), "a handle to a dropped keyspace fails");
    assert!(matches!(events.put("e2", "x"), Err(Error::KeyspaceDropped { .. })));
    assert!(matches!(db.keyspace("events"), Err(Error::UnknownKeyspace { .. })));
    assert!(matches!(db.drop_keyspace("default"), Err(Error::InvalidArgument { .. })));
    assert!(matches!(db.drop_keyspace("nope"), Err(Error::UnknownKeyspace { .. })));
    // The name is free again: a new keyspace of that name starts empty.
    let again = db.create_keyspace("events", Options::default()).expect("recreate");
    assert_eq!(again.get("e1").expect("get"), None);
    drop(db);
    let db = Db::open("/ks", options(fs)).expect("reopen");
    assert_eq!(db.keyspace("events").expect("events").get("e1").expect("get"), None);
    assert_eq!(db.keyspace("blobs").expect("blobs").get("b1").expect("get").as_deref(), Some(&[7u8; 100][..]));
}

#[test]
fn bad_keyspace_names_and_batches_are_refused_and_nothing_changes() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/bad", options(fs)).expect("open");
    for bad in ["", "a/b", "a\\b", "tab\there", &"x".repeat(256)] {
        assert!(matches!(db.create_keyspace(bad, Options::default()), Err(Error::InvalidArgument { .. })), "{bad:?}");
    }
    assert_eq!(db.keyspaces(), vec!["default".to_string()]);
    let a = db.create_keyspace("a", Options::default()).expect("a");
    let b = db.create_keyspace("b", Options::default()).expect("b");
    db.drop_keyspace("b").expect("drop b");
    let mut batch = WriteBatch::new();
    batch.put_in(&a, "k", "v").put("dk", "dv").put_in(&b, "k", "v");
    assert!(matches!(db.write(&WriteOptions::default(), &batch), Err(Error::KeyspaceDropped { .. })));
    assert_eq!(a.get("k").expect("get"), None, "a batch naming a dropped keyspace writes nothing");
    assert_eq!(db.get("dk").expect("get"), None);
    let mut reversed = WriteBatch::new();
    reversed.delete_range_in(&a, "z", "a");
    assert!(matches!(db.write(&WriteOptions::default(), &reversed), Err(Error::InvalidArgument { .. })));
    assert!(matches!(a.delete_range("z", "a"), Err(Error::InvalidArgument { .. })));
}

/// Random puts, deletes and cross-keyspace batches over three keyspaces of different shapes
/// (leveled, tiered, everything separated), with snapshots, flushes, compactions, GC and
/// reopens, each keyspace checked against its model.
#[test]
fn three_keyspaces_follow_their_models_through_flush_compaction_gc_and_reopen() {
    let fs = Arc::new(MemFs::new());
    let open = || Db::open("/model", options(fs.clone()).min_separated_value_bytes(64)).expect("open");
    let mut db = open();
    let shapes = [
        ("lev", Options::default()),
        ("tier", Options::default().merge_policy(MergePolicy::tiering(3))),
        ("sep", Options::default().min_separated_value_bytes(0)),
    ];
    let mut models = Models::new();
    models.insert("default".into(), Model::new());
    for (name, o) in &shapes {
        db.create_keyspace(name, o.clone().write_buffer_bytes(4 << 10)).expect("create");
        models.insert(name.to_string(), Model::new());
    }
    let mut rng = StdRng::seed_from_u64(7);
    let names: Vec<String> = models.keys().cloned().collect();
    for round in 0..3000u64 {
        let name = &names[rng.gen_range(0..names.len())];
        let ks = db.keyspace(name).expect("keyspace");
        let k = format!("k{:04}", rng.gen_range(0..300)).into_bytes();
        match rng.gen_range(0..10) {
            0..=5 => {
                let v = make_value(&k, round, if rng.gen_bool(0.3) { 300 } else { 20 });
                ks.put(&k, &v).expect("put");
                models.get_mut(name).expect("model").insert(k, v);
            }
            6 | 7 => {
                ks.delete(&k).expect("delete");
                models.get_mut(name).expect("model").remove(&k);
            }
            _ => {
                let mut batch = WriteBatch::new();
                for other in names.iter().take(rng.gen_range(1..=names.len())) {
                    let o = db.keyspace(other).expect("keyspace");
                    let v = make_value(&k, round, 100);
                    batch.put_in(&o, &k, &v);
                    models.get_mut(other).expect("model").insert(k.clone(), v);
                }
                db.write(&WriteOptions::default(), &batch).expect("batch");
            }
        }
        match round % 1000 {
            333 => db.flush().expect("flush"),
            666 => {
                for name in &names {
                    db.keyspace(name).expect("ks").compact_range(None, None).expect("compact");
                }
                db.run_gc(0.0).expect("gc");
            }
            999 => {
                drop(db);
                db = open();
            }
            _ => {}
        }
    }
    check(&db, &models, "after the load");
    // A snapshot sees every keyspace at one sequence number.
    let snap = db.snapshot();
    let before = models.clone();
    for name in &names {
        db.keyspace(name).expect("ks").put("k0000", "after the snapshot").expect("put");
    }
    let ro = ReadOptions { snapshot: Some(snap), ..Default::default() };
    let pairs: Vec<(Keyspace, &str)> = names.iter().map(|n| (db.keyspace(n).expect("ks"), "k0000")).collect();
    let refs: Vec<(&Keyspace, &str)> = pairs.iter().map(|(k, key)| (k, *key)).collect();
    let got = db.multi_get_in(&ro, &refs).expect("multi_get_in");
    for (name, v) in names.iter().zip(got) {
        assert_eq!(v.map(|v| v.to_vec()), before[name].get(&b"k0000"[..]).cloned(), "{name} at the snapshot");
    }
    db.wait_for_background_work().expect("settle");
    let report = db.verify().expect("verify");
    assert!(report.is_healthy(), "{report}");
}

#[test]
fn a_dropped_keyspaces_tables_are_deleted_and_its_values_become_garbage_for_gc() {
    let fs = Arc::new(MemFs::new());
    let db =
        Db::open("/drop", options(fs.clone()).min_separated_value_bytes(64).log_file_bytes(64 << 10)).expect("open");
    let doomed = db.create_keyspace("doomed", Options::default().min_separated_value_bytes(64)).expect("create");
    for i in 0..400u32 {
        doomed.put(format!("k{i:04}"), vec![i as u8; 500]).expect("put");
        db.put(format!("k{i:04}"), "small").expect("put");
    }
    db.flush().expect("flush");
    let tables = |fs: &MemFs| {
        fs.list(std::path::Path::new("/drop")).expect("list").iter().filter(|n| n.ends_with(".sst")).count()
    };
    let before = tables(&fs);
    let garbage_before = db.stats().vlog_garbage_bytes;
    db.drop_keyspace("doomed").expect("drop");
    db.wait_for_background_work().expect("settle");
    // Once the background has forgotten it, a handle kept past the drop still says so.
    assert!(matches!(doomed.get("k0001"), Err(Error::KeyspaceDropped { ref name }) if name == "doomed"));
    assert!(matches!(doomed.put("k0001", "x"), Err(Error::KeyspaceDropped { .. })));
    let after = db.stats();
    assert!(tables(&fs) < before, "the dropped keyspace's tables are deleted: {before} -> {}", tables(&fs));
    assert!(
        after.vlog_garbage_bytes >= garbage_before + 400 * 500,
        "its separated values count as garbage: {garbage_before} -> {}",
        after.vlog_garbage_bytes
    );
    let gc = db.run_gc(0.5).expect("gc");
    assert!(gc.files_collected > 0, "GC collects the dropped keyspace's values: {gc:?}");
    for i in (0..400u32).step_by(37) {
        assert_eq!(db.get(format!("k{i:04}")).expect("get").as_deref(), Some(&b"small"[..]));
    }
    drop(db);
    let db = Db::open("/drop", options(fs)).expect("reopen");
    assert_eq!(db.keyspaces(), vec!["default".to_string()]);
}

#[test]
fn range_and_prefix_walk_from_both_ends_without_overlap() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/range", options(fs)).expect("open");
    let ks = db.create_keyspace("r", Options::default()).expect("create");
    let keys: Vec<String> = (0..50).map(|i| format!("{}{i:02}", if i % 2 == 0 { "a" } else { "b" })).collect();
    for k in &keys {
        ks.put(k, k).expect("put");
    }
    let collect = |r: wisckey::Range| -> Vec<String> {
        r.map(|e| String::from_utf8(e.expect("entry").0).expect("utf8")).collect()
    };
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(collect(ks.range::<&str, _>(..).expect("range")), sorted);
    let want: Vec<String> = sorted.iter().filter(|k| k.as_str() >= "a10" && k.as_str() < "b05").cloned().collect();
    assert_eq!(collect(ks.range("a10".."b05").expect("range")), want);
    let inclusive: Vec<String> =
        sorted.iter().filter(|k| k.as_str() >= "a10" && k.as_str() <= "b05").cloned().collect();
    assert_eq!(collect(ks.range("a10"..="b05").expect("range")), inclusive);
    let b: Vec<String> = sorted.iter().filter(|k| k.starts_with('b')).cloned().collect();
    assert_eq!(collect(ks.prefix("b").expect("prefix")), b);
    assert_eq!(collect(ks.prefix("c").expect("prefix")), Vec::<String>::new());
    // Alternating ends meet in the middle: every key once.
    let mut r = ks.prefix("a").expect("prefix");
    let mut seen = Vec::new();
    loop {
        let front = r.next().map(|e| e.expect("entry").0);
        let back = r.next_back().map(|e| e.expect("entry").0);
        if front.is_none() && back.is_none() {
            break;
        }
        seen.extend(front.into_iter().chain(back));
    }
    seen.sort();
    let a: Vec<Vec<u8>> = sorted.iter().filter(|k| k.starts_with('a')).map(|k| k.clone().into_bytes()).collect();
    assert_eq!(seen, a);
    assert!(ks.range("b".."a").expect("empty range").next().is_none(), "a reversed range is empty");
}

/// A batch's ops: keyspace, key, and the value to put (`None`: delete).
type Ops = Vec<(&'static str, Vec<u8>, Option<Vec<u8>>)>;

/// One step of the crash script.
#[derive(Debug, Clone)]
enum Step {
    Create(&'static str),
    Drop(&'static str),
    /// Puts (`Some`) and deletes (`None`) in keyspaces, one batch.
    Batch(Ops, bool),
    Flush,
    Compact(&'static str),
    Reopen,
}

impl Step {
    fn is_durable(&self) -> bool {
        match self {
            Step::Batch(_, sync) => *sync,
            Step::Create(_) | Step::Drop(_) | Step::Flush => true,
            Step::Compact(_) | Step::Reopen => false,
        }
    }

    fn apply_to(&self, models: &mut Models) {
        match self {
            Step::Create(name) => {
                models.insert(name.to_string(), Model::new());
            }
            Step::Drop(name) => {
                models.remove(*name);
            }
            Step::Batch(ops, _) => {
                for (ks, k, v) in ops {
                    let m = models.get_mut(*ks).expect("model of a live keyspace");
                    match v {
                        Some(v) => m.insert(k.clone(), v.clone()),
                        None => m.remove(k),
                    };
                }
            }
            Step::Flush | Step::Compact(_) | Step::Reopen => {}
        }
    }
}

const CRASH_DB: &str = "/kscrash";

fn run_step(db: &mut Option<Db>, step: &Step, options: &Options) -> wisckey::Result<()> {
    let d = db.as_ref().ok_or(Error::Closed)?;
    match step {
        Step::Create(name) => d.create_keyspace(name, Options::default()).map(|_| ()),
        Step::Drop(name) => d.drop_keyspace(name),
        Step::Batch(ops, sync) => {
            let mut b = WriteBatch::new();
            for (ks, k, v) in ops {
                let ks = d.keyspace(ks)?;
                match v {
                    Some(v) => b.put_in(&ks, k, v),
                    None => b.delete_in(&ks, k),
                };
            }
            d.write(&WriteOptions { sync: *sync }, &b)
        }
        Step::Flush => d.flush(),
        Step::Compact(name) => d.keyspace(name)?.compact_range(None, None),
        Step::Reopen => {
            db.take().expect("open").close()?;
            *db = Some(Db::open(CRASH_DB, options.clone())?);
            Ok(())
        }
    }
}

fn all_contents(db: &Db) -> Models {
    db.keyspaces().into_iter().map(|n| (n.clone(), contents(&db.keyspace(&n).expect("keyspace")))).collect()
}

fn script() -> Vec<Step> {
    let v = |i: u64, len: usize| Some(make_value(format!("v{i}").as_bytes(), i, len));
    let k = |s: &str| s.as_bytes().to_vec();
    vec![
        Step::Batch(vec![("default", k("d0"), v(0, 30))], false),
        Step::Create("a"),
        Step::Batch(vec![("a", k("a0"), v(1, 1500)), ("default", k("d1"), v(2, 30))], true),
        Step::Create("b"),
        Step::Batch(vec![("a", k("a1"), v(3, 40)), ("b", k("b0"), v(4, 1600)), ("default", k("d0"), None)], false),
        Step::Flush,
        Step::Batch(vec![("b", k("b1"), v(5, 20)), ("a", k("a0"), None)], true),
        Step::Compact("a"),
        Step::Drop("a"),
        Step::Batch(vec![("b", k("b2"), v(6, 1700)), ("default", k("d2"), v(7, 30))], false),
        Step::Reopen,
        Step::Create("c"),
        Step::Batch(vec![("c", k("c0"), v(8, 30)), ("b", k("b0"), None)], true),
        Step::Batch(vec![("c", k("c1"), v(9, 2000))], false),
    ]
}

fn crash_options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .write_buffer_bytes(1 << 20)
        .l0_compaction_trigger(8)
        .block_size_bytes(512)
        .min_separated_value_bytes(1024)
        .gc_interval_ms(0)
}

/// A crash at every filesystem call of the script, in every crash mode: the recovered
/// keyspaces and their contents are those after some prefix of the attempted steps that
/// includes every durable one — a cross-keyspace batch is whole or absent, a created or
/// dropped keyspace is there or not as a whole.
#[test]
fn a_crash_at_every_step_of_keyspace_create_drop_and_cross_keyspace_batches_keeps_a_whole_prefix() {
    let steps = script();
    // Count the filesystem calls of a clean run.
    let total = {
        let fs = FaultFs::in_memory(1);
        let options = crash_options(&fs);
        let mut db = Some(Db::open(CRASH_DB, options.clone()).expect("open"));
        for s in &steps {
            run_step(&mut db, s, &options).expect("clean run");
        }
        fs.ops_count()
    };
    let mut checked = 0;
    for (at, mode) in crash_points(total, u64::MAX) {
        let fs = halting_after(at);
        let options = crash_options(&fs);
        let mut models = vec![Models::from([("default".to_string(), Model::new())])];
        let mut floor = 0;
        let mut db = Db::open(CRASH_DB, options.clone()).ok();
        if db.is_some() {
            for step in &steps {
                let mut next = models.last().expect("models").clone();
                step.apply_to(&mut next);
                models.push(next);
                match run_step(&mut db, step, &options) {
                    Ok(()) if step.is_durable() => floor = models.len() - 1,
                    Ok(()) => {}
                    Err(e) => {
                        assert!(fs.is_halted(), "crash point {at}: {step:?} failed without a fault: {e}");
                        break;
                    }
                }
            }
        }
        fs.halt();
        drop(db);
        fs.crash(mode).expect("crash");
        let db =
            Db::open(CRASH_DB, options.clone()).unwrap_or_else(|e| panic!("crash point {at} ({mode:?}): reopen: {e}"));
        prefix_state(&models, floor, &all_contents(&db), &format!("crash point {at} ({mode:?})"));
        checked += 1;
    }
    assert!(checked > 20, "only {checked} crash points");
}

#[test]
fn keyspace_changes_queued_behind_synced_writers_take_effect_every_time() {
    // A create or drop waits in the write queue like a write; behind a synced writer leading a
    // group it must still run, not be acknowledged as part of that group.
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/queued", options(fs)).expect("open");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let missed = std::thread::scope(|s| {
        for t in 0..3 {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    db.put_opt(&WriteOptions::synced(), format!("w{t}-{i}"), "v").expect("synced put");
                    i += 1;
                }
            });
        }
        let mut missed = Vec::new();
        for round in 0..150 {
            let name = format!("q{}", round % 3);
            if db.create_keyspace(&name, Options::default()).is_err() || !db.keyspaces().contains(&name) {
                missed.push(format!("round {round}: {name} was not created"));
                break;
            }
            if db.drop_keyspace(&name).is_err() || db.keyspaces().contains(&name) {
                missed.push(format!("round {round}: {name} was not dropped"));
                break;
            }
        }
        // Stopped before the scope joins the writers, whatever the rounds found.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        missed
    });
    assert!(missed.is_empty(), "{missed:?}");
}
