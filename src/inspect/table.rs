//! What a table file holds: its footer (and a DTable's tail and segments), each segment's
//! properties, filter and index, and its data blocks with their entries, read with the table
//! reader's own decoders (`sst::format`, `sst::dtable`, `sst::block`) one part at a time, so
//! damage to one block leaves the others readable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{open_nonempty, InternalKey, KeyKind, ValuePointer};
use crate::error::{Error, Result};
use crate::fs::RandomAccessFile;
use crate::internal_iter::InternalIterator;
use crate::sst::block::{Block, BlockIter};
use crate::sst::compression::{decompress, TYPE_LZ4, TYPE_NONE, TYPE_ZSTD};
use crate::sst::dtable::{footer_magic, read_segment_ends, DTABLE_MAGIC};
use crate::sst::filter::BloomFilter;
use crate::sst::format::{
    read_block, stored_len, verify_block, BlockHandle, Footer as RawFooter, TableProperties, FOOTER_LEN, TABLE_MAGIC,
};

/// Where a block lies: the offset of its first byte and its stored size, without the 5-byte
/// trailer (compression type and crc32c) that follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BlockRange {
    /// File offset of the block's first byte.
    pub offset: u64,
    /// Bytes of the block as stored (compressed, if it is), trailer excluded.
    pub size: u64,
}

impl From<BlockHandle> for BlockRange {
    fn from(h: BlockHandle) -> Self {
        BlockRange { offset: h.offset, size: h.size }
    }
}

impl From<BlockRange> for BlockHandle {
    fn from(r: BlockRange) -> Self {
        BlockHandle { offset: r.offset, size: r.size }
    }
}

/// A table file opened for inspection: a plain table (one segment), or a DTable whose tail
/// lists the segments light-weight compaction appended (`docs/format/sst.md`).
pub struct TableFile {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    size: u64,
    tail: Option<DTableTail>,
    /// Where each segment ends, oldest first.
    ends: Vec<u64>,
}

impl std::fmt::Debug for TableFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableFile")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

/// A DTable's tail: the directory listing where every segment ends, and its footer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DTableTail {
    /// The directory block.
    pub directory: BlockRange,
    /// Offset of the 64-byte DTable footer (magic `wisckeyD`).
    pub footer_offset: u64,
    /// Offset just past each segment's footer, oldest segment first.
    pub segment_ends: Vec<u64>,
}

impl TableFile {
    /// Open the table at `path` and read its last 64 bytes: a table footer, or a DTable footer
    /// and the directory it points at (both checked). A file with neither is refused with
    /// `Error::Corruption` at the offset of the magic number.
    pub fn open(path: impl AsRef<Path>) -> Result<TableFile> {
        let path = path.as_ref();
        let (file, size) = open_nonempty(path, "table")?;
        if size < FOOTER_LEN as u64 {
            let why = format!("file of {size} bytes is too short to be a table (a footer is {FOOTER_LEN} bytes)");
            return Err(Error::corruption(path, 0, why));
        }
        let mut footer = [0u8; FOOTER_LEN];
        file.read_exact_at(size - FOOTER_LEN as u64, &mut footer)?;
        let magic = footer_magic(&footer);
        let (tail, ends) = match magic {
            DTABLE_MAGIC => {
                let ends = read_segment_ends(&*file, &footer, size)?;
                let directory = BlockRange { offset: u64_at(&footer, 0), size: u64_at(&footer, 8) };
                let footer_offset = size - FOOTER_LEN as u64;
                (Some(DTableTail { directory, footer_offset, segment_ends: ends.clone() }), ends)
            }
            TABLE_MAGIC => (None, vec![size]),
            _ => {
                let why = format!(
                    "no table footer at the end of the file (magic {magic:#018x}): \
                     not a wisckey table, or a table cut short"
                );
                return Err(Error::corruption(path, size - 8, why));
            }
        };
        Ok(TableFile { file, path: path.to_path_buf(), size, tail, ends })
    }

    /// The path the table was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the file.
    pub fn file_size(&self) -> u64 {
        self.size
    }

    /// The DTable tail (`None` for a plain table).
    pub fn dtable_tail(&self) -> Option<&DTableTail> {
        self.tail.as_ref()
    }

    /// Segments in the file: 1 for a plain table.
    pub fn num_segments(&self) -> usize {
        self.ends.len()
    }

