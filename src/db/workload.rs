//! The operation mix a database serves — point lookups that found a value and those that found
//! none, writes, and iterators (short scans) — counted over its whole life: the counts are kept
//! in the `WORKLOAD` file at close and read back at open, so `wisckey tune --db` can choose a
//! merge policy for what the database actually does. Advisory: a crash loses the counts since
//! the last clean close, and a damaged file counts as zero.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fs::Vfs;

/// First line of the file, naming its format.
const HEADER: &str = "wisckey-workload 1";

/// Live counters (this open's operations plus the file's at open).
#[derive(Default)]
pub(crate) struct WorkloadCounters {
    pub reads_found: AtomicU64,
    pub reads_missing: AtomicU64,
    pub writes: AtomicU64,
    pub scans: AtomicU64,
}

/// The counts as `DbStats` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadCounts {
    /// Point lookups (`get`, `multi_get` keys) that found a value.
    pub reads_found: u64,
    /// Point lookups that found none (zero-result lookups).
    pub reads_missing: u64,
    /// Puts and deletes (each operation of a batch).
    pub writes: u64,
    /// Iterators opened (`iter`, `scan`).
    pub scans: u64,
}

impl WorkloadCounts {
    /// The counts a closed database in `dir` recorded (`None`: no readable `WORKLOAD` file).
    pub fn read(dir: &Path) -> Option<WorkloadCounts> {
        parse(&std::fs::read_to_string(file_name(dir)).ok()?)
    }
}

pub(crate) fn file_name(dir: &Path) -> std::path::PathBuf {
    dir.join("WORKLOAD")
}

impl WorkloadCounters {
    /// Counters starting from the `WORKLOAD` file in `dir`, if there is a readable one.
    pub fn load(vfs: &dyn Vfs, dir: &Path) -> Self {
        let c = WorkloadCounters::default();
        let text = crate::version::manifest::read_whole_file(vfs, &file_name(dir)).ok();
        if let Some(counts) = text.and_then(|t| parse(&String::from_utf8_lossy(&t))) {
            c.reads_found.store(counts.reads_found, Ordering::Relaxed);
            c.reads_missing.store(counts.reads_missing, Ordering::Relaxed);
            c.writes.store(counts.writes, Ordering::Relaxed);
            c.scans.store(counts.scans, Ordering::Relaxed);
        }
        c
    }

    pub fn counts(&self) -> WorkloadCounts {
        WorkloadCounts {
            reads_found: self.reads_found.load(Ordering::Relaxed),
            reads_missing: self.reads_missing.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            scans: self.scans.load(Ordering::Relaxed),
        }
    }

    /// Write the counts to the `WORKLOAD` file (not synced: the counts are advisory).
    pub fn save(&self, vfs: &dyn Vfs, dir: &Path) -> crate::Result<()> {
        let c = self.counts();
        let text = format!(
            "{HEADER}\nreads_found {}\nreads_missing {}\nwrites {}\nscans {}\n",
            c.reads_found, c.reads_missing, c.writes, c.scans
        );
        let mut f = vfs.create(&file_name(dir))?;
        f.append(text.as_bytes())
    }
}

fn parse(text: &str) -> Option<WorkloadCounts> {
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let mut c = WorkloadCounts::default();
    for line in lines {
        let (name, value) = line.split_once(' ')?;
        let v: u64 = value.parse().ok()?;
        match name {
            "reads_found" => c.reads_found = v,
            "reads_missing" => c.reads_missing = v,
            "writes" => c.writes = v,
            "scans" => c.scans = v,
            _ => {}
        }
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn counts_survive_a_save_and_load() {
        let fs = MemFs::new();
        let dir = Path::new("/w");
        fs.create_dir_all(dir).expect("dir");
        let c = WorkloadCounters::default();
        c.reads_found.store(7, Ordering::Relaxed);
        c.writes.store(3, Ordering::Relaxed);
        c.scans.store(1, Ordering::Relaxed);
        c.save(&fs, dir).expect("save");
        assert_eq!(WorkloadCounters::load(&fs, dir).counts(), c.counts());
    }

    #[test]
    fn a_missing_or_damaged_file_counts_as_zero() {
        let fs = MemFs::new();
        let dir = Path::new("/w");
        fs.create_dir_all(dir).expect("dir");
        assert_eq!(WorkloadCounters::load(&fs, dir).counts(), WorkloadCounts::default());
        let mut f = fs.create(&file_name(dir)).expect("create");
        f.append(b"wisckey-workload 1\nwrites x\n").expect("append");
        drop(f);
        assert_eq!(WorkloadCounters::load(&fs, dir).counts(), WorkloadCounts::default());
    }
}
