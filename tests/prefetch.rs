//! Parallel value reads: iterator read-ahead and `multi_get`, with io_uring and with the thread
//! pool, on real files and in memory. Every result is compared with a `BTreeMap` model: random
//! puts, overwrites and deletes of inline and separated values; cursors walking forward,
//! backward, turning around and seeking, within bounds and under snapshots; scans racing GC and
//! overwrites; values still in the log buffer; and damaged value-log bytes, which must come back
//! as `Corruption`, never as data.

mod common;

use std::ops::Bound;
use std::sync::{Arc, Mutex};

use common::{assert_same_entries, check_at, make_value, model_range, read_backward, read_forward, show, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{FaultFs, MemFs, PosixFs, Vfs};
use wisckey::{Db, Error, Options, PrepopulateValueCache, ReadOptions, Snapshot};

/// Values of at least this many bytes are separated.
const SEPARATED: usize = 100;
const KEYS: u32 = 600;
/// Depths tried: off, one value, small, the default.
const DEPTHS: [usize; 4] = [0, 1, 4, ReadOptions::DEFAULT_READAHEAD_VALUES];

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Reads here exercise the value log: flushed values are not handed to the value cache.
fn options(vfs: Arc<dyn Vfs>, io_uring: bool) -> Options {
    common::small_log_options(vfs, SEPARATED).io_uring(io_uring).prepopulate_value_cache(PrepopulateValueCache::Off)
}

/// Where a database under test lives: real files (io_uring on or off) or memory.
enum Place {
    Posix(tempfile::TempDir, bool),
    Mem(Arc<MemFs>),
}

impl Place {
    fn all() -> Vec<Place> {
        let tmp = || tempfile::tempdir().expect("tempdir");
        vec![Place::Posix(tmp(), true), Place::Posix(tmp(), false), Place::Mem(Arc::new(MemFs::new()))]
    }

    fn open(&self) -> Db {
        let db = match self {
            Place::Posix(dir, uring) => Db::open(dir.path().join("db"), options(Arc::new(PosixFs::new()), *uring)),
            Place::Mem(fs) => Db::open("/db", options(fs.clone(), true)),
        }
        .expect("open");
        if let Place::Posix(_, false) = self {
            assert!(!db.uses_io_uring(), "io_uring was turned off");
        }
        db
    }

    fn name(&self) -> String {
        match self {
            Place::Posix(_, true) => "posix+io_uring".into(),
            Place::Posix(_, false) => "posix+pool".into(),
            Place::Mem(_) => "memfs".into(),
        }
    }
}

/// Random writes: a third of the keys separated, the rest inline; overwrites switch between
/// the two; deletes; flushes now and then so the data spreads over tables, the memtable and
/// the log buffer. Returns the model and a snapshot (with its model) taken halfway.
fn load(db: &Db, rng: &mut StdRng, ops: u32) -> (Model, Snapshot, Model) {
    let mut model = Model::new();
    let mut snap = None;
    for n in 0..ops {
        let i = rng.gen_range(0..KEYS);
        let k = key(i);
        if rng.gen_ratio(1, 6) {
            db.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            let len =
                if rng.gen_ratio(1, 2) { rng.gen_range(SEPARATED..SEPARATED * 4) } else { rng.gen_range(1..SEPARATED) };
            let v = make_value(&k, u64::from(n), len);
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        if n == ops / 2 {
            snap = Some((db.snapshot(), model.clone()));
        }
        if n % 700 == 699 {
            db.flush().expect("flush");
        }
    }
    let (s, m) = snap.expect("snapshot taken");
    (model, s, m)
}

fn ro(snap: Option<&Snapshot>, depth: usize) -> ReadOptions {
    ReadOptions { snapshot: snap.cloned(), readahead_values: depth, ..ReadOptions::default() }
}

/// The model's neighbour of `k` in direction `forward` (within `[lo, hi)`).
fn model_step(model: &Model, k: &[u8], forward: bool, lo: &[u8], hi: &[u8]) -> Option<Vec<u8>> {
    let next = if forward {
        model.range::<[u8], _>((Bound::Excluded(k), Bound::Excluded(hi))).next()
    } else {
        model.range::<[u8], _>((Bound::Included(lo), Bound::Excluded(k))).next_back()
    };
    next.map(|(k, _)| k.clone())
}

/// Seeks, then runs of nexts and prevs long enough for read-ahead to ramp up, turning around
/// in the middle of a read-ahead window, each step checked against the model.
fn random_walk(db: &Db, ro: &ReadOptions, model: &Model, rng: &mut StdRng, ctx: &str) {
    let lo = ro.lower_bound.clone().unwrap_or_default();
    let hi = ro.upper_bound.clone().unwrap_or_else(|| vec![0xff; 9]);
    let mut it = db.iter(ro).expect("iter");
    let mut at: Option<Vec<u8>> = None;
    for round in 0..30 {
        let ctx = format!("{ctx} round {round}");
        match rng.gen_range(0..4) {
            0 => {
                let target = key(rng.gen_range(0..KEYS));
                it.seek(&target).expect("seek");
                let from = target.max(lo.clone());
                at = if from >= hi {
                    None
                } else {
                    model
                        .range::<[u8], _>((Bound::Included(&from[..]), Bound::Excluded(&hi[..])))
                        .next()
                        .map(|e| e.0.clone())
                };
            }
            1 => {
                it.seek_to_first().expect("seek_to_first");
                at = model
                    .range::<[u8], _>((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])))
                    .next()
                    .map(|e| e.0.clone());
            }
            2 => {
                it.seek_to_last().expect("seek_to_last");
                at = model
                    .range::<[u8], _>((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])))
                    .next_back()
                    .map(|e| e.0.clone());
            }
            _ => {}
        }
        check_at(&it, model, at.as_ref(), &format!("{ctx} after seek"));
        let forward = rng.gen_bool(0.5);
        for step in 0..rng.gen_range(1..80) {
            let Some(cur) = at.clone() else { break };
            if forward {
                it.next().expect("next");
            } else {
                it.prev().expect("prev");
            }
            at = model_step(model, &cur, forward, &lo, &hi);
            check_at(&it, model, at.as_ref(), &format!("{ctx} step {step} forward={forward}"));
        }
    }
}

