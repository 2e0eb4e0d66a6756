//! The order of user keys: LevelDB's `Comparator` interface for a custom order, and `KeyOrder`,
//! the engine's handle on the order in force, which every structure that sorts keys holds (the
//! memtable, blocks and tables, merges, versions and file ranges, compactions, iterators).
//!
//! The default, bytewise order is no comparator object at all: `KeyOrder` checks once per
//! comparison whether a custom comparator is set and otherwise compares eight bytes at a time
//! inline (`key::compare_bytes`), so the default path pays no virtual call.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use crate::key::{self, compare_bytes, user_key, KIND_FOR_SEEK, MAX_SEQ};

/// The name the manifest records for the default bytewise order.
pub const BYTEWISE_NAME: &str = "wisckey.bytewise";

/// LevelDB's name for the same order: a comparator calling itself this is taken for the
/// built-in bytewise order (as LevelDB trusts names), and the manifest records `BYTEWISE_NAME`.
pub const LEVELDB_BYTEWISE_NAME: &str = "leveldb.BytewiseComparator";

/// A total order on user keys (LevelDB's `leveldb::Comparator`), set with
/// `Options::comparator`. The database records the comparator's name when it is created and
/// refuses to open with a comparator of another name (`Error::IncompatibleOptions`), since its
/// tables are sorted by the order they were written in.
///
/// **Equal keys must be equal bytes.** `compare(a, b) == Equal` must hold only when `a == b`:
/// the Bloom filters (of tables and memtables) hash the key's bytes and the value log checks a
/// value's key byte for byte, so two different byte strings the order calls equal would be
/// treated as two keys by some parts of the engine and as one by others. LevelDB has the same
/// caveat for its built-in Bloom filter.
///
/// The comparator is called from every thread that reads or writes, background threads
/// included, and must never panic.
pub trait Comparator: Send + Sync {
    /// The order's name, recorded in the manifest; change it whenever the order changes.
    fn name(&self) -> &str;

    /// The order of `a` and `b`.
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering;

    /// LevelDB's `FindShortestSeparator`: may change `start` to a shorter key `k` with
    /// `start <= k < limit`, for smaller index blocks. The default leaves it unchanged.
    fn find_shortest_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
        let _ = (start, limit);
    }

    /// LevelDB's `FindShortSuccessor`: may change `key` to a shorter key `k >= key`. The
    /// default leaves it unchanged.
    fn find_short_successor(&self, key: &mut Vec<u8>) {
        let _ = key;
    }
}

impl fmt::Debug for dyn Comparator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Comparator({:?})", self.name())
    }
}

/// The default order (lexicographic by unsigned bytes, shorter first on a common prefix), as
/// an object for code that wants to name it. The engine uses its own inline comparison for it,
/// whether `Options::comparator` is `None` or this.
#[derive(Debug, Clone, Copy, Default)]
pub struct BytewiseComparator;

impl Comparator for BytewiseComparator {
    fn name(&self) -> &str {
        LEVELDB_BYTEWISE_NAME
    }

    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        compare_bytes(a, b)
    }
}

/// Whether a comparator of this name orders keys bytewise (the engine then uses its own code).
fn is_bytewise_name(name: &str) -> bool {
    name == BYTEWISE_NAME || name == LEVELDB_BYTEWISE_NAME
}

/// The order of user and internal keys in force: bytewise (no comparator object) or a custom
/// comparator. Cloning it costs a reference-count increment when custom, nothing otherwise.
#[derive(Clone, Default)]
pub struct KeyOrder {
    custom: Option<Arc<dyn Comparator>>,
}

impl fmt::Debug for KeyOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyOrder({:?})", self.name())
    }
}

/// Two orders are the same order when their names are (the manifest's rule).
impl PartialEq for KeyOrder {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for KeyOrder {}

impl KeyOrder {
    /// The order `comparator` names (`None`, or a comparator with a bytewise name: bytewise).
    pub(crate) fn new(comparator: Option<&Arc<dyn Comparator>>) -> KeyOrder {
        KeyOrder { custom: comparator.filter(|c| !is_bytewise_name(c.name())).cloned() }
    }

    /// The name the manifest records.
    pub(crate) fn name(&self) -> &str {
        self.custom.as_deref().map_or(BYTEWISE_NAME, |c| c.name())
    }

    /// Whether this is the bytewise order (index fences and other byte-level shortcuts hold).
    #[inline]
    pub(crate) fn is_bytewise(&self) -> bool {
        self.custom.is_none()
    }

    /// The order of two user keys.
    #[inline(always)]
    pub(crate) fn compare_user(&self, a: &[u8], b: &[u8]) -> Ordering {
        match &self.custom {
            None => compare_bytes(a, b),
            Some(c) => c.compare(a, b),
        }
    }

    /// The order of two internal keys: user key ascending, then trailer (sequence number)
    /// descending.
    #[inline]
    pub(crate) fn compare_internal(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self.compare_user(user_key(a), user_key(b)) {
            Ordering::Equal => key::trailer(b).cmp(&key::trailer(a)),
            o => o,
        }
    }

    /// The smaller of two user keys (the first when equal).
    pub(crate) fn min_user<'a>(&self, a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
        if self.compare_user(b, a) == Ordering::Less {
            b
        } else {
            a
        }
    }

