//! The write path: writers queue up; the one at the front leads a group, appends it to the log
//! as one record group with one `fdatasync` for every sync writer in it (group commit), inserts
//! it into the memtable, and hands the result to the followers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::read::CheckedAt;
use super::{add, DbInner, State};
use crate::compaction::WritePressure;
use crate::error::{Error, Result};
use crate::key::ValueKind;
use crate::log::{self, LogPos, LogWriter};
use crate::memtable::Memtable;
use crate::vlog::ValuePointer;
use crate::write_batch::{BatchIter, BatchOp, WriteBatch};
use bytes::Bytes;

/// Group commit: the log appender and what the write leader publishes. The queue of writers
/// itself lives in `State`, under the DB mutex, because the leader makes room in the memtable
/// and takes sequence numbers in the same critical section (LevelDB's design). Its methods
/// take the database they write to (`db`).
pub(crate) struct WriteQueue {
    /// The log appender; taken by the write leader and by flushes (lock order: state, then log).
    pub(super) log: Arc<Mutex<LogWriter>>,
    /// Set by the log writer when its file has passed `log_file_bytes`.
    roll_due: Arc<AtomicBool>,
    /// How far the log is durable (`LogWriter::durable`), read by value-log GC without the
    /// log's lock.
    pub(super) durable: Arc<Mutex<LogPos>>,
    /// Every write with a sequence number <= this is fully applied and readable.
    pub(super) visible_seq: AtomicU64,
}

impl WriteQueue {
    /// The queue over a recovered log, whose last write has sequence number `last_seq`.
    pub(super) fn new(log: LogWriter, last_seq: u64) -> Self {
        WriteQueue {
            roll_due: log.roll_due(),
            durable: log.durable(),
            log: Arc::new(Mutex::new(log)),
            visible_seq: AtomicU64::new(last_seq),
        }
    }

    /// The sequence number of the newest write readers may see.
    pub(crate) fn visible_seq(&self) -> u64 {
        self.visible_seq.load(Ordering::Acquire)
    }
}

/// A queued write.
pub(crate) struct WriterSlot {
    /// The batch's encoded ops, moved out of it into a shared buffer: the memtable keeps the
    /// separated values of recent writes readable from memory without a copy.
    ops: Bytes,
    /// The batch, without its ops (its count and user bytes).
    batch: WriteBatch,
    sync: bool,
    /// A flush request: switch the memtable instead of writing.
    force_switch: bool,
    /// Work the leader does alone, under the state lock, instead of writing (creating a
    /// keyspace): ordered with the writes before and after it.
    exclusive: Mutex<Option<Exclusive>>,
    /// A value-log GC relocation: `batch` points keys at moved copies of their values, and op
    /// *i* is applied only if the key's newest entry is still the pointer `gc_old[i]` (a user
    /// write in between wins).
    gc_old: Option<Condition>,
    /// A transaction's commit: the leader writes the batch, in a group of its own, only if
    /// none of these keys and ranges was written after the transaction's snapshot.
    txn: Option<TxnCheck>,
    result: Mutex<Option<Result<()>>>,
    cv: Condvar,
}

impl WriterSlot {
    /// Whether this slot only ever runs as a leader, never taken into another's group: a flush
    /// request, an exclusive job (a keyspace change, a checkpoint's capture: taken into a
    /// group it would be acknowledged without running), a GC relocation, and a transaction's
    /// commit (its check may fail). `lead_group` handles each when it leads.
    fn leads_alone(&self) -> bool {
        self.force_switch || self.gc_old.is_some() || self.txn.is_some() || self.exclusive.lock().is_some()
    }
}

