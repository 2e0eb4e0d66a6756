//! Tests of `table_reader.rs`.

use std::path::PathBuf;

use parking_lot::Mutex;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::fs::WritableFile;
use crate::key::compare_internal;
use crate::key::{make_internal_key, seek_key, ValueKind, MAX_SEQ};
use crate::sst::block_cache::new_block_cache;
use crate::sst::compression::Compression;

/// `Table::get` with the value copied out, to compare with the model's vectors.
fn get_vec(t: &Table, ikey: &[u8], fill: bool) -> Result<Option<(ValueKind, Vec<u8>)>> {
    t.get(ikey, BlockReads::filling(fill)).map(|hit| hit.map(|(kind, v)| (kind, v.to_vec())))
}

/// What `Table::get` answers for a model entry: its kind and value.
fn kind_value((ikey, value): &(Vec<u8>, Vec<u8>)) -> (ValueKind, Vec<u8>) {
    (crate::key::parse_internal_key(ikey).expect("model keys parse").kind, value.clone())
}
use crate::sst::table_builder::{TableBuilder, TableOptions, TableSummary};

/// A file in memory, writable and readable (the tests must not depend on `fs::MemFs`).
#[derive(Clone)]
struct MemFile {
    data: Arc<Mutex<Vec<u8>>>,
    path: PathBuf,
}

impl MemFile {
    fn new() -> Self {
        MemFile { data: Arc::default(), path: PathBuf::from("/mem/000007.sst") }
    }
    fn with_bytes(bytes: Vec<u8>) -> Self {
        let f = MemFile::new();
        *f.data.lock() = bytes;
        f
    }
    fn bytes(&self) -> Vec<u8> {
        self.data.lock().clone()
    }
}

impl WritableFile for MemFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.data.lock().extend_from_slice(data);
        Ok(())
    }
    fn sync_data(&mut self) -> Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.data.lock().len() as u64
    }
    fn truncate(&mut self, len: u64) -> Result<()> {
        self.data.lock().truncate(len as usize);
        Ok(())
    }
}

impl RandomAccessFile for MemFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let d = self.data.lock();
        let start = (offset as usize).min(d.len());
        let n = buf.len().min(d.len() - start);
        buf[..n].copy_from_slice(&d[start..start + n]);
        Ok(n)
    }
    fn len(&self) -> Result<u64> {
        Ok(self.data.lock().len() as u64)
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

type Model = Vec<(Vec<u8>, Vec<u8>)>;

fn opts(block: usize, restart: usize, compression: Compression, bits: f64) -> TableOptions {
    TableOptions {
        block_size_bytes: block,
        restart_interval: restart,
        compression,
        bloom_bits_per_key: bits,
        ..TableOptions::default()
    }
}

/// `n_users` user keys (even numbers only, so odd ones are known absent), 1..=4 versions
/// each, values of varying length and compressibility; sorted in internal order.
fn random_model(seed: u64, n_users: usize) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut users: Vec<u64> = (0..n_users).map(|_| rng.gen_range(0..1_000_000u64) * 2).collect();
    users.sort_unstable();
    users.dedup();
    let mut model = Vec::new();
    for u in users {
        let uk = format!("user{u:08}");
        let versions = rng.gen_range(1..=4);
        let mut seqs: Vec<u64> = (0..versions).map(|_| rng.gen_range(1..1 << 40)).collect();
        seqs.sort_unstable_by(|a, b| b.cmp(a));
        seqs.dedup();
        for seq in seqs {
            let kind = ValueKind::from_u8(rng.gen_range(0..3u8)).expect("0, 1 and 2 are kinds");
            let len = rng.gen_range(0..100);
            let value: Vec<u8> = (0..len).map(|i| b'a' + ((u as usize + i) % 7) as u8).collect();
            model.push((make_internal_key(uk.as_bytes(), seq, kind), value));
        }
    }
    model
}

fn build(model: &Model, o: TableOptions) -> (MemFile, TableSummary) {
    let file = MemFile::new();
    let mut b = TableBuilder::new(Box::new(file.clone()), o);
    for (k, v) in model {
        b.add(k, v).unwrap();
    }
    let summary = b.finish().unwrap();
    assert_eq!(summary.num_entries, model.len() as u64);
    assert_eq!(summary.file_size, file.bytes().len() as u64);
    (file, summary)
}