#[test]
fn cursors_match_the_model_with_read_ahead_on_and_off_and_each_engine() {
    for place in Place::all() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let db = place.open();
        let (model, snap, snap_model) = load(&db, &mut rng, 3000);
        for depth in DEPTHS {
            let ctx = format!("{} depth {depth}", place.name());
            for (view, snap, m) in [("latest", None, &model), ("snapshot", Some(&snap), &snap_model)] {
                let r = ro(snap, depth);
                let want = model_range(m, None, None);
                assert_same_entries(&read_forward(&db, &r).expect("forward"), &want, &format!("{ctx} {view} forward"));
                let mut back = read_backward(&db, &r).expect("backward");
                back.reverse();
                assert_same_entries(&back, &want, &format!("{ctx} {view} backward"));
                random_walk(&db, &r, m, &mut rng, &format!("{ctx} {view} walk"));
            }
            let bounded = ReadOptions { lower_bound: Some(key(150)), upper_bound: Some(key(420)), ..ro(None, depth) };
            let want = model_range(&model, Some(&key(150)), Some(&key(420)));
            assert_same_entries(&read_forward(&db, &bounded).expect("forward"), &want, &format!("{ctx} bounded"));
            let mut back = read_backward(&db, &bounded).expect("backward");
            back.reverse();
            assert_same_entries(&back, &want, &format!("{ctx} bounded backward"));
            random_walk(&db, &bounded, &model, &mut rng, &format!("{ctx} bounded walk"));
        }
    }
}

