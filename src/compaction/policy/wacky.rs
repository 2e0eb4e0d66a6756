//! The Wacky continuum's merge policy (Dayan & Idreos, SIGMOD'19): one implementation for
//! tiering, lazy leveling, capped lazy leveling (SCLL), LSM-bush and everything between, set by
//! the knobs T, K, Z, C and X (`continuum::Knobs`).
//!
//! Level 0 is the paper's level 1 (flushes land there, each a run of its own); the deepest
//! non-empty level is the largest level L. Capacities are set top-down from the largest level's
//! size (App. E, `continuum::Shape::top_down`): the other levels together hold a C-th of it, and
//! when the total passes what L levels hold, the level count grows and the old largest level
//! (now over its smaller capacity) moves or merges down. Each level i keeps up to a_i runs
//! (Eq 13): a run arriving in a level joins (is merged with) the level's newest, "active" run
//! while that run is below its share of the level (Dostoevsky's merge threshold, N_i / a_i),
//! else it becomes a run of its own; a full level is merged, all runs at once, into the level
//! below; the largest level merges all its runs into one when it holds more than a_L.
//!
//! Correctness with several runs per level: reads visit a level's runs by descending id; a run
//! that joins an active run, or a level merged in place, keeps the newest input run's id (any
//! run newer than the inputs keeps a larger id — a flush racing an L0 merge included), and a
//! new run below takes a fresh, larger id; merges take whole runs (a manual range: every file
//! overlapping it, closed under overlap), so no older version is left above a newer one; and a
//! compaction keeps a tombstone while any older run that is not an input may hold the key
//! (`compaction/job.rs`).

use std::sync::Arc;

use super::monkey::{FilterPlan, SteadyLevel};
use crate::compaction::{
    pick_drop, Choice, CompactionInput, CompactionPolicy, CompactionTask, L0Limits, L0Triggers, NewRun, PickContext,
    Reason, WritePressure,
};
use crate::continuum::{Knobs, Shape};
use crate::options::Options;
use crate::sst::TableOptions;
use crate::version::{FileMeta, SortedRun, Version};

/// A Wacky policy for one setting of the knobs.
#[derive(Debug, Clone)]
pub struct WackyPolicy {
    knobs: Knobs,
    num_levels: usize,
    /// F: the write buffer, the size of a flushed run.
    buffer_bytes: f64,
    filters: FilterPlan,
    /// The options' L0 triggers, raised above where the shape merges level 0.
    l0_triggers: L0Triggers,
}

fn run_bytes(r: &SortedRun) -> u64 {
    r.files.iter().map(|f| f.size).sum()
}

/// Merge `inputs` (upper level first) into `output_level`, joining run `output_run` there.
fn merge(inputs: Vec<CompactionInput>, output_level: usize, output_run: Option<u64>, reason: Reason) -> CompactionTask {
    CompactionTask { inputs, output_level, output_run, grandparents: Vec::new(), compact_pointer: None, reason }
}

/// Merge `runs` of `level` into one run of the same level, keeping the newest one's id.
fn merge_in_place(level: usize, runs: &[SortedRun], reason: Reason) -> Choice {
    let files = runs.iter().flat_map(|r| r.files.iter().cloned()).collect();
    let newest = runs.iter().map(|r| r.id).max();
    Choice::Merge(merge(vec![CompactionInput { level, files }], level, newest, reason))
}

impl WackyPolicy {
    pub fn new(o: &Options, knobs: Knobs) -> Self {
        WackyPolicy {
            knobs,
            num_levels: o.num_levels.max(2),
            buffer_bytes: o.write_buffer_bytes.max(1) as f64,
            filters: FilterPlan::from_options(o),
            l0_triggers: L0Triggers::from_options(o),
        }
    }

    /// The shape of `v` (App. E): top-down from the deepest non-empty level below L0, with at
    /// least as many levels as the data already spans.
    pub fn shape(&self, v: &Version) -> Shape {
        let deepest = v.deepest_level();
        let largest_bytes = if deepest >= 1 { v.level_bytes(deepest) as f64 } else { 0.0 };
        Shape::top_down(self.knobs, largest_bytes, self.buffer_bytes, deepest + 1, self.num_levels)
    }