fn open(file: &MemFile, cache: Option<Arc<BlockCache>>) -> Result<Arc<Table>> {
    let size = file.bytes().len() as u64;
    Table::open(Arc::new(file.clone()), 7, size, cache).map(Arc::new)
}

/// Every entry of `t`, read forward (also used by the DTable tests).
pub(crate) fn scan_forward(t: &Arc<Table>) -> Result<Model> {
    let mut it = t.iter(BlockReads::filling(true));
    let mut out = Vec::new();
    it.seek_to_first()?;
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next()?;
    }
    Ok(out)
}

/// Every entry of `t`, read backward, in key order.
pub(crate) fn scan_backward(t: &Arc<Table>) -> Result<Model> {
    let mut it = t.iter(BlockReads::filling(true));
    let mut out = Vec::new();
    it.seek_to_last()?;
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.prev()?;
    }
    out.reverse();
    Ok(out)
}

fn model_seek(model: &Model, target: &[u8]) -> Option<usize> {
    let i = model.partition_point(|(k, _)| compare_internal(k, target) == Ordering::Less);
    (i < model.len()).then_some(i)
}

fn model_get(model: &Model, target: &[u8]) -> Option<(ValueKind, Vec<u8>)> {
    let i = model_seek(model, target)?;
    let hit = user_key(&model[i].0) == user_key(target);
    hit.then(|| kind_value(&model[i]))
}

