//! The value cache, values kept by memtables, value handles and short scans
//! (`Db::scan_from`), against a `BTreeMap` model: cached values leave the cache when GC moves
//! them, reorganizes the log or deletes their file, and reads stay correct while GC races them;
//! damage on disk is still reported (the first read of a fresh open, and `verify`, which
//! bypasses the cache); the newest writes are read from their memtable without touching the
//! value log, in every direction, until the flush; handles outlive the iterator, snapshot and
//! database that produced them; a short scan returns exactly the model's entries, whether its
//! values come from a memtable, the cache, the page cache or the device, lie back to back in
//! the log or are scattered.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{make_value, model_range, show, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{MemFs, PosixFs, Vfs};
use wisckey::{Db, Options, PrepopulateValueCache, ReadOptions, Value, WriteBatch};

/// Values of at least this many bytes are separated.
const SEPARATED: usize = 100;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn options(vfs: Arc<dyn Vfs>) -> Options {
    common::small_log_options(vfs, SEPARATED).value_cache_bytes(4 << 20)
}

/// Write `version` of every key in `keys` (separated values, one batch per 16 keys).
fn write_all(db: &Db, model: &mut Model, keys: impl Iterator<Item = u32>, version: u64) {
    let mut batch = WriteBatch::new();
    for i in keys {
        let v = make_value(&key(i), version, 300);
        batch.put(key(i), &v);
        model.insert(key(i), v);
        if batch.len() == 16 {
            db.write(&Default::default(), &batch).expect("write");
            batch = WriteBatch::new();
        }
    }
    if !batch.is_empty() {
        db.write(&Default::default(), &batch).expect("write");
    }
}

fn read_all(db: &Db, model: &Model, ctx: &str) {
    for (k, v) in model {
        let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {}: {e}", show(k)));
        assert!(got.as_deref() == Some(&v[..]), "{ctx}: get {}", show(k));
    }
}

#[test]
fn gc_moving_cached_values_drops_them_from_the_cache() {
    let fs = Arc::new(MemFs::new());
    // Only values read enter the cache: what stays after GC is then what GC failed to drop.
    let db = Db::open("/db", options(fs.clone()).prepopulate_value_cache(PrepopulateValueCache::Off)).expect("open");
    let mut model = Model::new();
    write_all(&db, &mut model, 0..400, 1);
    db.flush().expect("flush");
    read_all(&db, &model, "first read");
    let s = db.stats();
    assert!(s.value_cache_entries >= 400, "every value read is cached: {s:?}");
    read_all(&db, &model, "second read");
    let hits = db.stats().value_cache_hits - s.value_cache_hits;
    assert!(hits >= 400, "the second read is served from the cache ({hits} hits)");

    // Overwrite everything, then collect every old file: its cached values must go.
    write_all(&db, &mut model, 0..400, 2);
    db.compact_range(None, None).expect("compact");
    let report = db.run_gc(0.0).expect("gc");
    assert!(report.files_collected > 0, "{report:?}");
    let after = db.stats();
    assert!(after.value_cache_entries < 40, "values of collected files stay cached: {after:?}");
    read_all(&db, &model, "after GC");
}

#[test]
fn reorganizing_the_log_drops_the_cached_old_copies() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", options(fs.clone()).prepopulate_value_cache(PrepopulateValueCache::Off)).expect("open");
    let mut model = Model::new();
    let mut rng = StdRng::seed_from_u64(7);
    let mut order: Vec<u32> = (0..300).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    write_all(&db, &mut model, order.into_iter(), 1);
    db.flush().expect("flush");
    read_all(&db, &model, "before");
    assert!(db.stats().value_cache_entries >= 300);
    db.reorganize_vlog().expect("reorganize");
    assert!(db.stats().value_cache_entries < 30, "old copies stay cached: {:?}", db.stats());
    read_all(&db, &model, "after reorganize");
    let got = db.scan_from(&ReadOptions::default(), b"", 1000).expect("scan_from");
    assert_eq!(got.len(), model.len());
}

