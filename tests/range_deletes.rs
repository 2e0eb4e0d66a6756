//! Range deletes (`delete_range`, range tombstones): random operation sequences over two
//! keyspaces checked against a `BTreeMap` per keyspace (point reads, `multi_get`, both
//! iterator directions, `range`, `prefix`, snapshots, flushes, compactions, reopens); each
//! merge policy and light-weight compaction carrying tombstones down and dropping them at the
//! bottom; covered values collected by GC; bad input; and a crash at every filesystem call of a
//! workload whose tombstones go through flushes and compactions.
//! Case count: env `PROPTEST_CASES` (default 24).

mod common;

use std::sync::Arc;

use common::crash_points::{crash_points, halting_after, prefix_state};
use common::{make_value, show, Model};
use proptest::prelude::*;
use wisckey::fs::{FaultFs, MemFs, Vfs};
use wisckey::{Db, Error, Keyspace, MergePolicy, Options, ReadOptions, Snapshot, WriteBatch, WriteOptions};

/// The keyspaces of the model test: the default one (leveling, or the env's policy) and a
/// tiered one.
const NAMES: [&str; 2] = ["default", "side"];

#[derive(Debug, Clone)]
enum Item {
    Put(Vec<u8>, usize),
    Delete(Vec<u8>),
    Range(Vec<u8>, Vec<u8>),
}

#[derive(Debug, Clone)]
enum Op {
    Write(usize, Item),
    Batch(Vec<(usize, Item)>),
    Get(usize, Vec<u8>),
    MultiGet(usize, Vec<Vec<u8>>),
    Range(usize, Vec<u8>, Vec<u8>, bool),
    Prefix(usize, Vec<u8>, bool),
    SeekWalk(usize, Vec<u8>, Vec<bool>),
    TakeSnapshot,
    ReadSnapshot(usize),
    ReleaseSnapshot(usize),
    Flush,
    Compact(usize),
    Reopen,
}

/// Keys `k00`..`k39`, and a few that are prefixes of others.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (0u8..40).prop_map(|i| format!("k{i:02}").into_bytes()),
        1 => prop_oneof![Just(b"k".to_vec()), Just(b"k1".to_vec()), Just(b"k15\0".to_vec()), Just(Vec::new())],
    ]
}

