//! Freeing a collected file beside the next file's collection. Once a file's last chunks are
//! moved and their pointers logged, what is left — the log sync, the manifest record, the
//! deletion — waits on the device, not on the CPU, and the chunk reader sat idle through it.
//! So the background collector hands that last step to a freer thread and picks the next file
//! meanwhile.
//!
//! Order is kept by construction: one file at a time is in flight, every other free (and the
//! next hand-off) waits for it first, so the manifest records GC's progress in the order it
//! was made (a tail recorded out of order could send GC back over punched chunks). No pick
//! takes the file in flight. A crash while it is in flight leaves what a crash before an
//! in-line free leaves: the file is collected again after recovery.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender};

use super::collect::{ChunkDone, MovedChunk};
use super::{Gc, GcReport, Phase};
use crate::db::DbInner;
use crate::error::{Error, Result};

/// A collected file's last chunks, logged, to be freed.
pub(super) struct FreeJob {
    file: u64,
    moved: VecDeque<MovedChunk>,
}

/// The freer's side of the pipeline, as the collector sees it.
#[derive(Default)]
pub(super) struct InFlight {
    /// The file being freed now: no pick may take it.
    file: Option<u64>,
    /// How the last hand-off ended, until the collector settles it.
    outcome: Option<Result<ChunkDone>>,
    /// The freer's queue; `None` when no freer runs (explicit `run_gc` calls, or the freer
    /// could not be started): frees then run in line.
    tx: Option<SyncSender<FreeJob>>,
}

/// Clears the in-flight file if the freer unwinds, so the collector never waits for it forever.
struct ClearOnUnwind<'a>(&'a Gc);

impl Drop for ClearOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut f = self.0.in_flight.lock();
            f.file = None;
            f.outcome = Some(Err(Error::invalid("value-log GC's freer thread panicked")));
            f.tx = None;
            self.0.in_flight_cv.notify_all();
        }
    }
}

impl Gc {
    /// Run `rounds` (the background collector) with a freer thread beside it.
    pub(super) fn with_freer(&self, db: &DbInner, rounds: impl FnOnce()) {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<FreeJob>(1);
            let spawned =
                std::thread::Builder::new().name("wisckey-gc-free".into()).spawn_scoped(s, || self.run_freer(db, rx));
            match spawned {
                Ok(_) => self.in_flight.lock().tx = Some(tx),
                Err(e) => tracing::warn!(error = %e, "value-log GC frees in line: no freer thread"),
            }
            rounds();
            // Closing the queue ends the freer once its job is done; the scope joins it.
            self.in_flight.lock().tx = None;
        });
    }

    fn run_freer(&self, db: &DbInner, rx: Receiver<FreeJob>) {
        let _clear = ClearOnUnwind(self);
        for mut job in rx {
            let mut report = GcReport::default();
            // Not timed as a phase: the phases are the collector's own time, and the collector
            // counts only what it waits for this (`settle_for_collector`).
            let outcome = self.free_moved_chunks(db, job.file, &mut job.moved, &mut report);
            // Writers are paced by the space as it is now the file is gone.
            self.pace(db, self.vlog_space_amp(db));
            let mut f = self.in_flight.lock();
            f.file = None;
            f.outcome = Some(outcome);
            self.in_flight_cv.notify_all();
        }
    }

    /// The file being freed now, if any.
    pub(super) fn file_in_flight(&self) -> Option<u64> {
        self.in_flight.lock().file
    }

    /// Wait for the file in flight to be freed; how its free ended (`None`: nothing was
    /// handed off since the last settle).
    pub(super) fn settle_freer(&self) -> Option<Result<ChunkDone>> {
        let mut f = self.in_flight.lock();
        while f.file.is_some() {
            self.in_flight_cv.wait(&mut f);
        }
        f.outcome.take()
    }

    /// Like `settle_freer`, as the collector acts on it: the sequence number of a reader that
    /// pinned the freed file (stop collecting), or the free's error.
    pub(super) fn settle_for_collector(&self) -> Result<Option<u64>> {
        match self.phases.time(Phase::Freeing, || self.settle_freer()) {
            Some(Ok(ChunkDone::Pinned(seq))) => Ok(Some(seq)),
            Some(Err(e)) => Err(e),
            _ => Ok(None),
        }
    }

    /// Hand `moved` (the last chunks of `file`) to the freer. Gives them back when there is
    /// no freer, to be freed in line. The previous hand-off must be settled.
    pub(super) fn hand_off(&self, file: u64, moved: VecDeque<MovedChunk>) -> Option<VecDeque<MovedChunk>> {
        let mut f = self.in_flight.lock();
        let Some(tx) = f.tx.clone() else { return Some(moved) };
        debug_assert!(f.file.is_none() && f.outcome.is_none(), "a hand-off before the last one was settled");
        f.file = Some(file);
        drop(f);
        match tx.try_send(FreeJob { file, moved }) {
            Ok(()) => None,
            Err(e) => {
                self.in_flight.lock().file = None;
                let job = match e {
                    std::sync::mpsc::TrySendError::Full(job) | std::sync::mpsc::TrySendError::Disconnected(job) => job,
                };
                Some(job.moved)
            }
        }
    }
}
