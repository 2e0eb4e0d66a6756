//! Damage to the log after the manifest's head — the active file and earlier unflushed files —
//! at many offsets (flipped bytes, zeroed ranges, truncation, deletion), with synced record
//! groups after it, under every recovery mode, on the fault-injecting in-memory filesystem and
//! on real files:
//!
//! * the default mode refuses to open (`Corruption`) and changes no file whenever a synced
//!   group was damaged; it never opens with a missing, stale or resurrected value;
//! * `AbsoluteConsistency` refuses any damage;
//! * `PointInTime` keeps exactly the groups before the first damage and reports the rest;
//! * `SkipDamaged` keeps every undamaged group and reports exactly the damaged ones;
//! * a salvaged database opens again in the default mode with the same contents;
//! * a real torn tail (bytes after the last sync, after a power cut) still opens cleanly.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use common::damage::{self, arc, changed_records, image, log_names, records, DirImage, Rec};
use common::{make_value, show, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{CrashMode, FaultFs, PosixFs, Vfs};
use wisckey::{Db, Error, Options, ReadOptions, RecoveryMode, RecoveryReport, WriteBatch, WriteOptions};

const DIR: &str = "/db";

/// Damage cases checked and databases opened (for the figures in docs/RELIABILITY.md).
static CASES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static OPENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn report_counts(test: &str) {
    use std::sync::atomic::Ordering::Relaxed;
    eprintln!("{test}: {} damage cases, {} opens checked so far in this run", CASES.load(Relaxed), OPENS.load(Relaxed));
}

/// One operation of the workload and the sequence number it got.
#[derive(Debug, Clone)]
struct Op {
    seq: u64,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:03}").into_bytes()
}

/// No flush, no GC: every write stays in the log after the head.
fn options(vfs: Arc<dyn Vfs>, log_file_bytes: u64) -> Options {
    Options::default()
        .vfs(vfs)
        .min_separated_value_bytes(64)
        .gc_interval_ms(0)
        .write_buffer_bytes(8 << 20)
        .memtable_log_bytes(64 << 20)
        .log_file_bytes(log_file_bytes)
        .io_uring(false)
}

/// Synced puts (inline and separated), deletes and batches; ends with a clean close or, with
/// `crash`, like `kill -9` (the page cache keeps everything; nothing is closed).
fn build(log_file_bytes: u64, writes: u64, crash: bool) -> (DirImage, Vec<Op>) {
    let fs = FaultFs::in_memory(1);
    let db = Db::open(DIR, options(arc(&fs), log_file_bytes)).expect("open");
    let (mut ops, mut seq) = (Vec::new(), 1u64);
    let synced = WriteOptions::synced();
    for i in 0..writes {
        let k = key(i % 40);
        match i % 11 {
            3 => {
                db.delete_opt(&synced, &k).expect("delete");
                ops.push(Op { seq, key: k, value: None });
                seq += 1;
            }
            7 => {
                let mut b = WriteBatch::new();
                let (k2, k3) = (key((i + 1) % 40), key((i + 2) % 40));
                let v3 = make_value(&k3, i, 400);
                b.put(&k, b"small").delete(&k2).put(&k3, &v3);
                db.write(&synced, &b).expect("batch");
                ops.push(Op { seq, key: k, value: Some(b"small".to_vec()) });
                ops.push(Op { seq: seq + 1, key: k2, value: None });
                ops.push(Op { seq: seq + 2, key: k3, value: Some(v3) });
                seq += 3;
            }
            _ => {
                let v = make_value(&k, i, if i % 2 == 0 { 300 } else { 20 });
                db.put_opt(&synced, &k, &v).expect("put");
                ops.push(Op { seq, key: k, value: Some(v) });
                seq += 1;
            }
        }
    }
    if crash {
        fs.halt();
        drop(db);
        fs.crash(CrashMode::KeepUnsynced).expect("crash");
    } else {
        db.close().expect("close");
    }
    (image(&fs, Path::new(DIR)), ops)
}

