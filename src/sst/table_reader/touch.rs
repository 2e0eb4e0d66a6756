//! Whether a mapped table's blocks are read from the device, and if so asking for a block's
//! pages together. A data block of ~4 KiB at an arbitrary offset spans two pages; touched
//! through the mapping (advised `RANDOM`, so no read-around), a block the page cache does not
//! hold then costs two faults, each a device read, one after the other: with data eight times
//! the memory a 100 B lookup took 2.1 major faults. Asked for with `WILLNEED` first, the
//! block's pages are read in one request. The syscall is not free where the pages are cached
//! (a lookup in memory takes ~2 µs), so it is made only while the table's blocks were lately
//! found on the device: a touch is timed every `PROBE_EVERY` loads while the table is warm,
//! and every load while it is cold.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::fs::{Advice, FileMapping, RandomAccessFile};

/// A touch that took this long waited for the device (a page-cache hit takes well under a
/// microsecond; an SSD read tens of them).
const SLOW_TOUCH: Duration = Duration::from_micros(20);

/// While warm, one block load in this many is timed.
const PROBE_EVERY: u32 = 64;

/// How many fast touches in a row a cold table needs to be warm again.
const COLD_CREDIT: u32 = 8;

/// A table's residency guess.
#[derive(Default)]
pub(super) struct Residency {
    /// > 0: cold (blocks were lately read from the device); counts down on fast touches.
    cold: AtomicU32,
    loads: AtomicU32,
}

impl Residency {
    /// Before a point lookup reads the data block `[start, end)` of `map`: while the table is
    /// cold, ask for the block's pages together; time a touch of its first and last byte
    /// (every load while cold, one in `PROBE_EVERY` while warm) and update the guess.
    pub(super) fn touch(&self, file: &dyn RandomAccessFile, map: &FileMapping, start: u64, end: u64) {
        self.touch_with(file, map, start, end, SLOW_TOUCH);
    }

    pub(super) fn touch_with(
        &self,
        file: &dyn RandomAccessFile,
        map: &FileMapping,
        start: u64,
        end: u64,
        slow: Duration,
    ) {
        let end = end.min(map.len() as u64);
        if start >= end {
            return;
        }
        let cold = self.cold.load(Ordering::Relaxed);
        if cold == 0 && !self.loads.fetch_add(1, Ordering::Relaxed).is_multiple_of(PROBE_EVERY) {
            return;
        }
        if cold > 0 {
            let _ = file.advise(start, end - start, Advice::WillNeed);
        }
        let t = Instant::now();
        std::hint::black_box(map[start as usize]);
        std::hint::black_box(map[end as usize - 1]);
        let next = if t.elapsed() >= slow { COLD_CREDIT } else { cold.saturating_sub(1) };
        if next != cold {
            self.cold.store(next, Ordering::Relaxed);
        }
    }

    /// Whether the table is taken as cold now.
    #[cfg(test)]
    pub(super) fn is_cold(&self) -> bool {
        self.cold.load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{mapped_file, AdviceLog};
    use super::*;

    #[test]
    fn a_slow_touch_makes_a_table_cold_its_blocks_are_then_asked_for_whole_and_fast_touches_warm_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = AdviceLog::new(mapped_file(dir.path(), &[7u8; 64 << 10]));
        let map = file.inner.mapping().unwrap().clone();
        let r = Residency::default();
        let (always_slow, never_slow) = (Duration::ZERO, Duration::from_secs(3600));
        // Warm: nothing asked; the first load is a probe, and a slow one turns the table cold.
        r.touch_with(&file, &map, 100, 4200, always_slow);
        assert!(r.is_cold() && file.will_need.lock().is_empty());
        // Cold: every block is asked for whole before its first byte is touched.
        r.touch_with(&file, &map, 5000, 9200, always_slow);
        r.touch_with(&file, &map, 60_000, 70_000, never_slow);
        assert_eq!(*file.will_need.lock(), vec![(5000, 4200), (60_000, 65_536 - 60_000)], "clipped to the file");
        // Fast touches count it warm again; then only a probe in PROBE_EVERY is timed.
        for _ in 1..COLD_CREDIT {
            r.touch_with(&file, &map, 0, 4096, never_slow);
        }
        assert!(!r.is_cold(), "{COLD_CREDIT} fast touches in a row make it warm");
        let asked = file.will_need.lock().len();
        for _ in 0..3 * PROBE_EVERY {
            r.touch_with(&file, &map, 0, 4096, never_slow);
        }
        assert_eq!(file.will_need.lock().len(), asked, "a warm table asks for nothing");
        // A slow probe while warm turns it cold within PROBE_EVERY loads.
        for _ in 0..PROBE_EVERY {
            r.touch_with(&file, &map, 0, 4096, always_slow);
        }
        assert!(r.is_cold());
        // An empty or out-of-file range is left alone.
        r.touch_with(&file, &map, 70_000, 80_000, always_slow);
        assert_eq!(file.will_need.lock().len(), asked);
    }
}
