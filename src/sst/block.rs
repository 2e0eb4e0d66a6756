//! A decoded block (data or index) and its iterator: binary search over restart points for
//! `seek`, forward decoding for `next`, re-scan from the previous restart point for `prev`
//! (LevelDB's `block.cc`). Every offset read from the block is checked, so damaged bytes
//! surface as `Error::Corruption` from the iterator, never as a panic. A block's bytes are
//! either its own (read and maybe decompressed) or borrowed in place from a mapped file.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::fs::FileMapping;
use crate::internal_iter::InternalIterator;
use crate::util::coding::{decode_fixed32, get_varint32};
use crate::value::Value;

/// Where a block's bytes live.
enum Bytes {
    /// Read into memory (and maybe decompressed).
    Owned(Vec<u8>),
    /// In place in a memory-mapped table file: `map[start..end]` (checked at construction).
    Mapped { map: Arc<FileMapping>, start: usize, end: usize },
}

/// The contents of one block, shared (through `Arc`) by the cache and every iterator on it.
pub struct Block {
    bytes: Bytes,
    /// Offset of the restart array = end of the entries.
    restart_offset: usize,
    num_restarts: usize,
    /// The file and offset the block was read from, for error messages.
    file: Arc<Path>,
    file_offset: u64,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("file", &self.file)
            .field("file_offset", &self.file_offset)
            .field("len", &self.content_len())
            .field("mapped", &self.is_mapped())
            .field("num_restarts", &self.num_restarts)
            .finish()
    }
}

impl Block {
    /// Wrap decoded block bytes, validating the restart array: a count that fits, a first
    /// restart at 0, strictly increasing restart offsets inside the entry area.
    pub fn new(data: Vec<u8>, file: Arc<Path>, file_offset: u64) -> Result<Block> {
        Block::with_bytes(Bytes::Owned(data), file, file_offset)
    }

    /// A block used in place: the `len` bytes at `start` of a mapped file (the caller has
    /// verified their checksum). Validated like `new`; no bytes are copied.
    pub fn mapped(map: Arc<FileMapping>, start: usize, len: usize, file: Arc<Path>, file_offset: u64) -> Result<Block> {
        let end = start.checked_add(len).filter(|&end| end <= map.len());
        let Some(end) = end else {
            let why = format!("block of {len} bytes at {start} lies past the end of the mapped file");
            return Err(Error::corruption(&*file, file_offset, why));
        };
        Block::with_bytes(Bytes::Mapped { map, start, end }, file, file_offset)
    }

    fn with_bytes(bytes: Bytes, file: Arc<Path>, file_offset: u64) -> Result<Block> {
        let mut block = Block { bytes, restart_offset: 0, num_restarts: 0, file, file_offset };
        let data = block.data();
        let len = data.len();
        if len < 4 {
            return Err(block.corruption(format!("block of {len} bytes has no restart count")));
        }
        let num_restarts = decode_fixed32(&data[len - 4..]) as usize;
        let max_restarts = (len - 4) / 4;
        if num_restarts == 0 || num_restarts > max_restarts {
            return Err(block.corruption(format!("bad restart count {num_restarts} in a {len}-byte block")));
        }
        block.restart_offset = len - 4 - 4 * num_restarts;
        block.num_restarts = num_restarts;
        block.check_restarts()?;
        Ok(block)
    }