/// GC collects while readers read through the cache (gets, scans, short scans) and a writer
/// overwrites: every value read is one the key had (the model records all versions), and at
/// the end every key reads its last version.
#[test]
fn reads_through_the_cache_stay_correct_while_gc_races_them() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", options(fs.clone()).value_cache_bytes(256 << 10)).expect("open");
    const KEYS: u32 = 300;
    const ROUNDS: u64 = 12;
    let mut model = Model::new();
    write_all(&db, &mut model, 0..KEYS, 0);
    let done = AtomicBool::new(false);
    let valid = |k: &[u8], v: &[u8]| (0..=ROUNDS).any(|r| make_value(k, r, 300) == v);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                db.run_gc(0.2).expect("gc");
            }
        });
        for t in 0..2u64 {
            let (db, done) = (&db, &done);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                while !done.load(Ordering::Relaxed) {
                    let i = rng.gen_range(0..KEYS);
                    let v = db.get(key(i)).expect("get").expect("present");
                    assert!(valid(&key(i), &v), "get {}: a value the key never had", i);
                    let from = key(rng.gen_range(0..KEYS));
                    for (k, v) in db.scan_from(&ReadOptions::default(), &from, 20).expect("scan_from") {
                        assert!(valid(&k, &v), "scan_from: a value {} never had", show(&k));
                    }
                }
            });
        }
        for r in 1..=ROUNDS {
            write_all(&db, &mut model, 0..KEYS, r);
            db.flush().expect("flush");
            db.compact_range(None, None).expect("compact");
        }
        done.store(true, Ordering::Relaxed);
    });
    db.run_gc(0.0).expect("gc");
    read_all(&db, &model, "after the race");
    let scanned = common::owned_map(db.scan(&ReadOptions::default()).expect("scan")).expect("scan");
    assert!(scanned == model, "the scan differs from the model");
}

/// A value damaged on disk is reported on its first read after an open (nothing is cached
/// then), and `verify` finds it even while the cache still holds the good copy.
#[test]
fn damage_on_disk_is_reported_the_first_time_and_by_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let opts = || options(Arc::new(PosixFs::new()));
    let mut model = Model::new();
    {
        let db = Db::open(&path, opts()).expect("open");
        write_all(&db, &mut model, 0..50, 1);
        // Flushed: the log holding the values is behind the head (not replayed at open).
        db.flush().expect("flush");
        db.close().expect("close");
    }
    let db = Db::open(&path, opts()).expect("reopen");
    read_all(&db, &model, "cached");
    // Flip bytes in the middle of every value-log file.
    for entry in std::fs::read_dir(&path).expect("list") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "vlog") {
            let mut bytes = std::fs::read(&p).expect("read");
            let mid = bytes.len() / 2;
            for b in &mut bytes[mid..mid + 64] {
                *b ^= 0x5a;
            }
            std::fs::write(&p, bytes).expect("write");
        }
    }
    let report = db.verify().expect("verify runs");
    assert!(!report.is_healthy(), "verify must not take cached copies for the disk: {report:?}");
    drop(db);
    let db = Db::open(&path, opts()).expect("open after damage");
    let damaged = model.keys().filter(|k| db.get(k).is_err_and(|e| e.is_corruption())).count();
    assert!(damaged > 0, "a damaged value must be reported on its first read");
    for (k, v) in &model {
        if let Ok(Some(got)) = db.get(k) {
            assert!(got == v[..], "{}: a wrong value was returned", show(k));
        }
    }
}

