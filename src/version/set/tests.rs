//! Tests of `set.rs`.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::fs::{FileLock, MemFs, RandomAccessFile, WritableFile};
use crate::key::{make_internal_key, ValueKind};
use crate::version::edit::FileMeta;
use crate::version::manifest::ManifestWriter;
use crate::version::COMPARATOR_NAME;

const DIR: &str = "/db";

/// `MemFs` that can be told to fail renames (a crash before `CURRENT` switches) or
/// appends (a full disk while writing the manifest).
#[derive(Clone, Default)]
struct FlakyFs {
    inner: MemFs,
    fail_rename: Arc<AtomicBool>,
    fail_append: Arc<AtomicBool>,
}

fn eio(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, std::io::Error::from_raw_os_error(libc::EIO))
}

struct FlakyFile {
    inner: Box<dyn WritableFile>,
    fail: Arc<AtomicBool>,
}

impl WritableFile for FlakyFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            // Half the bytes land, as in a torn write.
            self.inner.append(&data[..data.len() / 2])?;
            return Err(eio("append", Path::new("flaky")));
        }
        self.inner.append(data)
    }
    fn sync_data(&mut self) -> Result<()> {
        self.inner.sync_data()
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn truncate(&mut self, len: u64) -> Result<()> {
        self.inner.truncate(len)
    }
}

impl Vfs for FlakyFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let inner = self.inner.create(path)?;
        Ok(Box::new(FlakyFile { inner, fail: self.fail_append.clone() }))
    }
    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        self.inner.open_append(path)
    }
    fn open_read(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        self.inner.open_read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if self.fail_rename.load(Ordering::SeqCst) {
            return Err(eio("rename", from));
        }
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> Result<()> {
        self.inner.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.inner.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.inner.is_dir(path)
    }
    fn file_size(&self, path: &Path) -> Result<u64> {
        self.inner.file_size(path)
    }
    fn disk_usage(&self, path: &Path) -> Result<u64> {
        self.inner.disk_usage(path)
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        self.inner.punch_hole(path, offset, len)
    }
}

fn file(number: u64, run: u64, lo: &[u8], hi: &[u8]) -> FileMeta {
    FileMeta {
        number,
        size: 1000 + number,
        smallest: make_internal_key(lo, 9, ValueKind::Value),
        largest: make_internal_key(hi, 2, ValueKind::Value),
        run,
        num_entries: 10,
        num_deletions: 1,
        raw_value_bytes: 500,
        segments: 1,
        range_tombstones: 0,
    }
}

fn add(level: u32, f: FileMeta) -> VersionEdit {
    VersionEdit { added_files: vec![(level, f)], ..Default::default() }
}

fn dir() -> &'static Path {
    Path::new(DIR)
}

/// Everything `recover` must reproduce (`next_file_number` only grows: recovery takes one
/// for its new manifest).
#[derive(Debug, PartialEq)]
struct State {
    version: Version,
    last_sequence: u64,
    log_head: LogPos,
    vlog_tail: LogPos,
    policy: String,
    compact_pointer: Option<Vec<u8>>,
    vlog_files: BTreeMap<u64, VlogFileStats>,
}

fn state(s: &VersionSet) -> State {
    State {
        version: (*s.current()).clone(),
        last_sequence: s.last_sequence(),
        log_head: s.log_head(),
        vlog_tail: s.vlog_tail(),
        policy: s.policy().to_string(),
        compact_pointer: s.compact_pointer(1).map(<[u8]>::to_vec),
        vlog_files: s.vlog_files().clone(),
    }
}

fn stats(total_bytes: u64, garbage_bytes: u64) -> VlogFileStats {
    VlogFileStats { total_bytes, garbage_bytes }
}

fn vlog_edit(added: &[(u64, u64)], garbage: &[(u64, u64)], deleted: &[u64]) -> VersionEdit {
    VersionEdit {
        vlog_added: added.to_vec(),
        vlog_garbage: garbage.to_vec(),
        vlog_files_deleted: deleted.to_vec(),
        ..Default::default()
    }
}

