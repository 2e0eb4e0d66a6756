//! YCSB's record keys: `"user"` followed by the decimal FNV-1a hash of the record number
//! (CoreWorkload with `insertorder=hashed`, `zeropadding=1`), so loads arrive in random key order.

/// 64-bit FNV offset basis and prime, as in YCSB's `Utils`.
const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64(long)`: FNV-1a over the 8 little-endian bytes of `val`, then Java's
/// `Math.abs` on the signed result (which leaves `i64::MIN` negative, exactly as Java does).
pub fn fnvhash64(val: i64) -> i64 {
    let mut val = val;
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = (val & 0xff) as u64;
        // Java's `>>` is an arithmetic shift on a signed long.
        val >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    (hash as i64).wrapping_abs()
}

/// `CoreWorkload.buildKeyName(keynum)`: `"user" + fnvhash64(keynum)` for hashed inserts,
/// `"user" + keynum` for ordered ones (`zeropadding=1`: no padding).
pub fn key_name(keynum: u64, hashed: bool, out: &mut Vec<u8>) {
    use std::io::Write;
    out.clear();
    // Writing into a Vec cannot fail.
    let _ = if hashed { write!(out, "user{}", fnvhash64(keynum as i64)) } else { write!(out, "user{keynum}") };
}

/// db_bench's 16-digit zero-padded decimal key (used by the `--micro` benchmarks, so their
/// keys match `wisckey bench` and the C++ db_bench peers).
pub fn bench_key(k: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    out.clear();
    let _ = write!(out, "{k:016}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(k: u64) -> String {
        let mut v = Vec::new();
        key_name(k, true, &mut v);
        String::from_utf8(v).unwrap()
    }

    /// Reference values derived from the FNV-1a definition YCSB uses: for 0 the eight
    /// octets are all zero, so the hash is the basis multiplied by the prime eight times.
    #[test]
    fn fnv_matches_the_definition() {
        let mut h = FNV_OFFSET_BASIS_64;
        for _ in 0..8 {
            h = h.wrapping_mul(FNV_PRIME_64);
        }
        assert_eq!(fnvhash64(0), (h as i64).wrapping_abs());
        // One non-zero low octet changes only the first xor.
        let mut h1 = (FNV_OFFSET_BASIS_64 ^ 1).wrapping_mul(FNV_PRIME_64);
        for _ in 0..7 {
            h1 = h1.wrapping_mul(FNV_PRIME_64);
        }
        assert_eq!(fnvhash64(1), (h1 as i64).wrapping_abs());
        assert!(fnvhash64(12345) >= 0);
    }

    #[test]
    fn keys_look_like_ycsb_user_keys() {
        for k in [0u64, 1, 2, 999, 1_000_000] {
            let n = name(k);
            assert!(n.starts_with("user"), "{n}");
            let digits = &n[4..];
            assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{n}");
            assert_eq!(digits.parse::<i64>().unwrap(), fnvhash64(k as i64));
        }
        // Known values of YCSB's key for record 0 and 1 (FNV-1a 64 of 8 zero bytes, abs).
        assert_eq!(name(0), "user6284781860667377211");
        assert_eq!(name(1), "user8517097267634966620");
        assert_eq!(name(2), "user1820151046732198393");
        let mut v = Vec::new();
        key_name(42, false, &mut v);
        assert_eq!(v, b"user42");
    }

    #[test]
    fn bench_keys_are_zero_padded() {
        let mut v = Vec::new();
        bench_key(42, &mut v);
        assert_eq!(v, b"0000000000000042");
    }
}
