//! `Db::verify`: read every table block, every live value pointer and every log record group
//! of the database, checking checksums and invariants, and collect what is broken and where
//! instead of stopping at the first problem.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use super::DbInner;
use crate::error::{Error, Result};
use crate::filename::{self, table_file_name, vlog_file_name, FileKind};
use crate::internal_iter::InternalIterator;
use crate::key::{self, ValueKind};
use crate::log::LogPos;
use crate::sst::{BlockReads, Table};
use crate::version::FileMeta;
use crate::vlog::{Access, CacheUse, ValuePointer};

/// Errors kept in a report; past this only the count grows (one bad disk can fail thousands).
const MAX_ERRORS: usize = 100;

/// What `Db::verify` checked and what it found.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Table files read end to end.
    pub tables_checked: u64,
    /// Table entries read (every data block they live in passed its crc).
    pub entries_checked: u64,
    /// Value pointers whose value was read from the value log and matched its crc and key.
    pub pointers_checked: u64,
    /// Pointers that could not be read but are shadowed by a newer entry (GC may have
    /// collected their value legitimately).
    pub stale_pointers_skipped: u64,
    /// Log record groups whose crc was checked.
    pub log_groups_checked: u64,
    /// Problems that lose no acknowledged data (e.g. a torn tail of the last log file).
    pub warnings: Vec<String>,
    /// Damage: each names the file, the offset and the reason. At most 100 are kept.
    pub errors: Vec<String>,
    /// Errors found beyond the ones kept in `errors`.
    pub errors_omitted: u64,
}

impl VerifyReport {
    /// No errors were found (warnings allowed).
    pub fn is_healthy(&self) -> bool {
        self.errors.is_empty() && self.errors_omitted == 0
    }

    fn error(&mut self, e: impl fmt::Display) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(e.to_string());
        } else {
            self.errors_omitted += 1;
        }
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "tables checked:         {}", self.tables_checked)?;
        writeln!(f, "entries checked:        {}", self.entries_checked)?;
        writeln!(f, "value pointers checked: {}", self.pointers_checked)?;
        writeln!(f, "stale pointers skipped: {}", self.stale_pointers_skipped)?;
        writeln!(f, "log groups checked:     {}", self.log_groups_checked)?;
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        for e in &self.errors {
            writeln!(f, "error: {e}")?;
        }
        if self.errors_omitted > 0 {
            writeln!(f, "... and {} more errors", self.errors_omitted)?;
        }
        let total = self.errors.len() as u64 + self.errors_omitted;
        match total {
            0 => writeln!(f, "result: healthy"),
            n => writeln!(f, "result: DAMAGED ({n} errors)"),
        }
    }
}

impl DbInner {
    /// Check every table, every value pointer in them and the log from its head on.
    pub(crate) fn verify(&self) -> Result<VerifyReport> {
        let (versions, head) = {
            let st = self.state.lock();
            let live = st.trees.iter().filter(|(_, t)| !t.dropped).map(|(&ks, _)| ks);
            let versions: Vec<_> = live.filter_map(|ks| Some((ks, st.versions.current_of(ks)?))).collect();
            (versions, st.versions.log_head())
        };
        let mut report = VerifyReport::default();
        let checker = Checker { db: self };
        for (ks, version) in &versions {
            for (_, meta) in version.all_files() {
                checker.table(*ks, meta, &mut report);
            }
        }
        checker.log(head, &mut report)?;
        Ok(report)
    }
}

/// The checks of one `verify` run, over the database's files.
struct Checker<'a> {
    db: &'a DbInner,
}

