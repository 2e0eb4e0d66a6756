//! Opening an existing database: read the manifest, survey the log from the recorded head
//! (nothing changes until the survey has said what the log holds), replay it into a memtable
//! (flushing when it fills, so memory stays bounded), cut a torn tail, and reopen the last log
//! file for appending. Damage to bytes a sync had made durable is `Corruption` under the
//! default mode; the salvage modes keep what they can and report the rest (`repair.rs`).

use crate::compaction::CompactionPolicy;
use std::path::Path;
use std::sync::Arc;

use super::flush;
use super::keyspace::{TreeState, DEFAULT_KEYSPACE_NAME};
use super::repair::{self, RecoveryReport};
use crate::error::{Error, Result};
use crate::filename::{self, vlog_file_name, FileKind};
use crate::fs::Vfs;
use crate::log::{self, LogPos, LogReader, LogRecord, LogSurvey, LogWriter, Segment};
use crate::memtable::Memtable;
use crate::options::{Options, RecoveryMode};
use crate::version::{LoadedManifest, VersionSet, DEFAULT_KEYSPACE};
use std::collections::BTreeMap;

/// What recovery hands to the new DB.
pub(super) struct Recovered {
    pub mem: Arc<Memtable>,
    pub versions: VersionSet,
    pub last_seq: u64,
    pub log: LogWriter,
    /// Set when a salvage mode left something out.
    pub report: Option<RecoveryReport>,
    /// The options the database opens with: the caller's, with every shaping setting it did
    /// not name taken from the manifest.
    pub options: Options,
    /// Every keyspace's runtime state (settled options, policy), by id (taken by the open).
    pub trees: BTreeMap<u32, TreeState>,
}

pub(super) fn recover(vfs: &Arc<dyn Vfs>, dir: &Path, options: Options) -> Result<Recovered> {
    recover_with(vfs, dir, options, false).map(|(recovered, _)| recovered)
}

/// `recover` for a read-only handle (`read_only.rs`): nothing is written — no new manifest, no
/// table, no cut, no salvage (damage is refused) — and the log is replayed into one memtable
/// up to its last whole record group, which it returns as where the handle's view ends.
pub(super) fn recover_read_only(vfs: &Arc<dyn Vfs>, dir: &Path, options: Options) -> Result<(Recovered, LogPos)> {
    if !vfs.exists(&filename::current_file_name(dir)) {
        let reason = "there is no CURRENT file".to_string();
        return Err(Error::NotADatabase { path: dir.to_path_buf(), reason });
    }
    recover_with(vfs, dir, options, true)
}