    /// The size at which level `i`'s active run turns static: its share N_i / a_i of the
    /// level, less half a typical arrival (arrivals come in whole runs; without the margin a
    /// tiered level's runs, each one arrival, would all take a second one).
    fn static_threshold(shape: &Shape, i: usize) -> f64 {
        let l = &shape.levels[i];
        if l.max_runs <= 1 {
            return f64::INFINITY;
        }
        let arrivals_per_level = if i == shape.largest() { shape.capping } else { l.arrivals };
        let arrivals_per_run = (arrivals_per_level / l.max_runs as f64).max(1.0);
        l.capacity_bytes / l.max_runs as f64 * (1.0 - 0.5 / arrivals_per_run)
    }

    /// Level `i` of `shape` in the steady state Monkey sets filter bits for, with flushes of
    /// `flush` table bytes. Every level fills and empties in cycles under whole-level spills,
    /// so on average a run shares its level with half the runs still to come: a smaller level
    /// counts its runs (at least N_i / a_i each, and never less than a flush; level 0: flushes)
    /// and half of those it lacks to reach a_i (level 0: the flushes it takes before it
    /// merges); the largest level its runs as they are, plus half the arrivals (each N_{L−1},
    /// at least a flush) that would fill it to a_L runs. Counting a bulk run written into an
    /// empty largest level alone spent 5.3–5.8 bits per key at a 5-bit budget, counting all
    /// a_L − 1 arrivals 4.4; counting the smaller levels always full kept bits for runs that
    /// were mostly not there (a 10M-key tiered tree spent 3.6–4.8). In a small tree the
    /// shape's upper capacities fall below one flush, which is what really arrives: counted
    /// at the capacity, the phantom arrivals took the bits (a 200k-key tiered tree spent 3.8).
    fn steady_level(&self, shape: &Shape, i: usize, flush: f64) -> SteadyLevel {
        let Some(l) = shape.levels.get(i) else {
            return SteadyLevel::AS_IS;
        };
        if i == shape.largest() {
            let arrival = if i == 0 { flush } else { shape.levels[i - 1].capacity_bytes.max(flush) };
            let fill_runs = l.max_runs;
            return SteadyLevel {
                fill_runs,
                missing_run_bytes: arrival as u64,
                missing_share: 0.5,
                ..SteadyLevel::AS_IS
            };
        }
        let half_full = |runs: usize, run_bytes: f64| SteadyLevel {
            missing_share: 0.5,
            ..SteadyLevel::full(runs, run_bytes as u64)
        };
        if i == 0 {
            let fill_runs = (l.capacity_bytes / flush.max(1.0)).ceil().max(1.0) as usize;
            return half_full(l.max_runs.min(fill_runs), flush);
        }
        half_full(l.max_runs, (l.capacity_bytes / l.max_runs as f64).max(flush))
    }

    /// Bytes of a run arriving in level `i`: a flush, or the full level above.
    fn arrival_bytes(&self, shape: &Shape, i: usize) -> f64 {
        if i == 0 {
            self.buffer_bytes
        } else {
            shape.levels[i - 1].capacity_bytes
        }
    }

    /// Level `i` (not the largest) holds its capacity, give or take half an arrival.
    fn is_full(&self, v: &Version, shape: &Shape, i: usize) -> bool {
        let bytes = v.level_bytes(i) as f64;
        bytes > 0.0 && bytes + self.arrival_bytes(shape, i) / 2.0 >= shape.levels[i].capacity_bytes
    }

    /// Level `i` goes down whole: it is full, or it is a tiered level holding more than a_i
    /// runs (arrivals smaller than N_{i−1} fill a_i runs before the level's bytes; merging its
    /// newest runs in place instead would rewrite them for nothing, since the spill rewrites
    /// them anyway). Level 0's arrivals are flushes, whose tables are smaller than the buffer F
    /// the shape counts in (a 4 MiB memtable of 100 B values flushes 2.4 MB): more of them fit
    /// level 0's bytes than a_0 runs, and merging the two newest in place on each flush past
    /// a_0 rewrote them again and again (docs/BENCHMARKS.md §8). Level 0 still merges in place
    /// (`join_active`) while it holds less than half its capacity: flushes far smaller than F
    /// (manual ones) would otherwise spill as tiny runs.
    fn spills(&self, v: &Version, shape: &Shape, i: usize) -> bool {
        let l = &shape.levels[i];
        let over_runs = l.max_runs > 1
            && v.num_runs(i) > l.max_runs
            && (i >= 1 || 2.0 * v.level_bytes(i) as f64 >= l.capacity_bytes);
        self.is_full(v, shape, i) || over_runs
    }

