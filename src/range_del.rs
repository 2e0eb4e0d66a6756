//! Range tombstones: `[begin, end) @ seq` hides every entry of its keyspace whose user key lies
//! in the range and whose sequence number is below `seq`, from every reader at `seq` or later.
//! This file holds the tombstone, its encoding in a table's properties block, and
//! `Fragments`, the searchable form readers and compactions use: the tombstones of a memtable
//! or a Version cut at every begin and end into non-overlapping fragments, each with the
//! sequence numbers of the tombstones covering it, newest first (RocksDB's
//! FragmentedRangeTombstoneList). A lookup is one binary search (or, for an iterator moving
//! along, a look at the fragment it used last).

use std::cmp::Ordering;

use crate::key::{self, compare_bytes, SeqNo, ValueKind, MAX_SEQ};
use crate::util::coding::{put_length_prefixed, put_varint64, Reader};

/// One range delete: every key in `[begin, end)` written before `seq` is deleted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RangeTombstone {
    /// The first key deleted.
    pub begin: Vec<u8>,
    /// The first key past the range (not deleted).
    pub end: Vec<u8>,
    /// The sequence number of the range delete.
    pub seq: SeqNo,
}

impl RangeTombstone {
    /// Whether `user_key` lies in the range.
    #[inline]
    pub fn contains(&self, user_key: &[u8]) -> bool {
        compare_bytes(&self.begin, user_key).is_le() && compare_bytes(user_key, &self.end).is_lt()
    }

    /// Whether the range holds no key (`begin >= end`: a no-op).
    pub fn is_empty(&self) -> bool {
        compare_bytes(&self.begin, &self.end).is_ge()
    }

    /// The smallest internal key a table holding this tombstone must cover: the begin key at
    /// the tombstone's own sequence number. It sorts after a sentinel `end_bound` of the same
    /// user key (a file cut there ends before this one starts).
    pub fn start_bound(&self) -> Vec<u8> {
        internal_key(&self.begin, self.seq)
    }

    /// The largest internal key a table holding this tombstone must cover: the end key at
    /// the largest sequence number, which sorts before every real entry of the end key (the
    /// end is exclusive), so the next file of a run may start at it.
    pub fn end_bound(&self) -> Vec<u8> {
        internal_key(&self.end, MAX_SEQ)
    }

    /// Bytes it takes in memory and in a table (for the memtable's size accounting).
    pub fn size_bytes(&self) -> usize {
        self.begin.len() + self.end.len() + 16
    }
}

/// The internal key `user_key ‖ (seq << 8 | Deletion)`: a file bound that parses as an entry
/// key (tools that print bounds parse them), never equal to a real entry (no two writes share
/// a sequence number, and no write has `MAX_SEQ`).
fn internal_key(user_key: &[u8], seq: SeqNo) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + key::TRAILER_LEN);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&key::pack_trailer(seq, ValueKind::Deletion as u8).to_le_bytes());
    k
}

/// Encode `list` as a table's properties field holds it: `varint64 count`, then per tombstone
/// `bytes begin`, `bytes end`, `varint64 seq` (`docs/format/sst.md`).
pub fn encode_list(list: &[RangeTombstone]) -> Vec<u8> {
    let mut out = Vec::with_capacity(list.iter().map(|t| t.size_bytes()).sum::<usize>() + 10);
    put_varint64(&mut out, list.len() as u64);
    for t in list {
        put_length_prefixed(&mut out, &t.begin);
        put_length_prefixed(&mut out, &t.end);
        put_varint64(&mut out, t.seq);
    }
    out
}

/// Decode `encode_list`'s bytes; `None` when truncated, overlong, or a range is empty or
/// reversed (no writer stores one) or has a sequence number no trailer can hold.
pub fn decode_list(src: &[u8]) -> Option<Vec<RangeTombstone>> {
    let mut r = Reader::new(src);
    let n = r.varint64()?;
    // Each tombstone takes at least 3 bytes: a damaged count cannot make us allocate more.
    let mut out = Vec::with_capacity(usize::try_from(n).ok()?.min(src.len() / 3));
    for _ in 0..n {
        let begin = r.length_prefixed()?.to_vec();
        let end = r.length_prefixed()?.to_vec();
        let seq = r.varint64().filter(|&s| s < MAX_SEQ)?;
        let t = RangeTombstone { begin, end, seq };
        if t.is_empty() {
            return None;
        }
        out.push(t);
    }
    r.is_empty().then_some(out)
}

