//! The read path: point lookups (memtables, then tables newest first), iterators over a pinned
//! view, and statistics.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{DbInner, DbStats};
use crate::error::{Error, Result};
use crate::iter::db_iter::DbIterator;
use crate::iter::run::RunIterator;
use crate::iter::{InternalIterator, MergingIterator};
use crate::key::{self, ValueKind, KIND_FOR_SEEK};
use crate::memtable::{Lookup, Memtable};
use crate::options::ReadOptions;
use crate::version::Version;
use crate::vlog::{Access, ValuePointer};

/// LevelDB's seek compaction: a lookup that probed more than one table charges the first one
/// it passed over; a table charged more than `max(100, size / 16 KiB)` times is compacted.
#[derive(Default)]
pub(crate) struct SeekStats {
    charges: std::collections::HashMap<u64, u64>,
    pub(crate) candidate: Option<(usize, Arc<crate::version::FileMeta>)>,
}

/// What one read works on: memtables (newest first) and a Version, all pinned.
struct View {
    mems: Vec<Arc<Memtable>>,
    version: Arc<Version>,
    seq: u64,
}

impl DbInner {
    fn view(&self, ro: &ReadOptions) -> View {
        let st = self.state.lock();
        let mut mems = Vec::with_capacity(1 + st.imms.len());
        mems.push(st.mem.clone());
        mems.extend(st.imms.iter().rev().cloned());
        let version = st.versions.current();
        drop(st);
        let seq = match &ro.snapshot {
            Some(s) => s.sequence(),
            None => self.visible_seq.load(Ordering::Acquire),
        };
        View { mems, version, seq }
    }

    fn fill_cache(&self, ro: &ReadOptions) -> bool {
        ro.fill_cache.unwrap_or(true)
    }

    pub(crate) fn get(&self, ro: &ReadOptions, user_key: &[u8]) -> Result<Option<Vec<u8>>> {
        let view = self.view(ro);
        match self.get_entry(&view, user_key, self.fill_cache(ro))? {
            Some((kind, v)) => self.resolve(user_key, kind, v),
            None => Ok(None),
        }
    }

    /// The newest entry for `user_key` visible at the latest sequence number, without
    /// reading a separated value (GC compares the pointer itself).
    pub(crate) fn get_latest_entry(&self, user_key: &[u8]) -> Result<Option<(ValueKind, Vec<u8>)>> {
        let view = self.view(&ReadOptions::default());
        self.get_entry(&view, user_key, true)
    }

    /// The newest entry for `user_key` visible in `view`: `None` when absent, the kind and
    /// stored bytes otherwise (deletions included).
    fn get_entry(&self, view: &View, user_key: &[u8], fill: bool) -> Result<Option<(ValueKind, Vec<u8>)>> {
        for m in &view.mems {
            match m.get(user_key, view.seq) {
                Lookup::Found(kind, v) => return Ok(Some((kind, v))),
                Lookup::Deleted => return Ok(Some((ValueKind::Deletion, Vec::new()))),
                Lookup::Absent => {}
            }
        }
        let seek = key::make_internal_key(user_key, view.seq, KIND_FOR_SEEK);
        let mut first_probed = None;
        for (probes, (level, file)) in view.version.files_for_key(user_key).into_iter().enumerate() {
            if probes == 1 {
                if let Some((l, f)) = first_probed.take() {
                    self.charge_seek(l, f);
                }
            } else if probes == 0 {
                first_probed = Some((level, file.clone()));
            }
            let table = self.table_cache.get(&file)?;
            if let Some((ikey, value)) = table.get(&seek, fill)? {
                let path = || self.dir.join(format!("{:06}.sst", file.number));
                let p = key::parse_internal_key(&ikey).ok_or_else(|| Error::corruption(path(), 0, "malformed key"))?;
                let kind = ValueKind::from_u8(p.kind)
                    .ok_or_else(|| Error::corruption(path(), 0, format!("unknown entry kind {}", p.kind)))?;
                return Ok(Some((kind, value)));
            }
        }
        Ok(None)
    }

    fn charge_seek(&self, level: usize, file: Arc<crate::version::FileMeta>) {
        let allowed = (file.size / (16 << 10)).max(100);
        let mut s = self.seek_stats.lock();
        if s.charges.len() > 100_000 {
            // Mostly files compacted away since: start counting afresh.
            s.charges.clear();
        }
        let n = s.charges.entry(file.number).or_insert(0);
        *n += 1;
        if *n >= allowed && s.candidate.is_none() {
            s.charges.remove(&file.number);
            s.candidate = Some((level, file));
            self.compact_cv.notify_one();
        }
    }

