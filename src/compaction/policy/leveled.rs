//! LevelDB's leveled compaction: one sorted run per level below L0, level i+1 holds
//! `size_ratio` times more bytes than level i, L0 compacted once it has `l0_trigger` files.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::compaction::{CompactionInput, CompactionPolicy, CompactionTask, L0Limits, PickContext, Reason};
use crate::key::{self, compare_internal};
use crate::options::Options;
use crate::version::{FileMeta, Version};

/// Leveling with LevelDB's defaults.
#[derive(Debug, Clone)]
pub struct LeveledPolicy {
    pub l0_trigger: usize,
    pub l0_limits: L0Limits,
    pub level1_bytes: u64,
    pub size_ratio: u64,
    pub target_file_bytes: u64,
    pub num_levels: usize,
}

impl LeveledPolicy {
    pub fn from_options(o: &Options) -> Self {
        LeveledPolicy {
            l0_trigger: o.l0_compaction_trigger.max(1),
            l0_limits: L0Limits::above(o, o.l0_compaction_trigger.max(1)),
            level1_bytes: o.max_bytes_for_level_base.max(1),
            size_ratio: o.level_size_ratio.max(2),
            target_file_bytes: o.target_file_size_bytes.max(1),
            num_levels: o.num_levels.max(2),
        }
    }

    /// Byte budget of `level` (>= 1).
    pub fn max_bytes(&self, level: usize) -> f64 {
        level_capacity_bytes(self.level1_bytes, self.size_ratio, level)
    }

    /// Compaction score of each level but the last: >= 1 means it needs compaction.
    pub fn scores(&self, v: &Version) -> Vec<f64> {
        (0..self.num_levels - 1)
            .map(|l| match l {
                0 => v.level_files(0) as f64 / self.l0_trigger as f64,
                _ => v.level_bytes(l) as f64 / self.max_bytes(l),
            })
            .collect()
    }

    fn task_for(&self, v: &Version, level: usize, upper: Vec<Arc<FileMeta>>, reason: Reason) -> CompactionTask {
        let upper = if level == 0 { expand_overlapping_l0(v, upper) } else { upper };
        let (lo, hi) = user_range(&upper);
        let lower = v.overlapping_files(level + 1, Some(&lo), Some(&hi));
        let (all_lo, all_hi) = user_range(&upper.iter().chain(lower.iter()).cloned().collect::<Vec<_>>());
        let grandparents = if level + 2 < self.num_levels {
            v.overlapping_files(level + 2, Some(&all_lo), Some(&all_hi))
        } else {
            Vec::new()
        };
        let gp_bytes: u64 = grandparents.iter().map(|f| f.size).sum();
        let trivial_move = upper.len() == 1 && lower.is_empty() && gp_bytes <= 20 * self.target_file_bytes;
        let largest = upper.iter().map(|f| f.largest.clone()).max_by(|a, b| compare_internal(a, b));
        let output_run = v.levels.get(level + 1).and_then(|l| l.runs.first()).map(|r| r.id);
        let mut inputs = vec![CompactionInput { level, files: upper }];
        if !lower.is_empty() {
            inputs.push(CompactionInput { level: level + 1, files: lower });
        }
        CompactionTask {
            inputs,
            output_level: level + 1,
            output_run,
            trivial_move,
            grandparents,
            compact_pointer: largest.map(|k| (level, k)),
            reason,
        }
    }
}

/// Byte budget of `level` (>= 1) under leveling: `level1_bytes` × `ratio`^(level − 1).
pub fn level_capacity_bytes(level1_bytes: u64, ratio: u64, level: usize) -> f64 {
    level1_bytes as f64 * (ratio as f64).powi(level.saturating_sub(1) as i32)
}

/// Smallest and largest user key over `files`.
fn user_range(files: &[Arc<FileMeta>]) -> (Vec<u8>, Vec<u8>) {
    let lo = files.iter().map(|f| key::user_key(&f.smallest)).min().unwrap_or_default();
    let hi = files.iter().map(|f| key::user_key(&f.largest)).max().unwrap_or_default();
    (lo.to_vec(), hi.to_vec())
}

/// L0 files overlap each other: a compaction must take every L0 file overlapping the chosen
/// ones, or an older version of a key could end up below a newer one.
fn expand_overlapping_l0(v: &Version, files: Vec<Arc<FileMeta>>) -> Vec<Arc<FileMeta>> {
    let (lo, hi) = user_range(&files);
    let expanded = v.overlapping_files(0, Some(&lo), Some(&hi));
    if expanded.is_empty() {
        files
    } else {
        expanded
    }
}

impl CompactionPolicy for LeveledPolicy {
    fn name(&self) -> String {
        format!("leveled(T={})", self.size_ratio)
    }

    fn pick(&self, ctx: &PickContext<'_>) -> Option<CompactionTask> {
        let v = ctx.version;
        let scores = self.scores(v);
        let (level, score) =
            scores.iter().copied().enumerate().max_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(Ordering::Equal))?;
        if score < 1.0 {
            let (level, file) = ctx.seek_candidate.clone()?;
            let still_there = v.levels.get(level)?.runs.iter().any(|r| r.files.iter().any(|f| f.number == file.number));
            return (still_there && level + 1 < self.num_levels)
                .then(|| self.task_for(v, level, vec![file], Reason::Seeks));
        }
        let files: Vec<Arc<FileMeta>> = v.levels[level].files().cloned().collect();
        // Round robin: the first file after where the last compaction of this level stopped.
        let pointer = ctx.compact_pointers.get(level).and_then(|p| p.as_deref());
        let chosen = pointer
            .and_then(|p| files.iter().find(|f| compare_internal(&f.largest, p) == Ordering::Greater))
            .or_else(|| files.first())?
            .clone();
        Some(self.task_for(v, level, vec![chosen], if level == 0 { Reason::L0Files } else { Reason::LevelSize }))
    }

    fn pick_range(
        &self,
        v: &Version,
        level: usize,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Option<CompactionTask> {
        if level + 1 >= self.num_levels {
            return None;
        }
        let files = v.overlapping_files(level, begin, end);
        if files.is_empty() {
            return None;
        }
        let mut t = self.task_for(v, level, files, Reason::Manual);
        t.trivial_move = false;
        Some(t)
    }

    fn l0_write_limits(&self) -> L0Limits {
        self.l0_limits
    }

    /// LevelDB's `PickLevelForMemTableOutput`: a table overlapping nothing in levels 0..=2 is
    /// pushed down (at most to level 2) while the level below does not overlap it and the
    /// one after that would not make a later compaction of it too large; it joins the run
    /// there (one per level).
    fn place_flush(&self, v: &Version, lo: &[u8], hi: &[u8]) -> (usize, Option<u64>) {
        let overlaps = |l: usize| !v.overlapping_files(l, Some(lo), Some(hi)).is_empty();
        let mut level = 0;
        if !overlaps(0) {
            while level < 2 && level + 1 < v.num_levels() {
                if overlaps(level + 1) {
                    break;
                }
                if level + 2 < v.num_levels() {
                    let gp: u64 = v.overlapping_files(level + 2, Some(lo), Some(hi)).iter().map(|f| f.size).sum();
                    if gp > 10 * self.target_file_bytes {
                        break;
                    }
                }
                level += 1;
            }
        }
        let run = if level == 0 { None } else { v.levels.get(level).and_then(|l| l.runs.first()).map(|r| r.id) };
        (level, run)
    }
}
