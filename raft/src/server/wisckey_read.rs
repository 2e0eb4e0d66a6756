//! [`KvRead`] on wisckey's state machine: its reads (values resolved from the log where the
//! state refers to them) and the database's statistics as Prometheus lines.

use std::fmt::Write;

use super::KvRead;
use crate::StateMachineStore;

impl KvRead for StateMachineStore {
    fn get(&self, key: &str) -> Result<Option<String>, String> {
        StateMachineStore::get(self, key).map_err(|e| e.to_string())
    }

    fn scan(&self, start: &str, end: Option<&str>, limit: usize) -> Result<Vec<(String, String)>, String> {
        StateMachineStore::scan(self, start, end, limit).map_err(|e| e.to_string())
    }

    fn metrics_text(&self) -> String {
        let s = self.db().stats();
        let mut out = String::new();
        let counters: [(&str, &str, u64); 17] = [
            ("user_bytes_written", "Bytes of keys and values written by users.", s.user_bytes_written),
            ("log_bytes_written", "Bytes appended to the value log.", s.log_bytes_written),
            ("flush_bytes_written", "Bytes written by memtable flushes.", s.flush_bytes_written),
            ("compaction_bytes_written", "Bytes written by compactions.", s.compaction_bytes_written),
            ("compaction_bytes_read", "Bytes read by compactions.", s.compaction_bytes_read),
            ("compactions", "Compactions run.", s.num_compactions),
            ("stall_micros", "Microseconds writers stalled.", s.stall_micros),
            ("gc_stall_micros", "Microseconds writers waited for value-log GC.", s.gc_stall_micros),
            ("gc_runs", "Value-log GC runs.", s.gc_runs),
            ("gc_bytes_rewritten", "Bytes value-log GC rewrote.", s.gc_bytes_rewritten),
            ("gc_bytes_freed", "Bytes value-log GC gave back.", s.gc_bytes_freed),
            ("point_lookups", "Point lookups.", s.point_lookups),
            ("filter_probes", "Tables whose filter a lookup asked.", s.filter_probes),
            ("filter_false_positives", "Filter passes for keys the table did not hold.", s.filter_false_positives),
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