/// Work a writer slot hands the leader (see `WriterSlot::exclusive`).
pub(crate) type Exclusive = Box<dyn FnOnce(&DbInner, &mut MutexGuard<'_, State>) -> Result<()> + Send>;

/// The condition of a GC relocation: the old pointers, and the view they were found live in.
pub(crate) struct Condition {
    old: Vec<ValuePointer>,
    checked: Option<CheckedAt>,
}

/// What a transaction's commit checks (`WriteQueue::commit_transaction`): the keys and ranges
/// that must not have been written after its snapshot `at.seq`; `at.mem` was the active
/// memtable then, so every later write is in it or in a newer one.
pub(crate) struct TxnCheck {
    pub(crate) at: CheckedAt,
    /// Point keys: the ones it writes, and the ones it read as its isolation level asks.
    pub(crate) keys: Vec<(u32, Vec<u8>)>,
    /// Key ranges `[lower, upper)` (`None`: unbounded): the ones it range-deletes, and in
    /// serializable mode the ones it scanned.
    pub(crate) ranges: Vec<KeyRange>,
}

/// A key range `[lower, upper)` of a keyspace (`None`: unbounded).
pub(crate) type KeyRange = (u32, Option<Vec<u8>>, Option<Vec<u8>>);

/// The leader's group as the log sees it: its sequence numbers, and what the leader does to the
/// log besides appending it.
struct LogOp {
    /// The group's first sequence number and its op count.
    first_seq: u64,
    count: u32,
    /// Roll to this file number first (the file has passed `log_file_bytes`).
    roll_to: Option<u64>,
    /// More writers are queued: leave the sync mark for the next group's write.
    mark_later: bool,
    /// The separation thresholds of the keyspaces other than the default one the group
    /// writes (empty: it writes only the default keyspace).
    thresholds: Vec<(u32, usize)>,
}

/// Group size limits (LevelDB's): a small leader does not wait behind a huge group.
const MAX_GROUP_BYTES: usize = 1 << 20;
const SMALL_LEADER_BYTES: usize = 128 << 10;

impl WriteQueue {
    /// Commit `batch`.
    pub(crate) fn write(&self, db: &DbInner, sync: bool, batch: WriteBatch) -> Result<()> {
        self.write_checked(db, sync, batch, None)
    }

    /// Commit a transaction's `batch` if nothing `check` names was written after its snapshot
    /// (else `Error::Conflict`, and nothing is written). The check and the write are one step
    /// of the write leader: no other write can come between them.
    pub(crate) fn commit_transaction(
        &self,
        db: &DbInner,
        sync: bool,
        batch: WriteBatch,
        check: TxnCheck,
    ) -> Result<()> {
        self.write_checked(db, sync, batch, Some(check))
    }

    fn write_checked(&self, db: &DbInner, sync: bool, mut batch: WriteBatch, txn: Option<TxnCheck>) -> Result<()> {
        db.sharing.writable(&db.dir, "write")?;
        batch.check()?;
        if db.opts.comparator.is_some()
            && batch.iter().flatten().any(|(_, op)| matches!(op, crate::write_batch::BatchOp::DeleteRange { .. }))
        {
            // Range tombstones are fragmented and cut in the bytewise order only.
            return Err(Error::invalid("delete_range is not supported under a custom comparator"));
        }
        // The keyspaces of the batch with a default time-to-live, and theirs.
        let mut default_ttls: Vec<(u32, u64)> = Vec::new();
        if db.opts.default_ttl_ms > 0 {
            default_ttls.push((0, db.opts.default_ttl_ms));
        }
        if !batch.other_keyspaces.is_empty() || !batch.merge_keyspaces.is_empty() {
            // Checked when queued: a keyspace dropped after this is dropped after the write.
            let st = db.state.lock();
            for &ks in &batch.other_keyspaces {
                st.check_writable(ks)?;
                if let Some(t) = st.tree(ks).filter(|t| t.opts.default_ttl_ms > 0) {
                    default_ttls.push((ks, t.opts.default_ttl_ms));
                }
            }
            for &ks in &batch.merge_keyspaces {
                if let Some(t) = st.tree(ks).filter(|t| t.opts.merge_operator.is_none()) {
                    return Err(Error::invalid(format!(
                        "merge into keyspace {:?}, which has no merge operator (set Options::merge_operator)",
                        &*t.name
                    )));
                }
            }
        }
        if !batch.pending_ttls.is_empty() || !default_ttls.is_empty() {
            // Expiry times are set once, here: a TTL counts from the write.
            let now = db.opts.clock.now_ms();
            db.ttl_written.store(true, std::sync::atomic::Ordering::Relaxed);
            batch.stamp_ttls(now)?;
            let ttl_of = |ks: u32| default_ttls.iter().find(|(k, _)| *k == ks).map_or(0, |(_, t)| *t);
            if let Some(stamped) = batch.with_default_ttls(now, ttl_of)? {
                batch = stamped;
            }
        }
        // Wait for GC outside the queue: GC's own pointer puts go through the queue and must not
        // queue up behind a writer that waits for them.
        add(&db.counters.gc_stall_micros, db.gc.pacing.wait_for_gc(batch.approximate_size()));
        self.enqueue(
            db,
            WriterSlot {
                ops: take_ops(&mut batch),
                batch,
                sync,
                force_switch: false,
                exclusive: Mutex::new(None),
                gc_old: None,
                txn,
                result: Mutex::new(None),
                cv: Condvar::new(),
            },
        )
    }

    /// Log the pointers of relocated values (see `WriterSlot::gc_old`); durable when it returns if `sync`
    /// (a later synced write makes an unsynced one durable too: the log is a prefix).
    /// `checked`: the view in which GC found these pointers live, if it did (the leader then
    /// re-checks only keys written after it).
    pub(crate) fn gc_write(
        &self,
        db: &DbInner,
        mut batch: WriteBatch,
        old: Vec<ValuePointer>,
        checked: Option<CheckedAt>,
        sync: bool,
    ) -> Result<()> {
        self.enqueue(
            db,
            WriterSlot {
                ops: take_ops(&mut batch),
                batch,
                sync,
                force_switch: false,
                exclusive: Mutex::new(None),
                gc_old: Some(Condition { old, checked }),
                txn: None,
                result: Mutex::new(None),
                cv: Condvar::new(),
            },
        )
    }

    /// Make the active memtable immutable (if it holds anything) through the write queue.
    pub(crate) fn force_switch(&self, db: &DbInner) -> Result<()> {
        self.enqueue(
            db,
            WriterSlot {
                ops: Bytes::new(),
                batch: WriteBatch::new(),
                sync: false,
                force_switch: true,
                exclusive: Mutex::new(None),
                gc_old: None,
                txn: None,
                result: Mutex::new(None),
                cv: Condvar::new(),
            },
        )
    }

    /// Run `work` as the leader of a group of its own, under the state lock: ordered with the
    /// writes queued before and after it (creating a keyspace).
    pub(crate) fn run_exclusive(
        &self,
        db: &DbInner,
        work: impl FnOnce(&DbInner, &mut MutexGuard<'_, State>) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        // Keyspace changes and checkpoint captures: nothing a read-only handle may run.
        db.sharing.writable(&db.dir, "write")?;
        self.enqueue(
            db,
            WriterSlot {
                ops: Bytes::new(),
                batch: WriteBatch::new(),
                sync: false,
                force_switch: false,
                exclusive: Mutex::new(Some(Box::new(work))),
                gc_old: None,
                txn: None,
                result: Mutex::new(None),
                cv: Condvar::new(),
            },
        )
    }

    fn enqueue(&self, db: &DbInner, slot: WriterSlot) -> Result<()> {
        let slot = Arc::new(slot);
        let mut st = db.state.lock();
        st.writers.push_back(slot.clone());
        loop {
            if let Some(r) = slot.result.lock().take() {
                return r;
            }
            if st.writers.front().is_some_and(|f| Arc::ptr_eq(f, &slot)) {
                break;
            }
            slot.cv.wait(&mut st);
        }
        let (n, result) = self.lead_group(db, &mut st);
        for _ in 0..n {
            let Some(w) = st.writers.pop_front() else {
                break;
            };
            if !Arc::ptr_eq(&w, &slot) {
                *w.result.lock() = Some(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(e.duplicate()),
                });
                w.cv.notify_one();
            }
        }
        if let Some(next) = st.writers.front() {
            next.cv.notify_one();
        }
        if st.writers.is_empty() {
            db.scheduler.progress.notify_all();
        }
        result
    }

    /// Run the group led by the front writer; returns how many writers it covered.
    fn lead_group(&self, db: &DbInner, st: &mut MutexGuard<'_, State>) -> (usize, Result<()>) {
        let leader = st.writers[0].clone();
        if let Some(work) = leader.exclusive.lock().take() {
            return (1, db.background_error(st).and_then(|()| work(db, st)));
        }
        if let Err(e) = self.make_room_for_write(db, st, leader.force_switch) {
            return (1, Err(e));
        }
        if leader.force_switch {
            return (1, Ok(()));
        }
        if let Some(check) = &leader.txn {
            if let Err(e) = self.check_transaction(db, st, check) {
                return (1, Err(e));
            }
        }
        let (n, gc_batch) = match &leader.gc_old {
            Some(reloc) => match self.still_pointing(db, st, (&leader.ops, leader.batch.len()), reloc) {
                Ok(b) => (1, b.map(|mut b| (take_ops(&mut b), b))),
                Err(e) => return (1, Err(e)),
            },
            // A transaction's batch goes alone: a conflict then fails no one else's write.
            None if leader.txn.is_some() => (1, None),
            None => (group_size(st, &leader), None),
        };
        let group: Vec<Arc<WriterSlot>> = st.writers.iter().take(n).cloned().collect();
        let batches: Vec<(&Bytes, &WriteBatch)> = match &gc_batch {
            Some((ops, b)) => vec![(ops, b)],
            None => group.iter().map(|w| (&w.ops, &w.batch)).collect(),
        };
        let sync = group.iter().any(|w| w.sync);
        let count: u64 = batches.iter().map(|(_, b)| b.len() as u64).sum();
        if count == 0 {
            return (n, Ok(()));
        }
        let first_seq = st.last_seq + 1;
        st.last_seq += count;
        let mem = st.mem.clone();
        // A log file past `log_file_bytes` rolls before this group (its number is taken here,
        // under the state lock; the flag is read without the log lock, which a flush may hold
        // through an fdatasync); the group then goes into the new file.
        let roll_to = self.roll_due.load(Ordering::Acquire).then(|| st.versions.new_file_number());
        // With writers queued behind this group, the sync mark rides along with the next
        // group's write instead of costing a write of its own.
        let mark_later = st.writers.len() > n;
        let mut thresholds: Vec<(u32, usize)> = Vec::new();
        for ks in batches.iter().flat_map(|(_, b)| &b.other_keyspaces) {
            if !thresholds.iter().any(|(k, _)| k == ks) {
                let t = st.tree(*ks).map_or(db.opts.min_separated_value_bytes, |t| t.opts.min_separated_value_bytes);
                thresholds.push((*ks, t));
            }
        }
        let log_op = LogOp { first_seq, count: count as u32, roll_to, mark_later, thresholds };
        let r = MutexGuard::unlocked(st, || self.append_and_apply(db, &batches, sync, &mem, log_op));
        match &r {
            Ok(()) => {
                self.visible_seq.store(first_seq + count - 1, Ordering::Release);
                if leader.gc_old.is_none() {
                    add(&db.counters.user_bytes, batches.iter().map(|(_, b)| b.user_bytes).sum());
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "log write failed; the database is read-only until resume()");
                st.bg_error = Some(e.duplicate());
                // The group was cut out of the log: its numbers are used by the next group, so
                // sequence numbers in the log stay dense (recovery checks that none is missing).
                st.last_seq = first_seq - 1;
            }
        }
        (n, r)
    }

    /// Append the group to the log (syncing if any writer asked), then apply it to `mem`.
    fn append_and_apply(
        &self,
        db: &DbInner,
        group: &[(&Bytes, &WriteBatch)],
        sync: bool,
        mem: &Memtable,
        log_op: LogOp,
    ) -> Result<()> {
        let (first_seq, count) = (log_op.first_seq, log_op.count);
        let joined;
        let rep: &Bytes = match group {
            [(one, _)] => one,
            many => {
                let mut ops = Vec::with_capacity(many.iter().map(|(b, _)| b.len()).sum());
                for (b, _) in many {
                    ops.extend_from_slice(b);
                }
                joined = Bytes::from(ops);
                &joined
            }
        };
        // Checksums are computed before taking the log lock: large values cost most here.
        let default = db.opts.min_separated_value_bytes;
        let separated = match log_op.thresholds.is_empty() {
            true => log::separated_values(rep, default),
            false => log::separated_values_by(rep, |ks| {
                log_op.thresholds.iter().find(|(k, _)| *k == ks).map_or(default, |(_, t)| *t)
            }),
        };
        let crc = log::group_crc(first_seq, count, rep);
        let pos = {
            let mut log = self.log.lock();
            if let Some(n) = log_op.roll_to.filter(|_| log.should_roll()) {
                log.roll(n, first_seq)?;
            }
            let pos = log.append(first_seq, count, rep, crc)?;
            if sync {
                let synced = if log_op.mark_later { log.sync_mark_with_next_write() } else { log.sync() };
                if let Err(e) = synced {
                    log.discard_from(pos);
                    return Err(e);
                }
            }
            pos
        };
        if db.opts.prepopulate_value_cache == crate::options::PrepopulateValueCache::OnWrite {
            db.vlog.prepopulate(pos, rep, &separated);
        }
        let keep = (db.opts.memtable_kept_value_max_bytes > 0).then_some((rep, db.opts.memtable_kept_value_max_bytes));
        mem.apply_group(pos, first_seq, rep, &separated, keep);
        Ok(())
    }

    /// Wait (bounded) until the memtable has room, switching it when full; slows writers down
    /// a little when L0 is crowded and stops them when it is full (LevelDB's MakeRoomForWrite).
    fn make_room_for_write(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, mut force: bool) -> Result<()> {
        let mut allow_delay = !force;
        loop {
            db.background_error(st)?;
            let pressure = self.write_pressure(db, st);
            if allow_delay && pressure != WritePressure::None {
                let t = Instant::now();
                MutexGuard::unlocked(st, || std::thread::sleep(Duration::from_millis(1)));
                add(&db.counters.stall_micros, t.elapsed().as_micros() as u64);
                allow_delay = false;
            } else if (!force && !self.memtable_full(db, &st.mem)) || (force && st.mem.is_empty()) {
                return Ok(());
            } else if st.imms.len() >= db.opts.max_immutable_memtables || pressure == WritePressure::Stop {
                let t = Instant::now();
                // A stopped writer writes nothing, so users would look as if they only read:
                // it counts as waiting, and compaction leaves nothing for later meanwhile.
                let _waiting = db.scheduler.waiting();
                db.scheduler.flush_cv.notify_one();
                db.scheduler.compact_cv.notify_one();
                db.scheduler.progress.wait_for(st, Duration::from_millis(100));
                add(&db.counters.stall_micros, t.elapsed().as_micros() as u64);
            } else {
                self.switch_memtable(db, st)?;
                force = false;
            }
        }
    }

    /// The strongest of the keyspaces' policies' answers for their current versions (one log
    /// serves them all: a keyspace whose level 0 is full holds every writer back), each
    /// memoised until its version changes.
    fn write_pressure(&self, _db: &DbInner, st: &mut State) -> WritePressure {
        let State { trees, versions, .. } = st;
        let mut worst = WritePressure::None;
        for (&ks, t) in trees.iter_mut().filter(|(_, t)| !t.dropped) {
            let id = versions.current_id_of(ks);
            if t.pressure.0 != id {
                let Some(v) = versions.current_of(ks) else { continue };
                t.pressure = (id, t.policy.write_pressure(&v));
            }
            worst = worst.max(t.pressure.1);
        }
        worst
    }

    fn memtable_full(&self, db: &DbInner, mem: &Memtable) -> bool {
        mem.approximate_bytes() as usize >= db.opts.write_buffer_bytes || mem.log_bytes() >= db.opts.memtable_log_bytes
    }

    /// Make the active memtable immutable and start a new one (rolling the log file if due).
    fn switch_memtable(&self, db: &DbInner, st: &mut MutexGuard<'_, State>) -> Result<()> {
        let end = {
            let mut log = self.log.lock();
            // A log file that only served as a write-ahead log (no separated values point into
            // it) is rolled at every switch, so it can be deleted as soon as the memtable is
            // flushed (LevelDB's behaviour); one holding values is rolled by size.
            let holds_values = st.mem.vlog_bytes().contains_key(&log.file_number());
            let gc_wants_roll = db.gc.roll_requested.swap(false, Ordering::AcqRel);
            if log.should_roll() || !holds_values || gc_wants_roll {
                let n = st.versions.new_file_number();
                if let Err(e) = log.roll(n, st.last_seq + 1) {
                    st.bg_error = Some(e.duplicate());
                    return Err(e);
                }
            }
            log.groups_end()
        };
        st.mem.set_log_end(end);
        let ids = st.live_keyspace_ids();
        let fresh = Arc::new(Memtable::with_pool(db.chunk_pool.clone(), &ids, db.opts.key_order()));
        let full = std::mem::replace(&mut st.mem, fresh);
        st.imms.push_back(full);
        db.scheduler.flush_cv.notify_one();
        Ok(())
    }

    /// Start a memtable with a list for every live keyspace now (a keyspace was created): an
    /// empty one is replaced, one holding entries switched out as usual.
    pub(crate) fn start_memtable(&self, db: &DbInner, st: &mut MutexGuard<'_, State>) -> Result<()> {
        if st.mem.is_empty() {
            let ids = st.live_keyspace_ids();
            st.mem = Arc::new(Memtable::with_pool(db.chunk_pool.clone(), &ids, db.opts.key_order()));
            return Ok(());
        }
        self.switch_memtable(db, st)
    }
}

impl WriteQueue {
    /// The ops of a GC relocation batch whose key still points at the old address. When GC
    /// found them live in a view whose active memtable has not been flushed since, every
    /// write after that view is in that memtable or a newer one: a key none of them wrote
    /// since is unchanged, and only those few memtable probes run while writers wait.
    /// Otherwise each key is looked up in full. `None`: every op is still live (the batch is
    /// written as it is, without a copy).
    fn still_pointing(
        &self,
        db: &DbInner,
        st: &mut MutexGuard<'_, State>,
        (ops, count): (&[u8], usize),
        reloc: &Condition,
    ) -> Result<Option<WriteBatch>> {
        let since = reloc.checked.as_ref().and_then(|c| {
            let mems: Vec<Arc<Memtable>> = st.imms.iter().chain(std::iter::once(&st.mem)).cloned().collect();
            let at = mems.iter().position(|m| Arc::ptr_eq(m, &c.mem))?;
            Some((c.seq, mems[at..].to_vec()))
        });
        // Keyspaces with a merge operator: a write since the check may be a merge operand over
        // the value being moved, which must then stay where it is.
        let merging: Vec<u32> =
            st.trees.iter().filter(|(_, t)| t.opts.merge_operator.is_some()).map(|(&k, _)| k).collect();
        MutexGuard::unlocked(st, || {
            let mut live = Vec::with_capacity(reloc.old.len());
            for (op, old) in BatchIter::over(ops).zip(&reloc.old) {
                let Ok((ks, key)) = op.map(|(ks, o)| (ks, o.key())) else {
                    live.push(false);
                    continue;
                };
                let is_live = match &since {
                    Some((seq, mems)) => mems.iter().all(|m| m.newest_seq(ks, key).is_none_or(|s| s <= *seq)),
                    None => self.points_to(db, ks, key, old)?,
                };
                if !is_live && merging.contains(&ks) {
                    db.check_latest_not_under_merges(ks, key, old)?;
                }
                live.push(is_live);
            }
            if live.len() == count && live.iter().all(|&l| l) {
                return Ok(None);
            }
            let mut keep = WriteBatch::with_capacity(ops.len());
            for (op, _) in BatchIter::over(ops).zip(&live).filter(|(_, &l)| l) {
                match op {
                    Ok((ks, BatchOp::Put { key, value, expires_at_ms: None })) => keep.put_raw(ks, key, value),
                    Ok((ks, BatchOp::Put { key, value, expires_at_ms: Some(at) })) => {
                        keep.put_expiring_raw(ks, key, value, at)
                    }
                    Ok((ks, BatchOp::PutPointer { key, pointer, expires_at_ms })) => {
                        keep.put_pointer(ks, key, pointer, expires_at_ms)
                    }
                    _ => continue,
                };
            }
            Ok(Some(keep))
        })
    }

    /// A transaction's commit check, run by the leader before it writes the batch (no write
    /// can come in between): `Error::Conflict` naming the first key of `check` written after
    /// the snapshot. While the snapshot's memtable is still in memory, every later write is in
    /// it or a newer one, so a few memtable probes answer, with no bookkeeping on the write
    /// path (a table of recent writes would cost every plain write a hash insert). Once that
    /// memtable is flushed, each key is looked up in full (its newest sequence number in the
    /// tree), and a scanned range, which would need a scan of every table, is a conflict: the
    /// transaction ran for longer than the memtables hold, and a retry starts a fresh snapshot.
    fn check_transaction(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, check: &TxnCheck) -> Result<()> {
        let seq = check.at.seq;
        let mems: Vec<Arc<Memtable>> = st.imms.iter().chain(std::iter::once(&st.mem)).cloned().collect();
        let since: Option<Vec<Arc<Memtable>>> =
            mems.iter().position(|m| Arc::ptr_eq(m, &check.at.mem)).map(|at| mems[at..].to_vec());
        let versions: Vec<(u32, Arc<crate::version::Version>)> = match since {
            Some(_) => Vec::new(),
            None => {
                let mut ks: Vec<u32> = check.keys.iter().map(|(k, _)| *k).collect();
                ks.dedup();
                ks.iter().filter_map(|&k| Some((k, st.versions.current_of(k)?))).collect()
            }
        };
        let order = db.table_cache.order().clone();
        let found = MutexGuard::unlocked(st, || -> Result<Option<(u32, Vec<u8>, &'static str)>> {
            for (ks, key) in &check.keys {
                let newest = match &since {
                    Some(mems) => mems.iter().filter_map(|m| m.newest_seq(*ks, key)).max().unwrap_or(0),
                    None => match versions.iter().find(|(k, _)| k == ks) {
                        Some((_, v)) => db.newest_write_seq(&mems, v, *ks, key)?,
                        None => 0,
                    },
                };
                if newest > seq {
                    return Ok(Some((*ks, key.clone(), "written by another commit after the transaction's snapshot")));
                }
            }
            for (ks, lower, upper) in &check.ranges {
                let bounds = (lower.as_deref(), upper.as_deref());
                let Some(mems) = &since else {
                    let why =
                        "the transaction outlived the memtable of its snapshot, so its scanned range cannot be checked";
                    return Ok(Some((*ks, lower.clone().unwrap_or_default(), why)));
                };
                if let Some(key) = mems.iter().find_map(|m| m.written_in_range_since(*ks, bounds, seq, &order)) {
                    return Ok(Some((
                        *ks,
                        key,
                        "a range the transaction scanned or deletes changed after its snapshot",
                    )));
                }
            }
            Ok(None)
        })?;
        let Some((ks, key, reason)) = found else { return Ok(()) };
        add(&db.counters.transaction_conflicts, 1);
        let keyspace = st.tree(ks).map_or_else(|| format!("#{ks}"), |t| t.name.to_string());
        Err(Error::Conflict { keyspace, key, reason: reason.to_string() })
    }

    /// Whether the newest entry of `key` is the pointer `old` (a full lookup).
    fn points_to(&self, db: &DbInner, ks: u32, key: &[u8], old: &ValuePointer) -> Result<bool> {
        Ok(match db.get_latest_entry(ks, key)? {
            Some((ValueKind::Pointer, cur)) => {
                ValuePointer::decode(&cur).is_some_and(|p| p.file == old.file && p.offset == old.offset)
            }
            _ => false,
        })
    }
}

/// The batch's encoded ops, moved out into a shared buffer (no copy).
fn take_ops(batch: &mut WriteBatch) -> Bytes {
    Bytes::from(std::mem::take(&mut batch.rep))
}

/// How many queued writers (from the front) the leader takes into its group.
fn group_size(st: &State, leader: &WriterSlot) -> usize {
    let mut size = leader.ops.len();
    let max = if size <= SMALL_LEADER_BYTES { size + SMALL_LEADER_BYTES } else { MAX_GROUP_BYTES };
    let mut n = 1;
    for w in st.writers.iter().skip(1) {
        // A non-sync leader must not make a sync writer's data durable-late.
        if w.leads_alone() || (w.sync && !leader.sync) || size + w.ops.len() > max {
            break;
        }
        size += w.ops.len();
        n += 1;
    }
    n
}

impl WriteQueue {
    /// Make every log group written so far durable, under the state lock (lock order: state,
    /// then log): a failure becomes the background error, as a failed synced write's does.
    pub(crate) fn sync_log_locked(&self, st: &mut State) -> Result<()> {
        let r = self.log.lock().sync();
        if let Err(e) = &r {
            st.bg_error.get_or_insert_with(|| e.duplicate());
        }
        r
    }

    pub(crate) fn sync_log_for_gc(&self, db: &DbInner) -> Result<()> {
        let r = self.sync_log_detached();
        if let Err(e) = &r {
            tracing::error!(error = %e, "log sync before value-log GC failed; the database is read-only until resume()");
            db.state.lock().bg_error.get_or_insert_with(|| e.duplicate());
        }
        r
    }

    /// Make the log durable up to `end` (a flush does, before the manifest records `end` as
    /// the log head), without holding the log while the device works.
    pub(crate) fn sync_log_to(&self, end: LogPos) -> Result<()> {
        if *self.durable.lock() >= end {
            return Ok(());
        }
        {
            let mut log = self.log.lock();
            if end.file != log.file_number() {
                // The file rolled since: only older files and the directory are left to sync.
                return log.sync_to(end);
            }
        }
        self.sync_log_detached()
    }

    /// Sync every group written so far with the log's lock held only to start and to record
    /// the sync (`LogWriter::begin_sync`): an `fdatasync` of a log file can take as long as
    /// writing tens of megabytes, and the write leader appending behind it would make every
    /// user write wait that long.
    fn sync_log_detached(&self) -> Result<()> {
        let ticket = self.log.lock().begin_sync()?;
        if let Some(t) = ticket {
            t.run()?;
            self.log.lock().finish_sync(&t);
        }
        Ok(())
    }

    /// Leave the read-only state after a background error.
    pub(crate) fn resume(&self, db: &DbInner) -> Result<()> {
        let mut st = db.state.lock();
        if st.bg_error.is_none() {
            return Ok(());
        }
        if let Err(e) = self.log.lock().sync() {
            st.bg_error = Some(e.duplicate());
            return Err(e);
        }
        st.bg_error = None;
        db.scheduler.flush_cv.notify_all();
        db.scheduler.compact_cv.notify_all();
        db.scheduler.progress.notify_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::fs::MemFs;
    use crate::key::ValueKind;
    use crate::options::Options;
    use crate::vlog::ValuePointer;
    use crate::write_batch::WriteBatch;
    use crate::Db;

    #[test]
    fn db_is_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<super::super::Db>();
    }

    fn options(fs: &Arc<MemFs>) -> Options {
        Options::default().vfs(fs.clone()).min_separated_value_bytes(16).gc_interval_ms(0)
    }

    /// The pointer `key` holds now.
    fn pointer(db: &Db, key: &[u8]) -> ValuePointer {
        match db.inner.get_latest_entry(0, key).unwrap() {
            Some((ValueKind::Pointer, v)) => ValuePointer::decode(&v).unwrap(),
            other => panic!("{key:?} holds no pointer: {other:?}"),
        }
    }

    /// GC found `keys` live in a view, then `between` ran, then GC moves them conditionally.
    fn relocate_after(db: &Db, keys: &[&[u8]], between: impl FnOnce()) {
        let (_view, checked) = db.inner.liveness_view();
        let old: Vec<ValuePointer> = keys.iter().map(|k| pointer(db, k)).collect();
        let mut batch = WriteBatch::new();
        for k in keys {
            batch.put(k, db.get(k).unwrap().unwrap());
        }
        between();
        db.inner.writes.gc_write(&db.inner, batch, old, Some(checked), true).unwrap();
    }

    #[test]
    fn a_user_write_after_gcs_liveness_view_wins_over_the_relocation() {
        let fs = Arc::new(MemFs::new());
        let db = Db::open("/db", options(&fs)).unwrap();
        for k in [&b"a"[..], b"b", b"c"] {
            db.put(k, [k[0]; 64]).unwrap();
        }
        let b_before = pointer(&db, b"b");
        relocate_after(&db, &[b"a", b"b", b"c"], || {
            db.put(b"a", b"new value of a, written after GC looked").unwrap();
            db.delete(b"c").unwrap();
        });
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"new value of a, written after GC looked"[..]));
        assert_eq!(db.get(b"c").unwrap(), None, "a delete after the view must not be undone");
        assert_ne!(pointer(&db, b"b"), b_before, "an untouched key is relocated");
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&[b'b'; 64][..]));
    }

    #[test]
    fn after_the_views_memtable_is_flushed_the_leader_looks_each_key_up_in_full() {
        let fs = Arc::new(MemFs::new());
        let db = Db::open("/db", options(&fs)).unwrap();
        for k in [&b"a"[..], b"b"] {
            db.put(k, [k[0]; 64]).unwrap();
        }
        let b_before = pointer(&db, b"b");
        relocate_after(&db, &[b"a", b"b"], || {
            db.put(b"a", b"newer a").unwrap();
            // The write leaves the memtables: only a full lookup can still see it.
            db.flush().unwrap();
        });
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"newer a"[..]));
        assert_ne!(pointer(&db, b"b"), b_before);
        drop(db);
        let db = Db::open("/db", options(&fs)).unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"newer a"[..]), "after recovery too");
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&[b'b'; 64][..]));
    }
}
