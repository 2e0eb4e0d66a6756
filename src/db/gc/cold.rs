//! Hot/cold separation of the value log: values that survive a GC collection are written to
//! cold value files (`NNNNNN.cold`), away from fresh user writes, and the new pointers are
//! logged in the write-ahead log as `PutPointer` ops. A value that outlived one collection
//! is likely to outlive the next (LFS's age sorting): cold files fill with long-lived data
//! and the log files with hot data that dies young, so GC rarely moves the same value twice.
//!
//! Protocol (docs/design.md, "Value-log garbage collection"): register the file in the manifest, create
//! it; append the chunk's live values as one record group and `fdatasync`; only then log the
//! pointer ops (conditional, through the write leader). A crash before the pointers are
//! logged leaves unreferenced bytes in a cold file (never read); after, the values are
//! durable where the pointers say. A cold file is collected only once no pointer op into it
//! remains in the log past the log head, so a replay never meets a pointer into a collected
//! file.

use std::collections::{HashMap, HashSet};

use super::Gc;
use crate::db::DbInner;
use crate::error::Result;
use crate::filename::cold_file_name;
use crate::fs::WritableFile;
use crate::log;
use crate::version::{VersionEdit, VersionSet};
use crate::vlog::ValuePointer;
use crate::write_batch::{BatchOp, WriteBatch};

/// GC's output side: the cold file being filled, and where pointers into each cold file
/// were logged.
pub(crate) struct ColdOutput {
    active: Option<ColdFile>,
    /// Cold file → the newest log file that may hold pointer ops into it. While the log head
    /// has not passed that log file, a recovery may replay those ops: the cold file stays.
    logged_in: HashMap<u64, u64>,
}

impl ColdOutput {
    /// After a recovery: the replayed memtable may hold pointer ops into cold files that only
    /// the log has (`log_file` and before); those files stay until the log head passes it.
    pub(super) fn after_recovery(
        mem: &crate::memtable::Memtable,
        vlog: &crate::vlog::VlogReader,
        log_file: u64,
    ) -> Self {
        let logged_in = mem.vlog_bytes().into_keys().filter(|f| vlog.is_cold(*f)).map(|f| (f, log_file)).collect();
        ColdOutput { active: None, logged_in }
    }
}

struct ColdFile {
    number: u64,
    file: Box<dyn WritableFile>,
    /// Bytes appended so far (the offset of the next group).
    len: u64,
}

/// Live values GC moves to a cold file, and the pointers that made them live (the condition).
pub(crate) struct Relocation {
    pub puts: WriteBatch,
    pub old: Vec<ValuePointer>,
}

/// Relocations appended to a cold file whose pointers are not logged yet (`log_appended`).
pub(crate) struct Appended {
    batches: Vec<AppendedPiece>,
    checked: Option<crate::db::read::CheckedAt>,
}

/// One relocation appended: the pointer ops naming the copies in cold file `cold`, the
/// pointers they replace (the condition), and the user bytes moved.
struct AppendedPiece {
    pointers: WriteBatch,
    cold: u64,
    old: Vec<ValuePointer>,
    bytes: u64,
}

impl Gc {
    /// Move the relocations' values to the cold file (one `fdatasync` for all of them) and
    /// log the new pointers, each op applied only if its key still points at its old copy
    /// (`checked`: the view in which GC found them live). Returns the value bytes written.
    pub(crate) fn relocate(
        &self,
        db: &DbInner,
        pieces: Vec<Relocation>,
        checked: Option<crate::db::read::CheckedAt>,
        sync: bool,
    ) -> Result<u64> {
        let appended = self.append_relocations(db, pieces, checked)?;
        self.log_appended(db, vec![appended], sync)
    }

    /// Append the relocations' values to the cold file, unsynced: their pointers are logged by
    /// `log_appended` once the file is synced (several chunks' worth share one `fdatasync`).
    pub(crate) fn append_relocations(
        &self,
        db: &DbInner,
        pieces: Vec<Relocation>,
        checked: Option<crate::db::read::CheckedAt>,
    ) -> Result<Appended> {
        let mut out = self.cold.lock();
        let mut batches = Vec::with_capacity(pieces.len());
        for r in pieces.into_iter().filter(|r| !r.puts.is_empty()) {
            let (pointers, cold) = self.cold_append(db, &mut out, &r.puts)?;
            batches.push(AppendedPiece { pointers, cold, old: r.old, bytes: r.puts.user_bytes });
            self.buffers.lock().give_back(r.puts);
        }
        Ok(Appended { batches, checked })
    }

    /// Sync the cold file, then log the pointers of the values `appended` put there (the
    /// last batch synced when `sync`). Returns the value bytes moved.
    pub(crate) fn log_appended(&self, db: &DbInner, appended: Vec<Appended>, sync: bool) -> Result<u64> {
        let mut out = self.cold.lock();
        if appended.iter().all(|a| a.batches.is_empty()) {
            return Ok(0);
        }
        let active = out.active.as_mut().map(|a| a.number);
        if let Some(a) = out.active.as_mut() {
            if let Err(e) = a.file.sync_data() {
                // What the file holds now is unknown: the next collection starts a fresh one.
                out.active = None;
                return Err(e);
            }
        }
        let count: usize = appended.iter().map(|a| a.batches.len()).sum();
        let mut bytes = 0;
        let mut i = 0;
        for a in appended {
            for piece in a.batches {
                i += 1;
                // Recorded before the write too: a failed write may still have reached the log.
                out.logged_in.insert(piece.cold, db.writes.log.lock().file_number());
                db.writes.gc_write(db, piece.pointers, piece.old, a.checked.clone(), sync && i == count)?;
                bytes += piece.bytes;
                out.logged_in.insert(piece.cold, db.writes.log.lock().file_number());
            }
        }
        debug_assert!(active.is_none_or(|a| out.logged_in.contains_key(&a)));
        Ok(bytes)
    }

