//! The background scheduler: one thread flushes immutable memtables to level-0 tables, others
//! (`Options::compaction_threads`) carry out what the policy picks — at once only where they
//! touch disjoint levels; all install their results through the manifest and then delete files
//! no Version needs any more. Callers that wait for background work (stalled writers, `flush`,
//! `compact_range`, `wait_for_background_work`) wait on its condition variables.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::{add, add_at_level, flush, DbInner, State};
use crate::compaction::job::{self, JobContext};
use crate::compaction::lwc::{self, AppendTask};
use crate::compaction::{Choice, CompactionTask, DropTask, NewRun, PickContext, Reason};
use crate::error::{Error, Result};
use crate::internal_iter::InternalIterator;
use crate::key;
use crate::memtable::Memtable;
use crate::version::Version;
use crate::version::{FileMeta, VersionEdit};

/// The flush and compaction threads' signals, and the seek statistics that feed seek-triggered
/// compaction. Its methods take the database they work on (`db`).
#[derive(Default)]
pub(crate) struct Scheduler {
    /// Wakes the flush thread (a memtable became immutable; shutdown).
    pub(super) flush_cv: Condvar,
    /// Wakes the compaction threads (a flush or compaction changed the tree; shutdown).
    pub(super) compact_cv: Condvar,
    /// Signalled whenever background work finishes: stalled writers and waiters re-check.
    pub(super) progress: Condvar,
    /// Wakes the auto-tuner thread (shutdown).
    pub(super) tune_cv: Condvar,
    /// Tables charged by lookups and iterator samples (LevelDB's seek compaction), by
    /// keyspace.
    pub(super) seek_stats: Mutex<BTreeMap<u32, super::read::SeekStats>>,
    /// The keyspace whose tree the next pick looks at first: keyspaces take turns, so a
    /// busy one does not keep the others' compactions waiting.
    next_tree: std::sync::atomic::AtomicU32,
    /// Callers waiting for background work (`waiting`: `wait_for_flush_and_compaction`, a
    /// writer stopped for room): while any waits, no pick leaves work for later.
    waiters: std::sync::atomic::AtomicUsize,
    /// The last pick left work for later because users only read: the compaction threads
    /// look again after `DEFERRED_RECHECK` instead of waiting for a flush.
    deferred: std::sync::atomic::AtomicBool,
}

/// How often compaction threads that left work for later look whether users still only read.
const DEFERRED_RECHECK: Duration = Duration::from_millis(500);

/// A caller counted as waiting for background work (`Scheduler::waiters`) until dropped.
pub(super) struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// What a compaction thread does next for a keyspace.
pub(super) enum Work {
    /// What the keyspace's policy chose.
    Compact(Choice),
    /// The keyspace was dropped: count its values as garbage, delete its tables, forget it.
    FinishDrop,
}

/// Start the flush, GC and compaction threads.
pub(super) fn spawn(inner: &Arc<DbInner>) -> Result<Vec<JoinHandle<()>>> {
    let spawn_one = |name: &str, f: fn(&DbInner)| {
        let me = inner.clone();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || f(&me))
            .map_err(|e| Error::io("spawn background thread", &inner.dir, e))
    };
    let mut threads = vec![
        spawn_one("wisckey-flush", |db| db.scheduler.flush_loop(db))?,
        spawn_one("wisckey-gc", |db| db.gc.gc_loop(db))?,
        spawn_one("wisckey-tune", super::tuner::run)?,
    ];
    for _ in 0..inner.opts.compaction_threads.max(1) {
        threads.push(spawn_one("wisckey-compact", |db| db.scheduler.compaction_loop(db))?);
    }
    Ok(threads)
}

