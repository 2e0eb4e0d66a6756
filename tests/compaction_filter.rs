//! Compaction filters: entries a filter removes disappear from reads after compaction and
//! their separated values are reclaimed by value-log GC (never read back); changed values
//! read back changed; snapshots never see a filter's effect; a panicking filter keeps entries.

mod common;

use std::sync::Arc;

use common::make_value;
use wisckey::fs::MemFs;
use wisckey::{CompactionFilter, Db, FilterDecision, Options, ReadOptions};

const DB: &str = "/filterdb";

/// Removes keys starting with `tmp`, upper-cases values of keys starting with `up`, panics on
/// `boom`.
struct Filter;

impl CompactionFilter for Filter {
    fn name(&self) -> &str {
        "test-filter"
    }
    fn filter(&self, _level: usize, key: &[u8], value: &[u8]) -> FilterDecision {
        if key.starts_with(b"tmp") {
            FilterDecision::Remove
        } else if key.starts_with(b"up") {
            FilterDecision::ChangeValue(value.to_ascii_uppercase())
        } else if key.starts_with(b"boom") {
            panic!("filter bug")
        } else {
            FilterDecision::Keep
        }
    }
}

fn options(fs: Arc<MemFs>) -> Options {
    common::tiny_options(fs)
        .gc_interval_ms(0)
        .min_separated_value_bytes(64)
        .log_file_bytes(32 << 10)
        .compaction_filter(Arc::new(Filter))
}

#[test]
fn removed_entries_vanish_at_compaction_and_gc_reclaims_their_separated_values() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, options(fs)).unwrap();
    for i in 0..20u64 {
        db.put(format!("keep{i:02}"), make_value(b"keep", i, 1000)).unwrap();
    }
    for i in 0..300u64 {
        db.put(format!("tmp{i:03}"), make_value(b"tmp", i, 1000)).unwrap();
    }
    db.flush().unwrap();
    let before = db.stats();
    db.compact_range(None, None).unwrap();
    assert!(db.get("tmp007").unwrap().is_none(), "removed at compaction");
    assert_eq!(db.scan(&ReadOptions::default()).unwrap().count(), 20);
    let garbage = db.stats().vlog_garbage_bytes;
    assert!(garbage >= 300 * 1000, "the removed separated values count as garbage: {garbage}");
    // Roll the log past the values so every file holding them can be collected.
    for i in 0..40u64 {
        db.put(format!("zz{i:02}"), make_value(b"zz", i, 1000)).unwrap();
    }
    db.flush().unwrap();
    for _ in 0..3 {
        db.run_gc(0.0).unwrap();
    }
    let after = db.stats();
    assert!(
        after.vlog_disk_bytes * 3 < before.vlog_disk_bytes,
        "GC gives the removed values' space back: {} bytes before, {} after",
        before.vlog_disk_bytes,
        after.vlog_disk_bytes
    );
    for i in 0..20u64 {
        assert_eq!(db.get(format!("keep{i:02}")).unwrap().unwrap(), make_value(b"keep", i, 1000));
    }
    assert!(db.get("tmp007").unwrap().is_none(), "never read back");
    let report = db.verify().unwrap();
    assert!(report.is_healthy(), "{report}");
}

#[test]
fn changed_values_read_back_changed_and_snapshots_never_see_the_filter() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, options(fs)).unwrap();
    db.put("up-small", "abc").unwrap();
    db.put("up-large", vec![b'x'; 500]).unwrap();
    db.put("tmp-1", "gone").unwrap();
    db.flush().unwrap();
    let snap = db.snapshot();
    db.compact_range(None, None).unwrap();
    let ro = ReadOptions { snapshot: Some(snap.clone()), ..ReadOptions::default() };
    assert_eq!(db.get_opt(&ro, "tmp-1").unwrap().unwrap(), b"gone", "held by the snapshot");
    assert_eq!(db.get_opt(&ro, "up-small").unwrap().unwrap(), b"abc");
    drop((ro, snap));
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get("up-small").unwrap().unwrap(), b"ABC");
    assert_eq!(db.get("up-large").unwrap().unwrap(), vec![b'X'; 500]);
    assert!(db.get("tmp-1").unwrap().is_none());
}

#[test]
fn a_panicking_filter_keeps_the_entry_and_compaction_goes_on() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open(DB, options(fs)).unwrap();
    db.put("boom", "still here").unwrap();
    db.put("tmp", "x").unwrap();
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get("boom").unwrap().unwrap(), b"still here");
    assert!(db.get("tmp").unwrap().is_none());
}
