//! openraft's own storage test suite (`openraft::testing::Suite`), unmodified, against the
//! log store and state machine on one wisckey database per test, each in a new directory.
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageError, StorageIOError};
use tempfile::TempDir;
use wisckey_raft::{LogStore, StateMachineStore, TypeConfig};

struct WisckeyBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for WisckeyBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        let (log, sm) = wisckey_raft::open(dir.path(), wisckey::Options::default())
            .map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_one_wisckey_database() -> Result<(), StorageError<u64>> {
    Suite::test_all(WisckeyBuilder)
}
