//! Helpers shared by the integration tests: small-buffer options that force flushes and
//! compactions, a `BTreeMap` model, and readers that pull whole views out of a `Db` so they
//! can be compared with the model.

#![allow(dead_code)] // each test binary uses a different subset

pub mod crash_points;
pub mod damage;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use wisckey::fs::Vfs;
use wisckey::{Db, DbIterator, MergePolicy, Options, ReadOptions, Result};

/// The model every test compares the database against.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A write batch of puts (`Some`) and deletes (`None`), in order: the crash scripts' batch step.
pub fn batch_of(ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> wisckey::WriteBatch {
    let mut b = wisckey::WriteBatch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k, v),
            None => b.delete(k),
        };
    }
    b
}

/// A scan's entries with the values copied out, to compare with the model's vectors.
pub fn owned(entries: wisckey::Entries) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    entries.map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect()
}

/// A scan's entries as a model map.
pub fn owned_map(entries: wisckey::Entries) -> Result<Model> {
    entries.map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect()
}

/// Options with buffers so small that a few dozen writes flush a memtable and a few flushes
/// trigger compactions, so tests exercise tables and levels, not just the memtable; value-log
/// GC wakes up often so it runs during the tests too.
/// `WISCKEY_MERGE_POLICY=<policy>` (e.g. `tiering`, `bush`) runs a suite under that policy,
/// `WISCKEY_LWC=1` with light-weight compaction, `WISCKEY_BLOCK_BYTES=4096` on page-aligned
/// blocks (512 B blocks otherwise, which are never aligned).
pub fn tiny_options(vfs: Arc<dyn Vfs>) -> Options {
    Options::default()
        .merge_policy(merge_policy_from_env())
        .light_weight_compaction(env_u64("WISCKEY_LWC", 0) == 1)
        .compaction_threads(env_u64("WISCKEY_COMPACTION_THREADS", 1) as usize)
        .vfs(vfs)
        .write_buffer_bytes(4 << 10)
        .target_file_size_bytes(8 << 10)
        .block_size_bytes(env_u64("WISCKEY_BLOCK_BYTES", 512) as usize)
        .block_restart_interval(4)
        .max_bytes_for_level_base(32 << 10)
        .l0_compaction_trigger(2)
        .block_cache_bytes(64 << 10)
        .gc_interval_ms(10)
}

/// The merge policy `WISCKEY_MERGE_POLICY` names (leveling when unset): any `MergePolicy`
/// name; the presets with a base ratio of 10 get 3 here, so the suites' small trees still
/// have several levels.
pub fn merge_policy_from_env() -> MergePolicy {
    let name = std::env::var("WISCKEY_MERGE_POLICY").unwrap_or_else(|_| "leveling".to_string());
    let small = match name.as_str() {
        "tiering" => "tiering:3",
        "lazy-leveling" => "wacky:T=3,K=1,Z=0",
        "scll" => "wacky:T=3,K=1,Z=0,C=L",
        other => other,
    };
    small.parse().unwrap_or_else(|e| panic!("WISCKEY_MERGE_POLICY={name}: {e}"))
}

/// Every `(key, value)` of the view `ro`, read forward with a `DbIterator`.
pub fn read_forward(db: &Db, ro: &ReadOptions) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut it = db.iter(ro)?;
    it.seek_to_first()?;
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next()?;
    }
    Ok(out)
}

/// Every `(key, value)` of the view `ro`, read backward with a `DbIterator`.
pub fn read_backward(db: &Db, ro: &ReadOptions) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut it = db.iter(ro)?;
    it.seek_to_last()?;
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.prev()?;
    }
    Ok(out)
}

