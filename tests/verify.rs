//! `Db::verify`: a healthy database reports no errors with real counts; a flipped byte in a
//! table's data block or in a live separated value is reported, naming the damaged file.
//! Damage to synced log bytes is an error naming the log file, also while the database is open.
//! (`cli/tests/cli.rs` checks the `wisckey verify` command's exit codes and `wisckey repair`.)

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::files_with;
use wisckey::fs::PosixFs;
use wisckey::{Db, Options, WriteOptions};

/// Written once, never overwritten: its separated value is live until the end.
const MARKER_KEY: &[u8] = b"key-marker";
const MARKER_VALUE: &[u8] = b"MARKER-VALUE-0123456789-MARKER-VALUE-0123456789-MARKER-VALUE-0123456789-MARKER";

fn options() -> Options {
    Options::default()
        .vfs(Arc::new(PosixFs::new()))
        .write_buffer_bytes(8 << 10)
        .target_file_size_bytes(16 << 10)
        .block_size_bytes(512)
        .min_separated_value_bytes(64)
        .gc_interval_ms(0)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Values on both sides of the 64-byte threshold, overwritten once (so older pointers exist),
/// flushed and compacted, then a few synced writes that stay in the log past its head.
fn build_db(dir: &Path) {
    let db = Db::open(dir, options()).expect("open");
    for round in 0..2u32 {
        for i in 0..400u32 {
            let len = if i % 2 == 0 { 200 } else { 16 };
            let v = format!("{round}-{i}-{}", "v".repeat(len)).into_bytes();
            db.put(key(i), &v).expect("put");
        }
    }
    db.put(MARKER_KEY, MARKER_VALUE).expect("put marker");
    db.flush().expect("flush");
    db.compact_range(None, None).expect("compact");
    for i in 0..10u32 {
        db.put_opt(&WriteOptions::synced(), key(i), [b'x'; 100]).expect("tail put");
    }
    db.close().expect("close");
    // Opening deletes table files obsolete since the compaction: every .sst left is live.
    Db::open(dir, options()).expect("reopen").close().expect("close");
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).expect("write");
}

fn verify(dir: &Path) -> wisckey::VerifyReport {
    let db = Db::open(dir, options()).expect("reopen");
    let report = db.verify().expect("verify runs");
    db.close().expect("close");
    report
}

fn file_name(p: &Path) -> String {
    p.file_name().expect("name").to_string_lossy().into_owned()
}

/// Flip a byte inside the marker's separated value in the vLog file holding it.
fn damage_marker_value(dir: &Path) -> PathBuf {
    for path in files_with(dir, "vlog") {
        let bytes = std::fs::read(&path).expect("read");
        if let Some(at) = bytes.windows(MARKER_VALUE.len()).position(|w| w == MARKER_VALUE) {
            flip_byte(&path, at + 10);
            return path;
        }
    }
    panic!("the marker value is in no vLog file");
}

#[test]
fn healthy_database_verifies_clean_with_real_counts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_db(tmp.path());
    let r = verify(tmp.path());
    assert!(r.is_healthy(), "{r}");
    assert!(r.tables_checked > 0, "{r}");
    assert_eq!(r.tables_checked, files_with(tmp.path(), "sst").len() as u64, "{r}");
    assert!(r.entries_checked >= 401, "{r}");
    assert!(r.pointers_checked >= 201, "{r}");
    assert!(r.log_groups_checked >= 10, "{r}");
    assert!(r.warnings.is_empty(), "{r}");
}

#[test]
fn flipped_byte_in_sst_data_block_is_reported_naming_the_table() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_db(tmp.path());
    let tables = files_with(tmp.path(), "sst");
    assert!(!tables.is_empty());
    // Data blocks start at offset 0; byte 5 sits inside the first one.
    flip_byte(&tables[0], 5);
    let r = verify(tmp.path());
    assert!(!r.is_healthy(), "{r}");
    let name = file_name(&tables[0]);
    assert!(r.errors.iter().any(|e| e.contains(&name)), "no error names {name}: {r}");
}

#[test]
fn flipped_byte_in_live_separated_value_is_reported_naming_the_vlog_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_db(tmp.path());
    let vlog = damage_marker_value(tmp.path());
    let r = verify(tmp.path());
    assert!(!r.is_healthy(), "{r}");
    let name = file_name(&vlog);
    assert!(r.errors.iter().any(|e| e.contains(&name) && e.contains("checksum")), "no error names {name}: {r}");
}

#[test]
fn verify_of_an_open_database_reports_damage_to_its_synced_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = Db::open(tmp.path(), options().write_buffer_bytes(8 << 20)).expect("open");
    for i in 0..200u32 {
        db.put_opt(&WriteOptions::synced(), key(i), [b'q'; 120]).expect("put");
    }
    let log = files_with(tmp.path(), "vlog").pop().expect("log");
    let len = std::fs::metadata(&log).expect("stat").len() as usize;
    assert!(db.verify().expect("verify").is_healthy());
    flip_byte(&log, len / 3);
    let r = db.verify().expect("verify");
    assert!(!r.is_healthy(), "{r}");
    assert!(r.errors.iter().any(|e| e.contains(&file_name(&log)) && e.contains("sync mark")), "{r}");
}
