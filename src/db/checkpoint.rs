//! Checkpoints: an openable copy of the database at one sequence number, in a new or empty
//! directory. What the copy needs is captured at one instant (`capture`): the Version's
//! tables, the value files the manifest lists, the log from its head to the end of the last
//! record group, and the manifest state as one snapshot edit. Files nothing rewrites are
//! hard-linked (in time that does not grow with the data); the log file being appended is
//! copied up to the captured end, or, past 1 MiB, sealed by rolling the log and linked too (a
//! checkpoint then writes a few KiB whatever the log holds); the manifest and `CURRENT` are
//! written last, so a directory without `CURRENT` is an unfinished checkpoint. Backups
//! (`backup.rs`) copy the same capture.
//! What keeps the source from changing a file the copy uses afterwards is `sharing.rs`;
//! docs/design.md ("Checkpoints, backups and read-only handles") has the argument.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::sharing::{PinGuard, ReadOnlyView};
use super::DbInner;
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::Vfs;
use crate::log::LogPos;
use crate::snapshot::Snapshot;
use crate::version::manifest::{set_current, ManifestWriter};
use crate::version::VersionEdit;

/// What `Db::checkpoint` made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointInfo {
    /// The sequence number the checkpoint holds the database at: every write numbered up to
    /// it, none after.
    pub sequence: u64,
    /// Files shared with the database by hard links (no bytes copied).
    pub files_linked: u64,
    /// Files copied: the log file being appended (up to the captured end), and any file the
    /// target's filesystem would not link.
    pub files_copied: u64,
    /// Bytes those copies wrote.
    pub bytes_copied: u64,
}

/// One file of a capture.
#[derive(Debug, Clone)]
pub(crate) struct CapturedFile {
    /// Its name in the database directory.
    pub name: String,
    /// The bytes of it the captured state uses (a table's recorded length, a value or log
    /// file's size at the capture, the newest log file's captured end).
    pub len: u64,
    /// Bytes past `len` may still change (the log file being appended, or the log files of a
    /// read-only capture, which its writer may not have synced): copy, never link.
    pub copy: bool,
    /// The first `len` bytes will never change but by a punch of values no later state reads:
    /// a backup may file them in its shared pool. Not so for a read-only capture's log files,
    /// which their writer may not have synced (a power cut could still take them back).
    pub stable: bool,
}

/// The state a checkpoint or backup holds, captured at one instant.
pub(crate) struct Capture<'a> {
    /// The sequence number of the last write the capture holds.
    pub sequence: u64,
    /// The copy's manifest: the captured state as one snapshot edit, with the log durable up
    /// to the captured end.
    pub edit: VersionEdit,
    /// The number the copy's manifest takes (above every captured file's).
    pub manifest_number: u64,
    pub files: Vec<CapturedFile>,
    /// Keeps the source from deleting or punching a captured file until the copy is done
    /// (`None` for a read-only handle, whose registration does that).
    pub _pins: Option<PinGuard<'a>>,
}

/// A captured log tail above this (or above a quarter of `log_file_bytes`, when smaller) is
/// sealed by rolling the log rather than copied: a copy costs its bytes (up to a whole
/// `log_file_bytes` file), a roll one small new file.
const ROLL_BEFORE_COPY_BYTES: u64 = 1 << 20;

/// What the write leader captured.
struct Taken {
    edit: VersionEdit,
    head: LogPos,
    end: LogPos,
    sequence: u64,
    snapshot: Option<Snapshot>,
    /// The file numbers pinned (the floor aside).
    pinned: Vec<u64>,
}

impl DbInner {
    /// Capture the state a checkpoint or backup copies (see the module comment); with
    /// `snapshot`, also a snapshot of the source at the captured sequence number.
    pub(crate) fn capture(&self, snapshot: bool) -> Result<(Capture<'_>, Option<Snapshot>)> {
        if let Some(view) = self.sharing.read_only_view() {
            let snap = snapshot.then(|| self.snapshots.acquire(view.sequence));
            return Ok((self.capture_read_only(view)?, snap));
        }
        let taken = self.capture_as_leader(snapshot)?;
        let mut pins = self.sharing.adopt_pins(taken.pinned, Some(taken.head.file));
        let snap = taken.snapshot;
        // The copy's manifest says the log is durable up to `end`; the source's log files
        // are made so (the linked ones are the same files).
        self.writes.sync_log_for_gc(self)?;
        let mut capture = self.capture_files(taken.edit, taken.head, taken.end, taken.sequence, false)?;
        let logs: Vec<u64> = capture.files.iter().filter_map(|f| log_number(&f.name)).collect();
        pins.narrow(&logs);
        capture._pins = Some(pins);
        Ok((capture, snap))
    }

