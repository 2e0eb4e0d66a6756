//! Concurrent writers and readers on one database while flushes and compactions run:
//! writers update pairs of keys in one batch, readers check through snapshots and iterators
//! that both keys of a pair always carry the same version, that point reads never return a
//! version older than one already acknowledged, and at the end every key holds its last value.
//! Rounds per writer: env `WISCKEY_STRESS_ROUNDS` (default 2000).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use common::{assert_view_matches, make_value, show, tiny_options, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{MemFs, Vfs};
use wisckey::{Db, ReadOptions, WriteBatch, WriteOptions};

const WRITERS: usize = 4;
const PAIRS: usize = 24;

fn pair_key(w: usize, p: usize, half: u8) -> Vec<u8> {
    format!("w{w}-p{p:02}-{}", half as char).into_bytes()
}

/// Version `v` of a pair deletes both keys when `v % 5 == 0` (and 0 means never written), so
/// readers know from a version alone whether the pair should exist.
fn is_deletion(v: u64) -> bool {
    v.is_multiple_of(5)
}

fn value_len(v: u64) -> usize {
    if v % 7 == 3 {
        2000
    } else {
        32
    }
}

fn pair_value(w: usize, p: usize, half: u8, v: u64) -> Vec<u8> {
    make_value(&pair_key(w, p, half), v, value_len(v))
}

/// Parse the version out of a value written by `pair_value`, checking its bytes in full.
fn version_of(key: &[u8], value: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(value);
    let v: u64 = text
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once(':'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("value of {} is not one we wrote", show(key)));
    assert!(
        value == make_value(key, v, value_len(v)).as_slice(),
        "value of {} claims version {v} but its bytes differ (another key's value?)",
        show(key)
    );
    v
}

/// Per pair: the version a writer is about to write (`intent`) and the last acknowledged one.
struct Progress {
    intent: Vec<AtomicU64>,
    acked: Vec<AtomicU64>,
}

