//! Crash safety of value-log garbage collection on `FaultFs` over `MemFs`: the process dies
//! at every filesystem call of `Db::run_gc` (and at random calls while GC races user
//! overwrites and deletes), the machine loses or tears unsynced data, and after recovery
//! every synced write must be there, no deleted key may come back, no key may show an older
//! value, and GC resumed after the crash must be just as safe (docs/design.md, "Value-log
//! garbage collection" and its crash table).
//! Iterations: env `WISCKEY_CRASH_ITERS` (default 150): the enumeration test builds
//! ITERS / 50 (rounded up) setups and tries up to ITERS crash points of each (all of them
//! when GC makes fewer calls) in each of four crash modes, crashing the resumed GC once
//! more at a seeded call; the race test runs ITERS / 2 seeded races.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use common::{assert_view_matches, make_value, show, Model};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::fs::{CrashMode, FaultKind, FaultOp, FaultRule};
use wisckey::fs::{FaultFs, RandomAccessFile, Vfs, WritableFile};
use wisckey::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

const DB: &str = "/gcdb";
/// Keys the workloads write; every one of them is checked after each crash, so a deleted
/// key that comes back is caught even though the model no longer lists it.
const KEYS: u64 = 60;

fn key(i: u64) -> Vec<u8> {
    format!("gc{i:03}").into_bytes()
}

fn universe() -> Vec<Vec<u8>> {
    (0..KEYS).map(key).collect()
}

/// Small buffers (many flushes and compactions, hence discard statistics), every value of
/// 64 bytes or more separated, small log files (several to collect) and chunks (several
/// per file), and no background GC, so only `run_gc` collects and crash point `n` means
/// the same call on every run.
/// A memtable of ~40 entries: the setup's overwrites meet in flushed tables (discard
/// statistics), while GC's re-puts of one run fit in one (a switch would hand a flush to the
/// background thread, whose calls interleave with GC's at a varying point).
fn gc_options(vfs: Arc<dyn Vfs>) -> Options {
    common::tiny_options(vfs)
        .write_buffer_bytes(6 << 10)
        .min_separated_value_bytes(64)
        .log_file_bytes(16 << 10)
        .gc_interval_ms(0)
        // Several batches of chunks per 16 KiB file (GC frees four chunks at a time): GC
        // punches holes mid-file, not only deletes a whole file.
        .gc_chunk_bytes(2 << 10)
        .gc_pause_ms(0)
}

/// A value: mostly separated (~200 bytes), sometimes inline (below `min_separated_value_bytes`).
fn random_value(rng: &mut StdRng, k: &[u8], version: u64) -> Vec<u8> {
    let len = if rng.gen_bool(0.1) { rng.gen_range(10..60) } else { rng.gen_range(150..250) };
    make_value(k, version, len)
}

/// An open database whose value log holds many overwritten and deleted values, compacted
/// so the discard statistics know about them, and the model of what it must contain.
struct Fixture {
    fs: FaultFs,
    options: Options,
    db: Db,
    model: Model,
}

/// Build the fixture from scratch: every key written once (cold values that stay live in
/// the oldest vLog file, so GC has values to move), then ~240 synced overwrites (about 10%
/// deletes) of the hot half, then synced deletes of every 7th key (cold ones too, so GC
/// meets dead values next to live ones), then a full compaction. `fs_seed` only seeds the
/// filesystem's randomness (torn lengths), not the workload.
fn setup(workload_seed: u64, fs_seed: u64) -> Fixture {
    let fs = FaultFs::in_memory(fs_seed);
    setup_on(fs.clone(), Arc::new(fs), workload_seed)
}

/// `setup` on `vfs`, which is `fs` or a wrapper around it.
fn setup_on(fs: FaultFs, vfs: Arc<dyn Vfs>, workload_seed: u64) -> Fixture {
    let options = gc_options(vfs);
    let db = Db::open(DB, options.clone()).expect("open");
    let mut rng = StdRng::seed_from_u64(workload_seed);
    let mut model = Model::new();
    let sync = WriteOptions::synced();
    for version in 0..300u64 {
        let k = key(if version < KEYS { version } else { rng.gen_range(0..KEYS / 2) });
        if version >= KEYS && rng.gen_bool(0.1) {
            db.delete_opt(&sync, &k).expect("setup delete");
            model.remove(&k);
        } else {
            let v = random_value(&mut rng, &k, version);
            db.put_opt(&sync, &k, &v).expect("setup put");
            model.insert(k, v);
        }
    }
    for i in (0..KEYS).step_by(7) {
        db.delete_opt(&sync, key(i)).expect("setup delete");
        model.remove(&key(i));
    }
    db.compact_range(None, None).expect("setup compaction");
    // A clean reopen deletes the tables the compactions left behind, whose number depends
    // on background timing: the file set GC starts from, and so its calls, are the same
    // on every run.
    db.close().expect("setup close");
    let db = Db::open(DB, options.clone()).expect("setup reopen");
    db.wait_for_background_work().expect("setup background work");
    let stats = db.stats();
    assert!(stats.vlog_garbage_bytes > 0, "setup must leave discard statistics: {stats:?}");
    Fixture { fs, options, db, model }
}

