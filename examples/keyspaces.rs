//! Keyspaces: named trees of one database, each shaped for its own workload, sharing one log,
//! one memtable budget and the caches. A batch spans keyspaces atomically, `range` and
//! `prefix` walk a keyspace from both ends, and dropping a keyspace is one quick call.
//!
//! `cargo run --example keyspaces`

use wisckey::{Db, MergePolicy, Options, WriteBatch, WriteOptions};

fn main() -> wisckey::Result<()> {
    let dir = std::env::temp_dir().join(format!("wisckey-example-keyspaces-{}", std::process::id()));
    let db = Db::open(&dir, Options::default())?;

    // Users are read often (leveling, the default); an event log is mostly written, so a
    // tiered tree that rewrites each entry fewer times suits it.
    let users = db.create_keyspace("users", Options::default())?;
    let events = db.create_keyspace("events", Options::default().merge_policy(MergePolicy::tiering(4)))?;

    // One atomic batch across both keyspaces: a signup and its event, or neither.
    let mut signup = WriteBatch::new();
    signup.put_in(&users, "user:ada", "Ada Lovelace").put_in(&events, "event:0001", "signup user:ada");
    db.write(&WriteOptions::synced(), &signup)?;
    for i in 2..=5 {
        events.put(format!("event:{i:04}"), format!("login {i}"))?;
    }
    assert_eq!(users.get("user:ada")?.as_deref(), Some(&b"Ada Lovelace"[..]));
    assert_eq!(db.get("user:ada")?, None, "the default keyspace is a tree of its own");

    // A prefix scan from both ends: newest events first with `rev()`.
    let newest: Vec<String> = events
        .prefix("event:")?
        .rev()
        .take(2)
        .map(|e| e.map(|(k, _)| String::from_utf8_lossy(&k).into_owned()))
        .collect::<wisckey::Result<_>>()?;
    println!("newest events: {newest:?}");
    assert_eq!(newest, ["event:0005", "event:0004"]);
    let middle = events.range("event:0002".."event:0004")?.count();
    assert_eq!(middle, 2);

    println!("keyspaces: {:?}", db.keyspaces());
    // Dropping is one manifest record: the tables go and the values become garbage for
    // value-log GC in the background.
    db.drop_keyspace("events")?;
    assert!(matches!(events.get("event:0001"), Err(wisckey::Error::KeyspaceDropped { .. })));
    println!("after the drop: {:?}", db.keyspaces());

    drop((users, events));
    db.close()?;
    // Reopened, the keyspace is still there with the options it was created with.
    let db = Db::open(&dir, Options::default())?;
    assert_eq!(db.keyspace("users")?.get("user:ada")?.as_deref(), Some(&b"Ada Lovelace"[..]));
    db.close()?;
    wisckey::destroy(&dir, &Options::default())
}
