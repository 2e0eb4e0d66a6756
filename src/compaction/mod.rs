//! Compaction: what to do to the tree next (a `CompactionPolicy` returns a `Choice`) and the
//! job that merges runs. Policies: LevelDB's leveling and the Wacky continuum (tiering, lazy
//! leveling, capped lazy leveling, LSM-bush); light-weight compaction (`lwc`) is the `Append`
//! choice a policy may make instead of a `Merge`.

pub mod job;
pub mod lwc;
pub mod policy;
#[cfg(test)]
pub mod testutil;

use std::sync::Arc;

use crate::key;
use crate::sst::TableOptions;
use crate::version::{FileMeta, Version};

/// The files one compaction reads from one level.
#[derive(Debug, Clone)]
pub struct CompactionInput {
    pub level: usize,
    pub files: Vec<Arc<FileMeta>>,
}

/// What a policy wants done to the tree (in the style of fjall's lsm-tree `Choice`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Choice {
    /// Re-parent the input tables to the output level (and run) without rewriting them.
    Move(CompactionTask),
    /// Merge the inputs into new tables at the output level.
    Merge(CompactionTask),
    /// Delete tables no reader can see anything in, without reading them.
    Drop(DropTask),
    /// Light-weight compaction: merge the inputs and append each piece to the output-level
    /// table whose range holds it, as a new segment (`lwc`).
    Append(lwc::AppendTask),
}

impl Choice {
    /// Why the policy chose it.
    pub fn reason(&self) -> Reason {
        match self {
            Choice::Move(t) | Choice::Merge(t) => t.reason,
            Choice::Append(a) => a.task.reason,
            Choice::Drop(d) => d.reason,
        }
    }

    /// Every level it reads or writes: two choices touching disjoint levels may run at once.
    pub fn levels(&self) -> Vec<usize> {
        match self {
            Choice::Move(t) | Choice::Merge(t) | Choice::Append(lwc::AppendTask { task: t, .. }) => {
                let mut l: Vec<usize> = t.inputs.iter().map(|i| i.level).chain([t.output_level]).collect();
                l.sort_unstable();
                l.dedup();
                l
            }
            Choice::Drop(d) => vec![d.level],
        }
    }
}

/// Tables to delete outright.
#[derive(Debug, Clone)]
pub struct DropTask {
    pub level: usize,
    pub files: Vec<Arc<FileMeta>>,
    pub reason: Reason,
}

/// Inputs and output of a `Move` or a `Merge`.
#[derive(Debug, Clone)]
pub struct CompactionTask {
    /// Inputs, upper (newer) level first.
    pub inputs: Vec<CompactionInput>,
    pub output_level: usize,
    /// Sorted run the outputs join (`None`: a new run, with an id newer than every run of the
    /// output level; a `Move` keeps each input run a run of its own).
    pub output_run: Option<u64>,
    /// Files of the level below the output, used to cut outputs so later compactions stay small.
    pub grandparents: Vec<Arc<FileMeta>>,
    /// The largest key of the inputs at the upper level (the next round-robin start point).
    pub compact_pointer: Option<(usize, Vec<u8>)>,
    pub reason: Reason,
}

/// Why a policy chose a compaction (logged, and acted on: a seek compaction clears the
/// candidate it served).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// Level 0 reached its file-count trigger.
    L0Files,
    /// A level passed its byte budget.
    LevelSize,
    /// Point lookups passed over one table too often (LevelDB's seek compaction).
    Seeks,
    /// `Db::compact_range`.
    Manual,
    /// A level holds as many runs as the policy allows (tiering).
    RunsFull,
    /// The data outgrew its levels: the old largest level moves down to the new one.
    Grow,
    /// A table holds only tombstones and nothing older can hold their keys.
    TombstonesOnly,
    /// A table light-weight compaction appended to holds too many segments or bytes: it is
    /// compacted down, or in the deepest level rewritten into tables of the target size.
    Split,
    /// Iterators seeking into a table of several segments charged it too often: it is
    /// rewritten in place, its segments merged into one (the read-side counterpart of `Split`).
    Collapse,
    /// Built by hand in a test.
    #[cfg(test)]
    Test,
}