    /// Segment `i` (0 is the oldest, the table as first written): its footer, properties,
    /// filter and index, each read and checked. Damage to one segment leaves the others
    /// readable.
    pub fn segment(&self, i: usize) -> Result<TableSegment> {
        let Some(&end) = self.ends.get(i) else {
            return Err(Error::invalid(format!("segment {i} of a table of {} segments", self.ends.len())));
        };
        TableSegment::open(Arc::clone(&self.file), Arc::from(self.path.as_path()), i, end)
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// A table's (or a DTable segment's) 64-byte footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Footer {
    /// Offset of the footer.
    pub offset: u64,
    /// The index block.
    pub index: BlockRange,
    /// The filter block (`None`: the table was written without a filter).
    pub filter: Option<BlockRange>,
    /// The properties block.
    pub properties: BlockRange,
    /// The table format version (1).
    pub format_version: u32,
}

/// The statistics a table records in its properties block.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Properties {
    /// Entries of every kind.
    pub num_entries: u64,
    /// Deletion entries (tombstones).
    pub num_deletions: u64,
    /// Bytes of internal keys (user keys and their 8-byte trailers).
    pub raw_key_bytes: u64,
    /// Bytes of entry values (inline values and encoded value pointers).
    pub raw_value_bytes: u64,
    /// Data blocks.
    pub num_data_blocks: u64,
    /// The smallest internal key (`None` for an empty table).
    pub smallest: Option<InternalKey>,
    /// The largest internal key (`None` for an empty table).
    pub largest: Option<InternalKey>,
    /// The format version the properties record.
    pub format_version: u32,
    /// The range tombstones the segment holds, in key order.
    pub range_tombstones: Vec<RangeTombstone>,
}

/// A range delete a table holds: every key in `[begin, end)` written before `seq` is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RangeTombstone {
    /// The first user key deleted.
    pub begin: Vec<u8>,
    /// The first user key past the range.
    pub end: Vec<u8>,
    /// The sequence number of the range delete.
    pub seq: u64,
}

impl From<&TableProperties> for Properties {
    fn from(p: &TableProperties) -> Self {
        Properties {
            num_entries: p.num_entries,
            num_deletions: p.num_deletions,
            raw_key_bytes: p.raw_key_bytes,
            raw_value_bytes: p.raw_value_bytes,
            num_data_blocks: p.num_data_blocks,
            smallest: InternalKey::parse(&p.smallest),
            largest: InternalKey::parse(&p.largest),
            format_version: p.format_version,
            range_tombstones: p
                .range_tombstones
                .iter()
                .map(|t| RangeTombstone { begin: t.begin.clone(), end: t.end.clone(), seq: t.seq })
                .collect(),
        }
    }
}

/// A table's Bloom filter over its user keys: one cache-local filter per table (segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FilterInfo {
    /// The filter block.
    pub block: BlockRange,
    /// Bytes of filter bits (the block less its probe-count byte).
    pub bits_bytes: u64,
    /// 64-byte lines: every probe of one key falls in one line.
    pub lines: u64,
    /// Bits set (and tested) per key, k.
    pub probes: u32,
}

/// One entry of a table's index block: the data block it names and a separator key at or
/// above the block's last key and below the next block's first.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexEntry {
    /// The separator (index separators carry sequence number 2^56 − 1 and kind 255).
    pub separator: InternalKey,
    /// The data block.
    pub block: BlockRange,
}

/// One segment of a table (the whole of a plain table): its footer, properties, filter and
/// index, read and checked when it was opened.
pub struct TableSegment {
    file: Arc<dyn RandomAccessFile>,
    path: Arc<Path>,
    number: usize,
    end: u64,
    footer: Footer,
    properties: Properties,
    filter: Option<FilterInfo>,
    index: Vec<IndexEntry>,
    /// End of the data blocks: every data block (with its trailer) lies below it.
    data_end: u64,
}

impl std::fmt::Debug for TableSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableSegment")
            .field("path", &self.path)
            .field("number", &self.number)
            .field("footer", &self.footer)
            .finish_non_exhaustive()
    }
}