/// Everything the reader offers, checked against the model.
fn check_table(model: &Model, t: &Arc<Table>, seed: u64) {
    assert_eq!(scan_forward(t).unwrap(), *model);
    assert_eq!(scan_backward(t).unwrap(), *model);
    for e @ (k, _) in model {
        assert_eq!(get_vec(t, k, true).unwrap(), Some(kind_value(e)));
        let newest = seek_key(user_key(k), MAX_SEQ);
        assert_eq!(get_vec(t, &newest, true).unwrap(), model_get(model, &newest));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut it = t.iter(BlockReads::filling(false));
    for _ in 0..2000 {
        let u = rng.gen_range(0..2_000_001u64);
        let target = make_internal_key(format!("user{u:08}").as_bytes(), rng.gen_range(0..1 << 41), ValueKind::Value);
        assert_eq!(get_vec(t, &target, false).unwrap(), model_get(model, &target));
        it.seek(&target).unwrap();
        match model_seek(model, &target) {
            Some(i) => {
                assert!(it.valid());
                assert_eq!((it.key(), it.value()), (&model[i].0[..], &model[i].1[..]));
                // Step both ways from a sought position.
                it.next().unwrap();
                assert_eq!(it.valid(), i + 1 < model.len());
                if it.valid() {
                    assert_eq!(it.key(), &model[i + 1].0[..]);
                    it.prev().unwrap();
                    assert_eq!(it.key(), &model[i].0[..]);
                }
            }
            None => assert!(!it.valid()),
        }
    }
    let p = t.properties();
    assert_eq!(p.num_entries, model.len() as u64);
    assert_eq!(p.smallest, model.first().map(|e| e.0.clone()).unwrap_or_default());
    assert_eq!(p.largest, model.last().map(|e| e.0.clone()).unwrap_or_default());
}

#[test]
fn ten_thousand_keys_round_trip_with_every_compression() {
    let model = random_model(1, 10_000);
    assert!(model.len() > 20_000);
    for c in [Compression::None, Compression::Lz4, Compression::Zstd(3)] {
        let (file, summary) = build(&model, opts(4096, 16, c, 10.0));
        assert_eq!(summary.num_entries, model.len() as u64);
        assert_eq!(summary.smallest, model[0].0);
        assert_eq!(summary.largest, model.last().unwrap().0);
        let dels = model.iter().filter(|(k, _)| k[k.len() - 8] == 0).count() as u64;
        assert_eq!(summary.num_deletions, dels);
        let raw_values: u64 = model.iter().map(|(_, v)| v.len() as u64).sum();
        assert_eq!(summary.raw_value_bytes, raw_values);
        let t = open(&file, Some(new_block_cache(1 << 20))).unwrap();
        check_table(&model, &t, 2);
        if c != Compression::None {
            let raw: u64 = summary.raw_key_bytes + summary.raw_value_bytes;
            assert!(summary.file_size < raw, "{c:?} should shrink these values");
        }
    }
}

#[test]
fn tiny_blocks_and_restart_interval_one_round_trip() {
    let model = random_model(3, 3000);
    for (block, restart) in [(1, 1), (64, 1), (200, 3), (1 << 20, 1), (1 << 20, 1000)] {
        let (file, _) = build(&model, opts(block, restart, Compression::None, 0.0));
        let t = open(&file, None).unwrap();
        if block == 1 {
            assert_eq!(t.properties().num_data_blocks, model.len() as u64);
        }
        check_table(&model, &t, 4);
    }
}

#[test]
fn empty_table_has_no_entries() {
    let (file, summary) = build(&Vec::new(), TableOptions::default());
    assert_eq!(summary.num_entries, 0);
    assert!(summary.smallest.is_empty());
    let t = open(&file, None).unwrap();
    check_table(&Vec::new(), &t, 5);
    assert!(!t.may_contain(b"anything"));
    assert_eq!(t.approximate_offset_of(b"anything\0\0\0\0\0\0\0\0"), 0);
}

#[test]
fn bloom_filter_false_positive_rate_is_under_2_percent() {
    let model: Model = (0..20_000u32)
        .map(|i| (make_internal_key(format!("k{i}").as_bytes(), 1, ValueKind::Value), vec![]))
        .collect::<Vec<_>>();
    let mut model = model;
    model.sort_by(|a, b| compare_internal(&a.0, &b.0));
    let (file, _) = build(&model, TableOptions::default());
    let t = open(&file, None).unwrap();
    assert!(model.iter().all(|(k, _)| t.may_contain(user_key(k))));
    let fp = (0..100_000u32).filter(|i| t.may_contain(format!("absent{i}").as_bytes())).count();
    let rate = fp as f64 / 100_000.0;
    assert!(rate < 0.02, "false positive rate {rate}");
}

#[test]
fn table_without_filter_may_contain_everything() {
    let model = random_model(6, 100);
    let (file, _) = build(&model, opts(4096, 16, Compression::None, 0.0));
    let t = open(&file, None).unwrap();
    assert!(t.may_contain(b"not there"));
    check_table(&model, &t, 7);
}

/// Open, scan everything and get every key: either everything matches the model or a
/// `Corruption` error is reported. Never a panic, never wrong data.
fn corruption_or_exact(bytes: Vec<u8>, model: &Model) -> std::result::Result<(), String> {
    let size = bytes.len() as u64;
    corruption_or_exact_in(Arc::new(MemFile::with_bytes(bytes)), size, model)
}

/// `bytes` written to `dir/000007.sst`, opened memory-mapped through `PosixFs`.
pub(super) fn mapped_file(dir: &Path, bytes: &[u8]) -> Arc<dyn RandomAccessFile> {
    use crate::fs::{PosixFs, Vfs};
    let fs = PosixFs::new();
    let path = dir.join("000007.sst");
    let mut w = fs.create(&path).unwrap();
    w.append(bytes).unwrap();
    let file = fs.open_read_mapped(&path).unwrap();
    assert_eq!(file.mapping().is_some(), !bytes.is_empty(), "table file should be mapped");
    file
}

/// `corruption_or_exact` of a table read through a memory mapping.
fn corruption_or_exact_mapped(dir: &Path, bytes: &[u8], model: &Model) -> std::result::Result<(), String> {
    corruption_or_exact_in(mapped_file(dir, bytes), bytes.len() as u64, model)
}

fn corruption_or_exact_in(
    file: Arc<dyn RandomAccessFile>,
    size: u64,
    model: &Model,
) -> std::result::Result<(), String> {
    let t = match Table::open(file, 7, size, None) {
        Ok(t) => Arc::new(t),
        Err(e) if e.is_corruption() => return Err(e.to_string()),
        Err(e) => panic!("open failed with a non-corruption error: {e}"),
    };
    let check = |r: Result<Model>| match r {
        Ok(m) => {
            assert_eq!(m, *model, "damaged table returned wrong data");
            Ok(())
        }
        Err(e) => {
            assert!(e.is_corruption(), "{e}");
            Err(e.to_string())
        }
    };
    check(scan_forward(&t))?;
    check(scan_backward(&t))?;
    for e @ (k, _) in model {
        match get_vec(&t, k, false) {
            Ok(got) => assert_eq!(got, Some(kind_value(e))),
            Err(e) => {
                assert!(e.is_corruption(), "{e}");
                return Err(e.to_string());
            }
        }
    }
    Ok(())
}

#[test]
fn every_flipped_byte_is_reported_as_corruption() {
    let model = random_model(8, 60);
    for c in [Compression::None, Compression::Lz4] {
        let (file, _) = build(&model, opts(256, 4, c, 10.0));
        let good = file.bytes();
        assert!(corruption_or_exact(good.clone(), &model).is_ok());
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x20;
            let r = corruption_or_exact(bad, &model);
            assert!(r.is_err(), "flip at {i} of {} went unnoticed", good.len());
        }
    }
}

