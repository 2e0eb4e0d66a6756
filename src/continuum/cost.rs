//! What a shape costs (§5): compaction writes per entry (Eq 14), false positives of a
//! zero-result lookup and I/Os of a lookup of an existing key (Eq 15, with Monkey's rates,
//! Eq 12, for a filter memory budget), runs a short range scan probes, and the filter memory;
//! and a workload's average cost per operation (Eq 16).

use super::monkey::{allocate_bits_grouped, false_positive_rate};
use super::shape::Shape;

/// Predicted costs of a shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Eq 14 times B, as the paper has it: Σ_{i<L} (r_i − 1)/(a_i + 1) + C/a_L copies per
    /// entry (preemptive merging assumed).
    pub paper_write_amp: f64,
    /// Times each entry is written on its way to the largest level under `MergePolicy::Wacky`,
    /// its flush included: Eq 14 counted for the policy as built. A level taking g_i = N_i /
    /// N_{i−1} arrivals (level 1: N_1/F flushes) in a_i runs merges m_i arrivals into each
    /// run (max(1, g_i) with one run; else g_i/a_i rounded, as the merge threshold does), writing each arrival (m_i + 1)/2 times (level 1: its flush plus
    /// the merges, 1 + (m_i + 1)/2 − 1/m_i). The largest level never empties: with one run,
    /// an arrival of N_L/g_L rewrites it all (g_L + 1 writes per arrival); with a_L > 1 runs,
    /// arrivals build runs as above and all runs merge into one per a_L of them (one more).
    pub write_amp: f64,
    /// R_zero = p = Σ a_i · p_i: runs a lookup of an absent key reads in vain.
    pub zero_result_ios: f64,
    /// R = 1 + p − p_L · (a_L + 1)/2: I/Os of a lookup of a key in the largest level.
    pub existing_ios: f64,
    /// V = Σ a_i: runs a short range scan seeks in (and filters a point lookup asks, at most).
    pub runs: f64,
    /// Bits per entry all filters take together (the budget the rates were chosen for).
    pub filter_bits_per_entry: f64,
}

impl Shape {
    /// Costs with `filter_bits_per_entry` of filter memory spread by Monkey (each run's rate
    /// proportional to its entries: a_i · p_i = p · N_i/N, Eq 12, where no rate reaches 1).
    pub fn costs(&self, filter_bits_per_entry: f64) -> Costs {
        let groups: Vec<(f64, f64)> =
            self.levels.iter().map(|l| (l.capacity_bytes / l.max_runs as f64, l.max_runs as f64)).collect();
        let bits = allocate_bits_grouped(&groups, filter_bits_per_entry);
        let fpr: Vec<f64> = bits.iter().map(|&b| false_positive_rate(b)).collect();
        let a = |i: usize| self.levels[i].max_runs as f64;
        let last = self.largest();
        let p: f64 = (0..self.levels.len()).map(|i| a(i) * fpr[i]).sum();
        let paper_write_amp = self.capping / a(last)
            + self.levels[..last].iter().map(|l| (l.ratio - 1.0) / (l.max_runs as f64 + 1.0)).sum::<f64>();
        Costs {
            paper_write_amp,
            write_amp: self.policy_write_amp(),
            zero_result_ios: p,
            existing_ios: 1.0 + p - fpr[last] * (a(last) + 1.0) / 2.0,
            runs: (0..self.levels.len()).map(a).sum(),
            filter_bits_per_entry,
        }
    }
}

impl Shape {
    /// `Costs::write_amp`.
    fn policy_write_amp(&self) -> f64 {
        let last = self.largest();
        let per_run = |i: usize| {
            let l = &self.levels[i];
            match l.max_runs {
                1 => l.arrivals.max(1.0),
                a => (l.arrivals / a as f64).round().max(1.0),
            }
        };
        let level_1 = {
            let m = per_run(0);
            1.0 + (m + 1.0) / 2.0 - 1.0 / m
        };
        let smaller: f64 = (1..last).map(|i| (per_run(i) + 1.0) / 2.0).sum();
        let largest = if self.levels[last].max_runs == 1 {
            self.levels[last].arrivals + 1.0
        } else {
            (per_run(last) + 1.0) / 2.0 + 1.0
        };
        if last == 0 {
            return largest;
        }
        level_1 + smaller + largest
    }