    /// Turn a stored entry into the user's value.
    fn resolve(&self, user_key: &[u8], kind: ValueKind, v: Vec<u8>) -> Result<Option<Vec<u8>>> {
        match kind {
            ValueKind::Value => Ok(Some(v)),
            ValueKind::Deletion => Ok(None),
            ValueKind::Pointer => self.read_pointer(user_key, &v, Access::Point).map(Some),
        }
    }

    /// Read a separated value: from its vLog file, or from the log buffer when it has not
    /// been handed to the file yet.
    pub(crate) fn read_pointer(&self, user_key: &[u8], encoded: &[u8], access: Access) -> Result<Vec<u8>> {
        let ptr = ValuePointer::decode(encoded)
            .ok_or_else(|| Error::corruption(&self.dir, 0, "malformed value pointer in the LSM-tree"))?;
        let op = match self.vlog.try_read_op(&ptr, access)? {
            Some(op) => op,
            None => {
                let buffered = self.log.lock().read_buffered(ptr.file, ptr.offset, ptr.op_len as usize);
                match buffered {
                    Some(op) => op,
                    // Handed to the file between the two checks.
                    None => self.vlog.read_op(&ptr, access)?,
                }
            }
        };
        self.vlog.verify_op(&ptr, &op, user_key)
    }

    pub(crate) fn iter(self: &Arc<Self>, ro: &ReadOptions) -> Result<DbIterator> {
        let view = self.view(ro);
        let fill = self.fill_cache(ro);
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
        for m in &view.mems {
            children.push(Box::new(m.iter()));
        }
        for level in &view.version.levels {
            for run in &level.runs {
                children.push(Box::new(RunIterator::new(self.table_cache.clone(), run.files.clone(), fill)));
            }
        }
        // An iterator is a reader at `view.seq` like a snapshot: register it, so value-log GC
        // keeps every value it may still read.
        let pins = (view.mems, view.version.clone(), self.snapshots.acquire(view.seq));
        Ok(DbIterator::new(
            Box::new(MergingIterator::new(children)),
            view.seq,
            ro.lower_bound.clone(),
            ro.upper_bound.clone(),
            {
                let me = Arc::clone(self);
                Arc::new(move |k: &[u8], p: &[u8]| me.read_pointer(k, p, Access::Scan))
            },
            Box::new(pins),
        ))
    }

    pub(crate) fn stats(&self) -> DbStats {
        let st = self.state.lock();
        let v = st.versions.current();
        let memtable_bytes = st.mem.approximate_bytes() + st.imms.iter().map(|m| m.approximate_bytes()).sum::<u64>();
        let blobs = st.versions.blob_files();
        let vlog_value_bytes = blobs.values().map(|b| b.total_bytes).sum();
        let vlog_garbage_bytes = blobs.values().map(|b| b.garbage_bytes).sum();
        drop(st);
        let c = &self.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let (mut disk_bytes, mut vlog_disk_bytes) = (0, 0);
        for name in self.vfs.list(&self.dir).unwrap_or_default() {
            let used = self.vfs.disk_usage(&self.dir.join(&name)).unwrap_or(0);
            disk_bytes += used;
            if matches!(crate::version::parse_file_name(&name), Some((crate::version::FileKind::Log, _))) {
                vlog_disk_bytes += used;
            }
        }
        DbStats {
            user_bytes_written: load(&c.user_bytes),
            log_bytes_written: self.log.lock().bytes_appended,
            flush_bytes_written: load(&c.flush_bytes),
            compaction_bytes_written: load(&c.compaction_written),
            compaction_bytes_read: load(&c.compaction_read),
            num_flushes: load(&c.flushes),
            num_compactions: load(&c.compactions),
            num_trivial_moves: load(&c.trivial_moves),
            stall_micros: load(&c.stall_micros),
            level_files: (0..v.num_levels()).map(|l| v.level_files(l)).collect(),
            level_runs: (0..v.num_levels()).map(|l| v.num_runs(l)).collect(),
            level_bytes: (0..v.num_levels()).map(|l| v.level_bytes(l)).collect(),
            disk_bytes,
            vlog_disk_bytes,
            vlog_value_bytes,
            vlog_garbage_bytes,
            memtable_bytes,
            last_sequence: self.visible_seq.load(Ordering::Acquire),
            gc_runs: load(&c.gc_runs),
            gc_bytes_read: load(&c.gc_bytes_read),
            gc_bytes_rewritten: load(&c.gc_bytes_rewritten),
            gc_bytes_freed: load(&c.gc_bytes_freed),
        }
    }
}
