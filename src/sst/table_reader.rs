//! Reads an SSTable: opens it (footer, index, filter, properties kept in memory), answers
//! point lookups, and iterates it with a two-level iterator (index block → data blocks).
//! When the file is memory-mapped, uncompressed data blocks are used in place (no copy, no
//! block cache) and their checksum is verified on first use only.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use crate::sst::block_cache::BlockCache;
use crate::error::{Error, Result};
use crate::fs::{FileMapping, RandomAccessFile};
use crate::iter::InternalIterator;
use crate::key::{compare_internal, user_key};

use super::block::{touch_lines, Block, BlockIter};
use super::compression::{decompress_slice, TYPE_NONE};
use super::fences::IndexFences;
use super::filter::BloomFilter;
use super::format::{
    decode_block, read_block, stored_len, verify_block, BlockHandle, Footer, TableProperties, BLOCK_TRAILER_LEN,
    FOOTER_LEN,
};
use super::verified::VerifiedBlocks;

/// An open table; immutable and shared between threads as `Arc<Table>`.
pub struct Table {
    file: Arc<dyn RandomAccessFile>,
    path: Arc<Path>,
    file_number: u64,
    cache: Option<Arc<BlockCache>>,
    index: Arc<Block>,
    /// Dense copy of the index keys' distinguishing bytes (`None`: search the index block).
    fences: Option<IndexFences>,
    filter: Option<BloomFilter>,
    props: TableProperties,
    /// End of the data-block region: data handles must lie below it.
    data_end: u64,
    /// File offset of the index block, for error messages.
    index_offset: u64,
    /// The whole file, when it is memory-mapped.
    mapping: Option<Arc<FileMapping>>,
    /// Mapped uncompressed data blocks whose checksum passed (empty when not mapped).
    verified: VerifiedBlocks,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.path)
            .field("file_number", &self.file_number)
            .field("num_entries", &self.props.num_entries)
            .finish_non_exhaustive()
    }
}

impl Table {
    /// Open a table of `file_size` bytes: validate the footer, then load the index,
    /// filter and properties blocks (all checksummed).
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        file_number: u64,
        file_size: u64,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Table> {
        let path: Arc<Path> = Arc::from(file.path());
        if file_size < FOOTER_LEN as u64 {
            let why = format!("file of {file_size} bytes is too short to be a table");
            return Err(Error::corruption(&*path, 0, why));
        }
        let footer_at = file_size - FOOTER_LEN as u64;
        let mut buf = [0u8; FOOTER_LEN];
        file.read_exact_at(footer_at, &mut buf)?;
        let footer = Footer::decode(&buf, &path, file_size)?;
        let index = read_block(&*file, footer.index, footer_at)?;
        let index = Arc::new(Block::new(index, Arc::clone(&path), footer.index.offset)?);
        let props_raw = read_block(&*file, footer.properties, footer_at)?;
        let props = TableProperties::decode(&props_raw)
            .ok_or_else(|| Error::corruption(&*path, footer.properties.offset, "malformed properties block"))?;
        let filter = match footer.filter.size {
            0 => None,
            _ => {
                let raw = read_block(&*file, footer.filter, footer_at)?;
                Some(BloomFilter::new(raw, &path, footer.filter.offset)?)
            }
        };
        let data_end = footer.data_end();
        let mapping = file.mapping().cloned();
        // Every block takes at least its trailer, which bounds a damaged block count.
        let max_blocks = usize::try_from(data_end / BLOCK_TRAILER_LEN as u64).unwrap_or(usize::MAX);
        let blocks = usize::try_from(props.num_data_blocks).unwrap_or(usize::MAX).min(max_blocks);
        let verified = VerifiedBlocks::with_capacity(if mapping.is_some() { blocks } else { 0 });
        let fences = IndexFences::build(&index);
        Ok(Table {
            file,
            path,
            file_number,
            cache,
            index,
            fences,
            filter,
            props,
            data_end,
            index_offset: footer.index.offset,
            mapping,
            verified,
        })
    }

    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    pub fn properties(&self) -> &TableProperties {
        &self.props
    }

    /// Path of the table file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of index, filter and verified-block set this table keeps in memory.
    pub fn memory_usage(&self) -> usize {
        self.index.charge()
            + self.fences.as_ref().map_or(0, |f| f.size())
            + self.filter.as_ref().map_or(0, |f| f.size())
            + self.verified.size()
    }

    /// Whether the table file is memory-mapped (data blocks used in place).
    pub fn is_mapped(&self) -> bool {
        self.mapping.is_some()
    }

