//! The operation mix a database serves — point lookups that found a value and those that found
//! none, writes, and iterators (short scans) — counted over its whole life: the counts are kept
//! in the `WORKLOAD` file at close and read back at open, so `wisckey tune --db` can choose a
//! merge policy for what the database actually does — per keyspace (each keyspace's counts in
//! a section of its own). Advisory: a crash loses the counts since the last clean close, and a
//! damaged file counts as zero.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::fs::Vfs;

/// First line of the file, naming its format (1: the default keyspace only; 2: sections
/// `keyspace NAME` follow with each other keyspace's counts).
const HEADER: &str = "wisckey-workload 2";
const HEADER_V1: &str = "wisckey-workload 1";

/// What users did lately, as the background jobs see it from one look to the next. Value-log
/// GC and compaction leave the disk to users who only read (docs/design.md, "Reads first").
#[derive(Default)]
pub(crate) struct UserActivity(parking_lot::Mutex<Activity>);

#[derive(Default)]
struct Activity {
    /// The counts below were taken once: the first look only takes them (the read counts
    /// start at open from the lifetime counts the `WORKLOAD` file saved, not at zero).
    seen: bool,
    written: u64,
    read: u64,
    wrote_at: Option<Instant>,
    read_at: Option<Instant>,
}

impl UserActivity {
    /// Whether the counts of bytes `written` and of reads `read` changed within `window`
    /// (each judged against the last look: the first look sees neither change).
    pub fn recent(&self, written: u64, read: u64, window: Duration) -> (bool, bool) {
        let now = Instant::now();
        let mut a = self.0.lock();
        if !a.seen {
            (a.seen, a.written, a.read) = (true, written, read);
        }
        if written != a.written {
            (a.written, a.wrote_at) = (written, Some(now));
        }
        if read != a.read {
            (a.read, a.read_at) = (read, Some(now));
        }
        let within = |at: Option<Instant>| at.is_some_and(|t| now.duration_since(t) < window);
        (within(a.wrote_at), within(a.read_at))
    }
}

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
    /// The counts a closed database in `dir` recorded for its default keyspace (`None`: no
    /// readable `WORKLOAD` file).
    pub fn read(dir: &Path) -> Option<WorkloadCounts> {
        Self::read_keyspaces(dir)?.remove(crate::db::keyspace::DEFAULT_KEYSPACE_NAME)
    }

    /// The counts a closed database in `dir` recorded, by keyspace name (`None`: no readable
    /// `WORKLOAD` file).
    pub fn read_keyspaces(dir: &Path) -> Option<std::collections::BTreeMap<String, WorkloadCounts>> {
        parse(&std::fs::read_to_string(file_name(dir)).ok()?)
    }
}

pub(crate) fn file_name(dir: &Path) -> std::path::PathBuf {
    dir.join("WORKLOAD")
}

/// The counts the `WORKLOAD` file in `dir` holds, by keyspace name (empty when there is no
/// readable file).
pub(crate) fn load(vfs: &dyn Vfs, dir: &Path) -> std::collections::BTreeMap<String, WorkloadCounts> {
    let text = crate::version::manifest::read_whole_file(vfs, &file_name(dir)).ok();
    text.and_then(|t| parse(&String::from_utf8_lossy(&t))).unwrap_or_default()
}

/// Write every keyspace's counts to the `WORKLOAD` file (not synced: the counts are advisory).
pub(crate) fn save(vfs: &dyn Vfs, dir: &Path, keyspaces: &[(String, WorkloadCounts)]) -> crate::Result<()> {
    let mut text = format!("{HEADER}\n");
    for (name, c) in keyspaces {
        if name != crate::db::keyspace::DEFAULT_KEYSPACE_NAME {
            text.push_str(&format!("keyspace {name}\n"));
        }
        text.push_str(&format!(
            "reads_found {}\nreads_missing {}\nwrites {}\nscans {}\n",
            c.reads_found, c.reads_missing, c.writes, c.scans
        ));
    }
    let mut f = vfs.create(&file_name(dir))?;
    f.append(text.as_bytes())
}

impl WorkloadCounters {
    /// Counters starting from `counts`.
    pub fn starting_at(counts: WorkloadCounts) -> Self {
        let c = WorkloadCounters::default();
        c.reads_found.store(counts.reads_found, Ordering::Relaxed);
        c.reads_missing.store(counts.reads_missing, Ordering::Relaxed);
        c.writes.store(counts.writes, Ordering::Relaxed);
        c.scans.store(counts.scans, Ordering::Relaxed);
        c
    }

    /// Point lookups and iterators so far: what tells value-log GC that users are reading.
    pub fn reads(&self) -> u64 {
        let c = self.counts();
        c.reads_found + c.reads_missing + c.scans
    }

    pub fn counts(&self) -> WorkloadCounts {
        WorkloadCounts {
            reads_found: self.reads_found.load(Ordering::Relaxed),
            reads_missing: self.reads_missing.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            scans: self.scans.load(Ordering::Relaxed),
        }
    }
}

fn parse(text: &str) -> Option<std::collections::BTreeMap<String, WorkloadCounts>> {
    let mut lines = text.lines();
    let header = lines.next()?;
    if header != HEADER && header != HEADER_V1 {
        return None;
    }
    let mut out = std::collections::BTreeMap::new();
    let mut name = crate::db::keyspace::DEFAULT_KEYSPACE_NAME.to_string();
    let mut c = WorkloadCounts::default();
    for line in lines {
        let (field, value) = line.split_once(' ')?;
        if field == "keyspace" {
            out.insert(std::mem::replace(&mut name, value.to_string()), std::mem::take(&mut c));
            continue;
        }
        let v: u64 = value.parse().ok()?;
        match field {
            "reads_found" => c.reads_found = v,
            "reads_missing" => c.reads_missing = v,
            "writes" => c.writes = v,
            "scans" => c.scans = v,
            _ => {}
        }
    }
    out.insert(name, c);
    Some(out)
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
        let c = WorkloadCounts { reads_found: 7, writes: 3, scans: 1, ..Default::default() };
        let idx = WorkloadCounts { reads_missing: 9, ..Default::default() };
        save(&fs, dir, &[("default".into(), c), ("idx".into(), idx)]).expect("save");
        let loaded = load(&fs, dir);
        assert_eq!(loaded.get("default"), Some(&c));
        assert_eq!(loaded.get("idx"), Some(&idx));
        assert_eq!(WorkloadCounters::starting_at(c).counts(), c);
    }

    #[test]
    fn a_missing_or_damaged_file_counts_as_zero() {
        let fs = MemFs::new();
        let dir = Path::new("/w");
        fs.create_dir_all(dir).expect("dir");
        assert!(load(&fs, dir).is_empty());
        let mut f = fs.create(&file_name(dir)).expect("create");
        f.append(b"wisckey-workload 1\nwrites x\n").expect("append");
        drop(f);
        assert!(load(&fs, dir).is_empty());
        let mut f = fs.create(&file_name(dir)).expect("create");
        f.append(b"wisckey-workload 1\nwrites 5\n").expect("append");
        drop(f);
        assert_eq!(load(&fs, dir)["default"].writes, 5, "a file of the first format reads as the default keyspace's");
    }
}
