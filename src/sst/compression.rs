//! Block compression codecs of SSTables (none, lz4, zstd): the option enum, the on-disk type
//! byte, and compress/decompress of one block.
//!
//! Compressed payloads (both codecs) are `u32 LE uncompressed length ‖ codec bytes`, so the
//! reader allocates the output exactly once and can refuse absurd lengths before allocating.

use std::cell::RefCell;
use std::path::Path;

use crate::error::{Error, Result};

/// Block compression of SSTables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Blocks are stored as they are.
    #[default]
    None,
    /// LZ4 (fast, modest ratio).
    Lz4,
    /// zstd at the given level (1..=22).
    Zstd(i32),
}

impl Compression {
    /// Parse `none`, `lz4`, `zstd` or `zstd:LEVEL` (the `--compression` flag).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" | "no" | "false" => Some(Compression::None),
            "lz4" | "snappy" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd(3)),
            _ => s.strip_prefix("zstd:").and_then(|l| l.parse().ok()).map(Compression::Zstd),
        }
    }

    /// The type byte written in the block trailer for blocks compressed with this codec.
    pub(crate) fn type_byte(self) -> u8 {
        match self {
            Compression::None => TYPE_NONE,
            Compression::Lz4 => TYPE_LZ4,
            Compression::Zstd(_) => TYPE_ZSTD,
        }
    }
}

/// Trailer type byte: block stored as is.
pub const TYPE_NONE: u8 = 0;
/// Trailer type byte: `u32 LE raw length ‖ lz4 block` (lz4_flex `compress_prepend_size`).
pub const TYPE_LZ4: u8 = 1;
/// Trailer type byte: `u32 LE raw length ‖ zstd frame`.
pub const TYPE_ZSTD: u8 = 2;

/// Largest uncompressed block accepted by the decoder: one maximal entry plus slack. A
/// length above this can only come from damaged bytes, so refuse it instead of allocating.
const MAX_RAW_BLOCK_BYTES: usize = crate::key::MAX_VALUE_BYTES + crate::key::MAX_KEY_BYTES + (1 << 20);

/// Compress `raw` with `codec` into `out` (cleared first). Returns the trailer type byte to
/// store, or `None` when the block should be stored uncompressed: codec `None`, a codec
/// failure, or a saving under 12.5% (not worth the decompression cost on every read).
pub fn compress(codec: Compression, raw: &[u8], out: &mut Vec<u8>) -> Option<u8> {
    out.clear();
    let raw_len = u32::try_from(raw.len()).ok()?;
    match codec {
        Compression::None => return None,
        Compression::Lz4 => {
            out.extend_from_slice(&raw_len.to_le_bytes());
            let bound = lz4_flex::block::get_maximum_output_size(raw.len());
            out.resize(4 + bound, 0);
            let n = lz4_flex::block::compress_into(raw, &mut out[4..]).ok()?;
            out.truncate(4 + n);
        }
        Compression::Zstd(level) => {
            out.extend_from_slice(&raw_len.to_le_bytes());
            out.resize(4 + zstd::zstd_safe::compress_bound(raw.len()), 0);
            let n = zstd_compress(raw, &mut out[4..], level)?;
            out.truncate(4 + n);
        }
    }
    let worth_it = out.len() < raw.len() - raw.len() / 8;
    worth_it.then(|| codec.type_byte())
}

