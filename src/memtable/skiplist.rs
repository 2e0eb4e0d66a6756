//! The memtable's ordered map: an insert-only skiplist of internal keys whose nodes live in
//! arena chunks (LevelDB's memtable design). One writer at a time (an insert takes a lock),
//! any number of lock-free readers. Nothing is unlinked before the whole list drops, so a
//! reader holds a plain pointer (no epoch pin, no reference count), an insert is one bump of
//! the arena instead of two heap allocations, and dropping a memtable hands a few chunks back
//! to the pool instead of freeing one allocation per entry.
//!
//! A node is one arena allocation:
//!
//! ```text
//! Head<V> { kept: Option<V>, trailer: u64, ukey_len: u32, value_len: u32, height: u32 }
//! | tower: height × AtomicPtr (links, level 0 first)
//! | user key | trailer (8 bytes LE) | value
//! ```
//!
//! Entries are ordered as `KeyOrder::compare_internal` orders internal keys: user key ascending
//! (in the list's `KeyOrder`), then trailer (sequence number) descending.

use std::cmp::Ordering;
use std::mem::{align_of, size_of, MaybeUninit};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering as Atomic};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::comparator::KeyOrder;

/// Levels at most: with a branching factor of 4, enough for 4^12 = 16 M entries per list.
const MAX_HEIGHT: usize = 12;

/// One in this many nodes of a level also links the level above.
const BRANCHING: u64 = 4;

/// Bytes of one arena chunk; a node larger than a quarter of it gets a chunk of its own.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// Arena memory, in words so every node is 8-byte aligned.
pub(crate) type Chunk = Box<[MaybeUninit<u64>]>;

/// Spent arena chunks of dropped memtables, reused by new ones: fresh memory costs a page
/// fault per 4 KiB on first touch, reused memory nothing.
pub(crate) struct ChunkStash {
    chunks: Mutex<Vec<Chunk>>,
    max_chunks: usize,
}

impl ChunkStash {
    pub(crate) fn new(max_chunks: usize) -> ChunkStash {
        ChunkStash { chunks: Mutex::new(Vec::new()), max_chunks }
    }

    fn take(&self) -> Chunk {
        self.chunks.lock().pop().unwrap_or_else(new_chunk)
    }

    fn give_back(&self, spent: impl Iterator<Item = Chunk>) {
        let mut chunks = self.chunks.lock();
        let room = self.max_chunks.saturating_sub(chunks.len());
        chunks.extend(spent.take(room));
    }
}

#[repr(C)]
struct Head<V> {
    kept: Option<V>,
    trailer: u64,
    ukey_len: u32,
    value_len: u32,
    height: u32,
}

fn new_chunk() -> Chunk {
    Box::new_uninit_slice(CHUNK_BYTES / 8)
}

/// Bytes of a node's fixed part; the tower follows it.
const fn head_bytes<V>() -> usize {
    size_of::<Head<V>>()
}

/// The bump allocator the writer owns. Chunks are held as raw pointers (made back into boxes
/// only when the arena drops), so every node pointer derives from its chunk's own pointer.
struct Arena {
    /// Chunks nodes are bumped into; the last one is the current one.
    chunks: Vec<NonNull<[MaybeUninit<u64>]>>,
    /// Blocks of one node each (large nodes, the head).
    large: Vec<NonNull<[MaybeUninit<u64>]>>,
    /// Words used in the current chunk.
    used: usize,
    stash: Option<Arc<ChunkStash>>,
}

impl Arena {
    /// `bytes` (rounded up to whole words) of uninitialised, 8-byte aligned memory that stays
    /// where it is until the arena drops.
    fn alloc(&mut self, bytes: usize) -> NonNull<u8> {
        let words = bytes.div_ceil(8);
        if words * 8 > CHUNK_BYTES / 4 {
            return self.alloc_own(bytes);
        }
        let room = self.chunks.last().map_or(0, |c| c.len() - self.used);
        if room < words {
            let fresh = self.stash.as_ref().map_or_else(new_chunk, |stash| stash.take());
            self.chunks.push(NonNull::from(Box::leak(fresh)));
            self.used = 0;
        }
        let (chunk, used) = (self.chunks[self.chunks.len() - 1], self.used);
        self.used += words;
        // SAFETY: `used + words` words fit the chunk (checked above).
        unsafe { chunk.cast::<MaybeUninit<u64>>().add(used).cast() }
    }

