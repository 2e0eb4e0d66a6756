//! The values of a short scan whose length is known (`Db::scan_from`), read as one batch: value
//! cache hits first; then, while the page cache is trusted to hold the log, copies out of its
//! mappings; otherwise one submission of all the reads, sorted by position, with ops that lie
//! back to back read as one range and split.

use super::reader::{Access, CacheUse, VlogReader};
use super::ValuePointer;
use crate::error::Result;
use crate::value::Value;

/// Ops back to back are read together up to this many bytes (a run's buffer lives as long as
/// any of its values is cached or held, so runs stay small).
const MAX_RUN_BYTES: u64 = 256 << 10;

/// Copying a batch out of mappings taking longer than this (plus a nanosecond per byte) means
/// a page fault read from the device: the page cache no longer holds that part of the log.
const FAULT_NANOS: u64 = 50_000;

/// One value wanted by a batch: the key its op must hold and where the op is.
pub type Wanted<'a> = (&'a [u8], ValuePointer);

/// Ops read with one request: the `wanted` entries at `members`, back to back from `offset`.
struct Run {
    file: u64,
    offset: u64,
    len: u64,
    members: Vec<usize>,
}

impl VlogReader {
    /// The value of each `(key, pointer)`, in order, each checked as `read_value` checks it.
    pub fn read_batch(&self, wanted: &[Wanted<'_>], cache: CacheUse) -> Vec<Result<Value>> {
        let mut out: Vec<Option<Result<Value>>> =
            wanted.iter().map(|(key, ptr)| self.cached(ptr, key, cache)).collect();
        if self.is_warm() {
            self.read_mapped_batch(wanted, &mut out);
        }
        for ((key, ptr), slot) in wanted.iter().zip(out.iter_mut()).filter(|((_, p), s)| s.is_none() && !p.in_bounds())
        {
            // Reported as `read_value` reports it.
            *slot = Some(self.read_value(ptr, key, Access::Scan, cache));
        }
        let missing: Vec<usize> = (0..wanted.len()).filter(|&i| out[i].is_none()).collect();
        for (run, read) in self.start_runs(wanted, &missing) {
            if let Some(r) = read.as_ref().filter(|r| !r.past_end()) {
                self.note_probe(r.was_cached());
            }
            let bytes = read.and_then(|r| r.wait().ok().flatten()).map(Value::from);
            for &i in &run.members {
                let (key, ptr) = &wanted[i];
                let op = bytes.as_ref().and_then(|b| op_in_run(&run, ptr, b));
                out[i] = Some(match op {
                    Some(op) if run.members.len() == 1 => self.verify_shared(ptr, op, key, cache),
                    // A slice of a longer read: the cache gets a copy of its own, so the run's
                    // buffer does not live on in it.
                    Some(op) => self.verify_shared(ptr, op, key, CacheUse::Lookup).inspect(|value| {
                        if cache == CacheUse::Fill {
                            self.fill(ptr, key, value);
                        }
                    }),
                    // Not read (file missing, past its end: still in the log buffer, or an
                    // I/O error): the single read reports or resolves it.
                    None => self.read_value(ptr, key, Access::Scan, cache),
                });
            }
        }
        out.into_iter().map(|v| v.unwrap_or_else(|| unreachable!("every value was resolved"))).collect()
    }

    /// While the page cache is trusted: copy every op still missing out of its file's mapping
    /// into one buffer (one allocation for the batch; the ops are touched first with
    /// independent loads, so their cache misses overlap), then check each. A batch that took
    /// as long as a device read faulted pages in: the trust is withdrawn (`note_probe`), and
    /// the next batches probe the page cache until it has earned it back.
    fn read_mapped_batch(&self, wanted: &[Wanted<'_>], out: &mut [Option<Result<Value>>]) {
        let started = std::time::Instant::now();
        let missing = || (0..wanted.len()).filter(|&i| out[i].is_none());
        let total: usize = missing().map(|i| wanted[i].1.op_len as usize).sum();
        let mut buf = Vec::with_capacity(total);
        let mut spans: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        let mut held = None;
        let mut first_bytes = 0u8;
        for i in missing() {
            self.with_mapped_op_in(&wanted[i].1, &mut held, |op| first_bytes ^= op.first().copied().unwrap_or(0));
        }
        std::hint::black_box(first_bytes);
        for i in missing() {
            self.with_mapped_op_in(&wanted[i].1, &mut held, |op| {
                spans.push((i, buf.len()..buf.len() + op.len()));
                buf.extend_from_slice(op);
            });
        }
        if started.elapsed().as_nanos() as u64 > FAULT_NANOS + buf.len() as u64 {
            self.note_probe(false);
        }
        let buf = Value::from(buf);
        for (i, range) in spans {
            let (key, ptr) = &wanted[i];
            // Not cached: the page cache holds these values, and a copy out of the mapping
            // costs about what a hit does (and the batch's buffer must not live on in the cache).
            out[i] = Some(self.verify_shared(ptr, buf.slice(range), key, CacheUse::Lookup));
        }
    }

    /// Group the values at `missing` (pointers in bounds) into runs of ops back to back in one
    /// file, and start one read per run, submitted together.
    fn start_runs(&self, wanted: &[Wanted<'_>], missing: &[usize]) -> Vec<(Run, Option<super::prefetch::PendingRead>)> {
        let mut order = missing.to_vec();
        order.sort_by_key(|&i| (wanted[i].1.file, wanted[i].1.offset));
        let mut runs: Vec<Run> = Vec::new();
        for i in order {
            let p = &wanted[i].1;
            match runs.last_mut() {
                Some(r) if r.file == p.file && r.offset + r.len == p.offset && r.len < MAX_RUN_BYTES => {
                    r.len += u64::from(p.op_len);
                    r.members.push(i);
                }
                _ => runs.push(Run { file: p.file, offset: p.offset, len: u64::from(p.op_len), members: vec![i] }),
            }
        }
        let reads = self.start_ranges(runs.iter().map(|r| (r.file, r.offset, r.len as usize)), Access::Scan);
        runs.into_iter().zip(reads).collect()
    }
}

/// The bytes of the op at `ptr` within its run's buffer `bytes` (read from `run.offset`).
fn op_in_run(run: &Run, ptr: &ValuePointer, bytes: &Value) -> Option<Value> {
    let start = usize::try_from(ptr.offset.checked_sub(run.offset)?).ok()?;
    let end = start.checked_add(ptr.op_len as usize)?;
    (end <= bytes.len()).then(|| bytes.slice(start..end))
}
