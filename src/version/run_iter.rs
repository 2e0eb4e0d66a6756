//! Iterates one sorted run (disjoint, sorted table files) as a single stream, opening each
//! table only when the iteration reaches it.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use crate::error::Result;
use crate::internal_iter::InternalIterator;
use crate::sst::table_cache::TableCache;
use crate::sst::{BlockReads, Table, TableIterator};
use crate::version::FileMeta;

/// Told which table of several segments a seek landed in (the DB charges it, and collapses
/// a table charged too often).
pub trait SeekObserver: Send + Sync {
    fn sought(&self, level: usize, file: &Arc<FileMeta>);
}

/// How many tables iterator seeks positioned in, and how many a prefix filter let them skip
/// (`DbStats::seek_tables_probed`, `prefix_tables_skipped`).
#[derive(Debug, Default)]
pub struct SeekCounts {
    pub probed: AtomicU64,
    pub skipped: AtomicU64,
}

/// A prefix-bounded iterator's state, shared by the iterator and its runs: while `active`,
/// a run's seek looks only at tables whose prefix filter may hold the target's prefix
/// (`ReadOptions::prefix_same_as_start`; the iterator bounds itself to the prefix).
pub struct PrefixScope {
    pub extractor: Arc<dyn crate::prefix::PrefixExtractor>,
    pub active: AtomicBool,
}

/// Concatenation of a run's files.
pub struct RunIterator {
    cache: Arc<TableCache>,
    files: Arc<[Arc<FileMeta>]>,
    reads: BlockReads,
    idx: usize,
    cur: Option<TableIterator>,
    /// The run's level and who hears of seeks into tables of several segments.
    observer: Option<(usize, Arc<dyn SeekObserver>)>,
    /// Prefix-bounded seeks skip tables by their prefix filters.
    prefix: Option<Arc<PrefixScope>>,
    counts: Option<Arc<SeekCounts>>,
    /// The table `prefetch` found for the seek that follows it, with its place in `files`:
    /// the seek takes it instead of asking the table cache again.
    prefetched: Option<(usize, Arc<Table>)>,
}

impl RunIterator {
    pub fn new(cache: Arc<TableCache>, files: Arc<[Arc<FileMeta>]>, reads: BlockReads) -> Self {
        RunIterator {
            cache,
            files,
            reads,
            idx: 0,
            cur: None,
            observer: None,
            prefix: None,
            counts: None,
            prefetched: None,
        }
    }

    /// Count the tables seeks position in (and those prefix filters let them skip) in `counts`.
    #[must_use]
    pub fn counted(self, counts: Arc<SeekCounts>) -> Self {
        RunIterator { counts: Some(counts), ..self }
    }

    /// Skip tables by their prefix filters on seeks while `scope` is active.
    #[must_use]
    pub fn prefix_scoped(self, scope: Arc<PrefixScope>) -> Self {
        RunIterator { prefix: Some(scope), ..self }
    }

    /// The first file from `idx` a seek to `target` must look at: under an active prefix
    /// scope, the first whose prefix filter may hold the target's prefix, `None` when no file
    /// that may hold keys of the prefix does (keys sort bytewise: a prefix's keys are one range).
    fn first_with_prefix(&self, idx: usize, target: &[u8]) -> Result<Option<usize>> {
        let Some(scope) = self.prefix.as_ref().filter(|s| s.active.load(AtomicOrdering::Relaxed)) else {
            return Ok(Some(idx));
        };
        let Some(p) = scope.extractor.prefix(crate::key::user_key(target)) else { return Ok(Some(idx)) };
        let mut i = idx;
        while let Some(f) = self.files.get(i) {
            let first = crate::key::user_key(&f.smallest);
            if first > p && !first.starts_with(p) {
                break;
            }
            if self.cache.get(f.number, f.size)?.prefix_may_match(scope.extractor.name(), p) {
                return Ok(Some(i));
            }
            if let Some(c) = &self.counts {
                c.skipped.fetch_add(1, AtomicOrdering::Relaxed);
            }
            i += 1;
        }
        Ok(None)
    }

    /// Report every seek landing in a table of several segments of this run (level `level`).
    #[must_use]
    pub fn observed(self, level: usize, observer: Arc<dyn SeekObserver>) -> Self {
        RunIterator { observer: Some((level, observer)), ..self }
    }

    fn open(&mut self, idx: usize) -> Result<()> {
        self.idx = idx;
        let prefetched = self.prefetched.take().filter(|(at, _)| *at == idx);
        self.cur = match (self.files.get(idx), prefetched) {
            (Some(_), Some((_, table))) => Some(table.iter(self.reads)),
            (Some(f), None) => Some(self.cache.get(f.number, f.size)?.iter(self.reads)),
            (None, _) => None,
        };
        Ok(())
    }

    /// The file a seek to `target` lands in: the first whose largest key is not below it
    /// (`files.len()` past the run).
    fn landing(&self, target: &[u8]) -> usize {
        let order = self.cache.order();
        self.files.partition_point(|f| order.compare_internal(&f.largest, target) == Ordering::Less)
    }

    /// `seek`, which may take the table `prefetch` found.
    fn seek_in_run(&mut self, target: &[u8]) -> Result<()> {
        let Some(idx) = self.first_with_prefix(self.landing(target), target)? else {
            (self.idx, self.cur) = (self.files.len(), None);
            return Ok(());
        };
        if let (Some(c), Some(_)) = (&self.counts, self.files.get(idx)) {
            c.probed.fetch_add(1, AtomicOrdering::Relaxed);
        }
        if let (Some((level, o)), Some(f)) = (&self.observer, self.files.get(idx)) {
            if f.segments > 1 {
                o.sought(*level, f);
            }
        }
        self.open(idx)?;
        if let Some(c) = &mut self.cur {
            c.seek(target)?;
        }
        self.skip_forward()
    }