#[test]
fn every_flipped_byte_in_a_mapped_table_is_reported_as_corruption() {
    // Thousands of rewrites of one small file: on tmpfs when there is one (fast, and
    // mmap works the same), else in the default temp dir.
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    let model = random_model(8, 60);
    for c in [Compression::None, Compression::Lz4] {
        let (file, _) = build(&model, opts(256, 4, c, 10.0));
        let good = file.bytes();
        assert!(corruption_or_exact_mapped(dir.path(), &good, &model).is_ok());
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x20;
            let r = corruption_or_exact_mapped(dir.path(), &bad, &model);
            assert!(r.is_err(), "flip at {i} of {} went unnoticed", good.len());
        }
    }
}

/// A block that failed its checksum is not remembered as verified: every later read of
/// it fails again, while the other blocks keep working.
#[test]
fn flipped_byte_in_mapped_data_block_fails_every_read_of_that_block() {
    let dir = tempfile::tempdir().unwrap();
    let model = random_model(9, 500);
    let (file, _) = build(&model, opts(4096, 16, Compression::None, 10.0));
    let mut bytes = file.bytes();
    bytes[10] ^= 1; // inside the first data block
    let t = Arc::new(Table::open(mapped_file(dir.path(), &bytes), 7, bytes.len() as u64, None).unwrap());
    assert!(t.is_mapped());
    let first = &model[0].0;
    let last = &model[model.len() - 1].0;
    for _ in 0..3 {
        let e = get_vec(&t, first, true).unwrap_err();
        assert!(e.is_corruption() && e.to_string().contains("offset 0"), "{e}");
        assert_eq!(get_vec(&t, last, true).unwrap(), Some(kind_value(&model[model.len() - 1])));
    }
    assert!(scan_forward(&t).unwrap_err().is_corruption());
}

#[test]
fn mapped_tables_round_trip_with_and_without_compression() {
    let dir = tempfile::tempdir().unwrap();
    let model = random_model(16, 3000);
    for c in [Compression::None, Compression::Lz4] {
        let (file, _) = build(&model, opts(4096, 16, c, 10.0));
        let bytes = file.bytes();
        let cache = new_block_cache(1 << 20);
        let f = mapped_file(dir.path(), &bytes);
        let t = Arc::new(Table::open(f, 7, bytes.len() as u64, Some(Arc::clone(&cache))).unwrap());
        assert!(t.is_mapped());
        check_table(&model, &t, 17);
        // Again, now with every block verified (and compressed ones cached).
        check_table(&model, &t, 18);
        let mut it = t.iter(BlockReads::filling(true));
        it.seek_to_first().unwrap();
        let TableIterator::Plain(plain) = &it else { panic!("a plain table") };
        let block = plain.data.as_ref().unwrap().block();
        if c == Compression::None {
            assert!(block.is_mapped(), "uncompressed blocks are used in place");
            assert_eq!(cache.len(), 0, "blocks used in place stay out of the block cache");
        } else {
            assert!(!block.is_mapped());
            assert!(!cache.is_empty(), "decompressed blocks are cached");
        }
    }
}

