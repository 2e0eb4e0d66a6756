//! Time-to-live against a model with a driven clock: expired entries vanish at once from every
//! read (get, multi_get, both iterator directions, ranges, snapshots, transactions), stay gone
//! through flushes, compactions and crashes, never bring an older version back, and their
//! separated values are reclaimed by value-log GC. Bad TTLs are refused with nothing written.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::crash_points::{crash_points, halting_after, prefix_state};
use common::{assert_view_matches, make_value, show, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{FaultFs, MemFs, PosixFs};
use wisckey::{Db, Error, ManualClock, Options, ReadOptions, WriteBatch, WriteOptions};

/// The clock's start: some day in 2026, in milliseconds.
const T0: u64 = 1_780_000_000_000;

/// Each key's newest write: its value and expiry time (`None`: never).
type TtlModel = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

/// What a reader at `now_ms` sees of `model`.
fn visible(model: &TtlModel, now_ms: u64) -> Model {
    model
        .iter()
        .filter(|(_, (_, at))| at.is_none_or(|at| at > now_ms))
        .map(|(k, (v, _))| (k.clone(), v.clone()))
        .collect()
}

fn options(vfs: Arc<dyn wisckey::fs::Vfs>, clock: &Arc<ManualClock>) -> Options {
    common::tiny_options(vfs).clock(clock.clone()).min_separated_value_bytes(64).gc_interval_ms(0)
}

/// Every way of reading the view, plus `multi_get` of every key ever written (expired ones
/// must come back absent, not as an older version).
fn check(db: &Db, ro: &ReadOptions, model: &TtlModel, now: u64, ctx: &str) {
    let want = visible(model, now);
    assert_view_matches(db, ro, &want, ctx);
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let got = db.multi_get(ro, &keys).unwrap_or_else(|e| panic!("{ctx}: multi_get failed: {e}"));
    for (k, g) in keys.iter().zip(got) {
        assert_eq!(g.as_deref(), want.get(*k).map(|v| &v[..]), "{ctx}: multi_get {}", show(k));
    }
}

#[test]
fn expired_entries_vanish_from_every_read_and_stay_gone_through_flushes_compactions_and_snapshots() {
    let clock = Arc::new(ManualClock::new(T0));
    let db = Db::open("/ttl", options(Arc::new(MemFs::new()), &clock)).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = TtlModel::new();
    let mut snaps: Vec<(wisckey::Snapshot, TtlModel)> = Vec::new();
    for step in 0..1500u64 {
        let k = format!("k{:03}", rng.gen_range(0..120)).into_bytes();
        let len = if rng.gen_bool(0.3) { 200 } else { 16 };
        let v = make_value(&k, step, len);
        let now = clock.now();
        match rng.gen_range(0..100) {
            0..=39 => {
                let ttl = Duration::from_millis(rng.gen_range(1..30_000));
                db.put_with_ttl(&k, &v, ttl).unwrap();
                model.insert(k, (v, Some(now + ttl.as_millis() as u64)));
            }
            40..=69 => {
                db.put(&k, &v).unwrap();
                model.insert(k, (v, None));
            }
            70..=79 => {
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            80..=89 => clock.advance(Duration::from_millis(rng.gen_range(0..8_000))),
            90..=93 => db.flush().unwrap(),
            94..=95 => db.compact_range(None, None).unwrap(),
            96 if snaps.len() < 3 => snaps.push((db.snapshot(), model.clone())),
            _ => {
                let now = clock.now();
                check(&db, &ReadOptions::default(), &model, now, &format!("step {step}"));
                for (i, (snap, at)) in snaps.iter().enumerate() {
                    // A snapshot keeps its versions, but judges expiry by the clock now.
                    let ro = ReadOptions { snapshot: Some(snap.clone()), ..Default::default() };
                    check(&db, &ro, at, now, &format!("step {step}, snapshot {i}"));
                }
                if rng.gen_bool(0.3) {
                    snaps.clear();
                }
            }
        }
    }
    clock.advance(Duration::from_secs(60));
    db.compact_range(None, None).unwrap();
    check(&db, &ReadOptions::default(), &model, clock.now(), "every TTL passed, compacted");
    assert!(visible(&model, clock.now()).len() < model.len(), "the script must leave expired keys");
}

#[test]
fn an_expired_newer_version_never_brings_an_older_one_back() {
    let clock = Arc::new(ManualClock::new(T0));
    let db = Db::open("/ttl", options(Arc::new(MemFs::new()), &clock)).unwrap();
    db.put(b"k", b"old, forever").unwrap();
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    let before = db.snapshot();
    db.put_with_ttl(b"k", vec![7u8; 300], Duration::from_secs(10)).unwrap();
    db.flush().unwrap();
    clock.advance(Duration::from_secs(10));
    assert_eq!(db.get(b"k").unwrap(), None, "expired at its expiry time");
    // With the snapshot held the old version stays for it; the newest view still sees none.
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get(b"k").unwrap(), None);
    let ro = ReadOptions { snapshot: Some(before.clone()), ..Default::default() };
    assert_eq!(db.get_opt(&ro, b"k").unwrap().as_deref(), Some(&b"old, forever"[..]));
    drop(ro);
    drop(before);
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get(b"k").unwrap(), None, "the compaction that drops both must not resurrect the old one");
    assert!(db.scan(&ReadOptions::default()).unwrap().next().is_none());
}

