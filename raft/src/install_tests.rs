//! Scenarios of a snapshot's travel and install: a state of many install batches served and
//! installed whole, damaged streams refused without a trace, installs a crash cut short
//! finished at the next open (one stopped mid-way, and a crash at every filesystem call), a
//! served snapshot streamed only when read with its checkpoint kept until then, a served
//! snapshot streamed without the snapshots' lock and its file left alone by a build, and a
//! layout-2 snapshot served as a stream.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    AnyError, BasicNode, CommittedLeaderId, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError,
};
use tokio::io::AsyncWriteExt;
use wisckey::fs::{CrashMode, FaultFs, Vfs};
use wisckey::Options;

use super::Plan;
use crate::{meta_key, Entry, LogStore, Request, SnapshotFile, StateMachineStore, META_KEYSPACE, SNAPSHOTS_DIR};

type Result<T = ()> = std::result::Result<T, StorageError<u64>>;
type Model = BTreeMap<String, String>;
type Meta = SnapshotMeta<u64, BasicNode>;

/// Run a store future to its end on this thread (the store's futures never wait).
fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn set(index: u64, key: &str, value: &str) -> Entry {
    let request = Request::Set { key: key.into(), value: value.into() };
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(request) }
}

/// Append and apply `pairs` as one `Set` each from index `first`, 500 a batch; the model
/// follows. Returns the last index.
fn write(
    log: &mut LogStore,
    sm: &mut StateMachineStore,
    model: &mut Model,
    first: u64,
    pairs: Vec<(String, String)>,
) -> Result<u64> {
    let entries: Vec<Entry> = (first..).zip(&pairs).map(|(i, (k, v))| set(i, k, v)).collect();
    for chunk in entries.chunks(500) {
        run(log.blocking_append(chunk.to_vec()))?;
        run(sm.apply(chunk.to_vec()))?;
    }
    model.extend(pairs);
    Ok(first + entries.len() as u64 - 1)
}

fn state(sm: &StateMachineStore) -> Model {
    sm.scan("", None, usize::MAX).expect("the state reads back").into_iter().collect()
}

/// The files of `raft-snapshots/` named `incoming-*`.
fn incoming(vfs: &Arc<dyn Vfs>, db: &Path) -> Vec<String> {
    let names = vfs.list(&db.join(SNAPSHOTS_DIR)).unwrap_or_default();
    names.into_iter().filter(|n| n.starts_with("incoming-")).collect()
}

/// Build a snapshot on `sm` and serve it: its metadata and its stream's bytes.
fn served(sm: &mut StateMachineStore) -> Result<(Meta, Vec<u8>)> {
    run(async { sm.get_snapshot_builder().await.build_snapshot().await })?;
    let mut current = run(sm.get_current_snapshot())?.expect("the built snapshot is current");
    Ok((current.meta, current.snapshot.to_bytes().expect("the stream reads back")))
}

/// `bytes` received into a new incoming file of `sm`, in chunks of 64 KiB as openraft writes them.
fn received(sm: &mut StateMachineStore, bytes: &[u8]) -> Result<Box<SnapshotFile>> {
    let mut data = run(sm.begin_receiving_snapshot())?;
    for chunk in bytes.chunks(64 << 10) {
        run(data.write_all(chunk)).map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?;
    }
    Ok(data)
}

/// `sm/installing`, if recorded.
fn intent(sm: &StateMachineStore) -> Option<wisckey::Value> {
    let meta = sm.db().keyspace(META_KEYSPACE).expect("raft-meta");
    meta.get(meta_key::INSTALLING).expect("read")
}

fn posix() -> Arc<dyn Vfs> {
    Arc::new(wisckey::fs::PosixFs::new())
}

/// `n` pairs `key{i}` of `len`-byte values, tagged so two states differ.
fn pairs(n: usize, len: usize, tag: &str) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("key{i:06}"), format!("{tag}{i}-").repeat(len).chars().take(len).collect())).collect()
}