/// Every key ever written reads as the model says (a key the model lacks must read as
/// absent: a resurrected delete or a GC-copied stale value is caught here), and every
/// way of reading the whole database matches the model.
fn assert_state(db: &Db, model: &Model, ctx: &str) {
    for k in universe() {
        let got = db.get(&k).unwrap_or_else(|e| panic!("{ctx}: get {} failed: {e}", show(&k)));
        match (model.get(&k), got) {
            (Some(want), Some(got)) => assert!(
                &got == want,
                "{ctx}: {} reads {:?}, the model has {:?}",
                show(&k),
                show(&got[..got.len().min(24)]),
                show(&want[..want.len().min(24)])
            ),
            (Some(_), None) => panic!("{ctx}: synced write of {} LOST", show(&k)),
            (None, Some(got)) => {
                panic!("{ctx}: deleted key {} RESURRECTED as {:?}", show(&k), show(&got[..got.len().min(24)]))
            }
            (None, None) => {}
        }
    }
    assert_view_matches(db, &ReadOptions::default(), model, ctx);
}

/// The simulated process dies (if it has not already), the machine loses power, and the
/// database is opened again.
fn crash_and_reopen(fs: &FaultFs, options: &Options, db: Db, mode: CrashMode, ctx: &str) -> Db {
    fs.halt();
    drop(db);
    fs.crash(mode).expect("crash");
    Db::open(DB, options.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen after {mode:?} crash failed: {e}"))
}

/// After a crash: the state is the model; GC run again to completion keeps it so; and it
/// survives one more crash.
fn verify_recovery_and_resumed_gc(fs: &FaultFs, options: &Options, db: Db, model: &Model, ctx: &str) {
    assert_state(&db, model, &format!("{ctx}, after recovery"));
    let report = db.run_gc(0.0).unwrap_or_else(|e| panic!("{ctx}: GC after recovery failed: {e}"));
    assert_state(&db, model, &format!("{ctx}, after resumed GC ({report:?})"));
    let db = crash_and_reopen(fs, options, db, CrashMode::DropUnsynced, ctx);
    assert_state(&db, model, &format!("{ctx}, after resumed GC and another crash"));
    db.close().unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
}

/// Power loss that drops, tears or corrupts unsynced data, and a bare process crash.
const MODES: [CrashMode; 4] =
    [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced, CrashMode::KeepUnsynced];

/// One crash point of the enumeration: returns whether the process died inside `run_gc`.
fn crash_gc_after(workload_seed: u64, n: u64, total: u64, mode: CrashMode) -> bool {
    let fx = setup(workload_seed, n);
    let ctx = format!("setup seed {workload_seed}: GC crashed after {n} of {total} fs calls ({mode:?})");
    fx.fs.reset_ops_count();
    fx.fs.set_crash_after_ops(n);
    let result = fx.db.run_gc(0.0);
    let died = fx.fs.is_halted();
    if let Err(e) = &result {
        assert!(died, "{ctx}: run_gc failed without a fault: {e}");
    }
    // GC never changes what users see, crash or not.
    let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, mode, &ctx);
    assert_state(&db, &fx.model, &format!("{ctx}, after recovery"));
    // The resumed GC dies too, at a call picked from `n` (it may finish first).
    let m = StdRng::seed_from_u64(n).gen_range(0..total);
    let ctx = format!("{ctx}, resumed GC crashed after {m} calls");
    fx.fs.set_crash_after_ops(m);
    if let Err(e) = db.run_gc(0.0) {
        assert!(fx.fs.is_halted(), "{ctx}: resumed run_gc failed without a fault: {e}");
    }
    let db = crash_and_reopen(&fx.fs, &fx.options, db, mode, &ctx);
    verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &fx.model, &ctx);
    died
}

/// Dry run on the fixture of `workload_seed`: the number of mutating filesystem calls of a
/// complete `run_gc(0.0)`.
fn count_gc_calls(workload_seed: u64) -> u64 {
    let fx = setup(workload_seed, 0);
    fx.fs.reset_ops_count();
    let report = fx.db.run_gc(0.0).expect("dry-run GC");
    let total = fx.fs.ops_count();
    assert!(report.files_collected >= 1, "seed {workload_seed}: the dry run must collect a file: {report:?}");
    assert!(total > 10, "seed {workload_seed}: suspiciously few filesystem calls in GC: {total} ({report:?})");
    assert_state(&fx.db, &fx.model, &format!("seed {workload_seed}: dry run"));
    eprintln!("setup seed {workload_seed}: GC makes {total} fs calls ({report:?})");
    total
}

