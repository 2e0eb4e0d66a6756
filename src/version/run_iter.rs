//! Iterates one sorted run (disjoint, sorted table files) as a single stream, opening each
//! table only when the iteration reaches it.

use std::cmp::Ordering;
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

/// Concatenation of a run's files.
pub struct RunIterator {
    cache: Arc<TableCache>,
    files: Arc<[Arc<FileMeta>]>,
    reads: BlockReads,
    idx: usize,
    cur: Option<TableIterator>,
    /// The run's level and who hears of seeks into tables of several segments.
    observer: Option<(usize, Arc<dyn SeekObserver>)>,
}

impl RunIterator {
    pub fn new(cache: Arc<TableCache>, files: Arc<[Arc<FileMeta>]>, reads: BlockReads) -> Self {
        RunIterator { cache, files, reads, idx: 0, cur: None, observer: None }
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
