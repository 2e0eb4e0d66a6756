//! `wisckey stress`: a db_stress-like crash-consistency checker. Threads run random synced
//! writes, batches, reads, scans and snapshot reads while background flush/compaction/GC run;
//! an "expected state" file records every acknowledged write so that, after a `kill -9`,
//! `--verify-only` can prove that no synced write was lost and no value is wrong.
//!
//! Expected file layout (little endian): a 32-byte header (magic, keys, threads, keyspaces), then one
//! region per thread (ops done, in-flight count, up to `MAX_BATCH` in-flight (key, version)
//! pairs), then one u32 slot per key holding its latest acknowledged version (0 = never
//! written; `DELETED` bit set = deleted). Each key is written only by its owner thread,
//! which records its pending write in its region before writing the DB and updates the key's
//! slot after the DB acknowledges: after a crash a key may only hold its slot's version or,
//! for the thread's last in-flight write, the in-flight version.
//!
//! Keys are owned in blocks of `BLOCK`: thread `t` owns the blocks `b` with `b % threads == t`,
//! so a range delete inside one block touches only its owner's keys. With `--keyspaces N` a
//! block lives in keyspace `(b / threads) % N` (0 is the default keyspace), so a thread's
//! batches span keyspaces. With `--checkpoints` a thread now and then checkpoints the database,
//! opens the copy, and checks that its own keys (which cannot change meanwhile) read exactly
//! as expected and that the copy verifies.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::{Db, Error, Keyspace, MergePolicy, Options, ReadOptions, WriteBatch, WriteOptions};

use crate::bench::CliResult;

const MAGIC: u64 = 0x5353_4552_5453_4b57; // "WKSTRESS"
const HEADER_BYTES: u64 = 32;
const MAX_BATCH: usize = 6;
const REGION_BYTES: u64 = 16 + 8 * MAX_BATCH as u64;
const DELETED: u32 = 0x8000_0000;
const SCAN_KEYS: u32 = 16;
/// Checkpoints made and checked by this process.
static CHECKPOINTS_CHECKED: AtomicU64 = AtomicU64::new(0);
/// Keys per ownership block (see the module comment).
const BLOCK: u32 = 64;

#[derive(Args)]
pub struct StressArgs {
    /// Database directory (created if missing).
    #[arg(long)]
    pub db: PathBuf,
    /// Worker threads (must stay the same for a given expected file).
    #[arg(long, default_value_t = 4)]
    pub threads: u32,
    /// Total operations over all threads.
    #[arg(long, default_value_t = 100_000)]
    pub ops: u64,
    /// Number of distinct keys (must stay the same for a given expected file).
    #[arg(long, default_value_t = 10_000)]
    pub keys: u32,
    /// Expected-state file (created if missing).
    #[arg(long)]
    pub expected: PathBuf,
    /// Only check the database against the expected state, then exit.
    #[arg(long)]
    pub verify_only: bool,
    /// Random seed (each thread derives its own).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Merge policy (`bench --merge_policy` names); a database may switch between runs.
    #[arg(long = "merge_policy", default_value = "leveling", value_parser = |s: &str| s.parse::<MergePolicy>())]
    pub merge_policy: MergePolicy,
    /// Compaction threads (the engine's default).
    #[arg(long = "compaction_threads", default_value_t = 2)]
    pub compaction_threads: usize,
    /// Light-weight compaction (`bench --lwc`); a database may switch between runs.
    #[arg(long = "lwc", default_value = "false", num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = crate::bench::flags::parse_bool)]
    pub lwc: bool,
    /// Keyspaces the keys are spread over (must stay the same for a given expected file).
    #[arg(long, default_value_t = 1)]
    pub keyspaces: u32,
    /// Also delete ranges of keys (range tombstones, within one ownership block).
    #[arg(long = "range_deletes", default_value = "false", num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = crate::bench::flags::parse_bool)]
    pub range_deletes: bool,
    /// Now and then checkpoint the database, open the copy and check it.
    #[arg(long = "checkpoints", default_value = "false", num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = crate::bench::flags::parse_bool)]
    pub checkpoints: bool,
    /// Let the engine move each keyspace's merge policy by itself (`Options::auto_tune`), with
    /// a short tuner interval and window so moves happen within a run; every move the run sees
    /// is printed (`auto_tune: moved from ...`), and `--verify-only` prints the policies.
    #[arg(long = "auto_tune", default_value = "false", num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = crate::bench::flags::parse_bool)]
    pub auto_tune: bool,
    /// Shift the workers' mix every this many milliseconds of wall-clock time (0: the fixed
    /// mix): writes, then lookups mostly of absent keys, then short scans, in turn.
    /// Wall-clock phases keep shifting across the runs of a crash campaign.
    #[arg(long = "shift_every_ms", default_value_t = 0)]
    pub shift_every_ms: u64,
}

