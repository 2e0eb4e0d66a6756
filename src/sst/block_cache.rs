//! The block cache: decoded SSTable blocks shared by all readers, bounded by their bytes.
//!
//! Keyed by `(file_number, block_offset)`; file numbers are never reused within a database,
//! so entries of deleted tables simply age out.

use std::sync::Arc;

use crate::sst::block::Block;

/// Weighs a cached block by the bytes it holds in memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockWeighter;

impl quick_cache::Weighter<(u64, u64), Arc<Block>> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), block: &Arc<Block>) -> u64 {
        block.charge() as u64
    }
}

/// A concurrent, byte-bounded cache of decoded blocks.
pub type BlockCache = quick_cache::sync::Cache<(u64, u64), Arc<Block>, BlockWeighter>;

/// Typical block size, used only to size the cache's hash tables up front.
const TYPICAL_BLOCK_BYTES: usize = 4096;

/// A block cache holding at most about `capacity_bytes` of blocks. Capacity 0 gives a cache
/// that retains nothing (every insert is dropped at once), i.e. caching disabled.
pub fn new_block_cache(capacity_bytes: usize) -> Arc<BlockCache> {
    let items = (capacity_bytes / TYPICAL_BLOCK_BYTES).max(1);
    Arc::new(BlockCache::with_weighter(items, capacity_bytes as u64, BlockWeighter))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn block(bytes: usize) -> Arc<Block> {
        let mut data = vec![0u8; bytes];
        let n = data.len();
        data[n - 8..n - 4].copy_from_slice(&0u32.to_le_bytes());
        data[n - 4..].copy_from_slice(&1u32.to_le_bytes());
        // A block whose only restart is 0 and whose entry area is zeros: valid to build.
        Arc::new(Block::new(data, Arc::from(Path::new("c")), 0).unwrap())
    }

    #[test]
    fn cache_stays_within_its_byte_budget() {
        let cache = new_block_cache(1 << 20);
        for i in 0..1000 {
            cache.insert((1, i * 4096), block(4096));
        }
        assert!(cache.weight() <= 1 << 20, "weight {}", cache.weight());
        assert!(cache.len() > 100, "cache keeps a useful number of blocks");
    }

    #[test]
    fn zero_capacity_cache_keeps_nothing() {
        let cache = new_block_cache(0);
        cache.insert((1, 0), block(4096));
        assert!(cache.get(&(1, 0)).is_none());
        assert_eq!(cache.len(), 0);
    }
}
