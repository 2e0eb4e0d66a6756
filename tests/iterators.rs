//! Iterators over a database spread across the memtable, L0 tables and compacted levels, with
//! overwrites, deletions and snapshots: forward, backward, seeks, direction changes, bounds,
//! and the `scan`/`scan_rev` Rust iterators, each step compared against a `BTreeMap` model.

mod common;

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use common::{assert_view_matches, check_at, make_value, show, tiny_options, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{MemFs, PosixFs, Vfs};
use wisckey::{Db, Options, ReadOptions, Snapshot};

const KEYS: u32 = 400;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// A database under test with its model and the way to reopen it.
struct Layered {
    db: Db,
    model: Model,
    version: u64,
}

impl Layered {
    fn put(&mut self, i: u32) {
        self.version += 1;
        let k = key(i);
        let len = if i.is_multiple_of(11) { 2000 } else { 24 };
        let v = make_value(&k, self.version, len);
        self.db.put(&k, &v).expect("put");
        self.model.insert(k, v);
    }

    fn delete(&mut self, i: u32) {
        let k = key(i);
        self.db.delete(&k).expect("delete");
        self.model.remove(&k);
    }

    fn snapshot(&self) -> (Snapshot, Model) {
        (self.db.snapshot(), self.model.clone())
    }
}

/// Build: a compacted base level, overwrites/deletes in newer tables, snapshots between the
/// layers, and unflushed overwrites/deletes/re-inserts in the memtable.
fn build_layered(path: &Path, options: Options) -> (Layered, Vec<(Snapshot, Model)>) {
    let db = Db::open(path, options).expect("open");
    let mut l = Layered { db, model: Model::new(), version: 0 };
    let mut snaps = Vec::new();
    for i in 0..KEYS {
        l.put(i);
    }
    l.db.flush().expect("flush");
    l.db.compact_range(None, None).expect("compact");
    for i in (0..KEYS).step_by(3) {
        l.put(i);
    }
    for i in (0..KEYS).step_by(5) {
        l.delete(i);
    }
    l.db.flush().expect("flush");
    snaps.push(l.snapshot());
    // A long run of tombstones: iterators must skip it in both directions.
    for i in 100..180 {
        l.delete(i);
    }
    for i in (1..KEYS).step_by(7) {
        l.put(i);
    }
    l.db.flush().expect("flush");
    snaps.push(l.snapshot());
    for i in (0..KEYS).step_by(10) {
        l.put(i); // re-insert keys deleted in the tables below
    }
    for i in (2..KEYS).step_by(13) {
        l.delete(i);
    }
    for i in KEYS..KEYS + 20 {
        l.put(i); // keys only in the memtable, past the tables' ranges
    }
    let st = l.db.stats();
    eprintln!(
        "layered database: {} flushes, {} compactions, files per level {:?}",
        st.num_flushes, st.num_compactions, st.level_files
    );
    assert!(st.num_flushes >= 3, "the data did not spread over tables: {st:?}");
    // Iterators must merge several sources: runs (levels under leveling, runs of one level under
    // tiering), or — when a policy's eager merges left a single run (lazy leveling merges every
    // spill into its largest level) — that run and the memtable's unflushed keys.
    let runs = st.level_runs.iter().sum::<usize>();
    assert!(runs >= 2 || (runs == 1 && st.memtable_bytes > 0), "one source only: {st:?}");
    (l, snaps)
}

fn memfs_layered() -> (Layered, Vec<(Snapshot, Model)>) {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    build_layered(Path::new("/iter-db"), tiny_options(fs))
}

fn read_options(snap: Option<&Snapshot>) -> ReadOptions {
    ReadOptions { snapshot: snap.cloned(), ..ReadOptions::default() }
}

fn model_next(model: &Model, k: &[u8]) -> Option<Vec<u8>> {
    model.range::<[u8], _>((Bound::Excluded(k), Bound::Unbounded)).next().map(|(k, _)| k.clone())
}

fn model_prev(model: &Model, k: &[u8]) -> Option<Vec<u8>> {
    model.range::<[u8], _>((Bound::Unbounded, Bound::Excluded(k))).next_back().map(|(k, _)| k.clone())
}

fn model_seek(model: &Model, k: &[u8]) -> Option<Vec<u8>> {
    model.range::<[u8], _>((Bound::Included(k), Bound::Unbounded)).next().map(|(k, _)| k.clone())
}

/// Random seeks followed by random next/prev steps, compared with the model at every step.
fn random_walks(db: &Db, ro: &ReadOptions, model: &Model, seed: u64, ctx: &str) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut it = db.iter(ro).expect("iter");
    for walk in 0..25 {
        let mut at = match rng.gen_range(0..4) {
            0 => {
                it.seek_to_first().expect("seek_to_first");
                model.keys().next().cloned()
            }
            1 => {
                it.seek_to_last().expect("seek_to_last");
                model.keys().next_back().cloned()
            }
            _ => {
                // Existing keys, missing keys, and targets between keys ("k0100x").
                let mut t = key(rng.gen_range(0..KEYS + 40));
                if rng.gen_bool(0.3) {
                    t.push(b'x');
                }
                it.seek(&t).expect("seek");
                model_seek(model, &t)
            }
        };
        for step in 0..40 {
            let c = format!("{ctx} walk {walk} step {step}");
            check_at(&it, model, at.as_ref(), &c);
            let Some(cur) = at.clone() else { break };
            if rng.gen_bool(0.5) {
                it.next().expect("next");
                at = model_next(model, &cur);
            } else {
                it.prev().expect("prev");
                at = model_prev(model, &cur);
            }
        }
    }
}

