//! Small shared helpers: integer coding and checksums.

pub mod coding;

/// crc32c of `data`, the checksum of every on-disk record and block.
#[inline]
pub fn crc(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// crc32c continued over `data` from a previous value.
#[inline]
pub fn crc_extend(crc: u32, data: &[u8]) -> u32 {
    // The digest's state is the crc before its final inversion.
    let mut digest = crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_is_crc32c_and_extends_across_any_split() {
        // The check value of CRC-32C (iSCSI): the on-disk format stays fixed whatever computes it.
        assert_eq!(crc(b"123456789"), 0xe306_9283);
        assert_eq!(crc(b""), 0);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for split in [0, 1, 9, 4096, 65_537, data.len()] {
            let (a, b) = data.split_at(split);
            assert_eq!(crc_extend(crc(a), b), crc(&data), "split at {split}");
        }
    }
}
