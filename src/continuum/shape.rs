//! The structure a point of the continuum gives a tree of a given size: the number of levels
//! (Eq 10), the capacity ratios (Eq 8), the capacities (Eq 9) and the runs each level may hold
//! (Eq 13), set top-down from the largest level's size as the data grows (App. E).

use super::knobs::{Capping, Knobs};

/// Ratios above this are treated as this (X > 1 squares them level after level).
const MAX_RATIO: f64 = 1e12;

/// One level of a `Shape`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelShape {
    /// r_i: capacity ratio to the level above (for level 1: to the write buffer).
    pub ratio: f64,
    /// N_i: the level's capacity in bytes.
    pub capacity_bytes: f64,
    /// g_i = N_i / N_{i−1}: arrivals (runs of the full level above; for level 1, flushes of
    /// F) that fill the level. r_i where L is exact; for level 1 less after Eq 10's ceiling.
    pub arrivals: f64,
    /// a_i: the most runs it holds (Eq 13, rounded, at least 1).
    pub max_runs: usize,
}

/// Levels of a tree: index 0 is the paper's level 1 (where the buffer is flushed, our L0),
/// the last is the largest level L.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// The knobs the shape is for.
    pub knobs: Knobs,
    /// C resolved (SCLL's C = L computed from the data size).
    pub capping: f64,
    /// N: the data size in bytes the shape is for.
    pub total_bytes: f64,
    /// F: the write buffer in bytes.
    pub buffer_bytes: f64,
    /// Level 1 (our L0) first, the largest level last.
    pub levels: Vec<LevelShape>,
}

impl Shape {
    /// The shape for `total_bytes` of data: Eq 10's level count, kept within
    /// `[min_levels, max_levels]` (at least 2: the flush level and a largest level).
    pub fn for_data(knobs: Knobs, total_bytes: f64, buffer_bytes: f64, min_levels: usize, max_levels: usize) -> Self {
        let f = buffer_bytes.max(1.0);
        let c = resolve_capping(&knobs, total_bytes, f);
        let levels = level_count(&knobs, c, total_bytes / f).clamp(min_levels.max(2), max_levels.max(2));
        build(knobs, c, total_bytes, f, levels)
    }

    /// App. E: the shape around a largest level of `largest_bytes`: the others together hold
    /// a C-th of it, and the level count follows from the total this implies.
    pub fn top_down(knobs: Knobs, largest_bytes: f64, buffer_bytes: f64, min_levels: usize, max_levels: usize) -> Self {
        let f = buffer_bytes.max(1.0);
        let mut c = match knobs.c {
            Capping::Ratio(c) => c,
            Capping::Levels => 1.0,
        };
        if knobs.c == Capping::Levels {
            // C = log_T(N / F) with N = N_L (C + 1) / C: a fixed point, reached in a few steps.
            for _ in 0..16 {
                c = log(largest_bytes * (c + 1.0) / c / f, knobs.t).max(1.0);
            }
        }
        let total = largest_bytes * (c + 1.0) / c;
        let levels = level_count(&knobs, c, total / f).clamp(min_levels.max(2), max_levels.max(2));
        build(knobs, c, total, f, levels)
    }

    /// Index of the largest level.
    pub fn largest(&self) -> usize {
        self.levels.len() - 1
    }
}

fn log(v: f64, base: f64) -> f64 {
    v.ln() / base.ln()
}

/// C for `knobs` at `total` bytes: SCLL's C = L, approximated by log_T(N / F) (§3, note 3).
fn resolve_capping(knobs: &Knobs, total: f64, f: f64) -> f64 {
    match knobs.c {
        Capping::Ratio(c) => c,
        Capping::Levels => log(total / f, knobs.t).max(1.0),
    }
}

/// Eq 10: L = 1 + ⌈log_X((X − 1) · log_T(N/F · 1/(C+1) · (T−1)/T) + 1)⌉; for X = 1 (Eq 3)
/// L = 1 + ⌈log_T(N/F · 1/(C+1) · (T−1)/T)⌉. A tree smaller than one full level 1 has 1.
fn level_count(k: &Knobs, c: f64, n_over_f: f64) -> usize {
    let inner = n_over_f / (c + 1.0) * (k.t - 1.0) / k.t;
    if inner <= 1.0 {
        return 1;
    }
    let base_levels = log(inner, k.t);
    let extra = if is_one(k.x) { base_levels } else { log((k.x - 1.0) * base_levels + 1.0, k.x) };
    // A tolerance keeps an exact power from rounding up to one level more.
    1 + (extra - 1e-9).ceil().max(0.0) as usize
}

fn is_one(x: f64) -> bool {
    (x - 1.0).abs() < 1e-9
}

