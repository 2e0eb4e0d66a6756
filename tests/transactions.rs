//! Optimistic transactions: reads at the snapshot with the transaction's own writes visible
//! (checked against a `BTreeMap` model, ranges from both ends), conflicts as each isolation
//! level defines them (write-write, read-write, phantoms, write skew), commits atomic across
//! keyspaces and across crashes (a crash at every filesystem call of a scripted workload, and
//! `kill -9` of a child process running the bank workload), and Badger's bank invariant under
//! 8 threads of serializable transfers.
//! Env: `WISCKEY_BANK_SECS` (default 2) for the in-process bank run, `WISCKEY_BANK_CYCLES`
//! (default 3) for the kill -9 cycles.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::crash_points::{crash_points, halting_after, prefix_state};
use common::{env_u64, make_value, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{FaultFs, MemFs};
use wisckey::{Db, Error, Isolation, Keyspace, Options, TransactionOptions, WriteOptions};

fn mem_db() -> Db {
    Db::open("/db", Options::default().vfs(Arc::new(MemFs::new())).gc_interval_ms(0)).expect("open")
}

fn serializable() -> TransactionOptions {
    TransactionOptions::default().serializable()
}

fn get(ks: &Keyspace, key: &[u8]) -> Option<Vec<u8>> {
    ks.get(key).expect("get").map(|v| v.to_vec())
}

fn assert_conflict(r: wisckey::Result<()>, key: &[u8], ctx: &str) {
    match r {
        Err(e @ Error::Conflict { .. }) => {
            assert!(e.is_retryable(), "{ctx}: a conflict is retryable");
            let Error::Conflict { key: k, .. } = &e else { unreachable!() };
            assert_eq!(k.as_slice(), key, "{ctx}: the conflict names the key ({e})");
        }
        other => panic!("{ctx}: expected a conflict on {key:?}, got {other:?}"),
    }
}

#[test]
fn own_writes_are_visible_to_the_transaction_and_invisible_to_others_until_commit() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    db.put(b"a", b"1").unwrap();
    db.put(b"c", b"3").unwrap();
    let mut t = db.transaction();
    t.put(&ks, b"b", b"2").unwrap();
    t.delete(&ks, b"a").unwrap();
    assert_eq!(t.get(&ks, b"b").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(t.get(&ks, b"a").unwrap(), None);
    assert_eq!(get(&ks, b"b"), None, "uncommitted writes are invisible outside");
    assert_eq!(get(&ks, b"a"), Some(b"1".to_vec()));
    db.put(b"d", b"4").unwrap();
    assert_eq!(t.get(&ks, b"d").unwrap(), None, "the transaction reads at its snapshot");
    let keys: Vec<Vec<u8>> = t.range::<&[u8], _>(&ks, ..).unwrap().map(|r| r.unwrap().0).collect();
    assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
    t.commit().unwrap();
    assert_eq!(get(&ks, b"a"), None);
    assert_eq!(get(&ks, b"b"), Some(b"2".to_vec()));
    assert_eq!(db.stats().transactions_committed, 1);
}

#[test]
fn dropping_a_transaction_rolls_it_back() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    {
        let mut t = db.transaction();
        t.put(&ks, b"k", b"v").unwrap();
        t.delete_range(&ks, b"a", b"z").unwrap();
    }
    let mut t = db.transaction();
    t.put(&ks, b"k", b"v").unwrap();
    t.rollback();
    assert_eq!(get(&ks, b"k"), None);
    assert_eq!(db.stats().transactions_committed, 0);
}

/// A write-write conflict (snapshot isolation): another commit wrote a key this transaction
/// writes after its snapshot. Nothing of the transaction is written.
#[test]
fn a_key_written_by_another_commit_after_the_snapshot_fails_the_commit_and_writes_nothing() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    let mut t = db.transaction();
    t.put(&ks, b"mine", b"t").unwrap();
    t.put(&ks, b"shared", b"t").unwrap();
    db.put(b"shared", b"other").unwrap();
    assert_conflict(t.commit(), b"shared", "ww");
    assert_eq!(get(&ks, b"shared"), Some(b"other".to_vec()));
    assert_eq!(get(&ks, b"mine"), None, "nothing of a conflicting transaction is written");
    assert_eq!(db.stats().transaction_conflicts, 1);

    // A write before the snapshot is no conflict; a delete after it is.
    let mut t = db.transaction();
    t.put(&ks, b"shared", b"t2").unwrap();
    t.commit().unwrap();
    let mut t = db.transaction();
    t.put(&ks, b"shared", b"t3").unwrap();
    db.delete(b"shared").unwrap();
    assert_conflict(t.commit(), b"shared", "delete after the snapshot");
    // A range delete after the snapshot covering the key is a write of it too.
    let mut t = db.transaction();
    t.put(&ks, b"shared", b"t4").unwrap();
    db.delete_range(b"s", b"t").unwrap();
    assert_conflict(t.commit(), b"shared", "range delete after the snapshot");
}