/// The shape of the key space: who owns a key and which keyspace holds it.
#[derive(Clone, Copy)]
struct Layout {
    keys: u32,
    threads: u32,
    keyspaces: u32,
}

impl Layout {
    fn owner(&self, k: u32) -> u32 {
        (k / BLOCK) % self.threads
    }

    fn keyspace_of(&self, k: u32) -> usize {
        ((k / BLOCK / self.threads) % self.keyspaces) as usize
    }
}

/// A database's keyspaces by index and the layout that places keys in them.
struct Stores {
    ks: Vec<Keyspace>,
    layout: Layout,
}

impl Stores {
    /// The keyspace holding key `k`.
    fn home(&self, k: u32) -> &Keyspace {
        &self.ks[self.layout.keyspace_of(k)]
    }
}

/// The database's keyspaces by index (0: the default one), created if missing: keyspaces are
/// created before any write, so one a crash left uncreated holds nothing expected.
fn open_keyspaces(db: &Db, layout: Layout, auto_tune: bool) -> CliResult<Stores> {
    let mut out = vec![db.default_keyspace().clone()];
    for i in 1..layout.keyspaces {
        let name = keyspace_name(i);
        out.push(match db.keyspace(&name) {
            Ok(ks) => ks,
            Err(Error::UnknownKeyspace { .. }) => db.create_keyspace(&name, keyspace_options(i, auto_tune))?,
            Err(e) => return Err(e.into()),
        });
    }
    Ok(Stores { ks: out, layout })
}

/// Keyspace `i`'s name (0, the default keyspace, has its own).
fn keyspace_name(i: u32) -> String {
    format!("ks{i}")
}

/// Keyspaces shaped differently, so flushes and compactions of several shapes interleave.
fn keyspace_options(i: u32, auto_tune: bool) -> Options {
    let o = with_auto_tune(stress_options(), auto_tune);
    match i % 3 {
        1 => o.merge_policy(MergePolicy::tiering(4)),
        2 => o.min_separated_value_bytes(64),
        _ => o,
    }
}

/// `o` with the tuner on, if asked: a tick every 100 ms over a window of 2000 operations, so
/// a run of a second (synced writes at a few thousand a second) gives it enough to judge, and
/// smaller memtables and levels so the tree has levels for the designs to differ in.
fn with_auto_tune(o: Options, auto_tune: bool) -> Options {
    if !auto_tune {
        return o;
    }
    o.auto_tune(true)
        .auto_tune_interval_ms(100)
        .auto_tune_window_ops(2000)
        .write_buffer_bytes(64 << 10)
        .target_file_size_bytes(64 << 10)
        .max_bytes_for_level_base(256 << 10)
}

