//! The `wisckey` command end to end: a database built with `put` and `compact` reads back with
//! `get`, `verify` exits 0 for it and 1 once a byte of a live separated value is flipped,
//! naming the damaged value-log file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Longer than the default `min_separated_value_bytes` (1 KiB): kept in the value log.
fn marker_value() -> String {
    format!("MARKER-{}-MARKER", "0123456789".repeat(200))
}

fn wisckey(args: &[&str], db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wisckey"))
        .arg(args[0])
        .arg("--db")
        .arg(db)
        .args(&args[1..])
        .output()
        .expect("run wisckey")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn succeeds(args: &[&str], db: &Path) -> String {
    let out = wisckey(args, db);
    assert!(out.status.success(), "wisckey {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    stdout(&out)
}

/// Flip a byte inside the marker's value in the value-log file holding it.
fn damage_marker_value(dir: &Path) -> PathBuf {
    let marker = marker_value();
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "vlog") {
            continue;
        }
        let mut bytes = std::fs::read(&path).expect("read");
        if let Some(at) = bytes.windows(marker.len()).position(|w| w == marker.as_bytes()) {
            bytes[at + 10] ^= 0x5a;
            std::fs::write(&path, bytes).expect("write");
            return path;
        }
    }
    panic!("the marker value is in no value-log file");
}

#[test]
fn verify_exits_zero_for_a_healthy_database_and_one_for_a_damaged_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("db");
    let marker = marker_value();
    succeeds(&["put", "small", "v"], &db);
    succeeds(&["put", "marker", &marker], &db);
    // Flushed and compacted: the marker's pointer is in a table, its value before the log head.
    succeeds(&["compact"], &db);
    assert_eq!(succeeds(&["get", "marker"], &db).trim_end(), marker);
    let ok = succeeds(&["verify"], &db);
    assert!(ok.contains("healthy"), "{ok}");

    let vlog = damage_marker_value(&db);
    let bad = wisckey(&["verify"], &db);
    let text = stdout(&bad);
    assert_eq!(bad.status.code(), Some(1), "stdout: {text}");
    let name = vlog.file_name().expect("name").to_string_lossy().into_owned();
    assert!(text.contains(&name) && text.contains("DAMAGED"), "{text}");
    assert!(!wisckey(&["get", "marker"], &db).status.success(), "a damaged value is never returned");
}