fn recover_with(vfs: &Arc<dyn Vfs>, dir: &Path, mut options: Options, read_only: bool) -> Result<(Recovered, LogPos)> {
    // The manifest is only read here: nothing on disk changes until the log survey has said
    // the log may be opened.
    let existing = vfs.exists(&filename::current_file_name(dir));
    let manifest = if existing { Some(read_manifest(vfs, dir, read_only)?) } else { None };
    if let Some(m) = &manifest {
        settle_options(&mut options, &m.recorded_options())?;
    }
    let opts = &options;
    let default_policy: Arc<dyn CompactionPolicy> = super::policy_for(opts).into();
    let name = default_policy.name();
    let policy_name = name.as_str();
    let mut versions = match manifest {
        Some(m) => VersionSet::from_manifest(vfs.clone(), dir, m, opts.num_levels, opts.key_order())?,
        None => {
            let record = opts.shape_record();
            VersionSet::create_with_options(
                vfs.clone(),
                dir,
                opts.num_levels,
                policy_name,
                (&record, opts.key_order()),
            )?
        }
    };
    if versions.policy() != policy_name {
        tracing::info!(was = versions.policy(), now = policy_name, "compaction policy changed since the last open");
        // The snapshot opening the new manifest records it.
        versions.set_policy(policy_name);
    }
    versions.set_recorded_options(opts.shape_record());
    let trees = tree_states(&mut versions, opts, default_policy);
    let head = versions.log_head();
    let logs = log_files_from(&**vfs, dir, head.file)?;
    if head.offset > 0 && !logs.contains(&head.file) {
        return Err(Error::corruption(
            vlog_file_name(dir, head.file),
            head.offset,
            "the log file holding the manifest's log head is missing",
        ));
    }
    if let Some(&max) = logs.last() {
        versions.mark_file_number_used(max);
    }
    let closed = versions.log_durable();
    let survey = log::survey::survey(&**vfs, dir, &logs, head, closed)?;
    // A read-only handle cannot salvage (that writes the evidence and a new log): it refuses
    // damage as the default open does.
    let mode = match opts.recovery_mode {
        RecoveryMode::PointInTime | RecoveryMode::SkipDamaged if read_only => RecoveryMode::TolerateCorruptTail,
        mode => mode,
    };
    let plan = plan(dir, &survey, mode)?;
    if existing && !read_only {
        versions.start_manifest()?;
    }
    let report = match plan.salvage {
        true => Some(keep_evidence(vfs, dir, &survey, &plan, opts.recovery_mode, &mut versions)?),
        false => None,
    };
    let manifest_seq = versions.last_sequence();
    let mem = Arc::new(Memtable::for_keyspaces(&live_ids(&trees), opts.key_order()));
    let mut replay = Replay { vfs, dir, opts, trees: &trees, versions: &mut versions, mem, applied: None, read_only };
    for seg in &plan.apply {
        replay.segment(seg)?;
    }
    let applied = replay.applied;
    // Just past the last record group replayed: where a read-only handle's view ends.
    let end = plan.apply.last().map_or(head, |s| LogPos { file: s.file, offset: s.end });
    let log = if plan.salvage {
        // The salvaged state starts a fresh log after everything that was read: the damaged
        // files fall below the head (their copies are in `lost/`).
        let last_seq = manifest_seq.max(survey.max_seq.unwrap_or(0)).max(applied.unwrap_or(0));
        let log = salvage_log(&mut replay, last_seq)?;
        replay.versions.set_last_sequence(last_seq);
        log
    } else {
        // Sequence numbers stay dense: the next group follows the last one kept (dropped torn
        // groups exist nowhere now), or the numbering a start mark announced.
        let next = plan.apply.last().and_then(|s| s.next_seq);
        let last_seq = next.map(|n| n - 1).or(applied).unwrap_or(manifest_seq);
        replay.versions.set_last_sequence(last_seq);
        if read_only {
            super::read_only::refusing_log(vfs, dir, end, last_seq)
        } else {
            let tail = cut_and_sync(vfs, dir, &logs, &survey, plan.cut)?;
            open_log_writer(vfs, dir, opts, replay.versions, tail, last_seq + 1)?
        }
    };
    let mem = replay.mem;
    let last_seq = versions.last_sequence();
    Ok((Recovered { mem, versions, last_seq, log, report, options, trees }, end))
}

/// The manifest `CURRENT` names. For a read-only handle, a writer that just started a new
/// manifest may have deleted the one `CURRENT` named a moment before: read again.
fn read_manifest(vfs: &Arc<dyn Vfs>, dir: &Path, retry: bool) -> Result<LoadedManifest> {
    let vanished = |e: &Error| match e {
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        Error::Corruption { reason, .. } => reason.contains("which does not exist"),
        _ => false,
    };
    let mut tries = 0;
    loop {
        match LoadedManifest::read(&**vfs, dir) {
            Err(e) if retry && tries < 4 && vanished(&e) => tries += 1,
            r => return r,
        }
    }
}

/// The keyspaces a memtable holds lists for: every one not dropped.
fn live_ids(trees: &BTreeMap<u32, TreeState>) -> Vec<u32> {
    trees.iter().filter(|(_, t)| !t.dropped).map(|(&id, _)| id).collect()
}

