//! Index fences: a dense copy of 8 bytes of every index key, so an index seek binary-searches
//! one small, cache-resident array instead of hopping through the index block (restart
//! array, then entry, per step: two dependent cache misses each).
//!
//! Only the bytes after the prefix shared by the index user keys are kept, so the 8 bytes
//! still tell keys apart (db_bench keys share their first ~10 digits within a table). The
//! last index key is often a short successor ("1" after "00..0153000") that shares nothing:
//! keys after the common-prefix range get the fence `u64::MAX`.

use std::sync::Arc;

use crate::internal_iter::InternalIterator;
use crate::key::user_key;

use super::block::{Block, BlockIter};

/// Fences of one index block whose every entry is a restart point (the writer uses restart
/// interval 1 for index blocks), so entry `i` is restart interval `i`.
pub struct IndexFences {
    /// Bytes every index user key but the last few starts with.
    common: Vec<u8>,
    /// Per index entry: the 8 user-key bytes after `common`, big-endian, zero-padded, or
    /// `u64::MAX` for keys past every key starting with `common`. Non-decreasing, because
    /// index keys are sorted.
    keys: Vec<u64>,
}

/// The 8 bytes of `uk` after `skip`, big-endian and zero-padded: comparing two of them
/// orders the keys like comparing the keys themselves, except that equal values may hide
/// different keys.
#[inline]
fn fence(uk: &[u8], skip: usize) -> u64 {
    let mut b = [0u8; 8];
    let rest = uk.get(skip..).unwrap_or(&[]);
    let n = rest.len().min(8);
    b[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(b)
}

/// The user keys of `index`, one per entry, when every entry is a restart point (`None`:
/// it is not, or the block does not decode, or it is empty).
pub(super) fn index_user_keys(index: &Arc<Block>) -> Option<Vec<Vec<u8>>> {
    let mut it = BlockIter::new(Arc::clone(index));
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(index.num_restarts());
    it.seek_to_first().ok()?;
    while it.valid() {
        if keys.len() >= index.num_restarts() || !it.at_restart(keys.len()) {
            return None;
        }
        keys.push(user_key(it.key()).to_vec());
        it.next().ok()?;
    }
    (keys.len() == index.num_restarts() && !keys.is_empty()).then_some(keys)
}

/// The first and the last but one of sorted, non-empty `keys`: what they share, every key
/// between shares (the last is often a short successor that shares nothing).
pub(super) fn ends(keys: &[Vec<u8>]) -> (&[u8], &[u8]) {
    (&keys[0], &keys[keys.len().saturating_sub(2)])
}

/// How many leading bytes `a` and `b` share.
pub(super) fn shared_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The fence of each of `keys` below `common`. A key without that prefix sorts before every
/// key with it or after every one: it gets 0 or `u64::MAX`, which never contradicts the order.
pub(super) fn fences_of<'a>(keys: &'a [Vec<u8>], common: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
    keys.iter().map(move |k| match k.starts_with(common) {
        true => fence(k, common.len()),
        false if k.as_slice() < common => 0,
        false => u64::MAX,
    })
}

impl IndexFences {
    /// Fences of `index`, or `None` when the block does not have one entry per restart or
    /// does not decode (seeks then search the block itself, which reports any damage).
    pub fn build(index: &Arc<Block>) -> Option<IndexFences> {
        let keys = index_user_keys(index)?;
        let (first, last_but_one) = ends(&keys);
        let common = first[..shared_len(first, last_but_one)].to_vec();
        let fences = fences_of(&keys, &common).collect();
        Some(IndexFences { common, keys: fences })
    }

    /// Fences already made: `keys` non-decreasing, each the fence below `common` of a key
    /// (`fences_of`), as a DTable's merged fences are (`cascade.rs`).
    pub(super) fn from_sorted(common: Vec<u8>, keys: Vec<u64>) -> IndexFences {
        debug_assert!(keys.windows(2).all(|w| w[0] <= w[1]), "fences must not decrease");
        IndexFences { common, keys }
    }

    /// The prefix the fences are taken below.
    #[cfg(test)]
    pub(super) fn common(&self) -> &[u8] {
        &self.common
    }

    /// Bytes the fences hold in memory.
    #[cfg(test)]
    pub(super) fn len_bytes(&self) -> usize {
        self.common.len() + 8 * self.keys.len()
    }

    /// The entries `lo..=hi` that can hold the first index key >= an internal key with user
    /// key `uk`: every entry before `lo` is smaller, and the entry after `hi` (if any) is
    /// larger.
    #[inline]
    pub fn candidates(&self, uk: &[u8]) -> (usize, usize) {
        let t = if uk.starts_with(&self.common) {
            fence(uk, self.common.len())
        } else if uk < &self.common[..] {
            return (0, 0); // before every key
        } else {
            u64::MAX // after every key that starts with `common`
        };
        let lo = self.keys.partition_point(|&k| k < t);
        let hi = lo + self.keys[lo..].partition_point(|&k| k == t);
        let last = self.keys.len() - 1;
        (lo.min(last), hi.min(last))
    }

    /// The entry that is provably the first index key >= every internal key with user key
    /// `uk`, when the fences alone tell: its fence is strictly above `uk`'s and every fence
    /// before it strictly below (`None` when two fences tie with `uk`'s or `uk` lies outside
    /// the common prefix: the index block must then be searched).
    #[inline]
    pub fn exact(&self, uk: &[u8]) -> Option<usize> {
        if !uk.starts_with(&self.common) {
            return None;
        }
        let t = fence(uk, self.common.len());
        let lo = self.keys.partition_point(|&k| k < t);
        self.keys.get(lo).filter(|&&k| k > t).map(|_| lo)
    }