/// A seek the fences answer alone (a mapped, uncompressed table whose block was made
/// before) lands where the index search lands, and steps on from there across block
/// boundaries in both directions.
#[test]
fn seeks_answered_by_the_fences_alone_land_and_step_like_index_seeks() {
    let dir = tempfile::tempdir().unwrap();
    let model = random_model(21, 3000);
    let (file, _) = build(&model, opts(512, 4, Compression::None, 10.0));
    let bytes = file.bytes();
    let t = Arc::new(Table::open(mapped_file(dir.path(), &bytes), 7, bytes.len() as u64, None).unwrap());
    assert_eq!(scan_forward(&t).unwrap(), model, "the scan makes every block once");
    let mut rng = StdRng::seed_from_u64(22);
    let mut fenced = 0;
    for round in 0..3000 {
        let u = rng.gen_range(0..2_000_001u64);
        let target = make_internal_key(format!("user{u:08}").as_bytes(), rng.gen_range(0..1 << 41), ValueKind::Value);
        fenced += usize::from(t.fenced_block(&target).is_some());
        assert_eq!(get_vec(&t, &target, false).unwrap(), model_get(&model, &target));
        let mut it = t.iter(BlockReads::filling(false));
        it.seek(&target).unwrap();
        let mut at = model_seek(&model, &target);
        for _ in 0..12 {
            assert_eq!(it.valid().then(|| it.key().to_vec()), at.map(|i| model[i].0.clone()), "round {round}");
            let Some(i) = at else { break };
            if round % 2 == 0 {
                it.next().unwrap();
                at = (i + 1 < model.len()).then_some(i + 1);
            } else {
                it.prev().unwrap();
                at = i.checked_sub(1);
            }
        }
    }
    assert!(fenced > 2000, "most seeks skip the index block: {fenced} of 3000");
    // Point lookups of present keys (the filter lets them in) take the same shortcut.
    for e @ (k, _) in &model {
        assert_eq!(get_vec(&t, k, false).unwrap(), Some(kind_value(e)));
    }
}

#[test]
fn flipped_byte_in_data_block_is_reported_as_corruption() {
    let model = random_model(9, 500);
    let (file, _) = build(&model, TableOptions::default());
    let mut bytes = file.bytes();
    bytes[10] ^= 1; // inside the first data block
    let err = corruption_or_exact(bytes, &model).unwrap_err();
    assert!(err.contains("000007.sst") && err.contains("offset 0"), "{err}");
}

#[test]
fn flipped_byte_in_index_or_footer_fails_open() {
    let model = random_model(10, 500);
    let (file, _) = build(&model, TableOptions::default());
    let good = file.bytes();
    let t = open(&file, None).unwrap();
    let index_at = t.index_offset as usize;
    for at in [index_at + 3, good.len() - 1, good.len() - 20, good.len() - 64] {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        let e = open(&MemFile::with_bytes(bad), None).unwrap_err();
        assert!(e.is_corruption(), "flip at {at}: {e}");
    }
}

#[test]
fn truncated_file_is_corruption() {
    let model = random_model(11, 200);
    let (file, _) = build(&model, TableOptions::default());
    let good = file.bytes();
    for keep in [0, 1, 63, 64, 65, good.len() / 2, good.len() - 1] {
        let e = open(&MemFile::with_bytes(good[..keep].to_vec()), None).unwrap_err();
        assert!(e.is_corruption(), "keep {keep}: {e}");
    }
    // A caller passing a larger size than the file really has also gets Corruption.
    let f = Arc::new(MemFile::with_bytes(good.clone()));
    let e = Table::open(f, 7, good.len() as u64 + 10, None).unwrap_err();
    assert!(e.is_corruption(), "{e}");
}

#[test]
fn block_cache_serves_repeated_reads() {
    let model = random_model(12, 2000);
    let (file, _) = build(&model, TableOptions::default());
    let cache = new_block_cache(8 << 20);
    let t = open(&file, Some(Arc::clone(&cache))).unwrap();
    let k = &model[model.len() / 2].0;
    get_vec(&t, k, false).unwrap();
    assert_eq!(cache.len(), 0, "fill_cache = false must not insert");
    get_vec(&t, k, true).unwrap();
    assert_eq!(cache.len(), 1);
    let blocks = t.properties().num_data_blocks as usize;
    assert_eq!(scan_forward(&t).unwrap(), model);
    assert_eq!(cache.len(), blocks);
}