    /// The shape with level 1 taking flushes of `flush_bytes` (what flushes really write,
    /// often less than the write buffer F that sets the level count).
    pub fn with_flush_bytes(mut self, flush_bytes: f64) -> Self {
        if let Some(l) = self.levels.first_mut() {
            l.arrivals = l.capacity_bytes / flush_bytes.max(f64::MIN_POSITIVE);
        }
        self
    }

    /// Runs a lookup meets on average over each level's fill cycle (V is the most): a smaller
    /// level receives g_i runs (flushes into level 1, the full level above deeper down) until
    /// it holds its capacity, each joining the active run while that is
    /// below its share N_i / a_i, and then empties into the level below; the largest level
    /// goes from one run to a_L and is merged back into one.
    pub fn expected_runs(&self) -> f64 {
        let last = self.largest();
        let smaller: f64 =
            (0..last).map(|i| fill_cycle_mean_runs(self.levels[i].arrivals, self.levels[i].max_runs)).sum();
        let a_l = self.levels[last].max_runs as f64;
        smaller + if a_l > 1.0 { (a_l + 1.0) / 2.0 } else { 1.0 }
    }
}

/// Mean runs of a level over one fill cycle, in units of arrivals: it spills at the arrival
/// that brings it within half an arrival of `capacity_arrivals`, and an arrival joins the
/// active run while that holds fewer than `capacity_arrivals / max_runs` less half an arrival.
fn fill_cycle_mean_runs(capacity_arrivals: f64, max_runs: usize) -> f64 {
    let per_run = (capacity_arrivals / max_runs as f64).max(1.0);
    let threshold = if max_runs <= 1 { f64::INFINITY } else { per_run - 0.5 };
    let (mut runs, mut active, mut sum, mut intervals) = (0usize, 0.0f64, 0.0, 0.0);
    for g in 1.. {
        intervals += 1.0;
        if g as f64 + 0.5 >= capacity_arrivals {
            // The level spills: empty until the next arrival.
            return sum / intervals;
        }
        if runs > 0 && active < threshold {
            active += 1.0;
        } else {
            (runs, active) = (runs + 1, 1.0);
        }
        sum += runs as f64;
    }
    unreachable!("the loop returns once the level is full")
}

/// What a load from empty to `final_bytes` costs on average (what a fill measures): Eq 14's
/// write cost and the runs a lookup meets, at each size the tree passes through, weighted by
/// the bytes written at that size (one point per flush of `flush_bytes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadAverage {
    /// Compaction writes per entry flushed.
    pub write_amp: f64,
    /// Runs a lookup of an absent key probes (one filter each).
    pub expected_runs: f64,
    /// V at the final size.
    pub final_max_runs: f64,
}

/// `LoadAverage` for `knobs`; `buffer_bytes` is the policy's F (it sets the level count),
/// `flush_bytes` what a flush actually writes.
pub fn load_average(
    knobs: super::Knobs,
    final_bytes: f64,
    buffer_bytes: f64,
    flush_bytes: f64,
    max_levels: usize,
) -> LoadAverage {
    let step = flush_bytes.max(final_bytes / 10_000.0).max(1.0);
    let (mut w, mut runs, mut points) = (0.0, 0.0, 0.0);
    let mut n = step;
    while n <= final_bytes {
        let s = Shape::for_data(knobs, n, buffer_bytes, 2, max_levels).with_flush_bytes(flush_bytes);
        w += s.costs(0.0).write_amp;
        runs += s.expected_runs();
        points += 1.0;
        n += step;
    }
    let last = Shape::for_data(knobs, final_bytes, buffer_bytes, 2, max_levels).costs(0.0);
    let points = f64::max(points, 1.0);
    LoadAverage { write_amp: w / points, expected_runs: runs / points, final_max_runs: last.runs }
}

