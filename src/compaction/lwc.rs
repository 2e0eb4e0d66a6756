//! Light-weight compaction (LWC-tree §III-A, §III-C, §III-D): instead of rewriting the tables
//! of the next level that a victim overlaps, the victim's surviving entries are split by those
//! tables' key ranges and each piece is *appended* to its table as a sorted segment
//! (`sst/dtable.rs`). A compaction then writes each byte once per level; a table it grew is
//! merged only once it carries too many segments or bytes (`LwcLimits`): compacted down to the
//! level below, or, in the deepest level, rewritten into tables of the target size.
//!
//! Metadata aggregation (§III-B) is the manifest's in-memory `Version`: it already holds every
//! child table's key range, so splitting a victim reads none of the targets' data. An append
//! reads its victims whole and, of each target, only what opening it through the table cache
//! reads (footer, segment directory, each segment's index, filter and properties).

use std::cmp::Ordering;
use std::sync::Arc;

use super::job::{input_tombstones, output_tombstones, take_before, JobContext, VersionFilter};
use super::CompactionTask;
use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::filename::table_file_name;
use crate::fs::SyncBatch;
use crate::internal_iter::InternalIterator;
use crate::key::user_key;
use crate::range_del::RangeTombstone;
use crate::sst::dtable::SegmentWriter;
use crate::version::{FileMeta, Version};

/// When a table light-weight compaction appends to is merged (compacted down, or in the
/// deepest level split into tables of the target size), its segments collapsed and its dead
/// versions dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LwcLimits {
    /// Segments a table may hold: each is one more filter probe and one more seek per read.
    pub max_segments: u64,
    /// Bytes a table may grow to.
    pub max_table_bytes: u64,
}

impl LwcLimits {
    /// Whether `f` is due to be merged (appends to it go on until then: the limit is soft).
    pub fn over(&self, f: &FileMeta) -> bool {
        f.segments > self.max_segments || f.size > self.max_table_bytes
    }
}

/// An append: the victims (`task.inputs`, one level) are merged, filtered like any
/// compaction's inputs, and distributed over `targets`, the overlapping tables of the output
/// level, in key order. The targets are not inputs: their data stays, so a tombstone over a key
/// in a target's range is kept (it shadows the target's older segments).
#[derive(Debug, Clone)]
pub struct AppendTask {
    pub task: CompactionTask,
    pub targets: Vec<Arc<FileMeta>>,
}

/// What an append did.
#[derive(Debug, Default)]
pub struct AppendOutput {
    /// The targets that received a segment, as the manifest must now record them.
    pub files: Vec<FileMeta>,
    pub vlog_garbage: std::collections::BTreeMap<u64, u64>,
    /// As `JobOutput::vlog_garbage_under_moves`.
    pub vlog_garbage_under_moves: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// Where target `i`'s share of the keys ends: keys up to `key` go to it (`inclusive`), or keys
/// below `key`. The last target takes everything after the one before it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bound {
    key: Vec<u8>,
    inclusive: bool,
}

/// The split points between consecutive targets. Keys between two targets' ranges may go to
/// either without making the run overlap; they go to the smaller table (§III-D's balance: the
/// boundary moves, no data does). A user key both tables hold (an older file cut inside a
/// key's versions) stays with the first, where its newest versions must be.
fn bounds(targets: &[Arc<FileMeta>]) -> Vec<Bound> {
    targets
        .windows(2)
        .map(|w| {
            let (left_end, right_start) = (user_key(&w[0].largest), user_key(&w[1].smallest));
            if left_end == right_start || w[0].size > w[1].size {
                Bound { key: left_end.to_vec(), inclusive: true }
            } else {
                Bound { key: right_start.to_vec(), inclusive: false }
            }
        })
        .collect()
}

/// The first user key past `b`: where a range tombstone is cut between its two targets.
fn split_key(b: &Bound) -> Vec<u8> {
    match b.inclusive {
        // The key right after `b.key`: itself followed by a zero byte.
        true => [&b.key[..], &[0]].concat(),
        false => b.key.clone(),
    }
}