    /// The block's decoded contents: entries, restart array, restart count.
    #[inline]
    pub fn data(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Owned(v) => v,
            Bytes::Mapped { map, start, end } => &map[*start..*end],
        }
    }

    fn check_restarts(&self) -> Result<()> {
        let mut prev = None;
        for i in 0..self.num_restarts {
            let r = self.restart_point(i);
            let ordered = match prev {
                None => r == 0,
                Some(p) => r > p,
            };
            // An empty block has one restart at 0 == restart_offset.
            let inside = r < self.restart_offset || (r == 0 && self.num_restarts == 1);
            if !ordered || !inside {
                return Err(self.corruption(format!("restart point {i} at bad offset {r}")));
            }
            prev = Some(r);
        }
        Ok(())
    }

    /// Bytes this block holds in memory (the block cache's weight): a mapped block owns only
    /// its header, the page cache holds its bytes.
    pub fn charge(&self) -> usize {
        let owned = match &self.bytes {
            Bytes::Owned(v) => v.capacity(),
            Bytes::Mapped { .. } => 0,
        };
        owned + std::mem::size_of::<Block>()
    }

    /// Size of the decoded block contents.
    fn content_len(&self) -> usize {
        self.data().len()
    }

    /// The offset in its file the block was read from.
    pub fn file_offset(&self) -> u64 {
        self.file_offset
    }

    /// Number of restart points (entries that start a prefix-compression interval).
    pub fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// Whether the bytes are borrowed from a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, Bytes::Mapped { .. })
    }

    /// An iterator over the block's entries in bytewise key order (initially not positioned).
    #[cfg(test)]
    pub fn iter(self: &Arc<Self>) -> BlockIter {
        BlockIter::new(Arc::clone(self))
    }

    /// An iterator over the block's entries, whose keys are in `order`.
    pub(crate) fn iter_in(self: &Arc<Self>, order: &KeyOrder) -> BlockIter {
        BlockIter::with_order(Arc::clone(self), order.clone())
    }

    /// Load every cache line of the block with independent reads, so a scan about to walk
    /// a block that is not in CPU caches waits for memory once (the misses overlap) instead
    /// of once per entry (entry decoding is a dependent chain of loads).
    pub fn prefetch(&self) {
        touch_lines(self.data());
    }

    /// Touch the first bytes of the restart keys `lo..=hi` with independent loads before a
    /// binary search over them, so their cache misses overlap instead of following one
    /// another (only for the few restarts of a data block; index blocks are hot anyway).
    #[inline]
    fn touch_restart_keys(&self, lo: usize, hi: usize) {
        if hi - lo > 8 {
            return;
        }
        let data = self.data();
        let mut x = 0u8;
        for i in lo..=hi {
            x ^= data[self.restart_point(i)];
        }
        std::hint::black_box(x);
    }

    /// Touch every cache line of restart interval `i` with independent loads before a seek
    /// scans it (entry decoding is a chain of dependent loads, one miss after another).
    #[inline]
    fn touch_interval(&self, i: usize) {
        let end = if i + 1 < self.num_restarts { self.restart_point(i + 1) } else { self.restart_offset };
        touch_lines(&self.data()[self.restart_point(i)..end]);
    }

    #[inline]
    fn restart_point(&self, i: usize) -> usize {
        // In bounds: `new` checked that 4 * num_restarts bytes follow restart_offset.
        decode_fixed32(&self.data()[self.restart_offset + 4 * i..]) as usize
    }

    fn corruption(&self, why: String) -> Error {
        Error::corruption(&*self.file, self.file_offset, why)
    }

    /// Decode the header of the entry at `p`: `(shared, unshared, value_len, key_start)`,
    /// with the key delta and value checked to end inside the entry area.
    #[inline]
    fn decode_entry(&self, p: usize) -> Option<(usize, usize, usize, usize)> {
        let limit = self.restart_offset;
        let s = self.data().get(p..limit)?;
        let (shared, unshared, vlen, hdr) = if s.len() >= 3 && (s[0] | s[1] | s[2]) < 0x80 {
            // Fast path: all three lengths fit in one byte each.
            (s[0] as usize, s[1] as usize, s[2] as usize, 3)
        } else {
            let (a, n1) = get_varint32(s)?;
            let (b, n2) = get_varint32(s.get(n1..)?)?;
            let (c, n3) = get_varint32(s.get(n1 + n2..)?)?;
            (a as usize, b as usize, c as usize, n1 + n2 + n3)
        };
        let key_start = p + hdr;
        let end = key_start.checked_add(unshared)?.checked_add(vlen)?;
        (end <= limit).then_some((shared, unshared, vlen, key_start))
    }

    /// The whole key stored at restart point `i` (restart entries share nothing).
    fn restart_key(&self, i: usize) -> Result<&[u8]> {
        let p = self.restart_point(i);
        match self.decode_entry(p) {
            Some((0, unshared, _, ks)) => Ok(&self.data()[ks..ks + unshared]),
            _ => Err(self.corruption(format!("bad entry at restart point {i} (offset {p})"))),
        }
    }
}

