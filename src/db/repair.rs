//! Salvaging a damaged log (`RecoveryMode::PointInTime` / `SkipDamaged`, `wisckey repair`):
//! what is lost (sequence numbers, keys, bytes) and the evidence kept before anything changes —
//! a copy of every affected log file and the report under `DIR/lost/`. Also the error a
//! default open returns for damage that is not a torn tail.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::filename::vlog_file_name;
use crate::fs::Vfs;
use crate::log::{LogBreak, LogPos, LogReader, LogSurvey, Segment, HEADER_LEN};
use crate::options::RecoveryMode;
use crate::util::coding::{decode_fixed32, decode_fixed64};
use crate::write_batch::BatchIter;

/// Directory (inside the database directory) where salvage keeps its evidence.
pub const LOST_DIR: &str = "lost";

/// What a salvaging open left out of the database, and where the evidence is.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// `PointInTime` or `SkipDamaged`.
    pub mode: String,
    /// Everything the recovered database does not contain, in log order.
    pub lost: Vec<LostRange>,
    /// Record groups after the first damage that were kept (`SkipDamaged`).
    pub groups_kept_after_damage: u64,
    /// Directory holding copies of the affected log files as they were before the salvage
    /// (`DIR/lost/`), and this report.
    pub archive_dir: Option<PathBuf>,
    /// The full report (every lost key), written next to the copies before anything changed.
    pub report_file: Option<PathBuf>,
}

/// One stretch of the log whose writes are not in the recovered database.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LostRange {
    /// The log file the stretch is in.
    pub file: PathBuf,
    /// Byte offset in that file where the stretch starts.
    pub offset: u64,
    /// Bytes of the log left out here.
    pub bytes: u64,
    /// Why it was left out (the damage found, or that it follows the damage).
    pub reason: String,
    /// First sequence number lost, when the log tells (`None`: not known).
    pub first_seq: Option<u64>,
    /// Last sequence number lost, when the log tells (`None`: not known).
    pub last_seq: Option<u64>,
    /// Valid record groups dropped here (their keys are in `keys`).
    pub groups: u64,
    /// Keys written by the dropped valid groups (exact).
    pub keys: Vec<Vec<u8>>,
    /// Keys read out of damaged bytes (best effort: they may themselves be damaged).
    pub damaged_keys: Vec<Vec<u8>>,
}

impl RecoveryReport {
    /// Total sequence numbers known lost (ranges with both ends known).
    pub fn seqs_lost(&self) -> u64 {
        self.lost.iter().filter_map(|r| Some((r.last_seq? + 1).saturating_sub(r.first_seq?))).sum()
    }

    /// The report in full (every key), as written to the report file.
    pub fn full_text(&self) -> String {
        self.render(usize::MAX)
    }

    fn render(&self, max_keys: usize) -> String {
        use fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "wisckey log salvage ({} mode): {} stretches of the log are not in the database",
            self.mode,
            self.lost.len()
        );
        for r in &self.lost {
            let seqs = match (r.first_seq, r.last_seq) {
                (Some(a), Some(b)) if b >= a => format!("sequence numbers {a}..={b}"),
                (Some(_), Some(_)) => "no sequence numbers".to_string(),
                (Some(a), None) => format!("sequence numbers from {a} on"),
                (None, Some(b)) => format!("sequence numbers up to {b}"),
                (None, None) => "sequence numbers unknown".to_string(),
            };
            let _ = writeln!(
                s,
                "- {:?} at offset {}: {} bytes, {seqs}, {} valid groups: {}",
                r.file, r.offset, r.bytes, r.groups, r.reason
            );
            for (what, keys) in [("key", &r.keys), ("key read from damaged bytes (may be wrong)", &r.damaged_keys)] {
                for k in keys.iter().take(max_keys) {
                    let _ = writeln!(s, "    {what}: {}", escape(k));
                }
                if keys.len() > max_keys {
                    let _ = writeln!(s, "    ... and {} more ({what}s)", keys.len() - max_keys);
                }
            }
        }
        if self.groups_kept_after_damage > 0 {
            let _ = writeln!(s, "record groups kept after the damage: {}", self.groups_kept_after_damage);
        }
        if let Some(d) = &self.archive_dir {
            let _ = writeln!(s, "copies of the affected log files: {d:?}");
        }
        s
    }
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(20))
    }
}