/// The model's entries in `[lower, upper)`, ascending.
pub fn model_range(model: &Model, lower: Option<&[u8]>, upper: Option<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let lo = lower.map_or(Bound::Unbounded, |k| Bound::Included(k.to_vec()));
    let hi = upper.map_or(Bound::Unbounded, |k| Bound::Excluded(k.to_vec()));
    if let (Bound::Included(l), Bound::Excluded(u)) = (&lo, &hi) {
        if l >= u {
            return Vec::new();
        }
    }
    model.range((lo, hi)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Panic with a readable diff when the database's entries differ from the model's.
pub fn assert_same_entries(got: &[(Vec<u8>, Vec<u8>)], want: &[(Vec<u8>, Vec<u8>)], ctx: &str) {
    if got == want {
        return;
    }
    let first_diff = got.iter().zip(want.iter()).position(|(g, w)| g != w).unwrap_or(got.len().min(want.len()));
    panic!(
        "{ctx}: database has {} entries, model has {}; first difference at index {first_diff}: db {:?} vs model {:?}",
        got.len(),
        want.len(),
        got.get(first_diff).map(|(k, v)| (show(k), v.len(), show(&v[..v.len().min(24)]))),
        want.get(first_diff).map(|(k, v)| (show(k), v.len(), show(&v[..v.len().min(24)]))),
    );
}

/// Check every way of reading the whole view `ro` (cursor forward and backward, `scan`,
/// `scan_rev`, and `get` of every model key) against `model`.
pub fn assert_view_matches(db: &Db, ro: &ReadOptions, model: &Model, ctx: &str) {
    let want = model_range(model, ro.lower_bound.as_deref(), ro.upper_bound.as_deref());
    let fwd = read_forward(db, ro).unwrap_or_else(|e| panic!("{ctx}: forward read failed: {e}"));
    assert_same_entries(&fwd, &want, &format!("{ctx} (cursor forward)"));
    let mut bwd = read_backward(db, ro).unwrap_or_else(|e| panic!("{ctx}: backward read failed: {e}"));
    bwd.reverse();
    assert_same_entries(&bwd, &want, &format!("{ctx} (cursor backward)"));
    let scan: Vec<_> = db.scan(ro).and_then(owned).unwrap_or_else(|e| panic!("{ctx}: scan failed: {e}"));
    assert_same_entries(&scan, &want, &format!("{ctx} (scan)"));
    let mut rev: Vec<_> = db.scan_rev(ro).and_then(owned).unwrap_or_else(|e| panic!("{ctx}: scan_rev failed: {e}"));
    rev.reverse();
    assert_same_entries(&rev, &want, &format!("{ctx} (scan_rev)"));
    let point = ReadOptions { snapshot: ro.snapshot.clone(), ..ReadOptions::default() };
    for (k, v) in model {
        let got = db.get_opt(&point, k).unwrap_or_else(|e| panic!("{ctx}: get {} failed: {e}", show(k)));
        assert!(
            got.as_deref() == Some(v.as_slice()),
            "{ctx}: get {} returned {:?} bytes, model has {} bytes",
            show(k),
            got.map(|g| g.len()),
            v.len()
        );
    }
}

/// A value that names the key and the write that produced it, padded to `len` bytes, so
/// a read that returns another key's or another version's value is caught.
pub fn make_value(key: &[u8], version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{}@{version}:", show(key)).into_bytes();
    let mut x = version.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v
}

/// Printable form of a key for assertion messages.
pub fn show(b: &[u8]) -> String {
    b.iter().flat_map(|&c| std::ascii::escape_default(c)).map(char::from).collect()
}

/// Options for tests of separated values: values of at least `separated` bytes go to the log,
/// 16 KiB memtables, tables and GC chunks, 64 KiB log files and level 1, GC only when asked.
pub fn small_log_options(vfs: Arc<dyn Vfs>, separated: usize) -> Options {
    Options::default()
        .vfs(vfs)
        .min_separated_value_bytes(separated)
        .write_buffer_bytes(16 << 10)
        .target_file_size_bytes(16 << 10)
        .max_bytes_for_level_base(64 << 10)
        .log_file_bytes(64 << 10)
        .gc_interval_ms(0)
        .gc_chunk_bytes(16 << 10)
}

/// A `u64` from the environment variable `name`, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The cursor is at `want` (with the model's value), or invalid when `want` is `None`.
pub fn check_at(it: &DbIterator, model: &Model, want: Option<&Vec<u8>>, ctx: &str) {
    match want {
        None => assert!(!it.valid(), "{ctx}: iterator at {}, model is off the end", show(it.key())),
        Some(k) => {
            assert!(it.valid(), "{ctx}: iterator invalid, model at {}", show(k));
            assert_eq!(show(it.key()), show(k), "{ctx}: key");
            assert!(it.value() == model[k].as_slice(), "{ctx}: value of {}", show(k));
        }
    }
}

/// The files in `dir` whose extension is `ext` (`"vlog"`, `"cold"`, `"sst"`), sorted: oldest
/// first, as file numbers are zero-padded.
pub fn files_with(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}
