//! Monkey's filter allocation applied to a tree: the bits per key a new run's tables get,
//! from the steady shape a policy keeps each level in (the math is `continuum::monkey`).

use crate::compaction::NewRun;
use crate::continuum::monkey::allocate_bits;
use crate::options::{FilterAllocation, Options};
use crate::sst::TableOptions;
use crate::version::Version;

/// What a level holds in the steady state a policy keeps it in, for Monkey: at most
/// `max_runs` of its runs, each counted at least `run_bytes` (0: as large as it is), and,
/// when it holds fewer than `fill_runs`, a share of the runs it lacks, counted at
/// `missing_run_bytes` each. Tables outlive
/// the moment they are written, so their bits are set for that steady tree rather than for
/// the tree of the moment: a load's backlog of twenty L0 files, or a level just emptied by a
/// merge, would otherwise leave every table written meanwhile with too few bits or too many,
/// and the tree as a whole with more or less filter memory than its budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteadyLevel {
    /// The most runs counted (the newest): a backlog beyond it drains soon.
    pub max_runs: usize,
    /// The runs the level fills up to: missing ones are added (0: none).
    pub fill_runs: usize,
    /// The least bytes a run of the level counts.
    pub run_bytes: u64,
    /// The bytes each missing run counts (a tiered level fills up with arrivals this large).
    pub missing_run_bytes: u64,
    /// The share of the missing runs counted (rounded up): 1 for a level kept full, ½ for
    /// one that fills up and empties in cycles (on average a run shares it with half the
    /// runs still to come).
    pub missing_share: f64,
}

impl SteadyLevel {
    /// The level as it is: every run, each at its size.
    pub const AS_IS: SteadyLevel =
        SteadyLevel { max_runs: usize::MAX, fill_runs: 0, run_bytes: 0, missing_run_bytes: 0, missing_share: 0.0 };

    /// Exactly `runs` runs of at least `run_bytes`, the missing ones counted at that size.
    pub fn full(runs: usize, run_bytes: u64) -> SteadyLevel {
        SteadyLevel { max_runs: runs, fill_runs: runs, run_bytes, missing_run_bytes: run_bytes, missing_share: 1.0 }
    }
}

/// How a policy sets a new run's table options: the options' bits per key for its level
/// (`Uniform`), or Monkey's share of their average for a run of its size in the tree.
#[derive(Debug, Clone)]
pub struct FilterPlan {
    /// Block size, compression and restart interval; the bits are set per run.
    base: TableOptions,
    bloom_bits_per_key: Vec<f64>,
    allocation: FilterAllocation,
}

impl FilterPlan {
    pub fn from_options(o: &Options) -> Self {
        FilterPlan {
            base: o.table_options(0),
            bloom_bits_per_key: o.bloom_bits_per_key.clone(),
            allocation: o.filter_allocation,
        }
    }

    fn level_bits(&self, level: usize) -> f64 {
        self.bloom_bits_per_key.get(level).or(self.bloom_bits_per_key.last()).copied().unwrap_or(0.0)
    }

    /// Table options for `run`. Under Monkey the run's bits come from the tree's shape:
    /// `version`'s runs without the `consumed` files, plus this run (table bytes stand in for
    /// entry counts), with each level down to the deepest as `steady(level)` describes it.
    pub fn table_options(&self, v: &Version, run: &NewRun<'_>, steady: impl Fn(usize) -> SteadyLevel) -> TableOptions {
        let mut t = self.base.clone();
        t.bloom_bits_per_key = match self.allocation {
            FilterAllocation::Uniform => self.level_bits(run.level),
            FilterAllocation::Monkey => self.monkey_bits(v, run, steady),
        };
        t
    }

    fn monkey_bits(&self, v: &Version, run: &NewRun<'_>, steady: impl Fn(usize) -> SteadyLevel) -> f64 {
        let consumed = |f: &crate::version::FileMeta| run.consumed.contains(&f.number);
        // Per level: the bytes of each run, and where the new run is in it.
        let mut levels: Vec<(Vec<u64>, Option<usize>)> = Vec::new();
        for l in &v.levels {
            let mut bytes = Vec::new();
            let mut new_at = None;
            for r in &l.runs {
                let live: u64 = r.files.iter().filter(|f| !consumed(f)).map(|f| f.size).sum();
                if Some(r.id) == run.joins {
                    new_at = Some(bytes.len());
                    bytes.push(live + run.bytes);
                } else if live > 0 {
                    bytes.push(live);
                }
            }
            levels.push((bytes, new_at));
        }
        if levels.len() <= run.level {
            levels.resize(run.level + 1, (Vec::new(), None));
        }
        if run.joins.is_none() {
            let (bytes, new_at) = &mut levels[run.level];
            *new_at = Some(0);
            bytes.insert(0, run.bytes);
        }
        let deepest = levels.iter().rposition(|(b, _)| b.iter().any(|&x| x > 0)).unwrap_or(0);
        let mut entries: Vec<u64> = Vec::new();
        let mut new_index = None;
        for (level, (bytes, new_at)) in levels.iter().enumerate() {
            let shape = if level <= deepest { steady(level) } else { SteadyLevel::AS_IS };
            // The new run always counts; the others up to the steady count, then phantoms.
            let others = bytes.iter().enumerate().filter(|(i, _)| Some(*i) != *new_at).map(|(_, &b)| b);
            let counted: Vec<u64> = others.take(shape.max_runs.saturating_sub(new_at.is_some() as usize)).collect();
            let lacking = shape.fill_runs.saturating_sub(counted.len() + new_at.is_some() as usize);
            let missing = (lacking as f64 * shape.missing_share).ceil() as usize;
            if let Some(at) = new_at {
                new_index = Some(entries.len());
                entries.push(bytes[*at].max(shape.run_bytes));
            }
            entries.extend(counted.into_iter().map(|b| b.max(shape.run_bytes)));
            entries.extend(std::iter::repeat_n(shape.missing_run_bytes, missing));
        }
        let avg = self.level_bits(0);
        let bits = allocate_bits(&entries, avg);
        let b = new_index.and_then(|at| bits.get(at)).copied().unwrap_or(avg);
        tracing::debug!(?entries, level = run.level, bits = b, "Monkey filter bits for a new run");
        b
    }
}
