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
