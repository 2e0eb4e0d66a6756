//! Merge operators: a model test (merges, puts, deletes, range deletes, snapshots, flushes,
//! compactions, reopens against a `BTreeMap`), crash enumeration over compactions that fold
//! operands, value-log GC under operands, and bad input (no operator, a failing or panicking
//! operator, another operator at reopen).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::crash_points::{crash_points, halting_after, prefix_state};
use common::{assert_view_matches, make_value, tiny_options, Model};
use proptest::prelude::*;
use wisckey::fs::{FaultFs, MemFs};
use wisckey::{
    AppendOperator, Db, Error, MergeOperator, MergeResult, Options, ReadOptions, U64AddOperator, WriteBatch,
    WriteOptions,
};

const DB: &str = "/mergedb";

/// The model's merge: `AppendOperator::with_delimiter(",")` (order-sensitive, so a fold that
/// takes operands out of order is caught).
fn model_merge(model: &mut Model, k: &[u8], operand: &[u8]) {
    let v = match model.get(k) {
        Some(old) => [&old[..], b",", operand].concat(),
        None => operand.to_vec(),
    };
    model.insert(k.to_vec(), v);
}

fn append_options(vfs: Arc<dyn wisckey::fs::Vfs>) -> Options {
    tiny_options(vfs).min_separated_value_bytes(48).merge_operator(Arc::new(AppendOperator::with_delimiter(",")))
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, usize),
    Delete(u8),
    Merge(u8, usize),
    BatchMerge(u8, u8),
    DeleteRange(u8, u8),
    Snapshot,
    CheckSnapshots,
    Flush,
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, prop_oneof![Just(4usize), Just(80)]).prop_map(|(k, n)| Op::Put(k, n)),
        2 => (0u8..12).prop_map(Op::Delete),
        10 => (0u8..12, prop_oneof![Just(3usize), Just(60)]).prop_map(|(k, n)| Op::Merge(k, n)),
        2 => (0u8..12, 0u8..12).prop_map(|(a, b)| Op::BatchMerge(a, b)),
        1 => (0u8..12, 0u8..12).prop_map(|(a, b)| Op::DeleteRange(a.min(b), a.max(b))),
        1 => Just(Op::Snapshot),
        1 => Just(Op::CheckSnapshots),
        2 => Just(Op::Flush),
        2 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

fn key(i: u8) -> Vec<u8> {
    format!("k{i:02}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::env_u64("PROPTEST_CASES", 48) as u32))]

    /// Every read (get, cursor both ways, scans, at snapshots too) agrees with the model after
    /// any sequence of merges mixed with puts, deletes, range deletes, flushes, compactions
    /// and reopens.
    #[test]
    fn merges_fold_like_the_model_through_flushes_compactions_snapshots_and_reopens(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        let fs = Arc::new(MemFs::new());
        let options = append_options(fs.clone());
        let mut db = Some(Db::open(DB, options.clone()).unwrap());
        let mut model = Model::new();
        let mut snaps: Vec<(wisckey::Snapshot, Model)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let d = db.as_ref().unwrap();
            match op {
                Op::Put(k, n) => {
                    let v = make_value(&key(*k), i as u64, *n);
                    d.put(key(*k), &v).unwrap();
                    model.insert(key(*k), v);
                }
                Op::Delete(k) => {
                    d.delete(key(*k)).unwrap();
                    model.remove(&key(*k));
                }
                Op::Merge(k, n) => {
                    let v = make_value(b"m", i as u64, *n);
                    d.merge(key(*k), &v).unwrap();
                    model_merge(&mut model, &key(*k), &v);
                }
                Op::BatchMerge(a, b) => {
                    let mut batch = WriteBatch::new();
                    batch.merge(key(*a), format!("b{i}a")).merge(key(*b), format!("b{i}b"));
                    d.write(&WriteOptions::default(), &batch).unwrap();
                    model_merge(&mut model, &key(*a), format!("b{i}a").as_bytes());
                    model_merge(&mut model, &key(*b), format!("b{i}b").as_bytes());
                }
                Op::DeleteRange(a, b) => {
                    d.delete_range(key(*a), key(*b)).unwrap();
                    model.retain(|k, _| !(k[..] >= key(*a)[..] && k[..] < key(*b)[..]));
                }
                Op::Snapshot => snaps.push((d.snapshot(), model.clone())),
                Op::CheckSnapshots => {
                    for (j, (s, m)) in snaps.iter().enumerate() {
                        let ro = ReadOptions { snapshot: Some(s.clone()), ..ReadOptions::default() };
                        assert_view_matches(d, &ro, m, &format!("op {i}: snapshot {j}"));
                    }
                }
                Op::Flush => d.flush().unwrap(),
                Op::Compact => d.compact_range(None, None).unwrap(),
                Op::Reopen => {
                    snaps.clear();
                    db.take().unwrap().close().unwrap();
                    db = Some(Db::open(DB, options.clone()).unwrap());
                }
            }
        }
        let d = db.as_ref().unwrap();
        assert_view_matches(d, &ReadOptions::default(), &model, "end");
        let keys: Vec<Vec<u8>> = (0..12).map(key).collect();
        let got = d.multi_get(&ReadOptions::default(), &keys).unwrap();
        for (k, v) in keys.iter().zip(got) {
            prop_assert_eq!(v.map(|v| v.to_vec()), model.get(k).cloned(), "multi_get {:?}", k);
        }
        for (j, (s, m)) in snaps.iter().enumerate() {
            let ro = ReadOptions { snapshot: Some(s.clone()), ..ReadOptions::default() };
            assert_view_matches(d, &ro, m, &format!("end: snapshot {j}"));
        }
        d.compact_range(None, None).unwrap();
        assert_view_matches(d, &ReadOptions::default(), &model, "end, compacted");
    }
}