/// Read-write conflicts: a serializable transaction fails when a key it read changed; under
/// snapshot isolation only `get_for_update` takes part.
#[test]
fn a_changed_read_fails_a_serializable_commit_and_get_for_update_fails_a_snapshot_one() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    db.put(b"x", b"1").unwrap();
    for (opts, for_update, conflict) in [
        (serializable(), false, true),
        (TransactionOptions::default(), false, false),
        (TransactionOptions::default(), true, true),
    ] {
        let mut t = db.transaction_with(opts.clone());
        let x = if for_update { t.get_for_update(&ks, b"x") } else { t.get(&ks, b"x") }.unwrap();
        t.put(&ks, b"y", x.unwrap()).unwrap();
        db.put(b"x", b"2").unwrap();
        let ctx = format!("{:?} for_update={for_update}", opts.isolation);
        match conflict {
            true => assert_conflict(t.commit(), b"x", &ctx),
            false => t.commit().unwrap_or_else(|e| panic!("{ctx}: {e}")),
        }
        db.delete(b"y").unwrap();
    }
}

/// A phantom: a serializable transaction scanned a range another commit then inserted into.
#[test]
fn an_insert_into_a_scanned_range_fails_a_serializable_commit_only() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    for i in 0..5u8 {
        db.put([b'a', b'/', b'0' + i], [1]).unwrap();
    }
    for isolation in [Isolation::Serializable, Isolation::Snapshot] {
        let mut t = db.transaction_with(TransactionOptions { isolation, ..Default::default() });
        let n = t.prefix(&ks, b"a/").unwrap().count();
        t.put(&ks, b"count", n.to_string()).unwrap();
        db.put(b"a/7", [1]).unwrap();
        // A write outside the range changes nothing.
        db.put(b"b/1", [1]).unwrap();
        match isolation {
            Isolation::Serializable => assert_conflict(t.commit(), b"a/7", "phantom"),
            _ => t.commit().unwrap(),
        }
        db.delete(b"a/7").unwrap();
    }
    // A range scanned but not changed commits; one emptied by a range delete does not.
    let mut t = db.transaction_with(serializable());
    let _ = t.range(&ks, &b"a/"[..]..&b"a/9"[..]).unwrap().next();
    t.put(&ks, b"count", b"x").unwrap();
    db.put(b"c", b"1").unwrap();
    t.commit().unwrap();
    let mut t = db.transaction_with(serializable());
    let _ = t.range(&ks, &b"a/2"[..]..&b"a/9"[..]).unwrap().next_back();
    t.put(&ks, b"count", b"y").unwrap();
    db.delete_range(b"a/", b"a/3").unwrap();
    assert_conflict(t.commit(), b"a/2", "range delete overlapping the scan");
}

/// The doctors-on-call write skew: each transaction reads both keys and clears one when the
/// sum allows. Snapshot isolation commits both (the invariant x + y >= 1 breaks);
/// serializable refuses the second.
#[test]
fn write_skew_commits_under_snapshot_isolation_and_is_refused_when_serializable() {
    for isolation in [Isolation::Snapshot, Isolation::Serializable] {
        let db = mem_db();
        let ks = db.default_keyspace().clone();
        db.put(b"x", b"1").unwrap();
        db.put(b"y", b"1").unwrap();
        let opts = TransactionOptions { isolation, ..Default::default() };
        let (mut t1, mut t2) = (db.transaction_with(opts.clone()), db.transaction_with(opts));
        for (t, clear) in [(&mut t1, b"x"), (&mut t2, b"y")] {
            let on: usize =
                t.multi_get(&ks, &[b"x", b"y"]).unwrap().iter().map(|v| usize::from(v.as_deref() == Some(b"1"))).sum();
            assert_eq!(on, 2);
            t.put(&ks, clear, b"0").unwrap();
        }
        t1.commit().unwrap();
        let second = t2.commit();
        let on = [b"x", b"y"].iter().filter(|k| get(&ks, &k[..]) == Some(b"1".to_vec())).count();
        match isolation {
            Isolation::Snapshot => {
                second.unwrap();
                assert_eq!(on, 0, "snapshot isolation allows write skew");
            }
            _ => {
                assert_conflict(second, b"x", "write skew");
                assert_eq!(on, 1, "serializable keeps one doctor on call");
            }
        }
    }
}

