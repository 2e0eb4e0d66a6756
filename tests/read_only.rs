//! Read-only handles: one opened in a child process reads the database exactly as it was when
//! it opened while the parent overwrites, compacts and collects everything it reads; the
//! writer deletes and punches nothing while it is registered and catches up once it closes;
//! writes through a read-only handle fail with `Error::ReadOnly`; a second read-write open
//! still gets `Error::Locked` naming the lock file. Backups: incremental, restored exactly,
//! damage in a backup found at restore.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::{assert_view_matches, make_value, Model};
use wisckey::fs::{MemFs, PosixFs, Vfs};
use wisckey::{Db, Error, Options, ReadOptions, WriteBatch, WriteOptions};

/// The environment variable that turns this test binary into the child reader.
const CHILD_DIR: &str = "WISCKEY_READ_ONLY_CHILD_DIR";

fn options() -> Options {
    Options::default()
        .min_separated_value_bytes(64)
        .write_buffer_bytes(32 << 10)
        .target_file_size_bytes(16 << 10)
        .max_bytes_for_level_base(64 << 10)
        .log_file_bytes(32 << 10)
        .gc_chunk_bytes(16 << 10)
        .gc_interval_ms(0)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

/// Round `round` of values for keys `0..n` (every seventh key deleted in odd rounds).
fn write_round(db: &Db, model: &mut Model, round: u64, n: u32) {
    for i in 0..n {
        let k = key(i);
        if round % 2 == 1 && i % 7 == 0 {
            db.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            let v = make_value(&k, round * 10_000 + u64::from(i), 100 + (i as usize % 5) * 100);
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
    }
}

/// Names of the table and value files in `dir`.
fn data_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sst") || n.ends_with(".vlog") || n.ends_with(".cold"))
        .collect();
    names.sort();
    names
}

/// The child: open read-only, check the model the parent wrote (keys `0..n` of round 0), say
/// "ready", wait for "check", check the same model again (the parent has overwritten and
/// collected everything since), try what a read-only handle must refuse, and exit.
fn child_reader(dir: &Path) {
    let n: u32 = std::env::var("WISCKEY_READ_ONLY_CHILD_KEYS").ok().and_then(|s| s.parse().ok()).expect("key count");
    let mut model = Model::new();
    let reader = Db::open_read_only(dir, options()).expect("child: open read-only");
    // Rebuild the parent's round-0 model from the values' own description.
    for i in 0..n {
        let k = key(i);
        model.insert(k.clone(), make_value(&k, u64::from(i), 100 + (i as usize % 5) * 100));
    }
    assert_view_matches(&reader, &ReadOptions::default(), &model, "child, at open");
    println!("child-reader-ready");
    std::io::stdout().flush().expect("flush stdout");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("read stdin");
    assert_eq!(line.trim(), "check");
    assert_view_matches(&reader, &ReadOptions::default(), &model, "child, after the writer went on");
    let report = reader.verify().expect("child: verify");
    assert!(report.is_healthy(), "child: {report}");
    assert!(matches!(reader.put(b"x", b"y"), Err(Error::ReadOnly { .. })));
    match Db::open(dir, options()) {
        Err(Error::Locked { path }) => assert!(path.ends_with("LOCK"), "the error names {path:?}"),
        other => panic!("child: a second read-write open must fail with Locked: {:?}", other.err()),
    }
    drop(reader);
    println!("child-reader-done");
}

#[test]
fn a_child_reader_sees_the_database_as_it_opened_while_the_writer_overwrites_and_collects() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        return child_reader(Path::new(&dir));
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let n = 400;
    let db = Db::open(&dir, options()).expect("open");
    let mut model = Model::new();
    write_round(&db, &mut model, 0, n);
    // Some of round 0 in tables, the rest only in the log: the child replays that part.
    db.flush().expect("flush");
    for i in 0..40 {
        db.put(key(i), make_value(&key(i), u64::from(i), 100 + (i as usize % 5) * 100)).expect("rewrite");
    }
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_child_reader_sees_the_database_as_it_opened_while_the_writer_overwrites_and_collects",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, &dir)
        .env("WISCKEY_READ_ONLY_CHILD_KEYS", n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child reader");
    let mut out = BufReader::new(child.stdout.take().expect("child stdout"));
    let wait_for = |out: &mut BufReader<_>, want: &str| loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).expect("child output") > 0, "the child ended before {want:?}");
        // libtest may print the test's name on the same line first.
        if line.trim_end().ends_with(want) {
            return;
        }
    };
    wait_for(&mut out, "child-reader-ready");
    let files_while_reading = data_files(&dir);
    // Everything the child reads becomes garbage, is compacted away and collected.
    for round in 1..5 {
        write_round(&db, &mut model, round, n);
        db.flush().expect("flush");
    }
    db.compact_range(None, None).expect("compact");
    let gc = db.run_gc(0.0).expect("gc");
    assert!(gc.files_collected > 0, "GC must collect files the reader uses: {gc:?}");
    let kept = data_files(&dir);
    let missing: Vec<_> = files_while_reading.iter().filter(|f| !kept.contains(f)).collect();
    assert!(missing.is_empty(), "files deleted while a reader was registered: {missing:?}");
    let mut stdin = child.stdin.take().expect("child stdin");
    writeln!(stdin, "check").expect("tell the child");
    wait_for(&mut out, "child-reader-done");
    assert!(child.wait().expect("child exit").success(), "the child reader failed");
    // The reader is gone: the next sweep deletes what it kept.
    db.flush().and_then(|_| db.wait_for_background_work()).expect("settle");
    db.put(b"after", b"reader").and_then(|_| db.flush()).expect("flush");
    let now = data_files(&dir);
    assert!(now.len() < kept.len(), "obsolete files stayed after the reader left: {} then {}", kept.len(), now.len());
    assert_view_matches(
        &db,
        &ReadOptions::default(),
        &{
            let mut m = model.clone();
            m.insert(b"after".to_vec(), b"reader".to_vec());
            m
        },
        "writer",
    );
}

