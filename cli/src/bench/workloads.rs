//! The benchmarks themselves, one function per db_bench method, each run by every thread.

use std::sync::atomic::{AtomicUsize, Ordering};

use wisckey::{Db, TransactionOptions, WriteBatch, WriteOptions};

use super::flags::BenchArgs;
use super::keys::{KeyFormat, Random};
use super::live::LiveKeys;
use super::report::Stats;
use super::values::ValueGenerator;
use super::CliResult;

/// What one benchmark's threads share.
pub struct Ctx<'a> {
    pub db: &'a Db,
    pub args: &'a BenchArgs,
    /// Ops per thread for writes and deletes (db_bench's `num_`).
    pub num: u64,
    /// Ops per thread for reads (db_bench's `reads_`).
    pub reads: u64,
    pub value_size: usize,
    pub entries_per_batch: u64,
    pub write_options: WriteOptions,
    pub live: &'a LiveKeys,
    /// `LiveKeys` class of `value_size`.
    pub value_class: u8,
    /// Threads whose method has returned (readwhilewriting's writer stops on it).
    pub threads_done: AtomicUsize,
    pub threads: usize,
}

/// One thread's generator and counters.
pub struct ThreadState {
    pub tid: usize,
    pub rand: Random,
    pub stats: Stats,
}

pub type Method = fn(&Ctx, &mut ThreadState) -> CliResult;

/// Which key a fill benchmark's i-th write goes to.
#[derive(Clone, Copy, PartialEq)]
enum KeyOrder {
    Seq,
    /// Uniform with repeats (db_bench's fillrandom).
    Random,
    /// Every key once, in a scattered order (data grows by every write).
    Shuffled,
}

pub fn write_seq(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    do_write(ctx, t, KeyOrder::Seq)
}

pub fn write_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    do_write(ctx, t, KeyOrder::Random)
}

/// db_bench's mergerandom: `--num` merges into random keys with the default keyspace's
/// `--merge_operator` (8-byte operands of 1 for `uint64add`, generated values otherwise).
pub fn merge_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let counter = ctx.args.merge_operator.as_deref() == Some("uint64add");
    let mut gen = ValueGenerator::new(ctx.args.compression_ratio, ctx.value_size);
    let mut key = ctx.args.key_format();
    let mut bytes = 0u64;
    let one = 1u64.to_le_bytes();
    for _ in 0..ctx.num {
        let k = t.rand.uniform(ctx.args.num);
        let kb = key.key(k);
        let operand = if counter { &one[..] } else { gen.generate(ctx.value_size) };
        ctx.db.merge_opt(&ctx.write_options, kb, operand)?;
        bytes += (kb.len() + operand.len()) as u64;
        t.stats.finished_single_op();
    }
    t.stats.add_bytes(bytes);
    Ok(())
}

/// Each op a batch of two puts of one random key: to the default keyspace and to `ks1`
/// (what a write to a table and its index in another keyspace costs: one log record, atomic).
pub fn write_cross_keyspace(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let other = ctx.db.keyspace("ks1")?;
    let mut gen = ValueGenerator::new(ctx.args.compression_ratio, ctx.value_size);
    let mut key = ctx.args.key_format();
    let mut bytes = 0u64;
    for _ in 0..ctx.num {
        let k = t.rand.uniform(ctx.args.num);
        let (kb, vb) = (key.key(k), gen.generate(ctx.value_size));
        let mut batch = WriteBatch::with_capacity(2 * (kb.len() + vb.len() + 8));
        batch.put(kb, vb).put_in(&other, kb, vb);
        ctx.db.write(&ctx.write_options, &batch)?;
        bytes += 2 * (kb.len() + vb.len()) as u64;
        ctx.live.put(k, ctx.value_class);
        t.stats.finished_single_op();
    }
    t.stats.add_bytes(bytes);
    Ok(())
}

pub fn write_shuffled(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    do_write(ctx, t, KeyOrder::Shuffled)
}

/// A multiplier coprime to `n`: `i * m % n` visits every key of `[0, n)` once.
fn coprime_stride(n: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    (2_654_435_761u64..).find(|&m| gcd(m % n.max(1), n) == 1).unwrap_or(1) % n.max(1)
}