#[test]
fn a_transaction_across_keyspaces_commits_all_or_nothing() {
    let db = mem_db();
    let (d, a, b) = (
        db.default_keyspace().clone(),
        db.create_keyspace("a", Options::default()).unwrap(),
        db.create_keyspace("b", Options::default()).unwrap(),
    );
    let mut t = db.transaction();
    t.put(&d, b"k", b"d").unwrap();
    t.put(&a, b"k", b"a").unwrap();
    t.put(&b, b"k", b"b").unwrap();
    assert_eq!(t.get(&a, b"k").unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(t.get(&b, b"k").unwrap().as_deref(), Some(&b"b"[..]), "per keyspace");
    t.commit().unwrap();
    assert_eq!(
        (get(&d, b"k"), get(&a, b"k"), get(&b, b"k")),
        (Some(b"d".to_vec()), Some(b"a".to_vec()), Some(b"b".to_vec()))
    );

    let mut t = db.transaction();
    t.put(&d, b"k2", b"d").unwrap();
    t.put(&a, b"k2", b"a").unwrap();
    t.put(&b, b"k", b"b2").unwrap();
    b.put(b"k", b"other").unwrap();
    // The same key in another keyspace is another key: no conflict there.
    a.put(b"k", b"x").unwrap();
    match t.commit() {
        Err(Error::Conflict { keyspace, key, .. }) => assert_eq!((keyspace.as_str(), key.as_slice()), ("b", &b"k"[..])),
        other => panic!("expected a conflict in keyspace b: {other:?}"),
    }
    assert_eq!((get(&d, b"k2"), get(&a, b"k2"), get(&b, b"k")), (None, None, Some(b"other".to_vec())));

    // A handle of another database is refused.
    let other = mem_db();
    let mut t = db.transaction();
    assert!(matches!(t.put(other.default_keyspace(), b"k", b"v"), Err(Error::InvalidArgument { .. })));
    // A dropped keyspace fails the commit; nothing is written.
    let mut t = db.transaction();
    t.put(&d, b"k3", b"d").unwrap();
    t.put(&a, b"k3", b"a").unwrap();
    db.drop_keyspace("a").unwrap();
    assert!(matches!(t.commit(), Err(Error::KeyspaceDropped { .. })));
    assert_eq!(get(&d, b"k3"), None);
}

/// After the snapshot's memtable is flushed the commit looks each key up in full: a key
/// written since is still a conflict, an untouched one is not; a scanned range can no
/// longer be checked and is a conflict (retry).
#[test]
fn a_conflict_is_found_after_the_snapshots_memtable_was_flushed() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    db.put(b"k", b"0").unwrap();
    let mut t = db.transaction();
    let mut quiet = db.transaction();
    let mut scanner = db.transaction_with(serializable());
    t.put(&ks, b"k", b"t").unwrap();
    quiet.put(&ks, b"q", b"t").unwrap();
    let _ = scanner.range::<&[u8], _>(&ks, ..).unwrap().count();
    scanner.put(&ks, b"s", b"t").unwrap();
    db.put(b"k", b"other").unwrap();
    db.flush().unwrap();
    db.put(b"unrelated", b"1").unwrap();
    db.flush().unwrap();
    assert_conflict(t.commit(), b"k", "after a flush");
    quiet.commit().unwrap();
    assert!(matches!(scanner.commit(), Err(Error::Conflict { .. })));
    assert_eq!(get(&ks, b"q"), Some(b"t".to_vec()));
    assert_eq!(get(&ks, b"s"), None);
}

#[test]
fn bad_input_to_a_transaction_is_a_clear_error() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    let mut t = db.transaction();
    assert!(matches!(t.delete_range(&ks, b"z", b"a"), Err(Error::InvalidArgument { .. })));
    t.put(&ks, vec![0u8; wisckey::MAX_KEY_BYTES + 1], b"v").unwrap();
    t.put(&ks, b"ok", b"v").unwrap();
    assert!(matches!(t.commit(), Err(Error::InvalidArgument { .. })));
    assert_eq!(get(&ks, b"ok"), None);
}

// ---- Model test ----------------------------------------------------------------------------