/// Handles from every read path stay valid and unchanged after the iterator, the snapshot and
/// the database are gone, and after GC deleted the files the values were read from.
#[test]
fn value_handles_outlive_their_iterator_snapshot_and_database() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", options(fs.clone())).expect("open");
    let mut model = Model::new();
    write_all(&db, &mut model, 0..100, 1);
    db.put(b"inline", b"small").expect("put");
    let snap = db.snapshot();
    let ro = ReadOptions { snapshot: Some(snap.clone()), ..ReadOptions::default() };
    let mut held: Vec<(Vec<u8>, Value)> = Vec::new();
    held.push((key(3), db.get(key(3)).expect("get").expect("present")));
    held.push((b"inline".to_vec(), db.get(b"inline").expect("get").expect("present")));
    let mut it = db.iter(&ro).expect("iter");
    it.seek(&key(10)).expect("seek");
    held.push((it.key().to_vec(), it.value_handle()));
    drop(it);
    held.extend(db.scan_from(&ro, key(50), 5).expect("scan_from"));
    held.extend(db.scan(&ro).expect("scan").take(3).map(|r| r.expect("entry")));
    let seven = key(7);
    let got = db.multi_get(&ro, &[&seven[..], b"inline", b"absent"]).expect("multi_get");
    held.push((key(7), got[0].clone().expect("present")));
    drop(ro);
    drop(snap);
    // Every old file collected and deleted, then the database closed.
    write_all(&db, &mut model, 0..100, 2);
    db.compact_range(None, None).expect("compact");
    db.run_gc(0.0).expect("gc");
    db.close().expect("close");
    for (k, v) in &held {
        let want = if k == b"inline" { b"small".to_vec() } else { make_value(k, 1, 300) };
        assert!(*v == want, "the handle of {} changed", show(k));
        assert_eq!(Vec::from(v.clone()), want);
    }
}

/// `scan_from` returns exactly the model's first `limit` entries from `from`, within bounds and
/// under a snapshot, for inline and separated values, values in the log buffer, and logs laid
/// out in key order (reads coalesced) or scattered, with and without the caches.
#[test]
fn scan_from_returns_exactly_the_models_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, vfs) in
        [("posix", Arc::new(PosixFs::new()) as Arc<dyn Vfs>), ("memory", Arc::new(MemFs::new()) as Arc<dyn Vfs>)]
    {
        let path = dir.path().join(name);
        vfs.create_dir_all(&path).expect("mkdir");
        let db = Db::open(&path, options(vfs.clone())).expect("open");
        let mut model = Model::new();
        let mut rng = StdRng::seed_from_u64(11);
        // Sequential first (values back to back in key order), then random overwrites, inline
        // values and deletes.
        write_all(&db, &mut model, 0..500, 1);
        for n in 0..800u64 {
            let k = key(rng.gen_range(0..600));
            match rng.gen_range(0..10) {
                0 => {
                    db.delete(&k).expect("delete");
                    model.remove(&k);
                }
                1..=3 => {
                    let v = make_value(&k, n + 10, 20);
                    db.put(&k, &v).expect("put");
                    model.insert(k, v);
                }
                _ => {
                    let v = make_value(&k, n + 10, rng.gen_range(SEPARATED..2000));
                    db.put(&k, &v).expect("put");
                    model.insert(k, v);
                }
            }
            if n == 400 {
                db.flush().expect("flush");
            }
        }
        let snap_model = model.clone();
        let snap = db.snapshot();
        write_all(&db, &mut model, (0..600).step_by(3), 99);
        for fill in [true, false] {
            for (view, snapshot, m) in [("latest", None, &model), ("snapshot", Some(snap.clone()), &snap_model)] {
                for _ in 0..60 {
                    let from = key(rng.gen_range(0..620));
                    let limit = rng.gen_range(1..40);
                    let bounded = rng.gen_bool(0.3);
                    let (lo, hi) = (key(rng.gen_range(0..300)), key(rng.gen_range(300..620)));
                    let ro = ReadOptions {
                        snapshot: snapshot.clone(),
                        fill_cache: Some(fill),
                        lower_bound: bounded.then(|| lo.clone()),
                        upper_bound: bounded.then(|| hi.clone()),
                        ..ReadOptions::default()
                    };
                    let got = db.scan_from(&ro, &from, limit).expect("scan_from");
                    let start = if bounded && lo > from { lo.clone() } else { from.clone() };
                    let want: Vec<_> =
                        model_range(m, Some(&start), ro.upper_bound.as_deref()).into_iter().take(limit).collect();
                    let got: Vec<_> = got.into_iter().map(|(k, v)| (k, v.to_vec())).collect();
                    assert!(got == want, "{name} {view} fill {fill}: scan_from {} limit {limit}", show(&from));
                }
            }
        }
        assert!(db.scan_from(&ReadOptions::default(), b"", 0).expect("limit 0").is_empty());
    }
}