#[test]
fn a_counter_folds_in_compaction_into_one_value_and_survives_reopen() {
    let fs = Arc::new(MemFs::new());
    let options = tiny_options(fs.clone()).merge_operator(Arc::new(U64AddOperator));
    let db = Db::open(DB, options.clone()).unwrap();
    for i in 0..300u64 {
        db.merge(format!("c{}", i % 3), (i + 1).to_le_bytes()).unwrap();
    }
    db.compact_range(None, None).unwrap();
    let want = |c: u64| (0..300u64).filter(|i| i % 3 == c).map(|i| i + 1).sum::<u64>().to_le_bytes();
    for c in 0..3 {
        assert_eq!(db.get(format!("c{c}")).unwrap().unwrap(), want(c));
    }
    let entries: u64 = db.stats().level_entries.iter().sum();
    assert_eq!(entries, 3, "compaction folds each counter's operands into one value");
    db.close().unwrap();
    let db = Db::open(DB, options).unwrap();
    assert_eq!(db.get("c1").unwrap().unwrap(), want(1));
}

#[test]
fn a_merge_on_a_keyspace_without_an_operator_is_an_invalid_argument() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, tiny_options(fs)).unwrap();
    let err = db.merge("k", "x").unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { reason } if reason.contains("no merge operator")), "{err}");
    let ks = db.create_keyspace("counters", Options::default().merge_operator(Arc::new(U64AddOperator))).unwrap();
    ks.merge("k", 1u64.to_le_bytes()).unwrap();
    let mut b = WriteBatch::new();
    b.merge_in(&ks, "k", 2u64.to_le_bytes()).merge("k", "x");
    assert!(matches!(db.write(&WriteOptions::default(), &b), Err(Error::InvalidArgument { .. })));
    assert_eq!(ks.get("k").unwrap().unwrap(), 1u64.to_le_bytes(), "the refused batch wrote nothing");
    assert_eq!(db.get("k").unwrap(), None);
}

#[test]
fn a_bad_counter_operand_is_a_merge_error_on_read_and_compaction_keeps_it() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, tiny_options(fs).merge_operator(Arc::new(U64AddOperator))).unwrap();
    db.put("k", 5u64.to_le_bytes()).unwrap();
    db.merge("k", b"bad").unwrap();
    db.merge("ok", 7u64.to_le_bytes()).unwrap();
    let err = db.get("k").unwrap_err();
    assert!(matches!(&err, Error::Merge { operator, key, .. } if operator == "uint64add" && key == b"k"), "{err}");
    db.compact_range(None, None).unwrap();
    assert!(matches!(db.get("k"), Err(Error::Merge { .. })), "the operands stay, unmerged");
    assert_eq!(db.get("ok").unwrap().unwrap(), 7u64.to_le_bytes());
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    assert!(matches!(it.seek_to_first(), Err(Error::Merge { .. })), "the cursor reports it too");
}

/// Panics while `armed`, otherwise appends.
struct Flaky(Arc<AtomicBool>);

impl MergeOperator for Flaky {
    fn name(&self) -> &str {
        "flaky-append"
    }
    fn full_merge(&self, key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> MergeResult {
        assert!(!self.0.load(Ordering::SeqCst), "operator bug");
        AppendOperator::new().full_merge(key, existing, operands)
    }
}

#[test]
fn a_panicking_operator_fails_reads_not_the_process_and_compaction_loses_nothing() {
    let fs = Arc::new(MemFs::new());
    let armed = Arc::new(AtomicBool::new(true));
    let options = tiny_options(fs).merge_operator(Arc::new(Flaky(armed.clone())));
    let db = Db::open(DB, options).unwrap();
    db.put("k", "a").unwrap();
    for op in ["b", "c", "d"] {
        db.merge("k", op).unwrap();
    }
    let err = db.get("k").unwrap_err();
    assert!(err.to_string().contains("operator bug"), "{err}");
    db.compact_range(None, None).unwrap();
    armed.store(false, Ordering::SeqCst);
    assert_eq!(db.get("k").unwrap().unwrap(), b"abcd", "compaction kept the operands it could not fold");
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get("k").unwrap().unwrap(), b"abcd");
}