impl TableSegment {
    fn open(file: Arc<dyn RandomAccessFile>, path: Arc<Path>, number: usize, end: u64) -> Result<TableSegment> {
        let footer_at = end - FOOTER_LEN as u64;
        let mut buf = [0u8; FOOTER_LEN];
        file.read_exact_at(footer_at, &mut buf)?;
        let raw = RawFooter::decode(&buf, &path, end)?;
        let props_raw = read_block(&*file, raw.properties, footer_at)?;
        let props = TableProperties::decode(&props_raw)
            .ok_or_else(|| Error::corruption(&*path, raw.properties.offset, "malformed properties block"))?;
        let filter = match raw.filter.size {
            0 => None,
            _ => Some(read_filter(&*file, raw.filter, footer_at)?),
        };
        let index = read_index(&*file, &path, raw.index, footer_at)?;
        let footer = Footer {
            offset: footer_at,
            index: raw.index.into(),
            filter: (raw.filter.size > 0).then(|| raw.filter.into()),
            properties: raw.properties.into(),
            format_version: raw.version,
        };
        let data_end = raw.data_end();
        Ok(TableSegment { file, path, number, end, footer, properties: (&props).into(), filter, index, data_end })
    }

    /// Which segment this is: 0 for the oldest (the table as first written).
    pub fn number(&self) -> usize {
        self.number
    }

    /// Offset just past the segment's footer.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Offset of the segment's first byte: its first data block, or its first meta block when
    /// it has no data. A DTable's segment may start after its predecessor's end, past the
    /// tail of an earlier append (dead bytes until the table is rewritten), and past the zeros
    /// that put an aligned segment's first block on a page boundary.
    pub fn start(&self) -> u64 {
        self.index.iter().map(|e| e.block.offset).min().unwrap_or(self.data_end)
    }

    /// The footer.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// The properties block.
    pub fn properties(&self) -> &Properties {
        &self.properties
    }

    /// The filter (`None`: written without one).
    pub fn filter(&self) -> Option<&FilterInfo> {
        self.filter.as_ref()
    }

    /// The index: one entry per data block, in key order.
    pub fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    /// Read data block `block` (an index entry's): its checksum is verified, it is
    /// decompressed and its restart array checked. Damage is `Error::Corruption` at the
    /// block's offset.
    pub fn read_block(&self, block: BlockRange) -> Result<DataBlock> {
        let handle = BlockHandle::from(block);
        let len = stored_len(&self.path, handle, self.data_end)?;
        let mut stored = vec![0u8; len];
        self.file.read_exact_at(handle.offset, &mut stored)?;
        let (size, kind) = verify_block(&stored, handle, &self.path)?;
        stored.truncate(size);
        let raw = decompress(kind, stored, &self.path, handle.offset)?;
        let raw_bytes = raw.len() as u64;
        let inner = Arc::new(Block::new(raw, Arc::clone(&self.path), handle.offset)?);
        let compression = match kind {
            TYPE_NONE => BlockCompression::None,
            TYPE_LZ4 => BlockCompression::Lz4,
            TYPE_ZSTD => BlockCompression::Zstd,
            // `decompress` refuses any other type byte.
            other => BlockCompression::Other(other),
        };
        let restarts = inner.num_restarts() as u64;
        Ok(DataBlock { block, compression, raw_bytes, restarts, inner, path: Arc::clone(&self.path) })
    }
}

/// Read and check the filter block at `h`.
fn read_filter(file: &dyn RandomAccessFile, h: BlockHandle, limit: u64) -> Result<FilterInfo> {
    let raw = read_block(file, h, limit)?;
    let probes = raw.last().copied().unwrap_or(0) as u32;
    let bits_bytes = (raw.len() as u64).saturating_sub(1);
    // Validates the length (whole 64-byte lines) and the probe count.
    BloomFilter::new(raw, file.path(), h.offset)?;
    Ok(FilterInfo { block: h.into(), bits_bytes, lines: bits_bytes / 64, probes })
}

/// Read the index block at `h` and decode every entry's separator and block handle.
fn read_index(file: &dyn RandomAccessFile, path: &Arc<Path>, h: BlockHandle, limit: u64) -> Result<Vec<IndexEntry>> {
    let raw = read_block(file, h, limit)?;
    let block = Arc::new(Block::new(raw, Arc::clone(path), h.offset)?);
    let mut it = BlockIter::new(block);
    it.seek_to_first()?;
    let mut out = Vec::new();
    while it.valid() {
        let bad = |why: String| Error::corruption(&**path, h.offset, format!("index entry {}: {why}", out.len()));
        let separator =
            InternalKey::parse(it.key()).ok_or_else(|| bad("separator shorter than a key trailer".into()))?;
        let handle = BlockHandle::decode_exact(it.value()).ok_or_else(|| bad("malformed block handle".into()))?;
        out.push(IndexEntry { separator, block: handle.into() });
        it.next()?;
    }
    Ok(out)
}

