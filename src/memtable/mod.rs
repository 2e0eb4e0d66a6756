//! The memtable: concurrent skiplists of internal keys, one per keyspace, holding the newest
//! writes until they are flushed to SSTables (one per keyspace, in one step). Size-bounded by
//! the DB as a whole — the sum over keyspaces is the write buffer — and switched as a whole,
//! so every keyspace's entries before one log position are flushed together and the log has
//! one head.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

mod kept;
mod key_filter;
mod skiplist;

pub use kept::ChunkPool;

use crate::comparator::KeyOrder;
use crate::error::Result;
use crate::internal_iter::InternalIterator;
use crate::key::{self, ValueKind};
use crate::log::{self, LogPos, SeparatedValue};
use crate::range_del::{Fragments, RangeTombstone};
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

/// What a point lookup found in a memtable or table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The newest visible entry holds this value (kind tells inline vs pointer), written at
    /// this sequence number.
    Found(ValueKind, Vec<u8>, u64),
    /// The newest visible entry is a pointer whose value the memtable keeps, and the lookup
    /// asked for kept values (users want values; GC compares pointers).
    Kept(Value, u64),
    /// The newest visible entry is a deletion.
    Deleted,
    /// No entry for the key here.
    Absent,
}

/// One keyspace's entries in a memtable.
struct Slot {
    keyspace: u32,
    /// Entries, each with its separated value when the memtable keeps it: the newest writes
    /// are read from memory, as an LSM-tree whose memtable holds whole values serves them,
    /// while the log stays the only copy written.
    map: skiplist::SkipList<Kept>,
    /// Its range tombstones (rare: a lookup of a keyspace without any pays one atomic load).
    range_dels: SlotTombstones,
}

/// A keyspace's range tombstones in a memtable: the list as written, and its fragments, made
/// by the first reader after a change and shared by every reader until the next.
#[derive(Default)]
struct SlotTombstones {
    any: AtomicBool,
    list: parking_lot::Mutex<(Vec<RangeTombstone>, Option<Arc<Fragments>>)>,
}

impl SlotTombstones {
    fn add(&self, t: RangeTombstone) {
        let mut l = self.list.lock();
        l.0.push(t);
        l.1 = None;
        self.any.store(true, AtomicOrdering::Release);
    }

    /// The fragments (`None`: no tombstone).
    fn fragments(&self) -> Option<Arc<Fragments>> {
        if !self.any.load(AtomicOrdering::Acquire) {
            return None;
        }
        let mut l = self.list.lock();
        let (list, made) = &mut *l;
        Some(made.get_or_insert_with(|| Arc::new(Fragments::build(list.iter(), None))).clone())
    }

    fn is_empty(&self) -> bool {
        !self.any.load(AtomicOrdering::Acquire)
    }
}

/// A memtable. Inserts come from the single write leader; reads from any thread.
pub struct Memtable {
    /// A list per keyspace the memtable was made for, the default keyspace's first. Fixed at
    /// creation (a new keyspace starts with the next memtable), so readers hold plain
    /// references into it.
    slots: Box<[Slot]>,
    /// Bytes of values kept in memory (bounded by the log the memtable covers,
    /// `Options::memtable_log_bytes`).
    kept_bytes: AtomicU64,
    /// The chunks small kept values are copied into.
    arena: kept::KeptArena,
    /// The user keys in the lists (hashed with their keyspace): point lookups of other keys
    /// skip the skiplist search.
    keys: key_filter::KeyFilter,
    bytes: AtomicU64,
    /// Bytes of its entries as a table stores them (user key, trailer, inline value or
    /// pointer): about the size of the table a flush writes, without the skiplist's nodes.
    entry_bytes: AtomicU64,
    /// Log position just past the last record whose ops are in this memtable; set when the
    /// memtable becomes immutable. Once it is flushed, the log before this point is redundant.
    log_end: parking_lot::Mutex<Option<LogPos>>,
    /// Bytes of log whose groups were applied to this memtable (bounds replay at recovery).
    log_bytes: AtomicU64,
    /// Bytes of separated values this memtable points to, per value-log file.
    vlog_bytes: parking_lot::Mutex<std::collections::BTreeMap<u64, u64>>,
    /// The part of `vlog_bytes` that GC moved (pointer puts): those values overwrite no live
    /// value of their key, only the copy GC collects.
    moved_vlog_bytes: AtomicU64,
}

