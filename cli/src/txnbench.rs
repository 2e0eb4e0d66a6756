//! `wisckey txnbench`: optimistic read-modify-write transactions at a chosen conflict rate,
//! against wisckey or RocksDB's `OptimisticTransactionDB` (feature `rocksdb-txn`, part of `peers`), so the two are
//! compared on the same work.
//!
//! Each transaction reads two random keys with `get_for_update` at a snapshot, writes both and
//! commits. A conflict is made on purpose, not left to thread timing: before the commit of a
//! chosen fraction of transactions (`--conflict_pct`), a plain write outside the transaction
//! changes one of the keys it read, so its commit must fail, and it is retried from the start
//! (the retry is not interfered with). The figure is committed transactions per second,
//! aborted attempts and the interfering writes included in the time.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wisckey::{Db, Options, TransactionOptions, WriteBatch};

use crate::bench::CliResult;

/// `--engine` of `txnbench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TxnEngineKind {
    Wisckey,
    /// RocksDB's OptimisticTransactionDB (needs `--features peers` or `rocksdb-txn`).
    Rocksdb,
}

#[derive(Args)]
pub struct TxnBenchArgs {
    /// A directory the run may create and delete (must not exist or be empty).
    #[arg(long)]
    db: PathBuf,
    #[arg(long, value_enum, default_value = "wisckey")]
    engine: TxnEngineKind,
    /// Keys loaded before the transactions run.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(2..))]
    num: u64,
    /// Committed transactions to run.
    #[arg(long, default_value_t = 200_000)]
    txns: u64,
    #[arg(long = "value_size", default_value_t = 100)]
    value_size: usize,
    /// Percent of transactions whose first attempt is made to conflict.
    #[arg(long = "conflict_pct", default_value_t = 0.0)]
    conflict_pct: f64,
    #[arg(long, default_value_t = 301)]
    seed: u64,
}

/// The transaction a run needs from an engine.
trait TxnEngine {
    fn load(&self, keys: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> CliResult;
    /// One attempt: read `a` and `b` for update, write `value` to both, run `interfere`
    /// between the reads and the commit when given; `Ok(false)`: the commit conflicted.
    fn attempt(&self, a: &[u8], b: &[u8], value: &[u8], interfere: Option<&[u8]>) -> CliResult<bool>;
}

struct Wisckey(Db);

impl TxnEngine for Wisckey {
    fn load(&self, keys: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> CliResult {
        let mut batch = WriteBatch::new();
        for (k, v) in keys {
            batch.put(k, v);
            if batch.len() >= 1000 {
                self.0.write(&Default::default(), &batch)?;
                batch = WriteBatch::new();
            }
        }
        self.0.write(&Default::default(), &batch)?;
        self.0.flush()?;
        Ok(self.0.wait_for_background_work()?)
    }

    fn attempt(&self, a: &[u8], b: &[u8], value: &[u8], interfere: Option<&[u8]>) -> CliResult<bool> {
        let ks = self.0.default_keyspace();
        let mut txn = self.0.transaction_with(TransactionOptions::default());
        txn.get_for_update(ks, a)?;
        txn.get_for_update(ks, b)?;
        txn.put(ks, a, value)?;
        txn.put(ks, b, value)?;
        if let Some(key) = interfere {
            self.0.put(key, value)?;
        }
        match txn.commit() {
            Ok(()) => Ok(true),
            Err(e) if e.is_retryable() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(feature = "rocksdb-txn")]
mod rocks {
    use super::*;
    use rocksdb::{OptimisticTransactionDB, OptimisticTransactionOptions, WriteOptions};

    /// RocksDB's OptimisticTransactionDB with the options `ycsb --engine rocksdb` uses (no
    /// compression, 10-bit Bloom filters), snapshots taken at the transaction's start as
    /// wisckey's transactions do.
    pub(super) struct Rocks(pub(super) OptimisticTransactionDB);

    pub(super) fn open(path: &std::path::Path) -> CliResult<Rocks> {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.set_compression_type(rocksdb::DBCompressionType::None);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        o.set_block_based_table_factory(&table);
        Ok(Rocks(OptimisticTransactionDB::open(&o, path)?))
    }

    impl TxnEngine for Rocks {
        fn load(&self, keys: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> CliResult {
            let mut batch = rocksdb::WriteBatchWithTransaction::<true>::default();
            for (k, v) in keys {
                batch.put(k, v);
                if batch.len() >= 1000 {
                    self.0.write(std::mem::take(&mut batch))?;
                }
            }
            self.0.write(batch)?;
            Ok(())
        }

        fn attempt(&self, a: &[u8], b: &[u8], value: &[u8], interfere: Option<&[u8]>) -> CliResult<bool> {
            let mut topts = OptimisticTransactionOptions::new();
            topts.set_snapshot(true);
            let txn = self.0.transaction_opt(&WriteOptions::default(), &topts);
            txn.get_for_update(a, true)?;
            txn.get_for_update(b, true)?;
            txn.put(a, value)?;
            txn.put(b, value)?;
            if let Some(key) = interfere {
                self.0.put(key, value)?;
            }
            match txn.commit() {
                Ok(()) => Ok(true),
                Err(e) if matches!(e.kind(), rocksdb::ErrorKind::Busy | rocksdb::ErrorKind::TryAgain) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("{i:016}").into_bytes()
}

fn open(args: &TxnBenchArgs) -> CliResult<Box<dyn TxnEngine>> {
    match args.engine {
        TxnEngineKind::Wisckey => Ok(Box::new(Wisckey(Db::open(&args.db, Options::default())?))),
        #[cfg(feature = "rocksdb-txn")]
        TxnEngineKind::Rocksdb => Ok(Box::new(rocks::open(&args.db)?)),
        #[cfg(not(feature = "rocksdb-txn"))]
        TxnEngineKind::Rocksdb => {
            Err("--engine rocksdb needs a build with `--features rocksdb-txn` (or `peers`)".into())
        }
    }
}

pub fn run(args: TxnBenchArgs) -> CliResult {
    if !(0.0..=100.0).contains(&args.conflict_pct) {
        return Err(format!("--conflict_pct={} is not a percentage", args.conflict_pct).into());
    }
    if args.db.exists() && std::fs::read_dir(&args.db)?.next().is_some() {
        return Err(format!("--db {} is not empty", args.db.display()).into());
    }
    let engine = open(&args)?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let value: Vec<u8> = (0..args.value_size).map(|_| rng.gen_range(b'a'..=b'z')).collect();
    engine.load(&mut (0..args.num).map(|i| (key(i), value.clone())))?;
    let (mut conflicts, mut interfered) = (0u64, 0u64);
    let start = Instant::now();
    for _ in 0..args.txns {
        let (a, b) = (key(rng.gen_range(0..args.num)), key(rng.gen_range(0..args.num)));
        let mut interfere = rng.gen_bool(args.conflict_pct / 100.0);
        interfered += u64::from(interfere);
        while !engine.attempt(&a, &b, &value, interfere.then_some(&a[..]))? {
            conflicts += 1;
            interfere = false;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "txnbench engine={:?} num={} txns={} value_size={} conflict_pct={}: {:.0} committed txns/s ({:.3} micros/txn), {} conflicts, {} interfering writes",
        args.engine,
        args.num,
        args.txns,
        args.value_size,
        args.conflict_pct,
        args.txns as f64 / secs,
        secs * 1e6 / args.txns as f64,
        conflicts,
        interfered
    );
    if conflicts != interfered {
        return Err(format!("{conflicts} conflicts, but {interfered} transactions were interfered with").into());
    }
    Ok(())
}