#[test]
fn reopening_with_another_operator_is_refused_and_without_one_reads_fail_clearly() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, tiny_options(fs.clone()).merge_operator(Arc::new(U64AddOperator))).unwrap();
    db.merge("k", 1u64.to_le_bytes()).unwrap();
    db.close().unwrap();
    let other = tiny_options(fs.clone()).merge_operator(Arc::new(AppendOperator::new()));
    let err = Db::open(DB, other).err().expect("another operator");
    assert!(matches!(&err, Error::IncompatibleOptions { option: "merge_operator", .. }), "{err}");
    let db = Db::open(DB, tiny_options(fs.clone())).unwrap();
    assert!(matches!(db.get("k"), Err(Error::Merge { .. })));
    db.compact_range(None, None).unwrap();
    db.close().unwrap();
    // The record survives an open without the operator, and the operand a compaction without it.
    let err = Db::open(DB, tiny_options(fs.clone()).merge_operator(Arc::new(AppendOperator::new()))).err();
    assert!(matches!(err, Some(Error::IncompatibleOptions { .. })));
    let db = Db::open(DB, tiny_options(fs).merge_operator(Arc::new(U64AddOperator))).unwrap();
    assert_eq!(db.get("k").unwrap().unwrap(), 1u64.to_le_bytes());
}

#[test]
fn a_keyspace_takes_its_operator_again_when_reopened_through_open_keyspace() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, tiny_options(fs.clone())).unwrap();
    let ks = db.create_keyspace("log", Options::default().merge_operator(Arc::new(AppendOperator::new()))).unwrap();
    ks.merge("k", "a").unwrap();
    ks.merge("k", "b").unwrap();
    db.close().unwrap();
    let db = Db::open(DB, tiny_options(fs)).unwrap();
    let bad = db.open_keyspace("log", Options::default().merge_operator(Arc::new(U64AddOperator)));
    assert!(matches!(bad, Err(Error::IncompatibleOptions { .. })));
    let ks = db.open_keyspace("log", Options::default().merge_operator(Arc::new(AppendOperator::new()))).unwrap();
    assert_eq!(ks.get("k").unwrap().unwrap(), b"ab");
}

/// For the value-log GC tests: GC only when called, small log files, separated values from
/// 64 bytes, an appending operator.
fn gc_options(fs: Arc<MemFs>) -> Options {
    tiny_options(fs)
        .gc_interval_ms(0)
        .min_separated_value_bytes(64)
        .log_file_bytes(16 << 10)
        .merge_operator(Arc::new(AppendOperator::new()))
}

#[test]
fn value_log_gc_neither_moves_nor_frees_a_separated_value_beneath_merge_operands() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, gc_options(fs)).unwrap();
    let base = vec![b'x'; 1000];
    db.put("k", &base).unwrap();
    db.merge("k", "+1").unwrap();
    // Fill and roll log files so the base's file can be collected; overwrite the filler.
    for round in 0..3 {
        for i in 0..40 {
            db.put(format!("f{i:02}"), make_value(b"f", round, 900)).unwrap();
        }
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    let _ = db.run_gc(0.0);
    let want = [&base[..], b"+1"].concat();
    assert_eq!(db.get("k").unwrap().unwrap(), want);
    db.merge("k", "+2").unwrap();
    let _ = db.run_gc(0.0);
    assert_eq!(db.get("k").unwrap().unwrap(), [&want[..], b"+2"].concat());
    let report = db.verify().unwrap();
    assert!(report.is_healthy(), "{report}");
}

