//! `MemFs`: a thread-safe in-memory filesystem with the same semantics as `PosixFs`
//! (rename replaces, exclusive locks, hole punching), for fast tests and as the backing
//! store of `FaultFs`.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{FileLock, RandomAccessFile, Vfs, WritableFile};
use crate::error::{Error, Result};

/// Contents of one in-memory file (an "inode": open handles keep it alive after removal,
/// like an unlinked file on POSIX).
#[derive(Default)]
struct Inode {
    data: RwLock<FileData>,
}

#[derive(Default)]
struct FileData {
    bytes: Vec<u8>,
    /// Punched ranges `start -> end`, disjoint and sorted, all below `bytes.len()`.
    holes: BTreeMap<u64, u64>,
}

impl FileData {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Bytes not covered by holes: what a real filesystem would keep allocated.
    fn allocated(&self) -> u64 {
        let punched: u64 = self.holes.iter().map(|(s, e)| e - s).sum();
        self.len() - punched
    }

    fn set_len(&mut self, len: u64) {
        let new_len = usize::try_from(len).unwrap_or(usize::MAX);
        self.bytes.resize(new_len, 0);
        self.clip_holes();
    }

    /// Drop hole bookkeeping beyond the end of the file.
    fn clip_holes(&mut self) {
        let len = self.len();
        self.holes.retain(|&s, _| s < len);
        for e in self.holes.values_mut() {
            *e = (*e).min(len);
        }
    }

    /// Zero `[start, end)` and record it as a hole, merging with neighbours.
    fn punch(&mut self, start: u64, end: u64) {
        let end = end.min(self.len());
        if start >= end {
            return;
        }
        // `start < end <= len`, so both fit usize.
        self.bytes[start as usize..end as usize].fill(0);
        let (mut s, mut e) = (start, end);
        let overlapping: Vec<(u64, u64)> =
            self.holes.range(..=end).filter(|(_, &he)| he >= start).map(|(&hs, &he)| (hs, he)).collect();
        for (hs, he) in overlapping {
            self.holes.remove(&hs);
            s = s.min(hs);
            e = e.max(he);
        }
        self.holes.insert(s, e);
    }
}

/// Namespace of the in-memory filesystem.
#[derive(Default)]
struct Tree {
    files: BTreeMap<PathBuf, Arc<Inode>>,
    dirs: BTreeSet<PathBuf>,
    /// Exclusive locks held (`lock`, `try_lock_exclusive`).
    locks: BTreeSet<PathBuf>,
    /// Shared locks held (`lock_shared`), by holder count.
    shared: BTreeMap<PathBuf, usize>,
}

impl Tree {
    /// The root (and the empty relative root) always exist.
    fn dir_exists(&self, dir: &Path) -> bool {
        dir.as_os_str().is_empty() || dir == Path::new("/") || self.dirs.contains(dir)
    }

    fn parent_exists(&self, path: &Path) -> bool {
        path.parent().is_none_or(|p| self.dir_exists(p))
    }

    /// Make sure a lock file exists at `key` (locks create their file, as `flock` users do).
    fn lock_file(&mut self, key: &Path, path: &Path) -> Result<()> {
        if !self.files.contains_key(key) {
            if !self.parent_exists(key) {
                return Err(Error::io("lock", path, os_err(libc::ENOENT)));
            }
            self.files.insert(key.to_path_buf(), Arc::default());
        }
        Ok(())
    }

    /// Take the exclusive lock on `key` if nobody holds it in either mode.
    fn lock_exclusive(&mut self, key: &Path, path: &Path) -> Result<()> {
        self.lock_file(key, path)?;
        if self.shared.contains_key(key) || !self.locks.insert(key.to_path_buf()) {
            return Err(Error::Locked { path: path.to_path_buf() });
        }
        Ok(())
    }
}

/// An in-memory filesystem; clones share the same tree.
#[derive(Clone, Default)]
pub struct MemFs {
    tree: Arc<Mutex<Tree>>,
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.tree.lock();
        f.debug_struct("MemFs").field("files", &t.files.len()).field("dirs", &t.dirs.len()).finish()
    }
}

