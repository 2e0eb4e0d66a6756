//! db_bench's `RandomGenerator`: values cut from a fixed buffer of 100-byte pieces, each
//! piece a random prefix repeated, so values compress to about `--compression_ratio`.

use super::keys::Random;

/// Hands out value slices of any length from a precomputed compressible buffer.
pub struct ValueGenerator {
    data: Vec<u8>,
    pos: usize,
}

impl ValueGenerator {
    /// A buffer of at least 1 MiB (larger than any compression window) that also holds two
    /// values of `max_len` bytes.
    pub fn new(compression_ratio: f64, max_len: usize) -> Self {
        let target = (1 << 20).max(2 * max_len + 1);
        let mut rnd = Random::new(301);
        let mut data = Vec::with_capacity(target + 100);
        while data.len() < target {
            compressible_piece(&mut rnd, compression_ratio, 100, &mut data);
        }
        ValueGenerator { data, pos: 0 }
    }

    /// The next `len` bytes of the buffer, wrapping to the start when they would run off it.
    pub fn generate(&mut self, len: usize) -> &[u8] {
        let len = len.min(self.data.len());
        if self.pos + len > self.data.len() {
            self.pos = 0;
        }
        self.pos += len;
        &self.data[self.pos - len..self.pos]
    }
}

/// LevelDB's `test::CompressibleString`: `len * ratio` random printable bytes, repeated to `len`.
fn compressible_piece(rnd: &mut Random, ratio: f64, len: usize, dst: &mut Vec<u8>) {
    let raw = ((len as f64 * ratio) as usize).max(1);
    let random: Vec<u8> = (0..raw).map(|_| b' ' + rnd.uniform(95) as u8).collect();
    for i in 0..len {
        dst.push(random[i % raw]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lz4_ratio(ratio: f64) -> f64 {
        let mut g = ValueGenerator::new(ratio, 100);
        let sample: Vec<u8> = (0..4096).flat_map(|_| g.generate(100).to_vec()).collect();
        lz4_flex::block::compress(&sample).len() as f64 / sample.len() as f64
    }

    #[test]
    fn values_compress_to_about_the_requested_ratio() {
        let half = lz4_ratio(0.5);
        assert!((0.45..0.65).contains(&half), "ratio 0.5 compressed to {half}");
        let quarter = lz4_ratio(0.25);
        assert!((0.2..0.4).contains(&quarter), "ratio 0.25 compressed to {quarter}");
        assert!(lz4_ratio(1.0) > 0.95);
    }

    #[test]
    fn generate_wraps_instead_of_running_off_the_buffer() {
        let mut g = ValueGenerator::new(0.5, 100_000);
        for _ in 0..100 {
            assert_eq!(g.generate(100_000).len(), 100_000);
        }
    }

    #[test]
    fn values_larger_than_one_mebibyte_are_served() {
        let mut g = ValueGenerator::new(0.5, 3 << 20);
        assert_eq!(g.generate(3 << 20).len(), 3 << 20);
        assert_eq!(g.generate(3 << 20).len(), 3 << 20);
    }
}