    /// `bytes` in a block of their own (a large node, or the list's head).
    fn alloc_own(&mut self, bytes: usize) -> NonNull<u8> {
        let own = NonNull::from(Box::leak(Box::new_uninit_slice(bytes.div_ceil(8))));
        self.large.push(own);
        own.cast()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: each pointer came from `Box::leak` of a chunk and is let go of once, here,
        // after every node in it is dead (the list drops first).
        let boxes = |v: &mut Vec<NonNull<[MaybeUninit<u64>]>>| {
            std::mem::take(v).into_iter().map(|c| unsafe { Box::from_raw(c.as_ptr()) }).collect::<Vec<Chunk>>()
        };
        let (chunks, _large) = (boxes(&mut self.chunks), boxes(&mut self.large));
        if let Some(stash) = &self.stash {
            stash.give_back(chunks.into_iter());
        }
    }
}

struct Writer {
    arena: Arena,
    rng: u64,
}

impl Writer {
    /// 1 with probability 3/4, 2 with 3/16, ... (xorshift64: no need for a better generator).
    fn random_height(&mut self) -> usize {
        let mut height = 1;
        loop {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            if height == MAX_HEIGHT || !self.rng.is_multiple_of(BRANCHING) {
                return height;
            }
            height += 1;
        }
    }
}

/// The skiplist. `V` is the in-memory payload an entry may carry (the memtable's kept value).
pub(crate) struct SkipList<V> {
    head: NonNull<Head<V>>,
    /// The order of the user keys.
    order: KeyOrder,
    /// Levels in use (readers may see a new height before its links: they then find nulls).
    height: AtomicUsize,
    len: AtomicUsize,
    /// Entries carrying a payload (dropping the list visits the nodes only when some do).
    payloads: AtomicUsize,
    writer: Mutex<Writer>,
}

// SAFETY: a node is written in full before a release store publishes it, and is never changed
// afterwards but for its links, which are atomics; the writer's state is behind a mutex. So
// the list may be shared and sent like the payloads it holds.
unsafe impl<V: Send + Sync> Send for SkipList<V> {}
// SAFETY: as above.
unsafe impl<V: Send + Sync> Sync for SkipList<V> {}

impl<V> Default for SkipList<V> {
    fn default() -> Self {
        SkipList::new(None, KeyOrder::default())
    }
}

/// A position in a list: a node pointer that outlives the borrow it came from (an iterator
/// keeps it beside an `Arc` of the list's owner). Only `SkipList::resume` reads it.
pub(crate) struct RawEntry<V>(NonNull<Head<V>>);

impl<V> Clone for RawEntry<V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<V> Copy for RawEntry<V> {}

// SAFETY: a `RawEntry` is dereferenced only through `SkipList::resume`, whose caller vouches
// the list is alive; the node it names is immutable but for atomic links.
unsafe impl<V: Send + Sync> Send for RawEntry<V> {}
// SAFETY: as above.
unsafe impl<V: Send + Sync> Sync for RawEntry<V> {}

/// An entry of a list, borrowed from it.
pub(crate) struct Entry<'a, V> {
    node: NonNull<Head<V>>,
    list: &'a SkipList<V>,
}

impl<V> Clone for Entry<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<V> Copy for Entry<'_, V> {}

impl<V> SkipList<V> {
    /// An empty list of keys in `order`, whose arena takes its chunks from `stash` and gives
    /// them back on drop.
    pub(crate) fn new(stash: Option<Arc<ChunkStash>>, order: KeyOrder) -> SkipList<V> {
        const { assert!(align_of::<Head<V>>() <= 8, "arena nodes are 8-byte aligned") };
        let mut arena = Arena { chunks: Vec::new(), large: Vec::new(), used: 0, stash };
        // The head gets a block of its own, so an empty list holds no chunk.
        let mem = arena.alloc_own(node_bytes::<V>(MAX_HEIGHT, 0, 0));
        // SAFETY: `mem` was just allocated with room for this node.
        let head = unsafe { Self::write_node(mem, MAX_HEIGHT, (&[], 0), 0, (&[], 0), None) };
        SkipList {
            head,
            order,
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            payloads: AtomicUsize::new(0),
            writer: Mutex::new(Writer { arena, rng: 0x9E37_79B9_7F4A_7C15 }),
        }
    }