fn item() -> impl Strategy<Value = Item> {
    // Values of 10..40 bytes stay in the tree; 1100..1300 go to the value log.
    let len = prop_oneof![3 => 10usize..40, 1 => 1100usize..1300];
    prop_oneof![
        6 => (key(), len).prop_map(|(k, n)| Item::Put(k, n)),
        1 => key().prop_map(Item::Delete),
        2 => (key(), key()).prop_map(|(a, b)| if a <= b { Item::Range(a, b) } else { Item::Range(b, a) }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let ks = 0usize..2;
    prop_oneof![
        30 => (ks.clone(), item()).prop_map(|(s, i)| Op::Write(s, i)),
        4 => proptest::collection::vec((0usize..2, item()), 0..6).prop_map(Op::Batch),
        6 => (ks.clone(), key()).prop_map(|(s, k)| Op::Get(s, k)),
        2 => (ks.clone(), proptest::collection::vec(key(), 1..6)).prop_map(|(s, k)| Op::MultiGet(s, k)),
        3 => (ks.clone(), key(), key(), any::<bool>()).prop_map(|(s, a, b, r)| Op::Range(s, a, b, r)),
        2 => (ks.clone(), prop_oneof![Just(b"k".to_vec()), Just(b"k1".to_vec()), Just(b"k2".to_vec())], any::<bool>())
            .prop_map(|(s, p, r)| Op::Prefix(s, p, r)),
        3 => (ks.clone(), key(), proptest::collection::vec(any::<bool>(), 0..8)).prop_map(|(s, k, w)| Op::SeekWalk(s, k, w)),
        2 => Just(Op::TakeSnapshot),
        3 => any::<usize>().prop_map(Op::ReadSnapshot),
        1 => any::<usize>().prop_map(Op::ReleaseSnapshot),
        3 => Just(Op::Flush),
        2 => ks.prop_map(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

/// Apply `item` to `model` as the database applies it.
fn model_apply(model: &mut Model, item: &Item, value: impl FnOnce(&[u8], usize) -> Vec<u8>) {
    match item {
        Item::Put(k, n) => {
            model.insert(k.clone(), value(k, *n));
        }
        Item::Delete(k) => {
            model.remove(k);
        }
        Item::Range(b, e) => {
            let doomed: Vec<_> = model.range(b.clone()..e.clone()).map(|(k, _)| k.clone()).collect();
            for k in doomed {
                model.remove(&k);
            }
        }
    }
}

struct Harness {
    db: Option<Db>,
    handles: Vec<Keyspace>,
    options: Options,
    models: Vec<Model>,
    snapshots: Vec<(Snapshot, Vec<Model>)>,
    version: u64,
}

const PATH: &str = "/rdb";

impl Harness {
    fn new(policy: MergePolicy) -> Harness {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let options = common::tiny_options(fs).merge_policy(policy).target_file_size_bytes(1024).gc_interval_ms(0);
        let db = Db::open(PATH, options.clone()).expect("open");
        db.create_keyspace("side", options.clone().merge_policy(MergePolicy::tiering(3))).expect("create");
        let mut h = Harness {
            db: Some(db),
            handles: Vec::new(),
            options,
            models: vec![Model::new(); 2],
            snapshots: Vec::new(),
            version: 0,
        };
        h.open_handles();
        h
    }

    fn open_handles(&mut self) {
        let db = self.db.as_ref().expect("open");
        self.handles = NAMES.iter().map(|n| db.keyspace(n).expect("keyspace")).collect();
    }

    fn value(&mut self, k: &[u8], n: usize) -> Vec<u8> {
        self.version += 1;
        make_value(k, self.version, n)
    }

    fn write(&mut self, s: usize, item: &Item, ctx: &str) {
        let v = match item {
            Item::Put(k, n) => Some(self.value(k, *n)),
            _ => None,
        };
        let h = &self.handles[s];
        match item {
            Item::Put(k, _) => h.put(k, v.as_ref().expect("value")),
            Item::Delete(k) => h.delete(k),
            Item::Range(b, e) => h.delete_range(b, e),
        }
        .unwrap_or_else(|e| panic!("{ctx}: write failed: {e}"));
        model_apply(&mut self.models[s], item, |_, _| v.clone().expect("value"));
    }

    fn batch(&mut self, items: &[(usize, Item)], ctx: &str) {
        let mut b = WriteBatch::new();
        let mut after = self.models.clone();
        for (s, item) in items {
            let v = match item {
                Item::Put(k, n) => self.value(k, *n),
                _ => Vec::new(),
            };
            let h = &self.handles[*s];
            match item {
                Item::Put(k, _) => b.put_in(h, k, &v),
                Item::Delete(k) => b.delete_in(h, k),
                Item::Range(lo, hi) => b.delete_range_in(h, lo, hi),
            };
            model_apply(&mut after[*s], item, |_, _| v.clone());
        }
        self.db
            .as_ref()
            .expect("open")
            .write(&WriteOptions::default(), &b)
            .unwrap_or_else(|e| panic!("{ctx}: batch: {e}"));
        self.models = after;
    }

    fn apply(&mut self, op: &Op, ctx: &str) {
        match op {
            Op::Write(s, item) => self.write(*s, item, ctx),
            Op::Batch(items) => self.batch(items, ctx),
            Op::Get(s, k) => {
                let got = self.handles[*s].get(k).unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
                assert_eq!(got.as_deref(), self.models[*s].get(k).map(Vec::as_slice), "{ctx}: get {}", show(k));
            }
            Op::MultiGet(s, keys) => {
                check_multi_get(&self.handles[*s], &ReadOptions::default(), &self.models[*s], keys, ctx)
            }
            Op::Range(s, a, b, rev) => {
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let got = collect(self.handles[*s].range(lo.clone()..hi.clone()), *rev, ctx);
                let want: Vec<_> =
                    self.models[*s].range(lo.clone()..hi.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_same(got, want, *rev, &format!("{ctx}: range"));
            }
            Op::Prefix(s, p, rev) => {
                let got = collect(self.handles[*s].prefix(p), *rev, ctx);
                let want: Vec<_> = self.models[*s]
                    .iter()
                    .filter(|(k, _)| k.starts_with(p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_same(got, want, *rev, &format!("{ctx}: prefix"));
            }
            Op::SeekWalk(s, k, walk) => {
                seek_walk(&self.handles[*s], &ReadOptions::default(), &self.models[*s], k, walk, ctx)
            }
            Op::TakeSnapshot => {
                let snap = self.db.as_ref().expect("open").snapshot();
                self.snapshots.push((snap, self.models.clone()));
            }
            Op::ReadSnapshot(i) => {
                if !self.snapshots.is_empty() {
                    let (snap, models) = &self.snapshots[i % self.snapshots.len()];
                    let ro = ReadOptions { snapshot: Some(snap.clone()), ..ReadOptions::default() };
                    for (h, m) in self.handles.iter().zip(models) {
                        check_view(h, &ro, m, &format!("{ctx}: snapshot of {}", h.name()));
                    }
                }
            }
            Op::ReleaseSnapshot(i) => {
                if !self.snapshots.is_empty() {
                    let n = self.snapshots.len();
                    self.snapshots.remove(i % n);
                }
            }
            Op::Flush => self.db.as_ref().expect("open").flush().unwrap_or_else(|e| panic!("{ctx}: flush: {e}")),
            Op::Compact(s) => {
                self.handles[*s].compact_range(None, None).unwrap_or_else(|e| panic!("{ctx}: compact: {e}"))
            }
            Op::Reopen => self.reopen(ctx),
        }
    }

    fn reopen(&mut self, ctx: &str) {
        self.snapshots.clear();
        self.handles.clear();
        self.db.take().expect("open").close().unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
        let db = Db::open(PATH, self.options.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        db.open_keyspace("side", self.options.clone().merge_policy(MergePolicy::tiering(3))).expect("open keyspace");
        self.db = Some(db);
        self.open_handles();
    }

    fn check_all(&self, ctx: &str) {
        for (h, m) in self.handles.iter().zip(&self.models) {
            check_view(h, &ReadOptions::default(), m, &format!("{ctx}: {}", h.name()));
        }
    }
}

fn collect(r: wisckey::Result<wisckey::Range>, rev: bool, ctx: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let r = r.unwrap_or_else(|e| panic!("{ctx}: iterator: {e}"));
    let one = |e: wisckey::Result<(Vec<u8>, wisckey::Value)>| {
        let (k, v) = e.unwrap_or_else(|e| panic!("{ctx}: entry: {e}"));
        (k, v.to_vec())
    };
    match rev {
        false => r.map(one).collect(),
        true => r.rev().map(one).collect(),
    }
}

fn assert_same(mut got: Vec<(Vec<u8>, Vec<u8>)>, want: Vec<(Vec<u8>, Vec<u8>)>, rev: bool, ctx: &str) {
    if rev {
        got.reverse();
    }
    let keys = |v: &[(Vec<u8>, Vec<u8>)]| v.iter().map(|(k, _)| show(k)).collect::<Vec<_>>();
    assert_eq!(keys(&got), keys(&want), "{ctx}: keys (reverse: {rev})");
    assert!(got == want, "{ctx}: values differ");
}

/// Every entry of `h`'s view `ro` both ways, and a point read of every key that ever was.
fn check_view(h: &Keyspace, ro: &ReadOptions, model: &Model, ctx: &str) {
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for rev in [false, true] {
        assert_same(collect(h.range_opt::<&[u8], _>(ro, ..), rev, ctx), want.clone(), rev, ctx);
    }
    let mut it = h.iter(ro).unwrap_or_else(|e| panic!("{ctx}: iter: {e}"));
    it.seek_to_last().expect("seek_to_last");
    let mut back = Vec::new();
    while it.valid() {
        back.push((it.key().to_vec(), it.value().to_vec()));
        it.prev().expect("prev");
    }
    assert_same(back, want, true, &format!("{ctx}: cursor backward"));
    let keys: Vec<Vec<u8>> = (0u8..40).map(|i| format!("k{i:02}").into_bytes()).collect();
    check_multi_get(h, ro, model, &keys, ctx);
}

fn check_multi_get(h: &Keyspace, ro: &ReadOptions, model: &Model, keys: &[Vec<u8>], ctx: &str) {
    let got = h.multi_get(ro, keys).unwrap_or_else(|e| panic!("{ctx}: multi_get: {e}"));
    for (k, g) in keys.iter().zip(got) {
        assert_eq!(g.as_deref(), model.get(k).map(Vec::as_slice), "{ctx}: multi_get {}", show(k));
        let one = h.get_opt(ro, k).unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
        assert_eq!(one.as_deref(), model.get(k).map(Vec::as_slice), "{ctx}: get {}", show(k));
    }
}

/// Seek to `k`, then step (`true` next, `false` prev), each position checked with the model.
fn seek_walk(h: &Keyspace, ro: &ReadOptions, model: &Model, k: &[u8], walk: &[bool], ctx: &str) {
    let mut it = h.iter(ro).unwrap_or_else(|e| panic!("{ctx}: iter: {e}"));
    it.seek(k).expect("seek");
    let mut want = model.range(k.to_vec()..).next().map(|(k, _)| k.clone());
    for (i, &fwd) in walk.iter().enumerate() {
        assert_eq!(it.valid().then(|| it.key().to_vec()), want, "{ctx}: position after {i} steps");
        if !it.valid() {
            return;
        }
        let at = want.clone().expect("valid");
        if fwd {
            it.next().expect("next");
            want =
                model.range((std::ops::Bound::Excluded(at), std::ops::Bound::Unbounded)).next().map(|(k, _)| k.clone());
        } else {
            it.prev().expect("prev");
            want = model.range(..at).next_back().map(|(k, _)| k.clone());
        }
    }
    assert_eq!(it.valid().then(|| it.key().to_vec()), want, "{ctx}: final position");
}

fn run_model(ops: &[Op], policy: MergePolicy) {
    let mut h = Harness::new(policy);
    for (i, op) in ops.iter().enumerate() {
        h.apply(op, &format!("step {i} ({op:?})"));
    }
    h.check_all("final");
    h.reopen("final reopen");
    h.check_all("after reopen");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::env_u64("PROPTEST_CASES", 24) as u32))]

    #[test]
    fn range_deletes_over_two_keyspaces_match_a_model_per_keyspace(ops in proptest::collection::vec(op(), 1..90)) {
        run_model(&ops, common::merge_policy_from_env());
    }
}

/// Puts `n0..n1` of `p` keys, each value `len` bytes, in `h`.
fn fill(h: &Keyspace, model: &mut Model, range: std::ops::Range<u32>, round: u64, len: usize) {
    for i in range {
        let k = format!("p{i:04}").into_bytes();
        let v = make_value(&k, round, len);
        h.put(&k, &v).expect("put");
        model.insert(k, v);
    }
}

fn delete_range(h: &Keyspace, model: &mut Model, lo: u32, hi: u32) {
    let (b, e) = (format!("p{lo:04}").into_bytes(), format!("p{hi:04}").into_bytes());
    h.delete_range(&b, &e).expect("delete_range");
    model_apply(model, &Item::Range(b, e), |_, _| Vec::new());
}

/// Rounds of puts and range deletes under `policy` (with `lwc`), flushed and compacted; the
/// tree must agree with the model throughout, and a full compaction must leave no tombstone.
fn policy_scenario(policy: &str, lwc: bool) {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let options = common::tiny_options(fs)
        .merge_policy(policy.parse().expect("policy"))
        .light_weight_compaction(lwc)
        .target_file_size_bytes(2048)
        .gc_interval_ms(0);
    let db = Db::open("/p", options.clone()).expect("open");
    let h = db.keyspace("default").expect("default");
    let mut model = Model::new();
    let snap_models = {
        let mut snaps = Vec::new();
        for round in 0..8u64 {
            fill(&h, &mut model, 0..300, round, if round % 3 == 0 { 1200 } else { 30 });
            let lo = (round as u32 * 37) % 250;
            delete_range(&h, &mut model, lo, lo + 40);
            if round == 3 {
                snaps.push((db.snapshot(), model.clone()));
            }
            delete_range(&h, &mut model, 290 - round as u32 * 20, 300);
            db.flush().expect("flush");
            db.wait_for_background_work().expect("settle");
            check_view(&h, &ReadOptions::default(), &model, &format!("{policy} lwc={lwc} round {round}"));
        }
        snaps
    };
    for (snap, m) in &snap_models {
        let ro = ReadOptions { snapshot: Some(snap.clone()), ..ReadOptions::default() };
        check_view(&h, &ro, m, &format!("{policy} lwc={lwc}: snapshot"));
    }
    drop(snap_models);
    delete_range(&h, &mut model, 0, 150);
    db.compact_range(None, None).expect("compact");
    db.wait_for_background_work().expect("settle");
    check_view(&h, &ReadOptions::default(), &model, &format!("{policy} lwc={lwc}: after full compaction"));
    let st = db.stats();
    assert_eq!(
        st.level_range_tombstones.iter().sum::<u64>(),
        0,
        "{policy} lwc={lwc}: a full compaction with no snapshot keeps no tombstone"
    );
    drop(h);
    db.close().expect("close");
    let db = Db::open("/p", options).expect("reopen");
    check_view(
        &db.keyspace("default").expect("default"),
        &ReadOptions::default(),
        &model,
        &format!("{policy} reopened"),
    );
}

#[test]
fn tombstones_go_down_and_vanish_at_the_bottom_under_leveling() {
    policy_scenario("wacky:T=3,K=1,Z=1", false);
}

#[test]
fn tombstones_go_down_and_vanish_at_the_bottom_under_tiering() {
    policy_scenario("tiering:3", false);
}

#[test]
fn tombstones_go_down_and_vanish_at_the_bottom_under_lazy_leveling() {
    policy_scenario("wacky:T=3,K=1,Z=0", false);
}

#[test]
fn tombstones_go_down_and_vanish_at_the_bottom_under_bush() {
    policy_scenario("bush", false);
}

#[test]
fn tombstones_go_down_and_vanish_at_the_bottom_with_light_weight_compaction() {
    policy_scenario("leveling", true);
}

#[test]
fn values_a_range_tombstone_covers_are_garbage_for_gc() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let options = common::small_log_options(fs, 100).gc_interval_ms(0);
    let db = Db::open("/g", options).expect("open");
    let h = db.keyspace("default").expect("default");
    let mut model = Model::new();
    fill(&h, &mut model, 0..400, 1, 600);
    delete_range(&h, &mut model, 0, 360);
    db.flush().expect("flush");
    // Before any compaction drops them, GC's own liveness check finds them dead.
    let report = db.run_gc(0.0).expect("gc");
    eprintln!("{report:?}");
    check_view(&h, &ReadOptions::default(), &model, "after gc");
    assert!(report.files_collected > 0, "covered values make their files garbage: {report:?}");
    // 40 of 400 values are live: GC copies them and no covered one.
    assert!(report.bytes_rewritten * 5 < report.bytes_read, "GC kept covered values: {report:?}");
}

#[test]
fn a_reversed_range_is_an_error_and_an_empty_range_deletes_nothing() {
    let db = Db::open("/b", Options::default().vfs(Arc::new(MemFs::new()))).expect("open");
    db.put("b", "1").expect("put");
    let err = db.delete_range("c", "a").expect_err("begin past end");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let mut batch = WriteBatch::new();
    batch.put("x", "2").delete_range("z", "y");
    assert!(db.write(&WriteOptions::default(), &batch).is_err(), "a batch with a reversed range fails whole");
    assert_eq!(db.get("x").expect("get"), None, "nothing of the failed batch was written");
    db.delete_range("b", "b").expect("an empty range is a no-op");
    assert_eq!(db.get("b").expect("get").as_deref(), Some(&b"1"[..]));
    db.flush().expect("flush");
    assert_eq!(db.get("b").expect("get").as_deref(), Some(&b"1"[..]));
    db.delete_range("", "\u{ff}").expect("everything");
    assert_eq!(db.get("b").expect("get"), None);
    db.put("b", "3").expect("a write after the range delete");
    assert_eq!(db.get("b").expect("get").as_deref(), Some(&b"3"[..]));
}

// ---- crash enumeration ----

const CRASH_DB: &str = "/crashdb";

#[derive(Debug, Clone)]
enum Step {
    Put(Vec<u8>, Vec<u8>, bool),
    Range(Vec<u8>, Vec<u8>, bool),
    Flush,
    Compact,
}

fn crash_options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .write_buffer_bytes(1 << 20)
        .l0_compaction_trigger(8)
        .block_size_bytes(512)
        .compaction_threads(1)
        .gc_interval_ms(0)
}

fn crash_steps() -> Vec<Step> {
    let kv = |i: u32, round: u64, len: usize| {
        let k = format!("c{i:02}").into_bytes();
        let v = make_value(&k, round, len);
        (k, v)
    };
    let mut steps = Vec::new();
    for i in 0..20 {
        let (k, v) = kv(i, 1, if i % 5 == 0 { 1500 } else { 30 });
        steps.push(Step::Put(k, v, i == 19));
    }
    steps.push(Step::Flush);
    steps.push(Step::Range(b"c03".to_vec(), b"c08".to_vec(), false));
    steps.push(Step::Range(b"c12".to_vec(), b"c15".to_vec(), true));
    let (k, v) = kv(4, 2, 30);
    steps.push(Step::Put(k, v, false));
    steps.push(Step::Flush);
    steps.push(Step::Range(b"c00".to_vec(), b"c02".to_vec(), false));
    steps.push(Step::Compact);
    steps.push(Step::Range(b"c16".to_vec(), b"c30".to_vec(), true));
    let (k, v) = kv(17, 3, 30);
    steps.push(Step::Put(k, v, false));
    steps.push(Step::Flush);
    steps.push(Step::Compact);
    steps
}

fn crash_run(fs: &FaultFs, steps: &[Step]) -> (Option<Db>, Vec<Model>, usize) {
    let options = crash_options(fs);
    let mut models = vec![Model::new()];
    let mut floor = 0;
    let Ok(db) = Db::open(CRASH_DB, options) else { return (None, models, floor) };
    for step in steps {
        let mut next = models.last().expect("model").clone();
        let res = match step {
            Step::Put(k, v, sync) => {
                next.insert(k.clone(), v.clone());
                db.put_opt(&WriteOptions { sync: *sync }, k, v)
            }
            Step::Range(b, e, sync) => {
                model_apply(&mut next, &Item::Range(b.clone(), e.clone()), |_, _| Vec::new());
                db.delete_range_opt(&WriteOptions { sync: *sync }, b, e)
            }
            Step::Flush => db.flush(),
            Step::Compact => db.compact_range(None, None),
        };
        models.push(next);
        match res {
            Ok(()) if matches!(step, Step::Flush | Step::Put(_, _, true) | Step::Range(_, _, true)) => {
                floor = models.len() - 1
            }
            Ok(()) => {}
            Err(e) => {
                assert!(fs.is_halted(), "{step:?} failed without a fault: {e}");
                break;
            }
        }
    }
    (Some(db), models, floor)
}

#[test]
fn every_crash_point_with_range_tombstones_through_flush_and_compaction_resurrects_nothing() {
    let steps = crash_steps();
    let dry = FaultFs::in_memory(0);
    let (db, models, _) = crash_run(&dry, &steps);
    assert_eq!(models.len(), steps.len() + 1, "the dry run must complete");
    db.expect("open").close().expect("close");
    let total = dry.ops_count();
    let max_points = common::env_u64("WISCKEY_CRASH_ITERS", 150) * 2;
    eprintln!("range-delete workload: {total} mutating fs calls; crashing at up to {max_points} of them");
    for (n, mode) in crash_points(total, max_points) {
        let fs = halting_after(n);
        let (db, models, floor) = crash_run(&fs, &steps);
        fs.halt();
        drop(db);
        fs.crash(mode).expect("crash");
        let ctx = format!("crash after {n} of {total} fs calls ({mode:?})");
        let db = Db::open(CRASH_DB, crash_options(&fs)).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let h = db.keyspace("default").expect("default");
        let got: Model = db.scan(&ReadOptions::default()).and_then(common::owned_map).expect("scan");
        let j = prefix_state(&models, floor, &got, &ctx);
        check_view(&h, &ReadOptions::default(), &models[j], &ctx);
        // Compaction after recovery must not bring a covered key back either.
        db.compact_range(None, None).unwrap_or_else(|e| panic!("{ctx}: compact after recovery: {e}"));
        check_view(&h, &ReadOptions::default(), &models[j], &format!("{ctx}: compacted after recovery"));
    }
}