/// Every keyspace's runtime state: the default keyspace's from the settled options and its
/// policy, each other's from the database's options with its recorded shaping settings.
fn tree_states(
    versions: &mut VersionSet,
    opts: &Options,
    default_policy: Arc<dyn CompactionPolicy>,
) -> BTreeMap<u32, TreeState> {
    let mut out = BTreeMap::new();
    let ids: Vec<(u32, String, bool)> =
        versions.trees().iter().map(|(&id, t)| (id, t.name.clone(), t.dropped)).collect();
    for (id, name, dropped) in ids {
        let mut state = if id == DEFAULT_KEYSPACE {
            TreeState::new(DEFAULT_KEYSPACE_NAME, opts.clone(), default_policy.clone())
        } else {
            let o = opts.with_recorded_shape(&versions.recorded_options_of(id));
            let policy: Arc<dyn CompactionPolicy> = super::policy_for(&o).into();
            versions.set_policy_of(id, &policy.name());
            TreeState::new(&name, o, policy)
        };
        state.dropped = dropped;
        out.insert(id, state);
    }
    out
}

/// Take the recorded value of every shaping option the caller did not name, say in the log
/// which named ones differ from the record (compaction reshapes the tree to them), and check
/// the options that result.
fn settle_options(options: &mut Options, recorded: &str) -> Result<()> {
    options.check_merge_operator(recorded)?;
    for r in options.adopt_shape_record(recorded) {
        tracing::info!(
            setting = r.setting,
            recorded = %r.recorded,
            now = %r.now,
            "an option that shapes the tree differs from what the database recorded; compaction reshapes it"
        );
    }
    super::validate_options(options)
}

/// What to replay, what to cut, whether this is a salvage.
struct Plan {
    apply: Vec<Segment>,
    /// A torn tail: the log ends here (later files go).
    cut: Option<LogPos>,
    salvage: bool,
}

fn plan(dir: &Path, survey: &LogSurvey, mode: RecoveryMode) -> Result<Plan> {
    let before = |at: LogPos| survey.segments_before(at).cloned().collect::<Vec<_>>();
    let Some(first) = survey.breaks.first() else {
        return Ok(Plan { apply: survey.segments.clone(), cut: None, salvage: false });
    };
    if mode == RecoveryMode::AbsoluteConsistency {
        return Err(repair::damage_error(dir, survey, first, mode));
    }
    if let Some(torn) = survey.torn_tail() {
        warn_torn(dir, survey, torn.at, &torn.reason);
        return Ok(Plan { apply: before(torn.at), cut: Some(torn.at), salvage: false });
    }
    match mode {
        RecoveryMode::PointInTime => Ok(Plan { apply: before(first.at), cut: None, salvage: true }),
        RecoveryMode::SkipDamaged => {
            // Everything valid up to a torn tail (if one follows), in sequence order: a run
            // numbered at or below what is already kept cannot be placed and is left out.
            let end = survey.breaks.iter().find(|b| b.durable_by.is_none()).map(|b| b.at);
            let (mut apply, mut last) = (Vec::new(), None);
            for s in survey.segments.iter().filter(|s| end.is_none_or(|t| LogPos { file: s.file, offset: s.end } <= t))
            {
                if s.first_seq.zip(last).is_some_and(|(f, l)| f <= l) {
                    continue;
                }
                last = s.last_seq.or(last);
                apply.push(s.clone());
            }
            Ok(Plan { apply, cut: None, salvage: true })
        }
        _ => Err(repair::damage_error(dir, survey, first, mode)),
    }
}

/// A torn tail is the normal end of a crash: say what goes.
fn warn_torn(dir: &Path, survey: &LogSurvey, at: LogPos, reason: &str) {
    let dropped: u64 = survey
        .files
        .iter()
        .filter(|(n, _)| *n >= at.file)
        .map(|(n, size)| if *n == at.file { size.saturating_sub(at.offset) } else { *size })
        .sum();
    let after = survey.segments.iter().filter(|s| LogPos { file: s.file, offset: s.start } >= at);
    let groups: u64 = after.clone().map(|s| s.groups).sum();
    let seqs = (after.clone().find_map(|s| s.first_seq), after.filter_map(|s| s.last_seq).max());
    tracing::warn!(file = ?vlog_file_name(dir, at.file), offset = at.offset, dropped_bytes = dropped,
        unsynced_groups_dropped = groups, ?seqs, %reason,
        "log tail is torn (no completed sync covered it); keeping everything before it");
}

