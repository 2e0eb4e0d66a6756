//! Compaction: which runs to merge next (a `CompactionPolicy`) and the job that merges them.
//! The leveled policy (LevelDB's) is the first implementation; the Wacky continuum and
//! light-weight compaction plug in behind the same trait.

pub mod job;
pub mod policy;

use std::sync::Arc;

use crate::version::{FileMeta, Version};

/// The files one compaction reads from one level.
#[derive(Debug, Clone)]
pub struct CompactionInput {
    pub level: usize,
    pub files: Vec<Arc<FileMeta>>,
}

/// A unit of compaction work chosen by a policy.
#[derive(Debug, Clone)]
pub struct CompactionTask {
    /// Inputs, upper (newer) level first.
    pub inputs: Vec<CompactionInput>,
    pub output_level: usize,
    /// Sorted run the outputs join (`None`: a new run).
    pub output_run: Option<u64>,
    /// Move the single input file down without rewriting it.
    pub trivial_move: bool,
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
}

/// Chooses what to compact. Implementations must be cheap: `pick` runs after every flush and
/// compaction under the DB's state lock.
pub trait CompactionPolicy: Send + Sync {
    /// Name and knobs, stored in the manifest so a DB reopened with another policy is noticed.
    fn name(&self) -> String;
    /// The next compaction worth doing, if any.
    fn pick(&self, ctx: &PickContext<'_>) -> Option<CompactionTask>;
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
    /// L0 file counts at which each write is delayed by 1 ms, and at which writes stop until
    /// compaction catches up: they must sit above the count at which the policy merges L0.
    fn l0_write_limits(&self) -> L0Limits;
}

/// Write back-pressure from level 0 (LevelDB's slowdown and stop triggers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L0Limits {
    pub slowdown_files: usize,
    pub stop_files: usize,
}

impl L0Limits {
    /// The options' triggers, raised to keep their distance above `merge_at` files.
    pub fn above(o: &crate::options::Options, merge_at: usize) -> Self {
        let slowdown =
            o.l0_slowdown_trigger.max(merge_at + o.l0_slowdown_trigger.saturating_sub(o.l0_compaction_trigger));
        let stop = o.l0_stop_trigger.max(slowdown + o.l0_stop_trigger.saturating_sub(o.l0_slowdown_trigger));
        L0Limits { slowdown_files: slowdown, stop_files: stop }
    }
}
