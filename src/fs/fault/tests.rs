//! Tests of `fault.rs`.

use super::*;

const DIR: &str = "/db";

fn p(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

fn new_fs(seed: u64) -> Result<FaultFs> {
    let fs = FaultFs::in_memory(seed);
    fs.create_dir_all(Path::new(DIR))?;
    Ok(fs)
}

fn read_all(fs: &dyn Vfs, path: &Path) -> Result<Vec<u8>> {
    let f = fs.open_read(path)?;
    let mut buf = vec![0u8; f.len()? as usize];
    f.read_exact_at(0, &mut buf)?;
    Ok(buf)
}

/// A file with `synced` durable bytes (and a durable name) plus `unsynced` bytes.
fn half_synced(fs: &FaultFs, name: &str, synced: &[u8], unsynced: &[u8]) -> Result<Box<dyn WritableFile>> {
    let mut f = fs.create(&p(name))?;
    f.append(synced)?;
    f.sync_data()?;
    fs.sync_dir(Path::new(DIR))?;
    f.append(unsynced)?;
    Ok(f)
}

fn is_eio(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO))
}

#[test]
fn crash_drops_unsynced_suffix_and_keeps_synced_prefix() -> Result<()> {
    let fs = new_fs(1)?;
    let _f = half_synced(&fs, "1.log", b"synced", b"-lost")?;
    assert_eq!(fs.unsynced_bytes(&p("1.log"))?, 5);
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, &p("1.log"))?, b"synced");
    Ok(())
}

#[test]
fn file_created_without_dir_sync_is_lost_even_if_data_synced() -> Result<()> {
    let fs = new_fs(2)?;
    let mut f = fs.create(&p("2.sst"))?;
    f.append(b"table")?;
    f.sync()?;
    assert_eq!(fs.pending_dir_ops(), 1);
    fs.crash(CrashMode::DropUnsynced)?;
    assert!(!fs.exists(&p("2.sst")));
    Ok(())
}

#[test]
fn unsynced_rename_is_undone_and_replaced_file_restored() -> Result<()> {
    let fs = new_fs(3)?;
    drop(half_synced(&fs, "CURRENT", b"MANIFEST-1", b"")?);
    let mut t = fs.create(&p("CURRENT.tmp"))?;
    t.append(b"MANIFEST-2")?;
    t.sync()?;
    fs.rename(&p("CURRENT.tmp"), &p("CURRENT"))?;
    assert_eq!(read_all(&fs, &p("CURRENT"))?, b"MANIFEST-2");
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, &p("CURRENT"))?, b"MANIFEST-1");
    assert!(!fs.exists(&p("CURRENT.tmp")), "its creation was never made durable");
    Ok(())
}

#[test]
fn synced_rename_survives_crash() -> Result<()> {
    let fs = new_fs(4)?;
    drop(half_synced(&fs, "CURRENT", b"MANIFEST-1", b"")?);
    let mut t = fs.create(&p("CURRENT.tmp"))?;
    t.append(b"MANIFEST-2")?;
    t.sync()?;
    fs.rename(&p("CURRENT.tmp"), &p("CURRENT"))?;
    fs.sync_dir(Path::new(DIR))?;
    assert_eq!(fs.pending_dir_ops(), 0);
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, &p("CURRENT"))?, b"MANIFEST-2");
    Ok(())
}

#[test]
fn unsynced_remove_is_undone_with_durable_contents() -> Result<()> {
    let fs = new_fs(5)?;
    drop(half_synced(&fs, "3.log", b"keep", b"drop")?);
    fs.remove(&p("3.log"))?;
    assert!(!fs.exists(&p("3.log")));
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, &p("3.log"))?, b"keep");
    Ok(())
}

#[test]
fn handles_and_locks_from_before_crash_are_dead() -> Result<()> {
    let fs = new_fs(6)?;
    let lock = fs.lock(&p("LOCK"))?;
    let mut w = half_synced(&fs, "4.log", b"a", b"b")?;
    let r = fs.open_read(&p("4.log"))?;
    fs.crash(CrashMode::DropUnsynced)?;
    assert!(is_eio(&w.append(b"x").unwrap_err()));
    assert!(is_eio(&w.sync().unwrap_err()));
    let mut buf = [0u8; 1];
    assert!(is_eio(&r.read_at(0, &mut buf).unwrap_err()));
    // The dead process's lock is gone; a fresh open can lock and write.
    let _lock2 = fs.lock(&p("LOCK"))?;
    drop(lock);
    let mut w2 = fs.open_append(&p("4.log"))?;
    w2.append(b"c")?;
    assert_eq!(read_all(&fs, &p("4.log"))?, b"ac");
    Ok(())
}

