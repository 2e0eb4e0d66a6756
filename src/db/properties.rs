//! Introspection with LevelDB's names: `Db::property` (LevelDB's `GetProperty`) and
//! `Db::approximate_sizes` (`GetApproximateSizes`), which LevelDB's C API and its bindings
//! expose.

use std::fmt::Write;
use std::sync::Arc;

use super::{Db, DbInner};
use crate::key::{self, MAX_SEQ};
use crate::version::Version;

impl Db {
    /// Approximate bytes the database spends on each `[start, limit)` range of user keys (in
    /// the database's key order; an empty or reversed range is 0), as LevelDB's
    /// `GetApproximateSizes`: the table bytes of the range (whole tables before `limit` minus
    /// those before `start`; within a table, the offset of the data block a key would be in),
    /// plus the range's share of the live separated values in the value log, in proportion to
    /// its share of all table bytes (of every keyspace: the tables hold only pointers to those
    /// values, so the values are taken to be spread over the keys as the tables are). Writes
    /// still in the memtables are not counted, as in LevelDB. The default keyspace's keys
    /// (`Keyspace` has its own handle).
    pub fn approximate_sizes(&self, ranges: &[(&[u8], &[u8])]) -> Vec<u64> {
        let (version, live_vlog_bytes, table_bytes) = {
            let st = self.inner.state.lock();
            let v = &st.versions;
            let live = v.vlog_files().values().map(|s| s.live_bytes()).sum::<u64>();
            // The value log serves every keyspace: a range's share is of all their tables.
            let tables = (v.trees().keys().filter_map(|&id| v.current_of(id)))
                .map(|t| t.all_files().map(|(_, f)| f.size).sum::<u64>())
                .sum::<u64>();
            (v.current(), live, tables)
        };
        ranges
            .iter()
            .map(|&(start, limit)| {
                let tables =
                    self.inner.offset_of(&version, limit).saturating_sub(self.inner.offset_of(&version, start));
                let values = match table_bytes {
                    0 => 0,
                    all => (u128::from(tables) * u128::from(live_vlog_bytes) / u128::from(all)) as u64,
                };
                tables + values
            })
            .collect()
    }

    /// The value of the named property, `None` for a name not known (LevelDB's
    /// `GetProperty`):
    ///
    /// - `leveldb.num-files-at-level<N>`: table files in level N;
    /// - `leveldb.stats`: files, runs, bytes and compaction bytes per level, and the value
    ///   log's size and garbage;
    /// - `leveldb.sstables`: every table of every level with its key range;
    /// - `leveldb.approximate-memory-usage`: bytes held by memtables (their nodes and kept
    ///   values), the block cache and the value cache;
    /// - `wisckey.num-runs-at-level<N>`: sorted runs in level N;
    /// - `wisckey.stats`: every counter of `Db::stats`.
    pub fn property(&self, name: &str) -> Option<String> {
        let level_of = |prefix: &str| name.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok());
        let version = || self.inner.state.lock().versions.current();
        if let Some(level) = level_of("leveldb.num-files-at-level") {
            let v = version();
            return (level < v.num_levels()).then(|| v.level_files(level).to_string());
        }
        if let Some(level) = level_of("wisckey.num-runs-at-level") {
            let v = version();
            return (level < v.num_levels()).then(|| v.num_runs(level).to_string());
        }
        match name {
            "leveldb.stats" => Some(self.stats_text()),
            "leveldb.sstables" => Some(sstables_text(&version())),
            "leveldb.approximate-memory-usage" => Some(self.inner.memory_usage().to_string()),
            "wisckey.stats" => Some(format!("{:#?}", self.stats())),
            _ => None,
        }
    }

    /// LevelDB's `leveldb.stats` table, with the runs of each level and the value log added.
    fn stats_text(&self) -> String {
        let s = self.stats();
        let mb = |b: u64| b as f64 / 1048576.0;
        let at = |v: &[u64], l: usize| v.get(l).copied().unwrap_or(0);
        let mut out = String::from(
            "                               Compactions\n\
             Level  Files  Runs Size(MB) Read(MB) Write(MB)\n\
             ----------------------------------------------\n",
        );
        for level in 0..s.level_files.len() {
            let (read, written) =
                (at(&s.level_compaction_bytes_read, level), at(&s.level_compaction_bytes_written, level));
            if s.level_files[level] == 0 && read == 0 && written == 0 {
                continue;
            }
            let _ = writeln!(
                out,
                "{level:>5} {:>6} {:>5} {:>8.0} {:>8.0} {:>9.0}",
                s.level_files[level],
                s.level_runs.get(level).copied().unwrap_or(0),
                mb(at(&s.level_bytes, level)),
                mb(read),
                mb(written),
            );
        }
        let _ = writeln!(
            out,
            "Value log: {:.0} MB on disk, {:.0} MB of separated values, {:.0} MB of them garbage",
            mb(s.vlog_disk_bytes),
            mb(s.vlog_value_bytes),
            mb(s.vlog_garbage_bytes)
        );
        let _ = writeln!(out, "Write amplification: {:.2}", s.write_amp());
        out
    }
}