#[test]
fn forward_and_backward_scans_across_memtable_tables_and_levels_match_model() {
    let (l, snaps) = memfs_layered();
    assert_view_matches(&l.db, &ReadOptions::default(), &l.model, "latest");
    for (i, (s, m)) in snaps.iter().enumerate() {
        assert_view_matches(&l.db, &read_options(Some(s)), m, &format!("snapshot {i}"));
    }
}

#[test]
fn random_seeks_and_direction_changes_match_model() {
    let (l, snaps) = memfs_layered();
    random_walks(&l.db, &ReadOptions::default(), &l.model, 1, "latest");
    for (i, (s, m)) in snaps.iter().enumerate() {
        random_walks(&l.db, &read_options(Some(s)), m, 100 + i as u64, &format!("snapshot {i}"));
    }
}

/// At every key: next, prev, prev, next — the switch of direction is where merging
/// iterators over several versions of a key usually go wrong.
#[test]
fn direction_switch_at_every_position_matches_model() {
    let (l, snaps) = memfs_layered();
    let mut views = vec![(read_options(None), l.model.clone())];
    views.extend(snaps.iter().map(|(s, m)| (read_options(Some(s)), m.clone())));
    for (v, (ro, model)) in views.iter().enumerate() {
        let mut it = l.db.iter(ro).expect("iter");
        for k in model.keys() {
            let ctx = format!("view {v} at {}", show(k));
            it.seek(k).expect("seek");
            check_at(&it, model, Some(k), &ctx);
            let next = model_next(model, k);
            it.next().expect("next");
            check_at(&it, model, next.as_ref(), &format!("{ctx} next"));
            if next.is_none() {
                continue;
            }
            it.prev().expect("prev");
            check_at(&it, model, Some(k), &format!("{ctx} next prev"));
            let prev = model_prev(model, k);
            it.prev().expect("prev");
            check_at(&it, model, prev.as_ref(), &format!("{ctx} next prev prev"));
            if prev.is_some() {
                it.next().expect("next");
                check_at(&it, model, Some(k), &format!("{ctx} next prev prev next"));
            }
        }
    }
}

#[test]
fn bounded_iteration_stays_inside_lower_and_upper_bound() {
    let (l, snaps) = memfs_layered();
    let mut rng = StdRng::seed_from_u64(7);
    for round in 0..30 {
        let lo = rng.gen_range(0..KEYS + 30);
        let hi = rng.gen_range(0..KEYS + 30);
        let (snap, model) = match round % 3 {
            0 => (None, &l.model),
            n => (Some(&snaps[n - 1].0), &snaps[n - 1].1),
        };
        let ro = ReadOptions {
            lower_bound: (round % 5 != 0).then(|| key(lo)),
            upper_bound: (round % 7 != 0).then(|| key(hi)),
            ..read_options(snap)
        };
        let ctx = format!(
            "round {round} bounds {:?}..{:?}",
            ro.lower_bound.as_deref().map(show),
            ro.upper_bound.as_deref().map(show)
        );
        assert_view_matches(&l.db, &ro, &bounded(model, &ro), &ctx);
        check_bounded_seeks(&l.db, &ro, &bounded(model, &ro), &ctx);
    }
}

