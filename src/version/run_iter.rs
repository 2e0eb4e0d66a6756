//! Iterates one sorted run (disjoint, sorted table files) as a single stream, opening each
//! table only when the iteration reaches it.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use crate::error::Result;
use crate::internal_iter::InternalIterator;
use crate::sst::table_cache::TableCache;
use crate::sst::{BlockReads, TableIterator};
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
}

impl RunIterator {
    pub fn new(cache: Arc<TableCache>, files: Arc<[Arc<FileMeta>]>, reads: BlockReads) -> Self {
        RunIterator { cache, files, reads, idx: 0, cur: None, observer: None, prefix: None, counts: None }
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
        self.cur = match self.files.get(idx) {
            Some(f) => Some(self.cache.get(f.number, f.size)?.iter(self.reads)),
            None => None,
        };
        Ok(())
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
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let order = self.cache.order();
        let idx = self.files.partition_point(|f| order.compare_internal(&f.largest, target) == Ordering::Less);
        let Some(idx) = self.first_with_prefix(idx, target)? else {
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
