//! `Version`: an immutable snapshot of which table files make up the tree (levels of sorted
//! runs), the lookups a read or a compaction needs on it, and building the next one from edits.
//!
//! Submodules: `edit` (the change record), `manifest` (its durable log and `CURRENT`),
//! `set` (`VersionSet`: the current version, counters, persistence), `run_iter` (one sorted run's tables as one stream).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::comparator::KeyOrder;
use crate::key::user_key;
use crate::range_del::{Fragments, RangeTombstone};

pub mod edit;
pub mod manifest;
pub mod run_iter;
pub mod set;

pub use edit::{FileMeta, VersionEdit};
pub use set::{LoadedManifest, VersionSet, DEFAULT_KEYSPACE};

/// The name of the default (bytewise) key order, as the manifest records it.
#[cfg(test)]
pub const COMPARATOR_NAME: &str = crate::comparator::BYTEWISE_NAME;

/// The on-disk format version this code writes. 2: log files carry marks (start and sync
/// marks, docs/format/log.md), which builds of version 1 would read as damage. 3: the manifest
/// records the shaping options (tag 16), which builds of version 2 do not know.
pub const FORMAT_VERSION: u32 = 3;

/// The oldest format version this code reads (1: logs without marks).
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// A sorted run: files ordered by smallest key, pairwise disjoint (as internal keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedRun {
    /// Larger ids hold newer data than smaller ids within the same level.
    pub id: u64,
    /// Shared, so an iterator over the run holds it without copying the list (a seek opens
    /// one iterator per run: cloning a deep level's hundreds of `Arc`s cost more than its seek).
    pub files: Arc<[Arc<FileMeta>]>,
}

impl SortedRun {
    /// Files whose user-key range intersects `[begin, end]` (`None` = unbounded; keys in
    /// `order`), in key order.
    pub fn overlapping(&self, order: &KeyOrder, begin: Option<&[u8]>, end: Option<&[u8]>) -> &[Arc<FileMeta>] {
        let first =
            begin.map_or(0, |b| self.files.partition_point(|f| order.compare_user(user_key(&f.largest), b).is_lt()));
        let last = end.map_or(self.files.len(), |e| {
            self.files.partition_point(|f| order.compare_user(user_key(&f.smallest), e).is_le())
        });
        &self.files[first..last.max(first)]
    }
}

/// One level of the tree: its sorted runs, newest (highest id) first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Level {
    pub runs: Vec<SortedRun>,
}

impl Level {
    /// Every file of every run of the level.
    pub fn files(&self) -> impl Iterator<Item = &Arc<FileMeta>> {
        self.runs.iter().flat_map(|r| r.files.iter())
    }
}

/// The set of live table files at one moment. Readers hold an `Arc<Version>` so the files
/// it names stay on disk until they are done (see `VersionSet::live_files`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub levels: Vec<Level>,
    /// The order of the keys in the tables (and of the file ranges).
    pub order: KeyOrder,
    /// The range tombstones of its tables, fragmented once for every reader of the Version.
    pub range_dels: RangeDelCache,
}

/// A Version's range tombstones: whether any table holds some (decided when the Version is
/// made, so a tree without any pays nothing), and their fragments, made by the first read
/// that needs them (Versions are immutable, so they stay right for its life).
#[derive(Default)]
pub struct RangeDelCache {
    tables: usize,
    made: std::sync::OnceLock<Arc<Fragments>>,
}

impl RangeDelCache {
    fn of(levels: &[Level]) -> RangeDelCache {
        let tables = levels.iter().flat_map(|l| l.files()).filter(|f| f.range_tombstones > 0).count();
        RangeDelCache { tables, made: std::sync::OnceLock::new() }
    }
}

/// A copy starts without the fragments (they are remade on demand).
impl Clone for RangeDelCache {
    fn clone(&self) -> Self {
        RangeDelCache { tables: self.tables, made: std::sync::OnceLock::new() }
    }
}

/// A cache: two Versions are equal by their files.
impl PartialEq for RangeDelCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RangeDelCache {}

