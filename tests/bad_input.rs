//! Bad input and damaged databases: oversized keys/values, the empty key, paths that are not
//! databases, lock conflicts (same process and another process), damaged table files and a
//! missing or garbled CURRENT, and `destroy`. Errors must be the documented variants, and a
//! damaged database must answer `Err(Corruption)`, never a wrong value.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{make_value, show, Model};
use wisckey::fs::{MemFs, PosixFs, Vfs};
use wisckey::{destroy, Db, Error, Options, ReadOptions, WriteBatch, WriteOptions, MAX_KEY_BYTES, MAX_VALUE_BYTES};

fn posix() -> Arc<dyn Vfs> {
    Arc::new(PosixFs::new())
}

fn mem_options() -> Options {
    Options::default().vfs(Arc::new(MemFs::new()))
}

fn assert_empty(db: &Db, ctx: &str) {
    let all: Vec<_> =
        db.scan(&ReadOptions::default()).expect("scan").collect::<wisckey::Result<_>>().expect("scan items");
    assert!(all.is_empty(), "{ctx}: expected an empty database, found {} entries", all.len());
}

#[test]
fn oversized_key_is_rejected_and_nothing_is_written() {
    let opts = mem_options();
    let db = Db::open("/db", opts.clone()).expect("open");
    let big = vec![b'k'; MAX_KEY_BYTES + 1];
    let e = db.put(&big, b"v").expect_err("put with an oversized key must fail");
    assert!(matches!(e, Error::InvalidArgument { .. }), "put: {e:?}");
    let e = db.delete(&big).expect_err("delete with an oversized key must fail");
    assert!(matches!(e, Error::InvalidArgument { .. }), "delete: {e:?}");
    let e = db.put_opt(&WriteOptions::synced(), &big, b"v").expect_err("synced put must fail");
    assert!(matches!(e, Error::InvalidArgument { .. }), "synced put: {e:?}");
    assert_empty(&db, "after rejected writes");
    db.close().expect("close");
    let db = Db::open("/db", opts).expect("reopen");
    assert_empty(&db, "after reopen");
}

#[test]
fn batch_with_one_oversized_key_is_rejected_as_a_whole() {
    let db = Db::open("/db", mem_options()).expect("open");
    let mut batch = WriteBatch::new();
    batch.put(b"good-before", b"1");
    batch.put(vec![b'k'; MAX_KEY_BYTES + 1], b"v");
    batch.put(b"good-after", b"2");
    let e = db.write(&WriteOptions::default(), &batch).expect_err("batch must fail");
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    assert_eq!(db.get(b"good-before").expect("get"), None, "part of a rejected batch was applied");
    assert_eq!(db.get(b"good-after").expect("get"), None, "part of a rejected batch was applied");
}

#[test]
fn oversized_value_is_rejected() {
    let db = Db::open("/db", mem_options()).expect("open");
    // calloc'd zero pages: cheap unless the engine copies the value before checking it.
    let big = vec![0u8; MAX_VALUE_BYTES + 1];
    let e = db.put(b"k", &big).expect_err("oversized value must fail");
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    drop(big);
    assert_eq!(db.get(b"k").expect("get"), None);
}

#[test]
fn key_of_exactly_max_key_bytes_round_trips_through_tables_and_reopen() {
    let opts = mem_options();
    let db = Db::open("/db", opts.clone()).expect("open");
    let k = vec![b'm'; MAX_KEY_BYTES];
    db.put(&k, b"max").expect("max-size key is allowed");
    db.put(b"a", b"small").expect("put");
    assert_eq!(db.get(&k).expect("get").as_deref(), Some(&b"max"[..]));
    db.flush().expect("flush");
    assert_eq!(db.get(&k).expect("get after flush").as_deref(), Some(&b"max"[..]));
    db.close().expect("close");
    let db = Db::open("/db", opts).expect("reopen");
    assert_eq!(db.get(&k).expect("get after reopen").as_deref(), Some(&b"max"[..]));
    assert_eq!(db.get(b"a").expect("get").as_deref(), Some(&b"small"[..]));
}