impl CompactionTask {
    /// Every input file.
    pub fn input_files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        self.inputs.iter().flat_map(|i| i.files.iter().map(move |f| (i.level, f)))
    }

    /// Total bytes of the inputs.
    pub fn input_bytes(&self) -> u64 {
        self.input_files().map(|(_, f)| f.size).sum()
    }
}

/// State a policy reads to decide.
pub struct PickContext<'a> {
    pub version: &'a Version,
    /// Per level: where the last compaction of that level stopped.
    pub compact_pointers: &'a [Option<Vec<u8>>],
    /// A file that point lookups had to pass over too often (LevelDB's seek compaction):
    /// merging it down saves every later lookup a table probe.
    pub seek_candidate: Option<(usize, Arc<FileMeta>)>,
    /// A table of several segments that iterators sought into too often (light-weight
    /// compaction): merging its segments saves every later seek a block per segment.
    pub collapse_candidate: Option<(usize, Arc<FileMeta>)>,
    /// Levels a running compaction reads or writes: a choice must not touch them.
    pub busy_levels: &'a [usize],
    /// Users only read lately and nobody waits for the work: a policy leaves the compactions
    /// that would not cut the runs a lookup probes (a leveled level over its byte budget) for
    /// later, when writes come back or users go idle, so they do not take the device from the
    /// reads (docs/design.md, "Reads first").
    pub readers_only: bool,
}

impl PickContext<'_> {
    /// No running compaction touches any of `levels`.
    pub fn free(&self, levels: &[usize]) -> bool {
        levels.iter().all(|l| !self.busy_levels.contains(l))
    }
}

/// A run about to be written, as a policy sees it when it chooses the run's table options.
#[derive(Debug, Clone, Copy)]
pub struct NewRun<'a> {
    /// The level it is written to.
    pub level: usize,
    /// Bytes the run adds (table bytes; a flush counts its memtable's `entry_bytes`).
    pub bytes: u64,
    /// The existing run it joins (`None`: a new run).
    pub joins: Option<u64>,
    /// Table files it replaces (a compaction's inputs).
    pub consumed: &'a [u64],
    /// Bytes of the table a full write buffer flushes to (0: unknown, take the buffer size).
    /// A memtable's memory holds skiplist nodes besides its entries: at 100 B values a
    /// 4 MiB buffer flushes a 2.4 MB table, and Monkey compares runs by table bytes.
    pub flush_bytes: u64,
}

/// How hard writers must be held back so compaction keeps up (ordered: `Stop` is the most).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WritePressure {
    None,
    /// Delay each write by 1 ms.
    Slowdown,
    /// Stop writes until compaction catches up.
    Stop,
}

