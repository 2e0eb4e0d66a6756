//! The peer engines behind `--engine` (feature `peers`): fjall 3 with key-value separation, and
//! RocksDB plain or with integrated BlobDB. Each runs with its own defaults except: no block
//! compression (wisckey's default), 10-bit Bloom filters in RocksDB (as db_bench and wisckey),
//! and a 1 KiB separation threshold where values are separated (wisckey's `min_separated_value_bytes`).

use std::path::Path;

use fjall::config::CompressionPolicy;
use fjall::{CompressionType, KeyspaceCreateOptions, KvSeparationOptions, PersistMode};
use rocksdb::statistics::Ticker;
use rocksdb::{BlockBasedOptions, DBCompressionType, WaitForCompactOptions};

use super::engine::{Budget, Engine, EngineCounters, EngineKind};
use crate::bench::CliResult;

/// Values of at least this many bytes are separated (fjall's default, wisckey's default).
const SEPARATION_THRESHOLD: u32 = 1024;

/// `budget`: the engine's whole cache and its memtable size (its defaults where `None`).
pub fn open(kind: EngineKind, path: &Path, budget: Budget) -> CliResult<Box<dyn Engine>> {
    match kind {
        EngineKind::Fjall => Ok(Box::new(Fjall::open(path, budget)?)),
        EngineKind::Rocksdb => Ok(Box::new(Rocks::open(path, false, budget)?)),
        EngineKind::RocksdbBlob => Ok(Box::new(Rocks::open(path, true, budget)?)),
        EngineKind::Wisckey => Err("wisckey is not a peer engine".into()),
    }
}

struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
}

impl Fjall {
    fn open(path: &Path, budget: Budget) -> CliResult<Fjall> {
        let mut builder = fjall::Database::builder(path);
        if let Some(bytes) = budget.cache_bytes {
            builder = builder.cache_size(bytes);
        }
        let db = builder.open()?;
        let blobs = KvSeparationOptions::default()
            .compression(CompressionType::None)
            .separation_threshold(SEPARATION_THRESHOLD);
        let ks = db.keyspace("ycsb", || {
            let o = KeyspaceCreateOptions::default()
                .data_block_compression_policy(CompressionPolicy::disabled())
                .with_kv_separation(Some(blobs));
            match budget.memtable_bytes {
                Some(bytes) => o.max_memtable_size(bytes),
                None => o,
            }
        })?;
        Ok(Fjall { db, ks })
    }
}

impl Engine for Fjall {
    fn put(&self, key: &[u8], value: &[u8]) -> CliResult {
        Ok(self.ks.insert(key, value)?)
    }

    fn get(&self, key: &[u8]) -> CliResult<Option<usize>> {
        Ok(self.ks.get(key)?.map(|v| v.len()))
    }

    fn delete(&self, key: &[u8]) -> CliResult {
        Ok(self.ks.remove(key)?)
    }

    fn scan(&self, start: &[u8], n: usize) -> CliResult<(u64, u64)> {
        let (mut entries, mut bytes) = (0u64, 0u64);
        for guard in self.ks.range::<&[u8], _>(start..).take(n) {
            let (k, v) = guard.into_inner()?;
            bytes += (k.len() + v.len()) as u64;
            entries += 1;
        }
        Ok((entries, bytes))
    }

    fn flush(&self) -> CliResult {
        self.db.persist(PersistMode::Buffer)?;
        Ok(self.ks.rotate_memtable_and_wait()?)
    }

    /// fjall exposes no byte counters; write amplification comes from /proc/self/io only.
    fn stats(&self) -> EngineCounters {
        EngineCounters::default()
    }

    fn close(self: Box<Self>) -> CliResult {
        Ok(self.db.persist(PersistMode::Buffer)?)
    }
}

struct Rocks {
    db: rocksdb::DB,
    /// Kept for its statistics object, which the open database shares.
    options: rocksdb::Options,
    blob: bool,
}

impl Rocks {
    fn open(path: &Path, blob: bool, budget: Budget) -> CliResult<Rocks> {
        let cache_bytes = budget.cache_bytes;
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        if let Some(bytes) = budget.memtable_bytes {
            o.set_write_buffer_size(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
        o.set_compression_type(DBCompressionType::None);
        o.enable_statistics();
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        // One cache for blocks and (with BlobDB) blobs, as fjall and wisckey count theirs.
        let cache = cache_bytes.map(|bytes| rocksdb::Cache::new_lru_cache(bytes as usize));
        if let Some(cache) = &cache {
            table.set_block_cache(cache);
        }
        o.set_block_based_table_factory(&table);
        if blob {
            if let Some(cache) = &cache {
                o.set_blob_cache(cache);
            }
            o.set_enable_blob_files(true);
            o.set_min_blob_size(SEPARATION_THRESHOLD as u64);
            o.set_blob_compression_type(DBCompressionType::None);
            o.set_enable_blob_gc(true);
        }
        let db = rocksdb::DB::open(&o, path)?;
        Ok(Rocks { db, options: o, blob })
    }
}

impl Engine for Rocks {
    fn put(&self, key: &[u8], value: &[u8]) -> CliResult {
        Ok(self.db.put(key, value)?)
    }

    fn get(&self, key: &[u8]) -> CliResult<Option<usize>> {
        Ok(self.db.get_pinned(key)?.map(|v| v.len()))
    }

    fn delete(&self, key: &[u8]) -> CliResult {
        Ok(self.db.delete(key)?)
    }

    fn scan(&self, start: &[u8], n: usize) -> CliResult<(u64, u64)> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let (mut entries, mut bytes) = (0u64, 0u64);
        while (entries as usize) < n {
            let (Some(k), Some(v)) = (it.key(), it.value()) else { break };
            bytes += (k.len() + v.len()) as u64;
            entries += 1;
            it.next();
        }
        Ok(it.status().map(|()| (entries, bytes))?)
    }

    fn flush(&self) -> CliResult {
        self.db.flush()?;
        Ok(self.db.wait_for_compact(&WaitForCompactOptions::default())?)
    }

    /// Flush and compaction tickers count every byte their thread wrote, blob files included.
    fn stats(&self) -> EngineCounters {
        let t = |ticker| self.options.get_ticker_count(ticker);
        let written = t(Ticker::WalFileBytes) + t(Ticker::FlushWriteBytes) + t(Ticker::CompactWriteBytes);
        EngineCounters {
            user_bytes_written: Some(t(Ticker::BytesWritten)),
            bytes_written: Some(written),
            detail_json: Some(format!(
                "{{\"engine\":\"{}\",\"wal_bytes\":{},\"flush_write_bytes\":{},\"compact_write_bytes\":{},\
                 \"compact_read_bytes\":{},\"blob_file_bytes_written\":{}}}",
                if self.blob { "rocksdb-blob" } else { "rocksdb" },
                t(Ticker::WalFileBytes),
                t(Ticker::FlushWriteBytes),
                t(Ticker::CompactWriteBytes),
                t(Ticker::CompactReadBytes),
                t(Ticker::BlobDbBlobFileBytesWritten)
            )),
        }
    }

    fn close(self: Box<Self>) -> CliResult {
        Ok(self.db.flush_wal(false)?)
    }
}
