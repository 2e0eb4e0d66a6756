//! Merge policies.

pub mod leveled;
pub mod monkey;
pub mod tiered;

pub use leveled::LeveledPolicy;
pub use tiered::TieredPolicy;
