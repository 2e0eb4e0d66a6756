//! Time-to-live: the clock expiry is judged by, the 8-byte expiry time an expiring entry
//! carries in front of its bytes (in the log op and in the tree entry alike), and the views
//! that make an expired entry read as a deletion. Expiry lives in the tree entry, beside the
//! key and pointer, so scans and value-log GC's liveness check judge it without reading a value.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::internal_iter::InternalIterator;
use crate::key::{ValueKind, TRAILER_LEN};

/// Bytes of the expiry time in front of an expiring entry's value or pointer.
pub(crate) const EXPIRY_LEN: usize = 8;

/// The time expiry is judged against, in milliseconds since the Unix epoch
/// (`Options::clock`). Reads compare an entry's expiry with it when they run; compaction and
/// value-log GC when they meet the entry. It should not go backwards: an entry compaction
/// dropped as expired stays gone.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock (the default `Options::clock`), never going backwards within the
/// process: a wall clock stepped back (NTP, an operator) reads as standing still until it
/// passes the latest time already given out. (So after a wall clock that jumped forward and
/// was set back, time stands still until the wall clock catches up: entries expire by the
/// jumped time, and TTLs given meanwhile count from it.) Value-log GC's wait for readers and an
/// iterator's expiry judgements rely on that: an entry judged expired must stay expired.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// The latest time any `SystemClock` gave out (one floor for the process: every database in
/// it may hand entries to another through backups and checkpoints, and judge them alike).
static SYSTEM_CLOCK_FLOOR_MS: AtomicU64 = AtomicU64::new(0);

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        at_least_floor(&SYSTEM_CLOCK_FLOOR_MS, wall)
    }
}

/// `wall`, or `floor` where `wall` is behind it; `floor` moves up to what is returned. Most
/// calls find the floor at or behind the wall and only read it (no write to the shared line).
fn at_least_floor(floor: &AtomicU64, wall: u64) -> u64 {
    let seen = floor.load(Ordering::Acquire);
    if wall <= seen {
        return seen;
    }
    floor.fetch_max(wall, Ordering::AcqRel).max(wall)
}

/// A clock that moves only when told to: for tests of expiry that must not sleep.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `now_ms` milliseconds since the Unix epoch.
    pub fn new(now_ms: u64) -> ManualClock {
        ManualClock { now_ms: AtomicU64::new(now_ms) }
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now_ms.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }

    /// Set the clock to `now_ms`.
    pub fn set_ms(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// The expiry time of a write at `now_ms` that lives `ttl_ms`: an error for a TTL of zero (it
/// would be expired when written) or one whose expiry does not fit in 64 bits.
pub(crate) fn expiry(key: &[u8], now_ms: u64, ttl_ms: u128) -> Result<u64> {
    let bad = |reason: &'static str| Error::InvalidTtl { key: key.to_vec(), ttl_ms, reason };
    if ttl_ms == 0 {
        return Err(bad("a time-to-live of zero is expired when written"));
    }
    u64::try_from(ttl_ms).ok().and_then(|t| now_ms.checked_add(t)).ok_or_else(|| bad("its expiry time overflows"))
}

/// The milliseconds of `ttl`, checked as `expiry` checks them (at queue time, with no clock).
pub(crate) fn ttl_ms(key: &[u8], ttl: Duration) -> Result<u64> {
    expiry(key, 0, ttl.as_millis())
}

/// Split an expiring entry's bytes into its expiry time and the value or pointer after it.
pub(crate) fn split_expiry(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (at, rest) = bytes.split_first_chunk::<EXPIRY_LEN>()?;
    Some((u64::from_le_bytes(*at), rest))
}

/// Whether `kind` carries an expiry time in front of its bytes.
#[inline]
pub(crate) fn is_expiring(kind: ValueKind) -> bool {
    matches!(kind, ValueKind::ExpiringValue | ValueKind::ExpiringPointer)
}

/// What a reader at `now_ms` sees of an entry of `kind` holding `bytes`: an expiring entry
/// reads as its plain kind (`Value`, `Pointer`) with the expiry time stripped before it
/// expires, and as a deletion from then on; any other entry as it is. `None`: an expiring
/// entry too short to hold its expiry time (damage).
#[inline]
pub(crate) fn as_read(kind: ValueKind, bytes: &[u8], now_ms: u64) -> Option<(ValueKind, &[u8])> {
    let plain = match kind {
        ValueKind::ExpiringValue => ValueKind::Value,
        ValueKind::ExpiringPointer => ValueKind::Pointer,
        _ => return Some((kind, bytes)),
    };
    let (at, rest) = split_expiry(bytes)?;
    Some(if at <= now_ms { (ValueKind::Deletion, &[][..]) } else { (plain, rest) })
}

/// The encoded value pointer an entry of `kind` holds, if it names a separated value (expired
/// or not).
#[inline]
pub(crate) fn pointer_bytes(kind: ValueKind, bytes: &[u8]) -> Option<&[u8]> {
    match kind {
        ValueKind::Pointer => Some(bytes),
        ValueKind::ExpiringPointer => split_expiry(bytes).map(|(_, p)| p),
        _ => None,
    }
}

/// How `ExpiryIter` shows the entries beneath it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpiryMode {
    /// For readers: an expiring entry as `as_read` shows it.
    Read,
    /// For compaction: an expired entry as a deletion at its sequence number (so it shadows
    /// older versions as a deletion would, and goes where a deletion may go); a live one as
    /// it is. The separated values of the expired entries are counted as garbage.
    Compact,
}

