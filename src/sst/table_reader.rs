//! Reads an SSTable: opens it (footer, index, filter, properties kept in memory), answers
//! point lookups, and iterates it with a two-level iterator (index block → data blocks).
//! A DTable (segments appended by light-weight compaction, `dtable.rs`) opens as one `Table`
//! per segment: lookups ask the segments newest first, iterators merge them.
//! When the file is memory-mapped, uncompressed data blocks are used in place (no copy, no
//! block cache) and their checksum is verified on first use only.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::filter_policy::FilterPolicy;
use crate::fs::{FileMapping, RandomAccessFile};
use crate::internal_iter::{InternalIterator, MergingIterator};
use crate::key::{user_key, ValueKind};
use crate::sst::block_cache::BlockCache;
use crate::value::Value;

use super::block::{touch_lines, Block, BlockIter};
use super::cascade::SegmentCascade;
use super::compression::{decompress_slice, TYPE_NONE};
use super::dtable::{footer_magic, read_segment_ends, DTABLE_MAGIC};
use super::fences::IndexFences;
use super::filter::{BloomFilter, FilterHash};
use super::format::{
    decode_block, read_block, stored_len, verify_block, BlockHandle, Footer, TableProperties, BLOCK_TRAILER_LEN,
    FOOTER_LEN,
};
use super::table_builder::ALIGN_BYTES;
use super::verified::VerifiedBlocks;

/// How tables are read: the order of their keys, and the custom filter policy whose filters
/// are used (a table whose filter another policy built is read without it).
#[derive(Debug, Clone, Default)]
pub struct TableReadOptions {
    pub(crate) order: KeyOrder,
    pub(crate) filter_policy: Option<Arc<dyn FilterPolicy>>,
    /// How many of the tables opened with these options are taken as cold now
    /// (`touch::Residency`): while none is, a seek asks no table to read ahead.
    pub(crate) cold_tables: touch::ColdCount,
    /// The bytes the tables may keep made blocks in (`made.rs`).
    pub(crate) made_blocks: made::MadeBudget,
}

impl TableReadOptions {
    /// What `o` says about reading tables.
    pub(crate) fn from_options(o: &crate::options::Options) -> Self {
        TableReadOptions {
            order: o.key_order(),
            filter_policy: o.filter_policy.clone(),
            cold_tables: Default::default(),
            made_blocks: made::MadeBudget::with_capacity(o.block_cache_bytes as u64),
        }
    }
}

/// A table's filter: the built-in Bloom filter, or a custom policy's.
enum TableFilter {
    Bloom(BloomFilter),
    Policy { policy: Arc<dyn FilterPolicy>, data: Vec<u8> },
}

impl TableFilter {
    /// False only when no entry of the user key (hashed: `hash`) is in the table.
    #[inline]
    fn may_contain(&self, hash: FilterHash, user_key: &[u8]) -> bool {
        match self {
            TableFilter::Bloom(b) => b.may_contain_hash(hash),
            TableFilter::Policy { policy, data } => policy.key_may_match(user_key, data),
        }
    }

    fn prefetch(&self, hash: FilterHash) {
        if let TableFilter::Bloom(b) = self {
            b.prefetch(hash);
        }
    }

    fn len_bytes(&self) -> u64 {
        match self {
            TableFilter::Bloom(b) => b.len_bytes(),
            TableFilter::Policy { data, .. } => data.len() as u64,
        }
    }
}

/// An open table; immutable and shared between threads as `Arc<Table>`.
pub struct Table {
    file: Arc<dyn RandomAccessFile>,
    path: Arc<Path>,
    file_number: u64,
    cache: Option<Arc<BlockCache>>,
    index: Arc<Block>,
    /// The order of the keys (index and data blocks are searched by it).
    order: KeyOrder,
    /// Dense copy of the index keys' distinguishing bytes (`None`: search the index block;
    /// always under a custom order, which bytes do not follow).
    fences: Option<IndexFences>,
    filter: Option<TableFilter>,
    /// The prefix Bloom filter and the name of the extractor whose prefixes it holds.
    prefix_filter: Option<(String, BloomFilter)>,
    props: TableProperties,
    /// End of the data-block region: data handles must lie below it.
    data_end: u64,
    /// File offset of the index block, for error messages.
    index_offset: u64,
    /// The whole file, when it is memory-mapped.
    mapping: Option<Arc<FileMapping>>,
    /// Mapped uncompressed data blocks whose checksum passed (empty when not mapped).
    verified: VerifiedBlocks,
    /// Mapped uncompressed data blocks made once, by index entry (when the index has one entry
    /// per restart point, as the writer makes it): a lookup takes its block by bumping a count
    /// instead of validating and allocating it again, within the database's budget.
    mapped_blocks: made::MadeBlocks,
    /// Where this segment ends (its footer's end); the whole file's length for a plain table.
    segment_end: u64,
    /// Length of the whole file as opened (what the manifest records).
    file_size: u64,
    /// The DTable's older segments, newest first (empty for a plain table). `self` is the
    /// newest segment: every key it holds is newer than the same key in the ones below.
    older: Vec<Arc<Table>>,
    /// Every segment's fences merged (a DTable's newest segment only): a seek finds each
    /// segment's index entry with one search. Made by the first seek, not at open: light-weight
    /// compaction reopens a table after every append to it, and most of those opens only
    /// append again.
    cascade: OnceLock<Option<SegmentCascade>>,
    /// Whether this table's mapped blocks were lately read from the device (`touch.rs`).
    residency: touch::Residency,
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
    /// `open_with` for a table of bytewise-ordered keys and no custom filter policy (tests and
    /// tools).
    #[cfg(any(test, feature = "test-util"))]
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        file_number: u64,
        file_size: u64,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Table> {
        Table::open_with(file, file_number, file_size, cache, &TableReadOptions::default())
    }

