//! Values written once: a `Set`'s value is stored when its log entry is appended and the state
//! refers to it. These scenarios check, against a model, that the state reads back right
//! through purges, truncations, snapshot installs and reopens, that `raft-values` holds
//! exactly the values the unpurged log or the state still needs (none leaked, none missing),
//! and that a value costs the log one write, not two.
// The error type is openraft's `StorageError`, which its storage traits fix.
#![allow(clippy::result_large_err)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::run_fut;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, StorageError};
use wisckey::{Options, ReadOptions};
use wisckey_raft::{Entry, LogStore, Request, StateMachineStore, VALUES_KEYSPACE};

type Result<T = ()> = std::result::Result<T, StorageError<u64>>;

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn entry(index: u64, request: Request) -> Entry {
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(request) }
}

/// Separated values from 64 bytes: the long values below are referred to, the short ones
/// copied into the state.
fn options() -> Options {
    Options::default().min_separated_value_bytes(64).write_buffer_bytes(64 << 10).log_file_bytes(256 << 10)
}

fn open(dir: &Path) -> (LogStore, StateMachineStore) {
    wisckey_raft::open(dir, options()).expect("open the Raft store")
}

/// A tiny deterministic generator (xorshift), so a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random `Set`, `Delete` or `Batch` of them over 12 keys; values long (referred to) or
/// short (copied).
fn random_request(rng: &mut Rng, index: u64) -> Request {
    let one = |rng: &mut Rng, n: u64| {
        let key = format!("k{:02}", rng.below(12));
        if rng.below(4) == 0 {
            Request::Delete { key }
        } else {
            let len = if rng.below(3) == 0 { 10 } else { 200 + rng.below(300) as usize };
            Request::Set { key, value: format!("{index}.{n}:").repeat(1 + len / 8) }
        }
    };
    if rng.below(3) == 0 {
        Request::Batch((0..1 + rng.below(4)).map(|n| one(rng, n)).collect())
    } else {
        one(rng, 0)
    }
}

/// Apply `request` to the model.
fn apply_model(model: &mut BTreeMap<String, String>, request: &Request) {
    match request {
        Request::Set { key, value } => {
            model.insert(key.clone(), value.clone());
        }
        Request::Delete { key } => {
            model.remove(key);
        }
        Request::Batch(ops) => ops.iter().for_each(|op| apply_model(model, op)),
    }
}

/// The `raft-values` keys (index, position) the database holds.
fn stored_values(log: &LogStore) -> BTreeSet<(u64, u32)> {
    let ks = log.db().keyspace(VALUES_KEYSPACE).expect("the values keyspace");
    ks.scan(&ReadOptions::default())
        .expect("scan")
        .map(|item| {
            let (k, _) = item.expect("read");
            let index = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
            let pos = u32::from_be_bytes(k[8..12].try_into().expect("4 bytes"));
            (index, pos)
        })
        .collect()
}

/// The positions of the `Set`s of `request`, with their keys and values, depth first.
fn sets_of(request: &Request, out: &mut Vec<(String, String)>) {
    match request {
        Request::Set { key, value } => out.push((key.clone(), value.clone())),
        Request::Delete { .. } => {}
        Request::Batch(ops) => ops.iter().for_each(|op| sets_of(op, out)),
    }
}

/// The store against the model: every key reads back, a scan gives the model, unpurged log
/// entries (`appended`) read back whole, and `raft-values` holds exactly the long values the unpurged log
/// holds plus those the state's keys hold (the newest long `Set` of each live key, found in
/// `history`, every entry ever applied).
fn check(
    log: &mut LogStore,
    sm: &StateMachineStore,
    model: &BTreeMap<String, String>,
    appended: &BTreeMap<u64, Entry>,
    history: &BTreeMap<u64, Entry>,
    purged: u64,
    ctx: &str,
) -> Result {
    for i in 0..12 {
        let key = format!("k{i:02}");
        assert_eq!(sm.get(&key).expect("get"), model.get(&key).cloned(), "{ctx}: {key}");
    }
    let scanned = sm.scan("", None, 100).expect("scan");
    let want: Vec<(String, String)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scanned, want, "{ctx}: scan");
    let got = run_fut(log.try_get_log_entries(purged + 1..))?;
    let want: Vec<Entry> = appended.range(purged + 1..).map(|(_, e)| e.clone()).collect();
    assert_eq!(got, want, "{ctx}: the unpurged log reads back whole");

    let mut needed = BTreeSet::new();
    let mut newest_set: BTreeMap<String, (u64, u32, usize)> = BTreeMap::new();
    for (&index, e) in history {
        let EntryPayload::Normal(request) = &e.payload else { continue };
        let mut sets = Vec::new();
        sets_of(request, &mut sets);
        for (pos, (key, value)) in sets.into_iter().enumerate() {
            if index > purged {
                needed.insert((index, pos as u32));
            }
            newest_set.insert(key, (index, pos as u32, value.len()));
        }
        // A delete after a set drops it from the state.
        let mut last: BTreeMap<&str, bool> = BTreeMap::new();
        flatten_last(request, &mut last);
        for (key, is_set) in last {
            if !is_set {
                newest_set.remove(key);
            }
        }
    }
    for (key, (index, pos, len)) in newest_set {
        if model.contains_key(&key) && len >= 64 {
            needed.insert((index, pos));
        }
    }
    assert_eq!(stored_values(log), needed, "{ctx}: raft-values holds exactly what the log or state needs");
    Ok(())
}

/// Whether each key's last op in `request` is a set (`true`) or a delete.
fn flatten_last<'r>(request: &'r Request, out: &mut BTreeMap<&'r str, bool>) {
    match request {
        Request::Set { key, .. } => {
            out.insert(key, true);
        }
        Request::Delete { key } => {
            out.insert(key, false);
        }
        Request::Batch(ops) => ops.iter().for_each(|op| flatten_last(op, out)),
    }
}