#[test]
fn a_keyspace_default_ttl_applies_to_plain_puts_batches_and_transactions() {
    let clock = Arc::new(ManualClock::new(T0));
    let fs: Arc<dyn wisckey::fs::Vfs> = Arc::new(MemFs::new());
    let db = Db::open("/ttl", options(fs.clone(), &clock)).unwrap();
    let cache = db.create_keyspace("cache", options(fs, &clock).default_ttl_ms(5_000)).unwrap();
    cache.put(b"plain", b"p").unwrap();
    let mut b = WriteBatch::new();
    b.put_in(&cache, b"batched", b"b").put(b"default-ks", b"forever").put_in_with_ttl(
        &cache,
        b"longer",
        b"l",
        Duration::from_secs(60),
    );
    db.write(&WriteOptions::default(), &b).unwrap();
    let mut txn = db.transaction();
    txn.put(&cache, b"txn", b"t").unwrap();
    txn.commit().unwrap();
    clock.advance(Duration::from_millis(4_999));
    for k in [&b"plain"[..], b"batched", b"txn", b"longer"] {
        assert!(cache.get(k).unwrap().is_some(), "{} expired early", show(k));
    }
    clock.advance(Duration::from_millis(1));
    for k in [&b"plain"[..], b"batched", b"txn"] {
        assert_eq!(cache.get(k).unwrap(), None, "{} outlived the keyspace's TTL", show(k));
    }
    let mut txn = db.transaction();
    assert_eq!(txn.get(&cache, b"txn").unwrap(), None, "a transaction reads expiry like a get");
    assert_eq!(txn.get(&cache, b"longer").unwrap().as_deref(), Some(&b"l"[..]));
    drop(txn);
    assert_eq!(db.get(b"default-ks").unwrap().as_deref(), Some(&b"forever"[..]), "other keyspaces keep no TTL");
    let left: Vec<_> = cache.scan(&ReadOptions::default()).unwrap().map(|e| e.unwrap().0).collect();
    assert_eq!(left, vec![b"longer".to_vec()]);
}

#[test]
fn a_ttl_of_zero_or_one_that_overflows_is_refused_and_nothing_is_written() {
    let clock = Arc::new(ManualClock::new(T0));
    let db = Db::open("/ttl", options(Arc::new(MemFs::new()), &clock)).unwrap();
    let zero = db.put_with_ttl(b"k", b"v", Duration::ZERO).unwrap_err();
    assert!(matches!(&zero, Error::InvalidTtl { key, ttl_ms: 0, .. } if key == b"k"), "{zero}");
    let huge = db.put_with_ttl(b"k", b"v", Duration::from_millis(u64::MAX - T0 / 2)).unwrap_err();
    assert!(matches!(huge, Error::InvalidTtl { .. }), "{huge}");
    let mut b = WriteBatch::new();
    b.put(b"a", b"1").put_with_ttl(b"b", b"2", Duration::ZERO);
    assert!(matches!(db.write(&WriteOptions::default(), &b), Err(Error::InvalidTtl { .. })));
    assert!(db.scan(&ReadOptions::default()).unwrap().next().is_none(), "a refused batch writes nothing");
}