/// `--probe_every`: once compaction has caught up, 100 lookups of absent keys, so the filters
/// probed per lookup are averaged over the shapes the tree passes through while it grows
/// (not over a backlog compaction has not worked off yet). Returns the filter bits per entry
/// the tables held at the probe (`None` before the first flush), so the filter memory is
/// averaged over the same shapes.
fn probe_missing(ctx: &Ctx, t: &mut ThreadState, key: &mut KeyFormat) -> CliResult<Option<f64>> {
    ctx.db.wait_for_background_work()?;
    for _ in 0..100 {
        let k = key.key(t.rand.uniform(ctx.args.num));
        ctx.db.get(&k[..k.len() - 1])?;
    }
    let s = ctx.db.stats();
    let entries = s.level_entries.iter().sum::<u64>();
    Ok((entries > 0).then(|| s.level_filter_bytes.iter().sum::<u64>() as f64 * 8.0 / entries as f64))
}

/// Whether a thread's `written`-th write is followed by a range delete (db_bench's rule:
/// every `--writes_per_range_tombstone` writes after `--writes_before_delete_range`, at most
/// `--max_num_range_tombstones` of them).
pub(super) fn range_delete_due(args: &BenchArgs, written: u64) -> bool {
    let every = args.writes_per_range_tombstone;
    if every == 0 || written <= args.writes_before_delete_range {
        return false;
    }
    let after = written - args.writes_before_delete_range;
    after.is_multiple_of(every) && after / every <= args.max_num_range_tombstones
}

fn do_write(ctx: &Ctx, t: &mut ThreadState, order: KeyOrder) -> CliResult {
    if ctx.num != ctx.args.num {
        t.stats.add_message(&format!("({} ops)", ctx.num));
    }
    let mut gen = ValueGenerator::new(ctx.args.compression_ratio, ctx.value_size);
    let mut key = ctx.args.key_format();
    let mut batch = WriteBatch::new();
    let mut bytes = 0u64;
    let mut i = 0;
    let stride = coprime_stride(ctx.args.num);
    let mut probe_key = ctx.args.key_format();
    let mut probe_bits = Vec::new();
    while i < ctx.num {
        let n = ctx.entries_per_batch.min(ctx.num - i);
        batch.clear();
        for j in 0..n {
            let k = match order {
                KeyOrder::Seq => i + j,
                KeyOrder::Random => t.rand.uniform(ctx.args.num),
                KeyOrder::Shuffled => {
                    let nth = (i + j) * ctx.threads as u64 + t.tid as u64;
                    ((nth % ctx.args.num) as u128 * stride as u128 % ctx.args.num as u128) as u64
                }
            };
            if ctx.args.probe_every > 0 && (i + j) % ctx.args.probe_every == ctx.args.probe_every - 1 {
                probe_bits.extend(probe_missing(ctx, t, &mut probe_key)?);
            }
            let (kb, vb) = (key.key(k), gen.generate(ctx.value_size));
            bytes += (kb.len() + vb.len()) as u64;
            if n == 1 {
                ctx.db.put_opt(&ctx.write_options, kb, vb)?;
            } else {
                batch.put(kb, vb);
            }
            ctx.live.put(k, ctx.value_class);
            t.stats.finished_single_op();
            if range_delete_due(ctx.args, i + j + 1) {
                let begin = match order {
                    KeyOrder::Random => t.rand.uniform(ctx.args.num),
                    KeyOrder::Seq | KeyOrder::Shuffled => k,
                };
                let end = begin + ctx.args.range_tombstone_width;
                let (b, e) = (key.key(begin).to_vec(), key.key(end).to_vec());
                match n {
                    1 => ctx.db.delete_range_opt(&ctx.write_options, &b, &e)?,
                    _ => _ = batch.delete_range(&b, &e),
                }
                (begin..end.min(ctx.args.num)).for_each(|k| ctx.live.delete(k));
            }
        }
        if n > 1 {
            ctx.db.write(&ctx.write_options, &batch)?;
        }
        i += n;
    }
    t.stats.add_bytes(bytes);
    if !probe_bits.is_empty() {
        let avg = probe_bits.iter().sum::<f64>() / probe_bits.len() as f64;
        t.stats.add_message(&format!("(filters at {} probes: {avg:.2} bits/entry on average)", probe_bits.len()));
    }
    Ok(())
}

pub fn read_seq(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    read_scan(ctx, t, false)
}

pub fn read_reverse(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    read_scan(ctx, t, true)
}

