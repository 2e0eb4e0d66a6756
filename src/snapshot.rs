//! Snapshots: a registry of the sequence numbers readers hold, so compaction keeps every
//! version some snapshot can still see; and of the readers that follow value pointers
//! (iterators, `multi_get`), so value-log GC keeps every value one of them may still read.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Sequence numbers of live snapshots with reference counts, and live readers by the order
/// they registered in.
#[derive(Default)]
pub struct SnapshotList {
    held: Mutex<BTreeMap<u64, usize>>,
    readers: Mutex<Readers>,
}

/// Live readers' registration numbers, and the next number to give out.
#[derive(Default)]
struct Readers {
    live: std::collections::BTreeSet<u64>,
    next: u64,
}

impl SnapshotList {
    /// Register a snapshot at `seq`.
    pub fn acquire(self: &Arc<Self>, seq: u64) -> Snapshot {
        self.acquire_newest(|| seq)
    }

    /// Register a snapshot at the sequence number `newest` reads (the newest visible one),
    /// read while the registry is locked: value-log GC reads that number before it looks at
    /// the registry, so it either sees this snapshot or made its pointer puts visible before
    /// the number was read. (Read first and registered after, a reader descheduled between
    /// the two could miss GC's moves and be missed by its check.)
    pub fn acquire_newest(self: &Arc<Self>, newest: impl FnOnce() -> u64) -> Snapshot {
        let mut held = self.held.lock();
        let seq = newest();
        *held.entry(seq).or_insert(0) += 1;
        Snapshot { seq, list: Arc::clone(self) }
    }

    fn release(&self, seq: u64) {
        let mut held = self.held.lock();
        if let Some(n) = held.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                held.remove(&seq);
            }
        }
    }

    /// Register a reader that will follow value pointers, before it takes its view of the
    /// tree (and, an iterator, reads the clock it judges expiry by).
    pub(crate) fn register_reader(self: &Arc<Self>) -> ReaderPin {
        let mut r = self.readers.lock();
        let number = r.next;
        r.next += 1;
        r.live.insert(number);
        ReaderPin { number, list: Arc::clone(self) }
    }

    /// The number the next reader will register under: a reader still live below it took its
    /// view before now.
    pub(crate) fn next_reader(&self) -> u64 {
        self.readers.lock().next
    }

    /// Whether a reader registered before `next_reader` returned `number` is still live.
    pub(crate) fn reader_registered_before(&self, number: u64) -> bool {
        self.readers.lock().live.first().is_some_and(|&n| n < number)
    }

    /// The oldest snapshot's sequence number, if any snapshot is held.
    pub fn oldest(&self) -> Option<u64> {
        self.held.lock().keys().next().copied()
    }

    /// The newest snapshot's sequence number, if any snapshot is held.
    pub fn newest(&self) -> Option<u64> {
        self.held.lock().keys().next_back().copied()
    }

    /// The oldest snapshot's sequence number, or `current` when none is held.
    pub fn smallest(&self, current: u64) -> u64 {
        self.held.lock().keys().next().copied().unwrap_or(current).min(current)
    }
}

/// A consistent read view: reads through it see exactly the writes made before it was taken.
/// Released when the last clone is dropped.
pub struct Snapshot {
    seq: u64,
    list: Arc<SnapshotList>,
}

impl Snapshot {
    /// The sequence number the snapshot reads at.
    pub fn sequence(&self) -> u64 {
        self.seq
    }
}

impl Clone for Snapshot {
    fn clone(&self) -> Self {
        self.list.acquire(self.seq)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.list.release(self.seq);
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot({})", self.seq)
    }
}

/// A registered reader (`SnapshotList::register_reader`), released when dropped.
pub(crate) struct ReaderPin {
    number: u64,
    list: Arc<SnapshotList>,
}

impl Drop for ReaderPin {
    fn drop(&mut self) {
        self.list.readers.lock().live.remove(&self.number);
    }
}