    /// Entries in the list.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Atomic::Acquire)
    }

    /// Insert the entry `(user_key, trailer) → value` with `kept`; returns the bytes it took.
    pub(crate) fn insert(&self, user_key: &[u8], trailer: u64, value: &[u8], kept: Option<V>) -> usize {
        let lens = (len_u32(user_key.len()), len_u32(value.len()));
        let mut w = self.writer.lock();
        let mut prev = [self.head; MAX_HEIGHT];
        let height = self.height.load(Atomic::Relaxed);
        let (mut x, mut bigger) = (self.head, std::ptr::null_mut());
        for level in (0..height).rev() {
            (x, bigger) = self.walk(x, level, user_key, trailer, bigger);
            prev[level] = x;
        }
        debug_assert!(
            // SAFETY: `prev[0]` is a node of this list.
            NonNull::new(unsafe { link(prev[0], 0).load(Atomic::Relaxed) })
                // SAFETY: a published node.
                .is_none_or(|n| unsafe { n.as_ref().trailer != trailer || user_key_of(n) != user_key }),
            "an internal key inserted twice"
        );
        let h = w.random_height();
        if h > height {
            // `prev` already names the head on the new levels.
            self.height.store(h, Atomic::Relaxed);
        }
        if kept.is_some() {
            self.payloads.fetch_add(1, Atomic::Relaxed);
        }
        let bytes = node_bytes::<V>(h, user_key.len(), value.len());
        let mem = w.arena.alloc(bytes);
        // SAFETY: `mem` was just allocated with room for this node.
        let node = unsafe { Self::write_node(mem, h, (user_key, lens.0), trailer, (value, lens.1), kept) };
        for (level, p) in prev.iter().enumerate().take(h) {
            // SAFETY: `node` and the nodes of `prev` are live nodes of this list with towers of
            // at least `level + 1` links (a `prev` entry at `level` links that level).
            unsafe {
                let next = link(*p, level).load(Atomic::Relaxed);
                link(node, level).store(next, Atomic::Relaxed);
                link(*p, level).store(node.as_ptr(), Atomic::Release);
            }
        }
        self.len.fetch_add(1, Atomic::Release);
        bytes
    }

    /// The last node at `level`, from `x` on, that sorts before `(user_key, trailer)`, and the
    /// link it was seen to hold (null or a node at or after the key). `bigger` is a node the
    /// level above already found at or after the key (or null): meeting it again ends the walk
    /// without comparing keys, as RocksDB's InlineSkipList does, since a search drops a level at
    /// the same node about once per level.
    #[inline]
    fn walk(
        &self,
        mut x: NonNull<Head<V>>,
        level: usize,
        user_key: &[u8],
        trailer: u64,
        bigger: *mut Head<V>,
    ) -> (NonNull<Head<V>>, *mut Head<V>) {
        loop {
            // SAFETY: `x` is the head or a node reached through links of this list, and a node
            // reached at `level` has a link at `level`.
            let next = unsafe { link(x, level).load(Atomic::Acquire) };
            if next == bigger {
                return (x, next);
            }
            match NonNull::new(next) {
                // SAFETY: a published node of this list.
                Some(n) if unsafe { before(&self.order, n, user_key, trailer) } => x = n,
                _ => return (x, next),
            }
        }
    }

    /// The last node (or the head) sorting before `(user_key, trailer)`, and the level-0 link
    /// the search saw it hold.
    fn last_before(&self, user_key: &[u8], trailer: u64) -> (NonNull<Head<V>>, *mut Head<V>) {
        let (mut x, mut next) = (self.head, std::ptr::null_mut());
        for level in (0..self.height.load(Atomic::Relaxed)).rev() {
            (x, next) = self.walk(x, level, user_key, trailer, next);
        }
        (x, next)
    }

    fn entry(&self, node: NonNull<Head<V>>) -> Option<Entry<'_, V>> {
        (node != self.head).then_some(Entry { node, list: self })
    }

    fn next_of(&self, node: NonNull<Head<V>>) -> Option<Entry<'_, V>> {
        // SAFETY: a node of this list (or its head): level 0 always exists.
        NonNull::new(unsafe { link(node, 0).load(Atomic::Acquire) }).map(|node| Entry { node, list: self })
    }

    /// The first entry at or after the internal key `ikey` (`None`: past the end): the node
    /// the search saw after the last one before `ikey`, not that node's link read again — a
    /// node inserted into the gap meanwhile sorts before `ikey` (LevelDB's
    /// `FindGreaterOrEqual` answers the node it compared the same way). Answering it made a
    /// memtable `get` miss a key's newest entry while writes landed just before it.
    pub(crate) fn lower_bound(&self, ikey: &[u8]) -> Option<Entry<'_, V>> {
        let (user_key, trailer) = split_ikey(ikey);
        NonNull::new(self.last_before(user_key, trailer).1).map(|node| Entry { node, list: self })
    }

    pub(crate) fn first(&self) -> Option<Entry<'_, V>> {
        self.next_of(self.head)
    }

    pub(crate) fn last(&self) -> Option<Entry<'_, V>> {
        let mut x = self.head;
        for level in (0..self.height.load(Atomic::Relaxed)).rev() {
            // SAFETY: as in `walk`.
            while let Some(n) = NonNull::new(unsafe { link(x, level).load(Atomic::Acquire) }) {
                x = n;
            }
        }
        self.entry(x)
    }

    /// Entries in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Entry<'_, V>> {
        std::iter::successors(self.first(), |e| e.next())
    }

    /// The entry `raw` names.
    ///
    /// # Safety
    /// `raw` came from `Entry::raw` of an entry of this very list.
    pub(crate) unsafe fn resume(&self, raw: RawEntry<V>) -> Entry<'_, V> {
        Entry { node: raw.0, list: self }
    }

    /// Write a node of `height` links for `user_key` and `value` (each with its length as a
    /// u32) into `mem`.
    ///
    /// # Safety
    /// `mem` is fresh, 8-byte aligned memory of at least `node_bytes` for this node, which no
    /// one can see yet.
    unsafe fn write_node(
        mem: NonNull<u8>,
        height: usize,
        (user_key, ukey_len): (&[u8], u32),
        trailer: u64,
        (value, value_len): (&[u8], u32),
        kept: Option<V>,
    ) -> NonNull<Head<V>> {
        let node = mem.cast::<Head<V>>();
        let head = Head { kept, trailer, ukey_len, value_len, height: height as u32 };
        // SAFETY: the caller's promise: room for the head, the tower and the key and value
        // bytes, written here before anyone can see the node.
        unsafe {
            ptr::write(node.as_ptr(), head);
            for level in 0..height {
                ptr::write(link_ptr(node, level), AtomicPtr::new(ptr::null_mut()));
            }
            let data = data_ptr(node);
            ptr::copy_nonoverlapping(user_key.as_ptr(), data, user_key.len());
            ptr::copy_nonoverlapping(trailer.to_le_bytes().as_ptr(), data.add(user_key.len()), 8);
            ptr::copy_nonoverlapping(value.as_ptr(), data.add(user_key.len() + 8), value.len());
        }
        node
    }
}

