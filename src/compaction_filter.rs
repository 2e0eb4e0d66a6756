//! Compaction filters (RocksDB's `CompactionFilter`): a per-keyspace hook compaction calls on
//! the newest version of each key that every reader sees, to keep it, remove it or change its
//! value. A removed or changed separated value becomes value-log garbage, which GC reclaims.
//! This file holds the trait, its decision, and the guarded call the engine makes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// What a compaction filter decides for one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterDecision {
    /// Keep the entry as it is.
    Keep,
    /// Remove the key: reads no longer see it (older versions included).
    Remove,
    /// Keep the key with this value instead (the key itself cannot change).
    ChangeValue(Vec<u8>),
}

/// Called by compaction on entries (per keyspace, `Options::compaction_filter`). Only the
/// newest version of a key in the compaction's inputs is offered, and only when it is newer
/// than every snapshot and iterator held (so none sees the filter's effect; such an entry is
/// offered by a later compaction); merge operands are not offered. It runs on background
/// threads, concurrently: it must be quick and deterministic. A panic keeps the entry.
pub trait CompactionFilter: Send + Sync {
    /// The filter's name (for logs).
    fn name(&self) -> &str;

    /// Decide for `key`, whose value is `value`, in a compaction writing to `level`.
    fn filter(&self, level: usize, key: &[u8], value: &[u8]) -> FilterDecision;
}

/// Ask `filter` about one entry; a panic keeps it (logged).
pub(crate) fn decide(filter: &Arc<dyn CompactionFilter>, level: usize, key: &[u8], value: &[u8]) -> FilterDecision {
    match catch_unwind(AssertUnwindSafe(|| filter.filter(level, key, value))) {
        Ok(d) => d,
        Err(_) => {
            tracing::warn!(filter = filter.name(), "compaction filter panicked; keeping the entry");
            FilterDecision::Keep
        }
    }
}
