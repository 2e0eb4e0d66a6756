//! A DTable's segment fences merged into one sorted array (fractional cascading): one binary
//! search finds, for every segment at once, the index entry a seek lands on. Searching each
//! segment's own fences (`fences.rs`) is a chain of cache misses per segment, and a seek of a
//! table light-weight compaction appended to pays it once per segment.
//!
//! Built when the DTable opens, from the index blocks it keeps in memory; nothing on disk.

use std::sync::Arc;

use super::block::Block;
use super::fences::{ends, fences_of, index_user_keys, shared_len, IndexFences};

/// Most cells (`u32`s) the rows may hold, 4 MiB: a larger table's seeks search each
/// segment's own fences.
const MAX_CELLS: usize = 1 << 20;

/// The merged fences of a DTable's segments.
pub struct SegmentCascade {
    /// Every segment's fences, sorted, below the prefix every index user key of every
    /// segment but each one's last starts with.
    fences: IndexFences,
    /// Row `p`, one cell per segment (newest first): how many of that segment's entries sort
    /// before position `p` of the fences. When position `p` is the one `IndexFences::exact`
    /// names for a target, that count is the segment's entry the seek lands on.
    rows: Vec<u32>,
    segments: usize,
}

impl SegmentCascade {
    /// The cascade of the segments whose index blocks are `indexes`, newest first. `None` for
    /// fewer than two segments, an index block without one entry per restart point (no
    /// fences), or rows past `MAX_CELLS`.
    pub fn build(indexes: &[&Arc<Block>]) -> Option<SegmentCascade> {
        let segments = indexes.len();
        let total: usize = indexes.iter().map(|b| b.num_restarts()).sum();
        if segments < 2 || total.checked_mul(segments)? > MAX_CELLS {
            return None;
        }
        let keys = indexes.iter().map(|b| index_user_keys(b)).collect::<Option<Vec<_>>>()?;
        // Each segment's first key and last but one start with what all of its keys but the
        // last share; the prefix of all of them is shared by every segment. A segment of one
        // entry is left out: its one key is a last key, often a short successor ("1") that
        // shares nothing and would leave no prefix, so no fence would tell keys apart.
        let mut common: Option<&[u8]> = None;
        for k in keys.iter().filter(|k| k.len() > 1) {
            let (first, last_but_one) = ends(k);
            let c = common.unwrap_or(first);
            common = Some(&c[..shared_len(c, first).min(shared_len(c, last_but_one))]);
        }
        let common = common?;
        let mut all: Vec<(u64, usize)> =
            keys.iter().enumerate().flat_map(|(s, ks)| fences_of(ks, common).map(move |f| (f, s))).collect();
        all.sort_unstable();
        let mut counts = vec![0u32; segments];
        let mut rows = Vec::with_capacity(all.len() * segments);
        for &(_, s) in &all {
            rows.extend_from_slice(&counts);
            counts[s] += 1;
        }
        let fences = IndexFences::from_sorted(common.to_vec(), all.iter().map(|&(f, _)| f).collect());
        Some(SegmentCascade { fences, rows, segments })
    }

    /// For each segment (newest first), the index entry holding the first index key >= every
    /// internal key with user key `uk` (the segment's entry count: past its last entry), when
    /// the fences alone tell, as `IndexFences::exact` does for one segment. `None`: `uk` lacks
    /// the common prefix or ties with a fence; each segment must then be searched.
    #[inline]
    pub fn entries(&self, uk: &[u8]) -> Option<&[u32]> {
        let p = self.fences.exact(uk)?;
        self.rows.get(p * self.segments..(p + 1) * self.segments)
    }

    /// Bytes the cascade holds in memory.
    #[cfg(test)]
    pub fn len_bytes(&self) -> usize {
        self.fences.len_bytes() + 4 * self.rows.len()
    }
}

