//! `VersionSet`: the current `Version`, the counters the manifest persists (file numbers,
//! last sequence, log head, value-log tail, policy, per-value-log-file statistics), and making
//! every change durable in the manifest before it becomes visible. Not internally locked: the DB wraps it in a mutex.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use super::edit::{LogPosition, VersionEdit};
use super::filename::{current_file_name, manifest_file_name};
use super::manifest::{read_current, read_manifest, set_current, ManifestWriter};
use super::{ApplyError, Builder, Version, COMPARATOR_NAME, FORMAT_VERSION, OLDEST_FORMAT_VERSION};
use crate::error::{Error, Result};
use crate::fs::Vfs;

/// A manifest larger than this is replaced by a fresh one holding a snapshot.
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// What the manifest knows about one value-log file holding separated values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobFileStats {
    /// Bytes of separated values in the file that tables have referenced.
    pub total_bytes: u64,
    /// Of those, bytes no table references any more; never more than `total_bytes`.
    pub garbage_bytes: u64,
}

impl BlobFileStats {
    /// Bytes still referenced.
    pub fn live_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.garbage_bytes)
    }

    /// Fraction of the file's separated values that are garbage (0 for an empty file).
    pub fn garbage_ratio(&self) -> f64 {
        if self.total_bytes == 0 {
            return 0.0;
        }
        self.garbage_bytes as f64 / self.total_bytes as f64
    }
}

/// Apply an edit's value-log statistics: deletions, then additions, then garbage (so garbage
/// reported with the bytes it belongs to is counted against them). Garbage for a file without
/// an entry is ignored (it was deleted: nothing to count), and is capped at the file's total.
fn apply_blob_edits(files: &mut BTreeMap<u64, BlobFileStats>, edit: &VersionEdit) {
    for n in &edit.blob_files_deleted {
        files.remove(n);
    }
    for &(n, bytes) in &edit.blob_added {
        let s = files.entry(n).or_default();
        s.total_bytes = s.total_bytes.saturating_add(bytes);
    }
    for &(n, bytes) in &edit.blob_garbage {
        if let Some(s) = files.get_mut(&n) {
            s.garbage_bytes = s.garbage_bytes.saturating_add(bytes).min(s.total_bytes);
        }
    }
}

/// The live state of the database's file set. See `docs/format/manifest.md`.
pub struct VersionSet {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    num_levels: usize,
    policy: String,
    next_file_number: u64,
    last_sequence: u64,
    log_head: LogPosition,
    vlog_tail: LogPosition,
    /// Recorded at the last clean close: the log was durable up to here.
    log_durable: LogPosition,
    compact_pointers: Vec<Option<Vec<u8>>>,
    /// Value-log files holding separated values: number → statistics.
    blob_files: BTreeMap<u64, BlobFileStats>,
    current: Arc<Version>,
    /// Older versions, kept weakly: whichever is still upgradable pins its files.
    older: Vec<Weak<Version>>,
    /// `None` after a failed write: the file may end in a partial record, so the next
    /// `log_and_apply` starts a fresh manifest instead of appending after it.
    manifest: Option<ManifestWriter>,
    /// The manifest `CURRENT` names (as far as we know).
    manifest_file_number: u64,
    /// Manifests written but abandoned (a failed roll); deleted after the next switch.
    stale_manifests: Vec<u64>,
    max_manifest_bytes: u64,
}

impl std::fmt::Debug for VersionSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionSet")
            .field("dir", &self.dir)
            .field("manifest_file_number", &self.manifest_file_number)
            .field("next_file_number", &self.next_file_number)
            .field("last_sequence", &self.last_sequence)
            .field("log_head", &self.log_head)
            .field("vlog_tail", &self.vlog_tail)
            .finish_non_exhaustive()
    }
}

impl VersionSet {
    fn blank(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize, policy: &str) -> Result<Self> {
        if num_levels == 0 {
            return Err(Error::invalid("num_levels must be at least 1"));
        }
        Ok(VersionSet {
            vfs,
            dir: dir.to_path_buf(),
            num_levels,
            policy: policy.to_string(),
            next_file_number: 1,
            last_sequence: 0,
            log_head: LogPosition::default(),
            vlog_tail: LogPosition::default(),
            log_durable: LogPosition::default(),
            compact_pointers: vec![None; num_levels],
            blob_files: BTreeMap::new(),
            current: Arc::new(Version::empty(num_levels)),
            older: Vec::new(),
            manifest: None,
            manifest_file_number: 0,
            stale_manifests: Vec::new(),
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
        })
    }

    /// Start a new database in `dir`: `MANIFEST-000001` holding the initial edit, then `CURRENT`.
    pub fn create(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize, policy: &str) -> Result<VersionSet> {
        if vfs.exists(&current_file_name(dir)) {
            return Err(Error::AlreadyExists { path: dir.to_path_buf() });
        }
        vfs.create_dir_all(dir)?;
        let mut set = Self::blank(vfs, dir, num_levels, policy)?;
        set.write_new_manifest()?;
        Ok(set)
    }