impl DbInner {
    /// Approximate table bytes before `user_key` (LevelDB's `ApproximateOffsetOf`): whole
    /// tables that end before it, and the offset within the tables that span it.
    fn offset_of(&self, v: &Arc<Version>, user_key: &[u8]) -> u64 {
        let target = key::seek_key(user_key, MAX_SEQ);
        let mut total = 0;
        for (_, f) in v.all_files() {
            if v.order.compare_internal(&f.largest, &target).is_lt() {
                total += f.size;
            } else if v.order.compare_internal(&f.smallest, &target).is_lt() {
                match self.table_cache.get(f.number, f.size) {
                    Ok(t) => total += t.approximate_offset_of(&target),
                    // An estimate: a table that cannot be opened counts half.
                    Err(e) => {
                        tracing::warn!(table = f.number, error = %e, "approximate_sizes could not open a table");
                        total += f.size / 2;
                    }
                }
            }
        }
        total
    }

    /// Bytes held in memory by the memtables, the caches and the open tables' metadata.
    fn memory_usage(&self) -> u64 {
        self.memory().total()
    }

    /// What the engine holds in memory, by what holds it (`DbStats::memory`).
    pub(crate) fn memory(&self) -> super::MemoryUsage {
        let memtables = {
            let st = self.state.lock();
            std::iter::once(&st.mem).chain(st.imms.iter()).map(|m| m.approximate_bytes() + m.kept_bytes()).sum::<u64>()
        };
        self.memory_beside(memtables, self.vlog.cache_usage().bytes)
    }

    /// `memory` with the memtables' bytes and the value cache's already read (`stats` has
    /// them): takes no lock of the database's own.
    pub(crate) fn memory_beside(&self, memtables: u64, value_cache: u64) -> super::MemoryUsage {
        super::MemoryUsage {
            memtables,
            block_cache: self.table_cache.block_cache_bytes(),
            block_cache_capacity: self.opts.block_cache_bytes as u64,
            value_cache,
            value_cache_capacity: self.opts.value_cache_bytes,
            table_metadata: self.table_cache.open_tables_metadata_bytes(),
        }
    }
}

/// LevelDB's `leveldb.sstables`: per level, each table as `number:size[smallest .. largest]`
/// (keys escaped, with their sequence number and kind).
fn sstables_text(v: &Version) -> String {
    let mut out = String::new();
    for (level, l) in v.levels.iter().enumerate() {
        let _ = writeln!(out, "--- level {level} ---");
        for f in l.files() {
            let _ = writeln!(out, " {}:{}[{} .. {}]", f.number, f.size, describe(&f.smallest), describe(&f.largest));
        }
    }
    out
}

/// An internal key as LevelDB prints one: `'user key' @ seq : kind`.
fn describe(ikey: &[u8]) -> String {
    match key::parse_internal_key(ikey) {
        Some(p) => format!("'{}' @ {} : {}", escape(p.user_key), p.seq, p.kind as u8),
        None => format!("(bad){}", escape(ikey)),
    }
}

/// Printable bytes as they are, the others as `\xNN` (LevelDB's `EscapeString`).
fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        if (b' '..=b'~').contains(&b) {
            s.push(b as char);
        } else {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use crate::fs::MemFs;
    use crate::{Db, Options};
    use std::sync::Arc;

    fn loaded(separate: usize) -> Db {
        let fs = Arc::new(MemFs::new());
        let opts = Options::default()
            .vfs(fs)
            .write_buffer_bytes(16 << 10)
            .target_file_size_bytes(16 << 10)
            .min_separated_value_bytes(separate)
            .gc_interval_ms(0);
        let db = Db::open("/db", opts).unwrap();
        for i in 0..2000u32 {
            db.put(format!("k{i:06}").as_bytes(), [b'v'; 200]).unwrap();
        }
        db.compact_range(None, None).unwrap();
        db
    }

    #[test]
    fn approximate_sizes_grow_with_the_range_and_count_separated_values() {
        for separate in [usize::MAX, 100] {
            let db = loaded(separate);
            let sizes = db.approximate_sizes(&[
                (b"k000000", b"k001000"),
                (b"k000000", b"k002000"),
                (b"k001000", b"k000000"),
                (b"a", b"b"),
            ]);
            // 1000 entries of 200-byte values and 7-byte keys: about 200 KB either way.
            assert!((150_000..400_000).contains(&sizes[0]), "separate at {separate}: {sizes:?}");
            assert!(sizes[1] > sizes[0] * 3 / 2, "{sizes:?}");
            assert_eq!(&sizes[2..], &[0, 0], "a reversed and an empty range");
        }
    }

    #[test]
    fn properties_name_levels_tables_and_memory() {
        let db = loaded(100);
        let v = db.inner.state.lock().versions.current();
        let deepest = v.deepest_level();
        let files = db.property(&format!("leveldb.num-files-at-level{deepest}")).unwrap();
        assert_eq!(files, v.level_files(deepest).to_string());
        assert!(files.parse::<usize>().unwrap() > 1);
        assert_eq!(db.property("leveldb.num-files-at-level99"), None);
        assert_eq!(db.property("nosuchprop"), None);
        let tables = db.property("leveldb.sstables").unwrap();
        assert!(tables.contains("--- level 0 ---") && tables.contains("'k000000' @ "), "{tables}");
        assert!(db.property("leveldb.stats").unwrap().contains("Level  Files"));
        let memory: u64 = db.property("leveldb.approximate-memory-usage").unwrap().parse().unwrap();
        assert!(memory > 0);
    }
}