    /// The manifest state (every keyspace's tree), log head and log end with no write group
    /// in flight: taken as the write queue's leader (`run_exclusive`), so every sequence
    /// number handed out is published and the log up to its end holds exactly the writes up
    /// to the visible one. The captured files are pinned there too, under the DB mutex (see
    /// `Sharing::pin_numbers`).
    fn capture_as_leader(&self, snapshot: bool) -> Result<Taken> {
        let out: Arc<Mutex<Option<Taken>>> = Arc::default();
        let slot = out.clone();
        self.writes.run_exclusive(self, move |db, st| {
            // The log's lock may be held through a flush's fdatasync: wait for it without the
            // DB mutex. No group can append meanwhile (this job leads the write queue), and the
            // log head read below cannot pass this end.
            // A log tail longer than `ROLL_BEFORE_COPY_BYTES` is sealed by a roll, so the
            // copy links it instead of copying it; the spare number is wasted otherwise.
            let spare = st.versions.new_file_number();
            let next_seq = st.last_seq + 1;
            let roll_from = ROLL_BEFORE_COPY_BYTES.min(db.opts.log_file_bytes / 4);
            let end = MutexGuard::unlocked(st, || -> Result<LogPos> {
                let mut log = db.writes.log.lock();
                if log.groups_end().offset >= roll_from {
                    // The copy's log ends in the new file, just past its start mark: the copy
                    // appends to a private copy of that, never to the linked sealed file.
                    log.roll(spare, next_seq)?;
                }
                Ok(LogPos { file: log.file_number(), offset: log.groups_end().offset })
            })?;
            db.background_error(st)?;
            let edit = st.versions.snapshot_edit();
            let head = st.versions.log_head();
            let sequence = db.writes.visible_seq();
            let mut files: Vec<u64> = st.versions.live_files().into_iter().collect();
            files.extend(st.versions.vlog_files().keys());
            db.sharing.pin_numbers(&files, Some(head.file));
            // Acquired before anything can compact a version the sequence number still sees.
            let snapshot = snapshot.then(|| db.snapshots.acquire(sequence));
            *slot.lock() = Some(Taken { edit, head, end, sequence, snapshot, pinned: files });
            Ok(())
        })?;
        let taken = out.lock().take();
        taken.ok_or_else(|| Error::invalid("the capture did not run"))
    }

