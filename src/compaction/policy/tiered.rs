//! Tiering (the Wacky paper's K = Z = T − 1 end of the continuum, RocksDB's universal style in
//! spirit): a level collects up to `runs_per_level` sorted runs; when it has that many, all of
//! them are merged into one new run of the level below. The last level merges its own runs
//! once it has that many. Each entry is rewritten about once per level instead of about
//! `runs_per_level` times per level under leveling, at the price of more runs for a lookup to
//! probe (Monkey's filter allocation keeps that cheap for absent keys).
//!
//! Correctness with several runs per level rests on three things elsewhere: reads visit runs
//! newest first (`Version` orders them by run id, and a merge's output run takes a new, larger
//! id), a compaction keeps a tombstone while any older run that is not an input may hold the
//! key (`compaction/job.rs`), and every merge takes *all* runs of a level (or, for a manual
//! range, every file overlapping the range in every run), so no older version of a key is
//! left above a newer one.

use std::sync::Arc;

use super::monkey::FilterPlan;
use crate::compaction::{
    pick_drop, Choice, CompactionInput, CompactionPolicy, CompactionTask, L0Limits, NewRun, PickContext, Reason,
    WritePressure,
};
use crate::options::Options;
use crate::sst::TableOptions;
use crate::version::{FileMeta, Version};

/// Tiering with `runs_per_level` runs per level before a merge.
#[derive(Debug, Clone)]
pub struct TieredPolicy {
    pub runs_per_level: usize,
    pub num_levels: usize,
    /// Level 0 merges at `runs_per_level` files; the options' slowdown and stop triggers keep
    /// their distance above that (a `runs_per_level` of 10 under LevelDB's slowdown at 8 files
    /// delayed every write by 1 ms: 140 µs/op).
    pub l0_limits: L0Limits,
    pub filters: FilterPlan,
    /// Byte budget of level 1 and the ratio between levels, for Monkey's steady-state sizes.
    level1_bytes: u64,
    size_ratio: u64,
}

impl TieredPolicy {
    pub fn from_options(o: &Options, runs_per_level: usize) -> Self {
        let runs_per_level = runs_per_level.max(2);
        TieredPolicy {
            runs_per_level,
            num_levels: o.num_levels.max(2),
            l0_limits: L0Limits::above(o, runs_per_level),
            filters: FilterPlan::from_options(o),
            level1_bytes: o.max_bytes_for_level_base.max(1),
            size_ratio: o.level_size_ratio.max(2),
        }
    }

    /// Merge `files` (from `level`) into one new run at `output_level`.
    fn merge(level: usize, files: Vec<Arc<FileMeta>>, output_level: usize, reason: Reason) -> CompactionTask {
        CompactionTask {
            inputs: vec![CompactionInput { level, files }],
            output_level,
            output_run: None,
            grandparents: Vec::new(),
            compact_pointer: None,
            reason,
        }
    }

    /// A manual merge of every file of every run of `level` overlapping the range (grown until
    /// nothing else overlaps) into a new run of `output_level`.
    fn merge_range(
        v: &Version,
        level: usize,
        (begin, end): (Option<&[u8]>, Option<&[u8]>),
        output_level: usize,
    ) -> Option<CompactionTask> {
        let files = v.overlapping_files(level, begin, end);
        (!files.is_empty()).then(|| Self::merge(level, files, output_level, Reason::Manual))
    }

    fn last_level(&self) -> usize {
        self.num_levels - 1
    }
}

impl CompactionPolicy for TieredPolicy {
    fn name(&self) -> String {
        format!("tiered(T={})", self.runs_per_level)
    }

    fn pick(&self, ctx: &PickContext<'_>) -> Option<Choice> {
        if let Some(drop) = pick_drop(ctx) {
            return Some(drop);
        }
        let v = ctx.version;
        let output = |level: usize| (level + 1).min(self.last_level());
        let level = (0..v.num_levels())
            .find(|&l| v.levels[l].runs.len() >= self.runs_per_level && ctx.free(&[l, output(l)]))?;
        let files = v.levels[level].files().cloned().collect();
        Some(Choice::Merge(Self::merge(level, files, output(level), Reason::RunsFull)))
    }

