//! The io_uring engine of `ParallelReader`. The thread that asks for a read pushes its entry
//! and enters the kernel itself (a read of cached pages completes right there, on that thread,
//! so many readers copy in parallel); a driver thread waits for the reads that go to the
//! device and hands each completion back to its submitter. Only used for files with a
//! descriptor (`RandomAccessFile::raw_fd`).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use io_uring::{opcode, types, IoUring};
use parking_lot::{Condvar, Mutex};

use super::request::{read_full, ReadRequest};
use crate::error::Error;

/// Submission queue size: reads in flight at once (more are read inline).
const RING_ENTRIES: u32 = 256;
/// `user_data` of the no-op that wakes the driver for shutdown.
const WAKE: u64 = u64::MAX;

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

/// A read the kernel owns: `buf` must stay where it is, and `req.file` open, until its
/// completion is reaped.
struct InFlight {
    req: ReadRequest,
    buf: Vec<u8>,
    /// Where in the buffer the kernel writes (a direct read's alignment in memory; 0 otherwise).
    mem_skip: usize,
    /// Where in the buffer the requested bytes begin (a direct read's `mem_skip` plus the
    /// sectors' bytes before the offset asked for; 0 otherwise).
    lead: usize,
}

/// Reads in flight, indexed by their entry's `user_data`.
struct Slots {
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
}

struct Ring {
    ring: IoUring,
    /// Held while pushing: the submission queue may have one user at a time.
    sq: Mutex<()>,
    /// Held while reaping, for the same reason, and guarding the reads in flight.
    table: Mutex<Slots>,
    /// Signalled when reads are left in flight for the driver to wait on.
    work: Condvar,
    stopping: AtomicBool,
    /// `io_uring_enter` failed for good: every read goes inline.
    broken: AtomicBool,
}

/// A running ring and its driver thread; dropping it waits for every read in flight.
pub(crate) struct UringEngine {
    ring: Arc<Ring>,
    driver: Option<JoinHandle<()>>,
}

impl UringEngine {
    pub(crate) fn start() -> io::Result<UringEngine> {
        let n = RING_ENTRIES as usize;
        let ring = Arc::new(Ring {
            ring: IoUring::new(RING_ENTRIES)?,
            sq: Mutex::new(()),
            table: Mutex::new(Slots { slots: (0..n).map(|_| None).collect(), free: (0..n).collect(), in_flight: 0 }),
            work: Condvar::new(),
            stopping: AtomicBool::new(false),
            broken: AtomicBool::new(false),
        });
        let r = ring.clone();
        let driver = std::thread::Builder::new().name("wisckey-uring".into()).spawn(move || drive(&r))?;
        Ok(UringEngine { ring, driver: Some(driver) })
    }

    /// Start reads with a single `io_uring_enter` (one kernel entry and one device doorbell
    /// for the batch).
    pub(crate) fn submit_many(&self, reqs: impl IntoIterator<Item = ReadRequest>) {
        self.ring.submit_many(reqs);
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        self.ring.stopping.store(true, Ordering::Release);
        {
            let _t = self.ring.table.lock();
            self.ring.work.notify_all();
        }
        // Wake the driver if it waits in the kernel.
        let nop = opcode::Nop::new().build().user_data(WAKE);
        let pushed = {
            let _sq = self.ring.sq.lock();
            // SAFETY: a NOP references no memory; `sq` makes this the only submission queue.
            unsafe { self.ring.ring.submission_shared().push(&nop) }.is_ok()
        };
        if pushed {
            let _ = self.ring.ring.submit();
        }
        if let Some(d) = self.driver.take() {
            let _ = d.join();
        }
    }
}

impl Ring {
    /// Push reads and enter the kernel once for all of them; a read the ring cannot take is
    /// read inline.
    fn submit_many(&self, reqs: impl IntoIterator<Item = ReadRequest>) {
        let mut pushed = 0;
        for req in reqs {
            pushed += usize::from(self.push(req));
        }
        if pushed == 0 {
            return;
        }
        // Reads of cached pages complete inside this call; the rest go to the device.
        if let Err(e) = self.ring.submit() {
            tracing::debug!(error = %e, "io_uring submit failed; the driver retries");
        }
        self.reap();
        let t = self.table.lock();
        if t.in_flight > 0 {
            self.work.notify_one();
        }
    }

    /// Put a read on the submission queue; false when it was read inline instead.
    fn push(&self, req: ReadRequest) -> bool {
        let (Some(fd), Ok(len)) = (req.file.raw_fd(), u32::try_from(req.len)) else {
            req.run_inline();
            return false;
        };
        if self.broken.load(Ordering::Acquire) {
            req.run_inline();
            return false;
        }
        let Some((offset, len, mut buf, mem_skip)) = read_window(&req, len) else {
            req.run_inline();
            return false;
        };
        let lead = mem_skip + (req.offset - offset) as usize;
        debug_assert!(mem_skip + len as usize <= buf.capacity());
        // SAFETY: `mem_skip` is within the buffer's capacity (`read_window`).
        let ptr = unsafe { buf.as_mut_ptr().add(mem_skip) };
        let slot = {
            let mut t = self.table.lock();
            let Some(slot) = t.free.pop() else {
                drop(t);
                req.run_inline();
                return false;
            };
            t.slots[slot] = Some(InFlight { req, buf, mem_skip, lead });
            t.in_flight += 1;
            slot
        };
        let entry = opcode::Read::new(types::Fd(fd), ptr, len).offset(offset).build().user_data(slot as u64);
        let pushed = {
            let _sq = self.sq.lock();
            // SAFETY: the entry points at the heap block of the `Vec` now owned by the table
            // slot (moving a `Vec` does not move its block) and at `fd`, owned by the slot's
            // `req.file`. A slot is only emptied when its completion is reaped (or, if the push
            // fails, right below, before the kernel saw it), or leaked if the ring breaks. `sq`
            // makes this the only submission queue in use.
            unsafe { self.ring.submission_shared().push(&entry) }.is_ok()
        };
        if !pushed {
            if let Some(taken) = self.release(slot) {
                taken.req.run_inline();
            }
            return false;
        }
        true
    }