    /// False only when no entry of `user_key` is in the table (Bloom filter; always true
    /// without a filter).
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|f| f.may_contain(user_key))
    }

    /// The first entry whose internal key is >= `seek_ikey`, if its user key equals the user
    /// key of `seek_ikey`. Consults the Bloom filter first.
    pub fn get(&self, seek_ikey: &[u8], fill_cache: bool) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let uk = user_key(seek_ikey);
        if !self.may_contain(uk) {
            return Ok(None);
        }
        let mut index = self.index.iter();
        self.seek_index(&mut index, seek_ikey)?;
        // Normally the first block tried holds the answer; the loop only continues when a
        // separator lies past its block's last key and the target falls in that gap.
        while index.valid() {
            let handle = self.decode_handle(index.value())?;
            let block = self.load_block(handle, fill_cache, None)?;
            let mut it = BlockIter::new(block);
            it.seek(seek_ikey)?;
            if it.valid() {
                let hit = user_key(it.key()) == uk;
                return Ok(hit.then(|| (it.key().to_vec(), it.value().to_vec())));
            }
            index.next()?;
        }
        Ok(None)
    }

    /// An iterator over the whole table (initially not positioned).
    pub fn iter(self: &Arc<Self>, fill_cache: bool) -> TableIterator {
        TableIterator {
            index: self.index.iter(),
            table: Arc::clone(self),
            data: None,
            data_handle: BlockHandle::default(),
            fill_cache,
            readahead: Readahead::default(),
        }
    }

    /// Approximate file offset where entries with key `ikey` start: the offset of the data
    /// block that would hold it, or the end of the data blocks when past the last key.
    pub fn approximate_offset_of(&self, ikey: &[u8]) -> u64 {
        let mut index = self.index.iter();
        if index.seek(ikey).is_ok() && index.valid() {
            if let Some(h) = BlockHandle::decode_exact(index.value()) {
                return h.offset;
            }
        }
        self.data_end
    }

    /// Position an iterator over this table's index block at the first entry >= `target`.
    fn seek_index(&self, index: &mut BlockIter, target: &[u8]) -> Result<()> {
        match &self.fences {
            Some(f) => f.seek(index, target),
            None => index.seek(target),
        }
    }

    fn decode_handle(&self, handle_bytes: &[u8]) -> Result<BlockHandle> {
        BlockHandle::decode_exact(handle_bytes).ok_or_else(|| {
            let why = "malformed block handle in index block";
            Error::corruption(&*self.path, self.index_offset, why)
        })
    }

    /// Fetch a data block: from the cache, else from the read-ahead buffer when the caller
    /// reads sequentially, else with one read of the block.
    fn load_block(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
        readahead: Option<&mut Readahead>,
    ) -> Result<Arc<Block>> {
        if let Some(map) = &self.mapping {
            return self.load_mapped_block(map, handle, fill_cache);
        }
        if let Some(b) = self.cached_block(handle) {
            return Ok(b);
        }
        let raw = match readahead {
            Some(ra) if ra.active() => ra.read(&*self.file, handle, self.data_end)?,
            _ => read_block(&*self.file, handle, self.data_end)?,
        };
        self.cache_block(handle, raw, fill_cache)
    }

    fn cached_block(&self, handle: BlockHandle) -> Option<Arc<Block>> {
        self.cache.as_ref()?.get(&(self.file_number, handle.offset))
    }

    /// Wrap decoded bytes as a block and (with `fill_cache`) put it in the block cache.
    fn cache_block(&self, handle: BlockHandle, raw: Vec<u8>, fill_cache: bool) -> Result<Arc<Block>> {
        let block = Arc::new(Block::new(raw, Arc::clone(&self.path), handle.offset)?);
        if let (Some(cache), true) = (&self.cache, fill_cache) {
            cache.insert((self.file_number, handle.offset), Arc::clone(&block));
        }
        Ok(block)
    }

    /// A data block of a mapped file: an uncompressed one borrows the mapping (checksum
    /// verified on its first load only); a compressed one is decompressed from the mapping
    /// once and kept in the block cache like a block read with `pread`.
    fn load_mapped_block(&self, map: &Arc<FileMapping>, h: BlockHandle, fill_cache: bool) -> Result<Arc<Block>> {
        let len = stored_len(&self.path, h, self.data_end)?;
        let start = usize::try_from(h.offset).unwrap_or(usize::MAX);
        let Some(stored) = start.checked_add(len).and_then(|end| map.get(start..end)) else {
            let why = format!("block handle {h:?} points past the end of the mapped file ({})", map.len());
            return Err(Error::corruption(&*self.path, h.offset, why));
        };
        // Fetch the whole block at once: the reads below (trailer, restart array, restart keys,
        // the scanned interval) would otherwise wait for memory one after another.
        touch_lines(stored);
        // `stored_len` includes the trailer; its first byte is the compression type.
        let size = len - BLOCK_TRAILER_LEN;
        if stored[size] == TYPE_NONE {
            if !self.verified.contains(h.offset) {
                verify_block(stored, h, &self.path)?;
                self.verified.insert(h.offset);
            }
            let block = Block::mapped(Arc::clone(map), start, size, Arc::clone(&self.path), h.offset)?;
            return Ok(Arc::new(block));
        }
        if let Some(b) = self.cached_block(h) {
            return Ok(b);
        }
        let (size, kind) = verify_block(stored, h, &self.path)?;
        let raw = decompress_slice(kind, &stored[..size], &self.path, h.offset)?;
        self.cache_block(h, raw, fill_cache)
    }
}