    /// Open an existing database: `CURRENT` → manifest → replay every edit; then write a
    /// fresh manifest (a snapshot of the recovered state) and point `CURRENT` at it, so the
    /// old manifest, torn tail and all, is no longer needed (it is deleted).
    ///
    /// The caller must still `mark_file_number_used` for log files found beyond `log_head`.
    pub fn recover(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize) -> Result<VersionSet> {
        let mut set = Self::load(vfs, dir, num_levels)?;
        set.start_manifest()?;
        Ok(set)
    }

    /// `recover` without writing anything: the state the manifest holds. Call
    /// `start_manifest` before the first `log_and_apply`.
    pub fn load(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize) -> Result<VersionSet> {
        let mut set = Self::blank(vfs, dir, num_levels, "")?;
        let number = read_current(&*set.vfs, dir)?;
        let path = manifest_file_name(dir, number);
        if !set.vfs.exists(&path) {
            return Err(Error::corruption(
                current_file_name(dir),
                0,
                format!("CURRENT names {path:?}, which does not exist"),
            ));
        }
        set.replay(&path, num_levels)?;
        set.manifest_file_number = number;
        set.mark_file_number_used(number);
        Ok(set)
    }

    /// Write a fresh manifest holding a snapshot of the state and point `CURRENT` at it (the
    /// old manifest, torn tail and all, is then deleted).
    pub fn start_manifest(&mut self) -> Result<()> {
        self.write_new_manifest()
    }

    /// Rebuild state from the manifest at `path`.
    fn replay(&mut self, path: &Path, num_levels: usize) -> Result<()> {
        let contents = read_manifest(&*self.vfs, path)?;
        if contents.dropped_bytes > 0 {
            tracing::warn!(
                manifest = %path.display(),
                offset = contents.valid_bytes,
                dropped = contents.dropped_bytes,
                "ignoring torn record at the end of the manifest"
            );
        }
        let mut builder = Builder::new(&Version::empty(num_levels));
        let (mut comparator, mut next_file, mut last_seq) = (None, None, None);
        let mut last_offset = 0;
        for (offset, edit) in &contents.edits {
            last_offset = *offset;
            check_format(&self.dir, edit)?;
            builder.apply(edit).map_err(|e| self.apply_error(e, path, *offset))?;
            comparator = edit.comparator.clone().or(comparator);
            next_file = edit.next_file_number.or(next_file);
            last_seq = edit.last_sequence.or(last_seq);
            self.absorb(edit);
        }
        let missing = |what: &str| Error::corruption(path, 0, format!("manifest never records the {what}"));
        comparator.ok_or_else(|| missing("comparator"))?;
        self.next_file_number = next_file.ok_or_else(|| missing("next file number"))?;
        self.last_sequence = last_seq.ok_or_else(|| missing("last sequence"))?;
        self.current = Arc::new(builder.finish().map_err(|e| self.apply_error(e, path, last_offset))?);
        // Never hand out a number that is already on disk, whatever the counter says.
        let mut used: Vec<u64> = self.current.all_files().map(|(_, f)| f.number).collect();
        used.extend([self.log_head.file, self.vlog_tail.file]);
        used.extend(self.blob_files.keys());
        used.into_iter().for_each(|n| self.mark_file_number_used(n));
        Ok(())
    }

    /// A level the manifest uses but we were not opened with is an options mismatch;
    /// anything else that does not apply means the manifest contradicts itself.
    fn apply_error(&self, e: ApplyError, path: &Path, offset: u64) -> Error {
        match e {
            ApplyError::LevelOutOfRange { level, num_levels } => Error::IncompatibleOptions {
                option: "num_levels",
                existing: format!("at least {} (the manifest uses level {level})", level + 1),
                given: num_levels.to_string(),
            },
            ApplyError::Inconsistent(reason) => Error::corruption(path, offset, reason),
        }
    }

    /// Take the scalar fields an edit carries (everything but the files and the counters
    /// that `log_and_apply` and `replay` handle themselves).
    fn absorb(&mut self, edit: &VersionEdit) {
        if let Some(p) = edit.log_head {
            self.log_head = p;
        }
        if let Some(p) = edit.vlog_tail {
            self.vlog_tail = p;
        }
        if let Some(p) = edit.log_durable {
            self.log_durable = p;
        }
        if let Some(p) = &edit.policy {
            self.policy = p.clone();
        }
        for (level, key) in &edit.compact_pointers {
            if let Some(slot) = self.compact_pointers.get_mut(*level as usize) {
                *slot = Some(key.clone());
            }
        }
        apply_blob_edits(&mut self.blob_files, edit);
    }