/// The state after every op except those numbered in `lost`.
fn model_without(ops: &[Op], lost: &BTreeSet<u64>) -> Model {
    let mut m = Model::new();
    for op in ops.iter().filter(|o| !lost.contains(&o.seq)) {
        match &op.value {
            Some(v) => m.insert(op.key.clone(), v.clone()),
            None => m.remove(&op.key),
        };
    }
    m
}

/// Everything readable, by scan and by point lookups of every key the workload touched; any
/// read error fails the test (an opened database must read back whole).
fn state(db: &Db, ops: &[Op], ctx: &str) -> Model {
    let scanned: Model = db
        .scan(&ReadOptions::default())
        .and_then(common::owned_map)
        .unwrap_or_else(|e| panic!("{ctx}: scan failed: {e}"));
    let keys: BTreeSet<&Vec<u8>> = ops.iter().map(|o| &o.key).collect();
    for k in keys {
        let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {} failed: {e}", show(k)));
        assert_eq!(got.as_deref(), scanned.get(k).map(Vec::as_slice), "{ctx}: get and scan disagree on {}", show(k));
    }
    scanned
}

/// The sequence numbers a report says are lost (an open end runs to `last`).
fn reported_seqs(r: &RecoveryReport, last: u64) -> BTreeSet<u64> {
    let mut s = BTreeSet::new();
    for l in &r.lost {
        if let Some(a) = l.first_seq {
            s.extend(a..=l.last_seq.unwrap_or(last));
        }
    }
    s
}

/// The groups of every log file of `img`, in log order: (file index, record).
fn all_groups(img: &DirImage) -> Vec<(usize, Rec)> {
    let logs = log_names(img);
    let mut out = Vec::new();
    for (i, name) in logs.iter().enumerate() {
        let bytes = &img.iter().find(|(n, _)| n == name).expect("file").1;
        out.extend(records(bytes).into_iter().filter(|r| r.is_group()).map(|r| (i, r)));
    }
    out
}

/// One damaged copy of a database and what the damage destroyed.
struct Case {
    ctx: String,
    img: DirImage,
    /// Sequence numbers of the groups whose bytes changed (or were cut).
    hit: BTreeSet<u64>,
    /// Sequence numbers from the first changed record on (what a point-in-time recovery loses).
    from_first: BTreeSet<u64>,
    /// Nothing breaks the log: only the final sync mark of the newest file changed (a torn
    /// tail), or marks were cut off cleanly (no group lost, no damaged bytes left).
    no_break: bool,
    /// The damage took the newest file's last record (its final sync mark) with it and the
    /// database was not closed cleanly (no durable end in the manifest): nothing after the
    /// damage vouches for it, so it cannot be told from a torn tail (docs/RELIABILITY.md).
    looks_torn: bool,
}

/// Damage log file `file_idx` of `img` into `damaged` (same name; `None` deletes it).
fn case(img: &DirImage, file_idx: usize, damaged: Option<Vec<u8>>, ctx: String, killed: bool) -> Case {
    let logs = log_names(img);
    let name = &logs[file_idx];
    let before = img.iter().find(|(n, _)| n == name).expect("file").1.clone();
    let recs = records(&before);
    let changed = changed_records(&recs, &before, damaged.as_deref().unwrap_or(&[]));
    let hit: BTreeSet<u64> = changed.iter().filter(|r| r.is_group()).flat_map(|r| r.seqs()).collect();
    let first = changed.first().map_or(u64::MAX, |r| r.start);
    let from_first = all_groups(img)
        .into_iter()
        .filter(|(i, r)| *i > file_idx || (*i == file_idx && r.start >= first))
        .flat_map(|(_, r)| r.seqs())
        .collect();
    let only_final_mark = file_idx + 1 == logs.len()
        && changed.len() == 1
        && !changed[0].is_group()
        && changed[0].start == recs.last().expect("records").start;
    let new_len = damaged.as_ref().map_or(0, |d| d.len() as u64);
    let cut_cleanly = changed.iter().all(|r| new_len <= r.start);
    let no_break = only_final_mark || (hit.is_empty() && cut_cleanly);
    let final_changed = changed.last().is_some_and(|r| r.start == recs.last().expect("records").start);
    let looks_torn = killed && file_idx + 1 == logs.len() && final_changed && !no_break;
    let mut out: DirImage = img.iter().filter(|(n, _)| n != name).cloned().collect();
    if let Some(d) = damaged {
        out.push((name.clone(), d));
    }
    out.sort();
    Case { ctx, img: out, hit, from_first, no_break, looks_torn }
}