impl<V> Drop for SkipList<V> {
    fn drop(&mut self) {
        if std::mem::needs_drop::<V>() && *self.payloads.get_mut() > 0 {
            let mut at = self.first().map(|e| e.node);
            while let Some(node) = at {
                // SAFETY: every node is visited once, and nothing reads it after the list drops;
                // the link is read before the payload goes.
                unsafe {
                    at = NonNull::new(link(node, 0).load(Atomic::Relaxed));
                    ptr::drop_in_place(ptr::addr_of_mut!((*node.as_ptr()).kept));
                }
            }
        }
    }
}

impl<'a, V> Entry<'a, V> {
    fn head(&self) -> &'a Head<V> {
        // SAFETY: a published node of a live list (borrowed for 'a), never changed but for its
        // links after publication.
        unsafe { self.node.as_ref() }
    }

    /// The node's key and value bytes.
    fn data(&self) -> &'a [u8] {
        let h = self.head();
        let len = h.ukey_len as usize + 8 + h.value_len as usize;
        // SAFETY: `write_node` wrote `len` bytes there.
        unsafe { std::slice::from_raw_parts(data_ptr(self.node), len) }
    }

    /// The internal key (user key and trailer).
    pub(crate) fn key(&self) -> &'a [u8] {
        &self.data()[..self.head().ukey_len as usize + 8]
    }

    pub(crate) fn value(&self) -> &'a [u8] {
        &self.data()[self.head().ukey_len as usize + 8..]
    }

    pub(crate) fn kept(&self) -> Option<&'a V> {
        self.head().kept.as_ref()
    }

    pub(crate) fn next(&self) -> Option<Entry<'a, V>> {
        self.list.next_of(self.node)
    }

    /// The entry before this one (a search from the top, as LevelDB's `Prev`).
    pub(crate) fn prev(&self) -> Option<Entry<'a, V>> {
        // SAFETY: a published node of this list.
        let user_key = unsafe { user_key_of(self.node) };
        self.list.entry(self.list.last_before(user_key, self.head().trailer).0)
    }

    pub(crate) fn raw(&self) -> RawEntry<V> {
        RawEntry(self.node)
    }
}

