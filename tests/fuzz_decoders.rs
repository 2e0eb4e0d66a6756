//! Stable-Rust fuzzing of every on-disk decoder with proptest: arbitrary bytes and mutated
//! valid encodings (flip / insert / delete / truncate) must never panic, and a damaged table
//! must never answer a read of an original key with a value it did not hold.
//! `PROPTEST_CASES` overrides the per-test case count.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use wisckey::fs::{MemFs, Vfs};
use wisckey::internals::{
    encode_group, group_crc, make_internal_key, seek_key, user_key, Block, BlockBuilder, BlockIter, BlockReads,
    FileMeta, InternalIterator, LogPos, LogReader, SegmentWriter, Table, TableBuilder, TableOptions, ValueKind,
    ValuePointer, VersionEdit, MAX_SEQ,
};
use wisckey::{BatchIter, BatchOp, Compression, WriteBatch};

/// Case count: `PROPTEST_CASES` if set, else `default` (kept small for debug builds).
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// One edit of a byte string; positions are taken modulo the current length.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 1u8..=255).prop_map(|(p, x)| Mutation::Flip(p, x)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Insert(p, b)),
        1 => any::<usize>().prop_map(Mutation::Delete),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..4)
}

fn apply(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let n = b.len();
        match *m {
            Mutation::Flip(p, x) if n > 0 => b[p % n] ^= x,
            Mutation::Insert(p, byte) => b.insert(p % (n + 1), byte),
            Mutation::Delete(p) if n > 0 => {
                b.remove(p % n);
            }
            Mutation::Truncate(p) => b.truncate(p % (n + 1)),
            _ => {}
        }
    }
    b
}

fn small_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

/// Sorted distinct user keys with values.
fn entries() -> impl Strategy<Value = BTreeMap<Vec<u8>, Vec<u8>>> {
    prop::collection::btree_map(small_bytes(12), small_bytes(40), 1..40)
}

// ---------- write batch ops ----------

/// Decoded ops: `(key, Some(value))` for a put, `(key, None)` for a delete.
type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

fn drain_batch(bytes: &[u8]) -> Ops {
    let mut out = Vec::new();
    for op in BatchIter::over(bytes) {
        match op {
            Ok((_, BatchOp::Put { key, value, .. })) => out.push((key.to_vec(), Some(value.to_vec()))),
            Ok((_, BatchOp::Delete { key })) => out.push((key.to_vec(), None)),
            // GC's relocation ops: never in a user batch, decoded without panicking.
            Ok((_, BatchOp::PutPointer { key, pointer, .. })) => {
                assert!((7..=28).contains(&pointer.len()), "pointer of {} bytes", pointer.len());
                out.push((key.to_vec(), None))
            }
            Ok(_) => {}
            Err(at) => {
                assert!(at <= bytes.len(), "error offset {at} past the end ({} bytes)", bytes.len());
                break;
            }
        }
    }
    out
}

fn batch_rep(ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Vec<u8> {
    let mut b = WriteBatch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k, v),
            None => b.delete(k),
        };
    }
    // Re-encode through the public iterator to get the raw op bytes of the batch.
    let mut rep = Vec::new();
    for op in b.iter() {
        match op {
            Ok((_, BatchOp::Put { key, value, .. })) => encode_op(&mut rep, 1, key, value),
            Ok((_, BatchOp::Delete { key })) => encode_op(&mut rep, 0, key, &[]),
            _ => {}
        }
    }
    rep
}

/// `kind | varint klen | varint vlen | key | value` (the write-batch op encoding).
fn encode_op(dst: &mut Vec<u8>, kind: u8, key: &[u8], value: &[u8]) {
    dst.push(kind);
    for mut n in [key.len() as u32, value.len() as u32] {
        while n >= 0x80 {
            dst.push((n as u8) | 0x80);
            n >>= 7;
        }
        dst.push(n as u8);
    }
    dst.extend_from_slice(key);
    dst.extend_from_slice(value);
}

fn batch_ops() -> impl Strategy<Value = Ops> {
    prop::collection::vec((small_bytes(10), prop::option::of(small_bytes(30))), 1..12)
}

// ---------- version edit ----------