#[test]
fn empty_key_and_empty_value_are_ordinary_entries() {
    let opts = mem_options();
    let db = Db::open("/db", opts.clone()).expect("open");
    db.put(b"", b"empty-key").expect("empty key is allowed, as in LevelDB");
    db.put(b"\0", b"").expect("empty value");
    db.put(b"a", b"x").expect("put");
    assert_eq!(db.get(b"").expect("get").as_deref(), Some(&b"empty-key"[..]));
    assert_eq!(db.get(b"\0").expect("get").as_deref(), Some(&b""[..]), "empty value is not a deletion");
    let mut it = db.iter(&ReadOptions::default()).expect("iter");
    it.seek_to_first().expect("seek_to_first");
    assert!(it.valid() && it.key().is_empty(), "the empty key sorts first");
    drop(it);
    db.flush().expect("flush");
    db.close().expect("close");
    let db = Db::open("/db", opts).expect("reopen");
    let model: Model =
        [(b"".to_vec(), b"empty-key".to_vec()), (b"\0".to_vec(), vec![]), (b"a".to_vec(), b"x".to_vec())]
            .into_iter()
            .collect();
    common::assert_view_matches(&db, &ReadOptions::default(), &model, "after flush and reopen");
    db.delete(b"").expect("delete the empty key");
    assert_eq!(db.get(b"").expect("get"), None);
}

#[test]
fn opening_a_regular_file_as_database_fails_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"not a database").expect("write");
    let e = Db::open(&file, Options::default().vfs(posix())).err().expect("opening a regular file must fail");
    assert!(matches!(e, Error::NotADatabase { .. } | Error::Io { .. }), "expected NotADatabase or Io, got {e:?}");
    assert_eq!(std::fs::read(&file).expect("read"), b"not a database", "the file was modified");
}

#[test]
fn directory_with_unrelated_files_becomes_a_database_like_leveldb() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), b"keep me").expect("write");
    let db = Db::open(dir.path(), Options::default().vfs(posix())).expect("open in a non-empty directory");
    db.put(b"k", b"v").expect("put");
    db.close().expect("close");
    assert_eq!(std::fs::read(dir.path().join("notes.txt")).expect("read"), b"keep me");
    let db = Db::open(dir.path(), Options::default().vfs(posix()).create_if_missing(false)).expect("reopen");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
}

#[test]
fn missing_directory_without_create_if_missing_is_not_a_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nope");
    let e = Db::open(&path, Options::default().vfs(posix()).create_if_missing(false)).err().expect("must fail");
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    assert!(!path.exists(), "a failed open must not create the directory");
    let e = Db::open(dir.path(), Options::default().vfs(posix()).create_if_missing(false)).err().expect("empty dir");
    assert!(matches!(e, Error::NotADatabase { .. }), "empty directory: {e:?}");
    let e = Db::open("/nope", mem_options().create_if_missing(false)).err().expect("MemFs");
    assert!(matches!(e, Error::NotADatabase { .. }), "MemFs: {e:?}");
}

#[test]
fn error_if_exists_refuses_an_existing_database() {
    let opts = mem_options();
    Db::open("/db", opts.clone().error_if_exists(true)).expect("new database").close().expect("close");
    let e = Db::open("/db", opts.error_if_exists(true)).err().expect("must fail");
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
}

#[test]
fn second_open_in_same_process_is_locked() {
    let opts = mem_options();
    let db = Db::open("/db", opts.clone()).expect("open");
    let e = Db::open("/db", opts.clone()).err().expect("second open must fail");
    assert!(matches!(e, Error::Locked { .. }), "MemFs: {e:?}");
    db.close().expect("close");
    Db::open("/db", opts).expect("open after close releases the lock");

    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default().vfs(posix())).expect("open");
    let e = Db::open(dir.path(), Options::default().vfs(posix())).err().expect("second open must fail");
    assert!(matches!(e, Error::Locked { .. }), "PosixFs: {e:?}");
    drop(db);
    Db::open(dir.path(), Options::default().vfs(posix())).expect("open after drop releases the lock");
}

const CHILD_ENV: &str = "WISCKEY_TEST_CHILD_OPEN_PATH";
const CHILD_OPENED: i32 = 0;
const CHILD_LOCKED: i32 = 10;
const CHILD_OTHER_ERROR: i32 = 11;