    /// All of full level `i` into the level below: joining its active run if that is below
    /// its threshold and `below_free`, else as a new run (moved, not rewritten, if level `i`
    /// is one run).
    fn spill(v: &Version, shape: &Shape, i: usize, below_free: bool) -> Choice {
        let below = i + 1;
        let active = v.levels[below]
            .runs
            .first()
            .filter(|r| below_free && (run_bytes(r) as f64) < Self::static_threshold(shape, below));
        let mut inputs = vec![CompactionInput { level: i, files: v.levels[i].files().cloned().collect() }];
        let reason = if below == shape.largest() { Reason::LevelSize } else { Reason::RunsFull };
        match active {
            Some(run) => {
                inputs.push(CompactionInput { level: below, files: run.files.to_vec() });
                Choice::Merge(merge(inputs, below, Some(run.id), reason))
            }
            None if v.num_runs(i) == 1 => Choice::Move(merge(inputs, below, None, reason)),
            None => Choice::Merge(merge(inputs, below, None, reason)),
        }
    }

    /// A run that landed on level `i` (a flush) joins the active run below the threshold, or
    /// whenever the level holds more than a_i runs (flushes smaller than F, a reshaped tree):
    /// write back-pressure counts on level 0 never holding more.
    fn join_active(v: &Version, shape: &Shape, i: usize) -> Option<Choice> {
        let runs = &v.levels[i].runs;
        let active = runs.get(1)?;
        let over = runs.len() > shape.levels[i].max_runs;
        (over || (run_bytes(active) as f64) < Self::static_threshold(shape, i))
            .then(|| merge_in_place(i, &runs[..2], Reason::RunsFull))
    }

    /// How many of the largest level's runs (newest first) merge once it holds more than a_L:
    /// the newest ones, extended to each older run no larger than all of them together, as
    /// universal compaction picks at size ratio 1; the oldest run (the level's bulk, from its
    /// last full merge) joins only once the newer runs hold twice its bytes, RocksDB
    /// universal's size-amplification trigger at 200 %. Arrivals are each about a C-th of
    /// the level, so without this every merge would rewrite the bulk again for a few
    /// arrivals' worth of new data. At least enough runs merge to bring the level back to a_L
    /// (`max_runs`).
    fn newest_runs_to_merge(runs: &[SortedRun], max_runs: usize) -> usize {
        let least = (runs.len() + 1).saturating_sub(max_runs).max(2);
        let mut taken = run_bytes(&runs[0]);
        let mut n = 1;
        while n < runs.len() {
            let bound = if n + 1 == runs.len() { taken / 2 } else { taken };
            if n >= least && run_bytes(&runs[n]) > bound {
                break;
            }
            taken += run_bytes(&runs[n]);
            n += 1;
        }
        n
    }

    /// Every file of `level` overlapping the range (grown until nothing else overlaps) into
    /// one run of `output_level`: a new run below, or the newest input run's id in place.
    fn merge_range(
        v: &Version,
        level: usize,
        (begin, end): (Option<&[u8]>, Option<&[u8]>),
        output_level: usize,
    ) -> Option<CompactionTask> {
        let files: Vec<Arc<FileMeta>> = v.overlapping_files(level, begin, end);
        let run = if output_level == level { files.iter().map(|f| f.run).max() } else { None };
        (!files.is_empty()).then(|| merge(vec![CompactionInput { level, files }], output_level, run, Reason::Manual))
    }
}

impl CompactionPolicy for WackyPolicy {
    fn name(&self) -> String {
        self.knobs.to_string()
    }