#[test]
fn countdown_fails_every_call_after_n_mutating_ops() -> Result<()> {
    let fs = new_fs(7)?;
    fs.reset_ops_count();
    fs.set_crash_after_ops(3);
    let mut f = fs.create(&p("5.log"))?; // 1
    f.append(b"x")?; // 2
    f.sync_data()?; // 3
    assert_eq!(fs.ops_count(), 3);
    assert!(is_eio(&f.append(b"y").unwrap_err()));
    assert!(fs.is_halted());
    assert!(is_eio(&fs.list(Path::new(DIR)).unwrap_err()), "reads fail too");
    assert!(is_eio(&fs.remove(&p("5.log")).unwrap_err()));
    assert_eq!(fs.ops_count(), 3, "refused calls are not counted");
    drop(f);
    fs.crash(CrashMode::DropUnsynced)?;
    assert!(!fs.is_halted());
    assert!(!fs.exists(&p("5.log")), "created after the last dir sync");
    fs.create(&p("6.log"))?;
    Ok(())
}

#[test]
fn enospc_injection_is_reported_as_no_space_once() -> Result<()> {
    let fs = new_fs(8)?;
    let mut f = fs.create(&p("7.log"))?;
    fs.fail_next(FaultOp::Append, FaultKind::NoSpace);
    let err = f.append(b"x").unwrap_err();
    assert!(err.is_no_space(), "{err}");
    assert_eq!(f.len(), 0, "a failed append has no effect");
    f.append(b"x")?;
    fs.fail_always(FaultOp::Sync, FaultKind::Io);
    assert!(is_eio(&f.sync_data().unwrap_err()));
    assert!(is_eio(&f.sync().unwrap_err()));
    fs.clear_faults();
    f.sync()?;
    Ok(())
}

#[test]
fn rules_honour_path_filter_and_skip_count() -> Result<()> {
    let fs = new_fs(9)?;
    fs.inject(FaultRule::once(FaultOp::Create, FaultKind::Io).on_path("MANIFEST").after(1));
    fs.create(&p("8.log"))?;
    fs.create(&p("MANIFEST-1"))?; // skipped
    assert!(fs.create(&p("MANIFEST-2")).is_err());
    fs.create(&p("MANIFEST-3"))?; // the rule fired once and is gone
    fs.inject(FaultRule::always(FaultOp::Any, FaultKind::Io).on_path("x.sst").times(2));
    assert!(fs.create(&p("x.sst")).is_err());
    assert!(fs.file_size(&p("x.sst")).is_err());
    fs.create(&p("x.sst"))?;
    Ok(())
}

#[test]
fn halt_stops_the_dead_process_from_deleting_files() -> Result<()> {
    let fs = new_fs(10)?;
    drop(half_synced(&fs, "9.sst", b"data", b"")?);
    fs.halt();
    assert!(fs.remove(&p("9.sst")).is_err());
    assert!(fs.create(&p("10.sst")).is_err());
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, &p("9.sst"))?, b"data");
    Ok(())
}

fn torn_len(seed: u64) -> Result<u64> {
    let fs = new_fs(seed)?;
    let _f = half_synced(&fs, "t.log", &[1u8; 100], &[2u8; 1000])?;
    fs.crash(CrashMode::TearUnsynced)?;
    let data = read_all(&fs, &p("t.log"))?;
    assert!(data.len() >= 100 && data.len() <= 1100);
    assert!(data[..100].iter().all(|&b| b == 1) && data[100..].iter().all(|&b| b == 2));
    Ok(data.len() as u64)
}

#[test]
fn torn_crash_keeps_a_seeded_prefix_of_unsynced_data() -> Result<()> {
    assert_eq!(torn_len(11)?, torn_len(11)?, "same seed, same tear");
    let lens: Vec<u64> = (0..8).map(torn_len).collect::<Result<_>>()?;
    assert!(lens.iter().any(|&l| l != lens[0]), "seeds vary the tear: {lens:?}");
    Ok(())
}