/// A set with a flush, a compaction and a GC step applied; value-log files 5 and 7 hold
/// separated values (`5`: 6000 B, 1500 B garbage; `7`: 4000 B, none), file 6 had some
/// and was collected.
fn populated(fs: Arc<dyn Vfs>) -> VersionSet {
    let mut s = VersionSet::create(fs, dir(), 4, "leveled T=10").unwrap();
    let (a, b) = (s.new_file_number(), s.new_file_number());
    s.set_last_sequence(100);
    let mut flush = add(0, file(a, a, b"a", b"m"));
    flush.added_files.push((0, file(b, b, b"k", b"z")));
    flush.log_head = Some(LogPos { file: 7, offset: 4096 });
    flush.vlog_added = vec![(5, 6000), (6, 2000), (7, 4000)];
    s.log_and_apply(flush).unwrap();
    let c = s.new_file_number();
    let mut compact = add(1, file(c, c, b"a", b"z"));
    compact.deleted_files = vec![(0, a), (0, b)];
    compact.compact_pointers = vec![(1, make_internal_key(b"m", 5, ValueKind::Value))];
    compact.vlog_garbage = vec![(5, 1000), (6, 700)];
    s.log_and_apply(compact).unwrap();
    s.log_and_apply(VersionEdit {
        vlog_tail: Some(LogPos { file: 3, offset: 17 }),
        vlog_garbage: vec![(5, 500)],
        vlog_files_deleted: vec![6],
        ..Default::default()
    })
    .unwrap();
    s
}

#[test]
fn recover_after_create_and_edits_reproduces_the_same_state() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let s = populated(fs.clone());
    let before = state(&s);
    assert_eq!(before.version.level_files(1), 1);
    assert_eq!(before.log_head, LogPos { file: 7, offset: 4096 });
    assert_eq!(before.vlog_files, BTreeMap::from([(5, stats(6000, 1500)), (7, stats(4000, 0))]));
    drop(s);
    let r = VersionSet::recover(fs.clone(), dir(), 4).unwrap();
    assert_eq!(state(&r), before);
    // Recovery starts a fresh manifest and deletes the old one.
    assert_eq!(read_current(&*fs, dir()).unwrap(), r.manifest_file_number());
    let manifests: Vec<_> = fs.list(dir()).unwrap().into_iter().filter(|n| n.starts_with("MANIFEST-")).collect();
    assert_eq!(manifests, vec![format!("MANIFEST-{:06}", r.manifest_file_number())]);
    // And recovering again still gives the same thing.
    drop(r);
    assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
}

#[test]
fn new_file_numbers_after_recovery_never_reuse_old_ones() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let s = populated(fs.clone());
    let used: HashSet<u64> = s.live_files().into_iter().chain([s.manifest_file_number(), 7]).collect();
    drop(s);
    let mut r = VersionSet::recover(fs, dir(), 4).unwrap();
    let n = r.new_file_number();
    assert!(used.iter().all(|&u| u < n), "{n} vs {used:?}");
}

#[test]
fn manifest_rolls_past_its_size_limit_and_old_one_is_deleted() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let mut s = VersionSet::create(fs.clone(), dir(), 3, "p").unwrap();
    s.set_max_manifest_bytes(300);
    let first = s.manifest_file_number();
    let mut rolls = 0;
    for i in 0..40u64 {
        let before = s.manifest_file_number();
        let n = s.new_file_number();
        let key = format!("k{i:03}");
        s.log_and_apply(add(1, file(n, 1, key.as_bytes(), key.as_bytes()))).unwrap();
        if s.manifest_file_number() != before {
            rolls += 1;
            assert!(!fs.exists(&manifest_file_name(dir(), before)), "old manifest left behind");
        }
    }
    assert!(rolls >= 2, "only {rolls} rolls");
    assert_ne!(s.manifest_file_number(), first);
    assert_eq!(read_current(&*fs, dir()).unwrap(), s.manifest_file_number());
    let before = state(&s);
    assert_eq!(before.version.level_files(1), 40);
    drop(s);
    assert_eq!(state(&VersionSet::recover(fs, dir(), 3).unwrap()), before);
}