fn read_scan(ctx: &Ctx, t: &mut ThreadState, reverse: bool) -> CliResult {
    let mut it = ctx.db.iter(&ctx.args.read_options())?;
    if reverse {
        it.seek_to_last()?;
    } else {
        it.seek_to_first()?;
    }
    let (mut i, mut bytes) = (0, 0u64);
    while i < ctx.reads && it.valid() {
        bytes += (it.key().len() + it.value().len()) as u64;
        t.stats.finished_single_op();
        i += 1;
        if reverse {
            it.prev()?;
        } else {
            it.next()?;
        }
    }
    t.stats.add_bytes(bytes);
    Ok(())
}

pub fn read_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let mut key = ctx.args.key_format();
    let mut found = 0u64;
    for _ in 0..ctx.reads {
        let k = t.rand.uniform(ctx.args.num);
        if ctx.db.get(key.key(k))?.is_some() {
            found += 1;
        }
        t.stats.finished_single_op();
    }
    t.stats.add_message(&format!("({found} of {} found)", ctx.num));
    Ok(())
}

/// db_bench's multireadrandom: random keys looked up `--multiget_batch_size` at a time with
/// `multi_get` (each key counts as one op).
pub fn multi_read_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let ro = ctx.args.read_options();
    let mut key = ctx.args.key_format();
    let (mut found, mut done) = (0u64, 0u64);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    while done < ctx.reads {
        let n = ctx.args.multiget_batch_size.min(ctx.reads - done);
        keys.clear();
        keys.extend((0..n).map(|_| key.key(t.rand.uniform(ctx.args.num)).to_vec()));
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        found += ctx.db.multi_get(&ro, &refs)?.iter().filter(|v| v.is_some()).count() as u64;
        for _ in 0..n {
            t.stats.finished_single_op();
        }
        done += n;
    }
    t.stats.add_message(&format!("({found} of {} found)", ctx.reads));
    Ok(())
}

/// Looks up keys one byte shorter than the stored ones: never present.
pub fn read_missing(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let mut key = ctx.args.key_format();
    for _ in 0..ctx.reads {
        let k = key.key(t.rand.uniform(ctx.args.num));
        ctx.db.get(&k[..k.len() - 1])?;
        t.stats.finished_single_op();
    }
    Ok(())
}

/// RocksDB's readrandomwriterandom: `--reads` ops, each a read of a random key with
/// probability `--readwritepercent` % and otherwise a write of one (a mix for comparing merge
/// policies).
pub fn read_random_write_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let mix = Mix { read_percent: ctx.args.readwritepercent, read_key_space: 1 };
    read_write_mix(ctx, t, mix, get)
}

/// `readrandomwriterandom` with short scans for reads: a seek to a random key and
/// `--seek_nexts` steps (the Wacky paper's short range reads; RocksDB's mixgraph with
/// `mix_seek_ratio`).
pub fn seek_random_write_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let mix = Mix { read_percent: ctx.args.readwritepercent, read_key_space: 1 };
    read_write_mix(ctx, t, mix, seek_and_step)
}

/// The phases of a shifting workload (run one after another in one process, e.g.
/// `--benchmarks=fillshuffle,shiftwrites,shiftreads,shiftscans,shiftwrites`), each `--reads`
/// ops: 90 % writes / 10 % reads.
pub fn shift_writes(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    read_write_mix(ctx, t, Mix { read_percent: 10, read_key_space: 1 }, get)
}

/// A shifting workload's read phase: 10 % writes / 90 % reads, half of them of absent keys
/// (reads draw from twice the key space).
pub fn shift_reads(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    read_write_mix(ctx, t, Mix { read_percent: 90, read_key_space: 2 }, get)
}

/// A shifting workload's scan phase: 60 % writes / 40 % short scans (seek + `--seek_nexts`).
pub fn shift_scans(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    read_write_mix(ctx, t, Mix { read_percent: 40, read_key_space: 1 }, seek_and_step)
}

fn get(ctx: &Ctx, k: &[u8]) -> CliResult<bool> {
    Ok(ctx.db.get(k)?.is_some())
}

/// A seek to `k` and `--seek_nexts` steps; whether `k` itself was there.
fn seek_and_step(ctx: &Ctx, k: &[u8]) -> CliResult<bool> {
    let mut it = ctx.db.iter(&ctx.args.read_options())?;
    it.seek(k)?;
    let found = it.valid() && it.key() == k;
    for _ in 0..ctx.args.seek_nexts {
        if !it.valid() {
            break;
        }
        it.next()?;
    }
    Ok(found)
}

/// A read/write mix: the share of reads, and how many times `--num` the keys reads draw from
/// (beyond `--num` a read misses).
#[derive(Clone, Copy)]
struct Mix {
    read_percent: u32,
    read_key_space: u64,
}

