//! One `run_gc` call has bounded work and bounded space: it collects only the vLog files that
//! existed when it started (never the files its own re-puts fill), so `run_gc(0.0)` returns on
//! small and large logs; while a snapshot older than its re-puts is held it stops (copying the
//! same live values again would only grow the disk) and says so. In every case the disk holds
//! at most one GC chunk more after the call than before it. Also: log files roll at
//! `log_file_bytes` in the middle of a memtable too.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::Model;
use wisckey::fs::PosixFs;
use wisckey::{Db, GcReport, Options, ReadOptions};

const VALUE_BYTES: usize = 4000;
const CHUNK: u64 = 1 << 20;

fn options(log_file_bytes: u64) -> Options {
    Options::default()
        .vfs(Arc::new(PosixFs::new()))
        .memtable_log_bytes(4 << 20)
        .log_file_bytes(log_file_bytes)
        .gc_chunk_bytes(CHUNK)
        .gc_interval_ms(0)
        .gc_pause_ms(0)
        .io_uring(false)
}

fn value(k: u64, round: u64) -> Vec<u8> {
    let mut v = format!("{k:08}-{round:04}-").into_bytes();
    v.resize(VALUE_BYTES, b'a' + (round % 26) as u8);
    v
}

fn key(k: u64) -> Vec<u8> {
    format!("key{:08}", k.wrapping_mul(2_654_435_761) % 1_000_000_007).into_bytes()
}

/// `keys` keys written `rounds` times: all but the last round are garbage.
fn load(db: &Db, keys: u64, rounds: u64, model: &mut Model) {
    for r in 0..rounds {
        for i in 0..keys {
            let k = (i * 7919 + r * 104_729) % keys;
            db.put(key(k), value(k, r)).expect("put");
            model.insert(key(k), value(k, r));
        }
    }
    db.compact_range(None, None).expect("compact");
}

/// `run_gc(0.0)` on another thread; fails the test if it has not returned after `limit`.
fn run_gc_within(db: &Arc<Db>, limit: Duration, ctx: &str) -> GcReport {
    let (tx, rx) = mpsc::channel();
    let d = db.clone();
    std::thread::spawn(move || {
        let _ = tx.send(d.run_gc(0.0));
    });
    match rx.recv_timeout(limit) {
        Ok(r) => r.unwrap_or_else(|e| panic!("{ctx}: run_gc failed: {e}")),
        Err(_) => panic!("{ctx}: run_gc(0.0) did not return within {limit:?} (it keeps collecting its own output)"),
    }
}

fn gc_case(keys: u64, log_file_bytes: u64, snapshot: bool) {
    let ctx = format!("{keys} keys x {VALUE_BYTES} B, log files of {log_file_bytes} B, snapshot held: {snapshot}");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), options(log_file_bytes)).expect("open"));
    let mut model = Model::new();
    load(&db, keys, 3, &mut model);
    let snap = snapshot.then(|| db.snapshot());
    let before = db.stats().disk_bytes;
    let report = run_gc_within(&db, Duration::from_secs(120), &ctx);
    let after = db.stats().disk_bytes;
    eprintln!("{ctx}: {before} -> {after} bytes on disk; {report:?}");
    assert!(after <= before + CHUNK, "{ctx}: disk grew from {before} to {after} bytes (bound: one chunk more)");
    if snapshot {
        assert!(report.stopped_by_reader_at.is_some(), "{ctx}: GC must say an old reader stopped it: {report:?}");
        assert!(report.bytes_rewritten <= CHUNK + VALUE_BYTES as u64 * 300, "{ctx}: copied too much: {report:?}");
    } else {
        assert!(report.files_collected > 0, "{ctx}: nothing collected: {report:?}");
        assert!(after < before, "{ctx}: GC of a log with 2/3 garbage freed nothing ({before} -> {after})");
    }
    common::assert_view_matches(&db, &ReadOptions::default(), &model, &ctx);
    // Once the reader is gone, GC goes on where it stopped.
    drop(snap);
    let again = run_gc_within(&db, Duration::from_secs(120), &ctx);
    assert!(again.stopped_by_reader_at.is_none(), "{ctx}: {again:?}");
    common::assert_view_matches(&db, &ReadOptions::default(), &model, &format!("{ctx}, second run"));
}

#[test]
fn run_gc_zero_returns_on_a_small_log_and_stays_within_one_chunk() {
    gc_case(300, 1 << 20, false);
}

#[test]
fn run_gc_zero_returns_on_a_small_log_with_a_snapshot_held() {
    gc_case(300, 1 << 20, true);
}

#[test]
fn run_gc_zero_returns_on_a_large_log_and_stays_within_one_chunk() {
    gc_case(3000, 4 << 20, false);
}

#[test]
fn run_gc_zero_returns_on_a_large_log_with_a_snapshot_held() {
    gc_case(3000, 4 << 20, true);
}

/// `log_file_bytes` holds while a memtable is still filling: files roll when they pass it,
/// not only at a memtable switch.
#[test]
fn log_files_roll_at_their_size_in_the_middle_of_a_memtable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = || options(1 << 20).memtable_log_bytes(64 << 20).write_buffer_bytes(64 << 20);
    let db = Db::open(dir.path(), opts()).expect("open");
    let mut model = Model::new();
    for i in 0..2500u64 {
        db.put(key(i), value(i, 0)).expect("put");
        model.insert(key(i), value(i, 0));
    }
    assert_eq!(db.stats().num_flushes, 0, "one memtable throughout");
    let sizes: Vec<u64> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .map(|p| std::fs::metadata(p).expect("stat").len())
        .collect();
    assert!(sizes.len() >= 8, "10 MB of log in 1 MiB files: {sizes:?}");
    let group = (VALUE_BYTES + 64) as u64;
    assert!(sizes.iter().all(|&s| s <= (1 << 20) + group), "a log file grew past its size: {sizes:?}");
    common::assert_view_matches(&db, &ReadOptions::default(), &model, "before reopen");
    drop(db);
    let db = Db::open(dir.path(), opts()).expect("reopen");
    common::assert_view_matches(&db, &ReadOptions::default(), &model, "after reopen");
}
