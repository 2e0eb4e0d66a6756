//! The fixed parts of the SSTable file format: block handles, the block trailer, the footer,
//! the properties record, and reading one checksummed block back. `docs/format/sst.md` draws
//! all of them.

use std::path::Path;

use crate::error::{Error, Result};
use crate::fs::RandomAccessFile;
use crate::util::coding::{put_fixed32, put_fixed64, put_length_prefixed, put_varint64, Reader};
use crate::util::crc;

use super::compression;

/// Bytes after every block: 1 byte compression type + u32 LE crc32c.
pub const BLOCK_TRAILER_LEN: usize = 5;
/// Bytes of the footer at the very end of the file.
pub const FOOTER_LEN: usize = 64;
/// "wisckey1" read as a little-endian u64; the last 8 bytes of every table.
pub const TABLE_MAGIC: u64 = 0x7769_7363_6b65_7931;
/// Version of the table format written by this code.
pub const FORMAT_VERSION: u32 = 1;
/// Longest encoding of a block handle (two varint64s).
pub const MAX_HANDLE_LEN: usize = 20;

/// Where a block lives: offset of its first byte and its size *without* the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockHandle {
    pub offset: u64,
    pub size: u64,
}

impl BlockHandle {
    /// Append `offset varint64 ‖ size varint64`.
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.offset);
        put_varint64(dst, self.size);
    }

    /// Decode a handle that must fill `src` exactly (index-block values).
    pub fn decode_exact(src: &[u8]) -> Option<BlockHandle> {
        let mut r = Reader::new(src);
        let h = BlockHandle { offset: r.varint64()?, size: r.varint64()? };
        r.is_empty().then_some(h)
    }

    /// Offset just past the block's trailer (saturating: checked against the file by callers).
    pub fn end_with_trailer(&self) -> u64 {
        self.offset.saturating_add(self.size).saturating_add(BLOCK_TRAILER_LEN as u64)
    }
}

/// The 5-byte trailer of `block` (its stored bytes) with compression type `kind`.
pub fn block_trailer(block: &[u8], kind: u8) -> [u8; BLOCK_TRAILER_LEN] {
    let c = crate::util::crc_extend(crc(block), &[kind]).to_le_bytes();
    [kind, c[0], c[1], c[2], c[3]]
}

/// The last `FOOTER_LEN` bytes of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footer {
    pub index: BlockHandle,
    /// `size == 0`: the table has no filter.
    pub filter: BlockHandle,
    pub properties: BlockHandle,
    pub version: u32,
}

impl Footer {
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = Vec::with_capacity(FOOTER_LEN);
        for h in [self.index, self.filter, self.properties] {
            put_fixed64(&mut b, h.offset);
            put_fixed64(&mut b, h.size);
        }
        put_fixed32(&mut b, self.version);
        let c = crc(&b);
        put_fixed32(&mut b, c);
        put_fixed64(&mut b, TABLE_MAGIC);
        let mut out = [0u8; FOOTER_LEN];
        out.copy_from_slice(&b);
        out
    }

    /// Decode and validate the footer of a `file_size`-byte file: magic, version, checksum,
    /// and every handle lying inside the bytes before the footer.
    pub fn decode(buf: &[u8; FOOTER_LEN], file: &Path, file_size: u64) -> Result<Footer> {
        let at = file_size.saturating_sub(FOOTER_LEN as u64);
        let corrupt = |rel: usize, why: String| Error::corruption(file, at + rel as u64, why);
        let mut r = Reader::new(buf);
        let mut handle = || -> Option<BlockHandle> { Some(BlockHandle { offset: r.fixed64()?, size: r.fixed64()? }) };
        let (index, filter, properties) = match (handle(), handle(), handle()) {
            (Some(i), Some(f), Some(p)) => (i, f, p),
            _ => return Err(corrupt(0, "footer too short".into())),
        };
        let field = |at: usize| u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let magic = u64::from_le_bytes(buf[56..64].try_into().unwrap_or([0; 8]));
        if magic != TABLE_MAGIC {
            return Err(corrupt(56, format!("bad table magic {magic:#018x}: not a wisckey table")));
        }
        let stored_crc = field(52);
        if crc(&buf[..52]) != stored_crc {
            return Err(corrupt(52, "footer checksum mismatch".into()));
        }
        let version = field(48);
        if version != FORMAT_VERSION {
            return Err(corrupt(48, format!("unsupported table format version {version}")));
        }
        let f = Footer { index, filter, properties, version };
        for (name, h) in [("index", index), ("properties", properties), ("filter", filter)] {
            let absent_filter = name == "filter" && h.size == 0;
            if !absent_filter && h.end_with_trailer() > at {
                return Err(corrupt(0, format!("{name} block handle {h:?} lies outside the file")));
            }
        }
        Ok(f)
    }

    /// End of the data blocks: the first meta block (filter when present, else properties).
    pub fn data_end(&self) -> u64 {
        if self.filter.size > 0 {
            self.filter.offset.min(self.properties.offset)
        } else {
            self.properties.offset
        }
    }
}

