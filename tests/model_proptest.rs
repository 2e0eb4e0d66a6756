//! Random operation sequences (puts, deletes, batches, reads, scans, seeks, snapshots,
//! flushes, compactions, reopens) run against the database and a `BTreeMap` model; every
//! read must agree with the model. Runs on `MemFs` and on `PosixFs` in a temporary directory.
//! Case count: env `PROPTEST_CASES` (default 96 on MemFs, 24 on PosixFs).

mod common;

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use common::{assert_view_matches, make_value, show, tiny_options, Model};
use proptest::prelude::*;
use wisckey::fs::{MemFs, PosixFs, Vfs};
use wisckey::{Db, MergePolicy, Options, ReadOptions, Snapshot, WriteBatch, WriteOptions};

/// How big a written value is.
#[derive(Debug, Clone, Copy)]
enum Size {
    Empty,
    Small(usize),
    /// Around 2 KB: a few of them fill the 4 KiB write buffer.
    Large(usize),
}

#[derive(Debug, Clone)]
enum BatchItem {
    Put(Vec<u8>, Size),
    Delete(Vec<u8>),
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Size, bool),
    Delete(Vec<u8>, bool),
    Batch(Vec<BatchItem>, bool),
    Get(Vec<u8>),
    ScanForward,
    ScanBackward,
    /// Seek, then walk (`true` = next, `false` = prev).
    SeekWalk(Vec<u8>, Vec<bool>),
    BoundedScan(Option<Vec<u8>>, Option<Vec<u8>>, bool),
    TakeSnapshot,
    ReadSnapshot(usize),
    ReleaseSnapshot(usize),
    Flush,
    CompactRange(Option<Vec<u8>>, Option<Vec<u8>>),
    Reopen,
}

/// Keys from a small set so overwrites and deletes hit existing keys; includes the empty
/// key, keys that are prefixes of others, and 0x00 / 0xff bytes.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (0u8..48).prop_map(|i| format!("key{i:02}").into_bytes()),
        1 => proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(0xffu8)], 0..3),
    ]
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![
        1 => Just(Size::Empty),
        6 => (1usize..40).prop_map(Size::Small),
        3 => (1900usize..2200).prop_map(Size::Large),
    ]
}