#[test]
fn approximate_offsets_grow_with_the_key() {
    let model = random_model(13, 5000);
    let (file, summary) = build(&model, TableOptions::default());
    let t = open(&file, None).unwrap();
    let mut last = 0;
    for (k, _) in model.iter().step_by(97) {
        let off = t.approximate_offset_of(k);
        assert!(off >= last && off < summary.file_size);
        last = off;
    }
    let past = make_internal_key(b"zzzz", 1, ValueKind::Value);
    assert!(t.approximate_offset_of(&past) >= last);
    assert!(t.approximate_offset_of(&past) > summary.file_size / 2);
}

#[test]
fn table_round_trips_through_real_files_and_mem_fs() {
    use crate::fs::{MemFs, PosixFs, Vfs};
    let model = random_model(14, 3000);
    let dir = tempfile::tempdir().unwrap();
    let fss: [Arc<dyn Vfs>; 2] = [Arc::new(PosixFs::new()), Arc::new(MemFs::new())];
    for fs in fss {
        fs.create_dir_all(dir.path()).unwrap();
        let path = dir.path().join("000009.sst");
        let o = opts(4096, 16, Compression::Lz4, 10.0);
        let mut b = TableBuilder::new(fs.create(&path).unwrap(), o);
        for (k, v) in &model {
            b.add(k, v).unwrap();
        }
        let summary = b.finish().unwrap();
        assert_eq!(fs.file_size(&path).unwrap(), summary.file_size);
        for file in [fs.open_read(&path).unwrap(), fs.open_read_mapped(&path).unwrap()] {
            let t = Arc::new(Table::open(file, 9, summary.file_size, None).unwrap());
            check_table(&model, &t, 15);
        }
    }
}

fn arb_model() -> impl Strategy<Value = Model> {
    arb_model_with_values(40)
}

/// Sorted entries of short keys and values of up to `max_value` bytes.
fn arb_model_with_values(max_value: usize) -> impl Strategy<Value = Model> {
    let value = proptest::collection::vec(any::<u8>(), 0..max_value);
    let entry = (proptest::collection::vec(0u8..4, 0..6), 0u64..50, 0u8..3, value);
    proptest::collection::vec(entry, 0..300).prop_map(|es| {
        let mut m: Model = es
            .into_iter()
            .map(|(uk, seq, kind, v)| {
                (make_internal_key(&uk, seq, ValueKind::from_u8(kind).expect("0..3 are kinds")), v)
            })
            .collect();
        m.sort_by(|a, b| compare_internal(&a.0, &b.0));
        m.dedup_by(|a, b| a.0 == b.0);
        m
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn builder_and_reader_agree_with_a_sorted_model(
        model in arb_model(),
        block in 1usize..512,
        restart in 1usize..20,
        codec in 0u8..3,
        bits in 0.0f64..16.0,
        targets in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..6), 0u64..60), 50),
    ) {
        let c = [Compression::None, Compression::Lz4, Compression::Zstd(1)][codec as usize];
        let (file, _) = build(&model, opts(block, restart, c, bits));
        let t = open(&file, Some(new_block_cache(4096))).unwrap();
        agrees_with_model(&t, &model, targets)?;
    }

    /// Page-aligned tables: entries of up to 6 KB against blocks of one or two pages, so
    /// blocks close early, hold one entry, or hold one larger than a block.
    #[test]
    fn aligned_tables_agree_with_a_sorted_model(
        model in arb_model_with_values(6000),
        pages in 1usize..3,
        restart in 1usize..20,
        targets in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..6), 0u64..60), 50),
    ) {
        let (file, _) = build(&model, opts(pages * 4096, restart, Compression::None, 10.0));
        let t = open(&file, None).unwrap();
        for h in data_handles(&t) {
            prop_assert_eq!(h.offset % 4096, 0);
        }
        agrees_with_model(&t, &model, targets)?;
    }
}

/// `t` scans to `model` both ways, and each target's lookup and seek land where the model
/// says, with a step back and forth from the sought position (across blocks too).
fn agrees_with_model(
    t: &Arc<Table>,
    model: &Model,
    targets: Vec<(Vec<u8>, u64)>,
) -> std::result::Result<(), TestCaseError> {
    prop_assert_eq!(scan_forward(t).unwrap(), model.clone());
    prop_assert_eq!(scan_backward(t).unwrap(), model.clone());
    let mut it = t.iter(BlockReads::filling(true));
    for (uk, seq) in targets {
        let target = seek_key(&uk, seq);
        prop_assert_eq!(get_vec(t, &target, true).unwrap(), model_get(model, &target));
        it.seek(&target).unwrap();
        let at = model_seek(model, &target);
        prop_assert_eq!(it.valid().then(|| it.key().to_vec()), at.map(|i| model[i].0.clone()));
        if let Some(i) = at.filter(|&i| i > 0) {
            it.prev().unwrap();
            prop_assert_eq!(it.key(), &model[i - 1].0[..]);
            it.next().unwrap();
            prop_assert_eq!(it.key(), &model[i].0[..]);
        }
    }
    Ok(())
}

