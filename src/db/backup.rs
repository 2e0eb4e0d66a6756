//! Backups: numbered copies of the database in a backup directory, on any filesystem. Each
//! backup copies a capture (`checkpoint.rs`) of the database: its manifest and the list of
//! the files it uses (`FILES`, the commit record), while the files themselves go to a pool
//! shared by every backup of the same database. A file already in the pool is not copied
//! again; a table or value file that grew since (light-weight compaction's appends, the cold
//! file GC fills, the log file being appended) gets only its new bytes appended. A read-only
//! handle's log files, which their writer may not have synced, go to the backup's own
//! directory instead. `restore` copies a backup into an empty directory,
//! checking every file's crc32c. Byte layout: docs/format/backup.md.
//!
//! Why reusing a pool file is safe: a file's bytes up to the length a backup records never
//! change afterwards except by a hole punch, and GC punches only ranges no later state reads
//! (the pool keeps the old bytes, which only earlier backups may need); tables, cold files and
//! the log file being appended only grow, and the log files a backup shares were made durable
//! up to its length when it was captured, so no recovery of the database can cut them back. Everything is filed under the database's
//! `IDENTITY`, a random name a checkpoint or restore does not inherit: two databases that
//! number files alike never share pool files.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::checkpoint::{prepare_target, remove_partial, Capture, CapturedFile};
use super::Db;
use crate::error::{Error, Result};
use crate::filename::{identity_file_name, manifest_file_name};
use crate::fs::{FileLock, Vfs, WritableFile};
use crate::options::Options;
use crate::util::{crc, crc_extend};
use crate::version::manifest::{read_whole_file, set_current, ManifestWriter};

/// The first line of every `FILES`.
const FILES_MAGIC: &str = "wisckey backup 1";
/// The pool, under the backup directory.
const POOL_DIR: &str = "shared";
/// The bytes a copy reads and writes at a time.
const COPY_BYTES: usize = 1 << 20;

/// One backup, as `Db::backup` made it or `list_backups` found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupInfo {
    /// Its number in the backup directory (1, 2, ...).
    pub id: u64,
    /// The sequence number the database was backed up at.
    pub sequence: u64,
    /// When it was made (seconds since the Unix epoch).
    pub created_unix_secs: u64,
    /// Files the backup uses.
    pub files: u64,
    /// Their bytes (what a restore copies).
    pub bytes: u64,
    /// Files this backup copied or extended (0 in a listing): the rest were in the pool.
    pub files_copied: u64,
    /// Bytes this backup copied (0 in a listing).
    pub bytes_copied: u64,
}

/// One line of `FILES`: a file, the bytes of it the backup uses, their crc32c, and whether
/// it is in the pool or the backup's own directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    name: String,
    len: u64,
    crc: u32,
    private: bool,
}

/// A committed backup as its `FILES` records it.
#[derive(Debug, Clone)]
struct Record {
    id: u64,
    database: String,
    sequence: u64,
    created: u64,
    manifest: u64,
    entries: Vec<Entry>,
}

impl Record {
    fn info(&self) -> BackupInfo {
        BackupInfo {
            id: self.id,
            sequence: self.sequence,
            created_unix_secs: self.created,
            files: self.entries.len() as u64,
            bytes: self.entries.iter().map(|e| e.len).sum(),
            ..Default::default()
        }
    }

    fn encode(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{FILES_MAGIC}");
        let _ = writeln!(s, "id {}", self.id);
        let _ = writeln!(s, "database {}", self.database);
        let _ = writeln!(s, "sequence {}", self.sequence);
        let _ = writeln!(s, "created {}", self.created);
        let _ = writeln!(s, "manifest {}", self.manifest);
        for e in &self.entries {
            let place = if e.private { "own" } else { "shared" };
            let _ = writeln!(s, "file {} {} {:08x} {place}", e.name, e.len, e.crc);
        }
        let sum = crc(s.as_bytes());
        let _ = writeln!(s, "end {sum:08x}");
        s
    }

