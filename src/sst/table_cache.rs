//! A bounded cache of open table readers, so hot tables are not reopened (and their index and
//! filter re-read) on every lookup, while the number of open files stays bounded.

use std::path::PathBuf;
use std::sync::Arc;

use super::block_cache::BlockCache;
use super::Table;
use crate::error::Result;
use crate::filename::table_file_name;
use crate::fs::Vfs;

/// Open tables by file number.
pub struct TableCache {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    tables: quick_cache::sync::Cache<u64, Arc<Table>>,
    block_cache: Option<Arc<BlockCache>>,
}

impl TableCache {
    pub fn new(vfs: Arc<dyn Vfs>, dir: PathBuf, max_open_files: usize, block_cache: Option<Arc<BlockCache>>) -> Self {
        TableCache { vfs, dir, tables: quick_cache::sync::Cache::new(max_open_files.max(16)), block_cache }
    }

    /// The reader of table file `number`, `size` bytes long, opened on first use. A DTable grows
    /// when light-weight compaction appends to it: a reader of another length is opened anew
    /// (and replaces the cached one), since each length is its own table. Both stay valid: an
    /// append only adds bytes after the length an older `Version` records.
    pub fn get(&self, number: u64, size: u64) -> Result<Arc<Table>> {
        let cached = self.tables.get(&number).filter(|t| t.file_size() == size);
        if let Some(t) = cached {
            return Ok(t);
        }
        let path = table_file_name(&self.dir, number);
        let file = self.vfs.open_read_mapped(&path)?;
        let table = Arc::new(Table::open(file, number, size, self.block_cache.clone())?);
        self.tables.insert(number, Arc::clone(&table));
        Ok(table)
    }

    /// Forget table `number` (it was deleted).
    pub fn evict(&self, number: u64) {
        self.tables.remove(&number);
    }
}