/// Shares of the operation types of a workload (any scale; they are normalised).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Workload {
    /// r: point lookups of keys that exist.
    pub reads: f64,
    /// z: point lookups of keys that do not.
    pub zero_result_reads: f64,
    /// w: writes (puts and deletes).
    pub writes: f64,
    /// v: short range scans.
    pub scans: f64,
}

/// ϕ's default: a compaction writing one block of entries costs this many lookup I/Os. The
/// paper counts both as one storage I/O (ϕ = 1: a disk-bound tree); in a tree whose blocks sit
/// in memory (the page cache) a lookup's "I/O" is a cached block probe, while compaction
/// merges and writes a block in CPU time several times longer; compaction runs on its own
/// thread, so about half of that reaches the operations' throughput. A range of ϕ around this
/// one picks the same designs for the three mixes of `scripts/tune-bench.sh`, close to the
/// best preset measured, where ϕ = 1 and a ϕ twice this picked designs well behind it
/// (docs/BENCHMARKS.md §10 has the measurements).
pub const DEFAULT_WRITE_COST_RATIO: f64 = 3.0;

impl Workload {
    /// Eq 16: Θ = r·R + z·R_zero + w·W + v·V, with the write cost W = ϕ · write_amp / B (a
    /// compaction moves B entries per block it writes, and writing a block costs ϕ lookup
    /// I/Os: the hardware weight of §5's future work, `DEFAULT_WRITE_COST_RATIO`).
    pub fn cost(&self, c: &Costs, entries_per_block: f64, write_cost_ratio: f64) -> f64 {
        let total = self.reads + self.zero_result_reads + self.writes + self.scans;
        if total <= 0.0 {
            return 0.0;
        }
        (self.reads * c.existing_ios
            + self.zero_result_reads * c.zero_result_ios
            + self.writes * write_cost_ratio * c.write_amp / entries_per_block.max(1.0)
            + self.scans * c.runs)
            / total
    }
}

#[cfg(test)]
mod tests {
    use super::super::knobs::Knobs;
    use super::*;