/// With `PrepopulateValueCache::OnWrite`, values are cached as they are written: the first
/// read is already a hit.
#[test]
fn prepopulated_values_are_hits_on_their_first_read() {
    let fs = Arc::new(MemFs::new());
    let db =
        Db::open("/db", options(fs.clone()).prepopulate_value_cache(PrepopulateValueCache::OnWrite)).expect("open");
    let mut model = Model::new();
    write_all(&db, &mut model, 0..100, 1);
    // Flushed: the memtable no longer holds the values, the reads go to the value log.
    db.flush().expect("flush");
    let before = db.stats();
    assert!(before.value_cache_entries >= 100, "{before:?}");
    read_all(&db, &model, "prepopulated");
    let after = db.stats();
    assert_eq!(after.value_cache_misses, before.value_cache_misses, "no read missed the cache");
    assert!(after.value_cache_hits >= before.value_cache_hits + 100);
}

/// Every read of every kind over the same writes, with the memtable keeping values and without:
/// the same answers; while kept, the values come from memory (no value-cache lookup at all),
/// and after a flush nothing is kept and the reads go to the value log.
#[test]
fn values_kept_by_the_memtable_read_like_values_in_the_log() {
    let read_all_ways = |db: &Db, model: &Model, ctx: &str| {
        read_all(db, model, ctx);
        common::assert_view_matches(db, &ReadOptions::default(), model, ctx);
        let got = db.scan_from(&ReadOptions::default(), key(40), 30).expect("scan_from");
        let want: Vec<_> = model_range(model, Some(&key(40)), None).into_iter().take(30).collect();
        assert!(got.into_iter().map(|(k, v)| (k, v.to_vec())).collect::<Vec<_>>() == want, "{ctx}: scan_from");
    };
    for keep in [true, false] {
        let fs = Arc::new(MemFs::new());
        let max = if keep { 1 << 20 } else { 0 };
        let db = Db::open("/db", options(fs.clone()).write_buffer_bytes(1 << 20).memtable_kept_value_max_bytes(max))
            .expect("open");
        let mut model = Model::new();
        write_all(&db, &mut model, 0..200, 1);
        db.delete(key(7)).expect("delete");
        model.remove(&key(7));
        db.put(key(8), b"inline").expect("put");
        model.insert(key(8), b"inline".to_vec());
        let kept = db.stats().memtable_kept_bytes;
        assert_eq!(kept > 0, keep, "kept bytes {kept} with keep={keep}");
        let before = db.stats();
        read_all_ways(&db, &model, &format!("keep={keep}, in the memtable"));
        let after = db.stats();
        let lookups = |s: &wisckey::DbStats| s.value_cache_hits + s.value_cache_misses;
        if keep {
            assert_eq!(lookups(&after), lookups(&before), "values in the memtable are read from it");
        } else {
            assert!(lookups(&after) > lookups(&before), "without keeping, reads go to the log");
        }
        db.flush().expect("flush");
        assert_eq!(db.stats().memtable_kept_bytes, 0, "a flushed memtable keeps nothing");
        read_all_ways(&db, &model, &format!("keep={keep}, flushed"));
    }
}

