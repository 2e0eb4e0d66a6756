//! Writing a memtable to tables: one table per keyspace whose list holds entries, each shaped
//! by its keyspace's policy (where it lands, its filter bits), installed together in one
//! manifest edit — the default keyspace's files in the edit itself, the others' as subedits —
//! with the value-log bytes the new tables point to. The flush thread and recovery's replay
//! both flush this way.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::keyspace::TreeState;
use crate::compaction::NewRun;
use crate::error::Result;
use crate::filename::table_file_name;
use crate::fs::Vfs;
use crate::key;
use crate::memtable::Memtable;
use crate::sst::{TableBuilder, TableOptions};
use crate::version::{FileMeta, VersionEdit, VersionSet};

/// One keyspace's table of a flush: its number and the options it is written with.
pub(super) struct FlushTable {
    pub ks: u32,
    pub number: u64,
    pub opts: TableOptions,
}

/// The tables a flush of `mem` writes: one per live keyspace whose list holds entries, with a
/// fresh file number and the table options of where its policy would place it now (`place`:
/// no compaction is running; decided again at install: Monkey gives a table joining a deep
/// level that level's bits, not those of a small new L0 run).
pub(super) fn plan(
    trees: &BTreeMap<u32, TreeState>,
    versions: &mut VersionSet,
    mem: &Memtable,
    write_buffer_bytes: u64,
    place: bool,
) -> Vec<FlushTable> {
    let flush_bytes = mem.flushed_bytes_of(write_buffer_bytes).unwrap_or(0);
    let mut out = Vec::new();
    for ks in mem.keyspaces().collect::<Vec<_>>() {
        let (Some(t), Some(v)) = (trees.get(&ks), versions.current_of(ks)) else { continue };
        if t.dropped || mem.is_empty_in(ks) {
            continue;
        }
        let (level, joins) = match mem.user_key_range(ks) {
            Some((lo, hi)) if place => t.policy.place_flush(&v, &lo, &hi),
            _ => (0, None),
        };
        let run = NewRun { level, bytes: mem.entry_bytes_in(ks), joins, consumed: &[], flush_bytes };
        let mut opts = t.policy.table_options(&v, &run);
        opts.prefix_extractor = t.opts.prefix_extractor.clone();
        out.push(FlushTable { ks, number: versions.new_file_number(), opts });
    }
    out
}

/// Write the planned tables of `mem` (no lock held); `None` for a table that came out empty.
pub(super) fn write(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    mem: &Memtable,
    tables: &[FlushTable],
) -> Result<Vec<(u32, Option<FileMeta>)>> {
    let mut out = Vec::with_capacity(tables.len());
    for t in tables {
        out.push((t.ks, write_table(&**vfs, dir, t.opts.clone(), mem, t.ks, t.number)?));
    }
    if !out.is_empty() {
        // The manifest is about to name these files: their directory entries must be durable.
        vfs.sync_dir(dir)?;
    }
    Ok(out)
}

/// Write keyspace `ks`'s entries of `mem` into table file `number`; `None` if it has none.
fn write_table(
    fs: &dyn Vfs,
    dir: &Path,
    opts: TableOptions,
    mem: &Memtable,
    ks: u32,
    number: u64,
) -> Result<Option<FileMeta>> {
    if mem.is_empty_in(ks) {
        return Ok(None);
    }
    let mut builder = TableBuilder::new(fs.create(&table_file_name(dir, number))?, opts);
    mem.for_each(ks, |k, v| builder.add(k, v))?;
    if let Some(t) = mem.range_tombstones(ks) {
        builder.set_range_tombstones(t.tombstones().collect());
    }
    let s = builder.finish()?;
    Ok(Some(FileMeta {
        number,
        size: s.file_size,
        smallest: s.smallest,
        largest: s.largest,
        run: number,
        num_entries: s.num_entries,
        num_deletions: s.num_deletions,
        raw_value_bytes: s.raw_value_bytes,
        segments: 1,
        range_tombstones: s.range_tombstones,
    }))
}

/// The edit installing a flush's tables: each placed by its keyspace's policy (`place`: no
/// compaction is running — while one runs its outputs are not yet visible, so a table placed
/// below L0 could overlap them and goes to L0), the value-log bytes the memtable's pointers
/// reference, and, for the lists of keyspaces dropped since the memtable was made, their
/// separated values as garbage (no table will reference them). Returns the edit and the table
/// bytes written.
pub(super) fn edit(
    trees: &BTreeMap<u32, TreeState>,
    versions: &VersionSet,
    mem: &Memtable,
    tables: Vec<(u32, Option<FileMeta>)>,
    place: bool,
) -> (VersionEdit, u64) {
    let mut edit = VersionEdit::default();
    let mut bytes = 0;
    for (ks, meta) in tables {
        let (Some(mut meta), Some(t), Some(v)) = (meta, trees.get(&ks), versions.current_of(ks)) else { continue };
        let (lo, hi) = (key::user_key(&meta.smallest), key::user_key(&meta.largest));
        let (level, run) = if place { t.policy.place_flush(&v, lo, hi) } else { (0, None) };
        meta.run = run.unwrap_or(meta.number);
        bytes += meta.size;
        t.counters.flush_bytes.fetch_add(meta.size, std::sync::atomic::Ordering::Relaxed);
        tree_edit(&mut edit, ks).added_files.push((level as u32, meta));
    }
    // Tables now point into these log files: record it in the same edit that moves the log
    // head past them, so the sweep never sees them as deletable.
    edit.vlog_added = mem.vlog_bytes().into_iter().collect();
    let dropped = mem.keyspaces().filter(|ks| trees.get(ks).is_none_or(|t| t.dropped));
    for ks in dropped.collect::<Vec<_>>() {
        edit.vlog_garbage.extend(mem.vlog_bytes_in(ks));
    }
    (edit, bytes)
}

/// The part of `edit` that changes keyspace `ks`'s tree (the edit itself for the default
/// keyspace, else a subedit made on first use).
pub(super) fn tree_edit(edit: &mut VersionEdit, ks: u32) -> &mut VersionEdit {
    if ks == edit.keyspace {
        return edit;
    }
    match edit.subedits.iter().position(|e| e.keyspace == ks) {
        Some(i) => &mut edit.subedits[i],
        None => {
            edit.subedits.push(VersionEdit::of_keyspace(ks));
            edit.subedits.last_mut().expect("just pushed")
        }
    }
}