    /// Append `puts` to the active cold file (starting one when there is none or it is full)
    /// as one record group; returns the batch of pointer ops naming the copies, and the file.
    fn cold_append(&self, db: &DbInner, out: &mut ColdOutput, puts: &WriteBatch) -> Result<(WriteBatch, u64)> {
        if out.active.as_ref().is_some_and(|a| a.len >= db.opts.log_file_bytes) {
            // It may hold an earlier piece of this relocation, not synced yet: pointers into
            // it are logged once the whole relocation is durable (a full file left unsynced
            // here lost GC-moved values at a power loss).
            if let Some(mut full) = out.active.take() {
                full.file.sync_data()?;
            }
        }
        let a = match out.active {
            Some(ref mut a) => a,
            None => out.active.insert(self.new_cold_file(db)?),
        };
        let values = log::separated_values(&puts.rep, 0);
        // Any non-zero sequence number: a cold file is never replayed, only read by GC.
        let first_seq = db.writes.visible_seq().max(1);
        let count = puts.len() as u32;
        // Header and ops appended apart: a group copied whole cost a copy of every value moved.
        let crc = log::group_crc(first_seq, count, &puts.rep);
        let header = log::encode_header(first_seq, count, puts.rep.len(), crc);
        if let Err(e) = a.file.append(&header).and_then(|()| a.file.append(&puts.rep)) {
            out.active = None;
            return Err(e);
        }
        // The device starts on these bytes now, while the next chunks are read and checked:
        // left to the sync before the pointers are logged, the collector waited for every
        // byte it had moved (docs/BENCHMARKS.md §5).
        a.file.start_writeback();
        let at = a.len;
        let group_len = log::group_len(puts.rep.len());
        a.len += group_len;
        crate::db::add(&db.counters.cold_bytes, group_len);
        let mut pointers = WriteBatch::with_capacity(puts.len() * 40);
        let keys = puts.iter().filter_map(|op| match op {
            Ok((ks, BatchOp::Put { key, expires_at_ms, .. })) => Some((ks, key, expires_at_ms)),
            _ => None,
        });
        for ((ks, key, expires_at_ms), v) in keys.zip(&values) {
            let ptr =
                ValuePointer { file: a.number, offset: at + v.op_offset, op_len: v.op_len, value_crc: v.value_crc };
            // A moved value keeps its expiry time: the pointer put carries it into the tree.
            pointers.put_pointer(ks, key, &ptr.encoded(), expires_at_ms);
        }
        Ok((pointers, a.number))
    }

    /// Register a new cold file in the manifest, then create it: a cold file on disk is
    /// always known to the manifest (the sweep deletes the others).
    fn new_cold_file(&self, db: &DbInner) -> Result<ColdFile> {
        let number = {
            let mut st = db.state.lock();
            let n = st.versions.new_file_number();
            st.versions.log_and_apply(VersionEdit { vlog_added: vec![(n, 0)], ..Default::default() })?;
            n
        };
        db.vlog.add_cold(number);
        let file = db.vfs.create(&cold_file_name(&db.dir, number))?;
        db.vfs.sync_dir(&db.dir)?;
        tracing::debug!(number, "cold value file started");
        Ok(ColdFile { number, file, len: 0 })
    }

    /// The cold files GC must not collect now: the one being filled, and those whose pointer
    /// ops are still in the log past `log_head_file` (a replay would meet them).
    pub(crate) fn cold_files_in_use(&self, log_head_file: u64) -> HashSet<u64> {
        let mut out = self.cold.lock();
        out.logged_in.retain(|_, wal| *wal >= log_head_file);
        let active = out.active.as_ref().map(|a| a.number);
        out.logged_in.keys().copied().chain(active).collect()
    }
}

/// At open: tell the reader which value files are cold, and drop the manifest's registration
/// of cold files that were never created (a crash between the two steps of `new_cold_file`).
pub(crate) fn find_cold_files(
    vfs: &dyn crate::fs::Vfs,
    dir: &std::path::Path,
    versions: &mut VersionSet,
    vlog: &crate::vlog::VlogReader,
) -> Result<()> {
    for name in vfs.list(dir)? {
        if let Some((crate::filename::FileKind::Cold, n)) = crate::filename::parse_file_name(&name) {
            vlog.add_cold(n);
        }
    }
    let never_made: Vec<u64> = versions
        .vlog_files()
        .iter()
        .filter(|(n, s)| s.total_bytes == 0 && !vlog.is_cold(**n))
        .map(|(n, _)| *n)
        .collect();
    if !never_made.is_empty() {
        versions.log_and_apply(VersionEdit { vlog_files_deleted: never_made, ..Default::default() })?;
    }
    Ok(())
}