/// A short scan over more value bytes than one batch holds reads them in several batches and
/// still returns every entry in order.
#[test]
fn scan_from_over_many_large_values_returns_them_all() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", options(fs.clone())).expect("open");
    let mut model = Model::new();
    for i in 0..120u32 {
        let v = make_value(&key(i), 1, 100_000);
        db.put(key(i), &v).expect("put");
        model.insert(key(i), v);
    }
    db.flush().expect("flush");
    let got = db.scan_from(&ReadOptions::default(), key(5), 100).expect("scan_from");
    let want: Vec<_> = model_range(&model, Some(&key(5)), None).into_iter().take(100).collect();
    assert_eq!(got.len(), 100);
    assert!(got.into_iter().map(|(k, v)| (k, v.to_vec())).collect::<Vec<_>>() == want, "12 MB scanned in batches");
}

/// By default a flushed memtable hands the values it kept to the value cache: reads right
/// after the flush are hits, for values written one per put and in batches alike.
#[test]
fn a_flush_hands_kept_values_to_the_value_cache() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", options(fs.clone())).expect("open");
    let mut model = Model::new();
    for i in 0..50u32 {
        let v = make_value(&key(i), 1, 300);
        db.put(key(i), &v).expect("put");
        model.insert(key(i), v);
    }
    write_all(&db, &mut model, 100..150, 1);
    db.flush().expect("flush");
    let s = db.stats();
    assert_eq!(s.value_cache_entries, 100, "single puts' and batches' values: {s:?}");
    read_all(&db, &model, "after the flush");
    let hits = db.stats().value_cache_hits - s.value_cache_hits;
    assert_eq!(hits, 100, "every value is a hit after the flush");
    let off = Db::open("/off", options(fs.clone()).prepopulate_value_cache(PrepopulateValueCache::Off)).expect("open");
    for i in 0..50u32 {
        off.put(key(i), make_value(&key(i), 1, 300)).expect("put");
    }
    off.flush().expect("flush");
    assert_eq!(off.stats().value_cache_entries, 0, "nothing is handed over when off");
}

#[test]
fn an_iterator_streams_values_without_filling_the_cache_unless_asked() {
    let fs = Arc::new(MemFs::new());
    let opts = options(fs.clone()).prepopulate_value_cache(PrepopulateValueCache::Off);
    let db = Db::open("/db", opts).expect("open");
    let mut model = Model::new();
    write_all(&db, &mut model, 0..200, 1);
    db.flush().expect("flush");
    let entries = |ro: &ReadOptions| db.scan(ro).expect("scan").filter(|e| e.is_ok()).count();
    // A long scan with the defaults reads every value and leaves the cache as it was.
    assert_eq!(entries(&ReadOptions::default()), model.len());
    assert_eq!(db.stats().value_cache_entries, 0, "the default scan filled the value cache");
    // Asked to, it fills it.
    let fill = ReadOptions { fill_cache: Some(true), ..ReadOptions::default() };
    assert_eq!(entries(&fill), model.len());
    assert_eq!(db.stats().value_cache_entries, model.len() as u64);
    // scan_from (a short scan of known length) fills it by default, as a get does.
    let db = {
        drop(db);
        Db::open("/db", options(fs).prepopulate_value_cache(PrepopulateValueCache::Off)).expect("reopen")
    };
    let got = db.scan_from(&ReadOptions::default(), key(10), 20).expect("scan_from");
    assert_eq!(got.len(), 20);
    assert_eq!(db.stats().value_cache_entries, 20);
}

#[test]
fn a_point_read_that_misses_the_cache_counts_one_miss() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", options(fs).prepopulate_value_cache(PrepopulateValueCache::Off)).expect("open");
    let mut model = Model::new();
    write_all(&db, &mut model, 0..50, 1);
    db.flush().expect("flush");
    let before = db.stats();
    assert!(db.get(key(7)).expect("get").is_some());
    let after = db.stats();
    assert_eq!(after.value_cache_misses - before.value_cache_misses, 1, "one lookup per read");
    assert!(db.get(key(7)).expect("get").is_some());
    assert_eq!(db.stats().value_cache_hits - after.value_cache_hits, 1, "the second read hits");
}