    /// Make `edit` durable in the manifest, then install the version it produces.
    /// `next_file_number` and `last_sequence` are filled in from this set (the larger of the
    /// edit's and ours). Rolls to a new manifest when the current one has grown past the
    /// limit or a previous write failed.
    ///
    /// On error nothing is installed, but the edit may or may not be on disk: the caller must
    /// not delete the files the edit adds (treat it as a background error).
    pub fn log_and_apply(&mut self, mut edit: VersionEdit) -> Result<Arc<Version>> {
        if edit.comparator.as_deref().is_some_and(|c| c != COMPARATOR_NAME) {
            return Err(Error::invalid(format!("an edit cannot change the comparator to {:?}", edit.comparator)));
        }
        let mut builder = Builder::new(&self.current);
        builder.apply(&edit).map_err(|e| Error::invalid(format!("bad version edit: {e}")))?;
        let version = builder.finish().map_err(|e| Error::invalid(format!("bad version edit: {e}")))?;

        let roll = self.manifest.as_ref().is_none_or(|m| m.len() >= self.max_manifest_bytes);
        let new_manifest = roll.then(|| self.new_file_number());
        edit.next_file_number = Some(edit.next_file_number.unwrap_or(0).max(self.next_file_number));
        edit.last_sequence = Some(edit.last_sequence.unwrap_or(0).max(self.last_sequence));
        match new_manifest {
            Some(number) => self.roll_manifest(number, &edit)?,
            None => self.append_edit(&edit)?,
        }

        self.mark_file_number_used(edit.next_file_number.unwrap_or(0).saturating_sub(1));
        self.last_sequence = edit.last_sequence.unwrap_or(self.last_sequence);
        self.absorb(&edit);
        self.install(version);
        Ok(self.current.clone())
    }

    fn append_edit(&mut self, edit: &VersionEdit) -> Result<()> {
        let Some(m) = self.manifest.as_mut() else {
            return Err(Error::invalid("no manifest open"));
        };
        if let Err(e) = m.add_record(&edit.encoded()) {
            self.manifest = None;
            return Err(e);
        }
        Ok(())
    }

    /// Write `MANIFEST-<number>` = snapshot of the current state (+ `edit`), then switch
    /// `CURRENT` to it and delete the previous manifest.
    fn roll_manifest(&mut self, number: u64, edit: &VersionEdit) -> Result<()> {
        tracing::info!(from = self.manifest_file_number, to = number, "starting a new manifest");
        self.write_manifest_at(number, Some(edit))
    }

    /// Start a fresh manifest holding only a snapshot (create and recover).
    fn write_new_manifest(&mut self) -> Result<()> {
        let number = self.new_file_number();
        self.write_manifest_at(number, None)
    }

    fn write_manifest_at(&mut self, number: u64, edit: Option<&VersionEdit>) -> Result<()> {
        let old = std::mem::take(&mut self.manifest);
        let writer = match self.write_snapshot_file(number, edit) {
            Ok(w) => w,
            Err(e) => {
                // `CURRENT` was never touched: the partial new file is garbage.
                let _ = self.vfs.remove(&manifest_file_name(&self.dir, number));
                self.manifest = old;
                return Err(e);
            }
        };
        if let Err(e) = set_current(&*self.vfs, &self.dir, number) {
            // `CURRENT` may name either manifest now; both are complete, keep both.
            self.stale_manifests.push(number);
            return Err(e);
        }
        let previous = std::mem::replace(&mut self.manifest_file_number, number);
        self.stale_manifests.push(previous);
        self.manifest = Some(writer);
        self.delete_stale_manifests();
        Ok(())
    }

    fn write_snapshot_file(&self, number: u64, edit: Option<&VersionEdit>) -> Result<ManifestWriter> {
        let mut w = ManifestWriter::create(&*self.vfs, &self.dir, number)?;
        w.add_record(&self.snapshot().encoded())?;
        if let Some(e) = edit {
            w.add_record(&e.encoded())?;
        }
        Ok(w)
    }

    fn delete_stale_manifests(&mut self) {
        for n in std::mem::take(&mut self.stale_manifests) {
            if n == 0 || n == self.manifest_file_number {
                continue;
            }
            let path = manifest_file_name(&self.dir, n);
            if self.vfs.exists(&path) {
                if let Err(e) = self.vfs.remove(&path) {
                    tracing::warn!(error = %e, "could not delete an old manifest");
                }
            }
        }
    }

    /// One edit that recreates the whole current state.
    fn snapshot(&self) -> VersionEdit {
        let compact_pointers = (self.compact_pointers.iter().enumerate())
            .filter_map(|(l, k)| k.as_ref().map(|k| (l as u32, k.clone())))
            .collect();
        let added_files = self.current.all_files().map(|(l, f)| (l as u32, (**f).clone())).collect();
        // Replayed on an empty map, additions then garbage recreate each entry exactly.
        let blob_added = self.blob_files.iter().map(|(&n, s)| (n, s.total_bytes)).collect();
        let blob_garbage =
            (self.blob_files.iter()).filter(|(_, s)| s.garbage_bytes > 0).map(|(&n, s)| (n, s.garbage_bytes)).collect();
        VersionEdit {
            comparator: Some(COMPARATOR_NAME.to_string()),
            format_version: Some(FORMAT_VERSION),
            next_file_number: Some(self.next_file_number),
            last_sequence: Some(self.last_sequence),
            log_head: Some(self.log_head),
            vlog_tail: Some(self.vlog_tail),
            log_durable: (self.log_durable != LogPosition::default()).then_some(self.log_durable),
            compact_pointers,
            deleted_files: Vec::new(),
            added_files,
            policy: Some(self.policy.clone()),
            blob_added,
            blob_garbage,
            blob_files_deleted: Vec::new(),
        }
    }

