//! `wisckey dump table FILE.sst`: the footer (a DTable's tail), then per segment its
//! properties, filter, index and data blocks (each read and checked), and with `--keys` every
//! entry with its sequence number and kind.

use std::path::PathBuf;

use clap::Args;
use wisckey::inspect::{
    BlockCompression, DataBlock, Entry, EntryValue, IndexEntry, InternalKey, TableFile, TableSegment,
};

use super::{bytes_text, key_text, kind_text, value_preview, Damage};
use crate::admin::escape;
use crate::bench::{CliResult, JsonObject};

#[derive(Args)]
pub struct TableArgs {
    /// The table file (NNNNNN.sst).
    pub file: PathBuf,
    /// Print every entry: key, sequence number, kind and value (inline, or the pointer as
    /// file:offset:len).
    #[arg(long)]
    keys: bool,
    /// Print every data block: offset, size, compression, entries, checksum.
    #[arg(long)]
    blocks: bool,
    /// Print at most this many entries (with --keys).
    #[arg(long)]
    limit: Option<u64>,
    /// One JSON object per line (the table, each segment, block and entry, each error).
    #[arg(long)]
    json: bool,
}

pub fn run(a: TableArgs) -> CliResult {
    let table = TableFile::open(&a.file)?;
    let mut out = Out { args: &a, damage: Damage::default(), printed: 0 };
    out.table(&table);
    for i in 0..table.num_segments() {
        match table.segment(i) {
            Ok(s) => out.segment(&s),
            Err(e) => out.error(&format!("segment {i}"), e),
        }
    }
    out.damage.finish()
}

/// What a pass over one segment's data blocks counted.
#[derive(Default)]
struct Tally {
    blocks: u64,
    stored: u64,
    raw: u64,
    compressed: u64,
    entries: u64,
    inline: u64,
    pointers: u64,
    deletions: u64,
    user_keys: u64,
    seqs: Option<(u64, u64)>,
    last_user_key: Option<Vec<u8>>,
}

impl Tally {
    fn entry(&mut self, e: &Entry) {
        self.entries += 1;
        match e.value {
            EntryValue::Inline(_) => self.inline += 1,
            EntryValue::Pointer(_) => self.pointers += 1,
            _ => self.deletions += 1,
        }
        if self.last_user_key.as_deref() != Some(&e.key.user_key[..]) {
            self.user_keys += 1;
            self.last_user_key = Some(e.key.user_key.clone());
        }
        let s = e.key.seq;
        self.seqs = Some(self.seqs.map_or((s, s), |(lo, hi)| (lo.min(s), hi.max(s))));
    }
}

struct Out<'a> {
    args: &'a TableArgs,
    damage: Damage,
    printed: u64,
}