#[test]
fn crash_at_every_fs_call_of_gc_loses_nothing_and_resurrects_nothing() {
    let iters = common::env_u64("WISCKEY_CRASH_ITERS", 150).max(1);
    // Several setups (different hot keys and deletes), every crash point of each (up to
    // ITERS per crash mode), every crash mode.
    let (mut runs, mut died) = (0u64, 0u64);
    for workload_seed in 0..iters.div_ceil(50) {
        let total = count_gc_calls(workload_seed);
        let stride = total.div_ceil(iters).max(1);
        for n in (0..total).step_by(stride as usize) {
            for mode in MODES {
                runs += 1;
                died += u64::from(crash_gc_after(workload_seed, n, total, mode));
            }
        }
    }
    eprintln!("GC crash enumeration: {runs} crashed runs, {died} died inside run_gc");
    assert_eq!(died, runs, "every crash point must land inside GC (is GC's I/O deterministic?)");
}

/// What the writer of a race managed: the model of its acknowledged writes, and the write
/// that failed when the process died (it may or may not have reached the disk).
struct Acked {
    model: Model,
    in_doubt: Option<(Vec<u8>, Option<Vec<u8>>)>,
    writes: u64,
}

/// Synced overwrites and deletes of the fixture's keys until one fails or `ops` are done.
fn racing_writer(db: &Db, fs: &FaultFs, mut model: Model, rng: &mut StdRng, ops: u64) -> Acked {
    let sync = WriteOptions::synced();
    for version in 1000..1000 + ops {
        let k = key(rng.gen_range(0..KEYS));
        let v = (!rng.gen_bool(0.3)).then(|| random_value(rng, &k, version));
        let r = match &v {
            Some(v) => db.put_opt(&sync, &k, v),
            None => db.delete_opt(&sync, &k),
        };
        if let Err(e) = r {
            assert!(fs.is_halted(), "write {version} failed without a fault: {e}");
            return Acked { model, in_doubt: Some((k, v)), writes: version - 1000 };
        }
        match v {
            Some(v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
    Acked { model, in_doubt: None, writes: ops }
}

/// `run_gc(0.0)` over and over until `stop` (or the process dies); when nothing is left to
/// collect, a flush moves the log head so the values just written become collectable.
/// Returns the passes that collected something.
fn gc_until(db: &Db, fs: &FaultFs, stop: &AtomicBool) -> u64 {
    let mut passes = 0;
    while !stop.load(Ordering::Acquire) {
        let r = db.run_gc(0.0).and_then(|r| match r.files_collected {
            0 => {
                std::thread::sleep(Duration::from_millis(1));
                db.flush()
            }
            _ => {
                passes += 1;
                Ok(())
            }
        });
        if let Err(e) = r {
            assert!(fs.is_halted(), "racing GC or flush failed without a fault: {e}");
            break;
        }
    }
    passes
}

/// Run writer and GC side by side (with the crash countdown, if any, already armed).
fn race(fx: &Fixture, seed: u64, ops: u64) -> (Acked, u64) {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let gc = s.spawn(|| {
            start.wait();
            gc_until(&fx.db, &fx.fs, &stop)
        });
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED);
        start.wait();
        let acked = racing_writer(&fx.db, &fx.fs, fx.model.clone(), &mut rng, ops);
        stop.store(true, Ordering::Release);
        (acked, gc.join().expect("GC thread panicked"))
    })
}

/// The recovered state must be the acknowledged model, or that plus the one write in doubt.
fn resolve_in_doubt(db: &Db, acked: &Acked, ctx: &str) -> Model {
    let Some((k, v)) = &acked.in_doubt else {
        return acked.model.clone();
    };
    let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {} failed: {e}", show(k)));
    let mut with = acked.model.clone();
    match v {
        Some(v) => with.insert(k.clone(), v.clone()),
        None => with.remove(k),
    };
    if got.as_deref() == with.get(k).map(Vec::as_slice) {
        with
    } else {
        acked.model.clone()
    }
}

const RACE_OPS: u64 = 1500;