/// Before a salvage changes anything: the report of what will be left out, and copies of the
/// affected log files, under `DIR/lost/`.
fn keep_evidence(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    survey: &LogSurvey,
    plan: &Plan,
    mode: RecoveryMode,
    versions: &mut VersionSet,
) -> Result<RecoveryReport> {
    let mut report = repair::build_report(&**vfs, dir, survey, &plan.apply, mode)?;
    let from = survey.breaks.first().map_or(0, |b| b.at.file);
    repair::archive(&**vfs, dir, survey, from, versions.new_file_number(), &mut report)?;
    tracing::warn!(lost_ranges = report.lost.len(), seqs_lost = report.seqs_lost(), report = ?report.report_file,
        "salvaged a damaged log; what is lost:\n{report}");
    Ok(report)
}

/// Cut a torn tail (later files go first, then the file it is in) and make every remaining
/// log file durable: the new writer's sync marks vouch for all of them. Returns where
/// appending continues.
fn cut_and_sync(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    logs: &[u64],
    survey: &LogSurvey,
    cut: Option<LogPos>,
) -> Result<Option<(u64, u64)>> {
    let keep: Vec<u64> = logs.iter().copied().filter(|&n| cut.is_none_or(|c| n <= c.file)).collect();
    let doomed: Vec<u64> = logs.iter().copied().filter(|n| !keep.contains(n)).collect();
    for &n in doomed.iter().rev() {
        vfs.remove(&vlog_file_name(dir, n))?;
    }
    if !doomed.is_empty() {
        vfs.sync_dir(dir)?;
    }
    let Some(&last) = keep.last() else { return Ok(None) };
    for &n in &keep[..keep.len() - 1] {
        vfs.open_append(&vlog_file_name(dir, n))?.sync_data()?;
    }
    let end = match cut {
        Some(c) if c.file == last => c.offset,
        _ => survey.file_size(last).unwrap_or(0),
    };
    Ok(Some((last, end)))
}

/// Numbers of the log files at or after `first`, ascending.
fn log_files_from(vfs: &dyn Vfs, dir: &Path, first: u64) -> Result<Vec<u64>> {
    let mut logs: Vec<u64> = vfs
        .list(dir)?
        .iter()
        .filter_map(|n| filename::parse_file_name(n))
        .filter(|(k, n)| *k == FileKind::Vlog && *n >= first)
        .map(|(_, n)| n)
        .collect();
    logs.sort_unstable();
    Ok(logs)
}

/// Continue the last log file where its valid part ends (made durable first), or start a new
/// one whose first group will be `next_seq`.
fn open_log_writer(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    opts: &Options,
    versions: &mut VersionSet,
    tail: Option<(u64, u64)>,
    next_seq: u64,
) -> Result<LogWriter> {
    let (number, file, len) = match tail {
        Some((n, len)) => {
            let mut f = vfs.open_append(&vlog_file_name(dir, n))?;
            if f.len() != len {
                f.truncate(len)?;
            }
            f.sync()?;
            (n, f, len)
        }
        None => {
            let n = versions.new_file_number();
            let f = vfs.create(&vlog_file_name(dir, n))?;
            vfs.sync_dir(dir)?;
            (n, f, 0)
        }
    };
    Ok(LogWriter::new(vfs.clone(), dir, number, file, len, opts.log_buffer_bytes, opts.log_file_bytes, next_seq))
}