/// `--reads` ops on random keys: a read (`read`, which says whether the key was found) with
/// probability `mix.read_percent` %, else a write. Besides the whole run's rate, reports the
/// rate after its first fifth (how fast the tree serves the mix once it had time to adapt).
fn read_write_mix(ctx: &Ctx, t: &mut ThreadState, mix: Mix, read: fn(&Ctx, &[u8]) -> CliResult<bool>) -> CliResult {
    let mut gen = ValueGenerator::new(ctx.args.compression_ratio, ctx.value_size);
    let mut key = ctx.args.key_format();
    let (mut reads, mut writes, mut found) = (0u64, 0u64, 0u64);
    let fifth = ctx.reads / 5;
    let mut after_fifth = std::time::Instant::now();
    for i in 0..ctx.reads {
        if i == fifth {
            after_fifth = std::time::Instant::now();
        }
        if t.rand.uniform(100) < u64::from(mix.read_percent) {
            reads += 1;
            found += u64::from(read(ctx, key.key(t.rand.uniform(ctx.args.num * mix.read_key_space)))?);
        } else {
            writes += 1;
            let k = t.rand.uniform(ctx.args.num);
            ctx.db.put_opt(&ctx.write_options, key.key(k), gen.generate(ctx.value_size))?;
            ctx.live.put(k, ctx.value_class);
        }
        t.stats.finished_single_op();
    }
    let rest = (ctx.reads - fifth) as f64 / after_fifth.elapsed().as_secs_f64().max(1e-9);
    t.stats.add_message(&format!("(reads:{reads} writes:{writes} found:{found} after_20%:{rest:.0}ops/s)"));
    Ok(())
}

/// `txnrmw`: each op an optimistic transaction that reads two random keys with
/// `get_for_update` (both take part in the commit's check) and writes both, retried on a
/// conflict. `--reads` ops per thread; `batchrmw` is the same reads and writes without a
/// transaction, to compare against.
pub fn txn_rmw(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    read_modify_write(ctx, t, true)
}

/// `batchrmw`: `txnrmw`'s two reads and two writes as plain gets and one batch.
pub fn batch_rmw(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    read_modify_write(ctx, t, false)
}

fn read_modify_write(ctx: &Ctx, t: &mut ThreadState, transaction: bool) -> CliResult {
    let mut gen = ValueGenerator::new(ctx.args.compression_ratio, ctx.value_size);
    let (mut ka, mut kb) = (ctx.args.key_format(), ctx.args.key_format());
    let ks = ctx.db.default_keyspace();
    let opts = TransactionOptions { sync: ctx.write_options.sync, ..TransactionOptions::default() };
    let (mut found, mut conflicts, mut bytes) = (0u64, 0u64, 0u64);
    for _ in 0..ctx.reads {
        let (a, b) = (t.rand.uniform(ctx.args.num), t.rand.uniform(ctx.args.num));
        let (a_key, b_key) = (ka.key(a), kb.key(b));
        loop {
            let v = gen.generate(ctx.value_size);
            if !transaction {
                found += u64::from(ctx.db.get(a_key)?.is_some()) + u64::from(ctx.db.get(b_key)?.is_some());
                let mut batch = WriteBatch::with_capacity(2 * (a_key.len() + v.len() + 8));
                batch.put(a_key, v).put(b_key, v);
                ctx.db.write(&ctx.write_options, &batch)?;
                break;
            }
            let mut txn = ctx.db.transaction_with(opts.clone());
            found += u64::from(txn.get_for_update(ks, a_key)?.is_some());
            found += u64::from(txn.get_for_update(ks, b_key)?.is_some());
            txn.put(ks, a_key, v)?;
            txn.put(ks, b_key, v)?;
            match txn.commit() {
                Ok(()) => break,
                Err(e) if e.is_retryable() => conflicts += 1,
                Err(e) => return Err(e.into()),
            }
        }
        bytes += 2 * (a_key.len() + ctx.value_size) as u64;
        ctx.live.put(a, ctx.value_class);
        ctx.live.put(b, ctx.value_class);
        t.stats.finished_single_op();
    }
    t.stats.add_bytes(bytes);
    t.stats.add_message(&format!("(found:{found} conflicts:{conflicts})"));
    Ok(())
}

/// Random reads confined to the first 1% of the key space.
pub fn read_hot(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let mut key = ctx.args.key_format();
    let range = ctx.args.num.div_ceil(100);
    for _ in 0..ctx.reads {
        ctx.db.get(key.key(t.rand.uniform(range)))?;
        t.stats.finished_single_op();
    }
    Ok(())
}

