//! The `Engine` trait the YCSB and micro-benchmark harness drives, its wisckey implementation,
//! and `open`, which picks an engine by name (fjall and RocksDB live in `peers.rs`, behind the
//! `peers` feature).

use std::path::Path;

use clap::ValueEnum;
use wisckey::{Db, Options, ReadOptions};

use crate::bench::{db_stats_json, CliResult};

/// The operations a benchmark needs from a key-value store. Every method takes `&self`: one
/// engine is shared by all benchmark threads.
pub trait Engine: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8]) -> CliResult;
    /// The value's length when `key` is present (no copy needed by the caller).
    fn get(&self, key: &[u8]) -> CliResult<Option<usize>>;
    fn delete(&self, key: &[u8]) -> CliResult;
    /// Read up to `n` entries in key order from the first key >= `start`: (entries, bytes).
    fn scan(&self, start: &[u8], n: usize) -> CliResult<(u64, u64)>;
    /// Write memtables out and wait for background work, so the files on disk are settled.
    fn flush(&self) -> CliResult;
    /// The engine's own counters.
    fn stats(&self) -> EngineCounters;
    fn close(self: Box<Self>) -> CliResult;
}

/// What an engine reports about itself (`None`: it does not count that).
#[derive(Debug, Default, Clone)]
pub struct EngineCounters {
    /// Key + value bytes the engine saw from the user.
    pub user_bytes_written: Option<u64>,
    /// Bytes the engine says it wrote to files (log, flushes, compactions, blob files).
    pub bytes_written: Option<u64>,
    /// The engine's full counters as one JSON object, for the record.
    pub detail_json: Option<String>,
}

impl EngineCounters {
    pub fn write_amp(&self) -> Option<f64> {
        Some(self.bytes_written? as f64 / self.user_bytes_written?.max(1) as f64)
    }
}

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    Wisckey,
    /// fjall 3 with key-value separation (needs `--features peers`).
    Fjall,
    /// RocksDB, plain LSM-tree (needs `--features peers`).
    Rocksdb,
    /// RocksDB with integrated BlobDB, min_blob_size 1024 (needs `--features peers`).
    RocksdbBlob,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Wisckey => "wisckey",
            EngineKind::Fjall => "fjall",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::RocksdbBlob => "rocksdb-blob",
        }
    }
}

/// The memory every engine of a comparison gets (`None`: the engine's own default).
#[derive(Clone, Copy, Debug, Default)]
#[cfg_attr(not(feature = "peers"), allow(dead_code))]
pub struct Budget {
    /// The whole cache budget.
    pub cache_bytes: Option<u64>,
    /// Bytes of writes one memtable holds before it is flushed.
    pub memtable_bytes: Option<u64>,
}

/// Open (creating) the engine's database in `path`, which must not hold another engine's files.
/// `wisckey`: the options a wisckey engine opens with (`budget` already applied to them; the
/// peers keep their own options but for `budget`).
#[cfg_attr(not(feature = "peers"), allow(unused_variables))]
pub fn open(kind: EngineKind, path: &Path, wisckey: Options, budget: Budget) -> CliResult<Box<dyn Engine>> {
    match kind {
        EngineKind::Wisckey => Ok(Box::new(Wisckey { db: Db::open(path, wisckey)? })),
        #[cfg(feature = "peers")]
        peer => super::peers::open(peer, path, budget),
        #[cfg(not(feature = "peers"))]
        peer => Err(format!("--engine {} needs a build with `--features peers`", peer.name()).into()),
    }
}

/// Scans of up to this many entries (YCSB's longest by default) go through `Db::scan_from`.
const SHORT_SCAN: usize = 100;

/// wisckey with its default options (no compression, 1 KiB separation threshold).
struct Wisckey {
    db: Db,
}

impl Engine for Wisckey {
    fn put(&self, key: &[u8], value: &[u8]) -> CliResult {
        Ok(self.db.put(key, value)?)
    }

    fn get(&self, key: &[u8]) -> CliResult<Option<usize>> {
        Ok(self.db.get(key)?.map(|v| v.len()))
    }

    fn delete(&self, key: &[u8]) -> CliResult {
        Ok(self.db.delete(key)?)
    }

    /// A short scan of known length is what `Db::scan_from` is for (keys first, then the
    /// values as one batch); a long one streams through an iterator (values borrowed, read
    /// ahead), as the peers' scans do, instead of holding every value at once.
    fn scan(&self, start: &[u8], n: usize) -> CliResult<(u64, u64)> {
        if n <= SHORT_SCAN {
            let entries = self.db.scan_from(&ReadOptions::default(), start, n)?;
            let bytes = entries.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
            return Ok((entries.len() as u64, bytes));
        }
        let mut it = self.db.iter(&ReadOptions::default())?;
        it.seek(start)?;
        let (mut entries, mut bytes) = (0u64, 0u64);
        while it.valid() && (entries as usize) < n {
            bytes += (it.key().len() + it.value().len()) as u64;
            entries += 1;
            it.next()?;
        }
        Ok((entries, bytes))
    }

    fn flush(&self) -> CliResult {
        self.db.flush()?;
        Ok(self.db.wait_for_background_work()?)
    }

    fn stats(&self) -> EngineCounters {
        let s = self.db.stats();
        EngineCounters {
            user_bytes_written: Some(s.user_bytes_written),
            bytes_written: Some(
                s.log_bytes_written + s.cold_bytes_written + s.flush_bytes_written + s.compaction_bytes_written,
            ),
            detail_json: Some(db_stats_json(&s, None)),
        }
    }

    fn close(self: Box<Self>) -> CliResult {
        Ok(self.db.close()?)
    }
}