    fn decode(path: &Path, text: &str) -> Result<Record> {
        let bad = |why: String| Error::corruption(path, 0, format!("backup record: {why}"));
        let body_len = text.trim_end_matches('\n').rfind('\n').map_or(0, |i| i + 1);
        let (body, last) = text.split_at(body_len);
        let sum = last.trim_end().strip_prefix("end ").and_then(|h| u32::from_str_radix(h, 16).ok());
        if sum != Some(crc(body.as_bytes())) {
            return Err(bad("checksum mismatch or missing end line".into()));
        }
        let mut lines = body.lines();
        if lines.next() != Some(FILES_MAGIC) {
            return Err(bad(format!("does not start with {FILES_MAGIC:?}")));
        }
        let mut field = |name: &str| -> Result<String> {
            let line = lines.next().unwrap_or_default();
            line.strip_prefix(name)
                .and_then(|v| v.strip_prefix(' '))
                .map(str::to_string)
                .ok_or_else(|| bad(format!("expected {name}, found {line:?}")))
        };
        let num = |s: String| s.parse::<u64>().map_err(|_| bad(format!("{s:?} is not a number")));
        let (id, database) = (num(field("id")?)?, field("database")?);
        let (sequence, created, manifest) =
            (num(field("sequence")?)?, num(field("created")?)?, num(field("manifest")?)?);
        let entries =
            lines.map(|l| parse_entry(l).ok_or_else(|| bad(format!("bad file line {l:?}")))).collect::<Result<_>>()?;
        Ok(Record { id, database, sequence, created, manifest, entries })
    }
}

fn parse_entry(line: &str) -> Option<Entry> {
    let mut parts = line.strip_prefix("file ")?.split(' ');
    let name = parts.next()?.to_string();
    let len = parts.next()?.parse().ok()?;
    let crc = u32::from_str_radix(parts.next()?, 16).ok()?;
    let private = match parts.next()? {
        "own" => true,
        "shared" => false,
        _ => return None,
    };
    let plain = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
    (parts.next().is_none() && plain).then_some(Entry { name, len, crc, private })
}

/// The backup directory: where its pool, records and lock are.
struct BackupDir<'a> {
    vfs: &'a dyn Vfs,
    root: PathBuf,
}

impl BackupDir<'_> {
    fn backup_dir(&self, id: u64) -> PathBuf {
        self.root.join(format!("backup-{id:06}"))
    }

    fn pool(&self, database: &str) -> PathBuf {
        self.root.join(POOL_DIR).join(database)
    }

    /// Where entry `e` of backup `r` is kept.
    fn source_of(&self, r: &Record, e: &Entry) -> PathBuf {
        match e.private {
            true => self.backup_dir(r.id).join(&e.name),
            false => self.pool(&r.database).join(&e.name),
        }
    }

    /// One backup or restore at a time in a backup directory.
    fn lock(&self) -> Result<Box<dyn FileLock>> {
        self.vfs.lock(&self.root.join("LOCK"))
    }

    /// The committed backups, by id (a `backup-*` directory without `FILES` is a backup a
    /// crash cut short; `sweep` removes them).
    fn records(&self) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for (id, dir) in self.backup_dirs()? {
            let files = dir.join("FILES");
            if !self.vfs.exists(&files) {
                continue;
            }
            let text = read_whole_file(self.vfs, &files)?;
            let record = Record::decode(&files, &String::from_utf8_lossy(&text))?;
            if record.id != id {
                return Err(Error::corruption(
                    &files,
                    0,
                    format!("backup record names id {}, its directory {id}", record.id),
                ));
            }
            out.push(record);
        }
        out.sort_by_key(|r| r.id);
        Ok(out)
    }

    fn backup_dirs(&self) -> Result<Vec<(u64, PathBuf)>> {
        if !self.vfs.is_dir(&self.root) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for name in self.vfs.list(&self.root)? {
            let id = name.strip_prefix("backup-").and_then(|d| d.parse::<u64>().ok());
            if let Some(id) = id.filter(|&id| format!("backup-{id:06}") == name) {
                out.push((id, self.root.join(name)));
            }
        }
        Ok(out)
    }

    /// Remove backups a crash cut short (no `FILES`).
    fn sweep(&self) -> Result<()> {
        for (_, dir) in self.backup_dirs()? {
            if !self.vfs.exists(&dir.join("FILES")) {
                remove_partial(self.vfs, &dir, true);
            }
        }
        Ok(())
    }
}

