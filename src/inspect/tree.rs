//! A database's tree as its manifest records it (replayed by `VersionSet::load`, which reads
//! and writes nothing else): the runs of every level with their tables, and beside them what
//! the recorded merge policy aims at — its per-level targets — and the Wacky cost model's shape
//! and costs for a tree of this size (`continuum`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{LogPosition, TableRecord};
use crate::compaction::policy::leveled::level_capacity_bytes;
use crate::compaction::policy::WackyPolicy;
use crate::continuum::{Costs, Knobs, Shape};
use crate::error::Result;
use crate::filename::manifest_file_name;
use crate::fs::{PosixFs, Vfs};
use crate::options::{MergePolicy, Options};
use crate::version::manifest::{read_current, read_manifest};
use crate::version::{LoadedManifest, Version, VersionSet};

/// The tree a database's manifest records, with the counters it keeps.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Tree {
    /// The manifest it was read from (the one `CURRENT` names).
    pub manifest: PathBuf,
    /// The merge policy the database is written with, as recorded (`leveled(T=10)`,
    /// `wacky:T=..,K=..,Z=..,C=..,X=..`).
    pub policy: String,
    /// The settings that shape its files as the manifest records them, one `name=value` line
    /// each (`merge_policy`, `min_separated_value_bytes`, `bloom_bits_per_key`, ...; before
    /// format 3 only the merge policy).
    pub recorded_options: String,
    /// Level 0 first.
    pub levels: Vec<TreeLevel>,
    /// The last sequence number in use.
    pub last_sequence: u64,
    /// The next unused file number.
    pub next_file_number: u64,
    /// Every log record before this is in tables.
    pub log_head: LogPosition,
    /// Value-log GC's tail.
    pub vlog_tail: LogPosition,
    /// Where the log was durable at the last clean close (`(0, 0)`: not recorded).
    pub log_durable: LogPosition,
    /// The value files tables point into, with their statistics.
    pub vlog_files: Vec<VlogFile>,
    version: Arc<Version>,
    /// Levels the database was made with (or uses, if more).
    num_levels: usize,
}

/// One level of a `Tree`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TreeLevel {
    /// Its sorted runs, newest (highest id) first, as reads visit them.
    pub runs: Vec<TreeRun>,
}

impl TreeLevel {
    /// Bytes of its tables.
    pub fn bytes(&self) -> u64 {
        self.runs.iter().map(TreeRun::bytes).sum()
    }

    /// Its tables.
    pub fn tables(&self) -> usize {
        self.runs.iter().map(|r| r.tables.len()).sum()
    }
}

/// One sorted run: tables with disjoint key ranges, in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TreeRun {
    /// The run's id (larger ids hold newer data within a level).
    pub id: u64,
    /// Its tables, in key order.
    pub tables: Vec<TableRecord>,
}

impl TreeRun {
    /// Bytes of its tables.
    pub fn bytes(&self) -> u64 {
        self.tables.iter().map(|t| t.size).sum()
    }
}

/// What the manifest keeps about a value file tables point into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct VlogFile {
    /// The file's number (`NNNNNN.vlog` or `NNNNNN.cold`).
    pub number: u64,
    /// Bytes of separated values tables have pointed to.
    pub total_bytes: u64,
    /// Of those, bytes no table points to any more.
    pub garbage_bytes: u64,
}

/// What the recorded merge policy aims at for one level.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LevelTarget {
    /// The level's byte capacity (`None`: the policy bounds the level by runs only).
    pub capacity_bytes: Option<f64>,
    /// The most runs the level holds before it is merged.
    pub max_runs: usize,
}

/// The recorded policy's targets and the cost model's view of a tree.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TreeModel {
    /// The policy's knobs on the Wacky continuum (leveling is `Knobs::leveling(T)`).
    pub knobs: Knobs,
    /// The model's shape for the tree's size, set top-down from its largest level as the
    /// Wacky policy sets it (App. E).
    pub shape: Shape,
    /// What the model predicts that shape costs, at the options' filter bits per key.
    pub costs: Costs,
    /// Per level, what the policy in force compacts towards: the shape's capacities and run
    /// limits under a Wacky policy; under leveling, level 0's file trigger and LevelDB's byte
    /// budgets (`max_bytes_for_level_base` × T^(i−1)).
    pub targets: Vec<LevelTarget>,
}

