//! The io_uring engine of `ParallelReader`: one thread owns a ring, turns queued reads into
//! submission entries (many per `io_uring_enter`), and hands each completion back to its
//! submitter. Only used for files with a descriptor (`RandomAccessFile::raw_fd`).

use std::io;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, TryRecvError};
use io_uring::{opcode, types, IoUring};

use super::prefetch::ReadRequest;
use super::reader::read_full;
use crate::error::Error;

/// Submission queue size: reads in flight at once.
const RING_ENTRIES: u32 = 128;

/// Whether a ring can be set up and used here: `io_uring_setup` and `io_uring_enter` both
/// work (seccomp profiles, `kernel.io_uring_disabled` or old kernels refuse them).
pub(crate) fn probe() -> bool {
    let Ok(mut ring) = IoUring::new(2) else { return false };
    let nop = opcode::Nop::new().build().user_data(7);
    // SAFETY: a NOP entry references no memory.
    if unsafe { ring.submission().push(&nop) }.is_err() {
        return false;
    }
    if ring.submit_and_wait(1).is_err() {
        return false;
    }
    let done = ring.completion().next();
    done.is_some_and(|c| c.user_data() == 7 && c.result() >= 0)
}

/// Set up a ring and start the thread that drives it; it exits when `rx` is closed and every
/// read in flight has completed.
pub(crate) fn start(rx: Receiver<ReadRequest>) -> io::Result<JoinHandle<()>> {
    let ring = IoUring::new(RING_ENTRIES)?;
    std::thread::Builder::new().name("wisckey-uring".into()).spawn(move || Driver::new(ring).run(rx))
}

/// A read the kernel owns: `buf` must stay where it is, and `req.file` open, until its
/// completion is reaped.
struct InFlight {
    req: ReadRequest,
    buf: Vec<u8>,
}

struct Driver {
    ring: IoUring,
    /// Reads in flight, indexed by their entry's `user_data`.
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
}

impl Driver {
    fn new(ring: IoUring) -> Self {
        let n = RING_ENTRIES as usize;
        Driver { ring, slots: (0..n).map(|_| None).collect(), free: (0..n).rev().collect(), in_flight: 0 }
    }

    fn run(mut self, rx: Receiver<ReadRequest>) {
        let mut open = true;
        loop {
            if self.in_flight == 0 {
                match rx.recv() {
                    Ok(req) if open => self.push(req),
                    _ => return,
                }
            }
            // Take everything queued (up to the ring's size) into one submission.
            while open && !self.free.is_empty() {
                match rx.try_recv() {
                    Ok(req) => self.push(req),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                let transient = matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY));
                if !transient {
                    self.abandon(rx, e);
                    return;
                }
            }
            self.reap();
        }
    }

    /// Turn a request into a submission entry; read it inline if the ring cannot take it.
    fn push(&mut self, req: ReadRequest) {
        let (Some(fd), Ok(len), Some(slot)) = (req.file.raw_fd(), u32::try_from(req.len), self.free.pop()) else {
            return req.run_inline();
        };
        let mut buf = vec![0u8; req.len];
        let entry = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len).offset(req.offset).build().user_data(slot as u64);
        // SAFETY: the entry points at `buf`'s heap block and `fd`. Both stay valid until the
        // completion is reaped: the `InFlight` stored below owns the `Vec` (moving a `Vec`
        // does not move its heap block) and `req.file`, the handle that owns the descriptor;
        // a slot is only emptied in `reap` or leaked in `abandon`.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            self.free.push(slot);
            return req.run_inline();
        }
        self.slots[slot] = Some(InFlight { req, buf });
        self.in_flight += 1;
    }

    /// Hand every completed read back to its submitter.
    fn reap(&mut self) {
        let done: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        for (slot, res) in done {
            let Some(f) = self.slots.get_mut(slot as usize).and_then(Option::take) else { continue };
            self.free.push(slot as usize);
            self.in_flight -= 1;
            complete(f, res);
        }
    }

    /// The ring failed for good: answer every read in flight with the error, leak the ring
    /// and the buffers the kernel may still write into, and serve the queue with `pread`.
    fn abandon(self, rx: Receiver<ReadRequest>, e: io::Error) {
        tracing::error!(error = %e, "io_uring failed; value reads fall back to pread");
        let Driver { ring, slots, .. } = self;
        for f in slots.iter().flatten() {
            let err = io::Error::new(e.kind(), format!("io_uring_enter failed: {e}"));
            f.req.done.finish(Err(Error::io("io_uring read", f.req.file.path(), err)));
        }
        std::mem::forget(slots);
        std::mem::forget(ring);
        rx.iter().for_each(ReadRequest::run_inline);
    }
}

/// Finish one read from its completion result (bytes read, or `-errno`).
fn complete(f: InFlight, res: i32) {
    let InFlight { req, mut buf } = f;
    let Ok(n) = usize::try_from(res) else {
        // Redo a failed read with `pread`, which reports the error with the file's path and
        // retries what is transient.
        return req.run_inline();
    };
    if n >= req.len {
        req.done.finish(Ok(Some(buf)));
    } else if n == 0 {
        req.done.finish(Ok(None));
    } else {
        // A short read: fetch the rest the ordinary way.
        let rest = read_full(&*req.file, req.offset + n as u64, req.len - n);
        buf.truncate(n);
        req.done.finish(rest.map(|tail| {
            tail.map(|t| {
                buf.extend_from_slice(&t);
                buf
            })
        }));
    }
}
