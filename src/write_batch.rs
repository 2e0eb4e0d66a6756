//! A write batch: a list of puts and deletes applied atomically, encoded exactly as the ops of
//! one log record group (`docs/format/log.md`), so the log writer copies it without re-encoding.

use crate::error::{Error, Result};
use crate::key::{ValueKind, MAX_KEY_BYTES, MAX_VALUE_BYTES};
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
    },
}

impl<'a> BatchOp<'a> {
    /// The key the op writes.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } | BatchOp::PutPointer { key, .. } => key,
        }
    }
}

/// Bytes of one encoded op with a key and value of these lengths.
pub(crate) fn op_len(key: usize, value: usize) -> usize {
    let varint = |n: usize| (usize::BITS - (n | 1).leading_zeros()).div_ceil(7) as usize;
    1 + varint(key) + varint(value) + key + value
}

/// Puts and deletes applied atomically by `Db::write`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// Encoded ops: `kind u8 | varint klen | varint vlen | key | value` each.
    pub(crate) rep: Vec<u8>,
    pub(crate) count: u32,
    /// Key + value bytes (for write-amplification accounting).
    pub(crate) user_bytes: u64,
    /// First invalid argument seen by put/delete; reported by `Db::write`.
    pub(crate) error: Option<String>,
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

    /// Queue `key = value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.push(ValueKind::Value, key, value)
    }

    /// Queue the deletion of `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.push(ValueKind::Deletion, key, &[])
    }

    /// Queue `key` → an encoded value pointer (GC's relocation to a cold value file). Not
    /// counted as user bytes.
    pub(crate) fn put_pointer(&mut self, key: &[u8], pointer: &[u8]) -> &mut Self {
        let user_bytes = self.user_bytes;
        self.push(ValueKind::Pointer, key, pointer);
        self.user_bytes = user_bytes;
        self
    }

    fn push(&mut self, kind: ValueKind, key: &[u8], value: &[u8]) -> &mut Self {
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
        self.rep.push(kind as u8);
        put_varint32(&mut self.rep, key.len() as u32);
        put_varint32(&mut self.rep, value.len() as u32);
        self.rep.extend_from_slice(key);
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
        self.rep.extend_from_slice(&other.rep);
        self.count += other.count;
        self.user_bytes += other.user_bytes;
        if self.error.is_none() {
            self.error.clone_from(&other.error);
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        match &self.error {
            Some(e) => Err(Error::invalid(e.clone())),
            None => Ok(()),
        }
    }

    /// The ops in order.
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

    fn decode(&mut self) -> Option<BatchOp<'a>> {
        let kind = self.r.u8()?;
        let klen = self.r.varint32()? as usize;
        let vlen = self.r.varint32()? as usize;
        let key = self.r.bytes(klen)?;
        let value = self.r.bytes(vlen)?;
        match ValueKind::from_u8(kind)? {
            ValueKind::Value => Some(BatchOp::Put { key, value }),
            ValueKind::Deletion if vlen == 0 => Some(BatchOp::Delete { key }),
            // An encoded pointer is 7 to 28 bytes.
            ValueKind::Pointer if (7..=28).contains(&vlen) => Some(BatchOp::PutPointer { key, pointer: value }),
            _ => None,
        }
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = std::result::Result<BatchOp<'a>, usize>;

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
    fn op_len_is_the_encoded_size_of_one_put() {
        for (k, v) in [(0, 0), (1, 127), (16, 128), (127, 16383), (128, 16384), (300, 100_000)] {
            let mut b = WriteBatch::new();
            b.put(&vec![1u8; k], &vec![2u8; v]);
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
                BatchOp::Put { key: b"a", value: b"1" },
                BatchOp::Delete { key: b"b" },
                BatchOp::Put { key: b"", value: b"" }
            ]
        );
        assert_eq!(b.len(), 3);
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
    fn oversized_key_is_an_invalid_argument() {
        let mut b = WriteBatch::new();
        b.put(&vec![0u8; MAX_KEY_BYTES + 1], b"v");
        assert!(matches!(b.check(), Err(Error::InvalidArgument { .. })));
    }
}
