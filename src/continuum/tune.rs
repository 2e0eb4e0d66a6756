//! §5's search: for a workload, the knobs whose shape has the least average cost per operation
//! (Eq 16), found by sweeping the base ratio T along projections of the continuum (each fixes
//! K, Z, X and the rule for C), next to the named designs at their default knobs. Where a named
//! design is predicted within the model's resolution of the optimum (`TuningInput::preset_margin`)
//! the search answers with that design: the model cannot rank designs that close, and the presets
//! are the shapes the project measures most.

use super::cost::{Costs, Workload};
use super::knobs::{Capping, Knobs};
use super::shape::Shape;

/// What the search needs besides the workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TuningInput {
    /// The operation mix.
    pub workload: Workload,
    /// N: bytes of data the tree will hold.
    pub data_bytes: f64,
    /// F: the write buffer.
    pub buffer_bytes: f64,
    /// M: filter memory per entry, spread by Monkey.
    pub filter_bits_per_entry: f64,
    /// B: entries per block (a compaction writes B entries per I/O).
    pub entries_per_block: f64,
    /// ϕ: what writing one block in compaction costs, in lookup I/Os
    /// (`cost::DEFAULT_WRITE_COST_RATIO`; 1 for the paper's storage-bound tree).
    pub write_cost_ratio: f64,
    /// The most levels the tree may have.
    pub max_levels: usize,
    /// How close, as a fraction of the optimum's cost, a preset's predicted cost must be for the
    /// search to answer with the preset (`DEFAULT_PRESET_MARGIN`; 0: always the optimum).
    pub preset_margin: f64,
}

/// The model's resolution when it ranks two designs. Its components come close to the machine
/// but not exactly (docs/BENCHMARKS.md §9), and between designs predicted within a few per cent
/// of each other its ranking did not hold there, while a design predicted clearly ahead of the
/// presets did run ahead of them (docs/BENCHMARKS.md §10).
pub const DEFAULT_PRESET_MARGIN: f64 = 0.03;

/// One configuration with its predicted costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The design's name (a preset, or the projection the search found it on).
    pub name: String,
    /// Its knobs.
    pub knobs: Knobs,
    /// The tree they give the data.
    pub shape: Shape,
    /// What that tree costs.
    pub costs: Costs,
    /// Θ: the workload's average cost per operation (I/Os).
    pub cost: f64,
}

/// The search's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuning {
    /// The answer: the cheapest preset within `preset_margin` of the optimum, else the optimum.
    pub best: Candidate,
    /// The cheapest configuration the search found (the same as `best` when no preset is that
    /// close).
    pub optimum: Candidate,
    /// The named designs at their default knobs, for comparison.
    pub presets: Vec<Candidate>,
}

/// The named designs at the knobs `MergePolicy`'s presets use.
pub fn presets() -> Vec<(&'static str, Knobs)> {
    vec![
        ("leveling", Knobs::leveling(10.0)),
        ("tiering", Knobs::tiering(10.0)),
        ("lazy-leveling", Knobs::lazy_leveling(10.0)),
        ("scll", Knobs::scll(4.0)),
        ("bush", Knobs::bush(2.0, 1.0)),
    ]
}

/// A projection of the continuum: its name and its knobs at base ratio T.
type Projection = (String, Box<dyn Fn(f64) -> Knobs>);

/// The projections the search sweeps T along.
fn projections() -> Vec<Projection> {
    let mut p: Vec<Projection> = vec![
        ("leveling".into(), Box::new(Knobs::leveling)),
        ("tiering".into(), Box::new(Knobs::tiering)),
        ("lazy-leveling".into(), Box::new(Knobs::lazy_leveling)),
        ("scll".into(), Box::new(Knobs::scll)),
        ("cll C=1".into(), Box::new(|t| Knobs { c: Capping::Ratio(1.0), ..Knobs::lazy_leveling(t) })),
    ];
    for x in [1.5, 2.0, 3.0] {
        p.push((format!("bush X={x} C=1"), Box::new(move |t| Knobs { x, ..Knobs::bush(t, 1.0) })));
        p.push((format!("bush X={x} C=T-1"), Box::new(move |t| Knobs { x, ..Knobs::bush(t, t - 1.0) })));
    }
    // Dostoevsky's fluid LSM-tree: the greediness of the smaller and the largest levels apart.
    for k in [0.0, 0.5, 1.0] {
        for z in [0.0, 0.5, 1.0] {
            p.push((format!("fluid K={k} Z={z}"), Box::new(move |t| Knobs { k, z, ..Knobs::leveling(t) })));
        }
    }
    p
}

/// Base ratios the search tries: Θ's balance point lies well below 100 (§5).
const T_RANGE: std::ops::RangeInclusive<u32> = 2..=64;