/// What the current entry of an `ExpiryIter` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// The entry as it is.
    AsIs,
    /// The rewritten key, and the value after its expiry time.
    Stripped,
    /// The rewritten key (a deletion), and no value.
    Expired,
}

/// An internal iterator that shows expiring entries as readers or compaction see them at one
/// instant (`now_ms`, taken when it is made). Entries without an expiry pass through as
/// they are, for the cost of one byte compared per step.
pub(crate) struct ExpiryIter<I> {
    inner: I,
    now_ms: u64,
    mode: ExpiryMode,
    key: Vec<u8>,
    shown: Shown,
    /// Compact mode: bytes of separated values of expired entries, per value-log file.
    garbage: BTreeMap<u64, u64>,
}

impl<I: InternalIterator> ExpiryIter<I> {
    /// `inner` seen at `now_ms` in `mode`.
    pub(crate) fn new(inner: I, now_ms: u64, mode: ExpiryMode) -> Self {
        ExpiryIter { inner, now_ms, mode, key: Vec::new(), shown: Shown::AsIs, garbage: BTreeMap::new() }
    }

    /// Compact mode: the separated values of the expired entries met, per value-log file
    /// (whole ops, the unit of the discard statistics).
    pub(crate) fn take_garbage(&mut self) -> BTreeMap<u64, u64> {
        std::mem::take(&mut self.garbage)
    }

    /// Work out what the entry the inner iterator is at shows.
    fn settle(&mut self) {
        self.shown = Shown::AsIs;
        if !self.inner.valid() {
            return;
        }
        let ikey = self.inner.key();
        let Some(at) = ikey.len().checked_sub(TRAILER_LEN) else { return };
        let kind = match ValueKind::from_u8(ikey[at]) {
            Some(k) if is_expiring(k) => k,
            _ => return,
        };
        let value = self.inner.value();
        // A damaged entry passes as it is: the reader that decodes it reports the damage.
        let Some((expires, rest)) = split_expiry(value) else { return };
        let expired = expires <= self.now_ms;
        let shown_kind = match (self.mode, expired) {
            (ExpiryMode::Compact, false) => return,
            (_, true) => ValueKind::Deletion,
            (ExpiryMode::Read, false) if kind == ValueKind::ExpiringValue => ValueKind::Value,
            (ExpiryMode::Read, false) => ValueKind::Pointer,
        };
        if expired && self.mode == ExpiryMode::Compact && kind == ValueKind::ExpiringPointer {
            if let Some(p) = crate::vlog::ValuePointer::decode(rest) {
                *self.garbage.entry(p.file).or_insert(0) += u64::from(p.op_len);
            }
        }
        self.key.clear();
        self.key.extend_from_slice(ikey);
        self.key[at] = shown_kind as u8;
        self.shown = if expired { Shown::Expired } else { Shown::Stripped };
    }
}

impl<I: InternalIterator> InternalIterator for ExpiryIter<I> {
    #[inline]
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.inner.seek_to_first()?;
        self.settle();
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.inner.seek_to_last()?;
        self.settle();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.inner.seek(target)?;
        self.settle();
        Ok(())
    }
    #[inline]
    fn next(&mut self) -> Result<()> {
        self.inner.next()?;
        self.settle();
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.inner.prev()?;
        self.settle();
        Ok(())
    }
    #[inline]
    fn key(&self) -> &[u8] {
        match self.shown {
            Shown::AsIs => self.inner.key(),
            Shown::Stripped | Shown::Expired => &self.key,
        }
    }
    #[inline]
    fn value(&self) -> &[u8] {
        match self.shown {
            Shown::AsIs => self.inner.value(),
            Shown::Stripped => &self.inner.value()[EXPIRY_LEN..],
            Shown::Expired => &[],
        }
    }
    fn kept_value(&self) -> Option<&bytes::Bytes> {
        match self.shown {
            Shown::Expired => None,
            _ => self.inner.kept_value(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiring_entry_reads_as_its_plain_kind_until_its_expiry_then_as_a_deletion() {
        let mut bytes = 1_000u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"v");
        assert_eq!(as_read(ValueKind::ExpiringValue, &bytes, 999), Some((ValueKind::Value, &b"v"[..])));
        assert_eq!(as_read(ValueKind::ExpiringPointer, &bytes, 999), Some((ValueKind::Pointer, &b"v"[..])));
        assert_eq!(as_read(ValueKind::ExpiringValue, &bytes, 1_000), Some((ValueKind::Deletion, &[][..])));
        assert_eq!(as_read(ValueKind::Value, b"raw", 5_000), Some((ValueKind::Value, &b"raw"[..])));
        assert_eq!(as_read(ValueKind::ExpiringValue, b"short", 0), None);
    }

    #[test]
    fn a_wall_clock_stepped_back_reads_as_standing_still_until_it_passes_the_floor() {
        let floor = AtomicU64::new(0);
        assert_eq!(at_least_floor(&floor, 1_000), 1_000);
        assert_eq!(at_least_floor(&floor, 400), 1_000, "stepped back: stands still");
        assert_eq!(at_least_floor(&floor, 999), 1_000);
        assert_eq!(at_least_floor(&floor, 1_500), 1_500, "moves on once past");
        let a = SystemClock.now_ms();
        assert!(SystemClock.now_ms() >= a);
    }

    #[test]
    fn a_ttl_of_zero_or_one_that_overflows_is_refused() {
        assert!(matches!(expiry(b"k", 5, 0), Err(Error::InvalidTtl { .. })));
        assert!(matches!(expiry(b"k", 5, u128::from(u64::MAX)), Err(Error::InvalidTtl { .. })));
        assert_eq!(expiry(b"k", 5, 10).unwrap(), 15);
    }
}