/// Chooses what to do to the tree. Implementations must be cheap: `pick` runs after every flush
/// and compaction under the DB's state lock.
pub trait CompactionPolicy: Send + Sync {
    /// Name and knobs, stored in the manifest so a DB reopened with another policy is noticed.
    fn name(&self) -> String;
    /// The next thing worth doing that touches no busy level, if any.
    fn pick(&self, ctx: &PickContext<'_>) -> Option<Choice>;
    /// The compaction merging every file of `level` overlapping `[begin, end]` into the level
    /// below (for `Db::compact_range`).
    fn pick_range(
        &self,
        version: &Version,
        level: usize,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Option<CompactionTask>;
    /// For `Db::compact_range` at the deepest level it reaches: merge that level's runs
    /// overlapping `[begin, end]` into one (policies that keep several runs per level).
    fn pick_merge_runs(
        &self,
        _version: &Version,
        _level: usize,
        _begin: Option<&[u8]>,
        _end: Option<&[u8]>,
    ) -> Option<CompactionTask> {
        None
    }
    /// Where a flushed table with user keys `[lo, hi]` goes: its level, and the run it joins
    /// there (`None`: a run of its own).
    fn place_flush(&self, version: &Version, lo: &[u8], hi: &[u8]) -> (usize, Option<u64>);
    /// Write back-pressure for the tree `version`: it must set in only well above the point
    /// at which the policy merges level 0.
    fn write_pressure(&self, version: &Version) -> WritePressure;
    /// Options for the tables of `run` (above all its filter bits per key: the policy knows
    /// the steady-state size of each level's runs, which Monkey's allocation needs).
    fn table_options(&self, version: &Version, run: &NewRun<'_>) -> TableOptions;
}

/// The options' level-0 triggers, as a policy keeps them (not the whole `Options`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L0Triggers {
    pub compaction: usize,
    pub slowdown: usize,
    pub stop: usize,
}

impl L0Triggers {
    pub fn from_options(o: &crate::options::Options) -> Self {
        L0Triggers { compaction: o.l0_compaction_trigger, slowdown: o.l0_slowdown_trigger, stop: o.l0_stop_trigger }
    }
}

/// Write back-pressure from level 0 (LevelDB's slowdown and stop triggers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L0Limits {
    pub slowdown_files: usize,
    pub stop_files: usize,
}

impl L0Limits {
    /// The options' triggers, raised to keep their distance above `merge_at` runs. A policy
    /// that merges level 0 later than the options' trigger (many runs under tiering) also lets
    /// level 0 hold twice `merge_at` runs before writers slow and half as many again before
    /// they stop: level 0 keeps taking flushes while it merges, and a merge that empties many
    /// runs into a large level takes long (with a few flushes of slack, a level 0 of many runs
    /// stalled a write-heavy mix through much of its merge: docs/BENCHMARKS.md §10). At the
    /// options' own trigger (leveling) their triggers stand as set.
    pub fn above(t: L0Triggers, merge_at: usize) -> Self {
        let slowdown_gap = t.slowdown.saturating_sub(t.compaction);
        let mut stop_gap = t.stop.saturating_sub(t.slowdown);
        let mut slowdown = t.slowdown.max(merge_at.saturating_add(slowdown_gap));
        if merge_at > t.compaction {
            slowdown = slowdown.max(merge_at.saturating_mul(2));
            stop_gap = stop_gap.max(merge_at / 2);
        }
        let stop = t.stop.max(slowdown.saturating_add(stop_gap));
        L0Limits { slowdown_files: slowdown, stop_files: stop }
    }

    /// The pressure `count` level-0 runs put on writers.
    pub fn pressure(&self, count: usize) -> WritePressure {
        if count >= self.stop_files {
            WritePressure::Stop
        } else if count >= self.slowdown_files {
            WritePressure::Slowdown
        } else {
            WritePressure::None
        }
    }
}

/// A table holding only tombstones whose keys nothing older can hold: they hide nothing from
/// any reader (at any snapshot), so the table can go without being read. Compaction keeps such
/// tombstones while a snapshot may need them; under leveling nothing compacts the last level
/// again, so without this they would stay for good.
pub fn pick_drop(ctx: &PickContext<'_>) -> Option<Choice> {
    let v = ctx.version;
    for (level, l) in v.levels.iter().enumerate() {
        if !ctx.free(&[level]) {
            continue;
        }
        for run in &l.runs {
            let only_tombstones =
                |f: &&Arc<FileMeta>| f.num_deletions == f.num_entries && (f.num_entries > 0 || f.range_tombstones > 0);
            for f in run.files.iter().filter(only_tombstones) {
                if !shadows_older_data(v, level, run.id, f) {
                    let files = vec![f.clone()];
                    return Some(Choice::Drop(DropTask { level, files, reason: Reason::TombstonesOnly }));
                }
            }
        }
    }
    None
}

/// Some table that may be older than `f` (in run `run_id` of `level`) overlaps its keys: a
/// table of an older run of the level or of any deeper level.
fn shadows_older_data(v: &Version, level: usize, run_id: u64, f: &FileMeta) -> bool {
    let (lo, hi) = (key::user_key(&f.smallest), key::user_key(&f.largest));
    v.levels.iter().enumerate().skip(level).any(|(l, lv)| {
        lv.runs
            .iter()
            .filter(|r| l > level || r.id <= run_id)
            .any(|r| r.overlapping(&v.order, Some(lo), Some(hi)).iter().any(|o| o.number != f.number))
    })
}

#[cfg(test)]
mod tests {
    use super::testutil::{context, file, tombstones, version};
    use super::*;

