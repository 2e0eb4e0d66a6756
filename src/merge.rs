//! Merge operators (RocksDB's `MergeOperator`): read-modify-write without a read. A
//! `merge(key, operand)` stores the operand as an entry of its own; reads, compaction and
//! value-log GC fold a key's operands into the value beneath them with the keyspace's
//! operator. This file holds the trait, the two operators the engine ships, and the guarded
//! calls the engine makes (a missing operator, an error or a panic becomes `Error::Merge`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::error::{Error, Result};

/// What an operator's `full_merge` returns: the new value, or why the operands cannot be
/// folded (the read or compaction reports it as `Error::Merge`).
pub type MergeResult = std::result::Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>>;

/// Folds merge operands into a value (RocksDB's `MergeOperator`). Set one per keyspace with
/// `Options::merge_operator`. It is called from reads on any thread and from background
/// compaction, so it must be deterministic: the same inputs always give the same value. An
/// error or a panic is reported to the reader as `Error::Merge`; compaction keeps the operands
/// unmerged when it meets one, so nothing is lost.
pub trait MergeOperator: Send + Sync {
    /// The operator's name, recorded with the keyspace: reopening it with an operator of
    /// another name is `Error::IncompatibleOptions`.
    fn name(&self) -> &str;

    /// The value of `key` after applying `operands` (oldest first) to `existing` (`None`: the
    /// key had no value, or was deleted).
    fn full_merge(&self, key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> MergeResult;

    /// One operand equivalent to `operands` (oldest first, at least two), if the operator can
    /// combine operands without the value beneath them; `None` keeps them apart. Compaction
    /// uses it to shorten a key's operand list when it cannot reach the key's value.
    fn partial_merge(&self, _key: &[u8], _operands: &[&[u8]]) -> Option<Vec<u8>> {
        None
    }
}

/// A little-endian `u64` counter (RocksDB's `uint64add`): each operand is 8 bytes, added to
/// the value with wrap-around; a missing value counts as 0. An operand or value of another
/// length is an error.
#[derive(Debug, Default, Clone, Copy)]
pub struct U64AddOperator;

impl U64AddOperator {
    fn decode(what: &str, b: &[u8]) -> std::result::Result<u64, Box<dyn std::error::Error + Send + Sync>> {
        let bytes: [u8; 8] =
            b.try_into().map_err(|_| format!("{what} of {} bytes is not a little-endian u64 (8 bytes)", b.len()))?;
        Ok(u64::from_le_bytes(bytes))
    }
}

impl MergeOperator for U64AddOperator {
    fn name(&self) -> &str {
        "uint64add"
    }

    fn full_merge(&self, _key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> MergeResult {
        let mut sum = match existing {
            Some(v) => Self::decode("the existing value", v)?,
            None => 0,
        };
        for op in operands {
            sum = sum.wrapping_add(Self::decode("an operand", op)?);
        }
        Ok(sum.to_le_bytes().to_vec())
    }

    fn partial_merge(&self, key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        self.full_merge(key, None, operands).ok()
    }
}

/// Appends each operand to the value, with `delimiter` between pieces (none by default):
/// RocksDB's `StringAppendOperator`.
#[derive(Debug, Default, Clone)]
pub struct AppendOperator {
    delimiter: Vec<u8>,
}

impl AppendOperator {
    /// An operator that appends operands as they are.
    pub fn new() -> Self {
        AppendOperator::default()
    }

    /// An operator that puts `delimiter` between the value and each operand.
    pub fn with_delimiter(delimiter: impl AsRef<[u8]>) -> Self {
        AppendOperator { delimiter: delimiter.as_ref().to_vec() }
    }

    fn join<'a>(&self, pieces: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in pieces.enumerate() {
            if i > 0 {
                out.extend_from_slice(&self.delimiter);
            }
            out.extend_from_slice(p);
        }
        out
    }
}

impl MergeOperator for AppendOperator {
    fn name(&self) -> &str {
        "append"
    }

    fn full_merge(&self, _key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> MergeResult {
        Ok(self.join(existing.into_iter().chain(operands.iter().copied())))
    }

    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        Some(self.join(operands.iter().copied()))
    }
}

/// The engine's handle on a keyspace's operator (or its absence) for one fold.
pub(crate) type Operator = Option<Arc<dyn MergeOperator>>;

