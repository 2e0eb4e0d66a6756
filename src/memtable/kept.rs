//! Where a memtable keeps the separated values of its writes: copied into large chunks, each
//! value a shared slice of its chunk, and the chunks reused once every handle into them is
//! gone. Fresh memory costs a page fault per 4 KiB on first touch (more than writing the value
//! to the log costs: docs/BENCHMARKS.md §11); reused memory costs nothing, so a database writing
//! at full speed keeps the values of its memtables for the price of a copy.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

/// Bytes of one chunk.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// Values larger than this are not copied: the memtable keeps the slice of the buffer they
/// arrived in (a copy costs more than the fault it saves, and the buffer is mostly the value).
pub(crate) const COPY_MAX_BYTES: usize = 64 << 10;

/// Pooled chunks tried per chunk wanted: each try is one reference-count check.
const TRIES: usize = 8;

/// Spent chunks of a database's memtables, waiting for their last handles to go; a chunk whose
/// values are all dropped is reclaimed in place (`BytesMut::try_reclaim`) instead of a new one
/// being allocated.
pub struct ChunkPool {
    spent: Mutex<VecDeque<BytesMut>>,
    /// Chunks held at most (beyond, a spent chunk is let go: its memory returns to the system
    /// with its last handle).
    max_chunks: usize,
    /// The arena chunks of dropped memtables' skiplists.
    pub(crate) nodes: Arc<super::skiplist::ChunkStash>,
}

impl ChunkPool {
    /// A pool holding up to `max_bytes` of kept-value chunks and `max_node_bytes` of skiplist
    /// arena chunks.
    pub fn new(max_bytes: u64, max_node_bytes: u64) -> ChunkPool {
        let max_chunks = usize::try_from(max_bytes / CHUNK_BYTES as u64).unwrap_or(usize::MAX);
        let node_chunks = max_node_bytes / super::skiplist::CHUNK_BYTES as u64;
        let nodes = Arc::new(super::skiplist::ChunkStash::new(usize::try_from(node_chunks).unwrap_or(usize::MAX)));
        ChunkPool { spent: Mutex::new(VecDeque::new()), max_chunks, nodes }
    }

    /// A chunk with room for `need` bytes: a reclaimed spent one, or a new one.
    fn take(&self, need: usize) -> BytesMut {
        if need <= CHUNK_BYTES {
            let mut spent = self.spent.lock();
            for _ in 0..spent.len().min(TRIES) {
                let Some(mut c) = spent.pop_front() else { break };
                if c.try_reclaim(CHUNK_BYTES) {
                    return c;
                }
                // Still referenced: to the back, oldest first.
                spent.push_back(c);
            }
        }
        BytesMut::with_capacity(CHUNK_BYTES.max(need))
    }

    fn give_back(&self, chunk: BytesMut) {
        let mut spent = self.spent.lock();
        if spent.len() < self.max_chunks {
            spent.push_back(chunk);
        }
    }

    /// Chunks held now (for tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.spent.lock().len()
    }
}

/// The chunk a memtable copies its kept values into.
#[derive(Default)]
pub(crate) struct KeptArena {
    pool: Option<Arc<ChunkPool>>,
    chunk: Mutex<BytesMut>,
}

impl KeptArena {
    pub(crate) fn with_pool(pool: Arc<ChunkPool>) -> KeptArena {
        KeptArena { pool: Some(pool), chunk: Mutex::new(BytesMut::new()) }
    }

    /// A shared copy of `value` in the current chunk (a new one when it is full).
    pub(crate) fn keep(&self, value: &[u8]) -> Bytes {
        let mut chunk = self.chunk.lock();
        if chunk.capacity() - chunk.len() < value.len() {
            let fresh = match &self.pool {
                Some(pool) => pool.take(value.len()),
                None => BytesMut::with_capacity(CHUNK_BYTES.max(value.len())),
            };
            let spent = std::mem::replace(&mut *chunk, fresh);
            if let Some(pool) = &self.pool {
                pool.give_back(spent);
            }
        }
        chunk.extend_from_slice(value);
        chunk.split().freeze()
    }
}

impl Drop for KeptArena {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give_back(std::mem::take(self.chunk.get_mut()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_values_are_copies_in_shared_chunks() {
        let arena = KeptArena::default();
        let a = arena.keep(b"first");
        let b = arena.keep(b"second");
        assert_eq!((&a[..], &b[..]), (&b"first"[..], &b"second"[..]));
        assert_eq!(a.as_ptr() as usize + a.len(), b.as_ptr() as usize, "back to back in one chunk");
        let big = arena.keep(&vec![7u8; CHUNK_BYTES + 10]);
        assert_eq!(big.len(), CHUNK_BYTES + 10, "a value longer than a chunk gets a chunk of its own");
    }

    #[test]
    fn a_chunk_is_reused_once_its_values_are_gone() {
        let pool = Arc::new(ChunkPool::new(16 << 20, 0));
        let value = vec![1u8; 300 << 10];
        let first = {
            let arena = KeptArena::with_pool(pool.clone());
            let held: Vec<Bytes> = (0..6).map(|_| arena.keep(&value)).collect();
            assert!(pool.held() >= 1, "the full chunk went to the pool");
            held[0].as_ptr() as usize
        };
        // Every handle of the first arena is gone: its chunks are reclaimed, not allocated anew.
        let arena = KeptArena::with_pool(pool.clone());
        let again = arena.keep(&value);
        assert_eq!(again.as_ptr() as usize, first, "the first chunk was reused in place");
        // A chunk still referenced by a handle is not reused.
        let arena = KeptArena::with_pool(pool.clone());
        let pinned: Vec<Bytes> = (0..4).map(|_| arena.keep(&value)).collect();
        drop(arena);
        let other = KeptArena::with_pool(pool.clone()).keep(&value);
        assert!(pinned.iter().all(|p| p.as_ptr() != other.as_ptr()), "a pinned chunk is left alone");
        assert!(pinned.iter().all(|p| p[..] == value[..]), "and its values are intact");
    }
}
