//! A bounded cache of open table readers, so hot tables are not reopened (and their index and
//! filter re-read) on every lookup, while the number of open files stays bounded.

use std::path::PathBuf;
use std::sync::Arc;

use super::block_cache::BlockCache;
use super::table_reader::TableReadOptions;
use super::Table;
use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::filename::table_file_name;
use crate::fs::Vfs;

/// Open tables by file number.
pub struct TableCache {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    tables: quick_cache::sync::Cache<u64, Arc<Table>>,
    block_cache: Option<Arc<BlockCache>>,
    read_options: TableReadOptions,
}

impl TableCache {
    pub fn new(
        vfs: Arc<dyn Vfs>,
        dir: PathBuf,
        max_open_files: usize,
        block_cache: Option<Arc<BlockCache>>,
        read_options: TableReadOptions,
    ) -> Self {
        let tables = quick_cache::sync::Cache::new(max_open_files.max(16));
        TableCache { vfs, dir, tables, block_cache, read_options }
    }

    /// Bytes the block cache holds: decoded blocks of compressed tables, and the blocks
    /// mapped tables keep made (`table_reader/made.rs`; each bounded by its capacity).
    pub fn block_cache_bytes(&self) -> u64 {
        self.block_cache.as_ref().map_or(0, |c| c.weight()) + self.read_options.made_blocks.held_bytes()
    }

    /// Bytes the open tables keep in memory (filters, index blocks, slots for made blocks).
    pub fn open_tables_metadata_bytes(&self) -> u64 {
        self.tables.iter().map(|(_, t)| t.metadata_bytes()).sum()
    }

    /// Whether any open table is taken as cold (its blocks lately read from the device).
    #[inline]
    pub fn any_cold(&self) -> bool {
        self.read_options.cold_tables.any()
    }

    /// The order of the tables' keys.
    pub fn order(&self) -> &KeyOrder {
        &self.read_options.order
    }

    /// The reader of table file `number`, `size` bytes long, opened on first use. Light-weight
    /// compaction appends to a table under its number, and each length is its own table (the
    /// footer at that length). The cache keeps the newest length, which current readers ask
    /// for; a reader of an older `Version` asking for a shorter one gets a reader of its own,
    /// valid because appends never change the bytes below a recorded length. (Sharing the
    /// segments both lengths have measured no faster, and would keep the older reader's file
    /// handle and mapping open outside the cache's count.)
    pub fn get(&self, number: u64, size: u64) -> Result<Arc<Table>> {
        let open = || -> Result<Arc<Table>> {
            let path = table_file_name(&self.dir, number);
            let file = self.vfs.open_read_mapped(&path)?;
            Ok(Arc::new(Table::open_with(file, number, size, self.block_cache.clone(), &self.read_options)?))
        };
        let cached = match self.tables.get(&number) {
            Some(t) => t,
            None => self.tables.get_or_insert_with(&number, open)?,
        };
        if cached.file_size() == size {
            return Ok(cached);
        }
        let table = open()?;
        if cached.file_size() < size {
            self.tables.insert(number, Arc::clone(&table));
        }
        Ok(table)
    }

    /// Forget table `number` (it was deleted).
    pub fn evict(&self, number: u64) {
        self.tables.remove(&number);
    }
}