impl std::fmt::Debug for RangeDelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RangeDelCache({} tables)", self.tables)
    }
}

impl Version {
    /// Table `number` as this Version records it in `level`, if it is there.
    pub fn file(&self, level: usize, number: u64) -> Option<&Arc<FileMeta>> {
        self.levels.get(level)?.files().find(|f| f.number == number)
    }

    /// A version with `num_levels` empty levels, of keys in bytewise order.
    #[cfg(test)]
    pub fn empty(num_levels: usize) -> Self {
        Version::empty_in(num_levels, KeyOrder::default())
    }

    /// A version with `num_levels` empty levels, of keys in `order`.
    pub fn empty_in(num_levels: usize, order: KeyOrder) -> Self {
        Version { levels: vec![Level::default(); num_levels], order, range_dels: RangeDelCache::default() }
    }

    /// Every table's range tombstones, fragmented (`None`: no table holds any). Made on the
    /// first call, `load` reading each table's. Every sequence number is kept: a reader may
    /// have taken its read sequence number before the first call, so no floor is safe here
    /// (compactions drop the numbers no reader sees).
    pub fn range_tombstones<E>(
        &self,
        mut load: impl FnMut(&FileMeta) -> Result<Vec<RangeTombstone>, E>,
    ) -> Result<Option<Arc<Fragments>>, E> {
        if self.range_dels.tables == 0 {
            return Ok(None);
        }
        if let Some(f) = self.range_dels.made.get() {
            return Ok(Some(f.clone()));
        }
        let mut all = Vec::new();
        for (_, f) in self.all_files().filter(|(_, f)| f.range_tombstones > 0) {
            all.extend(load(f)?);
        }
        let made = Arc::new(Fragments::build(&all, None));
        // Another reader may have made them meanwhile: the same fragments either way.
        Ok(Some(self.range_dels.made.get_or_init(|| made).clone()))
    }

    pub fn num_levels(&self) -> usize {
        self.levels.len()
    }

    /// Number of files in `level` (0 for a level beyond the last).
    pub fn level_files(&self, level: usize) -> usize {
        self.levels.get(level).map_or(0, |l| l.files().count())
    }