#[test]
fn expired_entries_separated_values_are_reclaimed_by_gc_and_never_read_back() {
    const KEYS: u32 = 1500;
    const VALUE_BYTES: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = Options::default()
        .vfs(Arc::new(PosixFs::new()))
        .clock(clock.clone())
        .write_buffer_bytes(256 << 10)
        .memtable_log_bytes(1 << 20)
        .log_file_bytes(1 << 20)
        .target_file_size_bytes(64 << 10)
        .max_bytes_for_level_base(256 << 10)
        .gc_interval_ms(0);
    let db = Db::open(dir.path(), opts).unwrap();
    let mut live = Model::new();
    for i in 0..KEYS {
        let k = format!("key{i:06}").into_bytes();
        let v = make_value(&k, 0, VALUE_BYTES);
        // Three of four values expire; the fourth lives on.
        if i % 4 == 0 {
            db.put(&k, &v).unwrap();
            live.insert(k, v);
        } else {
            db.put_with_ttl(&k, &v, Duration::from_secs(3600)).unwrap();
        }
    }
    db.flush().unwrap();
    let before = db.stats().vlog_disk_bytes;
    let live_bytes: u64 = live.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    assert!(before > 3 * live_bytes, "the load must write the expiring values: {before} vs {live_bytes} live");
    clock.advance(Duration::from_secs(3600));
    assert_view_matches(&db, &ReadOptions::default(), &live, "expired, before compaction");
    // Compaction drops the expired entries and counts their values as garbage; GC collects.
    db.compact_range(None, None).unwrap();
    let report = db.run_gc(0.1).unwrap();
    db.wait_for_background_work().unwrap();
    let s = db.stats();
    eprintln!("vLog bytes: {before} before, {} after ({live_bytes} live); {report:?}", s.vlog_disk_bytes);
    assert!(s.gc_bytes_freed > 0, "GC freed nothing: {s:?}");
    // Back to the live size, give or take the log head and the cold file being filled
    // (1 MiB each here).
    assert!(s.vlog_disk_bytes < live_bytes + (3 << 20), "space did not return: {s:?}");
    assert_view_matches(&db, &ReadOptions::default(), &live, "after GC");
    drop(db);
    let db = Db::open(dir.path(), Options::default().clock(clock.clone()).gc_interval_ms(0)).unwrap();
    assert_view_matches(&db, &ReadOptions::default(), &live, "after reopening");
    assert_eq!(db.verify().unwrap().errors.len(), 0);
}

/// One step of the crash script.
#[derive(Debug, Clone)]
enum Step {
    /// Synced put, with a TTL in seconds if set.
    Put(Vec<u8>, Vec<u8>, Option<u64>),
    Flush,
    Advance(u64),
    Compact,
}

fn crash_steps() -> Vec<Step> {
    let mut steps = Vec::new();
    for round in 0..4u64 {
        for i in 0..24u32 {
            let k = format!("t{i:02}").into_bytes();
            let v = make_value(&k, round, if i % 3 == 0 { 120 } else { 20 });
            let ttl = (i % 4 != 0).then_some(10 + u64::from(i % 5) * 10 + round);
            steps.push(Step::Put(k, v, ttl));
        }
        steps.push(Step::Flush);
        steps.push(Step::Advance(25));
        steps.push(Step::Compact);
    }
    steps
}

fn crash_options(fs: &FaultFs, clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .clock(clock.clone())
        .min_separated_value_bytes(64)
        .write_buffer_bytes(1 << 20)
        .compaction_threads(1)
        .block_size_bytes(512)
        .gc_interval_ms(0)
}

/// Run `steps` until one fails; returns the model after each completed step (index 0: empty).
fn run(db: &Db, clock: &ManualClock, steps: &[Step]) -> Vec<TtlModel> {
    let mut models = vec![TtlModel::new()];
    for step in steps {
        let mut next = models.last().cloned().unwrap_or_default();
        let r = match step {
            Step::Put(k, v, ttl) => {
                let wo = WriteOptions::synced();
                let r = match ttl {
                    Some(s) => db.put_with_ttl_opt(&wo, k, v, Duration::from_secs(*s)),
                    None => db.put_opt(&wo, k, v),
                };
                next.insert(k.clone(), (v.clone(), ttl.map(|s| clock.now() + s * 1000)));
                r
            }
            Step::Flush => db.flush(),
            Step::Advance(s) => {
                clock.advance(Duration::from_secs(*s));
                Ok(())
            }
            Step::Compact => db.compact_range(None, None),
        };
        models.push(next);
        if r.is_err() {
            break;
        }
    }
    models
}