/// Whether the range tombstones of an append's victims can be split over `targets` without
/// making their run overlap: not when two targets share a user key (an older file cut inside
/// a key's versions), since a piece starting at that key would sort before the first table's
/// last entries. The policy merges instead then.
pub fn can_split_tombstones(targets: &[Arc<FileMeta>]) -> bool {
    targets.windows(2).all(|w| user_key(&w[0].largest) != user_key(&w[1].smallest))
}

/// `tombstones` (in key order, disjoint) split into each target's share, cut at the bounds.
fn split_tombstones(tombstones: Vec<RangeTombstone>, bounds: &[Bound]) -> Vec<Vec<RangeTombstone>> {
    let mut pending = tombstones.into();
    let mut out: Vec<_> = bounds.iter().map(|b| take_before(&mut pending, Some(&split_key(b)))).collect();
    out.push(take_before(&mut pending, None));
    out
}

fn within(order: &KeyOrder, b: &Bound, ukey: &[u8]) -> bool {
    match order.compare_user(ukey, &b.key) {
        Ordering::Less => true,
        Ordering::Equal => b.inclusive,
        Ordering::Greater => false,
    }
}

/// The segment being written to one target.
struct Open {
    target: usize,
    writer: SegmentWriter,
}

/// Run an append: merge the victims, drop what no reader needs, append each target's share.
pub fn run_append(ctx: &JobContext<'_>, t: &AppendTask, version: &Version) -> Result<AppendOutput> {
    let bounds = bounds(&t.targets);
    let order = ctx.table_cache.order();
    let mut it = ctx.merged_inputs(&t.task);
    let tombstones = input_tombstones(ctx, &t.task)?;
    let mut filter = VersionFilter::new(ctx, &t.task, version, &tombstones);
    let mut pieces = split_tombstones(output_tombstones(ctx, &t.task, version, &tombstones), &bounds);
    debug_assert!(tombstones.is_empty() || can_split_tombstones(&t.targets), "tombstones over a shared user key");
    let mut out = AppendOutput { bytes_read: t.task.input_bytes(), ..Default::default() };
    let mut open: Option<Open> = None;
    let mut unsynced = SyncBatch::new(ctx.defer_syncs);
    let mut idx = 0;
    it.seek_to_first()?;
    while it.valid() {
        if filter.keep(it.key(), it.value())? {
            // Folded merges leave `it` past what they took; a filtered entry is one entry.
            let (replaced, folded) = if filter.should_fold(it.key()) {
                (Some(filter.fold_merges(&mut it, ctx)?), true)
            } else if filter.should_filter(it.key(), ctx) {
                (filter.apply_filter(it.key(), it.value(), ctx)?, false)
            } else {
                (None, false)
            };
            let entries: Vec<(&[u8], &[u8])> = match &replaced {
                Some(r) => r.iter().map(|(k, v)| (&k[..], &v[..])).collect(),
                None => vec![(it.key(), it.value())],
            };
            if let Some(&(first, _)) = entries.first() {
                let uk = user_key(first);
                while idx < bounds.len() && !within(order, &bounds[idx], uk) {
                    idx += 1;
                }
                if open.as_ref().is_some_and(|o| o.target != idx) {
                    finish(order, open.take(), &t.targets, &mut pieces, &mut out, &mut unsynced)?;
                }
                if open.is_none() {
                    open = Some(Open { target: idx, writer: start(ctx, &t.targets[idx])? });
                }
                if let Some(o) = &mut open {
                    for (k, v) in entries {
                        o.writer.add(k, v)?;
                    }
                }
            }
            if folded {
                continue;
            }
        }
        it.next()?;
    }
    finish(order, open, &t.targets, &mut pieces, &mut out, &mut unsynced)?;
    // Targets that receive range tombstones but no entry get a segment of tombstones only.
    for target in 0..t.targets.len() {
        if !pieces[target].is_empty() {
            let open = Open { target, writer: start(ctx, &t.targets[target])? };
            finish(order, Some(open), &t.targets, &mut pieces, &mut out, &mut unsynced)?;
        }
    }
    unsynced.sync_all()?;
    out.vlog_garbage = super::job::with_expired(filter.vlog_garbage, it.take_garbage());
    out.vlog_garbage_under_moves = filter.garbage_under_moves;
    Ok(out)
}