/// Not a test of its own: the body of the child process spawned by
/// `second_process_opening_the_database_is_locked` (does nothing without the env var).
#[test]
fn child_process_helper_opens_database_named_in_env() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let code = match Db::open(&path, Options::default().create_if_missing(false)) {
        Ok(_) => CHILD_OPENED,
        Err(Error::Locked { .. }) => CHILD_LOCKED,
        Err(e) => {
            eprintln!("child: {e}");
            CHILD_OTHER_ERROR
        }
    };
    std::process::exit(code);
}

fn open_in_child_process(path: &Path) -> i32 {
    let exe = std::env::current_exe().expect("current_exe");
    let out = std::process::Command::new(exe)
        .args(["child_process_helper_opens_database_named_in_env", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .output()
        .expect("spawn child");
    out.status.code().unwrap_or_else(|| panic!("child killed: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn second_process_opening_the_database_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put(b"k", b"v").expect("put");
    assert_eq!(open_in_child_process(dir.path()), CHILD_LOCKED, "another process opened a locked database");
    db.close().expect("close");
    assert_eq!(open_in_child_process(dir.path()), CHILD_OPENED, "the lock was not released by close");
}

/// A database on real files with one table of inline values, closed so reads start cold.
fn one_table_database(dir: &Path) -> Model {
    let db = Db::open(dir, table_options().create_if_missing(true)).expect("open");
    let mut model = Model::new();
    for i in 0..300u64 {
        let k = format!("key{i:04}").into_bytes();
        let v = make_value(&k, i, 100);
        db.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    db.flush().expect("flush");
    db.close().expect("close");
    model
}

fn table_options() -> Options {
    Options::default().vfs(posix()).write_buffer_bytes(1 << 20).block_size_bytes(1024).create_if_missing(false)
}

fn table_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no .sst file in {dir:?}: {:?}", std::fs::read_dir(dir).map(|d| d.count()));
    v
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

/// How a damaged database answered: how many reads reported corruption.
struct DamageReport {
    open_failed: bool,
    corrupt_reads: usize,
}

/// Open a damaged database and read everything. Every answer must be the model's value or
/// `Err(Corruption)`; a scan must yield a prefix of the model then stop with `Corruption`.
fn read_damaged(dir: &Path, model: &Model, ctx: &str) -> DamageReport {
    let db = match Db::open(dir, table_options()) {
        Ok(db) => db,
        Err(e) => {
            assert!(e.is_corruption(), "{ctx}: open failed with a non-corruption error: {e:?}");
            return DamageReport { open_failed: true, corrupt_reads: 0 };
        }
    };
    let mut corrupt = 0;
    for (k, v) in model {
        match db.get(k) {
            Ok(Some(got)) => assert!(&got == v, "{ctx}: WRONG VALUE for {}", show(k)),
            Ok(None) => panic!("{ctx}: key {} silently missing instead of Err(Corruption)", show(k)),
            Err(e) => {
                assert!(e.is_corruption(), "{ctx}: get {}: {e:?}", show(k));
                corrupt += 1;
            }
        }
    }
    let mut want = model.iter();
    for item in db.scan(&ReadOptions::default()).expect("scan") {
        match item {
            Ok((k, v)) => {
                let (wk, wv) = want.next().unwrap_or_else(|| panic!("{ctx}: scan invented {}", show(&k)));
                assert_eq!(show(&k), show(wk), "{ctx}: scan key");
                assert!(&v == wv, "{ctx}: scan WRONG VALUE for {}", show(&k));
            }
            Err(e) => {
                assert!(e.is_corruption(), "{ctx}: scan: {e:?}");
                corrupt += 1;
                break;
            }
        }
    }
    DamageReport { open_failed: false, corrupt_reads: corrupt }
}

#[test]
fn flipped_byte_in_first_data_block_is_reported_as_corruption() {
    let pristine = tempfile::tempdir().expect("tempdir");
    let model = one_table_database(pristine.path());
    let work = tempfile::tempdir().expect("tempdir");
    copy_dir(pristine.path(), work.path());
    let table = &table_files(work.path())[0];
    flip_byte(table, 10);
    let r = read_damaged(work.path(), &model, "flip at offset 10");
    assert!(r.open_failed || r.corrupt_reads > 0, "a flipped data byte went unnoticed by every read");
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).expect("read table");
    bytes[offset as usize] ^= 0x40;
    std::fs::write(path, bytes).expect("write table");
}

#[test]
fn flipped_byte_anywhere_in_table_never_yields_a_wrong_value() {
    let pristine = tempfile::tempdir().expect("tempdir");
    let model = one_table_database(pristine.path());
    let len = std::fs::metadata(&table_files(pristine.path())[0]).expect("stat").len();
    let mut offsets: Vec<u64> = (0..16).map(|i| len * i / 16).collect();
    offsets.extend((1..=64).map(|back| len - back)); // the index, filter, and footer live at the end
    offsets.sort_unstable();
    offsets.dedup();
    for off in offsets {
        let work = tempfile::tempdir().expect("tempdir");
        copy_dir(pristine.path(), work.path());
        flip_byte(&table_files(work.path())[0], off);
        read_damaged(work.path(), &model, &format!("flip at offset {off} of {len}"));
    }
}

#[test]
fn truncated_table_is_reported_as_corruption() {
    let pristine = tempfile::tempdir().expect("tempdir");
    let model = one_table_database(pristine.path());
    let len = std::fs::metadata(&table_files(pristine.path())[0]).expect("stat").len();
    for keep in [0, 10, len / 2, len - 49, len - 1] {
        let work = tempfile::tempdir().expect("tempdir");
        copy_dir(pristine.path(), work.path());
        let table = &table_files(work.path())[0];
        std::fs::OpenOptions::new().write(true).open(table).and_then(|f| f.set_len(keep)).expect("truncate");
        let r = read_damaged(work.path(), &model, &format!("truncated to {keep} of {len} bytes"));
        assert!(r.open_failed || r.corrupt_reads > 0, "truncation to {keep} bytes went unnoticed");
    }
}

#[test]
fn missing_current_with_table_files_present_is_not_silently_a_new_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    one_table_database(dir.path());
    std::fs::remove_file(dir.path().join("CURRENT")).expect("remove CURRENT");
    let tables = table_files(dir.path());
    let e = Db::open(dir.path(), Options::default().vfs(posix())).err().expect("open must fail");
    assert!(
        matches!(e, Error::NotADatabase { .. } | Error::Corruption { .. }),
        "expected NotADatabase or Corruption, got {e:?}"
    );
    for t in tables {
        assert!(t.exists(), "failed open deleted {t:?}");
    }
}

#[test]
fn garbled_current_is_reported_as_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    one_table_database(dir.path());
    std::fs::write(dir.path().join("CURRENT"), b"\x00garbage\xff").expect("write CURRENT");
    let e = Db::open(dir.path(), table_options()).err().expect("open must fail");
    assert!(
        matches!(e, Error::NotADatabase { .. } | Error::Corruption { .. }),
        "expected NotADatabase or Corruption, got {e:?}"
    );
}

#[test]
fn destroy_removes_the_database_and_refuses_while_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let opts = Options::default().vfs(posix());
    let db = Db::open(&path, opts.clone()).expect("open");
    db.put(b"k", b"v").expect("put");
    db.flush().expect("flush");
    let e = destroy(&path, &opts).expect_err("destroy of an open database must fail");
    assert!(matches!(e, Error::Locked { .. }), "{e:?}");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]), "failed destroy damaged the db");
    db.close().expect("close");
    destroy(&path, &opts).expect("destroy");
    let left: Vec<_> =
        std::fs::read_dir(&path).map(|d| d.map(|e| e.expect("entry").file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "files left after destroy: {left:?}");
    let e = Db::open(&path, opts.create_if_missing(false)).err().expect("open after destroy must fail");
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
}

