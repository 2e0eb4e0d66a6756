//! Snapshots: a registry of the sequence numbers readers hold, so compaction keeps every
//! version some snapshot can still see, and of the tree Versions iterators read, so value-log
//! GC keeps every value those tables still point at.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Sequence numbers of live snapshots, and the Versions iterators read, with reference counts.
#[derive(Default)]
pub struct SnapshotList {
    held: Mutex<BTreeMap<u64, usize>>,
    /// (keyspace, `VersionSet::current_id_of` when the reader took it).
    versions: Mutex<BTreeMap<(u32, u64), usize>>,
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

    /// Register a reader of Version `id` of keyspace `ks`. Taken under the state lock with the
    /// Version itself, so whoever reads the current ids under that lock sees every reader of
    /// an older one.
    pub(crate) fn pin_version(self: &Arc<Self>, ks: u32, id: u64) -> VersionPin {
        *self.versions.lock().entry((ks, id)).or_insert(0) += 1;
        VersionPin { ks, id, list: Arc::clone(self) }
    }

    /// Whether a reader holds a Version older than `current` (keyspace, Version id) names for
    /// its keyspace.
    pub(crate) fn reads_version_before(&self, current: &[(u32, u64)]) -> bool {
        let held = self.versions.lock();
        current.iter().any(|&(ks, id)| held.range((ks, 0)..(ks, id)).next().is_some())
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

/// A reader's hold on one Version of a keyspace's tree (`SnapshotList::pin_version`), released
/// when dropped.
pub(crate) struct VersionPin {
    ks: u32,
    id: u64,
    list: Arc<SnapshotList>,
}

impl Drop for VersionPin {
    fn drop(&mut self) {
        let mut held = self.list.versions.lock();
        if let Some(n) = held.get_mut(&(self.ks, self.id)) {
            *n -= 1;
            if *n == 0 {
                held.remove(&(self.ks, self.id));
            }
        }
    }
}