/// The transaction's view in the model: the snapshot plus its writes.
fn model_range(m: &Model, lower: &[u8], upper: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.range(lower.to_vec()..upper.to_vec()).map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn key(rng: &mut StdRng) -> Vec<u8> {
    format!("k{:02}", rng.gen_range(0..40)).into_bytes()
}

/// What the model says the commit must find: the logical time of each plain write and range
/// delete since the transaction began decides.
struct Clock {
    now: u64,
    writes: BTreeMap<Vec<u8>, u64>,
    range_deletes: Vec<(Vec<u8>, Vec<u8>, u64)>,
}

impl Clock {
    fn key_written_after(&self, k: &[u8], t0: u64) -> bool {
        self.writes.get(k).is_some_and(|&t| t > t0)
            || self.range_deletes.iter().any(|(b, e, t)| *t > t0 && b.as_slice() <= k && k < e.as_slice())
    }

    fn range_written_after(&self, lo: &[u8], hi: &[u8], t0: u64) -> bool {
        self.writes.range(lo.to_vec()..hi.to_vec()).any(|(_, &t)| t > t0)
            || self.range_deletes.iter().any(|(b, e, t)| *t > t0 && b.as_slice() < hi && lo < e.as_slice())
    }
}

/// Random transactions (both isolation levels) against a model, with plain writes from
/// "other clients" in between: every read matches the snapshot plus the transaction's own
/// writes (gets, multi_gets, ranges from the front, the back and both), and each commit
/// succeeds or conflicts exactly as the model's clock says, writing all or nothing.
#[test]
fn random_transactions_match_a_btreemap_model_and_conflict_exactly_when_the_model_says() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    let mut model = Model::new();
    let mut clock = Clock { now: 0, writes: BTreeMap::new(), range_deletes: Vec::new() };
    let mut rng = StdRng::seed_from_u64(env_u64("WISCKEY_TXN_SEED", 7));
    let (mut commits, mut conflicts) = (0, 0);
    for round in 0..300u64 {
        let isolation = if rng.gen_bool(0.5) { Isolation::Serializable } else { Isolation::Snapshot };
        let mut t = db.transaction_with(TransactionOptions { isolation, sync: false });
        let t0 = clock.now;
        let mut view = model.clone();
        let mut written: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut checked_reads: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut scanned: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut range_deleted: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let ctx = |step: usize| format!("round {round} step {step} ({isolation:?})");
        for step in 0..rng.gen_range(1..12) {
            match rng.gen_range(0..100) {
                0..=24 => {
                    let k = key(&mut rng);
                    let v = make_value(&k, round * 100 + step as u64, rng.gen_range(1..40));
                    t.put(&ks, &k, &v).unwrap();
                    view.insert(k.clone(), v);
                    written.insert(k);
                }
                25..=34 => {
                    let k = key(&mut rng);
                    t.delete(&ks, &k).unwrap();
                    view.remove(&k);
                    written.insert(k);
                }
                35..=38 => {
                    let (a, b) = (key(&mut rng), key(&mut rng));
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    t.delete_range(&ks, &lo, &hi).unwrap();
                    view.retain(|k, _| !(lo <= *k && *k < hi));
                    range_deleted.push((lo, hi));
                }
                39..=58 => {
                    let k = key(&mut rng);
                    let for_update = rng.gen_bool(0.2);
                    let got = if for_update { t.get_for_update(&ks, &k) } else { t.get(&ks, &k) }.unwrap();
                    assert_eq!(got.map(|v| v.to_vec()), view.get(&k).cloned(), "{}: get {k:?}", ctx(step));
                    if for_update || isolation == Isolation::Serializable {
                        checked_reads.insert(k);
                    }
                }
                59..=65 => {
                    let keys: Vec<Vec<u8>> = (0..4).map(|_| key(&mut rng)).collect();
                    let got = t.multi_get(&ks, &keys).unwrap();
                    for (k, g) in keys.iter().zip(got) {
                        assert_eq!(g.map(|v| v.to_vec()), view.get(k).cloned(), "{}: multi_get {k:?}", ctx(step));
                    }
                    if isolation == Isolation::Serializable {
                        checked_reads.extend(keys);
                    }
                }
                66..=79 => {
                    let (a, b) = (key(&mut rng), key(&mut rng));
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    let want = model_range(&view, &lo, &hi);
                    let mut it = t.range(&ks, lo.clone()..hi.clone()).unwrap();
                    let (mut front, mut back) = (Vec::new(), Vec::new());
                    let mode = rng.gen_range(0..3);
                    loop {
                        let item = match mode {
                            0 => it.next(),
                            1 => it.next_back(),
                            _ if rng.gen_bool(0.5) => it.next(),
                            _ => {
                                match it.next_back() {
                                    Some(r) => back.push(r.unwrap()),
                                    None => break,
                                }
                                continue;
                            }
                        };
                        match item {
                            Some(r) if mode == 1 => back.push(r.unwrap()),
                            Some(r) => front.push(r.unwrap()),
                            None => break,
                        }
                    }
                    back.reverse();
                    let got: Vec<(Vec<u8>, Vec<u8>)> =
                        front.into_iter().chain(back).map(|(k, v)| (k, v.to_vec())).collect();
                    assert_eq!(got, want, "{}: range {lo:?}..{hi:?} mode {mode}", ctx(step));
                    if isolation == Isolation::Serializable {
                        scanned.push((lo, hi));
                    }
                }
                _ => {
                    // Another client writes (or range-deletes) a key.
                    clock.now += 1;
                    let k = key(&mut rng);
                    if rng.gen_bool(0.1) {
                        let hi = [k.as_slice(), b"5"].concat();
                        db.delete_range(&k, &hi).unwrap();
                        model.retain(|x, _| !(k <= *x && *x < hi));
                        clock.range_deletes.push((k, hi, clock.now));
                    } else if rng.gen_bool(0.8) {
                        let v = make_value(&k, 1_000_000 + clock.now, rng.gen_range(1..40));
                        db.put(&k, &v).unwrap();
                        model.insert(k.clone(), v);
                        clock.writes.insert(k, clock.now);
                    } else {
                        db.delete(&k).unwrap();
                        model.remove(&k);
                        clock.writes.insert(k, clock.now);
                    }
                }
            }
        }
        let mut conflict = written.iter().chain(&checked_reads).any(|k| clock.key_written_after(k, t0))
            || scanned.iter().chain(&range_deleted).any(|(lo, hi)| clock.range_written_after(lo, hi, t0));
        let writes_something = !written.is_empty() || !range_deleted.is_empty();
        conflict &= writes_something;
        match t.commit() {
            Ok(()) => {
                assert!(!conflict, "round {round}: committed though the model says it conflicts");
                if writes_something {
                    // The transaction's writes replace the snapshot's view of what it touched.
                    for (lo, hi) in &range_deleted {
                        model.retain(|k, _| !(lo <= k && k < hi));
                    }
                    for k in &written {
                        match view.get(k) {
                            Some(v) => model.insert(k.clone(), v.clone()),
                            None => model.remove(k),
                        };
                    }
                    // Range deletes then writes: what the view holds in the ranges is now the model's.
                    for (lo, hi) in &range_deleted {
                        for (k, v) in view.range(lo.clone()..hi.clone()) {
                            model.insert(k.clone(), v.clone());
                        }
                    }
                    clock.now += 1;
                    for k in &written {
                        clock.writes.insert(k.clone(), clock.now);
                    }
                    for (lo, hi) in &range_deleted {
                        clock.range_deletes.push((lo.clone(), hi.clone(), clock.now));
                    }
                }
                commits += 1;
            }
            Err(Error::Conflict { .. }) => {
                assert!(conflict, "round {round}: conflict the model does not see");
                conflicts += 1;
            }
            Err(e) => panic!("round {round}: {e}"),
        }
        let state: Model =
            ks.range::<&[u8], _>(..).unwrap().map(|r| r.map(|(k, v)| (k, v.to_vec())).unwrap()).collect();
        assert!(state == model, "round {round}: the database differs from the model");
        if round % 50 == 49 {
            db.flush().unwrap();
        }
    }
    assert!(commits > 50 && conflicts > 10, "commits {commits}, conflicts {conflicts}: the test must exercise both");
}