#[test]
fn crash_before_current_switch_leaves_the_old_state_recoverable() {
    let fs = FlakyFs::default();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let mut s = populated(vfs.clone());
    let old = state(&s);
    let old_manifest = s.manifest_file_number();
    s.set_max_manifest_bytes(0);
    fs.fail_rename.store(true, Ordering::SeqCst);
    let n = s.new_file_number();
    assert!(s.log_and_apply(add(2, file(n, n, b"x", b"y"))).is_err());
    // Nothing installed; the new manifest is on disk but CURRENT still names the old one.
    assert_eq!(s.current().level_files(2), 0);
    assert_eq!(read_current(&fs, dir()).unwrap(), old_manifest);
    assert!(fs.list(dir()).unwrap().iter().filter(|n| n.starts_with("MANIFEST-")).count() >= 2);
    drop(s);
    let r = VersionSet::recover(vfs.clone(), dir(), 4);
    fs.fail_rename.store(false, Ordering::SeqCst);
    assert!(r.is_err(), "recovery must write CURRENT too");
    let r = VersionSet::recover(vfs, dir(), 4).unwrap();
    assert_eq!(state(&r), old);
    assert!(r.next_file_number() > n, "the number of the abandoned manifest is not reused");
}

#[test]
fn failed_current_switch_then_success_keeps_later_edits_only() {
    let fs = FlakyFs::default();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let mut s = populated(vfs.clone());
    s.set_max_manifest_bytes(0);
    fs.fail_rename.store(true, Ordering::SeqCst);
    let lost = s.new_file_number();
    assert!(s.log_and_apply(add(2, file(lost, lost, b"a", b"b"))).is_err());
    fs.fail_rename.store(false, Ordering::SeqCst);
    let kept = s.new_file_number();
    s.log_and_apply(add(2, file(kept, kept, b"c", b"d"))).unwrap();
    let manifests = fs.list(dir()).unwrap().into_iter().filter(|n| n.starts_with("MANIFEST-")).count();
    assert_eq!(manifests, 1, "abandoned manifests are cleaned up after the switch");
    drop(s);
    let r = VersionSet::recover(vfs, dir(), 4).unwrap();
    let l2: Vec<u64> = r.current().all_files().filter(|(l, _)| *l == 2).map(|(_, f)| f.number).collect();
    assert_eq!(l2, vec![kept]);
}

#[test]
fn failed_manifest_append_installs_nothing_and_next_edit_starts_a_clean_manifest() {
    let fs = FlakyFs::default();
    let vfs: Arc<dyn Vfs> = Arc::new(fs.clone());
    let mut s = populated(vfs.clone());
    let torn_manifest = s.manifest_file_number();
    fs.fail_append.store(true, Ordering::SeqCst);
    let lost = s.new_file_number();
    assert!(s.log_and_apply(add(2, file(lost, lost, b"a", b"b"))).is_err());
    assert_eq!(s.current().level_files(2), 0);
    fs.fail_append.store(false, Ordering::SeqCst);
    let kept = s.new_file_number();
    s.log_and_apply(add(2, file(kept, kept, b"c", b"d"))).unwrap();
    assert_ne!(s.manifest_file_number(), torn_manifest, "must not append after a partial record");
    let before = state(&s);
    drop(s);
    assert_eq!(state(&VersionSet::recover(vfs, dir(), 4).unwrap()), before);
}

#[test]
fn live_files_keep_an_old_version_while_a_reader_holds_it() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let mut s = VersionSet::create(fs, dir(), 3, "p").unwrap();
    let a = s.new_file_number();
    s.log_and_apply(add(0, file(a, a, b"a", b"c"))).unwrap();
    let reader = s.current();
    let b = s.new_file_number();
    let mut compact = add(1, file(b, b, b"a", b"c"));
    compact.deleted_files = vec![(0, a)];
    s.log_and_apply(compact).unwrap();
    assert_eq!(s.live_files(), HashSet::from([a, b]));
    drop(reader);
    assert_eq!(s.live_files(), HashSet::from([b]));
}

