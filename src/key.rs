//! Internal keys: a user key followed by an 8-byte trailer `(seq << 8) | kind`, and their order.
//!
//! Internal keys sort by user key ascending, then by trailer *descending*, so the newest
//! version of a key comes first. This is LevelDB's format; `docs/format/sst.md` shows it.

use std::cmp::Ordering;

/// Largest user key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 64 << 10;
/// Largest value accepted, in bytes.
pub const MAX_VALUE_BYTES: usize = 256 << 20;

/// Sequence numbers are 56 bits; the low byte of the trailer is the kind.
pub type SeqNo = u64;

/// The largest sequence number that fits in a trailer.
pub const MAX_SEQ: SeqNo = (1 << 56) - 1;

/// Size of the trailer appended to every user key.
pub const TRAILER_LEN: usize = 8;

/// What an entry in the LSM-tree says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ValueKind {
    /// The key was deleted at this sequence number.
    Deletion = 0,
    /// The value is stored inline, right here.
    Value = 1,
    /// The value lives in the value log; the entry holds an encoded `ValuePointer`.
    Pointer = 2,
    /// A merge operand, stored inline: folded with the older entries of its key by the
    /// keyspace's `MergeOperator` (3 is a range delete's op kind in a batch).
    Merge = 4,
    /// A value stored inline that expires: the entry holds `expires_at_ms u64 LE | value`
    /// (`ttl.rs`). Reads see it as `Value` before its expiry and as a deletion from then on.
    ExpiringValue = 5,
    /// A separated value that expires: the entry holds `expires_at_ms u64 LE | ValuePointer`.
    /// Reads see it as `Pointer` before its expiry and as a deletion from then on.
    ExpiringPointer = 6,
}

/// The kind used when building a seek key: sorts before every real kind at the same seq.
pub const KIND_FOR_SEEK: u8 = 0xff;

impl ValueKind {
    /// The kind a trailer's low byte names; `None` for a byte no entry is written with.
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(ValueKind::Deletion),
            1 => Some(ValueKind::Value),
            2 => Some(ValueKind::Pointer),
            4 => Some(ValueKind::Merge),
            5 => Some(ValueKind::ExpiringValue),
            6 => Some(ValueKind::ExpiringPointer),
            _ => None,
        }
    }
}

/// Pack a sequence number and kind byte into a trailer.
#[inline]
pub(crate) fn pack_trailer(seq: SeqNo, kind: u8) -> u64 {
    (seq << 8) | kind as u64
}

/// Build an internal key in a fresh buffer.
#[cfg(any(test, feature = "test-util"))]
pub fn make_internal_key(user_key: &[u8], seq: SeqNo, kind: ValueKind) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_with_kind_byte(&mut k, user_key, seq, kind as u8);
    k
}

/// Bytes of a search key kept on the stack (longer keys spill to the heap).
pub const INLINE_KEY_BYTES: usize = 96;

/// `seek_key` in a stack buffer: point lookups build one per lookup, and most keys are short.
pub fn seek_key_inline(user_key: &[u8], seq: SeqNo) -> smallvec::SmallVec<[u8; INLINE_KEY_BYTES]> {
    let mut k = smallvec::SmallVec::with_capacity(user_key.len() + TRAILER_LEN);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&pack_trailer(seq, KIND_FOR_SEEK).to_le_bytes());
    k
}

/// The key to seek to for the newest version of `user_key` visible at `seq`: it sorts before
/// every entry of that key with a sequence number up to `seq`.
pub fn seek_key(user_key: &[u8], seq: SeqNo) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_with_kind_byte(&mut k, user_key, seq, KIND_FOR_SEEK);
    k
}

fn append_with_kind_byte(dst: &mut Vec<u8>, user_key: &[u8], seq: SeqNo, kind: u8) {
    dst.extend_from_slice(user_key);
    dst.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

/// A decoded internal key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user's key.
    pub user_key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNo,
    /// What the entry says about the key.
    pub kind: ValueKind,
}

/// Split an internal key; `None` if it is shorter than the trailer or its kind byte is not a
/// `ValueKind` (no entry is written that way: `unknown_kind` tells which byte it was).
#[inline]
pub fn parse_internal_key(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    if ikey.len() < TRAILER_LEN {
        return None;
    }
    let (user_key, t) = ikey.split_at(ikey.len() - TRAILER_LEN);
    let trailer = u64::from_le_bytes(t.try_into().ok()?);
    Some(ParsedKey { user_key, seq: trailer >> 8, kind: ValueKind::from_u8(trailer as u8)? })
}

/// The kind byte of an internal key long enough to have a trailer but whose kind is not a
/// `ValueKind` (`parse_internal_key` refuses both).
pub fn unknown_kind(ikey: &[u8]) -> Option<u8> {
    let kind = ikey.len().checked_sub(TRAILER_LEN).map(|at| ikey[at])?;
    ValueKind::from_u8(kind).is_none().then_some(kind)
}

/// Why `parse_internal_key` refused `ikey`, for an error message.
pub fn malformed_reason(ikey: &[u8]) -> String {
    match unknown_kind(ikey) {
        Some(kind) => format!("unknown entry kind {kind}"),
        None => format!("malformed key ({} bytes, shorter than its trailer)", ikey.len()),
    }
}

