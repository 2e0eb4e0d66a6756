//! Randomized damage campaign: a random workload (synced and unsynced puts of inline and
//! separated values, deletes, batches, flushes, compactions, value-log GC), ended by a clean
//! close or a process kill, then one file of one kind — log/vLog, table, MANIFEST, CURRENT —
//! damaged at random: bytes flipped, a range overwritten with garbage or zeros, the file
//! truncated or deleted. Then the database is opened with default options and every key is
//! read. The rules:
//!
//! * no read returns a wrong, stale or resurrected value without an error: the values that
//!   read back equal the model after some prefix of the workload that keeps every synced
//!   write — except in the one case nothing can detect (docs/RELIABILITY.md): a killed
//!   process's newest log file damaged after its last sync mark or up to its end (it looks
//!   exactly like a torn tail), where the state must still be a consistent prefix;
//! * `verify` reports damage (`wisckey verify` exits 1) whenever the open fails, a read fails
//!   or data was lost outside that one case.
//!
//! `cargo test` runs 60 cases; `WISCKEY_DAMAGE_CASES=n cargo test --release --test
//! damage_campaign -- --ignored --nocapture` runs the long campaign (first seed:
//! `WISCKEY_DAMAGE_SEED`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::damage::{self, records};
use common::{make_value, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{CrashMode, FaultFs, Vfs};
use wisckey::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

const DIR: &str = "/db";

fn options(vfs: Arc<dyn Vfs>) -> Options {
    Options::default()
        .vfs(vfs)
        .write_buffer_bytes(16 << 10)
        .memtable_log_bytes(48 << 10)
        .log_file_bytes(24 << 10)
        .target_file_size_bytes(8 << 10)
        .max_bytes_for_level_base(32 << 10)
        .block_size_bytes(512)
        .l0_compaction_trigger(2)
        .min_separated_value_bytes(64)
        .gc_interval_ms(0)
        .gc_chunk_bytes(8 << 10)
        .io_uring(false)
}

/// What the workload promised: the model after every step, and the first one that must
/// survive (the last synced write, or everything after a clean close).
struct Workload {
    models: Vec<Model>,
    floor: usize,
    keys: Vec<Vec<u8>>,
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

fn run_workload(db: &Db, rng: &mut StdRng) -> Workload {
    let mut w = Workload { models: vec![Model::new()], floor: 0, keys: (0..50).map(key).collect() };
    let steps = rng.gen_range(60..220);
    for step in 0..steps {
        let mut m = w.models.last().expect("model").clone();
        let sync = rng.gen_bool(0.4);
        let wo = WriteOptions { sync };
        let value = |rng: &mut StdRng, k: &[u8]| {
            make_value(k, step, if rng.gen_bool(0.5) { rng.gen_range(100..900) } else { 24 })
        };
        // Synced writes and flushes make everything before them durable; GC does not.
        let mut durable = sync;
        match rng.gen_range(0..100) {
            0..=54 => {
                let k = key(rng.gen_range(0..50));
                let v = value(rng, &k);
                db.put_opt(&wo, &k, &v).expect("put");
                m.insert(k, v);
            }
            55..=69 => {
                let k = key(rng.gen_range(0..50));
                db.delete_opt(&wo, &k).expect("delete");
                m.remove(&k);
            }
            70..=89 => {
                let mut b = WriteBatch::new();
                for _ in 0..rng.gen_range(1..5) {
                    let k = key(rng.gen_range(0..50));
                    if rng.gen_bool(0.7) {
                        let v = value(rng, &k);
                        b.put(&k, &v);
                        m.insert(k, v);
                    } else {
                        b.delete(&k);
                        m.remove(&k);
                    }
                }
                db.write(&wo, &b).expect("batch");
            }
            90..=93 => {
                db.flush().expect("flush");
                durable = true;
            }
            94..=96 => {
                db.compact_range(None, None).expect("compact");
                durable = true;
            }
            _ => {
                db.run_gc(0.2).expect("gc");
                durable = false;
            }
        }
        w.models.push(m);
        if durable {
            w.floor = w.models.len() - 1;
        }
    }
    w
}

/// Kinds of files the campaign damages.
const KINDS: [&str; 4] = ["vlog", "sst", "MANIFEST", "CURRENT"];

fn kind_of(name: &str) -> Option<&'static str> {
    KINDS.iter().copied().find(|k| name.ends_with(&format!(".{k}")) || name.starts_with(k))
}

/// One damage applied to a file.
#[derive(Debug, Clone)]
enum Damage {
    Flip(Vec<u64>),
    Garbage(u64, u64),
    Zero(u64, u64),
    Truncate(u64),
    Delete,
}

impl Damage {
    fn random(rng: &mut StdRng, len: u64) -> Damage {
        let len = len.max(1);
        match rng.gen_range(0..5) {
            0 => Damage::Flip((0..rng.gen_range(1..=4)).map(|_| rng.gen_range(0..len)).collect()),
            1 => {
                let at = rng.gen_range(0..len);
                Damage::Garbage(at, rng.gen_range(1..=256u64).min(len - at))
            }
            2 => {
                let at = rng.gen_range(0..len);
                Damage::Zero(at, rng.gen_range(1..=256u64).min(len - at))
            }
            3 => Damage::Truncate(rng.gen_range(0..len)),
            _ => Damage::Delete,
        }
    }

    /// The damaged bytes (`None`: the file is gone) and the first offset touched.
    fn apply(&self, rng: &mut StdRng, bytes: &[u8]) -> (Option<Vec<u8>>, u64) {
        let mut b = bytes.to_vec();
        match self {
            Damage::Flip(at) => {
                let n = b.len();
                for &o in at.iter().filter(|&&o| (o as usize) < n) {
                    b[o as usize] ^= rng.gen_range(1..=255u8);
                }
                (Some(b), at.iter().copied().min().unwrap_or(0))
            }
            Damage::Garbage(at, n) | Damage::Zero(at, n) => {
                let (s, e) = (*at as usize, ((*at + *n) as usize).min(b.len()));
                for x in &mut b[s.min(e)..e] {
                    *x = if matches!(self, Damage::Zero(..)) { 0 } else { rng.gen() };
                }
                (Some(b), *at)
            }
            Damage::Truncate(t) => {
                b.truncate(*t as usize);
                (Some(b), *t)
            }
            Damage::Delete => (None, 0),
        }
    }
}

/// How one case came out.
#[derive(Debug, Default, Clone)]
struct Tally {
    cases: u64,
    /// The open failed (Corruption, NotADatabase...): `wisckey verify` exits 1.
    refused: u64,
    /// Opened; some reads failed, and verify reported the damage.
    read_errors: u64,
    /// Opened; every read returned the complete, current data.
    intact: u64,
    /// Opened; data lost without an error in the one undetectable case (a killed process's
    /// newest log damaged after its last sync mark / at its end); the state is a prefix.
    undetectable_prefix: u64,
    /// Opened and verify still reported damage although every read was right.
    verify_flagged_intact: u64,
    by_kind: BTreeMap<String, u64>,
    failures: Vec<String>,
}

fn run_case(seed: u64, t: &mut Tally) {
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = FaultFs::in_memory(seed);
    let db = Db::open(DIR, options(Arc::new(fs.clone()))).expect("open");
    let w = run_workload(&db, &mut rng);
    let killed = rng.gen_bool(0.5);
    if killed {
        fs.halt();
        drop(db);
        fs.crash(CrashMode::KeepUnsynced).expect("crash");
    } else {
        db.close().expect("close");
    }
    let floor = if killed { w.floor } else { w.models.len() - 1 };
    let dir = Path::new(DIR);
    let img = damage::image(&fs, dir);

    // A file of a random kind (among those present), damaged at random.
    let present: Vec<&str> =
        KINDS.iter().copied().filter(|k| img.iter().any(|(n, _)| kind_of(n) == Some(*k))).collect();
    let kind = present[rng.gen_range(0..present.len())];
    let files: Vec<&(String, Vec<u8>)> = img.iter().filter(|(n, _)| kind_of(n) == Some(kind)).collect();
    let (name, bytes) = files[rng.gen_range(0..files.len())];
    let damage = Damage::random(&mut rng, bytes.len() as u64);
    let (damaged, first_touched) = damage.apply(&mut rng, bytes);
    let newest_log = img.iter().filter(|(n, _)| n.ends_with(".vlog")).map(|(n, _)| n).max();
    // Nothing after the damage vouches for those bytes (no intact sync mark follows it in the
    // newest log, and no clean close recorded its end): the same as a torn tail.
    let recs = records(bytes);
    let changed = damage::changed_records(&recs, bytes, damaged.as_deref().unwrap_or(&[]));
    let intact_mark_after = recs.iter().any(|r| !r.is_group() && r.start > first_touched && !changed.contains(r));
    let undetectable = killed && Some(name) == newest_log && !intact_mark_after;
    let ctx = format!("seed {seed}: {kind} {name} ({} B, killed: {killed}) {damage:?}", bytes.len());
    if std::env::var("WISCKEY_DAMAGE_DEBUG").is_ok() {
        let files: Vec<(String, usize)> = img.iter().map(|(n, b)| (n.clone(), b.len())).collect();
        eprintln!("{ctx}\nfiles {files:?}\nfloor {floor} of {}", w.models.len() - 1);
        let vs = wisckey::internals::VersionSet::load(Arc::new(fs.clone()), dir, 7).expect("manifest");
        eprintln!(
            "head {:?} durable {:?} last_seq {} vlog files {:?}",
            vs.log_head(),
            vs.log_durable(),
            vs.last_sequence(),
            vs.vlog_files()
        );
        for (n, b) in img.iter().filter(|(n, _)| n.ends_with(".vlog")) {
            let recs: Vec<(u64, u64, u64)> = records(b)
                .iter()
                .filter(|r| r.start + 2000 > b.len() as u64)
                .map(|r| (r.start, r.first_seq, r.count))
                .collect();
            eprintln!("{n}: {recs:?}");
        }
    }

    let fs2 = damage::restore_fault_fs(&img, dir, seed);
    let path = dir.join(name);
    match &damaged {
        _ if std::env::var("WISCKEY_DAMAGE_NONE").is_ok() => {}
        Some(d) => damage::write(&fs2, &path, d),
        None => {
            fs2.remove(&path).expect("remove");
            fs2.sync_dir(dir).expect("sync_dir");
        }
    }
    t.cases += 1;
    *t.by_kind.entry(kind.to_string()).or_default() += 1;
    let db = match Db::open(DIR, options(Arc::new(fs2.clone())).create_if_missing(false)) {
        Err(_) => {
            // `wisckey verify` opens the database the same way: it exits 1 here.
            t.refused += 1;
            return;
        }
        Ok(db) => db,
    };
    let (reads, errors) = read_everything(&db, &w.keys);
    if std::env::var("WISCKEY_DAMAGE_DEBUG").is_ok() {
        let last = w.models.last().expect("model");
        for (k, v) in &reads {
            if last.get(k) != v.as_ref() {
                let hist: Vec<Option<usize>> = w.models.iter().map(|m| m.get(k).map(|v| v.len())).collect();
                eprintln!(
                    "{}: got {:?}, want {:?}; history {:?}",
                    common::show(k),
                    v.as_ref().map(|v| v.len()),
                    last.get(k).map(|v| v.len()),
                    hist
                );
            }
        }
        eprintln!("{}", db.verify().expect("verify"));
        let st = db.stats();
        eprintln!(
            "last_sequence {} memtable_bytes {} level_files {:?}",
            st.last_sequence, st.memtable_bytes, st.level_files
        );
    }
    let consistent = |j: usize| reads.iter().all(|(k, v)| w.models[j].get(k) == v.as_ref());
    let current = consistent(w.models.len() - 1) || (floor..w.models.len()).any(consistent);
    let report = db.verify().expect("verify runs");
    let damaged_by_verify = !report.is_healthy();
    if errors > 0 {
        t.read_errors += 1;
        if !damaged_by_verify {
            t.failures.push(format!("{ctx}: {errors} reads failed but verify says healthy"));
        }
    }
    if current {
        if errors == 0 {
            t.intact += 1;
            t.verify_flagged_intact += u64::from(damaged_by_verify);
        }
        return;
    }
    if undetectable && (0..w.models.len()).any(consistent) {
        t.undetectable_prefix += 1;
        return;
    }
    let bad: Vec<String> = reads
        .iter()
        .filter(|(k, v)| w.models.last().expect("model").get(*k) != v.as_ref())
        .take(3)
        .map(|(k, v)| format!("{} -> {:?}", common::show(k), v.as_ref().map(|v| v.len())))
        .collect();
    t.failures.push(format!(
        "{ctx}: wrong, stale or resurrected values without an error (verify healthy: {}): {bad:?}",
        !damaged_by_verify
    ));
}

/// Every key's value by `get` (errors left out) and the number of failed reads (gets and a
/// full scan, which must agree with the gets where both work).
fn read_everything(db: &Db, keys: &[Vec<u8>]) -> (BTreeMap<Vec<u8>, Option<Vec<u8>>>, usize) {
    let (mut reads, mut errors) = (BTreeMap::new(), 0);
    for k in keys {
        match db.get(k) {
            Ok(v) => {
                reads.insert(k.clone(), v.map(Vec::from));
            }
            Err(_) => errors += 1,
        }
    }
    match db.scan(&ReadOptions::default()).and_then(common::owned_map) {
        Ok(scanned) => {
            for (k, v) in reads.iter_mut() {
                if v.as_ref() != scanned.get(k) {
                    // A get and a scan disagree: count the scan's view as a second answer.
                    *v = Some(b"<get and scan disagree>".to_vec());
                }
            }
        }
        Err(_) => errors += 1,
    }
    (reads, errors)
}

fn campaign(first: u64, cases: u64) -> Tally {
    let mut t = Tally::default();
    for seed in first..first + cases {
        run_case(seed, &mut t);
    }
    let summary = format!(
        "damage campaign, seeds {first}..{}: {} cases {:?}; open refused {}, reads failed (verify: damaged) {}, \
         intact {} (verify flagged {} of them), undetectable newest-log tail of a killed process (prefix state) {}; \
         failures {}",
        first + cases,
        t.cases,
        t.by_kind,
        t.refused,
        t.read_errors,
        t.intact,
        t.verify_flagged_intact,
        t.undetectable_prefix,
        t.failures.len()
    );
    eprintln!("{summary}");
    for f in t.failures.iter().take(20) {
        eprintln!("FAILURE {f}");
    }
    assert!(t.failures.is_empty(), "{summary}");
    t
}

#[test]
fn random_damage_to_any_file_never_returns_wrong_data_without_an_error() {
    campaign(common::env_u64("WISCKEY_DAMAGE_SEED", 0), 60);
}

#[test]
#[ignore]
fn long_random_damage_campaign() {
    let first = common::env_u64("WISCKEY_DAMAGE_SEED", 1_000);
    campaign(first, common::env_u64("WISCKEY_DAMAGE_CASES", 2_000));
}

#[test]
#[ignore]
fn debug_seed() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let seed = common::env_u64("WISCKEY_DAMAGE_SEED", 0);
    let mut t = Tally::default();
    run_case(seed, &mut t);
    eprintln!("{t:?}");
}
