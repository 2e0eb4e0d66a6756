//! A read-only survey of the log from the manifest's head to the end, made before recovery
//! changes anything: the runs of valid records, every place where the log breaks (damaged
//! bytes, a sequence-number gap, a missing file), where valid records resume after each break
//! (LevelDB-style resync, done byte by byte since record groups are not block aligned), and
//! whether a mark written after a completed sync shows the bytes at a break had been durable —
//! then the break is damage to synced data, not a torn tail.

use std::path::Path;

use super::{LogPos, LogReader, LogRecord, Mark, ReadOutcome, HEADER_LEN};
use crate::error::Result;
use crate::filename::vlog_file_name;
use crate::fs::Vfs;

/// A run of valid records inside one file: `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub file: u64,
    pub start: u64,
    pub end: u64,
    /// Record groups in the run (marks not counted).
    pub groups: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Sequence number the next group must have (from the run's last group or start mark),
    /// when the file is of the format that keeps them dense.
    pub next_seq: Option<u64>,
}

/// A place where the log stops being one valid, gap-free run of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBreak {
    /// The first byte that is missing or unreadable: the start of damaged bytes, or the end of
    /// the last valid record before a sequence gap or a missing file.
    pub at: LogPos,
    pub reason: String,
    /// Bytes that cannot be read, from `at` to where records resume (or the end of its file).
    pub unreadable_bytes: u64,
    /// The sequence number the next group should have had (`None`: not known here).
    pub expected_seq: Option<u64>,
    /// Where valid records resume after the break, if anywhere.
    pub resumed_at: Option<LogPos>,
    /// The first sequence number after the break (of a group or a start mark).
    pub resumed_seq: Option<u64>,
    /// What shows that bytes past `at` had been made durable: then the break is damage, not a
    /// torn write.
    pub durable_by: Option<DurableProof>,
}

/// Evidence that part of the log had been made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableProof {
    /// A mark at `at` records that the log was durable up to `durable`.
    Mark { at: LogPos, durable: LogPos },
    /// The manifest records that the log was durable up to `durable` at the last clean close.
    CleanClose { durable: LogPos },
    /// The manifest's log head: the log is synced up to it before it is recorded.
    Head { durable: LogPos },
}

impl std::fmt::Display for DurableProof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DurableProof::Mark { at, durable } => write!(
                f,
                "a sync mark at file {} offset {} shows the log had been made durable up to file {} offset {}",
                at.file, at.offset, durable.file, durable.offset
            ),
            DurableProof::CleanClose { durable } => write!(
                f,
                "the manifest records that the log was durable up to file {} offset {} when the database was last closed",
                durable.file, durable.offset
            ),
            DurableProof::Head { durable } => write!(
                f,
                "the manifest's log head is at file {} offset {}, and the log is synced up to the head before it is recorded",
                durable.file, durable.offset
            ),
        }
    }
}

impl LogBreak {
    /// The sequence numbers lost here, as far as the log tells: from the expected one to just
    /// before the first one after the break (`None` ends: unknown).
    pub fn lost_seqs(&self) -> (Option<u64>, Option<u64>) {
        (self.expected_seq, self.resumed_seq.map(|s| s.saturating_sub(1)))
    }
}

/// What `survey` found.
#[derive(Debug, Clone, Default)]
pub struct LogSurvey {
    /// Log files surveyed, ascending, with their sizes.
    pub files: Vec<(u64, u64)>,
    /// Valid runs, in log order.
    pub segments: Vec<Segment>,
    /// Breaks, in log order.
    pub breaks: Vec<LogBreak>,
    /// Highest sequence number of any valid group (also those after a break).
    pub max_seq: Option<u64>,
}

impl LogSurvey {
    /// Whether the first break (if any) is a torn tail: no mark after it shows that the bytes
    /// there were ever durable, so everything from it on is the unsynced end of the log (a
    /// crash may tear that at any byte). A later break cannot be durable if the first is not:
    /// a mark covering it would cover the first too.
    pub fn torn_tail(&self) -> Option<&LogBreak> {
        self.breaks.first().filter(|b| b.durable_by.is_none())
    }

    /// The segments wholly before `at`.
    pub fn segments_before(&self, at: LogPos) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(move |s| LogPos { file: s.file, offset: s.end } <= at)
    }

    /// Size of log file `n` when surveyed.
    pub fn file_size(&self, n: u64) -> Option<u64> {
        self.files.iter().find(|(f, _)| *f == n).map(|(_, s)| *s)
    }
}

