//! The memtable: a concurrent skiplist of internal keys holding the newest writes until they
//! are flushed to an SSTable. Size-bounded by the DB (it switches to a new one when full).

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use crossbeam_skiplist::SkipMap;

mod kept;
mod key_filter;

pub use kept::ChunkPool;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{self, compare_internal, ValueKind};
use crate::log::{self, LogPos, SeparatedValue};
use crate::value::Value;
use crate::vlog::ValuePointer;
use crate::write_batch::{BatchIter, BatchOp};
use bytes::Bytes;

/// A separated value a memtable keeps in memory: a copy in one of its chunks, or (a large
/// value) a slice of the buffer its write arrived in.
#[derive(Clone)]
pub struct Kept {
    value: Bytes,
    /// Handing the slice on (to the value cache) keeps no other data alive: a large value
    /// whose buffer held nothing but its op. A value in a chunk would pin the whole chunk.
    alone: bool,
}

/// One memtable entry: `u32 LE ikey length | internal key | value`, ordered by
/// `key::compare_internal` on the internal key. Entries of up to `INLINE_ENTRY_BYTES` (a key
/// and a value pointer, or a small inline value) live inside the skiplist node itself: an
/// insert makes one allocation, and a scan stepping to the next entry loads one block of memory
/// instead of following a second pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IKey(pub smallvec::SmallVec<[u8; INLINE_ENTRY_BYTES]>);

/// Entry bytes kept inside the skiplist node (longer entries go to the heap).
const INLINE_ENTRY_BYTES: usize = 64;

/// An entry's bytes (`u32 LE ikey length | internal key | value`) as the skiplist orders them:
/// by the internal key they start with. Entries borrow as it, so a lookup searches with one
/// built on the stack (`EntryBytes::search`) instead of allocating an `IKey`.
#[derive(ref_cast::RefCast, PartialEq, Eq)]
#[repr(transparent)]
pub struct EntryBytes([u8]);

impl EntryBytes {
    /// A search key (no value) for internal key `ikey`, in a stack buffer when it is short.
    fn search(ikey: &[u8]) -> smallvec::SmallVec<[u8; key::INLINE_KEY_BYTES + 4]> {
        let mut b = smallvec::SmallVec::with_capacity(4 + ikey.len());
        b.extend_from_slice(&(ikey.len() as u32).to_le_bytes());
        b.extend_from_slice(ikey);
        b
    }

    fn new(bytes: &[u8]) -> &EntryBytes {
        ref_cast::RefCast::ref_cast(bytes)
    }

    fn split(&self) -> (&[u8], &[u8]) {
        let n = u32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]]) as usize;
        self.0[4..].split_at(n)
    }
}

impl Ord for EntryBytes {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(self.split().0, other.split().0)
    }
}

impl PartialOrd for EntryBytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::borrow::Borrow<EntryBytes> for IKey {
    fn borrow(&self) -> &EntryBytes {
        EntryBytes::new(&self.0)
    }
}

impl IKey {
    /// The concatenation of `parts`, inside the node when it fits, else in one exact-size heap
    /// buffer (copied once either way).
    fn from_parts(parts: [&[u8]; 4]) -> IKey {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len <= INLINE_ENTRY_BYTES {
            let mut buf = [0u8; INLINE_ENTRY_BYTES];
            let mut at = 0;
            for p in parts {
                buf[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            return IKey(smallvec::SmallVec::from_buf_and_len(buf, len));
        }
        let mut v = Vec::with_capacity(len);
        for p in parts {
            v.extend_from_slice(p);
        }
        IKey(smallvec::SmallVec::from_vec(v))
    }

    fn split(&self) -> (&[u8], &[u8]) {
        EntryBytes::new(&self.0).split()
    }

    /// The internal key.
    pub fn ikey(&self) -> &[u8] {
        self.split().0
    }

    /// The stored value.
    pub fn value(&self) -> &[u8] {
        self.split().1
    }
}

impl Ord for IKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(self.ikey(), other.ikey())
    }
}

impl PartialOrd for IKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a point lookup found in a memtable or table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The newest visible entry holds this value (kind tells inline vs pointer).
    Found(ValueKind, Vec<u8>),
    /// The newest visible entry is a pointer whose value the memtable keeps, and the lookup
    /// asked for kept values (users want values; GC compares pointers).
    Kept(Value),
    /// The newest visible entry is a deletion.
    Deleted,
    /// No entry for the key here.
    Absent,
}

/// Per-entry memory besides the entry's bytes, counted toward the memtable size: the skiplist
/// node (its links, the inline entry buffer, the kept value's handle) and the allocator's
/// header (`node_size_is_what_entry_overhead_counts` checks it).
const ENTRY_OVERHEAD: u64 = 96;

