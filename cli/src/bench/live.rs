//! Which benchmark keys are present and with which value size, so `stats` can report space
//! amplification (disk bytes / live user bytes) without scanning (a scan would warm caches).

use std::sync::atomic::{AtomicU8, Ordering};

/// Per-key value-size class: 0 = absent, otherwise an index into `value_sizes`.
pub struct LiveKeys {
    class: Vec<AtomicU8>,
    key_size: u64,
    value_sizes: Vec<u64>,
}

impl LiveKeys {
    pub fn new(num: u64, key_size: usize) -> Self {
        LiveKeys {
            class: (0..num).map(|_| AtomicU8::new(0)).collect(),
            key_size: key_size as u64,
            value_sizes: vec![0],
        }
    }

    /// The class for values of `len` bytes (called once per benchmark, before its threads).
    pub fn class_for(&mut self, len: usize) -> u8 {
        let len = len as u64;
        if let Some(i) = self.value_sizes.iter().skip(1).position(|&v| v == len) {
            return (i + 1) as u8;
        }
        if self.value_sizes.len() > u8::MAX as usize {
            // Out of classes (cannot happen with db_bench's two sizes): count as the last one.
            return u8::MAX;
        }
        self.value_sizes.push(len);
        (self.value_sizes.len() - 1) as u8
    }

    pub fn put(&self, k: u64, class: u8) {
        if let Some(c) = self.class.get(k as usize) {
            c.store(class, Ordering::Relaxed);
        }
    }

    pub fn delete(&self, k: u64) {
        self.put(k, 0);
    }

    /// Forget everything (the database was destroyed).
    pub fn clear(&self) {
        for c in &self.class {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// Key + value bytes of the keys present.
    pub fn bytes(&self) -> u64 {
        self.class
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .filter(|&c| c != 0)
            .map(|c| self.key_size + self.value_sizes[c as usize])
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_bytes_follow_puts_overwrites_and_deletes() {
        let mut live = LiveKeys::new(10, 16);
        let small = live.class_for(100);
        let big = live.class_for(100_000);
        assert_eq!(live.class_for(100), small);
        live.put(1, small);
        live.put(2, small);
        live.put(2, big);
        live.put(3, small);
        live.delete(3);
        live.put(99, small); // out of range: ignored, not a panic
        assert_eq!(live.bytes(), 116 + 100_016);
        live.clear();
        assert_eq!(live.bytes(), 0);
    }
}