#[test]
fn a_state_of_many_install_batches_is_served_and_installed_whole() -> Result {
    let (a_dir, b_dir) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    let (mut a_log, mut a) = crate::open(a_dir.path(), Options::default()).expect("open");
    let mut want = Model::new();
    // 20,000 pairs of 1 KiB (referred to in raft-values) and some small ones (inline).
    let last = write(&mut a_log, &mut a, &mut want, 1, pairs(20_000, 1024, "new"))?;
    let small: Vec<_> = (0..500).map(|i| (format!("small{i:04}"), format!("s{i}"))).collect();
    let last = write(&mut a_log, &mut a, &mut want, last + 1, small)?;
    let (meta, bytes) = served(&mut a)?;
    assert_eq!(meta.last_log_id, Some(log_id(last)));
    assert!(bytes.len() > 20_000 * 1024, "the stream holds every value: {} bytes", bytes.len());

    let (mut b_log, mut b) = crate::open(b_dir.path(), Options::default()).expect("open");
    // The follower's own state: keys the snapshot overwrites, and keys it does not hold.
    let mut old = Model::new();
    let last_b = write(&mut b_log, &mut b, &mut old, 1, pairs(300, 2000, "old"))?;
    write(&mut b_log, &mut b, &mut old, last_b + 1, vec![("zzz-only-here".into(), "x".into())])?;
    run(b_log.purge(log_id(last_b)))?;
    let data = received(&mut b, &bytes)?;
    // 1 MiB batches: the 21 MB state takes over twenty.
    b.install_with(&meta, *data, Plan { batch_bytes: 1 << 20, stop_after: None })?;

    assert_eq!(state(&b), want, "the follower's state is the snapshot's");
    assert_eq!(run(b.applied_state())?.0, meta.last_log_id);
    assert_eq!(incoming(&posix(), b_dir.path()), Vec::<String>::new(), "the received file is gone");
    let mut again = run(b.get_current_snapshot())?.expect("the installed snapshot is current");
    assert_eq!(again.meta, meta);
    assert_eq!(again.snapshot.to_bytes().expect("bytes"), bytes, "the follower serves the stream it installed");
    Ok(())
}

#[test]
fn a_flipped_byte_or_a_stream_cut_short_is_refused_and_changes_nothing() -> Result {
    let (a_dir, b_dir) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    let (mut a_log, mut a) = crate::open(a_dir.path(), Options::default()).expect("open");
    let last = write(&mut a_log, &mut a, &mut Model::new(), 1, pairs(200, 3000, "new"))?;
    let (meta, bytes) = served(&mut a)?;
    assert_eq!(meta.last_log_id, Some(log_id(last)));

    let (mut b_log, mut b) = crate::open(b_dir.path(), Options::default()).expect("open");
    let mut old = Model::new();
    let last_b = write(&mut b_log, &mut b, &mut old, 1, pairs(50, 100, "old"))?;
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0x01;
    let damaged = [("a flipped byte", flipped), ("a stream cut short", bytes[..bytes.len() - 5].to_vec())];
    for (what, data) in damaged {
        let data = received(&mut b, &data)?;
        let err = b.install_with(&meta, *data, Plan::default()).expect_err(what);
        assert!(err.to_string().contains("snapshot stream"), "{what}: {err}");
        assert_eq!(state(&b), old, "{what}: the state is unchanged");
        assert_eq!(run(b.applied_state())?.0, Some(log_id(last_b)), "{what}: the applied id is unchanged");
        assert_eq!(incoming(&posix(), b_dir.path()), Vec::<String>::new(), "{what}: its file is gone");
        assert!(intent(&b).is_none(), "{what}: no intent");
    }
    Ok(())
}

/// A small store on the fault-injecting filesystem (tiny memtables and log files, so an
/// install crosses flushes and log rolls).
fn fault_options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .min_separated_value_bytes(64)
        .write_buffer_bytes(8 << 10)
        .log_file_bytes(16 << 10)
        .block_size_bytes(512)
        .gc_interval_ms(0)
}

/// The leader's snapshot for the crash scenarios: its metadata, stream bytes and pairs.
fn leader_snapshot(n: usize) -> Result<(Meta, Vec<u8>, Model)> {
    let fs = FaultFs::in_memory(0);
    let (mut log, mut sm) = crate::open("/leader", fault_options(&fs)).expect("open");
    let mut want = Model::new();
    write(&mut log, &mut sm, &mut want, 1, pairs(n, 100, "new"))?;
    let (meta, bytes) = served(&mut sm)?;
    Ok((meta, bytes, want))
}

/// A follower's stores, the state it holds and its applied id.
type Follower = ((LogStore, StateMachineStore), Model, Option<LogId<u64>>);

