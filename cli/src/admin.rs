//! Admin subcommands on an existing database: stats, compact, get, put, scan, destroy.
//! Keys and values on the command line may use `\xNN` and `\\` escapes; output uses the same
//! escapes for non-printable bytes, so what `scan` prints can be passed back to `get`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use wisckey::{Db, Options, ReadOptions};

use crate::bench::{db_stats_json, live_bytes_by_scan, render_db_stats, CliResult};

#[derive(Args)]
pub struct DbArg {
    /// Database directory.
    #[arg(long)]
    pub db: PathBuf,
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Also scan every entry to report space amplification (reads the whole database).
    #[arg(long)]
    pub space_amp: bool,
    /// Print one JSON line instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub key: String,
    /// Write the value's bytes unescaped, without a trailing newline.
    #[arg(long)]
    pub raw: bool,
}

#[derive(Args)]
pub struct PutArgs {
    #[command(flatten)]
    pub db: DbArg,
    pub key: String,
    pub value: String,
}

#[derive(Args)]
pub struct ScanArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// First key (inclusive).
    #[arg(long)]
    pub from: Option<String>,
    /// Last key (exclusive).
    #[arg(long)]
    pub to: Option<String>,
    /// Print at most this many entries.
    #[arg(long)]
    pub limit: Option<usize>,
}

fn open_existing(db: &DbArg) -> CliResult<Db> {
    Ok(Db::open(&db.db, Options::default().create_if_missing(false))?)
}

pub fn stats(a: StatsArgs) -> CliResult {
    let db = open_existing(&a.db)?;
    let live = if a.space_amp { Some(live_bytes_by_scan(&db)?) } else { None };
    let s = db.stats();
    if a.json {
        println!("{}", db_stats_json(&s, live));
    } else {
        print!("{}", render_db_stats(&s, live));
    }
    db.close()?;
    Ok(())
}

pub fn compact(a: DbArg) -> CliResult {
    let db = open_existing(&a)?;
    db.compact_range(None, None)?;
    print!("{}", render_db_stats(&db.stats(), None));
    db.close()?;
    Ok(())
}

pub fn get(a: GetArgs) -> CliResult {
    let db = open_existing(&a.db)?;
    let key = unescape(&a.key)?;
    let value = db.get(&key)?;
    db.close()?;
    let value = value.ok_or_else(|| format!("key {} not found", escape(&key)))?;
    let mut out = std::io::stdout().lock();
    if a.raw {
        out.write_all(&value)?;
    } else {
        writeln!(out, "{}", escape(&value))?;
    }
    Ok(())
}

pub fn put(a: PutArgs) -> CliResult {
    let db = Db::open(&a.db.db, Options::default())?;
    db.put(&unescape(&a.key)?, &unescape(&a.value)?)?;
    db.close()?;
    Ok(())
}

pub fn scan(a: ScanArgs) -> CliResult {
    let db = open_existing(&a.db)?;
    let ro = ReadOptions {
        lower_bound: a.from.as_deref().map(unescape).transpose()?,
        upper_bound: a.to.as_deref().map(unescape).transpose()?,
        ..ReadOptions::default()
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for entry in db.scan(&ro)?.take(a.limit.unwrap_or(usize::MAX)) {
        let (k, v) = entry?;
        writeln!(out, "{}\t{}", escape(&k), escape(&v))?;
    }
    out.flush()?;
    drop(out);
    db.close()?;
    Ok(())
}

#[derive(Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Collect value-log files with at least this share of garbage (0.0..=1.0).
    #[arg(long, default_value_t = 0.5)]
    pub min_garbage_ratio: f64,
    /// Rewrite every separated value in key order first (faster scans after random loads).
    #[arg(long)]
    pub reorganize: bool,
}

/// Collect value-log files now and report what was done.
pub fn gc(a: GcArgs) -> CliResult {
    let db = Db::open(&a.db.db, Options::default().create_if_missing(false))?;
    let before = db.stats();
    let r = if a.reorganize { db.reorganize_vlog()? } else { db.run_gc(a.min_garbage_ratio)? };
    let after = db.stats();
    println!(
        "collected {} files: read {} bytes, rewrote {} bytes; value log on disk {} -> {} bytes",
        r.files_collected, r.bytes_read, r.bytes_rewritten, before.vlog_disk_bytes, after.vlog_disk_bytes
    );
    if let Some(seq) = r.stopped_by_reader_at {
        println!("stopped early: a snapshot or iterator at sequence {seq} pins what GC would free");
    }
    db.close()?;
    Ok(())
}

pub fn destroy(a: DbArg) -> CliResult {
    wisckey::destroy(&a.db, &Options::default())?;
    Ok(())
}

/// Printable ASCII as is (backslash doubled), tab and everything else as `\xNN`.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

/// The inverse of `escape`: `\\` and `\xNN` are decoded, other text is taken as UTF-8 bytes.
pub fn unescape(s: &str) -> CliResult<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match bytes.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let hex = s.get(i + 2..i + 4).ok_or_else(|| bad_escape(s))?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad_escape(s))?);
                i += 4;
            }
            _ => return Err(bad_escape(s).into()),
        }
    }
    Ok(out)
}

fn bad_escape(s: &str) -> String {
    format!("bad escape in {s:?}: use \\\\ for a backslash and \\xNN for a byte")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let e = escape(&all);
        assert!(e.is_ascii() && !e.contains('\t') && !e.contains('\n'));
        assert_eq!(unescape(&e).unwrap(), all);
    }

    #[test]
    fn plain_text_and_utf8_pass_through() {
        assert_eq!(unescape("key-1").unwrap(), b"key-1");
        assert_eq!(unescape("é").unwrap(), "é".as_bytes());
        assert_eq!(unescape("a\\x00b").unwrap(), b"a\0b");
    }

    #[test]
    fn malformed_escapes_are_errors() {
        for bad in ["\\", "\\q", "\\x4", "\\xzz", "\\xé"] {
            assert!(unescape(bad).is_err(), "{bad}");
        }
    }
}