/// The user-key part of an internal key (the whole slice if it is too short to have a trailer).
#[inline]
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(TRAILER_LEN)]
}

/// The trailer of an internal key (0 for a key too short to have one).
#[inline]
pub(crate) fn trailer(ikey: &[u8]) -> u64 {
    if ikey.len() < TRAILER_LEN {
        return 0;
    }
    let t = &ikey[ikey.len() - TRAILER_LEN..];
    u64::from_le_bytes([t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]])
}

/// Total order on internal keys under the bytewise order: user key ascending, trailer
/// descending (the engine compares through `KeyOrder`, which may hold a custom order; range
/// tombstones, refused under a custom order, use this one).
#[inline]
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    match compare_bytes(user_key(a), user_key(b)) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

/// Bytewise order of `a` and `b` (as `<[u8]>::cmp`), eight bytes at a time as big-endian
/// words. Inlined into the memtable's and the merges' hot loops it is cheaper than a call to
/// `memcmp` for keys of a few words that share long prefixes (db_bench's zero-padded numbers).
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a, mut b) = (a, b);
    while let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a, b) = (&a[8..], &b[8..]);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// A short internal key `k` with `start <= k < limit` (LevelDB's FindShortestSeparator),
/// used for index-block separators so index blocks stay small.
pub fn shortest_separator(start: &[u8], limit: &[u8]) -> Vec<u8> {
    let (us, ul) = (user_key(start), user_key(limit));
    let common = us.iter().zip(ul).take_while(|(a, b)| a == b).count();
    if common < us.len().min(ul.len()) {
        let b = us[common];
        if b < 0xff && b + 1 < ul[common] {
            let mut short = us[..=common].to_vec();
            short[common] += 1;
            // The max trailer sorts before any real entry of the shortened user key.
            append_with_kind_byte(&mut short, &[], MAX_SEQ, KIND_FOR_SEEK);
            let bytewise = crate::comparator::KeyOrder::default();
            debug_assert!(bytewise.compare_internal(start, &short) == Ordering::Less);
            debug_assert!(bytewise.compare_internal(&short, limit) == Ordering::Less);
            return short;
        }
    }
    start.to_vec()
}

/// A short internal key `k >= key` (LevelDB's FindShortSuccessor) for the last index entry.
pub fn short_successor(key: &[u8]) -> Vec<u8> {
    let uk = user_key(key);
    for (i, &b) in uk.iter().enumerate() {
        if b != 0xff {
            let mut short = uk[..=i].to_vec();
            short[i] += 1;
            append_with_kind_byte(&mut short, &[], MAX_SEQ, KIND_FOR_SEEK);
            return short;
        }
    }
    key.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Words compare as the bytes do: short keys, shared prefixes, one key a prefix of the other.
        #[test]
        fn comparing_by_words_orders_keys_as_bytewise_comparison(
            prefix in proptest::collection::vec(0u8..3, 0..20),
            a in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
            b in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
        ) {
            let (a, b) = ([&prefix[..], &a].concat(), [&prefix[..], &b].concat());
            proptest::prop_assert_eq!(compare_bytes(&a, &b), a.cmp(&b));
            proptest::prop_assert_eq!(compare_bytes(&a, &a[..a.len() / 2]), a.cmp(&a[..a.len() / 2].to_vec()));
        }
    }

    #[test]
    fn newer_versions_sort_first() {
        let a = make_internal_key(b"k", 5, ValueKind::Value);
        let b = make_internal_key(b"k", 3, ValueKind::Value);
        let c = make_internal_key(b"ka", 9, ValueKind::Value);
        assert_eq!(compare_internal(&a, &b), Ordering::Less);
        assert_eq!(compare_internal(&b, &c), Ordering::Less);
        let seek = seek_key(b"k", 5);
        assert_eq!(compare_internal(&seek, &a), Ordering::Less);
    }

    #[test]
    fn separators_lie_between_their_bounds() {
        let cases: &[(&[u8], &[u8])] =
            &[(b"abc", b"abz"), (b"abc", b"abd"), (b"a", b"b"), (b"ab", b"abc"), (b"\xff\xff", b"\xff\xff\x01")];
        for (s, l) in cases {
            let s = make_internal_key(s, 10, ValueKind::Value);
            let l = make_internal_key(l, 3, ValueKind::Value);
            let sep = shortest_separator(&s, &l);
            assert_ne!(compare_internal(&s, &sep), Ordering::Greater);
            assert_eq!(compare_internal(&sep, &l), Ordering::Less);
        }
        let k = make_internal_key(b"abc", 1, ValueKind::Value);
        assert_ne!(compare_internal(&short_successor(&k), &k), Ordering::Less);
    }

    #[test]
    fn parse_round_trips() {
        let k = make_internal_key(b"user", 42, ValueKind::Pointer);
        let p = parse_internal_key(&k).unwrap();
        assert_eq!((p.user_key, p.seq, p.kind), (&b"user"[..], 42, ValueKind::Pointer));
        assert!(parse_internal_key(b"short").is_none());
        let mut bad = k.clone();
        bad[4] = 9;
        assert!(parse_internal_key(&bad).is_none(), "a kind no entry is written with");
        assert_eq!((unknown_kind(&bad), unknown_kind(&k), unknown_kind(b"short")), (Some(9), None, None));
    }
}