/// A follower at `/follower` on `fs` with a state of its own, part of its log purged, and a
/// snapshot of it (whose synced record makes the applies before it durable).
fn follower(fs: &FaultFs) -> Result<Follower> {
    let (mut log, mut sm) = crate::open("/follower", fault_options(fs)).expect("open");
    let mut old = Model::new();
    let last = write(&mut log, &mut sm, &mut old, 1, pairs(30, 150, "old"))?;
    run(log.purge(log_id(last - 5)))?;
    run(async { sm.get_snapshot_builder().await.build_snapshot().await })?;
    Ok(((log, sm), old, Some(log_id(last))))
}

#[test]
fn an_install_a_crash_cut_short_is_finished_at_the_next_open() -> Result {
    let (meta, bytes, want) = leader_snapshot(60)?;
    for mode in [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced] {
        let fs = FaultFs::in_memory(7);
        let ((log, mut sm), old, _) = follower(&fs)?;
        let data = received(&mut sm, &bytes)?;
        // 1 KiB batches: the 6 KB state takes several; the install stops after the first.
        let stopped = sm.install_with(&meta, *data, Plan { batch_bytes: 1 << 10, stop_after: Some(1) });
        assert!(stopped.is_err(), "{mode:?}: the install was to stop");
        assert!(intent(&sm).is_some(), "{mode:?}: the intent is recorded");
        assert_ne!(state(&sm), old, "{mode:?}: the state is part replaced");
        fs.halt();
        drop((log, sm));
        fs.crash(mode).expect("crash");

        let (_log, mut sm) = crate::open("/follower", fault_options(&fs)).expect("the reopen finishes the install");
        assert_eq!(state(&sm), want, "{mode:?}: the state is the snapshot's");
        assert_eq!(run(sm.applied_state())?.0, meta.last_log_id, "{mode:?}");
        assert!(intent(&sm).is_none(), "{mode:?}: the intent is gone");
        let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
        assert_eq!(incoming(&vfs, Path::new("/follower")), Vec::<String>::new(), "{mode:?}: no incoming file is left");
        let mut current = run(sm.get_current_snapshot())?.expect("the resumed install is recorded");
        assert_eq!((current.meta, current.snapshot.to_bytes().expect("bytes")), (meta.clone(), bytes.clone()));
    }
    Ok(())
}

#[test]
fn a_crash_at_every_filesystem_call_of_an_install_leaves_the_old_state_or_the_new() -> Result {
    let (meta, bytes, want) = leader_snapshot(40)?;
    // A clean install's count of filesystem calls.
    let fs = FaultFs::in_memory(1);
    let ((_log, mut sm), _, _) = follower(&fs)?;
    fs.reset_ops_count();
    let data = received(&mut sm, &bytes)?;
    sm.install_with(&meta, *data, Plan { batch_bytes: 1 << 10, stop_after: None })?;
    let total = fs.ops_count();
    let mut finished = 0;
    for at in 0..=total {
        for mode in [CrashMode::DropUnsynced, CrashMode::TearUnsynced, CrashMode::CorruptUnsynced] {
            let ctx = format!("crash after {at} of {total} calls ({mode:?})");
            let fs = FaultFs::in_memory(at);
            let ((log, mut sm), old, old_applied) = follower(&fs)?;
            fs.set_crash_after_ops(at);
            let installed = received(&mut sm, &bytes)
                .and_then(|data| sm.install_with(&meta, *data, Plan { batch_bytes: 1 << 10, stop_after: None }));
            fs.halt();
            drop((log, sm));
            fs.crash(mode).expect("crash");
            let (_log, sm) =
                crate::open("/follower", fault_options(&fs)).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let (got, applied) = (state(&sm), run(sm.clone().applied_state())?.0);
            if installed.is_ok() || got == want {
                assert_eq!((got, applied), (want.clone(), meta.last_log_id), "{ctx}: the new state whole");
                finished += 1;
            } else {
                assert_eq!((got, applied), (old, old_applied), "{ctx}: the old state whole");
            }
            let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
            assert_eq!(incoming(&vfs, Path::new("/follower")), Vec::<String>::new(), "{ctx}: no incoming file is left");
            assert!(intent(&sm).is_none(), "{ctx}: no intent is left");
        }
    }
    assert!(
        finished > 0 && finished < 3 * (total + 1),
        "both outcomes occur ({finished} finished of {})",
        3 * (total + 1)
    );
    eprintln!("{} crashes over {total} filesystem calls of an install", 3 * (total + 1));
    Ok(())
}