#[test]
fn multi_get_matches_get_for_present_absent_deleted_and_buffered_values() {
    for place in Place::all() {
        let mut rng = StdRng::seed_from_u64(7);
        let db = place.open();
        let (mut model, snap, snap_model) = load(&db, &mut rng, 2000);
        // The latest writes stay in the log writer's buffer (no sync, buffer not full): their
        // values are in no file yet.
        for i in (0..KEYS).step_by(9) {
            let k = key(i);
            let v = make_value(&k, 1_000_000 + u64::from(i), SEPARATED * 2);
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        let keys: Vec<Vec<u8>> = (0..KEYS + 20).map(key).chain([b"".to_vec(), b"zzz".to_vec()]).collect();
        for depth in DEPTHS {
            for (view, snap, m) in [("latest", None, &model), ("snapshot", Some(&snap), &snap_model)] {
                let ctx = format!("{} depth {depth} {view}", place.name());
                let r = ro(snap, depth);
                for batch in keys.chunks(37) {
                    let refs: Vec<&[u8]> = batch.iter().map(|k| k.as_slice()).collect();
                    let got = db.multi_get(&r, &refs).expect("multi_get");
                    assert_eq!(got.len(), batch.len(), "{ctx}: one answer per key");
                    for (k, g) in batch.iter().zip(&got) {
                        assert!(g.as_deref() == m.get(k).map(Vec::as_slice), "{ctx}: multi_get of {}", show(k));
                        assert_eq!(g, &db.get_opt(&r, k).expect("get"), "{ctx}: multi_get vs get of {}", show(k));
                    }
                }
            }
        }
        // Duplicates and an empty batch.
        let k = key(9);
        let got = db.multi_get(&ReadOptions::default(), &[&k, &k]).expect("multi_get");
        assert!(got[0].as_deref() == model.get(&k).map(Vec::as_slice) && got[0] == got[1]);
        assert!(db.multi_get::<&[u8]>(&ReadOptions::default(), &[]).expect("empty").is_empty());
    }
}

/// A writer overwrites and deletes (separated and inline values) while GC collects and
/// reorganizes the value log; readers take a view (a snapshot or an iterator) together with
/// the model at that moment and must read exactly that view, however long they take.
#[test]
fn scans_read_their_view_while_gc_and_overwrites_run() {
    for place in [Place::Posix(tempfile::tempdir().expect("tempdir"), true), Place::Mem(Arc::new(MemFs::new()))] {
        let db = place.open();
        let mut rng = StdRng::seed_from_u64(99);
        let (model, _, _) = load(&db, &mut rng, 1500);
        let shared = Mutex::new(model);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = StdRng::seed_from_u64(3);
                let mut n = 10_000_000u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for _ in 0..200 {
                        let i = rng.gen_range(0..KEYS);
                        let k = key(i);
                        let mut m = shared.lock().expect("model");
                        n += 1;
                        if rng.gen_ratio(1, 8) {
                            db.delete(&k).expect("delete");
                            m.remove(&k);
                        } else {
                            let v = make_value(&k, n, if i % 3 == 0 { 40 } else { SEPARATED * 2 });
                            db.put(&k, &v).expect("put");
                            m.insert(k, v);
                        }
                    }
                }
            });
            s.spawn(|| {
                for round in 0..6 {
                    db.compact_range(None, None).expect("compact");
                    db.run_gc(0.0).expect("gc");
                    if round % 3 == 2 {
                        db.reorganize_vlog().expect("reorganize");
                    }
                }
            });
            for round in 0..12 {
                let ctx = format!("{} round {round}", place.name());
                let depth = DEPTHS[round % DEPTHS.len()];
                // Take the view and the model under the writer's lock, so they agree.
                let (mut it, snap, want) = {
                    let m = shared.lock().expect("model");
                    (db.iter(&ro(None, depth)).expect("iter"), db.snapshot(), model_range(&m, None, None))
                };
                let mut got = Vec::new();
                it.seek_to_first().expect("seek");
                while it.valid() {
                    got.push((it.key().to_vec(), it.value().to_vec()));
                    // Slow reader: GC and the writer move on meanwhile.
                    if got.len() % 64 == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    it.next().expect("next");
                }
                assert_same_entries(&got, &want, &format!("{ctx} iterator"));
                drop(it);
                let mut back = read_backward(&db, &ro(Some(&snap), depth)).expect("backward");
                back.reverse();
                assert_same_entries(&back, &want, &format!("{ctx} snapshot backward"));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let m = shared.lock().expect("model").clone();
        assert_same_entries(&read_forward(&db, &ro(None, 32)).expect("final"), &model_range(&m, None, None), "final");
    }
}

