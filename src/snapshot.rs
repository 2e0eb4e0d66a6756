//! Snapshots: a registry of the sequence numbers readers hold, so compaction keeps every
//! version some snapshot can still see.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Sequence numbers of live snapshots, with reference counts.
#[derive(Default)]
pub struct SnapshotList {
    held: Mutex<BTreeMap<u64, usize>>,
}

impl SnapshotList {
    /// Register a snapshot at `seq`.
    pub fn acquire(self: &Arc<Self>, seq: u64) -> Snapshot {
        *self.held.lock().entry(seq).or_insert(0) += 1;
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
