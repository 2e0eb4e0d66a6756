//! [`KvRead`] on wisckey: reads of the state machine's keyspace and the database's statistics
//! as Prometheus lines.

use std::fmt::Write;
use std::sync::Arc;

use wisckey::{Db, Keyspace};

use super::KvRead;
use crate::{LogStore, STATE_KEYSPACE};

/// The applied state of a wisckey node, read straight from its state keyspace.
#[derive(Clone)]
pub struct WisckeyKv {
    db: Arc<Db>,
    state: Keyspace,
}

impl WisckeyKv {
    /// The reader over the database of `log` (and of its state machine, as `crate::open`
    /// returns them).
    pub fn new(log: &LogStore) -> wisckey::Result<WisckeyKv> {
        let db = log.db().clone();
        let state = db.keyspace(STATE_KEYSPACE)?;
        Ok(WisckeyKv { db, state })
    }
}

impl KvRead for WisckeyKv {
    fn get(&self, key: &str) -> Result<Option<String>, String> {
        let v = self.state.get(key).map_err(|e| e.to_string())?;
        Ok(v.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    fn scan(&self, start: &str, end: Option<&str>, limit: usize) -> Result<Vec<(String, String)>, String> {
        let range = match end {
            Some(end) => self.state.range(start..end),
            None => self.state.range(start..),
        };
        let mut out = Vec::new();
        for item in range.map_err(|e| e.to_string())?.take(limit) {
            let (k, v) = item.map_err(|e| e.to_string())?;
            out.push((String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned()));
        }
        Ok(out)
    }

    fn metrics_text(&self) -> String {
        let s = self.db.stats();
        let mut out = String::new();
        let counters: [(&str, &str, u64); 14] = [
            ("user_bytes_written", "Bytes of keys and values written by users.", s.user_bytes_written),
            ("log_bytes_written", "Bytes appended to the value log.", s.log_bytes_written),
            ("flush_bytes_written", "Bytes written by memtable flushes.", s.flush_bytes_written),
            ("compaction_bytes_written", "Bytes written by compactions.", s.compaction_bytes_written),
            ("compaction_bytes_read", "Bytes read by compactions.", s.compaction_bytes_read),
            ("compactions", "Compactions run.", s.num_compactions),
            ("stall_micros", "Microseconds writers stalled.", s.stall_micros),
            ("gc_runs", "Value-log GC runs.", s.gc_runs),
            ("gc_bytes_rewritten", "Bytes value-log GC rewrote.", s.gc_bytes_rewritten),
            ("gc_bytes_freed", "Bytes value-log GC gave back.", s.gc_bytes_freed),
            ("point_lookups", "Point lookups.", s.point_lookups),
            ("value_cache_hits", "Value cache hits.", s.value_cache_hits),
            ("value_cache_misses", "Value cache misses.", s.value_cache_misses),
            ("disk_bytes", "Bytes the database holds on disk.", s.disk_bytes),
        ];
        for (name, help, v) in counters {
            let kind = if name == "disk_bytes" { "gauge" } else { "counter" };
            let _ = writeln!(out, "# HELP wisckey_{name} {help}\n# TYPE wisckey_{name} {kind}\nwisckey_{name} {v}");
        }
        let amp = if s.user_bytes_written == 0 {
            0.0
        } else {
            (s.log_bytes_written + s.flush_bytes_written + s.compaction_bytes_written) as f64
                / s.user_bytes_written as f64
        };
        let _ = writeln!(out, "# HELP wisckey_write_amplification Device bytes written per user byte.");
        let _ = writeln!(out, "# TYPE wisckey_write_amplification gauge\nwisckey_write_amplification {amp:.3}");
        let _ = writeln!(out, "# HELP wisckey_vlog_space_amp_estimate Value-log bytes per live value byte.");
        let _ = writeln!(
            out,
            "# TYPE wisckey_vlog_space_amp_estimate gauge\nwisckey_vlog_space_amp_estimate {:.3}",
            s.vlog_space_amp_estimate
        );
        out
    }
}