// ---- Crash enumeration -------------------------------------------------------------------

fn crash_options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .write_buffer_bytes(1 << 20)
        .min_separated_value_bytes(1024)
        .gc_interval_ms(0)
}

/// The scripted transactions: (keyspace, key, value or delete) each, synced or not.
type Script = Vec<(Vec<(&'static str, Vec<u8>, Option<Vec<u8>>)>, bool)>;

fn crash_script() -> Script {
    let v = |i: u64, len: usize| Some(make_value(format!("v{i}").as_bytes(), i, len));
    let k = |s: &str| s.as_bytes().to_vec();
    vec![
        (vec![("default", k("d0"), v(0, 30)), ("a", k("a0"), v(1, 1500))], false),
        (vec![("a", k("a1"), v(2, 40)), ("default", k("d1"), v(3, 2000)), ("a", k("a0"), None)], true),
        (vec![("default", k("d0"), None), ("a", k("a2"), v(4, 1200)), ("default", k("d2"), v(5, 20))], false),
        (vec![("a", k("a1"), v(6, 1800)), ("default", k("d3"), v(7, 30))], true),
    ]
}

fn all_contents(db: &Db) -> BTreeMap<String, Model> {
    let mut out = BTreeMap::new();
    for name in ["default", "a"] {
        let Ok(ks) = db.keyspace(name) else { continue };
        let m: Model = ks.range::<&[u8], _>(..).unwrap().map(|r| r.map(|(k, v)| (k, v.to_vec())).unwrap()).collect();
        out.insert(name.to_string(), m);
    }
    out
}

/// Open, create keyspace `a`, run the script's transactions (each reads the keys it writes,
/// serializable). Returns the states after each acknowledged step and the last durable one.
fn run_script(fs: &FaultFs, script: &Script) -> (Vec<BTreeMap<String, Model>>, usize) {
    // Before and after keyspace `a` is created (an attempted creation may survive a crash).
    let empty = BTreeMap::from([("default".to_string(), Model::new()), ("a".to_string(), Model::new())]);
    let mut states = vec![BTreeMap::from([("default".to_string(), Model::new())]), empty];
    let mut floor = 0;
    let Ok(db) = Db::open("/txndb", crash_options(fs)) else { return (states, floor) };
    let Ok(a) = db.create_keyspace("a", Options::default()) else { return (states, floor) };
    // The keyspace's creation is durable in the manifest once it returns.
    floor = 1;
    for (ops, sync) in script {
        let mut next = states.last().expect("state").clone();
        let mut t = db.transaction_with(TransactionOptions { isolation: Isolation::Serializable, sync: *sync });
        let mut failed = false;
        for (name, k, v) in ops {
            let ks = if *name == "a" { &a } else { db.default_keyspace() };
            failed |= t.get(ks, k).is_err();
            let m = next.get_mut(*name).expect("model");
            match v {
                Some(v) => {
                    t.put(ks, k, v).unwrap();
                    m.insert(k.clone(), v.clone());
                }
                None => {
                    t.delete(ks, k).unwrap();
                    m.remove(k);
                }
            }
        }
        states.push(next);
        if failed || t.commit().is_err() {
            assert!(fs.is_halted(), "a step failed without a fault");
            break;
        }
        if *sync {
            floor = states.len() - 1;
        }
    }
    (states, floor)
}

/// A crash at every filesystem call of a workload of cross-keyspace transactions, in every
/// crash mode: the recovered database is the state after some prefix of the attempted
/// commits that includes every synced one — each transaction whole or absent.
#[test]
fn a_crash_at_every_step_of_transaction_commits_leaves_each_whole_or_absent() {
    let script = crash_script();
    let total = {
        let fs = FaultFs::in_memory(1);
        let (states, _) = run_script(&fs, &script);
        assert_eq!(states.len(), script.len() + 2, "clean run");
        fs.ops_count()
    };
    let mut checked = 0;
    for (at, mode) in crash_points(total, u64::MAX) {
        let fs = halting_after(at);
        let (states, floor) = run_script(&fs, &script);
        fs.halt();
        fs.crash(mode).expect("crash");
        let db = Db::open("/txndb", crash_options(&fs)).unwrap_or_else(|e| panic!("crash point {at} ({mode:?}): {e}"));
        prefix_state(&states, floor, &all_contents(&db), &format!("crash point {at} ({mode:?}): commits"));
        checked += 1;
    }
    assert!(checked > 20, "only {checked} crash points");
}

// ---- The bank ------------------------------------------------------------------------------

const ACCOUNTS: u32 = 10_000;
const START_BALANCE: u64 = 1_000;

fn account(i: u32) -> Vec<u8> {
    format!("acct/{i:05}").into_bytes()
}

fn balance(v: Option<wisckey::Value>) -> u64 {
    let v = v.expect("every account exists");
    u64::from_le_bytes(v[..8].try_into().expect("an 8-byte balance"))
}

fn seed_accounts(db: &Db) {
    let mut b = wisckey::WriteBatch::new();
    for i in 0..ACCOUNTS {
        b.put(account(i), START_BALANCE.to_le_bytes());
    }
    db.write(&WriteOptions::synced(), &b).expect("seed");
}

/// Sum of every balance at one snapshot (a read-only transaction's scan).
fn total(db: &Db) -> (u64, usize) {
    let mut t = db.transaction();
    let (mut sum, mut n) = (0, 0);
    for r in t.prefix(db.default_keyspace(), b"acct/").expect("prefix") {
        let (_, v) = r.expect("entry");
        sum += u64::from_le_bytes(v[..8].try_into().expect("balance"));
        n += 1;
    }
    (sum, n)
}

/// What a transfer did.
struct Transfer {
    retries: u64,
    /// Whether it moved money (and wrote its record): `false` when the balance was too low.
    moved: bool,
}

/// One transfer between two accounts in a serializable transaction, retried on conflict;
/// `record` (a key and its value) is written in the same transaction.
fn transfer(db: &Db, rng: &mut StdRng, sync: bool, record: Option<(&[u8], &[u8])>) -> wisckey::Result<Transfer> {
    let ks = db.default_keyspace();
    let from = rng.gen_range(0..ACCOUNTS);
    let to = (from + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
    let amount = rng.gen_range(1..50u64);
    let mut retries = 0;
    loop {
        let mut t = db.transaction_with(TransactionOptions { isolation: Isolation::Serializable, sync });
        let got = t.multi_get(ks, &[account(from), account(to)])?;
        let (a, b) = (balance(got[0].clone()), balance(got[1].clone()));
        let moved = a >= amount;
        if moved {
            t.put(ks, account(from), (a - amount).to_le_bytes())?;
            t.put(ks, account(to), (b + amount).to_le_bytes())?;
            if let Some((k, v)) = record {
                t.put(ks, k, [v, &from.to_le_bytes(), &to.to_le_bytes(), &amount.to_le_bytes()].concat())?;
            }
        }
        match t.commit() {
            Ok(()) => return Ok(Transfer { retries, moved }),
            Err(e) if e.is_retryable() => retries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Badger's bank: 10,000 accounts, 8 threads of random transfers in serializable
/// transactions with retries, a reader checking every 10 ms that the total never changes.
/// `WISCKEY_BANK_SECS` sets the run (default 2 s).
#[test]
fn bank_transfers_in_serializable_transactions_never_change_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), Options::default().gc_interval_ms(0)).unwrap());
    seed_accounts(&db);
    let want = u64::from(ACCOUNTS) * START_BALANCE;
    let secs = env_u64("WISCKEY_BANK_SECS", 2);
    let stop = Arc::new(AtomicBool::new(false));
    let (done, retries, checks) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut threads = Vec::new();
    for id in 0..8u64 {
        let (db, stop, done, retries) = (db.clone(), stop.clone(), done.clone(), retries.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(id);
            while !stop.load(Ordering::Relaxed) {
                retries.fetch_add(transfer(&db, &mut rng, false, None).expect("transfer").retries, Ordering::Relaxed);
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let reader = {
        let (db, stop, checks) = (db.clone(), stop.clone(), checks.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (sum, n) = total(&db);
                assert_eq!((sum, n), (want, ACCOUNTS as usize), "the total changed");
                checks.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("transfer thread");
    }
    reader.join().expect("reader");
    assert_eq!(total(&db), (want, ACCOUNTS as usize));
    let (done, retries, checks) =
        (done.load(Ordering::Relaxed), retries.load(Ordering::Relaxed), checks.load(Ordering::Relaxed));
    eprintln!("bank: {secs} s, {done} transfers committed, {retries} conflicts retried, {checks} total checks");
    assert!(done > 100 && checks > 10, "too little ran: {done} transfers, {checks} checks");
}

/// The child of the kill -9 test (does nothing unless `WISCKEY_BANK_CHILD` names a
/// directory): 4 threads of synced serializable transfers, each recording itself in the
/// database (`xfer/<cycle>/<thread>/<n>` → from, to, amount) and, once `commit` returned,
/// in `<dir>/reported-<cycle>`, until it is killed.
#[test]
fn bank_child_process() {
    let Ok(dir) = std::env::var("WISCKEY_BANK_CHILD") else { return };
    let cycle: u32 = std::env::var("WISCKEY_BANK_CYCLE").ok().and_then(|c| c.parse().ok()).unwrap_or(0);
    let dir = Path::new(&dir).to_path_buf();
    let db = Arc::new(Db::open(dir.join("db"), Options::default().gc_interval_ms(0)).expect("child open"));
    let report = Arc::new(std::sync::Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("reported-{cycle}")))
            .expect("report"),
    ));
    let threads: Vec<_> = (0..4u32)
        .map(|id| {
            let (db, report) = (db.clone(), report.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(u64::from(cycle) * 100 + u64::from(id));
                for n in 0u64.. {
                    let k = format!("xfer/{cycle:04}/{id}/{n:08}").into_bytes();
                    if !transfer(&db, &mut rng, true, Some((&k, b""))).expect("transfer").moved {
                        continue;
                    }
                    let mut f = report.lock().expect("report lock");
                    f.write_all(&[&k[..], b"\n"].concat()).expect("report write");
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// The bank under `kill -9`: a child process runs synced transfers and is killed; after each
/// recovery the total is unchanged, every transfer the child reported committed is there, and
/// the balances equal the starting ones plus every recorded transfer (each whole or absent).
/// `WISCKEY_BANK_CYCLES` sets the kills (default 3).
#[test]
fn bank_survives_kill_9_cycles_with_every_committed_transfer_present() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path().join("db"), Options::default()).unwrap();
        seed_accounts(&db);
    }
    let cycles = env_u64("WISCKEY_BANK_CYCLES", 3) as u32;
    let mut rng = StdRng::seed_from_u64(99);
    let exe = std::env::current_exe().unwrap();
    let mut reported_total = 0;
    for cycle in 0..cycles {
        let mut child = std::process::Command::new(&exe)
            .args(["bank_child_process", "--exact", "--nocapture", "--test-threads", "1"])
            .env("WISCKEY_BANK_CHILD", dir.path())
            .env("WISCKEY_BANK_CYCLE", cycle.to_string())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let report = dir.path().join(format!("reported-{cycle}"));
        // Kill it once it has committed some transfers, at a random moment after.
        let start = Instant::now();
        while std::fs::metadata(&report).map_or(0, |m| m.len()) < 20 * 21 {
            assert!(start.elapsed() < Duration::from_secs(60), "cycle {cycle}: the child commits nothing");
            if let Ok(Some(status)) = child.try_wait() {
                panic!("cycle {cycle}: the child exited: {status}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..300)));
        child.kill().unwrap();
        child.wait().unwrap();

        let db = Db::open(dir.path().join("db"), Options::default()).unwrap();
        let ks = db.default_keyspace();
        let (sum, n) = total(&db);
        assert_eq!((sum, n), (u64::from(ACCOUNTS) * START_BALANCE, ACCOUNTS as usize), "cycle {cycle}: total");
        let reported: Vec<Vec<u8>> = std::io::BufReader::new(std::fs::File::open(&report).unwrap())
            .lines()
            .map(|l| l.unwrap().into_bytes())
            .filter(|l| l.len() == 20)
            .collect();
        for k in &reported {
            assert!(
                ks.get(k).unwrap().is_some(),
                "cycle {cycle}: reported transfer {} is lost",
                String::from_utf8_lossy(k)
            );
        }
        reported_total += reported.len();
        // Replay every recorded transfer over the starting balances.
        let mut want = vec![START_BALANCE as i64; ACCOUNTS as usize];
        let mut records = 0;
        for r in ks.prefix(b"xfer/").unwrap() {
            let (_, v) = r.unwrap();
            if v.len() == 16 {
                let from = u32::from_le_bytes(v[0..4].try_into().unwrap()) as usize;
                let to = u32::from_le_bytes(v[4..8].try_into().unwrap()) as usize;
                let amount = u64::from_le_bytes(v[8..16].try_into().unwrap()) as i64;
                want[from] -= amount;
                want[to] += amount;
                records += 1;
            }
        }
        for (i, r) in ks.prefix(b"acct/").unwrap().enumerate() {
            let (_, v) = r.unwrap();
            assert_eq!(
                balance(Some(v)) as i64,
                want[i],
                "cycle {cycle}: account {i} differs from the replayed transfers"
            );
        }
        eprintln!(
            "kill -9 cycle {cycle}: {} reported, {records} recorded transfers in all, total intact",
            reported.len()
        );
    }
    assert!(reported_total > 0);
}

/// Where a model cursor over `view` lands for each move (`None`: not valid).
fn model_move(view: &Model, at: Option<&Vec<u8>>, op: u32, target: &[u8]) -> Option<Vec<u8>> {
    let first_from =
        |lo: std::ops::Bound<Vec<u8>>| view.range((lo, std::ops::Bound::Unbounded)).next().map(|e| e.0.clone());
    let last_before =
        |hi: std::ops::Bound<Vec<u8>>| view.range((std::ops::Bound::Unbounded, hi)).next_back().map(|e| e.0.clone());
    match op {
        0 => first_from(std::ops::Bound::Unbounded),
        1 => last_before(std::ops::Bound::Unbounded),
        2 => first_from(std::ops::Bound::Included(target.to_vec())),
        3 => at.and_then(|k| first_from(std::ops::Bound::Excluded(k.clone()))),
        _ => at.and_then(|k| last_before(std::ops::Bound::Excluded(k.clone()))),
    }
}

/// A transaction's cursor walks the snapshot (flushed and in the memtable) merged with the
/// transaction's puts, deletes and range deletes: random seeks, nexts and prevs (direction
/// changes included) land where a cursor over the `BTreeMap` of that view lands, and writes
/// other clients commit after the snapshot stay invisible.
#[test]
fn a_transactions_cursor_moves_both_ways_over_its_snapshot_and_its_own_writes_like_a_model() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    let mut model = Model::new();
    let mut rng = StdRng::seed_from_u64(env_u64("WISCKEY_TXN_SEED", 11));
    for round in 0..60u64 {
        for _ in 0..rng.gen_range(0..15) {
            let k = key(&mut rng);
            if rng.gen_bool(0.8) {
                let v = make_value(&k, round, rng.gen_range(1..300));
                ks.put(&k, &v).unwrap();
                model.insert(k, v);
            } else {
                ks.delete(&k).unwrap();
                model.remove(&k);
            }
        }
        if round % 7 == 0 {
            db.flush().unwrap();
        }
        let mut t = db.transaction();
        let mut view = model.clone();
        for step in 0..rng.gen_range(0..10) {
            let k = key(&mut rng);
            match rng.gen_range(0..10) {
                0..=5 => {
                    let v = make_value(&k, 1000 + round * 16 + step, rng.gen_range(1..40));
                    t.put(&ks, &k, &v).unwrap();
                    view.insert(k, v);
                }
                6..=8 => {
                    t.delete(&ks, &k).unwrap();
                    view.remove(&k);
                }
                _ => {
                    let hi = key(&mut rng);
                    let (lo, hi) = if k <= hi { (k, hi) } else { (hi, k) };
                    t.delete_range(&ks, &lo, &hi).unwrap();
                    view.retain(|k, _| !(lo <= *k && *k < hi));
                }
            }
        }
        // Another client's write after the snapshot: the cursor must not see it.
        ks.put(key(&mut rng), b"after the snapshot").unwrap();
        let mut c = t.iter(&ks).unwrap();
        let mut at: Option<Vec<u8>> = None;
        for step in 0..40 {
            let op = if at.is_none() { rng.gen_range(0..3) } else { rng.gen_range(0..5) };
            let target = key(&mut rng);
            match op {
                0 => c.seek_to_first(),
                1 => c.seek_to_last(),
                2 => c.seek(&target),
                3 => c.next(),
                _ => c.prev(),
            }
            .unwrap();
            at = model_move(&view, at.as_ref(), op, &target);
            let got = c.valid().then(|| (c.key().to_vec(), c.value().to_vec()));
            let want = at.as_ref().map(|k| (k.clone(), view[k].clone()));
            assert_eq!(got, want, "round {round} step {step}: op {op} (target {target:?})");
        }
        drop(c);
        t.rollback();
        model = all_of(&ks);
    }
}

fn all_of(ks: &Keyspace) -> Model {
    ks.range::<&[u8], _>(..).unwrap().map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect::<wisckey::Result<_>>().unwrap()
}

/// A serializable transaction that made a cursor fails its commit when another commit wrote
/// anywhere in that keyspace after its snapshot (a cursor may reach any key); a snapshot
/// isolated one that wrote other keys commits.
#[test]
fn a_cursor_makes_a_serializable_commit_check_the_whole_keyspace() {
    let db = mem_db();
    let ks = db.default_keyspace().clone();
    ks.put(b"a", b"1").unwrap();
    for isolation in [Isolation::Serializable, Isolation::Snapshot] {
        let mut t = db.transaction_with(TransactionOptions { isolation, sync: false });
        let mut c = t.iter(&ks).unwrap();
        c.seek_to_first().unwrap();
        assert_eq!(c.key(), b"a");
        drop(c);
        t.put(&ks, b"b", b"2").unwrap();
        ks.put(b"zzz", b"phantom").unwrap();
        match isolation {
            Isolation::Serializable => assert_conflict(t.commit(), b"zzz", "serializable cursor"),
            _ => t.commit().unwrap(),
        }
    }
}