/// `knobs` evaluated for `input`.
pub fn candidate(name: String, knobs: Knobs, input: &TuningInput) -> Candidate {
    let shape = Shape::for_data(knobs, input.data_bytes, input.buffer_bytes, 2, input.max_levels);
    let costs = shape.costs(input.filter_bits_per_entry);
    let cost = input.workload.cost(&costs, input.entries_per_block, input.write_cost_ratio);
    Candidate { name, knobs, shape, costs, cost }
}

/// The cheapest configuration for `input` over all projections and base ratios, and the presets.
pub fn tune(input: &TuningInput) -> Tuning {
    let presets: Vec<Candidate> =
        presets().into_iter().map(|(name, k)| candidate(name.to_string(), k, input)).collect();
    let searched = projections()
        .into_iter()
        .flat_map(|(name, knobs_at)| T_RANGE.map(move |t| (name.clone(), knobs_at(f64::from(t)))).collect::<Vec<_>>());
    let optimum = searched
        .map(|(name, k)| candidate(name, k, input))
        .chain(presets.iter().cloned())
        .min_by(|a, b| a.cost.total_cmp(&b.cost))
        .expect("the search space is never empty");
    let best = nearest_preset(&presets, &optimum, input.preset_margin).unwrap_or_else(|| optimum.clone());
    Tuning { best, optimum, presets }
}

/// The cheapest preset whose cost is within `margin` of the optimum's, if any.
fn nearest_preset(presets: &[Candidate], optimum: &Candidate, margin: f64) -> Option<Candidate> {
    let bound = optimum.cost * (1.0 + margin.max(0.0));
    presets.iter().filter(|p| p.cost <= bound).min_by(|a, b| a.cost.total_cmp(&b.cost)).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(workload: Workload) -> TuningInput {
        TuningInput {
            workload,
            data_bytes: 1e9,
            buffer_bytes: 4e6,
            filter_bits_per_entry: 10.0,
            entries_per_block: 32.0,
            write_cost_ratio: 1.0,
            max_levels: 7,
            preset_margin: 0.0,
        }
    }

    #[test]
    fn a_preset_within_the_margin_of_the_optimum_is_the_answer_and_one_outside_is_not() {
        let w = Workload { writes: 0.1, reads: 0.45, zero_result_reads: 0.45, ..Default::default() };
        let exact = tune(&input(w));
        let nearest = exact.presets.iter().min_by(|a, b| a.cost.total_cmp(&b.cost)).unwrap().clone();
        let gap = nearest.cost / exact.optimum.cost - 1.0;
        assert!(gap > 0.0, "the optimum here is no preset: {} {}", exact.optimum.name, exact.optimum.cost);
        assert_eq!(exact.best, exact.optimum);
        let wide = tune(&TuningInput { preset_margin: gap * 1.01, ..input(w) });
        assert_eq!(wide.best, nearest, "a preset {gap} behind, margin {}", gap * 1.01);
        assert_eq!(wide.optimum, exact.optimum);
        let narrow = tune(&TuningInput { preset_margin: gap * 0.99, ..input(w) });
        assert_eq!(narrow.best, exact.optimum);
    }

    #[test]
    fn the_chosen_configuration_costs_no_more_than_any_preset() {
        for w in [
            Workload { writes: 0.9, reads: 0.1, ..Default::default() },
            Workload { writes: 0.1, reads: 0.45, zero_result_reads: 0.45, ..Default::default() },
            Workload { writes: 0.6, scans: 0.4, ..Default::default() },
        ] {
            let t = tune(&input(w));
            assert!(t.presets.iter().all(|p| t.best.cost <= p.cost + 1e-12), "{w:?}: {} {}", t.best.name, t.best.cost);
            assert_eq!(t.presets.len(), presets().len());
        }
    }

    #[test]
    fn a_costlier_block_write_moves_a_write_heavy_mix_to_a_lazier_design() {
        let w = Workload { writes: 0.9, reads: 0.1, ..Default::default() };
        let disk = tune(&input(w)).best;
        let memory =
            tune(&TuningInput { write_cost_ratio: crate::continuum::cost::DEFAULT_WRITE_COST_RATIO, ..input(w) }).best;
        assert!(memory.costs.write_amp <= disk.costs.write_amp, "{disk:?} against {memory:?}");
        assert!(memory.costs.write_amp < 4.0, "{memory:?}");
    }

    #[test]
    fn writes_alone_pick_a_lazy_design_and_scans_alone_a_greedy_one() {
        let writes = tune(&input(Workload { writes: 1.0, ..Default::default() })).best;
        assert!(writes.costs.write_amp < 4.0, "{} writes {:?}", writes.name, writes.costs);
        let scans = tune(&input(Workload { scans: 1.0, ..Default::default() })).best;
        assert!(scans.costs.runs <= 3.0, "{} probes {:?}", scans.name, scans.costs);
    }
}