    /// Move to following files while the current one is exhausted.
    fn skip_forward(&mut self) -> Result<()> {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if self.idx + 1 >= self.files.len() {
                self.cur = None;
                break;
            }
            self.open(self.idx + 1)?;
            if let Some(c) = &mut self.cur {
                c.seek_to_first()?;
            }
        }
        Ok(())
    }

    /// Move to preceding files while the current one is exhausted.
    fn skip_backward(&mut self) -> Result<()> {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if self.idx == 0 {
                self.cur = None;
                break;
            }
            self.open(self.idx - 1)?;
            if let Some(c) = &mut self.cur {
                c.seek_to_last()?;
            }
        }
        Ok(())
    }

    fn cur(&self) -> &TableIterator {
        self.cur.as_ref().expect("key/value called on an invalid RunIterator")
    }
}

impl InternalIterator for RunIterator {
    fn valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.open(0)?;
        if let Some(c) = &mut self.cur {
            c.seek_to_first()?;
        }
        self.skip_forward()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.open(self.files.len().saturating_sub(1))?;
        if let Some(c) = &mut self.cur {
            c.seek_to_last()?;
        }
        self.skip_backward()
    }
    fn prefetch(&mut self, target: &[u8]) {
        // Every table warm (data in memory): nothing to ask for, and no second search. A
        // prefix-bounded seek may pass the table over (`first_with_prefix`): not asked either.
        let scoped = self.prefix.as_ref().is_some_and(|s| s.active.load(AtomicOrdering::Relaxed));
        if scoped || !self.cache.any_cold() {
            return;
        }
        let idx = self.landing(target);
        // The table the seek lands in. An error here is the seek's to report.
        self.prefetched = match self.files.get(idx).map(|f| self.cache.get(f.number, f.size)) {
            Some(Ok(t)) => {
                t.prefetch(target);
                Some((idx, t))
            }
            _ => None,
        };
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let r = self.seek_in_run(target);
        // Whatever the seek did, a table a prefetch found is not kept past it.
        self.prefetched = None;
        r
    }
    fn next(&mut self) -> Result<()> {
        if let Some(c) = &mut self.cur {
            c.next()?;
        }
        self.skip_forward()
    }
    fn prev(&mut self) -> Result<()> {
        if let Some(c) = &mut self.cur {
            c.prev()?;
        }
        self.skip_backward()
    }
    fn key(&self) -> &[u8] {
        self.cur().key()
    }
    fn value(&self) -> &[u8] {
        self.cur().value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{MemFs, Vfs};
    use crate::key::{make_internal_key, user_key, ValueKind};
    use crate::sst::table_builder::TableBuilder;
    use crate::sst::{TableOptions, TableReadOptions};

    /// Three tables of one run in a `MemFs` (keys k000..k299, a hundred per table), read with
    /// options that count a table cold, so every seek of a merge prefetches first.
    fn cold_run() -> RunIterator {
        let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let dir = std::path::PathBuf::from("/run");
        fs.create_dir_all(&dir).unwrap();
        let mut files = Vec::new();
        for t in 0..3u64 {
            let mut b = TableBuilder::new(
                fs.create(&crate::filename::table_file_name(&dir, t + 1)).unwrap(),
                TableOptions::default(),
            );
            for k in t * 100..t * 100 + 100 {
                b.add(&make_internal_key(format!("k{k:03}").as_bytes(), 1, ValueKind::Value), b"v").unwrap();
            }
            let s = b.finish().unwrap();
            let (lo, hi) = (format!("k{:03}", t * 100), format!("k{:03}", t * 100 + 99));
            files.push(Arc::new(FileMeta {
                number: t + 1,
                size: s.file_size,
                smallest: make_internal_key(lo.as_bytes(), 1, ValueKind::Value),
                largest: make_internal_key(hi.as_bytes(), 1, ValueKind::Value),
                ..Default::default()
            }));
        }
        let ro = TableReadOptions::default();
        ro.cold_tables.add_for_test(1);
        let cache = Arc::new(TableCache::new(fs, dir, 16, None, ro));
        RunIterator::new(cache, files.into(), BlockReads::filling(false))
    }

    fn at(it: &RunIterator) -> String {
        String::from_utf8(user_key(it.key()).to_vec()).unwrap()
    }

    /// A `MemFs` table has no mapping, so nothing is read ahead: what is checked is that the
    /// seek that follows a prefetch lands where it must, with the table handed over or not.
    #[test]
    fn a_seek_after_a_prefetch_for_another_target_lands_where_the_seek_says() {
        let mut it = cold_run();
        let target = |k: &str| make_internal_key(k.as_bytes(), u64::MAX >> 8, ValueKind::Value);
        // The table a prefetch found is handed to the seek that follows: the same target, or
        // another in the same table.
        it.prefetch(&target("k150"));
        it.seek(&target("k150")).unwrap();
        assert_eq!(at(&it), "k150");
        it.prefetch(&target("k120"));
        it.seek(&target("k199")).unwrap();
        assert_eq!(at(&it), "k199");
        it.next().unwrap();
        assert_eq!(at(&it), "k200", "into the next table");
        // A prefetch for one table and a seek into another: the seek opens its own.
        it.prefetch(&target("k010"));
        it.seek(&target("k250")).unwrap();
        assert_eq!(at(&it), "k250");
        it.prefetch(&target("k250"));
        it.seek_to_first().unwrap();
        assert_eq!(at(&it), "k000", "seek_to_first is not led astray by a pending prefetch");
        it.prefetch(&target("k999"));
        it.seek(&target("k999")).unwrap();
        assert!(!it.valid(), "past the run");
    }
}