/// Open `c` in every mode (each on a fresh copy) and check the rules in the header.
fn check(c: &Case, ops: &[Op], log_file_bytes: u64, posix: bool) {
    CASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let last = ops.last().expect("ops").seq;
    let full = model_without(ops, &BTreeSet::new());
    for mode in [
        RecoveryMode::TolerateCorruptTail,
        RecoveryMode::AbsoluteConsistency,
        RecoveryMode::PointInTime,
        RecoveryMode::SkipDamaged,
    ] {
        let ctx = format!("{} [{mode:?}]", c.ctx);
        let (guard, vfs, dir): (_, Arc<dyn Vfs>, std::path::PathBuf) = if posix {
            let (t, d) = damage::restore_tempdir(&c.img);
            (Some(t), Arc::new(PosixFs::new()), d)
        } else {
            (None, arc(&damage::restore_fault_fs(&c.img, Path::new(DIR), 7)), DIR.into())
        };
        let opts = || options(vfs.clone(), log_file_bytes);
        let opened = Db::open(&dir, opts().recovery_mode(mode));
        OPENS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let salvage = matches!(mode, RecoveryMode::PointInTime | RecoveryMode::SkipDamaged);
        let db = match opened {
            Err(e) => {
                assert!(!salvage, "{ctx}: a salvage open failed: {e}");
                assert!(matches!(e, Error::Corruption { .. }), "{ctx}: expected Corruption, got {e}");
                let after: DirImage =
                    damage::image(&*vfs, &dir).into_iter().filter(|(n, _)| n.ends_with(".vlog")).collect();
                let before: DirImage = c.img.iter().filter(|(n, _)| n.ends_with(".vlog")).cloned().collect();
                assert!(after == before, "{ctx}: a refused open changed the log files");
                continue;
            }
            Ok(db) => db,
        };
        let got = state(&db, ops, &ctx);
        let want_lost: BTreeSet<u64> = match mode {
            _ if c.no_break => BTreeSet::new(),
            RecoveryMode::AbsoluteConsistency if c.looks_torn => panic!("{ctx}: opened a torn tail"),
            _ if c.looks_torn => c.from_first.clone(),
            RecoveryMode::PointInTime => c.from_first.clone(),
            RecoveryMode::SkipDamaged => c.hit.clone(),
            _ => {
                assert!(c.hit.is_empty(), "{ctx}: opened although synced groups {:?} were damaged", c.hit);
                BTreeSet::new()
            }
        };
        let want = model_without(ops, &want_lost);
        assert!(got == want, "{ctx}: contents differ from the model without seqs {want_lost:?}");
        if salvage && !want_lost.is_empty() && !c.looks_torn {
            let report = db.recovery_report().unwrap_or_else(|| panic!("{ctx}: data left out without a report"));
            assert_eq!(reported_seqs(report, last), want_lost, "{ctx}: reported lost sequence numbers");
            // Keys of the lost groups that were intact are all named.
            let named: BTreeSet<&Vec<u8>> =
                report.lost.iter().flat_map(|l| l.keys.iter().chain(&l.damaged_keys)).collect();
            for op in ops.iter().filter(|o| want_lost.contains(&o.seq) && !c.hit.contains(&o.seq)) {
                assert!(
                    named.contains(&op.key),
                    "{ctx}: lost key {} (seq {}) is not in the report",
                    show(&op.key),
                    op.seq
                );
            }
            let archive = report.archive_dir.clone().expect("archive");
            assert!(!vfs.list(&archive).expect("lost/").is_empty(), "{ctx}: no evidence kept");
        }
        if salvage {
            // The salvaged database is whole: a default open sees the same contents.
            db.close().expect("close");
            let db = Db::open(&dir, opts()).unwrap_or_else(|e| panic!("{ctx}: reopen after salvage: {e}"));
            assert!(state(&db, ops, &ctx) == want, "{ctx}: contents changed across the reopen after salvage");
        }
        drop(guard);
    }
    let _ = full;
}