impl Default for Memtable {
    /// A memtable of the default keyspace only, of bytewise-ordered keys, its nodes and kept
    /// values on the heap.
    fn default() -> Self {
        Memtable::new(None, &[], KeyOrder::default())
    }
}

impl Memtable {
    /// A memtable for the default keyspace and `keyspaces` (of keys in `order`, the
    /// database's), taking chunks from `pool`.
    fn new(pool: Option<&Arc<ChunkPool>>, keyspaces: &[u32], order: KeyOrder) -> Memtable {
        let ids = std::iter::once(0).chain(keyspaces.iter().copied().filter(|&k| k != 0));
        let slots = ids
            .map(|keyspace| Slot {
                keyspace,
                map: skiplist::SkipList::new(pool.map(|p| p.nodes.clone()), order.clone()),
                range_dels: SlotTombstones::default(),
            })
            .collect();
        Memtable {
            slots,
            kept_bytes: AtomicU64::new(0),
            arena: pool.map_or_else(kept::KeptArena::default, |p| kept::KeptArena::with_pool(p.clone())),
            keys: key_filter::KeyFilter::default(),
            bytes: AtomicU64::new(0),
            entry_bytes: AtomicU64::new(0),
            log_end: parking_lot::Mutex::new(None),
            log_bytes: AtomicU64::new(0),
            vlog_bytes: parking_lot::Mutex::new(std::collections::BTreeMap::new()),
            moved_vlog_bytes: AtomicU64::new(0),
        }
    }

    /// The list of keyspace `ks`, if this memtable was made for it.
    fn slot(&self, ks: u32) -> Option<&Slot> {
        match ks {
            0 => self.slots.first(),
            _ => self.slots.iter().find(|s| s.keyspace == ks),
        }
    }

    /// The keyspaces this memtable holds lists for (the default keyspace first).
    pub fn keyspaces(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().map(|s| s.keyspace)
    }

    /// Insert one entry into keyspace `ks` (ignored if the memtable has no list for it: a
    /// keyspace dropped before it was made).
    pub fn add(&self, ks: u32, seq: u64, kind: ValueKind, user_key: &[u8], value: &[u8]) {
        self.add_keeping(ks, seq, kind, user_key, value, None);
    }

