//! One value-log read handed to a background engine (the `pread` pool or io_uring) and the slot
//! its submitter collects the outcome from. Shared by `prefetch` (which submits) and `uring`
//! (which completes), so neither imports the other's internals.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::fs::RandomAccessFile;

/// What a read produced: the bytes, `None` when the file ends before them (the op may still
/// be in the log writer's buffer), or the I/O error.
pub type ReadBytes = Result<Option<Vec<u8>>>;

/// One read: `len` bytes at `offset` of `file`. Holding the handle keeps the file (and its
/// descriptor, which io_uring reads through) open until the read is done.
pub(crate) struct ReadRequest {
    pub(crate) file: Arc<dyn RandomAccessFile>,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) done: Arc<Completion>,
}

impl ReadRequest {
    /// A request and the completion its submitter waits on.
    pub(crate) fn new(file: Arc<dyn RandomAccessFile>, offset: u64, len: usize) -> (ReadRequest, Arc<Completion>) {
        let done = Arc::new(Completion::default());
        (ReadRequest { file, offset, len, done: done.clone() }, done)
    }

    /// Do the read on the calling thread (the pool's way, and every engine's fallback).
    pub(crate) fn run_inline(self) {
        let outcome = read_full(&*self.file, self.offset, self.len);
        self.done.finish(outcome);
    }
}

/// Where an engine leaves a finished read's outcome for the submitter.
#[derive(Default)]
pub(crate) struct Completion {
    outcome: Mutex<Option<ReadBytes>>,
    ready: Condvar,
}

impl Completion {
    pub(crate) fn finish(&self, outcome: ReadBytes) {
        *self.outcome.lock() = Some(outcome);
        self.ready.notify_all();
    }

    /// Block until `finish` was called, and take the outcome.
    pub(crate) fn wait(&self) -> ReadBytes {
        let mut slot = self.outcome.lock();
        loop {
            if let Some(outcome) = slot.take() {
                return outcome;
            }
            self.ready.wait(&mut slot);
        }
    }
}

/// Read `len` bytes at `offset`; `Ok(None)` when the file ends first.
pub(crate) fn read_full(f: &dyn RandomAccessFile, offset: u64, len: usize) -> Result<Option<Vec<u8>>> {
    f.read_new(offset, len)
}