/// A salvage goes on in a new log file: created and synced (start mark included), then the
/// recovered memtable goes to level 0 and the head moves into the new file, in one edit.
fn salvage_log(replay: &mut Replay<'_>, last_seq: u64) -> Result<LogWriter> {
    let (vfs, dir, opts) = (replay.vfs, replay.dir, replay.opts);
    let number = replay.versions.new_file_number();
    let file = vfs.create(&vlog_file_name(dir, number))?;
    let mut log =
        LogWriter::new(vfs.clone(), dir, number, file, 0, opts.log_buffer_bytes, opts.log_file_bytes, last_seq + 1);
    log.sync()?;
    vfs.sync_dir(dir)?;
    let end = log.end();
    replay.applied = Some(last_seq);
    replay.flush(end)?;
    Ok(log)
}

/// Log bytes read before the replayed groups are inserted (in parallel) into the memtable.
const REPLAY_BATCH_BYTES: usize = 4 << 20;

struct Replay<'a> {
    vfs: &'a Arc<dyn Vfs>,
    dir: &'a Path,
    opts: &'a Options,
    /// Every keyspace's policy (it chooses the replayed tables' options: their filter bits)
    /// and separation threshold.
    trees: &'a BTreeMap<u32, TreeState>,
    versions: &'a mut VersionSet,
    mem: Arc<Memtable>,
    /// Highest sequence number replayed.
    applied: Option<u64>,
    /// Replaying for a read-only handle: the memtable is never flushed (nothing is written).
    read_only: bool,
}

impl Replay<'_> {
    /// Replay the groups of one valid segment (the survey checked every one of them).
    fn segment(&mut self, seg: &Segment) -> Result<()> {
        let path = vlog_file_name(self.dir, seg.file);
        let mut reader = LogReader::new(self.vfs.open_read(&path)?, seg.file, seg.start)?;
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        loop {
            let at_end = reader.offset() >= seg.end;
            if !at_end {
                let rec = match reader.next_record()? {
                    Ok(rec) => rec,
                    Err(_) => {
                        let why = "the log changed while the database was being opened";
                        return Err(Error::corruption(&path, reader.offset(), why));
                    }
                };
                if rec.mark.is_none() {
                    batch_bytes += rec.ops.len();
                    batch.push(rec);
                }
            }
            if at_end || batch_bytes >= REPLAY_BATCH_BYTES {
                self.apply_batch(&batch);
                batch.clear();
                batch_bytes = 0;
                let full = self.mem.approximate_bytes() as usize >= self.opts.write_buffer_bytes
                    || self.mem.log_bytes() >= self.opts.memtable_log_bytes;
                if full && !self.read_only {
                    self.flush(LogPos { file: seg.file, offset: reader.offset() })?;
                }
            }
            if at_end {
                return Ok(());
            }
        }
    }

    /// Insert a batch of record groups. One thread: the memtable takes one writer at a time
    /// (its arena skiplist), and replaying from two threads was no faster
    /// (docs/BENCHMARKS.md §4).
    fn apply_batch(&mut self, records: &[LogRecord]) {
        let (mem, default) = (&self.mem, self.opts.min_separated_value_bytes);
        let threshold = |ks| self.trees.get(&ks).map_or(default, |t| t.opts.min_separated_value_bytes);
        for rec in records {
            let separated = log::separated_values_by(&rec.ops, threshold);
            mem.apply_group(rec.pos, rec.first_seq, &rec.ops, &separated, None);
        }
        for rec in records {
            self.applied = self.applied.max(Some(rec.first_seq + rec.count as u64 - 1));
        }
    }

    /// Write the replayed memtable to level 0 and move the log head past it.
    fn flush(&mut self, head: LogPos) -> Result<()> {
        let write_buffer = self.opts.write_buffer_bytes as u64;
        let tables = flush::plan(self.trees, self.versions, &self.mem, write_buffer, false);
        let metas = flush::write(self.vfs, self.dir, &self.mem, &tables)?;
        let (mut edit, _) = flush::edit(self.trees, self.versions, &self.mem, metas, false);
        edit.log_head = Some(head);
        let last = self.versions.last_sequence().max(self.applied.unwrap_or(0));
        self.versions.set_last_sequence(last);
        self.versions.log_and_apply(edit)?;
        self.mem = Arc::new(Memtable::for_keyspaces(&live_ids(self.trees), self.opts.key_order()));
        Ok(())
    }
}