    /// Total bytes of the files in `level`.
    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels.get(level).map_or(0, |l| l.files().map(|f| f.size).sum())
    }

    /// Number of sorted runs in `level`.
    pub fn num_runs(&self, level: usize) -> usize {
        self.levels.get(level).map_or(0, |l| l.runs.len())
    }

    /// Whether `level`'s files may overlap each other: level 0, or a level of several runs.
    pub fn files_may_overlap(&self, level: usize) -> bool {
        level == 0 || self.num_runs(level) > 1
    }

    /// The deepest level below L0 holding data (0 if none does).
    pub fn deepest_level(&self) -> usize {
        (1..self.num_levels()).rev().find(|&l| self.num_runs(l) > 0).unwrap_or(0)
    }

    /// Files that may hold `user_key`, in the order a point lookup must consult them (newest
    /// data first): level 0, then deeper levels; within a level, runs newest first. Normally
    /// one file per run; a run contributes its next file too when this key straddles the
    /// boundary between them (older versions of the key continue in the next file).
    /// An iterator, not a list: a point lookup allocates nothing here and usually stops at the
    /// first file.
    pub fn files_for_key<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = (usize, &'a Arc<FileMeta>)> + 'a {
        let order = &self.order;
        self.levels.iter().enumerate().flat_map(move |(level, l)| {
            l.runs.iter().flat_map(move |run| {
                let first = run.files.partition_point(|f| order.compare_user(user_key(&f.largest), key).is_lt());
                // Files of one run holding `key`: the first whose range reaches it, and the next
                // ones while the key straddles their boundaries.
                let mut straddles = true;
                run.files[first..]
                    .iter()
                    .take_while(move |f| {
                        let take = straddles && order.compare_user(user_key(&f.smallest), key).is_le();
                        straddles = user_key(&f.largest) == key;
                        take
                    })
                    .map(move |f| (level, f))
            })
        })
    }

    /// Files of `level` whose user-key range overlaps `[begin, end]` (`None` = unbounded),
    /// runs newest first, each run in key order.
    ///
    /// When the level can hold overlapping files (level 0, or several runs) the range grows
    /// to cover every file picked, until no other file overlaps it (LevelDB's level-0 rule):
    /// compacting a file away while leaving an overlapping older one behind would put newer
    /// data below older data.
    pub fn overlapping_files(&self, level: usize, begin: Option<&[u8]>, end: Option<&[u8]>) -> Vec<Arc<FileMeta>> {
        let Some(l) = self.levels.get(level) else {
            return Vec::new();
        };
        let collect = |b: Option<&[u8]>, e: Option<&[u8]>| -> Vec<Arc<FileMeta>> {
            l.runs.iter().flat_map(|r| r.overlapping(&self.order, b, e).iter().cloned()).collect()
        };
        if !self.files_may_overlap(level) {
            return collect(begin, end);
        }
        let (mut begin, mut end) = (begin.map(<[u8]>::to_vec), end.map(<[u8]>::to_vec));
        loop {
            let picked = collect(begin.as_deref(), end.as_deref());
            let new_begin = begin.as_ref().map(|b| self.lowest(b, picked.iter().map(|f| user_key(&f.smallest))));
            let new_end = end.as_ref().map(|e| self.highest(e, picked.iter().map(|f| user_key(&f.largest))));
            if new_begin == begin && new_end == end {
                return picked;
            }
            (begin, end) = (new_begin, new_end);
        }
    }

    /// What lookups rely on (`files_for_key`, `SortedRun::overlapping`, the run iterator):
    /// in every level the runs are newest (highest id) first, and the files of each run are
    /// in key order and pairwise disjoint.
    fn runs_are_sorted_and_disjoint(&self) -> bool {
        self.levels.iter().all(|l| {
            l.runs.windows(2).all(|r| r[0].id > r[1].id)
                && l.runs.iter().all(|r| {
                    r.files.iter().all(|f| self.order.compare_internal(&f.smallest, &f.largest).is_le())
                        && r.files
                            .windows(2)
                            .all(|f| self.order.compare_internal(&f[0].largest, &f[1].smallest).is_lt())
                })
        })
    }

    /// Every file with its level.
    pub fn all_files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        self.levels.iter().enumerate().flat_map(|(level, l)| l.files().map(move |f| (level, f)))
    }

    /// The smallest of `start` and `keys` (user keys).
    fn lowest<'a>(&self, start: &'a [u8], keys: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
        keys.fold(start, |m, k| self.order.min_user(m, k)).to_vec()
    }

    /// The largest of `start` and `keys` (user keys).
    fn highest<'a>(&self, start: &'a [u8], keys: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
        keys.fold(start, |m, k| self.order.max_user(m, k)).to_vec()
    }
}

/// Why an edit cannot be applied to a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// A file names a level the version does not have.
    LevelOutOfRange { level: u32, num_levels: usize },
    /// The edit contradicts the version (missing file, overlap inside a run, ...).
    Inconsistent(String),
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::LevelOutOfRange { level, num_levels } => {
                write!(f, "edit names level {level} but there are only {num_levels} levels")
            }
            ApplyError::Inconsistent(s) => f.write_str(s),
        }
    }
}

/// Accumulates edits on top of a base version; `finish` sorts and checks the result once,
/// so replaying a long manifest costs one sort, not one per edit.
pub struct Builder {
    /// Per level: file number → file.
    levels: Vec<HashMap<u64, Arc<FileMeta>>>,
    order: KeyOrder,
}

impl Builder {
    pub fn new(base: &Version) -> Self {
        let levels = base.levels.iter().map(|l| l.files().map(|f| (f.number, f.clone())).collect()).collect();
        Builder { levels, order: base.order.clone() }
    }

