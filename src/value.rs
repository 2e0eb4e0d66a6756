//! `Value`: a value handed out by a read, shared instead of copied. It derefs to `[u8]`; clones
//! and sub-slices bump a reference count. A value from the value cache, a separated value read
//! from disk and an inline value of a cached table block are each handed out without a copy
//! of their bytes, and a handle stays valid after the iterator, snapshot or database that
//! produced it is gone (it owns its bytes or holds what they live in).

use std::borrow::Borrow;
use std::fmt;
use std::ops::{Deref, RangeBounds};

use bytes::Bytes;

/// A value read from the database: a cheap, reference-counted byte slice (`Deref<Target =
/// [u8]>`). Compare it with byte slices, vectors and arrays directly; `to_vec()` or
/// `Vec::from(value)` when an owned vector is needed; `bytes::Bytes::from(value)` to hand it to
/// code built on the `bytes` crate without a copy.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Value(Bytes);

impl Value {
    /// An empty value.
    pub const fn new() -> Value {
        Value(Bytes::new())
    }

    /// A value that copies `bytes`.
    pub fn copy_from_slice(bytes: &[u8]) -> Value {
        Value(Bytes::copy_from_slice(bytes))
    }

    /// The bytes in `range` of this value, sharing its storage.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Value {
        Value(self.0.slice(range))
    }

    /// A value over `owner`'s bytes (`owner.as_ref()[range]`), keeping `owner` alive while any
    /// handle to them exists: no copy.
    pub(crate) fn from_owner<T>(owner: T, range: std::ops::Range<usize>) -> Value
    where
        T: AsRef<[u8]> + Send + 'static,
    {
        Value(Bytes::from_owner(owner).slice(range))
    }

    /// The shared bytes behind the handle.
    pub(crate) fn as_bytes(&self) -> &Bytes {
        &self.0
    }
}

impl Deref for Value {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for Value {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<Vec<u8>> for Value {
    /// Takes the vector's allocation (no copy).
    fn from(v: Vec<u8>) -> Value {
        Value(Bytes::from(v))
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Value {
        Value::copy_from_slice(v)
    }
}

impl From<Bytes> for Value {
    fn from(b: Bytes) -> Value {
        Value(b)
    }
}

impl From<Value> for Bytes {
    fn from(v: Value) -> Bytes {
        v.0
    }
}

impl From<Value> for Vec<u8> {
    /// Reuses the allocation when this is the only handle to a value read into its own buffer;
    /// copies otherwise.
    fn from(v: Value) -> Vec<u8> {
        Vec::from(v.0)
    }
}

impl PartialEq<[u8]> for Value {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[u8]> for Value {
    fn eq(&self, other: &&[u8]) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<u8>> for Value {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == other[..]
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Value {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Value {
    fn eq(&self, other: &&[u8; N]) -> bool {
        **self == other[..]
    }
}

impl PartialEq<Value> for [u8] {
    fn eq(&self, other: &Value) -> bool {
        *self == **other
    }
}

impl PartialEq<Value> for &[u8] {
    fn eq(&self, other: &Value) -> bool {
        **self == **other
    }
}

impl PartialEq<Value> for Vec<u8> {
    fn eq(&self, other: &Value) -> bool {
        self[..] == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_compares_with_the_byte_types_users_hold() {
        let v = Value::from(b"apple".to_vec());
        assert_eq!(v, b"apple");
        assert_eq!(v, &b"apple"[..]);
        assert_eq!(v, b"apple".to_vec());
        assert_eq!(b"apple".to_vec(), v);
        assert_eq!(&v[1..3], b"pp");
        assert_eq!(v.slice(1..3), b"pp");
        assert_eq!(format!("{v:?}"), "b\"apple\"");
        assert_eq!(Vec::from(v.clone()), b"apple".to_vec());
        assert!(Value::new().is_empty());
    }

    #[test]
    fn a_value_over_an_owner_keeps_the_owner_alive_without_copying() {
        let owner = std::sync::Arc::new(b"0123456789".to_vec());
        let weak = std::sync::Arc::downgrade(&owner);
        struct Shared(std::sync::Arc<Vec<u8>>);
        impl AsRef<[u8]> for Shared {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }
        let v = Value::from_owner(Shared(owner.clone()), 2..5);
        let at = owner.as_ptr() as usize + 2;
        drop(owner);
        assert_eq!(v, b"234");
        assert_eq!(v.as_ptr() as usize, at, "the handle points into the owner's bytes");
        assert!(weak.upgrade().is_some(), "the handle keeps the owner alive");
        drop(v);
        assert!(weak.upgrade().is_none(), "and lets it go with the last handle");
    }
}