fn assert_corruption<T: std::fmt::Debug>(r: wisckey::Result<T>, ctx: &str) {
    match r {
        Err(Error::Corruption { .. }) => {}
        other => panic!("{ctx}: expected Corruption, got {other:?}"),
    }
}

/// Read forward with read-ahead: every entry before the damaged one is right, the damaged one
/// is reported as corruption, and the iterator is then invalid.
fn scan_until_corruption(db: &Db, depth: usize, model: &Model, bad: &[u8], ctx: &str) {
    let mut it = db.iter(&ro(None, depth)).expect("iter");
    let mut r = it.seek_to_first();
    let mut seen = 0;
    while r.is_ok() && it.valid() {
        assert!(it.key() < bad, "{ctx}: reached {} past the damaged value", show(it.key()));
        assert!(it.value() == model[it.key()].as_slice(), "{ctx}: value of {}", show(it.key()));
        seen += 1;
        r = it.next();
    }
    assert_corruption(r, ctx);
    assert!(!it.valid(), "{ctx}: invalid after the error");
    assert_eq!(
        seen,
        model.range::<[u8], _>((Bound::Unbounded, Bound::Excluded(bad))).count(),
        "{ctx}: entries before the damage"
    );
}

/// Put keys 0..n in key order with values of `len` bytes; returns the model.
fn put_in_key_order(db: &Db, n: u32, len: usize) -> Model {
    let mut model = Model::new();
    for i in 0..n {
        let k = key(i);
        let v = make_value(&k, u64::from(i), len);
        db.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    model
}

/// Flip one byte in the middle of `value`, wherever it is in the database's logs, in place
/// (the file keeps its inode and page cache).
fn damage_value_in_logs(db_dir: &std::path::Path, value: &[u8]) {
    use std::os::unix::fs::FileExt;
    let needle = &value[..40];
    let mut hit = false;
    for entry in std::fs::read_dir(db_dir).expect("list") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "vlog") {
            let bytes = std::fs::read(&p).expect("read");
            if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
                let f = std::fs::OpenOptions::new().write(true).open(&p).expect("open for write");
                f.write_all_at(&[bytes[at + 100] ^ 0x20], (at + 100) as u64).expect("write");
                hit = true;
            }
        }
    }
    assert!(hit, "the value to damage is not in the logs");
}

#[test]
fn a_damaged_value_under_read_ahead_is_corruption_not_data() {
    for uring in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let open = || Db::open(&path, options(Arc::new(PosixFs::new()), uring)).expect("open");
        let db = open();
        let model = put_in_key_order(&db, 300, SEPARATED * 3);
        db.flush().expect("flush");
        db.close().expect("close");
        let bad = key(200);
        damage_value_in_logs(&path, &model[&bad]);
        let db = open();
        for depth in DEPTHS {
            let ctx = format!("io_uring={uring} depth {depth}");
            scan_until_corruption(&db, depth, &model, &bad, &ctx);
            let mut it = db.iter(&ro(None, depth)).expect("iter");
            it.seek_to_last().expect("seek_to_last");
            let mut r = Ok(());
            while r.is_ok() && it.valid() {
                assert!(it.key() > bad.as_slice(), "{ctx}: reverse scan reached {}", show(it.key()));
                assert!(it.value() == model[it.key()].as_slice(), "{ctx}: value of {}", show(it.key()));
                r = it.prev();
            }
            assert_corruption(r, &format!("{ctx} reverse"));
            let keys = [key(199), bad.clone(), key(201)];
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            assert_corruption(db.multi_get(&ro(None, depth), &refs), &format!("{ctx} multi_get"));
        }
    }
}

