//! Open a database, put, get and delete a key, and close it.
//!
//! `cargo run --example basic`

use wisckey::{Db, Options, WriteOptions};

fn main() -> wisckey::Result<()> {
    let dir = std::env::temp_dir().join(format!("wisckey-example-basic-{}", std::process::id()));
    let db = Db::open(&dir, Options::default())?;

    db.put(b"apple", b"red")?;
    // A synced write survives a crash (or power loss) once it returns.
    db.put_opt(&WriteOptions::synced(), b"banana", b"yellow")?;
    assert_eq!(db.get(b"apple")?.as_deref(), Some(&b"red"[..]));
    println!("apple = {}", String::from_utf8_lossy(&db.get(b"apple")?.unwrap_or_default()));

    db.delete(b"apple")?;
    assert_eq!(db.get(b"apple")?, None);
    println!("after delete: apple = {:?}", db.get(b"apple")?);

    // Values of at least `min_separated_value_bytes` (1 KiB by default) stay in the value
    // log; the LSM-tree holds a pointer. Reads look the same either way.
    let big = vec![b'x'; 64 << 10];
    db.put(b"big", &big)?;
    assert_eq!(db.get(b"big")?.as_deref(), Some(&big[..]));

    db.close()?;
    // Reopening finds everything written before the close.
    let db = Db::open(&dir, Options::default())?;
    assert_eq!(db.get(b"banana")?.as_deref(), Some(&b"yellow"[..]));
    db.close()?;
    wisckey::destroy(&dir, &Options::default())
}
