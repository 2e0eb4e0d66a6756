//! Fuzz target: a tiny op-sequence interpreter over a `Db` on `FaultFs` (in memory), checked
//! against a `BTreeMap`. Byte 0 sets a crash countdown (mutating fs calls before the fs
//! halts; 0 = never); the rest is ops. Every acknowledged synced write must survive the
//! crash; only the one write in flight when the fs halted may be either old or new.
#![no_main]

use std::collections::BTreeMap;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use wisckey::fs::{CrashMode, FaultFs};
use wisckey::{Db, Options, ReadOptions, WriteOptions};

const DIR: &str = "/db";
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn options(fs: &FaultFs) -> Options {
    Options::default()
        .vfs(Arc::new(fs.clone()))
        .write_buffer_bytes(2 << 10)
        .target_file_size_bytes(4 << 10)
        .block_size_bytes(256)
        .block_restart_interval(2)
        .max_bytes_for_level_base(16 << 10)
        .l0_compaction_trigger(2)
        .min_separated_value_bytes(32)
        .gc_interval_ms(0)
}

/// The key/value an op names: small key space so overwrites and deletes hit.
fn key(b: u8) -> Vec<u8> {
    format!("k{:02}", b % 24).into_bytes()
}

fn value(b: u8, n: usize) -> Vec<u8> {
    vec![b'a' + b % 26; (b as usize % 5) * 17 + n % 7]
}

fn contents(db: &Db) -> Model {
    let it = db.scan(&ReadOptions::default()).expect("scan after recovery");
    it.map(|r| r.expect("scan item after recovery")).collect()
}

/// A write that failed: only acceptable because the fs halted (the simulated crash).
fn in_flight(fs: &FaultFs, k: Vec<u8>, v: Option<Vec<u8>>, e: wisckey::Error) -> (Vec<u8>, Option<Vec<u8>>) {
    assert!(fs.is_halted(), "write failed without a crash: {e}");
    (k, v)
}

/// A reopen that failed: only acceptable because the fs halted.
fn in_flight_open(fs: &FaultFs, e: wisckey::Error) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    assert!(fs.is_halted(), "reopen failed without a crash: {e}");
    None
}

/// Run the ops until one fails; returns the write in flight when the fs halted, if any.
fn run(
    slot: &mut Option<Db>,
    ops: &[u8],
    model: &mut Model,
    fs: &FaultFs,
    opts: &Options,
) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let sync = WriteOptions::synced();
    for (i, pair) in ops.chunks(2).enumerate() {
        let db = slot.as_ref()?;
        let (op, arg) = (pair[0], *pair.get(1).unwrap_or(&0));
        let k = key(arg);
        let res = match op % 8 {
            0..=3 => {
                let v = value(op, i);
                match db.put_opt(&sync, &k, &v) {
                    Ok(()) => {
                        model.insert(k.clone(), v);
                        Ok(())
                    }
                    Err(e) => return Some(in_flight(fs, k, Some(v), e)),
                }
            }
            4 | 5 => match db.delete_opt(&sync, &k) {
                Ok(()) => {
                    model.remove(&k);
                    Ok(())
                }
                Err(e) => return Some(in_flight(fs, k, None, e)),
            },
            6 => db.flush(),
            _ => {
                // Reopen: close (the lock must be released first), then open again.
                drop(slot.take());
                match Db::open(DIR, opts.clone()) {
                    Ok(d) => *slot = Some(d),
                    Err(e) => return in_flight_open(fs, e),
                }
                Ok(())
            }
        };
        if fs.is_halted() {
            return None;
        }
        if let Err(e) = res {
            panic!("op {op} failed without a crash: {e}");
        }
        let db = slot.as_ref()?;
        match db.get(&k) {
            Ok(got) => assert_eq!(got.as_ref(), model.get(&k), "read-your-write failed for {k:?}"),
            Err(e) => assert!(fs.is_halted(), "get failed without a crash: {e}"),
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let Some((&countdown, ops)) = data.split_first() else { return };
    let ops = &ops[..ops.len().min(400)];
    let fs = FaultFs::in_memory(u64::from(countdown));
    let opts = options(&fs);
    let mut db = Some(Db::open(DIR, opts.clone()).expect("open a fresh database"));
    if countdown != 0 {
        fs.set_crash_after_ops(u64::from(countdown) * 4);
    }
    let mut model = Model::new();
    let in_flight = run(&mut db, ops, &mut model, &fs, &opts);
    fs.halt();
    drop(db);
    fs.crash(CrashMode::DropUnsynced).expect("crash");
    let db = Db::open(DIR, opts).expect("reopen after crash");
    let got = contents(&db);
    if let Some((k, v)) = in_flight {
        // The write in flight may or may not have become durable.
        if got.get(&k) == v.as_ref() {
            match v {
                Some(v) => model.insert(k, v),
                None => model.remove(&k),
            };
        }
    }
    assert_eq!(got, model, "recovered contents differ from the acknowledged writes");
    db.close().expect("close");
});