/// Raise the calling thread's nice value by `delta` (a thread's own, on Linux; elsewhere
/// nothing). Failing leaves the thread as it was, which is only slower for others.
fn lower_thread_priority(delta: i32) {
    #[cfg(target_os = "linux")]
    if delta > 0 {
        // SAFETY: nice(2) takes no pointers; on Linux it changes the calling thread only.
        let r = unsafe { libc::nice(delta) };
        if r == -1 {
            tracing::debug!(delta, "could not lower the compaction thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = delta;
}

impl Scheduler {
    fn flush_loop(&self, db: &DbInner) {
        let mut st = db.state.lock();
        loop {
            if st.shutting_down {
                return;
            }
            if st.imms.is_empty() || st.bg_error.is_some() {
                self.flush_cv.wait(&mut st);
                continue;
            }
            let imm = st.imms[0].clone();
            let place = !st.compactions_running();
            let State { trees, versions, .. } = &mut *st;
            let tables = flush::plan(trees, versions, &imm, db.opts.write_buffer_bytes as u64, place);
            let numbers: Vec<u64> = tables.iter().map(|t| t.number).collect();
            st.pending_outputs.extend(&numbers);
            // Not holding the lock while the tables are written: writers go on.
            let built = MutexGuard::unlocked(&mut st, || {
                // The manifest will say the log up to `imm`'s end is redundant: make sure that
                // part of the log is durable first, or a crash could leave the log shorter than
                // the recorded head and later appends would be skipped at recovery.
                let old = db.writes.log.lock().unsynced_old();
                crate::log::writer::sync_old_files(&old)?;
                if let Some(end) = imm.log_end() {
                    db.writes.sync_log_to(end)?;
                }
                let metas = flush::write(&db.vfs, &db.dir, &imm, &tables)?;
                db.cache_flushed_values(&imm);
                Ok(metas)
            });
            let r = built.and_then(|metas| self.install_flush(db, &mut st, &imm, metas));
            for n in numbers {
                st.pending_outputs.remove(&n);
            }
            match r {
                Ok(()) => {
                    st.imms.pop_front();
                }
                Err(e) => {
                    tracing::error!(error = %e, "memtable flush failed; the database is read-only until resume()");
                    st.bg_error = Some(e);
                }
            }
            self.progress.notify_all();
            self.compact_cv.notify_one();
            // A flush adds value bytes and may move the head past a file GC can now take.
            db.gc.cv.notify_one();
            db.delete_obsolete_files(&mut st);
        }
    }

    fn install_flush(
        &self,
        db: &DbInner,
        st: &mut MutexGuard<'_, State>,
        imm: &Memtable,
        tables: Vec<(u32, Option<FileMeta>)>,
    ) -> Result<()> {
        let place = !st.compactions_running();
        let (mut edit, bytes) = flush::edit(&st.trees, &st.versions, imm, tables, place);
        add(&db.counters.flush_bytes, bytes);
        let flushed: u64 = edit.vlog_added.iter().map(|(_, b)| b).sum();
        add(&db.counters.vlog_user_bytes_flushed, flushed.saturating_sub(imm.moved_vlog_bytes()));
        if let Some(end) = imm.log_end() {
            edit.log_head = Some(end);
        }
        let last = st.versions.last_sequence().max(db.writes.visible_seq());
        st.versions.set_last_sequence(last);
        st.versions.log_and_apply(edit)?;
        add(&db.counters.flushes, 1);
        Ok(())
    }

    /// What some keyspace's policy wants done now that no running compaction is in the way
    /// of, if anything, with the keyspace; keyspaces take turns. A dropped keyspace's tree is
    /// finished (`Choice`-less: `Work::FinishDrop`) once no compaction holds it.
    pub(super) fn pick_compaction(&self, db: &DbInner, st: &State) -> Option<(u32, Work)> {
        let ids: Vec<u32> = st.trees.keys().copied().collect();
        let start = self.next_tree.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as usize;
        let n = ids.len().max(1);
        (0..ids.len()).map(|i| ids[(start + i) % n]).find_map(|ks| {
            let t = st.trees.get(&ks)?;
            if t.dropped {
                return t.busy_levels.is_empty().then_some((ks, Work::FinishDrop));
            }
            self.pick_in(db, st, ks).map(|c| (ks, Work::Compact(c)))
        })
    }

    /// What keyspace `ks`'s policy wants done now, if anything.
    fn pick_in(&self, db: &DbInner, st: &State, ks: u32) -> Option<Choice> {
        let (t, version) = (st.tree(ks)?, st.versions.current_of(ks)?);
        let pointers: Vec<Option<Vec<u8>>> =
            (0..version.num_levels()).map(|l| st.versions.compact_pointer_of(ks, l).map(|p| p.to_vec())).collect();
        let (seek_candidate, collapse_candidate) = self.seek_stats.lock().entry(ks).or_default().candidates(&version);
        let readers_only = self.waiters.load(Relaxed) == 0 && db.users_active(st) == (false, true);
        let ctx = PickContext {
            version: &version,
            compact_pointers: &pointers,
            seek_candidate,
            collapse_candidate,
            busy_levels: &t.busy_levels,
            readers_only,
        };
        let choice = t.policy.pick(&ctx);
        // Look again later only if something was left: a settled tree sleeps until a flush.
        if readers_only && choice.is_none() && t.policy.pick(&PickContext { readers_only: false, ..ctx }).is_some() {
            self.deferred.store(true, Relaxed);
        }
        choice
    }

    fn compaction_loop(&self, db: &DbInner) {
        lower_thread_priority(db.opts.compaction_nice_in_force());
        let mut st = db.state.lock();
        loop {
            if st.shutting_down {
                return;
            }
            let work = if st.bg_error.is_none() { self.pick_compaction(db, &st) } else { None };
            match work {
                Some((ks, work)) => {
                    let r = match work {
                        Work::Compact(choice) => self.run_choice(db, &mut st, ks, choice),
                        Work::FinishDrop => self.finish_drop(db, &mut st, ks),
                    };
                    if let Err(e) = r {
                        tracing::error!(error = %e, "compaction failed; the database is read-only until resume()");
                        st.bg_error = Some(e);
                    }
                }
                // Work left for later while users only read: look again in a while (writes
                // wake the threads anyway, through their flushes).
                None if self.deferred.swap(false, Relaxed) => {
                    self.compact_cv.wait_for(&mut st, DEFERRED_RECHECK);
                }
                None => self.compact_cv.wait(&mut st),
            }
        }
    }

    /// Carry out `choice` with its levels marked busy (the state lock released during I/O).
    fn run_choice(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, ks: u32, choice: Choice) -> Result<()> {
        let choice = db.sharing.unshare_appends(&*db.vfs, &db.dir, choice);
        let levels = choice.levels();
        let Some(tree) = st.trees.get_mut(&ks) else { return Ok(()) };
        tree.busy_levels.extend_from_slice(&levels);
        match choice.reason() {
            Reason::Seeks => self.seek_stats.lock().entry(ks).or_default().candidate = None,
            Reason::Collapse => {
                self.seek_stats.lock().entry(ks).or_default().collapse = None;
                add(&db.counters.table_collapses, 1);
            }
            _ => {}
        }
        if choice.reason() == Reason::Split {
            add(&db.counters.table_splits, 1);
        }
        // `compact_range` of a keyspace with a compaction filter rewrites what it would move,
        // so the filter sees every table (background moves stay moves).
        let filtered = rewrites_deepest(db, st.tree(ks));
        let r = match &choice {
            Choice::Move(t) if filtered && t.reason == Reason::Manual => self.run_merge(db, st, ks, t),
            Choice::Move(t) => self.install_move(db, st, ks, t),
            Choice::Merge(t) => self.run_merge(db, st, ks, t),
            Choice::Append(a) => self.run_append(db, st, ks, a),
            Choice::Drop(d) => self.install_drop(db, st, ks, d),
        };
        // Two running jobs may share a level (a new run spilled into a tiered level that is
        // merging): free this job's marks only.
        if let Some(tree) = st.trees.get_mut(&ks) {
            for l in &levels {
                if let Some(at) = tree.busy_levels.iter().position(|b| b == l) {
                    tree.busy_levels.swap_remove(at);
                }
            }
        }
        self.progress.notify_all();
        // Freed levels may unblock a choice another compaction thread passed over.
        self.compact_cv.notify_all();
        db.delete_obsolete_files(st);
        r
    }

    /// The edit of keyspace `ks`'s tree that removes the task's inputs (and moves its level's
    /// round-robin pointer).
    fn input_removal(ks: u32, task: &CompactionTask) -> VersionEdit {
        let mut edit = VersionEdit::of_keyspace(ks);
        for (level, f) in task.input_files() {
            edit.deleted_files.push((level as u32, f.number));
        }
        if let Some((level, k)) = &task.compact_pointer {
            edit.compact_pointers.push((*level as u32, k.clone()));
        }
        edit
    }

    /// Re-parent the task's tables to the output level without rewriting them: into the run
    /// the task names, or each input run as a run of its own with a fresh id (newer than every
    /// run there; fresh ids keep the input runs' order).
    fn install_move(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, ks: u32, task: &CompactionTask) -> Result<()> {
        let mut edit = Self::input_removal(ks, task);
        let mut old_runs: Vec<u64> = task.input_files().map(|(_, f)| f.run).collect();
        old_runs.sort_unstable();
        old_runs.dedup();
        let new_runs: Vec<u64> =
            old_runs.iter().map(|_| task.output_run.unwrap_or_else(|| st.versions.new_file_number())).collect();
        for (_, f) in task.input_files() {
            let mut moved = FileMeta::clone(f);
            moved.run = old_runs.binary_search(&f.run).map_or(moved.run, |i| new_runs[i]);
            edit.added_files.push((task.output_level as u32, moved));
        }
        st.versions.log_and_apply(edit)?;
        add(&db.counters.trivial_moves, 1);
        add_at_level(&db.counters.moved_by_level, task.output_level, task.input_files().map(|(_, f)| f.size).sum());
        add(&db.counters.compactions, 1);
        Ok(())
    }

    /// Delete tables outright.
    fn install_drop(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, ks: u32, d: &DropTask) -> Result<()> {
        let deleted_files = d.files.iter().map(|f| (d.level as u32, f.number)).collect();
        let edit = VersionEdit { deleted_files, ..VersionEdit::of_keyspace(ks) };
        st.versions.log_and_apply(edit)?;
        add(&db.counters.tables_dropped, d.files.len() as u64);
        Ok(())
    }

    /// Run `job` for `task` with the state lock released, on the current Version; file
    /// numbers it allocates are protected from deletion until the caller drops the returned list.
    fn unlocked_job<T>(
        &self,
        db: &DbInner,
        st: &mut MutexGuard<'_, State>,
        ks: u32,
        task: &CompactionTask,
        job: impl FnOnce(&JobContext<'_>, &Version) -> Result<T>,
    ) -> (Result<T>, Vec<u64>) {
        let Some((version, tree)) = st.versions.current_of(ks).zip(st.tree(ks)) else {
            return (Err(crate::error::Error::invalid(format!("no tree for keyspace {ks}"))), Vec::new());
        };
        let (policy, tree_opts) = (tree.policy.clone(), tree.opts.clone());
        let smallest_snapshot = db.snapshots.smallest(db.writes.visible_seq());
        let newest_snapshot = db.snapshots.newest();
        let consumed: Vec<u64> = task.input_files().map(|(_, f)| f.number).collect();
        let flush_bytes = [&st.mem]
            .into_iter()
            .chain(st.imms.iter())
            .find_map(|m| m.flushed_bytes_of(db.opts.write_buffer_bytes as u64));
        let new_run = NewRun {
            level: task.output_level,
            bytes: task.input_bytes(),
            joins: task.output_run,
            consumed: &consumed,
            flush_bytes: flush_bytes.unwrap_or(0),
        };
        let mut table_options = policy.table_options(&version, &new_run);
        table_options.prefix_extractor = tree_opts.prefix_extractor.clone();
        let allocated = parking_lot::Mutex::new(Vec::new());
        let out = MutexGuard::unlocked(st, || {
            let read_value = |user_key: &[u8], ptr: &[u8]| -> Result<Vec<u8>> {
                let ptr = db.vlog.decode_pointer(ptr)?;
                Ok(db.vlog.read_point(&ptr, user_key, crate::vlog::CacheUse::filling(false))?.to_vec())
            };
            let alloc = || {
                let mut s = db.state.lock();
                let n = s.versions.new_file_number();
                s.pending_outputs.insert(n);
                allocated.lock().push(n);
                n
            };
            // Asked for every pointer the job drops: a sorted snapshot, not the shared set's lock.
            let cold = db.vlog.cold_files();
            let ctx = JobContext {
                vfs: &db.vfs,
                dir: &db.dir,
                table_cache: &db.table_cache,
                table_options,
                target_file_bytes: tree_opts.target_file_size_bytes,
                smallest_snapshot,
                newest_snapshot,
                new_file_number: &alloc,
                defer_syncs: tree_opts.defer_compaction_syncs_in_force(),
                verify_inputs: db.opts.paranoid_checks,
                merge_operator: tree_opts.merge_operator.clone(),
                read_value: &read_value,
                compaction_filter: tree_opts.compaction_filter.clone(),
                now_ms: db.opts.clock.now_ms(),
                is_cold: &|n| cold.binary_search(&n).is_ok(),
            };
            job(&ctx, &version)
        });
        (out, allocated.into_inner())
    }

    /// Merge the task's inputs with the state lock released during I/O, then install them.
    fn run_merge(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, ks: u32, task: &CompactionTask) -> Result<()> {
        let mut edit = Self::input_removal(ks, task);
        let (out, allocated) = self.unlocked_job(db, st, ks, task, |ctx, v| job::run_compaction(ctx, task, v));
        let r = out.and_then(|out| db.vfs.sync_dir(&db.dir).map(|_| out)).and_then(|out| {
            self.record_vlog_garbage(db, st, &mut edit, &out.vlog_garbage, Some(out.vlog_garbage_under_moves));
            for f in &out.files {
                edit.added_files.push((task.output_level as u32, f.clone()));
            }
            st.versions.log_and_apply(edit).map(|_| out)
        });
        for n in allocated {
            st.pending_outputs.remove(&n);
        }
        let out = r?;
        self.count_compaction(db, st, ks, task.output_level, out.bytes_read, out.bytes_written);
        tracing::debug!(
            reason = ?task.reason,
            levels = ?task.inputs.iter().map(|i| (i.level, i.files.len())).collect::<Vec<_>>(),
            output_level = task.output_level,
            joins = ?task.output_run,
            read = out.bytes_read,
            written = out.bytes_written,
            "compaction"
        );
        Ok(())
    }

    /// Light-weight compaction: append the victims' pieces to the tables below, then record
    /// the victims' removal and the targets' new lengths in one manifest edit. Until that edit
    /// is durable the manifest names the targets at their old lengths, where their old footers
    /// are: a crash leaves the old tree, and the unrecorded bytes stay as dead space.
    fn run_append(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, ks: u32, a: &AppendTask) -> Result<()> {
        let mut edit = Self::input_removal(ks, &a.task);
        // An append creates no file, so it has no allocated numbers to release.
        let (out, _) = self.unlocked_job(db, st, ks, &a.task, |ctx, v| lwc::run_append(ctx, a, v));
        let out = out?;
        self.record_vlog_garbage(db, st, &mut edit, &out.vlog_garbage, Some(out.vlog_garbage_under_moves));
        let level = a.task.output_level as u32;
        for f in &out.files {
            edit.deleted_files.push((level, f.number));
            edit.added_files.push((level, f.clone()));
        }
        st.versions.log_and_apply(edit)?;
        self.count_compaction(db, st, ks, a.task.output_level, out.bytes_read, out.bytes_written);
        add(&db.counters.segments_appended, out.files.len() as u64);
        Ok(())
    }

    /// Put a job's dropped separated-value bytes in `edit` (the discard statistics) and count
    /// the users' overwrites among them for the space estimate: all of a compaction's but what
    /// a GC move shadowed (`under_moves`), wherever it points — an overwritten value in a file
    /// GC collected since was an overwrite all the same; for a dropped keyspace (`None`), the
    /// bytes in files still there.
    fn record_vlog_garbage(
        &self,
        db: &DbInner,
        st: &MutexGuard<'_, State>,
        edit: &mut VersionEdit,
        garbage: &BTreeMap<u64, u64>,
        under_moves: Option<u64>,
    ) {
        edit.vlog_garbage = garbage.iter().map(|(&f, &b)| (f, b)).collect();
        let counted = match under_moves {
            Some(moved) => garbage.values().sum::<u64>().saturating_sub(moved),
            None => {
                let vlog_files = st.versions.vlog_files();
                garbage.iter().filter(|(f, _)| vlog_files.contains_key(f)).map(|(_, b)| b).sum()
            }
        };
        add(&db.counters.vlog_garbage_counted, counted);
    }

    fn count_compaction(
        &self,
        db: &DbInner,
        st: &State,
        ks: u32,
        output_level: usize,
        bytes_read: u64,
        bytes_written: u64,
    ) {
        if let Some(t) = st.tree(ks) {
            add(&t.counters.compaction_bytes, bytes_written);
        }
        add(&db.counters.compaction_written, bytes_written);
        add(&db.counters.compaction_read, bytes_read);
        add_at_level(&db.counters.compaction_written_by_level, output_level, bytes_written);
        add_at_level(&db.counters.compaction_read_by_level, output_level, bytes_read);
        add(&db.counters.compactions, 1);
    }

    /// Flush, then merge everything of keyspace `ks` overlapping `[begin, end]` down to the
    /// deepest level holding such data.
    pub(crate) fn compact_range(&self, db: &DbInner, ks: u32, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.flush(db)?;
        self.compact_tables(db, ks, begin, end)
    }

    /// Compact every keyspace's tables (GC's refresh of its discard statistics), leaving the
    /// memtables alone.
    pub(crate) fn compact_all_tables(&self, db: &DbInner) -> Result<()> {
        let ids: Vec<u32> = db.state.lock().trees.iter().filter(|(_, t)| !t.dropped).map(|(&id, _)| id).collect();
        for ks in ids {
            self.compact_tables(db, ks, None, None)?;
        }
        Ok(())
    }

    /// Compact keyspace `ks`'s tables overlapping `[begin, end]` down to the last level that
    /// holds any, leaving the memtables alone.
    pub(crate) fn compact_tables(&self, db: &DbInner, ks: u32, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        let mut st = db.state.lock();
        let Some(policy) = st.tree(ks).filter(|t| !t.dropped).map(|t| t.policy.clone()) else {
            return Ok(());
        };
        let max_level = {
            // Not held across the loop: a pinned Version would keep replaced tables on disk.
            let Some(v) = st.versions.current_of(ks) else { return Ok(()) };
            (0..v.num_levels()).rev().find(|&l| !v.overlapping_files(l, begin, end).is_empty()).unwrap_or(0)
        };
        for level in 0..max_level {
            self.run_manual_task(db, &mut st, ks, |v| policy.pick_range(v, level, begin, end))?;
        }
        // Policies that keep several runs per level merge the deepest level's into one (and
        // light-weight compaction collapses its segments there). The deepest level is found
        // again: a background compaction since may have moved the range's tables further down.
        self.run_manual_task(db, &mut st, ks, |v| {
            let deepest = (0..v.num_levels()).rev().find(|&l| !v.overlapping_files(l, begin, end).is_empty());
            policy.pick_merge_runs(v, deepest.unwrap_or(max_level).max(max_level), begin, end)
        })?;
        // With a compaction filter the deepest level's tables are rewritten too, so the filter
        // sees every entry in the range (RocksDB's `kIfHaveCompactionFilter`).
        // So are they when the keyspace may hold expiring entries: the rewrite drops the expired;
        // and when they hold range tombstones (a table moved down, or a light-weight
        // compaction's appended segment, keeps them): at the bottom, with nothing older beneath,
        // the rewrite drops them.
        if rewrites_deepest(db, st.tree(ks)) || deepest_holds_tombstones(st.versions.current_of(ks), begin, end) {
            self.run_manual_task(db, &mut st, ks, |v| in_place_rewrite(v, begin, end))?;
        }
        // A compaction of other levels that ran meanwhile may still pin a Version naming the
        // tables replaced here: once none runs, they go.
        while st.tree(ks).is_some_and(|t| !t.busy_levels.is_empty()) {
            self.progress.wait(&mut st);
        }
        db.delete_obsolete_files(&mut st);
        Ok(())
    }

    /// Wait for running compactions, then run the merge `pick` chooses from the current
    /// Version, if any; a failure becomes the background error.
    fn run_manual_task(
        &self,
        db: &DbInner,
        st: &mut MutexGuard<'_, State>,
        ks: u32,
        pick: impl FnOnce(&Version) -> Option<CompactionTask>,
    ) -> Result<()> {
        while st.tree(ks).is_some_and(|t| !t.busy_levels.is_empty()) {
            self.progress.wait(st);
        }
        db.background_error(st)?;
        // The Version is dropped before the task runs: pinned, it would keep replaced tables.
        let Some(version) = st.versions.current_of(ks) else { return Ok(()) };
        let task = pick(&version);
        drop(version);
        if let Some(task) = task {
            if let Err(e) = self.run_choice(db, st, ks, Choice::Merge(task)) {
                st.bg_error = Some(e.duplicate());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Finish dropping keyspace `ks`: count the separated values its tables point to as
    /// garbage (a walk over its keys and pointers, without the lock), then delete its tables
    /// and forget it in one manifest edit. A crash before the edit leaves it dropped with its
    /// tables; the next open finishes the drop again.
    fn finish_drop(&self, db: &DbInner, st: &mut MutexGuard<'_, State>, ks: u32) -> Result<()> {
        let Some(version) = st.versions.current_of(ks) else { return Ok(()) };
        let Some(tree) = st.trees.get_mut(&ks) else { return Ok(()) };
        // Marked busy so no other thread picks the drop meanwhile.
        tree.busy_levels.push(0);
        let files: Vec<(usize, Arc<FileMeta>)> = version.all_files().map(|(l, f)| (l, f.clone())).collect();
        drop(version);
        let garbage = MutexGuard::unlocked(st, || pointed_bytes(db, &files));
        let mut edit = VersionEdit::of_keyspace(ks);
        edit.deleted_files = files.iter().map(|(l, f)| (*l as u32, f.number)).collect();
        self.record_vlog_garbage(db, st, &mut edit, &garbage, None);
        edit.keyspaces_forgotten.push(ks);
        let r = st.versions.log_and_apply(edit);
        match &r {
            Ok(_) => {
                self.seek_stats.lock().remove(&ks);
                tracing::info!(keyspace = ks, tables = files.len(), "dropped keyspace's tables deleted");
                // The tree (still busy) goes after its tables: until then a wait for
                // background work waits for their deletion too.
                db.delete_obsolete_files(st);
                if let Some(t) = st.trees.remove(&ks) {
                    st.forgotten.insert(ks, t.name);
                }
            }
            Err(_) => {
                if let Some(t) = st.trees.get_mut(&ks) {
                    t.busy_levels.clear();
                }
            }
        }
        self.progress.notify_all();
        r.map(|_| ())
    }

    /// Flush the active memtable and wait until every immutable memtable is on disk.
    pub(crate) fn flush(&self, db: &DbInner) -> Result<()> {
        db.writes.force_switch(db)?;
        let mut st = db.state.lock();
        while !st.imms.is_empty() {
            db.background_error(&st)?;
            self.flush_cv.notify_one();
            self.progress.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Wait until nothing is left to flush, the policy wants no compaction and value-log GC
    /// has nothing to collect.
    pub(crate) fn wait_for_background_work(&self, db: &DbInner) -> Result<()> {
        self.wait_for_flush_and_compaction(db)?;
        if db.opts.gc_interval_ms == 0 {
            return Ok(());
        }
        // The GC rounds due now run here, in the caller (`gc_round` takes GC's lock: the GC
        // thread waits meanwhile), as RocksDB's `WaitForCompact` covers BlobDB's GC, which
        // runs inside compaction. Left to the GC thread, a load's collection ran on into the
        // reads after it (a read pass ran slower: docs/BENCHMARKS.md §11). A round
        // collects one file: at most one round per file there is now (and one for a file a
        // roll adds), so writers elsewhere cannot keep the wait going.
        let mut rounds = db.state.lock().versions.vlog_files().len() + 1;
        while rounds > 0 {
            rounds -= 1;
            let round = db.gc.gc_round(db, true);
            self.wait_for_flush_and_compaction(db)?;
            match round {
                Ok(super::gc::GcRound::Collected | super::gc::GcRound::Rolled) => {}
                Ok(super::gc::GcRound::Idle | super::gc::GcRound::Pinned) => break,
                // As the GC thread does: not the caller's failure, the thread retries later.
                Err(e) => {
                    tracing::warn!(error = %e, "value-log GC failed while waiting for background work");
                    db.gc.release_writers();
                    break;
                }
            }
        }
        Ok(())
    }

    /// Count the caller as waiting for background work until the guard is dropped: no pick
    /// leaves work for later meanwhile (a stalled writer, `wait_for_background_work`).
    pub(super) fn waiting(&self) -> Waiting<'_> {
        self.waiters.fetch_add(1, Relaxed);
        Waiting(&self.waiters)
    }

    /// Block until no flush or automatic compaction is pending.
    fn wait_for_flush_and_compaction(&self, db: &DbInner) -> Result<()> {
        // Counted before the state is locked: every pick from here on does all there is.
        let _waiting = self.waiting();
        let mut st = db.state.lock();
        loop {
            db.background_error(&st)?;
            if st.imms.is_empty() && !st.compactions_running() && self.pick_compaction(db, &st).is_none() {
                return Ok(());
            }
            self.flush_cv.notify_one();
            self.compact_cv.notify_one();
            self.progress.wait_for(&mut st, Duration::from_millis(100));
        }
    }
}

/// Whether `compact_range` of `tree` rewrites what it would move, and the deepest level's
/// tables too: it has a compaction filter to show every entry, or it may hold expiring
/// entries (a default TTL, or puts with a TTL written since the open) to drop the expired.
fn rewrites_deepest(db: &DbInner, tree: Option<&super::keyspace::TreeState>) -> bool {
    tree.is_some_and(|t| {
        t.opts.compaction_filter.is_some()
            || t.opts.default_ttl_ms > 0
            || db.ttl_written.load(std::sync::atomic::Ordering::Relaxed)
    })
}

/// Bytes of separated values the entries of `files` point to, per value file (every version:
/// each pointer was counted when its table was flushed). A table that cannot be read counts
/// nothing: its values then look live until GC collects their file and finds them dead.
fn pointed_bytes(db: &DbInner, files: &[(usize, Arc<FileMeta>)]) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    for (_, f) in files {
        let mut walk = || -> Result<()> {
            let mut it = db.table_cache.get(f.number, f.size)?.iter(crate::sst::BlockReads::filling(false));
            it.seek_to_first()?;
            while it.valid() {
                let pointer =
                    key::parse_internal_key(it.key()).and_then(|k| crate::ttl::pointer_bytes(k.kind, it.value()));
                if let Some(p) = pointer.and_then(crate::vlog::ValuePointer::decode) {
                    *out.entry(p.file).or_insert(0) += u64::from(p.op_len);
                }
                it.next()?;
            }
            Ok(())
        };
        if let Err(e) = walk() {
            tracing::warn!(table = f.number, error = %e, "could not count a dropped keyspace's values as garbage");
        }
    }
    out
}

/// A rewrite of the tables of the deepest level holding any of `[begin, end]` into their own
/// run (that level holding one run), for `compact_range` under a compaction filter.
/// Whether the deepest level holding tables in `[begin, end]` has range tombstones in them.
fn deepest_holds_tombstones(v: Option<Arc<Version>>, begin: Option<&[u8]>, end: Option<&[u8]>) -> bool {
    v.is_some_and(|v| {
        (0..v.num_levels())
            .rev()
            .find(|&l| !v.overlapping_files(l, begin, end).is_empty())
            .is_some_and(|l| v.overlapping_files(l, begin, end).iter().any(|f| f.range_tombstones > 0))
    })
}

fn in_place_rewrite(v: &Version, begin: Option<&[u8]>, end: Option<&[u8]>) -> Option<CompactionTask> {
    let level = (0..v.num_levels()).rev().find(|&l| !v.overlapping_files(l, begin, end).is_empty())?;
    let files = v.overlapping_files(level, begin, end);
    if v.num_runs(level) != 1 {
        return None;
    }
    let output_run = files.first().map(|f| f.run);
    Some(CompactionTask {
        inputs: vec![crate::compaction::CompactionInput { level, files }],
        output_level: level,
        output_run,
        grandparents: Vec::new(),
        compact_pointer: None,
        reason: Reason::Manual,
    })
}