/// Load every cache line of `bytes` (and its last byte) with independent reads, so their
/// cache misses overlap instead of being taken one at a time by dependent decoding later.
#[inline]
pub fn touch_lines(bytes: &[u8]) {
    let mut x = 0u8;
    for i in (0..bytes.len()).step_by(64) {
        x ^= bytes[i];
    }
    if let Some(last) = bytes.last() {
        x ^= last;
    }
    std::hint::black_box(x);
}

/// A block's bytes as the owner of value handles cut from it.
struct SharedBlock(Arc<Block>);

impl AsRef<[u8]> for SharedBlock {
    fn as_ref(&self) -> &[u8] {
        self.0.data()
    }
}

/// Values at least this long are handed out as a slice of their (block-cached) block rather
/// than copied: below it, a copy costs less than the shared handle's own allocation.
const SHARE_FROM_BYTES: usize = 256;

/// Cursor over one block. Reuses its key buffer across entries and across blocks
/// (`reset`), so iteration allocates nothing per entry.
pub struct BlockIter {
    block: Arc<Block>,
    /// The order of the block's keys (seeks binary-search by it).
    order: KeyOrder,
    /// Offset of the current entry; `>= restart_offset` means not valid.
    current: usize,
    /// Offset of the entry after the current one.
    next_entry: usize,
    /// Restart interval holding `current`.
    restart_index: usize,
    key: Vec<u8>,
    value_start: usize,
    value_end: usize,
    /// The entries of the current restart interval before the current one, as the last
    /// `prev` decoded them (RocksDB's `prev_entries_`): the next `prev` pops one instead of
    /// decoding the interval again. Valid while the iterator stands at `back_at`.
    back: Vec<BackEntry>,
    /// Their keys, back to back.
    back_keys: Vec<u8>,
    back_at: Option<usize>,
}

/// An entry a reverse step decoded: where it is and where its key sits in `back_keys`.
#[derive(Clone, Copy)]
struct BackEntry {
    current: usize,
    next_entry: usize,
    key_start: usize,
    value_start: usize,
    value_end: usize,
}

impl BlockIter {
    /// An iterator over `block`, whose keys are in bytewise order (initially not positioned).
    pub fn new(block: Arc<Block>) -> BlockIter {
        BlockIter::with_order(block, KeyOrder::default())
    }

    /// An iterator over `block`, whose keys are in `order` (initially not positioned).
    pub(crate) fn with_order(block: Arc<Block>, order: KeyOrder) -> BlockIter {
        let end = block.restart_offset;
        BlockIter {
            block,
            order,
            current: end,
            next_entry: end,
            restart_index: 0,
            key: Vec::new(),
            value_start: 0,
            value_end: 0,
            back: Vec::new(),
            back_keys: Vec::new(),
            back_at: None,
        }
    }

    /// Point this iterator at another block, keeping the key buffer's allocation.
    pub fn reset(&mut self, block: Arc<Block>) {
        self.block = block;
        self.invalidate();
    }

    /// The current value (only while valid) as a handle: a slice of the block, which the handle
    /// keeps alive, when the block's bytes are its own (read into memory, block-cached) and the
    /// value is not tiny; a copy otherwise — a handle into a mapped table would keep the
    /// table's mapping, and a deleted table's disk space, for as long as a user holds it.
    pub fn value_handle(&self) -> Value {
        let range = self.value_start..self.value_end;
        if self.block.is_mapped() || range.len() < SHARE_FROM_BYTES {
            return Value::copy_from_slice(&self.block.data()[range]);
        }
        Value::from_owner(SharedBlock(Arc::clone(&self.block)), range)
    }

    /// The block being iterated.
    #[cfg(test)]
    pub fn block(&self) -> &Arc<Block> {
        &self.block
    }

    /// Stand at `e`, an entry the last reverse step decoded (in the same restart interval).
    fn step_back_to(&mut self, e: BackEntry) {
        self.key.clear();
        self.key.extend_from_slice(&self.back_keys[e.key_start..]);
        self.back_keys.truncate(e.key_start);
        self.current = e.current;
        self.next_entry = e.next_entry;
        self.value_start = e.value_start;
        self.value_end = e.value_end;
        self.back_at = Some(e.current);
    }