impl std::fmt::Debug for SegmentCascade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentCascade").field("segments", &self.segments).field("fences", &self.fences).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::internal_iter::InternalIterator;
    use crate::key::{make_internal_key, ValueKind};
    use crate::sst::block_builder::BlockBuilder;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::path::Path;

    /// An index block (restart interval 1) over the sorted user keys `users`, the last one
    /// replaced by a short successor as a table's last separator often is.
    fn index_block(users: &[String], successor: bool) -> Arc<Block> {
        let mut b = BlockBuilder::new(1);
        for (i, u) in users.iter().enumerate() {
            let last = i + 1 == users.len();
            let uk = if last && successor { "1".to_string() } else { u.clone() };
            b.add(&make_internal_key(uk.as_bytes(), 100, ValueKind::Value), b"h");
        }
        Arc::new(Block::new(b.finish().to_vec(), Arc::from(Path::new("idx")), 0).unwrap())
    }

    /// Every answer of the cascade is the entry a plain seek of that segment's index block
    /// lands on (or past its end), for targets before, between, on and after the keys.
    #[test]
    fn every_segment_lands_where_a_seek_of_its_own_index_lands() {
        let mut rng = StdRng::seed_from_u64(5);
        let blocks: Vec<Arc<Block>> = (0..6)
            .map(|s| {
                let n = [300, 40, 7, 1, 1, 90][s];
                let mut users: Vec<String> =
                    (0..n).map(|_| format!("0000000000{:06}", rng.gen_range(0..1_000_000))).collect();
                users.sort();
                users.dedup();
                // Segment 3 is one entry of a short successor (a one-block append), 4 one
                // entry of a full key.
                index_block(&users, s % 2 == 0 || s == 3)
            })
            .collect();
        // And one entry below every key with the prefix.
        let blocks: Vec<Arc<Block>> = blocks.into_iter().chain([index_block(&["00000".to_string()], false)]).collect();
        let refs: Vec<&Arc<Block>> = blocks.iter().collect();
        let c = SegmentCascade::build(&refs).expect("seven segments with fences");
        assert_eq!(c.fences.common(), b"0000000000");
        let (mut answered, mut targets) = (0, 0);
        let mut check = |uk: &str, seq: u64| {
            targets += 1;
            let t = make_internal_key(uk.as_bytes(), seq, ValueKind::Value);
            let Some(entries) = c.entries(uk.as_bytes()) else { return };
            answered += 1;
            for (s, b) in blocks.iter().enumerate() {
                let mut it = b.iter();
                it.seek(&t).unwrap();
                let i = entries[s] as usize;
                match it.valid() {
                    true => assert!(it.at_restart(i), "{uk}@{seq}: segment {s} landed elsewhere than {i}"),
                    false => assert_eq!(i, b.num_restarts(), "{uk}@{seq}: segment {s} is past its end"),
                }
            }
        };
        for _ in 0..5000 {
            check(&format!("0000000000{:06}", rng.gen_range(0..1_000_000)), rng.gen_range(0..200));
        }
        for uk in ["", "0", "00000000009", "0000000000000000", "0000000000999999", "1", "2", "0000000000\u{7f}"] {
            check(uk, 50);
        }
        assert!(answered * 10 > targets * 9, "{answered} of {targets} answered by the cascade");
    }

    #[test]
    fn one_segment_or_an_index_without_fences_has_no_cascade() {
        let users: Vec<String> = (0..10).map(|i| format!("k{i:03}")).collect();
        let one = index_block(&users, false);
        assert!(SegmentCascade::build(&[&one]).is_none());
        let mut b = BlockBuilder::new(2);
        for u in &users {
            b.add(&make_internal_key(u.as_bytes(), 1, ValueKind::Value), b"h");
        }
        let interval_two = Arc::new(Block::new(b.finish().to_vec(), Arc::from(Path::new("idx")), 0).unwrap());
        assert!(SegmentCascade::build(&[&one, &interval_two]).is_none());
        assert!(SegmentCascade::build(&[&one, &one]).is_some());
    }
}
