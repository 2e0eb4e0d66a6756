//! A write batch: a list of puts, deletes and range deletes, in any keyspaces, applied
//! atomically, encoded exactly as the ops of one log record group (`docs/format/log.md`), so
//! the log writer copies it without re-encoding.

use crate::error::{Error, Result};
use std::time::Duration;

use crate::key::{ValueKind, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::ttl::EXPIRY_LEN;
use crate::util::coding::{put_varint32, Reader};

/// One operation decoded from a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchOp<'a> {
    /// Set `key` to `value`.
    Put {
        /// The key.
        key: &'a [u8],
        /// Its new value.
        value: &'a [u8],
        /// When it expires, in milliseconds since the Unix epoch (`None`: never). In a batch
        /// not yet written, a `put_with_ttl` holds 0 here: the write sets it.
        expires_at_ms: Option<u64>,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// Point `key` at a value that already sits in a value file (an encoded `ValuePointer`):
    /// value-log GC logs these when it moves live values to a cold value file. Never in a
    /// batch a user builds.
    PutPointer {
        /// The key.
        key: &'a [u8],
        /// The encoded pointer.
        pointer: &'a [u8],
        /// When the value expires, in milliseconds since the Unix epoch (`None`: never).
        expires_at_ms: Option<u64>,
    },
    /// Fold `operand` into `key`'s value with the keyspace's merge operator.
    Merge {
        /// The key.
        key: &'a [u8],
        /// The merge operand.
        operand: &'a [u8],
    },
    /// Remove every key in `[begin, end)`.
    DeleteRange {
        /// The first key removed.
        begin: &'a [u8],
        /// The first key past the range (not removed).
        end: &'a [u8],
    },
}

impl<'a> BatchOp<'a> {
    /// The key the op writes (a range delete's first key).
    pub fn key(&self) -> &'a [u8] {
        match *self {
            BatchOp::Put { key, .. }
            | BatchOp::Delete { key }
            | BatchOp::PutPointer { key, .. }
            | BatchOp::Merge { key, .. } => key,
            BatchOp::DeleteRange { begin, .. } => begin,
        }
    }
}

/// The op kind byte of a range delete (point kinds are `ValueKind`'s: 0, 1, 2, 4, 5, 6).
pub(crate) const KIND_RANGE_DELETE: u8 = 3;

/// Set in an op's kind byte when a varint keyspace id follows it (absent: the default
/// keyspace, so a batch of the default keyspace encodes as before keyspaces existed).
pub(crate) const KIND_KEYSPACE_FLAG: u8 = 0x80;

fn varint_len(n: usize) -> usize {
    (usize::BITS - (n | 1).leading_zeros()).div_ceil(7) as usize
}

/// Bytes of one encoded op of the default keyspace with a key and value of these lengths.
pub(crate) fn op_len(key: usize, value: usize) -> usize {
    1 + varint_len(key) + varint_len(value) + key + value
}

