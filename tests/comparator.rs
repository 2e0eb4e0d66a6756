//! Custom key orders and filter policies (`Options::comparator`, `Options::filter_policy`):
//! a reverse order holds through memtables, flushes, compactions of every kind, light-weight
//! compaction, value-log GC and reopen, against a `BTreeMap` model read backward; a database is
//! refused, with nothing on disk changed, when opened with a comparator of another name; a
//! custom filter is asked for lookups, and a table whose filter another policy built is read
//! without it; a keyspace sorts by the database's order.

mod common;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as Atomic};
use std::sync::Arc;

use common::{make_value, show, tiny_options};
use wisckey::fs::MemFs;
use wisckey::{Comparator, Db, Error, FilterPolicy, MergePolicy, Options, ReadOptions};

/// Bytewise order backwards: "b" before "a", "ab" before "a".
struct Reverse;

impl Comparator for Reverse {
    fn name(&self) -> &str {
        "test.ReverseBytewise"
    }
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        b.cmp(a)
    }
    /// Drop the last byte when that still sorts before `limit` (it sorts after `start` in
    /// reverse order): exercises the shortening the engine must check.
    fn find_shortest_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
        if start.len() > 1 && self.compare(&start[..start.len() - 1], limit) == Ordering::Less {
            start.pop();
        }
    }
}

fn reverse() -> Option<Arc<dyn Comparator>> {
    Some(Arc::new(Reverse))
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:06}", i.wrapping_mul(2_654_435_761) % 4001).into_bytes()
}

/// The model's entries in the reverse order, within `[lower, upper)` of that order.
fn model_in_reverse(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    lower: Option<&[u8]>,
    upper: Option<&[u8]>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    (model.iter().rev())
        .filter(|(k, _)| lower.is_none_or(|l| k.as_slice() <= l) && upper.is_none_or(|u| k.as_slice() > u))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn read_all(db: &Db, ro: &ReadOptions, forward: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db.iter(ro).expect("iter");
    let mut out = Vec::new();
    if forward {
        it.seek_to_first().expect("seek");
    } else {
        it.seek_to_last().expect("seek");
    }
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        if forward { it.next() } else { it.prev() }.expect("step");
    }
    if !forward {
        out.reverse();
    }
    out
}

/// Every way of reading the database agrees with the model in reverse order: cursors both
/// ways, bounded cursors, seeks, and `get` of every key and of missing ones.
fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, ctx: &str) {
    let all = model_in_reverse(model, None, None);
    for forward in [true, false] {
        let got = read_all(db, &ReadOptions::default(), forward);
        assert!(got == all, "{ctx}: scan (forward {forward}): {} entries, model {}", got.len(), all.len());
    }
    let (lower, upper) = (b"key003000".to_vec(), b"key001000".to_vec());
    let ro = ReadOptions { lower_bound: Some(lower.clone()), upper_bound: Some(upper.clone()), ..Default::default() };
    let want = model_in_reverse(model, Some(&lower), Some(&upper));
    assert!(!want.is_empty());
    for forward in [true, false] {
        assert!(read_all(db, &ro, forward) == want, "{ctx}: bounded scan (forward {forward})");
    }
    let mut it = db.iter(&ReadOptions::default()).expect("iter");
    for i in (0..4001).step_by(97) {
        let target = key(i);
        it.seek(&target).expect("seek");
        let want = model.range(..=target.clone()).next_back().map(|(k, _)| k);
        assert_eq!(it.valid().then(|| show(it.key())), want.map(|k| show(k)), "{ctx}: seek to {}", show(&target));
    }
    for (k, v) in model {
        assert_eq!(db.get(k).expect("get").as_deref(), Some(v.as_slice()), "{ctx}: get {}", show(k));
    }
    assert_eq!(db.get(b"absent").expect("get"), None);
}

/// Overwrites and deletes over 4000 keys, small and separated values.
fn load(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, rounds: u64) {
    for round in 0..rounds {
        for i in 0..4000u64 {
            let k = key(i * 3 + round);
            if (i + round) % 9 == 0 {
                db.delete(&k).expect("delete");
                model.remove(&k);
            } else {
                let v = make_value(&k, round * 10_000 + i, if i % 3 == 0 { 300 } else { 20 });
                db.put(&k, &v).expect("put");
                model.insert(k, v);
            }
        }
    }
}