    fn install(&mut self, version: Version) {
        let old = std::mem::replace(&mut self.current, Arc::new(version));
        self.older.retain(|w| w.strong_count() > 0);
        self.older.push(Arc::downgrade(&old));
    }

    pub fn current(&self) -> Arc<Version> {
        self.current.clone()
    }

    pub fn num_levels(&self) -> usize {
        self.num_levels
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Allocate a file number (tables, logs, manifests; run ids may use it too).
    pub fn new_file_number(&mut self) -> u64 {
        let n = self.next_file_number;
        self.next_file_number += 1;
        n
    }

    pub fn next_file_number(&self) -> u64 {
        self.next_file_number
    }

    /// Make sure `n` is never handed out again (a file found on disk at recovery).
    pub fn mark_file_number_used(&mut self, n: u64) {
        if self.next_file_number <= n {
            self.next_file_number = n.saturating_add(1);
        }
    }

    pub fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    pub fn set_last_sequence(&mut self, s: u64) {
        self.last_sequence = s;
    }

    pub fn log_head(&self) -> LogPosition {
        self.log_head
    }

    /// Where the log was durable at the last clean close (`(0, 0)`: not recorded).
    pub fn log_durable(&self) -> LogPosition {
        self.log_durable
    }

    pub fn vlog_tail(&self) -> LogPosition {
        self.vlog_tail
    }

    pub fn policy(&self) -> &str {
        &self.policy
    }

    pub fn compact_pointer(&self, level: usize) -> Option<&[u8]> {
        self.compact_pointers.get(level)?.as_deref()
    }

    /// Statistics of every value-log file that holds separated values, by file number. A log
    /// file before the log head without an entry holds none and may be deleted.
    pub fn blob_files(&self) -> &BTreeMap<u64, BlobFileStats> {
        &self.blob_files
    }

    /// Statistics of value-log file `n`, if it holds separated values.
    pub fn blob_file(&self, n: u64) -> Option<BlobFileStats> {
        self.blob_files.get(&n).copied()
    }

    /// Numbers of every table file referenced by the current version or any older version
    /// someone still holds: the files that must not be deleted.
    pub fn live_files(&self) -> HashSet<u64> {
        let older = self.older.iter().filter_map(Weak::upgrade);
        let mut live = HashSet::new();
        for v in std::iter::once(self.current.clone()).chain(older) {
            live.extend(v.all_files().map(|(_, f)| f.number));
        }
        live
    }

    /// The manifest `CURRENT` names; every other `MANIFEST-*` file is obsolete.
    pub fn manifest_file_number(&self) -> u64 {
        self.manifest_file_number
    }

    /// Size at which `log_and_apply` rolls to a new manifest (default 64 MiB).
    pub fn set_max_manifest_bytes(&mut self, bytes: u64) {
        self.max_manifest_bytes = bytes;
    }
}

/// Refuse manifests of another key order or a newer format.
fn check_format(dir: &Path, edit: &VersionEdit) -> Result<()> {
    let refuse = |reason: String| Error::NotADatabase { path: dir.to_path_buf(), reason };
    if let Some(c) = edit.comparator.as_deref().filter(|&c| c != COMPARATOR_NAME) {
        return Err(refuse(format!("it uses comparator {c:?}, not {COMPARATOR_NAME:?}")));
    }
    if let Some(v) = edit.format_version.filter(|v| !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(v)) {
        return Err(refuse(format!(
            "format version {v}, this build reads {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::fs::{FileLock, MemFs, RandomAccessFile, WritableFile};
    use crate::key::make_internal_key;
    use crate::version::edit::FileMeta;
    use crate::version::manifest::ManifestWriter;

    const DIR: &str = "/db";

    /// `MemFs` that can be told to fail renames (a crash before `CURRENT` switches) or
    /// appends (a full disk while writing the manifest).
    #[derive(Clone, Default)]
    struct FlakyFs {
        inner: MemFs,
        fail_rename: Arc<AtomicBool>,
        fail_append: Arc<AtomicBool>,
    }

    fn eio(op: &'static str, path: &Path) -> Error {
        Error::io(op, path, std::io::Error::from_raw_os_error(libc::EIO))
    }

    struct FlakyFile {
        inner: Box<dyn WritableFile>,
        fail: Arc<AtomicBool>,
    }

    impl WritableFile for FlakyFile {
        fn append(&mut self, data: &[u8]) -> Result<()> {
            if self.fail.load(Ordering::SeqCst) {
                // Half the bytes land, as in a torn write.
                self.inner.append(&data[..data.len() / 2])?;
                return Err(eio("append", Path::new("flaky")));
            }
            self.inner.append(data)
        }
        fn sync_data(&mut self) -> Result<()> {
            self.inner.sync_data()
        }
        fn sync(&mut self) -> Result<()> {
            self.inner.sync()
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn truncate(&mut self, len: u64) -> Result<()> {
            self.inner.truncate(len)
        }
    }

    impl Vfs for FlakyFs {
        fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
            let inner = self.inner.create(path)?;
            Ok(Box::new(FlakyFile { inner, fail: self.fail_append.clone() }))
        }
        fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
            self.inner.open_append(path)
        }
        fn open_read(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
            self.inner.open_read(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> Result<()> {
            if self.fail_rename.load(Ordering::SeqCst) {
                return Err(eio("rename", from));
            }
            self.inner.rename(from, to)
        }
        fn remove(&self, path: &Path) -> Result<()> {
            self.inner.remove(path)
        }
        fn list(&self, dir: &Path) -> Result<Vec<String>> {
            self.inner.list(dir)
        }
        fn create_dir_all(&self, dir: &Path) -> Result<()> {
            self.inner.create_dir_all(dir)
        }
        fn remove_dir(&self, dir: &Path) -> Result<()> {
            self.inner.remove_dir(dir)
        }
        fn sync_dir(&self, dir: &Path) -> Result<()> {
            self.inner.sync_dir(dir)
        }
        fn exists(&self, path: &Path) -> bool {
            self.inner.exists(path)
        }
        fn is_dir(&self, path: &Path) -> bool {
            self.inner.is_dir(path)
        }
        fn file_size(&self, path: &Path) -> Result<u64> {
            self.inner.file_size(path)
        }
        fn disk_usage(&self, path: &Path) -> Result<u64> {
            self.inner.disk_usage(path)
        }
        fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
            self.inner.lock(path)
        }
        fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
            self.inner.punch_hole(path, offset, len)
        }
    }

    fn file(number: u64, run: u64, lo: &[u8], hi: &[u8]) -> FileMeta {
        FileMeta {
            number,
            size: 1000 + number,
            smallest: make_internal_key(lo, 9, 1),
            largest: make_internal_key(hi, 2, 1),
            run,
            num_entries: 10,
            num_deletions: 1,
            raw_value_bytes: 500,
        }
    }

    fn add(level: u32, f: FileMeta) -> VersionEdit {
        VersionEdit { added_files: vec![(level, f)], ..Default::default() }
    }

    fn dir() -> &'static Path {
        Path::new(DIR)
    }

    /// Everything `recover` must reproduce (`next_file_number` only grows: recovery takes one
    /// for its new manifest).
    #[derive(Debug, PartialEq)]
    struct State {
        version: Version,
        last_sequence: u64,
        log_head: LogPosition,
        vlog_tail: LogPosition,
        policy: String,
        compact_pointer: Option<Vec<u8>>,
        blob_files: BTreeMap<u64, BlobFileStats>,
    }

    fn state(s: &VersionSet) -> State {
        State {
            version: (*s.current()).clone(),
            last_sequence: s.last_sequence(),
            log_head: s.log_head(),
            vlog_tail: s.vlog_tail(),
            policy: s.policy().to_string(),
            compact_pointer: s.compact_pointer(1).map(<[u8]>::to_vec),
            blob_files: s.blob_files().clone(),
        }
    }

    fn stats(total_bytes: u64, garbage_bytes: u64) -> BlobFileStats {
        BlobFileStats { total_bytes, garbage_bytes }
    }

    fn blob_edit(added: &[(u64, u64)], garbage: &[(u64, u64)], deleted: &[u64]) -> VersionEdit {
        VersionEdit {
            blob_added: added.to_vec(),
            blob_garbage: garbage.to_vec(),
            blob_files_deleted: deleted.to_vec(),
            ..Default::default()
        }
    }

    /// A set with a flush, a compaction and a GC step applied; value-log files 5 and 7 hold
    /// separated values (`5`: 6000 B, 1500 B garbage; `7`: 4000 B, none), file 6 had some
    /// and was collected.
    fn populated(fs: Arc<dyn Vfs>) -> VersionSet {
        let mut s = VersionSet::create(fs, dir(), 4, "leveled T=10").unwrap();
        let (a, b) = (s.new_file_number(), s.new_file_number());
        s.set_last_sequence(100);
        let mut flush = add(0, file(a, a, b"a", b"m"));
        flush.added_files.push((0, file(b, b, b"k", b"z")));
        flush.log_head = Some(LogPosition { file: 7, offset: 4096 });
        flush.blob_added = vec![(5, 6000), (6, 2000), (7, 4000)];
        s.log_and_apply(flush).unwrap();
        let c = s.new_file_number();
        let mut compact = add(1, file(c, c, b"a", b"z"));
        compact.deleted_files = vec![(0, a), (0, b)];
        compact.compact_pointers = vec![(1, make_internal_key(b"m", 5, 1))];
        compact.blob_garbage = vec![(5, 1000), (6, 700)];
        s.log_and_apply(compact).unwrap();
        s.log_and_apply(VersionEdit {
            vlog_tail: Some(LogPosition { file: 3, offset: 17 }),
            blob_garbage: vec![(5, 500)],
            blob_files_deleted: vec![6],
            ..Default::default()
        })
        .unwrap();
        s
    }

    #[test]
    fn recover_after_create_and_edits_reproduces_the_same_state() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let s = populated(fs.clone());
        let before = state(&s);
        assert_eq!(before.version.level_files(1), 1);
        assert_eq!(before.log_head, LogPosition { file: 7, offset: 4096 });
        assert_eq!(before.blob_files, BTreeMap::from([(5, stats(6000, 1500)), (7, stats(4000, 0))]));
        drop(s);
        let r = VersionSet::recover(fs.clone(), dir(), 4).unwrap();
        assert_eq!(state(&r), before);
        // Recovery starts a fresh manifest and deletes the old one.
        assert_eq!(read_current(&*fs, dir()).unwrap(), r.manifest_file_number());
        let manifests: Vec<_> = fs.list(dir()).unwrap().into_iter().filter(|n| n.starts_with("MANIFEST-")).collect();
        assert_eq!(manifests, vec![format!("MANIFEST-{:06}", r.manifest_file_number())]);
        // And recovering again still gives the same thing.
        drop(r);
        assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
    }

    #[test]
    fn new_file_numbers_after_recovery_never_reuse_old_ones() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let s = populated(fs.clone());
        let used: HashSet<u64> = s.live_files().into_iter().chain([s.manifest_file_number(), 7]).collect();
        drop(s);
        let mut r = VersionSet::recover(fs, dir(), 4).unwrap();
        let n = r.new_file_number();
        assert!(used.iter().all(|&u| u < n), "{n} vs {used:?}");
    }

    #[test]
    fn manifest_rolls_past_its_size_limit_and_old_one_is_deleted() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut s = VersionSet::create(fs.clone(), dir(), 3, "p").unwrap();
        s.set_max_manifest_bytes(300);
        let first = s.manifest_file_number();
        let mut rolls = 0;
        for i in 0..40u64 {
            let before = s.manifest_file_number();
            let n = s.new_file_number();
            let key = format!("k{i:03}");
            s.log_and_apply(add(1, file(n, 1, key.as_bytes(), key.as_bytes()))).unwrap();
            if s.manifest_file_number() != before {
                rolls += 1;
                assert!(!fs.exists(&manifest_file_name(dir(), before)), "old manifest left behind");
            }
        }
        assert!(rolls >= 2, "only {rolls} rolls");
        assert_ne!(s.manifest_file_number(), first);
        assert_eq!(read_current(&*fs, dir()).unwrap(), s.manifest_file_number());
        let before = state(&s);
        assert_eq!(before.version.level_files(1), 40);
        drop(s);
        assert_eq!(state(&VersionSet::recover(fs, dir(), 3).unwrap()), before);
    }