#[test]
fn destroy_on_memfs_forgets_the_data() {
    let opts = mem_options();
    let db = Db::open("/db", opts.clone()).expect("open");
    db.put(b"k", b"v").expect("put");
    db.close().expect("close");
    destroy("/db", &opts).expect("destroy");
    let e = Db::open("/db", opts.clone().create_if_missing(false)).err().expect("must fail");
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    let db = Db::open("/db", opts).expect("create anew");
    assert_eq!(db.get(b"k").expect("get"), None, "data survived destroy");
}

/// `close` promises to release the lock. If it returns `Ok` while an iterator or snapshot is
/// still alive, the next open must not fail with `Locked` (or `close` must report the misuse).
fn close_with_live_handle_then_reopen(keep: impl FnOnce(&Db) -> Box<dyn std::any::Any>, what: &str) {
    let opts = mem_options();
    let db = Db::open("/db", opts.clone()).expect("open");
    db.put(b"k", b"v").expect("put");
    let handle = keep(&db);
    if db.close().is_ok() {
        let again = Db::open("/db", opts.clone());
        assert!(
            !matches!(again, Err(Error::Locked { .. })),
            "close() returned Ok but the lock is still held by a live {what}"
        );
    }
    drop(handle);
    let db = Db::open("/db", opts).expect("open after the handle is gone");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
}