/// Read the block at `handle`, verify its checksum and decompress it. The whole block plus
/// trailer must lie below `limit` (the start of the region that may not hold it).
pub fn read_block(file: &dyn RandomAccessFile, handle: BlockHandle, limit: u64) -> Result<Vec<u8>> {
    let len = stored_len(file.path(), handle, limit)?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(handle.offset, &mut buf)?;
    decode_block(buf, handle, file.path())
}

/// Bytes of block + trailer at `handle`, after checking they lie below `limit`.
pub fn stored_len(path: &Path, handle: BlockHandle, limit: u64) -> Result<usize> {
    if handle.end_with_trailer() > limit {
        let why = format!("block handle {handle:?} points past the end of its region ({limit})");
        return Err(Error::corruption(path, handle.offset, why));
    }
    usize::try_from(handle.size + BLOCK_TRAILER_LEN as u64)
        .map_err(|_| Error::corruption(path, handle.offset, "block size does not fit in memory"))
}

/// Verify and strip the trailer of `buf` (block bytes + trailer, as read from `handle`),
/// then decompress.
pub fn decode_block(mut buf: Vec<u8>, handle: BlockHandle, path: &Path) -> Result<Vec<u8>> {
    let (size, kind) = verify_block(&buf, handle, path)?;
    buf.truncate(size);
    compression::decompress(kind, buf, path, handle.offset)
}

/// Verify the trailer checksum of `stored` (block bytes + trailer, as stored at `handle`);
/// returns the block's size without the trailer and its compression type.
pub fn verify_block(stored: &[u8], handle: BlockHandle, path: &Path) -> Result<(usize, u8)> {
    let Some(size) = stored.len().checked_sub(BLOCK_TRAILER_LEN) else {
        return Err(Error::corruption(path, handle.offset, "block shorter than its trailer"));
    };
    let t = &stored[size..];
    let kind = t[0];
    if crc(&stored[..=size]) != u32::from_le_bytes([t[1], t[2], t[3], t[4]]) {
        return Err(Error::corruption(path, handle.offset, "block checksum mismatch"));
    }
    Ok((size, kind))
}

/// Statistics recorded in a table's properties block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableProperties {
    pub num_entries: u64,
    pub num_deletions: u64,
    pub raw_key_bytes: u64,
    pub raw_value_bytes: u64,
    pub num_data_blocks: u64,
    /// Smallest internal key (empty when the table is empty).
    pub smallest: Vec<u8>,
    /// Largest internal key (empty when the table is empty).
    pub largest: Vec<u8>,
    pub format_version: u32,
    /// The custom filter policy that built the table's filter (`Options::filter_policy`), and
    /// where that filter's block is. `None`: the footer's filter handle names the built-in
    /// Bloom filter, or none. A policy's filter is kept out of the footer so that a build that
    /// knows only the built-in filter reads such a table without a filter instead of misreading
    /// it.
    pub policy_filter: Option<(String, BlockHandle)>,
    /// The range tombstones the table (segment) holds, in key order (`range_del`).
    pub range_tombstones: Vec<crate::range_del::RangeTombstone>,
    /// The prefix extractor (`Options::prefix_extractor`) whose prefixes the table's prefix
    /// Bloom filter holds, and where that filter's block is; `None`: no prefix filter.
    pub prefix_filter: Option<(String, BlockHandle)>,
}