#[test]
fn a_read_only_handle_refuses_every_change_and_opens_beside_the_writer() {
    let fs = Arc::new(MemFs::new());
    let opts = || options().vfs(fs.clone());
    let db = Db::open("/db", opts()).expect("open");
    db.put_opt(&WriteOptions::synced(), b"a", b"1").expect("put");
    let ro = Db::open_read_only("/db", opts()).expect("read-only beside the writer");
    let ro2 = Db::open_read_only("/db", opts()).expect("a second reader");
    assert!(ro.is_read_only() && !db.is_read_only());
    db.put(b"a", b"2").expect("the writer goes on");
    assert_eq!(ro.get(b"a").expect("get").as_deref(), Some(&b"1"[..]), "the reader keeps its view");
    assert_eq!(ro2.get(b"a").expect("get").as_deref(), Some(&b"1"[..]));
    let refused = |r: wisckey::Result<()>, op: &str| match r {
        Err(Error::ReadOnly { op: o, .. }) => assert_eq!(o, op),
        other => panic!("{op} on a read-only handle: {other:?}"),
    };
    refused(ro.put(b"b", b"x"), "write");
    refused(ro.delete(b"a"), "write");
    let mut batch = WriteBatch::new();
    batch.put(b"c", b"y");
    refused(ro.write(&WriteOptions::default(), &batch), "write");
    refused(ro.delete_range(b"a", b"z"), "write");
    refused(ro.create_keyspace("other", opts()).map(|_| ()), "write");
    refused(ro.default_keyspace().compact_range(None, None), "compact_range");
    refused(ro.flush(), "flush");
    refused(ro.compact_range(None, None), "compact_range");
    refused(ro.run_gc(0.0).map(|_| ()), "run_gc");
    refused(ro.reorganize_vlog().map(|_| ()), "reorganize_vlog");
    refused(ro.resume(), "resume");
    ro.wait_for_background_work().expect("nothing to wait for");
    match Db::open("/db", opts()) {
        Err(Error::Locked { path }) => assert_eq!(path, Path::new("/db/LOCK")),
        other => panic!("a second read-write open: {:?}", other.err()),
    }
    // A reader's view survives the writer closing and a fresh writer recovering.
    drop(db);
    let db = Db::open("/db", opts()).expect("reopen the writer");
    db.put(b"a", b"3").and_then(|_| db.flush()).and_then(|_| db.compact_range(None, None)).expect("write and compact");
    assert_eq!(ro.get(b"a").expect("get").as_deref(), Some(&b"1"[..]));
    ro.close().expect("close read-only");
    drop(ro2);
    assert!(matches!(Db::open_read_only("/nothing", opts()), Err(Error::NotADatabase { .. })));
}