    /// Insert one entry, keeping `kept` (the value its pointer names) readable from memory.
    fn add_keeping(&self, ks: u32, seq: u64, kind: ValueKind, user_key: &[u8], value: &[u8], kept: Option<Kept>) {
        let Some(slot) = self.slot(ks) else { return };
        self.keys.insert(ks, user_key);
        if let Some(k) = &kept {
            self.kept_bytes.fetch_add(k.value.len() as u64, AtomicOrdering::Relaxed);
        }
        let node_bytes = slot.map.insert(user_key, key::pack_trailer(seq, kind as u8), value, kept);
        self.bytes.fetch_add(node_bytes as u64, AtomicOrdering::Relaxed);
        self.entry_bytes.fetch_add((user_key.len() + 8 + value.len()) as u64, AtomicOrdering::Relaxed);
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
            let Ok((ks, op)) = op else { break };
            match op {
                BatchOp::Put { key, value, expires_at_ms } => match separated.next_if(|v| v.op_index as usize == index)
                {
                    // A keyspace this memtable has no list for (dropped): nothing to insert
                    // or count.
                    Some(_) if self.slot(ks).is_none() => {}
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
                        match expires_at_ms {
                            None => self.add_keeping(ks, seq, ValueKind::Pointer, key, &ptr.encoded(), kept),
                            Some(at) => {
                                let entry = expiring(at, &ptr.encoded());
                                self.add_keeping(ks, seq, ValueKind::ExpiringPointer, key, &entry, kept)
                            }
                        }
                    }
                    None => match expires_at_ms {
                        None => self.add(ks, seq, ValueKind::Value, key, value),
                        Some(at) => self.add(ks, seq, ValueKind::ExpiringValue, key, &expiring(at, value)),
                    },
                },
                BatchOp::Delete { key } => self.add(ks, seq, ValueKind::Deletion, key, &[]),
                // Operands stay inline whatever their size: reads fold them with the entries
                // beneath, and value-log GC sees only puts.
                BatchOp::Merge { key, operand } => self.add(ks, seq, ValueKind::Merge, key, operand),
                BatchOp::PutPointer { key, pointer, expires_at_ms } => {
                    // A value GC moved to a cold value file: counted against that file. A
                    // malformed pointer is stored as it is; reading it reports corruption.
                    if let Some(p) = ValuePointer::decode(pointer).filter(|_| self.slot(ks).is_some()) {
                        *self.vlog_bytes.lock().entry(p.file).or_insert(0) += u64::from(p.op_len);
                        self.moved_vlog_bytes.fetch_add(u64::from(p.op_len), AtomicOrdering::Relaxed);
                    }
                    match expires_at_ms {
                        None => self.add(ks, seq, ValueKind::Pointer, key, pointer),
                        Some(at) => self.add(ks, seq, ValueKind::ExpiringPointer, key, &expiring(at, pointer)),
                    }
                }
                BatchOp::DeleteRange { begin, end } => self.add_range_tombstone(ks, seq, begin, end),
            }
        }
        debug_assert!(separated.next().is_none(), "separated values left over: the list is not of these ops");
        if vlog_bytes > 0 {
            *self.vlog_bytes.lock().entry(pos.file).or_insert(0) += vlog_bytes;
        }
        self.log_bytes.fetch_add(log::group_len(ops.len()), AtomicOrdering::Relaxed);
    }

    /// Record the range delete `[begin, end)` at `seq` in keyspace `ks` (ignored for a keyspace
    /// the memtable has no list for, and for an empty range, which deletes nothing).
    pub fn add_range_tombstone(&self, ks: u32, seq: u64, begin: &[u8], end: &[u8]) {
        let Some(slot) = self.slot(ks) else { return };
        let t = RangeTombstone { begin: begin.to_vec(), end: end.to_vec(), seq };
        if t.is_empty() {
            return;
        }
        // Counted like an entry: a memtable of range deletes fills and is flushed too.
        let bytes = t.size_bytes() as u64;
        self.bytes.fetch_add(bytes + 48, AtomicOrdering::Relaxed);
        self.entry_bytes.fetch_add(bytes, AtomicOrdering::Relaxed);
        slot.range_dels.add(t);
    }

    /// Keyspace `ks`'s range tombstones, fragmented (`None`: it has none here).
    pub fn range_tombstones(&self, ks: u32) -> Option<Arc<Fragments>> {
        self.slot(ks)?.range_dels.fragments()
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

    /// A memtable for the default keyspace and `keyspaces` (keys in `order`), its nodes and
    /// kept values on the heap (recovery's replay).
    pub fn for_keyspaces(keyspaces: &[u32], order: KeyOrder) -> Memtable {
        Memtable::new(None, keyspaces, order)
    }

    /// A memtable for the default keyspace and `keyspaces` (keys in `order`) whose nodes and
    /// kept values go into chunks of `pool`, reused across memtables.
    pub fn with_pool(pool: Arc<ChunkPool>, keyspaces: &[u32], order: KeyOrder) -> Memtable {
        Memtable::new(Some(&pool), keyspaces, order)
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

    /// Bytes of separated values keyspace `ks`'s pointers here reference, per value-log file
    /// (a walk of its list: asked for the list of a keyspace dropped before the flush).
    pub fn vlog_bytes_in(&self, ks: u32) -> std::collections::BTreeMap<u64, u64> {
        let mut out = std::collections::BTreeMap::new();
        let Some(slot) = self.slot(ks) else { return out };
        for e in slot.map.iter() {
            let pointer = key::parse_internal_key(e.key()).and_then(|k| crate::ttl::pointer_bytes(k.kind, e.value()));
            if let Some(p) = pointer.and_then(ValuePointer::decode) {
                *out.entry(p.file).or_insert(0) += u64::from(p.op_len);
            }
        }
        out
    }

    /// The part of `vlog_bytes` that value-log GC moved there.
    pub fn moved_vlog_bytes(&self) -> u64 {
        self.moved_vlog_bytes.load(AtomicOrdering::Relaxed)
    }

    /// Approximate memory used.
    pub fn approximate_bytes(&self) -> u64 {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Bytes of the entries as a table stores them: the size of the table it flushes to,
    /// in the unit the policies compare tables in (Monkey's run sizes).
    pub fn entry_bytes(&self) -> u64 {
        self.entry_bytes.load(AtomicOrdering::Relaxed)
    }

    /// The table bytes a memtable of `buffer_bytes` (as `approximate_bytes` counts them)
    /// flushes to, at this memtable's ratio of entry bytes to memory; `None` while empty.
    pub fn flushed_bytes_of(&self, buffer_bytes: u64) -> Option<u64> {
        let mem = self.approximate_bytes();
        (mem > 0).then(|| (buffer_bytes as u128 * self.entry_bytes() as u128 / mem as u128) as u64)
    }

    /// Whether no keyspace's list holds an entry or a range tombstone.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|s| s.map.len() == 0 && s.range_dels.is_empty())
    }

    /// Whether keyspace `ks`'s list holds no entry and no range tombstone.
    pub fn is_empty_in(&self, ks: u32) -> bool {
        self.slot(ks).is_none_or(|s| s.map.len() == 0 && s.range_dels.is_empty())
    }

    pub fn set_log_end(&self, pos: LogPos) {
        *self.log_end.lock() = Some(pos);
    }

    pub fn log_end(&self) -> Option<LogPos> {
        *self.log_end.lock()
    }

    /// The smallest and largest user key keyspace `ks` holds here, its range tombstones'
    /// ranges included (`None` when empty).
    pub fn user_key_range(&self, ks: u32) -> Option<(Vec<u8>, Vec<u8>)> {
        let slot = self.slot(ks)?;
        let map = &slot.map;
        let first = map.first().and_then(|e| Some(key::parse_internal_key(e.key())?.user_key.to_vec()));
        let last = map.last().and_then(|e| Some(key::parse_internal_key(e.key())?.user_key.to_vec()));
        let mut range = first.zip(last);
        for t in slot.range_dels.fragments().iter().flat_map(|f| f.tombstones().collect::<Vec<_>>()) {
            range = Some(match range {
                None => (t.begin, t.end),
                Some((lo, hi)) => (lo.min(t.begin), hi.max(t.end)),
            });
        }
        range
    }

    /// Bytes of keyspace `ks`'s entries as a table stores them (its share of `entry_bytes`,
    /// counted by a walk of its list: flushes ask once per keyspace).
    pub fn entry_bytes_in(&self, ks: u32) -> u64 {
        if self.slots.len() == 1 {
            return self.entry_bytes();
        }
        let Some(slot) = self.slot(ks) else { return 0 };
        let tombstones = slot.range_dels.list.lock().0.iter().map(|t| t.size_bytes() as u64).sum::<u64>();
        tombstones + slot.map.iter().map(|e| (e.key().len() + e.value().len()) as u64).sum::<u64>()
    }

    /// Newest entry for `user_key` of keyspace `ks` with seq <= `seq`; with `kept`, a pointer
    /// whose value this memtable keeps answers with the value.
    pub fn get(&self, ks: u32, user_key: &[u8], seq: u64, kept: bool) -> Lookup {
        if !self.keys.may_contain(ks, user_key) {
            return Lookup::Absent;
        }
        let Some(slot) = self.slot(ks) else { return Lookup::Absent };
        let Some(e) = slot.map.lower_bound(&key::seek_key_inline(user_key, seq)) else {
            return Lookup::Absent;
        };
        let Some(p) = key::parse_internal_key(e.key()) else {
            return Lookup::Absent;
        };
        if p.user_key != user_key {
            return Lookup::Absent;
        }
        match (p.kind, e.kept()) {
            (ValueKind::Deletion, _) => Lookup::Deleted,
            // An expiring pointer answers with its entry: the reader judges its expiry.
            (ValueKind::Pointer, Some(k)) if kept => Lookup::Kept(Value::from(k.value.clone()), p.seq),
            (kind, _) => Lookup::Found(kind, e.value().to_vec(), p.seq),
        }
    }

    /// Sequence number of the newest write to `user_key`, of any kind, range deletes covering
    /// it included (`None`: none here). Value-log GC asks it to learn whether a key was
    /// written after it checked the key.
    pub fn newest_seq(&self, ks: u32, user_key: &[u8]) -> Option<u64> {
        let slot = self.slot(ks)?;
        let deleted = slot.range_dels.fragments().map_or(0, |f| f.covering_seq(user_key, key::MAX_SEQ));
        let entry = || {
            if !self.keys.may_contain(ks, user_key) {
                return None;
            }
            let e = slot.map.lower_bound(&key::seek_key_inline(user_key, key::MAX_SEQ))?;
            let p = key::parse_internal_key(e.key())?;
            (p.user_key == user_key).then_some(p.seq)
        };
        match (entry(), deleted) {
            (e, 0) => e,
            (e, d) => Some(e.map_or(d, |e| e.max(d))),
        }
    }

    /// A key of keyspace `ks` in `[lower, upper)` (`None`: unbounded) written here after
    /// `seq`, or the start of a range delete after `seq` overlapping it (`None`: no such write
    /// here). A serializable transaction's commit asks it for each range it scanned: the walk
    /// costs the entries this memtable holds in the range.
    pub fn written_in_range_since(
        &self,
        ks: u32,
        (lower, upper): (Option<&[u8]>, Option<&[u8]>),
        seq: u64,
        order: &KeyOrder,
    ) -> Option<Vec<u8>> {
        let slot = self.slot(ks)?;
        let below_upper = |k: &[u8]| upper.is_none_or(|u| order.compare_user(k, u).is_lt());
        let start = match lower {
            Some(l) => slot.map.lower_bound(&key::seek_key_inline(l, key::MAX_SEQ)),
            None => slot.map.first(),
        };
        for e in std::iter::successors(start, |e| e.next()) {
            let p = key::parse_internal_key(e.key())?;
            if !below_upper(p.user_key) {
                break;
            }
            if p.seq > seq {
                return Some(p.user_key.to_vec());
            }
        }
        // Range deletes are of the bytewise order only.
        let fragments = slot.range_dels.fragments()?;
        let found = fragments.tombstones().find_map(|t| {
            let overlaps = lower.is_none_or(|l| t.end.as_slice() > l) && upper.is_none_or(|u| t.begin.as_slice() < u);
            (t.seq > seq && overlaps).then(|| match lower {
                Some(l) if l > t.begin.as_slice() => l.to_vec(),
                _ => t.begin.clone(),
            })
        });
        found
    }

    /// Visit every pointer entry whose value this memtable keeps: `(internal key, encoded
    /// pointer, value, alone)` (a flush hands them to the value cache: as they are when
    /// `alone`, else as copies, which pin nothing else).
    pub fn for_each_kept(&self, mut f: impl FnMut(&[u8], &[u8], &Bytes, bool)) {
        for e in self.slots.iter().flat_map(|s| s.map.iter()) {
            if let Some(k) = e.kept() {
                f(e.key(), e.value(), &k.value, k.alone);
            }
        }
    }

    /// Visit every entry of keyspace `ks` in order without copying (used by flushes).
    pub fn for_each(&self, ks: u32, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        let Some(slot) = self.slot(ks) else { return Ok(()) };
        for e in slot.map.iter() {
            f(e.key(), e.value())?;
        }
        Ok(())
    }

    /// An iterator over keyspace `ks`'s entries (it keeps the memtable alive).
    pub fn iter(self: &Arc<Self>, ks: u32) -> MemIter {
        // A memtable made before the keyspace existed holds nothing of it: an empty list.
        let slot = self.slots.iter().position(|s| s.keyspace == ks);
        MemIter { mem: Arc::clone(self), slot, at: None }
    }
}

/// Iterator over a memtable, in internal-key order: it holds the memtable and a position in
/// its list, so stepping follows the list's links instead of searching it again.
pub struct MemIter {
    mem: Arc<Memtable>,
    /// The keyspace's list (`None`: the memtable has none, the iterator is empty).
    slot: Option<usize>,
    at: Option<skiplist::RawEntry<Kept>>,
}

impl MemIter {
    fn entry(&self) -> skiplist::Entry<'_, Kept> {
        debug_assert!(self.valid(), "memtable iterator read while invalid");
        match self.at {
            // SAFETY: `at` came from an entry of this memtable's list `slot` (set whenever `at`
            // is), which `mem` keeps alive.
            Some(raw) => unsafe { self.mem.slots[self.slot.unwrap_or(0)].map.resume(raw) },
            None => unreachable!("memtable iterator read while invalid"),
        }
    }

    fn go(&mut self, to: Option<skiplist::Entry<'_, Kept>>) {
        self.at = to.map(|e| e.raw());
    }
}

