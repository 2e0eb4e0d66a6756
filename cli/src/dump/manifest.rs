//! `wisckey dump manifest FILE` (or `--db DIR` for the live one): every record in file order,
//! each edit with every field it carries.

use std::path::PathBuf;

use clap::Args;
use wisckey::inspect::{LogPosition, ManifestEdit, ManifestFile, ManifestRecord, TableRecord};

use super::{bytes_text, key_text, Damage};
use crate::bench::{CliResult, JsonObject};

#[derive(Args)]
pub struct ManifestArgs {
    /// The manifest file (MANIFEST-NNNNNN).
    #[arg(required_unless_present = "db", conflicts_with = "db")]
    pub file: Option<PathBuf>,
    /// Dump the manifest the database's CURRENT file names.
    #[arg(long)]
    db: Option<PathBuf>,
    /// One JSON object per record (and per error).
    #[arg(long)]
    json: bool,
}

pub fn run(a: ManifestArgs) -> CliResult {
    let manifest = match (&a.file, &a.db) {
        (Some(f), _) => ManifestFile::open(f)?,
        (None, Some(db)) => ManifestFile::open_current(db)?,
        (None, None) => return Err("give a manifest file or --db DIR".into()),
    };
    if !a.json {
        outln!("manifest {}: {}", manifest.path().display(), bytes_text(manifest.file_size()));
    }
    let mut damage = Damage::default();
    let (mut records, mut edits) = (0u64, Summary::default());
    for record in manifest.records() {
        match record {
            Ok(r) => {
                records += 1;
                edits.add(&r.edit);
                if a.json {
                    outln!("{}", record_json(&r));
                } else {
                    print_record(records - 1, &r);
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
        outln!(
            "summary: {records} records; {} tables added, {} removed; last sequence {}, next file {}, policy {}",
            edits.added,
            edits.deleted,
            edits.last_sequence.map_or("-".into(), |s| s.to_string()),
            edits.next_file.map_or("-".into(), |s| s.to_string()),
            edits.policy.as_deref().unwrap_or("-"),
        );
    }
    damage.finish()
}

/// The last value of the scalars, and counts of the lists, over the records read.
#[derive(Default)]
struct Summary {
    added: u64,
    deleted: u64,
    last_sequence: Option<u64>,
    next_file: Option<u64>,
    policy: Option<String>,
}

impl Summary {
    fn add(&mut self, e: &ManifestEdit) {
        self.added += e.added_tables.len() as u64;
        self.deleted += e.deleted_tables.len() as u64;
        self.last_sequence = e.last_sequence.or(self.last_sequence);
        self.next_file = e.next_file_number.or(self.next_file);
        if e.policy.is_some() {
            self.policy.clone_from(&e.policy);
        }
    }
}

fn pos(p: LogPosition) -> String {
    format!("file {} offset {}", p.file, p.offset)
}

fn table_text(t: &TableRecord) -> String {
    let segments = if t.segments > 1 { format!(", {} segments (DTable)", t.segments) } else { String::new() };
    format!(
        "{:06}.sst {} B, {} entries ({} deletions), values {} B{segments}, keys {} .. {}",
        t.number,
        t.size,
        t.num_entries,
        t.num_deletions,
        t.raw_value_bytes,
        key_text(&t.smallest),
        key_text(&t.largest)
    )
}

/// Every field the edit carries, one per line, in tag order.
fn print_record(i: u64, r: &ManifestRecord) {
    let e = &r.edit;
    outln!("record {i} @{} ({} B edit):", r.offset, r.payload_bytes);
    let scalars: [(&str, Option<String>); 9] = [
        ("comparator", e.comparator.clone()),
        ("format_version", e.format_version.map(|v| v.to_string())),
        ("next_file_number", e.next_file_number.map(|v| v.to_string())),
        ("last_sequence", e.last_sequence.map(|v| v.to_string())),
        ("log_head", e.log_head.map(pos)),
        ("vlog_tail", e.vlog_tail.map(pos)),
        ("log_durable", e.log_durable.map(pos)),
        ("policy", e.policy.clone()),
        ("policy_reason", e.policy_reason.clone()),
    ];
    for (name, value) in scalars {
        if let Some(v) = value {
            outln!("  {name}: {v}");
        }
    }
    if let Some(o) = &e.options {
        outln!("  options: {}", o.lines().collect::<Vec<_>>().join(" "));
    }
    for (level, key) in &e.compact_pointers {
        outln!("  compact_pointer L{level}: {}", key_text(key));
    }
    for (level, number) in &e.deleted_tables {
        outln!("  remove L{level} {number:06}.sst");
    }
    for t in &e.added_tables {
        outln!("  add L{} run {}: {}", t.level, t.run, table_text(t));
    }
    for (file, bytes) in &e.vlog_added {
        outln!("  vlog_added {file:06}: +{bytes} B of separated values");
    }
    for (file, bytes) in &e.vlog_garbage {
        outln!("  vlog_garbage {file:06}: +{bytes} B");
    }
    for file in &e.vlog_files_deleted {
        outln!("  vlog_file_deleted {file:06}");
    }
}

fn record_json(r: &ManifestRecord) -> String {
    let e = &r.edit;
    let mut j = JsonObject::default();
    j.str("type", "record").int("offset", r.offset).int("edit_bytes", r.payload_bytes);
    if let Some(c) = &e.comparator {
        j.str("comparator", c);
    }
    let ints = [
        ("format_version", e.format_version.map(u64::from)),
        ("next_file_number", e.next_file_number),
        ("last_sequence", e.last_sequence),
    ];
    for (name, v) in ints {
        if let Some(v) = v {
            j.int(name, v);
        }
    }
    for (name, p) in [("log_head", e.log_head), ("vlog_tail", e.vlog_tail), ("log_durable", e.log_durable)] {
        if let Some(p) = p {
            j.raw(name, &format!("[{},{}]", p.file, p.offset));
        }
    }
    if let Some(p) = &e.policy {
        j.str("policy", p);
    }
    if let Some(r) = &e.policy_reason {
        j.str("policy_reason", r);
    }
    if let Some(o) = &e.options {
        j.str("options", o);
    }
    let list = |v: Vec<String>| format!("[{}]", v.join(","));
    let pairs = |v: &[(u64, u64)]| list(v.iter().map(|(a, b)| format!("[{a},{b}]")).collect());
    let added = e.added_tables.iter().map(|t| {
        let mut o = JsonObject::default();
        o.int("level", t.level.into())
            .int("number", t.number)
            .int("size", t.size)
            .int("run", t.run)
            .int("num_entries", t.num_entries)
            .int("num_deletions", t.num_deletions)
            .int("raw_value_bytes", t.raw_value_bytes)
            .int("segments", t.segments)
            .str("smallest", &key_text(&t.smallest))
            .str("largest", &key_text(&t.largest));
        o.finish()
    });
    let pointers = e.compact_pointers.iter().map(|(l, k)| {
        let mut o = JsonObject::default();
        o.int("level", (*l).into()).str("key", &key_text(k));
        o.finish()
    });
    j.raw("compact_pointers", &list(pointers.collect()))
        .raw("deleted_tables", &list(e.deleted_tables.iter().map(|(l, n)| format!("[{l},{n}]")).collect()))
        .raw("added_tables", &list(added.collect()))
        .raw("vlog_added", &pairs(&e.vlog_added))
        .raw("vlog_garbage", &pairs(&e.vlog_garbage))
        .raw("vlog_files_deleted", &format!("{:?}", e.vlog_files_deleted));
    j.finish()
}