/// Survey log files `files` (ascending; the first may be the head's) from `head` to the end.
/// `closed_at` is where the manifest says the log was durable at the last clean close
/// (`(0, 0)`: not recorded).
pub fn survey(vfs: &dyn Vfs, dir: &Path, files: &[u64], head: LogPos, closed_at: LogPos) -> Result<LogSurvey> {
    // A log never cut by a flush starts with the database's first write, number 1.
    let expected = (head == LogPos::default()).then_some(1);
    let mut s = Surveyor { vfs, dir, head, out: LogSurvey::default(), expected, open: None, last_end: head };
    for &n in files {
        let start = if n == head.file { head.offset } else { 0 };
        s.file(n, start)?;
    }
    if closed_at > head {
        s.vouch(DurableProof::CleanClose { durable: closed_at }, closed_at);
    }
    Ok(s.out)
}

struct Surveyor<'a> {
    vfs: &'a dyn Vfs,
    dir: &'a Path,
    head: LogPos,
    out: LogSurvey,
    /// Sequence number the next group must have (dense-sequence files only).
    expected: Option<u64>,
    /// A break whose resume point (or first sequence number after it) is not known yet.
    open: Option<usize>,
    /// End of the last valid record seen.
    last_end: LogPos,
}

impl Surveyor<'_> {
    fn file(&mut self, n: u64, start: u64) -> Result<()> {
        let path = vlog_file_name(self.dir, n);
        let mut r = LogReader::new(self.vfs.open_read(&path)?, n, start)?;
        self.out.files.push((n, r.size()));
        if r.size() < start {
            // Bytes before the head were synced before the head was recorded: lost ones are
            // damage (values tables point to, and groups after the head in this file).
            let head = DurableProof::Head { durable: self.head };
            let at = LogPos { file: n, offset: r.size() };
            self.add_break(LogBreak {
                at,
                reason: format!("log file {n} ends at {}, before the log head at offset {start}", r.size()),
                unreadable_bytes: start - r.size(),
                expected_seq: None,
                resumed_at: None,
                resumed_seq: None,
                durable_by: Some(head),
            });
            self.last_end = at;
            return Ok(());
        }
        // Files written before start marks existed may have sequence gaps (a failed write's
        // numbers were not reused): no continuity checks inside them.
        let legacy = starts_with_group(self.vfs, &path, n)?;
        if legacy {
            self.expected = None;
        }
        let mut seg = Segment::new(n, start);
        loop {
            match r.next_record()? {
                Ok(rec) => {
                    if let Err(reason) = self.record(&rec, legacy, &mut seg) {
                        // A well-formed record that cannot be where it is: damage.
                        if !self.damaged(&mut r, &mut seg, rec.pos.offset, reason, legacy)? {
                            break;
                        }
                    }
                }
                Err(ReadOutcome::Clean) => break,
                Err(ReadOutcome::Damaged { offset, reason }) => {
                    if !self.damaged(&mut r, &mut seg, offset, reason, legacy)? {
                        break;
                    }
                }
            }
        }
        self.push_segment(seg);
        Ok(())
    }

    /// Account for one valid record; `Err` if it contradicts its place in the log.
    fn record(&mut self, rec: &LogRecord, legacy: bool, seg: &mut Segment) -> std::result::Result<(), String> {
        let here = rec.pos;
        match rec.mark {
            Some(Mark::Start { next_seq, prev_file, durable }) => {
                if here.offset != 0 {
                    return Err("a start mark inside a log file".into());
                }
                self.resume(here, Some(next_seq));
                self.check_prev_file(here, prev_file, next_seq);
                self.check_seq(next_seq, seg, here);
                self.expected = Some(next_seq);
                seg.next_seq = Some(next_seq);
                self.claim(here, durable);
            }
            Some(Mark::Sync { durable }) => {
                if durable > here {
                    return Err(format!("a sync mark vouching for bytes after itself ({durable:?})"));
                }
                self.resume(here, None);
                self.claim(here, durable);
            }
            None => {
                let last = rec.first_seq + u64::from(rec.count) - 1;
                self.resume(here, Some(rec.first_seq));
                if !legacy {
                    self.check_seq(rec.first_seq, seg, here);
                }
                self.expected = (!legacy).then_some(last + 1);
                seg.next_seq = self.expected;
                seg.groups += 1;
                seg.first_seq.get_or_insert(rec.first_seq);
                seg.last_seq = Some(last);
                self.out.max_seq = self.out.max_seq.max(Some(last));
            }
        }
        seg.end = rec.end();
        self.last_end = LogPos { file: here.file, offset: rec.end() };
        Ok(())
    }

    /// Damaged bytes at `offset`: record the break and resync after it. Returns whether
    /// reading this file goes on.
    fn damaged(
        &mut self,
        r: &mut LogReader,
        seg: &mut Segment,
        offset: u64,
        reason: String,
        legacy: bool,
    ) -> Result<bool> {
        let n = r.number();
        let next = std::mem::replace(seg, Segment::new(n, offset));
        self.push_segment(next);
        let resync = find_resync(r, offset + 1, self.expected, !legacy)?;
        let at = LogPos { file: n, offset };
        let end = resync.unwrap_or(r.size());
        self.add_break(LogBreak {
            at,
            reason,
            unreadable_bytes: end - offset,
            expected_seq: self.expected,
            resumed_at: None,
            resumed_seq: None,
            durable_by: None,
        });
        // The next valid record tells where the log resumes and which number comes next.
        self.expected = None;
        self.last_end = at;
        match resync {
            Some(p) => {
                r.seek(p);
                *seg = Segment::new(n, p);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// A group or start mark numbered `found` where `expected` was due: a gap (or overlap)
    /// means records between the last valid one and this one are missing.
    fn check_seq(&mut self, found: u64, seg: &mut Segment, here: LogPos) {
        let Some(expected) = self.expected else { return };
        if found == expected {
            return;
        }
        let reason = if found > expected {
            format!("sequence numbers {expected}..={} are missing before {here:?}", found - 1)
        } else {
            format!("sequence number {found} at {here:?} repeats numbers already used (expected {expected})")
        };
        let next = std::mem::replace(seg, Segment::new(here.file, here.offset));
        self.push_segment(next);
        self.add_break(LogBreak {
            at: self.last_end,
            reason,
            unreadable_bytes: 0,
            expected_seq: Some(expected),
            resumed_at: Some(here),
            resumed_seq: Some(found),
            durable_by: None,
        });
        self.open = None;
    }

    /// The start mark of the file at `here` names the file written before it: if that file
    /// should be here (at or after the head) and is not, its records are missing.
    fn check_prev_file(&mut self, here: LogPos, prev: u64, next_seq: u64) {
        if prev == 0 || prev < self.head.file || self.out.file_size(prev).is_some() {
            return;
        }
        let b = LogBreak {
            at: LogPos { file: prev, offset: 0 },
            reason: format!(
                "log file {prev} is missing (the start mark of log file {} names it as the file before)",
                here.file
            ),
            unreadable_bytes: 0,
            expected_seq: self.expected,
            resumed_at: Some(here),
            resumed_seq: Some(next_seq),
            durable_by: None,
        };
        self.insert_break(b);
        // The gap in the numbering is this break's; no second one for it.
        self.expected = None;
    }

    fn insert_break(&mut self, b: LogBreak) {
        let i = self.out.breaks.partition_point(|x| x.at <= b.at);
        self.out.breaks.insert(i, b);
        if let Some(open) = self.open.as_mut().filter(|o| **o >= i) {
            *open += 1;
        }
    }

    /// Close the open break at the first valid record after it.
    fn resume(&mut self, here: LogPos, seq: Option<u64>) {
        let Some(i) = self.open else { return };
        let b = &mut self.out.breaks[i];
        b.resumed_at.get_or_insert(here);
        if let Some(s) = seq {
            b.resumed_seq = Some(s);
            self.open = None;
        }
    }

    /// A mark at `mark` records that the log was durable up to `durable`: every break before
    /// that point is damage to synced bytes.
    fn claim(&mut self, mark: LogPos, durable: LogPos) {
        self.vouch(DurableProof::Mark { at: mark, durable }, durable);
    }

    /// `proof` shows the log was durable up to `durable`: breaks before it are damage. A file
    /// it names (at or after the head, before the proof itself) must also exist and reach
    /// that far.
    fn vouch(&mut self, proof: DurableProof, durable: LogPos) {
        let here = match proof {
            DurableProof::Mark { at, .. } => at,
            DurableProof::CleanClose { .. } | DurableProof::Head { .. } => LogPos { file: u64::MAX, offset: 0 },
        };
        if durable.file < here.file && durable.file >= self.head.file && durable.offset > 0 {
            self.check_vouched_file(proof, durable);
        }
        for b in self.out.breaks.iter_mut().filter(|b| b.durable_by.is_none() && b.at < durable) {
            b.durable_by = Some(proof);
        }
    }

    fn check_vouched_file(&mut self, proof: DurableProof, durable: LogPos) {
        let broken = self.out.breaks.iter().any(|b| b.at.file == durable.file);
        let end = self.out.segments.iter().filter(|s| s.file == durable.file).map(|s| s.end).max();
        let end = end.unwrap_or(if durable.file == self.head.file { self.head.offset } else { 0 });
        let reason = match self.out.file_size(durable.file) {
            _ if broken => return,
            None => format!("log file {} is missing ({proof})", durable.file),
            Some(_) if end >= durable.offset => return,
            Some(_) => format!("log file {} ends at {end}, but {proof}", durable.file),
        };
        // At the end of the log (a clean-close record), the numbers from the next expected one
        // on are what is missing; a start mark's claim comes with its own sequence check.
        let expected_seq = match proof {
            DurableProof::CleanClose { .. } => self.expected,
            DurableProof::Mark { .. } | DurableProof::Head { .. } => None,
        };
        self.insert_break(LogBreak {
            at: LogPos { file: durable.file, offset: end },
            reason,
            unreadable_bytes: durable.offset.saturating_sub(end),
            expected_seq,
            resumed_at: None,
            resumed_seq: None,
            durable_by: Some(proof),
        });
    }

    fn add_break(&mut self, b: LogBreak) {
        self.out.breaks.push(b);
        self.open = Some(self.out.breaks.len() - 1);
    }

    fn push_segment(&mut self, seg: Segment) {
        if seg.end > seg.start {
            self.out.segments.push(seg);
        }
    }
}

impl Segment {
    fn new(file: u64, start: u64) -> Self {
        Segment { file, start, end: start, groups: 0, first_seq: None, last_seq: None, next_seq: None }
    }
}

/// Whether log file `n` begins with a record group rather than a start mark (written before
/// start marks existed).
fn starts_with_group(vfs: &dyn Vfs, path: &Path, n: u64) -> Result<bool> {
    let mut r = LogReader::new(vfs.open_read(path)?, n, 0)?;
    Ok(matches!(r.next_record()?, Ok(rec) if rec.mark.is_none()))
}

/// Bytes scanned per read while looking for a resync point.
const SCAN_WINDOW: usize = 1 << 20;

/// The first offset at or after `from` where a valid record starts that fits its place:
/// followed by the end of the file or by another valid record (a group must be numbered right
/// after it when `dense`), and, for a group, numbered at least `min_seq`. Checking the next
/// record too keeps a group-shaped byte string inside some value from passing as one.
pub fn find_resync(r: &mut LogReader, from: u64, min_seq: Option<u64>, dense: bool) -> Result<Option<u64>> {
    let size = r.size();
    let file = r.file().clone();
    let mut window = vec![0u8; SCAN_WINDOW + HEADER_LEN];
    let mut base = from;
    while base + HEADER_LEN as u64 <= size {
        let len = ((size - base) as usize).min(window.len());
        file.read_exact_at(base, &mut window[..len])?;
        let last = (len - HEADER_LEN).min(SCAN_WINDOW - 1);
        for i in 0..=last {
            let at = base + i as u64;
            if plausible_header(&window[i..i + HEADER_LEN], size - at, min_seq) && fits_here(r, at, dense)? {
                return Ok(Some(at));
            }
        }
        base += (last + 1) as u64;
    }
    Ok(None)
}

/// A cheap filter before the checksum: the length fits the file, and either a mark's shape or
/// a group's (sequence numbers not below `min_seq`, at least 3 bytes per op).
pub(crate) fn plausible_header(h: &[u8], left: u64, min_seq: Option<u64>) -> bool {
    use crate::util::coding::{decode_fixed32, decode_fixed64};
    let len = u64::from(decode_fixed32(&h[4..]));
    let (first, count) = (decode_fixed64(&h[8..]), u64::from(decode_fixed32(&h[16..])));
    if len > left - HEADER_LEN as u64 {
        return false;
    }
    if first == 0 && count == 0 {
        return (3..=40).contains(&len);
    }
    first > 0 && count > 0 && count * 3 <= len && min_seq.is_none_or(|m| first >= m)
}

/// Whether a valid record starts at `at` and is followed by EOF or a record that fits after it.
fn fits_here(r: &mut LogReader, at: u64, dense: bool) -> Result<bool> {
    r.seek(at);
    let first = match r.next_record()? {
        Ok(rec) if !matches!(rec.mark, Some(Mark::Start { .. })) => rec,
        _ => return Ok(false),
    };
    Ok(match r.next_record()? {
        Err(ReadOutcome::Clean) => true,
        Err(ReadOutcome::Damaged { .. }) => false,
        Ok(next) => match (&first.mark, &next.mark) {
            (_, Some(Mark::Start { .. })) => false,
            (None, None) => {
                let after = first.first_seq + u64::from(first.count);
                if dense {
                    next.first_seq == after
                } else {
                    next.first_seq >= after
                }
            }
            _ => true,
        },
    })
}