/// A mapped table file that records, in order, its advice and every way it is read, and the
/// ranges advised `WILLNEED`.
pub(super) struct AdviceLog {
    pub(super) inner: Arc<dyn RandomAccessFile>,
    events: Mutex<Vec<&'static str>>,
    pub(super) will_need: Mutex<Vec<(u64, u64)>>,
}

impl AdviceLog {
    pub(super) fn new(inner: Arc<dyn RandomAccessFile>) -> AdviceLog {
        AdviceLog { inner, events: Mutex::default(), will_need: Mutex::default() }
    }
}

impl RandomAccessFile for AdviceLog {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.events.lock().push("read");
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn advise(&self, offset: u64, len: u64, advice: crate::fs::Advice) -> Result<()> {
        self.events.lock().push(if advice == crate::fs::Advice::Random { "random" } else { "other advice" });
        if advice == crate::fs::Advice::WillNeed {
            self.will_need.lock().push((offset, len));
        }
        self.inner.advise(offset, len, advice)
    }
    fn mapping(&self) -> Option<&Arc<crate::fs::FileMapping>> {
        self.events.lock().push("mapping");
        self.inner.mapping()
    }
}

/// With the device's read-ahead at megabytes, a fault before the advice reads a whole table:
/// a mapped table is advised random before its open reads a byte.
#[test]
fn a_mapped_table_is_advised_random_before_its_open_reads_anything() {
    let dir = tempfile::tempdir().unwrap();
    let model = random_model(3, 500);
    let (file, summary) = build(&model, opts(4096, 16, Compression::None, 10.0));
    let logged = Arc::new(AdviceLog::new(mapped_file(dir.path(), &file.bytes())));
    let table = Table::open(logged.clone(), 7, summary.file_size, None).unwrap();
    check_table(&model, &Arc::new(table), 3);
    let events = logged.events.lock().clone();
    let advised = events.iter().position(|e| *e == "random").expect("the mapping was never advised random");
    let first_read = events.iter().position(|e| *e == "read").unwrap_or(usize::MAX);
    assert!(advised < first_read, "read before the advice: {:?}", &events[..first_read.min(events.len())]);
    assert!(events[..advised].iter().all(|e| *e == "mapping"), "the open used the file before advising it: {events:?}");
}

/// The data blocks' handles of `t`, in file order.
fn data_handles(t: &Table) -> Vec<BlockHandle> {
    let mut index = t.index.iter_in(&t.order);
    index.seek_to_first().unwrap();
    let mut out = Vec::new();
    while index.valid() {
        out.push(BlockHandle::decode_exact(index.value()).expect("index values are handles"));
        index.next().unwrap();
    }
    out
}

#[test]
fn aligned_blocks_start_on_a_page_and_fit_in_it_with_their_trailer() {
    use crate::sst::table_builder::ALIGN_BYTES;
    let model = random_model(21, 3000);
    let (file, _) = build(&model, opts(4096, 16, Compression::None, 10.0));
    let t = open(&file, None).unwrap();
    let handles = data_handles(&t);
    assert!(handles.len() > 20, "{} blocks", handles.len());
    let bytes = file.bytes();
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(h.offset % ALIGN_BYTES, 0, "block {i} at {}", h.offset);
        assert!(h.end_with_trailer() - h.offset <= 4096, "block {i} of {} B spans two pages", h.size);
        // The gap up to the next block is zeros, and small: the block was closed only
        // because the next entry did not fit.
        let next = handles.get(i + 1).map_or(t.data_end, |n| n.offset);
        let gap = &bytes[h.end_with_trailer() as usize..next as usize];
        assert!(gap.iter().all(|&b| b == 0), "padding after block {i} is not zeros");
        assert!(gap.len() < 200, "block {i} left {} B of its page empty", gap.len());
    }
    check_table(&model, &t, 21);
}