#[test]
fn corrupting_crash_only_touches_unsynced_bytes() -> Result<()> {
    let fs = new_fs(12)?;
    let _f = half_synced(&fs, "c.log", &[1u8; 100], &[2u8; 100])?;
    fs.crash(CrashMode::CorruptUnsynced)?;
    let data = read_all(&fs, &p("c.log"))?;
    assert_eq!(data.len(), 200);
    assert!(data[..100].iter().all(|&b| b == 1));
    let bad = data[100..].iter().filter(|&&b| b != 2).count();
    assert!((1..=4).contains(&bad), "{bad} corrupted bytes");
    Ok(())
}

#[test]
fn keep_unsynced_crash_only_kills_handles() -> Result<()> {
    let fs = new_fs(13)?;
    let mut f = fs.create(&p("k.log"))?;
    f.append(b"all")?;
    fs.crash(CrashMode::KeepUnsynced)?;
    assert_eq!(read_all(&fs, &p("k.log"))?, b"all");
    assert!(f.append(b"!").is_err());
    Ok(())
}

#[test]
fn read_corruption_flips_exactly_one_bit_deterministically() -> Result<()> {
    let fs = new_fs(14)?;
    drop(half_synced(&fs, "r.sst", &[0u8; 64], b"")?);
    drop(half_synced(&fs, "r.log", &[0u8; 64], b"")?);
    fs.set_read_corruption(1.0, Some(".sst"));
    let a = read_all(&fs, &p("r.sst"))?;
    let b = read_all(&fs, &p("r.sst"))?;
    assert_eq!(a.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
    assert_eq!(a, b, "same read, same flip");
    assert_eq!(read_all(&fs, &p("r.log"))?, [0u8; 64], "path filter");
    fs.clear_read_corruption();
    assert_eq!(read_all(&fs, &p("r.sst"))?, [0u8; 64]);
    Ok(())
}

#[test]
fn truncate_lowers_durable_length() -> Result<()> {
    let fs = new_fs(15)?;
    let mut f = half_synced(&fs, "w.log", b"abcdef", b"")?;
    f.truncate(2)?;
    f.append(b"XYZ")?;
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, &p("w.log"))?, b"ab");
    Ok(())
}

#[test]
fn a_link_shares_durability_and_vanishes_unless_its_directory_was_synced() -> Result<()> {
    let fs = new_fs(21)?;
    let mut f = half_synced(&fs, "5.log", b"synced", b"+later")?;
    fs.create_dir_all(Path::new("/ckpt"))?;
    fs.link(&p("5.log"), Path::new("/ckpt/5.log"))?;
    assert_eq!(fs.link_count(&p("5.log"))?, 2);
    // A sync through the new name makes the file durable under both names.
    fs.open_append(Path::new("/ckpt/5.log"))?.sync_data()?;
    assert_eq!(fs.unsynced_bytes(&p("5.log"))?, 0);
    f.append(b"-lost")?;
    fs.halt();
    drop(f);
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, &p("5.log"))?, b"synced+later");
    assert!(!fs.exists(Path::new("/ckpt/5.log")), "a link whose directory was never synced is undone");
    fs.link(&p("5.log"), Path::new("/ckpt/5.log"))?;
    fs.sync_dir(Path::new("/ckpt"))?;
    fs.remove(&p("5.log"))?;
    fs.sync_dir(Path::new(DIR))?;
    fs.crash(CrashMode::DropUnsynced)?;
    assert_eq!(read_all(&fs, Path::new("/ckpt/5.log"))?, b"synced+later", "the synced link outlives the first name");
    Ok(())
}

#[test]
fn shared_locks_are_released_by_a_crash() -> Result<()> {
    let fs = new_fs(22)?;
    let reader = fs.lock_shared(&p("READERS"))?;
    assert!(matches!(fs.try_lock_exclusive(&p("READERS")), Err(Error::Locked { .. })));
    fs.crash(CrashMode::KeepUnsynced)?;
    drop(fs.try_lock_exclusive(&p("READERS"))?);
    drop(reader);
    Ok(())
}