fn sample_edit(n: u64, key: &[u8]) -> VersionEdit {
    let meta = FileMeta {
        number: n,
        size: 4096 + n,
        smallest: make_internal_key(key, 1, ValueKind::Value),
        largest: make_internal_key(&[key, b"z"].concat(), 9, ValueKind::Value),
        segments: 1,
        ..FileMeta::default()
    };
    VersionEdit {
        comparator: Some("wisckey.bytewise".into()),
        format_version: Some(1),
        next_file_number: Some(n + 10),
        last_sequence: Some(n * 3),
        log_head: Some(LogPos { file: n, offset: 77 }),
        compact_pointers: vec![(1, make_internal_key(key, 5, ValueKind::Value))],
        deleted_files: vec![(0, n + 1)],
        added_files: vec![(2, meta)],
        policy: Some("leveled".into()),
        vlog_added: vec![(3, 100)],
        vlog_garbage: vec![(3, 10)],
        vlog_files_deleted: vec![2],
        ..VersionEdit::default()
    }
}

// ---------- log groups ----------

fn log_file(bytes: &[u8]) -> Arc<dyn wisckey::fs::RandomAccessFile> {
    let fs = MemFs::new();
    let path = Path::new("/000007.log");
    let mut f = fs.create(path).expect("create log");
    f.append(bytes).expect("append log");
    drop(f);
    fs.open_read(path).expect("open log")
}

/// Read every group; check each decoded group's ops decode without panic.
fn read_log(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut r = LogReader::new(log_file(bytes), 7, 0).expect("reader");
    let mut out = Vec::new();
    for _ in 0..10_000 {
        match r.next_record() {
            Ok(Ok(rec)) => {
                drain_batch(&rec.ops);
                out.push((rec.first_seq, rec.ops));
            }
            Ok(Err(_)) | Err(_) => break,
        }
    }
    out
}

fn log_bytes(groups: &[Ops]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = 1u64;
    for ops in groups {
        let rep = batch_rep(ops);
        let count = ops.len() as u32;
        let crc = group_crc(seq, count, &rep);
        encode_group(&mut out, seq, count, &rep, crc);
        seq += u64::from(count);
    }
    out
}

// ---------- tables and blocks ----------

fn table_options(compression: Compression) -> TableOptions {
    TableOptions {
        block_size_bytes: 128,
        restart_interval: 3,
        compression,
        bloom_bits_per_key: 10.0,
        ..TableOptions::default()
    }
}

fn build_table(entries: &BTreeMap<Vec<u8>, Vec<u8>>, compression: Compression) -> Vec<u8> {
    let fs = MemFs::new();
    let path = Path::new("/000001.sst");
    let file = fs.create(path).expect("create table");
    let mut b = TableBuilder::new(file, table_options(compression));
    for (i, (k, v)) in entries.iter().enumerate() {
        b.add(&make_internal_key(k, 100 + i as u64, ValueKind::Value), v).expect("add");
    }
    b.finish().expect("finish");
    read_all(&fs, path)
}

/// A DTable of two segments: `entries` as `build_table` writes them, then a segment holding
/// every key again, newer, with its value reversed (what a light-weight compaction appends).
fn build_dtable(entries: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let fs = Arc::new(MemFs::new());
    let path = Path::new("/000001.sst");
    let mut f = fs.create(path).expect("create table");
    f.append(&build_table(entries, Compression::None)).expect("write segment 0");
    drop(f);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let size = fs.file_size(path).expect("size");
    let opts = table_options(Compression::None);
    let mut w = SegmentWriter::open(&vfs, path, size, vec![size], opts).expect("open for append");
    for (i, (k, v)) in entries.iter().enumerate() {
        let newer: Vec<u8> = v.iter().rev().copied().collect();
        w.add(&make_internal_key(k, 10_000 + i as u64, ValueKind::Value), &newer).expect("add");
    }
    w.finish().expect("finish segment");
    read_all(&fs, path)
}

fn read_all(fs: &MemFs, path: &Path) -> Vec<u8> {
    let f = fs.open_read(path).expect("open");
    let mut buf = vec![0u8; f.len().expect("len") as usize];
    f.read_exact_at(0, &mut buf).expect("read");
    buf
}

/// Open `bytes` as a table; if it opens, iterate it fully and `get` every original key.
/// Returns the entries the iteration produced (None on an error) and the get answers (the
/// entry's kind byte and value).
type Probe = (Option<Vec<(Vec<u8>, Vec<u8>)>>, Vec<wisckey::Result<Option<(Vec<u8>, Vec<u8>)>>>);