fn batch_item() -> impl Strategy<Value = BatchItem> {
    prop_oneof![
        3 => (key(), size()).prop_map(|(k, s)| BatchItem::Put(k, s)),
        1 => key().prop_map(BatchItem::Delete),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let sync = proptest::bool::weighted(0.1);
    prop_oneof![
        30 => (key(), size(), sync).prop_map(|(k, s, y)| Op::Put(k, s, y)),
        8 => (key(), sync).prop_map(|(k, y)| Op::Delete(k, y)),
        6 => (proptest::collection::vec(batch_item(), 0..8), sync).prop_map(|(b, y)| Op::Batch(b, y)),
        10 => key().prop_map(Op::Get),
        2 => Just(Op::ScanForward),
        2 => Just(Op::ScanBackward),
        5 => (key(), proptest::collection::vec(any::<bool>(), 0..8)).prop_map(|(k, w)| Op::SeekWalk(k, w)),
        2 => (proptest::option::of(key()), proptest::option::of(key()), any::<bool>())
            .prop_map(|(l, u, r)| Op::BoundedScan(l, u, r)),
        3 => Just(Op::TakeSnapshot),
        3 => any::<usize>().prop_map(Op::ReadSnapshot),
        2 => any::<usize>().prop_map(Op::ReleaseSnapshot),
        2 => Just(Op::Flush),
        2 => (proptest::option::of(key()), proptest::option::of(key())).prop_map(|(b, e)| Op::CompactRange(b, e)),
        1 => Just(Op::Reopen),
    ]
}

/// The database under test, its model, and the snapshots taken with their model copies.
struct Harness {
    db: Option<Db>,
    path: std::path::PathBuf,
    options: Options,
    model: Model,
    snapshots: Vec<(Snapshot, Model)>,
    version: u64,
    step: usize,
}

impl Harness {
    fn new(path: &Path, vfs: Arc<dyn Vfs>) -> Harness {
        let threads = common::env_u64("WISCKEY_COMPACTION_THREADS", 1) as usize;
        Self::with_policy(path, vfs, common::merge_policy_from_env(), threads)
    }

    /// A harness under `policy` with `threads` compaction threads.
    fn with_policy(path: &Path, vfs: Arc<dyn Vfs>, policy: MergePolicy, threads: usize) -> Harness {
        // 1 KiB output files (env `WISCKEY_TARGET_FILE_BYTES`): compactions cut often, also
        // between versions of one key.
        let target = common::env_u64("WISCKEY_TARGET_FILE_BYTES", 1024);
        let options = tiny_options(vfs).target_file_size_bytes(target).merge_policy(policy).compaction_threads(threads);
        let db = Db::open(path, options.clone()).expect("open a new database");
        Harness {
            db: Some(db),
            path: path.to_path_buf(),
            options,
            model: Model::new(),
            snapshots: Vec::new(),
            version: 0,
            step: 0,
        }
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("database is open")
    }

    fn value(&mut self, key: &[u8], size: Size) -> Vec<u8> {
        self.version += 1;
        match size {
            Size::Empty => Vec::new(),
            Size::Small(n) | Size::Large(n) => make_value(key, self.version, n),
        }
    }

    fn ctx(&self, op: &Op) -> String {
        format!("step {} ({op:?})", self.step)
    }

    fn apply(&mut self, op: &Op) {
        let ctx = self.ctx(op);
        match op {
            Op::Put(k, s, sync) => {
                let v = self.value(k, *s);
                let wo = WriteOptions { sync: *sync };
                self.db().put_opt(&wo, k, &v).unwrap_or_else(|e| panic!("{ctx}: put failed: {e}"));
                self.model.insert(k.clone(), v);
            }
            Op::Delete(k, sync) => {
                let wo = WriteOptions { sync: *sync };
                self.db().delete_opt(&wo, k).unwrap_or_else(|e| panic!("{ctx}: delete failed: {e}"));
                self.model.remove(k);
            }
            Op::Batch(items, sync) => self.apply_batch(items, *sync, &ctx),
            Op::Get(k) => {
                let got = self.db().get(k).unwrap_or_else(|e| panic!("{ctx}: get failed: {e}"));
                assert_eq!(got.as_deref(), self.model.get(k).map(Vec::as_slice), "{ctx}: get {}", show(k));
            }
            Op::ScanForward => self.check_scan(false, &ctx),
            Op::ScanBackward => self.check_scan(true, &ctx),
            Op::SeekWalk(k, walk) => self.check_seek_walk(k, walk, &ctx),
            Op::BoundedScan(l, u, rev) => self.check_bounded_scan(l.clone(), u.clone(), *rev, &ctx),
            Op::TakeSnapshot => {
                let snap = self.db().snapshot();
                self.snapshots.push((snap, self.model.clone()));
            }
            Op::ReadSnapshot(i) => self.check_snapshot(*i, &ctx),
            Op::ReleaseSnapshot(i) => {
                if !self.snapshots.is_empty() {
                    let n = self.snapshots.len();
                    self.snapshots.remove(i % n);
                }
            }
            Op::Flush => self.db().flush().unwrap_or_else(|e| panic!("{ctx}: flush failed: {e}")),
            Op::CompactRange(b, e) => self
                .db()
                .compact_range(b.as_deref(), e.as_deref())
                .unwrap_or_else(|err| panic!("{ctx}: compact_range failed: {err}")),
            Op::Reopen => self.reopen(&ctx),
        }
        self.step += 1;
    }

    fn apply_batch(&mut self, items: &[BatchItem], sync: bool, ctx: &str) {
        let mut batch = WriteBatch::new();
        let mut after = self.model.clone();
        for item in items {
            match item {
                BatchItem::Put(k, s) => {
                    let v = self.value(k, *s);
                    batch.put(k, &v);
                    after.insert(k.clone(), v);
                }
                BatchItem::Delete(k) => {
                    batch.delete(k);
                    after.remove(k);
                }
            }
        }
        self.db().write(&WriteOptions { sync }, &batch).unwrap_or_else(|e| panic!("{ctx}: batch write failed: {e}"));
        self.model = after;
    }

    fn check_scan(&self, backward: bool, ctx: &str) {
        let ro = ReadOptions::default();
        let got = if backward {
            let mut v = common::read_backward(self.db(), &ro).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            v.reverse();
            v
        } else {
            common::read_forward(self.db(), &ro).unwrap_or_else(|e| panic!("{ctx}: {e}"))
        };
        let want = common::model_range(&self.model, None, None);
        common::assert_same_entries(&got, &want, ctx);
    }

    fn check_seek_walk(&self, target: &[u8], walk: &[bool], ctx: &str) {
        let mut it = self.db().iter(&ReadOptions::default()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        it.seek(target).unwrap_or_else(|e| panic!("{ctx}: seek failed: {e}"));
        let mut at = self.model.range(target.to_vec()..).next().map(|(k, _)| k.clone());
        for (i, &forward) in walk.iter().enumerate() {
            check_cursor(&it, &self.model, at.as_deref(), &format!("{ctx} walk step {i}"));
            let Some(cur) = at.clone() else { return };
            if forward {
                it.next().unwrap_or_else(|e| panic!("{ctx}: next failed: {e}"));
                at = self
                    .model
                    .range::<Vec<u8>, _>((Bound::Excluded(cur), Bound::Unbounded))
                    .next()
                    .map(|(k, _)| k.clone());
            } else {
                it.prev().unwrap_or_else(|e| panic!("{ctx}: prev failed: {e}"));
                at = self.model.range(..cur).next_back().map(|(k, _)| k.clone());
            }
        }
        check_cursor(&it, &self.model, at.as_deref(), &format!("{ctx} walk end"));
    }

    fn check_bounded_scan(&self, lower: Option<Vec<u8>>, upper: Option<Vec<u8>>, rev: bool, ctx: &str) {
        let ro = ReadOptions { lower_bound: lower.clone(), upper_bound: upper.clone(), ..ReadOptions::default() };
        let entries = if rev { self.db().scan_rev(&ro) } else { self.db().scan(&ro) };
        let mut got: Vec<_> =
            entries.and_then(common::owned).unwrap_or_else(|e| panic!("{ctx}: bounded scan failed: {e}"));
        if rev {
            got.reverse();
        }
        let want = common::model_range(&self.model, lower.as_deref(), upper.as_deref());
        common::assert_same_entries(&got, &want, ctx);
    }

    fn check_snapshot(&self, i: usize, ctx: &str) {
        if self.snapshots.is_empty() {
            return;
        }
        let (snap, model) = &self.snapshots[i % self.snapshots.len()];
        let ro = ReadOptions { snapshot: Some(snap.clone()), ..ReadOptions::default() };
        assert_view_matches(self.db(), &ro, model, &format!("{ctx} through snapshot"));
        // Keys written after the snapshot must not show through it.
        for k in self.model.keys().filter(|k| !model.contains_key(*k)).take(8) {
            let got = self.db().get_opt(&ro, k).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(got, None, "{ctx}: key {} written after the snapshot is visible through it", show(k));
        }
    }

    fn reopen(&mut self, ctx: &str) {
        self.snapshots.clear();
        let db = self.db.take().expect("database is open");
        db.close().unwrap_or_else(|e| panic!("{ctx}: close failed: {e}"));
        let db = Db::open(&self.path, self.options.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        self.db = Some(db);
    }

    /// Full comparison, then close, reopen and compare again.
    fn finish(mut self) {
        assert_view_matches(self.db(), &ReadOptions::default(), &self.model, "final state");
        self.reopen("final reopen");
        assert_view_matches(self.db(), &ReadOptions::default(), &self.model, "final state after reopen");
        self.db.take().expect("open").close().expect("final close");
    }
}

/// The cursor is at `want` (with the model's value) or invalid when `want` is `None`.
fn check_cursor(it: &wisckey::DbIterator, model: &Model, want: Option<&[u8]>, ctx: &str) {
    match want {
        None => assert!(!it.valid(), "{ctx}: iterator at {} but model is past the end", show(it.key())),
        Some(k) => {
            assert!(it.valid(), "{ctx}: iterator invalid but model is at {}", show(k));
            assert_eq!(show(it.key()), show(k), "{ctx}: iterator key");
            assert!(it.value() == model[k].as_slice(), "{ctx}: value of {}", show(k));
        }
    }
}

fn run(ops: &[Op], path: &Path, vfs: Arc<dyn Vfs>) {
    run_with(ops, Harness::new(path, vfs));
}

fn run_with(ops: &[Op], mut h: Harness) {
    for op in ops {
        h.apply(op);
    }
    h.finish();
}

fn cases(default: u32) -> u32 {
    common::env_u64("PROPTEST_CASES", default as u64) as u32
}

proptest! {
    #![proptest_config(ProptestConfig { max_shrink_iters: 200, ..ProptestConfig::with_cases(cases(96)) })]

    #[test]
    fn random_ops_on_memfs_match_btreemap_model(ops in proptest::collection::vec(op(), 1..250)) {
        run(&ops, Path::new("/db"), Arc::new(MemFs::new()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { max_shrink_iters: 200, ..ProptestConfig::with_cases(cases(64)) })]

    /// Tiering keeps several runs per level: reads must take the newest run's entry, and a
    /// merge may drop a tombstone or an old version only when no older run can hold the key.
    #[test]
    fn random_ops_under_tiering_match_btreemap_model(ops in proptest::collection::vec(op(), 1..250)) {
        let h = Harness::with_policy(Path::new("/db"), Arc::new(MemFs::new()), MergePolicy::tiering(2), 1);
        run_with(&ops, h);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { max_shrink_iters: 200, ..ProptestConfig::with_cases(cases(32)) })]

    /// LSM-bush with two compaction threads: flushes join level 0's active run, levels merge in
    /// place, and compactions of disjoint levels run at once.
    #[test]
    fn random_ops_under_bush_with_concurrent_compactions_match_btreemap_model(
        ops in proptest::collection::vec(op(), 1..250)
    ) {
        let bush = "bush".parse().expect("preset");
        run_with(&ops, Harness::with_policy(Path::new("/db"), Arc::new(MemFs::new()), bush, 2));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { max_shrink_iters: 100, ..ProptestConfig::with_cases(cases(24)) })]

    #[test]
    fn random_ops_on_posix_files_match_btreemap_model(ops in proptest::collection::vec(op(), 1..250)) {
        let dir = tempfile::tempdir().expect("tempdir");
        run(&ops, &dir.path().join("db"), Arc::new(PosixFs::new()));
    }
}

/// A fixed long sequence so every run exercises many flushes, compactions and reopens even
/// when proptest draws short cases.
#[test]
fn long_overwrite_delete_flush_compact_reopen_sequence_matches_model() {
    long_sequence(Harness::new(Path::new("/long"), Arc::new(MemFs::new())));
}

#[test]
fn long_sequence_under_tiering_matches_model() {
    let policy = MergePolicy::tiering(2);
    long_sequence(Harness::with_policy(Path::new("/long"), Arc::new(MemFs::new()), policy, 1));
}

#[test]
fn long_sequence_under_lazy_leveling_with_concurrent_compactions_matches_model() {
    let policy = "wacky:T=3,K=1,Z=0".parse().expect("knobs");
    long_sequence(Harness::with_policy(Path::new("/long"), Arc::new(MemFs::new()), policy, 2));
}

fn long_sequence(mut h: Harness) {
    for round in 0..6u32 {
        for i in 0..120u32 {
            let k = format!("key{:02}", (i * 7 + round) % 48).into_bytes();
            let size = if i % 5 == 0 { Size::Large(2000) } else { Size::Small(20) };
            h.apply(&Op::Put(k.clone(), size, i % 17 == 0));
            if i % 9 == 0 {
                h.apply(&Op::Delete(format!("key{:02}", (i + round) % 48).into_bytes(), false));
            }
            if i % 40 == 0 {
                h.apply(&Op::TakeSnapshot);
            }
        }
        h.apply(&Op::ReadSnapshot(round as usize));
        h.apply(&Op::ScanBackward);
        match round % 3 {
            0 => h.apply(&Op::Flush),
            1 => h.apply(&Op::CompactRange(None, None)),
            _ => h.apply(&Op::Reopen),
        }
        h.apply(&Op::ScanForward);
    }
    h.finish();
}