/// The checkpoints in `raft-snapshots/` of the store at `db` on `fs`.
fn checkpoints(fs: &FaultFs, db: &str) -> usize {
    let names = fs.list(&Path::new(db).join(SNAPSHOTS_DIR)).unwrap_or_default();
    names.iter().filter(|n| n.starts_with(|c: char| c.is_ascii_digit())).count()
}

#[test]
fn a_served_snapshot_is_streamed_when_read_and_its_checkpoint_outlives_a_newer_build() -> Result {
    let fs = FaultFs::in_memory(3);
    let (mut log, mut sm) = crate::open("/node", fault_options(&fs)).expect("open");
    let mut first = Model::new();
    let last = write(&mut log, &mut sm, &mut first, 1, pairs(50, 100, "one"))?;
    run(async { sm.get_snapshot_builder().await.build_snapshot().await })?;
    // openraft asks for the current snapshot at every start for its metadata alone.
    let mut served = run(sm.get_current_snapshot())?.expect("the built snapshot is current");
    assert!(format!("{:?}", served.snapshot).contains("pending"), "nothing streamed yet: {:?}", served.snapshot);
    let mut second = first.clone();
    write(&mut log, &mut sm, &mut second, last + 1, pairs(10, 100, "two"))?;
    run(async { sm.get_snapshot_builder().await.build_snapshot().await })?;
    assert_eq!(checkpoints(&fs, "/node"), 2, "the served snapshot's checkpoint stays while it is not streamed");
    let text = |(k, v): (Vec<u8>, Vec<u8>)| {
        (String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned())
    };
    let got: Model = served.snapshot.pairs().expect("streamed").into_iter().map(text).collect();
    assert_eq!(got, first, "the served snapshot holds the state at its build, not the newer one");
    assert_ne!(first, second);
    drop(served);
    run(async { sm.get_snapshot_builder().await.build_snapshot().await })?;
    assert_eq!(checkpoints(&fs, "/node"), 1, "once streamed and dropped, the next record lets it go");
    let mut current = run(sm.get_current_snapshot())?.expect("current");
    let got: Model = current.snapshot.pairs().expect("streamed").into_iter().map(text).collect();
    assert_eq!(got, second);
    Ok(())
}

#[test]
fn a_served_snapshot_streams_while_a_build_holds_the_snapshots_lock_and_a_build_leaves_its_file() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, mut sm) = crate::open(dir.path(), Options::default()).expect("open");
    let mut want = Model::new();
    write(&mut log, &mut sm, &mut want, 1, pairs(200, 100, "one"))?;
    run(async { sm.get_snapshot_builder().await.build_snapshot().await })?;
    let mut served = run(sm.get_current_snapshot())?.expect("the built snapshot is current");
    // A build (or an install's record, or another serve) holds the lock: the stream of the
    // whole state does not wait for it, nor it for the stream (the pin keeps the checkpoint).
    let held = sm.shared().snapshots.hold();
    let (tx, rx) = std::sync::mpsc::channel();
    let streaming = std::thread::spawn(move || {
        let pairs = served.snapshot.pairs();
        let _ = tx.send(());
        pairs
    });
    let streamed = rx.recv_timeout(std::time::Duration::from_secs(20));
    drop(held);
    let pairs = streaming.join().expect("the stream's thread").expect("streamed");
    assert!(streamed.is_ok(), "the stream waited for the snapshots lock");
    let text =
        |(k, v): (Vec<u8>, Vec<u8>)| (String::from_utf8(k).expect("UTF-8"), String::from_utf8(v).expect("UTF-8"));
    assert_eq!(pairs.into_iter().map(text).collect::<Model>(), want);
    // A stream being written to be served is left alone by a build; an open removes one a
    // crash left.
    let leftover = dir.path().join(SNAPSHOTS_DIR).join("serving-00000000000000000001-1");
    std::fs::write(&leftover, b"being written").expect("write");
    run(async { sm.get_snapshot_builder().await.build_snapshot().await })?;
    assert!(leftover.exists(), "a build removed a stream being served");
    drop((log, sm));
    let _reopened = crate::open(dir.path(), Options::default()).expect("open");
    assert!(!leftover.exists(), "an open removes a served stream a crash left");
    Ok(())
}

