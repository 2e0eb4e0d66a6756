//! Bloom filter allocation: Monkey (`FilterAllocation::Monkey`) spends the same average bits
//! per key as the uniform allocation but meets fewer false positives on lookups of absent
//! keys, because small runs (L0 files, upper levels) get more bits and the largest level a
//! little fewer. The counts come from `Db::stats` (`filter_false_positives`), so the test
//! compares behaviour, not speed.

use std::sync::Arc;

use wisckey::fs::{MemFs, PosixFs};
use wisckey::{Db, FilterAllocation, Options};

const KEYS: u64 = 60_000;

fn key(i: u64) -> Vec<u8> {
    format!("key{:010}", i.wrapping_mul(2_654_435_761) % 1_000_000_007).into_bytes()
}

/// A small tree: 64 KiB memtables and tables, 256 KiB level 1. `l0_files_stay` turns
/// automatic L0 compaction off, so L0 files stay where the test put them.
fn options(allocation: FilterAllocation, l0_files_stay: bool) -> Options {
    let o = Options::default()
        .vfs(Arc::new(PosixFs::new()))
        .create_if_missing(true)
        .write_buffer_bytes(64 << 10)
        .target_file_size_bytes(64 << 10)
        .max_bytes_for_level_base(256 << 10)
        .bloom_bits_per_key(vec![5.0])
        .filter_allocation(allocation)
        .gc_interval_ms(0)
        .io_uring(false);
    if l0_files_stay {
        o.l0_compaction_trigger(1000).l0_slowdown_trigger(1000).l0_stop_trigger(1000)
    } else {
        o
    }
}

/// False positives per lookup of an absent key in a tree of one big run (`KEYS` keys,
/// compacted) under the L0 files of 8000 more keys (automatic compaction off) — a fixed shape,
/// so both allocations are measured on the same runs (returned too).
fn false_positives_per_absent_lookup(allocation: FilterAllocation) -> (f64, Vec<usize>) {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = Db::open(dir.path(), options(allocation, false)).expect("open");
        for i in 0..KEYS {
            db.put(key(i), format!("value-{i:08}").as_bytes()).expect("put");
        }
        db.compact_range(None, None).expect("compact");
    }
    let db = Db::open(dir.path(), options(allocation, true)).expect("reopen");
    for file in 0..4 {
        for i in 0..2000 {
            let k = KEYS + file * 2000 + i;
            db.put(key(k), format!("value-{k:08}").as_bytes()).expect("put");
        }
        db.flush().expect("flush");
    }
    let runs = db.stats().level_runs;
    assert!(runs[0] >= 4, "L0 files over the compacted run: {runs:?}");
    assert_eq!(runs.iter().sum::<usize>(), runs[0] + 1, "one run below L0: {runs:?}");
    let before = db.stats();
    // Fewer than 100: a lookup that probes several tables charges the first, and 100 charges
    // start a seek compaction (LevelDB's), which would change the shape under the test.
    let lookups = 90u64;
    for i in 0..lookups {
        let mut k = key(i);
        k.push(b'.');
        assert_eq!(db.get(&k).expect("get"), None, "absent key {i} found");
    }
    let after = db.stats();
    assert_eq!(after.point_lookups - before.point_lookups, lookups, "every get reached the tree");
    assert_eq!(after.level_runs, runs, "the shape did not change during the lookups");
    ((after.filter_false_positives - before.filter_false_positives) as f64 / lookups as f64, runs)
}

#[test]
fn monkey_cuts_false_positives_of_absent_key_lookups_at_the_same_average_bits() {
    let (uniform, runs) = false_positives_per_absent_lookup(FilterAllocation::Uniform);
    let (monkey, monkey_runs) = false_positives_per_absent_lookup(FilterAllocation::Monkey);
    eprintln!("false positives per absent lookup, runs {runs:?}: uniform {uniform:.4}, monkey {monkey:.4}");
    assert_eq!(runs, monkey_runs, "the same shape under both allocations");
    // At 5 bits each run lets about 9 % in; Monkey gives the small L0 files many bits.
    assert!(uniform > 0.25, "5 bits per key in five or more runs must let lookups in: {uniform}");
    assert!(monkey < 0.5 * uniform, "monkey {monkey:.4} against uniform {uniform:.4}");
}

#[test]
fn a_database_written_with_monkey_reads_back_every_key_uniformly_reopened() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = Db::open(dir.path(), options(FilterAllocation::Monkey, false)).expect("open");
        for i in 0..10_000 {
            db.put(key(i), i.to_le_bytes()).expect("put");
        }
    }
    // Filters carry their own probe count: a reader with other options reads them as written.
    let db = Db::open(dir.path(), options(FilterAllocation::Uniform, false)).expect("reopen");
    for i in 0..10_000u64 {
        assert_eq!(db.get(key(i)).expect("get").as_deref(), Some(&i.to_le_bytes()[..]), "key {i}");
    }
}

/// LevelDB's seek compaction charges a table a lookup searched in vain before finding its key
/// deeper. A table whose filter turned the lookup away was not searched: with filters, lookups
/// of keys that live below level 0 compact nothing; without them, the same lookups compact the
/// level-0 table down.
#[test]
fn only_tables_searched_in_vain_are_charged_for_seek_compaction() {
    for bits in [10.0, 0.0] {
        let fs = Arc::new(MemFs::new());
        let opts = Options::default().vfs(fs).bloom_bits_per_key(vec![bits]).l0_compaction_trigger(8);
        let db = Db::open("/charged", opts).expect("open");
        for round in 0..3u32 {
            // Round 0 holds the keys looked up; later rounds hold other keys over the same range.
            for i in 0..500u32 {
                let k = format!("k{:05}-{round}", i * 3);
                db.put(k.as_bytes(), b"value").expect("put");
            }
            db.flush().expect("flush");
        }
        db.wait_for_background_work().expect("settle");
        let before = db.stats();
        assert!(before.level_files[0] >= 1 && before.level_files.iter().skip(1).sum::<usize>() >= 1, "{before:?}");
        for n in 0..3000u32 {
            let k = format!("k{:05}-0", (n % 500) * 3);
            assert_eq!(db.get(k.as_bytes()).expect("get").as_deref(), Some(&b"value"[..]), "{k}");
        }
        db.wait_for_background_work().expect("settle");
        let after = db.stats();
        let compactions = after.num_compactions - before.num_compactions;
        if bits > 0.0 {
            assert_eq!(compactions, 0, "lookups the filters turned away charged a table: {after:?}");
        } else {
            assert!(compactions > 0, "lookups searching level 0 in vain compacted nothing: {after:?}");
        }
    }
}
