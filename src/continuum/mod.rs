//! The Wacky continuum (Dayan & Idreos, "The Log-Structured Merge-Bush & the Wacky
//! Continuum", SIGMOD'19) as numbers: its knobs and named designs (`knobs`), the shape they
//! give a tree of a given size (`shape`), Monkey's filter allocation (`monkey`), what that shape
//! costs (`cost`), and the search for the knobs that make a workload cheapest (`tune`). It is
//! the engine's ground floor: pure math that imports nothing else of the crate. `MergePolicy::Wacky` builds trees of these
//! shapes; `wisckey tune` prints the search.

pub mod cost;
pub mod knobs;
pub mod monkey;
pub mod shape;
pub mod tune;

pub use cost::{Costs, Workload};
pub use knobs::{Capping, Knobs};
pub use shape::{LevelShape, Shape};
pub use tune::{tune, Candidate, Tuning, TuningInput};