/// Consecutive in-order block loads after which an iterator starts reading ahead.
const READAHEAD_AFTER: u32 = 2;
/// First read-ahead size; doubles on every refill up to `READAHEAD_MAX_BYTES`.
const READAHEAD_MIN_BYTES: usize = 16 << 10;
const READAHEAD_MAX_BYTES: usize = 256 << 10;

/// Sequential-scan detection and read-ahead buffer of one iterator: once blocks are loaded
/// in file order, cache misses are served from one large read instead of one read per
/// block (a system call per 4 KiB block dominates a scan otherwise).
#[derive(Debug, Default)]
struct Readahead {
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_offset: u64,
    /// End (with trailer) of the last block loaded.
    last_end: Option<u64>,
    /// Blocks loaded in file order in a row.
    sequential: u32,
    next_size: usize,
}

impl Readahead {
    /// Record that the iterator moves to the block at `h`.
    fn observe(&mut self, h: BlockHandle) {
        if self.last_end == Some(h.offset) {
            self.sequential += 1;
        } else {
            self.sequential = 0;
            self.next_size = READAHEAD_MIN_BYTES;
        }
        self.last_end = Some(h.end_with_trailer());
    }

    fn active(&self) -> bool {
        self.sequential >= READAHEAD_AFTER
    }

    /// The block at `h` (checked and decompressed), refilling the buffer from `h` on when it
    /// does not hold the whole block.
    fn read(&mut self, file: &dyn RandomAccessFile, h: BlockHandle, limit: u64) -> Result<Vec<u8>> {
        let len = stored_len(file.path(), h, limit)?;
        let end = h.offset + len as u64;
        let buffered = h.offset >= self.buf_offset && end <= self.buf_offset + self.buf.len() as u64;
        if !buffered {
            let to = (h.offset + self.next_size.max(len) as u64).min(limit);
            self.buf.clear();
            self.buf.resize((to - h.offset) as usize, 0);
            if let Err(e) = file.read_exact_at(h.offset, &mut self.buf) {
                self.buf.clear();
                return Err(e);
            }
            self.buf_offset = h.offset;
            self.next_size = (self.next_size * 2).min(READAHEAD_MAX_BYTES);
        }
        let start = (h.offset - self.buf_offset) as usize;
        decode_block(self.buf[start..start + len].to_vec(), h, file.path())
    }
}

/// Two-level iterator over a table: the index block picks the data block, a `BlockIter`
/// walks it. Empty data blocks are skipped in both directions.
pub struct TableIterator {
    table: Arc<Table>,
    index: BlockIter,
    /// Iterator over the data block the index currently points at (`None`: none loaded).
    data: Option<BlockIter>,
    data_handle: BlockHandle,
    fill_cache: bool,
    readahead: Readahead,
}

impl TableIterator {
    /// The table being iterated.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// Load the data block of the current index entry (kept when it is already loaded).
    fn init_data_block(&mut self) -> Result<()> {
        if !self.index.valid() {
            self.data = None;
            return Ok(());
        }
        let handle = self.table.decode_handle(self.index.value())?;
        if self.data.is_some() && handle == self.data_handle {
            return Ok(());
        }
        self.readahead.observe(handle);
        let ra = Some(&mut self.readahead);
        let block = self.table.load_block(handle, self.fill_cache, ra)?;
        if self.readahead.sequential > 0 {
            block.prefetch();
        }
        match &mut self.data {
            Some(it) => it.reset(block),
            None => self.data = Some(BlockIter::new(block)),
        }
        self.data_handle = handle;
        Ok(())
    }

