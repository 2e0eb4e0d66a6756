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
/// Count of a region already requested whole.
const REQUESTED: u32 = u32::MAX;

/// Reads per value-log region by one scan.
#[derive(Debug, Default)]
pub struct ValueRegions {
    /// Per region: visits, and the scan's value count at the first of them.
    visits: HashMap<(u64, u64), (u32, u64)>,
    /// Values counted since the last reset.
    seen: u64,
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
    }

    /// Record a read of the value at `ptr` (`missed`: it had to come from the device); returns
    /// its region when the region has been visited `REGION_VISITS` times
    /// (`LONG_SCAN_REGION_VISITS` in a long scan) and this read missed (a region the page cache
    /// already holds is never requested), once per region.
    pub fn visit(&mut self, ptr: &ValuePointer, missed: bool) -> Option<Region> {
        if self.visits.len() >= MAX_TRACKED {
            self.visits.clear();
        }
        let index = ptr.offset >> REGION_SHIFT;
        let seen = self.seen;
        let (count, first) = self.visits.entry((ptr.file, index)).or_insert((0, seen));
        if *count == REQUESTED {
            return None;
        }
        if seen - *first > RECENT_VALUES {
            // The visits so far lie too far back to say the scan is in this region now.
            (*count, *first) = (0, seen);
        }
        *count += 1;
        self.seen += 1;
        let needed = if self.seen >= LONG_SCAN_VALUES { LONG_SCAN_REGION_VISITS } else { REGION_VISITS };
        if *count < needed || !missed {
            return None;
        }
        *count = REQUESTED;
        Some(Region { file: ptr.file, offset: index << REGION_SHIFT, len: REGION_BYTES })
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