/// Flip a byte / zero 64 bytes at `step`-spaced offsets of log file `file_idx`, and at the
/// start of every `stride`-th record (header damage). `WISCKEY_DAMAGE_DENSITY=n` divides both
/// (n = 97 tries about every byte).
fn offsets(bytes: &[u8], step: usize, stride: usize) -> Vec<u64> {
    let density = common::env_u64("WISCKEY_DAMAGE_DENSITY", 1).max(1) as usize;
    let (step, stride) = ((step / density).max(1), (stride / density).max(1));
    let mut o: BTreeSet<u64> = (0..bytes.len() as u64).step_by(step).collect();
    o.extend(records(bytes).iter().step_by(stride).flat_map(|r| [r.start, r.start + 5, r.start + 21]));
    o.into_iter().filter(|&x| x < bytes.len() as u64).collect()
}

fn damage_cases(img: &DirImage, file_idx: usize, step: usize, stride: usize, label: &str, killed: bool) -> Vec<Case> {
    let name = &log_names(img)[file_idx];
    let bytes = img.iter().find(|(n, _)| n == name).expect("file").1.clone();
    let mut out = Vec::new();
    for at in offsets(&bytes, step, stride) {
        let mut flip = bytes.clone();
        flip[at as usize] ^= 0x5a;
        out.push(case(img, file_idx, Some(flip), format!("{label}: flip at {name}:{at}"), killed));
        let mut zero = bytes.clone();
        let end = (at as usize + 64).min(zero.len());
        zero[at as usize..end].fill(0);
        out.push(case(img, file_idx, Some(zero), format!("{label}: zero 64 bytes at {name}:{at}"), killed));
    }
    out
}

#[test]
fn damage_anywhere_in_the_active_log_with_synced_groups_after_it_is_never_silently_dropped() {
    for crash in [false, true] {
        let (img, ops) = build(64 << 20, 220, crash);
        assert_eq!(log_names(&img).len(), 1, "one active log file");
        let label = if crash { "killed" } else { "closed" };
        let cases = damage_cases(&img, 0, 401, 17, label, crash);
        assert!(cases.len() > 100, "{} cases", cases.len());
        for c in &cases {
            check(c, &ops, 64 << 20, false);
        }
    }
    report_counts("damage_anywhere_in_the_active_log_with_synced_groups_after_it_is_never_silently_dropped");
}

#[test]
fn damage_to_earlier_unflushed_log_files_is_never_silently_dropped() {
    let (img, ops) = build(6 << 10, 260, false);
    let n = log_names(&img).len();
    assert!(n >= 4, "several unflushed log files: {n}");
    for idx in [0, n / 2, n - 2] {
        for c in &damage_cases(&img, idx, 401, 9, "earlier file", false) {
            check(c, &ops, 6 << 10, false);
        }
    }
    report_counts("damage_to_earlier_unflushed_log_files_is_never_silently_dropped");
}

#[test]
fn truncating_or_deleting_a_log_file_that_is_not_the_newest_is_reported() {
    let (img, ops) = build(6 << 10, 260, false);
    let logs = log_names(&img);
    for idx in [0, logs.len() / 2, logs.len() - 2] {
        let bytes = img.iter().find(|(n, _)| *n == logs[idx]).expect("file").1.clone();
        let density = common::env_u64("WISCKEY_DAMAGE_DENSITY", 1).max(1) as usize;
        let mut cuts: BTreeSet<u64> = (0..bytes.len() as u64).step_by((613 / density).max(1)).collect();
        cuts.extend(records(&bytes).iter().step_by(2).map(|r| r.start)); // clean cuts at boundaries
        for t in cuts {
            let c = case(&img, idx, Some(bytes[..t as usize].to_vec()), format!("cut {} at {t}", logs[idx]), false);
            check(&c, &ops, 6 << 10, false);
        }
        let c = case(&img, idx, None, format!("delete {}", logs[idx]), false);
        assert!(!c.hit.is_empty());
        check(&c, &ops, 6 << 10, false);
    }
    report_counts("truncating_or_deleting_a_log_file_that_is_not_the_newest_is_reported");
}