/// A piece of the key space `[begin, end)` and the tombstones covering all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fragment {
    begin: Vec<u8>,
    end: Vec<u8>,
    /// Where its sequence numbers are in `Fragments::seqs`.
    seqs: std::ops::Range<u32>,
}

/// Tombstones cut into non-overlapping fragments in key order, each with the sequence numbers
/// covering it, newest first. Immutable once built; shared behind an `Arc`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fragments {
    frags: Vec<Fragment>,
    /// Every fragment's sequence numbers, each fragment's run descending.
    seqs: Vec<SeqNo>,
    max_seq: SeqNo,
}

impl Fragments {
    /// Fragment `tombstones` (any order, overlapping or not; empty ranges are ignored). With
    /// `floor`, a fragment keeps of the sequence numbers at or below it only the largest: no
    /// reader reads below `floor` (the oldest snapshot), and any reader at or above it finds
    /// the largest first. Adjacent fragments with the same numbers are joined.
    pub fn build<'a>(tombstones: impl IntoIterator<Item = &'a RangeTombstone>, floor: Option<SeqNo>) -> Fragments {
        let mut ts: Vec<&RangeTombstone> = tombstones.into_iter().filter(|t| !t.is_empty()).collect();
        if ts.is_empty() {
            return Fragments::default();
        }
        ts.sort_by(|a, b| compare_bytes(&a.begin, &b.begin));
        let mut points: Vec<&[u8]> = ts.iter().flat_map(|t| [&t.begin[..], &t.end[..]]).collect();
        points.sort_by(|a, b| compare_bytes(a, b));
        points.dedup();
        let mut out = Fragments::default();
        // The tombstones covering the current point: (end, seq).
        let mut active: Vec<(&[u8], SeqNo)> = Vec::new();
        let mut next = 0;
        let mut seqs: Vec<SeqNo> = Vec::new();
        for w in points.windows(2) {
            let (at, to) = (w[0], w[1]);
            active.retain(|(end, _)| compare_bytes(end, at).is_gt());
            while next < ts.len() && compare_bytes(&ts[next].begin, at).is_le() {
                active.push((&ts[next].end, ts[next].seq));
                next += 1;
            }
            if active.is_empty() {
                continue;
            }
            seqs.clear();
            seqs.extend(active.iter().map(|(_, s)| *s));
            seqs.sort_unstable_by(|a, b| b.cmp(a));
            seqs.dedup();
            if let Some(floor) = floor {
                if let Some(first_below) = seqs.iter().position(|&s| s <= floor) {
                    seqs.truncate(first_below + 1);
                }
            }
            out.push(at, to, &seqs);
        }
        out
    }

    /// Append fragment `[begin, end)` with `seqs` (descending), joining it to the last one
    /// when that ends at `begin` with the same numbers.
    fn push(&mut self, begin: &[u8], end: &[u8], seqs: &[SeqNo]) {
        if let Some(last) = self.frags.last_mut() {
            let same = self.seqs[last.seqs.start as usize..last.seqs.end as usize] == *seqs;
            if same && last.end == begin {
                last.end = end.to_vec();
                return;
            }
        }
        let start = self.seqs.len() as u32;
        self.seqs.extend_from_slice(seqs);
        self.max_seq = self.max_seq.max(seqs.first().copied().unwrap_or(0));
        self.frags.push(Fragment { begin: begin.to_vec(), end: end.to_vec(), seqs: start..self.seqs.len() as u32 });
    }

    /// Whether it holds no tombstone.
    pub fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    /// The newest sequence number of any tombstone here (0 when empty).
    pub fn max_seq(&self) -> SeqNo {
        self.max_seq
    }

    fn seqs_of(&self, f: &Fragment) -> &[SeqNo] {
        &self.seqs[f.seqs.start as usize..f.seqs.end as usize]
    }

    /// The newest sequence number at or below `read_seq` of a tombstone covering `user_key`
    /// (0: none). An entry of the key with a smaller sequence number is deleted for a reader
    /// at `read_seq`.
    pub fn covering_seq(&self, user_key: &[u8], read_seq: SeqNo) -> SeqNo {
        let at = self.frags.partition_point(|f| compare_bytes(&f.begin, user_key).is_le());
        self.seq_at(at, user_key, read_seq)
    }

    /// `covering_seq` starting from `hint`, the position a lookup of a nearby key found
    /// (updated): an iterator walking keys in order usually finds its fragment there or next
    /// to it, without a binary search.
    pub fn covering_seq_near(&self, user_key: &[u8], read_seq: SeqNo, hint: &mut usize) -> SeqNo {
        let fits = |at: usize| {
            at <= self.frags.len()
                && (at == 0 || compare_bytes(&self.frags[at - 1].begin, user_key).is_le())
                && (at == self.frags.len() || compare_bytes(user_key, &self.frags[at].begin).is_lt())
        };
        if !fits(*hint) {
            *hint = match fits(*hint + 1) {
                true => *hint + 1,
                false => self.frags.partition_point(|f| compare_bytes(&f.begin, user_key).is_le()),
            };
        }
        self.seq_at(*hint, user_key, read_seq)
    }

    /// The covering number for `user_key` in fragment `at - 1` (the last that begins at or
    /// before it).
    #[inline]
    fn seq_at(&self, at: usize, user_key: &[u8], read_seq: SeqNo) -> SeqNo {
        let Some(f) = at.checked_sub(1).map(|i| &self.frags[i]) else { return 0 };
        if compare_bytes(user_key, &f.end) != Ordering::Less {
            return 0;
        }
        let seqs = self.seqs_of(f);
        seqs.get(seqs.partition_point(|&s| s > read_seq)).copied().unwrap_or(0)
    }

    /// Every fragment as tombstones, in key order, each range's newest first: what a table
    /// stores (disjoint ranges, so a run's files can be cut between them).
    pub fn tombstones(&self) -> impl Iterator<Item = RangeTombstone> + '_ {
        self.frags.iter().flat_map(move |f| {
            self.seqs_of(f).iter().map(move |&seq| RangeTombstone { begin: f.begin.clone(), end: f.end.clone(), seq })
        })
    }
}

