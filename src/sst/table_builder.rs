//! Writes one SSTable: data blocks as entries arrive, then the filter, properties and index
//! blocks and the footer (layout in `docs/format/sst.md`).

use std::cmp::Ordering;
use std::sync::Arc;

use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::filter_policy::FilterPolicy;
use crate::fs::WritableFile;
use crate::key::{self, compare_internal, ValueKind};
use crate::prefix::PrefixExtractor;

use super::block_builder::BlockBuilder;
use super::compression::{self, Compression, TYPE_NONE};
use super::filter::FilterBuilder;
use super::format::{
    block_trailer, BlockHandle, Footer, TableProperties, BLOCK_TRAILER_LEN, FOOTER_LEN, FORMAT_VERSION, MAX_HANDLE_LEN,
};

/// The page an aligned data block starts on a boundary of (`TableOptions::block_align`).
pub const ALIGN_BYTES: u64 = 4096;
/// The padding before an aligned block is taken from here.
static ZEROS: [u8; ALIGN_BYTES as usize] = [0; ALIGN_BYTES as usize];

/// How tables are laid out.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// Uncompressed size at which a data block is closed (aligned: the size a block with its
    /// trailer stays within, unless one entry alone is larger).
    pub block_size_bytes: usize,
    /// Start every data block at a page boundary and close it before it would cross into
    /// the page after `block_size_bytes` (with its trailer): a cold block then costs one
    /// device read of `block_size_bytes`, not one that spans a page more. Only for
    /// uncompressed tables whose block size is a multiple of the page (`ALIGN_BYTES`);
    /// others are written as if it were off.
    pub block_align: bool,
    /// Entries between restart points in data blocks.
    pub restart_interval: usize,
    /// Compression of data blocks.
    pub compression: Compression,
    /// Bloom filter bits per user key; `0.0` writes no filter.
    pub bloom_bits_per_key: f64,
    /// The order entries arrive in (index separators are shortened by it).
    pub order: KeyOrder,
    /// A custom filter policy, whose filter the table gets instead of the Bloom filter (when
    /// `bloom_bits_per_key` is above 0).
    pub filter_policy: Option<Arc<dyn FilterPolicy>>,
    /// The keyspace's prefix extractor: with it (and `bloom_bits_per_key` above 0) the table
    /// also gets a Bloom filter over its keys' distinct prefixes, at the same bits per entry.
    pub prefix_extractor: Option<Arc<dyn PrefixExtractor>>,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_size_bytes: 4096,
            block_align: true,
            restart_interval: 16,
            compression: Compression::None,
            bloom_bits_per_key: 10.0,
            order: KeyOrder::default(),
            filter_policy: None,
            prefix_extractor: None,
        }
    }
}

/// Collects the table's user keys for its filter: the built-in Bloom filter takes their
/// hashes, a custom policy the keys themselves (one `create_filter` call at the end).
enum FilterSink {
    Bloom(FilterBuilder),
    Policy { policy: Arc<dyn FilterPolicy>, keys: Vec<u8>, ends: Vec<usize> },
}

impl FilterSink {
    fn new(opts: &TableOptions) -> Option<FilterSink> {
        if opts.bloom_bits_per_key <= 0.0 {
            return None;
        }
        Some(match &opts.filter_policy {
            Some(p) => FilterSink::Policy { policy: Arc::clone(p), keys: Vec::new(), ends: Vec::new() },
            None => FilterSink::Bloom(FilterBuilder::new(opts.bloom_bits_per_key)),
        })
    }

    fn add_key(&mut self, user_key: &[u8]) {
        match self {
            FilterSink::Bloom(b) => b.add_key(user_key),
            FilterSink::Policy { keys, ends, .. } => {
                keys.extend_from_slice(user_key);
                ends.push(keys.len());
            }
        }
    }
}

/// Collects the distinct prefixes of the table's user keys (keys out of the extractor's domain
/// add none) for the prefix Bloom filter.
struct PrefixSink {
    extractor: Arc<dyn PrefixExtractor>,
    filter: FilterBuilder,
    last: Option<Vec<u8>>,
}

impl PrefixSink {
    fn new(opts: &TableOptions) -> Option<PrefixSink> {
        let extractor = opts.prefix_extractor.clone().filter(|_| opts.bloom_bits_per_key > 0.0)?;
        Some(PrefixSink { extractor, filter: FilterBuilder::new(opts.bloom_bits_per_key), last: None })
    }

    fn add_key(&mut self, user_key: &[u8]) {
        let Some(p) = self.extractor.prefix(user_key) else { return };
        // Keys arrive in order, so a prefix's keys are adjacent (bytewise order; under another
        // order a repeat only costs a duplicate hash).
        if self.last.as_deref() != Some(p) {
            self.filter.add_key(p);
            self.last = Some(p.to_vec());
        }
    }
}

