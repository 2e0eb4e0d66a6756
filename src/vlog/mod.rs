//! Key-value separation (WiscKey): large values stay in the log (the value log, vLog) and the
//! LSM-tree holds a `ValuePointer` to them. This module encodes pointers and reads values back,
//! verifying that what it read is the value of the key asked for, one at a time or many in
//! parallel (`prefetch`).

pub mod batch;
mod cache;
pub mod pointer;
pub mod prefetch;
pub mod reader;
mod request;
mod uring;

pub use pointer::ValuePointer;
pub use prefetch::PendingRead;
pub use reader::{Access, CacheUse, VlogReader};