/// Every keyspace's contents, by name.
fn keyspace_contents(db: &Db) -> std::collections::BTreeMap<String, Model> {
    (db.keyspaces().into_iter())
        .map(|name| {
            let ks = db.keyspace(&name).expect("keyspace");
            let model = ks.scan(&ReadOptions::default()).and_then(common::owned_map).expect("scan");
            (name, model)
        })
        .collect()
}

/// A read-only handle sees every keyspace as it was at its open — a batch across two of them
/// whole, a keyspace the writer drops afterwards still there — and refuses keyspace changes;
/// a backup and its restore hold every keyspace too.
#[test]
fn a_read_only_handle_and_a_backup_see_every_keyspace() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, backups, restored) = (tmp.path().join("db"), tmp.path().join("backups"), tmp.path().join("restored"));
    let db = Db::open(&dir, options()).expect("open");
    let events = db.create_keyspace("events", Options::default().min_separated_value_bytes(16)).expect("create");
    let doomed = db.create_keyspace("doomed", Options::default()).expect("create");
    let mut model = Model::new();
    write_round(&db, &mut model, 0, 200);
    db.flush().expect("flush");
    for i in 0..50u32 {
        let mut batch = WriteBatch::new();
        batch.put(key(i), b"default side").put_in(&events, key(i), make_value(&key(i), 1, 120));
        db.write(&WriteOptions::default(), &batch).expect("cross-keyspace batch");
        doomed.put(key(i), b"doomed").expect("put");
    }
    // Synced: what reached the files is what a reader sees.
    db.put_opt(&WriteOptions::synced(), b"last", b"synced").expect("put");
    let at_open = keyspace_contents(&db);
    assert_eq!(at_open.len(), 3);
    let ro = Db::open_read_only(&dir, options()).expect("open read-only");
    assert_eq!(keyspace_contents(&ro), at_open, "the reader sees every keyspace");
    let backup = db.backup(&backups).expect("backup");
    db.drop_keyspace("doomed").expect("drop");
    for i in 0..50u32 {
        events.put(key(i), b"after the reader opened").expect("put");
    }
    db.flush().and_then(|_| db.compact_range(None, None)).and_then(|_| db.run_gc(0.0).map(|_| ())).expect("settle");
    assert_eq!(keyspace_contents(&ro), at_open, "the reader keeps its view of every keyspace");
    assert!(matches!(ro.drop_keyspace("events"), Err(Error::ReadOnly { .. })));
    assert!(matches!(ro.keyspace("events").and_then(|ks| ks.put("x", "y")), Err(Error::ReadOnly { .. })));
    drop(ro);
    wisckey::restore_backup(&backups, Some(backup.id), &restored, &Options::default()).expect("restore");
    let back = Db::open(&restored, options()).expect("open the restored database");
    assert_eq!(keyspace_contents(&back), at_open, "the restored backup holds every keyspace");
    assert!(back.verify().expect("verify").is_healthy());
}