impl Out<'_> {
    fn error(&mut self, what: &str, e: wisckey::Error) {
        if self.args.json {
            outln!(
                "{}",
                JsonObject::default().str("type", "error").str("at", what).str("error", &e.to_string()).finish()
            );
        } else {
            outln!("  {what}: DAMAGED: {e}");
        }
        self.damage.add(e);
    }

    fn table(&self, t: &TableFile) {
        let name = t.path().display().to_string();
        if self.args.json {
            let mut j = JsonObject::default();
            j.str("type", "table")
                .str("file", &name)
                .int("bytes", t.file_size())
                .int("segments", t.num_segments() as u64);
            if let Some(tail) = t.dtable_tail() {
                j.int("directory_offset", tail.directory.offset)
                    .int("directory_bytes", tail.directory.size)
                    .raw("segment_ends", &format!("{:?}", tail.segment_ends));
            }
            outln!("{}", j.finish());
            return;
        }
        match t.dtable_tail() {
            None => outln!("table {name}: {}, a plain table (1 segment)", bytes_text(t.file_size())),
            Some(tail) => {
                outln!("table {name}: {}, a DTable of {} segments", bytes_text(t.file_size()), t.num_segments());
                outln!(
                    "  tail: directory at {} ({} B), footer at {}, segment ends {:?}",
                    tail.directory.offset,
                    tail.directory.size,
                    tail.footer_offset,
                    tail.segment_ends
                );
            }
        }
    }

    fn segment(&mut self, s: &TableSegment) {
        if self.args.json {
            outln!("{}", segment_json(s));
        } else {
            print_segment(s);
        }
        let mut tally = Tally::default();
        for (i, entry) in s.index().iter().enumerate() {
            match s.read_block(entry.block) {
                Ok(block) => self.block(s, i, entry, &block, &mut tally),
                Err(e) => self.error(&format!("segment {} block {i} at {}", s.number(), entry.block.offset), e),
            }
        }
        if !self.args.json {
            print_tally(s, &tally);
        }
    }

    fn block(&mut self, s: &TableSegment, i: usize, index: &IndexEntry, b: &DataBlock, tally: &mut Tally) {
        let before = tally.entries;
        let mut damaged = None;
        let mut entries = Vec::new();
        for entry in b.entries() {
            match entry {
                Ok(e) => {
                    tally.entry(&e);
                    if self.args.keys && self.printed < self.args.limit.unwrap_or(u64::MAX) {
                        self.printed += 1;
                        entries.push(e);
                    }
                }
                Err(e) => damaged = Some(e),
            }
        }
        tally.blocks += 1;
        tally.stored += b.block.size;
        tally.raw += b.raw_bytes;
        tally.compressed += u64::from(b.compression != BlockCompression::None);
        if self.args.blocks {
            self.print_block(i, index, b, tally.entries - before);
        }
        for e in &entries {
            self.print_entry(s, e);
        }
        if let Some(e) = damaged {
            self.error(&format!("segment {} block {i} at {}", s.number(), b.block.offset), e);
        }
    }

    fn print_block(&self, i: usize, index: &IndexEntry, b: &DataBlock, entries: u64) {
        if self.args.json {
            let mut j = JsonObject::default();
            j.str("type", "block")
                .int("index", i as u64)
                .int("offset", b.block.offset)
                .int("stored_bytes", b.block.size)
                .str("compression", compression_text(b.compression))
                .int("raw_bytes", b.raw_bytes)
                .int("restarts", b.restarts)
                .int("entries", entries)
                .str("separator", &escape(&index.separator.user_key))
                .raw("checksum_ok", "true");
            outln!("{}", j.finish());
            return;
        }
        outln!(
            "  block {i:>4} @{:<8} {:>6} B stored, {:<4} {:>6} B raw, {:>3} restarts, {:>4} entries, crc ok, keys <= {}",
            b.block.offset,
            b.block.size,
            compression_text(b.compression),
            b.raw_bytes,
            b.restarts,
            entries,
            escape(&index.separator.user_key)
        );
    }

    fn print_entry(&self, s: &TableSegment, e: &Entry) {
        if self.args.json {
            outln!("{}", entry_json(s.number(), e));
            return;
        }
        let value = match &e.value {
            EntryValue::Inline(v) => format!("inline {} B {}", v.len(), value_preview(v)),
            EntryValue::Pointer(p) => {
                format!("-> {}:{}:{} (value crc {:08x})", p.file, p.offset, p.op_len, p.value_crc)
            }
            _ => String::new(),
        };
        outln!("    {} {value}", key_text(&e.key));
    }
}

fn compression_text(c: BlockCompression) -> &'static str {
    match c {
        BlockCompression::None => "none",
        BlockCompression::Lz4 => "lz4",
        BlockCompression::Zstd => "zstd",
        _ => "other",
    }
}

fn opt_key(k: &Option<InternalKey>) -> String {
    k.as_ref().map_or_else(|| "(none: empty table)".into(), key_text)
}