    /// Open a table of `file_size` bytes (a plain table, or a DTable whose tail lists its
    /// segments) to be read as `ro` says: validate the footers, then load each segment's index,
    /// filter and properties blocks (all checksummed).
    pub fn open_with(
        file: Arc<dyn RandomAccessFile>,
        file_number: u64,
        file_size: u64,
        cache: Option<Arc<BlockCache>>,
        ro: &TableReadOptions,
    ) -> Result<Table> {
        if file.mapping().is_some() {
            // A fault should read its own page, not the kernel's read-around (up to the
            // device's read-ahead: 8 MiB on this machine's disk, a whole table) when the tree
            // outgrows the page cache: scans read ahead themselves
            // (`BlockReadahead::advise_mapped`). Before the footer is read: advised after the
            // open's own reads, every table's first open read the whole file (docs/BENCHMARKS.md
            // §7). A hint only.
            let _ = file.advise(0, 0, crate::fs::Advice::Random);
        }
        let buf = read_footer(&*file, file_size)?;
        if footer_magic(&buf) != DTABLE_MAGIC {
            return Table::open_segment(file, (file_number, file_size), file_size, buf, cache, ro);
        }
        Table::open_dtable(file, file_number, file_size, cache, buf, ro)
    }

    /// Open the DTable whose tail footer is `buf`: each segment its directory lists.
    fn open_dtable(
        file: Arc<dyn RandomAccessFile>,
        file_number: u64,
        file_size: u64,
        cache: Option<Arc<BlockCache>>,
        buf: [u8; FOOTER_LEN],
        ro: &TableReadOptions,
    ) -> Result<Table> {
        let ends = read_segment_ends(&*file, &buf, file_size)?;
        let Some((&newest_end, older_ends)) = ends.split_last() else {
            return Err(Error::corruption(file.path(), 0, "DTable lists no segment"));
        };
        let mut older = Vec::with_capacity(older_ends.len());
        for &end in older_ends.iter().rev() {
            let buf = read_footer(&*file, end)?;
            let segment =
                Table::open_segment(Arc::clone(&file), (file_number, file_size), end, buf, cache.clone(), ro)?;
            older.push(Arc::new(segment));
        }
        let buf = read_footer(&*file, newest_end)?;
        let mut newest = Table::open_segment(file, (file_number, file_size), newest_end, buf, cache, ro)?;
        newest.older = older;
        Ok(newest)
    }

