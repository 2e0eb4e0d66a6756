//! `wisckey dump log FILE`: the records of a log file (`.vlog`) or a cold value file
//! (`.cold`) in file order — record groups (offset, sequence numbers, ops; crc checked), sync
//! and start marks, spans of zeros — and with `--records` every op of every group.

use std::path::{Path, PathBuf};

use clap::Args;
use wisckey::inspect::{LogEntry, LogFile, LogOp, RecordGroup, ValuePointer};
use wisckey::{BatchOp, Options};

use super::{bytes_text, value_preview, Damage};
use crate::admin::escape;
use crate::bench::{CliResult, JsonObject};

#[derive(Args)]
pub struct LogArgs {
    /// The log file (NNNNNN.vlog) or cold value file (NNNNNN.cold).
    pub file: PathBuf,
    /// Print every op of every group: kind, key, value length, separated or inline.
    #[arg(long)]
    records: bool,
    /// Print at most this many records (the summary still counts them all).
    #[arg(long)]
    limit: Option<u64>,
    /// A put's value of at least this many bytes stays in the log and the tree points to it
    /// (default: what the manifest in the file's directory records, else the default option).
    #[arg(long)]
    min_separated_value_bytes: Option<usize>,
    /// One JSON object per line (each record, op and error).
    #[arg(long)]
    json: bool,
}

/// Counts over the whole file.
#[derive(Default)]
struct Tally {
    groups: u64,
    sync_marks: u64,
    start_marks: u64,
    zero_bytes: u64,
    puts: u64,
    separated: u64,
    deletes: u64,
    pointer_puts: u64,
    seqs: Option<(u64, u64)>,
}

impl Tally {
    fn entry(&mut self, e: &LogEntry, min_separated: usize) {
        match e {
            LogEntry::Group(g) => self.group(g, min_separated),
            LogEntry::SyncMark { .. } => self.sync_marks += 1,
            LogEntry::StartMark { .. } => self.start_marks += 1,
            LogEntry::Zeros { bytes, .. } => self.zero_bytes += bytes,
            _ => {}
        }
    }

    fn group(&mut self, g: &RecordGroup, min_separated: usize) {
        self.groups += 1;
        let last = g.first_seq + u64::from(g.count) - 1;
        self.seqs = Some(self.seqs.map_or((g.first_seq, last), |(lo, hi)| (lo.min(g.first_seq), hi.max(last))));
        for op in g.ops() {
            match op.op {
                BatchOp::Put { value, .. } => {
                    self.puts += 1;
                    self.separated += u64::from(value.len() >= min_separated);
                }
                BatchOp::Delete { .. } => self.deletes += 1,
                _ => self.pointer_puts += 1,
            }
        }
    }
}

pub fn run(a: LogArgs) -> CliResult {
    let log = LogFile::open(&a.file)?;
    let cold = a.file.extension().is_some_and(|e| e == "cold");
    // A cold file holds only values value-log GC moved: every one is separated.
    let (min_separated, from) = match (cold, a.min_separated_value_bytes) {
        (true, _) => (0, "a cold file's values are all separated"),
        (false, Some(n)) => (n, "as given"),
        (false, None) => recorded_threshold(&a.file),
    };
    let kind = if cold { "cold value file" } else { "log file" };
    if !a.json {
        outln!("{kind} {}: {}", log.path().display(), bytes_text(log.file_size()));
        if !cold {
            outln!("values of at least {min_separated} B are separated ({from})");
        }
    }
    let (mut tally, mut damage) = (Tally::default(), Damage::default());
    let (limit, mut printed) = (a.limit.unwrap_or(u64::MAX), 0);
    for entry in log {
        match entry {
            Ok(e) => {
                tally.entry(&e, min_separated);
                if printed < limit {
                    printed += 1;
                    print_entry(&a, &e, min_separated);
                }
            }
            Err(e) => {
                if a.json {
                    outln!("{}", JsonObject::default().str("type", "error").str("error", &e.to_string()).finish());
                } else {
                    outln!("DAMAGED: {e}");
                }
                damage.add(e);
            }
        }
    }
    if !a.json {
        print_summary(&tally, cold);
    }
    damage.finish()
}

/// The separation threshold the database in the log file's directory records, or the
/// default when there is none to read.
fn recorded_threshold(file: &Path) -> (usize, &'static str) {
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match wisckey::inspect::recorded_options(dir) {
        Ok(o) => (o.min_separated_value_bytes, "the database's recorded setting"),
        Err(_) => (Options::default().min_separated_value_bytes, "the default: no database to read it from"),
    }
}