/// `Error::Merge` for `key` under `op`.
fn merge_error(op: &Operator, key: &[u8], reason: String) -> Error {
    Error::Merge { operator: op.as_ref().map(|o| o.name().to_string()).unwrap_or_default(), key: key.to_vec(), reason }
}

/// Fold `newest_first` (operands, newest first) into `existing` with `op`: a missing
/// operator, an error and a panic are each `Error::Merge`.
pub(crate) fn full_merge(
    op: &Operator,
    key: &[u8],
    existing: Option<&[u8]>,
    newest_first: &[Vec<u8>],
) -> Result<Vec<u8>> {
    let Some(o) = op else {
        let why = "the keyspace holds merge operands but has no merge operator (Options::merge_operator)";
        return Err(merge_error(op, key, why.into()));
    };
    let operands: Vec<&[u8]> = newest_first.iter().rev().map(|v| &v[..]).collect();
    match catch_unwind(AssertUnwindSafe(|| o.full_merge(key, existing, &operands))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(merge_error(op, key, format!("the operator returned an error: {e}"))),
        Err(panic) => Err(merge_error(op, key, format!("the operator panicked: {}", panic_message(&panic)))),
    }
}

/// `partial_merge` of `newest_first` (at least two operands); `None` when the operator cannot
/// combine them, fails or panics.
pub(crate) fn partial_merge(op: &Operator, key: &[u8], newest_first: &[Vec<u8>]) -> Option<Vec<u8>> {
    let o = op.as_ref()?;
    let operands: Vec<&[u8]> = newest_first.iter().rev().map(|v| &v[..]).collect();
    catch_unwind(AssertUnwindSafe(|| o.partial_merge(key, &operands))).ok().flatten()
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    match (p.downcast_ref::<&str>(), p.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (None, Some(s)) => s.clone(),
        _ => "(no message)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64s(v: &[u64]) -> Vec<Vec<u8>> {
        v.iter().rev().map(|n| n.to_le_bytes().to_vec()).collect()
    }

    #[test]
    fn the_counter_adds_operands_to_the_value_and_a_missing_value_is_zero() {
        let op: Operator = Some(Arc::new(U64AddOperator));
        let ten = 10u64.to_le_bytes();
        assert_eq!(full_merge(&op, b"k", Some(&ten), &u64s(&[1, 2])).unwrap(), 13u64.to_le_bytes());
        assert_eq!(full_merge(&op, b"k", None, &u64s(&[5])).unwrap(), 5u64.to_le_bytes());
        assert_eq!(partial_merge(&op, b"k", &u64s(&[1, 2, 3])).unwrap(), 6u64.to_le_bytes());
        let err = full_merge(&op, b"k", Some(b"abc"), &u64s(&[1])).unwrap_err();
        assert!(matches!(&err, Error::Merge { operator, .. } if operator == "uint64add"), "{err}");
    }

    #[test]
    fn append_joins_value_and_operands_oldest_first_with_the_delimiter() {
        let op: Operator = Some(Arc::new(AppendOperator::with_delimiter(",")));
        let newest_first = vec![b"c".to_vec(), b"b".to_vec()];
        assert_eq!(full_merge(&op, b"k", Some(b"a"), &newest_first).unwrap(), b"a,b,c");
        assert_eq!(full_merge(&op, b"k", None, &newest_first).unwrap(), b"b,c");
        assert_eq!(partial_merge(&op, b"k", &newest_first).unwrap(), b"b,c");
    }

    struct Panics;
    impl MergeOperator for Panics {
        fn name(&self) -> &str {
            "panics"
        }
        fn full_merge(&self, _: &[u8], _: Option<&[u8]>, _: &[&[u8]]) -> MergeResult {
            panic!("operator bug")
        }
        fn partial_merge(&self, _: &[u8], _: &[&[u8]]) -> Option<Vec<u8>> {
            panic!("operator bug")
        }
    }

    #[test]
    fn a_panicking_or_missing_operator_is_a_merge_error_not_a_crash() {
        let op: Operator = Some(Arc::new(Panics));
        let err = full_merge(&op, b"k", None, &[b"x".to_vec()]).unwrap_err();
        assert!(err.to_string().contains("operator bug"), "{err}");
        assert_eq!(partial_merge(&op, b"k", &[b"x".to_vec(), b"y".to_vec()]), None);
        let err = full_merge(&None, b"k", None, &[b"x".to_vec()]).unwrap_err();
        assert!(err.to_string().contains("no merge operator"), "{err}");
    }
}