/// What the pool of one database holds, by what committed backups recorded: per file name,
/// every length recorded with its crc (the longest is how far the pool file is valid).
#[derive(Default)]
struct Pool {
    lengths: HashMap<String, Vec<(u64, u32)>>,
}

impl Pool {
    fn of(records: &[Record], database: &str) -> Pool {
        let mut pool = Pool::default();
        for r in records.iter().filter(|r| r.database == database) {
            for e in r.entries.iter().filter(|e| !e.private) {
                pool.lengths.entry(e.name.clone()).or_default().push((e.len, e.crc));
            }
        }
        pool
    }

    fn exact(&self, name: &str, len: u64) -> Option<u32> {
        self.lengths.get(name)?.iter().find(|(l, _)| *l == len).map(|&(_, c)| c)
    }

    fn longest(&self, name: &str) -> Option<(u64, u32)> {
        self.lengths.get(name)?.iter().copied().max_by_key(|(l, _)| *l)
    }
}

/// Copy `[from_offset, from_offset + len)` of `src` to the end of `dst`, returning the crc32c
/// of the bytes copied continued from `crc_so_far`.
fn copy_range(
    src: &dyn crate::fs::RandomAccessFile,
    from_offset: u64,
    len: u64,
    dst: &mut dyn WritableFile,
    crc_so_far: u32,
) -> Result<u32> {
    let mut buf = vec![0u8; COPY_BYTES.min(usize::try_from(len).unwrap_or(COPY_BYTES)).max(1)];
    let (mut at, mut sum) = (0u64, crc_so_far);
    while at < len {
        let n = buf.len().min(usize::try_from(len - at).unwrap_or(usize::MAX));
        src.read_exact_at(from_offset + at, &mut buf[..n])?;
        dst.append(&buf[..n])?;
        sum = crc_extend(sum, &buf[..n]);
        at += n as u64;
    }
    Ok(sum)
}

/// The crc32c of the first `len` bytes of `path`.
fn crc_of_prefix(vfs: &dyn Vfs, path: &Path, len: u64) -> Result<u32> {
    let file = vfs.open_read(path)?;
    let mut buf = vec![0u8; COPY_BYTES];
    let (mut at, mut sum) = (0u64, 0u32);
    while at < len {
        let n = buf.len().min(usize::try_from(len - at).unwrap_or(usize::MAX));
        file.read_exact_at(at, &mut buf[..n])?;
        sum = crc_extend(sum, &buf[..n]);
        at += n as u64;
    }
    Ok(sum)
}

/// The database's identity, created on first use: 32 hex digits of randomness.
fn identity(vfs: &dyn Vfs, db_dir: &Path) -> Result<String> {
    let path = identity_file_name(db_dir);
    if vfs.exists(&path) {
        let text = read_whole_file(vfs, &path)?;
        let id = String::from_utf8_lossy(&text).trim().to_string();
        if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(id);
        }
        // Torn by a crash before any backup used it (it is synced before use).
        tracing::warn!(file = ?path, "IDENTITY is malformed; writing a new one");
    }
    let id = random_identity();
    let mut f = vfs.create(&path)?;
    f.append(format!("{id}\n").as_bytes())?;
    f.sync()?;
    vfs.sync_dir(db_dir)?;
    Ok(id)
}

fn random_identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let word = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.write_u32(std::process::id());
        h.finish()
    };
    format!("{:016x}{:016x}", word(1), word(2))
}