    fn invalidate(&mut self) {
        self.back_at = None;
        self.current = self.block.restart_offset;
        self.next_entry = self.current;
        self.restart_index = 0;
        self.key.clear();
        // `value()` must stay in bounds even if misused on an invalid iterator.
        self.value_start = 0;
        self.value_end = 0;
    }

    fn fail(&mut self, why: String) -> Error {
        self.invalidate();
        self.block.corruption(why)
    }

    fn seek_to_restart(&mut self, i: usize) {
        self.key.clear();
        self.restart_index = i;
        self.next_entry = self.block.restart_point(i);
    }

    /// Decode the entry at `next_entry`; `Ok(false)` at the end of the block.
    #[inline]
    fn parse_next_key(&mut self) -> Result<bool> {
        let p = self.next_entry;
        self.current = p;
        if p >= self.block.restart_offset {
            self.invalidate();
            return Ok(false);
        }
        let Some((shared, unshared, vlen, ks)) = self.block.decode_entry(p) else {
            return Err(self.fail(format!("truncated or malformed entry at block offset {p}")));
        };
        if shared > self.key.len() {
            let why = format!("entry at block offset {p} shares {shared} bytes of a shorter key");
            return Err(self.fail(why));
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(&self.block.data()[ks..ks + unshared]);
        self.value_start = ks + unshared;
        self.value_end = self.value_start + vlen;
        self.next_entry = self.value_end;
        while self.restart_index + 1 < self.block.num_restarts && self.block.restart_point(self.restart_index + 1) < p {
            self.restart_index += 1;
        }
        Ok(true)
    }

    /// Binary search for the last restart point whose key is < `target`, starting from the
    /// current position when it already narrows the range.
    /// `current` is the order of the current key against `target` (`None`: not valid).
    fn find_restart(&mut self, target: &[u8], current: Option<Ordering>) -> Result<usize> {
        let mut left = 0;
        let mut right = self.block.num_restarts - 1;
        match current {
            Some(Ordering::Less) => left = self.restart_index,
            Some(Ordering::Greater) => right = self.restart_index,
            Some(Ordering::Equal) => return Ok(self.restart_index),
            None => {}
        }
        self.search_restarts(target, left, right)
    }

    /// The last restart point in `left..=right` whose key is < `target` (`left` if none).
    fn search_restarts(&mut self, target: &[u8], mut left: usize, mut right: usize) -> Result<usize> {
        self.block.touch_restart_keys(left, right);
        while left < right {
            let mid = left + (right - left).div_ceil(2);
            let less = match self.block.restart_key(mid) {
                Ok(k) => self.order.compare_internal(k, target) == Ordering::Less,
                Err(e) => {
                    self.invalidate();
                    return Err(e);
                }
            };
            if less {
                left = mid;
            } else {
                right = mid - 1;
            }
        }
        Ok(left)
    }

    /// `seek`, for a caller that knows every entry before restart interval `lo` is smaller
    /// than `target` and the answer lies at or before the start of interval `hi + 1`
    /// (index fences). Out-of-range bounds are clamped; a wrong `hi` only costs time.
    pub fn seek_between(&mut self, target: &[u8], lo: usize, hi: usize) -> Result<()> {
        let last = self.block.num_restarts - 1;
        let lo = lo.min(last);
        let left = self.search_restarts(target, lo, hi.clamp(lo, last))?;
        self.seek_to_restart(left);
        self.scan_to(target)
    }

    /// Stand at the entry that starts restart interval `i` (in an index block, entry `i`);
    /// past the last interval the iterator is left invalid.
    pub fn seek_to_restart_entry(&mut self, i: usize) -> Result<()> {
        if i >= self.block.num_restarts {
            self.invalidate();
            return Ok(());
        }
        self.seek_to_restart(i);
        self.parse_next_key().map(|_| ())
    }

    /// The restart interval the current entry starts, if it starts one (in an index block,
    /// where every entry is a restart point, the entry's ordinal).
    pub fn current_restart(&self) -> Option<usize> {
        [self.restart_index, self.restart_index + 1].into_iter().find(|&i| self.at_restart(i))
    }

    /// Whether the current entry starts restart interval `i`.
    pub fn at_restart(&self, i: usize) -> bool {
        self.valid() && i < self.block.num_restarts && self.block.restart_point(i) == self.current
    }

    /// Step forward to the first entry >= `target`.
    #[inline]
    fn scan_to(&mut self, target: &[u8]) -> Result<()> {
        while self.parse_next_key()? {
            if self.order.compare_internal(&self.key, target) != Ordering::Less {
                break;
            }
        }
        Ok(())
    }
}

impl InternalIterator for BlockIter {
    #[inline]
    fn valid(&self) -> bool {
        self.current < self.block.restart_offset
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.seek_to_restart(0);
        self.parse_next_key()?;
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.seek_to_restart(self.block.num_restarts - 1);
        while self.parse_next_key()? && self.next_entry < self.block.restart_offset {}
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let current = self.valid().then(|| self.order.compare_internal(&self.key, target));
        if current == Some(Ordering::Equal) {
            return Ok(());
        }
        let left = self.find_restart(target, current)?;
        // Keep scanning from here when already inside the right interval before target.
        let ahead = current == Some(Ordering::Less) && left == self.restart_index;
        if !ahead {
            self.seek_to_restart(left);
            self.block.touch_interval(left);
        }
        self.scan_to(target)
    }