/// A memtable. Inserts come from the single write leader; reads from any thread.
#[derive(Default)]
pub struct Memtable {
    /// Entries, each with its separated value when the memtable keeps it: the
    /// newest writes are read from memory, as an LSM-tree whose memtable holds whole values
    /// serves them, while the log stays the only copy written.
    map: SkipMap<IKey, Option<Kept>>,
    /// Bytes of values kept in memory (bounded by the log the memtable covers,
    /// `Options::memtable_log_bytes`).
    kept_bytes: AtomicU64,
    /// The chunks small kept values are copied into.
    arena: kept::KeptArena,
    /// The user keys in `map`: point lookups of other keys skip the skiplist search.
    keys: key_filter::KeyFilter,
    bytes: AtomicU64,
    /// Log position just past the last record whose ops are in this memtable; set when the
    /// memtable becomes immutable. Once it is flushed, the log before this point is redundant.
    log_end: parking_lot::Mutex<Option<LogPos>>,
    /// Bytes of log whose groups were applied to this memtable (bounds replay at recovery).
    log_bytes: AtomicU64,
    /// Bytes of separated values this memtable points to, per value-log file.
    vlog_bytes: parking_lot::Mutex<std::collections::BTreeMap<u64, u64>>,
}

impl Memtable {
    /// Insert one entry.
    pub fn add(&self, seq: u64, kind: ValueKind, user_key: &[u8], value: &[u8]) {
        self.add_keeping(seq, kind, user_key, value, None);
    }

    /// Insert one entry, keeping `kept` (the value its pointer names) readable from memory.
    fn add_keeping(&self, seq: u64, kind: ValueKind, user_key: &[u8], value: &[u8], kept: Option<Kept>) {
        let ikey_len = user_key.len() + key::TRAILER_LEN;
        let parts: [&[u8]; 4] =
            [&(ikey_len as u32).to_le_bytes(), user_key, &key::pack_trailer(seq, kind as u8).to_le_bytes(), value];
        let entry = IKey::from_parts(parts);
        let size = entry.0.len() as u64 + ENTRY_OVERHEAD;
        self.keys.insert(user_key);
        if let Some(k) = &kept {
            self.kept_bytes.fetch_add(k.value.len() as u64, AtomicOrdering::Relaxed);
        }
        self.map.insert(entry, kept);
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
    }

    /// Insert every op of a log record group that starts at `pos`. The values in `separated`
    /// (`log::separated_values` of these ops) become pointers into the log (the group is
    /// already written there), the rest are stored inline. With `keep` (a shared buffer
    /// holding exactly `ops`, and a size), each pointer entry whose value is at most that size
    /// also keeps it readable from memory.
    pub fn apply_group(
        &self,
        pos: LogPos,
        first_seq: u64,
        ops: &[u8],
        separated: &[SeparatedValue],
        keep: Option<(&Bytes, usize)>,
    ) {
        debug_assert!(keep.is_none_or(|(k, _)| k[..] == *ops), "the kept buffer is not these ops");
        let mut separated = separated.iter().peekable();
        let mut vlog_bytes = 0u64;
        for (seq, (index, op)) in (first_seq..).zip(BatchIter::over(ops).enumerate()) {
            let Ok(op) = op else { break };
            match op {
                BatchOp::Put { key, value } => match separated.next_if(|v| v.op_index as usize == index) {
                    Some(v) => {
                        debug_assert_eq!(v.value_len as usize, value.len(), "separated value {index} is another op's");
                        let ptr = ValuePointer {
                            file: pos.file,
                            offset: pos.offset + v.op_offset,
                            op_len: v.op_len,
                            value_crc: v.value_crc,
                        };
                        // Counted as whole ops, the unit compaction's discard statistics use.
                        vlog_bytes += u64::from(ptr.op_len);
                        let kept = keep
                            .filter(|&(_, max)| v.value_len as usize <= max)
                            .map(|(shared, _)| self.kept(shared, v));
                        self.add_keeping(seq, ValueKind::Pointer, key, &ptr.encoded(), kept);
                    }
                    None => self.add(seq, ValueKind::Value, key, value),
                },
                BatchOp::Delete { key } => self.add(seq, ValueKind::Deletion, key, &[]),
                BatchOp::PutPointer { key, pointer } => {
                    // A value GC moved to a cold value file: counted against that file. A
                    // malformed pointer is stored as it is; reading it reports corruption.
                    if let Some(p) = ValuePointer::decode(pointer) {
                        *self.vlog_bytes.lock().entry(p.file).or_insert(0) += u64::from(p.op_len);
                    }
                    self.add(seq, ValueKind::Pointer, key, pointer)
                }
            }
        }
        debug_assert!(separated.next().is_none(), "separated values left over: the list is not of these ops");
        if vlog_bytes > 0 {
            *self.vlog_bytes.lock().entry(pos.file).or_insert(0) += vlog_bytes;
        }
        self.log_bytes.fetch_add(log::group_len(ops.len()), AtomicOrdering::Relaxed);
    }

