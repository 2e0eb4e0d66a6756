//! Decides when a long scan should read a whole region of a value-log file at once instead of
//! value by value.
//!
//! After a random load, key order and value-log order are unrelated: a scan's values are
//! scattered over every vLog file, and reading them one by one costs one small device read
//! each, however many are in flight. A long scan comes back to the same region of a file again
//! and again, though. When a scan's `REGION_VISITS`-th (or a later) read in one `REGION_BYTES`
//! region misses the page cache, more of its values there are likely to be read too (a scan
//! that went this far tends to go on as far again), so the region is read whole with one large
//! sequential request and later values come from the page cache. The device reads large
//! requests much faster per byte than scattered 4 KiB ones (this machine's figures:
//! docs/BENCHMARKS.md).
//!
//! Short scans over scattered values rarely read several in one region, so they keep reading
//! value by value. So do long scans whose visits to a region lie far apart (values scattered
//! over a log many times the page cache: a region read whole would be evicted before the
//! scan came back to it): the visits that count must fall within `RECENT_VALUES` of each
//! other.
//!
//! Whether a region read paid off shows when the scan comes back to the region: a value found
//! in the page cache came with the region; one that misses well after the region was asked
//! for (not merely still on its way in) was evicted before the scan returned. That is a log
//! many times the memory, and there region reads are a waste, and so is the kernel's
//! read-around of each value: a random load of 16 KB values eight times the memory read 56 KB
//! from the device per value scanned with both, 46 KB without regions, 17.5 KB without either,
//! and scanned 2.2× slower (docs/BENCHMARKS.md §16). So a scan keeps score, and once
//! `JUDGE_RETURNS` returns were judged and fewer than `HITS_PER_EVICTION` hits came per
//! eviction, it reads value by value, each as the bytes it spans, until its next seek. In
//! memory, where read-around and regions are what make a cold scan fast, returns hit and both
//! stay on.

use std::collections::HashMap;

use crate::vlog::ValuePointer;

/// log2 of the region size: 256 KiB, a handful of large device requests.
const REGION_SHIFT: u32 = 18;
/// Bytes of a region.
pub const REGION_BYTES: u64 = 1 << REGION_SHIFT;
/// Reads in one region that make reading it whole worthwhile.
pub const REGION_VISITS: u32 = 3;
/// The same once the scan has read `LONG_SCAN_VALUES` values: a scan that long is likely to
/// go on, and each region it has come back to twice is likely to see more of it.
pub const LONG_SCAN_REGION_VISITS: u32 = 2;
/// Values read ahead since the last seek that make a scan long.
pub const LONG_SCAN_VALUES: u64 = 1024;
/// Visits to a region count together only within this many values of the scan: values
/// stored in key order (or in a few runs of it) come back to a region within a few of them.
pub const RECENT_VALUES: u64 = 1024;
/// Regions tracked at most (16 GiB of value log); past that, counting starts afresh.
const MAX_TRACKED: usize = 1 << 16;
/// Count of a region already requested whole (its other field: the scan's value count then).
const REQUESTED: u32 = u32::MAX;
/// A miss this many values after its region was requested means the region was evicted; a
/// miss sooner, that its read was still under way (a read-ahead window is at most a few
/// hundred values).
pub const IN_FLIGHT_VALUES: u64 = 512;
/// Returns to requested regions judged (hits, and misses past `IN_FLIGHT_VALUES`) before a
/// scan decides whether reading regions pays.
pub const JUDGE_RETURNS: u32 = 64;
/// Region reads pay while they bring at least this many cached values per region evicted
/// unused: a 256 KiB read takes the device about as long as 8 reads of one value do (this
/// machine: 1.3 GB/s, 42,000 reads of 4–20 KiB per second at 32 in flight).
pub const HITS_PER_EVICTION: u32 = 8;

/// Reads per value-log region by one scan.
#[derive(Debug, Default)]
pub struct ValueRegions {
    /// Per region: visits, and the scan's value count at the first of them (`REQUESTED`, and
    /// the count when it was requested).
    visits: HashMap<(u64, u64), (u32, u64)>,
    /// Values counted since the last reset.
    seen: u64,
    /// Whether the region reads so far paid off.
    score: Score,
}