    /// Open the segment whose footer (`buf`) ends at `end`, of table file `(number, size)`.
    fn open_segment(
        file: Arc<dyn RandomAccessFile>,
        (file_number, file_size): (u64, u64),
        end: u64,
        buf: [u8; FOOTER_LEN],
        cache: Option<Arc<BlockCache>>,
        ro: &TableReadOptions,
    ) -> Result<Table> {
        let path: Arc<Path> = Arc::from(file.path());
        let footer_at = end - FOOTER_LEN as u64;
        let footer = Footer::decode(&buf, &path, end)?;
        let index = read_block(&*file, footer.index, footer_at)?;
        let index = Arc::new(Block::new(index, Arc::clone(&path), footer.index.offset)?);
        let props_raw = read_block(&*file, footer.properties, footer_at)?;
        let props = TableProperties::decode(&props_raw)
            .ok_or_else(|| Error::corruption(&*path, footer.properties.offset, "malformed properties block"))?;
        let filter = match (footer.filter.size, &props.policy_filter) {
            (0, Some((name, h))) => match ro.filter_policy.as_ref().filter(|p| p.name() == name) {
                Some(policy) => {
                    let data = read_block(&*file, *h, footer_at)?;
                    Some(TableFilter::Policy { policy: Arc::clone(policy), data })
                }
                // Built by another policy: read without a filter, as LevelDB does.
                None => None,
            },
            (0, None) => None,
            _ => {
                let raw = read_block(&*file, footer.filter, footer_at)?;
                Some(TableFilter::Bloom(BloomFilter::new(raw, &path, footer.filter.offset)?))
            }
        };
        let prefix_filter = match &props.prefix_filter {
            Some((name, h)) => {
                let raw = read_block(&*file, *h, footer_at)?;
                Some((name.clone(), BloomFilter::new(raw, &path, h.offset)?))
            }
            None => None,
        };
        // A policy's filter block and the prefix filter block lie between the data blocks and
        // the properties block.
        let data_end = [&props.policy_filter, &props.prefix_filter]
            .into_iter()
            .flatten()
            .fold(footer.data_end(), |end, (_, h)| end.min(h.offset));
        let mapping = file.mapping().cloned();
        // Every block takes at least its trailer, which bounds a damaged block count.
        let max_blocks = usize::try_from(data_end / BLOCK_TRAILER_LEN as u64).unwrap_or(usize::MAX);
        let blocks = usize::try_from(props.num_data_blocks).unwrap_or(usize::MAX).min(max_blocks);
        let verified = VerifiedBlocks::with_capacity(if mapping.is_some() { blocks } else { 0 });
        // Fences and the segment cascade compare key bytes: only for the bytewise order.
        let fences = if ro.order.is_bytewise() { IndexFences::build(&index) } else { None };
        let slots = if mapping.is_some() && fences.is_some() { index.num_restarts() } else { 0 };
        let mapped_blocks = made::MadeBlocks::new(slots, &ro.made_blocks);
        Ok(Table {
            file,
            path,
            file_number,
            cache,
            index,
            order: ro.order.clone(),
            fences,
            filter,
            prefix_filter,
            props,
            data_end,
            index_offset: footer.index.offset,
            mapping,
            verified,
            mapped_blocks,
            segment_end: end,
            file_size,
            older: Vec::new(),
            cascade: OnceLock::new(),
            residency: touch::Residency::counted_in(&ro.cold_tables),
        })
    }

    /// Length of the file as opened: a DTable opened at a newer length is another `Table`.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Segments in the file (1 for a plain table).
    pub fn num_segments(&self) -> usize {
        1 + self.older.len()
    }

    /// Where each segment ends, oldest first (what the next append's directory extends).
    pub fn segment_ends(&self) -> Vec<u64> {
        self.older.iter().rev().map(|s| s.segment_end).chain([self.segment_end]).collect()
    }

    /// Every segment, newest first.
    fn segments(&self) -> impl Iterator<Item = &Table> {
        std::iter::once(self).chain(self.older.iter().map(|s| &**s))
    }

    /// The table's properties block.
    #[cfg(test)]
    pub fn properties(&self) -> &TableProperties {
        &self.props
    }

    /// Whether the table file is memory-mapped (data blocks used in place).
    #[cfg(test)]
    pub fn is_mapped(&self) -> bool {
        self.mapping.is_some()
    }