    #[inline]
    fn next(&mut self) -> Result<()> {
        if self.valid() {
            self.parse_next_key()?;
        }
        Ok(())
    }

    fn prev(&mut self) -> Result<()> {
        if !self.valid() {
            return Ok(());
        }
        if self.back_at == Some(self.current) {
            if let Some(e) = self.back.pop() {
                self.step_back_to(e);
                return Ok(());
            }
        }
        let original = self.current;
        while self.block.restart_point(self.restart_index) >= original {
            if self.restart_index == 0 {
                self.invalidate();
                return Ok(());
            }
            self.restart_index -= 1;
        }
        self.seek_to_restart(self.restart_index);
        // Decode the interval up to `original`, keeping the entries before the last one (the
        // new current one) for the reverse steps that follow.
        self.back.clear();
        self.back_keys.clear();
        while self.parse_next_key()? && self.next_entry < original {
            self.back.push(BackEntry {
                current: self.current,
                next_entry: self.next_entry,
                key_start: self.back_keys.len(),
                value_start: self.value_start,
                value_end: self.value_end,
            });
            self.back_keys.extend_from_slice(&self.key);
        }
        self.back_at = Some(self.current);
        Ok(())
    }

    #[inline]
    fn key(&self) -> &[u8] {
        &self.key
    }

    #[inline]
    fn value(&self) -> &[u8] {
        &self.block.data()[self.value_start..self.value_end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{compare_internal, make_internal_key, ValueKind};
    use crate::sst::block_builder::BlockBuilder;

    fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let k = make_internal_key(format!("key{:05}", i * 2).as_bytes(), 7, ValueKind::Value);
                (k, format!("value-{i}").into_bytes())
            })
            .collect()
    }

    fn build(es: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(interval);
        for (k, v) in es {
            b.add(k, v);
        }
        let data = b.finish().to_vec();
        Arc::new(Block::new(data, Arc::from(Path::new("blk")), 0).unwrap())
    }

