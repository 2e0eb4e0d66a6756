//! Names of the files in a database directory, and parsing them back (to find obsolete files).

use std::path::{Path, PathBuf};

/// What a file in the database directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `NNNNNN.sst`
    Table,
    /// `NNNNNN.vlog` — a value-log file (the log of record groups, which is also the
    /// write-ahead log).
    Vlog,
    /// `NNNNNN.cold` — a cold value file: values GC moved out of older files (written by GC
    /// only, never part of the write-ahead log; their pointers are logged in the `.vlog`s).
    Cold,
    /// `MANIFEST-NNNNNN`
    Manifest,
    /// `CURRENT`
    Current,
    /// `LOCK`
    Lock,
    /// `NNNNNN.dbtmp` — written then renamed (CURRENT is written this way).
    Temp,
    /// `LOG` or `LOG.old` — LevelDB's info log. The engine writes none (it logs through
    /// `tracing`); the names are recognised so `destroy` removes one left in the directory.
    InfoLog,
    /// `WORKLOAD` — the operation counts `wisckey tune --db` reads (`db/workload.rs`).
    Workload,
}

pub fn table_file_name(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}

pub fn vlog_file_name(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.vlog"))
}

pub fn cold_file_name(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.cold"))
}

pub fn manifest_file_name(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("MANIFEST-{n:06}"))
}

pub fn temp_file_name(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.dbtmp"))
}

pub fn current_file_name(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}

pub fn lock_file_name(dir: &Path) -> PathBuf {
    dir.join("LOCK")
}

/// Kind and number of a file name we write (number 0 for the unnumbered ones); `None` for
/// anything else. Numbers must be written exactly as we write them (at least six digits,
/// zero-padded), so a stray user file like `7.sst` is never mistaken for ours and deleted.
pub fn parse_file_name(name: &str) -> Option<(FileKind, u64)> {
    match name {
        "CURRENT" => return Some((FileKind::Current, 0)),
        "LOCK" => return Some((FileKind::Lock, 0)),
        "LOG" | "LOG.old" => return Some((FileKind::InfoLog, 0)),
        "WORKLOAD" => return Some((FileKind::Workload, 0)),
        _ => {}
    }
    if let Some(digits) = name.strip_prefix("MANIFEST-") {
        return parse_number(digits).map(|n| (FileKind::Manifest, n));
    }
    let (digits, ext) = name.split_once('.')?;
    let kind = match ext {
        "sst" => FileKind::Table,
        "vlog" => FileKind::Vlog,
        "cold" => FileKind::Cold,
        "dbtmp" => FileKind::Temp,
        _ => return None,
    };
    parse_number(digits).map(|n| (kind, n))
}

fn parse_number(digits: &str) -> Option<u64> {
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (format!("{n:06}") == digits).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_we_write_parses_back() {
        let dir = Path::new("/db");
        for n in [0u64, 1, 42, 999_999, 1_000_000, u64::MAX] {
            let cases = [
                (table_file_name(dir, n), FileKind::Table),
                (vlog_file_name(dir, n), FileKind::Vlog),
                (cold_file_name(dir, n), FileKind::Cold),
                (manifest_file_name(dir, n), FileKind::Manifest),
                (temp_file_name(dir, n), FileKind::Temp),
            ];
            for (path, kind) in cases {
                let name = path.file_name().unwrap().to_str().unwrap();
                assert_eq!(parse_file_name(name), Some((kind, n)), "{name}");
            }
        }
        assert_eq!(parse_file_name("CURRENT"), Some((FileKind::Current, 0)));
        assert_eq!(parse_file_name("LOCK"), Some((FileKind::Lock, 0)));
        assert_eq!(parse_file_name("LOG.old"), Some((FileKind::InfoLog, 0)));
    }

    #[test]
    fn foreign_names_are_not_ours() {
        for name in [
            "7.sst",
            "0000007.sst",
            "000007.txt",
            "MANIFEST-",
            "MANIFEST-12",
            "+00001.sst",
            "000001.sst.bak",
            "",
            "CURRENT.tmp",
            "99999999999999999999999.sst",
        ] {
            assert_eq!(parse_file_name(name), None, "{name}");
        }
    }
}
