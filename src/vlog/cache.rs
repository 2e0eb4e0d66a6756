//! The value cache: separated values already read and verified, by where they live in the value
//! log, bounded by their bytes. A hit costs a hash lookup and a reference count — no system
//! call, no copy, no checksum.
//!
//! An entry is a verified value under its op's `(file, offset)`, with what it was verified
//! against: the op's length, the value's crc and a crc of the key. Log positions are never
//! reused for other data except when a failed write is cut away and the offset rewritten, so a
//! hit is only taken when the pointer asking for it names the same op length and value crc and
//! the key asked for has the same crc: what a read from disk is checked against. GC drops the
//! entries of the ranges it frees (`forget_range`, `forget_file`): readers that still hold
//! pointers there are done by then, so the entries would only take space.

use bytes::Bytes;

use super::ValuePointer;

/// A verified value and what it was verified against.
#[derive(Clone)]
struct CachedValue {
    value: Bytes,
    key_crc: u32,
    value_crc: u32,
    op_len: u32,
}

/// Weighs an entry by the bytes it holds plus its bookkeeping.
#[derive(Clone, Copy, Default)]
struct ValueWeighter;

/// What an entry costs besides its bytes (key, handle, the cache's slot).
const ENTRY_OVERHEAD: u64 = 64;

impl quick_cache::Weighter<(u64, u64), CachedValue> for ValueWeighter {
    fn weight(&self, _key: &(u64, u64), v: &CachedValue) -> u64 {
        v.value.len() as u64 + ENTRY_OVERHEAD
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

/// Verified values by `(file, offset)`, at most `capacity_bytes` of them (0: caches nothing).
pub(crate) struct ValueCache {
    cache: Option<quick_cache::sync::Cache<(u64, u64), CachedValue, ValueWeighter>>,
}

impl ValueCache {
    pub(crate) fn new(capacity_bytes: u64) -> ValueCache {
        let cache = (capacity_bytes > 0).then(|| {
            let items = usize::try_from(capacity_bytes / TYPICAL_ENTRY_BYTES).unwrap_or(usize::MAX).max(16);
            quick_cache::sync::Cache::with_weighter(items, capacity_bytes, ValueWeighter)
        });
        ValueCache { cache }
    }

    /// The value of `user_key` that `ptr` names, if cached and verified against the same op
    /// length, value crc and key.
    #[inline]
    pub(crate) fn get(&self, ptr: &ValuePointer, user_key: &[u8]) -> Option<Bytes> {
        let hit = self.cache.as_ref()?.get(&(ptr.file, ptr.offset))?;
        let same = hit.op_len == ptr.op_len && hit.value_crc == ptr.value_crc;
        (same && hit.key_crc == crate::util::crc(user_key)).then_some(hit.value)
    }

    /// Remember the verified value of `user_key` read at `ptr`.
    #[inline]
    pub(crate) fn insert(&self, ptr: &ValuePointer, user_key: &[u8], value: Bytes) {
        if let Some(c) = &self.cache {
            let key_crc = crate::util::crc(user_key);
            c.insert(
                (ptr.file, ptr.offset),
                CachedValue { value, key_crc, value_crc: ptr.value_crc, op_len: ptr.op_len },
            );
        }
    }

    /// Whether the cache keeps anything at all.
    pub(crate) fn is_on(&self) -> bool {
        self.cache.is_some()
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

    fn ptr(file: u64, offset: u64, op_len: u32, crc: u32) -> ValuePointer {
        ValuePointer { file, offset, op_len, value_crc: crc }
    }

    #[test]
    fn a_hit_needs_the_same_op_length_crc_and_key() {
        let cache = ValueCache::new(1 << 20);
        cache.insert(&ptr(3, 100, 20, 7), b"k", Bytes::from_static(b"0123456789"));
        assert_eq!(cache.get(&ptr(3, 100, 20, 7), b"k").as_deref(), Some(&b"0123456789"[..]));
        assert!(cache.get(&ptr(3, 100, 20, 8), b"k").is_none(), "another crc: a different op");
        assert!(cache.get(&ptr(3, 100, 19, 7), b"k").is_none(), "another length: a different op");
        assert!(cache.get(&ptr(3, 100, 20, 7), b"j").is_none(), "another key's record");
        assert!(cache.get(&ptr(3, 101, 20, 7), b"k").is_none());
        assert!(cache.get(&ptr(4, 100, 20, 7), b"k").is_none());
    }

    #[test]
    fn freed_ranges_and_deleted_files_leave_the_cache() {
        let cache = ValueCache::new(1 << 20);
        for (file, off) in [(1, 0), (1, 50), (1, 100), (2, 50)] {
            cache.insert(&ptr(file, off, 2, 0), b"k", Bytes::from_static(b"op"));
        }
        cache.forget_range(1, 50, 100);
        assert!(cache.get(&ptr(1, 0, 2, 0), b"k").is_some());
        assert!(cache.get(&ptr(1, 50, 2, 0), b"k").is_none(), "inside the freed range");
        assert!(cache.get(&ptr(1, 100, 2, 0), b"k").is_some(), "the range's end is exclusive");
        cache.forget_file(1);
        assert!(cache.get(&ptr(1, 0, 2, 0), b"k").is_none());
        assert!(cache.get(&ptr(2, 50, 2, 0), b"k").is_some(), "other files keep their entries");
        assert_eq!(cache.usage().entries, 1);
    }

    #[test]
    fn the_cache_stays_within_its_bytes_and_zero_caches_nothing() {
        let cache = ValueCache::new(64 << 10);
        let value = Bytes::from(vec![1u8; 1000]);
        for i in 0..1000 {
            cache.insert(&ptr(1, i * 1000, 1010, 0), b"k", value.clone());
        }
        assert!(cache.usage().bytes <= 64 << 10, "{:?}", cache.usage());
        let off = ValueCache::new(0);
        off.insert(&ptr(1, 0, 1010, 0), b"k", value);
        assert!(off.get(&ptr(1, 0, 1010, 0), b"k").is_none());
        assert_eq!(off.usage(), CacheUsage::default());
    }
}
