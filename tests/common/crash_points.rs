//! The crash-point loop the crash-enumeration tests share: which filesystem calls to crash
//! after (every one, or a stride that keeps the count bounded), the crash mode for each in
//! turn, a filesystem armed to halt there, and the check that what recovery shows is the
//! state after a prefix of the attempted steps that holds every durable one.

use std::fmt::Debug;

use wisckey::fs::{CrashMode, FaultFs};

/// The modes crash points take in turn: unsynced data dropped, torn, or corrupted.
pub const MODES: [CrashMode; 3] = [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced];

/// Crash points for a run of `total` mutating filesystem calls: after every call when
/// `max_points` allows, else after every stride-th so about `max_points` are tried; each
/// point with the next of `MODES`.
pub fn crash_points(total: u64, max_points: u64) -> impl Iterator<Item = (u64, CrashMode)> {
    let stride = (total / max_points.max(1)).max(1);
    (0..=total).step_by(stride as usize).enumerate().map(|(i, n)| (n, MODES[i % MODES.len()]))
}

/// An in-memory filesystem that halts after `n` mutating calls (seeded by `n`, so a torn or
/// corrupted write differs from point to point).
pub fn halting_after(n: u64) -> FaultFs {
    let fs = FaultFs::in_memory(n);
    fs.set_crash_after_ops(n);
    fs
}

/// The index `j >= floor` of the state in `states` (the state after each attempted step,
/// `floor` the last one whose success promised durability) that recovery's `got` equals,
/// preferring the latest; panics naming `ctx` when there is none.
pub fn prefix_state<S: PartialEq + Debug>(states: &[S], floor: usize, got: &S, ctx: &str) -> usize {
    match (floor..states.len()).rev().find(|&j| states[j] == *got) {
        Some(j) => j,
        None => panic!(
            "{ctx}: recovered {got:?}, which is no state after a prefix of the steps holding every durable one \
             (durable through step {floor} of {})",
            states.len().saturating_sub(1)
        ),
    }
}
