//! The RocksDB store beyond openraft's suite: key-value writes (sets, deletes, batches)
//! applied against a model and read back through `KvRead` after a reopen, and a snapshot
//! replacing a follower's state whatever it held.
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;

use openraft::storage::{RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftSnapshotBuilder, StorageError};
use wisckey_raft::server::KvRead;
use wisckey_raft::{Entry, Request};

type Result<T = ()> = std::result::Result<T, StorageError<u64>>;

/// Run `f` to its end on this thread: the store's futures never wait on anything but its own
/// synchronous calls (the append callback is sent before the append returns).
fn run_fut(f: impl std::future::Future<Output = Result>) -> Result {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

fn entry(index: u64, request: Request) -> Entry {
    Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal(request) }
}

fn set(key: &str, value: &str) -> Request {
    Request::Set { key: key.into(), value: value.into() }
}

fn delete(key: &str) -> Request {
    Request::Delete { key: key.into() }
}

/// Sets, deletes and batches of both, with the model they should leave.
fn workload() -> (Vec<Entry>, BTreeMap<String, String>) {
    let mut model = BTreeMap::new();
    let mut entries = Vec::new();
    for i in 1..=60u64 {
        let key = format!("k{:02}", i % 17);
        let request = match i % 5 {
            0 => delete(&key),
            4 => Request::Batch(vec![set(&key, &format!("b{i}")), delete(&format!("k{:02}", (i + 3) % 17))]),
            _ => set(&key, &format!("v{i}")),
        };
        let apply = |model: &mut BTreeMap<String, String>, r: &Request| match r {
            Request::Set { key, value } => {
                model.insert(key.clone(), value.clone());
            }
            Request::Delete { key } => {
                model.remove(key);
            }
            Request::Batch(_) => unreachable!(),
        };
        match &request {
            Request::Batch(rs) => rs.iter().for_each(|r| apply(&mut model, r)),
            r => apply(&mut model, r),
        }
        entries.push(entry(i, request));
    }
    (entries, model)
}

fn all_pairs(kv: &dyn KvRead) -> BTreeMap<String, String> {
    kv.scan("", None, usize::MAX).expect("scan").into_iter().collect()
}

#[test]
fn sets_deletes_and_batches_applied_match_a_model_after_a_reopen() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let (entries, model) = workload();
    run_fut(async {
        let (mut log, mut sm) = wisckey_raft_rocks::open(dir.path()).expect("open");
        log.blocking_append(entries.clone()).await?;
        for chunk in entries.chunks(7) {
            sm.apply(chunk.to_vec()).await?;
        }
        Ok(())
    })?;
    // Reopened: the applied state and last applied id came back.
    let (_, mut sm) = wisckey_raft_rocks::open(dir.path()).expect("reopen");
    run_fut(async {
        let (applied, _) = sm.applied_state().await?;
        assert_eq!(applied.map(|id| id.index), Some(60));
        Ok(())
    })?;
    assert_eq!(all_pairs(&sm), model);
    for (k, v) in &model {
        assert_eq!(sm.get(k).expect("get").as_deref(), Some(v.as_str()), "key {k}");
    }
    assert_eq!(KvRead::get(&sm, "absent").expect("get"), None);
    // A bounded scan: start inclusive, end exclusive, limit.
    let want: Vec<(String, String)> =
        model.range("k03".to_string().."k09".to_string()).take(3).map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(KvRead::scan(&sm, "k03", Some("k09"), 3).expect("scan"), want);
    assert!(sm.metrics_text().contains("rocksdb_sst_bytes{cf=\"sm_data\"}"));
    Ok(())
}

#[test]
fn an_installed_snapshot_replaces_a_followers_state() -> Result {
    let (leader_dir, follower_dir) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let (entries, model) = workload();
    run_fut(async {
        let (_, mut leader) = wisckey_raft_rocks::open(leader_dir.path()).expect("open");
        leader.apply(entries).await?;
        let snapshot = leader.get_snapshot_builder().await.build_snapshot().await?;
        let (_, mut follower) = wisckey_raft_rocks::open(follower_dir.path()).expect("open");
        // The follower holds keys the snapshot does not.
        follower.apply(vec![entry(1, set("stale", "x")), entry(2, set("k01", "old"))]).await?;
        follower.install_snapshot(&snapshot.meta, snapshot.snapshot).await?;
        assert_eq!(all_pairs(&follower), model);
        let (applied, _) = follower.applied_state().await?;
        assert_eq!(applied.map(|id| id.index), Some(60));
        let current = follower.get_current_snapshot().await?.expect("a current snapshot");
        assert_eq!(current.meta, snapshot.meta);
        Ok(())
    })
}