impl InternalIterator for MemIter {
    fn valid(&self) -> bool {
        self.at.is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let mem = Arc::clone(&self.mem);
        self.go(self.slot.and_then(|i| mem.slots[i].map.first()));
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let mem = Arc::clone(&self.mem);
        self.go(self.slot.and_then(|i| mem.slots[i].map.last()));
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let mem = Arc::clone(&self.mem);
        self.go(self.slot.and_then(|i| mem.slots[i].map.lower_bound(target)));
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.at = self.at.and_then(|_| self.entry().next()).map(|e| e.raw());
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.at = self.at.and_then(|_| self.entry().prev()).map(|e| e.raw());
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.entry().key()
    }
    fn value(&self) -> &[u8] {
        self.entry().value()
    }
    fn kept_value(&self) -> Option<&Bytes> {
        self.entry().kept().map(|k| &k.value)
    }
}

/// An expiring entry's bytes: the expiry time, then the value or pointer (`ttl.rs`).
fn expiring(expires_at_ms: u64, bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(crate::ttl::EXPIRY_LEN + bytes.len());
    v.extend_from_slice(&expires_at_ms.to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_moved_values_are_counted_apart_from_users_values() {
        let m = Memtable::default();
        let mut batch = crate::WriteBatch::new();
        batch.put(b"user", [7u8; 300]);
        let moved = ValuePointer { file: 9, offset: 100, op_len: 4000, value_crc: 1 };
        batch.put_pointer(0, b"moved", &moved.encoded(), None);
        let separated = log::separated_values(&batch.rep, 64);
        m.apply_group(LogPos { file: 3, offset: 0 }, 1, &batch.rep, &separated, None);
        let per_file = m.vlog_bytes();
        assert_eq!(per_file.get(&9), Some(&4000), "the moved value counts against its cold file");
        assert_eq!(per_file.get(&3), Some(&u64::from(separated[0].op_len)), "the user's against the log");
        assert_eq!(m.moved_vlog_bytes(), 4000, "only GC's move is counted as moved");
    }

    #[test]
    fn entry_bytes_are_what_a_table_stores_and_scale_a_buffer_to_its_flushed_table() {
        let m = Memtable::default();
        assert_eq!(m.flushed_bytes_of(4 << 20), None, "nothing to scale by yet");
        for i in 0..1000u32 {
            m.add(0, u64::from(i) + 1, ValueKind::Value, format!("key{i:013}").as_bytes(), &[7u8; 100]);
        }
        // 16 key bytes, the 8-byte trailer and the 100-byte value, without the nodes.
        assert_eq!(m.entry_bytes(), 1000 * (16 + 8 + 100));
        let full = m.flushed_bytes_of(m.approximate_bytes()).expect("not empty");
        assert_eq!(full, m.entry_bytes(), "a buffer as large as this memtable flushes its entries");
        let flushed = m.flushed_bytes_of(4 << 20).expect("not empty");
        assert!(flushed < 4 << 20, "the nodes make a buffer larger than its table: {flushed}");
    }

    #[test]
    fn the_size_counts_each_entry_node_whole() {
        let m = Memtable::default();
        let ptr = [9u8; 29];
        for i in 0..1000u32 {
            m.add(0, u64::from(i) + 1, ValueKind::Pointer, format!("key{i:013}").as_bytes(), &ptr);
        }
        // Per entry: the node's fixed part and at least one link, 16 + 8 key bytes, 29 value bytes.
        let per_entry = m.approximate_bytes() / 1000;
        let least = (std::mem::size_of::<Option<Kept>>() + 20 + 8 + 24 + 29) as u64;
        assert!(per_entry >= least && per_entry <= least + 24, "{per_entry} bytes per entry, least {least}");
    }

    #[test]
    fn get_sees_newest_visible_version() {
        let m = Memtable::default();
        m.add(0, 1, ValueKind::Value, b"k", b"v1");
        m.add(0, 2, ValueKind::Value, b"k", b"v2");
        m.add(0, 3, ValueKind::Deletion, b"k", b"");
        assert_eq!(m.get(0, b"k", 1, true), Lookup::Found(ValueKind::Value, b"v1".to_vec(), 1));
        assert_eq!(m.get(0, b"k", 2, true), Lookup::Found(ValueKind::Value, b"v2".to_vec(), 2));
        assert_eq!(m.get(0, b"k", 9, true), Lookup::Deleted);
        assert_eq!(m.get(0, b"j", 9, true), Lookup::Absent);
        assert_eq!(m.get(0, b"k", 0, true), Lookup::Absent);
    }

    #[test]
    fn iterator_walks_both_ways_across_batches() {
        let m = Arc::new(Memtable::default());
        for i in 0..300u32 {
            m.add(0, i as u64 + 1, ValueKind::Value, format!("{i:05}").as_bytes(), b"v");
        }
        let mut it = m.iter(0);
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