fn print_segment(s: &TableSegment) {
    let (f, p) = (s.footer(), s.properties());
    outln!("segment {}: bytes {}..{} (footer at {})", s.number(), s.start(), s.end(), f.offset);
    outln!(
        "  properties: {} entries ({} deletions), {} data blocks, keys {} B, values {} B, format {}",
        p.num_entries,
        p.num_deletions,
        p.num_data_blocks,
        p.raw_key_bytes,
        p.raw_value_bytes,
        p.format_version
    );
    outln!("  smallest:   {}", opt_key(&p.smallest));
    outln!("  largest:    {}", opt_key(&p.largest));
    if !p.range_tombstones.is_empty() {
        outln!("  range tombstones: {}", p.range_tombstones.len());
        for t in &p.range_tombstones {
            outln!("    [{}, {}) @{}", escape(&t.begin), escape(&t.end), t.seq);
        }
    }
    let filter = f.filter.map_or("none".to_string(), |h| format!("{}+{}", h.offset, h.size));
    outln!(
        "  footer:     index {}+{}, filter {filter}, properties {}+{}, format {}",
        f.index.offset,
        f.index.size,
        f.properties.offset,
        f.properties.size,
        f.format_version
    );
    outln!("  index:      {} entries (one per data block)", s.index().len());
}

fn print_tally(s: &TableSegment, t: &Tally) {
    match s.filter() {
        None => outln!("  filter:     none (every lookup reads the table)"),
        Some(f) => {
            let per_key = (f.bits_bytes * 8) as f64 / t.user_keys.max(1) as f64;
            outln!(
                "  filter:     bloom, {} B of bits in {} lines of 64 B, k={} probes, {per_key:.2} bits/key over {} user keys",
                f.bits_bytes, f.lines, f.probes, t.user_keys
            );
        }
    }
    outln!(
        "  blocks:     {} read of {} ({} compressed), {} B stored, {} B raw",
        t.blocks,
        s.index().len(),
        t.compressed,
        t.stored,
        t.raw
    );
    let seqs = t.seqs.map_or("none".to_string(), |(lo, hi)| format!("{lo}..{hi}"));
    outln!(
        "  entries:    {} ({} inline, {} value pointers, {} deletions; {} user keys), seq {seqs}",
        t.entries,
        t.inline,
        t.pointers,
        t.deletions,
        t.user_keys
    );
}

fn segment_json(s: &TableSegment) -> String {
    let (f, p) = (s.footer(), s.properties());
    let mut j = JsonObject::default();
    j.str("type", "segment")
        .int("segment", s.number() as u64)
        .int("start", s.start())
        .int("end", s.end())
        .int("footer_offset", f.offset)
        .int("index_offset", f.index.offset)
        .int("index_bytes", f.index.size)
        .int("properties_offset", f.properties.offset)
        .int("num_entries", p.num_entries)
        .int("num_deletions", p.num_deletions)
        .int("num_data_blocks", p.num_data_blocks)
        .int("raw_key_bytes", p.raw_key_bytes)
        .int("raw_value_bytes", p.raw_value_bytes)
        .int("index_entries", s.index().len() as u64)
        .int("num_range_tombstones", p.range_tombstones.len() as u64);
    if let Some(k) = &p.smallest {
        j.str("smallest", &key_text(k));
    }
    if let Some(k) = &p.largest {
        j.str("largest", &key_text(k));
    }
    match s.filter() {
        Some(fi) => j
            .int("filter_offset", fi.block.offset)
            .int("filter_bits_bytes", fi.bits_bytes)
            .int("filter_probes", fi.probes.into()),
        None => j.raw("filter_offset", "null"),
    };
    j.finish()
}

fn entry_json(segment: usize, e: &Entry) -> String {
    let mut j = JsonObject::default();
    j.str("type", "entry")
        .int("segment", segment as u64)
        .str("key", &escape(&e.key.user_key))
        .int("seq", e.key.seq)
        .str("kind", &kind_text(e.key.kind));
    match &e.value {
        EntryValue::Inline(v) => j.int("value_bytes", v.len() as u64).str("value", &escape(v)),
        EntryValue::Pointer(p) => j.int("file", p.file).int("offset", p.offset).int("op_len", p.op_len.into()),
        _ => &mut j,
    };
    j.finish()
}
