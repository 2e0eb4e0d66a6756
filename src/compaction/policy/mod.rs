//! Merge policies.

pub mod leveled;
pub mod monkey;
pub mod wacky;

pub use leveled::LeveledPolicy;
pub use wacky::WackyPolicy;