pub fn run(a: StressArgs) -> CliResult {
    if a.threads == 0 || a.keys < a.threads * BLOCK || a.keys >= DELETED || a.keyspaces == 0 {
        return Err(format!("need 1 <= threads, threads * {BLOCK} <= keys < 2^31, 1 <= keyspaces").into());
    }
    let layout = Layout { keys: a.keys, threads: a.threads, keyspaces: a.keyspaces };
    let exp = Expected::open(&a.expected, layout)?;
    let mut options = with_auto_tune(stress_options(), a.auto_tune)
        .merge_policy(a.merge_policy)
        .compaction_threads(a.compaction_threads)
        .light_weight_compaction(a.lwc);
    if a.lwc {
        // Small tables and levels: a short run builds a tree deep and wide enough that
        // compactions append to tables and split them while the process is killed.
        options = options.target_file_size_bytes(32 << 10).max_bytes_for_level_base(128 << 10);
    }
    let db = Db::open(&a.db, options)?;
    let st = open_keyspaces(&db, layout, a.auto_tune)?;
    let summary = verify(&st, &exp)?;
    println!("{summary}");
    if a.auto_tune {
        let policies: Vec<String> = st.ks.iter().map(|k| format!("{}={}", k.name(), k.stats().merge_policy)).collect();
        println!("policies: {}", policies.join(" "));
    }
    if a.verify_only {
        return Ok(());
    }
    exp.resolve_in_flight(&st)?;
    // A run killed while it checked a checkpoint leaves the copy behind.
    let _ = std::fs::remove_dir_all(checkpoint_root(&a.db));
    stress(&db, &st, &exp, &a)?;
    let checked = CHECKPOINTS_CHECKED.load(Ordering::Relaxed);
    println!("stress done: {} ops, seed {}, {checked} checkpoints checked", a.ops, a.seed);
    Ok(())
}

/// Small buffers and files so flushes, compactions, log rolls and GC all happen often.
fn stress_options() -> Options {
    Options::default()
        .write_buffer_bytes(256 << 10)
        .memtable_log_bytes(1 << 20)
        .log_file_bytes(1 << 20)
        .target_file_size_bytes(256 << 10)
        .max_bytes_for_level_base(1 << 20)
        .min_separated_value_bytes(512)
        .gc_interval_ms(50)
        .gc_garbage_ratio(0.2)
        .gc_chunk_bytes(256 << 10)
        .gc_pause_ms(1)
}

/// Where checkpoints are made: beside the database.
fn checkpoint_root(db: &Path) -> PathBuf {
    let mut name = db.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".checkpoints");
    db.with_file_name(name)
}

// ---------------------------------------------------------------- keys and values

fn key_bytes(k: u32) -> Vec<u8> {
    format!("key{k:08}").into_bytes()
}

fn parse_key(b: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(b.strip_prefix(b"key")?).ok()?;
    (s.len() == 8).then(|| s.parse().ok()).flatten()
}

fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The value of `key` at `version`: half are 20 bytes (inline), half about 2 KB (separated).
fn value_for(key: u32, version: u32) -> Vec<u8> {
    let h = mix64(((key as u64) << 32) | version as u64);
    let len = if h & 1 == 0 { 20 } else { 2000 + (h >> 8) as usize % 97 };
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    let mut s = h;
    while v.len() < len {
        s = mix64(s);
        let take = (len - v.len()).min(8);
        v.extend_from_slice(&s.to_le_bytes()[..take]);
    }
    v
}

/// The version a value encodes, if it is exactly `value_for(key, version)` for `key`.
fn decode_value(key: u32, v: &[u8]) -> Option<u32> {
    let k = u32::from_le_bytes(v.get(0..4)?.try_into().ok()?);
    let ver = u32::from_le_bytes(v.get(4..8)?.try_into().ok()?);
    (k == key && ver != 0 && ver < DELETED && value_for(key, ver) == v).then_some(ver)
}

/// What a DB read of `key` should return given an expected slot value.
fn matches(slot: u32, found: Option<u32>) -> bool {
    match found {
        None => slot == 0 || slot & DELETED != 0,
        Some(v) => slot & DELETED == 0 && slot == v,
    }
}

/// Reads the DB value of `key` from its keyspace: Ok(None) absent, Ok(Some(ver)),
/// Err(description) if garbled.
fn read_version(st: &Stores, ro: &ReadOptions, key: u32) -> CliResult<Result<Option<u32>, String>> {
    Ok(match st.home(key).get_opt(ro, key_bytes(key))? {
        None => Ok(None),
        Some(v) => match decode_value(key, &v) {
            Some(ver) => Ok(Some(ver)),
            None => {
                Err(format!("key {key}: garbled value of {} bytes (header {:02x?})", v.len(), &v[..v.len().min(8)]))
            }
        },
    })
}

