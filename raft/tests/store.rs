//! Scenarios of the wisckey Raft store beyond openraft's suite: what survives a reopen of the
//! database (vote, log, purge and truncation, applied state), key-value writes applied against
//! a model, and a snapshot replacing a follower's state whatever it held.
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

mod common;

use std::collections::BTreeMap;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, EntryPayload, LogId, Membership, RaftLogReader, RaftSnapshotBuilder, StorageError, Vote,
};
use wisckey::Options;
use wisckey_raft::{Entry, Request, Response};

type Result<T = ()> = std::result::Result<T, StorageError<u64>>;

/// Run a store future that ends in this file's `Result` (its type fixes the `?`s inside).
fn run(f: impl std::future::Future<Output = Result>) -> Result {
    common::run_fut(f)
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64, payload: EntryPayload<wisckey_raft::TypeConfig>) -> Entry {
    Entry { log_id: log_id(term, index), payload }
}

fn set(term: u64, index: u64, key: &str, value: &str) -> Entry {
    entry(term, index, EntryPayload::Normal(Request::Set { key: key.into(), value: value.into() }))
}

fn delete(term: u64, index: u64, key: &str) -> Entry {
    entry(term, index, EntryPayload::Normal(Request::Delete { key: key.into() }))
}

/// The pairs of served snapshot data, as text.
fn pairs(data: &mut wisckey_raft::SnapshotFile) -> Vec<(String, String)> {
    let pairs = data.pairs().expect("the snapshot's stream checks out");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8");
    pairs.into_iter().map(|(k, v)| (text(k), text(v))).collect()
}

fn two_pairs() -> Vec<(String, String)> {
    vec![("b".into(), "2".into()), ("c".into(), "3".into())]
}

fn open(dir: &std::path::Path) -> (wisckey_raft::LogStore, wisckey_raft::StateMachineStore) {
    wisckey_raft::open(dir, Options::default()).expect("open the Raft store")
}

#[test]
fn vote_log_purge_and_truncation_survive_a_reopen() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    run(async {
        let (mut log, _sm) = open(dir.path());
        let entries: Vec<Entry> = (1..=20).map(|i| set(1 + i / 10, i, &format!("k{i}"), "v")).collect();
        log.blocking_append(entries.clone()).await?;
        log.save_vote(&Vote::new(3, 2)).await?;
        log.purge(log_id(1, 5)).await?;
        log.truncate(log_id(2, 15)).await?;
        Ok(())
    })?;
    run(async {
        let (mut log, _sm) = open(dir.path());
        assert_eq!(log.read_vote().await?, Some(Vote::new(3, 2)));
        let state = log.get_log_state().await?;
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 5)));
        assert_eq!(state.last_log_id, Some(log_id(2, 14)));
        let got: Vec<u64> = log.try_get_log_entries(0..100).await?.iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, (6..=14).collect::<Vec<_>>(), "the purged prefix and truncated suffix are gone");
        let one = log.try_get_log_entries(9..=9).await?;
        assert_eq!(one.len(), 1);
        assert!(matches!(&one[0].payload, EntryPayload::Normal(Request::Set { key, .. }) if key == "k9"));
        // Purging everything leaves the purged id as the last one.
        log.purge(log_id(2, 14)).await?;
        let state = log.get_log_state().await?;
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(2, 14)), Some(log_id(2, 14))));
        assert!(log.try_get_log_entries(..).await?.is_empty());
        Ok(())
    })
}

#[test]
fn applied_writes_match_a_model_and_survive_a_reopen() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut model = BTreeMap::new();
    run(async {
        let (_log, mut sm) = open(dir.path());
        let mut entries = Vec::new();
        for i in 1..=60u64 {
            let key = format!("key{:02}", i % 17);
            if i % 5 == 0 {
                model.remove(&key);
                entries.push(delete(1, i, &key));
            } else {
                model.insert(key.clone(), format!("value{i}"));
                entries.push(set(1, i, &key, &format!("value{i}")));
            }
        }
        let replies = sm.apply(entries[..30].to_vec()).await?;
        assert_eq!(replies[0], Response { value: Some("value1".into()) });
        assert_eq!(replies[4], Response { value: None });
        sm.apply(entries[30..].to_vec()).await?;
        Ok(())
    })?;
    run(async {
        let (_log, mut sm) = open(dir.path());
        assert_eq!(sm.applied_state().await?.0, Some(log_id(1, 60)));
        for i in 0..17 {
            let key = format!("key{i:02}");
            assert_eq!(sm.get(&key).expect("get"), model.get(&key).cloned(), "{key}");
        }
        Ok(())
    })
}