/// Printable ASCII as is, everything else as `\xNN` (like the CLI's key escapes).
fn escape(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'\\' => "\\\\".to_string(),
            0x20..=0x7e => (b as char).to_string(),
            _ => format!("\\x{b:02x}"),
        })
        .collect()
}

/// The error of an open that will not drop data a sync made durable: names the damaged file,
/// the offset, the proof that it had been durable, and the sequence numbers at stake.
pub(super) fn damage_error(dir: &Path, survey: &LogSurvey, b: &LogBreak, mode: RecoveryMode) -> Error {
    let after: Vec<&Segment> = survey.segments.iter().filter(|s| seg_pos(s) > b.at).collect();
    let groups: u64 = after.iter().map(|s| s.groups).sum();
    let lost = match b.lost_seqs() {
        (Some(a), Some(z)) if z < a => format!("no record group was lost here (sequence numbers run on from {a})"),
        (Some(a), Some(z)) => format!("sequence numbers {a}..={z} are lost here"),
        (Some(a), None) => format!("sequence numbers from {a} on are lost here"),
        (None, Some(z)) => format!("sequence numbers up to {z} are lost here"),
        (None, None) => "the sequence numbers lost here are unknown".to_string(),
    };
    let later = match (after.iter().find_map(|s| s.first_seq), survey.max_seq) {
        (Some(a), Some(z)) => {
            format!("{groups} valid record groups after it (sequence numbers {a}..={z}) are at stake too")
        }
        _ => "no valid record group follows it".to_string(),
    };
    let why = match b.durable_by {
        Some(proof) => format!("{proof}, so this is damage to synced data, not a torn write"),
        None if mode == RecoveryMode::AbsoluteConsistency => {
            "no sync covered these bytes (a torn tail), and AbsoluteConsistency refuses to drop it".to_string()
        }
        None => "no sync covered these bytes".to_string(),
    };
    let resumed = match b.resumed_at {
        Some(p) => format!("valid records resume at file {} offset {}", p.file, p.offset),
        None => "no valid record follows in this file".to_string(),
    };
    Error::corruption(
        vlog_file_name(dir, b.at.file),
        b.at.offset,
        format!(
            "{}: {} bytes unreadable, {resumed}; {why}. {lost}; {later}. No file was changed. Open with \
             RecoveryMode::PointInTime or RecoveryMode::SkipDamaged (or run `wisckey repair --db DIR`) to keep \
             what can be kept, with a report of what is lost",
            b.reason, b.unreadable_bytes
        ),
    )
}

fn seg_pos(s: &Segment) -> LogPos {
    LogPos { file: s.file, offset: s.start }
}

/// Build the report of a salvage that replays `kept` segments out of `survey`.
pub(super) fn build_report(
    vfs: &dyn Vfs,
    dir: &Path,
    survey: &LogSurvey,
    kept: &[Segment],
    mode: RecoveryMode,
) -> Result<RecoveryReport> {
    let mut report = RecoveryReport { mode: format!("{mode:?}"), ..Default::default() };
    let first_break = survey.breaks.first().map(|b| b.at);
    let torn_at = survey.breaks.iter().find(|b| b.durable_by.is_none()).map(|b| b.at);
    for b in &survey.breaks {
        let (first_seq, last_seq) = b.lost_seqs();
        report.lost.push(LostRange {
            file: vlog_file_name(dir, b.at.file),
            offset: b.at.offset,
            bytes: b.unreadable_bytes,
            reason: if b.durable_by.is_some() {
                b.reason.clone()
            } else {
                format!("{} (torn tail: never synced)", b.reason)
            },
            first_seq,
            last_seq,
            damaged_keys: keys_in_damaged(vfs, dir, b),
            ..Default::default()
        });
    }
    for seg in survey.segments.iter().filter(|s| !kept.contains(s)) {
        report.lost.push(LostRange {
            file: vlog_file_name(dir, seg.file),
            offset: seg.start,
            bytes: seg.end - seg.start,
            reason: if torn_at.is_some_and(|t| seg_pos(seg) > t) {
                "record groups after a torn tail (never synced)".to_string()
            } else {
                "valid record groups after the damage, left out to keep the database consistent".to_string()
            },
            first_seq: seg.first_seq,
            last_seq: seg.last_seq,
            groups: seg.groups,
            keys: keys_in_segment(vfs, dir, seg)?,
            ..Default::default()
        });
    }
    report.lost.sort_by_key(|r| (r.file.clone(), r.offset));
    report.groups_kept_after_damage =
        kept.iter().filter(|s| first_break.is_some_and(|b| seg_pos(s) > b)).map(|s| s.groups).sum();
    Ok(report)
}