    /// A read-only handle's capture: its view as its open replayed it. Its files stay as
    /// they are while it is registered; the log files from the head are copied, since the
    /// writer may not have synced them (a link would make the copy depend on that).
    fn capture_read_only(&self, view: ReadOnlyView) -> Result<Capture<'_>> {
        let (edit, head) = {
            let st = self.state.lock();
            (st.versions.snapshot_edit(), st.versions.log_head())
        };
        self.capture_files(edit, head, view.log_end, view.sequence, true)
    }

    /// The files of a capture whose snapshot edit is `edit` and whose log runs from `head` to
    /// `end`; `copy_logs`: copy every log file, not only the one being appended.
    fn capture_files(
        &self,
        mut edit: VersionEdit,
        head: LogPos,
        end: LogPos,
        sequence: u64,
        copy_logs: bool,
    ) -> Result<Capture<'_>> {
        let on_disk: HashMap<u64, (FileKind, String)> = (self.vfs.list(&self.dir)?.into_iter())
            .filter_map(|name| filename::parse_file_name(&name).map(|(kind, n)| (n, (kind, name))))
            .filter(|(_, (kind, _))| matches!(kind, FileKind::Table | FileKind::Vlog | FileKind::Cold))
            .collect();
        let mut files = Vec::new();
        let tables: Vec<(u64, u64)> =
            edit.tree_edits().flat_map(|e| e.added_files.iter().map(|(_, m)| (m.number, m.size))).collect();
        for (number, size) in tables {
            let name = filename::table_file_name(Path::new(""), number);
            files.push(CapturedFile {
                name: name.to_string_lossy().into_owned(),
                len: size,
                copy: false,
                stable: true,
            });
        }
        let mut logs: Vec<(u64, &String)> = (on_disk.iter())
            .filter(|(n, (kind, _))| *kind == FileKind::Vlog && (head.file..=end.file).contains(*n))
            .map(|(n, (_, name))| (*n, name))
            .collect();
        logs.sort_unstable();
        for &(n, name) in &logs {
            let len = if n == end.file { end.offset } else { self.vfs.file_size(&self.dir.join(name))? };
            files.push(CapturedFile { name: name.clone(), len, copy: copy_logs || n == end.file, stable: !copy_logs });
        }
        for &(n, total) in &edit.vlog_added {
            if (head.file..=end.file).contains(&n) && logs.iter().any(|&(l, _)| l == n) {
                continue;
            }
            match on_disk.get(&n) {
                Some((_, name)) => {
                    let len = self.vfs.file_size(&self.dir.join(name))?;
                    files.push(CapturedFile { name: name.clone(), len, copy: false, stable: true });
                }
                // A cold file registered but not created yet holds nothing; the copy's open
                // drops its registration.
                None if total == 0 => {}
                None => {
                    let path = filename::vlog_file_name(&self.dir, n);
                    return Err(Error::corruption(path, 0, "the manifest lists this value file, which is missing"));
                }
            }
        }
        let manifest_number = edit.next_file_number.unwrap_or(1).max(end.file + 1);
        edit.next_file_number = Some(manifest_number + 1);
        edit.log_durable = Some(end);
        Ok(Capture { sequence, edit, manifest_number, files, _pins: None })
    }

    /// Make `target` a checkpoint of this database (see `Db::checkpoint`).
    pub(crate) fn checkpoint(&self, target: &Path, snapshot: bool) -> Result<(CheckpointInfo, Option<Snapshot>)> {
        let created = prepare_target(&*self.vfs, target, "checkpoint")?;
        let r = self.capture(snapshot).and_then(|(capture, snap)| {
            let info = write_checkpoint(&*self.vfs, &self.dir, target, &capture)?;
            Ok((info, snap))
        });
        if r.is_err() {
            remove_partial(&*self.vfs, target, created);
        }
        let (info, snap) = r?;
        tracing::info!(target = ?target, sequence = info.sequence, linked = info.files_linked,
            copied = info.files_copied, bytes_copied = info.bytes_copied, "checkpoint written");
        Ok((info, snap))
    }
}

impl super::Db {
    /// Make `dir` — a new directory, or an empty one — an openable copy of the database as it
    /// is now, at one sequence number (`CheckpointInfo::sequence`). Tables and value files are
    /// hard-linked when `dir` is on the same filesystem (the time does not grow with the
    /// data), the log file being appended is copied up to the last write (or, when that is
    /// over 1 MiB, the log moves on to a new file and the sealed one is linked); nothing the
    /// database does afterwards (GC, hole punching, compaction, light-weight compaction's
    /// appends) changes the copy. Open it with `Db::open` (it is a database of its own) or
    /// `Db::open_read_only`. A crash part way leaves `dir` without `CURRENT`, which no open
    /// takes for a database; a failure removes what was written.
    ///
    /// Errors: `TargetNotEmpty` if `dir` holds anything (nothing is changed then).
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointInfo> {
        Ok(self.inner.checkpoint(dir.as_ref(), false)?.0)
    }

    /// `checkpoint`, also returning a snapshot of this database at the checkpoint's sequence
    /// number: reads through it see exactly what the checkpoint holds (what a Raft snapshot
    /// built from a checkpoint records beside it, and what tests compare).
    pub fn checkpoint_with_snapshot(&self, dir: impl AsRef<Path>) -> Result<(CheckpointInfo, Snapshot)> {
        let (info, snap) = self.inner.checkpoint(dir.as_ref(), true)?;
        let snap = snap.ok_or_else(|| Error::invalid("the capture took no snapshot"))?;
        Ok((info, snap))
    }
}

/// The number of a log file name, `None` for any other file.
fn log_number(name: &str) -> Option<u64> {
    match filename::parse_file_name(name) {
        Some((FileKind::Vlog, n)) => Some(n),
        _ => None,
    }
}