/// A new iterator per op, seeking to a random key, then (`--seek_nexts`, as in RocksDB's
/// db_bench) reading that many entries, every key and value. A scan of known length is what
/// `Db::scan_from` is for (keys first, then the values as one batch).
pub fn seek_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let ro = ctx.args.read_options();
    let mut key = ctx.args.key_format();
    let (mut found, mut bytes) = (0u64, 0u64);
    let before = ctx.db.stats();
    for _ in 0..ctx.reads {
        let k = key.key(t.rand.uniform(ctx.args.num));
        if ctx.args.seek_nexts > 0 {
            let entries = ctx.db.scan_from(&ro, k, ctx.args.seek_nexts as usize)?;
            found += u64::from(entries.first().is_some_and(|(first, _)| first == k));
            bytes += entries.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
        } else {
            let mut it = ctx.db.iter(&ro)?;
            it.seek(k)?;
            found += u64::from(it.valid() && it.key() == k);
        }
        t.stats.finished_single_op();
    }
    if ctx.args.seek_nexts > 0 {
        t.stats.add_bytes(bytes);
    }
    t.stats.add_message(&format!("({found} of {} found)", ctx.num));
    let after = ctx.db.stats();
    let per_seek = |a: u64, b: u64| (a - b) as f64 / ctx.reads.max(1) as f64;
    t.stats.add_message(&format!(
        "(tables per seek: {:.2} probed, {:.2} skipped by prefix filters)",
        per_seek(after.seek_tables_probed, before.seek_tables_probed),
        per_seek(after.prefix_tables_skipped, before.prefix_tables_skipped)
    ));
    Ok(())
}

/// One iterator seeking forward by random small steps.
pub fn seek_ordered(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    let mut key = ctx.args.key_format();
    let mut it = ctx.db.iter(&ctx.args.read_options())?;
    let (mut found, mut k) = (0u64, 0u64);
    for _ in 0..ctx.reads {
        k = (k + t.rand.uniform(100)) % ctx.args.num;
        let kb = key.key(k);
        it.seek(kb)?;
        if it.valid() && it.key() == kb {
            found += 1;
        }
        t.stats.finished_single_op();
    }
    t.stats.add_message(&format!("({found} of {} found)", ctx.num));
    Ok(())
}

pub fn delete_seq(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    do_delete(ctx, t, true)
}

pub fn delete_random(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    do_delete(ctx, t, false)
}

fn do_delete(ctx: &Ctx, t: &mut ThreadState, seq: bool) -> CliResult {
    let mut key = ctx.args.key_format();
    for i in 0..ctx.num {
        let k = if seq { i } else { t.rand.uniform(ctx.args.num) };
        ctx.db.delete_opt(&ctx.write_options, key.key(k))?;
        ctx.live.delete(k);
        t.stats.finished_single_op();
    }
    Ok(())
}

/// Thread 0 overwrites random keys until the other threads (doing readrandom) finish; only
/// the readers are measured.
pub fn read_while_writing(ctx: &Ctx, t: &mut ThreadState) -> CliResult {
    if t.tid > 0 {
        return read_random(ctx, t);
    }
    let mut gen = ValueGenerator::new(ctx.args.compression_ratio, ctx.value_size);
    let mut key = ctx.args.key_format();
    while ctx.threads_done.load(Ordering::Acquire) + 1 < ctx.threads {
        let k = t.rand.uniform(ctx.args.num);
        ctx.db.put_opt(&ctx.write_options, key.key(k), gen.generate(ctx.value_size))?;
        ctx.live.put(k, ctx.value_class);
    }
    // Do not count the writer's work in the stats.
    t.stats.start();
    Ok(())
}

/// Rewrite the separated values in key order (then collect the old copies).
pub fn reorganize(ctx: &Ctx, _t: &mut ThreadState) -> CliResult {
    ctx.db.reorganize_vlog()?;
    Ok(())
}

pub fn compact(ctx: &Ctx, _t: &mut ThreadState) -> CliResult {
    ctx.db.compact_range(None, None)?;
    Ok(())
}

/// RocksDB's `waitforcompaction`: return once flushes and the compactions the policy wants are
/// done (the tree keeps its shape, unlike `compact`).
pub fn wait_for_compaction(ctx: &Ctx, _t: &mut ThreadState) -> CliResult {
    ctx.db.wait_for_background_work()?;
    Ok(())
}