fn os_err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// Normalize `a/./b/` to `a/b` so lookups don't depend on spelling (`..` is kept as is).
fn norm(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

impl MemFs {
    /// An empty filesystem (only the root directory exists).
    pub fn new() -> Self {
        Self::default()
    }

    fn inode(&self, op: &'static str, path: &Path) -> Result<Arc<Inode>> {
        let tree = self.tree.lock();
        match tree.files.get(&norm(path)) {
            Some(inode) => Ok(inode.clone()),
            None if tree.dir_exists(&norm(path)) => Err(Error::io(op, path, os_err(libc::EISDIR))),
            None => Err(Error::io(op, path, os_err(libc::ENOENT))),
        }
    }
}

/// Appends to a shared inode.
struct MemWritable {
    inode: Arc<Inode>,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.inode.data.write().bytes.extend_from_slice(data);
        Ok(())
    }

    fn sync_data(&mut self) -> Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn syncer(&self) -> Option<Arc<dyn super::FileSyncer>> {
        Some(Arc::new(MemSyncer))
    }

    fn len(&self) -> u64 {
        self.inode.data.read().len()
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.inode.data.write().set_len(len);
        Ok(())
    }
}

/// Syncs nothing: memory is as durable as it gets.
struct MemSyncer;

impl super::FileSyncer for MemSyncer {
    fn sync_data(&self, _appended: u64) -> Result<()> {
        Ok(())
    }
}

/// Reads a shared inode; sees bytes appended after it was opened.
struct MemReadable {
    inode: Arc<Inode>,
    path: PathBuf,
}

impl RandomAccessFile for MemReadable {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let data = self.inode.data.read();
        if offset >= data.len() {
            return Ok(0);
        }
        // `offset < len`, so it fits usize.
        let src = &data.bytes[offset as usize..];
        let n = src.len().min(buf.len());
        buf[..n].copy_from_slice(&src[..n]);
        Ok(n)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.inode.data.read().len())
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Releases the in-memory lock on drop.
struct MemLock {
    tree: Arc<Mutex<Tree>>,
    path: PathBuf,
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        self.tree.lock().locks.remove(&self.path);
    }
}

/// Releases one shared hold on drop.
struct MemSharedLock {
    tree: Arc<Mutex<Tree>>,
    path: PathBuf,
}

impl FileLock for MemSharedLock {}

impl Drop for MemSharedLock {
    fn drop(&mut self) {
        let mut tree = self.tree.lock();
        if let Some(n) = tree.shared.get_mut(&self.path) {
            *n -= 1;
            if *n == 0 {
                tree.shared.remove(&self.path);
            }
        }
    }
}

