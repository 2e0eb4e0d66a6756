//! `Db::verify` and `wisckey verify`: a healthy database reports no errors with real counts; a
//! flipped byte in a table's data block or in a live separated value is reported, naming the
//! damaged file, and the command line exits 1 for a damaged database and 0 for a healthy one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

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
        .min_blob_size(64)
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
            db.put(&key(i), &v).expect("put");
        }
    }
    db.put(MARKER_KEY, MARKER_VALUE).expect("put marker");
    db.flush().expect("flush");
    db.compact_range(None, None).expect("compact");
    for i in 0..10u32 {
        db.put_opt(&WriteOptions::synced(), &key(i), &[b'x'; 100]).expect("tail put");
    }
    db.close().expect("close");
    // Opening deletes table files obsolete since the compaction: every .sst left is live.
    Db::open(dir, options()).expect("reopen").close().expect("close");
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).expect("write");
}

fn verify(dir: &Path) -> wisckey::db::VerifyReport {
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
    for path in files_with_ext(dir, "vlog") {
        let bytes = std::fs::read(&path).expect("read");
        if let Some(at) = bytes.windows(MARKER_VALUE.len()).position(|w| w == MARKER_VALUE) {
            flip_byte(&path, at + 10);
            return path;
        }
    }
    panic!("the marker value is in no vLog file");
}

fn run_cli(dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wisckey")).arg("verify").arg("--db").arg(dir).output().expect("run wisckey")
}

#[test]
fn healthy_database_verifies_clean_with_real_counts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_db(tmp.path());
    let r = verify(tmp.path());
    assert!(r.is_healthy(), "{r}");
    assert!(r.tables_checked > 0, "{r}");
    assert_eq!(r.tables_checked, files_with_ext(tmp.path(), "sst").len() as u64, "{r}");
    assert!(r.entries_checked >= 401, "{r}");
    assert!(r.pointers_checked >= 201, "{r}");
    assert!(r.log_groups_checked >= 10, "{r}");
    assert!(r.warnings.is_empty(), "{r}");
}

#[test]
fn flipped_byte_in_sst_data_block_is_reported_naming_the_table() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_db(tmp.path());
    let tables = files_with_ext(tmp.path(), "sst");
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
fn cli_exits_zero_for_healthy_and_one_for_damaged_database() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_db(tmp.path());
    let ok = run_cli(tmp.path());
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "stdout: {stdout} stderr: {}", String::from_utf8_lossy(&ok.stderr));
    assert!(stdout.contains("healthy"), "{stdout}");

    let vlog = damage_marker_value(tmp.path());
    let bad = run_cli(tmp.path());
    let stdout = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "stdout: {stdout}");
    assert!(stdout.contains(&file_name(&vlog)), "{stdout}");
    assert!(stdout.contains("DAMAGED"), "{stdout}");
}

/// A database whose log past the head holds many synced groups (nothing flushed).
fn build_unflushed_db(dir: &Path) {
    let db = Db::open(dir, options().write_buffer_bytes(8 << 20)).expect("open");
    for i in 0..300u32 {
        db.put_opt(&WriteOptions::synced(), &key(i), format!("{i}-{}", "w".repeat(150)).as_bytes()).expect("put");
    }
    db.close().expect("close");
}

fn run(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_wisckey")).args(args).arg("--db").arg(dir).output().expect("run wisckey");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_verify_fails_on_damage_before_synced_log_groups_and_repair_salvages_with_a_report() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_unflushed_db(tmp.path());
    let log = files_with_ext(tmp.path(), "vlog").pop().expect("log");
    let len = std::fs::metadata(&log).expect("stat").len() as usize;
    flip_byte(&log, len / 2);

    let (code, stdout, stderr) = run(tmp.path(), &["verify"]);
    assert_eq!(code, Some(1), "verify must fail: {stdout} {stderr}");
    assert!(stdout.contains("DAMAGED") && stderr.contains("at stake"), "{stdout} {stderr}");
    assert!(stderr.contains(&file_name(&log)), "the error names the log file: {stderr}");

    let (code, stdout, stderr) = run(tmp.path(), &["repair"]);
    assert_eq!(code, Some(0), "repair: {stdout} {stderr}");
    assert!(stdout.contains("sequence numbers") && stdout.contains("key"), "the report names what is lost: {stdout}");
    assert!(tmp.path().join("lost").is_dir(), "evidence kept in lost/");

    let (code, stdout, stderr) = run(tmp.path(), &["verify"]);
    assert_eq!(code, Some(0), "verify after repair: {stdout} {stderr}");
    // Every key but the one or two in the damaged group reads back.
    let db = Db::open(tmp.path(), options()).expect("open after repair");
    let present = (0..300u32).filter(|&i| db.get(&key(i)).expect("get").is_some()).count();
    assert!((297..300).contains(&present), "{present} of 300 keys kept");
}

#[test]
fn verify_of_an_open_database_reports_damage_to_its_synced_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = Db::open(tmp.path(), options().write_buffer_bytes(8 << 20)).expect("open");
    for i in 0..200u32 {
        db.put_opt(&WriteOptions::synced(), &key(i), &[b'q'; 120]).expect("put");
    }
    let log = files_with_ext(tmp.path(), "vlog").pop().expect("log");
    let len = std::fs::metadata(&log).expect("stat").len() as usize;
    assert!(db.verify().expect("verify").is_healthy());
    flip_byte(&log, len / 3);
    let r = db.verify().expect("verify");
    assert!(!r.is_healthy(), "{r}");
    assert!(r.errors.iter().any(|e| e.contains(&file_name(&log)) && e.contains("sync mark")), "{r}");
}