/// Returns to requested regions: values found cached there, and values that missed long
/// after the region was asked for.
#[derive(Debug, Default)]
struct Score {
    hits: u32,
    evicted: u32,
    /// Region reads did not pay off: read value by value until the next reset.
    off: bool,
}

/// A byte range of a value-log file to read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub file: u64,
    pub offset: u64,
    pub len: u64,
}

impl ValueRegions {
    /// Forget what was counted (a seek starts a new scan).
    pub fn reset(&mut self) {
        self.visits.clear();
        self.seen = 0;
        self.score = Score::default();
    }

    /// Whether this scan stopped reading regions whole (they were evicted before it came back),
    /// and with them the kernel's read-around of single values.
    pub fn is_off(&self) -> bool {
        self.score.off
    }

    /// Record a read of the value at `ptr` (`missed`: it had to come from the device); returns
    /// its region when the region has been visited `REGION_VISITS` times
    /// (`LONG_SCAN_REGION_VISITS` in a long scan) and this read missed (a region the page cache
    /// already holds is never requested), once per region.
    pub fn visit(&mut self, ptr: &ValuePointer, missed: bool) -> Option<Region> {
        if self.score.off {
            // Value by value until the next reset: nothing left to count.
            return None;
        }
        if self.visits.len() >= MAX_TRACKED {
            self.visits.clear();
        }
        let index = ptr.offset >> REGION_SHIFT;
        let seen = self.seen;
        self.seen += 1;
        let (count, first) = self.visits.entry((ptr.file, index)).or_insert((0, seen));
        if *count == REQUESTED {
            self.score.returned(seen - *first, missed);
            return None;
        }
        if seen - *first > RECENT_VALUES {
            // The visits so far lie too far back to say the scan is in this region now.
            (*count, *first) = (0, seen);
        }
        *count += 1;
        let needed = if self.seen >= LONG_SCAN_VALUES { LONG_SCAN_REGION_VISITS } else { REGION_VISITS };
        if *count < needed || !missed {
            return None;
        }
        (*count, *first) = (REQUESTED, seen);
        Some(Region { file: ptr.file, offset: index << REGION_SHIFT, len: REGION_BYTES })
    }
}

