//! A crash after every filesystem call of a Raft store's life — appends (synced), applies,
//! purges, truncations, snapshot builds (checkpoints, synced), a vote, flushes and value-log GC — in each crash mode (unsynced data
//! dropped, torn, corrupted): what the store shows after recovery is what it showed after
//! some prefix of the steps, and that prefix holds every step whose success promised
//! durability. The observed state includes the `raft-values` keys, so a crash that leaks a
//! value or takes one away from the log or the state fails it.
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::run_fut;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, StorageError, Vote};
use wisckey::fs::{CrashMode, FaultFs};
use wisckey::{Options, ReadOptions};
use wisckey_raft::{Entry, LogStore, Request, StateMachineStore, VALUES_KEYSPACE};

const DB: &str = "/raft-crash";

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn set(index: u64, key: &str, len: usize) -> Entry {
    let value = format!("{index}{key}").repeat(1 + len);
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(Request::Set { key: key.into(), value }) }
}

fn batch(index: u64) -> Entry {
    let ops = vec![
        Request::Set { key: "b".into(), value: "batched".repeat(40) },
        Request::Delete { key: "a".into() },
        Request::Set { key: "c".into(), value: "small".into() },
    ];
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(Request::Batch(ops)) }
}

/// A step of the store's life; `true` in `durable` when its success promises durability.
#[derive(Debug)]
enum Step {
    Append(Vec<Entry>),
    Apply(Vec<Entry>),
    Purge(u64),
    Truncate(u64),
    Snapshot,
    Vote(u64),
    /// Flush the memtables to tables (the store's state does not change).
    Flush,
    /// Collect the value log (moves the values that stay, frees the purged ones).
    Gc,
}

impl Step {
    fn durable(&self) -> bool {
        matches!(self, Step::Append(_) | Step::Vote(_) | Step::Flush | Step::Snapshot)
    }
}

fn script() -> Vec<Step> {
    let first: Vec<Entry> = vec![set(1, "a", 300), set(2, "b", 10), set(3, "a", 500), batch(4), set(5, "d", 200)];
    let second: Vec<Entry> = vec![set(6, "b", 400), set(7, "e", 300), set(8, "x", 300)];
    let replaced: Vec<Entry> = vec![set(8, "a", 250), set(9, "d", 300)];
    vec![
        Step::Append(first[..3].to_vec()),
        Step::Apply(first[..2].to_vec()),
        Step::Append(first[3..].to_vec()),
        Step::Apply(first[2..].to_vec()),
        Step::Vote(2),
        Step::Append(second.clone()),
        Step::Purge(3),
        Step::Apply(second[..2].to_vec()),
        Step::Truncate(8),
        Step::Append(replaced.clone()),
        Step::Flush,
        Step::Snapshot,
        Step::Apply(replaced),
        Step::Purge(8),
        Step::Flush,
        Step::Gc,
        Step::Append(vec![set(10, "f", 300)]),
        Step::Apply(vec![set(10, "f", 300)]),
        // A second snapshot: its record replaces the first's, whose checkpoint goes.
        Step::Snapshot,
    ]
}

fn options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .min_separated_value_bytes(64)
        .write_buffer_bytes(8 << 10)
        .log_file_bytes(16 << 10)
        .block_size_bytes(512)
        .gc_interval_ms(0)
}

type Stores = (LogStore, StateMachineStore);

fn run_step(stores: &mut Stores, step: &Step) -> Result<(), StorageError<u64>> {
    let (log, sm) = stores;
    run_fut(async {
        match step {
            Step::Append(entries) => log.blocking_append(entries.clone()).await,
            Step::Apply(entries) => sm.apply(entries.clone()).await.map(|_| ()),
            Step::Purge(i) => log.purge(log_id(*i)).await,
            Step::Truncate(i) => log.truncate(log_id(*i)).await,
            Step::Snapshot => sm.get_snapshot_builder().await.build_snapshot().await.map(|_| ()),
            Step::Vote(term) => log.save_vote(&Vote::new(*term, 1)).await,
            Step::Flush => log.db().flush().map_err(io),
            Step::Gc => log.db().run_gc(0.0).map(|_| ()).map_err(io),
        }
    })
}