#[test]
fn gc_racing_overwrites_and_deletes_crashed_at_random_calls_keeps_synced_writes() {
    // Dry run: how many mutating calls an uncrashed race makes, to aim the crash points.
    let fx = setup(1, 0);
    fx.fs.reset_ops_count();
    let (acked, passes) = race(&fx, 1, RACE_OPS);
    let total = fx.fs.ops_count();
    assert_eq!(acked.writes, RACE_OPS, "the dry run must complete");
    assert_state(&fx.db, &acked.model, "race dry run");
    drop(fx);

    let iters = (common::env_u64("WISCKEY_CRASH_ITERS", 150) / 2).max(1);
    let (mut died, mut gc_passes, mut in_doubt) = (0u64, 0u64, 0u64);
    for seed in 0..iters {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(0..total);
        let mode = MODES[seed as usize % MODES.len()];
        let ctx = format!("race seed {seed}: crash after {n} of ~{total} fs calls ({mode:?})");
        let fx = setup(seed, seed);
        fx.fs.reset_ops_count();
        fx.fs.set_crash_after_ops(n);
        let (acked, passes) = race(&fx, seed, RACE_OPS);
        died += u64::from(fx.fs.is_halted());
        gc_passes += passes;
        let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, mode, &ctx);
        let model = resolve_in_doubt(&db, &acked, &ctx);
        in_doubt += u64::from(acked.in_doubt.is_some() && model != acked.model);
        verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &model, &ctx);
    }
    eprintln!(
        "GC race: dry run {total} fs calls, {passes} GC passes; {iters} crashed races, {died} died mid-race, \
         {gc_passes} GC passes completed, {in_doubt} in-doubt writes survived"
    );
    assert!(died * 2 >= iters, "most races must be cut by the crash: {died} of {iters}");
}

/// A single I/O error (not a crash) at one of GC's calls: GC may fail, but the database
/// keeps serving the model, GC works again after `resume`, and a crash loses nothing.
fn gc_with_one_fault(rule: FaultRule) {
    let ctx = format!("one fault {rule:?}");
    let fx = setup(0, 3);
    fx.fs.inject(rule.clone());
    let first = fx.db.run_gc(0.0);
    fx.fs.clear_faults();
    assert_state(&fx.db, &fx.model, &format!("{ctx}: after GC returned {first:?}"));
    let _ = fx.db.resume();
    let again = fx.db.run_gc(0.0);
    if first.is_err() || again.is_err() {
        // A failed manifest or log write may leave the database read-only until reopen.
        assert_state(&fx.db, &fx.model, &format!("{ctx}: after second GC returned {again:?}"));
    }
    let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, CrashMode::DropUnsynced, &ctx);
    verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &fx.model, &ctx);
}

#[test]
fn single_io_error_at_each_kind_of_gc_call_keeps_every_value() {
    let rules = [
        FaultRule::once(FaultOp::Read, FaultKind::Io).on_path(".vlog").after(3),
        FaultRule::once(FaultOp::Append, FaultKind::Io).on_path(".vlog"),
        FaultRule::once(FaultOp::Sync, FaultKind::Io).on_path(".vlog"),
        FaultRule::once(FaultOp::Append, FaultKind::Io).on_path("MANIFEST"),
        FaultRule::once(FaultOp::Sync, FaultKind::Io).on_path("MANIFEST").after(1),
        FaultRule::once(FaultOp::PunchHole, FaultKind::Io),
        FaultRule::once(FaultOp::Remove, FaultKind::Io).on_path(".vlog"),
        FaultRule::once(FaultOp::Create, FaultKind::NoSpace),
    ];
    for rule in rules {
        gc_with_one_fault(rule);
    }
}

/// Lines a user write and GC up exactly: holds one thread's next sync of a log or cold value
/// file (GC's: after it judged a chunk's values live and copied them, before it submits the
/// pointer puts), or the next hole punch.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
    /// Bytes of value files whose page-cache copy was dropped (`Advice::DontNeed`).
    dropped: AtomicU64,
    /// Value files say the page cache holds all of them (`uncached_ranges`); otherwise they
    /// cannot tell.
    all_cached: AtomicBool,
}

#[derive(Default)]
struct GateState {
    /// The thread whose next vLog sync waits for `release`.
    hold: Option<ThreadId>,
    holding: bool,
    released: bool,
    /// The next hole punch waits for `release`.
    hold_punch: bool,
}

impl Gate {
    fn hold_next_sync_of_this_thread(&self) {
        self.state.lock().expect("gate").hold = Some(std::thread::current().id());
    }

    fn at_vlog_sync(&self) {
        let mut s = self.state.lock().expect("gate");
        if s.hold != Some(std::thread::current().id()) {
            return;
        }
        s.hold = None;
        s.holding = true;
        self.cv.notify_all();
        while !s.released {
            s = self.cv.wait(s).expect("gate");
        }
    }

    fn at_punch(&self) {
        let mut s = self.state.lock().expect("gate");
        if !s.hold_punch {
            return;
        }
        s.hold_punch = false;
        s.holding = true;
        self.cv.notify_all();
        while !s.released {
            s = self.cv.wait(s).expect("gate");
        }
    }

    /// Wait (at most 10 s) until `cond` holds.
    fn wait_for(&self, what: &str, cond: impl Fn(&GateState) -> bool) {
        let s = self.state.lock().expect("gate");
        let (_s, timeout) = self.cv.wait_timeout_while(s, Duration::from_secs(10), |s| !cond(s)).expect("gate");
        assert!(!timeout.timed_out(), "timed out waiting until {what}");
    }