#[test]
fn edit_deleting_a_missing_file_is_refused_without_writing() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let mut s = VersionSet::create(fs.clone(), dir(), 3, "p").unwrap();
    let size = fs.file_size(&manifest_file_name(dir(), s.manifest_file_number())).unwrap();
    let bad = VersionEdit { deleted_files: vec![(1, 99)], ..Default::default() };
    assert!(matches!(s.log_and_apply(bad), Err(Error::InvalidArgument { .. })));
    assert!(matches!(s.log_and_apply(add(3, file(5, 5, b"a", b"b"))), Err(Error::InvalidArgument { .. })));
    assert_eq!(fs.file_size(&manifest_file_name(dir(), s.manifest_file_number())).unwrap(), size);
}

#[test]
fn vlog_statistics_accumulate_and_garbage_is_capped_at_the_total() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let mut s = VersionSet::create(fs.clone(), dir(), 3, "p").unwrap();
    s.log_and_apply(vlog_edit(&[(4, 100), (9, 50)], &[], &[])).unwrap();
    s.log_and_apply(vlog_edit(&[(4, 20)], &[(4, 30), (9, 70)], &[])).unwrap();
    assert_eq!(s.vlog_file(4), Some(stats(120, 30)));
    assert_eq!(s.vlog_file(9), Some(stats(50, 50)), "garbage capped");
    assert_eq!(s.vlog_file(9).map(|b| b.live_bytes()), Some(0));
    // Garbage for a file with no entry creates none; additions in the same edit count
    // before its garbage.
    s.log_and_apply(vlog_edit(&[(11, 10)], &[(12, 5), (11, 10)], &[])).unwrap();
    assert_eq!(s.vlog_file(12), None);
    assert_eq!(s.vlog_file(11), Some(stats(10, 10)));
    let before = state(&s);
    drop(s);
    assert_eq!(state(&VersionSet::recover(fs, dir(), 3).unwrap()), before);
}

#[test]
fn deleted_vlog_file_loses_its_entry_across_recovery_and_can_be_added_again() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let mut s = populated(fs.clone());
    s.log_and_apply(vlog_edit(&[], &[], &[5])).unwrap();
    assert_eq!(s.vlog_file(5), None);
    assert_eq!(s.vlog_files().keys().copied().collect::<Vec<_>>(), vec![7]);
    drop(s);
    let mut r = VersionSet::recover(fs.clone(), dir(), 4).unwrap();
    assert_eq!(r.vlog_file(5), None);
    assert_eq!(r.vlog_file(7), Some(stats(4000, 0)));
    // Deleting then adding in one edit starts the entry afresh.
    r.log_and_apply(vlog_edit(&[(7, 10)], &[(7, 4)], &[7])).unwrap();
    r.log_and_apply(vlog_edit(&[(5, 8)], &[], &[])).unwrap();
    let before = state(&r);
    assert_eq!(before.vlog_files, BTreeMap::from([(5, stats(8, 0)), (7, stats(10, 4))]));
    drop(r);
    assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
}

#[test]
fn vlog_statistics_survive_a_manifest_roll() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let mut s = populated(fs.clone());
    let first = s.manifest_file_number();
    s.set_max_manifest_bytes(0);
    s.log_and_apply(vlog_edit(&[(7, 1)], &[(7, 2)], &[])).unwrap();
    assert_ne!(s.manifest_file_number(), first, "rolled");
    let before = state(&s);
    assert_eq!(before.vlog_files.get(&7), Some(&stats(4001, 2)));
    drop(s);
    assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
}

#[test]
fn recovery_never_hands_out_a_vlog_file_number() {
    // A hand-written manifest whose counter lags behind a vlog file it names.
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    fs.create_dir_all(dir()).unwrap();
    let mut w = ManifestWriter::create(&*fs, dir(), 2).unwrap();
    let edit = VersionEdit {
        comparator: Some(COMPARATOR_NAME.into()),
        next_file_number: Some(3),
        last_sequence: Some(0),
        vlog_added: vec![(40, 1)],
        ..Default::default()
    };
    w.add_record(&edit.encoded()).unwrap();
    set_current(&*fs, dir(), 2).unwrap();
    let mut r = VersionSet::recover(fs, dir(), 2).unwrap();
    assert!(r.manifest_file_number() > 40);
    assert!(r.new_file_number() > 40);
}

#[test]
fn garbage_ratio_of_a_vlog_file() {
    assert_eq!(stats(0, 0).garbage_ratio(), 0.0);
    assert_eq!(stats(400, 100).garbage_ratio(), 0.25);
    assert_eq!(stats(400, 100).live_bytes(), 300);
}

