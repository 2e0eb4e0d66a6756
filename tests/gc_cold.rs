//! Hot/cold separation: values that survive a value-log GC move to cold value files
//! (`NNNNNN.cold`), which read back before and after a reopen, are themselves collected once
//! their values die, and whose torn tail (a crash before GC's sync) is told apart from
//! damage to values they hold.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use common::{assert_view_matches, files_with, make_value, Model};
use wisckey::fs::PosixFs;
use wisckey::{Db, Options, ReadOptions};

fn options() -> Options {
    Options::default()
        .vfs(Arc::new(PosixFs::new()))
        .min_separated_value_bytes(64)
        .log_file_bytes(64 << 10)
        .write_buffer_bytes(32 << 10)
        .gc_interval_ms(0)
        .gc_chunk_bytes(16 << 10)
        .gc_pause_ms(0)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// `n` keys written once (cold), then the first half overwritten twice (hot), flushed and
/// compacted so the discard statistics know.
fn load(db: &Db, n: u64, model: &mut Model) {
    for i in 0..n {
        let v = make_value(&key(i), i, 200);
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    for round in 1..3 {
        for i in 0..n / 2 {
            let v = make_value(&key(i), round * 1000 + i, 200);
            db.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
}

#[test]
fn values_that_survive_gc_move_to_a_cold_file_and_read_back_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let db = Db::open(dir.path(), options()).unwrap();
    load(&db, 600, &mut model);
    let logs_before = files_with(dir.path(), "vlog");
    let report = db.run_gc(0.0).unwrap();
    assert!(report.files_collected > 0 && report.bytes_rewritten > 0, "{report:?}");
    let cold = files_with(dir.path(), "cold");
    assert!(!cold.is_empty(), "GC's survivors must go to a cold file");
    let logs_after = files_with(dir.path(), "vlog");
    assert!(logs_after.iter().filter(|p| logs_before.contains(p)).count() < logs_before.len(), "old logs collected");
    assert!(db.stats().cold_bytes_written > 0);
    assert_view_matches(&db, &ReadOptions::default(), &model, "after GC");
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    assert_view_matches(&db, &ReadOptions::default(), &model, "after reopen");
    assert!(db.verify().unwrap().is_healthy());
}

#[test]
fn a_cold_file_is_collected_once_its_values_are_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let db = Db::open(dir.path(), options()).unwrap();
    load(&db, 600, &mut model);
    db.run_gc(0.0).unwrap();
    let first_cold = files_with(dir.path(), "cold");
    assert!(!first_cold.is_empty());
    for i in 0..600 {
        let v = make_value(&key(i), 9000 + i, 200);
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    db.run_gc(0.0).unwrap();
    // The first GC's cold file may still be the one it filled last; one more round at most.
    db.flush().unwrap();
    db.run_gc(0.0).unwrap();
    let left: Vec<_> = files_with(dir.path(), "cold").into_iter().filter(|p| first_cold.contains(p)).collect();
    assert!(left.is_empty(), "dead cold files must be collected: {left:?} still there");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after the second GC");
}

/// Append `bytes` to the end of `path` (a torn, never-referenced group), or overwrite them at
/// `at`.
fn scribble(path: &Path, at: Option<u64>, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    match at {
        Some(at) => f.seek(SeekFrom::Start(at)).unwrap(),
        None => f.seek(SeekFrom::End(0)).unwrap(),
    };
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_torn_cold_tail_is_dropped_but_damage_to_live_cold_values_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let db = Db::open(dir.path(), options()).unwrap();
    load(&db, 600, &mut model);
    db.run_gc(0.0).unwrap();
    db.close().unwrap();
    let cold = files_with(dir.path(), "cold");
    let newest = cold.last().unwrap().clone();
    // A crash while GC appended to a cold file it had not synced: a partial group header
    // claiming more bytes than follow.
    scribble(&newest, None, &[0x55, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0]);
    let db = Db::open(dir.path(), options()).unwrap();
    assert_view_matches(&db, &ReadOptions::default(), &model, "torn cold tail");
    // Everything overwritten: GC collects the cold files, torn tail included.
    for i in 0..600 {
        let v = make_value(&key(i), 5000 + i, 200);
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    db.run_gc(0.0).unwrap();
    assert!(!newest.exists(), "the cold file with the torn tail is collected");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after collecting it");

    // Damage inside a cold file whose values are live: reads and GC report corruption.
    db.run_gc(0.0).unwrap();
    db.close().unwrap();
    let cold = files_with(dir.path(), "cold");
    let victim = cold.first().expect("the last GC's survivors are in a cold file").clone();
    scribble(&victim, Some(100), &[0xAA; 32]);
    let db = Db::open(dir.path(), options()).unwrap();
    let damaged = (0..600).filter(|i| db.get(key(*i)).is_err_and(|e| e.is_corruption())).count();
    assert!(damaged > 0, "a damaged live value must be reported, not returned");
    for i in 0..600 {
        if let Ok(Some(v)) = db.get(key(i)) {
            assert_eq!(Some(&v[..]), model.get(&key(i)).map(Vec::as_slice), "no wrong value is returned");
        }
    }
    assert!(!db.verify().unwrap().is_healthy());
}