#[test]
fn compressed_tables_and_block_sizes_off_the_page_are_written_unaligned() {
    let model = random_model(22, 1500);
    for (block, c) in [(4096, Compression::Lz4), (1000, Compression::None), (4096, Compression::None)] {
        let aligned = build(&model, opts(block, 16, c, 10.0)).0.bytes();
        let plain = build(&model, TableOptions { block_align: false, ..opts(block, 16, c, 10.0) }).0.bytes();
        // Only the 4 KiB uncompressed table is aligned (and so differs).
        assert_eq!(aligned == plain, !(block == 4096 && c == Compression::None), "block {block}, {c:?}");
    }
}

/// The padding between aligned blocks is outside every checksum: no read looks at it, so a
/// flipped byte there changes no answer (every other byte is covered, as
/// `every_flipped_byte_is_reported_as_corruption` checks for unaligned tables).
#[test]
fn a_flipped_byte_in_the_padding_between_aligned_blocks_changes_no_read() {
    let model = random_model(23, 300);
    let (file, _) = build(&model, opts(4096, 16, Compression::None, 10.0));
    let t = open(&file, None).unwrap();
    let handles = data_handles(&t);
    let good = file.bytes();
    let padding: Vec<usize> =
        handles.windows(2).flat_map(|w| w[0].end_with_trailer() as usize..w[1].offset as usize).collect();
    assert!(!padding.is_empty(), "no padding in {} blocks", handles.len());
    for i in padding {
        let mut bad = good.clone();
        bad[i] ^= 0x20;
        assert_eq!(corruption_or_exact(bad, &model), Ok(()), "flip at {i} in the padding");
    }
}

/// A scan takes a block that starts within a page of the last one's end as the next in
/// file order, so aligned tables are read ahead like unaligned ones: a few large reads of an
/// unmapped file, and pages asked for ahead of a mapped one.
#[test]
fn a_scan_of_an_aligned_table_reads_ahead() {
    let model = random_model(24, 3000);
    let (file, summary) = build(&model, opts(4096, 16, Compression::None, 10.0));
    let logged = Arc::new(AdviceLog::new(Arc::new(file.clone())));
    let t = Arc::new(Table::open(logged.clone(), 7, summary.file_size, None).unwrap());
    let blocks = data_handles(&t).len();
    logged.events.lock().clear();
    assert_eq!(scan_forward(&t).unwrap(), model);
    let reads = logged.events.lock().iter().filter(|e| **e == "read").count();
    assert!(blocks > 40 && reads * 5 < blocks, "{reads} reads for {blocks} blocks");

    let dir = tempfile::tempdir().unwrap();
    let mapped = Arc::new(AdviceLog::new(mapped_file(dir.path(), &file.bytes())));
    let t = Arc::new(Table::open(mapped.clone(), 7, summary.file_size, None).unwrap());
    assert_eq!(scan_forward(&t).unwrap(), model);
    let ahead = mapped.will_need.lock().iter().filter(|(_, len)| *len >= 16 << 10).count();
    assert!(ahead > 0, "no page asked for ahead: {:?}", mapped.will_need.lock());

    // Backward too: a reverse scan asks for the pages before it.
    mapped.will_need.lock().clear();
    let t = Arc::new(Table::open(mapped.clone(), 7, summary.file_size, None).unwrap());
    assert_eq!(scan_backward(&t).unwrap(), model);
    let behind = mapped.will_need.lock().iter().filter(|(_, len)| *len >= 16 << 10).count();
    assert!(behind > 0, "no page asked for behind a reverse scan: {:?}", mapped.will_need.lock());
}

#[test]
fn the_next_block_in_file_order_starts_right_after_the_last_or_on_the_next_page() {
    assert!(next_in_file(100, 100), "contiguous");
    assert!(next_in_file(100, 4096) && next_in_file(5000, 8192), "on the next page");
    assert!(next_in_file(4096, 4096), "the last ended on a page boundary");
    assert!(!next_in_file(100, 200), "a skipped block of an unaligned table");
    assert!(!next_in_file(100, 8192), "a skipped page");
    assert!(!next_in_file(200, 100), "behind");
}