#[test]
fn every_crash_point_of_compactions_dropping_expired_entries_keeps_live_values_and_their_expiry() {
    let steps = crash_steps();
    let dry = FaultFs::in_memory(0);
    let clock = Arc::new(ManualClock::new(T0));
    let db = Db::open("/ttlcrash", crash_options(&dry, &clock)).unwrap();
    assert_eq!(run(&db, &clock, &steps).len(), steps.len() + 1, "the dry run must complete");
    drop(db);
    let total = dry.ops_count();
    let points = common::env_u64("WISCKEY_CRASH_ITERS", 150);
    eprintln!("TTL crash script: {total} mutating fs calls, about {points} crash points");
    for (n, mode) in crash_points(total, points) {
        let fs = halting_after(n);
        let clock = Arc::new(ManualClock::new(T0));
        let models = match Db::open("/ttlcrash", crash_options(&fs, &clock)) {
            Ok(db) => {
                let models = run(&db, &clock, &steps);
                fs.halt();
                drop(db);
                models
            }
            Err(_) => vec![TtlModel::new()],
        };
        fs.crash(mode).expect("crash");
        let ctx = format!("crash after {n} of {total} fs calls ({mode:?}, {} steps attempted)", models.len() - 1);
        let db =
            Db::open("/ttlcrash", crash_options(&fs, &clock)).unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        // Every put was synced: the state is that after the last completed step, or after the
        // step in flight. The clock has not moved since the crash.
        let now = clock.now();
        let got = common::owned_map(db.scan(&ReadOptions::default()).unwrap()).unwrap();
        let states: Vec<Model> = models.iter().map(|m| visible(m, now)).collect();
        let j = prefix_state(&states, models.len().saturating_sub(2), &got, &ctx);
        // The recovered entries kept their expiry: an hour later every TTL has passed.
        clock.advance(Duration::from_secs(3600));
        let forever: Model = got.into_iter().filter(|(k, _)| models[j][k].1.is_none()).collect();
        assert_view_matches(&db, &ReadOptions::default(), &forever, &format!("{ctx}: an hour later"));
        db.compact_range(None, None).unwrap();
        assert_view_matches(&db, &ReadOptions::default(), &forever, &format!("{ctx}: compacted an hour later"));
    }
}

trait Now {
    fn now(&self) -> u64;
}

impl Now for ManualClock {
    fn now(&self) -> u64 {
        wisckey::Clock::now_ms(self)
    }
}

#[test]
fn a_transactions_put_with_ttl_expires_after_the_commit_and_a_later_put_in_it_clears_the_ttl() {
    let clock = Arc::new(ManualClock::new(T0));
    let db = Db::open("/ttl", options(Arc::new(MemFs::new()), &clock)).unwrap();
    let ks = db.default_keyspace().clone();
    let mut txn = db.transaction();
    txn.put_with_ttl(&ks, b"session", b"s", Duration::from_secs(10)).unwrap();
    txn.put_with_ttl(&ks, b"cleared", b"c1", Duration::from_secs(10)).unwrap();
    txn.put(&ks, b"cleared", b"c2").unwrap();
    txn.put_with_ttl(&ks, b"deleted", b"d", Duration::from_secs(10)).unwrap();
    txn.delete(&ks, b"deleted").unwrap();
    assert_eq!(txn.get(&ks, b"session").unwrap().as_deref(), Some(&b"s"[..]), "its own write reads as written");
    let zero = txn.put_with_ttl(&ks, b"bad", b"x", Duration::ZERO).unwrap_err();
    assert!(matches!(&zero, Error::InvalidTtl { key, .. } if key == b"bad"), "{zero}");
    // The TTL counts from the commit, not from the put.
    clock.advance(Duration::from_secs(5));
    txn.commit().unwrap();
    clock.advance(Duration::from_secs(9));
    assert_eq!(db.get(b"session").unwrap().as_deref(), Some(&b"s"[..]), "expired before its TTL from the commit");
    clock.advance(Duration::from_secs(1));
    assert_eq!(db.get(b"session").unwrap(), None, "outlived its TTL");
    assert_eq!(db.get(b"cleared").unwrap().as_deref(), Some(&b"c2"[..]), "a plain put after it clears the TTL");
    assert_eq!(db.get(b"deleted").unwrap(), None);
    assert_eq!(db.get(b"bad").unwrap(), None, "a refused put is not written");
}