impl Checker<'_> {
    /// Read one table through a fresh reader (no block cache, no mapping: every block is
    /// read from the file and crc-checked now).
    fn table(&self, ks: u32, meta: &FileMeta, report: &mut VerifyReport) {
        report.tables_checked += 1;
        let path = table_file_name(&self.db.dir, meta.number);
        let ro = crate::sst::TableReadOptions::from_options(&self.db.opts);
        let opened =
            self.db.vfs.open_read(&path).and_then(|file| Table::open_with(file, meta.number, meta.size, None, &ro));
        let table = match opened {
            Ok(t) => Arc::new(t),
            Err(e) => return report.error(e),
        };
        if let Err(e) = self.table_entries(ks, &table, meta, report) {
            report.error(e);
        }
    }

    fn table_entries(&self, ks: u32, table: &Arc<Table>, meta: &FileMeta, report: &mut VerifyReport) -> Result<()> {
        let path = table_file_name(&self.db.dir, meta.number);
        let bad = |reason: String| Error::corruption(&path, 0, reason);
        // A DTable's iterator merges its segments: the order and range checks below cover
        // every segment, and the entry count their sum.
        if table.num_segments() as u64 != meta.segments.max(1) {
            let why = format!("holds {} segments, the manifest says {}", table.num_segments(), meta.segments.max(1));
            report.error(bad(why));
        }
        let order = self.db.table_cache.order();
        // Every block checked against its checksum, even one a read checked before.
        let mut it = table.iter(BlockReads { fill_cache: false, verify_checksums: true });
        it.seek_to_first()?;
        let mut prev: Option<Vec<u8>> = None;
        let mut entries = 0u64;
        while it.valid() {
            let ikey = it.key();
            let parsed = key::parse_internal_key(ikey);
            if parsed.is_none() && key::unknown_kind(ikey).is_none() {
                return Err(bad(format!("malformed key at entry {entries}")));
            }
            if let Some(prev) = &prev {
                if order.compare_internal(prev, ikey) != Ordering::Less {
                    report.error(bad(format!("entry {entries}: keys out of order")));
                }
            }
            let outside = order.compare_internal(ikey, &meta.smallest) == Ordering::Less
                || order.compare_internal(ikey, &meta.largest) == Ordering::Greater;
            if outside {
                report.error(bad(format!("entry {entries}: key outside the file's manifest key range")));
            }
            match parsed {
                Some(p) if p.kind == ValueKind::Pointer => self.pointer(ks, &path, p.user_key, it.value(), report),
                // An expiring pointer is checked like any other (expired or not: its value is
                // on disk until compaction drops the entry).
                Some(p) if p.kind == ValueKind::ExpiringPointer => match crate::ttl::split_expiry(it.value()) {
                    Some((_, ptr)) => self.pointer(ks, &path, p.user_key, ptr, report),
                    None => report.error(bad(format!("entry {entries}: expiring entry shorter than its expiry time"))),
                },
                Some(_) => {}
                None => report.error(bad(format!("entry {entries}: {}", key::malformed_reason(ikey)))),
            }
            entries += 1;
            report.entries_checked += 1;
            prev = Some(ikey.to_vec());
            it.next()?;
        }
        if entries != meta.num_entries {
            report.error(bad(format!("holds {entries} entries, the manifest says {}", meta.num_entries)));
        }
        Ok(())
    }

    /// Read and check the value a table entry points to. A failure counts only when the
    /// pointer is still the key's newest entry: an older one may name a collected vLog file.
    fn pointer(&self, ks: u32, table: &std::path::Path, user_key: &[u8], encoded: &[u8], report: &mut VerifyReport) {
        let Some(ptr) = ValuePointer::decode(encoded) else {
            return report.error(Error::corruption(table, 0, "malformed value pointer"));
        };
        let checked = self.db.vlog.read_value(&ptr, user_key, Access::Scan, CacheUse::Bypass);
        let Err(e) = checked else {
            report.pointers_checked += 1;
            return;
        };
        match self.db.get_latest_entry(ks, user_key) {
            Ok(Some((ValueKind::Pointer, newest))) if newest == encoded => report.error(e),
            Ok(_) => report.stale_pointers_skipped += 1,
            Err(lookup) => {
                report.error(e);
                report.error(lookup);
            }
        }
    }

    /// Survey the log from the manifest's head to the end (every record's crc, the sequence
    /// numbers running on without a gap, the sync marks): a torn tail no sync covered is a
    /// warning (the next open drops it); every other break is an error.
    fn log(&self, head: LogPos, report: &mut VerifyReport) -> Result<()> {
        let mut logs: Vec<u64> = self
            .db
            .vfs
            .list(&self.db.dir)?
            .iter()
            .filter_map(|n| filename::parse_file_name(n))
            .filter(|&(k, n)| k == FileKind::Vlog && n >= head.file)
            .map(|(_, n)| n)
            .collect();
        logs.sort_unstable();
        if head.offset > 0 && logs.first() != Some(&head.file) {
            let path = vlog_file_name(&self.db.dir, head.file);
            report.error(Error::corruption(
                path,
                head.offset,
                "the log file holding the manifest's log head is missing",
            ));
            logs.retain(|&n| n != head.file);
        }
        let closed = self.db.state.lock().versions.log_durable();
        let survey = crate::log::survey::survey(&*self.db.vfs, &self.db.dir, &logs, head, closed)?;
        report.log_groups_checked += survey.segments.iter().map(|s| s.groups).sum::<u64>();
        for b in &survey.breaks {
            let e = Error::corruption(vlog_file_name(&self.db.dir, b.at.file), b.at.offset, &b.reason);
            match b.durable_by {
                None => report.warnings.push(format!("torn tail of the log (no completed sync covered it): {e}")),
                Some(proof) => report.error(format!("{e} ({} bytes unreadable; {proof})", b.unreadable_bytes)),
            }
        }
        Ok(())
    }
}