    /// The larger of two user keys (the first when equal).
    pub(crate) fn max_user<'a>(&self, a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
        if self.compare_user(b, a) == Ordering::Greater {
            b
        } else {
            a
        }
    }

    /// A short internal key `k` with `start <= k < limit` (LevelDB's InternalKeyComparator
    /// `FindShortestSeparator`), for index-block separators.
    pub(crate) fn shortest_separator(&self, start: &[u8], limit: &[u8]) -> Vec<u8> {
        let Some(c) = &self.custom else {
            return key::shortest_separator(start, limit);
        };
        let (us, ul) = (user_key(start), user_key(limit));
        let mut short = us.to_vec();
        c.find_shortest_separator(&mut short, ul);
        // Outside the contract (`start <= k < limit`): one past `limit` would misdirect index
        // searches, so none that is not below it is taken.
        if self.compare_user(&short, ul) != Ordering::Less {
            return start.to_vec();
        }
        self.shortened(start, us, short)
    }

    /// A short internal key `k >= key` (LevelDB's `FindShortSuccessor`) for a table's last
    /// index entry.
    pub(crate) fn short_successor(&self, ikey: &[u8]) -> Vec<u8> {
        let Some(c) = &self.custom else {
            return key::short_successor(ikey);
        };
        let uk = user_key(ikey);
        let mut short = uk.to_vec();
        c.find_short_successor(&mut short);
        self.shortened(ikey, uk, short)
    }

    /// `short` (a user key the comparator offered for `ikey`'s user key `uk`) as an internal
    /// key sorting before every entry of it, if it is shorter and after `uk`; else `ikey`.
    fn shortened(&self, ikey: &[u8], uk: &[u8], mut short: Vec<u8>) -> Vec<u8> {
        if short.len() < uk.len() && self.compare_user(uk, &short) == Ordering::Less {
            short.extend_from_slice(&key::pack_trailer(MAX_SEQ, KIND_FOR_SEEK).to_le_bytes());
            return short;
        }
        ikey.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, ValueKind};

    /// Reverse bytewise order, with LevelDB-style shortening hooks that are wrong on purpose
    /// when they would not shorten (the engine must check).
    struct Reverse;
    impl Comparator for Reverse {
        fn name(&self) -> &str {
            "test.reverse"
        }
        fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
            b.cmp(a)
        }
        fn find_short_successor(&self, key: &mut Vec<u8>) {
            key.truncate(1);
        }
    }

    #[test]
    fn a_custom_order_sorts_internal_keys_by_it_and_newest_first() {
        let c: Arc<dyn Comparator> = Arc::new(Reverse);
        let o = KeyOrder::new(Some(&c));
        assert!(!o.is_bytewise() && o.name() == "test.reverse");
        let (a5, a3) = (make_internal_key(b"a", 5, ValueKind::Value), make_internal_key(b"a", 3, ValueKind::Value));
        let b = make_internal_key(b"b", 1, ValueKind::Value);
        assert_eq!(o.compare_internal(&b, &a5), Ordering::Less, "reverse: b before a");
        assert_eq!(o.compare_internal(&a5, &a3), Ordering::Less, "newest first");
        assert_eq!(o.max_user(b"a", b"b"), b"a");
    }

    #[test]
    fn a_successor_that_would_sort_before_its_key_is_not_taken() {
        let c: Arc<dyn Comparator> = Arc::new(Reverse);
        let o = KeyOrder::new(Some(&c));
        // "ab" -> "a": shorter, but in reverse order "a" sorts after "ab": taken.
        let k = make_internal_key(b"ab", 4, ValueKind::Value);
        let s = o.short_successor(&k);
        assert_eq!(user_key(&s), b"a");
        assert_ne!(o.compare_internal(&s, &k), Ordering::Less);
        // A key of one byte cannot shorten.
        let k = make_internal_key(b"z", 4, ValueKind::Value);
        assert_eq!(o.short_successor(&k), k);
    }

    /// Offers `limit` itself as the separator, which the contract (`k < limit`) excludes.
    struct Careless;
    impl Comparator for Careless {
        fn name(&self) -> &str {
            "test.careless"
        }
        fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
            a.cmp(b)
        }
        fn find_shortest_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
            *start = limit.to_vec();
        }
    }

    #[test]
    fn a_separator_at_or_past_the_limit_is_not_taken() {
        let c: Arc<dyn Comparator> = Arc::new(Careless);
        let o = KeyOrder::new(Some(&c));
        let (s, l) = (make_internal_key(b"abcdef", 4, ValueKind::Value), make_internal_key(b"b", 9, ValueKind::Value));
        assert_eq!(o.shortest_separator(&s, &l), s);
    }

    #[test]
    fn comparators_named_bytewise_are_the_built_in_order() {
        let c: Arc<dyn Comparator> = Arc::new(BytewiseComparator);
        assert!(KeyOrder::new(Some(&c)).is_bytewise());
        assert_eq!(KeyOrder::new(Some(&c)), KeyOrder::default());
        assert_eq!(KeyOrder::default().name(), BYTEWISE_NAME);
    }
}