/// Tags of the properties record; unknown tags are skipped so fields can be added later.
mod tag {
    pub const NUM_ENTRIES: u64 = 1;
    pub const NUM_DELETIONS: u64 = 2;
    pub const RAW_KEY_BYTES: u64 = 3;
    pub const RAW_VALUE_BYTES: u64 = 4;
    pub const NUM_DATA_BLOCKS: u64 = 5;
    pub const SMALLEST: u64 = 6;
    pub const LARGEST: u64 = 7;
    pub const FORMAT_VERSION: u64 = 8;
    pub const FILTER_POLICY: u64 = 9;
    pub const POLICY_FILTER_HANDLE: u64 = 10;
    /// The range tombstones (`range_del::encode_list`); absent when there are none.
    pub const RANGE_TOMBSTONES: u64 = 11;
    /// The name of the prefix extractor whose prefixes the prefix filter holds (with 13).
    pub const PREFIX_EXTRACTOR: u64 = 12;
    /// The handle of the prefix Bloom filter block (with 12).
    pub const PREFIX_FILTER_HANDLE: u64 = 13;
}

impl TableProperties {
    /// Encode as a sequence of `tag varint ‖ length-prefixed payload` fields; integer
    /// payloads are one varint64.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.smallest.len() + self.largest.len());
        let int = |t: u64, v: u64, out: &mut Vec<u8>| {
            let mut p = Vec::with_capacity(10);
            put_varint64(&mut p, v);
            put_varint64(out, t);
            put_length_prefixed(out, &p);
        };
        int(tag::NUM_ENTRIES, self.num_entries, &mut out);
        int(tag::NUM_DELETIONS, self.num_deletions, &mut out);
        int(tag::RAW_KEY_BYTES, self.raw_key_bytes, &mut out);
        int(tag::RAW_VALUE_BYTES, self.raw_value_bytes, &mut out);
        int(tag::NUM_DATA_BLOCKS, self.num_data_blocks, &mut out);
        int(tag::FORMAT_VERSION, self.format_version as u64, &mut out);
        for (t, k) in [(tag::SMALLEST, &self.smallest), (tag::LARGEST, &self.largest)] {
            put_varint64(&mut out, t);
            put_length_prefixed(&mut out, k);
        }
        let named = [
            (&self.policy_filter, tag::FILTER_POLICY, tag::POLICY_FILTER_HANDLE),
            (&self.prefix_filter, tag::PREFIX_EXTRACTOR, tag::PREFIX_FILTER_HANDLE),
        ];
        for (field, name_tag, handle_tag) in named {
            let Some((name, handle)) = field else { continue };
            put_varint64(&mut out, name_tag);
            put_length_prefixed(&mut out, name.as_bytes());
            let mut h = Vec::with_capacity(MAX_HANDLE_LEN);
            handle.encode_to(&mut h);
            put_varint64(&mut out, handle_tag);
            put_length_prefixed(&mut out, &h);
        }
        if !self.range_tombstones.is_empty() {
            put_varint64(&mut out, tag::RANGE_TOMBSTONES);
            put_length_prefixed(&mut out, &crate::range_del::encode_list(&self.range_tombstones));
        }
        out
    }

    /// Decode a properties record; `None` when any field is truncated or malformed.
    pub fn decode(src: &[u8]) -> Option<TableProperties> {
        let mut p = TableProperties::default();
        let (mut policy, mut handle) = (None, None);
        let (mut prefix_name, mut prefix_handle) = (None, None);
        let mut r = Reader::new(src);
        while !r.is_empty() {
            let t = r.varint64()?;
            let payload = r.length_prefixed()?;
            let int = || {
                let mut pr = Reader::new(payload);
                let v = pr.varint64()?;
                pr.is_empty().then_some(v)
            };
            match t {
                tag::NUM_ENTRIES => p.num_entries = int()?,
                tag::NUM_DELETIONS => p.num_deletions = int()?,
                tag::RAW_KEY_BYTES => p.raw_key_bytes = int()?,
                tag::RAW_VALUE_BYTES => p.raw_value_bytes = int()?,
                tag::NUM_DATA_BLOCKS => p.num_data_blocks = int()?,
                tag::FORMAT_VERSION => p.format_version = u32::try_from(int()?).ok()?,
                tag::SMALLEST => p.smallest = payload.to_vec(),
                tag::LARGEST => p.largest = payload.to_vec(),
                tag::FILTER_POLICY => policy = Some(String::from_utf8(payload.to_vec()).ok()?),
                tag::POLICY_FILTER_HANDLE => handle = Some(BlockHandle::decode_exact(payload)?),
                tag::RANGE_TOMBSTONES => p.range_tombstones = crate::range_del::decode_list(payload)?,
                tag::PREFIX_EXTRACTOR => prefix_name = Some(String::from_utf8(payload.to_vec()).ok()?),
                tag::PREFIX_FILTER_HANDLE => prefix_handle = Some(BlockHandle::decode_exact(payload)?),
                _ => {}
            }
        }
        p.policy_filter = both_or_neither(policy, handle)?;
        p.prefix_filter = both_or_neither(prefix_name, prefix_handle)?;
        Some(p)
    }
}