/// Bytes of a node of `height` links holding a user key and a value of these lengths.
fn node_bytes<V>(height: usize, ukey_len: usize, value_len: usize) -> usize {
    (head_bytes::<V>() + height * size_of::<AtomicPtr<Head<V>>>() + ukey_len + 8 + value_len).next_multiple_of(8)
}

/// Key and value lengths fit a u32: the write path bounds keys and values far below.
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or_else(|_| panic!("memtable entry of {n} bytes: the write path bounds entries to u32"))
}

/// User key and trailer of an internal key (a key too short for a trailer is read as
/// `KeyOrder::compare_internal` reads it: an empty user key and trailer 0).
fn split_ikey(ikey: &[u8]) -> (&[u8], u64) {
    match ikey.len().checked_sub(8) {
        Some(at) => {
            let mut t = [0u8; 8];
            t.copy_from_slice(&ikey[at..]);
            (&ikey[..at], u64::from_le_bytes(t))
        }
        None => (&[], 0),
    }
}

/// Whether `node` sorts before `(user_key, trailer)` in `order`.
///
/// # Safety
/// `node` is a published node (not the head).
#[inline]
unsafe fn before<V>(order: &KeyOrder, node: NonNull<Head<V>>, user_key: &[u8], trailer: u64) -> bool {
    // SAFETY: the caller's promise.
    match order.compare_user(unsafe { user_key_of(node) }, user_key) {
        Ordering::Less => true,
        Ordering::Greater => false,
        // Newer (larger trailer) first.
        // SAFETY: as above.
        Ordering::Equal => unsafe { node.as_ref() }.trailer > trailer,
    }
}

/// `node`'s user key.
///
/// # Safety
/// As `before`; the slice lives as long as the list.
#[inline]
unsafe fn user_key_of<'a, V>(node: NonNull<Head<V>>) -> &'a [u8] {
    // SAFETY: the caller's promise; `write_node` wrote the user key there.
    unsafe { std::slice::from_raw_parts(data_ptr(node), node.as_ref().ukey_len as usize) }
}

/// # Safety
/// `node` is a node with more than `level` links.
#[inline]
unsafe fn link<'a, V>(node: NonNull<Head<V>>, level: usize) -> &'a AtomicPtr<Head<V>> {
    // SAFETY: the caller's promise; `write_node` initialised every link.
    unsafe { &*link_ptr(node, level) }
}

/// # Safety
/// As `link`.
#[inline]
unsafe fn link_ptr<V>(node: NonNull<Head<V>>, level: usize) -> *mut AtomicPtr<Head<V>> {
    // SAFETY: the tower follows the head inside the node's allocation; the pointer derives
    // from the arena's, so it covers the whole node.
    unsafe { node.as_ptr().cast::<u8>().add(head_bytes::<V>()).cast::<AtomicPtr<Head<V>>>().add(level) }
}

/// Where a node's key bytes start.
///
/// # Safety
/// `node` is a node whose head is initialised.
#[inline]
unsafe fn data_ptr<V>(node: NonNull<Head<V>>) -> *mut u8 {
    // SAFETY: the caller's promise; key bytes follow the tower inside the allocation.
    unsafe {
        let height = (*node.as_ptr()).height as usize;
        link_ptr(node, height).cast::<u8>()
    }
}

#[cfg(test)]
mod tests;