#[test]
fn a_reverse_order_holds_through_flushes_compactions_gc_and_reopen_under_every_kind_of_compaction() {
    let policies: [(MergePolicy, bool); 3] =
        [(MergePolicy::Leveling, false), (MergePolicy::Leveling, true), ("tiering:3".parse().expect("policy"), false)];
    for (policy, lwc) in policies {
        let fs = Arc::new(MemFs::new());
        let opts = || {
            tiny_options(fs.clone())
                .merge_policy(policy)
                .light_weight_compaction(lwc)
                .min_separated_value_bytes(200)
                .comparator(reverse())
        };
        let ctx = format!("{policy:?} lwc={lwc}");
        let db = Db::open("/db", opts()).expect("open");
        let mut model = BTreeMap::new();
        load(&db, &mut model, 3);
        db.wait_for_background_work().expect("wait");
        let levels = db.stats().level_files;
        assert!(levels.iter().skip(1).sum::<usize>() > 2, "{ctx}: compactions must have run: {levels:?}");
        check(&db, &model, &ctx);
        db.run_gc(0.0).expect("gc");
        drop(db);
        let db = Db::open("/db", opts()).expect("reopen");
        check(&db, &model, &format!("{ctx}, reopened"));
        db.compact_range(Some(&key(700)), Some(&key(100))).expect("compact a range");
        db.compact_range(None, None).expect("compact all");
        check(&db, &model, &format!("{ctx}, compacted"));
        let sizes = db.approximate_sizes(&[(b"z", b"a"), (b"a", b"z")]);
        assert!(sizes[0] > 10_000 && sizes[1] == 0, "{ctx}: in reverse order z..a holds every key: {sizes:?}");
        let report = db.verify().expect("verify");
        assert!(report.errors.is_empty() && report.tables_checked > 0, "{ctx}: {:?}", report.errors);
    }
}

#[test]
fn a_keyspace_takes_the_database_order_and_its_ranges_meet_in_it() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", tiny_options(fs).comparator(reverse())).expect("open");
    // A keyspace's own options shape its tree; the key order stays the database's.
    let ks = db.create_keyspace("other", Options::default().comparator(None)).expect("create");
    let mut model = BTreeMap::new();
    for i in 0..300u64 {
        let k = key(i);
        ks.put(&k, &k).expect("put");
        model.insert(k.clone(), k);
    }
    db.flush().expect("flush");
    ks.compact_range(None, None).expect("compact");
    let (from, to) = (b"key003000".as_slice(), b"key001000".as_slice());
    let want = model_in_reverse(&model, Some(from), Some(to));
    fn collect(r: impl Iterator<Item = wisckey::Result<(Vec<u8>, wisckey::Value)>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        r.map(|e| e.map(|(k, v)| (k, v.to_vec())).expect("walk")).collect()
    }
    assert_eq!(collect(ks.range(from..to).expect("range")), want);
    let mut back = collect(ks.range(from..to).expect("range").rev());
    back.reverse();
    assert_eq!(back, want, "next_back walks the same entries in the reverse order's reverse");
    // Bounds that need the next key, and prefixes, have no meaning without the bytewise order.
    assert!(matches!(ks.range(from..=to), Err(Error::InvalidArgument { .. })));
    assert!(matches!(ks.prefix(b"key00"), Err(Error::InvalidArgument { .. })));
}

/// Name and bytes of every file of the database, lost-and-found directory included.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("list") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_file() {
            out.insert(e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("read"));
        }
    }
    out
}

#[test]
fn reopening_with_another_comparator_is_refused_and_changes_nothing_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let opts = |c: Option<Arc<dyn Comparator>>| Options::default().write_buffer_bytes(4 << 10).comparator(c);
    let db = Db::open(&path, opts(reverse())).expect("create");
    let mut model = BTreeMap::new();
    load(&db, &mut model, 1);
    db.close().expect("close");
    let before = files(&path);

    struct Named(&'static str);
    impl Comparator for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
            a.cmp(b)
        }
    }
    // LevelDB's name for the bytewise order is the built-in order, recorded as wisckey's.
    let named = |n: &'static str| Some(Arc::new(Named(n)) as Arc<dyn Comparator>);
    let refused = [
        ("wisckey.bytewise", None),
        ("wisckey.bytewise", named("leveldb.BytewiseComparator")),
        ("test.Other", named("test.Other")),
    ];
    for (given, c) in refused {
        let err = Db::open(&path, opts(c)).err().expect("must be refused");
        match &err {
            Error::IncompatibleOptions { option: "comparator", existing, given: g } => {
                assert!(existing.contains("test.ReverseBytewise") && g.contains(given), "{err}");
            }
            other => panic!("expected IncompatibleOptions, got {other}"),
        }
        assert!(files(&path) == before, "a refused open ({given}) changed the files");
    }
    let db = Db::open(&path, opts(reverse())).expect("reopen with the right comparator");
    check(&db, &model, "reopened");
}