// ---------------------------------------------------------------- expected state file

struct Expected {
    file: File,
    keys: u32,
    threads: u32,
    slots: Vec<AtomicU32>,
}

impl Expected {
    fn open(path: &Path, layout: Layout) -> CliResult<Expected> {
        let Layout { keys, threads, keyspaces } = layout;
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let size = HEADER_BYTES + REGION_BYTES * threads as u64 + 4 * keys as u64;
        if file.metadata()?.len() == 0 {
            file.set_len(size)?;
            let mut h = [0u8; HEADER_BYTES as usize];
            h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
            h[8..12].copy_from_slice(&keys.to_le_bytes());
            h[12..16].copy_from_slice(&threads.to_le_bytes());
            h[16..20].copy_from_slice(&keyspaces.to_le_bytes());
            file.write_all_at(&h, 0)?;
        }
        let mut h = [0u8; 20];
        file.read_exact_at(&mut h, 0)?;
        let shape = (u64::from_le_bytes(h[0..8].try_into()?), u32::from_le_bytes(h[8..12].try_into()?));
        let t = u32::from_le_bytes(h[12..16].try_into()?);
        let n = u32::from_le_bytes(h[16..20].try_into()?);
        if shape != (MAGIC, keys) || t != threads || n != keyspaces || file.metadata()?.len() != size {
            return Err(format!(
                "{}: not an expected file for {keys} keys / {threads} threads / {keyspaces} keyspaces",
                path.display()
            )
            .into());
        }
        let mut raw = vec![0u8; 4 * keys as usize];
        file.read_exact_at(&mut raw, Self::slot_offset(threads, 0))?;
        let slots = raw.chunks_exact(4).map(|c| AtomicU32::new(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect();
        Ok(Expected { file, keys, threads, slots })
    }

    fn slot_offset(threads: u32, key: u32) -> u64 {
        HEADER_BYTES + REGION_BYTES * threads as u64 + 4 * key as u64
    }

    fn slot(&self, key: u32) -> u32 {
        self.slots[key as usize].load(Ordering::Acquire)
    }

    fn set_slot(&self, key: u32, v: u32) -> CliResult {
        self.slots[key as usize].store(v, Ordering::Release);
        self.file.write_all_at(&v.to_le_bytes(), Self::slot_offset(self.threads, key))?;
        Ok(())
    }

    /// Record (before the DB write) the writes thread `t` is about to make, with its op count.
    fn set_in_flight(&self, t: u32, ops: u64, writes: &[(u32, u32)]) -> CliResult {
        let mut buf = Vec::with_capacity(REGION_BYTES as usize);
        buf.extend_from_slice(&ops.to_le_bytes());
        buf.extend_from_slice(&(writes.len() as u32).to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        for (k, v) in writes {
            buf.extend_from_slice(&k.to_le_bytes());
            buf.extend_from_slice(&v.to_le_bytes());
        }
        self.file.write_all_at(&buf, HEADER_BYTES + REGION_BYTES * t as u64)?;
        Ok(())
    }

    /// Thread `t`'s op count and last in-flight writes.
    fn in_flight(&self, t: u32) -> CliResult<(u64, Vec<(u32, u32)>)> {
        let mut b = [0u8; REGION_BYTES as usize];
        self.file.read_exact_at(&mut b, HEADER_BYTES + REGION_BYTES * t as u64)?;
        let ops = u64::from_le_bytes(b[0..8].try_into()?);
        let n = (u32::from_le_bytes(b[8..12].try_into()?) as usize).min(MAX_BATCH);
        let w = (0..n)
            .map(|i| {
                let o = 16 + 8 * i;
                (
                    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]),
                    u32::from_le_bytes([b[o + 4], b[o + 5], b[o + 6], b[o + 7]]),
                )
            })
            .filter(|(k, _)| *k < self.keys)
            .collect();
        Ok((ops, w))
    }

    /// After a crash: adopt in-flight writes the DB kept, so slots equal the DB again.
    fn resolve_in_flight(&self, st: &Stores) -> CliResult {
        for t in 0..self.threads {
            let (ops, writes) = self.in_flight(t)?;
            for (k, v) in writes {
                let found = read_version(st, &ReadOptions::default(), k)?.map_err(|e| e.to_string())?;
                if matches(v, found) && !matches(self.slot(k), found) {
                    self.set_slot(k, v)?;
                }
            }
            self.set_in_flight(t, ops, &[])?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- verification

/// Check every key (by get and by a full scan) against the expected state; Err on any mismatch.
fn verify(st: &Stores, exp: &Expected) -> CliResult<String> {
    let mut in_flight: HashMap<u32, u32> = HashMap::new();
    let mut total_ops = 0;
    for t in 0..exp.threads {
        let (ops, writes) = exp.in_flight(t)?;
        total_ops += ops;
        in_flight.extend(writes);
    }
    let scanned = scan_all(st)?;
    let mut errors = Vec::new();
    let (mut present, mut adopted) = (0u64, 0u64);
    for k in 0..exp.keys {
        let slot = exp.slot(k);
        let found = match read_version(st, &ReadOptions::default(), k)? {
            Ok(f) => f,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if scanned.get(&k).copied() != found {
            errors.push(format!("key {k}: get says {found:?} but scan says {:?}", scanned.get(&k)));
        }
        present += found.is_some() as u64;
        if matches(slot, found) {
            continue;
        }
        match in_flight.get(&k) {
            Some(&v) if matches(v, found) => adopted += 1,
            other => errors.push(format!(
                "key {k}: db has {found:?}, expected slot {} (in flight {:?}) — lost or wrong write",
                show(slot),
                other.map(|v| show(*v))
            )),
        }
    }
    check_batches_atomic(st, exp, &mut errors)?;
    for e in errors.iter().take(20) {
        eprintln!("MISMATCH {e}");
    }
    if !errors.is_empty() {
        return Err(format!("verification failed: {} mismatches", errors.len()).into());
    }
    Ok(format!(
        "verified {} keys OK ({present} present, {adopted} in-flight writes found applied), {total_ops} ops run so far",
        exp.keys
    ))
}

fn show(slot: u32) -> String {
    match slot {
        0 => "absent".into(),
        s if s & DELETED != 0 => format!("deleted@{}", s & !DELETED),
        s => format!("v{s}"),
    }
}

/// Every key in the database, by a full forward scan of each keyspace, checking order, value
/// encoding and that each key is in its own keyspace.
fn scan_all(st: &Stores) -> CliResult<HashMap<u32, u32>> {
    let mut out = HashMap::new();
    for (i, ks) in st.ks.iter().enumerate() {
        let mut last: Option<Vec<u8>> = None;
        for e in ks.scan(&ReadOptions::default())? {
            let (k, v) = e?;
            if last.as_ref().is_some_and(|l| *l >= k) {
                return Err(format!("scan out of order at {:?}", String::from_utf8_lossy(&k)).into());
            }
            let key = parse_key(&k)
                .filter(|&k| st.layout.keyspace_of(k) == i)
                .ok_or_else(|| format!("unknown key {:?} in keyspace {i}'s scan", String::from_utf8_lossy(&k)))?;
            let ver =
                decode_value(key, &v).ok_or_else(|| format!("key {key}: garbled value in scan ({} bytes)", v.len()))?;
            out.insert(key, ver);
            last = Some(k);
        }
    }
    Ok(out)
}

/// A thread's last in-flight batch must be in the DB entirely or not at all.
fn check_batches_atomic(st: &Stores, exp: &Expected, errors: &mut Vec<String>) -> CliResult {
    for t in 0..exp.threads {
        let (_, writes) = exp.in_flight(t)?;
        let (mut all_new, mut all_old) = (true, true);
        for &(k, v) in &writes {
            let found = read_version(st, &ReadOptions::default(), k)?.ok();
            let Some(found) = found else { continue };
            all_new &= matches(v, found);
            all_old &= matches(exp.slot(k), found) && exp.slot(k) != v;
        }
        if writes.len() > 1 && !all_new && !all_old {
            errors.push(format!("thread {t}: batch {writes:?} was applied partially"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- the stress workers

fn stress(db: &Db, st: &Stores, exp: &Expected, a: &StressArgs) -> CliResult {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let per_thread = a.ops / a.threads as u64;
    let results: Vec<CliResult> = std::thread::scope(|s| {
        if a.auto_tune {
            let stop = &stop;
            s.spawn(move || report_moves(st, stop));
        }
        let handles: Vec<_> = (0..a.threads)
            .map(|t| {
                let rng = StdRng::seed_from_u64(mix64(a.seed) ^ t as u64);
                let w = Worker { db, st, exp, args: a, t, rng, ops: 0 };
                let (stop, done) = (&stop, &done);
                s.spawn(move || w.run(per_thread, stop, done))
            })
            .collect();
        let results = handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into()))).collect();
        stop.store(true, Ordering::Relaxed);
        results
    });
    results.into_iter().collect()
}

/// The phases of a shifting workload (`--shift_every_ms`).
#[derive(Clone, Copy)]
enum Phase {
    /// 85 % writes, the rest lookups of present keys.
    Writes,
    /// 5 % writes, 90 % lookups, most of them (80 % of all ops) of absent keys: where the
    /// designs differ for reads (a lookup that finds its key costs about one read under any).
    Lookups,
    /// 10 % writes, 85 % short scans.
    Scans,
}

/// Print what the tuner does (its `stats` note, when it changes: each move, or why it does not
/// move) until `stop`: the crash campaign counts the moves, so a killed run's are counted too.
fn report_moves(st: &Stores, stop: &AtomicBool) {
    let mut last: Vec<String> = st.ks.iter().map(|k| k.stats().auto_tune).collect();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        for (i, ks) in st.ks.iter().enumerate() {
            let note = ks.stats().auto_tune;
            if note != last[i] {
                println!("auto_tune: {} {note}", ks.name());
                last[i] = note;
            }
        }
    }
}

struct Worker<'a> {
    db: &'a Db,
    st: &'a Stores,
    exp: &'a Expected,
    args: &'a StressArgs,
    t: u32,
    rng: StdRng,
    ops: u64,
}

impl Worker<'_> {
    fn run(mut self, n: u64, stop: &AtomicBool, done: &AtomicU64) -> CliResult {
        self.ops = self.exp.in_flight(self.t)?.0;
        for _ in 0..n {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Err(e) = self.one_op() {
                stop.store(true, Ordering::Relaxed);
                eprintln!("thread {}: {e}", self.t);
                return Err(e);
            }
            self.ops += 1;
            done.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn one_op(&mut self) -> CliResult {
        if let Some(phase) = self.phase() {
            return self.phase_op(phase);
        }
        self.mixed_op()
    }

    /// The phase of a shifting workload now (`--shift_every_ms`), by the wall clock.
    fn phase(&self) -> Option<Phase> {
        let every = self.args.shift_every_ms;
        if every == 0 {
            return None;
        }
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        Some(match (ms / every as u128) % 3 {
            0 => Phase::Writes,
            1 => Phase::Lookups,
            _ => Phase::Scans,
        })
    }

    /// One op of `phase`'s mix; a twentieth of the ops keep the fixed mix (batches, deletes,
    /// snapshot reads, compactions, GC), so every kind of op still meets every design.
    fn phase_op(&mut self, phase: Phase) -> CliResult {
        let r = self.rng.gen_range(0..100);
        if r < 5 {
            return self.mixed_op();
        }
        match (phase, r) {
            (Phase::Writes, 5..=89) | (Phase::Lookups, 5..=9) | (Phase::Scans, 5..=14) => self.write(1, false),
            (Phase::Lookups, 10..=89) => self.absent_get(),
            (Phase::Scans, _) => self.scan(),
            _ => self.get(),
        }
    }

    /// A lookup of a key no run ever writes (past the last one): must find nothing.
    fn absent_get(&mut self) -> CliResult {
        let k = self.exp.keys + self.rng.gen_range(0..self.exp.keys);
        let ks = &self.st.ks[self.rng.gen_range(0..self.st.ks.len())];
        match ks.get(key_bytes(k))? {
            None => Ok(()),
            Some(v) => Err(format!("get of never-written key {k}: found {} bytes", v.len()).into()),
        }
    }

    /// One op of the fixed mix.
    fn mixed_op(&mut self) -> CliResult {
        match self.rng.gen_range(0..1000) {
            0..=399 => self.write(1, false),
            400..=499 => self.write(1, true),
            500..=539 if self.args.range_deletes => self.delete_range(),
            500..=579 => {
                let n = self.rng.gen_range(2..=MAX_BATCH);
                let delete = self.rng.gen_bool(0.3);
                self.write(n, delete)
            }
            580..=849 => self.get(),
            850..=929 => self.scan(),
            930..=994 => self.snapshot_read(),
            995 => self.compact(),
            996 => self.db.run_gc(0.2).map(|_| ()).map_err(Into::into),
            997 if self.args.checkpoints => self.checkpoint(),
            _ => self.get(),
        }
    }

    /// A random key owned by this thread (one of its blocks, see `Layout`).
    fn own_key(&mut self) -> u32 {
        loop {
            let blocks = self.exp.keys.div_ceil(BLOCK);
            let per = (blocks - self.t).div_ceil(self.exp.threads);
            let block = self.t + self.rng.gen_range(0..per) * self.exp.threads;
            let k = block * BLOCK + self.rng.gen_range(0..BLOCK);
            if k < self.exp.keys {
                return k;
            }
        }
    }

    /// Write `n` distinct own keys (puts, or deletes if `delete`; some mixed), synced.
    fn write(&mut self, n: usize, delete: bool) -> CliResult {
        let mut writes: Vec<(u32, u32)> = Vec::with_capacity(n);
        while writes.len() < n {
            let k = self.own_key();
            if writes.iter().any(|(w, _)| *w == k) {
                continue;
            }
            let next = (self.exp.slot(k) & !DELETED) + 1;
            let del = if n > 1 { delete && self.rng.gen_bool(0.5) } else { delete };
            writes.push((k, if del { next | DELETED } else { next }));
        }
        self.exp.set_in_flight(self.t, self.ops, &writes)?;
        let mut b = WriteBatch::new();
        for &(k, v) in &writes {
            if v & DELETED != 0 {
                b.delete_in(self.st.home(k), key_bytes(k));
            } else {
                b.put_in(self.st.home(k), key_bytes(k), value_for(k, v));
            }
        }
        self.commit(&writes, &b)
    }

    /// Write `b` synced and record its `writes` as acknowledged.
    fn commit(&mut self, writes: &[(u32, u32)], b: &WriteBatch) -> CliResult {
        self.db.write(&WriteOptions::synced(), b)?;
        for &(k, v) in writes {
            self.exp.set_slot(k, v)?;
        }
        Ok(())
    }

    /// Delete up to `MAX_BATCH` consecutive own keys (inside one block) with one range
    /// tombstone, synced; every key in the range counts as deleted, present or not.
    fn delete_range(&mut self) -> CliResult {
        let k = self.own_key();
        let block_end = ((k / BLOCK + 1) * BLOCK).min(self.exp.keys);
        let width = self.rng.gen_range(1..=MAX_BATCH as u32).min(block_end - k);
        let writes: Vec<(u32, u32)> =
            (k..k + width).map(|k| (k, ((self.exp.slot(k) & !DELETED) + 1) | DELETED)).collect();
        self.exp.set_in_flight(self.t, self.ops, &writes)?;
        let mut b = WriteBatch::new();
        b.delete_range_in(self.st.home(k), key_bytes(k), key_bytes(k + width));
        self.commit(&writes, &b)
    }

    /// Checkpoint the database, open the copy, and check it: it verifies, every value decodes,
    /// and this thread's keys (which cannot change while it checkpoints) read exactly as
    /// expected.
    fn checkpoint(&mut self) -> CliResult {
        let dir = checkpoint_root(&self.args.db).join(format!("t{}-{}", self.t, self.ops));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        self.db.checkpoint(&dir)?;
        let copy = Db::open(&dir, stress_options().create_if_missing(false))?;
        let mut ks = vec![copy.default_keyspace().clone()];
        for i in 1..self.st.layout.keyspaces {
            ks.push(copy.keyspace(&keyspace_name(i))?);
        }
        let stores = Stores { ks, layout: self.st.layout };
        let scanned = scan_all(&stores).map_err(|e| format!("checkpoint {}: {e}", dir.display()))?;
        for k in (0..self.exp.keys).filter(|&k| self.st.layout.owner(k) == self.t) {
            let found = scanned.get(&k).copied();
            if !matches(self.exp.slot(k), found) {
                let want = show(self.exp.slot(k));
                return Err(format!("checkpoint {}: key {k} has {found:?}, expected {want}", dir.display()).into());
            }
        }
        let report = copy.verify()?;
        if !report.is_healthy() {
            return Err(format!("checkpoint {} does not verify: {report}", dir.display()).into());
        }
        drop((stores, copy));
        std::fs::remove_dir_all(&dir)?;
        CHECKPOINTS_CHECKED.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Own keys must read exactly as expected; other threads' keys must decode.
    fn get(&mut self) -> CliResult {
        let (own, k) =
            if self.rng.gen_bool(0.5) { (true, self.own_key()) } else { (false, self.rng.gen_range(0..self.exp.keys)) };
        let before = self.exp.slot(k);
        let found = read_version(self.st, &ReadOptions::default(), k)?.map_err(|e| e.to_string())?;
        if own && !matches(before, found) {
            return Err(format!("get key {k}: db has {found:?}, expected {}", show(before)).into());
        }
        Ok(())
    }

    /// A short bounded scan: ordered, in bounds, decodable, own keys exactly as expected.
    fn scan(&mut self) -> CliResult {
        let lo = self.rng.gen_range(0..self.exp.keys);
        let hi = (lo + SCAN_KEYS).min(self.exp.keys);
        let ro =
            ReadOptions { lower_bound: Some(key_bytes(lo)), upper_bound: Some(key_bytes(hi)), ..Default::default() };
        let mut seen = HashMap::new();
        for (i, ks) in self.st.ks.iter().enumerate() {
            let mut prev = None;
            for e in ks.scan(&ro)? {
                let (kb, v) = e?;
                let k = parse_key(&kb)
                    .filter(|&k| (lo..hi).contains(&k) && prev < Some(k) && self.st.layout.keyspace_of(k) == i);
                let k = k.ok_or_else(|| {
                    format!("scan [{lo},{hi}) of keyspace {i}: unexpected key {:?}", String::from_utf8_lossy(&kb))
                })?;
                let ver = decode_value(k, &v).ok_or_else(|| format!("scan: garbled value for key {k}"))?;
                seen.insert(k, ver);
                prev = Some(k);
            }
        }
        for k in (lo..hi).filter(|&k| self.st.layout.owner(k) == self.t) {
            let found = seen.get(&k).copied();
            if !matches(self.exp.slot(k), found) {
                return Err(format!("scan key {k}: db has {found:?}, expected {}", show(self.exp.slot(k))).into());
            }
        }
        Ok(())
    }

    /// Reads through a snapshot must not see a write made after it.
    fn snapshot_read(&mut self) -> CliResult {
        let ro = ReadOptions { snapshot: Some(self.db.snapshot()), ..Default::default() };
        let keys: Vec<u32> = (0..4).map(|_| self.own_key()).collect();
        let before: Vec<u32> = keys.iter().map(|&k| self.exp.slot(k)).collect();
        self.write(1, false)?;
        for (&k, &slot) in keys.iter().zip(&before) {
            let found = read_version(self.st, &ro, k)?.map_err(|e| e.to_string())?;
            if !matches(slot, found) {
                return Err(format!("snapshot read of key {k}: {found:?}, expected {}", show(slot)).into());
            }
        }
        Ok(())
    }

    fn compact(&mut self) -> CliResult {
        let lo = self.rng.gen_range(0..self.exp.keys);
        let hi = (lo + self.exp.keys / 8).min(self.exp.keys - 1);
        let ks = &self.st.ks[self.rng.gen_range(0..self.st.ks.len())];
        ks.compact_range(Some(&key_bytes(lo)), Some(&key_bytes(hi)))?;
        Ok(())
    }
}