fn probe_table(bytes: &[u8], keys: &[Vec<u8>]) -> wisckey::Result<Probe> {
    let fs = MemFs::new();
    let path = Path::new("/000002.sst");
    let mut f = fs.create(path).expect("create");
    f.append(bytes).expect("append");
    drop(f);
    let file = fs.open_read(path).expect("open");
    let table = Arc::new(Table::open(file, 2, bytes.len() as u64, None)?);
    let scanned = scan(&table).ok();
    let gets = keys
        .iter()
        .map(|k| {
            table
                .get(&seek_key(k, MAX_SEQ), BlockReads::filling(false))
                .map(|g| g.map(|(kind, v)| (vec![kind as u8], v.to_vec())))
        })
        .collect();
    Ok((scanned, gets))
}

fn scan(table: &Arc<Table>) -> wisckey::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut it = table.iter(BlockReads::filling(false));
    it.seek_to_first()?;
    let mut out = Vec::new();
    while it.valid() && out.len() < 100_000 {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next()?;
    }
    // Backward too: exercises prev() over damaged restart arrays.
    it.seek_to_last()?;
    for _ in 0..out.len().min(50) {
        if !it.valid() {
            break;
        }
        it.prev()?;
    }
    Ok(out)
}

/// Blocks are given to `Block::new` (which must validate the restart array) and iterated
/// both ways.
fn probe_block(bytes: Vec<u8>, seek: &[u8]) {
    let Ok(block) = Block::new(bytes, Arc::from(Path::new("/b")), 0) else { return };
    let block = Arc::new(block);
    let mut it = BlockIter::new(Arc::clone(&block));
    let mut steps = 0;
    if it.seek_to_first().is_ok() {
        while it.valid() && steps < 10_000 && it.next().is_ok() {
            steps += 1;
        }
    }
    let _ = it.seek(seek);
    if it.seek_to_last().is_ok() {
        while it.valid() && steps < 20_000 && it.prev().is_ok() {
            steps += 1;
        }
    }
}