/// The tombstones of a read's sources (memtables, a Version), checked at one read sequence
/// number: an iterator asks it about each entry it would yield.
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// Each source's fragments and where its last lookup landed.
    sources: Vec<(std::sync::Arc<Fragments>, usize)>,
    read_seq: SeqNo,
}

impl Coverage {
    /// Coverage by `sources` (empty ones are left out) for a reader at `read_seq`.
    pub fn new(sources: impl IntoIterator<Item = std::sync::Arc<Fragments>>, read_seq: SeqNo) -> Coverage {
        let sources = sources.into_iter().filter(|f| !f.is_empty()).map(|f| (f, 0)).collect();
        Coverage { sources, read_seq }
    }

    /// Whether no source holds a tombstone (the check is then skipped altogether).
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Whether an entry of `user_key` at `seq` is deleted by a tombstone for this reader.
    #[inline]
    pub fn covers(&mut self, user_key: &[u8], seq: SeqNo) -> bool {
        let read_seq = self.read_seq;
        self.sources
            .iter_mut()
            .any(|(f, hint)| f.max_seq() > seq && f.covering_seq_near(user_key, read_seq, hint) > seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(begin: &str, end: &str, seq: SeqNo) -> RangeTombstone {
        RangeTombstone { begin: begin.into(), end: end.into(), seq }
    }

    /// The model: the newest covering number at or below `read`, by brute force.
    fn brute(ts: &[RangeTombstone], key: &[u8], read: SeqNo) -> SeqNo {
        ts.iter().filter(|t| t.contains(key) && t.seq <= read).map(|t| t.seq).max().unwrap_or(0)
    }

    #[test]
    fn overlapping_tombstones_fragment_into_disjoint_pieces_with_their_numbers() {
        let ts = [t("b", "f", 5), t("d", "h", 7), t("a", "c", 3)];
        let f = Fragments::build(&ts, None);
        let pieces: Vec<_> = f
            .tombstones()
            .map(|t| (String::from_utf8(t.begin).unwrap(), String::from_utf8(t.end).unwrap(), t.seq))
            .collect();
        let want =
            [("a", "b", 3), ("b", "c", 5), ("b", "c", 3), ("c", "d", 5), ("d", "f", 7), ("d", "f", 5), ("f", "h", 7)];
        let want: Vec<_> = want.iter().map(|(b, e, s)| (b.to_string(), e.to_string(), *s)).collect();
        assert_eq!(pieces, want);
        assert_eq!(f.max_seq(), 7);
        assert_eq!(f.covering_seq(b"e", 6), 5, "7 is too new for a reader at 6");
        assert_eq!(f.covering_seq(b"h", 9), 0, "the end is exclusive");
        assert_eq!(f.covering_seq(b"a", 2), 0);
    }

    #[test]
    fn a_floor_keeps_one_number_below_it_and_joins_what_then_matches() {
        let ts = [t("a", "c", 3), t("b", "d", 4), t("a", "d", 9)];
        let f = Fragments::build(&ts, Some(5));
        let pieces: Vec<_> = f.tombstones().map(|t| (t.begin, t.end, t.seq)).collect();
        let piece = |b: &str, e: &str, s| (b.as_bytes().to_vec(), e.as_bytes().to_vec(), s);
        // b..c had 9, 4, 3: 3 is below the floor and under 4, so it goes, and b..c joins c..d.
        assert_eq!(pieces, vec![piece("a", "b", 9), piece("a", "b", 3), piece("b", "d", 9), piece("b", "d", 4)]);
        // Readers at or above the floor see what they saw before.
        for key in [&b"a"[..], b"b", b"c", b"cz"] {
            for read in 5..12 {
                assert_eq!(f.covering_seq(key, read), brute(&ts, key, read), "{key:?} at {read}");
            }
        }
    }

    #[test]
    fn empty_and_reversed_ranges_are_nothing() {
        let f = Fragments::build(&[t("b", "b", 3), t("c", "a", 4)], None);
        assert!(f.is_empty());
        assert_eq!(f.covering_seq(b"b", 10), 0);
    }

    #[test]
    fn bounds_sort_so_a_file_cut_at_a_key_ends_before_the_next_starts() {
        let left = t("a", "k", 5).end_bound();
        let right = t("k", "z", 5).start_bound();
        assert_eq!(crate::key::compare_internal(&left, &right), Ordering::Less);
        let entry = crate::key::make_internal_key(b"k", MAX_SEQ - 1, ValueKind::Value);
        assert_eq!(crate::key::compare_internal(&left, &entry), Ordering::Less, "before every entry of the end key");
        assert!(crate::key::parse_internal_key(&left).is_some(), "a bound parses like an entry key");
    }

    #[test]
    fn the_list_encoding_round_trips_and_rejects_damage() {
        let list = vec![t("a", "b", 1), t("", "\u{ff}", 1 << 40)];
        let enc = encode_list(&list);
        assert_eq!(decode_list(&enc), Some(list));
        for cut in 0..enc.len() {
            assert_eq!(decode_list(&enc[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode_list(&encode_list(&[t("b", "a", 1)])), None, "a reversed range");
        assert_eq!(decode_list(&[0xff, 0xff, 0xff, 0xff, 0x0f]), None, "a count past the bytes");
    }

    fn tombstones() -> impl Strategy<Value = Vec<RangeTombstone>> {
        let one = (0u8..12, 0u8..6, 1u64..40).prop_map(|(b, w, s)| RangeTombstone {
            begin: vec![b],
            end: vec![b + w],
            seq: s,
        });
        proptest::collection::vec(one, 0..12)
    }

    proptest! {
        #[test]
        fn lookups_agree_with_brute_force(ts in tombstones(), keys in proptest::collection::vec(0u8..20, 1..30), read in 0u64..45) {
            let f = Fragments::build(&ts, None);
            let mut hint = 0;
            for k in &keys {
                let want = brute(&ts, &[*k], read);
                prop_assert_eq!(f.covering_seq(&[*k], read), want);
                prop_assert_eq!(f.covering_seq_near(&[*k], read, &mut hint), want);
            }
            // The stored pieces, fragmented again, say the same.
            let again: Vec<_> = f.tombstones().collect();
            let g = Fragments::build(&again, None);
            for k in 0u8..20 {
                prop_assert_eq!(g.covering_seq(&[k], read), brute(&ts, &[k], read));
            }
        }

        #[test]
        fn a_floor_changes_nothing_for_readers_at_or_above_it(ts in tombstones(), floor in 0u64..45, read in 0u64..45) {
            let f = Fragments::build(&ts, Some(floor));
            let read = read.max(floor);
            for k in 0u8..20 {
                prop_assert_eq!(f.covering_seq(&[k], read), brute(&ts, &[k], read));
            }
        }
    }
}