impl Tree {
    /// Read the tree of the database in `dir` from the manifest its `CURRENT` names.
    pub fn load(dir: impl AsRef<Path>) -> Result<Tree> {
        let dir = dir.as_ref();
        let vfs: Arc<dyn Vfs> = Arc::new(PosixFs::new());
        let manifest = manifest_file_name(dir, read_current(&*vfs, dir)?);
        // Every level the manifest uses (a database may have been made with more than the
        // default), for the replay.
        let used = read_manifest(&*vfs, &manifest)?
            .edits
            .iter()
            .flat_map(|(_, e)| e.added_files.iter().map(|(l, _)| *l).chain(e.deleted_files.iter().map(|(l, _)| *l)))
            .max()
            .map_or(0, |l| l as usize + 1);
        let set = VersionSet::load(vfs, dir, used.max(Options::default().num_levels))?;
        let recorded_options = set.recorded_options();
        let num_levels = recorded(&Options::default(), &recorded_options).num_levels.max(used);
        let version = set.current();
        let levels = version
            .levels
            .iter()
            .enumerate()
            .map(|(l, level)| TreeLevel {
                runs: level
                    .runs
                    .iter()
                    .map(|r| TreeRun {
                        id: r.id,
                        tables: r.files.iter().map(|f| TableRecord::new(l as u32, f)).collect(),
                    })
                    .collect(),
            })
            .collect();
        let vlog_files = set
            .vlog_files()
            .iter()
            .map(|(&number, s)| VlogFile { number, total_bytes: s.total_bytes, garbage_bytes: s.garbage_bytes })
            .collect();
        Ok(Tree {
            manifest,
            policy: set.policy().to_string(),
            recorded_options,
            levels,
            last_sequence: set.last_sequence(),
            next_file_number: set.next_file_number(),
            log_head: set.log_head().into(),
            vlog_tail: set.vlog_tail().into(),
            log_durable: set.log_durable().into(),
            vlog_files,
            version,
            num_levels,
        })
    }

    /// Bytes of every table.
    pub fn bytes(&self) -> u64 {
        self.levels.iter().map(TreeLevel::bytes).sum()
    }

    /// The recorded policy's targets and the cost model's shape and costs for this tree, with
    /// the options the database runs with: `options` gives those the manifest does not record
    /// (the write buffer, level 0's trigger), and any shaping setting it names (a setter called,
    /// or a value other than the default) stands in for the recorded one (leveling's level-1
    /// budget, the filter bits per key, ...). `None` when the recorded policy is not one this
    /// build knows.
    pub fn model(&self, options: &Options) -> Option<TreeModel> {
        let knobs = policy_knobs(&self.policy)?;
        let mut o = recorded(options, &self.recorded_options);
        o.num_levels = self.num_levels;
        let shape = WackyPolicy::new(&o, knobs).shape(&self.version);
        let bits = o.bloom_bits_per_key.first().copied().unwrap_or(0.0);
        let costs = shape.costs(bits);
        let targets = match leveled_ratio(&self.policy) {
            Some(t) => (0..self.num_levels)
                .map(|l| match l {
                    0 => LevelTarget { capacity_bytes: None, max_runs: o.l0_compaction_trigger.max(1) },
                    _ => LevelTarget {
                        capacity_bytes: Some(level_capacity_bytes(o.max_bytes_for_level_base, t, l)),
                        max_runs: 1,
                    },
                })
                .collect(),
            None => shape
                .levels
                .iter()
                .map(|l| LevelTarget { capacity_bytes: Some(l.capacity_bytes), max_runs: l.max_runs })
                .collect(),
        };
        Some(TreeModel { knobs, shape, costs, targets })
    }
}

/// `options` with the recorded value of every shaping setting it does not name.
fn recorded(options: &Options, record: &str) -> Options {
    let mut o = options.clone();
    // What differs is for an open to log; here the caller's value simply stands.
    let _ = o.adopt_shape_record(record);
    o
}

/// The options a database in `dir` was made with, as its manifest records them: every shaping
/// setting (merge policy, separation threshold, filters, block and table sizes, level sizes)
/// at its recorded value, the others at their defaults.
pub fn recorded_options(dir: impl AsRef<Path>) -> Result<Options> {
    let loaded = LoadedManifest::read(&PosixFs::new(), dir.as_ref())?;
    Ok(recorded(&Options::default(), &loaded.recorded_options()))
}

/// T of a recorded `leveled(T=..)` policy.
fn leveled_ratio(policy: &str) -> Option<u64> {
    policy.strip_prefix("leveled(T=")?.strip_suffix(')')?.parse().ok()
}

/// The knobs of a merge policy as the manifest records it: `wacky:T=..,K=..,Z=..,C=..,X=..`,
/// `leveled(T=..)` (as `Knobs::leveling(T)`), `tiered(T=..)` (older builds) or a
/// `MergePolicy` name; `None` for a text this build does not know.
pub fn policy_knobs(policy: &str) -> Option<Knobs> {
    if let Some(t) = leveled_ratio(policy) {
        return Some(Knobs::leveling(t as f64));
    }
    if let Some(t) = policy.strip_prefix("tiered(T=").and_then(|s| s.strip_suffix(')')) {
        return t.parse::<f64>().ok().map(Knobs::tiering);
    }
    match policy.parse::<MergePolicy>().ok()? {
        MergePolicy::Wacky(k) => Some(k),
        MergePolicy::Leveling => Some(Knobs::leveling(Options::default().level_size_ratio as f64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recorded_policy_text_names_its_knobs() {
        assert_eq!(policy_knobs("leveled(T=10)"), Some(Knobs::leveling(10.0)));
        assert_eq!(policy_knobs("tiered(T=4)"), Some(Knobs::tiering(4.0)));
        let k = Knobs::bush(2.0, 1.0);
        assert_eq!(policy_knobs(&k.to_string()), Some(k), "the text the Wacky policy records");
        assert_eq!(policy_knobs("scll"), Some(Knobs::scll(4.0)));
        assert_eq!(policy_knobs("leveled(T=x)"), None);
        assert_eq!(policy_knobs("someone else's policy"), None);
    }
}