/// Keys of every put and delete in a valid segment.
fn keys_in_segment(vfs: &dyn Vfs, dir: &Path, seg: &Segment) -> Result<Vec<Vec<u8>>> {
    let mut r = LogReader::new(vfs.open_read(&vlog_file_name(dir, seg.file))?, seg.file, seg.start)?;
    let mut keys = Vec::new();
    while r.offset() < seg.end {
        let Ok(rec) = r.next_record()? else { break };
        keys.extend(op_keys(&rec.ops));
    }
    Ok(keys)
}

/// Keys that can still be parsed out of the group at a damaged spot (its checksum failed, so
/// they may be wrong; empty when even the header is garbage).
fn keys_in_damaged(vfs: &dyn Vfs, dir: &Path, b: &LogBreak) -> Vec<Vec<u8>> {
    let read = || -> Result<Vec<u8>> {
        let f = vfs.open_read(&vlog_file_name(dir, b.at.file))?;
        let left = f.len()?.saturating_sub(b.at.offset);
        let mut h = [0u8; HEADER_LEN];
        if left < HEADER_LEN as u64 {
            return Ok(Vec::new());
        }
        f.read_exact_at(b.at.offset, &mut h)?;
        let len = u64::from(decode_fixed32(&h[4..]));
        if decode_fixed64(&h[8..]) == 0 || len > left - HEADER_LEN as u64 || len > 64 << 20 {
            return Ok(Vec::new());
        }
        let mut ops = vec![0u8; len as usize];
        f.read_exact_at(b.at.offset + HEADER_LEN as u64, &mut ops)?;
        Ok(ops)
    };
    read().map(|ops| op_keys(&ops)).unwrap_or_default()
}

fn op_keys(ops: &[u8]) -> Vec<Vec<u8>> {
    BatchIter::over(ops).map_while(|op| op.ok()).map(|(_, op)| op.key().to_vec()).collect()
}

/// Keep the evidence before the salvage changes anything: copy every log file from `from` on
/// into `DIR/lost/` (as `<id>-NNNNNN.vlog`) and write the full report next to them.
pub(super) fn archive(
    vfs: &dyn Vfs,
    dir: &Path,
    survey: &LogSurvey,
    from: u64,
    id: u64,
    report: &mut RecoveryReport,
) -> Result<()> {
    let lost = dir.join(LOST_DIR);
    vfs.create_dir_all(&lost)?;
    for &(n, _) in survey.files.iter().filter(|(n, _)| *n >= from) {
        let src = vfs.open_read(&vlog_file_name(dir, n))?;
        let name = vlog_file_name(Path::new(""), n);
        let mut dst = vfs.create(&lost.join(format!("{id:06}-{}", name.display())))?;
        let (len, mut at) = (src.len()?, 0u64);
        let mut buf = vec![0u8; 1 << 20];
        while at < len {
            let n = ((len - at) as usize).min(buf.len());
            src.read_exact_at(at, &mut buf[..n])?;
            dst.append(&buf[..n])?;
            at += n as u64;
        }
        dst.sync()?;
    }
    let path = lost.join(format!("{id:06}-REPORT.txt"));
    report.archive_dir = Some(lost.clone());
    report.report_file = Some(path.clone());
    let mut f = vfs.create(&path)?;
    f.append(report.full_text().as_bytes())?;
    f.sync()?;
    vfs.sync_dir(&lost)?;
    vfs.sync_dir(dir)
}