/// Warm scans read most values through the vLog files' memory mappings (read-ahead paused for
/// cached values): they must still match the model in both directions and still report a
/// damaged value as corruption, never as data.
#[test]
fn warm_scans_through_mapped_logs_match_the_model_and_catch_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let open = || Db::open(&path, options(Arc::new(PosixFs::new()), true)).expect("open");
    let db = open();
    let model = put_in_key_order(&db, 3000, SEPARATED * 2);
    db.flush().expect("flush");
    for round in 0..2 {
        common::assert_view_matches(&db, &ReadOptions::default(), &model, &format!("warm round {round}"));
        let mut it = db.iter(&ReadOptions::default()).expect("iter");
        it.seek_to_last().expect("seek_to_last");
        let mut expect = model.iter().rev();
        while it.valid() {
            let (k, v) = expect.next().expect("the scan went past the model");
            assert_eq!((it.key(), it.value()), (k.as_slice(), v.as_slice()), "reverse round {round}");
            it.prev().expect("prev");
        }
        assert!(expect.next().is_none(), "the reverse scan stopped early");
    }
    db.close().expect("close");
    let bad = key(2500);
    damage_value_in_logs(&path, &model[&bad]);
    let db = open();
    // Scans starting one key apart reach the damaged value at every phase of the probe cycle,
    // so most of them read it through the mapping (one in PROBE_EVERY through the probe).
    for start in 0..10 {
        let ctx = format!("scan from key {start}");
        let ro = ReadOptions { lower_bound: Some(key(start)), ..ReadOptions::default() };
        let mut it = db.iter(&ro).expect("iter");
        let mut r = it.seek_to_first();
        let mut seen = 0;
        while r.is_ok() && it.valid() {
            assert!(it.key() < bad.as_slice(), "{ctx}: reached {} past the damaged value", show(it.key()));
            assert!(it.value() == model[it.key()].as_slice(), "{ctx}: value of {}", show(it.key()));
            seen += 1;
            r = it.next();
        }
        assert_corruption(r, &ctx);
        assert_eq!(seen, 2500 - start, "{ctx}: entries before the damage");
    }
}

/// FaultFs flips bits in some value reads (the same ones every time). Read-ahead through the
/// thread pool must report each damaged value as corruption when the cursor reaches it, and
/// return every other value intact.
#[test]
fn flipped_bits_in_value_reads_through_the_pool_are_caught() {
    let fs = Arc::new(FaultFs::in_memory(11));
    let db = Db::open("/db", options(fs.clone(), true)).expect("open");
    let mut model = Model::new();
    for i in 0..KEYS {
        let k = key(i);
        let v = make_value(&k, u64::from(i), SEPARATED * 2);
        db.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    db.flush().expect("flush");
    fs.set_read_corruption(0.02, Some(".vlog"));
    let all = b"\xff\xff".to_vec();
    let mut damaged_at_depth = Vec::new();
    for depth in DEPTHS {
        let (mut damaged, mut good) = (Vec::new(), 0);
        let mut it = db.iter(&ro(None, depth)).expect("iter");
        // The key the cursor is moving to, per the model.
        let mut expected = model.keys().next().cloned();
        let mut r = it.seek_to_first();
        while let Some(want) = expected.clone() {
            match r {
                Err(Error::Corruption { .. }) => {
                    damaged.push(want.clone());
                    expected = model_step(&model, &want, true, b"", &all);
                    r = match &expected {
                        Some(k) => it.seek(k),
                        None => Ok(()),
                    };
                }
                Err(e) => panic!("depth {depth}: unexpected error {e}"),
                Ok(()) => {
                    assert!(it.valid(), "depth {depth}: invalid before {}", show(&want));
                    assert_eq!(show(it.key()), show(&want), "depth {depth}");
                    assert!(it.value() == model[&want].as_slice(), "depth {depth}: value of {}", show(&want));
                    good += 1;
                    expected = model_step(&model, &want, true, b"", &all);
                    r = it.next();
                }
            }
        }
        assert!(!damaged.is_empty() && good > 0, "depth {depth}: {} damaged, {good} good", damaged.len());
        damaged_at_depth.push(damaged);
    }
    // The damage is in the stored bytes' reads, not in how they were read.
    assert!(damaged_at_depth.windows(2).all(|w| w[0] == w[1]), "{damaged_at_depth:?}");
}

#[test]
fn io_uring_can_be_turned_off_and_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let off = Db::open(dir.path().join("a"), options(Arc::new(PosixFs::new()), false)).expect("open");
    assert!(!off.uses_io_uring());
    let on = Db::open(dir.path().join("b"), options(Arc::new(PosixFs::new()), true)).expect("open");
    eprintln!("io_uring available here: {}", on.uses_io_uring());
}
