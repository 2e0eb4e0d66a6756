//! Value-log garbage collection and statistics: overwrite large values, let compaction count
//! the garbage, collect it, and watch the space come back.
//!
//! `cargo run --example gc_and_stats`

use wisckey::{Db, Options};

fn main() -> wisckey::Result<()> {
    let dir = std::env::temp_dir().join(format!("wisckey-example-gc-{}", std::process::id()));
    // Small files so a short run fills several; automatic GC off to run it by hand.
    let options = || Options::default().log_file_bytes(1 << 20).gc_interval_ms(0);
    let db = Db::open(&dir, options())?;

    let value = |round: u32| vec![b'a' + round as u8; 8 << 10];
    for round in 0..4u32 {
        for i in 0..200u32 {
            db.put(format!("key{i:04}").as_bytes(), value(round))?;
        }
        // Each round in its own table, so compaction meets the versions it replaces.
        db.flush()?;
    }
    // Compaction finds the overwritten values and counts them as value-log garbage.
    db.compact_range(None, None)?;
    let before = db.stats();
    println!(
        "before GC: {} KiB of value log on disk, {} KiB of it garbage, write amplification {:.2}",
        before.vlog_disk_bytes >> 10,
        before.vlog_garbage_bytes >> 10,
        before.write_amp()
    );

    // Collect every value-log file with at least half of it garbage.
    let report = db.run_gc(0.5)?;
    let after = db.stats();
    println!(
        "GC collected {} files: read {} KiB, moved {} KiB of live values to cold files; {} KiB of value log left",
        report.files_collected,
        report.bytes_read >> 10,
        report.bytes_rewritten >> 10,
        after.vlog_disk_bytes >> 10
    );
    assert!(after.vlog_disk_bytes < before.vlog_disk_bytes);
    // Every live value is still there.
    for i in 0..200u32 {
        assert_eq!(db.get(format!("key{i:04}").as_bytes())?.as_deref(), Some(&value(3)[..]));
    }
    // Every checksum and live value pointer checks out.
    let check = db.verify()?;
    assert!(check.is_healthy(), "{check}");
    print!("{check}");

    db.close()?;
    wisckey::destroy(&dir, &options())
}