/// Puts and deletes applied atomically by `Db::write`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// Encoded ops: `kind u8 | [varint keyspace] | varint klen | varint vlen | key | value` each.
    pub(crate) rep: Vec<u8>,
    pub(crate) count: u32,
    /// Key + value bytes (for write-amplification accounting).
    pub(crate) user_bytes: u64,
    /// First invalid argument seen by put/delete; reported by `Db::write`.
    pub(crate) error: Option<String>,
    /// The keyspaces other than the default one the batch writes (each once): a writer checks
    /// them, and a batch of the default keyspace costs nothing for them.
    pub(crate) other_keyspaces: Vec<u32>,
    /// The keyspaces the batch's merge ops name (each once): a writer checks that each has a
    /// merge operator.
    pub(crate) merge_keyspaces: Vec<u32>,
    /// The puts with a time-to-live whose expiry time the write sets: where in `rep` the
    /// expiry time lies, the TTL in milliseconds, and the length of the key before it.
    pub(crate) pending_ttls: Vec<(usize, u64, usize)>,
    /// The first refused time-to-live: the key, the TTL in milliseconds, and why.
    pub(crate) ttl_error: Option<(Vec<u8>, u128, &'static str)>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `bytes` of encoded ops.
    pub fn with_capacity(bytes: usize) -> Self {
        WriteBatch { rep: Vec::with_capacity(bytes), ..Self::default() }
    }

    /// An empty batch with room for `bytes` of encoded ops, made from `spare` (a batch done
    /// with, or an empty one): its buffer's pages are already faulted in, where a fresh
    /// buffer of megabytes faults each page in on its first write.
    pub(crate) fn reuse(spare: WriteBatch, bytes: usize) -> Self {
        let mut rep = spare.rep;
        rep.clear();
        rep.reserve(bytes);
        WriteBatch { rep, ..Self::default() }
    }

    /// Queue `key = value` in the default keyspace.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.push(0, ValueKind::Value as u8, key.as_ref(), value.as_ref())
    }

    /// Queue `key = value` in the default keyspace, expiring `ttl` after the batch is written
    /// (a TTL of zero, or one whose expiry overflows, makes `Db::write` fail).
    pub fn put_with_ttl(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, ttl: Duration) -> &mut Self {
        self.push_with_ttl(0, key.as_ref(), value.as_ref(), ttl)
    }

    /// Queue `key = value` in keyspace `ks`, expiring `ttl` after the batch is written.
    pub fn put_in_with_ttl(
        &mut self,
        ks: &crate::Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> &mut Self {
        self.push_with_ttl(ks.id(), key.as_ref(), value.as_ref(), ttl)
    }

    /// Queue an expiring put whose expiry time the write sets (`stamp_ttls`).
    pub(crate) fn push_with_ttl(&mut self, keyspace: u32, key: &[u8], value: &[u8], ttl: Duration) -> &mut Self {
        let ttl_ms = match crate::ttl::ttl_ms(key, ttl) {
            Ok(ms) => ms,
            Err(Error::InvalidTtl { reason, .. }) => {
                self.ttl_error.get_or_insert_with(|| (key.to_vec(), ttl.as_millis(), reason));
                return self;
            }
            Err(_) => return self,
        };
        let before = self.rep.len();
        self.push_parts(keyspace, ValueKind::ExpiringValue as u8, key, &[0; EXPIRY_LEN], value);
        if self.rep.len() > before {
            self.pending_ttls.push((self.rep.len() - value.len() - EXPIRY_LEN, ttl_ms, key.len()));
        }
        self
    }

    /// Queue `key = value` expiring at `expires_at_ms` in keyspace `keyspace` by id (a write's
    /// default TTL, GC's moves of expiring values).
    pub(crate) fn put_expiring_raw(
        &mut self,
        keyspace: u32,
        key: &[u8],
        value: &[u8],
        expires_at_ms: u64,
    ) -> &mut Self {
        self.push_parts(keyspace, ValueKind::ExpiringValue as u8, key, &expires_at_ms.to_le_bytes(), value)
    }

    /// Set the expiry time of each `put_with_ttl` to `now_ms` + its TTL.
    pub(crate) fn stamp_ttls(&mut self, now_ms: u64) -> Result<()> {
        for &(at, ttl_ms, key_len) in &self.pending_ttls {
            let expires = crate::ttl::expiry(&self.rep[at - key_len..at], now_ms, u128::from(ttl_ms))?;
            self.rep[at..at + EXPIRY_LEN].copy_from_slice(&expires.to_le_bytes());
        }
        self.pending_ttls.clear();
        Ok(())
    }

    /// This batch with each plain put of a keyspace with a default TTL (`default_ttl_ms(ks)`,
    /// 0: none) made to expire that long after `now_ms`; `None` when no op changes.
    pub(crate) fn with_default_ttls(
        &self,
        now_ms: u64,
        default_ttl_ms: impl Fn(u32) -> u64,
    ) -> Result<Option<WriteBatch>> {
        let changes = |(ks, op): &(u32, BatchOp<'_>)| {
            matches!(op, BatchOp::Put { expires_at_ms: None, .. }) && default_ttl_ms(*ks) > 0
        };
        if !self.iter().flatten().any(|op| changes(&op)) {
            return Ok(None);
        }
        let mut out = WriteBatch::with_capacity(self.rep.len() + EXPIRY_LEN * self.len());
        for op in self.iter() {
            let (ks, op) = op.map_err(|at| Error::invalid(format!("malformed batch op at offset {at}")))?;
            match op {
                BatchOp::Put { key, value, expires_at_ms: None } if default_ttl_ms(ks) > 0 => {
                    let at = crate::ttl::expiry(key, now_ms, u128::from(default_ttl_ms(ks)))?;
                    out.put_expiring_raw(ks, key, value, at)
                }
                BatchOp::Put { key, value, expires_at_ms: None } => out.put_raw(ks, key, value),
                BatchOp::Put { key, value, expires_at_ms: Some(at) } => out.put_expiring_raw(ks, key, value, at),
                BatchOp::Delete { key } => out.delete_raw(ks, key),
                BatchOp::Merge { key, operand } => out.merge_raw(ks, key, operand),
                BatchOp::DeleteRange { begin, end } => out.delete_range_raw(ks, begin, end),
                BatchOp::PutPointer { key, pointer, expires_at_ms } => out.put_pointer(ks, key, pointer, expires_at_ms),
            };
        }
        out.user_bytes = self.user_bytes;
        Ok(Some(out))
    }

    /// Queue the deletion of `key` in the default keyspace.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        self.push(0, ValueKind::Deletion as u8, key.as_ref(), &[])
    }

    /// Queue a merge of `operand` into `key` of the default keyspace (folded by its
    /// `Options::merge_operator`; `Db::write` refuses the batch if it has none).
    pub fn merge(&mut self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> &mut Self {
        self.merge_raw(0, key.as_ref(), operand.as_ref())
    }

    /// Queue a merge of `operand` into `key` of keyspace `ks`.
    pub fn merge_in(&mut self, ks: &crate::Keyspace, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> &mut Self {
        self.merge_raw(ks.id(), key.as_ref(), operand.as_ref())
    }

    /// Queue a merge into `key` of keyspace `keyspace` by id.
    pub(crate) fn merge_raw(&mut self, keyspace: u32, key: &[u8], operand: &[u8]) -> &mut Self {
        if !self.merge_keyspaces.contains(&keyspace) {
            self.merge_keyspaces.push(keyspace);
        }
        self.push(keyspace, ValueKind::Merge as u8, key, operand)
    }

    /// Queue the deletion of every key in `[begin, end)` of the default keyspace (a range
    /// tombstone: one op whatever the range holds). `begin > end` makes `Db::write` fail.
    pub fn delete_range(&mut self, begin: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> &mut Self {
        self.push_range(0, begin.as_ref(), end.as_ref())
    }

    /// Queue `key = value` in keyspace `ks`.
    pub fn put_in(&mut self, ks: &crate::Keyspace, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.push(ks.id(), ValueKind::Value as u8, key.as_ref(), value.as_ref())
    }

    /// Queue the deletion of `key` in keyspace `ks`.
    pub fn delete_in(&mut self, ks: &crate::Keyspace, key: impl AsRef<[u8]>) -> &mut Self {
        self.push(ks.id(), ValueKind::Deletion as u8, key.as_ref(), &[])
    }

    /// Queue the deletion of every key in `[begin, end)` of keyspace `ks`.
    pub fn delete_range_in(
        &mut self,
        ks: &crate::Keyspace,
        begin: impl AsRef<[u8]>,
        end: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.push_range(ks.id(), begin.as_ref(), end.as_ref())
    }

    /// Queue `key` → an encoded value pointer in keyspace `keyspace` (GC's relocation to a
    /// cold value file), expiring at `expires_at_ms` if it is set. Not counted as user bytes.
    pub(crate) fn put_pointer(
        &mut self,
        keyspace: u32,
        key: &[u8],
        pointer: &[u8],
        expires_at_ms: Option<u64>,
    ) -> &mut Self {
        let user_bytes = self.user_bytes;
        match expires_at_ms {
            None => self.push(keyspace, ValueKind::Pointer as u8, key, pointer),
            Some(at) => self.push_parts(keyspace, ValueKind::ExpiringPointer as u8, key, &at.to_le_bytes(), pointer),
        };
        self.user_bytes = user_bytes;
        self
    }

    /// Queue `key = value` in keyspace `keyspace` by id (GC's moves, the engine's own writes).
    pub(crate) fn put_raw(&mut self, keyspace: u32, key: &[u8], value: &[u8]) -> &mut Self {
        self.push(keyspace, ValueKind::Value as u8, key, value)
    }

    /// Queue the deletion of `key` in keyspace `keyspace` by id.
    pub(crate) fn delete_raw(&mut self, keyspace: u32, key: &[u8]) -> &mut Self {
        self.push(keyspace, ValueKind::Deletion as u8, key, &[])
    }

    /// Queue a range delete of `[begin, end)` in keyspace `keyspace` by id.
    pub(crate) fn delete_range_raw(&mut self, keyspace: u32, begin: &[u8], end: &[u8]) -> &mut Self {
        self.push_range(keyspace, begin, end)
    }

    fn push_range(&mut self, keyspace: u32, begin: &[u8], end: &[u8]) -> &mut Self {
        if begin > end {
            self.error.get_or_insert_with(|| {
                format!("delete_range: begin {begin:?} is past end {end:?} (the range is [begin, end))")
            });
            return self;
        }
        self.push(keyspace, KIND_RANGE_DELETE, begin, end)
    }

    fn push(&mut self, keyspace: u32, kind: u8, key: &[u8], value: &[u8]) -> &mut Self {
        self.push_parts(keyspace, kind, key, &[], value)
    }

    /// Queue an op whose value field is `prefix | value` (an expiry time, then the value).
    fn push_parts(&mut self, keyspace: u32, kind: u8, key: &[u8], prefix: &[u8], value: &[u8]) -> &mut Self {
        if key.len() > MAX_KEY_BYTES || value.len() > MAX_VALUE_BYTES {
            self.error.get_or_insert_with(|| {
                format!(
                    "key of {} bytes / value of {} bytes exceeds the maximum ({MAX_KEY_BYTES} / {MAX_VALUE_BYTES})",
                    key.len(),
                    value.len()
                )
            });
            return self;
        }
        if keyspace == 0 {
            self.rep.push(kind);
        } else {
            self.rep.push(kind | KIND_KEYSPACE_FLAG);
            put_varint32(&mut self.rep, keyspace);
            if !self.other_keyspaces.contains(&keyspace) {
                self.other_keyspaces.push(keyspace);
            }
        }
        put_varint32(&mut self.rep, key.len() as u32);
        put_varint32(&mut self.rep, (prefix.len() + value.len()) as u32);
        self.rep.extend_from_slice(key);
        self.rep.extend_from_slice(prefix);
        self.rep.extend_from_slice(value);
        self.count += 1;
        self.user_bytes += (key.len() + value.len()) as u64;
        self
    }

    /// Number of operations queued.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no operation is queued.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size in bytes.
    pub fn approximate_size(&self) -> usize {
        self.rep.len()
    }

    /// Drop every queued operation (and any invalid-argument error).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Append every op of `other`.
    pub fn append(&mut self, other: &WriteBatch) {
        let shift = self.rep.len();
        self.pending_ttls.extend(other.pending_ttls.iter().map(|&(at, ttl, k)| (at + shift, ttl, k)));
        if self.ttl_error.is_none() {
            self.ttl_error.clone_from(&other.ttl_error);
        }
        self.rep.extend_from_slice(&other.rep);
        self.count += other.count;
        self.user_bytes += other.user_bytes;
        for &ks in &other.other_keyspaces {
            if !self.other_keyspaces.contains(&ks) {
                self.other_keyspaces.push(ks);
            }
        }
        for &ks in &other.merge_keyspaces {
            if !self.merge_keyspaces.contains(&ks) {
                self.merge_keyspaces.push(ks);
            }
        }
        if self.error.is_none() {
            self.error.clone_from(&other.error);
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if let Some((key, ttl_ms, reason)) = &self.ttl_error {
            return Err(Error::InvalidTtl { key: key.clone(), ttl_ms: *ttl_ms, reason });
        }
        match &self.error {
            Some(e) => Err(Error::invalid(e.clone())),
            None => Ok(()),
        }
    }

    /// The ops in order, each with the id of the keyspace it writes (`Keyspace::id`; 0 is the
    /// default keyspace).
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter { r: Reader::new(&self.rep) }
    }
}

/// Decoder over encoded ops (a batch, or the op area of a log record group).
pub struct BatchIter<'a> {
    r: Reader<'a>,
}

impl<'a> BatchIter<'a> {
    /// Iterate over raw encoded ops (from a log record); malformed input yields `Err`.
    pub fn over(rep: &'a [u8]) -> Self {
        BatchIter { r: Reader::new(rep) }
    }

    /// Offset (in the encoded ops) where the next op starts.
    pub fn offset(&self) -> usize {
        self.r.pos()
    }

    fn decode(&mut self) -> Option<(u32, BatchOp<'a>)> {
        let byte = self.r.u8()?;
        let keyspace = match byte & KIND_KEYSPACE_FLAG {
            0 => 0,
            // A flagged op names a keyspace other than the default one.
            _ => Some(self.r.varint32()?).filter(|&ks| ks != 0)?,
        };
        let kind = byte & !KIND_KEYSPACE_FLAG;
        let klen = self.r.varint32()? as usize;
        let vlen = self.r.varint32()? as usize;
        let key = self.r.bytes(klen)?;
        let value = self.r.bytes(vlen)?;
        if kind == KIND_RANGE_DELETE {
            return (key <= value).then_some((keyspace, BatchOp::DeleteRange { begin: key, end: value }));
        }
        let op = match ValueKind::from_u8(kind)? {
            ValueKind::Value => BatchOp::Put { key, value, expires_at_ms: None },
            ValueKind::Deletion if vlen == 0 => BatchOp::Delete { key },
            // An encoded pointer is 7 to 28 bytes.
            ValueKind::Pointer if (7..=28).contains(&vlen) => {
                BatchOp::PutPointer { key, pointer: value, expires_at_ms: None }
            }
            ValueKind::Merge => BatchOp::Merge { key, operand: value },
            // An expiring op's value starts with its expiry time.
            ValueKind::ExpiringValue => {
                let (at, value) = crate::ttl::split_expiry(value)?;
                BatchOp::Put { key, value, expires_at_ms: Some(at) }
            }
            ValueKind::ExpiringPointer if (EXPIRY_LEN + 7..=EXPIRY_LEN + 28).contains(&vlen) => {
                let (at, pointer) = crate::ttl::split_expiry(value)?;
                BatchOp::PutPointer { key, pointer, expires_at_ms: Some(at) }
            }
            _ => return None,
        };
        Some((keyspace, op))
    }
}

impl<'a> Iterator for BatchIter<'a> {
    /// The op and the keyspace it writes, or the offset of a malformed op.
    type Item = std::result::Result<(u32, BatchOp<'a>), usize>;

    /// `Err(offset)` names the offset of the malformed op; iteration stops after it.
    fn next(&mut self) -> Option<Self::Item> {
        if self.r.is_empty() {
            return None;
        }
        let at = self.r.pos();
        match self.decode() {
            Some(op) => Some(Ok(op)),
            None => {
                self.r = Reader::new(&[]);
                Some(Err(at))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_batch_starts_empty_and_encodes_like_a_fresh_one() {
        let mut spare = WriteBatch::new();
        spare.put_raw(3, b"old-key", &[7u8; 5000]).delete(b"gone");
        let capacity = spare.rep.capacity();
        let mut reused = WriteBatch::reuse(spare, 100);
        assert!(reused.is_empty() && reused.rep.is_empty() && reused.user_bytes == 0);
        assert!(reused.other_keyspaces.is_empty(), "the spare's keyspaces are not carried over");
        assert!(reused.rep.capacity() >= capacity, "the buffer is kept");
        let mut fresh = WriteBatch::new();
        for b in [&mut reused, &mut fresh] {
            b.put_raw(0, b"k", b"v").delete(b"d");
        }
        assert_eq!(reused, fresh);
    }

    #[test]
    fn op_len_is_the_encoded_size_of_one_put() {
        for (k, v) in [(0, 0), (1, 127), (16, 128), (127, 16383), (128, 16384), (300, 100_000)] {
            let mut b = WriteBatch::new();
            b.put(vec![1u8; k], vec![2u8; v]);
            assert_eq!(op_len(k, v), b.rep.len(), "key {k} value {v}");
        }
    }

    #[test]
    fn batch_ops_round_trip_in_order() {
        let mut b = WriteBatch::new();
        b.put(b"a", b"1").delete(b"b").put(b"", b"");
        let ops: Vec<_> = b.iter().collect::<std::result::Result<_, _>>().unwrap();
        assert_eq!(
            ops,
            vec![
                (0, BatchOp::Put { key: b"a", value: b"1", expires_at_ms: None }),
                (0, BatchOp::Delete { key: b"b" }),
                (0, BatchOp::Put { key: b"", value: b"", expires_at_ms: None })
            ]
        );
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn ops_of_other_keyspaces_and_range_deletes_round_trip_and_the_default_encodes_as_before() {
        let mut b = WriteBatch::new();
        b.put_raw(7, b"k", b"v").delete_range(b"a", b"c").put_pointer(300, b"p", &[9; 8], None);
        b.push_range(2, b"x", b"y");
        let ops: Vec<_> = b.iter().collect::<std::result::Result<_, _>>().unwrap();
        assert_eq!(
            ops,
            vec![
                (7, BatchOp::Put { key: b"k", value: b"v", expires_at_ms: None }),
                (0, BatchOp::DeleteRange { begin: b"a", end: b"c" }),
                (300, BatchOp::PutPointer { key: b"p", pointer: &[9; 8], expires_at_ms: None }),
                (2, BatchOp::DeleteRange { begin: b"x", end: b"y" }),
            ]
        );
        assert_eq!(b.other_keyspaces, vec![7, 300, 2]);
        let mut plain = WriteBatch::new();
        plain.put(b"k", b"v");
        assert_eq!(plain.rep, [1, 1, 1, b'k', b'v'], "a default-keyspace op has no keyspace bytes");
        assert_eq!(op_len(1, 1), plain.rep.len());
    }

    #[test]
    fn a_range_with_begin_past_end_is_an_invalid_argument_and_a_flagged_default_is_malformed() {
        let mut b = WriteBatch::new();
        b.delete_range(b"z", b"a");
        assert!(matches!(b.check(), Err(Error::InvalidArgument { .. })));
        assert!(b.is_empty());
        // The flag with keyspace 0, and a range whose end precedes its begin, do not decode.
        for bad in [&[0x81, 0, 1, 0, b'k'][..], &[KIND_RANGE_DELETE, 1, 1, b'z', b'a'][..]] {
            assert_eq!(BatchIter::over(bad).next(), Some(Err(0)), "{bad:?}");
        }
    }

    #[test]
    fn truncated_ops_are_reported_not_panicked() {
        let mut b = WriteBatch::new();
        b.put(b"key", b"value");
        for cut in 0..b.rep.len() {
            let r: Vec<_> = BatchIter::over(&b.rep[..cut]).collect();
            assert!(cut == 0 || r.iter().any(|x| x.is_err()));
        }
    }

    #[test]
    fn expiring_ops_carry_their_expiry_time_and_a_short_one_does_not_decode() {
        let mut b = WriteBatch::new();
        b.put_with_ttl(b"k", b"v", Duration::from_millis(250)).put_pointer(3, b"p", &[9; 8], Some(77));
        b.stamp_ttls(1_000).unwrap();
        let ops: Vec<_> = b.iter().collect::<std::result::Result<_, _>>().unwrap();
        assert_eq!(
            ops,
            vec![
                (0, BatchOp::Put { key: b"k", value: b"v", expires_at_ms: Some(1_250) }),
                (3, BatchOp::PutPointer { key: b"p", pointer: &[9; 8], expires_at_ms: Some(77) }),
            ]
        );
        assert_eq!(b.rep[..3], [ValueKind::ExpiringValue as u8, 1, 9], "kind 5, klen 1, vlen 8 + 1");
        // An expiring op whose value cannot hold the expiry time is malformed.
        assert_eq!(BatchIter::over(&[5, 1, 3, b'k', 0, 0, 0]).next(), Some(Err(0)));
        let mut zero = WriteBatch::new();
        zero.put_with_ttl(b"k", b"v", Duration::ZERO);
        assert!(matches!(zero.check(), Err(Error::InvalidTtl { .. })) && zero.is_empty());
    }

    #[test]
    fn oversized_key_is_an_invalid_argument() {
        let mut b = WriteBatch::new();
        b.put(vec![0u8; MAX_KEY_BYTES + 1], b"v");
        assert!(matches!(b.check(), Err(Error::InvalidArgument { .. })));
    }
}