    /// Apply deletions, then additions (so delete+add of one file moves it).
    pub fn apply(&mut self, edit: &VersionEdit) -> Result<(), ApplyError> {
        for &(level, number) in &edit.deleted_files {
            if self.level_mut(level)?.remove(&number).is_none() {
                return Err(ApplyError::Inconsistent(format!(
                    "edit deletes file {number} from level {level}, which does not hold it"
                )));
            }
        }
        for (level, f) in &edit.added_files {
            if self.order.compare_internal(&f.smallest, &f.largest).is_gt() {
                return Err(ApplyError::Inconsistent(format!(
                    "file {} has its smallest key after its largest",
                    f.number
                )));
            }
            if self.level_mut(*level)?.insert(f.number, Arc::new(f.clone())).is_some() {
                return Err(ApplyError::Inconsistent(format!(
                    "edit adds file {} to level {level}, which already holds it",
                    f.number
                )));
            }
        }
        Ok(())
    }

    fn level_mut(&mut self, level: u32) -> Result<&mut HashMap<u64, Arc<FileMeta>>, ApplyError> {
        let num_levels = self.levels.len();
        self.levels.get_mut(level as usize).ok_or(ApplyError::LevelOutOfRange { level, num_levels })
    }

    /// The resulting version: runs newest first, files of a run sorted and disjoint, and no
    /// file number in two places.
    pub fn finish(self) -> Result<Version, ApplyError> {
        let mut seen = HashSet::new();
        let mut levels = Vec::with_capacity(self.levels.len());
        for (level, files) in self.levels.into_iter().enumerate() {
            let mut runs: BTreeMap<u64, Vec<Arc<FileMeta>>> = BTreeMap::new();
            for (number, f) in files {
                if !seen.insert(number) {
                    return Err(ApplyError::Inconsistent(format!("file {number} is in two levels")));
                }
                runs.entry(f.run).or_default().push(f);
            }
            let runs = (runs.into_iter().rev())
                .map(|(id, files)| sorted_run(&self.order, level, id, files))
                .collect::<Result<_, _>>()?;
            levels.push(Level { runs });
        }
        let range_dels = RangeDelCache::of(&levels);
        let version = Version { levels, order: self.order, range_dels };
        debug_assert!(version.runs_are_sorted_and_disjoint(), "a version with overlapping runs: {version:?}");
        Ok(version)
    }
}

