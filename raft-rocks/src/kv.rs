//! [`KvRead`] on RocksDB: the HTTP layer's reads of the applied state (column family
//! `sm_data`) and RocksDB's statistics as Prometheus lines.

use std::fmt::Write;

use wisckey_raft::server::KvRead;

use crate::{RocksStateMachine, COLUMN_FAMILIES};

/// RocksDB properties exported by `/metrics`, per column family: (property, metric name,
/// help, type).
const PROPERTIES: [(&str, &str, &str, &str); 7] = [
    ("rocksdb.estimate-num-keys", "estimate_num_keys", "Estimated keys.", "gauge"),
    ("rocksdb.total-sst-files-size", "sst_bytes", "Bytes of all SST files.", "gauge"),
    ("rocksdb.cur-size-all-mem-tables", "memtable_bytes", "Bytes in memtables.", "gauge"),
    ("rocksdb.num-running-compactions", "running_compactions", "Compactions running.", "gauge"),
    ("rocksdb.estimate-pending-compaction-bytes", "pending_compaction_bytes", "Bytes compaction is behind.", "gauge"),
    ("rocksdb.num-immutable-mem-table", "immutable_memtables", "Memtables waiting for a flush.", "gauge"),
    ("rocksdb.is-write-stopped", "write_stopped", "1 while writes are stopped.", "gauge"),
];

impl KvRead for RocksStateMachine {
    fn get(&self, key: &str) -> Result<Option<String>, String> {
        RocksStateMachine::get(self, key).map_err(|e| e.to_string())
    }

    fn scan(&self, start: &str, end: Option<&str>, limit: usize) -> Result<Vec<(String, String)>, String> {
        RocksStateMachine::scan(self, start, end, limit).map_err(|e| e.to_string())
    }

    fn metrics_text(&self) -> String {
        let mut out = String::new();
        for (property, name, help, kind) in PROPERTIES {
            let _ = writeln!(out, "# HELP rocksdb_{name} {help}\n# TYPE rocksdb_{name} {kind}");
            for cf_name in COLUMN_FAMILIES {
                let Some(cf) = self.db().cf_handle(cf_name) else { continue };
                if let Ok(Some(v)) = self.db().property_int_value_cf(cf, property) {
                    let _ = writeln!(out, "rocksdb_{name}{{cf=\"{cf_name}\"}} {v}");
                }
            }
        }
        out
    }
}
