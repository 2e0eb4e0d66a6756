//! Apply several writes atomically with a `WriteBatch`, and read a consistent past view
//! through a snapshot while the database moves on.
//!
//! `cargo run --example batch_and_snapshot`

use wisckey::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

fn main() -> wisckey::Result<()> {
    let dir = std::env::temp_dir().join(format!("wisckey-example-batch-{}", std::process::id()));
    let db = Db::open(&dir, Options::default())?;

    // A transfer between two accounts: after a crash, either both updates are there or none.
    db.put(b"alice", b"100")?;
    db.put(b"bob", b"0")?;
    let mut transfer = WriteBatch::new();
    transfer.put(b"alice", b"70").put(b"bob", b"30");
    db.write(&WriteOptions::synced(), &transfer)?;

    // A snapshot sees the database as it is now, whatever is written later.
    let snapshot = db.snapshot();
    let mut second = WriteBatch::new();
    second.put(b"alice", b"0").put(b"bob", b"100").delete(b"carol");
    db.write(&WriteOptions::default(), &second)?;

    let then = ReadOptions { snapshot: Some(snapshot), ..ReadOptions::default() };
    let read = |ro: &ReadOptions, key: &[u8]| -> wisckey::Result<String> {
        Ok(String::from_utf8_lossy(&db.get_opt(ro, key)?.unwrap_or_default()).into_owned())
    };
    println!("at the snapshot: alice={} bob={}", read(&then, b"alice")?, read(&then, b"bob")?);
    assert_eq!(read(&then, b"alice")?, "70");
    let now = ReadOptions::default();
    println!("now:             alice={} bob={}", read(&now, b"alice")?, read(&now, b"bob")?);
    assert_eq!(read(&now, b"bob")?, "100");
    // The snapshot is released when the last clone of it is dropped.
    drop(then);

    db.close()?;
    wisckey::destroy(&dir, &Options::default())
}
