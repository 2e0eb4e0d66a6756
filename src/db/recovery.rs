//! Opening an existing database: read the manifest, replay the log from the recorded head into
//! a memtable (flushing when it fills, so memory stays bounded), cut a torn tail, and reopen
//! the last log file for appending.

use std::path::Path;
use std::sync::Arc;

use super::background::write_level0_table;
use crate::error::{Error, Result};
use crate::filename::{self, vlog_file_name, FileKind};
use crate::fs::Vfs;
use crate::log::{self, LogPos, LogReader, LogRecord, LogWriter, ReadOutcome};
use crate::memtable::Memtable;
use crate::options::{Options, RecoveryMode};
use crate::version::{VersionEdit, VersionSet};

/// What recovery hands to the new DB.
pub(super) struct Recovered {
    pub mem: Arc<Memtable>,
    pub versions: VersionSet,
    pub last_seq: u64,
    pub log: LogWriter,
}

pub(super) fn recover(vfs: &Arc<dyn Vfs>, dir: &Path, opts: &Options, policy: &str) -> Result<Recovered> {
    let mut versions = if vfs.exists(&filename::current_file_name(dir)) {
        VersionSet::recover(vfs.clone(), dir, opts.num_levels)?
    } else {
        VersionSet::create(vfs.clone(), dir, opts.num_levels, policy)?
    };
    if versions.policy() != policy {
        tracing::info!(was = versions.policy(), now = policy, "compaction policy changed since the last open");
    }
    let head = versions.log_head();
    let logs = log_files_from(&**vfs, dir, head.file)?;
    if head.offset > 0 && !logs.contains(&head.file) {
        return Err(Error::corruption(
            vlog_file_name(dir, head.file),
            head.offset,
            "the log file holding the manifest's log head is missing",
        ));
    }
    let mut replay =
        Replay { vfs, dir, opts, versions: &mut versions, mem: Arc::new(Memtable::default()), last_seq: 0 };
    replay.last_seq = replay.versions.last_sequence();
    let mut tail = None;
    for (i, &n) in logs.iter().enumerate() {
        let start = if n == head.file { head.offset } else { 0 };
        let end = replay.file(n, start, i + 1 == logs.len())?;
        tail = Some((n, end));
    }
    let (mem, last_seq) = (replay.mem, replay.last_seq);
    if let Some(&max) = logs.last() {
        versions.mark_file_number_used(max);
    }
    versions.set_last_sequence(last_seq);
    let log = open_log_writer(vfs, dir, opts, &mut versions, tail)?;
    Ok(Recovered { mem, versions, last_seq, log })
}

/// Numbers of the log files at or after `first`, ascending.
fn log_files_from(vfs: &dyn Vfs, dir: &Path, first: u64) -> Result<Vec<u64>> {
    let mut logs: Vec<u64> = vfs
        .list(dir)?
        .iter()
        .filter_map(|n| filename::parse_file_name(n))
        .filter(|(k, n)| *k == FileKind::Vlog && *n >= first)
        .map(|(_, n)| n)
        .collect();
    logs.sort_unstable();
    Ok(logs)
}

/// Continue the last log file where its valid part ends, or start a new one.
fn open_log_writer(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    opts: &Options,
    versions: &mut VersionSet,
    tail: Option<(u64, u64)>,
) -> Result<LogWriter> {
    let (number, file, len) = match tail {
        Some((n, len)) => {
            let mut f = vfs.open_append(&vlog_file_name(dir, n))?;
            if f.len() != len {
                f.truncate(len)?;
                f.sync()?;
            }
            (n, f, len)
        }
        None => {
            let n = versions.new_file_number();
            let f = vfs.create(&vlog_file_name(dir, n))?;
            vfs.sync_dir(dir)?;
            (n, f, 0)
        }
    };
    Ok(LogWriter::new(vfs.clone(), dir, number, file, len, opts.log_buffer_bytes, opts.log_file_bytes))
}

/// Log bytes read before the replayed groups are inserted (in parallel) into the memtable.
const REPLAY_BATCH_BYTES: usize = 4 << 20;

struct Replay<'a> {
    vfs: &'a Arc<dyn Vfs>,
    dir: &'a Path,
    opts: &'a Options,
    versions: &'a mut VersionSet,
    mem: Arc<Memtable>,
    last_seq: u64,
}

impl Replay<'_> {
    /// Replay log file `n` from `start`; returns the offset where its valid part ends.
    fn file(&mut self, n: u64, start: u64, is_last: bool) -> Result<u64> {
        let path = vlog_file_name(self.dir, n);
        let mut reader = LogReader::new(self.vfs.open_read(&path)?, n, start)?;
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        loop {
            let stop = match reader.next_record()? {
                Ok(rec) => {
                    batch_bytes += rec.ops.len();
                    batch.push(rec);
                    None
                }
                Err(outcome) => Some(outcome),
            };
            let at_end = stop.is_some();
            if at_end || batch_bytes >= REPLAY_BATCH_BYTES {
                self.apply_batch(&batch);
                batch.clear();
                batch_bytes = 0;
                let full = self.mem.approximate_bytes() as usize >= self.opts.write_buffer_bytes
                    || self.mem.log_bytes() >= self.opts.memtable_log_bytes;
                if full {
                    self.flush(LogPos { file: n, offset: reader.offset() })?;
                }
            }
            match stop {
                None => {}
                Some(ReadOutcome::Clean) => return Ok(reader.offset()),
                Some(ReadOutcome::Damaged { offset, reason }) => {
                    let tolerate = self.opts.recovery_mode == RecoveryMode::TolerateCorruptTail && is_last;
                    if !tolerate {
                        return Err(Error::corruption(path, offset, reason));
                    }
                    let size = self.vfs.file_size(&path)?;
                    tracing::warn!(file = ?path, offset, dropped_bytes = size - offset, %reason,
                        "log tail is torn or damaged; keeping everything before it");
                    return Ok(offset);
                }
            }
        }
    }

    /// Insert a batch of record groups, half of them from a second thread: every entry has
    /// its own sequence number, so the memtable ends up the same in any insertion order, and
    /// skiplist inserts are most of the replay time.
    fn apply_batch(&mut self, records: &[LogRecord]) {
        let (mem, min_separated) = (&self.mem, self.opts.min_separated_value_bytes);
        let apply = |recs: &[LogRecord]| {
            for rec in recs {
                mem.apply_group(rec.pos, rec.first_seq, &rec.ops, &log::separated_values(&rec.ops, min_separated));
            }
        };
        let (a, b) = records.split_at(records.len() / 2);
        std::thread::scope(|s| {
            if !a.is_empty() {
                s.spawn(|| apply(a));
            }
            apply(b);
        });
        for rec in records.iter().filter(|r| r.count > 0) {
            self.last_seq = self.last_seq.max(rec.first_seq + rec.count as u64 - 1);
        }
    }

    /// Write the replayed memtable to level 0 and move the log head past it.
    fn flush(&mut self, head: LogPos) -> Result<()> {
        let number = self.versions.new_file_number();
        let opts = self.opts.table_options(0);
        let mut edit = VersionEdit::default();
        if let Some(meta) = write_level0_table(self.vfs, self.dir, opts, &self.mem, number)? {
            edit.added_files.push((0, meta));
        }
        edit.log_head = Some(head);
        edit.vlog_added = self.mem.vlog_bytes().into_iter().collect();
        self.versions.set_last_sequence(self.last_seq);
        self.versions.log_and_apply(edit)?;
        self.mem = Arc::new(Memtable::default());
        Ok(())
    }
}