/// The part of `model` inside the bounds of `ro`.
fn bounded(model: &Model, ro: &ReadOptions) -> Model {
    common::model_range(model, ro.lower_bound.as_deref(), ro.upper_bound.as_deref()).into_iter().collect()
}

/// Seeking below the lower bound lands on the first key in range; seeking at or past the
/// upper bound is invalid; stepping off either end is invalid.
fn check_bounded_seeks(db: &Db, ro: &ReadOptions, inside: &Model, ctx: &str) {
    let mut it = db.iter(ro).expect("iter");
    it.seek(b"").expect("seek");
    check_at(&it, inside, inside.keys().next(), &format!("{ctx}: seek below lower bound"));
    if it.valid() {
        it.prev().expect("prev");
        check_at(&it, inside, None, &format!("{ctx}: prev from the first key in bounds"));
    }
    if let Some(u) = &ro.upper_bound {
        it.seek(u).expect("seek");
        check_at(&it, inside, None, &format!("{ctx}: seek to the upper bound"));
    }
    it.seek_to_last().expect("seek_to_last");
    check_at(&it, inside, inside.keys().next_back(), &format!("{ctx}: seek_to_last"));
    if it.valid() {
        it.next().expect("next");
        check_at(&it, inside, None, &format!("{ctx}: next from the last key in bounds"));
    }
}

#[test]
fn open_iterator_keeps_its_view_while_writes_flushes_and_compactions_happen() {
    let (mut l, _snaps) = memfs_layered();
    let before = l.model.clone();
    let mut it = l.db.iter(&ReadOptions::default()).expect("iter");
    it.seek_to_first().expect("seek_to_first");
    for i in 0..KEYS + 20 {
        if i % 2 == 0 {
            l.delete(i);
        } else {
            l.put(i);
        }
    }
    l.db.flush().expect("flush");
    l.db.compact_range(None, None).expect("compact");
    let mut got = Vec::new();
    while it.valid() {
        got.push((it.key().to_vec(), it.value().to_vec()));
        it.next().expect("next");
    }
    let want: Vec<_> = before.into_iter().collect();
    common::assert_same_entries(&got, &want, "iterator created before the writes");
    assert_view_matches(&l.db, &ReadOptions::default(), &l.model, "latest after the writes");
}

#[test]
fn snapshot_sees_old_versions_after_overwrites_deletes_and_full_compaction() {
    let (mut l, mut snaps) = memfs_layered();
    snaps.push(l.snapshot());
    for i in 0..KEYS + 20 {
        if i % 3 == 0 {
            l.delete(i);
        } else {
            l.put(i);
        }
    }
    l.db.flush().expect("flush");
    l.db.compact_range(None, None).expect("compact");
    l.db.wait_for_background_work().expect("background work");
    for (i, (s, m)) in snaps.iter().enumerate() {
        assert_view_matches(&l.db, &read_options(Some(s)), m, &format!("snapshot {i} after compaction"));
    }
    // Releasing the snapshots lets compaction drop old versions; the latest view must not change.
    snaps.clear();
    l.db.compact_range(None, None).expect("compact");
    assert_view_matches(&l.db, &ReadOptions::default(), &l.model, "latest after releasing snapshots");
}

#[test]
fn snapshot_sequence_numbers_increase_with_writes() {
    let (mut l, _) = memfs_layered();
    let a = l.db.snapshot();
    l.put(1);
    let b = l.db.snapshot();
    assert!(b.sequence() > a.sequence(), "{} then {}", a.sequence(), b.sequence());
    let c = l.db.snapshot();
    assert_eq!(b.sequence(), c.sequence(), "no write between two snapshots");
}