/// Check that `target` is a new or empty directory and create it if new; returns whether it
/// was created. A non-empty one is refused before anything changes.
pub(crate) fn prepare_target(vfs: &dyn Vfs, target: &Path, what: &'static str) -> Result<bool> {
    if vfs.exists(target) {
        if !vfs.is_dir(target) {
            return Err(Error::invalid(format!("{what} target {target:?} exists and is not a directory")));
        }
        let mut names = vfs.list(target)?;
        names.sort();
        if let Some(example) = names.first() {
            return Err(Error::TargetNotEmpty {
                what,
                path: target.to_path_buf(),
                entries: names.len(),
                example: example.clone(),
            });
        }
        return Ok(false);
    }
    vfs.create_dir_all(target)?;
    // The new directory's own name must survive a crash with what is written into it.
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        vfs.sync_dir(parent)?;
    }
    Ok(true)
}

/// After a failed checkpoint or restore, remove what it wrote into `target` (it was new or
/// empty), and the directory itself if it made it. Best effort: what a crash leaves has no
/// `CURRENT`, and no open takes it for a database.
pub(crate) fn remove_partial(vfs: &dyn Vfs, target: &Path, created: bool) {
    if let Ok(names) = vfs.list(target) {
        for name in names {
            let _ = vfs.remove(&target.join(name));
        }
    }
    if created {
        let _ = vfs.remove_dir(target);
    }
}

/// Whether a failed `link` means the filesystem will not link these files (another device,
/// no hard links, a link limit), so a copy is the way.
fn cannot_link(e: &Error) -> bool {
    const NO_LINK: [i32; 5] = [libc::EXDEV, libc::EPERM, libc::EMLINK, libc::EOPNOTSUPP, libc::ENOSYS];
    match e {
        Error::Io { source, .. } => {
            source.kind() == std::io::ErrorKind::Unsupported
                || source.raw_os_error().is_some_and(|c| NO_LINK.contains(&c))
        }
        _ => false,
    }
}

/// Fill the empty directory `dst` from `capture` of the database in `src`: link or copy each
/// file, copy `WORKLOAD`, make the entries durable, then write the manifest and `CURRENT`.
fn write_checkpoint(vfs: &dyn Vfs, src: &Path, dst: &Path, capture: &Capture<'_>) -> Result<CheckpointInfo> {
    let mut info = CheckpointInfo { sequence: capture.sequence, ..Default::default() };
    for f in &capture.files {
        let (from, to) = (src.join(&f.name), dst.join(&f.name));
        if !f.copy {
            match vfs.link(&from, &to) {
                Ok(()) => {
                    info.files_linked += 1;
                    continue;
                }
                Err(e) if cannot_link(&e) => {}
                Err(e) => return Err(e),
            }
        }
        vfs.copy_prefix(&from, &to, f.len)?;
        info.files_copied += 1;
        info.bytes_copied += f.len;
    }
    copy_workload(vfs, src, dst);
    vfs.sync_dir(dst)?;
    write_manifest(vfs, dst, capture)?;
    if let Some(parent) = dst.parent().filter(|p| !p.as_os_str().is_empty()) {
        vfs.sync_dir(parent)?;
    }
    Ok(info)
}

/// The copy's manifest (one snapshot edit), then `CURRENT` naming it (written and synced
/// last: until then the directory is not a database).
pub(crate) fn write_manifest(vfs: &dyn Vfs, dst: &Path, capture: &Capture<'_>) -> Result<()> {
    let mut manifest = ManifestWriter::create(vfs, dst, capture.manifest_number)?;
    manifest.add_record(&capture.edit.encoded())?;
    drop(manifest);
    set_current(vfs, dst, capture.manifest_number)
}

/// The operation counts `wisckey tune --db` reads go along (best effort: they are advice).
fn copy_workload(vfs: &dyn Vfs, src: &Path, dst: &Path) {
    let from: PathBuf = src.join("WORKLOAD");
    if let Ok(len) = vfs.file_size(&from) {
        if let Err(e) = vfs.copy_prefix(&from, &dst.join("WORKLOAD"), len) {
            tracing::warn!(error = %e, "the checkpoint goes without the WORKLOAD counts");
        }
    }
}
