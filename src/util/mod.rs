//! Small shared helpers: integer coding and checksums.

pub mod coding;

/// crc32c of `data`, the checksum of every on-disk record and block.
#[inline]
pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// crc32c continued over `data` from a previous value.
#[inline]
pub fn crc_extend(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}