/// Eq 8, 9 and 13 for `levels` levels.
fn build(knobs: Knobs, c: f64, total: f64, f: f64, levels: usize) -> Shape {
    let t = knobs.t;
    let mut out = Vec::with_capacity(levels);
    for i in 1..levels {
        let k = (levels - i - 1) as i32;
        // r_i = T^(X^k); the capacity is N/(C+1) · T^(−(1 + X + … + X^(k−1))) · (r_i − 1)/r_i,
        // which is Eq 9's (T/r_i)^(1/(X−1)) written so that X = 1 (Eq 2) needs no limit.
        let ratio = t.powf(knobs.x.powi(k)).min(MAX_RATIO);
        let exponent: f64 = (0..k).map(|m| knobs.x.powi(m)).sum();
        let capacity_bytes = total / (c + 1.0) * t.powf(-exponent) * (ratio - 1.0) / ratio;
        let above = out.last().map_or(f, |l: &LevelShape| l.capacity_bytes);
        let arrivals = capacity_bytes / above.max(f64::MIN_POSITIVE);
        out.push(LevelShape { ratio, capacity_bytes, arrivals, max_runs: runs((ratio - 1.0).powf(knobs.k)) });
    }
    let capacity_bytes = total * c / (c + 1.0);
    let above = out.last().map_or(f, |l| l.capacity_bytes);
    out.push(LevelShape {
        ratio: c * t / (t - 1.0),
        capacity_bytes,
        arrivals: capacity_bytes / above.max(f64::MIN_POSITIVE),
        max_runs: runs(c.powf(knobs.z)),
    });
    Shape { knobs, capping: c, total_bytes: total, buffer_bytes: f, levels: out }
}

fn runs(a: f64) -> usize {
    a.round().clamp(1.0, 1e9) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: f64 = 1.0;

    fn caps(s: &Shape) -> Vec<f64> {
        s.levels.iter().map(|l| l.capacity_bytes).collect()
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-9 * y.abs().max(1.0))
    }

    #[test]
    fn leveling_at_t10_holds_levels_of_10_100_and_1000_buffers() {
        // Eq 3: N/F · (T−1)/(T(C+1)) = 1111.1 · 9/100 = 100 = T², so L = 3; Eq 2 gives 10F,
        // 100F and (Eq 2, i = L) N · C/(C+1) = 1000F.
        let s = Shape::for_data(Knobs::leveling(10.0), 10_000.0 / 9.0, F, 2, 7);
        assert_eq!(s.levels.len(), 3);
        assert!(close(&caps(&s), &[10.0, 100.0, 1000.0]), "{:?}", caps(&s));
        assert!(s.levels.iter().all(|l| l.max_runs == 1));
    }

    #[test]
    fn qlsm_bush_at_t2_c1_squares_its_ratios_towards_level_1() {
        // Eq 10: N = 512F gives log_2(N/F · 1/2 · 1/2) = 7, log_2(7 + 1) = 3, L = 4. Eq 8:
        // r = 16, 4, 2 (and C·T/(T−1) = 2 at L); Eq 9: 15N/256, 3N/16, N/4, N/2; Eq 13:
        // 15, 3, 1 runs and C^0 = 1.
        let s = Shape::for_data(Knobs::bush(2.0, 1.0), 512.0, F, 2, 7);
        let ratios: Vec<f64> = s.levels.iter().map(|l| l.ratio).collect();
        assert!(close(&ratios, &[16.0, 4.0, 2.0, 2.0]), "{ratios:?}");
        assert!(close(&caps(&s), &[30.0, 96.0, 128.0, 256.0]), "{:?}", caps(&s));
        let runs: Vec<usize> = s.levels.iter().map(|l| l.max_runs).collect();
        assert_eq!(runs, vec![15, 3, 1, 1]);
    }

    #[test]
    fn tiering_keeps_t_minus_1_runs_everywhere() {
        let s = Shape::for_data(Knobs::tiering(4.0), 1e6, F, 2, 30);
        assert!(s.levels.iter().all(|l| l.max_runs == 3), "{s:?}");
        let smaller: f64 = s.levels[..s.largest()].iter().map(|l| l.capacity_bytes).sum();
        // The smaller levels hold N/(C+1), less a level-1-sized sliver the sum never reaches.
        assert!((smaller * 3.0 / s.levels[s.largest()].capacity_bytes - 1.0).abs() < 0.01);
    }

    #[test]
    fn top_down_capacities_follow_the_largest_level_and_add_a_level_when_it_outgrows_them() {
        let k = Knobs::leveling(10.0);
        let small = Shape::top_down(k, 900.0, F, 2, 7);
        assert_eq!(small.levels.len(), 3, "N = 1000: {small:?}");
        assert!((small.levels[1].capacity_bytes - 90.0).abs() < 1e-9, "a ninth of N_L, less level 1");
        let grown = Shape::top_down(k, 1100.0, F, 2, 7);
        assert_eq!(grown.levels.len(), 4, "N = 1222 passes 10F · 100 · 10/9");
        assert_eq!(Shape::top_down(k, 900.0, F, 5, 7).levels.len(), 5, "never fewer than the data's levels");
        assert_eq!(Shape::top_down(k, 0.0, F, 1, 7).levels.len(), 2, "an empty tree has L0 and a largest level");
    }

    #[test]
    fn scll_caps_the_largest_level_at_the_level_count() {
        let s = Shape::for_data(Knobs::scll(4.0), 4096.0, F, 2, 30);
        // C = log_4(4096) = 6.
        assert!((s.capping - 6.0).abs() < 1e-9, "{}", s.capping);
        let td = Shape::top_down(Knobs::scll(4.0), s.levels[s.largest()].capacity_bytes, F, 2, 30);
        assert!((td.total_bytes / s.total_bytes - 1.0).abs() < 1e-6, "top-down finds the same N");
    }
}