    fn collect_forward(it: &mut BlockIter) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        it.seek_to_first().unwrap();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next().unwrap();
        }
        out
    }

    #[test]
    fn iterates_forward_and_backward_at_every_restart_interval() {
        let es = entries(200);
        for interval in [1, 2, 16, 1000] {
            let block = build(&es, interval);
            let mut it = block.iter();
            assert_eq!(collect_forward(&mut it), es, "interval {interval}");
            let mut back = Vec::new();
            it.seek_to_last().unwrap();
            while it.valid() {
                back.push((it.key().to_vec(), it.value().to_vec()));
                it.prev().unwrap();
            }
            back.reverse();
            assert_eq!(back, es, "interval {interval}");
        }
    }

    #[test]
    fn reverse_steps_mixed_with_seeks_and_next_land_where_a_fresh_iterator_would() {
        let es = entries(100);
        for interval in [1, 3, 16] {
            let block = build(&es, interval);
            let mut it = block.iter();
            let mut rng = 12345u64;
            let mut at: Option<usize> = None;
            for _ in 0..2000 {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                match (rng >> 33) % 4 {
                    0 => {
                        let i = ((rng >> 40) % 100) as usize;
                        it.seek(&es[i].0).unwrap();
                        at = Some(i);
                    }
                    1 => {
                        it.next().unwrap();
                        at = at.and_then(|i| (i + 1 < es.len()).then_some(i + 1));
                    }
                    _ => {
                        it.prev().unwrap();
                        at = at.and_then(|i| i.checked_sub(1));
                    }
                }
                if at.is_none() {
                    it.seek_to_last().unwrap();
                    at = Some(es.len() - 1);
                }
                let i = at.unwrap();
                assert!(it.valid(), "interval {interval}");
                assert_eq!((it.key(), it.value()), (&es[i].0[..], &es[i].1[..]), "interval {interval} at {i}");
            }
        }
    }

    #[test]
    fn seek_finds_first_key_at_or_after_target() {
        let es = entries(100);
        let block = build(&es, 16);
        let mut it = block.iter();
        for i in 0..=200 {
            let target = make_internal_key(format!("key{i:05}").as_bytes(), 7, ValueKind::Value);
            it.seek(&target).unwrap();
            match es.iter().find(|(k, _)| compare_internal(k, &target) != Ordering::Less) {
                Some((k, _)) => assert_eq!(it.key(), &k[..], "target {i}"),
                None => assert!(!it.valid()),
            }
        }
        // Backwards targets after forward positions exercise the "scan ahead" shortcut.
        for i in (0..=200).rev() {
            let target = make_internal_key(format!("key{i:05}").as_bytes(), 7, ValueKind::Value);
            it.seek(&target).unwrap();
            let want = es.iter().find(|(k, _)| compare_internal(k, &target) != Ordering::Less);
            assert_eq!(want.map(|(k, _)| &k[..]), it.valid().then(|| it.key()));
        }
    }

    #[test]
    fn empty_block_is_never_valid() {
        let block = build(&[], 16);
        let mut it = block.iter();
        it.seek_to_first().unwrap();
        assert!(!it.valid());
        it.seek_to_last().unwrap();
        assert!(!it.valid());
        it.seek(b"anything").unwrap();
        assert!(!it.valid());
    }

    #[test]
    fn bad_restart_count_is_corruption() {
        let mut data = build(&entries(10), 4).data().to_vec();
        let n = data.len();
        data[n - 4..].copy_from_slice(&1000u32.to_le_bytes());
        assert!(Block::new(data.clone(), Arc::from(Path::new("b")), 0).unwrap_err().is_corruption());
        data[n - 4..].copy_from_slice(&0u32.to_le_bytes());
        assert!(Block::new(data, Arc::from(Path::new("b")), 0).unwrap_err().is_corruption());
        assert!(Block::new(vec![1, 2], Arc::from(Path::new("b")), 0).unwrap_err().is_corruption());
    }

    /// Every single-byte change to a block either fails (`Corruption`) or decodes to some
    /// entries; it must never panic or read out of bounds.
    #[test]
    fn damaged_blocks_never_panic() {
        let es = entries(40);
        let good = build(&es, 4).data().to_vec();
        for i in 0..good.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut data = good.clone();
                data[i] ^= x;
                let Ok(block) = Block::new(data, Arc::from(Path::new("b")), 0) else {
                    continue;
                };
                let block = Arc::new(block);
                let mut it = block.iter();
                let mut steps = 0;
                let _ = it.seek_to_first();
                while it.valid() && steps < 1000 {
                    steps += 1;
                    if it.next().is_err() {
                        break;
                    }
                }
                let _ = it.seek_to_last();
                while it.valid() && steps < 2000 {
                    steps += 1;
                    if it.prev().is_err() {
                        break;
                    }
                }
                let _ = it.seek(&es[20].0);
            }
        }
    }

    #[test]
    fn entry_running_past_the_restart_array_is_corruption() {
        let mut b = BlockBuilder::new(16);
        b.add(b"aaaaaaaaaaaa", b"v");
        let mut data = b.finish().to_vec();
        data[2] = 100; // value length now runs past the entry area
        let block = Arc::new(Block::new(data, Arc::from(Path::new("b")), 42).unwrap());
        let mut it = block.iter();
        let e = it.seek_to_first().unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 42, .. }), "{e}");
        assert!(!it.valid());
    }
}
