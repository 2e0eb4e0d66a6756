//! Monkey's filter allocation (Dayan et al., SIGMOD'17; Eq 12 of the Wacky paper): for a total
//! filter memory, the false-positive rates that minimise the expected number of runs a
//! zero-result lookup reads in vain. A lookup probes one filter per run, so the cost is the sum
//! of the runs' rates; with `bits(p) = −ln p / ln²2` bits per key, the optimum gives each run a
//! rate proportional to its entry count. Small runs (L0 files, upper levels) get many bits,
//! the largest run a little fewer than the average: at equal memory the sum of rates drops
//! several-fold against the same bits for every run.

use crate::compaction::NewRun;
use crate::options::{FilterAllocation, Options};
use crate::sst::TableOptions;
use crate::version::Version;

/// `ln(2)²`: bits per key of a Bloom filter with false-positive rate `p` are `−ln p / LN2_SQ`.
const LN2_SQ: f64 = std::f64::consts::LN_2 * std::f64::consts::LN_2;

/// More bits than this buy nothing measurable (a rate below 10⁻⁶).
const MAX_BITS: f64 = 30.0;

/// Bits per key for every run of `entries` (entries per run, any unit proportional to them)
/// so that their average over all entries is `avg_bits` and the sum of the false-positive
/// rates is least. Runs whose optimal rate would exceed 1 get no filter (0 bits), and the
/// memory they would have had goes to the others.
pub fn allocate_bits(entries: &[u64], avg_bits: f64) -> Vec<f64> {
    let groups: Vec<(f64, f64)> = entries.iter().map(|&n| (n as f64, 1.0)).collect();
    allocate_bits_grouped(&groups, avg_bits)
}

/// `allocate_bits` for groups of equal runs: `(entries per run, runs)`; the bits per key of
/// each group's runs.
pub fn allocate_bits_grouped(groups: &[(f64, f64)], avg_bits: f64) -> Vec<f64> {
    let mut bits = vec![0.0; groups.len()];
    if avg_bits <= 0.0 {
        return bits;
    }
    let mut active: Vec<usize> = (0..groups.len()).filter(|&i| groups[i].0 > 0.0 && groups[i].1 > 0.0).collect();
    let budget = avg_bits * groups.iter().map(|g| g.0 * g.1).sum::<f64>();
    loop {
        let n: f64 = active.iter().map(|&i| groups[i].0 * groups[i].1).sum();
        if n == 0.0 {
            return bits;
        }
        // Lagrange: p_i = λ·n_i, and Σ n_i·(−ln p_i) = budget·ln²2 gives ln λ.
        let weighted_ln: f64 = active.iter().map(|&i| groups[i].0 * groups[i].1 * groups[i].0.ln()).sum();
        let ln_lambda = -(budget * LN2_SQ + weighted_ln) / n;
        let mut dropped = false;
        active.retain(|&i| {
            let b = -(ln_lambda + groups[i].0.ln()) / LN2_SQ;
            bits[i] = b.min(MAX_BITS);
            let keep = b > 0.0;
            if !keep {
                bits[i] = 0.0;
                dropped = true;
            }
            keep
        });
        if !dropped {
            return bits;
        }
    }
}

/// The false-positive rate of a Bloom filter with `bits` per key and the best probe count.
pub fn false_positive_rate(bits: f64) -> f64 {
    if bits <= 0.0 {
        1.0
    } else {
        (-bits * LN2_SQ).exp()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(entries: &[u64], bits: &[f64]) -> f64 {
        entries.iter().zip(bits).map(|(&n, &b)| n as f64 * b).sum()
    }

    fn cost(bits: &[f64]) -> f64 {
        bits.iter().map(|&b| false_positive_rate(b)).sum()
    }

    #[test]
    fn equal_runs_get_the_average() {
        let bits = allocate_bits(&[1000, 1000, 1000], 5.0);
        for b in bits {
            assert!((b - 5.0).abs() < 1e-9, "{b}");
        }
    }

    #[test]
    fn a_leveled_tree_spends_the_same_memory_for_far_fewer_false_positives() {
        // Four L0 files of 4 MiB, then levels of 10, 100 and 1000 MiB (entries ∝ bytes).
        let entries = [4, 4, 4, 4, 10, 100, 1000];
        let bits = allocate_bits(&entries, 5.0);
        let total: u64 = entries.iter().sum();
        assert!((memory(&entries, &bits) - 5.0 * total as f64).abs() < 1e-6, "same memory");
        assert!(bits.windows(2).all(|w| w[0] >= w[1] - 1e-9), "bigger runs get fewer bits: {bits:?}");
        let uniform = cost(&[5.0; 7]);
        let monkey = cost(&bits);
        assert!(monkey < 0.35 * uniform, "monkey {monkey:.3} vs uniform {uniform:.3}");
    }

    #[test]
    fn a_run_whose_optimal_rate_passes_one_gets_no_filter_and_the_others_keep_the_memory() {
        // 1000 one-entry runs and a big one at 0.01 bits per key: the big run's optimum is
        // below 0 bits, so it gets none and the small runs share the whole budget.
        let mut entries = vec![1u64; 1000];
        entries.push(1_000_000);
        let bits = allocate_bits(&entries, 0.01);
        assert_eq!(bits[1000], 0.0, "the big run gets no filter");
        assert!(bits[..1000].iter().all(|&b| b > 0.0));
        let budget = 0.01 * entries.iter().sum::<u64>() as f64;
        assert!((memory(&entries, &bits) - budget).abs() < 1e-6 * budget, "{} vs {budget}", memory(&entries, &bits));
    }

    #[test]
    fn no_budget_means_no_filters() {
        assert_eq!(allocate_bits(&[10, 20], 0.0), vec![0.0, 0.0]);
        assert!(allocate_bits(&[], 5.0).is_empty());
    }
}
