//! Monkey's filter allocation (Dayan et al., SIGMOD'17; Eq 12 of the Wacky paper): for a total
//! filter memory, the false-positive rates that minimise the expected number of runs a
//! zero-result lookup reads in vain. A lookup probes one filter per run, so the cost is the sum
//! of the runs' rates; with `bits(p) = −ln p / ln²2` bits per key, the optimum gives each run a
//! rate proportional to its entry count. Small runs (L0 files, upper levels) get many bits,
//! the largest run a little fewer than the average: at equal memory the sum of rates drops
//! several-fold against the same bits for every run.

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