    /// Run `f`; on error leave the iterator invalid.
    fn guard(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let r = f(self);
        if r.is_err() {
            self.data = None;
        }
        r
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn skip_empty_blocks_forward(&mut self) -> Result<()> {
        while !self.data_valid() {
            if !self.index.valid() {
                self.data = None;
                return Ok(());
            }
            self.index.next()?;
            self.init_data_block()?;
            if let Some(d) = &mut self.data {
                d.seek_to_first()?;
            }
        }
        Ok(())
    }

    fn skip_empty_blocks_backward(&mut self) -> Result<()> {
        while !self.data_valid() {
            if !self.index.valid() {
                self.data = None;
                return Ok(());
            }
            self.index.prev()?;
            self.init_data_block()?;
            if let Some(d) = &mut self.data {
                d.seek_to_last()?;
            }
        }
        Ok(())
    }

    fn data_mut(&mut self) -> Option<&mut BlockIter> {
        self.data.as_mut()
    }
}

impl InternalIterator for TableIterator {
    #[inline]
    fn valid(&self) -> bool {
        self.data_valid()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.guard(|s| {
            s.index.seek_to_first()?;
            s.init_data_block()?;
            if let Some(d) = s.data_mut() {
                d.seek_to_first()?;
            }
            s.skip_empty_blocks_forward()
        })
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.guard(|s| {
            s.index.seek_to_last()?;
            s.init_data_block()?;
            if let Some(d) = s.data_mut() {
                d.seek_to_last()?;
            }
            s.skip_empty_blocks_backward()
        })
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.guard(|s| {
            // Stay in the current block when the target lies inside it (sequential seeks).
            let in_block = s.data_valid()
                && s.data.as_ref().is_some_and(|d| {
                    compare_internal(d.key(), target) != Ordering::Greater
                        && compare_internal(target, s.index.key()) != Ordering::Greater
                });
            if !in_block {
                s.table.seek_index(&mut s.index, target)?;
                s.init_data_block()?;
            }
            if let Some(d) = s.data_mut() {
                d.seek(target)?;
            }
            s.skip_empty_blocks_forward()
        })
    }

    #[inline]
    fn next(&mut self) -> Result<()> {
        let Some(d) = self.data.as_mut() else {
            return Ok(());
        };
        let r = d.next();
        if r.is_ok() && d.valid() {
            return Ok(());
        }
        self.guard(|s| {
            r?;
            s.skip_empty_blocks_forward()
        })
    }

    fn prev(&mut self) -> Result<()> {
        self.guard(|s| {
            if let Some(d) = s.data_mut() {
                d.prev()?;
            }
            s.skip_empty_blocks_backward()
        })
    }