    fn release(&self) {
        self.state.lock().expect("gate").released = true;
        self.cv.notify_all();
    }
}

/// `FaultFs` with a `Gate` on vLog syncs and vLog opens.
struct GateFs {
    inner: FaultFs,
    gate: Arc<Gate>,
}

fn is_vlog(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "vlog")
}

/// A log file or a cold value file (GC's output).
fn is_value_file(path: &Path) -> bool {
    is_vlog(path) || path.extension().is_some_and(|e| e == "cold")
}

struct GateWritable {
    inner: Box<dyn WritableFile>,
    gate: Option<Arc<Gate>>,
}

impl WritableFile for GateWritable {
    fn append(&mut self, data: &[u8]) -> wisckey::Result<()> {
        self.inner.append(data)
    }
    fn sync_data(&mut self) -> wisckey::Result<()> {
        if let Some(g) = &self.gate {
            g.at_vlog_sync();
        }
        self.inner.sync_data()
    }
    fn sync(&mut self) -> wisckey::Result<()> {
        if let Some(g) = &self.gate {
            g.at_vlog_sync();
        }
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn truncate(&mut self, len: u64) -> wisckey::Result<()> {
        self.inner.truncate(len)
    }
}

/// A value file read through `GateFs`: counts the bytes advised `DontNeed`.
struct AdvisedRead {
    inner: Arc<dyn RandomAccessFile>,
    gate: Arc<Gate>,
}

impl RandomAccessFile for AdvisedRead {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> wisckey::Result<usize> {
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> wisckey::Result<u64> {
        self.inner.len()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn advise(&self, offset: u64, len: u64, advice: wisckey::fs::Advice) -> wisckey::Result<()> {
        if advice == wisckey::fs::Advice::DontNeed {
            self.gate.dropped.fetch_add(len, Ordering::Relaxed);
        }
        self.inner.advise(offset, len, advice)
    }
    fn uncached_ranges(&self, _offset: u64, _len: u64) -> Option<Vec<std::ops::Range<u64>>> {
        self.gate.all_cached.load(Ordering::Relaxed).then(Vec::new)
    }
}

impl GateFs {
    fn gated(&self, path: &Path, f: Box<dyn WritableFile>) -> Box<dyn WritableFile> {
        Box::new(GateWritable { inner: f, gate: is_value_file(path).then(|| self.gate.clone()) })
    }
}

impl Vfs for GateFs {
    fn create(&self, path: &Path) -> wisckey::Result<Box<dyn WritableFile>> {
        Ok(self.gated(path, self.inner.create(path)?))
    }
    fn open_append(&self, path: &Path) -> wisckey::Result<Box<dyn WritableFile>> {
        Ok(self.gated(path, self.inner.open_append(path)?))
    }
    fn open_read(&self, path: &Path) -> wisckey::Result<Arc<dyn RandomAccessFile>> {
        let file = self.inner.open_read(path)?;
        Ok(if is_value_file(path) { Arc::new(AdvisedRead { inner: file, gate: self.gate.clone() }) } else { file })
    }
    fn rename(&self, from: &Path, to: &Path) -> wisckey::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> wisckey::Result<()> {
        self.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> wisckey::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> wisckey::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> wisckey::Result<()> {
        self.inner.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> wisckey::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.inner.is_dir(path)
    }
    fn file_size(&self, path: &Path) -> wisckey::Result<u64> {
        self.inner.file_size(path)
    }
    fn disk_usage(&self, path: &Path) -> wisckey::Result<u64> {
        self.inner.disk_usage(path)
    }
    fn lock(&self, path: &Path) -> wisckey::Result<Box<dyn wisckey::fs::FileLock>> {
        self.inner.lock(path)
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> wisckey::Result<bool> {
        self.gate.at_punch();
        self.inner.punch_hole(path, offset, len)
    }
}

/// One try of the inversion scenario: GC judges the values of its first chunk live and is
/// held at the sync of their new copies (before it submits the pointer puts); a synced user
/// batch then overwrites or deletes every key; GC goes on, and its pointer puts must lose.
/// Returns the bytes GC submitted for re-put (more than 0: it judged values live before the
/// batch, so the scenario happened). `patience`: how long the batch may take; if GC's first
/// held sync was instead the log sync (nothing live in its first chunk), the batch waits for
/// the log and the scenario did not happen.
fn user_batch_lands_while_gc_holds_its_copies(patience: Duration) -> u64 {
    let fs = FaultFs::in_memory(9);
    let gate = Arc::new(Gate::default());
    let fx = setup_on(fs.clone(), Arc::new(GateFs { inner: fs, gate: gate.clone() }), 0);
    // One synced batch changing every key: half deleted, half overwritten.
    let (mut batch, mut model) = (WriteBatch::new(), fx.model.clone());
    for i in 0..KEYS {
        let k = key(i);
        if i % 2 == 0 {
            batch.delete(&k);
            model.remove(&k);
        } else {
            let v = make_value(&k, 5000 + i, 200);
            batch.put(&k, &v);
            model.insert(k, v);
        }
    }
    let report = std::thread::scope(|s| {
        let gc = s.spawn(|| {
            gate.hold_next_sync_of_this_thread();
            fx.db.run_gc(0.01)
        });
        gate.wait_for("GC's first sync", |s| s.holding);
        let user = s.spawn(|| fx.db.write(&WriteOptions::synced(), &batch));
        let start = std::time::Instant::now();
        while !user.is_finished() && start.elapsed() < patience {
            std::thread::sleep(Duration::from_millis(1));
        }
        gate.release();
        user.join().expect("user thread").expect("user batch");
        gc.join().expect("GC thread").expect("GC")
    });
    let ctx = format!("user batch landed while GC held the copies it judged live ({report:?})");
    // A stale copy re-put after the batch would be the newest version of its key.
    assert_state(&fx.db, &model, &ctx);
    let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, CrashMode::DropUnsynced, &ctx);
    verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &model, &ctx);
    report.bytes_rewritten
}

#[test]
fn gc_copy_judged_live_before_a_user_overwrite_or_delete_loses_to_it() {
    // Badger's "GC version inversion": GC finds values live, a user batch overwrites or
    // deletes them all before GC's re-put is led; the re-put must be dropped. The timing
    // only decides whether the scenario happens (the batch lands while GC is held), never
    // the verdict; retry with more patience on a slow machine.
    for ms in [200, 1000, 5000] {
        let judged_live = user_batch_lands_while_gc_holds_its_copies(Duration::from_millis(ms));
        if judged_live > 0 {
            eprintln!("GC submitted {judged_live} bytes judged live before the user batch ({ms} ms patience)");
            return;
        }
    }
    panic!("GC never judged a value live before the user batch landed: the scenario did not happen");
}

/// Regression (found by this campaign, fixed in src/db/gc.rs): a file whose collection ended
/// while an older reader existed used to wait in the in-memory `gc_pending` list while the
/// manifest still listed it; after a restart GC picked it again from offset 0, read the
/// chunks it had punched, and failed with `Corruption` forever. Now a collected file leaves
/// the manifest at once and `gc_pending` only protects it from the sweep.
#[test]
fn gc_after_restart_rereads_chunks_it_punched_in_a_file_left_pending_for_a_snapshot() {
    let fs = FaultFs::in_memory(11);
    let gate = Arc::new(Gate::default());
    let fx = setup_on(fs.clone(), Arc::new(GateFs { inner: fs, gate: gate.clone() }), 0);
    gate.state.lock().expect("gate").hold_punch = true;
    let (snapshot, report) = std::thread::scope(|s| {
        let gc = s.spawn(|| fx.db.run_gc(0.0));
        gate.wait_for("GC punches its first chunk", |s| s.holding);
        // A reader arrives mid-file: GC may no longer free what it re-puts from here on,
        // so the file ends up waiting for the reader (in memory only) instead of deleted.
        let snap = fx.db.snapshot();
        // A write after it: the rest of the file is freed only once the snapshot is gone.
        fx.db.put_opt(&WriteOptions::synced(), b"after-snapshot", b"1").expect("put");
        gate.release();
        (snap, gc.join().expect("GC thread").expect("GC"))
    });
    let mut model = fx.model.clone();
    model.insert(b"after-snapshot".to_vec(), b"1".to_vec());
    let ctx = format!("GC with a snapshot taken after its first punch ({report:?})");
    assert_state(&fx.db, &model, &ctx);
    drop(snapshot);
    fx.db.close().expect("close");
    let db = Db::open(DB, fx.options.clone()).expect("reopen");
    assert_state(&db, &model, &format!("{ctx}, reopened"));
    for attempt in 0..2 {
        let again = db.run_gc(0.0);
        assert!(again.is_ok(), "{ctx}: GC #{attempt} after a clean restart failed: {again:?}");
    }
    assert_state(&db, &model, &format!("{ctx}, GC after reopen"));
}

/// Regression (found by tests/crash.rs seed 97 in CI, fixed in src/db/gc.rs): GC judged
/// values dead because an *unsynced* overwrite shadowed them, freed their file, and a crash
/// then lost the overwrite (allowed: it was never synced) — leaving the older, durable
/// pointers naming a deleted file. GC now makes the log durable before it frees anything,
/// so after the crash the database holds either every overwrite or none.
#[test]
fn gc_freeing_values_shadowed_by_unsynced_overwrites_survives_a_crash() {
    for mode in [CrashMode::DropUnsynced, CrashMode::TearUnsynced] {
        let fx = setup(3, 5);
        let mut batch = WriteBatch::new();
        let mut overwritten = fx.model.clone();
        for (i, k) in fx.model.keys().enumerate() {
            let v = make_value(k, 10_000 + i as u64, 200);
            batch.put(k, &v);
            overwritten.insert(k.clone(), v);
        }
        fx.db.write(&WriteOptions::default(), &batch).expect("unsynced overwrite");
        let report = fx.db.run_gc(0.0).expect("GC");
        assert!(report.files_collected > 0, "GC must collect the shadowed files: {report:?}");
        let ctx = format!("{mode:?} crash after GC freed values shadowed by an unsynced batch ({report:?})");
        let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, mode, &ctx);
        let state: Model = db
            .scan(&ReadOptions::default())
            .and_then(common::owned_map)
            .unwrap_or_else(|e| panic!("{ctx}: scan after recovery failed: {e}"));
        assert!(state == fx.model || state == overwritten, "{ctx}: recovered neither all nor none of the batch");
        db.close().expect("close");
    }
}

/// Regression: GC moves a chunk's live values in pieces of up to 4 MiB, and a piece that finds
/// the cold file full starts a new one. The full file was dropped without `fdatasync` while
/// it still held the previous piece, whose pointers were then logged: a power loss after the
/// log was synced lost those values (synced writes). Here a half-dead log file's survivors
/// start a cold file, a wholly live one's first piece fills it and its second piece starts
/// the next, then the machine loses power.
#[test]
fn a_cold_file_filled_mid_relocation_is_synced_before_pointers_into_it_are_logged() {
    const VALUE: usize = 4000;
    let fs = FaultFs::in_memory(11);
    let options = Options::default()
        .vfs(Arc::new(fs.clone()))
        .min_separated_value_bytes(64)
        .log_file_bytes(5 << 20)
        .write_buffer_bytes(64 << 20)
        .gc_interval_ms(0)
        .gc_chunk_bytes(16 << 20)
        .gc_pause_ms(0);
    let per_file = (5 << 20) / VALUE as u64;
    let db = Db::open(DB, options.clone()).expect("open");
    let mut model = Model::new();
    let k = |i: u64| format!("big{i:06}").into_bytes();
    let mut put = |db: &Db, i: u64, version: u64| {
        let v = make_value(&k(i), version, VALUE);
        db.put(k(i), &v).expect("put");
        model.insert(k(i), v);
    };
    // Log file 1: keys of which half are overwritten below; log file 2: keys that stay.
    for i in 0..2 * per_file {
        put(&db, i, 0);
    }
    // Flushed apart, so compaction meets both versions and counts the garbage.
    db.flush().expect("flush");
    for i in (0..per_file).step_by(2) {
        put(&db, i, 1);
    }
    db.put_opt(&WriteOptions::synced(), b"marker", b"synced").expect("synced put");
    model.insert(b"marker".to_vec(), b"synced".to_vec());
    db.flush().expect("flush");
    db.compact_range(None, None).expect("compaction: discard statistics");
    assert!(db.stats().vlog_garbage_bytes > 0, "the half-dead log file must be known as such");
    let report = db.run_gc(0.0).expect("GC");
    assert!(report.files_collected >= 2 && report.bytes_rewritten > 5 << 20, "{report:?}");
    let ctx = format!("power loss after GC filled a cold file mid-relocation ({report:?})");
    let db = crash_and_reopen(&fs, &options, db, CrashMode::DropUnsynced, &ctx);
    for (key, want) in &model {
        let got = db.get(key).unwrap_or_else(|e| panic!("{ctx}: get {} failed: {e}", show(key)));
        assert!(got.as_deref() == Some(&want[..]), "{ctx}: {} LOST or wrong after the crash", show(key));
    }
    db.close().expect("close");
}

/// Background GC instead of `run_gc` calls: a collected file's last chunks are freed by the
/// freer thread while the collector reads the next file, so a crash can fall between the
/// next file's pointer writes and the manifest record of the file before it. Any garbage
/// past a space target of 1.01 is collected (no stall, no pacing).
fn background_options(vfs: Arc<dyn Vfs>) -> Options {
    gc_options(vfs).gc_interval_ms(1).gc_space_amp_target(1.01).gc_space_amp_stall(0.0).gc_garbage_ratio(0.05)
}

/// Flush every millisecond until `stop` and background GC has collected two files (or 20 s
/// went by: a loaded machine), so the log head moves and background GC finds files to
/// collect. Returns how many files background GC collected meanwhile.
fn flush_until(db: &Db, fs: &FaultFs, stop: &AtomicBool) -> u64 {
    let before = db.stats().gc_runs;
    let start = std::time::Instant::now();
    let done = || {
        stop.load(Ordering::Acquire) && (db.stats().gc_runs - before >= 2 || start.elapsed() > Duration::from_secs(20))
    };
    while !done() {
        std::thread::sleep(Duration::from_millis(1));
        if let Err(e) = db.flush() {
            assert!(fs.is_halted(), "racing flush failed without a fault: {e}");
            break;
        }
    }
    db.stats().gc_runs - before
}

/// The setup, reopened with background GC on.
fn background_setup(seed: u64) -> Fixture {
    let fx = setup(seed, seed);
    fx.db.close().expect("close the setup");
    let options = background_options(Arc::new(fx.fs.clone()));
    let db = Db::open(DB, options.clone()).expect("reopen with background GC");
    Fixture { fs: fx.fs, options, db, model: fx.model }
}

fn background_race(fx: &Fixture, seed: u64, ops: u64) -> (Acked, u64) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let flusher = s.spawn(|| flush_until(&fx.db, &fx.fs, &stop));
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED);
        let acked = racing_writer(&fx.db, &fx.fs, fx.model.clone(), &mut rng, ops);
        stop.store(true, Ordering::Release);
        (acked, flusher.join().expect("flush thread panicked"))
    })
}