#[test]
fn the_state_and_the_kept_values_match_a_model_through_purges_truncations_and_reopens() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rng = Rng(0x5eed_1234_abcd);
    let mut model = BTreeMap::new();
    let mut appended = BTreeMap::new();
    let mut history = BTreeMap::new();
    let (mut applied, mut purged) = (0u64, 0u64);
    let (mut log, mut sm) = open(dir.path());
    for round in 0..120 {
        let ctx = format!("round {round}");
        // Append a few entries; sometimes some of them are truncated away before they apply.
        let n = 1 + rng.below(5);
        let entries: Vec<Entry> = (applied + 1..=applied + n).map(|i| entry(i, random_request(&mut rng, i))).collect();
        run_fut(log.blocking_append(entries.clone()))?;
        let keep = if rng.below(4) == 0 { rng.below(n) } else { n };
        if keep < n {
            run_fut(log.truncate(log_id(applied + keep + 1)))?;
        }
        let entries: Vec<Entry> = entries.into_iter().take(keep as usize).collect();
        for e in &entries {
            appended.insert(e.log_id.index, e.clone());
            history.insert(e.log_id.index, e.clone());
            if let EntryPayload::Normal(r) = &e.payload {
                apply_model(&mut model, r);
            }
        }
        // Apply what is applied, as openraft hands it over: read back from the log.
        if keep > 0 {
            let from_log = run_fut(log.try_get_log_entries(applied + 1..=applied + keep))?;
            assert_eq!(from_log, entries, "{ctx}: the appended entries read back");
            run_fut(sm.apply(from_log))?;
            applied += keep;
        }
        if rng.below(5) == 0 && applied > purged {
            purged = purged + 1 + rng.below(applied - purged);
            run_fut(log.purge(log_id(purged)))?;
            appended.retain(|&i, _| i > purged);
        }
        if rng.below(15) == 0 {
            drop((log, sm));
            (log, sm) = open(dir.path());
        }
        check(&mut log, &sm, &model, &appended, &history, purged, &ctx)?;
    }
    Ok(())
}

#[test]
fn a_snapshot_install_drops_the_values_only_the_old_state_held() -> Result {
    let (a_dir, b_dir) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    let long = |tag: &str| tag.repeat(100);
    let (mut a_log, mut a) = open(a_dir.path());
    let (mut b_log, mut b) = open(b_dir.path());
    run_fut(async {
        let first = [entry(1, Request::Set { key: "x".into(), value: long("A") })];
        a_log.blocking_append(first.clone()).await?;
        a.apply(first).await?;
        // The follower's own history: referred values, some of them in purged entries.
        let own = [
            entry(1, Request::Set { key: "old".into(), value: long("o") }),
            entry(2, Request::Set { key: "x".into(), value: long("b") }),
            entry(3, Request::Set { key: "y".into(), value: long("y") }),
        ];
        b_log.blocking_append(own.clone()).await?;
        b.apply(own).await?;
        b_log.purge(log_id(2)).await?;
        assert_eq!(stored_values(&b_log), BTreeSet::from([(1, 0), (2, 0), (3, 0)]), "all three are referred to");
        a.get_snapshot_builder().await.build_snapshot().await?;
        let mut sent = a.get_current_snapshot().await?.expect("the built snapshot is current");
        let mut received = b.begin_receiving_snapshot().await?;
        common::send_snapshot(&mut sent.snapshot, &mut received, 1 << 20).await.expect("sent");
        b.install_snapshot(&sent.meta, received).await?;
        // Entries 1 and 2 are purged and nothing refers to their values any more; entry 3 is
        // still in the log, which keeps its value until it is purged.
        assert_eq!(stored_values(&b_log), BTreeSet::from([(3, 0)]));
        b_log.purge(log_id(3)).await?;
        assert_eq!(stored_values(&b_log), BTreeSet::new());
        assert_eq!(b.get("x").expect("get"), Some(long("A")));
        assert_eq!(b.get("old").expect("get"), None);
        Ok(())
    })
}

#[test]
fn a_separated_value_costs_the_log_one_write_not_two() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, mut sm) = open(dir.path());
    let value = "v".repeat(4096);
    let n = 400u64;
    let before = log.db().stats().log_bytes_written;
    run_fut(async {
        for chunk in (1..=n).collect::<Vec<_>>().chunks(8) {
            let entries: Vec<Entry> = chunk
                .iter()
                .map(|&i| entry(i, Request::Set { key: format!("key{i:05}"), value: value.clone() }))
                .collect();
            log.blocking_append(entries.clone()).await?;
            sm.apply(entries).await?;
        }
        Ok::<(), StorageError<u64>>(())
    })?;
    let written = log.db().stats().log_bytes_written - before;
    let values = n * 4096;
    // Appending writes each value once, with a small entry beside it; applying writes a
    // 13-byte reference. Copying the value into the state would make this above 2.
    assert!(
        written < values * 5 / 4,
        "the log took {written} bytes for {values} bytes of values: a value was written twice"
    );
    assert_eq!(sm.get("key00007").expect("get"), Some(value));
    Ok(())
}

#[test]
fn a_database_of_an_earlier_layout_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let db = wisckey::Db::open(dir.path(), Options::default()).expect("open");
        let state = db.open_keyspace(wisckey_raft::STATE_KEYSPACE, Options::default()).expect("keyspace");
        state.put("k", "a value stored as it is").expect("put");
    }
    let err = wisckey_raft::open(dir.path(), Options::default()).expect_err("an earlier layout is refused");
    assert!(err.to_string().contains("layout"), "{err}");
}