#[test]
fn backups_copy_only_what_changed_and_restore_exactly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, backups) = (tmp.path().join("db"), tmp.path().join("backups"));
    let db = Db::open(&dir, options().light_weight_compaction(true).l0_compaction_trigger(2)).expect("open");
    let mut models = Vec::new();
    let mut model = Model::new();
    for round in 0..3 {
        write_round(&db, &mut model, round, 300);
        db.flush().expect("flush");
    }
    db.compact_range(None, None).expect("compact");
    let first = db.backup(&backups).expect("backup 1");
    models.push(model.clone());
    assert_eq!((first.id, first.files_copied), (1, first.files), "the first backup copies everything");
    let second = db.backup(&backups).expect("backup 2");
    models.push(model.clone());
    // Nothing changed but the log file the first backup's roll started (its long tail was
    // sealed and filed in the pool): only that file's start mark is copied.
    assert!(second.files_copied <= 1 && second.bytes_copied < 64, "nothing changed: {second:?}");
    let again = db.backup(&backups).expect("backup 3");
    models.push(model.clone());
    assert_eq!((again.files_copied, again.bytes_copied), (0, 0), "nothing changed at all: {again:?}");
    // A few writes that stay in the log file being appended: only their bytes are copied.
    for i in 0..5u32 {
        let v = make_value(&key(i), 99_000 + u64::from(i), 150);
        db.put(key(i), &v).expect("put");
        model.insert(key(i), v);
    }
    let grown = db.backup(&backups).expect("backup 4");
    models.push(model.clone());
    assert!(grown.files_copied == 1 && grown.bytes_copied < 2048, "only the log's new bytes: {grown:?}");
    for round in 3..6 {
        write_round(&db, &mut model, round, 300);
        db.flush().and_then(|_| db.wait_for_background_work()).expect("settle");
    }
    db.run_gc(0.0).expect("gc");
    let fourth = db.backup(&backups).expect("backup 5");
    models.push(model.clone());
    assert!(fourth.bytes_copied < fourth.bytes, "an incremental backup copies less than it holds: {fourth:?}");
    let listed = wisckey::list_backups(&backups, &Options::default()).expect("list");
    assert_eq!(listed.iter().map(|b| b.id).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    for (i, want) in models.iter().enumerate() {
        let target = tmp.path().join(format!("restored-{i}"));
        let info =
            wisckey::restore_backup(&backups, Some(i as u64 + 1), &target, &Options::default()).expect("restore");
        assert_eq!(info.sequence, listed[i].sequence);
        let restored = Db::open(&target, options()).expect("open the restored database");
        assert_view_matches(&restored, &ReadOptions::default(), want, &format!("backup {}", i + 1));
        let report = restored.verify().expect("verify");
        assert!(report.is_healthy(), "{report}");
    }
    // A flipped byte in a pool file is found at restore, which then leaves nothing behind.
    let pool_file = std::fs::read_dir(backups.join("shared"))
        .expect("pool")
        .flat_map(|d| std::fs::read_dir(d.expect("db dir").path()).expect("pool files"))
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .expect("a table in the pool");
    let mut bytes = std::fs::read(&pool_file).expect("read");
    bytes[10] ^= 0x40;
    std::fs::write(&pool_file, bytes).expect("write");
    let target = tmp.path().join("restored-damaged");
    match wisckey::restore_backup(&backups, None, &target, &Options::default()) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, pool_file),
        other => panic!("restoring a damaged backup: {other:?}"),
    }
    assert!(!target.exists(), "a failed restore must leave nothing behind");
}

#[test]
fn bad_targets_are_refused_and_nothing_changes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let db = Db::open(&dir, options()).expect("open");
    db.put(b"k", b"v").expect("put");
    let taken = tmp.path().join("taken");
    std::fs::create_dir(&taken).expect("mkdir");
    std::fs::write(taken.join("precious"), b"keep me").expect("write");
    let list = |p: &PathBuf| data_or_all(p);
    let before = list(&taken);
    match db.checkpoint(&taken) {
        Err(Error::TargetNotEmpty { what: "checkpoint", entries: 1, .. }) => {}
        other => panic!("a checkpoint into a non-empty directory: {other:?}"),
    }
    assert_eq!(list(&taken), before, "a refused checkpoint changed its target");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    assert!(matches!(db.checkpoint(&file), Err(Error::InvalidArgument { .. })));
    let backups = tmp.path().join("backups");
    db.backup(&backups).expect("backup");
    // Restoring over the live database (and into any non-empty directory) is refused.
    let live_before = list(&dir);
    match wisckey::restore_backup(&backups, None, &dir, &Options::default()) {
        Err(Error::TargetNotEmpty { what: "restore", .. }) => {}
        other => panic!("a restore over a live database: {other:?}"),
    }
    assert_eq!(list(&dir), live_before, "a refused restore changed the live database");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
    assert!(matches!(
        wisckey::restore_backup(&backups, Some(9), tmp.path().join("new"), &Options::default()),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(!tmp.path().join("new").exists());
    assert!(matches!(
        wisckey::restore_backup(tmp.path().join("no-backups"), None, tmp.path().join("new"), &Options::default()),
        Err(Error::InvalidArgument { .. })
    ));
}

/// Every entry of `dir` with its contents (to show that nothing changed).
fn data_or_all(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let fs = PosixFs::new();
    let mut names = fs.list(dir).expect("list");
    names.sort();
    names
        .into_iter()
        .filter(|n| n != "LOCK" && n != "READERS")
        .map(|n| {
            let p = dir.join(&n);
            let bytes = if p.is_dir() { Vec::new() } else { std::fs::read(&p).expect("read") };
            (n, bytes)
        })
        .collect()
}
