//! `wisckey dump`: look inside a database's files (RocksDB's `sst_dump` and `ldb
//! manifest_dump`, LevelDB's `leveldbutil dump`) through the library's read-only
//! `wisckey::inspect` API: a table's properties, blocks, filter and entries (a DTable's
//! segments), a manifest's edits, a log file's groups and marks, and a database's shape beside
//! its merge policy's model. Text for people by default, JSON lines with `--json`.
//!
//! Damage is reported where it is (file and offset) and reading goes on past it where the
//! format allows; any damage makes the command exit 1, with the first error on stderr.

/// `println!` for the dump's output: a reader that goes away (`wisckey dump ... | head`) ends
/// the dump quietly instead of failing on a broken pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::dump::emit(format_args!($($arg)*))
    };
}

mod log;
mod manifest;
mod shape;
mod table;

use std::io::Write;
use std::path::Path;

use clap::{Args, Subcommand};
use wisckey::inspect::{InternalKey, KeyKind};

use crate::admin::escape;
use crate::bench::CliResult;

#[derive(Args)]
pub struct DumpArgs {
    #[command(subcommand)]
    what: DumpCommand,
}

#[derive(Subcommand)]
enum DumpCommand {
    /// A table (.sst): properties, footer, filter, index and blocks; a DTable's segments.
    Table(table::TableArgs),
    /// A manifest: every edit in order with every field (the live one with --db).
    Manifest(manifest::ManifestArgs),
    /// A log (.vlog) or cold value file (.cold): record groups, sync and start marks.
    Log(log::LogArgs),
    /// A database's runs per level beside its merge policy's targets and the cost model's shape.
    Shape(shape::ShapeArgs),
}

pub fn run(a: DumpArgs) -> CliResult {
    let (result, path, want) = match a.what {
        DumpCommand::Table(t) => {
            let path = t.file.clone();
            (table::run(t), Some(path), "table")
        }
        DumpCommand::Manifest(m) => {
            let path = m.file.clone();
            (manifest::run(m), path, "manifest")
        }
        DumpCommand::Log(l) => {
            let path = l.file.clone();
            (log::run(l), Some(path), "log")
        }
        DumpCommand::Shape(s) => (shape::run(s), None, "shape"),
    };
    result.map_err(|e| match path.as_deref().and_then(|p| kind_hint(p, want)) {
        Some(hint) => format!("{e} ({hint})").into(),
        None => e,
    })
}

/// Write one line of output. When stdout is closed under us (a pager or `head` that has seen
/// enough) there is nobody left to tell anything: exit at once with success, as a Unix tool
/// killed by SIGPIPE would stop. Any other write error is reported and fails the command.
pub fn emit(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("wisckey: writing the dump: {e}");
        std::process::exit(1);
    }
}

/// When a file's name says it is another kind than the one asked for, the command to use.
fn kind_hint(path: &Path, want: &str) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    let is = if name.ends_with(".sst") {
        "table"
    } else if name.ends_with(".vlog") || name.ends_with(".cold") {
        "log"
    } else if name.starts_with("MANIFEST-") {
        "manifest"
    } else {
        return None;
    };
    (is != want).then(|| format!("its name says it is a {is} file: try `wisckey dump {is}`"))
}

/// Errors met while dumping: the first is what the command fails with, after the dump.
#[derive(Default)]
struct Damage {
    first: Option<wisckey::Error>,
    count: u64,
}

impl Damage {
    fn add(&mut self, e: wisckey::Error) {
        self.count += 1;
        self.first.get_or_insert(e);
    }

    /// `Ok` when nothing was damaged, else the first error (with the count when several).
    fn finish(self) -> CliResult {
        match self.first {
            None => Ok(()),
            Some(e) if self.count == 1 => Err(e.into()),
            Some(e) if self.count == 2 => Err(format!("{e} (and 1 more damaged place)").into()),
            Some(e) => Err(format!("{e} (and {} more damaged places)", self.count - 1).into()),
        }
    }
}

/// `user_key @seq kind`, the key escaped as `scan` prints keys.
fn key_text(k: &InternalKey) -> String {
    format!("{} @{} {}", escape(&k.user_key), k.seq, kind_text(k.kind))
}

fn kind_text(k: KeyKind) -> String {
    match k {
        KeyKind::Deletion => "del".into(),
        KeyKind::Value => "put".into(),
        KeyKind::Pointer => "ptr".into(),
        KeyKind::Merge => "merge".into(),
        KeyKind::ExpiringValue => "put-ttl".into(),
        KeyKind::ExpiringPointer => "ptr-ttl".into(),
        KeyKind::Other(255) => "seek".into(),
        KeyKind::Other(b) => format!("kind{b}"),
        _ => "?".into(),
    }
}

/// `N B`, with KiB / MiB beside larger sizes.
fn bytes_text(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{n} B ({:.1} KiB)", n as f64 / 1024.0),
        _ => format!("{n} B ({:.1} MiB)", n as f64 / 1_048_576.0),
    }
}

/// A value's first bytes, escaped, for a one-line entry.
fn value_preview(v: &[u8]) -> String {
    const SHOWN: usize = 24;
    if v.len() <= SHOWN {
        format!("\"{}\"", escape(v))
    } else {
        format!("\"{}\"...", escape(&v[..SHOWN]))
    }
}