    #[test]
    fn crash_before_current_switch_leaves_the_old_state_recoverable() {
        let fs = FlakyFs::default();
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        let mut s = populated(vfs.clone());
        let old = state(&s);
        let old_manifest = s.manifest_file_number();
        s.set_max_manifest_bytes(0);
        fs.fail_rename.store(true, Ordering::SeqCst);
        let n = s.new_file_number();
        assert!(s.log_and_apply(add(2, file(n, n, b"x", b"y"))).is_err());
        // Nothing installed; the new manifest is on disk but CURRENT still names the old one.
        assert_eq!(s.current().level_files(2), 0);
        assert_eq!(read_current(&fs, dir()).unwrap(), old_manifest);
        assert!(fs.list(dir()).unwrap().iter().filter(|n| n.starts_with("MANIFEST-")).count() >= 2);
        drop(s);
        let r = VersionSet::recover(vfs.clone(), dir(), 4);
        fs.fail_rename.store(false, Ordering::SeqCst);
        assert!(r.is_err(), "recovery must write CURRENT too");
        let r = VersionSet::recover(vfs, dir(), 4).unwrap();
        assert_eq!(state(&r), old);
        assert!(r.next_file_number() > n, "the number of the abandoned manifest is not reused");
    }

    #[test]
    fn failed_current_switch_then_success_keeps_later_edits_only() {
        let fs = FlakyFs::default();
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        let mut s = populated(vfs.clone());
        s.set_max_manifest_bytes(0);
        fs.fail_rename.store(true, Ordering::SeqCst);
        let lost = s.new_file_number();
        assert!(s.log_and_apply(add(2, file(lost, lost, b"a", b"b"))).is_err());
        fs.fail_rename.store(false, Ordering::SeqCst);
        let kept = s.new_file_number();
        s.log_and_apply(add(2, file(kept, kept, b"c", b"d"))).unwrap();
        let manifests = fs.list(dir()).unwrap().into_iter().filter(|n| n.starts_with("MANIFEST-")).count();
        assert_eq!(manifests, 1, "abandoned manifests are cleaned up after the switch");
        drop(s);
        let r = VersionSet::recover(vfs, dir(), 4).unwrap();
        let l2: Vec<u64> = r.current().all_files().filter(|(l, _)| *l == 2).map(|(_, f)| f.number).collect();
        assert_eq!(l2, vec![kept]);
    }

