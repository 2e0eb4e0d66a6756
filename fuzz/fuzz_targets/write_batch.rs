//! Fuzz target: arbitrary bytes as write-batch ops (the op area of a log group) and as a
//! value pointer. Decoding must never panic; an error offset lies inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wisckey::internals::ValuePointer;
use wisckey::{BatchIter, BatchOp};

fuzz_target!(|data: &[u8]| {
    let mut it = BatchIter::over(data);
    while let Some(op) = it.next() {
        match op {
            Ok(BatchOp::Put { key, value, .. }) => assert!(key.len() + value.len() <= data.len()),
            Ok(BatchOp::Delete { key }) => assert!(key.len() <= data.len()),
            Err(at) => {
                assert!(at <= data.len(), "error offset {at} past the input");
                break;
            }
        }
        assert!(it.offset() <= data.len());
    }
    if let Some(p) = ValuePointer::decode(data) {
        assert_eq!(ValuePointer::decode(&p.encoded()), Some(p));
    }
});