fn io(e: wisckey::Error) -> StorageError<u64> {
    openraft::StorageIOError::write(openraft::AnyError::new(&e)).into()
}

/// What a store shows: its vote, log (entries read back whole), purged and applied ids, the
/// state's pairs and the `raft-values` keys held.
#[derive(Debug, PartialEq, Clone)]
struct Seen {
    vote: Option<Vote<u64>>,
    log: Vec<Entry>,
    purged: Option<u64>,
    applied: Option<u64>,
    pairs: Vec<(String, String)>,
    values: BTreeSet<Vec<u8>>,
    /// The current snapshot's last index and data (streamed out of its checkpoint).
    snapshot: Option<(Option<u64>, Vec<u8>)>,
}

fn seen(stores: &mut Stores) -> Seen {
    let (log, sm) = stores;
    run_fut(async {
        let state = log.get_log_state().await.expect("log state");
        let entries = log.try_get_log_entries(..).await.expect("the log reads back whole");
        let applied = sm.applied_state().await.expect("applied").0.map(|id| id.index);
        let values = log.db().keyspace(VALUES_KEYSPACE).expect("values keyspace");
        let values = values.scan(&ReadOptions::default()).expect("scan").map(|kv| kv.expect("read").0).collect();
        let snapshot = sm.get_current_snapshot().await.expect("the current snapshot reads back whole");
        let snapshot = snapshot.map(|mut s| {
            (s.meta.last_log_id.map(|id| id.index), s.snapshot.to_bytes().expect("the snapshot's stream reads back"))
        });
        Seen {
            snapshot,
            vote: log.read_vote().await.expect("vote"),
            log: entries,
            purged: state.last_purged_log_id.map(|id| id.index),
            applied,
            pairs: sm.scan("", None, usize::MAX).expect("the state reads back whole"),
            values,
        }
    })
}

#[test]
fn a_crash_at_every_filesystem_call_of_appends_applies_purges_and_snapshots_keeps_a_whole_prefix() {
    let steps = script();
    // The reference: what a clean run shows after each step, and how many calls it makes.
    let clean = FaultFs::in_memory(1);
    let mut stores = wisckey_raft::open(DB, options(&clean)).expect("open");
    let mut states = vec![seen(&mut stores)];
    for step in &steps {
        run_step(&mut stores, step).expect("clean run");
        states.push(seen(&mut stores));
    }
    let total = clean.ops_count();
    drop(stores);

    let modes = [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced];
    let stride = (total / 150).max(1);
    let mut checked = 0;
    let points = (0..=total).step_by(stride as usize).flat_map(|at| modes.iter().map(move |&m| (at, m)));
    for (i, (at, mode)) in points.enumerate() {
        let fs = FaultFs::in_memory(i as u64);
        fs.set_crash_after_ops(at);
        let mut floor = 0;
        if let Ok(mut stores) = wisckey_raft::open(DB, options(&fs)) {
            for (n, step) in steps.iter().enumerate() {
                match run_step(&mut stores, step) {
                    Ok(()) if step.durable() => floor = n + 1,
                    Ok(()) => {}
                    Err(e) => {
                        assert!(fs.is_halted(), "crash point {at}: {step:?} failed without a fault: {e}");
                        break;
                    }
                }
            }
        }
        fs.halt();
        fs.crash(mode).expect("crash");
        let ctx = format!("crash point {at} of {total} ({mode:?})");
        let mut stores = wisckey_raft::open(DB, options(&fs)).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let got = seen(&mut stores);
        assert!(
            (floor..states.len()).any(|j| states[j] == got),
            "{ctx}: recovered {got:#?}, which no prefix of the steps holding the first {floor} shows"
        );
        checked += 1;
    }
    assert!(checked > 300, "only {checked} crashes");
    eprintln!("{checked} crashes over {total} filesystem calls");
}
