//! What the database's files owe to their other holders, so that nothing changes a byte one
//! of them still reads: a checkpoint or backup being taken pins the files it captured (the
//! sweep deletes none, GC punches none); a checkpoint shares files by hard links, so a file
//! with a second name is never punched nor appended to; and read-only handles, in this
//! process or another, register with a shared lock on `READERS`, so while one exists the
//! writer deletes nothing and punches nothing (docs/design.md, "Checkpoints, backups and
//! read-only handles", has the argument).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::compaction::{Choice, CompactionInput};
use crate::error::Error;
use crate::filename::{readers_file_name, table_file_name};
use crate::fs::{FileLock, Vfs};
use crate::log::LogPos;

/// Files pinned by checkpoints and backups in progress: by number, and every number from a
/// floor on (the log files from a captured log head, before the capture knows which exist).
#[derive(Default)]
struct Pins {
    files: HashMap<u64, usize>,
    floors: Vec<u64>,
}

/// The pinned numbers as the sweep saw them.
pub(crate) struct PinnedSet {
    files: std::collections::HashSet<u64>,
    floor: Option<u64>,
}

impl PinnedSet {
    /// Whether file `number` is pinned.
    pub(crate) fn protects(&self, number: u64) -> bool {
        self.files.contains(&number) || self.floor.is_some_and(|f| number >= f)
    }
}

/// Where a read-only handle's view ends: the log as its open replayed it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadOnlyView {
    /// Just past the last record group replayed.
    pub log_end: LogPos,
    /// The sequence number of the last write replayed.
    pub sequence: u64,
}

/// The file-sharing state of one open database.
#[derive(Default)]
pub(crate) struct Sharing {
    pins: Mutex<Pins>,
    /// One probe of `READERS` at a time in this process: two would see each other's exclusive
    /// lock as a reader.
    probe: Mutex<()>,
    /// A sweep left obsolete files for a pin or a reader: the GC thread sweeps again.
    deferred: AtomicBool,
    /// `Some` for a handle opened read-only.
    read_only: Option<ReadOnlyView>,
}

/// Files pinned until this is dropped (then the sweep runs again for what it left).
pub(crate) struct PinGuard<'a> {
    sharing: &'a Sharing,
    files: Vec<u64>,
    floor: Option<u64>,
}

impl PinGuard<'_> {
    /// Pin `files` too, and drop the floor: the capture now knows every file it needs.
    pub(crate) fn narrow(&mut self, files: &[u64]) {
        let mut pins = self.sharing.pins.lock();
        for &f in files {
            *pins.files.entry(f).or_insert(0) += 1;
        }
        self.files.extend_from_slice(files);
        if let Some(floor) = self.floor.take() {
            if let Some(at) = pins.floors.iter().position(|&f| f == floor) {
                pins.floors.swap_remove(at);
            }
        }
    }
}

impl Drop for PinGuard<'_> {
    fn drop(&mut self) {
        let mut pins = self.sharing.pins.lock();
        for f in &self.files {
            if let Some(n) = pins.files.get_mut(f) {
                *n -= 1;
                if *n == 0 {
                    pins.files.remove(f);
                }
            }
        }
        if let Some(floor) = self.floor {
            if let Some(at) = pins.floors.iter().position(|&f| f == floor) {
                pins.floors.swap_remove(at);
            }
        }
        self.sharing.deferred.store(true, Ordering::Release);
    }
}

/// Held while the writer deletes or punches: no read-only handle is registered, and none can
/// register until it is dropped.
pub(crate) struct NoReaders<'a> {
    // Fields drop in declaration order: the file lock must go before the probe, or a second
    // sweep (another background thread) takes the probe, finds `READERS` still locked by this
    // one and skips as if a read-only handle were there — a finished keyspace drop then left
    // its tables on disk until some later sweep.
    _lock: Option<Box<dyn FileLock>>,
    _probe: MutexGuard<'a, ()>,
}

impl Sharing {
    /// The state of a handle opened read-only, whose view ends at `view`.
    pub(crate) fn read_only(view: ReadOnlyView) -> Self {
        Sharing { read_only: Some(view), ..Default::default() }
    }

    /// Where a read-only handle's view ends; `None` for the writer.
    pub(crate) fn read_only_view(&self) -> Option<ReadOnlyView> {
        self.read_only
    }

    /// `Err(ReadOnly)` for a handle opened read-only: `op` would change the database.
    pub(crate) fn writable(&self, dir: &Path, op: &'static str) -> crate::Result<()> {
        match self.read_only {
            Some(_) => Err(Error::ReadOnly { path: dir.to_path_buf(), op }),
            None => Ok(()),
        }
    }