/// A database with `k` expiring in 10 s, its 1000-byte value in a log file the log has
/// rolled past, every other value written there overwritten; flushed.
fn expiring_value_in_a_rolled_file(clock: &Arc<ManualClock>) -> (Db, Vec<u8>) {
    let db = Db::open("/ttl", options(Arc::new(MemFs::new()), clock).log_file_bytes(16 << 10)).unwrap();
    let value = vec![7u8; 1000];
    db.put_with_ttl(b"k", &value, Duration::from_secs(10)).unwrap();
    for round in 0..3u64 {
        for i in 0..40 {
            db.put(format!("f{i:02}"), common::make_value(b"f", round, 900)).unwrap();
        }
    }
    db.flush().unwrap();
    (db, value)
}

/// After `clock` passed `k`'s expiry: GC collects its value's file, and `it`, made before the
/// expiry, still reads `k` (it judges expiry once, when made); the database stays healthy.
fn gc_then_the_old_iterator_reads_the_value(db: &Db, mut it: wisckey::DbIterator, value: &[u8]) {
    assert_eq!(db.get(b"k").unwrap(), None, "expired");
    let report = db.run_gc(0.0).unwrap();
    assert!(report.files_collected > 0, "GC collected the value's file: {report:?}");
    it.seek(b"k").unwrap();
    assert!(it.valid() && it.key() == b"k", "the iterator judges expiry as of when it was made");
    assert_eq!(it.value(), value);
    let before = db.stats().vlog_disk_bytes;
    drop(it);
    db.run_gc(0.0).unwrap();
    let after = db.stats().vlog_disk_bytes;
    assert!(after < before, "the collected file is deleted once the iterator is gone: {before} -> {after}");
    assert_eq!(db.get(b"k").unwrap(), None, "still expired for every newer reader");
    let report = db.verify().unwrap();
    assert!(report.is_healthy(), "{report}");
}

/// An iterator opened before an entry expired reads it as it was then, even after a
/// compaction dropped the expired entry and value-log GC collected the file of its separated
/// value: the drop made that value garbage without a newer write, so GC waits for readers of
/// the tables from before the compaction.
#[test]
fn an_iterator_from_before_an_expiry_still_reads_the_value_gc_collected_after_it() {
    let clock = Arc::new(ManualClock::new(T0));
    let (db, value) = expiring_value_in_a_rolled_file(&clock);
    let it = db.iter(&ReadOptions::default()).unwrap();
    clock.advance(Duration::from_secs(10));
    db.compact_range(None, None).unwrap();
    gc_then_the_old_iterator_reads_the_value(&db, it, &value);
}

/// The same with no compaction between: the value expires by the clock alone while an
/// iterator made before reads on. GC finds it dead, but frees its file only once every
/// iterator made before has gone.
#[test]
fn an_iterator_from_before_an_expiry_by_the_clock_alone_still_reads_the_value() {
    let clock = Arc::new(ManualClock::new(T0));
    let (db, value) = expiring_value_in_a_rolled_file(&clock);
    // Counts the overwritten values as garbage while `k` is still live.
    db.compact_range(None, None).unwrap();
    let it = db.iter(&ReadOptions::default()).unwrap();
    clock.advance(Duration::from_secs(10));
    gc_then_the_old_iterator_reads_the_value(&db, it, &value);
}

/// `reorganize_vlog` rewrites every separated value in key order; a value written with a TTL
/// keeps its expiry time through the rewrite and is gone once it passes.
#[test]
fn reorganizing_the_value_log_keeps_every_expiry_time() {
    let clock = Arc::new(ManualClock::new(T0));
    let db = Db::open("/ttl", options(Arc::new(MemFs::new()), &clock)).unwrap();
    db.put_with_ttl(b"brief", vec![1u8; 500], Duration::from_secs(10)).unwrap();
    db.put(b"forever", vec![2u8; 500]).unwrap();
    db.flush().unwrap();
    let report = db.reorganize_vlog().unwrap();
    assert!(report.bytes_rewritten >= 1000, "both values were moved: {report:?}");
    assert_eq!(db.get(b"brief").unwrap().as_deref(), Some(&[1u8; 500][..]));
    clock.advance(Duration::from_secs(10));
    assert_eq!(db.get(b"brief").unwrap(), None, "the moved value kept its expiry time");
    assert_eq!(db.get(b"forever").unwrap().as_deref(), Some(&[2u8; 500][..]));
    let keys: Vec<Vec<u8>> = db.scan(&ReadOptions::default()).unwrap().map(|e| e.unwrap().0.to_vec()).collect();
    assert_eq!(keys, vec![b"forever".to_vec()]);
}