fn now_unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Db {
    /// Add a backup of the database as it is now to `backup_dir` (created if missing), which
    /// may be on another filesystem. A file an earlier backup in the directory already holds
    /// is not copied again (a table or value file that grew since gets only its new bytes);
    /// what is copied is synced before the backup is recorded, so a crash leaves either the
    /// complete backup or none (the next backup clears what it left). One backup or restore
    /// at a time per directory (`Error::Locked` otherwise). Works on a read-only handle too.
    pub fn backup(&self, backup_dir: impl AsRef<Path>) -> Result<BackupInfo> {
        let vfs = &*self.inner.vfs;
        let dir = BackupDir { vfs, root: backup_dir.as_ref().to_path_buf() };
        vfs.create_dir_all(&dir.root)?;
        let _lock = dir.lock()?;
        dir.sweep()?;
        let records = dir.records()?;
        let database = identity(vfs, &self.inner.dir)?;
        let pool = Pool::of(&records, &database);
        let (capture, _) = self.inner.capture(false)?;
        let id = records.last().map_or(1, |r| r.id + 1);
        let own = dir.backup_dir(id);
        vfs.create_dir_all(&dir.pool(&database))?;
        vfs.create_dir_all(&own)?;
        let mut info =
            BackupInfo { id, sequence: capture.sequence, created_unix_secs: now_unix_secs(), ..Default::default() };
        let mut entries = Vec::with_capacity(capture.files.len());
        for f in &capture.files {
            let (entry, copied) = self.back_up_file(&dir, &pool, &database, &own, f)?;
            if let Some(bytes) = copied {
                info.files_copied += 1;
                info.bytes_copied += bytes;
            }
            entries.push(entry);
        }
        vfs.sync_dir(&dir.pool(&database))?;
        let record = Record {
            id,
            database,
            sequence: capture.sequence,
            created: info.created_unix_secs,
            manifest: capture.manifest_number,
            entries,
        };
        commit(vfs, &dir, &own, &capture, &record)?;
        info.files = record.entries.len() as u64;
        info.bytes = record.entries.iter().map(|e| e.len).sum();
        tracing::info!(dir = ?dir.root, id, sequence = info.sequence, files = info.files, copied = info.files_copied,
            bytes_copied = info.bytes_copied, "backup written");
        Ok(info)
    }

    /// Put file `f` of the capture into the backup: into the pool unless the pool has it
    /// already (or has a shorter copy: then only the new bytes), or into the backup's own
    /// directory when its bytes may still change (a read-only handle's log files); returns its
    /// entry and the bytes copied (`None`: the pool had them).
    fn back_up_file(
        &self,
        dir: &BackupDir<'_>,
        pool: &Pool,
        database: &str,
        own: &Path,
        f: &CapturedFile,
    ) -> Result<(Entry, Option<u64>)> {
        let vfs = dir.vfs;
        let from = self.inner.dir.join(&f.name);
        let entry = |crc: u32, private: bool| Entry { name: f.name.clone(), len: f.len, crc, private };
        if !f.stable {
            let mut out = vfs.create(&own.join(&f.name))?;
            let sum = copy_range(&*vfs.open_read(&from)?, 0, f.len, &mut *out, 0)?;
            out.sync()?;
            return Ok((entry(sum, true), Some(f.len)));
        }
        let to = dir.pool(database).join(&f.name);
        if let Some(sum) = pool.exact(&f.name, f.len) {
            return Ok((entry(sum, false), None));
        }
        match pool.longest(&f.name) {
            // The pool holds more of it: its prefix is what this backup needs.
            Some((len, _)) if len > f.len => Ok((entry(crc_of_prefix(vfs, &to, f.len)?, false), None)),
            // It grew: append the new bytes (after whatever a cut-short backup left).
            Some((len, sum)) => {
                let mut out = vfs.open_append(&to)?;
                if out.len() != len {
                    out.truncate(len)?;
                }
                let sum = copy_range(&*vfs.open_read(&from)?, len, f.len - len, &mut *out, sum)?;
                out.sync()?;
                Ok((entry(sum, false), Some(f.len - len)))
            }
            None => {
                let mut out = vfs.create(&to)?;
                let sum = copy_range(&*vfs.open_read(&from)?, 0, f.len, &mut *out, 0)?;
                out.sync()?;
                Ok((entry(sum, false), Some(f.len)))
            }
        }
    }
}

/// Write the backup's manifest, then its `FILES` (the commit record: written aside, synced,
/// renamed into place, the directory synced).
fn commit(vfs: &dyn Vfs, dir: &BackupDir<'_>, own: &Path, capture: &Capture<'_>, record: &Record) -> Result<()> {
    let mut manifest = ManifestWriter::create(vfs, own, capture.manifest_number)?;
    manifest.add_record(&capture.edit.encoded())?;
    drop(manifest);
    let tmp = own.join("FILES.tmp");
    let mut f = vfs.create(&tmp)?;
    f.append(record.encode().as_bytes())?;
    f.sync()?;
    drop(f);
    vfs.rename(&tmp, &own.join("FILES"))?;
    vfs.sync_dir(own)?;
    vfs.sync_dir(&dir.root)
}