impl Progress {
    fn new() -> Self {
        let n = WRITERS * PAIRS;
        Progress {
            intent: (0..n).map(|_| AtomicU64::new(0)).collect(),
            acked: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn writer(db: &Db, w: usize, rounds: u64, progress: &Progress) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(w as u64);
    let mut versions = vec![0u64; PAIRS];
    for round in 0..rounds {
        let p = rng.gen_range(0..PAIRS);
        let v = versions[p] + 1;
        let slot = w * PAIRS + p;
        progress.intent[slot].store(v, SeqCst);
        let mut batch = WriteBatch::new();
        for half in [b'a', b'b'] {
            if is_deletion(v) {
                batch.delete(pair_key(w, p, half));
            } else {
                batch.put(pair_key(w, p, half), pair_value(w, p, half, v));
            }
        }
        let wo = WriteOptions { sync: round % 50 == 0 };
        db.write(&wo, &batch).unwrap_or_else(|e| panic!("writer {w} round {round}: {e}"));
        progress.acked[slot].store(v, SeqCst);
        versions[p] = v;
    }
    versions
}

/// Take snapshots and scan through them: the two halves of every pair agree, and a key seen
/// at version v is never seen at an older version through a later snapshot.
fn snapshot_reader(db: &Db, done: &AtomicBool) -> usize {
    let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut scans = 0;
    while !done.load(SeqCst) || scans < 3 {
        let use_snapshot = scans % 2 == 0;
        let ro = ReadOptions { snapshot: use_snapshot.then(|| db.snapshot()), ..ReadOptions::default() };
        let entries: Vec<_> =
            db.scan(&ro).and_then(common::owned).unwrap_or_else(|e| panic!("reader scan {scans}: {e}"));
        check_pairs_agree(&entries, scans);
        for (k, v) in &entries {
            let ver = version_of(k, v);
            let before = seen.insert(k.clone(), ver).unwrap_or(0);
            assert!(ver >= before, "{} went back from version {before} to {ver}", show(k));
        }
        if let Some(snap) = &ro.snapshot {
            // Point reads through the same snapshot agree with its scan.
            for (k, v) in entries.iter().step_by(7) {
                let got = db.get_opt(&ro, k).unwrap_or_else(|e| panic!("snapshot get: {e}"));
                assert!(
                    got.as_deref() == Some(&v[..]),
                    "snapshot {} get of {} disagrees with its scan",
                    snap.sequence(),
                    show(k)
                );
            }
        }
        scans += 1;
    }
    scans
}

/// Both halves of each pair are present with the same version, or both absent.
fn check_pairs_agree(entries: &[(Vec<u8>, Vec<u8>)], scan: usize) {
    let map: HashMap<&[u8], &[u8]> = entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
    for (k, v) in entries {
        let other = match k.last() {
            Some(b'a') => [&k[..k.len() - 1], b"b"].concat(),
            Some(b'b') => [&k[..k.len() - 1], b"a"].concat(),
            _ => panic!("scan {scan}: unexpected key {}", show(k)),
        };
        let Some(ov) = map.get(other.as_slice()) else {
            panic!("scan {scan}: {} present but {} absent: a batch was torn", show(k), show(&other));
        };
        assert_eq!(version_of(k, v), version_of(&other, ov), "scan {scan}: halves of a batch disagree at {}", show(k));
    }
}

/// Point reads: never older than the last acknowledged version, never newer than the intent.
fn point_reader(db: &Db, progress: &Progress, done: &AtomicBool, seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut reads = 0;
    while !done.load(SeqCst) || reads < 100 {
        let (w, p) = (rng.gen_range(0..WRITERS), rng.gen_range(0..PAIRS));
        let slot = w * PAIRS + p;
        let k = pair_key(w, p, if reads % 2 == 0 { b'a' } else { b'b' });
        let lo = progress.acked[slot].load(SeqCst);
        let got = db.get(&k).unwrap_or_else(|e| panic!("get {}: {e}", show(&k)));
        let hi = progress.intent[slot].load(SeqCst);
        match got {
            Some(v) => {
                let ver = version_of(&k, &v);
                assert!(
                    (lo..=hi).contains(&ver) && !is_deletion(ver),
                    "get {} returned version {ver}; acknowledged {lo}, in flight up to {hi}",
                    show(&k)
                );
            }
            None => assert!(
                (lo..=hi).any(is_deletion),
                "get {} returned nothing; acknowledged version {lo} (in flight up to {hi}) is a put",
                show(&k)
            ),
        }
        reads += 1;
    }
    reads
}

/// Flush and compact now and then, so readers race with version changes.
fn maintenance(db: &Db, done: &AtomicBool) {
    let mut n = 0u32;
    while !done.load(SeqCst) {
        if n.is_multiple_of(2) {
            db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        } else {
            db.compact_range(None, None).unwrap_or_else(|e| panic!("compact_range: {e}"));
        }
        n += 1;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn final_model(versions: &[Vec<u64>]) -> Model {
    let mut model = Model::new();
    for (w, vs) in versions.iter().enumerate() {
        for (p, &v) in vs.iter().enumerate() {
            if v > 0 && !is_deletion(v) {
                for half in [b'a', b'b'] {
                    model.insert(pair_key(w, p, half), pair_value(w, p, half, v));
                }
            }
        }
    }
    model
}

#[test]
fn four_writers_two_readers_see_atomic_batches_and_no_lost_writes() {
    let rounds = common::env_u64("WISCKEY_STRESS_ROUNDS", 2000);
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let options = tiny_options(fs);
    let db = Db::open("/concurrent", options.clone()).expect("open");
    let progress = Progress::new();
    let done = AtomicBool::new(false);
    let versions: Vec<Vec<u64>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                s.spawn({
                    let (db, progress) = (&db, &progress);
                    move || writer(db, w, rounds, progress)
                })
            })
            .collect();
        let snap_reader = s.spawn(|| snapshot_reader(&db, &done));
        let point = s.spawn(|| point_reader(&db, &progress, &done, 99));
        let maint = s.spawn(|| maintenance(&db, &done));
        let versions = writers.into_iter().map(|h| h.join().expect("writer panicked")).collect();
        done.store(true, SeqCst);
        let scans = snap_reader.join().expect("snapshot reader panicked");
        let reads = point.join().expect("point reader panicked");
        maint.join().expect("maintenance panicked");
        assert!(scans >= 3 && reads >= 100, "readers barely ran: {scans} scans, {reads} reads");
        versions
    });
    let model = final_model(&versions);
    db.wait_for_background_work().expect("background work");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after all writers finished");
    db.close().expect("close");
    let db = Db::open("/concurrent", options).expect("reopen");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after reopen");
}

/// Many threads doing tiny synced writes at once (group commit): each write is durable and
/// visible when it returns, and nothing is lost or duplicated across a reopen.
#[test]
fn concurrent_synced_writers_all_land_and_survive_reopen() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let options = tiny_options(fs);
    let db = Db::open("/group", options.clone()).expect("open");
    let per_thread = 150u64;
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let db = &db;
            s.spawn(move || {
                for i in 0..per_thread {
                    let k = format!("t{t}-{i:04}").into_bytes();
                    db.put_opt(&WriteOptions::synced(), &k, make_value(&k, i, 16)).expect("put");
                    assert!(db.get(&k).expect("get").is_some(), "own write of {} not visible", show(&k));
                }
            });
        }
    });
    let model: Model = (0..6u64)
        .flat_map(|t| (0..per_thread).map(move |i| (t, i)))
        .map(|(t, i)| {
            let k = format!("t{t}-{i:04}").into_bytes();
            let v = make_value(&k, i, 16);
            (k, v)
        })
        .collect();
    assert_view_matches(&db, &ReadOptions::default(), &model, "after concurrent synced writes");
    db.close().expect("close");
    let db = Db::open("/group", options).expect("reopen");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after reopen");
}

/// `Db` must be shareable across threads as `Arc<Db>`.
#[test]
fn db_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Db>();
    assert_send_sync::<Arc<Db>>();
    assert_send_sync::<wisckey::Snapshot>();
}