    fn pick(&self, ctx: &PickContext<'_>) -> Option<Choice> {
        if let Some(drop) = pick_drop(ctx) {
            return Some(drop);
        }
        let v = ctx.version;
        let shape = self.shape(v);
        let largest = shape.largest();
        if v.num_runs(largest) > shape.levels[largest].max_runs && ctx.free(&[largest]) {
            let runs = &v.levels[largest].runs;
            return Some(merge_in_place(
                largest,
                &runs[..Self::newest_runs_to_merge(runs, shape.levels[largest].max_runs)],
                Reason::RunsFull,
            ));
        }
        // The data outgrew its levels (Eq 10 wants one more): the old largest level becomes
        // the new largest level as it is, runs and all, instead of being merged as if full.
        let deepest = v.deepest_level();
        if (1..largest).contains(&deepest) && ctx.free(&[deepest, largest]) {
            let files = v.levels[deepest].files().cloned().collect();
            return Some(Choice::Move(merge(
                vec![CompactionInput { level: deepest, files }],
                largest,
                None,
                Reason::Grow,
            )));
        }
        // Deepest first: a full level empties into the level below before that one fills up
        // further from above.
        for i in (0..largest).rev().filter(|&i| v.num_runs(i) > 0 && ctx.free(&[i])) {
            // A tiered level below that is busy (merging its runs, or spilling further down)
            // still takes a new run: it touches none of the running job's inputs and, with a
            // fresh id, is newer than all of them. Waiting instead would have level i merge
            // its own runs in place meanwhile, rewriting them once more for nothing. Up to
            // 4 a_i runs (RocksDB stops writers at 36 L0 files): a merge of a large level takes
            // seconds, and the runs piling up above it meanwhile are runs reads must probe.
            let below_free = ctx.free(&[i + 1]);
            let takes_runs = v.num_runs(i + 1) < 4 * shape.levels[i + 1].max_runs;
            if self.spills(v, &shape, i) && (below_free || (shape.levels[i + 1].max_runs > 1 && takes_runs)) {
                return Some(Self::spill(v, &shape, i, below_free));
            }
            // Not full, or full over a busy leveled level: merging its newest runs in place
            // still keeps its run count (level 0's write pressure) down meanwhile.
            if let Some(join) = Self::join_active(v, &shape, i) {
                return Some(join);
            }
        }
        None
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
        (v.num_runs(level) >= 2).then(|| Self::merge_range(v, level, (begin, end), level))?
    }

    fn place_flush(&self, _v: &Version, _lo: &[u8], _hi: &[u8]) -> (usize, Option<u64>) {
        (0, None)
    }

    /// Level 0 merges once it holds more than a_1 runs (`join_active`) or its capacity N_0
    /// (about N_0 / F flushes, far fewer than a_1 for LSM-bush's huge ratios); writers slow at
    /// twice the smaller count and stop at half as many again (`L0Limits::above`).
    fn write_pressure(&self, v: &Version) -> WritePressure {
        let runs = v.num_runs(0);
        if runs < self.l0_triggers.slowdown {
            return WritePressure::None;
        }
        let l0 = &self.shape(v).levels[0];
        let fill_runs = (l0.capacity_bytes / self.buffer_bytes.max(1.0)).ceil().max(1.0) as usize;
        L0Limits::above(self.l0_triggers, l0.max_runs.min(fill_runs) + 1).pressure(runs)
    }