    /// The value of separated op `v` of `ops` to keep: a copy in the arena, or a slice of a
    /// large value's buffer.
    fn kept(&self, ops: &Bytes, v: &SeparatedValue) -> Kept {
        // The value is the op's last bytes.
        let end = v.op_offset as usize - log::HEADER_LEN + v.op_len as usize;
        let range = end - v.value_len as usize..end;
        match v.value_len as usize <= kept::COPY_MAX_BYTES {
            true => Kept { value: self.arena.keep(&ops[range]), alone: false },
            false => Kept { value: ops.slice(range), alone: ops.len() == v.op_len as usize },
        }
    }

    /// A memtable whose kept values go into chunks of `pool`, reused across memtables.
    pub fn with_pool(pool: Arc<ChunkPool>) -> Memtable {
        Memtable { arena: kept::KeptArena::with_pool(pool), ..Memtable::default() }
    }

    /// Bytes of separated values the memtable keeps in memory.
    pub fn kept_bytes(&self) -> u64 {
        self.kept_bytes.load(AtomicOrdering::Relaxed)
    }

    /// Bytes of log this memtable covers: replaying it after a crash reads this much.
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes.load(AtomicOrdering::Relaxed)
    }

    /// Bytes of separated values referenced (as whole log ops), per value-log file.
    pub fn vlog_bytes(&self) -> std::collections::BTreeMap<u64, u64> {
        self.vlog_bytes.lock().clone()
    }

    /// Approximate memory used.
    pub fn approximate_bytes(&self) -> u64 {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn set_log_end(&self, pos: LogPos) {
        *self.log_end.lock() = Some(pos);
    }

    pub fn log_end(&self) -> Option<LogPos> {
        *self.log_end.lock()
    }

    /// The smallest and largest user key held (`None` when empty).
    pub fn user_key_range(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let lo = key::parse_internal_key(self.map.front()?.key().ikey())?.user_key.to_vec();
        let hi = key::parse_internal_key(self.map.back()?.key().ikey())?.user_key.to_vec();
        Some((lo, hi))
    }

    /// Newest entry for `user_key` with seq <= `seq`; with `kept`, a pointer whose value this
    /// memtable keeps answers with the value.
    pub fn get(&self, user_key: &[u8], seq: u64, kept: bool) -> Lookup {
        if !self.keys.may_contain(user_key) {
            return Lookup::Absent;
        }
        let seek = EntryBytes::search(&key::seek_key_inline(user_key, seq));
        let Some(e) = self.map.lower_bound(Bound::Included(EntryBytes::new(&seek))) else {
            return Lookup::Absent;
        };
        let Some(p) = key::parse_internal_key(e.key().ikey()) else {
            return Lookup::Absent;
        };
        if p.user_key != user_key {
            return Lookup::Absent;
        }
        match (p.kind, e.value()) {
            (ValueKind::Deletion, _) => Lookup::Deleted,
            (_, Some(k)) if kept => Lookup::Kept(Value::from(k.value.clone())),
            (kind, _) => Lookup::Found(kind, e.key().value().to_vec()),
        }
    }

    /// Sequence number of the newest entry for `user_key`, of any kind (`None`: none here).
    /// Value-log GC asks it to learn whether a key was written after it checked the key.
    pub fn newest_seq(&self, user_key: &[u8]) -> Option<u64> {
        if !self.keys.may_contain(user_key) {
            return None;
        }
        let seek = EntryBytes::search(&key::seek_key_inline(user_key, key::MAX_SEQ));
        let e = self.map.lower_bound(Bound::Included(EntryBytes::new(&seek)))?;
        let p = key::parse_internal_key(e.key().ikey())?;
        (p.user_key == user_key).then_some(p.seq)
    }

    /// Visit every pointer entry whose value this memtable keeps: `(internal key, encoded
    /// pointer, value, alone)` (a flush hands them to the value cache: as they are when
    /// `alone`, else as copies, which pin nothing else).
    pub fn for_each_kept(&self, mut f: impl FnMut(&[u8], &[u8], &Bytes, bool)) {
        for e in self.map.iter() {
            if let Some(k) = e.value().as_ref() {
                f(e.key().ikey(), e.key().value(), &k.value, k.alone);
            }
        }
    }

    /// Visit every entry in order without copying (used by flushes).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        for e in self.map.iter() {
            f(e.key().ikey(), e.key().value())?;
        }
        Ok(())
    }

    /// An iterator over the whole memtable (it keeps the memtable alive).
    pub fn iter(self: &Arc<Self>) -> MemIter {
        MemIter { at: MemCursor::new(Arc::clone(self), |_| None) }
    }
}

