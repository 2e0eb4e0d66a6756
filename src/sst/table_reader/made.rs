//! The mapped data blocks a table keeps made, by index entry, within one byte budget for all
//! the tables of a database. A block of a mapped table is a small allocation (its place in
//! the mapping and its restart array's bounds) that a lookup would otherwise validate and
//! allocate again; kept, a lookup takes it by bumping a count. Kept without a bound, a scan of
//! a tree eight times the memory left one behind for every block of every table it passed:
//! 100 MB of heap for 3.8 GB of 100 B entries, which the page cache then lacked (the scan was
//! killed in a 256 MiB cgroup). The budget is the block cache's capacity
//! (`Options::block_cache_bytes`): these are the cache of an uncompressed table's blocks.
//! Blocks are kept first come, first kept; a table's go back to the budget when it closes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::sst::block::Block;

/// What one kept block costs: the block and its reference counts.
const KEPT_BLOCK_BYTES: u64 = (std::mem::size_of::<Block>() + 2 * std::mem::size_of::<usize>()) as u64;

/// The bytes the tables of one database may keep made blocks in (`TableReadOptions`).
#[derive(Debug, Clone)]
pub struct MadeBudget(Arc<Budget>);

#[derive(Debug)]
struct Budget {
    held: AtomicU64,
    capacity: u64,
}

impl Default for MadeBudget {
    /// No bound (tables opened outside a database, in tests and tools).
    fn default() -> Self {
        MadeBudget::with_capacity(u64::MAX)
    }
}

impl MadeBudget {
    /// A budget of `capacity` bytes (0: no table keeps any block made).
    pub fn with_capacity(capacity: u64) -> Self {
        MadeBudget(Arc::new(Budget { held: AtomicU64::new(0), capacity }))
    }

    /// Bytes of kept blocks now, over every table.
    pub fn held_bytes(&self) -> u64 {
        self.0.held.load(Ordering::Relaxed)
    }

    /// Take one block's bytes, if they are left.
    fn charge(&self) -> bool {
        let cap = self.0.capacity;
        let add = |held: u64| held.checked_add(KEPT_BLOCK_BYTES).filter(|&h| h <= cap);
        self.0.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, add).is_ok()
    }

    fn release(&self, blocks: u64) {
        self.0.held.fetch_sub(blocks * KEPT_BLOCK_BYTES, Ordering::Relaxed);
    }
}

/// One table's kept blocks, by index entry.
pub(super) struct MadeBlocks {
    slots: Box<[OnceLock<Arc<Block>>]>,
    budget: MadeBudget,
}

impl MadeBlocks {
    /// Room for `entries` blocks (none when the budget can hold none).
    pub(super) fn new(entries: usize, budget: &MadeBudget) -> Self {
        let entries = if budget.0.capacity < KEPT_BLOCK_BYTES { 0 } else { entries };
        MadeBlocks { slots: (0..entries).map(|_| OnceLock::new()).collect(), budget: budget.clone() }
    }

    /// The block of index entry `i`, if it is kept.
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&Arc<Block>> {
        self.slots.get(i)?.get()
    }

    /// Keep `block` as index entry `i`'s, if the budget has room and no other thread kept
    /// one first.
    pub(super) fn keep(&self, i: usize, block: &Arc<Block>) {
        let Some(slot) = self.slots.get(i) else { return };
        if slot.get().is_some() || !self.budget.charge() {
            return;
        }
        if slot.set(Arc::clone(block)).is_err() {
            self.budget.release(1);
        }
    }

    /// Bytes of the slots themselves, kept blocks or not (`Table::metadata_bytes`).
    pub(super) fn slot_bytes(&self) -> u64 {
        (self.slots.len() * std::mem::size_of::<OnceLock<Arc<Block>>>()) as u64
    }
}

impl Drop for MadeBlocks {
    fn drop(&mut self) {
        let kept = self.slots.iter().filter(|s| s.get().is_some()).count();
        self.budget.release(kept as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn block() -> Arc<Block> {
        let mut data = vec![0u8; 64];
        data[60..].copy_from_slice(&1u32.to_le_bytes());
        Arc::new(Block::new(data, Arc::from(Path::new("t")), 0).unwrap())
    }

    #[test]
    fn tables_keep_blocks_within_one_budget_and_give_them_back_when_closed() {
        let budget = MadeBudget::with_capacity(3 * KEPT_BLOCK_BYTES);
        let (a, b) = (MadeBlocks::new(4, &budget), MadeBlocks::new(4, &budget));
        let blk = block();
        a.keep(0, &blk);
        a.keep(0, &blk); // kept already: charged once
        a.keep(1, &blk);
        b.keep(0, &blk);
        b.keep(1, &blk); // over the budget: not kept
        a.keep(9, &blk); // no such entry
        assert!(a.get(0).is_some() && a.get(1).is_some() && b.get(0).is_some());
        assert!(b.get(1).is_none());
        assert_eq!(budget.held_bytes(), 3 * KEPT_BLOCK_BYTES);
        drop(a);
        assert_eq!(budget.held_bytes(), KEPT_BLOCK_BYTES, "a closed table's blocks go back");
        b.keep(1, &blk);
        assert!(b.get(1).is_some());
        drop(b);
        assert_eq!(budget.held_bytes(), 0);
    }

    #[test]
    fn a_budget_of_nothing_gives_tables_no_slots() {
        let budget = MadeBudget::with_capacity(0);
        let t = MadeBlocks::new(1000, &budget);
        assert_eq!(t.slot_bytes(), 0);
        t.keep(0, &block());
        assert!(t.get(0).is_none() && budget.held_bytes() == 0);
    }
}