impl Vfs for MemFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let key = norm(path);
        let mut tree = self.tree.lock();
        if !tree.parent_exists(&key) {
            return Err(Error::io("create", path, os_err(libc::ENOENT)));
        }
        if tree.dir_exists(&key) {
            return Err(Error::io("create", path, os_err(libc::EISDIR)));
        }
        // O_TRUNC semantics: an existing inode is emptied in place (open readers see it).
        let inode = tree.files.entry(key).or_default().clone();
        drop(tree);
        inode.data.write().set_len(0);
        Ok(Box::new(MemWritable { inode }))
    }

    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let inode = self.inode("open_append", path)?;
        Ok(Box::new(MemWritable { inode }))
    }

    fn open_read(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let inode = self.inode("open_read", path)?;
        Ok(Arc::new(MemReadable { inode, path: path.to_path_buf() }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let (src, dst) = (norm(from), norm(to));
        let mut tree = self.tree.lock();
        if !tree.files.contains_key(&src) {
            return Err(Error::io("rename", from, os_err(libc::ENOENT)));
        }
        if !tree.parent_exists(&dst) {
            return Err(Error::io("rename", to, os_err(libc::ENOENT)));
        }
        if tree.dir_exists(&dst) {
            return Err(Error::io("rename", to, os_err(libc::EISDIR)));
        }
        if let Some(inode) = tree.files.remove(&src) {
            tree.files.insert(dst, inode);
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut tree = self.tree.lock();
        match tree.files.remove(&norm(path)) {
            Some(_) => Ok(()),
            None => Err(Error::io("remove", path, os_err(libc::ENOENT))),
        }
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let key = norm(dir);
        let tree = self.tree.lock();
        if !tree.dir_exists(&key) {
            return Err(Error::io("list", dir, os_err(libc::ENOENT)));
        }
        let children = tree.files.keys().chain(tree.dirs.iter());
        let names = children
            .filter(|p| p.parent() == Some(key.as_path()))
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let key = norm(dir);
        let mut tree = self.tree.lock();
        for d in key.ancestors() {
            if tree.files.contains_key(d) {
                return Err(Error::io("create_dir_all", dir, os_err(libc::ENOTDIR)));
            }
        }
        for d in key.ancestors() {
            if !tree.dir_exists(d) {
                tree.dirs.insert(d.to_path_buf());
            }
        }
        Ok(())
    }

    fn remove_dir(&self, dir: &Path) -> Result<()> {
        let key = norm(dir);
        let mut tree = self.tree.lock();
        if !tree.dirs.contains(&key) {
            return Err(Error::io("remove_dir", dir, os_err(libc::ENOENT)));
        }
        let mut children = tree.files.keys().chain(tree.dirs.iter());
        if children.any(|p| p.parent() == Some(key.as_path())) {
            return Err(Error::io("remove_dir", dir, os_err(libc::ENOTEMPTY)));
        }
        tree.dirs.remove(&key);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        if self.tree.lock().dir_exists(&norm(dir)) {
            Ok(())
        } else {
            Err(Error::io("sync_dir", dir, os_err(libc::ENOENT)))
        }
    }

    fn exists(&self, path: &Path) -> bool {
        let key = norm(path);
        let tree = self.tree.lock();
        tree.files.contains_key(&key) || tree.dir_exists(&key)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.tree.lock().dir_exists(&norm(path))
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        Ok(self.inode("stat", path)?.data.read().len())
    }

    fn disk_usage(&self, path: &Path) -> Result<u64> {
        Ok(self.inode("stat", path)?.data.read().allocated())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let key = norm(path);
        self.tree.lock().lock_exclusive(&key, path)?;
        Ok(Box::new(MemLock { tree: self.tree.clone(), path: key }))
    }

    fn lock_shared(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let key = norm(path);
        let mut tree = self.tree.lock();
        tree.lock_file(&key, path)?;
        if tree.locks.contains(&key) {
            return Err(Error::Locked { path: path.to_path_buf() });
        }
        *tree.shared.entry(key.clone()).or_insert(0) += 1;
        Ok(Box::new(MemSharedLock { tree: self.tree.clone(), path: key }))
    }

    fn try_lock_exclusive(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        self.lock(path)
    }

    fn link(&self, from: &Path, to: &Path) -> Result<()> {
        let (src, dst) = (norm(from), norm(to));
        let mut tree = self.tree.lock();
        let Some(inode) = tree.files.get(&src).cloned() else {
            return Err(Error::io("link", from, os_err(libc::ENOENT)));
        };
        if !tree.parent_exists(&dst) {
            return Err(Error::io("link", to, os_err(libc::ENOENT)));
        }
        if tree.files.contains_key(&dst) || tree.dir_exists(&dst) {
            return Err(Error::io("link", to, os_err(libc::EEXIST)));
        }
        tree.files.insert(dst, inode);
        Ok(())
    }

    fn link_count(&self, path: &Path) -> Result<u64> {
        let inode = self.inode("stat", path)?;
        Ok(self.tree.lock().files.values().filter(|i| Arc::ptr_eq(i, &inode)).count() as u64)
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        let inode = self.inode("punch_hole", path)?;
        inode.data.write().punch(offset, offset.saturating_add(len));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs_with_dir() -> Result<MemFs> {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/db"))?;
        Ok(fs)
    }

    fn write(fs: &MemFs, path: &str, data: &[u8]) -> Result<()> {
        fs.create(Path::new(path))?.append(data)
    }

    fn read_all(fs: &MemFs, path: &str) -> Result<Vec<u8>> {
        let f = fs.open_read(Path::new(path))?;
        let mut buf = vec![0u8; f.len()? as usize];
        f.read_exact_at(0, &mut buf)?;
        Ok(buf)
    }

    #[test]
    fn readers_see_bytes_appended_after_open() -> Result<()> {
        let fs = fs_with_dir()?;
        let mut w = fs.create(Path::new("/db/1.log"))?;
        w.append(b"abc")?;
        let r = fs.open_read(Path::new("/db/1.log"))?;
        w.append(b"def")?;
        let mut buf = [0u8; 6];
        r.read_exact_at(0, &mut buf)?;
        assert_eq!(&buf, b"abcdef");
        assert_eq!(r.read_at(6, &mut buf)?, 0);
        assert!(r.read_exact_at(4, &mut buf).unwrap_err().is_corruption());
        Ok(())
    }

    #[test]
    fn create_in_missing_dir_fails_with_enoent() -> Result<()> {
        let fs = MemFs::new();
        let Err(err) = fs.create(Path::new("/nope/x")) else {
            panic!("created a file in a missing directory");
        };
        assert!(matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOENT)));
        Ok(())
    }

    #[test]
    fn rename_replaces_target_and_moves_open_inode() -> Result<()> {
        let fs = fs_with_dir()?;
        write(&fs, "/db/CURRENT.tmp", b"MANIFEST-2")?;
        write(&fs, "/db/CURRENT", b"MANIFEST-1")?;
        let old = fs.open_read(Path::new("/db/CURRENT"))?;
        fs.rename(Path::new("/db/CURRENT.tmp"), Path::new("/db/CURRENT"))?;
        assert!(!fs.exists(Path::new("/db/CURRENT.tmp")));
        assert_eq!(read_all(&fs, "/db/CURRENT")?, b"MANIFEST-2");
        // The replaced inode lives on for its open reader, like an unlinked POSIX file.
        let mut buf = [0u8; 10];
        old.read_exact_at(0, &mut buf)?;
        assert_eq!(&buf, b"MANIFEST-1");
        assert!(fs.rename(Path::new("/db/missing"), Path::new("/db/x")).is_err());
        Ok(())
    }

    #[test]
    fn remove_list_and_dirs_behave_like_posix() -> Result<()> {
        let fs = fs_with_dir()?;
        fs.create_dir_all(Path::new("/db/sub"))?;
        write(&fs, "/db/a", b"1")?;
        write(&fs, "/db/./b", b"2")?;
        let mut names = fs.list(Path::new("/db"))?;
        names.sort();
        assert_eq!(names, ["a", "b", "sub"]);
        assert!(fs.remove_dir(Path::new("/db")).is_err(), "non-empty");
        fs.remove(Path::new("/db/b"))?;
        assert!(fs.remove(Path::new("/db/b")).is_err());
        assert!(!fs.exists(Path::new("/db/b")));
        fs.remove_dir(Path::new("/db/sub"))?;
        assert!(!fs.is_dir(Path::new("/db/sub")));
        assert!(fs.is_dir(Path::new("/db")));
        assert!(fs.list(Path::new("/missing")).is_err());
        assert!(fs.open_read(Path::new("/db")).is_err(), "a directory is not a file");
        fs.sync_dir(Path::new("/db"))?;
        Ok(())
    }

    #[test]
    fn truncate_and_create_shrink_the_file() -> Result<()> {
        let fs = fs_with_dir()?;
        write(&fs, "/db/f", b"abcdef")?;
        let mut w = fs.open_append(Path::new("/db/f"))?;
        assert_eq!(w.len(), 6);
        w.truncate(2)?;
        w.append(b"Z")?;
        assert_eq!(read_all(&fs, "/db/f")?, b"abZ");
        assert!(fs.create(Path::new("/db/f"))?.is_empty());
        assert_eq!(fs.file_size(Path::new("/db/f"))?, 0);
        Ok(())
    }

    #[test]
    fn second_lock_fails_until_first_dropped() -> Result<()> {
        let fs = fs_with_dir()?;
        let l = fs.lock(Path::new("/db/LOCK"))?;
        assert!(matches!(fs.lock(Path::new("/db/LOCK")), Err(Error::Locked { .. })));
        // Clones share the tree, so they share locks too.
        assert!(matches!(fs.clone().lock(Path::new("/db/./LOCK")), Err(Error::Locked { .. })));
        drop(l);
        let _l = fs.lock(Path::new("/db/LOCK"))?;
        Ok(())
    }

    #[test]
    fn a_link_is_the_same_file_under_a_second_name() -> Result<()> {
        let fs = fs_with_dir()?;
        write(&fs, "/db/a", b"one")?;
        fs.link(Path::new("/db/a"), Path::new("/db/b"))?;
        assert_eq!(fs.link_count(Path::new("/db/b"))?, 2);
        fs.open_append(Path::new("/db/a"))?.append(b" two")?;
        assert_eq!(read_all(&fs, "/db/b")?, b"one two", "appends through one name show through the other");
        assert!(fs.link(Path::new("/db/a"), Path::new("/db/b")).is_err());
        fs.remove(Path::new("/db/a"))?;
        assert_eq!(fs.link_count(Path::new("/db/b"))?, 1);
        assert_eq!(read_all(&fs, "/db/b")?, b"one two");
        Ok(())
    }

    #[test]
    fn shared_and_exclusive_locks_exclude_each_other() -> Result<()> {
        let fs = fs_with_dir()?;
        let p = Path::new("/db/READERS");
        let (a, b) = (fs.lock_shared(p)?, fs.lock_shared(p)?);
        assert!(matches!(fs.try_lock_exclusive(p), Err(Error::Locked { .. })));
        drop((a, b));
        let probe = fs.try_lock_exclusive(p)?;
        assert!(matches!(fs.lock_shared(p), Err(Error::Locked { .. })));
        drop(probe);
        drop(fs.lock_shared(p)?);
        Ok(())
    }

    #[test]
    fn punch_hole_zeroes_range_and_lowers_disk_usage() -> Result<()> {
        let fs = fs_with_dir()?;
        write(&fs, "/db/v", &[9u8; 1000])?;
        let p = Path::new("/db/v");
        assert_eq!(fs.disk_usage(p)?, 1000);
        assert!(fs.punch_hole(p, 100, 200)?);
        assert!(fs.punch_hole(p, 250, 100)?, "overlapping punch merges");
        assert!(fs.punch_hole(p, 900, 500)?, "punch past EOF is clipped");
        assert_eq!(fs.disk_usage(p)?, 1000 - 250 - 100);
        assert_eq!(fs.file_size(p)?, 1000);
        let data = read_all(&fs, "/db/v")?;
        assert!(data[100..350].iter().all(|&b| b == 0));
        assert!(data[350..900].iter().all(|&b| b == 9));
        assert!(data[900..].iter().all(|&b| b == 0));
        let mut w = fs.open_append(p)?;
        w.truncate(200)?;
        assert_eq!(fs.disk_usage(p)?, 100, "holes past the new end are forgotten");
        Ok(())
    }

    #[test]
    fn concurrent_appends_and_reads_are_safe() -> Result<()> {
        let fs = fs_with_dir()?;
        let mut w = fs.create(Path::new("/db/c"))?;
        let r = fs.open_read(Path::new("/db/c"))?;
        let reader = std::thread::spawn(move || -> Result<u64> {
            let mut last = 0;
            for _ in 0..1000 {
                let len = r.len()?;
                assert!(len >= last, "file never shrinks");
                last = len;
            }
            Ok(last)
        });
        for i in 0..1000u32 {
            w.append(&i.to_le_bytes())?;
        }
        let seen = reader.join().map_err(|_| Error::invalid("reader panicked"))??;
        assert!(seen <= 4000);
        assert_eq!(w.len(), 4000);
        Ok(())
    }
}