    fn pick_range(
        &self,
        v: &Version,
        level: usize,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Option<CompactionTask> {
        (level + 1 < self.num_levels).then(|| Self::merge_range(v, level, (begin, end), level + 1))?
    }

    fn pick_merge_runs(
        &self,
        v: &Version,
        level: usize,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Option<CompactionTask> {
        (v.levels.get(level)?.runs.len() >= 2).then(|| Self::merge_range(v, level, (begin, end), level))?
    }

    fn write_pressure(&self, v: &Version) -> WritePressure {
        self.l0_limits.pressure(v.num_runs(0))
    }

    /// A level's runs count at least the leveled byte budget of the level (what the previous
    /// release measured Monkey with on tiered trees).
    fn table_options(&self, v: &Version, run: &NewRun<'_>) -> TableOptions {
        self.filters.table_options(v, run, |level| {
            super::leveled::level_capacity_bytes(self.level1_bytes, self.size_ratio, level) as u64
        })
    }

    fn place_flush(&self, _v: &Version, _lo: &[u8], _hi: &[u8]) -> (usize, Option<u64>) {
        (0, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::testutil::file;

    fn version(files: &[(u32, FileMeta)]) -> Version {
        crate::compaction::testutil::version(4, files)
    }

    fn policy(runs_per_level: usize, num_levels: usize) -> TieredPolicy {
        TieredPolicy::from_options(&Options::default().num_levels(num_levels), runs_per_level)
    }

    #[test]
    fn l0_write_limits_stay_above_the_merge_point() {
        let o = Options::default();
        let l = TieredPolicy::from_options(&o, 10).l0_limits;
        assert!(l.slowdown_files > 10 && l.stop_files > l.slowdown_files, "{l:?}");
        let small = TieredPolicy::from_options(&o, 2).l0_limits;
        assert_eq!((small.slowdown_files, small.stop_files), (o.l0_slowdown_trigger, o.l0_stop_trigger));
    }

    fn pick(p: &TieredPolicy, v: &Version) -> Option<CompactionTask> {
        match p.pick(&PickContext { version: v, compact_pointers: &[], seek_candidate: None, busy_levels: &[] })? {
            Choice::Merge(t) => Some(t),
            other => panic!("tiering only merges: {other:?}"),
        }
    }

    #[test]
    fn a_level_with_fewer_runs_than_the_bound_is_left_alone() {
        let p = policy(3, 4);
        let v = version(&[(0, file(1, 1, "a", "m")), (0, file(2, 2, "b", "z"))]);
        assert!(pick(&p, &v).is_none());
    }

    #[test]
    fn a_full_level_merges_all_its_runs_into_a_new_run_below() {
        let p = policy(3, 4);
        let v = version(&[
            (0, file(1, 1, "a", "m")),
            (0, file(2, 2, "b", "z")),
            (0, file(3, 3, "c", "d")),
            (1, file(4, 4, "a", "z")),
        ]);
        let t = pick(&p, &v).expect("level 0 is full");
        assert_eq!(t.output_level, 1);
        assert_eq!(t.output_run, None, "a new run, never joining the older run below");
        let mut inputs: Vec<u64> = t.input_files().map(|(_, f)| f.number).collect();
        inputs.sort_unstable();
        assert_eq!(inputs, vec![1, 2, 3], "every run of the level, nothing of the level below");
        assert_eq!(t.reason, Reason::RunsFull);
    }

    #[test]
    fn the_last_level_merges_its_runs_in_place() {
        let p = policy(2, 3);
        let v = version(&[(2, file(1, 1, "a", "m")), (2, file(2, 2, "b", "z"))]);
        let t = pick(&p, &v).expect("the last level is full");
        assert_eq!((t.inputs[0].level, t.output_level), (2, 2));
    }

    #[test]
    fn flushes_always_start_a_run_of_their_own_in_level_0() {
        let p = policy(4, 4);
        let v = version(&[(1, file(1, 1, "a", "b"))]);
        assert_eq!(p.place_flush(&v, b"x", b"y"), (0, None));
    }
}