    /// Seek `it` (an iterator over the fences' index block) to the first entry >= `target`,
    /// narrowing the search with the fences first.
    pub fn seek(&self, it: &mut BlockIter, target: &[u8]) -> crate::error::Result<()> {
        let (lo, hi) = self.candidates(user_key(target));
        it.seek_between(target, lo, hi)
    }
}

impl std::fmt::Debug for IndexFences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexFences").field("common", &self.common.len()).field("entries", &self.keys.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{compare_internal, make_internal_key, ValueKind};
    use crate::sst::block_builder::BlockBuilder;
    use std::cmp::Ordering;
    use std::path::Path;

    fn fence_order(a: &[u8], b: &[u8]) -> Ordering {
        fence(a, 0).cmp(&fence(b, 0))
    }

    fn index_block(keys: &[Vec<u8>], interval: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(interval);
        for (i, k) in keys.iter().enumerate() {
            b.add(k, format!("h{i}").as_bytes());
        }
        Arc::new(Block::new(b.finish().to_vec(), Arc::from(Path::new("idx")), 0).unwrap())
    }

    fn ikeys(users: &[&str]) -> Vec<Vec<u8>> {
        users
            .iter()
            .enumerate()
            .map(|(i, u)| make_internal_key(u.as_bytes(), 100 + i as u64, ValueKind::Value))
            .collect()
    }

    #[test]
    fn fence_values_never_contradict_key_order() {
        let keys: [&[u8]; 7] = [b"", b"\0", b"a", b"a\0", b"a\0\0\0\0\0\0\0\x01", b"ab", b"b"];
        for a in keys {
            for b in keys {
                let o = fence_order(a, b);
                assert!(o == Ordering::Equal || o == a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    /// Seeking through the fences lands exactly where a plain seek of the block does, for
    /// targets before, between, equal to and after the keys, sharing the prefix or not.
    #[test]
    fn fenced_seek_matches_plain_seek() {
        let users: Vec<String> = (0..300).map(|i| format!("0000000000{:06}", i * 3331)).collect();
        let users: Vec<&str> = users.iter().map(|s| s.as_str()).collect();
        let keys = ikeys(&users);
        let block = index_block(&keys, 1);
        let fences = IndexFences::build(&block).expect("restart interval 1 has fences");
        assert_eq!(fences.common, b"0000000000");
        let (mut a, mut b) = (block.iter(), block.iter());
        let mut targets: Vec<Vec<u8>> = Vec::new();
        for i in (0..1_000_000).step_by(1111).chain(users.iter().map(|u| u[10..].parse().unwrap())) {
            for seq in [0, 98, 150, 500] {
                targets.push(make_internal_key(format!("0000000000{i:06}").as_bytes(), seq, ValueKind::Value));
            }
        }
        for t in ["", "0", "00000000009", "1", "0000000000003331x", "0000000000996669\0", "0000000000999999"] {
            targets.push(make_internal_key(t.as_bytes(), 7, ValueKind::Value));
        }
        let mut exact = 0;
        for t in &targets {
            a.seek(t).unwrap();
            fences.seek(&mut b, t).unwrap();
            assert_eq!(a.valid(), b.valid(), "target {t:?}");
            if a.valid() {
                assert_eq!(a.key(), b.key());
                assert!(compare_internal(b.key(), t) != Ordering::Less);
            }
            if let Some(i) = fences.exact(user_key(t)) {
                exact += 1;
                assert!(a.at_restart(i), "target {t:?}: the fences named entry {i}");
            }
        }
        // Only targets equal to an index key (a quarter here) or off the prefix need the block.
        assert!(exact * 2 > targets.len(), "{exact} of {} answered by the fences", targets.len());
    }

    /// The last separator of a table is a short successor sharing no prefix with the rest;
    /// it must not spoil the fences of the others.
    #[test]
    fn short_last_key_keeps_fences_narrow() {
        let mut users: Vec<String> = (0..200).map(|i| format!("0000000000{:06}", 1000 + i * 4999)).collect();
        users.push("1".into());
        let users: Vec<&str> = users.iter().map(|s| s.as_str()).collect();
        let block = index_block(&ikeys(&users), 1);
        let fences = IndexFences::build(&block).unwrap();
        assert_eq!(fences.common, b"0000000000");
        assert_eq!(fences.candidates(b"0000000000001015"), (1, 1));
        assert_eq!(fences.candidates(b"0000000000005999"), (1, 2));
        assert_eq!(fences.candidates(b"0000000000999999"), (200, 200));
        assert_eq!(fences.candidates(b"00000"), (0, 0));
        assert_eq!(fences.candidates(b"2"), (200, 200));
        let (mut a, mut b) = (block.iter(), block.iter());
        for t in ["", "00000", "0000000000001015", "0000000000005999", "0000000000999999", "1", "10", "2"] {
            let t = make_internal_key(t.as_bytes(), 1, ValueKind::Value);
            a.seek(&t).unwrap();
            fences.seek(&mut b, &t).unwrap();
            assert_eq!(a.valid().then(|| a.key().to_vec()), b.valid().then(|| b.key().to_vec()));
        }
    }

    #[test]
    fn blocks_with_longer_restart_intervals_have_no_fences() {
        let keys = ikeys(&["a", "b", "c", "d"]);
        assert!(IndexFences::build(&index_block(&keys, 2)).is_none());
        assert!(IndexFences::build(&index_block(&[], 1)).is_none());
        assert!(IndexFences::build(&index_block(&keys, 1)).is_some());
    }
}
