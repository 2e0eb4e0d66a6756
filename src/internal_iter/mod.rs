//! Internal iterators over internal keys (memtable, blocks, tables, levels, merges): the
//! `InternalIterator` trait and the merging iterator. The user-facing `DbIterator` built on
//! them is in `db/user_iter/`.

use crate::error::Result;

/// A positioned cursor over `(internal key, value)` pairs in internal-key order.
///
/// Movement methods return errors (I/O, corruption) directly; after an error the iterator
/// is invalid. `key`/`value` may only be called while `valid()`.
pub trait InternalIterator: Send {
    /// Whether the iterator is at an entry.
    fn valid(&self) -> bool;
    /// Position at the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Position at the last entry.
    fn seek_to_last(&mut self) -> Result<()>;
    /// Position at the first entry with key >= `target` (an internal key).
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Move to the next entry.
    fn next(&mut self) -> Result<()>;
    /// Move to the previous entry.
    fn prev(&mut self) -> Result<()>;
    /// The current internal key.
    fn key(&self) -> &[u8];
    /// The current value (inline bytes or an encoded value pointer).
    fn value(&self) -> &[u8];
    /// The value a pointer entry names, when the source keeps it in memory (a memtable keeps
    /// the newest writes' values): it is then read from here, not from the value log.
    fn kept_value(&self) -> Option<&bytes::Bytes> {
        None
    }
    /// A `seek(target)` is coming: start the device reads it will wait for, without waiting
    /// (a merge asks all its children first, so their reads overlap). A hint: doing nothing is
    /// always right.
    fn prefetch(&mut self, _target: &[u8]) {}
}

/// A boxed iterator is one (merges of children of different kinds hold them boxed).
impl<T: InternalIterator + ?Sized> InternalIterator for Box<T> {
    #[inline]
    fn valid(&self) -> bool {
        (**self).valid()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        (**self).seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        (**self).seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek(target)
    }
    #[inline]
    fn next(&mut self) -> Result<()> {
        (**self).next()
    }
    fn prev(&mut self) -> Result<()> {
        (**self).prev()
    }
    #[inline]
    fn key(&self) -> &[u8] {
        (**self).key()
    }
    #[inline]
    fn value(&self) -> &[u8] {
        (**self).value()
    }
    fn kept_value(&self) -> Option<&bytes::Bytes> {
        (**self).kept_value()
    }
    fn prefetch(&mut self, target: &[u8]) {
        (**self).prefetch(target)
    }
}

pub mod merge;

pub use merge::MergingIterator;
