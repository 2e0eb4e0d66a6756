//! Value-log GC and the page cache, on real files: GC drops from the cache the pages its own
//! reads brought in, and leaves the pages that were cached before it read them, which a
//! snapshot or iterator older than GC's moves still reads its values from.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{assert_view_matches, files_with, make_value, Model};
use wisckey::fs::{Advice, PosixFs, Vfs};
use wisckey::{Db, Options, ReadOptions};

fn options() -> Options {
    Options::default()
        .vfs(Arc::new(PosixFs::new()))
        .min_separated_value_bytes(64)
        .log_file_bytes(256 << 10)
        .write_buffer_bytes(64 << 10)
        .gc_interval_ms(0)
        .gc_chunk_bytes(64 << 10)
        .gc_pause_ms(0)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// 600 keys of 4 KB, then every other one overwritten: the older files are half garbage. Every
/// value file is synced, so its pages in the page cache are clean and can be dropped.
fn load(db: &Db, dir: &Path) -> Model {
    let mut model = Model::new();
    for round in 0..2 {
        for i in (0..600).filter(|i| round == 0 || i % 2 == 0) {
            let v = make_value(&key(i), round * 1000 + i, 4096);
            db.put(key(i), &v).expect("put");
            model.insert(key(i), v);
        }
    }
    db.flush().expect("flush");
    db.compact_range(None, None).expect("compact");
    for f in files_with(dir, "vlog") {
        std::fs::File::open(&f).and_then(|f| f.sync_all()).expect("sync a value file");
    }
    model
}

/// Bytes of `[0, len)` of `path` the page cache does not hold.
fn uncached_bytes(path: &Path, len: u64) -> u64 {
    let file = PosixFs::new().open_read(path).expect("open");
    let ranges = file.uncached_ranges(0, len).expect("a posix file tells what is cached");
    ranges.iter().map(|r| r.end - r.start).sum()
}

fn page_bytes() -> u64 {
    // SAFETY: sysconf takes no pointers.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).expect("page size")
}

/// Each value file but the newest (where GC logs its pointers) with its length before GC.
fn files_gc_may_read(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut files = files_with(dir, "vlog");
    files.pop();
    files.into_iter().map(|f| (f.clone(), std::fs::metadata(&f).expect("stat").len())).collect()
}

#[test]
fn gc_leaves_value_pages_that_were_cached_before_it_read_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    let model = load(&db, dir.path());
    let files = files_gc_may_read(dir.path());
    assert!(files.len() >= 3, "the load spans several value files: {files:?}");
    for (f, len) in &files {
        assert_eq!(uncached_bytes(f, *len), 0, "{} was written through the page cache", f.display());
    }
    // A reader older than GC's moves: GC copies the live values but frees nothing under it.
    let old = ReadOptions { snapshot: Some(db.snapshot()), ..ReadOptions::default() };
    let report = db.run_gc(0.0).expect("GC");
    assert!(report.bytes_read > 0 && report.bytes_rewritten > 0, "{report:?}");
    for (f, len) in &files {
        assert_eq!(uncached_bytes(f, *len), 0, "GC dropped cached pages of {} ({report:?})", f.display());
    }
    assert_view_matches(&db, &old, &model, "the snapshot older than GC's moves");
    assert_view_matches(&db, &ReadOptions::default(), &model, "after GC");
}

#[test]
fn gc_drops_the_value_pages_its_own_reads_brought_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    let model = load(&db, dir.path());
    let files = files_gc_may_read(dir.path());
    for (f, _) in &files {
        PosixFs::new().open_read(f).and_then(|r| r.advise(0, 0, Advice::DontNeed)).expect("evict");
    }
    let evicted: u64 = files.iter().map(|(f, len)| uncached_bytes(f, *len)).sum();
    let total: u64 = files.iter().map(|(_, len)| len).sum();
    if evicted == 0 {
        // tmpfs (a `TMPDIR` in memory) keeps every page whatever it is advised: nothing to see.
        eprintln!("skipped: the filesystem under {} ignores DONTNEED", dir.path().display());
        return;
    }
    assert!(evicted * 10 >= total * 9, "the files left the page cache: {evicted} of {total} bytes");
    let old = ReadOptions { snapshot: Some(db.snapshot()), ..ReadOptions::default() };
    let report = db.run_gc(0.0).expect("GC");
    assert!(report.bytes_read > 0, "{report:?}");
    let after: u64 = files.iter().map(|(f, len)| uncached_bytes(f, *len)).sum();
    // A file's last page may stay when GC stopped short of the file's end (a snapshot pins
    // what it moved): the last chunk it read ends mid-page.
    let kept = evicted.saturating_sub(after);
    assert!(kept <= files.len() as u64 * page_bytes(), "GC left {kept} bytes it read in the page cache ({report:?})");
    assert_view_matches(&db, &old, &model, "the snapshot older than GC's moves");
}