    #[test]
    fn failed_manifest_append_installs_nothing_and_next_edit_starts_a_clean_manifest() {
        let fs = FlakyFs::default();
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        let mut s = populated(vfs.clone());
        let torn_manifest = s.manifest_file_number();
        fs.fail_append.store(true, Ordering::SeqCst);
        let lost = s.new_file_number();
        assert!(s.log_and_apply(add(2, file(lost, lost, b"a", b"b"))).is_err());
        assert_eq!(s.current().level_files(2), 0);
        fs.fail_append.store(false, Ordering::SeqCst);
        let kept = s.new_file_number();
        s.log_and_apply(add(2, file(kept, kept, b"c", b"d"))).unwrap();
        assert_ne!(s.manifest_file_number(), torn_manifest, "must not append after a partial record");
        let before = state(&s);
        drop(s);
        assert_eq!(state(&VersionSet::recover(vfs, dir(), 4).unwrap()), before);
    }

    #[test]
    fn live_files_keep_an_old_version_while_a_reader_holds_it() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut s = VersionSet::create(fs, dir(), 3, "p").unwrap();
        let a = s.new_file_number();
        s.log_and_apply(add(0, file(a, a, b"a", b"c"))).unwrap();
        let reader = s.current();
        let b = s.new_file_number();
        let mut compact = add(1, file(b, b, b"a", b"c"));
        compact.deleted_files = vec![(0, a)];
        s.log_and_apply(compact).unwrap();
        assert_eq!(s.live_files(), HashSet::from([a, b]));
        drop(reader);
        assert_eq!(s.live_files(), HashSet::from([b]));
    }

    #[test]
    fn edit_deleting_a_missing_file_is_refused_without_writing() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut s = VersionSet::create(fs.clone(), dir(), 3, "p").unwrap();
        let size = fs.file_size(&manifest_file_name(dir(), s.manifest_file_number())).unwrap();
        let bad = VersionEdit { deleted_files: vec![(1, 99)], ..Default::default() };
        assert!(matches!(s.log_and_apply(bad), Err(Error::InvalidArgument { .. })));
        assert!(matches!(s.log_and_apply(add(3, file(5, 5, b"a", b"b"))), Err(Error::InvalidArgument { .. })));
        assert_eq!(fs.file_size(&manifest_file_name(dir(), s.manifest_file_number())).unwrap(), size);
    }

    #[test]
    fn blob_statistics_accumulate_and_garbage_is_capped_at_the_total() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut s = VersionSet::create(fs.clone(), dir(), 3, "p").unwrap();
        s.log_and_apply(blob_edit(&[(4, 100), (9, 50)], &[], &[])).unwrap();
        s.log_and_apply(blob_edit(&[(4, 20)], &[(4, 30), (9, 70)], &[])).unwrap();
        assert_eq!(s.blob_file(4), Some(stats(120, 30)));
        assert_eq!(s.blob_file(9), Some(stats(50, 50)), "garbage capped");
        assert_eq!(s.blob_file(9).map(|b| b.live_bytes()), Some(0));
        // Garbage for a file with no entry creates none; additions in the same edit count
        // before its garbage.
        s.log_and_apply(blob_edit(&[(11, 10)], &[(12, 5), (11, 10)], &[])).unwrap();
        assert_eq!(s.blob_file(12), None);
        assert_eq!(s.blob_file(11), Some(stats(10, 10)));
        let before = state(&s);
        drop(s);
        assert_eq!(state(&VersionSet::recover(fs, dir(), 3).unwrap()), before);
    }

    #[test]
    fn deleted_blob_file_loses_its_entry_across_recovery_and_can_be_added_again() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut s = populated(fs.clone());
        s.log_and_apply(blob_edit(&[], &[], &[5])).unwrap();
        assert_eq!(s.blob_file(5), None);
        assert_eq!(s.blob_files().keys().copied().collect::<Vec<_>>(), vec![7]);
        drop(s);
        let mut r = VersionSet::recover(fs.clone(), dir(), 4).unwrap();
        assert_eq!(r.blob_file(5), None);
        assert_eq!(r.blob_file(7), Some(stats(4000, 0)));
        // Deleting then adding in one edit starts the entry afresh.
        r.log_and_apply(blob_edit(&[(7, 10)], &[(7, 4)], &[7])).unwrap();
        r.log_and_apply(blob_edit(&[(5, 8)], &[], &[])).unwrap();
        let before = state(&r);
        assert_eq!(before.blob_files, BTreeMap::from([(5, stats(8, 0)), (7, stats(10, 4))]));
        drop(r);
        assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
    }

    #[test]
    fn blob_statistics_survive_a_manifest_roll() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let mut s = populated(fs.clone());
        let first = s.manifest_file_number();
        s.set_max_manifest_bytes(0);
        s.log_and_apply(blob_edit(&[(7, 1)], &[(7, 2)], &[])).unwrap();
        assert_ne!(s.manifest_file_number(), first, "rolled");
        let before = state(&s);
        assert_eq!(before.blob_files.get(&7), Some(&stats(4001, 2)));
        drop(s);
        assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
    }

    #[test]
    fn recovery_never_hands_out_a_blob_file_number() {
        // A hand-written manifest whose counter lags behind a blob file it names.
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        fs.create_dir_all(dir()).unwrap();
        let mut w = ManifestWriter::create(&*fs, dir(), 2).unwrap();
        let edit = VersionEdit {
            comparator: Some(COMPARATOR_NAME.into()),
            next_file_number: Some(3),
            last_sequence: Some(0),
            blob_added: vec![(40, 1)],
            ..Default::default()
        };
        w.add_record(&edit.encoded()).unwrap();
        set_current(&*fs, dir(), 2).unwrap();
        let mut r = VersionSet::recover(fs, dir(), 2).unwrap();
        assert!(r.manifest_file_number() > 40);
        assert!(r.new_file_number() > 40);
    }

    #[test]
    fn garbage_ratio_of_a_blob_file() {
        assert_eq!(stats(0, 0).garbage_ratio(), 0.0);
        assert_eq!(stats(400, 100).garbage_ratio(), 0.25);
        assert_eq!(stats(400, 100).live_bytes(), 300);
    }

    /// Append a raw edit to the live manifest, bypassing the checks of `log_and_apply`.
    fn append_raw(fs: &Arc<dyn Vfs>, s: &VersionSet, edit: &VersionEdit) -> PathBuf {
        let path = manifest_file_name(dir(), s.manifest_file_number());
        let mut f = fs.open_append(&path).unwrap();
        f.append(&crate::version::manifest::encode_record(&edit.encoded()).unwrap()).unwrap();
        path
    }

    #[test]
    fn inconsistent_manifest_is_corruption_naming_the_manifest() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let s = populated(fs.clone());
        let len = fs.file_size(&manifest_file_name(dir(), s.manifest_file_number())).unwrap();
        let path = append_raw(&fs, &s, &VersionEdit { deleted_files: vec![(3, 12345)], ..Default::default() });
        drop(s);
        match VersionSet::recover(fs, dir(), 4) {
            Err(Error::Corruption { file, offset, reason }) => {
                assert_eq!((file, offset), (path, len));
                assert!(reason.contains("12345"), "{reason}");
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn opening_with_fewer_levels_than_the_manifest_uses_is_an_options_error() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        drop(populated(fs.clone()));
        let err = VersionSet::recover(fs, dir(), 1).unwrap_err();
        assert!(matches!(err, Error::IncompatibleOptions { option: "num_levels", .. }), "{err}");
    }

    #[test]
    fn missing_current_missing_manifest_and_foreign_comparator_are_refused() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        fs.create_dir_all(dir()).unwrap();
        assert!(matches!(VersionSet::recover(fs.clone(), dir(), 4), Err(Error::NotADatabase { .. })));

        let s = VersionSet::create(fs.clone(), dir(), 4, "p").unwrap();
        assert!(matches!(VersionSet::create(fs.clone(), dir(), 4, "p"), Err(Error::AlreadyExists { .. })));
        let foreign = VersionEdit { comparator: Some("leveldb.BytewiseComparator".into()), ..Default::default() };
        append_raw(&fs, &s, &foreign);
        let number = s.manifest_file_number();
        drop(s);
        let err = VersionSet::recover(fs.clone(), dir(), 4).unwrap_err();
        assert!(matches!(&err, Error::NotADatabase { reason, .. } if reason.contains("leveldb")), "{err}");

        fs.remove(&manifest_file_name(dir(), number)).unwrap();
        let err = VersionSet::recover(fs, dir(), 4).unwrap_err();
        assert!(err.is_corruption() && err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn torn_manifest_tail_is_tolerated_at_recovery() {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let s = populated(fs.clone());
        let before = state(&s);
        let path = manifest_file_name(dir(), s.manifest_file_number());
        let rec = crate::version::manifest::encode_record(&add(2, file(77, 77, b"q", b"r")).encoded()).unwrap();
        fs.open_append(&path).unwrap().append(&rec[..rec.len() - 3]).unwrap();
        drop(s);
        assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
    }

    #[test]
    fn manifest_writer_output_is_what_recover_reads() {
        // A manifest written by hand (as `wisckey inspect`/repair tools would) recovers.
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        fs.create_dir_all(dir()).unwrap();
        let mut w = ManifestWriter::create(&*fs, dir(), 5).unwrap();
        let edit = VersionEdit {
            comparator: Some(COMPARATOR_NAME.into()),
            next_file_number: Some(9),
            last_sequence: Some(3),
            added_files: vec![(0, file(8, 8, b"a", b"b"))],
            ..Default::default()
        };
        w.add_record(&edit.encoded()).unwrap();
        set_current(&*fs, dir(), 5).unwrap();
        let r = VersionSet::recover(fs, dir(), 2).unwrap();
        assert_eq!((r.last_sequence(), r.current().level_files(0)), (3, 1));
        assert!(r.manifest_file_number() >= 9);
    }
}