    fn near(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-12)
    }

    #[test]
    fn leveling_write_cost_is_half_the_ratio_per_level_and_c_at_the_largest() {
        // Eq 14 with T = 10, L = 3, a_i = 1: (10−1)/2 + (10−1)/2 + 9/1 = 18. As built (levels
        // of 10F, 100F, 1000F, g_i = 10): level 1 writes each flush 1 + 11/2 − 1/10 = 6.4
        // times, level 2 11/2, and the largest level g_L + 1 = 11: 22.9.
        let s = Shape::for_data(Knobs::leveling(10.0), 10_000.0 / 9.0, 1.0, 2, 7);
        let c = s.costs(10.0);
        assert!(near(c.paper_write_amp, 18.0, 1e-12), "{c:?}");
        assert!(near(c.write_amp, 22.9, 1e-12), "{c:?}");
        assert_eq!(c.runs, 3.0);
    }

    #[test]
    fn leveling_lookup_costs_match_monkey_rates_by_hand() {
        // Levels of 10, 100 and 1000 (of 1110): a_i p_i = p N_i/N, and the memory budget
        // M = 10 bits gives ln(1/p) = M ln²2 − Σ (N_i/N) ln(N/N_i) = 4.804530 − 0.353288, so
        // p = 0.0116641; R = 1 + p − p_L = 1 + p · (1 − 1000/1110) = 1.0011559.
        let s = Shape::for_data(Knobs::leveling(10.0), 10_000.0 / 9.0, 1.0, 2, 7);
        let c = s.costs(10.0);
        assert!(near(c.zero_result_ios, 0.0116641, 1e-5), "{c:?}");
        assert!(near(c.existing_ios, 1.0011559, 1e-7), "{c:?}");
    }

    #[test]
    fn bush_write_cost_adds_a_little_under_one_per_smaller_level() {
        // QLSM-bush T = 2, C = 1, L = 4: Eq 14 gives 15/16 + 3/4 + 1/2 + 1/1 = 3.1875. As
        // built (levels of 30F, 96F, 128F, 256F: g = 30, 3.2, 4/3, 2; a = 15, 3, 1, 1):
        // m = 2, 1, 4/3: 1 + 3/2 − 1/2, 1, 7/6, and the largest 2 + 1: 7.1667. Runs 15+3+1+1.
        let c = Shape::for_data(Knobs::bush(2.0, 1.0), 512.0, 1.0, 2, 7).costs(10.0);
        assert!(near(c.paper_write_amp, 3.1875, 1e-12), "{c:?}");
        assert!(near(c.write_amp, 2.0 + 1.0 + 7.0 / 6.0 + 3.0, 1e-12), "{c:?}");
        assert_eq!(c.runs, 20.0);
    }

    #[test]
    fn tiering_pays_t_minus_1_runs_per_level_for_its_cheap_writes() {
        // T = 4, L = 3 (N/F = 4·4/3·16, levels of 4F, 16F, 64F), 3 runs per level: Eq 14
        // gives 3/4 + 3/4 + 3/3 = 2.5. As built every arrival is a run of its own (one write
        // per level, the flush included) and the largest level merges its runs once more: 4.
        let c = Shape::for_data(Knobs::tiering(4.0), 64.0 * 4.0 / 3.0, 1.0, 2, 7).costs(10.0);
        assert!(near(c.paper_write_amp, 2.5, 1e-12), "{c:?}");
        assert!(near(c.write_amp, 4.0, 1e-12), "{c:?}");
        assert_eq!(c.runs, 9.0);
        let lev = Shape::for_data(Knobs::leveling(4.0), 64.0 * 4.0 / 3.0, 1.0, 2, 7).costs(10.0);
        assert!(c.zero_result_ios > lev.zero_result_ios, "more runs, more false positives at equal memory");
    }

    #[test]
    fn a_tiered_level_averages_half_its_runs_and_a_leveled_one_one() {
        // Nine arrivals fill a level of nine runs: it holds 1..8 runs, then spills (0).
        assert!(near(fill_cycle_mean_runs(9.0, 9), 36.0 / 9.0, 1e-12));
        // One run that every arrival joins: 1 run except for the interval after the spill.
        assert!(near(fill_cycle_mean_runs(9.0, 1), 8.0 / 9.0, 1e-12));
        // Three runs of three arrivals each: 1,1,1,2,2,2,3,3 and 0.
        assert!(near(fill_cycle_mean_runs(9.0, 3), 15.0 / 9.0, 1e-12));
    }

    #[test]
    fn a_load_averages_the_write_cost_of_every_size_it_passes() {
        // Leveling T = 10, F = 1: up to N = 11.1 there are 2 levels and level 1 holds 0.09 N,
        // less than a flush: each flush passes through (1 write) into the largest level
        // (g_L + 1 = 11 writes): 12 throughout.
        let small = load_average(Knobs::leveling(10.0), 11.0, 1.0, 1.0, 7);
        assert!(near(small.write_amp, 12.0, 1e-9), "{small:?}");
        let big = load_average(Knobs::leveling(10.0), 1000.0, 1.0, 1.0, 7);
        assert!(big.write_amp > 12.0 && big.write_amp < 22.9, "{big:?}");
        assert_eq!(big.final_max_runs, 3.0);
    }

    #[test]
    fn eq_16_weighs_each_cost_by_its_share_of_the_workload() {
        let c = Costs {
            paper_write_amp: 18.0,
            write_amp: 20.0,
            zero_result_ios: 0.1,
            existing_ios: 1.05,
            runs: 4.0,
            filter_bits_per_entry: 10.0,
        };
        let w = Workload { reads: 1.0, zero_result_reads: 1.0, writes: 1.0, scans: 1.0 };
        assert!(near(w.cost(&c, 10.0, 1.0), (1.05 + 0.1 + 2.0 + 4.0) / 4.0, 1e-12));
        // Writing a block costs three lookup I/Os: the write term triples.
        assert!(near(w.cost(&c, 10.0, 3.0), (1.05 + 0.1 + 6.0 + 4.0) / 4.0, 1e-12));
        assert_eq!(Workload::default().cost(&c, 10.0, 1.0), 0.0);
    }
}