fn print_entry(a: &LogArgs, e: &LogEntry, min_separated: usize) {
    match e {
        LogEntry::Group(g) => print_group(a, g, min_separated),
        LogEntry::SyncMark { offset, durable } => {
            if a.json {
                let mut j = JsonObject::default();
                j.str("type", "sync_mark")
                    .int("offset", *offset)
                    .raw("durable", &format!("[{},{}]", durable.file, durable.offset));
                outln!("{}", j.finish());
            } else {
                outln!("@{offset:<10} sync mark: durable to file {} offset {}", durable.file, durable.offset);
            }
        }
        LogEntry::StartMark { offset, next_seq, prev_file, durable } => {
            if a.json {
                let mut j = JsonObject::default();
                j.str("type", "start_mark")
                    .int("offset", *offset)
                    .int("next_seq", *next_seq)
                    .int("prev_file", *prev_file)
                    .raw("durable", &format!("[{},{}]", durable.file, durable.offset));
                outln!("{}", j.finish());
            } else {
                outln!(
                    "@{offset:<10} start mark: next seq {next_seq}, previous file {prev_file}, durable to file {} offset {}",
                    durable.file, durable.offset
                );
            }
        }
        LogEntry::Zeros { offset, bytes } => {
            if a.json {
                outln!(
                    "{}",
                    JsonObject::default().str("type", "zeros").int("offset", *offset).int("bytes", *bytes).finish()
                );
            } else {
                outln!("@{offset:<10} {bytes} zero bytes (a hole value-log GC punched, or an extent never written)");
            }
        }
        _ => outln!("@? a record this build of the dump does not know"),
    }
}

fn print_group(a: &LogArgs, g: &RecordGroup, min_separated: usize) {
    let last = g.first_seq + u64::from(g.count) - 1;
    if a.json {
        let mut j = JsonObject::default();
        j.str("type", "group")
            .int("offset", g.offset)
            .int("bytes", g.bytes)
            .int("first_seq", g.first_seq)
            .int("count", g.count.into())
            .raw("crc_ok", "true");
        outln!("{}", j.finish());
    } else {
        outln!("@{:<10} group seq {}..{last} ({} ops), {} B, crc ok", g.offset, g.first_seq, g.count, g.bytes);
    }
    if a.records {
        for op in g.ops() {
            print_op(a.json, &op, min_separated);
        }
    }
}

fn print_op(json: bool, op: &LogOp<'_>, min_separated: usize) {
    let (kind, key, detail, mut j) =
        (op_kind(&op.op), escape(op.op.key()), op_detail(&op.op, min_separated), JsonObject::default());
    if json {
        j.str("type", "op")
            .int("offset", op.offset)
            .int("bytes", op.bytes)
            .int("seq", op.seq)
            .str("kind", kind)
            .str("key", &key);
        match op.op {
            BatchOp::Put { value, .. } => {
                j.int("value_bytes", value.len() as u64).raw("separated", &(value.len() >= min_separated).to_string())
            }
            _ => j.str("detail", &detail),
        };
        outln!("{}", j.finish());
    } else {
        outln!("    @{:<10} seq {:<8} {kind} {key} {detail}", op.offset, op.seq);
    }
}

fn op_kind(op: &BatchOp<'_>) -> &'static str {
    match op {
        BatchOp::Put { .. } => "put",
        BatchOp::Delete { .. } => "del",
        BatchOp::Merge { .. } => "merge",
        _ => "ptr",
    }
}

fn op_detail(op: &BatchOp<'_>, min_separated: usize) -> String {
    match op {
        BatchOp::Put { value, .. } if value.len() >= min_separated => format!("value {} B, separated", value.len()),
        BatchOp::Put { value, .. } => format!("value {} B, inline {}", value.len(), value_preview(value)),
        BatchOp::Merge { operand, .. } => format!("operand {} B, inline {}", operand.len(), value_preview(operand)),
        BatchOp::PutPointer { pointer, .. } => match ValuePointer::decode(pointer) {
            Some(p) => format!("-> {}:{}:{} (moved by value-log GC)", p.file, p.offset, p.op_len),
            None => format!("-> a malformed pointer of {} B", pointer.len()),
        },
        _ => String::new(),
    }
}

fn print_summary(t: &Tally, cold: bool) {
    let seqs = t.seqs.map_or("none".to_string(), |(lo, hi)| format!("{lo}..{hi}"));
    let separated = if cold { "all separated".to_string() } else { format!("{} separated", t.separated) };
    outln!(
        "summary: {} groups (seq {seqs}): {} puts ({separated}), {} deletes, {} pointer puts; {} sync marks, {} start marks, {} zero bytes",
        t.groups, t.puts, t.deletes, t.pointer_puts, t.sync_marks, t.start_marks, t.zero_bytes
    );
}