#[test]
fn an_installed_snapshot_replaces_the_followers_state() -> Result {
    let (leader_dir, follower_dir) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    run(async {
        let (_l_log, mut leader) = open(leader_dir.path());
        let (_f_log, mut follower) = open(follower_dir.path());
        let members = Membership::new(vec![[1, 2, 3].into()], None);
        leader
            .apply([
                entry(1, 1, EntryPayload::Membership(members)),
                set(1, 2, "a", "1"),
                set(1, 3, "b", "2"),
                delete(1, 4, "a"),
                set(1, 5, "c", "3"),
            ])
            .await?;
        // The follower holds state the snapshot does not: it must be gone after the install.
        follower.apply([set(1, 1, "x", "9"), set(1, 2, "b", "old")]).await?;

        let built = leader.get_snapshot_builder().await.build_snapshot().await?;
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 5)));
        // Applied after the build: the snapshot's checkpoint must not see it.
        leader.apply([set(1, 6, "d", "after")]).await?;
        let mut current = leader.get_current_snapshot().await?.expect("the built snapshot is current");
        assert_eq!(current.meta, built.meta);
        assert_eq!(pairs(&mut current.snapshot), two_pairs(), "the pairs at the build");

        let mut received = follower.begin_receiving_snapshot().await?;
        common::send_snapshot(&mut current.snapshot, &mut received, 7).await.expect("sent");
        follower.install_snapshot(&built.meta, received).await?;
        Ok(())
    })?;
    run(async {
        let (_f_log, mut follower) = open(follower_dir.path());
        for (key, want) in [("a", None), ("b", Some("2")), ("c", Some("3")), ("x", None)] {
            assert_eq!(follower.get(key).expect("get").as_deref(), want, "{key}");
        }
        let (applied, membership) = follower.applied_state().await?;
        assert_eq!(applied, Some(log_id(1, 5)));
        assert_eq!(membership.log_id(), &Some(log_id(1, 1)));
        let mut current = follower.get_current_snapshot().await?.expect("the installed snapshot is current");
        assert_eq!(current.meta.last_log_id, Some(log_id(1, 5)));
        assert_eq!(pairs(&mut current.snapshot), two_pairs(), "the follower serves what it installed");
        Ok(())
    })
}

/// The snapshot directories under `dir`'s `raft-snapshots/`.
fn snapshot_dirs(dir: &std::path::Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir.join(wisckey_raft::SNAPSHOTS_DIR)).expect("raft-snapshots");
    entries.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect()
}

#[test]
fn a_new_snapshot_lets_the_previous_checkpoint_go_and_an_open_removes_a_leftover() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let big = "v".repeat(5_000);
    run(async {
        let (mut log, mut sm) = open(dir.path());
        for round in 1..=3u64 {
            let entries: Vec<_> = (0..20u64).map(|i| set(1, round * 100 + i, &format!("k{i:02}"), &big)).collect();
            log.blocking_append(entries.clone()).await?;
            sm.apply(entries).await?;
            let built = sm.get_snapshot_builder().await.build_snapshot().await?;
            assert_eq!(built.meta.last_log_id, Some(log_id(1, round * 100 + 19)));
            assert_eq!(snapshot_dirs(dir.path()).len(), 1, "round {round}: only the current checkpoint stays");
        }
        Ok(())
    })?;
    // A build a crash cut short leaves a directory the record does not name.
    std::fs::create_dir(dir.path().join(wisckey_raft::SNAPSHOTS_DIR).join("0-cut-short")).expect("mkdir");
    run(async {
        let (_log, mut sm) = open(dir.path());
        assert_eq!(snapshot_dirs(dir.path()).len(), 1, "the open removes what the record does not name");
        let mut current = sm.get_current_snapshot().await?.expect("current");
        assert_eq!(current.meta.last_log_id, Some(log_id(1, 319)));
        let pairs = pairs(&mut current.snapshot);
        assert_eq!(pairs.len(), 20);
        assert!(pairs.iter().all(|(_, v)| *v == big), "values read back through the checkpoint's references");
        Ok(())
    })
}

#[test]
fn a_snapshot_that_does_not_decode_is_refused_and_changes_nothing() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    run(async {
        let (_log, mut sm) = open(dir.path());
        sm.apply([set(1, 1, "kept", "yes")]).await?;
        let mut meta = sm.get_snapshot_builder().await.build_snapshot().await?.meta;
        meta.last_log_id = Some(log_id(2, 9));
        let mut garbage = sm.begin_receiving_snapshot().await?;
        tokio::io::AsyncWriteExt::write_all(&mut garbage, b"[[\"k\", 1").await.expect("written");
        assert!(sm.install_snapshot(&meta, garbage).await.is_err(), "bytes that are not a stream must be refused");
        assert_eq!(sm.get("kept").expect("get").as_deref(), Some("yes"));
        assert_eq!(sm.applied_state().await?.0, Some(log_id(1, 1)));
        Ok(())
    })
}