/// A skiplist entry of a memtable: it holds the node (reference-counted), so stepping follows
/// the list's links instead of searching it again, and reads borrow the entry in place.
type EntryAt<'a> = Option<crossbeam_skiplist::map::Entry<'a, IKey, Option<Kept>>>;

self_cell::self_cell!(
    /// A memtable kept alive with an entry of it.
    struct MemCursor {
        owner: Arc<Memtable>,
        #[covariant]
        dependent: EntryAt,
    }
);

/// Iterator over a memtable, in internal-key order.
pub struct MemIter {
    at: MemCursor,
}

impl MemIter {
    /// Move to `f(map, current entry)`.
    fn go(&mut self, f: impl for<'a> FnOnce(&'a SkipMap<IKey, Option<Kept>>, &EntryAt<'a>) -> EntryAt<'a>) {
        self.at.with_dependent_mut(|mem, at| *at = f(&mem.map, at));
    }

    fn entry(&self) -> &crossbeam_skiplist::map::Entry<'_, IKey, Option<Kept>> {
        debug_assert!(self.valid(), "memtable iterator read while invalid");
        match self.at.borrow_dependent() {
            Some(e) => e,
            None => unreachable!("memtable iterator read while invalid"),
        }
    }
}

impl InternalIterator for MemIter {
    fn valid(&self) -> bool {
        self.at.borrow_dependent().is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.go(|map, _| map.front());
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.go(|map, _| map.back());
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let t = EntryBytes::search(target);
        self.go(|map, _| map.lower_bound(Bound::Included(EntryBytes::new(&t))));
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.go(|_, at| at.as_ref().and_then(|e| e.next()));
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.go(|_, at| at.as_ref().and_then(|e| e.prev()));
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.entry().key().ikey()
    }
    fn value(&self) -> &[u8] {
        self.entry().key().value()
    }
    fn kept_value(&self) -> Option<&Bytes> {
        self.entry().value().as_ref().map(|k| &k.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_size_is_what_entry_overhead_counts() {
        // A node: links and height, the entry buffer, the kept value, one tower slot; the entry
        // bytes inside the buffer are counted apart.
        let node = 8 + std::mem::size_of::<IKey>() + std::mem::size_of::<Option<Kept>>() + 8;
        // Besides a 56-byte entry (a 24-byte key and a value pointer) held inside the node: the
        // node and the allocator's 16-byte header.
        let overhead = node + 16 - 56;
        let counted = ENTRY_OVERHEAD as usize;
        assert!(counted * 4 >= overhead * 3 && counted * 4 <= overhead * 5, "node {node} bytes, counted {counted}");
    }

    #[test]
    fn get_sees_newest_visible_version() {
        let m = Memtable::default();
        m.add(1, ValueKind::Value, b"k", b"v1");
        m.add(2, ValueKind::Value, b"k", b"v2");
        m.add(3, ValueKind::Deletion, b"k", b"");
        assert_eq!(m.get(b"k", 1, true), Lookup::Found(ValueKind::Value, b"v1".to_vec()));
        assert_eq!(m.get(b"k", 2, true), Lookup::Found(ValueKind::Value, b"v2".to_vec()));
        assert_eq!(m.get(b"k", 9, true), Lookup::Deleted);
        assert_eq!(m.get(b"j", 9, true), Lookup::Absent);
        assert_eq!(m.get(b"k", 0, true), Lookup::Absent);
    }

    #[test]
    fn iterator_walks_both_ways_across_batches() {
        let m = Arc::new(Memtable::default());
        for i in 0..300u32 {
            m.add(i as u64 + 1, ValueKind::Value, format!("{i:05}").as_bytes(), b"v");
        }
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut fwd = Vec::new();
        while it.valid() {
            fwd.push(key::user_key(it.key()).to_vec());
            it.next().unwrap();
        }
        assert_eq!(fwd.len(), 300);
        it.seek_to_last().unwrap();
        let mut back = Vec::new();
        while it.valid() {
            back.push(key::user_key(it.key()).to_vec());
            it.prev().unwrap();
        }
        back.reverse();
        assert_eq!(fwd, back);
        // Direction changes in the middle.
        it.seek(&key::seek_key(b"00100", u64::MAX >> 8)).unwrap();
        assert_eq!(key::user_key(it.key()), b"00100");
        it.prev().unwrap();
        assert_eq!(key::user_key(it.key()), b"00099");
        it.next().unwrap();
        assert_eq!(key::user_key(it.key()), b"00100");
        it.next().unwrap();
        assert_eq!(key::user_key(it.key()), b"00101");
    }
}
