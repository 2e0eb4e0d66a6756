//! Key-value separation (WiscKey): large values stay in the log (the value log, vLog) and the
//! LSM-tree holds a `ValuePointer` to them. This module encodes pointers and reads values back,
//! verifying that what it read is the value of the key asked for.

pub mod pointer;
pub mod reader;

pub use pointer::ValuePointer;
pub use reader::{Access, VlogReader};