/// Append a raw edit to the live manifest, bypassing the checks of `log_and_apply`.
fn append_raw(fs: &Arc<dyn Vfs>, s: &VersionSet, edit: &VersionEdit) -> PathBuf {
    let path = manifest_file_name(dir(), s.manifest_file_number());
    let mut f = fs.open_append(&path).unwrap();
    f.append(&crate::version::manifest::encode_record(&edit.encoded()).unwrap()).unwrap();
    path
}

#[test]
fn inconsistent_manifest_is_corruption_naming_the_manifest() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let s = populated(fs.clone());
    let len = fs.file_size(&manifest_file_name(dir(), s.manifest_file_number())).unwrap();
    let path = append_raw(&fs, &s, &VersionEdit { deleted_files: vec![(3, 12345)], ..Default::default() });
    drop(s);
    match VersionSet::recover(fs, dir(), 4) {
        Err(Error::Corruption { file, offset, reason }) => {
            assert_eq!((file, offset), (path, len));
            assert!(reason.contains("12345"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn opening_with_fewer_levels_than_the_manifest_uses_is_an_options_error() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    drop(populated(fs.clone()));
    let err = VersionSet::recover(fs, dir(), 1).unwrap_err();
    assert!(matches!(err, Error::IncompatibleOptions { option: "num_levels", .. }), "{err}");
}

#[test]
fn missing_current_missing_manifest_and_another_comparator_are_refused() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    fs.create_dir_all(dir()).unwrap();
    assert!(matches!(VersionSet::recover(fs.clone(), dir(), 4), Err(Error::NotADatabase { .. })));

    let s = VersionSet::create(fs.clone(), dir(), 4, "p").unwrap();
    assert!(matches!(VersionSet::create(fs.clone(), dir(), 4, "p"), Err(Error::AlreadyExists { .. })));
    let foreign = VersionEdit { comparator: Some("leveldb.BytewiseComparator".into()), ..Default::default() };
    append_raw(&fs, &s, &foreign);
    let number = s.manifest_file_number();
    drop(s);
    let err = VersionSet::recover(fs.clone(), dir(), 4).unwrap_err();
    let named = |s: &str| s.contains("leveldb.BytewiseComparator");
    assert!(
        matches!(&err, Error::IncompatibleOptions { option: "comparator", existing, .. } if named(existing)),
        "{err}"
    );

    fs.remove(&manifest_file_name(dir(), number)).unwrap();
    let err = VersionSet::recover(fs, dir(), 4).unwrap_err();
    assert!(err.is_corruption() && err.to_string().contains("does not exist"), "{err}");
}

#[test]
fn torn_manifest_tail_is_tolerated_at_recovery() {
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    let s = populated(fs.clone());
    let before = state(&s);
    let path = manifest_file_name(dir(), s.manifest_file_number());
    let rec = crate::version::manifest::encode_record(&add(2, file(77, 77, b"q", b"r")).encoded()).unwrap();
    fs.open_append(&path).unwrap().append(&rec[..rec.len() - 3]).unwrap();
    drop(s);
    assert_eq!(state(&VersionSet::recover(fs, dir(), 4).unwrap()), before);
}

#[test]
fn manifest_writer_output_is_what_recover_reads() {
    // A manifest written by hand (as `wisckey inspect`/repair tools would) recovers.
    let fs: Arc<dyn Vfs> = Arc::new(MemFs::new());
    fs.create_dir_all(dir()).unwrap();
    let mut w = ManifestWriter::create(&*fs, dir(), 5).unwrap();
    let edit = VersionEdit {
        comparator: Some(COMPARATOR_NAME.into()),
        next_file_number: Some(9),
        last_sequence: Some(3),
        added_files: vec![(0, file(8, 8, b"a", b"b"))],
        ..Default::default()
    };
    w.add_record(&edit.encoded()).unwrap();
    set_current(&*fs, dir(), 5).unwrap();
    let r = VersionSet::recover(fs, dir(), 2).unwrap();
    assert_eq!((r.last_sequence(), r.current().level_files(0)), (3, 1));
    assert!(r.manifest_file_number() >= 9);
}