    /// Monkey's bits for the steady tree (`steady_level`), with flushes as large as the
    /// tables a full write buffer makes (`NewRun::flush_bytes`, else F).
    fn table_options(&self, v: &Version, run: &NewRun<'_>) -> TableOptions {
        let shape = self.shape(v);
        let flush = if run.flush_bytes > 0 { run.flush_bytes as f64 } else { self.buffer_bytes };
        self.filters.table_options(v, run, |level| self.steady_level(&shape, level, flush))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::testutil::{context, file, version};

    /// A policy whose write buffer is one test table (1000 bytes).
    fn policy(knobs: Knobs) -> WackyPolicy {
        WackyPolicy::new(&Options::default().write_buffer_bytes(1000).num_levels(5), knobs)
    }

    fn pick(p: &WackyPolicy, v: &Version, busy: &[usize]) -> Option<Choice> {
        p.pick(&context(v, busy))
    }

    fn task(c: Option<Choice>) -> (&'static str, CompactionTask) {
        match c {
            Some(Choice::Move(t)) => ("move", t),
            Some(Choice::Merge(t)) => ("merge", t),
            other => panic!("expected a move or a merge, got {other:?}"),
        }
    }

    /// Kind, output level, output run and input file numbers of a choice.
    fn summary(c: Option<Choice>) -> (&'static str, usize, Option<u64>, Vec<u64>) {
        let (kind, t) = task(c);
        (kind, t.output_level, t.output_run, inputs(&t))
    }

    fn inputs(t: &CompactionTask) -> Vec<u64> {
        let mut n: Vec<u64> = t.input_files().map(|(_, f)| f.number).collect();
        n.sort_unstable();
        n
    }

    /// A table of `kb` KB.
    fn sized(number: u64, run: u64, kb: u64) -> FileMeta {
        FileMeta { size: kb * 1000, ..file(number, run, "a", "z") }
    }

    #[test]
    fn the_first_flush_moves_down_to_become_the_largest_level() {
        let p = policy(Knobs::tiering(4.0));
        let (kind, t) = task(pick(&p, &version(5, &[(0, file(1, 1, "a", "z"))]), &[]));
        assert_eq!((kind, t.output_level, t.output_run), ("move", 1, None));
    }

    #[test]
    fn under_leveled_smaller_levels_a_flush_joins_the_level_0_run_keeping_the_newest_id() {
        // Largest level 1000 KB: level 0's capacity is far above two 1 KB flushes.
        let p = policy(Knobs::leveling(10.0));
        let v = version(5, &[(0, file(1, 1, "a", "m")), (0, file(2, 2, "b", "z")), (2, sized(3, 3, 1000))]);
        assert_eq!(summary(pick(&p, &v, &[])), ("merge", 0, Some(2), vec![1, 2]));
    }

    #[test]
    fn under_tiered_levels_flushes_stay_runs_of_their_own_until_the_level_is_full() {
        let p = policy(Knobs::tiering(4.0));
        // N_L = 60 KB: N = 80 KB, L = 3, and level 0 holds N/(C+1) · (T−1)/T² = 3.75 KB.
        let mut files = vec![(2, sized(9, 9, 60))];
        files.extend((1..=3).map(|n| (0, file(n, n, "a", "z"))));
        assert!(pick(&p, &version(5, &files), &[]).is_none(), "three flushes fit");
        files.push((0, file(4, 4, "a", "z")));
        assert_eq!(summary(pick(&p, &version(5, &files), &[])), ("merge", 1, None, vec![1, 2, 3, 4]));
    }

    #[test]
    fn a_level_0_past_a_0_runs_of_flushes_smaller_than_the_buffer_spills_instead_of_merging_in_place() {
        // Tiering at T = 10 around a 90 KB largest level: N = 100 KB, L = 2, level 0 holds
        // N/(C+1) · (T−1)/T = 9 KB in up to a_0 = 9 runs. Ten 600-byte flushes (6 KB) are
        // over a_0 but under the capacity: level 0 goes down whole, as one new run.
        let p = policy(Knobs::tiering(10.0));
        let level_0 = |bytes: u64| (1..=10).map(move |n| (0, FileMeta { size: bytes, ..file(n, n, "a", "z") }));
        let mut files = vec![(1, sized(20, 20, 90))];
        files.extend(level_0(600));
        assert_eq!(summary(pick(&p, &version(5, &files), &[])), ("merge", 1, None, (1..=10).collect()));
        // Ten tiny flushes (1 KB, under half the capacity; manual flushes) merge in place.
        let mut files = vec![(1, sized(20, 20, 90))];
        files.extend(level_0(100));
        assert_eq!(summary(pick(&p, &version(5, &files), &[])), ("merge", 0, Some(10), vec![9, 10]));
    }

    #[test]
    fn a_largest_level_with_more_runs_than_a_l_merges_them_in_place() {
        // Tiering at T = 3: the largest level keeps C^Z = 2 runs.
        let p = policy(Knobs::tiering(3.0));
        let v = version(5, &[(1, sized(1, 1, 2)), (1, sized(2, 2, 2)), (1, sized(3, 3, 2))]);
        assert_eq!(summary(pick(&p, &v, &[])), ("merge", 1, Some(3), vec![1, 2, 3]));
        assert!(pick(&p, &v, &[1]).is_none(), "not while level 1 is busy");
    }

    #[test]
    fn a_largest_level_merges_its_new_runs_and_leaves_its_larger_old_bulk_alone() {
        // Tiering at T = 4 (L = 4 at these sizes, level 3 the largest): a_L = C^Z = 3. One old
        // 90 KB run, then four 10 KB arrivals: the arrivals merge, the bulk stays.
        let p = policy(Knobs::tiering(4.0));
        let mut files = vec![(3, sized(1, 1, 90))];
        files.extend((2..=5).map(|n| (3, sized(n, n, 10))));
        assert_eq!(summary(pick(&p, &version(5, &files), &[])), ("merge", 3, Some(5), vec![2, 3, 4, 5]));
        // A merged 45 KB run and five 10 KB arrivals: the 45 KB run is no larger than the
        // arrivals together (50 KB) and joins, but the bulk waits for twice its 90 KB.
        let mut files = vec![(3, sized(1, 1, 90)), (3, sized(6, 6, 45))];
        files.extend((7..=11).map(|n| (3, sized(n, n, 10))));
        let (_, _, run, inputs) = summary(pick(&p, &version(5, &files), &[]));
        assert_eq!((run, inputs), (Some(11), vec![6, 7, 8, 9, 10, 11]));
        // Once the newer runs hold twice its bytes (61 KB against 30), the bulk joins too.
        let files = vec![(3, sized(1, 1, 30)), (3, sized(6, 6, 20)), (3, sized(7, 7, 20)), (3, sized(8, 8, 21))];
        let (_, _, run, inputs) = summary(pick(&p, &version(5, &files), &[]));
        assert_eq!((run, inputs), (Some(8), vec![1, 6, 7, 8]));
        // Too many runs for one merge of the new ones alone to bring it back to a_L: the
        // oldest needed join whatever their size.
        let files: Vec<(u32, FileMeta)> =
            [(1, 40), (2, 20), (3, 10), (4, 1), (5, 1)].into_iter().map(|(n, kb)| (3, sized(n, n, kb))).collect();
        assert_eq!(summary(pick(&p, &version(5, &files), &[])).3, vec![3, 4, 5], "5 runs, a_L = 3: 3 must merge");
    }

    /// Monkey's bits for a new `kb` KB run at `level` of `v`.
    fn monkey_bits(p: &WackyPolicy, v: &Version, level: usize, kb: u64) -> f64 {
        let run = NewRun { level, bytes: kb * 1000, joins: None, consumed: &[], flush_bytes: 0 };
        p.table_options(v, &run).bloom_bits_per_key
    }

    #[test]
    fn monkey_counts_every_run_of_an_overfull_largest_level_and_arrivals_to_come_in_an_empty_one() {
        let p = policy(Knobs::tiering(4.0));
        // The largest level (3) far over its a_L = 3 runs, as after a long merge: all twelve
        // count, so a new flush gets more bits than beside three of them.
        let runs = |n: u64| (1..=n).map(|i| (3, sized(i, i, 5))).collect::<Vec<_>>();
        let (over, three) = (version(5, &runs(12)), version(5, &runs(3)));
        assert!(monkey_bits(&p, &over, 0, 1) > monkey_bits(&p, &three, 0, 1) + 0.1);
        // The largest level's three runs merged into one bulk run: it is counted beside
        // half the arrivals still to come, so it gets fewer bits than it would alone.
        let merge = NewRun { level: 3, bytes: 15_000, joins: Some(3), consumed: &[1, 2, 3], flush_bytes: 0 };
        let with_arrivals = p.table_options(&three, &merge).bloom_bits_per_key;
        let alone = p.filters.table_options(&three, &merge, |_| SteadyLevel::AS_IS).bloom_bits_per_key;
        assert!(with_arrivals < alone - 0.1, "{with_arrivals} vs {alone}");
    }

    #[test]
    fn in_a_tree_smaller_than_its_upper_capacities_monkey_counts_arrivals_as_whole_flushes() {
        // Three flushes of 600 B tables (a 1000 B buffer of memory) moved to the largest
        // level; the shape's level 0 holds a tenth of that. What arrives next are flushes of
        // 600 B, so the new flush is one of equal runs and gets the average bits: counted at
        // level 0's capacity, the phantom arrivals looked small and took bits from it.
        let p = policy(Knobs::tiering(4.0));
        let flushed = |n: u64| (1, FileMeta { size: 600, ..file(n, n, "a", "z") });
        let v = version(5, &[flushed(1), flushed(2), flushed(3)]);
        assert!(p.shape(&v).levels[0].capacity_bytes < 600.0, "level 0 is smaller than a flush");
        let avg = Options::default().bloom_bits_per_key[0];
        let flush = NewRun { level: 0, bytes: 600, joins: None, consumed: &[], flush_bytes: 600 };
        let bits = p.table_options(&v, &flush).bloom_bits_per_key;
        assert!((bits - avg).abs() < 0.05, "{bits} bits against the average {avg}");
        // Unknown flush bytes fall back to the buffer size: the flush counts as a 1000 B run
        // beside the 600 B ones and gets fewer bits than the average.
        let unknown = NewRun { flush_bytes: 0, ..flush };
        let fewer = p.table_options(&v, &unknown).bloom_bits_per_key;
        assert!(fewer < avg - 0.1, "{fewer} bits against the average {avg}");
    }

    #[test]
    fn monkey_counts_half_the_runs_an_emptied_smaller_level_lacks() {
        // Tiering at T = 4 around a 60 KB largest level: levels 0–2 are empty, as right after
        // they spilled. They fill and empty in cycles, so half their runs are counted: a new
        // largest-level run gets more bits than if they were counted full, and fewer than if
        // they were not counted at all.
        let p = policy(Knobs::tiering(4.0));
        let v = version(5, &[(3, sized(1, 1, 60))]);
        let shape = p.shape(&v);
        let run = NewRun { level: 3, bytes: 20_000, joins: None, consumed: &[], flush_bytes: 0 };
        let bits_with =
            |steady: &dyn Fn(usize) -> SteadyLevel| p.filters.table_options(&v, &run, steady).bloom_bits_per_key;
        // The policy's steady tree with its smaller levels counted as `smaller` makes them.
        let smaller_as = |smaller: fn(SteadyLevel) -> SteadyLevel| {
            bits_with(&|i| {
                let s = p.steady_level(&shape, i, p.buffer_bytes);
                if i < shape.largest() {
                    smaller(s)
                } else {
                    s
                }
            })
        };
        let half = smaller_as(|s| s);
        let full = smaller_as(|s| SteadyLevel { missing_share: 1.0, ..s });
        let none = smaller_as(|_| SteadyLevel::AS_IS);
        assert!(full + 0.05 < half && half + 0.05 < none, "full {full}, half {half}, none {none}");
    }

    #[test]
    fn when_the_data_outgrows_its_levels_the_largest_level_moves_down_whole() {
        // Leveling T = 10 with a 1000 KB largest level at level 1 needs L = 3 (N/F ≈ 1111):
        // level 1 is now a smaller level far over its 100 KB capacity.
        let p = policy(Knobs::leveling(10.0));
        let v = version(5, &[(1, sized(1, 1, 1000))]);
        assert_eq!(p.shape(&v).levels.len(), 3);
        let (kind, t) = task(pick(&p, &v, &[]));
        assert_eq!((kind, t.output_level, t.reason), ("move", 2, Reason::Grow));
        // Under tiering the runs move down as they are, unmerged, straight to the new largest
        // level (N = 1333 KB: L = 4).
        let p = policy(Knobs::tiering(10.0));
        let v = version(5, &[(1, sized(1, 1, 600)), (1, sized(2, 2, 600))]);
        assert_eq!(summary(pick(&p, &v, &[])), ("move", 3, None, vec![1, 2]));
    }

    #[test]
    fn a_full_level_joins_the_active_run_below_while_it_is_small() {
        // Lazy leveling: the largest level (level 2) is leveled, so level 1's spill joins it.
        let p = policy(Knobs::lazy_leveling(4.0));
        // N_L = 60 KB: level 1 holds N/(C+1) · (T−1)/T = 15 KB.
        let v = version(5, &[(1, sized(1, 1, 7)), (1, sized(2, 2, 7)), (2, sized(3, 3, 60))]);
        assert_eq!(summary(pick(&p, &v, &[])), ("merge", 2, Some(3), vec![1, 2, 3]));
        assert!(pick(&p, &v, &[2]).is_none(), "the level below is busy");
    }

    #[test]
    fn l0_write_pressure_sets_in_above_where_the_shape_merges_level_0() {
        let p = policy(Knobs::bush(2.0, 1.0));
        let few = version(5, &[(0, file(1, 1, "a", "b")), (2, sized(9, 9, 400))]);
        assert_eq!(p.write_pressure(&few), WritePressure::None);
        let files: Vec<(u32, FileMeta)> = (1..=60).map(|n| (0, file(n, n, "a", "b"))).collect();
        let crowded = version(5, &files);
        assert_eq!(p.write_pressure(&crowded), WritePressure::Stop);
        // ...and while writers stop, the policy always has level 0 work to do.
        let (_, t) = task(pick(&p, &crowded, &[]));
        assert_eq!(t.inputs[0].level, 0);
    }

    /// Level 0 runs 1..=n of one-table flushes over a largest level of `largest_kb`.
    fn l0_over(n: u64, largest_kb: u64) -> Version {
        let mut files: Vec<(u32, FileMeta)> = (1..=n).map(|i| (0, file(i, i, "a", "b"))).collect();
        files.push((4, sized(900, 900, largest_kb)));
        version(5, &files)
    }

    #[test]
    fn l0_write_pressure_sets_in_at_twice_the_runs_level_0_merges_at() {
        // LSM-bush over a large largest level: r_1 = T^(X^(L−2)) puts a_1 in the hundreds.
        // Level 0 merges past a_1 runs or N_0 / F flushes, whichever comes first.
        let p = policy(Knobs::bush(2.0, 1.0));
        let l0 = p.shape(&l0_over(1, 100_000)).levels[0];
        let m = l0.max_runs.min((l0.capacity_bytes / 1000.0).ceil() as usize) as u64 + 1;
        assert!(m > 100, "{l0:?}");
        assert_eq!(p.write_pressure(&l0_over(2 * m - 1, 100_000)), WritePressure::None);
        assert_eq!(p.write_pressure(&l0_over(2 * m, 100_000)), WritePressure::Slowdown);
        assert_eq!(p.write_pressure(&l0_over(2 * m + m / 2, 100_000)), WritePressure::Stop);
    }

    /// Level 0 far over its a_1 runs (and full) over a small level 1 run and a largest level.
    fn full_l0_over_three_levels() -> Version {
        let mut files: Vec<(u32, FileMeta)> = (1..=12).map(|n| (0, file(n, n, "a", "z"))).collect();
        files.push((1, sized(50, 50, 1)));
        files.push((2, sized(60, 60, 60)));
        version(5, &files)
    }

    #[test]
    fn a_full_level_0_over_a_busy_leveled_level_1_merges_its_newest_runs_meanwhile() {
        // Leveling: a_i = 1 everywhere, so a spill would have to join level 1's one run, which
        // the running job holds.
        let p = policy(Knobs::leveling(4.0));
        let v = full_l0_over_three_levels();
        assert_eq!(summary(pick(&p, &v, &[1])), ("merge", 0, Some(12), vec![11, 12]));
    }

    #[test]
    fn a_full_level_0_spills_into_a_busy_tiered_level_1_as_a_new_run() {
        // Tiering: level 1 keeps several runs, so the spill need not wait for (or join) the
        // run the busy job holds; it becomes a run of its own instead of level 0 rewriting its
        // newest runs in place meanwhile.
        let p = policy(Knobs::tiering(4.0));
        let v = full_l0_over_three_levels();
        let free = summary(pick(&p, &v, &[]));
        assert_eq!((free.0, free.1, free.2), ("merge", 1, Some(50)), "joins the small active run when free");
        assert_eq!(summary(pick(&p, &v, &[1])), ("merge", 1, None, (1..=12).collect()));
    }
}