    /// Take a slot back that the kernel never saw.
    fn release(&self, slot: usize) -> Option<InFlight> {
        let mut t = self.table.lock();
        let taken = t.slots[slot].take()?;
        t.in_flight -= 1;
        t.free.push(slot);
        Some(taken)
    }

    /// Hand every completed read back to its submitter.
    fn reap(&self) {
        let done: Vec<(InFlight, i32)> = {
            let mut t = self.table.lock();
            // SAFETY: the table lock makes this the only completion queue in use.
            let cq: Vec<(u64, i32)> =
                unsafe { self.ring.completion_shared() }.map(|c| (c.user_data(), c.result())).collect();
            let mut done = Vec::with_capacity(cq.len());
            for (slot, res) in cq {
                let Some(f) = t.slots.get_mut(slot as usize).and_then(Option::take) else { continue };
                t.free.push(slot as usize);
                t.in_flight -= 1;
                done.push((f, res));
            }
            done
        };
        for (f, res) in done {
            complete(f, res);
        }
    }

    /// The ring failed for good: answer every read in flight with the error and leak the
    /// buffers the kernel may still write into (the caller leaks the ring itself).
    fn abandon(&self, e: &io::Error) {
        tracing::error!(error = %e, "io_uring failed; value reads fall back to pread");
        self.broken.store(true, Ordering::Release);
        let mut t = self.table.lock();
        for f in t.slots.iter_mut().filter_map(Option::take) {
            let err = io::Error::new(e.kind(), format!("io_uring_enter failed: {e}"));
            f.req.done.finish(Err(Error::io("io_uring read", f.req.file.path(), err)));
            std::mem::forget(f.buf);
        }
        t.in_flight = 0;
    }
}

/// The driver: while reads are in flight, wait in the kernel for completions and reap them;
/// exits at shutdown once none is left.
fn drive(ring: &Arc<Ring>) {
    loop {
        {
            let mut t = ring.table.lock();
            while t.in_flight == 0 {
                if ring.stopping.load(Ordering::Acquire) {
                    return;
                }
                ring.work.wait(&mut t);
            }
        }
        if let Err(e) = ring.ring.submit_and_wait(1) {
            if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) {
                ring.abandon(&e);
                // The kernel may still write into the leaked buffers: never tear the ring down.
                std::mem::forget(ring.clone());
                return;
            }
        }
        ring.reap();
    }
}

/// Where the kernel reads `req` into: the file offset, length, buffer (not zero-filled: the
/// kernel writes it, and only what it wrote is kept) and the buffer offset the read lands at.
/// A direct read covers the aligned sectors around the bytes, at an aligned address. `None`
/// when the aligned span does not fit a read.
fn read_window(req: &ReadRequest, len: u32) -> Option<(u64, u32, Vec<u8>, usize)> {
    let Some((offset_align, mem_align)) = req.file.direct_alignment() else {
        return Some((req.offset, len, Vec::with_capacity(req.len), 0));
    };
    let start = req.offset / offset_align * offset_align;
    let end = (req.offset + req.len as u64).div_ceil(offset_align) * offset_align;
    let span = u32::try_from(end - start).ok()?;
    let buf: Vec<u8> = Vec::with_capacity(span as usize + mem_align);
    let skip = buf.as_ptr().align_offset(mem_align);
    (skip <= mem_align).then_some((start, span, buf, skip))
}

/// Finish one read from its completion result (bytes read, or `-errno`).
fn complete(f: InFlight, res: i32) {
    let InFlight { req, mut buf, mem_skip, lead } = f;
    let Ok(n) = usize::try_from(res) else {
        // Redo a failed read with `pread`, which reports the error with the file's path and
        // retries what is transient.
        return req.run_inline();
    };
    if req.file.direct_alignment().is_some() {
        if mem_skip + n < lead + req.len {
            // Short: the file ends first (or a partial read); the plain read sorts it out.
            return req.run_inline();
        }
        // SAFETY: the kernel wrote `n` bytes from `mem_skip` on, which cover the `req.len`
        // bytes from `lead` (checked above), all within the buffer's capacity.
        let wanted = unsafe { std::slice::from_raw_parts(buf.as_ptr().add(lead), req.len) };
        return req.done.finish(Ok(Some(wanted.to_vec())));
    }
    let n = n.min(req.len);
    // SAFETY: the read completed, so the kernel wrote its `n` bytes (at most `req.len`, the
    // capacity the buffer was made with) at the start of the buffer.
    unsafe { buf.set_len(n) };
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