    fn drop_of(v: &Version, busy: &[usize]) -> Option<Vec<u64>> {
        match pick_drop(&context(v, busy))? {
            Choice::Drop(d) => Some(d.files.iter().map(|f| f.number).collect()),
            other => panic!("expected a drop, got {other:?}"),
        }
    }

    #[test]
    fn a_tombstone_only_table_nothing_older_overlaps_is_dropped_unread() {
        let v = version(4, &[(1, file(1, 1, "a", "c")), (3, tombstones(2, 2, "m", "p"))]);
        assert_eq!(drop_of(&v, &[]), Some(vec![2]));
        assert_eq!(drop_of(&v, &[3]), None, "not while a compaction works on its level");
    }

    #[test]
    fn a_tombstone_only_table_stays_while_an_older_table_may_hold_its_keys() {
        // An older run of the same level, and a deeper level.
        let same_level = version(4, &[(1, file(1, 1, "a", "n")), (1, tombstones(2, 2, "m", "p"))]);
        assert_eq!(drop_of(&same_level, &[]), None);
        let deeper = version(4, &[(1, tombstones(2, 2, "m", "p")), (2, file(1, 1, "o", "z"))]);
        assert_eq!(drop_of(&deeper, &[]), None);
        // A newer run of the level overlapping it hides nothing it would need.
        let newer = version(4, &[(1, tombstones(2, 2, "m", "p")), (1, file(3, 3, "a", "z"))]);
        assert_eq!(drop_of(&newer, &[]), Some(vec![2]));
    }

    #[test]
    fn a_table_without_entry_counts_is_never_taken_for_tombstones_only() {
        // Manifests from before entry counts decode them as 0.
        let old = FileMeta { num_entries: 0, num_deletions: 0, ..file(1, 1, "a", "z") };
        assert_eq!(drop_of(&version(4, &[(2, old)]), &[]), None);
        assert_eq!(drop_of(&version(4, &[(2, file(1, 1, "a", "z"))]), &[]), None, "values are not dropped");
    }

    #[test]
    fn a_choice_names_every_level_it_touches_once() {
        let v = version(4, &[(1, file(1, 1, "a", "c")), (2, file(2, 2, "a", "c"))]);
        let t = CompactionTask {
            inputs: vec![
                CompactionInput { level: 1, files: v.levels[1].files().cloned().collect() },
                CompactionInput { level: 2, files: v.levels[2].files().cloned().collect() },
            ],
            output_level: 2,
            output_run: None,
            grandparents: Vec::new(),
            compact_pointer: None,
            reason: Reason::Test,
        };
        assert_eq!(Choice::Merge(t).levels(), vec![1, 2]);
    }

    #[test]
    fn write_pressure_steps_up_at_the_slowdown_and_stop_counts() {
        let o = crate::options::Options::default();
        let l = L0Limits::above(L0Triggers::from_options(&o), 4);
        assert_eq!((l.slowdown_files, l.stop_files), (20, 36), "RocksDB's triggers");
        assert_eq!(l.pressure(l.slowdown_files - 1), WritePressure::None);
        assert_eq!(l.pressure(l.slowdown_files), WritePressure::Slowdown);
        assert_eq!(l.pressure(l.stop_files), WritePressure::Stop);
        // A level 0 that merges at 26 runs takes as many again before writers slow.
        let wide = L0Limits::above(L0Triggers::from_options(&o), 26);
        assert_eq!((wide.slowdown_files, wide.stop_files), (52, 68));
        // Triggers a user set stand under a policy that merges at them.
        let tight = o.clone().l0_compaction_trigger(4).l0_slowdown_trigger(5).l0_stop_trigger(6);
        assert_eq!(L0Limits::above(L0Triggers::from_options(&tight), 4), L0Limits { slowdown_files: 5, stop_files: 6 });
        // "Never stall" does not overflow.
        let never = o.l0_slowdown_trigger(usize::MAX).l0_stop_trigger(usize::MAX);
        assert_eq!(L0Limits::above(L0Triggers::from_options(&never), 30).stop_files, usize::MAX);
    }
}
