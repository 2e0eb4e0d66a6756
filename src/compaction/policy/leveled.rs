//! LevelDB's leveled compaction: one sorted run per level below L0, level i+1 holds
//! `size_ratio` times more bytes than level i, L0 compacted once it has `l0_trigger` files.
//! With light-weight compaction on, a compaction appends to the tables below (`Choice::Append`)
//! instead of merging with them, and a table past `LwcLimits` is split first.

use std::cmp::Ordering;
use std::sync::Arc;

use super::monkey::FilterPlan;
use crate::compaction::lwc::{AppendTask, LwcLimits};
use crate::compaction::{
    pick_drop, Choice, CompactionInput, CompactionPolicy, CompactionTask, L0Limits, NewRun, PickContext, Reason,
    WritePressure,
};
use crate::key::{self, compare_internal};
use crate::options::Options;
use crate::sst::TableOptions;
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
    pub filters: FilterPlan,
    /// Light-weight compaction's limits, when it is on.
    pub lwc: Option<LwcLimits>,
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
            filters: FilterPlan::from_options(o),
            lwc: o.light_weight_compaction.then(|| LwcLimits {
                max_segments: o.lwc_max_segments.max(1),
                max_table_bytes: match o.lwc_max_table_bytes {
                    0 => 4 * o.target_file_size_bytes.max(1),
                    n => n,
                },
            }),
        }
    }

    /// Under light-weight compaction: a table of a free level that must be split before more
    /// is appended to it (the fullest by segments), rewritten alone into its own run.
    fn pick_split(&self, ctx: &PickContext<'_>) -> Option<Choice> {
        let limits = self.lwc?;
        let v = ctx.version;
        let (level, f) = (1..v.num_levels())
            .filter(|&l| ctx.free(&[l]) && v.num_runs(l) == 1)
            .flat_map(|l| v.levels[l].files().filter(|f| limits.over(f)).map(move |f| (l, f)))
            .max_by_key(|(_, f)| (f.segments, f.size))?;
        let (lo, hi) = user_range(std::slice::from_ref(f));
        let grandparents = match level + 1 < self.num_levels {
            true => v.overlapping_files(level + 1, Some(&lo), Some(&hi)),
            false => Vec::new(),
        };
        Some(Choice::Merge(CompactionTask {
            inputs: vec![CompactionInput { level, files: vec![f.clone()] }],
            output_level: level,
            output_run: Some(f.run),
            grandparents,
            compact_pointer: None,
            reason: Reason::Split,
        }))
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

    /// Merge `upper` (files of `level`) with what overlaps them in the level below; a `Move`
    /// when that is one file that overlaps nothing there and little further down.
    fn task_for(&self, v: &Version, level: usize, upper: Vec<Arc<FileMeta>>, reason: Reason) -> Choice {
        // A level reshaped from another policy's tree may still hold several runs.
        let upper = if v.num_runs(level) > 1 { expand_overlapping(v, level, upper) } else { upper };
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
        let appendable = self.lwc.is_some() && inputs.len() == 2 && v.num_runs(level + 1) == 1;
        if appendable {
            // The tables below stay where they are and receive a segment each.
            let targets = inputs.pop().map(|i| i.files).unwrap_or_default();
            let task = CompactionTask {
                inputs,
                output_level: level + 1,
                output_run,
                grandparents: Vec::new(),
                compact_pointer: largest.map(|k| (level, k)),
                reason,
            };
            return Choice::Append(AppendTask { task, targets });
        }
        let task = CompactionTask {
            inputs,
            output_level: level + 1,
            output_run,
            grandparents,
            compact_pointer: largest.map(|k| (level, k)),
            reason,
        };
        if trivial_move {
            Choice::Move(task)
        } else {
            Choice::Merge(task)
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

/// The runs of a level with several (L0, or a tree another policy shaped) overlap each other: a
/// compaction must take every file of the level overlapping the chosen ones, or an older
/// version of a key could end up below a newer one.
fn expand_overlapping(v: &Version, level: usize, files: Vec<Arc<FileMeta>>) -> Vec<Arc<FileMeta>> {
    let (lo, hi) = user_range(&files);
    let expanded = v.overlapping_files(level, Some(&lo), Some(&hi));
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

    fn pick(&self, ctx: &PickContext<'_>) -> Option<Choice> {
        if let Some(drop) = pick_drop(ctx) {
            return Some(drop);
        }
        if let Some(split) = self.pick_split(ctx) {
            return Some(split);
        }
        let v = ctx.version;
        let mut by_score: Vec<(usize, f64)> = self.scores(v).into_iter().enumerate().collect();
        by_score.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal));
        let free = by_score.into_iter().find(|&(level, score)| score >= 1.0 && ctx.free(&[level, level + 1]));
        let Some((level, _)) = free else {
            let (level, file) = ctx.seek_candidate.clone()?;
            let still_there = v.levels.get(level)?.files().any(|f| f.number == file.number);
            return (still_there && level + 1 < self.num_levels && ctx.free(&[level, level + 1]))
                .then(|| self.task_for(v, level, vec![file], Reason::Seeks));
        };
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
        // A manual compaction merges (collapsing segments), never appends.
        let merging = LeveledPolicy { lwc: None, ..self.clone() };
        match merging.task_for(v, level, files, Reason::Manual) {
            Choice::Move(t) | Choice::Merge(t) => Some(t),
            _ => None,
        }
    }

    fn write_pressure(&self, v: &Version) -> WritePressure {
        self.l0_limits.pressure(v.num_runs(0))
    }

    /// A run of a level above the deepest counts at least the level's byte budget (one run).
    fn table_options(&self, v: &Version, run: &NewRun<'_>) -> TableOptions {
        self.filters.table_options(v, run, |level| self.max_bytes(level) as u64)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::testutil::{file, version};
    use crate::options::FilterAllocation;

    fn pick(p: &LeveledPolicy, v: &Version, busy: &[usize]) -> Option<Choice> {
        p.pick(&PickContext { version: v, compact_pointers: &[], seek_candidate: None, busy_levels: busy })
    }

    fn inputs(c: &Choice) -> Vec<u64> {
        let (Choice::Merge(t) | Choice::Move(t)) = c else { panic!("{c:?}") };
        let mut n: Vec<u64> = t.input_files().map(|(_, f)| f.number).collect();
        n.sort_unstable();
        n
    }

    #[test]
    fn a_level_left_with_several_runs_by_another_policy_is_compacted_whole_where_runs_overlap() {
        // Level 1 over its budget with two overlapping runs: moving only the newer run's file
        // down would leave the older run's version of "l" above it.
        let p = LeveledPolicy::from_options(&Options::default().max_bytes_for_level_base(1000));
        let v = version(4, &[(1, file(10, 5, "a", "m")), (1, file(11, 7, "k", "z"))]);
        let c = pick(&p, &v, &[]).expect("level 1 is over budget");
        assert_eq!(inputs(&c), vec![10, 11]);
    }

    #[test]
    fn a_level_whose_compaction_would_touch_a_busy_level_waits() {
        let p = LeveledPolicy::from_options(&Options::default().max_bytes_for_level_base(1000));
        let v = version(4, &[(1, file(10, 5, "a", "m")), (1, file(11, 6, "n", "z"))]);
        assert!(pick(&p, &v, &[2]).is_none(), "level 1 merges into busy level 2");
        assert!(pick(&p, &v, &[0]).is_some(), "level 0 is not involved");
    }

    #[test]
    fn the_policy_gives_small_runs_more_filter_bits_under_monkey_and_the_level_bits_under_uniform() {
        let o = Options::default().bloom_bits_per_key(vec![5.0, 7.0]);
        let v = version(4, &[(1, file(10, 5, "a", "m")), (3, FileMeta { size: 1 << 30, ..file(11, 6, "n", "z") })]);
        let new_l0 = NewRun { level: 0, bytes: 4 << 20, joins: None, consumed: &[] };
        let uniform = LeveledPolicy::from_options(&o.clone().filter_allocation(FilterAllocation::Uniform));
        assert_eq!(uniform.table_options(&v, &new_l0).bloom_bits_per_key, 5.0);
        let at_l2 = NewRun { level: 2, ..new_l0 };
        assert_eq!(uniform.table_options(&v, &at_l2).bloom_bits_per_key, 7.0);
        let monkey = LeveledPolicy::from_options(&o.filter_allocation(FilterAllocation::Monkey));
        assert!(monkey.table_options(&v, &new_l0).bloom_bits_per_key > 8.0, "a small run in a 1 GiB tree");
    }
}
