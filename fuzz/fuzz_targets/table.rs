//! Fuzz target: table files in a `MemFs`. Mode byte even: the input is the whole file
//! (footer, index, filter, properties, data). Mode byte odd: a valid table is built from the
//! input's entries and then damaged by byte flips taken from the input, and every `get` of an
//! original key must return its original value, nothing, or an error — never a wrong value.
//! Either way `Table::open`, a full scan both ways and gets must never panic.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use wisckey::fs::{MemFs, Vfs};
use wisckey::internals::{
    make_internal_key, seek_key, user_key, InternalIterator, Table, TableBuilder, TableOptions, ValueKind, MAX_SEQ,
};
use wisckey::Compression;

fn write_file(fs: &MemFs, path: &Path, bytes: &[u8]) -> Option<()> {
    let mut f = fs.create(path).ok()?;
    f.append(bytes).ok()
}

/// A valid table of `entries` (user key → value), as bytes.
fn build(entries: &BTreeMap<Vec<u8>, Vec<u8>>, lz4: bool) -> Vec<u8> {
    let fs = MemFs::new();
    let path = Path::new("/000009.sst");
    let file = fs.create(path).expect("create");
    let opts = TableOptions {
        block_size_bytes: 64,
        restart_interval: 2,
        compression: if lz4 { Compression::Lz4 } else { Compression::None },
        bloom_bits_per_key: 10.0,
        ..TableOptions::default()
    };
    let mut b = TableBuilder::new(file, opts);
    for (i, (k, v)) in entries.iter().enumerate() {
        b.add(&make_internal_key(k, 1 + i as u64, ValueKind::Value), v).expect("add");
    }
    b.finish().expect("finish");
    let f = fs.open_read(path).expect("open");
    let mut buf = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(0, &mut buf).expect("read");
    buf
}

/// What `Table::get` answered for one key.
type GetAnswer = wisckey::Result<Option<(Vec<u8>, Vec<u8>)>>;

/// Open, scan both ways, and get `keys`; the get answers (None if the open failed).
fn probe(bytes: &[u8], keys: &[Vec<u8>]) -> Option<Vec<GetAnswer>> {
    let fs = MemFs::new();
    let path = Path::new("/000001.sst");
    write_file(&fs, path, bytes)?;
    let file = fs.open_read(path).ok()?;
    let table = Arc::new(Table::open(file, 1, bytes.len() as u64, None).ok()?);
    let mut it = table.iter(false);
    let mut n = 0;
    if it.seek_to_first().is_ok() {
        while it.valid() && n < 10_000 && it.next().is_ok() {
            n += 1;
        }
    }
    if it.seek_to_last().is_ok() {
        while it.valid() && n < 20_000 && it.prev().is_ok() {
            n += 1;
        }
    }
    Some(keys.iter().map(|k| table.get(&seek_key(k, MAX_SEQ), false)).collect())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 0 {
        let keys = [b"".to_vec(), b"a".to_vec(), b"\xff\xff".to_vec()];
        let _ = probe(rest, &keys);
        return;
    }
    // Odd mode: entries from the first part (8-byte chunks: 3 key bytes, 5 value bytes),
    // flips from the last part (3-byte chunks: position u16, xor byte).
    let split = rest.len() * 3 / 4;
    let (body, flips) = rest.split_at(split);
    let entries: BTreeMap<Vec<u8>, Vec<u8>> =
        body.chunks(8).map(|c| (c[..c.len().min(3)].to_vec(), c[c.len().min(3)..].repeat(4))).collect();
    if entries.is_empty() {
        return;
    }
    let mut table = build(&entries, mode & 2 != 0);
    for f in flips.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([f[0], f[1]])) % table.len();
        table[at] ^= f[2].max(1);
    }
    let keys: Vec<Vec<u8>> = entries.keys().cloned().collect();
    let Some(answers) = probe(&table, &keys) else { return };
    for (k, a) in keys.iter().zip(answers) {
        if let Ok(Some((ikey, value))) = a {
            assert_eq!(user_key(&ikey), &k[..], "get returned another key");
            assert_eq!(&value, &entries[k], "damaged table returned a wrong value for {k:?}");
        }
    }
});
