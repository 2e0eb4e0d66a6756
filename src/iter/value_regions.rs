//! Decides when a long scan should read a whole region of a value-log file at once instead of
//! value by value.
//!
//! After a random load, key order and value-log order are unrelated: a scan's values are
//! scattered over every vLog file, and reading them one by one costs one small device read
//! each, however many are in flight. A long scan comes back to the same region of a file again
//! and again, though. Once a scan's reads have missed the page cache `REGION_MISSES` times in
//! one `REGION_BYTES` region, the rest of its values there are likely to be read too (a scan
//! that went this far tends to go on as far again), so the region is read whole with one
//! large sequential request and later values come from the page cache. The device reads large
//! requests an order of magnitude faster per byte than scattered 4 KiB ones.
//!
//! Short scans rarely miss several times in one region, so they keep reading value by value.

use std::collections::HashMap;

use crate::vlog::ValuePointer;

/// log2 of the region size: 256 KiB, a handful of large device requests.
const REGION_SHIFT: u32 = 18;
/// Bytes of a region.
pub const REGION_BYTES: u64 = 1 << REGION_SHIFT;
/// Misses in one region that make reading it whole worthwhile.
pub const REGION_MISSES: u32 = 3;
/// Regions tracked at most (16 GiB of value log); past that, counting starts afresh.
const MAX_TRACKED: usize = 1 << 16;
/// Count of a region already requested whole.
const REQUESTED: u32 = u32::MAX;

/// Page-cache misses per value-log region seen by one scan.
#[derive(Debug, Default)]
pub struct ValueRegions {
    misses: HashMap<(u64, u64), u32>,
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
        self.misses.clear();
    }

    /// Record that the value at `ptr` had to be read from the device; returns its region when
    /// this miss makes the region worth reading whole (once per region).
    pub fn miss(&mut self, ptr: &ValuePointer) -> Option<Region> {
        if self.misses.len() >= MAX_TRACKED {
            self.misses.clear();
        }
        let index = ptr.offset >> REGION_SHIFT;
        let count = self.misses.entry((ptr.file, index)).or_insert(0);
        if *count == REQUESTED {
            return None;
        }
        *count += 1;
        if *count < REGION_MISSES {
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
    fn a_region_is_requested_once_after_enough_misses() {
        let mut r = ValueRegions::default();
        let base = 3 * REGION_BYTES;
        for i in 0..u64::from(REGION_MISSES) - 1 {
            assert_eq!(r.miss(&ptr(7, base + i * 5000)), None, "miss {i} is too few");
        }
        let want = Region { file: 7, offset: base, len: REGION_BYTES };
        assert_eq!(r.miss(&ptr(7, base + REGION_BYTES - 1)), Some(want));
        for _ in 0..20 {
            assert_eq!(r.miss(&ptr(7, base + 10)), None, "requested once only");
        }
    }

    #[test]
    fn regions_are_counted_per_file_and_per_offset() {
        let mut r = ValueRegions::default();
        for i in 0..u64::from(REGION_MISSES) - 1 {
            assert_eq!(r.miss(&ptr(1, i)), None);
            assert_eq!(r.miss(&ptr(2, i)), None, "another file's region");
            assert_eq!(r.miss(&ptr(1, REGION_BYTES + i)), None, "the next region of the file");
        }
        assert!(r.miss(&ptr(1, 0)).is_some());
        assert!(r.miss(&ptr(2, 0)).is_some());
    }

    #[test]
    fn reset_starts_counting_afresh() {
        let mut r = ValueRegions::default();
        for _ in 0..REGION_MISSES - 1 {
            r.miss(&ptr(1, 0));
        }
        r.reset();
        assert_eq!(r.miss(&ptr(1, 0)), None, "a new scan counts from zero");
    }
}
