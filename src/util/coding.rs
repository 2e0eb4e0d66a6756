//! Varint and fixed-width little-endian integer coding used by every on-disk format.

/// Append `v` as a LEB128 varint.
pub fn put_varint64(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

/// Append `v` as a LEB128 varint.
pub fn put_varint32(dst: &mut Vec<u8>, v: u32) {
    put_varint64(dst, v as u64)
}

/// Decode a varint from the front of `src`; returns the value and the bytes consumed,
/// or `None` when `src` ends mid-varint or the varint is longer than 10 bytes.
pub fn get_varint64(src: &[u8]) -> Option<(u64, usize)> {
    let mut result: u64 = 0;
    for (i, &b) in src.iter().enumerate().take(10) {
        result |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some((result, i + 1));
        }
    }
    None
}

/// Decode a varint that must fit in 32 bits.
pub fn get_varint32(src: &[u8]) -> Option<(u32, usize)> {
    let (v, n) = get_varint64(src)?;
    u32::try_from(v).ok().map(|v| (v, n))
}

/// Append a little-endian u32.
#[inline]
pub fn put_fixed32(dst: &mut Vec<u8>, v: u32) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Append a little-endian u64.
#[inline]
pub fn put_fixed64(dst: &mut Vec<u8>, v: u64) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Read a little-endian u32 at the front of `src` (caller checks the length).
#[inline]
pub fn decode_fixed32(src: &[u8]) -> u32 {
    u32::from_le_bytes([src[0], src[1], src[2], src[3]])
}

/// Read a little-endian u64 at the front of `src` (caller checks the length).
#[inline]
pub fn decode_fixed64(src: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&src[..8]);
    u64::from_le_bytes(b)
}

/// Append a varint length followed by the bytes.
pub fn put_length_prefixed(dst: &mut Vec<u8>, data: &[u8]) {
    put_varint64(dst, data.len() as u64);
    dst.extend_from_slice(data);
}

/// A cursor over a byte slice that decodes fields and reports truncation as `None`.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    pub fn varint64(&mut self) -> Option<u64> {
        let (v, n) = get_varint64(&self.buf[self.pos..])?;
        self.pos += n;
        Some(v)
    }
    pub fn varint32(&mut self) -> Option<u32> {
        let (v, n) = get_varint32(&self.buf[self.pos..])?;
        self.pos += n;
        Some(v)
    }
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    pub fn fixed32(&mut self) -> Option<u32> {
        let s = self.bytes(4)?;
        Some(decode_fixed32(s))
    }
    pub fn fixed64(&mut self) -> Option<u64> {
        let s = self.bytes(8)?;
        Some(decode_fixed64(s))
    }
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub fn length_prefixed(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint64()?).ok()?;
        self.bytes(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trips_edge_values() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint64(&mut b, v);
            assert_eq!(get_varint64(&b), Some((v, b.len())));
            assert_eq!(get_varint64(&b[..b.len() - 1]), None);
        }
    }

    #[test]
    fn reader_reports_truncation() {
        let mut b = Vec::new();
        put_fixed32(&mut b, 7);
        put_length_prefixed(&mut b, b"hello");
        let mut r = Reader::new(&b);
        assert_eq!(r.fixed32(), Some(7));
        assert_eq!(r.length_prefixed(), Some(&b"hello"[..]));
        assert!(r.is_empty());
        let mut r = Reader::new(&b[..6]);
        r.fixed32();
        assert_eq!(r.length_prefixed(), None);
    }
}
