//! Custom table filters (LevelDB's `FilterPolicy`), set with `Options::filter_policy` in place
//! of the built-in Bloom filter. A table records the name of the policy that built its filter
//! (docs/format/sst.md, the properties record); a table whose filter another policy built is
//! read without its filter, as LevelDB does, so changing the policy never makes a lookup miss.

use std::fmt;

/// A filter over the user keys of one table (LevelDB's `leveldb::FilterPolicy`): a compact
/// summary that answers "certainly absent" or "maybe present".
///
/// The engine builds one filter per table (per segment of a light-weight-compacted table) from
/// all of its distinct user keys, and asks it before it reads the table for a point lookup.
/// As with the built-in filter, equal keys must be equal bytes (see `Comparator`).
///
/// Called from the threads that write tables (flushes, compactions) and from every reader;
/// must never panic.
pub trait FilterPolicy: Send + Sync {
    /// The policy's name, recorded in every table it builds a filter for; change it whenever
    /// the filter's encoding changes.
    fn name(&self) -> &str;

    /// A filter over `keys` (distinct user keys, in the table's order).
    fn create_filter(&self, keys: &[&[u8]]) -> Vec<u8>;

    /// False only when `key` was not among the keys `filter` was created over.
    fn key_may_match(&self, key: &[u8], filter: &[u8]) -> bool;
}

impl fmt::Debug for dyn FilterPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FilterPolicy({:?})", self.name())
    }
}