/// What a finished table holds (for the manifest and statistics).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableSummary {
    pub file_size: u64,
    pub num_entries: u64,
    /// Smallest internal key (empty for an empty table).
    pub smallest: Vec<u8>,
    /// Largest internal key (empty for an empty table).
    pub largest: Vec<u8>,
    pub num_deletions: u64,
    pub raw_key_bytes: u64,
    pub raw_value_bytes: u64,
    /// Range tombstones stored in the properties block.
    pub range_tombstones: u64,
}

/// Builds a table from entries added in strictly increasing internal-key order.
pub struct TableBuilder {
    file: Box<dyn WritableFile>,
    opts: TableOptions,
    /// Bytes written so far = offset of the next block (or of the padding before it).
    offset: u64,
    /// Data blocks start at page boundaries (`TableOptions::block_align` where it applies).
    aligned: bool,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    filter: Option<FilterSink>,
    prefixes: Option<PrefixSink>,
    /// Handle of the last data block written, waiting for its index entry until the next
    /// key is known (so the separator can be short).
    pending_handle: Option<BlockHandle>,
    last_key: Vec<u8>,
    props: TableProperties,
    /// Scratch buffers reused across blocks.
    scratch: Vec<u8>,
    handle_buf: Vec<u8>,
}

impl TableBuilder {
    /// A builder appending the table to `file`.
    pub fn new(file: Box<dyn WritableFile>, opts: TableOptions) -> Self {
        let filter = FilterSink::new(&opts);
        let prefixes = PrefixSink::new(&opts);
        let aligned = opts.block_align
            && opts.compression == Compression::None
            && (opts.block_size_bytes as u64).is_multiple_of(ALIGN_BYTES);
        TableBuilder {
            aligned,
            prefixes,
            offset: file.len(),
            file,
            data_block: BlockBuilder::new(opts.restart_interval),
            // Every index entry is a restart point: seeks binary-search straight to the block.
            index_block: BlockBuilder::new(1),
            filter,
            pending_handle: None,
            last_key: Vec::new(),
            props: TableProperties { format_version: FORMAT_VERSION, ..TableProperties::default() },
            scratch: Vec::new(),
            handle_buf: Vec::with_capacity(MAX_HANDLE_LEN),
            opts,
        }
    }

