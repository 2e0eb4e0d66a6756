//! Merge policies.

pub mod leveled;
pub mod monkey;

pub use leveled::LeveledPolicy;