/// An iterator opened before a compaction folds a key's operands with the separated value
/// beneath them still reads that value after value-log GC collected its file: the fold made
/// the value garbage by changing the tables, not by a newer write, so the iterator's sequence
/// number alone did not hold GC back (the CI failure of
/// `merges_fold_like_the_model_through_flushes_compactions_snapshots_and_reopens`). The file
/// goes once the iterator is dropped.
#[test]
fn an_iterator_from_before_a_fold_still_reads_the_value_gc_collected_beneath_the_operands() {
    let fs = Arc::new(MemFs::new());
    // No compaction before the iterator is made: the value and the operand above it in two
    // level-0 tables, which only the `compact_range` below merges.
    let options = gc_options(fs.clone()).write_buffer_bytes(1 << 20).l0_compaction_trigger(8);
    let db = Db::open(DB, options).unwrap();
    let base = vec![b'x'; 1000];
    db.put("k", &base).unwrap();
    db.flush().unwrap();
    db.merge("k", "+1").unwrap();
    // Roll the log past the base's file, overwriting every other value written there; keys
    // on both sides of `k`, so the two tables overlap.
    for round in 0..3 {
        for i in 0..40 {
            let name = if i % 2 == 0 { format!("a{i:02}") } else { format!("z{i:02}") };
            db.put(name, make_value(b"f", round, 900)).unwrap();
        }
    }
    db.flush().unwrap();
    let want = [&base[..], b"+1"].concat();
    assert_eq!(db.stats().num_compactions, 0, "the operand and the value beneath it are still apart");
    // No write after this: the iterator reads at the newest sequence number, on these tables.
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    db.compact_range(None, None).unwrap();
    let report = db.run_gc(0.0).unwrap();
    assert!(report.files_collected > 0, "GC collected the base's file: {report:?}");
    it.seek(b"k").unwrap();
    assert!(it.valid());
    assert_eq!(it.value(), &want[..], "the iterator reads the value beneath its operands");
    let logs = |fs: &MemFs| {
        let names = wisckey::fs::Vfs::list(fs, std::path::Path::new(DB)).unwrap();
        names.iter().filter(|n| n.ends_with(".vlog")).count()
    };
    let before = logs(&fs);
    drop(it);
    db.run_gc(0.0).unwrap();
    assert!(logs(&fs) < before, "the collected file is deleted once the iterator is gone");
    assert_eq!(db.get("k").unwrap().unwrap(), want);
    let report = db.verify().unwrap();
    assert!(report.is_healthy(), "{report}");
}

/// Synced merges and puts with flushes and full compactions between them, on `FaultFs`
/// crashed after every `stride` filesystem calls: after recovery the state is one the
/// script passed through, including every acknowledged (synced) step.
#[test]
fn every_crash_point_of_merges_folded_by_compaction_recovers_a_durable_prefix() {
    #[derive(Debug)]
    enum Step {
        Merge(usize, u64),
        Put(usize, u64),
        Flush,
        Compact,
    }
    let mut steps = Vec::new();
    for round in 0..6u64 {
        for k in 0..6usize {
            steps.push(if (k as u64 + round).is_multiple_of(5) { Step::Put(k, round) } else { Step::Merge(k, round) });
        }
        steps.push(Step::Flush);
        if round % 2 == 1 {
            steps.push(Step::Compact);
        }
    }
    let options = |fs: &FaultFs| {
        Options::default()
            .vfs(Arc::new(fs.clone()))
            .compaction_threads(1)
            .gc_interval_ms(0)
            .block_size_bytes(256)
            .min_separated_value_bytes(32)
            .merge_operator(Arc::new(AppendOperator::with_delimiter(",")))
    };
    let run = |fs: &FaultFs| -> (Option<Db>, Vec<Model>, usize) {
        let mut models = vec![Model::new()];
        let Ok(db) = Db::open(DB, options(fs)) else { return (None, models, 0) };
        let mut done = 0;
        for step in &steps {
            let mut next = models.last().unwrap().clone();
            let sync = WriteOptions::synced();
            let r = match *step {
                Step::Merge(k, r) => {
                    let v = format!("m{r}");
                    model_merge(&mut next, &key(k as u8), v.as_bytes());
                    db.merge_opt(&sync, key(k as u8), v)
                }
                Step::Put(k, r) => {
                    let v = make_value(&key(k as u8), r, 40);
                    next.insert(key(k as u8), v.clone());
                    db.put_opt(&sync, key(k as u8), v)
                }
                Step::Flush => db.flush(),
                Step::Compact => db.compact_range(None, None),
            };
            models.push(next);
            if r.is_err() {
                break;
            }
            done = models.len() - 1;
        }
        (Some(db), models, done)
    };
    let dry = FaultFs::in_memory(0);
    let (db, _, done) = run(&dry);
    assert_eq!(done, steps.len());
    db.unwrap().close().unwrap();
    let total = dry.ops_count();
    for (n, mode) in crash_points(total, common::env_u64("WISCKEY_CRASH_ITERS", 60)) {
        let fs = halting_after(n);
        let (db, models, done) = run(&fs);
        fs.halt();
        drop(db);
        fs.crash(mode).unwrap();
        let db = Db::open(DB, options(&fs)).unwrap_or_else(|e| panic!("crash after {n} ({mode:?}): reopen: {e}"));
        let state: Model = db.scan(&ReadOptions::default()).and_then(common::owned_map).unwrap();
        prefix_state(&models, done, &state, &format!("crash after {n} of {total} calls ({mode:?})"));
        db.compact_range(None, None).unwrap();
        let again: Model = db.scan(&ReadOptions::default()).and_then(common::owned_map).unwrap();
        assert_eq!(again, state, "crash after {n}: a compaction after recovery changed what reads see");
    }
}