#[test]
fn close_with_live_iterator_then_reopen_is_not_locked() {
    close_with_live_handle_then_reopen(
        |db| {
            let mut it = db.iter(&ReadOptions::default()).expect("iter");
            it.seek_to_first().expect("seek");
            Box::new(it)
        },
        "iterator",
    );
}

#[test]
fn close_with_live_snapshot_then_reopen_is_not_locked() {
    close_with_live_handle_then_reopen(|db| Box::new(db.snapshot()), "snapshot");
}

#[test]
fn out_of_range_thread_options_are_rejected_naming_the_option() {
    let cases = [
        ("compaction_threads", mem_options().compaction_threads(0)),
        ("compaction_threads", mem_options().compaction_threads(17)),
        ("compaction_nice", mem_options().compaction_nice(Some(20))),
        ("compaction_nice", mem_options().compaction_nice(Some(-1))),
    ];
    for (name, opts) in cases {
        let e = Db::open("/bad-options", opts).err().unwrap_or_else(|| panic!("{name}: opened"));
        assert!(matches!(e, Error::InvalidArgument { .. }), "{name}: {e:?}");
        assert!(e.to_string().contains(name), "{name}: {e}");
    }
}

/// The nice value in a `/proc/.../stat` line: field 19; the fields after the command's ')'
/// start at 3.
#[cfg(target_os = "linux")]
fn nice_in_stat(stat: &str) -> Option<i32> {
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(16)?.parse().ok())
}

/// `compaction_nice` lowers the priority of the compaction threads by that much, and of no
/// other thread. Measured from the test's own nice value, so it also passes under `nice`.
#[cfg(target_os = "linux")]
#[test]
fn compaction_threads_run_at_the_nice_value_asked_for() {
    let own = std::fs::read_to_string("/proc/thread-self/stat").ok().and_then(|s| nice_in_stat(&s)).expect("own nice");
    let want = (own + 7).min(19);
    if want == own {
        eprintln!("already at nice {own}: nothing to lower; skipping");
        return;
    }
    // 7: no other test's database asks for it, and they share this process.
    let db = Db::open("/nice", mem_options().compaction_nice(Some(7)).compaction_threads(3)).expect("open");
    let niced = |name: &str| -> usize {
        let tasks = std::fs::read_dir("/proc/self/task").expect("tasks");
        tasks
            .filter_map(|t| t.ok())
            .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
            .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
            .filter(|s| nice_in_stat(s) == Some(want))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while niced("wisckey-compact") < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(niced("wisckey-compact"), 3, "compaction threads at nice {want}");
    assert_eq!(niced("wisckey-flush"), 0, "the flush thread keeps its priority");
    db.close().expect("close");
}

#[test]
fn light_weight_compaction_under_a_wacky_policy_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    for policy in ["tiering", "lazy-leveling", "bush", "wacky:T=4,K=1,Z=1,C=1,X=2"] {
        let opts = Options::default().merge_policy(policy.parse().expect("policy")).light_weight_compaction(true);
        match Db::open(&path, opts) {
            Err(Error::InvalidArgument { reason }) => {
                assert!(reason.contains("light_weight_compaction"), "{policy}: the error names the option: {reason}")
            }
            Err(e) => panic!("{policy}: wrong error {e:?}"),
            Ok(_) => panic!("{policy}: light-weight compaction was silently ignored"),
        }
        assert!(!path.exists(), "{policy}: a refused open created {path:?}");
    }
    // Leveling takes it.
    let db = Db::open(&path, Options::default().light_weight_compaction(true)).expect("leveling with LWC");
    db.put(b"k", b"v").expect("put");
}
