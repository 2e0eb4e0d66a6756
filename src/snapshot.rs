//! Snapshots: a registry of the sequence numbers readers hold, so compaction keeps every
//! version some snapshot can still see; and of the tree Versions iterators read and the
//! instants they judge expiry at, so value-log GC keeps every value those readers may still
//! follow a pointer to.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Sequence numbers of live snapshots, and the Versions iterators read, with reference counts.
#[derive(Default)]
pub struct SnapshotList {
    held: Mutex<BTreeMap<u64, usize>>,
    /// (keyspace, `VersionSet::current_id_of` when the reader took it).
    versions: Mutex<BTreeMap<(u32, u64), usize>>,
    /// The clock's milliseconds at which iterators judge expiry (once, when made).
    instants: Mutex<BTreeMap<u64, usize>>,
}

/// Take one more reference to `key` in `map`.
fn hold<K: Ord>(map: &Mutex<BTreeMap<K, usize>>, key: K) {
    *map.lock().entry(key).or_insert(0) += 1;
}

/// Drop one reference to `key` in `map`.
fn unhold<K: Ord>(map: &Mutex<BTreeMap<K, usize>>, key: &K) {
    let mut held = map.lock();
    if let Some(n) = held.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            held.remove(key);
        }
    }
}

impl SnapshotList {
    /// Register a snapshot at `seq`.
    pub fn acquire(self: &Arc<Self>, seq: u64) -> Snapshot {
        hold(&self.held, seq);
        Snapshot { seq, list: Arc::clone(self) }
    }

    fn release(&self, seq: u64) {
        unhold(&self.held, &seq);
    }

    /// Register a reader of Version `id` of keyspace `ks`. Taken under the state lock with the
    /// Version itself, so whoever reads the current ids under that lock sees every reader of
    /// an older one.
    pub(crate) fn pin_version(self: &Arc<Self>, ks: u32, id: u64) -> ReaderPin {
        hold(&self.versions, (ks, id));
        ReaderPin { what: Pinned::Version(ks, id), list: Arc::clone(self) }
    }

    /// Whether a reader holds a Version older than `current` (keyspace, Version id; a dropped
    /// keyspace's is `u64::MAX`) names for its keyspace, or one of a keyspace `current` does
    /// not name (forgotten since, or made since: counted, to be safe).
    pub(crate) fn reads_version_before(&self, current: &[(u32, u64)]) -> bool {
        let held = self.versions.lock();
        held.keys().any(|&(ks, id)| current.iter().find(|(k, _)| *k == ks).is_none_or(|&(_, now)| id < now))
    }

    /// Read the clock (`now_ms`) for an iterator that judges expiry at that instant, and
    /// register the instant. Under the registry's lock, as `expiry_instant` reads it: a reader
    /// either is seen or read the clock after GC did.
    pub(crate) fn pin_instant(self: &Arc<Self>, now_ms: impl FnOnce() -> u64) -> (u64, ReaderPin) {
        let mut held = self.instants.lock();
        let now = now_ms();
        *held.entry(now).or_insert(0) += 1;
        (now, ReaderPin { what: Pinned::Instant(now), list: Arc::clone(self) })
    }

    /// The instant value-log GC judges expiry at: the clock now (`now_ms`), or the oldest
    /// instant an iterator judges it at, if earlier (a value expired since that iterator was
    /// made is still one it may read).
    pub(crate) fn expiry_instant(&self, now_ms: impl FnOnce() -> u64) -> u64 {
        let held = self.instants.lock();
        let now = now_ms();
        held.keys().next().map_or(now, |&oldest| oldest.min(now))
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

/// What a `ReaderPin` holds.
enum Pinned {
    /// A Version of a keyspace's tree (keyspace, Version id).
    Version(u32, u64),
    /// An instant expiry is judged at (clock milliseconds).
    Instant(u64),
}

/// A reader's hold on a Version of a keyspace's tree (`SnapshotList::pin_version`) or on the
/// instant it judges expiry at (`SnapshotList::pin_instant`), released when dropped.
pub(crate) struct ReaderPin {
    what: Pinned,
    list: Arc<SnapshotList>,
}

impl Drop for ReaderPin {
    fn drop(&mut self) {
        match self.what {
            Pinned::Version(ks, id) => unhold(&self.list.versions, &(ks, id)),
            Pinned::Instant(at) => unhold(&self.list.instants, &at),
        }
    }
}
