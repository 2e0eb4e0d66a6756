//! Helpers for damage tests: copy a database's files between filesystems (so each damage case
//! starts from the same pristine bytes), parse the record layout of a log file, and write
//! damaged bytes back durably.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wisckey::fs::{FaultFs, Vfs};

/// Every file of a database directory (not the lock, not `lost/`), with its bytes.
pub type DirImage = Vec<(String, Vec<u8>)>;

/// Read every regular file of `dir` through `vfs`.
pub fn image(vfs: &dyn Vfs, dir: &Path) -> DirImage {
    let mut names = vfs.list(dir).expect("list");
    names.sort();
    names
        .into_iter()
        .filter(|n| n != "LOCK" && !vfs.is_dir(&dir.join(n)))
        .map(|n| {
            let bytes = read(vfs, &dir.join(&n));
            (n, bytes)
        })
        .collect()
}

/// The whole file at `path`.
pub fn read(vfs: &dyn Vfs, path: &Path) -> Vec<u8> {
    let f = vfs.open_read(path).expect("open_read");
    let mut b = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(0, &mut b).expect("read");
    b
}

/// Replace the file at `path` with `bytes`, durably.
pub fn write(vfs: &dyn Vfs, path: &Path, bytes: &[u8]) {
    let mut f = vfs.create(path).expect("create");
    f.append(bytes).expect("append");
    f.sync().expect("sync");
    vfs.sync_dir(path.parent().expect("parent")).expect("sync_dir");
}

/// A fresh in-memory fault-injecting filesystem holding `img` in `dir`, all of it durable.
pub fn restore_fault_fs(img: &DirImage, dir: &Path, seed: u64) -> FaultFs {
    let fs = FaultFs::in_memory(seed);
    restore(&fs, img, dir);
    fs
}

/// Write `img` into `dir` of `vfs` (created if needed).
pub fn restore(vfs: &dyn Vfs, img: &DirImage, dir: &Path) {
    vfs.create_dir_all(dir).expect("mkdir");
    for (name, bytes) in img {
        write(vfs, &dir.join(name), bytes);
    }
}

/// A real directory holding `img` (for `PosixFs` cases).
pub fn restore_tempdir(img: &DirImage) -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("db");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, bytes) in img {
        std::fs::write(dir.join(name), bytes).expect("write");
    }
    (t, dir)
}

/// One record of a log file: `[start, end)`, and for a group its sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rec {
    pub start: u64,
    pub end: u64,
    /// 0 for a mark.
    pub first_seq: u64,
    pub count: u64,
}

impl Rec {
    pub fn is_group(&self) -> bool {
        self.first_seq != 0
    }

    pub fn seqs(&self) -> std::ops::Range<u64> {
        self.first_seq..self.first_seq + self.count
    }
}

/// The records of an intact log file (headers only; `len` tells where the next starts).
pub fn records(bytes: &[u8]) -> Vec<Rec> {
    let (mut at, mut out) = (0usize, Vec::new());
    while at + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4")) as usize;
        let first_seq = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8"));
        let count = u64::from(u32::from_le_bytes(bytes[at + 16..at + 20].try_into().expect("4")));
        out.push(Rec { start: at as u64, end: (at + 20 + len) as u64, first_seq, count });
        at += 20 + len;
    }
    out
}

/// Records whose bytes differ between `before` and `after` (cut records count as changed).
pub fn changed_records(recs: &[Rec], before: &[u8], after: &[u8]) -> Vec<Rec> {
    recs.iter()
        .copied()
        .filter(|r| {
            let (s, e) = (r.start as usize, r.end as usize);
            after.len() < e || before[s..e] != after[s..e]
        })
        .collect()
}

/// Names of the log files of an image, ascending.
pub fn log_names(img: &DirImage) -> Vec<String> {
    img.iter().map(|(n, _)| n.clone()).filter(|n| n.ends_with(".vlog")).collect()
}

/// A shared handle for options.
pub fn arc(fs: &FaultFs) -> Arc<dyn Vfs> {
    Arc::new(fs.clone())
}
