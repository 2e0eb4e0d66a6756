//! Checkpoints, backups and read-only handles: copy a live database in one step (hard links),
//! keep writing to it, and see that the copy still holds the state it was taken at; read the
//! database from a second, read-only handle while the writer goes on; back it up twice (the
//! second backup copies almost nothing) and restore. Every keyspace goes along.
//!
//! `cargo run --example checkpoint`

use wisckey::{Db, Options, ReadOptions};

fn main() -> wisckey::Result<()> {
    let root = std::env::temp_dir().join(format!("wisckey-example-checkpoint-{}", std::process::id()));
    let (dir, copy, backups, restored) =
        (root.join("db"), root.join("copy"), root.join("backups"), root.join("restored"));
    let db = Db::open(&dir, Options::default())?;
    let value = |round: u32| vec![b'a' + round as u8; 4 << 10];
    for i in 0..500u32 {
        db.put(format!("key{i:04}").as_bytes(), value(0))?;
    }
    // A second keyspace, written in one batch with the default one.
    let events = db.create_keyspace("events", Options::default())?;
    let mut batch = wisckey::WriteBatch::new();
    batch.put("key0007-seen", "yes").put_in(&events, "event:1", "signup");
    db.write(&wisckey::WriteOptions::default(), &batch)?;
    db.flush()?;

    // A checkpoint: a database of its own, at one sequence number, made of hard links.
    let info = db.checkpoint(&copy)?;
    println!(
        "checkpoint at sequence {}: {} files linked, {} copied ({} bytes)",
        info.sequence, info.files_linked, info.files_copied, info.bytes_copied
    );

    // A read-only handle sees the database as it opens; the writer goes on meanwhile.
    let reader = Db::open_read_only(&dir, Options::default())?;
    for i in 0..500u32 {
        db.put(format!("key{i:04}").as_bytes(), value(1))?;
    }
    db.compact_range(None, None)?;
    db.run_gc(0.0)?;
    assert_eq!(reader.get(b"key0007")?.as_deref(), Some(&value(0)[..]));
    assert_eq!(reader.keyspace("events")?.get("event:1")?.as_deref(), Some(&b"signup"[..]));
    assert!(matches!(reader.put(b"x", b"y"), Err(wisckey::Error::ReadOnly { .. })));
    drop(reader);

    // The checkpoint did not follow the overwrites, compaction or GC.
    let snapshot_copy = Db::open(&copy, Options::default())?;
    assert_eq!(snapshot_copy.get(b"key0007")?.as_deref(), Some(&value(0)[..]));
    assert_eq!(snapshot_copy.scan(&ReadOptions::default())?.count(), 501);
    assert_eq!(snapshot_copy.keyspace("events")?.get("event:1")?.as_deref(), Some(&b"signup"[..]));
    assert!(snapshot_copy.verify()?.is_healthy());
    drop(snapshot_copy);

    // Backups: the second copies only what changed since the first.
    let first = db.backup(&backups)?;
    let second = db.backup(&backups)?;
    println!(
        "backup {}: {} files, {} KiB copied; backup {}: {} KiB copied",
        first.id,
        first.files,
        first.bytes_copied >> 10,
        second.id,
        second.bytes_copied >> 10
    );
    assert_eq!(second.bytes_copied, 0, "nothing changed between the two backups");
    wisckey::restore_backup(&backups, None, &restored, &Options::default())?;
    let back = Db::open(&restored, Options::default())?;
    assert_eq!(back.get(b"key0007")?.as_deref(), Some(&value(1)[..]));
    assert_eq!(back.keyspaces(), ["default", "events"]);
    drop(back);

    db.close()?;
    std::fs::remove_dir_all(&root).map_err(|e| wisckey::Error::io("remove_dir_all", &root, e))?;
    Ok(())
}