fn sorted_run(order: &KeyOrder, level: usize, id: u64, mut files: Vec<Arc<FileMeta>>) -> Result<SortedRun, ApplyError> {
    files.sort_by(|a, b| order.compare_internal(&a.smallest, &b.smallest));
    for pair in files.windows(2) {
        if !order.compare_internal(&pair[0].largest, &pair[1].smallest).is_lt() {
            return Err(ApplyError::Inconsistent(format!(
                "files {} and {} of run {id} in level {level} overlap",
                pair[0].number, pair[1].number
            )));
        }
    }
    Ok(SortedRun { id, files: files.into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, ValueKind};

    fn file(number: u64, run: u64, lo: &[u8], hi: &[u8]) -> FileMeta {
        FileMeta {
            number,
            size: 100 * number,
            smallest: make_internal_key(lo, 100, ValueKind::Value),
            largest: make_internal_key(hi, 1, ValueKind::Value),
            run,
            ..Default::default()
        }
    }

    fn build(num_levels: usize, files: &[(u32, FileMeta)]) -> Result<Version, ApplyError> {
        let mut b = Builder::new(&Version::empty(num_levels));
        b.apply(&VersionEdit { added_files: files.to_vec(), ..Default::default() })?;
        b.finish()
    }

    fn numbers<'a>(files: impl Iterator<Item = (usize, &'a Arc<FileMeta>)>) -> Vec<(usize, u64)> {
        files.map(|(l, f)| (l, f.number)).collect()
    }

    #[test]
    fn point_lookup_visits_level_0_runs_newest_first_then_deeper_runs() {
        let v = build(
            3,
            &[
                (0, file(10, 10, b"a", b"m")),
                (0, file(12, 12, b"f", b"z")),
                (0, file(11, 11, b"p", b"q")),
                (1, file(3, 3, b"a", b"g")),
                (1, file(4, 3, b"h", b"p")),
                (1, file(7, 7, b"g", b"k")),
                (2, file(1, 1, b"a", b"z")),
            ],
        )
        .unwrap();
        assert_eq!(v.num_runs(0), 3);
        assert_eq!(v.num_runs(1), 2);
        assert_eq!(numbers(v.files_for_key(b"h")), vec![(0, 12), (0, 10), (1, 7), (1, 4), (2, 1)]);
        assert_eq!(numbers(v.files_for_key(b"p")), vec![(0, 12), (0, 11), (1, 4), (2, 1)]);
        assert!(v.files_for_key(b"zz").next().is_none());
    }

    #[test]
    fn key_straddling_two_files_of_a_run_visits_both_in_order() {
        let mut f1 = file(5, 1, b"a", b"k");
        f1.largest = make_internal_key(b"k", 50, ValueKind::Value);
        let mut f2 = file(6, 1, b"k", b"z");
        f2.smallest = make_internal_key(b"k", 40, ValueKind::Value);
        let v = build(2, &[(1, f1), (1, f2)]).unwrap();
        assert_eq!(numbers(v.files_for_key(b"k")), vec![(1, 5), (1, 6)]);
        assert_eq!(numbers(v.files_for_key(b"j")), vec![(1, 5)]);
    }

    #[test]
    fn level_0_overlap_expands_to_a_closed_set() {
        let v = build(
            2,
            &[
                (0, file(1, 1, b"a", b"c")),
                (0, file(2, 2, b"b", b"e")),
                (0, file(3, 3, b"e", b"g")),
                (0, file(4, 4, b"x", b"z")),
                (1, file(5, 5, b"a", b"b")),
                (1, file(6, 5, b"c", b"d")),
                (1, file(8, 5, b"e", b"f")),
            ],
        )
        .unwrap();
        let nums = |fs: Vec<Arc<FileMeta>>| fs.iter().map(|f| f.number).collect::<Vec<_>>();
        assert_eq!(nums(v.overlapping_files(0, Some(b"a"), Some(b"a"))), vec![3, 2, 1]);
        assert_eq!(nums(v.overlapping_files(0, Some(b"y"), None)), vec![4]);
        assert_eq!(nums(v.overlapping_files(1, Some(b"c"), Some(b"c"))), vec![6]);
        assert_eq!(nums(v.overlapping_files(1, None, Some(b"c"))), vec![5, 6]);
        assert!(v.overlapping_files(7, None, None).is_empty());
    }

    #[test]
    fn overlapping_files_in_one_run_is_rejected() {
        let err = build(2, &[(1, file(1, 1, b"a", b"f")), (1, file(2, 1, b"e", b"g"))]).unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
        // The same ranges in different runs are fine.
        build(2, &[(1, file(1, 1, b"a", b"f")), (1, file(2, 2, b"e", b"g"))]).unwrap();
    }

    #[test]
    fn deleting_a_missing_file_or_adding_beyond_the_last_level_fails() {
        let mut b = Builder::new(&Version::empty(2));
        let del = VersionEdit { deleted_files: vec![(0, 9)], ..Default::default() };
        assert!(matches!(b.apply(&del), Err(ApplyError::Inconsistent(_))));
        let add = VersionEdit { added_files: vec![(2, file(1, 1, b"a", b"b"))], ..Default::default() };
        assert_eq!(b.apply(&add), Err(ApplyError::LevelOutOfRange { level: 2, num_levels: 2 }));
    }

    #[test]
    fn delete_and_add_in_one_edit_moves_a_file() {
        let v = build(3, &[(1, file(4, 1, b"a", b"b"))]).unwrap();
        let mut b = Builder::new(&v);
        b.apply(&VersionEdit {
            deleted_files: vec![(1, 4)],
            added_files: vec![(2, file(4, 1, b"a", b"b"))],
            ..Default::default()
        })
        .unwrap();
        let v = b.finish().unwrap();
        assert_eq!((v.level_files(1), v.level_files(2), v.level_bytes(2)), (0, 1, 400));
        assert_eq!(v.all_files().map(|(l, f)| (l, f.number)).collect::<Vec<_>>(), vec![(2, 4)]);
    }
}
