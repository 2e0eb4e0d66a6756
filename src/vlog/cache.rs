//! The value cache: separated values already read and verified, by where they live in the value
//! log, bounded by their bytes. A hit costs a hash lookup, a key comparison and a reference
//! count — no system call, no copy, no checksum.
//!
//! An entry is the whole op (kind, lengths, key, value) as it was verified, under its
//! `(file, offset)`. Log positions are never reused for other data except when a failed write
//! is cut away and the offset rewritten, so a hit is only taken when the pointer asking for it
//! has the entry's op length and value crc and the op is a put of the key asked for: exactly
//! what a read from disk is checked against. GC drops the entries of the ranges it frees
//! (`forget_range`, `forget_file`): readers that still hold pointers there are done by then,
//! so the entries would only take space.

use bytes::Bytes;

use super::ValuePointer;

/// A verified op and what it was verified against.
#[derive(Clone)]
pub(crate) struct CachedOp {
    /// The op's bytes (exactly `op_len` of them).
    pub(crate) op: Bytes,
    /// crc32c of the value, as the pointer that read it named.
    pub(crate) value_crc: u32,
}

/// Weighs an entry by the bytes it holds plus its bookkeeping.
#[derive(Clone, Copy, Default)]
struct OpWeighter;

/// What an entry costs besides its bytes (key, handle, the cache's slot).
const ENTRY_OVERHEAD: u64 = 64;

impl quick_cache::Weighter<(u64, u64), CachedOp> for OpWeighter {
    fn weight(&self, _key: &(u64, u64), v: &CachedOp) -> u64 {
        v.op.len() as u64 + ENTRY_OVERHEAD
    }
}

/// Typical entry size, only to size the cache's tables up front.
const TYPICAL_ENTRY_BYTES: u64 = 1024;

/// What a cache holds and how it served lookups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Entries held.
    pub entries: u64,
    /// Their weight: bytes held plus bookkeeping.
    pub bytes: u64,
    /// Lookups that found an entry.
    pub hits: u64,
    /// Lookups that found none.
    pub misses: u64,
}

/// Verified ops by `(file, offset)`, at most `capacity_bytes` of them (0: caches nothing).
pub(crate) struct ValueCache {
    cache: Option<quick_cache::sync::Cache<(u64, u64), CachedOp, OpWeighter>>,
}

impl ValueCache {
    pub(crate) fn new(capacity_bytes: u64) -> ValueCache {
        let cache = (capacity_bytes > 0).then(|| {
            let items = usize::try_from(capacity_bytes / TYPICAL_ENTRY_BYTES).unwrap_or(usize::MAX).max(16);
            quick_cache::sync::Cache::with_weighter(items, capacity_bytes, OpWeighter)
        });
        ValueCache { cache }
    }

    /// The op `ptr` names, if cached and verified against the same op length and value crc.
    #[inline]
    pub(crate) fn get(&self, ptr: &ValuePointer) -> Option<Bytes> {
        let hit = self.cache.as_ref()?.get(&(ptr.file, ptr.offset))?;
        (hit.op.len() == ptr.op_len as usize && hit.value_crc == ptr.value_crc).then_some(hit.op)
    }

    /// Remember a verified op read at `ptr`.
    #[inline]
    pub(crate) fn insert(&self, ptr: &ValuePointer, op: Bytes) {
        if let Some(c) = &self.cache {
            c.insert((ptr.file, ptr.offset), CachedOp { op, value_crc: ptr.value_crc });
        }
    }

    /// Drop the entries of ops starting in `[start, end)` of value file `file` (GC freed them).
    pub(crate) fn forget_range(&self, file: u64, start: u64, end: u64) {
        if let Some(c) = &self.cache {
            c.retain(|&(f, off), _| !(f == file && off >= start && off < end));
        }
    }

    /// Drop every entry of value file `file` (it was deleted).
    pub(crate) fn forget_file(&self, file: u64) {
        self.forget_range(file, 0, u64::MAX);
    }

    /// What the cache holds and how it served lookups.
    pub(crate) fn usage(&self) -> CacheUsage {
        self.cache.as_ref().map_or(CacheUsage::default(), |c| CacheUsage {
            entries: c.len() as u64,
            bytes: c.weight(),
            hits: c.hits(),
            misses: c.misses(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(file: u64, offset: u64, op: &[u8], crc: u32) -> ValuePointer {
        ValuePointer { file, offset, op_len: op.len() as u32, value_crc: crc }
    }

    #[test]
    fn a_hit_needs_the_same_op_length_and_crc() {
        let cache = ValueCache::new(1 << 20);
        let op = Bytes::from_static(b"0123456789");
        cache.insert(&ptr(3, 100, &op, 7), op.clone());
        assert_eq!(cache.get(&ptr(3, 100, &op, 7)).as_deref(), Some(&b"0123456789"[..]));
        assert!(cache.get(&ptr(3, 100, &op, 8)).is_none(), "another crc: a different op");
        assert!(cache.get(&ValuePointer { op_len: 9, ..ptr(3, 100, &op, 7) }).is_none());
        assert!(cache.get(&ptr(3, 101, &op, 7)).is_none());
        assert!(cache.get(&ptr(4, 100, &op, 7)).is_none());
    }

    #[test]
    fn freed_ranges_and_deleted_files_leave_the_cache() {
        let cache = ValueCache::new(1 << 20);
        let op = Bytes::from_static(b"op");
        for (file, off) in [(1, 0), (1, 50), (1, 100), (2, 50)] {
            cache.insert(&ptr(file, off, &op, 0), op.clone());
        }
        cache.forget_range(1, 50, 100);
        assert!(cache.get(&ptr(1, 0, &op, 0)).is_some());
        assert!(cache.get(&ptr(1, 50, &op, 0)).is_none(), "inside the freed range");
        assert!(cache.get(&ptr(1, 100, &op, 0)).is_some(), "the range's end is exclusive");
        cache.forget_file(1);
        assert!(cache.get(&ptr(1, 0, &op, 0)).is_none());
        assert!(cache.get(&ptr(2, 50, &op, 0)).is_some(), "other files keep their entries");
        assert_eq!(cache.usage().entries, 1);
    }

    #[test]
    fn the_cache_stays_within_its_bytes_and_zero_caches_nothing() {
        let cache = ValueCache::new(64 << 10);
        let op = Bytes::from(vec![1u8; 1000]);
        for i in 0..1000 {
            cache.insert(&ptr(1, i * 1000, &op, 0), op.clone());
        }
        assert!(cache.usage().bytes <= 64 << 10, "{:?}", cache.usage());
        let off = ValueCache::new(0);
        off.insert(&ptr(1, 0, &op, 0), op.clone());
        assert!(off.get(&ptr(1, 0, &op, 0)).is_none());
        assert_eq!(off.usage(), CacheUsage::default());
    }
}