#[test]
fn background_gc_freeing_beside_the_next_file_crashed_at_random_calls_keeps_synced_writes() {
    let fx = background_setup(0);
    fx.fs.reset_ops_count();
    let (acked, collected) = background_race(&fx, 0, RACE_OPS);
    let total = fx.fs.ops_count();
    assert_eq!(acked.writes, RACE_OPS, "the dry run must complete");
    assert!(collected >= 2, "background GC must collect several files in the dry run: {collected}");
    assert_state(&fx.db, &acked.model, "background race dry run");
    drop(fx);

    // Every seed's race is short: ITERS of them (a missing order between the freer's
    // manifest record and the next file's frees showed in 1 of ~100).
    let iters = common::env_u64("WISCKEY_CRASH_ITERS", 150).max(1);
    let (mut died, mut files) = (0u64, 0u64);
    for seed in 0..iters {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(0..total);
        let mode = MODES[seed as usize % MODES.len()];
        let ctx = format!("background race seed {seed}: crash after {n} of ~{total} fs calls ({mode:?})");
        let fx = background_setup(seed);
        fx.fs.reset_ops_count();
        fx.fs.set_crash_after_ops(n);
        let (acked, collected) = background_race(&fx, seed, RACE_OPS);
        died += u64::from(fx.fs.is_halted());
        files += collected;
        let db = crash_and_reopen(&fx.fs, &fx.options, fx.db, mode, &ctx);
        let model = resolve_in_doubt(&db, &acked, &ctx);
        verify_recovery_and_resumed_gc(&fx.fs, &fx.options, db, &model, &ctx);
    }
    eprintln!("background GC race: dry run {total} fs calls, {collected} files; {iters} crashed races, {died} died mid-race, {files} files collected before the crashes");
    assert!(died * 2 >= iters, "most races must be cut by the crash: {died} of {iters}");
}