/// How a data block is stored (the type byte of its trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockCompression {
    /// Stored as it is.
    None,
    /// LZ4 block.
    Lz4,
    /// One zstd frame.
    Zstd,
    /// A type byte the format does not define.
    Other(u8),
}

/// A data block read and checked: its checksum matched, it decompressed and its restart
/// array is sound. Its entries are decoded as they are iterated.
pub struct DataBlock {
    /// Where it lies.
    pub block: BlockRange,
    /// How it is stored.
    pub compression: BlockCompression,
    /// Bytes after decompression (entries and restart array).
    pub raw_bytes: u64,
    /// Restart points (entries stored with their whole key).
    pub restarts: u64,
    inner: Arc<Block>,
    path: Arc<Path>,
}

impl std::fmt::Debug for DataBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataBlock")
            .field("block", &self.block)
            .field("compression", &self.compression)
            .field("raw_bytes", &self.raw_bytes)
            .field("restarts", &self.restarts)
            .finish()
    }
}

impl DataBlock {
    /// The block's entries in order. An entry that does not decode ends the iteration with
    /// `Error::Corruption` at the block's offset.
    pub fn entries(&self) -> Entries {
        Entries {
            it: BlockIter::new(Arc::clone(&self.inner)),
            path: Arc::clone(&self.path),
            offset: self.block.offset,
            started: false,
            done: false,
        }
    }
}

/// Iterator over a data block's entries (`DataBlock::entries`).
pub struct Entries {
    it: BlockIter,
    path: Arc<Path>,
    offset: u64,
    started: bool,
    done: bool,
}

impl Iterator for Entries {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        let step = if self.started { self.it.next() } else { self.it.seek_to_first() };
        self.started = true;
        if let Err(e) = step {
            self.done = true;
            return Some(Err(e));
        }
        if !self.it.valid() {
            self.done = true;
            return None;
        }
        let entry = decode_entry(self.it.key(), self.it.value(), &self.path, self.offset);
        self.done = entry.is_err();
        Some(entry)
    }
}

/// One table entry: its key and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The internal key.
    pub key: InternalKey,
    /// The value, the pointer to it, or nothing for a deletion.
    pub value: EntryValue,
}

/// What a table entry holds, by its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryValue {
    /// A value stored in the table.
    Inline(Vec<u8>),
    /// A pointer to a separated value in a value-log or cold file.
    Pointer(ValuePointer),
    /// A deletion (its stored value is empty).
    Deletion,
}

/// Decode one entry of the block at `offset` of `path`.
fn decode_entry(ikey: &[u8], value: &[u8], path: &Path, offset: u64) -> Result<Entry> {
    let Some(key) = InternalKey::parse(ikey).filter(|k| !matches!(k.kind, KeyKind::Other(_))) else {
        return Err(Error::corruption(path, offset, crate::key::malformed_reason(ikey)));
    };
    // An expiring entry's bytes start with its expiry time; what follows is as its plain kind's.
    let expiring = matches!(key.kind, KeyKind::ExpiringValue | KeyKind::ExpiringPointer);
    let value = match (expiring, crate::ttl::split_expiry(value)) {
        (false, _) => value,
        (true, Some((_, rest))) => rest,
        (true, None) => return Err(Error::corruption(path, offset, "expiring entry shorter than its expiry time")),
    };
    let value = match key.kind {
        KeyKind::Deletion => EntryValue::Deletion,
        KeyKind::Value | KeyKind::Merge | KeyKind::ExpiringValue => EntryValue::Inline(value.to_vec()),
        _ => EntryValue::Pointer(ValuePointer::decode(value).ok_or_else(|| {
            let why = format!("malformed value pointer ({} bytes) in the entry of seq {}", value.len(), key.seq);
            Error::corruption(path, offset, why)
        })?),
    };
    Ok(Entry { key, value })
}
