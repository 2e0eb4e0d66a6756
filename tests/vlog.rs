//! Key-value separation (the value log is the write-ahead log): damaged logs under both
//! recovery modes, torn record groups, a crash between a table's sync and the head's persist,
//! pointers to missing vLog files, and mixed sync/non-sync writers.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{assert_view_matches, files_with, make_value, tiny_options, Model};
use wisckey::fs::{CrashMode, FaultFs, FaultKind, FaultOp, FaultRule, PosixFs, Vfs};
use wisckey::{Db, Error, Options, ReadOptions, RecoveryMode, WriteOptions};

fn posix_options() -> Options {
    Options::default().vfs(Arc::new(PosixFs::new())).min_separated_value_bytes(64).gc_interval_ms(0)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// Synced puts of values on both sides of the 64-byte threshold.
fn write_synced(db: &Db, range: std::ops::Range<u64>, model: &mut Model) {
    for i in range {
        let v = make_value(&key(i), i, if i % 2 == 0 { 300 } else { 20 });
        db.put_opt(&WriteOptions::synced(), key(i), &v).expect("put");
        model.insert(key(i), v);
    }
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[offset as usize] ^= 0x40;
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn bit_flip_mid_log_with_synced_groups_after_it_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let mut model = Model::new();
    let db = Db::open(&path, posix_options()).expect("open");
    write_synced(&db, 0..200, &mut model);
    db.close().expect("close");
    let log = files_with(&path, "vlog").pop().expect("a log file");
    let len = std::fs::metadata(&log).expect("stat").len();
    flip_byte(&log, len / 2);
    let damaged = std::fs::read(&log).expect("read");

    for mode in [RecoveryMode::AbsoluteConsistency, RecoveryMode::TolerateCorruptTail] {
        match Db::open(&path, posix_options().recovery_mode(mode)) {
            Err(Error::Corruption { file, reason, .. }) => {
                assert_eq!(file, log, "{mode:?}");
                assert!(reason.contains("at stake"), "{mode:?}: the error names the sequence numbers: {reason}");
            }
            Err(e) => panic!("{mode:?}: expected Corruption naming {log:?}, got {e}"),
            Ok(_) => panic!("{mode:?}: opened a log whose synced groups follow damage"),
        }
        assert_eq!(std::fs::read(&log).expect("read"), damaged, "{mode:?}: the damaged log was changed");
    }
}

#[test]
fn torn_group_at_the_tail_is_dropped_and_the_rest_kept() {
    // The process dies (no clean close: the manifest records no durable end), and the last
    // group is torn: cut inside it, which takes the sync mark after it too, so nothing says
    // the group was ever durable — exactly what a crash during its write leaves.
    let fs = FaultFs::in_memory(3);
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let opts = || tiny_options(vfs.clone()).min_separated_value_bytes(64).gc_interval_ms(0).write_buffer_bytes(1 << 20);
    let mut model = Model::new();
    let db = Db::open("/db", opts()).expect("open");
    write_synced(&db, 0..50, &mut model);
    fs.halt();
    drop(db);
    fs.crash(CrashMode::KeepUnsynced).expect("crash");
    let mut logs: Vec<String> =
        vfs.list(Path::new("/db")).expect("list").into_iter().filter(|n| n.ends_with(".vlog")).collect();
    logs.sort();
    let log = Path::new("/db").join(logs.pop().expect("a log file"));
    let bytes = common::damage::read(&*vfs, &log);
    let last = common::damage::records(&bytes).iter().rev().find(|r| r.is_group()).expect("groups").start;
    common::damage::write(&*vfs, &log, &bytes[..last as usize + 7]);
    let db = Db::open("/db", opts()).expect("reopen");
    model.remove(&key(49));
    let ro = ReadOptions::default();
    assert_view_matches(&db, &ro, &model, "after a torn tail");
    // The log was cut at the tear: new writes land after it and survive another reopen.
    write_synced(&db, 100..110, &mut model);
    drop(db);
    let db = Db::open("/db", opts()).expect("reopen 2");
    assert_view_matches(&db, &ro, &model, "after writing past a cut tail");
}

#[test]
fn pointer_to_a_missing_vlog_file_is_reported_as_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let mut model = Model::new();
    let opts = || posix_options().log_file_bytes(4 << 10);
    let db = Db::open(&path, opts()).expect("open");
    write_synced(&db, 0..100, &mut model);
    db.flush().expect("flush");
    write_synced(&db, 100..110, &mut model);
    db.close().expect("close");
    let first = files_with(&path, "vlog").into_iter().next().expect("log files");
    std::fs::remove_file(&first).expect("remove");
    let db = Db::open(&path, opts()).expect("open: the head is past the removed file");
    match db.get(key(0)) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, first),
        other => panic!("expected Corruption naming {first:?}, got {other:?}"),
    }
}

#[test]
fn crash_between_table_sync_and_head_persist_loses_no_synced_write() {
    let fs = FaultFs::in_memory(7);
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let opts = || tiny_options(vfs.clone()).min_separated_value_bytes(64).gc_interval_ms(0);
    let mut model = Model::new();
    let db = Db::open("/db", opts()).expect("open");
    write_synced(&db, 0..40, &mut model);
    // The table is written and synced, then the manifest append that would move the head fails.
    fs.inject(FaultRule::always(FaultOp::Append, FaultKind::Io).on_path("MANIFEST"));
    assert!(db.flush().is_err(), "flush must report the failed manifest write");
    fs.halt();
    drop(db);
    fs.crash(CrashMode::DropUnsynced).expect("crash");
    let db = Db::open("/db", opts()).expect("reopen");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after crash before head persist");
}

#[test]
fn mixed_sync_and_nonsync_writers_all_survive_a_clean_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let db = Db::open(&path, posix_options()).expect("open");
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let db = &db;
            s.spawn(move || {
                for i in 0..300u64 {
                    let k = key(t * 1000 + i);
                    let v = make_value(&k, i, if i % 3 == 0 { 500 } else { 10 });
                    let wo = WriteOptions { sync: (i + t) % 2 == 0 };
                    db.put_opt(&wo, &k, &v).expect("put");
                }
            });
        }
    });
    drop(db);
    let db = Db::open(&path, posix_options()).expect("reopen");
    for t in 0..4u64 {
        for i in 0..300u64 {
            let k = key(t * 1000 + i);
            let v = make_value(&k, i, if i % 3 == 0 { 500 } else { 10 });
            assert_eq!(db.get(&k).expect("get").as_deref(), Some(&v[..]), "writer {t} op {i}");
        }
    }
}