/// A name and a handle that come together: `Some(None)` for neither, `None` (malformed) for
/// one without the other.
fn both_or_neither(name: Option<String>, handle: Option<BlockHandle>) -> Option<Option<(String, BlockHandle)>> {
    match (name, handle) {
        (Some(n), Some(h)) => Some(Some((n, h))),
        (None, None) => Some(None),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footer() -> Footer {
        Footer {
            index: BlockHandle { offset: 100, size: 20 },
            filter: BlockHandle { offset: 50, size: 10 },
            properties: BlockHandle { offset: 65, size: 30 },
            version: FORMAT_VERSION,
        }
    }

    #[test]
    fn footer_round_trips_and_rejects_every_flipped_byte() {
        let f = footer();
        let buf = f.encode();
        let size = 125 + FOOTER_LEN as u64;
        assert_eq!(Footer::decode(&buf, Path::new("t"), size).unwrap(), f);
        for i in 0..FOOTER_LEN {
            let mut bad = buf;
            bad[i] ^= 0x10;
            let e = Footer::decode(&bad, Path::new("t"), size).unwrap_err();
            assert!(e.is_corruption(), "byte {i}");
        }
    }

    #[test]
    fn footer_with_handle_past_the_data_is_corruption() {
        let buf = footer().encode();
        let e = Footer::decode(&buf, Path::new("t"), 124 + FOOTER_LEN as u64).unwrap_err();
        assert!(e.to_string().contains("index block handle"), "{e}");
    }

    #[test]
    fn handle_decoding_requires_exact_length() {
        let mut b = Vec::new();
        BlockHandle { offset: 1 << 40, size: 4096 }.encode_to(&mut b);
        assert_eq!(BlockHandle::decode_exact(&b), Some(BlockHandle { offset: 1 << 40, size: 4096 }));
        assert_eq!(BlockHandle::decode_exact(&b[..b.len() - 1]), None);
        b.push(0);
        assert_eq!(BlockHandle::decode_exact(&b), None);
    }

    #[test]
    fn properties_round_trip_and_skip_unknown_tags() {
        let p = TableProperties {
            num_entries: 10,
            num_deletions: 2,
            raw_key_bytes: 300,
            raw_value_bytes: 4000,
            num_data_blocks: 3,
            smallest: b"a\x01\0\0\0\0\0\0\0".to_vec(),
            largest: b"z\x01\0\0\0\0\0\0\0".to_vec(),
            format_version: FORMAT_VERSION,
            policy_filter: Some(("test.policy".into(), BlockHandle { offset: 9000, size: 40 })),
            range_tombstones: vec![crate::range_del::RangeTombstone {
                begin: b"a".to_vec(),
                end: b"c".to_vec(),
                seq: 9,
            }],
            prefix_filter: Some(("wisckey.FixedPrefix.8".into(), BlockHandle { offset: 9045, size: 65 })),
        };
        let mut enc = p.encode();
        assert_eq!(TableProperties::decode(&enc), Some(p.clone()));
        put_varint64(&mut enc, 99);
        put_length_prefixed(&mut enc, b"future");
        assert_eq!(TableProperties::decode(&enc), Some(p));
        assert_eq!(TableProperties::decode(&enc[..enc.len() - 1]), None);
    }

    #[test]
    fn a_prefix_extractor_name_without_its_filter_handle_is_malformed() {
        let p = TableProperties {
            prefix_filter: Some(("wisckey.FixedPrefix.4".into(), BlockHandle { offset: 10, size: 65 })),
            ..TableProperties::default()
        };
        assert_eq!(TableProperties::decode(&p.encode()), Some(p));
        let mut name_only = Vec::new();
        put_varint64(&mut name_only, tag::PREFIX_EXTRACTOR);
        put_length_prefixed(&mut name_only, b"wisckey.FixedPrefix.4");
        assert_eq!(TableProperties::decode(&name_only), None);
    }
}