    #[inline]
    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.key())
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.value())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use parking_lot::Mutex;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::sst::block_cache::new_block_cache;
    use crate::fs::WritableFile;
    use crate::key::{make_internal_key, KIND_FOR_SEEK, MAX_SEQ};
    use crate::sst::compression::Compression;
    use crate::sst::table_builder::{TableBuilder, TableOptions, TableSummary};

    /// A file in memory, writable and readable (the tests must not depend on `fs::MemFs`).
    #[derive(Clone)]
    struct MemFile {
        data: Arc<Mutex<Vec<u8>>>,
        path: PathBuf,
    }

    impl MemFile {
        fn new() -> Self {
            MemFile { data: Arc::default(), path: PathBuf::from("/mem/000007.sst") }
        }
        fn with_bytes(bytes: Vec<u8>) -> Self {
            let f = MemFile::new();
            *f.data.lock() = bytes;
            f
        }
        fn bytes(&self) -> Vec<u8> {
            self.data.lock().clone()
        }
    }

    impl WritableFile for MemFile {
        fn append(&mut self, data: &[u8]) -> Result<()> {
            self.data.lock().extend_from_slice(data);
            Ok(())
        }
        fn sync_data(&mut self) -> Result<()> {
            Ok(())
        }
        fn sync(&mut self) -> Result<()> {
            Ok(())
        }
        fn len(&self) -> u64 {
            self.data.lock().len() as u64
        }
        fn truncate(&mut self, len: u64) -> Result<()> {
            self.data.lock().truncate(len as usize);
            Ok(())
        }
    }

    impl RandomAccessFile for MemFile {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
            let d = self.data.lock();
            let start = (offset as usize).min(d.len());
            let n = buf.len().min(d.len() - start);
            buf[..n].copy_from_slice(&d[start..start + n]);
            Ok(n)
        }
        fn len(&self) -> Result<u64> {
            Ok(self.data.lock().len() as u64)
        }
        fn path(&self) -> &Path {
            &self.path
        }
    }

    type Model = Vec<(Vec<u8>, Vec<u8>)>;

    fn opts(block: usize, restart: usize, compression: Compression, bits: f64) -> TableOptions {
        TableOptions { block_size_bytes: block, restart_interval: restart, compression, bloom_bits_per_key: bits }
    }

    /// `n_users` user keys (even numbers only, so odd ones are known absent), 1..=4 versions
    /// each, values of varying length and compressibility; sorted in internal order.
    fn random_model(seed: u64, n_users: usize) -> Model {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut users: Vec<u64> = (0..n_users).map(|_| rng.gen_range(0..1_000_000u64) * 2).collect();
        users.sort_unstable();
        users.dedup();
        let mut model = Vec::new();
        for u in users {
            let uk = format!("user{u:08}");
            let versions = rng.gen_range(1..=4);
            let mut seqs: Vec<u64> = (0..versions).map(|_| rng.gen_range(1..1 << 40)).collect();
            seqs.sort_unstable_by(|a, b| b.cmp(a));
            seqs.dedup();
            for seq in seqs {
                let kind = rng.gen_range(0..3u8);
                let len = rng.gen_range(0..100);
                let value: Vec<u8> = (0..len).map(|i| b'a' + ((u as usize + i) % 7) as u8).collect();
                model.push((make_internal_key(uk.as_bytes(), seq, kind), value));
            }
        }
        model
    }

    fn build(model: &Model, o: TableOptions) -> (MemFile, TableSummary) {
        let file = MemFile::new();
        let mut b = TableBuilder::new(Box::new(file.clone()), file.path.clone(), o);
        for (k, v) in model {
            b.add(k, v).unwrap();
        }
        assert_eq!(b.num_entries(), model.len() as u64);
        let summary = b.finish().unwrap();
        assert_eq!(summary.file_size, file.bytes().len() as u64);
        (file, summary)
    }

    fn open(file: &MemFile, cache: Option<Arc<BlockCache>>) -> Result<Arc<Table>> {
        let size = file.bytes().len() as u64;
        Table::open(Arc::new(file.clone()), 7, size, cache).map(Arc::new)
    }

    fn scan_forward(t: &Arc<Table>) -> Result<Model> {
        let mut it = t.iter(true);
        let mut out = Vec::new();
        it.seek_to_first()?;
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next()?;
        }
        Ok(out)
    }

    fn scan_backward(t: &Arc<Table>) -> Result<Model> {
        let mut it = t.iter(true);
        let mut out = Vec::new();
        it.seek_to_last()?;
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.prev()?;
        }
        out.reverse();
        Ok(out)
    }

    fn model_seek(model: &Model, target: &[u8]) -> Option<usize> {
        let i = model.partition_point(|(k, _)| compare_internal(k, target) == Ordering::Less);
        (i < model.len()).then_some(i)
    }

    fn model_get(model: &Model, target: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let i = model_seek(model, target)?;
        let hit = user_key(&model[i].0) == user_key(target);
        hit.then(|| model[i].clone())
    }

    /// Everything the reader offers, checked against the model.
    fn check_table(model: &Model, t: &Arc<Table>, seed: u64) {
        assert_eq!(scan_forward(t).unwrap(), *model);
        assert_eq!(scan_backward(t).unwrap(), *model);
        for (k, v) in model {
            assert_eq!(t.get(k, true).unwrap(), Some((k.clone(), v.clone())));
            let newest = make_internal_key(user_key(k), MAX_SEQ, KIND_FOR_SEEK);
            assert_eq!(t.get(&newest, true).unwrap(), model_get(model, &newest));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut it = t.iter(false);
        for _ in 0..2000 {
            let u = rng.gen_range(0..2_000_001u64);
            let target = make_internal_key(format!("user{u:08}").as_bytes(), rng.gen_range(0..1 << 41), 1);
            assert_eq!(t.get(&target, false).unwrap(), model_get(model, &target));
            it.seek(&target).unwrap();
            match model_seek(model, &target) {
                Some(i) => {
                    assert!(it.valid());
                    assert_eq!((it.key(), it.value()), (&model[i].0[..], &model[i].1[..]));
                    // Step both ways from a sought position.
                    it.next().unwrap();
                    assert_eq!(it.valid(), i + 1 < model.len());
                    if it.valid() {
                        assert_eq!(it.key(), &model[i + 1].0[..]);
                        it.prev().unwrap();
                        assert_eq!(it.key(), &model[i].0[..]);
                    }
                }
                None => assert!(!it.valid()),
            }
        }
        let p = t.properties();
        assert_eq!(p.num_entries, model.len() as u64);
        assert_eq!(p.smallest, model.first().map(|e| e.0.clone()).unwrap_or_default());
        assert_eq!(p.largest, model.last().map(|e| e.0.clone()).unwrap_or_default());
    }

    #[test]
    fn ten_thousand_keys_round_trip_with_every_compression() {
        let model = random_model(1, 10_000);
        assert!(model.len() > 20_000);
        for c in [Compression::None, Compression::Lz4, Compression::Zstd(3)] {
            let (file, summary) = build(&model, opts(4096, 16, c, 10.0));
            assert_eq!(summary.num_entries, model.len() as u64);
            assert_eq!(summary.smallest, model[0].0);
            assert_eq!(summary.largest, model.last().unwrap().0);
            let dels = model.iter().filter(|(k, _)| k[k.len() - 8] == 0).count() as u64;
            assert_eq!(summary.num_deletions, dels);
            let raw_values: u64 = model.iter().map(|(_, v)| v.len() as u64).sum();
            assert_eq!(summary.raw_value_bytes, raw_values);
            let t = open(&file, Some(new_block_cache(1 << 20))).unwrap();
            check_table(&model, &t, 2);
            if c != Compression::None {
                let raw: u64 = summary.raw_key_bytes + summary.raw_value_bytes;
                assert!(summary.file_size < raw, "{c:?} should shrink these values");
            }
        }
    }

    #[test]
    fn tiny_blocks_and_restart_interval_one_round_trip() {
        let model = random_model(3, 3000);
        for (block, restart) in [(1, 1), (64, 1), (200, 3), (1 << 20, 1), (1 << 20, 1000)] {
            let (file, _) = build(&model, opts(block, restart, Compression::None, 0.0));
            let t = open(&file, None).unwrap();
            if block == 1 {
                assert_eq!(t.properties().num_data_blocks, model.len() as u64);
            }
            check_table(&model, &t, 4);
        }
    }

    #[test]
    fn empty_table_has_no_entries() {
        let (file, summary) = build(&Vec::new(), TableOptions::default());
        assert_eq!(summary.num_entries, 0);
        assert!(summary.smallest.is_empty());
        let t = open(&file, None).unwrap();
        check_table(&Vec::new(), &t, 5);
        assert!(!t.may_contain(b"anything"));
        assert_eq!(t.approximate_offset_of(b"anything\0\0\0\0\0\0\0\0"), 0);
    }

    #[test]
    fn bloom_filter_false_positive_rate_is_under_2_percent() {
        let model: Model =
            (0..20_000u32).map(|i| (make_internal_key(format!("k{i}").as_bytes(), 1, 1), vec![])).collect::<Vec<_>>();
        let mut model = model;
        model.sort_by(|a, b| compare_internal(&a.0, &b.0));
        let (file, _) = build(&model, TableOptions::default());
        let t = open(&file, None).unwrap();
        assert!(model.iter().all(|(k, _)| t.may_contain(user_key(k))));
        let fp = (0..100_000u32).filter(|i| t.may_contain(format!("absent{i}").as_bytes())).count();
        let rate = fp as f64 / 100_000.0;
        assert!(rate < 0.02, "false positive rate {rate}");
    }

    #[test]
    fn table_without_filter_may_contain_everything() {
        let model = random_model(6, 100);
        let (file, _) = build(&model, opts(4096, 16, Compression::None, 0.0));
        let t = open(&file, None).unwrap();
        assert!(t.may_contain(b"not there"));
        check_table(&model, &t, 7);
    }

    /// Open, scan everything and get every key: either everything matches the model or a
    /// `Corruption` error is reported. Never a panic, never wrong data.
    fn corruption_or_exact(bytes: Vec<u8>, model: &Model) -> std::result::Result<(), String> {
        let size = bytes.len() as u64;
        corruption_or_exact_in(Arc::new(MemFile::with_bytes(bytes)), size, model)
    }

    /// `bytes` written to `dir/000007.sst`, opened memory-mapped through `PosixFs`.
    fn mapped_file(dir: &Path, bytes: &[u8]) -> Arc<dyn RandomAccessFile> {
        use crate::fs::{PosixFs, Vfs};
        let fs = PosixFs::new();
        let path = dir.join("000007.sst");
        let mut w = fs.create(&path).unwrap();
        w.append(bytes).unwrap();
        let file = fs.open_read_mapped(&path).unwrap();
        assert_eq!(file.mapping().is_some(), !bytes.is_empty(), "table file should be mapped");
        file
    }

    /// `corruption_or_exact` of a table read through a memory mapping.
    fn corruption_or_exact_mapped(dir: &Path, bytes: &[u8], model: &Model) -> std::result::Result<(), String> {
        corruption_or_exact_in(mapped_file(dir, bytes), bytes.len() as u64, model)
    }

    fn corruption_or_exact_in(
        file: Arc<dyn RandomAccessFile>,
        size: u64,
        model: &Model,
    ) -> std::result::Result<(), String> {
        let t = match Table::open(file, 7, size, None) {
            Ok(t) => Arc::new(t),
            Err(e) if e.is_corruption() => return Err(e.to_string()),
            Err(e) => panic!("open failed with a non-corruption error: {e}"),
        };
        let check = |r: Result<Model>| match r {
            Ok(m) => {
                assert_eq!(m, *model, "damaged table returned wrong data");
                Ok(())
            }
            Err(e) => {
                assert!(e.is_corruption(), "{e}");
                Err(e.to_string())
            }
        };
        check(scan_forward(&t))?;
        check(scan_backward(&t))?;
        for (k, v) in model {
            match t.get(k, false) {
                Ok(got) => assert_eq!(got, Some((k.clone(), v.clone()))),
                Err(e) => {
                    assert!(e.is_corruption(), "{e}");
                    return Err(e.to_string());
                }
            }
        }
        Ok(())
    }

    #[test]
    fn every_flipped_byte_is_reported_as_corruption() {
        let model = random_model(8, 60);
        for c in [Compression::None, Compression::Lz4] {
            let (file, _) = build(&model, opts(256, 4, c, 10.0));
            let good = file.bytes();
            assert!(corruption_or_exact(good.clone(), &model).is_ok());
            for i in 0..good.len() {
                let mut bad = good.clone();
                bad[i] ^= 0x20;
                let r = corruption_or_exact(bad, &model);
                assert!(r.is_err(), "flip at {i} of {} went unnoticed", good.len());
            }
        }
    }

    #[test]
    fn every_flipped_byte_in_a_mapped_table_is_reported_as_corruption() {
        // Thousands of rewrites of one small file: on tmpfs when there is one (fast, and
        // mmap works the same), else in the default temp dir.
        let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
        let model = random_model(8, 60);
        for c in [Compression::None, Compression::Lz4] {
            let (file, _) = build(&model, opts(256, 4, c, 10.0));
            let good = file.bytes();
            assert!(corruption_or_exact_mapped(dir.path(), &good, &model).is_ok());
            for i in 0..good.len() {
                let mut bad = good.clone();
                bad[i] ^= 0x20;
                let r = corruption_or_exact_mapped(dir.path(), &bad, &model);
                assert!(r.is_err(), "flip at {i} of {} went unnoticed", good.len());
            }
        }
    }

    /// A block that failed its checksum is not remembered as verified: every later read of
    /// it fails again, while the other blocks keep working.
    #[test]
    fn flipped_byte_in_mapped_data_block_fails_every_read_of_that_block() {
        let dir = tempfile::tempdir().unwrap();
        let model = random_model(9, 500);
        let (file, _) = build(&model, opts(4096, 16, Compression::None, 10.0));
        let mut bytes = file.bytes();
        bytes[10] ^= 1; // inside the first data block
        let t = Arc::new(Table::open(mapped_file(dir.path(), &bytes), 7, bytes.len() as u64, None).unwrap());
        assert!(t.is_mapped());
        let first = &model[0].0;
        let last = &model[model.len() - 1].0;
        for _ in 0..3 {
            let e = t.get(first, true).unwrap_err();
            assert!(e.is_corruption() && e.to_string().contains("offset 0"), "{e}");
            assert_eq!(t.get(last, true).unwrap(), Some(model[model.len() - 1].clone()));
        }
        assert!(scan_forward(&t).unwrap_err().is_corruption());
    }

    #[test]
    fn mapped_tables_round_trip_with_and_without_compression() {
        let dir = tempfile::tempdir().unwrap();
        let model = random_model(16, 3000);
        for c in [Compression::None, Compression::Lz4] {
            let (file, _) = build(&model, opts(4096, 16, c, 10.0));
            let bytes = file.bytes();
            let cache = new_block_cache(1 << 20);
            let f = mapped_file(dir.path(), &bytes);
            let t = Arc::new(Table::open(f, 7, bytes.len() as u64, Some(Arc::clone(&cache))).unwrap());
            assert!(t.is_mapped());
            check_table(&model, &t, 17);
            // Again, now with every block verified (and compressed ones cached).
            check_table(&model, &t, 18);
            let mut it = t.iter(true);
            it.seek_to_first().unwrap();
            let block = it.data.as_ref().unwrap().block();
            if c == Compression::None {
                assert!(block.is_mapped(), "uncompressed blocks are used in place");
                assert_eq!(cache.len(), 0, "blocks used in place stay out of the block cache");
            } else {
                assert!(!block.is_mapped());
                assert!(!cache.is_empty(), "decompressed blocks are cached");
            }
        }
    }

    #[test]
    fn flipped_byte_in_data_block_is_reported_as_corruption() {
        let model = random_model(9, 500);
        let (file, _) = build(&model, TableOptions::default());
        let mut bytes = file.bytes();
        bytes[10] ^= 1; // inside the first data block
        let err = corruption_or_exact(bytes, &model).unwrap_err();
        assert!(err.contains("000007.sst") && err.contains("offset 0"), "{err}");
    }

    #[test]
    fn flipped_byte_in_index_or_footer_fails_open() {
        let model = random_model(10, 500);
        let (file, _) = build(&model, TableOptions::default());
        let good = file.bytes();
        let t = open(&file, None).unwrap();
        let index_at = t.index_offset as usize;
        for at in [index_at + 3, good.len() - 1, good.len() - 20, good.len() - 64] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            let e = open(&MemFile::with_bytes(bad), None).unwrap_err();
            assert!(e.is_corruption(), "flip at {at}: {e}");
        }
    }

    #[test]
    fn truncated_file_is_corruption() {
        let model = random_model(11, 200);
        let (file, _) = build(&model, TableOptions::default());
        let good = file.bytes();
        for keep in [0, 1, 63, 64, 65, good.len() / 2, good.len() - 1] {
            let e = open(&MemFile::with_bytes(good[..keep].to_vec()), None).unwrap_err();
            assert!(e.is_corruption(), "keep {keep}: {e}");
        }
        // A caller passing a larger size than the file really has also gets Corruption.
        let f = Arc::new(MemFile::with_bytes(good.clone()));
        let e = Table::open(f, 7, good.len() as u64 + 10, None).unwrap_err();
        assert!(e.is_corruption(), "{e}");
    }

    #[test]
    fn block_cache_serves_repeated_reads() {
        let model = random_model(12, 2000);
        let (file, _) = build(&model, TableOptions::default());
        let cache = new_block_cache(8 << 20);
        let t = open(&file, Some(Arc::clone(&cache))).unwrap();
        let k = &model[model.len() / 2].0;
        t.get(k, false).unwrap();
        assert_eq!(cache.len(), 0, "fill_cache = false must not insert");
        t.get(k, true).unwrap();
        assert_eq!(cache.len(), 1);
        let blocks = t.properties().num_data_blocks as usize;
        assert_eq!(scan_forward(&t).unwrap(), model);
        assert_eq!(cache.len(), blocks);
    }

    #[test]
    fn approximate_offsets_grow_with_the_key() {
        let model = random_model(13, 5000);
        let (file, summary) = build(&model, TableOptions::default());
        let t = open(&file, None).unwrap();
        let mut last = 0;
        for (k, _) in model.iter().step_by(97) {
            let off = t.approximate_offset_of(k);
            assert!(off >= last && off < summary.file_size);
            last = off;
        }
        let past = make_internal_key(b"zzzz", 1, 1);
        assert!(t.approximate_offset_of(&past) >= last);
        assert!(t.approximate_offset_of(&past) > summary.file_size / 2);
    }

    #[test]
    fn table_round_trips_through_real_files_and_mem_fs() {
        use crate::fs::{MemFs, PosixFs, Vfs};
        let model = random_model(14, 3000);
        let dir = tempfile::tempdir().unwrap();
        let fss: [Arc<dyn Vfs>; 2] = [Arc::new(PosixFs::new()), Arc::new(MemFs::new())];
        for fs in fss {
            fs.create_dir_all(dir.path()).unwrap();
            let path = dir.path().join("000009.sst");
            let o = opts(4096, 16, Compression::Lz4, 10.0);
            let mut b = TableBuilder::new(fs.create(&path).unwrap(), path.clone(), o);
            for (k, v) in &model {
                b.add(k, v).unwrap();
            }
            let summary = b.finish().unwrap();
            assert_eq!(fs.file_size(&path).unwrap(), summary.file_size);
            for file in [fs.open_read(&path).unwrap(), fs.open_read_mapped(&path).unwrap()] {
                let t = Arc::new(Table::open(file, 9, summary.file_size, None).unwrap());
                check_table(&model, &t, 15);
            }
        }
    }

    fn arb_model() -> impl Strategy<Value = Model> {
        let entry =
            (proptest::collection::vec(0u8..4, 0..6), 0u64..50, 0u8..3, proptest::collection::vec(any::<u8>(), 0..40));
        proptest::collection::vec(entry, 0..300).prop_map(|es| {
            let mut m: Model =
                es.into_iter().map(|(uk, seq, kind, v)| (make_internal_key(&uk, seq, kind), v)).collect();
            m.sort_by(|a, b| compare_internal(&a.0, &b.0));
            m.dedup_by(|a, b| a.0 == b.0);
            m
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn builder_and_reader_agree_with_a_sorted_model(
            model in arb_model(),
            block in 1usize..512,
            restart in 1usize..20,
            codec in 0u8..3,
            bits in 0.0f64..16.0,
            targets in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..6), 0u64..60), 50),
        ) {
            let c = [Compression::None, Compression::Lz4, Compression::Zstd(1)][codec as usize];
            let (file, _) = build(&model, opts(block, restart, c, bits));
            let t = open(&file, Some(new_block_cache(4096))).unwrap();
            prop_assert_eq!(scan_forward(&t).unwrap(), model.clone());
            prop_assert_eq!(scan_backward(&t).unwrap(), model.clone());
            let mut it = t.iter(true);
            for (uk, seq) in targets {
                let target = make_internal_key(&uk, seq, KIND_FOR_SEEK);
                prop_assert_eq!(t.get(&target, true).unwrap(), model_get(&model, &target));
                it.seek(&target).unwrap();
                let want = model_seek(&model, &target).map(|i| model[i].0.clone());
                prop_assert_eq!(it.valid().then(|| it.key().to_vec()), want);
            }
        }
    }
}