/// The backups in `backup_dir`, oldest first (empty when there is none).
pub fn list_backups(backup_dir: impl AsRef<Path>, options: &Options) -> Result<Vec<BackupInfo>> {
    let dir = BackupDir { vfs: &*options.vfs, root: backup_dir.as_ref().to_path_buf() };
    Ok(dir.records()?.iter().map(Record::info).collect())
}

/// Restore backup `id` (the newest when `None`) of `backup_dir` into `target`, a new or
/// empty directory (`Error::TargetNotEmpty` otherwise, before anything changes). Every file is
/// checked against the crc32c the backup recorded (`Error::Corruption` names the damaged
/// copy). The restored database is a new one: its backups do not share the pool files of
/// the database it came from. On failure the files written are removed again.
pub fn restore_backup(
    backup_dir: impl AsRef<Path>,
    id: Option<u64>,
    target: impl AsRef<Path>,
    options: &Options,
) -> Result<BackupInfo> {
    let vfs = &*options.vfs;
    let dir = BackupDir { vfs, root: backup_dir.as_ref().to_path_buf() };
    let target = target.as_ref();
    if !vfs.is_dir(&dir.root) {
        return Err(Error::invalid(format!("backup directory {:?} does not exist", dir.root)));
    }
    let _lock = dir.lock()?;
    let records = dir.records()?;
    let record = match id {
        Some(id) => records.iter().find(|r| r.id == id),
        None => records.last(),
    };
    let Some(record) = record else {
        let have: Vec<u64> = records.iter().map(|r| r.id).collect();
        return Err(Error::invalid(format!("backup {id:?} is not in {:?} (it holds {have:?})", dir.root)));
    };
    let created = prepare_target(vfs, target, "restore")?;
    let r = restore_files(&dir, record, target);
    if r.is_err() {
        remove_partial(vfs, target, created);
    }
    r?;
    tracing::info!(from = ?dir.root, id = record.id, target = ?target, "backup restored");
    Ok(record.info())
}

fn restore_files(dir: &BackupDir<'_>, record: &Record, target: &Path) -> Result<()> {
    let vfs = dir.vfs;
    for e in &record.entries {
        let from = dir.source_of(record, e);
        let mut out = vfs.create(&target.join(&e.name))?;
        let sum = copy_range(&*vfs.open_read(&from)?, 0, e.len, &mut *out, 0)?;
        if sum != e.crc {
            let why = format!("the first {} bytes have crc32c {sum:08x}, the backup recorded {:08x}", e.len, e.crc);
            return Err(Error::corruption(from, 0, why));
        }
        out.sync()?;
    }
    let manifest = manifest_file_name(&dir.backup_dir(record.id), record.manifest);
    let len = vfs.file_size(&manifest)?;
    vfs.copy_prefix(&manifest, &manifest_file_name(target, record.manifest), len)?;
    vfs.sync_dir(target)?;
    set_current(vfs, target, record.manifest)?;
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        vfs.sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_record_reads_back_and_any_changed_byte_is_refused() {
        let r = Record {
            id: 7,
            database: "00112233445566778899aabbccddeeff".into(),
            sequence: 42,
            created: 1_700_000_000,
            manifest: 19,
            entries: vec![
                Entry { name: "000012.sst".into(), len: 4096, crc: 0xdead_beef, private: false },
                Entry { name: "000018.vlog".into(), len: 0, crc: 0, private: true },
            ],
        };
        let text = r.encode();
        let back = Record::decode(Path::new("FILES"), &text).unwrap();
        assert_eq!((back.id, back.sequence, back.manifest, back.entries.clone()), (7, 42, 19, r.entries.clone()));
        for at in 0..text.len() - 1 {
            let mut bytes = text.clone().into_bytes();
            bytes[at] ^= 0x01;
            let Ok(changed) = String::from_utf8(bytes) else { continue };
            assert!(Record::decode(Path::new("FILES"), &changed).is_err(), "a flip at byte {at} went unnoticed");
        }
    }

    #[test]
    fn a_file_line_naming_a_path_is_refused() {
        assert!(parse_entry("file ../x 1 0 shared").is_none());
        assert!(parse_entry("file a/b 1 0 shared").is_none());
        assert!(parse_entry("file 000001.sst 1 0 shared").is_some());
    }
}