thread_local! {
    // zstd contexts are large to set up; keep one per thread (and per level for compression).
    static ZSTD_COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

fn zstd_compress(raw: &[u8], dst: &mut [u8], level: i32) -> Option<usize> {
    ZSTD_COMPRESSOR.with(|slot| {
        let mut slot = slot.try_borrow_mut().ok()?;
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        let (_, c) = slot.as_mut()?;
        c.compress_to_buffer(raw, dst).ok()
    })
}

fn zstd_decompress(body: &[u8], dst: &mut [u8]) -> std::io::Result<usize> {
    ZSTD_DECOMPRESSOR.with(|slot| {
        let mut slot = slot.try_borrow_mut().map_err(std::io::Error::other)?;
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        match slot.as_mut() {
            Some(d) => d.decompress_to_buffer(body, dst),
            None => Err(std::io::Error::other("no zstd decompressor")),
        }
    })
}

/// Decompress a block payload stored with trailer type `kind`. `file`/`offset` name the block
/// in errors. Type 0 returns the payload unchanged (no copy).
pub fn decompress(kind: u8, payload: Vec<u8>, file: &Path, offset: u64) -> Result<Vec<u8>> {
    if kind == TYPE_NONE {
        return Ok(payload);
    }
    decompress_slice(kind, &payload, file, offset)
}

/// `decompress` of a borrowed payload (a block in a mapped file); type 0 copies it.
pub fn decompress_slice(kind: u8, payload: &[u8], file: &Path, offset: u64) -> Result<Vec<u8>> {
    let corrupt = |reason: String| Error::corruption(file, offset, reason);
    if kind == TYPE_NONE {
        return Ok(payload.to_vec());
    }
    if kind != TYPE_LZ4 && kind != TYPE_ZSTD {
        return Err(corrupt(format!("unknown block compression type {kind}")));
    }
    let (len_bytes, body) = payload
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt("compressed block shorter than its length prefix".into()))?;
    let raw_len = u32::from_le_bytes(*len_bytes) as usize;
    if raw_len > MAX_RAW_BLOCK_BYTES {
        return Err(corrupt(format!("compressed block claims {raw_len} uncompressed bytes")));
    }
    let mut raw = vec![0u8; raw_len];
    let n = if kind == TYPE_LZ4 {
        lz4_flex::block::decompress_into(body, &mut raw).map_err(|e| corrupt(format!("lz4: {e}")))?
    } else {
        zstd_decompress(body, &mut raw).map_err(|e| corrupt(format!("zstd: {e}")))?
    };
    if n != raw_len {
        return Err(corrupt(format!("block decompressed to {n} bytes, expected {raw_len}")));
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressible() -> Vec<u8> {
        (0..10_000u32).flat_map(|i| (i % 97).to_le_bytes()).collect()
    }

    #[test]
    fn every_codec_round_trips_a_compressible_block() {
        let raw = compressible();
        for codec in [Compression::Lz4, Compression::Zstd(3), Compression::Zstd(1)] {
            let mut out = Vec::new();
            let kind = compress(codec, &raw, &mut out).expect("compressible data compresses");
            assert_eq!(kind, codec.type_byte());
            assert!(out.len() < raw.len() / 2);
            let back = decompress(kind, out, Path::new("t"), 0).unwrap();
            assert_eq!(back, raw);
        }
    }

    #[test]
    fn incompressible_block_is_stored_raw() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let raw: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut out = Vec::new();
        assert_eq!(compress(Compression::Lz4, &raw, &mut out), None);
        assert_eq!(compress(Compression::Zstd(3), &raw, &mut out), None);
        assert_eq!(compress(Compression::None, &raw, &mut out), None);
    }

    #[test]
    fn garbage_payload_is_corruption_not_panic() {
        let raw = compressible();
        for codec in [Compression::Lz4, Compression::Zstd(3)] {
            let mut out = Vec::new();
            let kind = compress(codec, &raw, &mut out).unwrap();
            for cut in [0, 3, 4, 10, out.len() / 2, out.len() - 1] {
                let r = decompress(kind, out[..cut].to_vec(), Path::new("t"), 7);
                assert!(r.unwrap_err().is_corruption(), "cut at {cut}");
            }
            let mut huge = out.clone();
            huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(decompress(kind, huge, Path::new("t"), 7).unwrap_err().is_corruption());
        }
        assert!(decompress(9, vec![1, 2, 3], Path::new("t"), 0).unwrap_err().is_corruption());
    }
}