    /// Append an entry; `ikey` must sort after every key added before.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let first = self.props.num_entries == 0;
        debug_assert!(
            first || self.opts.order.compare_internal(&self.last_key, ikey) == Ordering::Less,
            "table keys out of order"
        );
        // Aligned: close the block before an entry that would carry it past its pages (its
        // index entry then separates its last key from this one, as below).
        if self.aligned
            && !self.data_block.is_empty()
            && self.data_block.size_with(ikey, value) + BLOCK_TRAILER_LEN > self.opts.block_size_bytes
        {
            self.flush_data_block()?;
        }
        if let Some(h) = self.pending_handle.take() {
            let sep = self.opts.order.shortest_separator(&self.last_key, ikey);
            self.add_index_entry(&sep, h);
        }
        if let Some(f) = &mut self.filter {
            let uk = key::user_key(ikey);
            if first || key::user_key(&self.last_key) != uk {
                f.add_key(uk);
            }
        }
        if let Some(p) = &mut self.prefixes {
            p.add_key(key::user_key(ikey));
        }
        self.count(ikey, value);
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        self.data_block.add(ikey, value);
        if !self.aligned && self.data_block.current_size_estimate() >= self.opts.block_size_bytes {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Store `tombstones` (in key order, as `Fragments::tombstones` gives them) in the table's
    /// properties block. The summary's key range then covers them: from the first one's
    /// begin to a sentinel at the last one's end (`RangeTombstone::end_bound`).
    pub fn set_range_tombstones(&mut self, tombstones: Vec<crate::range_del::RangeTombstone>) {
        self.props.range_tombstones = tombstones;
    }

    fn count(&mut self, ikey: &[u8], value: &[u8]) {
        let p = &mut self.props;
        if p.num_entries == 0 {
            p.smallest = ikey.to_vec();
        }
        p.num_entries += 1;
        p.raw_key_bytes += ikey.len() as u64;
        p.raw_value_bytes += value.len() as u64;
        if key::parse_internal_key(ikey).is_some_and(|k| k.kind == ValueKind::Deletion) {
            p.num_deletions += 1;
        }
    }

    fn add_index_entry(&mut self, sep: &[u8], h: BlockHandle) {
        self.handle_buf.clear();
        h.encode_to(&mut self.handle_buf);
        self.index_block.add(sep, &self.handle_buf);
    }

    /// Bytes the file would have if finished now (without the meta blocks).
    pub fn estimated_file_size(&self) -> u64 {
        self.offset + self.data_block.current_size_estimate() as u64
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        if self.aligned {
            self.pad_to_page()?;
        }
        let codec = self.opts.compression;
        let handle =
            write_block(&mut *self.file, &mut self.offset, self.data_block.finish(), codec, &mut self.scratch)?;
        self.data_block.reset();
        self.props.num_data_blocks += 1;
        self.pending_handle = Some(handle);
        Ok(())
    }

    /// Zeros up to the next page boundary, where the next data block starts. Readers go by
    /// the index's handles only, so the gap is never read as a block.
    fn pad_to_page(&mut self) -> Result<()> {
        let gap = self.offset.next_multiple_of(ALIGN_BYTES) - self.offset;
        if gap > 0 {
            self.file.append(&ZEROS[..gap as usize])?;
            self.offset += gap;
        }
        Ok(())
    }

    /// Write the remaining data, the filter, properties and index blocks and the footer,
    /// then `sync` the file.
    pub fn finish(self) -> Result<TableSummary> {
        let (summary, mut file) = self.finish_unsynced()?;
        file.sync()?;
        Ok(summary)
    }

    /// `finish` without the sync, handing the file back: light-weight compaction writes a
    /// DTable tail after the segment and syncs both at once (`dtable::SegmentWriter`).
    pub fn finish_unsynced(mut self) -> Result<(TableSummary, Box<dyn WritableFile>)> {
        self.flush_data_block()?;
        let filter = match self.filter.take() {
            Some(FilterSink::Bloom(f)) => self.write_raw(&f.finish())?,
            Some(FilterSink::Policy { policy, keys, ends }) => {
                let starts = std::iter::once(0).chain(ends.iter().copied());
                let list: Vec<&[u8]> = starts.zip(&ends).map(|(s, &e)| &keys[s..e]).collect();
                let handle = self.write_raw(&policy.create_filter(&list))?;
                self.props.policy_filter = Some((policy.name().to_string(), handle));
                BlockHandle { offset: self.offset, size: 0 }
            }
            None => BlockHandle { offset: self.offset, size: 0 },
        };
        if let Some(p) = self.prefixes.take() {
            let handle = self.write_raw(&p.filter.finish())?;
            self.props.prefix_filter = Some((p.extractor.name().to_string(), handle));
        }
        self.props.largest = self.last_key.clone();
        let properties = self.write_raw(&self.props.encode())?;
        if let Some(h) = self.pending_handle.take() {
            let succ = self.opts.order.short_successor(&self.last_key);
            self.add_index_entry(&succ, h);
        }
        let index = write_block(
            &mut *self.file,
            &mut self.offset,
            self.index_block.finish(),
            Compression::None,
            &mut self.scratch,
        )?;
        let footer = Footer { index, filter, properties, version: FORMAT_VERSION };
        self.file.append(&footer.encode())?;
        self.offset += FOOTER_LEN as u64;
        let p = self.props;
        let (smallest, largest) = covering_range(p.smallest, p.largest, &p.range_tombstones);
        let summary = TableSummary {
            file_size: self.offset,
            num_entries: p.num_entries,
            smallest,
            largest,
            num_deletions: p.num_deletions,
            raw_key_bytes: p.raw_key_bytes,
            raw_value_bytes: p.raw_value_bytes,
            range_tombstones: p.range_tombstones.len() as u64,
        };
        Ok((summary, self.file))
    }

    /// Write a meta block uncompressed.
    fn write_raw(&mut self, contents: &[u8]) -> Result<BlockHandle> {
        let file = &mut *self.file;
        write_block(file, &mut self.offset, contents, Compression::None, &mut self.scratch)
    }
}

/// The internal-key range a table with entries `[smallest, largest]` (empty when it has none)
/// and `tombstones` must be recorded with: every tombstone's range inside it.
fn covering_range(
    mut smallest: Vec<u8>,
    mut largest: Vec<u8>,
    tombstones: &[crate::range_del::RangeTombstone],
) -> (Vec<u8>, Vec<u8>) {
    for t in tombstones {
        let (lo, hi) = (t.start_bound(), t.end_bound());
        if smallest.is_empty() || compare_internal(&lo, &smallest) == Ordering::Less {
            smallest = lo;
        }
        if largest.is_empty() || compare_internal(&hi, &largest) == Ordering::Greater {
            largest = hi;
        }
    }
    (smallest, largest)
}

/// Compress (when worth it) and append one block plus trailer with a single `append`;
/// returns the block's handle. `buf` is scratch space reused across blocks.
fn write_block(
    file: &mut dyn WritableFile,
    offset: &mut u64,
    raw: &[u8],
    codec: Compression,
    buf: &mut Vec<u8>,
) -> Result<BlockHandle> {
    let kind = compression::compress(codec, raw, buf).unwrap_or_else(|| {
        buf.clear();
        buf.extend_from_slice(raw);
        TYPE_NONE
    });
    let handle = BlockHandle { offset: *offset, size: buf.len() as u64 };
    let trailer = block_trailer(buf, kind);
    buf.extend_from_slice(&trailer);
    file.append(buf)?;
    *offset += buf.len() as u64;
    Ok(handle)
}