    /// Pin `files`, and every number from `floor` on, until `adopt_pins` hands the pins to a
    /// guard. Called under the DB mutex with the capture it protects, so a GC step recorded
    /// after the capture sees the pin before it punches (see `may_change_in_place`).
    pub(crate) fn pin_numbers(&self, files: &[u64], floor: Option<u64>) {
        let mut pins = self.pins.lock();
        for &f in files {
            *pins.files.entry(f).or_insert(0) += 1;
        }
        pins.floors.extend(floor);
    }

    /// The guard over pins `pin_numbers` took (the same `files` and `floor`): dropping it
    /// unpins them.
    pub(crate) fn adopt_pins(&self, files: Vec<u64>, floor: Option<u64>) -> PinGuard<'_> {
        PinGuard { sharing: self, files, floor }
    }

    /// What is pinned now.
    pub(crate) fn pinned(&self) -> PinnedSet {
        let pins = self.pins.lock();
        PinnedSet { files: pins.files.keys().copied().collect(), floor: pins.floors.iter().min().copied() }
    }

    /// Note that a sweep left files behind; the GC thread sweeps again.
    pub(crate) fn defer(&self) {
        self.deferred.store(true, Ordering::Release);
    }

    /// Whether a sweep is owed (and clear the note).
    pub(crate) fn take_deferred(&self) -> bool {
        self.deferred.swap(false, Ordering::AcqRel)
    }

    /// Make sure no read-only handle is registered, and keep one from registering while the
    /// result is held; `None` (and a deferred sweep) when one is registered. A `READERS` that
    /// cannot even be opened means no reader could have registered either.
    pub(crate) fn exclude_readers(&self, vfs: &dyn Vfs, dir: &Path) -> Option<NoReaders<'_>> {
        let probe = self.probe.lock();
        match vfs.try_lock_exclusive(&readers_file_name(dir)) {
            Ok(lock) => Some(NoReaders { _lock: Some(lock), _probe: probe }),
            Err(Error::Locked { .. }) => {
                self.defer();
                None
            }
            Err(e) => {
                tracing::debug!(error = %e, "READERS cannot be locked; no read-only handle can have registered");
                Some(NoReaders { _lock: None, _probe: probe })
            }
        }
    }

    /// Whether value file `number` (at `path`) may have a byte range punched out now: not while
    /// a checkpoint or backup has it pinned, nor while it has a second name (a checkpoint
    /// shares it), nor while a read-only handle is registered. `Err` says why not; the `Ok`
    /// guard must be held through the punch.
    pub(crate) fn may_change_in_place(
        &self,
        vfs: &dyn Vfs,
        dir: &Path,
        number: u64,
        path: &Path,
    ) -> std::result::Result<NoReaders<'_>, &'static str> {
        if self.pinned().protects(number) {
            return Err("a checkpoint or backup is copying it");
        }
        let readers = self.exclude_readers(vfs, dir).ok_or("a read-only handle reads the database")?;
        match vfs.link_count(path) {
            Ok(1) => Ok(readers),
            Ok(_) => Err("a checkpoint shares it (hard link)"),
            Err(_) => Err("its link count is unknown"),
        }
    }

    /// Light-weight compaction appends to a table only when no checkpoint shares its file: two
    /// databases appending to one file would interleave their segments. A shared target turns
    /// the append into a merge, whose new tables belong to this database alone.
    pub(crate) fn unshare_appends(&self, vfs: &dyn Vfs, dir: &Path, choice: Choice) -> Choice {
        let Choice::Append(a) = choice else { return choice };
        let shared = |number: u64| vfs.link_count(&table_file_name(dir, number)).map_or(true, |n| n > 1);
        if !a.targets.iter().any(|f| shared(f.number)) {
            return Choice::Append(a);
        }
        tracing::debug!(
            targets = a.targets.len(),
            "a checkpoint shares a table light-weight compaction would append to; merging instead"
        );
        let mut task = a.task;
        task.inputs.push(CompactionInput { level: task.output_level, files: a.targets });
        Choice::Merge(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn concurrent_sweeps_never_see_each_others_lock_as_a_reader() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/db")).expect("mkdir");
        let sharing = Sharing::default();
        let refused = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..5_000 {
                        if sharing.exclude_readers(&fs, Path::new("/db")).is_none() {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(refused.load(Ordering::Relaxed), 0, "no read-only handle was registered");
        assert!(!sharing.take_deferred(), "no sweep was deferred");
    }
}