/// A filter of 8 bytes: the xor of the keys' first 8 bytes, then a magic. `key_may_match`
/// answers what `answer` says (to prove lookups ask it), and counts its calls.
struct XorFilter {
    name: &'static str,
    answer: AtomicBool,
    created: AtomicU64,
    asked: AtomicU64,
}

impl XorFilter {
    fn new(name: &'static str) -> Arc<XorFilter> {
        Arc::new(XorFilter {
            name,
            answer: AtomicBool::new(true),
            created: AtomicU64::new(0),
            asked: AtomicU64::new(0),
        })
    }
}

impl FilterPolicy for XorFilter {
    fn name(&self) -> &str {
        self.name
    }
    fn create_filter(&self, keys: &[&[u8]]) -> Vec<u8> {
        self.created.fetch_add(1, Atomic::Relaxed);
        assert!(keys.windows(2).all(|w| w[0] != w[1]), "keys are distinct");
        let mut x = [0u8; 8];
        for k in keys {
            for (a, b) in x.iter_mut().zip(k.iter()) {
                *a ^= b;
            }
        }
        [&x[..], b"XORF"].concat()
    }
    fn key_may_match(&self, _key: &[u8], filter: &[u8]) -> bool {
        assert!(filter.len() == 12 && &filter[8..] == b"XORF", "the filter block comes back as it was made");
        self.asked.fetch_add(1, Atomic::Relaxed);
        self.answer.load(Atomic::Relaxed)
    }
}

#[test]
fn a_custom_filter_policy_is_asked_and_a_table_of_another_policy_is_read_without_its_filter() {
    let fs = Arc::new(MemFs::new());
    let opts = |p: Option<Arc<dyn FilterPolicy>>| {
        Options::default().vfs(fs.clone()).write_buffer_bytes(8 << 10).comparator(reverse()).filter_policy(p)
    };
    let policy = XorFilter::new("test.xor");
    let db = Db::open("/db", opts(Some(policy.clone()))).expect("open");
    let mut model = BTreeMap::new();
    load(&db, &mut model, 1);
    db.compact_range(None, None).expect("compact");
    assert!(policy.created.load(Atomic::Relaxed) > 0, "tables got the policy's filter");
    let (k, v) = model.iter().next().map(|(k, v)| (k.clone(), v.clone())).expect("a key");
    assert_eq!(db.get(&k).expect("get").as_deref(), Some(v.as_slice()));
    assert!(policy.asked.load(Atomic::Relaxed) > 0, "lookups ask the filter");
    policy.answer.store(false, Atomic::Relaxed);
    assert_eq!(db.get(&k).expect("get"), None, "a filter saying no keeps the lookup out of the table");
    policy.answer.store(true, Atomic::Relaxed);
    drop(db);

    // Another policy (or none): the tables' filters are not theirs, so they are not used.
    let other = XorFilter::new("test.other");
    other.answer.store(false, Atomic::Relaxed);
    for p in [Some(other.clone() as Arc<dyn FilterPolicy>), None] {
        let db = Db::open("/db", opts(p)).expect("reopen");
        check(&db, &model, "another filter policy");
    }
    assert_eq!(other.asked.load(Atomic::Relaxed), 0, "the other policy is never asked of tables it did not build");
}

/// Range tombstones are cut and merged in the bytewise order only: under a custom comparator
/// a range delete is refused (alone or in a batch), and nothing it names is deleted.
#[test]
fn a_range_delete_under_a_custom_comparator_is_refused_and_deletes_nothing() {
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", tiny_options(fs).comparator(reverse())).expect("open");
    db.put(key(5), "v").expect("put");
    let refused = db.delete_range(key(1), key(9));
    assert!(matches!(refused, Err(wisckey::Error::InvalidArgument { .. })), "{refused:?}");
    let mut batch = wisckey::WriteBatch::new();
    batch.put(key(6), "w").delete_range(key(1), key(9));
    let refused = db.write(&wisckey::WriteOptions::default(), &batch);
    assert!(matches!(refused, Err(wisckey::Error::InvalidArgument { .. })), "{refused:?}");
    assert_eq!(db.get(key(5)).expect("get").as_deref(), Some(&b"v"[..]));
    assert_eq!(db.get(key(6)).expect("get"), None, "the refused batch wrote nothing");
}
