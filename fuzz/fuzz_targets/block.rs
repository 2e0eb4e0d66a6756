//! Fuzz target: arbitrary bytes as a data/index block — `Block::new` must validate the
//! restart array, and iteration in both directions plus a seek must never panic.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use wisckey::internals::{Block, BlockIter, InternalIterator};

fuzz_target!(|data: &[u8]| {
    // First byte picks the seek target length (taken from the tail of the input).
    let (seek_len, body) = match data.split_first() {
        Some((n, rest)) => ((*n as usize).min(rest.len()), rest),
        None => return,
    };
    let seek = &body[body.len() - seek_len..];
    let Ok(block) = Block::new(body.to_vec(), Arc::from(Path::new("/fuzz.blk")), 0) else { return };
    let mut it = BlockIter::new(Arc::new(block));
    let mut steps = 0;
    if it.seek_to_first().is_ok() {
        while it.valid() && steps < 100_000 && it.next().is_ok() {
            let _ = (it.key().len(), it.value().len());
            steps += 1;
        }
    }
    let _ = it.seek(seek);
    if it.seek_to_last().is_ok() {
        while it.valid() && steps < 200_000 && it.prev().is_ok() {
            steps += 1;
        }
    }
});
