//! `SyncBatch`: the files one background job wrote, synced together at its end instead of each
//! as it is finished. An `fsync` right after a table is written waits for the device to take
//! every byte of it, and the job's thread did nothing else meanwhile (docs/BENCHMARKS.md §13).
//! Writeback starts as each file is finished, the job goes on building the next,
//! and by the final syncs most bytes are already on the device.
//!
//! Used when `Options::defer_compaction_syncs` is in force (by default under light-weight
//! compaction; docs/design.md, "Syncing outputs"). Durability is unchanged: nothing the batch
//! holds is installed in the manifest before `sync_all` returns.

use crate::error::Result;
use crate::fs::WritableFile;

/// Files held unsynced at most: past this the oldest is synced (and closed) early, so a job
/// that writes thousands of tables keeps few descriptors open.
const MAX_PENDING_FILES: usize = 32;

/// Finished files whose bytes are on their way to the device, not yet synced.
pub(crate) struct SyncBatch {
    /// Hold files until `sync_all`; otherwise `push` syncs each at once.
    deferred: bool,
    files: Vec<Box<dyn WritableFile>>,
}

impl SyncBatch {
    /// A batch that defers syncs to `sync_all` when `deferred` (`Options::defer_compaction_syncs`).
    pub(crate) fn new(deferred: bool) -> Self {
        SyncBatch { deferred, files: Vec::new() }
    }

    /// A finished file: synced now, or its writeback started and the file held until `sync_all`.
    pub(crate) fn push(&mut self, mut file: Box<dyn WritableFile>) -> Result<()> {
        if !self.deferred {
            return file.sync();
        }
        file.start_writeback();
        if self.files.len() >= MAX_PENDING_FILES {
            self.files.remove(0).sync()?;
        }
        self.files.push(file);
        Ok(())
    }

    /// `fsync` every held file, in the order they were pushed.
    pub(crate) fn sync_all(&mut self) -> Result<()> {
        for mut f in self.files.drain(..) {
            f.sync()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::fs::{CrashMode, FaultFs, MemFs, Vfs};

    #[test]
    fn files_of_a_batch_are_durable_only_after_sync_all() -> Result<()> {
        let fs = FaultFs::new(std::sync::Arc::new(MemFs::new()), 1);
        fs.create_dir_all(Path::new("/db"))?;
        let mut batch = SyncBatch::new(true);
        for i in 0..(MAX_PENDING_FILES + 3) {
            let mut f = fs.create(Path::new(&format!("/db/{i}.sst")))?;
            f.append(&[7u8; 100])?;
            batch.push(f)?;
        }
        // The oldest three were synced to keep the batch bounded; the rest wait.
        assert_eq!(fs.unsynced_bytes(Path::new("/db/0.sst"))?, 0);
        assert_eq!(fs.unsynced_bytes(Path::new("/db/2.sst"))?, 0);
        assert_eq!(fs.unsynced_bytes(Path::new("/db/3.sst"))?, 100);
        batch.sync_all()?;
        for i in 0..(MAX_PENDING_FILES + 3) {
            assert_eq!(fs.unsynced_bytes(Path::new(&format!("/db/{i}.sst")))?, 0, "file {i}");
        }
        // The engine's manifest edit syncs the directory before it names the files.
        fs.sync_dir(Path::new("/db"))?;
        fs.crash(CrashMode::DropUnsynced)?;
        for i in 0..(MAX_PENDING_FILES + 3) {
            assert_eq!(fs.file_size(Path::new(&format!("/db/{i}.sst")))?, 100, "file {i} after a crash");
        }
        Ok(())
    }

    #[test]
    fn a_batch_that_does_not_defer_syncs_each_file_as_it_is_pushed() -> Result<()> {
        let fs = FaultFs::new(std::sync::Arc::new(MemFs::new()), 1);
        fs.create_dir_all(Path::new("/db"))?;
        let mut batch = SyncBatch::new(false);
        let mut f = fs.create(Path::new("/db/1.sst"))?;
        f.append(&[7u8; 100])?;
        batch.push(f)?;
        assert_eq!(fs.unsynced_bytes(Path::new("/db/1.sst"))?, 0);
        Ok(())
    }
}