/// After a clean close the manifest records how far the log is durable, so even a clean cut
/// of the newest file (which takes every later sync mark with it) is reported.
#[test]
fn cutting_the_newest_log_file_after_a_clean_close_is_reported() {
    let (img, ops) = build(64 << 20, 120, false);
    let name = &log_names(&img)[0];
    let bytes = img.iter().find(|(n, _)| n == name).expect("file").1.clone();
    let recs = records(&bytes);
    let mut cuts: BTreeSet<u64> = recs.iter().step_by(5).map(|r| r.start).collect();
    cuts.extend((0..bytes.len() as u64).step_by(977));
    for t in cuts {
        let c = case(&img, 0, Some(bytes[..t as usize].to_vec()), format!("cut newest {name} at {t}"), false);
        check(&c, &ops, 64 << 20, false);
    }
    report_counts("cutting_the_newest_log_file_after_a_clean_close_is_reported");
}

#[test]
fn damage_on_real_files_is_refused_by_default_and_salvaged_on_request() {
    let (img, ops) = build(8 << 10, 120, false);
    let n = log_names(&img).len();
    let mut cases = Vec::new();
    for idx in [n - 1, n / 2] {
        let all = damage_cases(&img, idx, 157, 11, "posix", false);
        let every = (all.len() / 12).max(1);
        cases.extend(all.into_iter().step_by(every));
    }
    for c in &cases {
        check(c, &ops, 8 << 10, true);
    }
    report_counts("damage_on_real_files_is_refused_by_default_and_salvaged_on_request");
}

/// A power cut tears, drops or corrupts what was written after the last sync, in any log
/// file: no sync mark vouches for those bytes, so recovery drops them quietly and keeps every
/// synced write (and the unsynced ones before the damage).
#[test]
fn a_real_torn_tail_after_a_power_cut_opens_cleanly_in_every_mode_but_absolute() {
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let fs = FaultFs::in_memory(seed);
        let log_bytes = if seed % 2 == 0 { 64 << 20 } else { 4 << 10 };
        let db = Db::open(DIR, options(arc(&fs), log_bytes)).expect("open");
        // The model after every write; the recovered state must be one of them, at or after
        // the last synced write.
        let mut models = vec![Model::new()];
        let mut floor = 0;
        let n = rng.gen_range(20..120);
        for i in 0..n {
            let k = key(rng.gen_range(0..30));
            let v = make_value(&k, i, if rng.gen_bool(0.5) { 300 } else { 20 });
            let sync = i < n / 2 || rng.gen_bool(0.1);
            db.put_opt(&WriteOptions { sync }, &k, &v).expect("put");
            let mut m = models.last().expect("model").clone();
            m.insert(k, v);
            models.push(m);
            if sync {
                floor = models.len() - 1;
            }
        }
        fs.halt();
        drop(db);
        let mode = [CrashMode::TearUnsynced, CrashMode::CorruptUnsynced, CrashMode::DropUnsynced][seed as usize % 3];
        fs.crash(mode).expect("crash");
        let img = image(&fs, Path::new(DIR));
        for rmode in [RecoveryMode::TolerateCorruptTail, RecoveryMode::PointInTime, RecoveryMode::SkipDamaged] {
            let fs2 = damage::restore_fault_fs(&img, Path::new(DIR), seed);
            let ctx = format!("seed {seed} {mode:?} {rmode:?}");
            let db = Db::open(DIR, options(arc(&fs2), log_bytes).recovery_mode(rmode))
                .unwrap_or_else(|e| panic!("{ctx}: a torn tail must open: {e}"));
            assert!(db.recovery_report().is_none(), "{ctx}: a torn tail is not a salvage");
            let got: Model = db.scan(&ReadOptions::default()).and_then(common::owned_map).expect("scan");
            assert!(
                (floor..models.len()).any(|j| models[j] == got),
                "{ctx}: not the state after a prefix of the writes that includes every synced one"
            );
        }
    }
}
