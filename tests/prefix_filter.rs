//! Prefix Bloom filters end to end: `prefix` iterations (both directions) and prefix-bounded
//! seeks match a model across flushes, compactions and light-weight compaction's appended
//! segments, with keys shorter than the extractor's prefix; tables written under one
//! extractor read correctly under another or none; the stats show the tables skipped.

mod common;

use std::sync::Arc;

use common::{tiny_options, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::MemFs;
use wisckey::{Db, FixedPrefix, Options, PrefixExtractor, ReadOptions};

/// Four-byte prefixes `pNNN` over `groups` groups, plus keys out of the domain (shorter than
/// four bytes) and some sharing a prefix with longer suffixes.
fn random_key(rng: &mut StdRng, groups: u32) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0 => format!("p{}", rng.gen_range(0..20)).into_bytes(),
        1 => b"p0".to_vec(),
        _ => format!("p{:03}/{:04}", rng.gen_range(0..groups), rng.gen_range(0..40)).into_bytes(),
    }
}

fn churn(db: &Db, model: &mut Model, rng: &mut StdRng, ops: usize, groups: u32) {
    for i in 0..ops {
        let k = random_key(rng, groups);
        if rng.gen_bool(0.15) {
            db.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            let v = format!("{i}-{}", "v".repeat(rng.gen_range(5..60))).into_bytes();
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
    }
}

fn model_prefix(model: &Model, p: &[u8]) -> Vec<Vec<u8>> {
    model.keys().filter(|k| k.starts_with(p)).cloned().collect()
}

/// `prefix(p)` forward and backward for prefixes of every kind (a prefix's length, longer,
/// shorter, absent, out of the domain), and prefix-bounded seeks, against the model.
fn assert_prefix_views(db: &Db, model: &Model, prefix_len: Option<usize>, at: &str) {
    let mut queries: Vec<Vec<u8>> = vec![b"p".to_vec(), b"p0".to_vec(), b"p1".to_vec(), b"q".to_vec()];
    for g in [0, 3, 7, 12, 19, 25, 199, 1000] {
        queries.push(format!("p{g:03}").into_bytes());
        queries.push(format!("p{g:03}/001").into_bytes());
    }
    for p in &queries {
        let want = model_prefix(model, p);
        let fwd: Vec<Vec<u8>> = db.prefix(p).expect("prefix").map(|r| r.expect("entry").0).collect();
        assert_eq!(fwd, want, "{at}: prefix {:?} forward", String::from_utf8_lossy(p));
        let mut back: Vec<Vec<u8>> = db.prefix(p).expect("prefix").rev().map(|r| r.expect("entry").0).collect();
        back.reverse();
        assert_eq!(back, want, "{at}: prefix {:?} backward", String::from_utf8_lossy(p));
    }
    let extractor = prefix_len.map(FixedPrefix::new);
    let ro = ReadOptions { prefix_same_as_start: true, ..ReadOptions::default() };
    for target in queries.iter().chain([&b"p005/0003".to_vec(), &b"p00".to_vec()]) {
        let mut it = db.iter(&ro).expect("iter");
        it.seek(target).expect("seek");
        let mut got = Vec::new();
        while it.valid() && got.len() < 60 {
            got.push(it.key().to_vec());
            it.next().expect("next");
        }
        let want: Vec<Vec<u8>> = match extractor.as_ref().and_then(|e| e.prefix(target)) {
            Some(p) => {
                model.range(target.clone()..).map(|(k, _)| k).filter(|k| k.starts_with(p)).take(60).cloned().collect()
            }
            None => model.range(target.clone()..).map(|(k, _)| k).take(60).cloned().collect(),
        };
        assert_eq!(got, want, "{at}: prefix-bounded seek to {:?}", String::from_utf8_lossy(target));
        if want.len() >= 2 {
            // One step back from the second key of the prefix gives the first again.
            it.seek(target).expect("seek");
            it.next().expect("next");
            it.prev().expect("prev");
            assert_eq!(it.key(), &want[0][..], "{at}: prev after a prefix-bounded seek");
        }
    }
}

fn options(fs: &Arc<MemFs>, lwc: bool) -> Options {
    tiny_options(fs.clone())
        .light_weight_compaction(lwc)
        .gc_interval_ms(0)
        .prefix_extractor(Arc::new(FixedPrefix::new(4)))
}

#[test]
fn prefix_reads_with_the_filter_match_the_model_across_flush_compaction_and_lwc() {
    for lwc in [false, true] {
        let fs = Arc::new(MemFs::new());
        let mut rng = StdRng::seed_from_u64(44 + lwc as u64);
        let mut model = Model::new();
        let db = Db::open("/prefix", options(&fs, lwc)).expect("open");
        churn(&db, &mut model, &mut rng, 1500, 200);
        assert_prefix_views(&db, &model, Some(4), "memtables and young tables");
        churn(&db, &mut model, &mut rng, 2500, 200);
        db.flush().expect("flush");
        db.wait_for_background_work().expect("settle");
        assert_prefix_views(&db, &model, Some(4), "after flushes and compactions");
        if lwc {
            assert!(db.stats().num_segments_appended > 0, "light-weight compaction appended no segment");
        }
        db.compact_range(None, None).expect("compact");
        churn(&db, &mut model, &mut rng, 800, 200);
        db.flush().expect("flush");
        assert_prefix_views(&db, &model, Some(4), "after a full compaction and more flushes");
        assert!(db.stats().prefix_tables_skipped > 0, "no table was skipped: the filter went unused");
        db.close().expect("close");
        let db = Db::open("/prefix", options(&fs, lwc)).expect("reopen");
        assert_prefix_views(&db, &model, Some(4), "after reopen");
    }
}

#[test]
fn tables_written_under_one_extractor_read_correctly_under_another_or_none() {
    let fs = Arc::new(MemFs::new());
    let mut rng = StdRng::seed_from_u64(9);
    let mut model = Model::new();
    let db = Db::open("/switch", options(&fs, false)).expect("open");
    churn(&db, &mut model, &mut rng, 3000, 200);
    db.flush().expect("flush");
    db.close().expect("close");
    // Two bytes: a table's four-byte prefix filter must not be asked for two-byte prefixes.
    let two = tiny_options(fs.clone()).gc_interval_ms(0).prefix_extractor(Arc::new(FixedPrefix::new(2)));
    let db = Db::open("/switch", two).expect("reopen under another extractor");
    assert_prefix_views(&db, &model, Some(2), "under a two-byte extractor");
    churn(&db, &mut model, &mut rng, 1000, 200);
    db.flush().expect("flush");
    assert_prefix_views(&db, &model, Some(2), "tables of both extractors");
    db.close().expect("close");
    let db = Db::open("/switch", tiny_options(fs.clone()).gc_interval_ms(0)).expect("reopen without one");
    assert_prefix_views(&db, &model, None, "without an extractor");
}

#[test]
fn stats_show_the_tables_a_prefix_filter_let_reads_skip() {
    let fs = Arc::new(MemFs::new());
    // No compaction: every flush stays a table (a run) of its own. Flush k holds groups
    // k and 100 + k, so its key range spans the groups between without holding them.
    let opts = options(&fs, false)
        .write_buffer_bytes(1 << 20)
        .l0_compaction_trigger(1000)
        .l0_slowdown_trigger(1000)
        .l0_stop_trigger(1000);
    let db = Db::open("/stats", opts).expect("open");
    for k in 0..20 {
        for g in [k, 100 + k] {
            for i in 0..30 {
                db.put(format!("p{g:03}/{i:04}"), b"value").expect("put");
            }
        }
        db.flush().expect("flush");
    }
    let before = db.stats();
    assert_eq!(before.level_runs.iter().sum::<usize>(), 20, "{:?}", before.level_runs);
    assert_eq!(db.prefix(b"p007").expect("prefix").count(), 30);
    let after = db.stats();
    // Tables 0..=7 span p007; 0..=6 do not hold it.
    let skipped = after.prefix_tables_skipped - before.prefix_tables_skipped;
    assert!(skipped >= 7, "prefix() skipped {skipped} tables");
    let ro = ReadOptions { prefix_same_as_start: true, ..ReadOptions::default() };
    let mut it = db.iter(&ro).expect("iter");
    it.seek(b"p011/0005").expect("seek");
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next().expect("next");
    }
    assert_eq!(n, 25, "the seek stays within its prefix");
    let seeked = db.stats();
    assert!(seeked.prefix_tables_skipped - after.prefix_tables_skipped >= 10, "{seeked:?}");
    assert!(seeked.seek_tables_probed - after.seek_tables_probed <= 2, "{seeked:?}");
    // Without prefix_same_as_start the seek positions in every table.
    let mut it = db.iter(&ReadOptions::default()).expect("iter");
    it.seek(b"p011/0005").expect("seek");
    assert!(db.stats().seek_tables_probed - seeked.seek_tables_probed >= 20);
}