/// A log store in `dir` holding entries 1..=400 of term 1, each a 600-byte value (separated),
/// appended 20 at a time: small log files, GC only when asked, so what a purge or truncation
/// makes garbage is visible in one `run_gc`. Also the value written.
fn log_of_400_separated_entries(dir: &std::path::Path) -> Result<(wisckey_raft::LogStore, String)> {
    let options = Options::default()
        .min_separated_value_bytes(100)
        .write_buffer_bytes(16 << 10)
        .log_file_bytes(64 << 10)
        .gc_interval_ms(0);
    let (mut log, _sm) = wisckey_raft::open(dir, options).expect("open");
    let value = "v".repeat(600);
    run(async {
        for chunk in (1..=400u64).collect::<Vec<_>>().chunks(20) {
            log.blocking_append(chunk.iter().map(|&i| set(1, i, &format!("k{i}"), &value))).await?;
        }
        Ok(())
    })?;
    Ok((log, value))
}

#[test]
fn purged_entries_are_garbage_that_value_log_gc_reclaims() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = log_of_400_separated_entries(dir.path())?;
    run(async {
        log.purge(log_id(1, 360)).await?;
        Ok(())
    })?;
    let db = log.db().clone();
    db.flush().expect("flush");
    let report = db.run_gc(0.0).expect("gc");
    assert!(report.files_collected > 0, "purged entries make their log files garbage: {report:?}");
    // 40 of 400 entries are live: GC copies them and no purged one.
    assert!(report.bytes_rewritten * 5 < report.bytes_read, "GC kept purged entries: {report:?}");
    run(async {
        let got: Vec<u64> = log.try_get_log_entries(..).await?.iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, (361..=400).collect::<Vec<_>>());
        Ok(())
    })
}

/// Entries a new leader truncated (never committed, never applied) are garbage too: their
/// values go with them when GC collects their log files, and what is appended after the
/// truncation point is what reads back.
#[test]
fn truncated_entries_are_garbage_that_value_log_gc_reclaims() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, value) = log_of_400_separated_entries(dir.path())?;
    run(async {
        // A new leader of term 2 keeps the first 40 and overwrites the rest of the log.
        log.truncate(log_id(1, 41)).await?;
        log.blocking_append((41..=50u64).map(|i| set(2, i, &format!("n{i}"), &value))).await?;
        Ok(())
    })?;
    let db = log.db().clone();
    db.flush().expect("flush");
    let report = db.run_gc(0.0).expect("gc");
    assert!(report.files_collected > 0, "truncated entries make their log files garbage: {report:?}");
    // 50 of 410 entries are live: GC copies what is live and no truncated entry.
    assert!(report.bytes_rewritten * 4 < report.bytes_read, "GC kept truncated entries: {report:?}");
    run(async {
        let got: Vec<(u64, u64)> =
            log.try_get_log_entries(..).await?.iter().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect();
        let want: Vec<(u64, u64)> = (1..=40).map(|i| (1, i)).chain((41..=50).map(|i| (2, i))).collect();
        assert_eq!(got, want);
        Ok(())
    })
}

/// An install writes the state, then records its checkpoint: a crash between the two leaves an
/// older snapshot recorded while openraft purges the log up to the installed state at the next
/// start. A snapshot behind the purged log is reported as none (openraft then builds one).
#[test]
fn a_recorded_snapshot_behind_the_purged_log_is_reported_as_none() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    run(async {
        let (mut log, mut sm) = open(dir.path());
        let entries: Vec<_> = (1..=6u64).map(|i| set(1, i, &format!("k{i}"), "v")).collect();
        log.blocking_append(entries.clone()).await?;
        sm.apply(entries[..3].to_vec()).await?;
        sm.get_snapshot_builder().await.build_snapshot().await?;
        sm.apply(entries[3..].to_vec()).await?;
        let current = sm.get_current_snapshot().await?.expect("the built snapshot is current");
        assert_eq!(current.meta.last_log_id, Some(log_id(1, 3)));
        log.purge(log_id(1, 6)).await?;
        assert!(sm.get_current_snapshot().await?.is_none(), "a snapshot behind the purged log must not be served");
        let built = sm.get_snapshot_builder().await.build_snapshot().await?;
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 6)));
        assert!(sm.get_current_snapshot().await?.is_some(), "the new build is current");
        Ok(())
    })
}
