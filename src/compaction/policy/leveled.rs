//! LevelDB's leveled compaction: one sorted run per level below L0, level i+1 holds
//! `size_ratio` times more bytes than level i, L0 compacted once it has `l0_trigger` files.
//! With light-weight compaction on, a compaction appends to the tables below (`Choice::Append`)
//! instead of merging with them, and a table past `LwcLimits` is split first.

use std::cmp::Ordering;
use std::sync::Arc;

use super::monkey::{FilterPlan, SteadyLevel};
use crate::compaction::lwc::{self, AppendTask, LwcLimits};
use crate::compaction::{
    pick_drop, Choice, CompactionInput, CompactionPolicy, CompactionTask, L0Limits, L0Triggers, NewRun, PickContext,
    Reason, WritePressure,
};
use crate::key;
use crate::options::Options;
use crate::sst::TableOptions;
use crate::version::{FileMeta, Version};

/// Under light-weight compaction, writers slow down once a level below 0 holds this many
/// times its byte budget, and stop at `LWC_STOP_DEBT`.
const LWC_SLOWDOWN_DEBT: f64 = 4.0;
const LWC_STOP_DEBT: f64 = 8.0;

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
            l0_limits: L0Limits::above(L0Triggers::from_options(o), o.l0_compaction_trigger.max(1)),
            level1_bytes: o.max_bytes_for_level_base.max(1),
            size_ratio: o.level_size_ratio.max(2),
            target_file_bytes: o.target_file_size_bytes.max(1),
            num_levels: o.num_levels.max(2),
            filters: FilterPlan::from_options(o),
            lwc: o.light_weight_compaction.then(|| LwcLimits {
                max_segments: o.lwc_max_segments.max(1),
                // At least two tables' worth: a split writes tables of the target size, which must
                // come out under the limit, or the deepest level would split them again forever.
                max_table_bytes: match o.lwc_max_table_bytes {
                    0 => 4 * o.target_file_size_bytes.max(1),
                    n => n.max(2 * o.target_file_size_bytes.max(1)),
                },
            }),
        }
    }

    /// Under light-weight compaction, a table past `LwcLimits` (the fullest by segments, among
    /// free levels). Above the deepest level it is compacted *down* — appended to the level
    /// below, which collapses its segments on the way and moves its data where it was going
    /// anyway — so only the deepest level ever rewrites a table in place (split into tables of
    /// the target size, in its own run).
    fn pick_split(&self, ctx: &PickContext<'_>) -> Option<Choice> {
        let limits = self.lwc?;
        let v = ctx.version;
        let deepest = (0..v.num_levels()).rev().find(|&l| v.level_files(l) > 0)?;
        let (level, f) = (1..=deepest)
            .filter(|&l| v.num_runs(l) == 1 && ctx.free(&[l, (l + 1).min(deepest)]))
            // In the deepest level only a table of several segments: rewriting one segment cannot
            // shrink it (its bytes are one user key's versions a snapshot pins).
            .flat_map(|l| {
                let splittable = move |f: &&Arc<FileMeta>| limits.over(f) && (l < deepest || f.segments > 1);
                v.levels[l].files().filter(splittable).map(move |f| (l, f))
            })
            .max_by_key(|(_, f)| (f.segments, f.size))?;
        Some(match level < deepest {
            true => self.task_for(v, level, vec![f.clone()], Reason::Split),
            false => Choice::Merge(self.in_place(v, level, vec![f.clone()], Reason::Split)),
        })
    }

    /// LevelDB's seek compaction: the table point lookups passed over too often goes down.
    fn pick_seek(&self, ctx: &PickContext<'_>) -> Option<Choice> {
        let (level, file) = current_record(ctx.version, ctx.seek_candidate.as_ref()?)?;
        (level + 1 < self.num_levels && ctx.free(&[level, level + 1]))
            .then(|| self.task_for(ctx.version, level, vec![file], Reason::Seeks))
    }

    /// Under light-weight compaction, the table of several segments iterators sought into too
    /// often is rewritten in place: its segments become one, where a seek reads one block
    /// instead of one per segment. In place, not down: the reads paid for this table's
    /// segments, and pushing it down would append a segment to every table below it.
    fn pick_collapse(&self, ctx: &PickContext<'_>) -> Option<Choice> {
        self.lwc?;
        let (level, file) = current_record(ctx.version, ctx.collapse_candidate.as_ref()?)?;
        let ok = level > 0 && file.segments > 1 && ctx.version.num_runs(level) == 1 && ctx.free(&[level]);
        ok.then(|| Choice::Merge(self.in_place(ctx.version, level, vec![file], Reason::Collapse)))
    }

    /// Rewrite `files` (adjacent tables of the one run of `level`) into tables of the target
    /// size in that run: a split in place, or a manual compaction collapsing segments.
    fn in_place(&self, v: &Version, level: usize, files: Vec<Arc<FileMeta>>, reason: Reason) -> CompactionTask {
        let (lo, hi) = user_range(v, &files);
        let grandparents = match level + 1 < self.num_levels {
            true => v.overlapping_files(level + 1, Some(&lo), Some(&hi)),
            false => Vec::new(),
        };
        let output_run = files.first().map(|f| f.run);
        let inputs = vec![CompactionInput { level, files }];
        CompactionTask { inputs, output_level: level, output_run, grandparents, compact_pointer: None, reason }
    }

    /// Level `level` in the steady state Monkey sets filter bits for, in a tree whose
    /// deepest level below L0 is `deepest` (`Version::deepest_level`): level 0 at most
    /// `l0_trigger` files, each as large as it is; a level above the deepest one run of at
    /// least its byte budget; the deepest as it is.
    pub fn steady_level(&self, deepest: usize, level: usize) -> SteadyLevel {
        match level {
            0 => SteadyLevel { max_runs: self.l0_trigger, ..SteadyLevel::AS_IS },
            l if l >= deepest => SteadyLevel::AS_IS,
            l => SteadyLevel::full(1, self.max_bytes(l) as u64),
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

    /// Merge `upper` (files of `level`) with what overlaps them in the level below; a `Move`
    /// when that is one file that overlaps nothing there and little further down; under
    /// light-weight compaction an `Append` to what overlaps below.
    fn task_for(&self, v: &Version, level: usize, upper: Vec<Arc<FileMeta>>, reason: Reason) -> Choice {
        // A level reshaped from another policy's tree may still hold several runs.
        let upper = if v.num_runs(level) > 1 { expand_overlapping(v, level, upper) } else { upper };
        let (lo, hi) = user_range(v, &upper);
        let lower = v.overlapping_files(level + 1, Some(&lo), Some(&hi));
        let (all_lo, all_hi) = user_range(v, &upper.iter().chain(lower.iter()).cloned().collect::<Vec<_>>());
        let grandparents = if level + 2 < self.num_levels {
            v.overlapping_files(level + 2, Some(&all_lo), Some(&all_hi))
        } else {
            Vec::new()
        };
        let gp_bytes: u64 = grandparents.iter().map(|f| f.size).sum();
        let trivial_move = upper.len() == 1 && lower.is_empty() && gp_bytes <= 20 * self.target_file_bytes;
        let largest = upper.iter().map(|f| f.largest.clone()).max_by(|a, b| v.order.compare_internal(a, b));
        let output_run = v.levels.get(level + 1).and_then(|l| l.runs.first()).map(|r| r.id);
        let mut inputs = vec![CompactionInput { level, files: upper }];
        if !lower.is_empty() {
            inputs.push(CompactionInput { level: level + 1, files: lower });
        }
        let appendable = self.lwc.is_some()
            && inputs.len() == 2
            && v.num_runs(level + 1) == 1
            && (inputs[0].files.iter().all(|f| f.range_tombstones == 0) || lwc::can_split_tombstones(&inputs[1].files));
        // A target past its limits waits for its split, which may wait for a busy level; appends
        // go on meanwhile: holding them back stalled level 0 through a 20M-key load and sent the
        // deepest level into a split per two tiny segments, and merging instead rewrote a
        // swollen level 1 whole.
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

/// The current record of a table a reader charged, if it is still in that level: the reader
/// may have held an older Version, and light-weight compaction re-records a table (longer,
/// more segments) under the same number.
fn current_record(v: &Version, (level, charged): &(usize, Arc<FileMeta>)) -> Option<(usize, Arc<FileMeta>)> {
    Some((*level, v.file(*level, charged.number)?.clone()))
}

/// Smallest and largest user key over `files` (in `v`'s key order).
fn user_range(v: &Version, files: &[Arc<FileMeta>]) -> (Vec<u8>, Vec<u8>) {
    let o = &v.order;
    let lo = files.iter().map(|f| key::user_key(&f.smallest)).reduce(|a, b| o.min_user(a, b)).unwrap_or_default();
    let hi = files.iter().map(|f| key::user_key(&f.largest)).reduce(|a, b| o.max_user(a, b)).unwrap_or_default();
    (lo.to_vec(), hi.to_vec())
}

/// The runs of a level with several (L0, or a tree another policy shaped) overlap each other: a
/// compaction must take every file of the level overlapping the chosen ones, or an older
/// version of a key could end up below a newer one.
fn expand_overlapping(v: &Version, level: usize, files: Vec<Arc<FileMeta>>) -> Vec<Arc<FileMeta>> {
    let (lo, hi) = user_range(v, &files);
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
        // A level of one run over its budget merges a table into the run below: lookups probe
        // as many runs after as before, so while users only read it waits (`readers_only`).
        let wanted = |level: usize| level == 0 || !ctx.readers_only || v.num_runs(level) > 1;
        let free =
            by_score.into_iter().find(|&(level, score)| score >= 1.0 && wanted(level) && ctx.free(&[level, level + 1]));
        let Some((level, _)) = free else {
            return self.pick_seek(ctx).or_else(|| self.pick_collapse(ctx));
        };
        let files: Vec<Arc<FileMeta>> = v.levels[level].files().cloned().collect();
        // Round robin: the first file after where the last compaction of this level stopped.
        let pointer = ctx.compact_pointers.get(level).and_then(|p| p.as_deref());
        let chosen = pointer
            .and_then(|p| files.iter().find(|f| v.order.compare_internal(&f.largest, p) == Ordering::Greater))
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

    /// Light-weight compaction leaves older versions in the older segments of a table, which
    /// nothing merges while no compaction reaches the table: a manual compaction of the deepest
    /// level it reaches rewrites that level's tables in the range in place when any of them
    /// holds segments (all of them, so the outputs cannot overlap a table left out).
    fn pick_merge_runs(
        &self,
        v: &Version,
        level: usize,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Option<CompactionTask> {
        let files = v.overlapping_files(level, begin, end);
        if level == 0 || v.num_runs(level) != 1 || !files.iter().any(|f| f.segments > 1) {
            return None;
        }
        Some(self.in_place(v, level, files, Reason::Manual))
    }

    /// Level 0's file count, as LevelDB. Under light-weight compaction also the debt of the
    /// levels below it: appending level 0 to level 1 costs little whatever level 1's size, so
    /// nothing else would stop writers from piling data into level 1 faster than it can move
    /// down (reads then wade through it, and the work is only deferred). Writers slow down once
    /// a level holds `LWC_SLOWDOWN_DEBT` times its budget and stop at `LWC_STOP_DEBT` times
    /// (RocksDB's pending-compaction-bytes limits play this part there).
    fn write_pressure(&self, v: &Version) -> WritePressure {
        let l0 = self.l0_limits.pressure(v.num_runs(0));
        if self.lwc.is_none() || l0 == WritePressure::Stop {
            return l0;
        }
        let debt = (1..self.num_levels - 1).map(|l| v.level_bytes(l) as f64 / self.max_bytes(l)).fold(0.0, f64::max);
        match debt {
            d if d >= LWC_STOP_DEBT => WritePressure::Stop,
            d if d >= LWC_SLOWDOWN_DEBT => WritePressure::Slowdown,
            _ => l0,
        }
    }

    /// Monkey's bits for the steady tree (`steady_level`): a load's backlog of L0 files drains.
    fn table_options(&self, v: &Version, run: &NewRun<'_>) -> TableOptions {
        let deepest = v.deepest_level();
        self.filters.table_options(v, run, |level| self.steady_level(deepest, level))
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
    use crate::compaction::testutil::{context, file, version};
    use crate::options::FilterAllocation;

    fn pick(p: &LeveledPolicy, v: &Version, busy: &[usize]) -> Option<Choice> {
        p.pick(&context(v, busy))
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
    fn while_users_only_read_a_level_over_its_budget_waits_and_level_0_does_not() {
        let p =
            LeveledPolicy::from_options(&Options::default().max_bytes_for_level_base(1000).l0_compaction_trigger(2));
        let reading = |v: &Version| p.pick(&PickContext { readers_only: true, ..context(v, &[]) });
        // Level 1 twice its budget: one run before the merge and after, so it waits.
        let over = version(4, &[(1, file(10, 5, "a", "f")), (1, file(11, 5, "g", "m")), (2, file(20, 6, "a", "z"))]);
        assert!(pick(&p, &over, &[]).is_some(), "over budget");
        assert!(reading(&over).is_none(), "a level's one run merging down leaves lookups as they were");
        // Level 0's files are runs every lookup probes: merging them goes on.
        let l0 = version(4, &[(0, file(1, 1, "a", "z")), (0, file(2, 2, "a", "z")), (1, file(10, 5, "a", "z"))]);
        let c = reading(&l0).expect("level 0 at its trigger");
        assert_eq!(c.reason(), Reason::L0Files);
        // Several runs in a level (another policy's tree): merging them cuts probes.
        let runs = version(4, &[(1, file(10, 5, "a", "m")), (1, file(11, 7, "k", "z"))]);
        assert!(reading(&runs).is_some());
    }

    fn lwc_policy() -> LeveledPolicy {
        let o = Options::default().light_weight_compaction(true).lwc_max_segments(2).target_file_size_bytes(1000);
        LeveledPolicy::from_options(&o.max_bytes_for_level_base(1 << 30))
    }

    #[test]
    fn a_compaction_appends_to_the_tables_below_which_stay_where_they_are() {
        let p = lwc_policy();
        let v = version(4, &[(1, file(10, 5, "a", "m")), (2, file(20, 6, "a", "f")), (2, file(21, 6, "g", "z"))]);
        let Choice::Append(a) = p.task_for(&v, 1, vec![v.levels[1].runs[0].files[0].clone()], Reason::Test) else {
            panic!("an append")
        };
        let targets: Vec<u64> = a.targets.iter().map(|f| f.number).collect();
        assert_eq!((targets, a.task.inputs.len()), (vec![20, 21], 1), "the targets are not inputs");
        assert_eq!(Choice::Append(a).levels(), vec![1, 2]);
    }

    #[test]
    fn writers_slow_down_and_stop_as_a_level_runs_into_debt_under_light_weight_compaction() {
        let p = lwc_policy();
        let budget = p.max_bytes(1) as u64;
        let level1 = |times: u64| version(4, &[(1, FileMeta { size: times * budget, ..file(10, 5, "a", "m") })]);
        assert_eq!(p.write_pressure(&level1(2)), WritePressure::None);
        assert_eq!(p.write_pressure(&level1(5)), WritePressure::Slowdown);
        assert_eq!(p.write_pressure(&level1(9)), WritePressure::Stop);
        let classic = LeveledPolicy { lwc: None, ..p };
        assert_eq!(classic.write_pressure(&level1(9)), WritePressure::None, "leveling counts level 0 only");
    }

    #[test]
    fn a_full_table_is_compacted_down_above_the_deepest_level_and_split_in_place_at_it() {
        let p = lwc_policy();
        let full = |n, lo, hi| FileMeta { segments: 3, ..file(n, 6, lo, hi) };
        let v = version(4, &[(1, full(10, "a", "m")), (2, file(20, 7, "a", "z"))]);
        let c = pick(&p, &v, &[]).expect("a full table");
        let Choice::Append(a) = &c else { panic!("{c:?}") };
        assert_eq!((a.task.reason, a.task.output_level), (Reason::Split, 2));
        let v = version(4, &[(1, file(10, 5, "a", "m")), (2, full(20, "a", "z"))]);
        let Some(Choice::Merge(t)) = pick(&p, &v, &[]) else { panic!("a split") };
        assert_eq!((t.reason, t.output_level, t.output_run), (Reason::Split, 2, Some(6)));
        // A one-segment table over the byte limit at the deepest level is left alone: a rewrite
        // could not shrink it.
        let big = FileMeta { size: 1 << 20, ..file(20, 6, "a", "z") };
        let v = version(4, &[(2, big)]);
        assert!(pick(&p, &v, &[]).is_none());
    }

    #[test]
    fn a_seek_compaction_uses_the_current_record_of_a_table_appended_to_since() {
        let p = lwc_policy();
        let charged = Arc::new(file(20, 6, "a", "m"));
        let grown = FileMeta { size: 5000, segments: 2, ..file(20, 6, "a", "m") };
        let v = version(4, &[(2, grown.clone()), (3, file(30, 7, "a", "z"))]);
        let ctx = PickContext { seek_candidate: Some((2, charged)), ..context(&v, &[]) };
        let Some(Choice::Append(a)) = p.pick(&ctx) else { panic!("a seek compaction") };
        assert_eq!(*a.task.inputs[0].files[0], grown, "not the stale record the reader charged");
    }

    #[test]
    fn a_table_seeks_charged_for_its_segments_is_collapsed_in_place_under_light_weight_compaction() {
        let p = lwc_policy();
        let charged = Arc::new(file(20, 6, "a", "m"));
        let segmented = FileMeta { segments: 2, ..file(20, 6, "a", "m") };
        let v = version(4, &[(1, file(10, 5, "n", "z")), (2, segmented), (3, file(30, 7, "a", "z"))]);
        let ctx = |c: Option<(usize, Arc<FileMeta>)>, busy: &'static [usize]| PickContext {
            collapse_candidate: c,
            ..context(&v, busy)
        };
        let Some(Choice::Merge(t)) = p.pick(&ctx(Some((2, charged.clone())), &[])) else { panic!("a collapse") };
        assert_eq!((t.reason, t.output_level, t.output_run), (Reason::Collapse, 2, Some(6)));
        assert_eq!(t.inputs.len(), 1, "in place: nothing of level 3 is read");
        assert!(p.pick(&ctx(Some((2, charged.clone())), &[2])).is_none(), "its level is busy");
        assert!(p.pick(&ctx(Some((1, charged.clone())), &[])).is_none(), "not in that level (stale)");
        let classic = LeveledPolicy { lwc: None, ..p.clone() };
        assert!(classic.pick(&ctx(Some((2, charged)), &[])).is_none(), "leveling has no segments to collapse");
        let plain = version(4, &[(2, file(20, 6, "a", "m"))]);
        let c = PickContext { collapse_candidate: Some((2, Arc::new(file(20, 6, "a", "m")))), ..context(&plain, &[]) };
        assert!(p.pick(&c).is_none(), "one segment: nothing to collapse");
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
        let new_l0 = NewRun { level: 0, bytes: 4 << 20, joins: None, consumed: &[], flush_bytes: 0 };
        let uniform = LeveledPolicy::from_options(&o.clone().filter_allocation(FilterAllocation::Uniform));
        assert_eq!(uniform.table_options(&v, &new_l0).bloom_bits_per_key, 5.0);
        let at_l2 = NewRun { level: 2, ..new_l0 };
        assert_eq!(uniform.table_options(&v, &at_l2).bloom_bits_per_key, 7.0);
        let monkey = LeveledPolicy::from_options(&o.filter_allocation(FilterAllocation::Monkey));
        assert!(monkey.table_options(&v, &new_l0).bloom_bits_per_key > 8.0, "a small run in a 1 GiB tree");
    }

    #[test]
    fn a_level_0_backlog_does_not_take_filter_bits_from_the_tables_written_meanwhile() {
        // A 1 GiB level 3 under level 0 holding `n` 64 MiB files (a load's backlog).
        let tree = |n: u64| {
            let mut files: Vec<(u32, FileMeta)> =
                (1..=n).map(|i| (0, FileMeta { size: 64 << 20, ..file(100 + i, 100 + i, "a", "z") })).collect();
            files.push((3, FileMeta { size: 1 << 30, ..file(11, 6, "a", "z") }));
            version(4, &files)
        };
        let o = Options::default().bloom_bits_per_key(vec![5.0]).l0_compaction_trigger(4);
        let p = LeveledPolicy::from_options(&o);
        let at_l3 = NewRun { level: 3, bytes: 2 << 20, joins: None, consumed: &[], flush_bytes: 0 };
        let bits = |n| p.table_options(&tree(n), &at_l3).bloom_bits_per_key;
        assert!((bits(20) - bits(4)).abs() < 1e-9, "counted as the trigger's 4: {} vs {}", bits(20), bits(4));
        assert!(bits(2) > bits(4), "fewer L0 runs than the trigger count as they are");
        let t20 = tree(20);
        let all_counted = |l| SteadyLevel { max_runs: usize::MAX, ..p.steady_level(t20.deepest_level(), l) };
        let raw = p.filters.table_options(&t20, &at_l3, all_counted).bloom_bits_per_key;
        assert!(raw < bits(4) - 0.2, "twenty counted would take {raw} bits against {}", bits(4));
    }
}