#[test]
fn a_layout_2_snapshot_kept_as_json_is_served_as_a_stream() -> Result {
    let dir = tempfile::tempdir().expect("temp dir");
    let legacy = vec![("a".to_string(), "1".to_string()), ("b".to_string(), "two".to_string())];
    let meta = Meta { last_log_id: Some(log_id(7)), snapshot_id: "legacy".into(), ..Meta::default() };
    {
        let (_log, sm) = crate::open(dir.path(), Options::default()).expect("open");
        // What layout 2 kept: the snapshot's data itself, as JSON, and no checkpoint.
        let ks = sm.db().keyspace(META_KEYSPACE).expect("raft-meta");
        ks.put(meta_key::FORMAT, "2").expect("put");
        ks.put(meta_key::SNAPSHOT_META, serde_json::to_vec(&meta).expect("JSON")).expect("put");
        ks.put(meta_key::SNAPSHOT_DATA, serde_json::to_vec(&legacy).expect("JSON")).expect("put");
    }
    let (_log, mut sm) = crate::open(dir.path(), Options::default()).expect("a layout-2 store opens");
    let ks = sm.db().keyspace(META_KEYSPACE).expect("raft-meta");
    assert_eq!(ks.get(meta_key::FORMAT).expect("get").as_deref(), Some(&b"4"[..]), "moved to layout 4");
    let mut served = run(sm.get_current_snapshot())?.expect("the layout-2 snapshot is current");
    assert_eq!(served.meta, meta);
    let pairs = served.snapshot.pairs().expect("a stream");
    let want: Vec<_> = legacy.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
    assert_eq!(pairs, want);
    Ok(())
}

/// openraft purges the log up to a snapshot's last entry as soon as it hands the snapshot to
/// the state machine, beside the install. Were that purge to land and the install fail (or a
/// crash come before its intent), the node would restart with its state at A and its log gone
/// past A. The purge stops at the applied entry while an install runs; the install's last
/// batch purges the rest.
#[test]
fn a_purge_beside_an_install_stops_at_the_applied_entry_and_the_install_purges_the_rest() -> Result {
    use openraft::storage::RaftLogReader;
    let (a_dir, b_dir) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    let (mut a_log, mut a) = crate::open(a_dir.path(), Options::default()).expect("open");
    let mut want = Model::new();
    let last = write(&mut a_log, &mut a, &mut want, 1, pairs(200, 300, "new"))?;
    let (meta, bytes) = served(&mut a)?;

    let (mut b_log, mut b) = crate::open(b_dir.path(), Options::default()).expect("open");
    let mut old = Model::new();
    let applied = write(&mut b_log, &mut b, &mut old, 1, pairs(50, 100, "old"))?;
    // Entries appended but not applied yet.
    let appended: Vec<Entry> = (applied + 1..=applied + 10).map(|i| set(i, "pending", "p")).collect();
    run(b_log.blocking_append(appended))?;
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 3] ^= 0x08;
    let data = received(&mut b, &flipped)?;
    run(b_log.purge(log_id(last)))?;
    let kept =
        |log: &mut LogStore| -> Result<usize> { Ok(run(log.try_get_log_entries(applied + 1..applied + 11))?.len()) };
    assert_eq!(
        run(b_log.get_log_state())?.last_purged_log_id,
        Some(log_id(applied)),
        "purged to the applied entry only"
    );
    assert_eq!(kept(&mut b_log)?, 10, "the entries past the applied one stay");
    b.install_with(&meta, *data, Plan::default()).expect_err("a damaged stream is refused");
    drop((b_log, b));

    let (mut b_log, mut b) = crate::open(b_dir.path(), Options::default()).expect("reopen");
    assert_eq!(run(b.applied_state())?.0, Some(log_id(applied)));
    assert_eq!(state(&b), old, "the old state");
    let log_state = run(b_log.get_log_state())?;
    assert_eq!(
        (log_state.last_purged_log_id, log_state.last_log_id),
        (Some(log_id(applied)), Some(log_id(applied + 10)))
    );
    assert_eq!(kept(&mut b_log)?, 10, "the node can apply again after the failed install");

    let data = received(&mut b, &bytes)?;
    run(b_log.purge(log_id(last)))?;
    b.install_with(&meta, *data, Plan::default())?;
    assert_eq!(state(&b), want);
    assert_eq!(run(b.applied_state())?.0, Some(log_id(last)));
    let log_state = run(b_log.get_log_state())?;
    assert_eq!((log_state.last_purged_log_id, log_state.last_log_id), (Some(log_id(last)), Some(log_id(last))));
    // A purge after the install is an ordinary one again.
    run(b_log.purge(log_id(last)))?;
    assert_eq!(run(b_log.get_log_state())?.last_purged_log_id, Some(log_id(last)));
    Ok(())
}
