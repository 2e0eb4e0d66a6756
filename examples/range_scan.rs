//! Range scans: a bounded forward scan as a Rust iterator, a reverse scan, a short scan of
//! known length (`scan_from`: keys first, then every value as one batch), and a LevelDB-style
//! cursor that seeks and steps both ways.
//!
//! `cargo run --example range_scan`

use wisckey::{Db, Options, ReadOptions};

fn main() -> wisckey::Result<()> {
    let dir = std::env::temp_dir().join(format!("wisckey-example-scan-{}", std::process::id()));
    let db = Db::open(&dir, Options::default())?;
    for i in 0..100u32 {
        // Every tenth value is large enough to live in the value log; scans read those
        // ahead in parallel once they move sequentially.
        let value = if i % 10 == 0 { vec![b'v'; 4096] } else { format!("value-{i}").into_bytes() };
        db.put(format!("key{i:03}").as_bytes(), &value)?;
    }

    // Keys in [key020, key030): the upper bound is exclusive.
    let ro = ReadOptions {
        lower_bound: Some(b"key020".to_vec()),
        upper_bound: Some(b"key030".to_vec()),
        ..ReadOptions::default()
    };
    let keys: Vec<String> =
        db.scan(&ro)?.map(|e| e.map(|(k, _)| String::from_utf8_lossy(&k).into_owned())).collect::<Result<_, _>>()?;
    println!("forward: {keys:?}");
    assert_eq!(keys.len(), 10);

    let last_three: Vec<Vec<u8>> =
        db.scan_rev(&ReadOptions::default())?.take(3).map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    println!(
        "the three last keys, newest key first: {:?}",
        last_three.iter().map(|k| String::from_utf8_lossy(k)).collect::<Vec<_>>()
    );
    assert_eq!(last_three[0], b"key099");

    // A short scan of known length: ten entries from key040, values read as one batch.
    let page = db.scan_from(&ReadOptions::default(), b"key040", 10)?;
    assert_eq!(page.len(), 10);
    assert_eq!(page[0].0, b"key040");
    assert_eq!(page[0].1.len(), 4096, "key040's value lives in the value log");
    assert_eq!(page[1].1, b"value-41");
    println!("scan_from: {} entries from key040 to {}", page.len(), String::from_utf8_lossy(&page[9].0));

    // A cursor: seek, then step either way.
    let mut it = db.iter(&ReadOptions::default())?;
    it.seek(b"key050")?;
    assert!(it.valid());
    println!("at {} ({} value bytes)", String::from_utf8_lossy(it.key()), it.value().len());
    it.prev()?;
    println!("prev: {}", String::from_utf8_lossy(it.key()));
    assert_eq!(it.key(), b"key049");
    it.next()?;
    it.next()?;
    assert_eq!(it.key(), b"key051");
    drop(it);

    db.close()?;
    wisckey::destroy(&dir, &Options::default())
}
