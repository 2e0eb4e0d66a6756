//! Fuzz target: arbitrary bytes as a write-ahead log file read by `LogReader` to the end;
//! every group that passes its crc has its ops decoded too. Must never panic or loop.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use wisckey::fs::{MemFs, Vfs};
use wisckey::internals::LogReader;
use wisckey::BatchIter;

fuzz_target!(|data: &[u8]| {
    let fs = MemFs::new();
    let path = Path::new("/000003.log");
    let Ok(mut f) = fs.create(path) else { return };
    if f.append(data).is_err() {
        return;
    }
    drop(f);
    let Ok(file) = fs.open_read(path) else { return };
    let Ok(mut reader) = LogReader::new(file, 3, 0) else { return };
    for _ in 0..100_000 {
        match reader.next_record() {
            Ok(Ok(rec)) => {
                assert!(reader.offset() <= data.len() as u64, "reader offset past the end of the file");
                for op in BatchIter::over(&rec.ops) {
                    if op.is_err() {
                        break;
                    }
                }
            }
            Ok(Err(_)) | Err(_) => break,
        }
    }
});