fn start(ctx: &JobContext<'_>, target: &FileMeta) -> Result<SegmentWriter> {
    let table = ctx.table_cache.get(target.number, target.size)?;
    let path = table_file_name(ctx.dir, target.number);
    SegmentWriter::open(ctx.vfs, &path, target.size, table.segment_ends(), ctx.table_options.clone())
}

/// Close the segment (synced now, or later with `unsynced`) and record the target's new state.
fn finish(
    order: &KeyOrder,
    open: Option<Open>,
    targets: &[Arc<FileMeta>],
    pieces: &mut [Vec<RangeTombstone>],
    out: &mut AppendOutput,
    unsynced: &mut SyncBatch,
) -> Result<()> {
    let Some(mut o) = open else {
        return Ok(());
    };
    o.writer.set_range_tombstones(std::mem::take(&mut pieces[o.target]));
    let old = &targets[o.target];
    let (s, file) = o.writer.finish_unsynced()?;
    unsynced.push(file)?;
    let seg = &s.segment;
    out.bytes_written += s.file_size - old.size;
    let min = |a: &Vec<u8>, b: &Vec<u8>| if order.compare_internal(a, b).is_le() { a.clone() } else { b.clone() };
    let max = |a: &Vec<u8>, b: &Vec<u8>| if order.compare_internal(a, b).is_ge() { a.clone() } else { b.clone() };
    out.files.push(FileMeta {
        number: old.number,
        size: s.file_size,
        smallest: min(&old.smallest, &seg.smallest),
        largest: max(&old.largest, &seg.largest),
        run: old.run,
        num_entries: old.num_entries + seg.num_entries,
        num_deletions: old.num_deletions + seg.num_deletions,
        raw_value_bytes: old.raw_value_bytes + seg.raw_value_bytes,
        segments: s.segments as u64,
        range_tombstones: old.range_tombstones + seg.range_tombstones,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::testutil::file;

    fn sized(number: u64, lo: &str, hi: &str, size: u64) -> Arc<FileMeta> {
        Arc::new(FileMeta { size, ..file(number, 1, lo, hi) })
    }

    fn route(targets: &[Arc<FileMeta>], key: &str) -> usize {
        let b = bounds(targets);
        b.iter().position(|b| within(&KeyOrder::default(), b, key.as_bytes())).unwrap_or(b.len())
    }

    #[test]
    fn keys_go_to_the_table_whose_range_holds_them_and_gaps_to_the_smaller_neighbour() {
        let t = [sized(1, "b", "d", 100), sized(2, "g", "j", 50), sized(3, "m", "p", 500)];
        assert_eq!(route(&t, "a"), 0, "before the first table");
        assert_eq!(route(&t, "c"), 0);
        assert_eq!(route(&t, "e"), 1, "gap d..g: table 2 is smaller");
        assert_eq!(route(&t, "g"), 1);
        assert_eq!(route(&t, "k"), 1, "gap j..m: table 2 is smaller than table 3");
        assert_eq!(route(&t, "m"), 2);
        assert_eq!(route(&t, "z"), 2, "after the last table");
    }

    #[test]
    fn a_user_key_two_tables_share_goes_to_the_first() {
        let t = [sized(1, "b", "k", 10), sized(2, "k", "p", 500)];
        assert_eq!(route(&t, "k"), 0);
        let t = [sized(1, "b", "k", 500), sized(2, "k", "p", 10)];
        assert_eq!(route(&t, "k"), 0);
        assert_eq!(route(&t, "ka"), 1);
    }
}
