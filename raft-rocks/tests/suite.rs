//! openraft's own storage test suite (`openraft::testing::Suite`), unmodified, against the
//! RocksDB log store and state machine, one database per test in a new directory.
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageError, StorageIOError};
use tempfile::TempDir;
use wisckey_raft::TypeConfig;
use wisckey_raft_rocks::{RocksLogStore, RocksStateMachine};

struct RocksBuilder;

impl StoreBuilder<TypeConfig, RocksLogStore, RocksStateMachine, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, RocksLogStore, RocksStateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        let (log, sm) = wisckey_raft_rocks::open(dir.path()).map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_rocksdb() -> Result<(), StorageError<u64>> {
    Suite::test_all(RocksBuilder)
}
