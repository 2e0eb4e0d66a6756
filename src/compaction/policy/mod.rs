//! Merge policies.

pub mod leveled;

pub use leveled::LeveledPolicy;
