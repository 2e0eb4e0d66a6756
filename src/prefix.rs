//! Prefix extractors (RocksDB's `prefix_extractor`): what part of a key a table's prefix
//! Bloom filter records, so that a prefix iteration or a prefix-bounded seek skips the tables
//! that hold no key of the prefix.

use std::fmt;

/// Maps a key to its prefix (RocksDB's `SliceTransform`), per keyspace
/// (`Options::prefix_extractor`). Every table records the extractor's name and keeps a Bloom
/// filter over the distinct prefixes of its keys; a read uses that filter only when the
/// keyspace's extractor has the same name, so reopening with another extractor (or none) is
/// safe.
///
/// The contract the filter relies on: for a key `k` in the domain, `prefix(k)` is a prefix of
/// `k`, and every key that starts with `prefix(k)` is in the domain and has the same prefix.
/// (`FixedPrefix` keeps it.) Keys out of the domain (`None`) get no prefix-filter entry and
/// are never skipped. Called from flushes, compactions and every prefix read; must not panic.
pub trait PrefixExtractor: Send + Sync {
    /// The extractor's name, recorded in every table built with it; change it whenever what
    /// `prefix` returns changes.
    fn name(&self) -> &str;

    /// The prefix of `key`, or `None` when `key` is out of the extractor's domain.
    fn prefix<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]>;
}

impl fmt::Debug for dyn PrefixExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrefixExtractor({:?})", self.name())
    }
}

/// The first `len` bytes of a key (RocksDB's `NewFixedPrefixTransform(len)`); keys shorter
/// than `len` are out of the domain.
#[derive(Debug, Clone)]
pub struct FixedPrefix {
    len: usize,
    name: String,
}

impl FixedPrefix {
    /// An extractor of the first `len_bytes` bytes (named `wisckey.FixedPrefix.<len>`).
    pub fn new(len_bytes: usize) -> Self {
        FixedPrefix { len: len_bytes, name: format!("wisckey.FixedPrefix.{len_bytes}") }
    }
}

impl PrefixExtractor for FixedPrefix {
    fn name(&self) -> &str {
        &self.name
    }

    fn prefix<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        key.get(..self.len)
    }
}

/// The smallest key greater than every key starting with `prefix` (`None`: there is none,
/// the prefix is empty or all `0xff`).
pub(crate) fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let end = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut next = prefix[..=end].to_vec();
    next[end] += 1;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_prefix_cuts_keys_and_leaves_short_ones_out_of_the_domain() {
        let p = FixedPrefix::new(3);
        assert_eq!(p.prefix(b"abcdef"), Some(&b"abc"[..]));
        assert_eq!(p.prefix(b"abc"), Some(&b"abc"[..]));
        assert_eq!(p.prefix(b"ab"), None);
        assert_eq!(p.name(), "wisckey.FixedPrefix.3");
    }
}