#[test]
fn iterators_on_empty_database_are_invalid_everywhere() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let db = Db::open("/empty", tiny_options(fs)).expect("open");
    let mut it = db.iter(&ReadOptions::default()).expect("iter");
    it.seek_to_first().expect("seek_to_first");
    assert!(!it.valid());
    it.seek_to_last().expect("seek_to_last");
    assert!(!it.valid());
    it.seek(b"k").expect("seek");
    assert!(!it.valid());
    assert_eq!(db.scan(&ReadOptions::default()).expect("scan").count(), 0);
    assert_eq!(db.scan_rev(&ReadOptions::default()).expect("scan_rev").count(), 0);
    // Everything deleted: tombstones only.
    db.put(b"a", b"1").expect("put");
    db.put(b"b", b"2").expect("put");
    db.flush().expect("flush");
    db.delete(b"a").expect("delete");
    db.delete(b"b").expect("delete");
    assert_view_matches(&db, &ReadOptions::default(), &Model::new(), "all keys deleted");
}

#[test]
fn scans_on_posix_files_match_model_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let fs: Arc<dyn Vfs> = Arc::new(PosixFs::new());
    let (l, snaps) = build_layered(&path, tiny_options(fs.clone()));
    drop(snaps);
    let model = l.model.clone();
    l.db.close().expect("close");
    let db = Db::open(&path, tiny_options(fs)).expect("reopen");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after reopen");
    random_walks(&db, &ReadOptions::default(), &model, 9, "after reopen");
}

/// `scan` is lazy and ordered: taking a few items from a huge range is correct, and a
/// reverse scan with bounds yields exactly the bounded keys in descending order.
#[test]
fn scan_and_scan_rev_yield_ordered_bounded_entries() {
    let (l, _) = memfs_layered();
    let first: Vec<_> =
        l.db.scan(&ReadOptions::default())
            .expect("scan")
            .take(5)
            .map(|r| r.map(|(k, v)| (k, v.to_vec())))
            .collect::<wisckey::Result<_>>()
            .expect("scan items");
    let want: Vec<_> = l.model.iter().take(5).map(|(k, v)| (k.clone(), v.clone())).collect();
    common::assert_same_entries(&first, &want, "first five");
    let ro = ReadOptions { lower_bound: Some(key(50)), upper_bound: Some(key(250)), ..ReadOptions::default() };
    let rev = l.db.scan_rev(&ro).and_then(common::owned).expect("scan_rev");
    let want: Vec<_> = common::model_range(&l.model, Some(&key(50)), Some(&key(250))).into_iter().rev().collect();
    common::assert_same_entries(&rev, &want, "scan_rev within bounds");
}

/// LevelDB's read sampling: level-0 tables below the compaction trigger stay until scans have
/// read about a MiB per charge past them, then go down a level (every later seek merges fewer
/// runs); nothing a scan or a snapshot sees changes.
#[test]
fn long_scans_compact_level_0_tables_the_trigger_leaves_in_place() {
    let fs = Arc::new(MemFs::new());
    let opts = Options::default().vfs(fs).write_buffer_bytes(1 << 20).l0_compaction_trigger(8);
    let db = Db::open("/sampled", opts).expect("open");
    let mut model = Model::new();
    // Inline values, so the tables hold the bytes scans read; every flush overlaps the others.
    for round in 0..6u64 {
        for i in 0..300 {
            let k = key(i);
            let v = make_value(&k, round, 900);
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        db.flush().expect("flush");
    }
    db.wait_for_background_work().expect("settle");
    let l0 = db.stats().level_files[0];
    assert!((2..8).contains(&l0), "level 0 holds {l0} tables");
    let snap = db.snapshot();
    // A full scan passes every version, six of each key (~1.6 MB): 100 charges (the least a
    // table is allowed) take about 60 scans.
    let mut scans = 0;
    while db.stats().level_files[0] > 0 && scans < 2000 {
        let mut it = db.iter(&ReadOptions::default()).expect("iter");
        it.seek_to_first().expect("seek");
        while it.valid() {
            it.next().expect("next");
        }
        scans += 1;
        if scans % 100 == 0 {
            db.wait_for_background_work().expect("settle");
        }
    }
    db.wait_for_background_work().expect("settle");
    let st = db.stats();
    assert_eq!(st.level_files[0], 0, "level 0 still holds tables after {scans} scans: {st:?}");
    assert!(scans >= 30, "compacted after {scans} scans: sooner than a table's allowance");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after sampled compactions");
    let ro = ReadOptions { snapshot: Some(snap), ..ReadOptions::default() };
    assert_view_matches(&db, &ro, &model, "a snapshot taken before them");
}
