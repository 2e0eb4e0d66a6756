//! Automatic value-log GC keeps disk use bounded under an overwrite-heavy load: with
//! `gc_space_amp_stall` writers wait for GC, so space cannot run away, every value stays
//! readable, and a stall never hangs a writer when GC cannot free anything (an old snapshot).

mod common;

use std::sync::Arc;

use common::Model;
use wisckey::fs::PosixFs;
use wisckey::{Db, Options, ReadOptions};

const KEYS: u32 = 3000;
const VALUE_BYTES: usize = 4096;

fn options(stall: f64) -> Options {
    Options::default()
        .vfs(Arc::new(PosixFs::new()))
        .write_buffer_bytes(256 << 10)
        .memtable_log_bytes(1 << 20)
        .log_file_bytes(1 << 20)
        .target_file_size_bytes(64 << 10)
        .max_bytes_for_level_base(256 << 10)
        .gc_chunk_bytes(256 << 10)
        .gc_interval_ms(5)
        .gc_pause_ms(0)
        .gc_space_amp_target(if stall > 0.0 { stall - 0.1 } else { 0.0 })
        .gc_space_amp_stall(stall)
}

fn value(key: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{key:08}-{round:04}-").into_bytes();
    v.resize(VALUE_BYTES, b'a' + (round % 26) as u8);
    v
}

fn key(k: u32) -> Vec<u8> {
    format!("key{:08}", k.wrapping_mul(2_654_435_761) % 1_000_000_007).into_bytes()
}

/// Overwrite every key `rounds` times in a scrambled order; returns the model.
fn overwrite(db: &Db, rounds: u32, model: &mut Model) {
    for r in 0..rounds {
        for i in 0..KEYS {
            let k = (i * 7919 + r * 104_729) % KEYS;
            let v = value(k, r);
            db.put(key(k), &v).unwrap();
            model.insert(key(k), v);
        }
    }
}

fn live_bytes(model: &Model) -> u64 {
    model.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum()
}

fn check(db: &Db, model: &Model) {
    common::assert_view_matches(db, &ReadOptions::default(), model, "latest view");
}

#[test]
fn stalled_writers_keep_space_amplification_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1.3)).unwrap();
    let mut model = Model::new();
    overwrite(&db, 8, &mut model);
    let s = db.stats();
    let amp = s.vlog_disk_bytes as f64 / live_bytes(&model) as f64;
    eprintln!("space amplification at the last put {amp:.2} (estimate {:.2})", s.vlog_space_amp_estimate);
    check(&db, &model);
    // Without GC this load leaves about 8x; the stall holds the estimate at 1.3. The truth
    // measured at the last put may be above it by up to five transients, each up to a 1 MiB
    // file or memtable (1/12 of the 12 MiB live here): the memtable's overwrites not yet
    // counted, a file being collected whose live values already have new copies, the log
    // head, which GC never takes, the cold file GC is filling, and a cold file waiting for the
    // log head to pass its pointer puts. (With 6 MiB live a clean-clone CI run saw 2.02.)
    assert!(amp < 2.0, "space amplification {amp:.2} with the stall at 1.3: {s:?}");
    assert!(s.gc_bytes_freed > 0 && s.gc_runs > 0, "GC never ran: {s:?}");
}

#[test]
fn without_gc_the_same_load_takes_far_more_space() {
    // The control for the test above: proves the load really produces the garbage.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(0.0).gc_interval_ms(0)).unwrap();
    let mut model = Model::new();
    overwrite(&db, 8, &mut model);
    let amp = db.stats().vlog_disk_bytes as f64 / live_bytes(&model) as f64;
    assert!(amp > 4.0, "expected runaway space without GC, got {amp:.2}");
    check(&db, &model);
}

#[test]
fn an_old_snapshot_does_not_hang_stalled_writers() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(1.3)).unwrap();
    let mut model = Model::new();
    overwrite(&db, 1, &mut model);
    let snap = db.snapshot();
    let old = model.clone();
    // GC cannot free what the snapshot still reads: the stall must end anyway.
    overwrite(&db, 4, &mut model);
    check(&db, &model);
    let ro = ReadOptions { snapshot: Some(snap.clone()), ..Default::default() };
    common::assert_view_matches(&db, &ro, &old, "the snapshot's view");
    drop(ro);
    drop(snap);
    overwrite(&db, 2, &mut model);
    check(&db, &model);
    drop(db);
    let db = Db::open(dir.path(), options(1.3)).unwrap();
    check(&db, &model);
}

#[test]
fn waiting_for_background_work_includes_the_gc_the_space_bound_calls_for() {
    let dir = tempfile::tempdir().unwrap();
    // No stall: the load outruns GC, which is left with work when the writes end.
    let db = Db::open(dir.path(), options(1.3).gc_space_amp_target(1.2).gc_space_amp_stall(100.0)).unwrap();
    let mut model = Model::new();
    overwrite(&db, 6, &mut model);
    db.wait_for_background_work().unwrap();
    let s = db.stats();
    // Nothing left above the target but what GC never takes (the log head and the cold
    // file being filled, 1 MiB each here: 2/12 of the live bytes).
    assert!(s.vlog_space_amp_estimate < 1.2 + 0.2, "GC left work after the wait: {s:?}");
    assert!(s.gc_runs > 0, "GC never ran: {s:?}");
    check(&db, &model);
}

#[test]
fn waiting_for_background_work_returns_while_other_threads_keep_overwriting() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), options(1.3).gc_space_amp_target(1.2).gc_space_amp_stall(100.0)).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut round = 0;
            // Every key overwritten again and again: GC always finds garbage to collect. At a
            // pace the flushes and compactions keep up with on a loaded 2-core machine: the
            // wait must end though the writer never stops, not outrun a writer that buries
            // the compactions.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for k in 0..KEYS {
                    db.put(key(k), value(k, round)).unwrap();
                    if k % 16 == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                round += 1;
            }
            round
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let db = db.clone();
        std::thread::spawn(move || tx.send(db.wait_for_background_work()).unwrap())
    };
    let waited = rx.recv_timeout(std::time::Duration::from_secs(60));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    waiter.join().unwrap();
    waited.expect("the wait kept collecting as long as the writer made garbage").unwrap();
    assert!(rounds > 0);
    let model: Model = (0..KEYS).map(|k| (key(k), value(k, rounds - 1))).collect();
    check(&db, &model);
}

/// While users only read, background GC leaves the disk to them (below the stall bound), and
/// it collects once the reads stop. Time enters only as GC's notion of "lately" (five GC
/// intervals, at least a second): the test reads for longer than that before it looks, and
/// waits a bounded while for the collection after.
#[test]
fn gc_waits_while_users_only_read_and_collects_once_they_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    {
        // No background GC while the garbage is made, so some is left.
        let db = Db::open(dir.path(), options(0.0).gc_interval_ms(0)).unwrap();
        overwrite(&db, 4, &mut model);
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        db.close().unwrap();
    }
    let db = Arc::new(Db::open(dir.path(), options(0.0)).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                db.get(key(i % KEYS)).unwrap();
                i = i.wrapping_add(1);
            }
        })
    };
    // Past GC's first look (which may come before the first read) and a whole window.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let before = db.stats().gc_runs;
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let during = db.stats().gc_runs;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(during, before, "GC collected while users only read");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.stats().gc_runs == during && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(db.stats().gc_runs > during, "GC did not collect once the reads stopped: {:?}", db.stats());
    check(&db, &model);
}