impl Score {
    /// The scan came back to a region it asked for `since` values ago.
    fn returned(&mut self, since: u64, missed: bool) {
        match (missed, since > IN_FLIGHT_VALUES) {
            (false, _) => self.hits += 1,
            (true, true) => self.evicted += 1,
            (true, false) => return,
        }
        if self.hits + self.evicted >= JUDGE_RETURNS && self.evicted * HITS_PER_EVICTION > self.hits {
            self.off = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(file: u64, offset: u64) -> ValuePointer {
        ValuePointer { file, offset, op_len: 4100, value_crc: 0 }
    }

    #[test]
    fn a_region_is_requested_once_at_a_miss_after_enough_visits() {
        let mut r = ValueRegions::default();
        let base = 3 * REGION_BYTES;
        for i in 0..u64::from(REGION_VISITS) - 1 {
            assert_eq!(r.visit(&ptr(7, base + i * 5000), true), None, "visit {i} is too few");
        }
        assert_eq!(r.visit(&ptr(7, base + 1), false), None, "a cached read requests nothing");
        let want = Region { file: 7, offset: base, len: REGION_BYTES };
        assert_eq!(r.visit(&ptr(7, base + REGION_BYTES - 1), true), Some(want));
        for _ in 0..20 {
            assert_eq!(r.visit(&ptr(7, base + 10), true), None, "requested once only");
        }
    }

    #[test]
    fn regions_are_counted_per_file_and_per_offset() {
        let mut r = ValueRegions::default();
        for i in 0..u64::from(REGION_VISITS) - 1 {
            assert_eq!(r.visit(&ptr(1, i), true), None);
            assert_eq!(r.visit(&ptr(2, i), true), None, "another file's region");
            assert_eq!(r.visit(&ptr(1, REGION_BYTES + i), true), None, "the next region of the file");
        }
        assert!(r.visit(&ptr(1, 0), true).is_some());
        assert!(r.visit(&ptr(2, 0), true).is_some());
    }

    #[test]
    fn a_long_scan_needs_fewer_visits() {
        let mut r = ValueRegions::default();
        // Spread over many regions: none reaches REGION_VISITS.
        for i in 0..LONG_SCAN_VALUES {
            assert_eq!(r.visit(&ptr(1, (i + 10) * REGION_BYTES), true), None, "visit {i}");
        }
        let second = r.visit(&ptr(1, 5 * REGION_BYTES), true);
        assert_eq!(second, None, "one visit so far in region 5");
        assert!(r.visit(&ptr(1, 5 * REGION_BYTES + 9), true).is_some(), "two suffice in a long scan");
        r.reset();
        r.visit(&ptr(1, 0), true);
        assert_eq!(r.visit(&ptr(1, 1), true), None, "a seek makes the scan short again");
    }

    #[test]
    fn visits_far_apart_do_not_make_a_region_worth_reading() {
        let mut r = ValueRegions::default();
        let far = RECENT_VALUES + 1;
        for i in 0..LONG_SCAN_VALUES + 3 * far {
            // Region 0 every `far` values, the others scattered once each.
            let at = if i % far == 0 { 7 } else { (i + 10) * REGION_BYTES };
            assert_eq!(r.visit(&ptr(1, at), true), None, "value {i}");
        }
        assert!(r.visit(&ptr(1, 9), true).is_some(), "a visit soon after one counts");
    }

    /// Ask for `n` regions from 0 (each visited until requested), then step `gap` values on
    /// through regions visited once each.
    fn request_regions(r: &mut ValueRegions, n: u64, gap: u64) {
        for region in 0..n {
            let asked = (0..REGION_VISITS).filter_map(|i| r.visit(&ptr(1, region * REGION_BYTES + u64::from(i)), true));
            assert_eq!(asked.count(), 1, "region {region} requested");
        }
        step_on(r, gap);
    }

    fn step_on(r: &mut ValueRegions, values: u64) {
        for i in 0..values {
            r.visit(&ptr(2, i * REGION_BYTES), true);
        }
    }

    #[test]
    fn regions_evicted_before_the_scan_comes_back_stop_region_reads_until_the_next_seek() {
        let mut r = ValueRegions::default();
        let n = u64::from(JUDGE_RETURNS);
        request_regions(&mut r, n, IN_FLIGHT_VALUES + 1);
        for region in 0..n {
            assert!(!r.is_off(), "judged only after {JUDGE_RETURNS} returns");
            r.visit(&ptr(1, region * REGION_BYTES + 50), true);
        }
        assert!(r.is_off(), "every region missed again long after it was asked for");
        let fresh = (0..REGION_VISITS).filter_map(|i| r.visit(&ptr(3, u64::from(i)), true));
        assert_eq!(fresh.count(), 0, "value by value now");
        r.reset();
        let fresh = (0..REGION_VISITS).filter_map(|i| r.visit(&ptr(3, u64::from(i)), true));
        assert_eq!(fresh.count(), 1, "a seek starts a new scan, which tries regions again");
    }

    #[test]
    fn misses_while_a_region_is_on_its_way_in_do_not_count_and_hits_keep_regions_on() {
        let mut r = ValueRegions::default();
        let n = u64::from(JUDGE_RETURNS);
        request_regions(&mut r, n, 0);
        for region in 0..n {
            r.visit(&ptr(1, region * REGION_BYTES + 60), true);
        }
        step_on(&mut r, IN_FLIGHT_VALUES);
        for region in 0..n {
            r.visit(&ptr(1, region * REGION_BYTES + 70), false);
        }
        for region in 0..u64::from(JUDGE_RETURNS / HITS_PER_EVICTION) {
            r.visit(&ptr(1, region * REGION_BYTES + 80), true);
        }
        assert!(!r.is_off(), "enough hits per eviction, and in-flight misses not counted");
        r.visit(&ptr(1, 90), true);
        assert!(r.is_off(), "one eviction too many");
    }

    #[test]
    fn reset_starts_counting_afresh() {
        let mut r = ValueRegions::default();
        for _ in 0..REGION_VISITS - 1 {
            r.visit(&ptr(1, 0), true);
        }
        r.reset();
        assert_eq!(r.visit(&ptr(1, 0), true), None, "a new scan counts from zero");
    }
}