    /// False only when no entry of `user_key` is in the table (Bloom filter; always true
    /// without a filter).
    #[cfg(test)]
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        let h = FilterHash::of(user_key);
        self.segments().any(|s| s.segment_may_contain(h, user_key))
    }

    /// Bytes of Bloom filter the table holds in memory (whole-key and prefix filters), over
    /// all its segments.
    pub fn filter_bytes(&self) -> u64 {
        let prefix = |s: &Table| s.prefix_filter.as_ref().map_or(0, |(_, f)| f.len_bytes());
        self.segments().map(|s| s.filter.as_ref().map_or(0, TableFilter::len_bytes) + prefix(s)).sum()
    }

    /// Bytes the open table keeps in memory whatever is cached: its filters, index blocks and
    /// slots for made blocks, over all its segments.
    pub fn metadata_bytes(&self) -> u64 {
        let own = |s: &Table| s.index.charge() as u64 + s.mapped_blocks.slot_bytes();
        self.filter_bytes() + self.segments().map(own).sum::<u64>()
    }

    /// False only when no key of the table has prefix `prefix` under the extractor named
    /// `extractor`: some segment has no prefix filter, or one built under another extractor,
    /// or one that may hold the prefix, and the table may hold keys of the prefix.
    pub fn prefix_may_match(&self, extractor: &str, prefix: &[u8]) -> bool {
        let hash = FilterHash::of(prefix);
        self.segments().any(|s| match &s.prefix_filter {
            Some((name, f)) if name == extractor => f.may_contain_hash(hash),
            _ => true,
        })
    }

    /// Bytes of merged segment fences the table holds in memory (0 for a plain table).
    #[cfg(test)]
    pub fn cascade_bytes(&self) -> usize {
        self.cascade().map_or(0, SegmentCascade::len_bytes)
    }

    /// The merged fences of a DTable's segments, made on first use (`None` for a plain table,
    /// or when `SegmentCascade::build` declines).
    fn cascade(&self) -> Option<&SegmentCascade> {
        if self.older.is_empty() || !self.order.is_bytewise() {
            return None;
        }
        self.cascade
            .get_or_init(|| {
                let indexes: Vec<&Arc<Block>> = self.segments().map(|s| &s.index).collect();
                SegmentCascade::build(&indexes)
            })
            .as_ref()
    }

    /// This segment's own filter answer for `user_key`, hashed: `hash`.
    fn segment_may_contain(&self, hash: FilterHash, user_key: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|f| f.may_contain(hash, user_key))
    }

    /// The first entry whose internal key is >= `seek_ikey`, if its user key equals the user
    /// key of `seek_ikey`, behind the Bloom filters (`get_filtered`, which the DB calls: it
    /// hashes the key once per lookup and counts what the filters answered).
    #[cfg_attr(not(any(test, feature = "test-util")), allow(dead_code))]
    pub fn get(&self, seek_ikey: &[u8], reads: BlockReads) -> Result<Option<(ValueKind, Value)>> {
        let hash = FilterHash::of(user_key(seek_ikey));
        Ok(self.get_filtered(seek_ikey, hash, reads)?.found)
    }

    /// Every segment's range tombstones (`range_del`), oldest segment's first.
    pub fn range_tombstones(&self) -> Vec<crate::range_del::RangeTombstone> {
        let mut out = Vec::new();
        for s in self.older.iter().rev().map(|s| &**s).chain([self]) {
            out.extend_from_slice(&s.props.range_tombstones);
        }
        out
    }

    /// A point lookup behind the filters, each segment's filter asked once (newest segment
    /// first; the first segment holding a visible version answers), with `hash` the lookup's
    /// `FilterHash` of the user key. Says whether any filter let the lookup in, which the DB
    /// counts (a pass that finds nothing is a false positive). The entry comes back as its
    /// kind and its value as a handle (`BlockIter::value_handle`: shared with a block-cached
    /// block); an entry whose key does not parse is corruption.
    pub fn get_filtered(&self, seek_ikey: &[u8], hash: FilterHash, reads: BlockReads) -> Result<Probe> {
        let mut probe = Probe { passed: false, found: None, seq: 0 };
        if !self.older.is_empty() {
            for f in self.segments().filter_map(|s| s.filter.as_ref()) {
                f.prefetch(hash);
            }
        }
        let uk = user_key(seek_ikey);
        for s in self.segments() {
            if s.segment_may_contain(hash, uk) {
                probe.passed = true;
                if let Some((kind, value, seq)) = s.segment_get(seek_ikey, reads)? {
                    (probe.found, probe.seq) = (Some((kind, value)), seq);
                    break;
                }
            }
        }
        Ok(probe)
    }

    /// `get_filtered` within this segment alone, its filter not asked.
    fn segment_get(&self, seek_ikey: &[u8], reads: BlockReads) -> Result<Option<(ValueKind, Value, u64)>> {
        let uk = user_key(seek_ikey);
        // A block made before was checked when it was made; a verifying read checks again.
        if let Some((_, block)) = self.fenced_block(seek_ikey).filter(|_| !reads.verify_checksums) {
            let mut it = block.iter_in(&self.order);
            it.seek(seek_ikey)?;
            if it.valid() {
                return self.found(&it, uk, block.file_offset());
            }
            // The target lies past the block's last key: the index search below goes on.
        }
        let mut index = self.index.iter_in(&self.order);
        self.seek_index(&mut index, seek_ikey)?;
        // Normally the first block tried holds the answer; the loop only continues when a
        // separator lies past its block's last key and the target falls in that gap.
        while index.valid() {
            let handle = self.decode_handle(index.value())?;
            let block = self.load_block(handle, index.current_restart(), reads, None)?;
            let mut it = BlockIter::with_order(block, self.order.clone());
            it.seek(seek_ikey)?;
            if it.valid() {
                return self.found(&it, uk, handle.offset);
            }
            index.next()?;
        }
        Ok(None)
    }

    /// What a point lookup of `uk` found at `it`'s entry (of the block at `block_offset`).
    fn found(&self, it: &BlockIter, uk: &[u8], block_offset: u64) -> Result<Option<(ValueKind, Value, u64)>> {
        if user_key(it.key()) != uk {
            return Ok(None);
        }
        let Some(parsed) = crate::key::parse_internal_key(it.key()) else {
            let why = crate::key::malformed_reason(it.key());
            return Err(Error::corruption(&*self.path, block_offset, why));
        };
        Ok(Some((parsed.kind, it.value_handle(), parsed.seq)))
    }

    /// An iterator over the whole table (initially not positioned); over a DTable, the merge
    /// of its segments.
    pub fn iter(self: &Arc<Self>, reads: BlockReads) -> TableIterator {
        if self.older.is_empty() {
            return TableIterator::Plain(self.segment_iter(reads));
        }
        let mut children = Vec::with_capacity(1 + self.older.len());
        children.push(self.segment_iter(reads));
        children.extend(self.older.iter().map(|s| s.segment_iter(reads)));
        TableIterator::Segments(Box::new(SegmentsIterator {
            table: Arc::clone(self),
            merge: MergingIterator::new(children, self.order.clone()),
        }))
    }

    /// An iterator over this segment alone.
    fn segment_iter(self: &Arc<Self>, reads: BlockReads) -> SegmentIterator {
        SegmentIterator {
            index: self.index.iter_in(&self.order),
            table: Arc::clone(self),
            data: None,
            data_handle: BlockHandle::default(),
            index_at: None,
            reads,
            readahead: BlockReadahead::default(),
        }
    }

    /// Approximate bytes of data blocks holding entries before `ikey`: in a plain table the
    /// offset of the data block that would hold it (the end of the data blocks when past the
    /// last key); in a DTable that summed over its segments, each from its first data block.
    pub fn approximate_offset_of(&self, ikey: &[u8]) -> u64 {
        self.segments().map(|s| s.segment_offset_of(Some(ikey)).saturating_sub(s.segment_offset_of(None))).sum()
    }

    /// The offset of the data block a seek to `ikey` lands in (`None`: the first one), or the
    /// end of the data blocks.
    fn segment_offset_of(&self, ikey: Option<&[u8]>) -> u64 {
        let mut index = self.index.iter_in(&self.order);
        let sought = match ikey {
            Some(k) => index.seek(k),
            None => index.seek_to_first(),
        };
        if sought.is_ok() && index.valid() {
            if let Some(h) = BlockHandle::decode_exact(index.value()) {
                return h.offset.min(self.data_end);
            }
        }
        self.data_end
    }

    /// The data block a seek to `target` lands in and its index entry, when the fences name
    /// that entry and its block was already made from the mapping: no index-block search and
    /// no handle to decode, two dependent cache misses fewer per segment of a seek. `None`:
    /// take the index path (which makes the block for next time).
    #[inline]
    fn fenced_block(&self, target: &[u8]) -> Option<(usize, &Arc<Block>)> {
        let i = self.fenced_entry(target)?;
        Some((i, self.made_block(i)?))
    }

    /// Before a seek to `target`: while this table's blocks are found on the device
    /// (`touch::Residency`), ask for the pages of the block the seek will read, without
    /// waiting. A merge asks every run first, so a seek waits for its runs' blocks together
    /// rather than one after another; while the table is warm this costs one atomic load.
    pub fn prefetch(&self, target: &[u8]) {
        let Some(map) = &self.mapping else { return };
        // A DTable's segments are each a block to find: left to the seek.
        if !self.residency.is_cold() || !self.older.is_empty() {
            return;
        }
        let mut index = self.index.iter_in(&self.order);
        let placed = match self.fenced_entry(target) {
            Some(i) => index.seek_to_restart_entry(i),
            None => self.seek_index(&mut index, target),
        };
        if placed.is_err() || !index.valid() {
            return;
        }
        if let Ok(h) = self.decode_handle(index.value()) {
            self.residency.prefetch(&*self.file, map, h.offset, h.end_with_trailer());
        }
    }

    /// The index entry a seek to `target` lands on, when the fences alone tell
    /// (`IndexFences::exact`).
    #[inline]
    fn fenced_entry(&self, target: &[u8]) -> Option<usize> {
        self.fences.as_ref()?.exact(user_key(target))
    }

    /// The mapped data block of index entry `i`, if it was made since the table opened.
    #[inline]
    fn made_block(&self, i: usize) -> Option<&Arc<Block>> {
        self.mapped_blocks.get(i)
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
    /// `ordinal`: the index entry the handle came from, when known.
    fn load_block(
        &self,
        handle: BlockHandle,
        ordinal: Option<usize>,
        reads: BlockReads,
        readahead: Option<&mut BlockReadahead>,
    ) -> Result<Arc<Block>> {
        if let Some(map) = &self.mapping {
            match readahead.filter(|ra| ra.active()) {
                Some(ra) => ra.advise_mapped(&*self.file, handle, self.data_end),
                // A lookup's block, or a seek's first: its pages together when they are on
                // the device.
                None => self.residency.touch(&*self.file, map, handle.offset, handle.end_with_trailer()),
            }
            let made = ordinal.and_then(|i| self.mapped_blocks.get(i)).filter(|b| b.file_offset() == handle.offset);
            if let Some(b) = made.filter(|_| !reads.verify_checksums) {
                return Ok(Arc::clone(b));
            }
            let block = self.load_mapped_block(map, handle, reads)?;
            // Kept for the reads that would cache it: not for compaction's inputs or a scan
            // that leaves the caches alone, whose blocks would take the budget from lookups'.
            let keep = block.is_mapped() && reads.fill_cache && !reads.verify_checksums;
            if let Some(i) = ordinal.filter(|_| keep) {
                self.mapped_blocks.keep(i, &block);
            }
            return Ok(block);
        }
        if let Some(b) = self.cached_block(handle) {
            return Ok(b);
        }
        let raw = match readahead {
            // The buffer reads forward: a reverse scan reads block by block.
            Some(ra) if ra.active() && !ra.backward => ra.read(&*self.file, handle, self.data_end)?,
            _ => read_block(&*self.file, handle, self.data_end)?,
        };
        self.cache_block(handle, raw, reads.fill_cache)
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
    /// verified on its first load only, or at every load with `reads.verify_checksums`); a
    /// compressed one is decompressed from the mapping once and kept in the block cache like a
    /// block read with `pread`.
    fn load_mapped_block(&self, map: &Arc<FileMapping>, h: BlockHandle, reads: BlockReads) -> Result<Arc<Block>> {
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
            if reads.verify_checksums || !self.verified.contains(h.offset) {
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
        self.cache_block(h, raw, reads.fill_cache)
    }
}

/// The last `FOOTER_LEN` bytes of the first `end` bytes of `file`.
fn read_footer(file: &dyn RandomAccessFile, end: u64) -> Result<[u8; FOOTER_LEN]> {
    if end < FOOTER_LEN as u64 {
        let why = format!("file of {end} bytes is too short to be a table");
        return Err(Error::corruption(file.path(), 0, why));
    }
    let mut buf = [0u8; FOOTER_LEN];
    file.read_exact_at(end - FOOTER_LEN as u64, &mut buf)?;
    Ok(buf)
}

/// Consecutive in-order block loads after which an iterator starts reading ahead.
const READAHEAD_AFTER: u32 = 2;
/// First read-ahead size; doubles on every refill up to `READAHEAD_MAX_BYTES`.
const READAHEAD_MIN_BYTES: usize = 16 << 10;
const READAHEAD_MAX_BYTES: usize = 256 << 10;

/// Sequential-scan detection and read-ahead of one iterator: once blocks are loaded in file
/// order (either way), cache misses are served from one large read instead of one read per
/// block (a system call per 4 KiB block dominates a scan otherwise), and a mapped file's
/// pages ahead are asked for (`MADV_WILLNEED`: its mapping is advised for random access).
#[derive(Debug, Default)]
struct BlockReadahead {
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_offset: u64,
    /// Start and end (with trailer) of the last block loaded.
    last: Option<(u64, u64)>,
    /// Blocks loaded in file order in a row.
    sequential: u32,
    /// The run goes towards the start of the file (a reverse scan).
    backward: bool,
    next_size: usize,
    /// How far ahead of the scan a mapped file's pages were asked for: an end going forward,
    /// a start going backward.
    advised: Option<u64>,
}

impl BlockReadahead {
    /// Record that the iterator moves to the block at `h`.
    fn observe(&mut self, h: BlockHandle) {
        let (forward, backward) = match self.last {
            // Aligned blocks (`TableOptions::block_align`) have padding between them: the
            // next block in file order starts right after the last or on the next page.
            Some((start, end)) => (next_in_file(end, h.offset), next_in_file(h.end_with_trailer(), start)),
            None => (false, false),
        };
        if (forward && !self.backward) || (backward && (self.backward || self.sequential == 0)) {
            self.backward = backward && !forward;
            self.sequential += 1;
        } else {
            self.sequential = 0;
            self.backward = false;
            self.next_size = READAHEAD_MIN_BYTES;
            self.advised = None;
        }
        self.last = Some((h.offset, h.end_with_trailer()));
    }

    /// Ask for the pages of a mapped `file` ahead of the block at `h` once fewer than half a
    /// read-ahead's worth is left asked for, `next_size` at a time (doubling to the most).
    fn advise_mapped(&mut self, file: &dyn RandomAccessFile, h: BlockHandle, limit: u64) {
        let size = self.next_size.max(READAHEAD_MIN_BYTES) as u64;
        let range = if self.backward {
            let from = self.advised.unwrap_or(h.end_with_trailer());
            (from + size / 2 > h.offset).then(|| (from.saturating_sub(size), from))
        } else {
            let from = self.advised.unwrap_or(h.offset);
            (from < h.offset + size / 2).then(|| (from, (from + size).min(limit)))
        };
        let Some((start, end)) = range.filter(|(s, e)| e > s) else { return };
        let _ = file.advise(start, end - start, crate::fs::Advice::WillNeed);
        self.advised = Some(if self.backward { start } else { end });
        self.next_size = (self.next_size.max(READAHEAD_MIN_BYTES) * 2).min(READAHEAD_MAX_BYTES);
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

/// Whether a block starting at `start` is the one after a block ending at `end` in file
/// order: right after it, or at the next page boundary (aligned blocks, `block_align`).
fn next_in_file(end: u64, start: u64) -> bool {
    start == end || (start.is_multiple_of(ALIGN_BYTES) && start == end.next_multiple_of(ALIGN_BYTES))
}

/// How a read uses a table's data blocks: whether a block it reads enters the block cache,
/// and whether every block it touches is checked against its checksum again. By default a
/// mapped block is checked at its first load only (a table's blocks are then read in place
/// with no further work); a verifying read (`ReadOptions::verify_checksums`,
/// `Options::paranoid_checks`) checks the stored bytes at every load, so damage to a file
/// after its blocks were first read is reported rather than returned. Blocks in the block
/// cache are copies checked when they were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockReads {
    /// Put blocks read from the file into the block cache.
    pub fill_cache: bool,
    /// Check every block's checksum at every load.
    pub verify_checksums: bool,
}

impl BlockReads {
    /// Reads that fill the cache (or not), checking blocks at their first load only.
    pub const fn filling(fill_cache: bool) -> BlockReads {
        BlockReads { fill_cache, verify_checksums: false }
    }
}

/// What `Table::get_filtered` found: whether a filter let the lookup in, and the entry.
#[derive(Debug)]
pub struct Probe {
    pub passed: bool,
    pub found: Option<(ValueKind, Value)>,
    /// The sequence number of the entry found (0 when none was).
    pub seq: u64,
}

/// Iterator over a table: a plain table's two-level iterator, or the merge of a DTable's
/// segments (newest first, so the merge puts a key's newer versions first).
// A plain table is what nearly every scan opens: it stays inline (no allocation per table).
#[allow(clippy::large_enum_variant)]
pub enum TableIterator {
    Plain(SegmentIterator),
    Segments(Box<SegmentsIterator>),
}

macro_rules! each {
    ($self:expr, $it:ident => $e:expr) => {
        match $self {
            TableIterator::Plain($it) => $e,
            TableIterator::Segments($it) => $e,
        }
    };
}

impl InternalIterator for TableIterator {
    #[inline]
    fn valid(&self) -> bool {
        each!(self, it => it.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        each!(self, it => it.seek_to_first())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        each!(self, it => it.seek_to_last())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        each!(self, it => it.seek(target))
    }
    fn prefetch(&mut self, target: &[u8]) {
        // A DTable's segments are each a block to find: left to the seek (`Table::prefetch`).
        if let TableIterator::Plain(it) = self {
            it.table.prefetch(target);
        }
    }
    #[inline]
    fn next(&mut self) -> Result<()> {
        each!(self, it => it.next())
    }
    fn prev(&mut self) -> Result<()> {
        each!(self, it => it.prev())
    }
    #[inline]
    fn key(&self) -> &[u8] {
        each!(self, it => it.key())
    }
    #[inline]
    fn value(&self) -> &[u8] {
        each!(self, it => it.value())
    }
}

/// Iterator over a DTable: the merge of its segments. A seek finds every segment's index
/// entry with one search of the table's `SegmentCascade` when it can tell.
pub struct SegmentsIterator {
    table: Arc<Table>,
    merge: MergingIterator<SegmentIterator>,
}

impl InternalIterator for SegmentsIterator {
    #[inline]
    fn valid(&self) -> bool {
        self.merge.valid()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.merge.seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.merge.seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        match self.table.cascade().and_then(|c| c.entries(user_key(target))) {
            Some(entries) => self.merge.seek_each(|s, it| it.seek_to_entry(target, entries[s] as usize)),
            None => self.merge.seek(target),
        }
    }
    #[inline]
    fn next(&mut self) -> Result<()> {
        self.merge.next()
    }
    fn prev(&mut self) -> Result<()> {
        self.merge.prev()
    }
    #[inline]
    fn key(&self) -> &[u8] {
        self.merge.key()
    }
    #[inline]
    fn value(&self) -> &[u8] {
        self.merge.value()
    }
}

/// Two-level iterator over one segment: the index block picks the data block, a `BlockIter`
/// walks it. Empty data blocks are skipped in both directions.
pub struct SegmentIterator {
    table: Arc<Table>,
    index: BlockIter,
    /// Iterator over the data block the index currently points at (`None`: none loaded).
    data: Option<BlockIter>,
    data_handle: BlockHandle,
    /// Set when a seek took its block straight from the fences or the table's cascade
    /// (`load_entry`): the index entry the block came from, where `index` has not been
    /// positioned yet. Whatever
    /// moves on from the block positions it first (`index_ready`).
    index_at: Option<usize>,
    reads: BlockReads,
    readahead: BlockReadahead,
}

impl SegmentIterator {
    /// Load the data block of the current index entry (kept when it is already loaded).
    fn init_data_block(&mut self) -> Result<()> {
        if !self.index.valid() {
            self.data = None;
            return Ok(());
        }
        let handle = self.table.decode_handle(self.index.value())?;
        if self.data.is_some() && handle.offset == self.data_handle.offset {
            return Ok(());
        }
        self.readahead.observe(handle);
        let ra = Some(&mut self.readahead);
        let block = self.table.load_block(handle, self.index.current_restart(), self.reads, ra)?;
        if self.readahead.sequential > 0 {
            block.prefetch();
        }
        match &mut self.data {
            Some(it) => it.reset(block),
            None => self.data = Some(BlockIter::with_order(block, self.table.order.clone())),
        }
        self.data_handle = handle;
        Ok(())
    }

    /// Position the index iterator at the entry a fenced seek left pending.
    fn index_ready(&mut self) -> Result<()> {
        match self.index_at.take() {
            Some(i) => self.index.seek_to_restart_entry(i),
            None => Ok(()),
        }
    }

    /// Stand in index entry `i`'s block when it was made before (`Table::made_block`), the
    /// index cursor left to position later; false when it was not.
    fn take_made_block(&mut self, i: usize) -> bool {
        let made = self.table.made_block(i).filter(|_| !self.reads.verify_checksums);
        let Some(block) = made else {
            return false;
        };
        let handle = BlockHandle { offset: block.file_offset(), size: block.data().len() as u64 };
        let block = Arc::clone(block);
        match &mut self.data {
            Some(it) => it.reset(block),
            None => self.data = Some(BlockIter::with_order(block, self.table.order.clone())),
        }
        self.data_handle = handle;
        self.index_at = Some(i);
        true
    }

    /// Load index entry `i`'s block: the one made before, else through the index entry
    /// itself (no search). Past the last entry the iterator has no block.
    fn load_entry(&mut self, i: usize) -> Result<()> {
        self.index_at = None;
        if !self.take_made_block(i) {
            self.index.seek_to_restart_entry(i)?;
            self.init_data_block()?;
        }
        Ok(())
    }

    /// `seek`, with the index entry it lands on known (`SegmentCascade`); `i` past the last
    /// entry leaves the iterator exhausted.
    fn seek_to_entry(&mut self, target: &[u8], i: usize) -> Result<()> {
        self.guard(|s| {
            s.load_entry(i)?;
            if let Some(d) = s.data_mut() {
                d.seek(target)?;
            }
            s.skip_empty_blocks_forward()
        })
    }

    /// Run `f`; on error leave the iterator invalid.
    fn guard(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let r = f(self);
        if r.is_err() {
            self.data = None;
            self.index_at = None;
        }
        r
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn skip_empty_blocks_forward(&mut self) -> Result<()> {
        while !self.data_valid() {
            self.index_ready()?;
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
            self.index_ready()?;
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

impl InternalIterator for SegmentIterator {
    #[inline]
    fn valid(&self) -> bool {
        self.data_valid()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.guard(|s| {
            s.index_at = None;
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
            s.index_at = None;
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
            if s.data_valid() {
                s.index_ready()?;
            }
            // Stay in the current block when the target lies inside it (sequential seeks).
            let in_block = s.data_valid()
                && s.data.as_ref().is_some_and(|d| {
                    let order = &s.table.order;
                    order.compare_internal(d.key(), target) != Ordering::Greater
                        && order.compare_internal(target, s.index.key()) != Ordering::Greater
                });
            if !in_block {
                match s.table.fenced_entry(target) {
                    Some(i) => s.load_entry(i)?,
                    None => {
                        s.index_at = None;
                        s.table.seek_index(&mut s.index, target)?;
                        s.init_data_block()?;
                    }
                }
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

mod made;
#[cfg(test)]
pub(crate) mod tests;
mod touch;