/// A valid data block holding `entries` (built by the table\'s own block builder).
fn valid_block(entries: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let mut b = BlockBuilder::new(3);
    for (i, (k, v)) in entries.iter().enumerate() {
        b.add(&make_internal_key(k, 100 + i as u64, ValueKind::Value), v);
    }
    b.finish().to_vec()
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn batch_decoder_survives_arbitrary_bytes(bytes in small_bytes(200)) {
        drain_batch(&bytes);
    }

    #[test]
    fn batch_decoder_survives_mutated_batches(ops in batch_ops(), muts in mutations()) {
        let rep = batch_rep(&ops);
        prop_assert_eq!(drain_batch(&rep), ops.clone(), "valid encoding must round-trip");
        drain_batch(&apply(rep, &muts));
    }

    #[test]
    fn version_edit_decoder_survives_arbitrary_bytes(bytes in small_bytes(200)) {
        let _ = VersionEdit::decode(&bytes);
    }

    #[test]
    fn version_edit_decoder_survives_mutated_edits(n in 1u64..1 << 40, key in small_bytes(16), muts in mutations()) {
        let edit = sample_edit(n, &key);
        let enc = edit.encoded();
        prop_assert_eq!(VersionEdit::decode(&enc).expect("valid edit decodes"), edit);
        if let Err(e) = VersionEdit::decode(&apply(enc.clone(), &muts)) {
            prop_assert!(e.offset <= enc.len() as u64 + 8, "error offset {} past the input", e.offset);
        }
    }

    #[test]
    fn value_pointer_decoder_survives_any_bytes(bytes in small_bytes(40), p in any::<(u64, u64, u32, u32)>(), muts in mutations()) {
        let _ = ValuePointer::decode(&bytes);
        let ptr = ValuePointer { file: p.0, offset: p.1, op_len: p.2, value_crc: p.3 };
        let enc = ptr.encoded();
        prop_assert_eq!(ValuePointer::decode(&enc), Some(ptr));
        let _ = ValuePointer::decode(&apply(enc, &muts));
    }

    #[test]
    fn log_reader_survives_arbitrary_bytes(bytes in small_bytes(300)) {
        read_log(&bytes);
    }

    #[test]
    fn log_reader_never_returns_a_damaged_group(groups in prop::collection::vec(batch_ops(), 1..5), muts in mutations()) {
        let good = log_bytes(&groups);
        let valid = read_log(&good);
        prop_assert_eq!(valid.len(), groups.len(), "valid log must read back whole");
        // Every group the reader returns from a damaged log passed its crc, so it must be one of
        // the groups written (same first sequence and ops).
        for (seq, ops) in read_log(&apply(good, &muts)) {
            prop_assert!(valid.iter().any(|(s, o)| *s == seq && *o == ops), "reader returned a group never written (seq {})", seq);
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn block_decoder_survives_arbitrary_and_mutated_blocks(bytes in small_bytes(300), e in entries(), muts in mutations(), seek in small_bytes(20)) {
        probe_block(bytes, &seek);
        let block = valid_block(&e);
        probe_block(apply(block, &muts), &seek_key(&seek, MAX_SEQ));
    }

    #[test]
    fn table_open_survives_arbitrary_bytes(bytes in small_bytes(400), keys in prop::collection::vec(small_bytes(8), 0..4)) {
        let _ = probe_table(&bytes, &keys);
    }

    #[test]
    fn mutated_table_never_returns_a_wrong_value(e in entries(), muts in mutations(), lz4 in any::<bool>()) {
        let compression = if lz4 { Compression::Lz4 } else { Compression::None };
        let good = build_table(&e, compression);
        let keys: Vec<Vec<u8>> = e.keys().cloned().collect();
        let (scanned, gets) = probe_table(&good, &keys).expect("valid table opens");
        prop_assert_eq!(scanned.expect("valid table scans").len(), e.len());
        prop_assert!(gets.iter().all(|g| matches!(g, Ok(Some(_)))), "valid table must find every key");
        let Ok((scanned, gets)) = probe_table(&apply(good, &muts), &keys) else { return Ok(()) };
        for (k, got) in keys.iter().zip(gets) {
            if let Ok(Some((kind, value))) = got {
                // A hit for an original key (the table checks the key) must carry that key's
                // original value, as a put.
                prop_assert_eq!(kind, vec![ValueKind::Value as u8]);
                prop_assert_eq!(&value, &e[k], "wrong value for key {:?}", k);
            }
        }
        // A full scan that succeeded may only return original pairs (checksums guard data).
        for (ikey, value) in scanned.unwrap_or_default() {
            let uk = user_key(&ikey).to_vec();
            prop_assert_eq!(e.get(&uk), Some(&value), "scan returned a pair never written: {:?}", uk);
        }
    }

    #[test]
    fn mutated_dtable_never_returns_a_wrong_or_stale_value(e in entries(), muts in mutations()) {
        let good = build_dtable(&e);
        let keys: Vec<Vec<u8>> = e.keys().cloned().collect();
        let newest = |k: &Vec<u8>| e[k].iter().rev().copied().collect::<Vec<u8>>();
        let (scanned, gets) = probe_table(&good, &keys).expect("valid DTable opens");
        prop_assert_eq!(scanned.expect("valid DTable scans").len(), 2 * e.len());
        for (k, g) in keys.iter().zip(&gets) {
            let found = g.as_ref().ok().and_then(|g| g.as_ref()).map(|(_, v)| v.clone());
            prop_assert_eq!(found, Some(newest(k)), "the newest segment answers");
        }
        let bad = apply(good.clone(), &muts);
        // Cut to exactly an older length the file is that older table (the manifest's length,
        // not the file's, decides in the engine); at the original length only the newest
        // value may come back.
        let same_length = bad.len() == good.len();
        let Ok((scanned, gets)) = probe_table(&bad, &keys) else { return Ok(()) };
        for (k, got) in keys.iter().zip(gets) {
            if let Ok(Some((_, value))) = got {
                let ok = value == newest(k) || (!same_length && value == e[k]);
                prop_assert!(ok, "wrong value for key {:?}", k);
            }
        }
        for (ikey, value) in scanned.unwrap_or_default() {
            let uk = user_key(&ikey).to_vec();
            let written = e.get(&uk).is_some_and(|v| *v == value || value == newest(&uk));
            prop_assert!(written, "scan returned a pair never written: {:?}", uk);
        }
    }
}