/// GC drops the page cache's copy of every chunk it has read and found uncached (its live
/// values move, the rest is dead): with data larger than memory those pages pushed out the
/// table blocks GC's own liveness lookups need. A file that cannot tell counts as uncached.
#[test]
fn gc_drops_the_page_cache_copy_of_every_chunk_it_reads() {
    let fs = FaultFs::in_memory(4);
    let gate = Arc::new(Gate::default());
    let fx = setup_on(fs.clone(), Arc::new(GateFs { inner: fs, gate: gate.clone() }), 0);
    let report = fx.db.run_gc(0.0).expect("GC");
    assert!(report.files_collected > 0 && report.bytes_read > 0, "{report:?}");
    assert_eq!(gate.dropped.load(Ordering::Relaxed), report.bytes_read, "every byte GC read, dropped once: {report:?}");
    assert_state(&fx.db, &fx.model, "after GC");
}

/// What was cached before GC read it stays cached: older readers may still read it there.
#[test]
fn gc_keeps_the_page_cache_copy_of_chunks_that_were_cached_before_it_read_them() {
    let fs = FaultFs::in_memory(4);
    let gate = Arc::new(Gate::default());
    gate.all_cached.store(true, Ordering::Relaxed);
    let fx = setup_on(fs.clone(), Arc::new(GateFs { inner: fs, gate: gate.clone() }), 0);
    let report = fx.db.run_gc(0.0).expect("GC");
    assert!(report.files_collected > 0 && report.bytes_read > 0, "{report:?}");
    assert_eq!(gate.dropped.load(Ordering::Relaxed), 0, "nothing GC read was dropped: {report:?}");
    assert_state(&fx.db, &fx.model, "after GC");
}
