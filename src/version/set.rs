//! `VersionSet`: the current `Version`, the counters the manifest persists (file numbers,
//! last sequence, log head, value-log tail, policy, per-value-log-file statistics), and making
//! every change durable in the manifest before it becomes visible. Not internally locked: the DB wraps it in a mutex.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use super::edit::VersionEdit;
use super::manifest::{read_current, read_manifest, set_current, ManifestContents, ManifestWriter};
use super::{ApplyError, Builder, Version, FORMAT_VERSION, OLDEST_FORMAT_VERSION};
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::filename::{current_file_name, manifest_file_name};
use crate::fs::Vfs;
use crate::log::LogPos;

/// A manifest larger than this is replaced by a fresh one holding a snapshot.
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// What the manifest knows about one value-log file holding separated values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlogFileStats {
    /// Bytes of separated values in the file that tables have referenced.
    pub total_bytes: u64,
    /// Of those, bytes no table references any more; never more than `total_bytes`.
    pub garbage_bytes: u64,
}

impl VlogFileStats {
    /// Bytes still referenced.
    pub fn live_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.garbage_bytes)
    }

    /// Fraction of the file's separated values that are garbage (0 for an empty file).
    pub fn garbage_ratio(&self) -> f64 {
        if self.total_bytes == 0 {
            return 0.0;
        }
        self.garbage_bytes as f64 / self.total_bytes as f64
    }
}

/// Apply an edit's value-log statistics: deletions, then additions, then garbage (so garbage
/// reported with the bytes it belongs to is counted against them). Garbage for a file without
/// an entry is ignored (it was deleted: nothing to count), and is capped at the file's total.
fn apply_vlog_edits(files: &mut BTreeMap<u64, VlogFileStats>, edit: &VersionEdit) {
    for n in &edit.vlog_files_deleted {
        files.remove(n);
    }
    for &(n, bytes) in &edit.vlog_added {
        let s = files.entry(n).or_default();
        s.total_bytes = s.total_bytes.saturating_add(bytes);
    }
    for &(n, bytes) in &edit.vlog_garbage {
        if let Some(s) = files.get_mut(&n) {
            s.garbage_bytes = s.garbage_bytes.saturating_add(bytes).min(s.total_bytes);
        }
    }
}

/// The shaping options a manifest recorded: its options record, or (a manifest written before
/// format 3) the merge policy as that one setting.
fn recorded_options(options: &str, policy: &str) -> String {
    match (options.is_empty(), policy.is_empty()) {
        (false, _) => options.to_string(),
        // Leveling recorded itself as `leveled(T=..)` (the level size ratio is its own setting).
        (true, false) if policy.starts_with("leveled") => "merge_policy=leveling\n".to_string(),
        (true, false) => format!("merge_policy={policy}\n"),
        (true, true) => String::new(),
    }
}

/// The current manifest, read but not yet replayed: its recorded options can decide the
/// options the database opens with (`num_levels` among them) before the Version is built.
pub struct LoadedManifest {
    number: u64,
    path: PathBuf,
    contents: ManifestContents,
}

impl LoadedManifest {
    /// Read the manifest `CURRENT` names.
    pub fn read(vfs: &dyn Vfs, dir: &Path) -> Result<LoadedManifest> {
        let number = read_current(vfs, dir)?;
        let path = manifest_file_name(dir, number);
        if !vfs.exists(&path) {
            return Err(Error::corruption(
                current_file_name(dir),
                0,
                format!("CURRENT names {path:?}, which does not exist"),
            ));
        }
        let contents = read_manifest(vfs, &path)?;
        Ok(LoadedManifest { number, path, contents })
    }

    /// The shaping options the last edits recorded (see `VersionSet::recorded_options`).
    pub fn recorded_options(&self) -> String {
        let last = |f: fn(&VersionEdit) -> &Option<String>| {
            self.contents.edits.iter().rev().find_map(|(_, e)| f(e).clone()).unwrap_or_default()
        };
        recorded_options(&last(|e| &e.options), &last(|e| &e.policy))
    }
}

/// The id of the default keyspace, the database's tree before keyspaces existed.
pub const DEFAULT_KEYSPACE: u32 = 0;

/// One keyspace's LSM-tree as the manifest knows it.
pub struct Tree {
    /// The keyspace's name (`default` for keyspace 0).
    pub name: String,
    policy: String,
    /// The shaping options recorded (`VersionEdit::options`); empty before format 3.
    options: String,
    /// Why the policy last changed (`VersionEdit::policy_reason`), if a tuner changed it.
    policy_reason: Option<String>,
    current: Arc<Version>,
    /// Counts installed versions: a cheap identity for `current` (memos keyed on it never
    /// alias, unlike an address a freed version's successor may reuse).
    current_id: u64,
    /// Older versions, kept weakly: whichever is still upgradable pins its files.
    older: Vec<Weak<Version>>,
    compact_pointers: Vec<Option<Vec<u8>>>,
    /// Dropped: invisible to users; its tables stay until the drop is finished.
    pub dropped: bool,
}

impl Tree {
    fn new(name: &str, num_levels: usize, (policy, options): (&str, &str), order: KeyOrder) -> Tree {
        Tree {
            name: name.to_string(),
            policy: policy.to_string(),
            options: options.to_string(),
            policy_reason: None,
            current: Arc::new(Version::empty_in(num_levels, order)),
            current_id: 0,
            older: Vec::new(),
            compact_pointers: vec![None; num_levels],
            dropped: false,
        }
    }

    fn install(&mut self, version: Version) {
        let old = std::mem::replace(&mut self.current, Arc::new(version));
        self.current_id += 1;
        self.older.retain(|w| w.strong_count() > 0);
        self.older.push(Arc::downgrade(&old));
    }

    /// Take the tree fields an edit carries besides its files.
    fn absorb(&mut self, edit: &VersionEdit) {
        if let Some(p) = &edit.policy {
            self.policy = p.clone();
        }
        if let Some(o) = &edit.options {
            self.options = o.clone();
        }
        if let Some(r) = &edit.policy_reason {
            self.policy_reason = Some(r.clone());
        }
        for (level, key) in &edit.compact_pointers {
            if let Some(slot) = self.compact_pointers.get_mut(*level as usize) {
                *slot = Some(key.clone());
            }
        }
    }

    /// The edit that recreates this tree (files, pointers, policy, options) as keyspace `id`.
    fn snapshot(&self, id: u32) -> VersionEdit {
        let compact_pointers = (self.compact_pointers.iter().enumerate())
            .filter_map(|(l, k)| k.as_ref().map(|k| (l as u32, k.clone())))
            .collect();
        VersionEdit {
            keyspace: id,
            compact_pointers,
            added_files: self.current.all_files().map(|(l, f)| (l as u32, (**f).clone())).collect(),
            policy: Some(self.policy.clone()),
            options: (!self.options.is_empty()).then(|| self.options.clone()),
            policy_reason: self.policy_reason.clone(),
            ..Default::default()
        }
    }
}

/// Levels of a tree whose options record says `num_levels=N` (else `default`).
fn levels_in_record(options: &str, default: usize) -> usize {
    options.lines().find_map(|l| l.strip_prefix("num_levels=")?.parse().ok()).unwrap_or(default)
}

/// The live state of the database's file set. See `docs/format/manifest.md`.
pub struct VersionSet {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    /// The key order of every keyspace; its name is what the manifest records.
    order: KeyOrder,
    /// Every keyspace's tree, the default one (0) included.
    trees: BTreeMap<u32, Tree>,
    /// The next keyspace id to hand out.
    next_keyspace_id: u32,
    next_file_number: u64,
    last_sequence: u64,
    log_head: LogPos,
    vlog_tail: LogPos,
    /// Recorded at the last clean close: the log was durable up to here.
    log_durable: LogPos,
    /// Value-log files holding separated values: number → statistics.
    vlog_files: BTreeMap<u64, VlogFileStats>,
    /// `None` after a failed write: the file may end in a partial record, so the next
    /// `log_and_apply` starts a fresh manifest instead of appending after it.
    manifest: Option<ManifestWriter>,
    /// The manifest `CURRENT` names (as far as we know).
    manifest_file_number: u64,
    /// Manifests written but abandoned (a failed roll); deleted after the next switch.
    stale_manifests: Vec<u64>,
    max_manifest_bytes: u64,
}

impl std::fmt::Debug for VersionSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionSet")
            .field("dir", &self.dir)
            .field("manifest_file_number", &self.manifest_file_number)
            .field("next_file_number", &self.next_file_number)
            .field("last_sequence", &self.last_sequence)
            .field("log_head", &self.log_head)
            .field("vlog_tail", &self.vlog_tail)
            .finish_non_exhaustive()
    }
}

impl VersionSet {
    fn blank(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize, policy: &str, order: KeyOrder) -> Result<Self> {
        if num_levels == 0 {
            return Err(Error::invalid("num_levels must be at least 1"));
        }
        let default = Tree::new("default", num_levels, (policy, ""), order.clone());
        Ok(VersionSet {
            vfs,
            dir: dir.to_path_buf(),
            order,
            trees: BTreeMap::from([(DEFAULT_KEYSPACE, default)]),
            next_keyspace_id: DEFAULT_KEYSPACE + 1,
            next_file_number: 1,
            last_sequence: 0,
            log_head: LogPos::default(),
            vlog_tail: LogPos::default(),
            log_durable: LogPos::default(),
            vlog_files: BTreeMap::new(),
            manifest: None,
            manifest_file_number: 0,
            stale_manifests: Vec::new(),
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
        })
    }

    /// Start a new database of bytewise-ordered keys in `dir`: `MANIFEST-000001` holding the
    /// initial edit, then `CURRENT`.
    #[cfg(test)]
    pub fn create(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize, policy: &str) -> Result<VersionSet> {
        Self::create_with_options(vfs, dir, num_levels, policy, ("", KeyOrder::default()))
    }

    /// `create` for keys in `order` (whose name the first manifest records), recording the
    /// shaping options `options` too.
    pub fn create_with_options(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        num_levels: usize,
        policy: &str,
        (options, order): (&str, KeyOrder),
    ) -> Result<VersionSet> {
        if vfs.exists(&current_file_name(dir)) {
            return Err(Error::AlreadyExists { path: dir.to_path_buf() });
        }
        vfs.create_dir_all(dir)?;
        let mut set = Self::blank(vfs, dir, num_levels, policy, order)?;
        set.default_tree_mut().options = options.to_string();
        set.write_new_manifest()?;
        Ok(set)
    }

    /// Open an existing database: `CURRENT` → manifest → replay every edit; then write a
    /// fresh manifest (a snapshot of the recovered state) and point `CURRENT` at it, so the
    /// old manifest, torn tail and all, is no longer needed (it is deleted).
    ///
    /// The caller must still `mark_file_number_used` for log files found beyond `log_head`.
    /// (The database opens with `load` and `start_manifest`, surveying the log in between.)
    #[cfg(test)]
    pub fn recover(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize) -> Result<VersionSet> {
        let mut set = Self::load(vfs, dir, num_levels)?;
        set.start_manifest()?;
        Ok(set)
    }

    /// `recover` without writing anything: the state the manifest holds (of bytewise-ordered
    /// keys). Call `start_manifest` before the first `log_and_apply`.
    pub fn load(vfs: Arc<dyn Vfs>, dir: &Path, num_levels: usize) -> Result<VersionSet> {
        let manifest = LoadedManifest::read(&*vfs, dir)?;
        Self::from_manifest(vfs, dir, manifest, num_levels, KeyOrder::default())
    }

    /// `load` from a manifest already read (whose recorded options decided `num_levels`), whose
    /// key order must be `order` (by name: another is `Error::IncompatibleOptions`).
    pub fn from_manifest(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        manifest: LoadedManifest,
        num_levels: usize,
        order: KeyOrder,
    ) -> Result<VersionSet> {
        let mut set = Self::blank(vfs, dir, num_levels, "", order)?;
        let LoadedManifest { number, path, contents } = manifest;
        set.replay(&path, contents, num_levels)?;
        set.manifest_file_number = number;
        set.mark_file_number_used(number);
        Ok(set)
    }

    /// Write a fresh manifest holding a snapshot of the state and point `CURRENT` at it (the
    /// old manifest, torn tail and all, is then deleted).
    pub fn start_manifest(&mut self) -> Result<()> {
        self.write_new_manifest()
    }

    /// Rebuild state from the manifest at `path`.
    fn replay(&mut self, path: &Path, contents: ManifestContents, num_levels: usize) -> Result<()> {
        if contents.dropped_bytes > 0 {
            tracing::warn!(
                manifest = %path.display(),
                offset = contents.valid_bytes,
                dropped = contents.dropped_bytes,
                "ignoring torn record at the end of the manifest"
            );
        }
        // One builder per tree, each fed every edit of its tree and finished once.
        let mut builders: BTreeMap<u32, Builder> =
            BTreeMap::from([(DEFAULT_KEYSPACE, Builder::new(&Version::empty_in(num_levels, self.order.clone())))]);
        let (mut comparator, mut next_file, mut last_seq) = (None, None, None);
        let mut last_offset = 0;
        for (offset, edit) in &contents.edits {
            last_offset = *offset;
            check_format(&self.dir, edit, self.order.name())?;
            let inconsistent = |reason: String| Error::corruption(path, *offset, reason);
            for (id, name, options) in &edit.keyspaces_created {
                let levels = levels_in_record(options, num_levels);
                self.add_tree(*id, name, options, levels).map_err(inconsistent)?;
                builders.insert(*id, Builder::new(&Version::empty_in(levels, self.order.clone())));
            }
            for e in edit.tree_edits() {
                let b = builders.get_mut(&e.keyspace).ok_or_else(|| inconsistent(unknown_keyspace(e.keyspace)))?;
                b.apply(e).map_err(|err| self.apply_error(err, path, *offset))?;
            }
            self.absorb_registry(edit).map_err(inconsistent)?;
            for id in &edit.keyspaces_forgotten {
                builders.remove(id);
            }
            comparator = edit.comparator.clone().or(comparator);
            next_file = edit.next_file_number.or(next_file);
            last_seq = edit.last_sequence.or(last_seq);
            self.absorb(edit);
        }
        let missing = |what: &str| Error::corruption(path, 0, format!("manifest never records the {what}"));
        comparator.ok_or_else(|| missing("comparator"))?;
        self.next_file_number = next_file.ok_or_else(|| missing("next file number"))?;
        self.last_sequence = last_seq.ok_or_else(|| missing("last sequence"))?;
        for (id, builder) in builders {
            let version = builder.finish().map_err(|e| self.apply_error(e, path, last_offset))?;
            if let Some(t) = self.trees.get_mut(&id) {
                t.install(version);
            }
        }
        // Never hand out a number that is already on disk, whatever the counter says.
        let mut used: Vec<u64> = self
            .trees
            .values()
            .flat_map(|t| t.current.all_files().map(|(_, f)| f.number).collect::<Vec<_>>())
            .collect();
        used.extend([self.log_head.file, self.vlog_tail.file]);
        used.extend(self.vlog_files.keys());
        used.into_iter().for_each(|n| self.mark_file_number_used(n));
        Ok(())
    }

    /// A level the manifest uses but we were not opened with is an options mismatch;
    /// anything else that does not apply means the manifest contradicts itself.
    fn apply_error(&self, e: ApplyError, path: &Path, offset: u64) -> Error {
        match e {
            ApplyError::LevelOutOfRange { level, num_levels } => Error::IncompatibleOptions {
                option: "num_levels",
                existing: format!("at least {} (the manifest uses level {level})", level + 1),
                given: num_levels.to_string(),
            },
            ApplyError::Inconsistent(reason) => Error::corruption(path, offset, reason),
        }
    }

    /// Take the scalar fields an edit carries (everything but the files and the counters
    /// that `log_and_apply` and `replay` handle themselves).
    fn absorb(&mut self, edit: &VersionEdit) {
        if let Some(p) = edit.log_head {
            self.log_head = p;
        }
        if let Some(p) = edit.vlog_tail {
            self.vlog_tail = p;
        }
        if let Some(p) = edit.log_durable {
            self.log_durable = p;
        }
        for e in edit.tree_edits() {
            if let Some(t) = self.trees.get_mut(&e.keyspace) {
                t.absorb(e);
            }
        }
        apply_vlog_edits(&mut self.vlog_files, edit);
    }

    /// Add keyspace `id`'s tree (created by an edit).
    fn add_tree(&mut self, id: u32, name: &str, options: &str, num_levels: usize) -> std::result::Result<(), String> {
        if self.trees.contains_key(&id) || id < self.next_keyspace_id.min(1) {
            return Err(format!("keyspace {id} ({name:?}) is created twice"));
        }
        let policy = options.lines().find_map(|l| l.strip_prefix("merge_policy=")).unwrap_or("");
        self.trees.insert(id, Tree::new(name, num_levels, (policy, options), self.order.clone()));
        self.next_keyspace_id = self.next_keyspace_id.max(id.saturating_add(1));
        Ok(())
    }

    /// Apply an edit's drops, forgets and keyspace counter (creations come first, separately).
    fn absorb_registry(&mut self, edit: &VersionEdit) -> std::result::Result<(), String> {
        for id in &edit.keyspaces_dropped {
            match self.trees.get_mut(id) {
                Some(t) if *id != DEFAULT_KEYSPACE => t.dropped = true,
                _ => return Err(format!("dropping {}", unknown_keyspace(*id))),
            }
        }
        for id in &edit.keyspaces_forgotten {
            if !self.trees.get(id).is_some_and(|t| t.dropped) {
                return Err(format!("forgetting {} that was not dropped", unknown_keyspace(*id)));
            }
            self.trees.remove(id);
        }
        if let Some(n) = edit.next_keyspace_id {
            self.next_keyspace_id = self.next_keyspace_id.max(n);
        }
        Ok(())
    }

    /// Make `edit` durable in the manifest, then install the version it produces.
    /// `next_file_number` and `last_sequence` are filled in from this set (the larger of the
    /// edit's and ours). Rolls to a new manifest when the current one has grown past the
    /// limit or a previous write failed.
    ///
    /// On error nothing is installed, but the edit may or may not be on disk: the caller must
    /// not delete the files the edit adds (treat it as a background error).
    pub fn log_and_apply(&mut self, mut edit: VersionEdit) -> Result<Arc<Version>> {
        if edit.comparator.as_deref().is_some_and(|c| c != self.order.name()) {
            return Err(Error::invalid(format!("an edit cannot change the comparator to {:?}", edit.comparator)));
        }
        let versions = self.versions_after(&edit)?;

        let roll = self.manifest.as_ref().is_none_or(|m| m.len() >= self.max_manifest_bytes);
        let new_manifest = roll.then(|| self.new_file_number());
        edit.next_file_number = Some(edit.next_file_number.unwrap_or(0).max(self.next_file_number));
        edit.last_sequence = Some(edit.last_sequence.unwrap_or(0).max(self.last_sequence));
        match new_manifest {
            Some(number) => self.roll_manifest(number, &edit)?,
            None => self.append_edit(&edit)?,
        }

        self.mark_file_number_used(edit.next_file_number.unwrap_or(0).saturating_sub(1));
        self.last_sequence = edit.last_sequence.unwrap_or(self.last_sequence);
        for (id, name, options) in &edit.keyspaces_created {
            let levels = versions.get(id).map_or(1, Version::num_levels);
            self.add_tree(*id, name, options, levels).map_err(Error::invalid)?;
        }
        for (id, version) in versions {
            if let Some(t) = self.trees.get_mut(&id) {
                t.install(version);
            }
        }
        self.absorb(&edit);
        self.absorb_registry(&edit).map_err(Error::invalid)?;
        Ok(self.current())
    }

    /// The versions `edit` makes of the trees it changes (created ones start empty), without
    /// installing them: a bad edit installs nothing.
    fn versions_after(&self, edit: &VersionEdit) -> Result<BTreeMap<u32, Version>> {
        let bad = |e: String| Error::invalid(format!("bad version edit: {e}"));
        let mut bases: BTreeMap<u32, Version> = BTreeMap::new();
        for (id, name, options) in &edit.keyspaces_created {
            if self.trees.contains_key(id) {
                return Err(bad(format!("keyspace {id} ({name:?}) exists")));
            }
            bases.insert(*id, Version::empty_in(levels_in_record(options, 7), self.order.clone()));
        }
        let mut out = BTreeMap::new();
        for e in edit.tree_edits() {
            let mut builder = match (bases.get(&e.keyspace), self.trees.get(&e.keyspace)) {
                (Some(base), _) => Builder::new(base),
                (None, Some(t)) => Builder::new(&t.current),
                (None, None) => return Err(bad(unknown_keyspace(e.keyspace))),
            };
            builder.apply(e).map_err(|err| bad(err.to_string()))?;
            out.insert(e.keyspace, builder.finish().map_err(|err| bad(err.to_string()))?);
        }
        for (id, base) in bases {
            out.entry(id).or_insert(base);
        }
        Ok(out)
    }

    fn append_edit(&mut self, edit: &VersionEdit) -> Result<()> {
        let Some(m) = self.manifest.as_mut() else {
            return Err(Error::invalid("no manifest open"));
        };
        if let Err(e) = m.add_record(&edit.encoded()) {
            self.manifest = None;
            return Err(e);
        }
        Ok(())
    }

    /// Write `MANIFEST-<number>` = snapshot of the current state (+ `edit`), then switch
    /// `CURRENT` to it and delete the previous manifest.
    fn roll_manifest(&mut self, number: u64, edit: &VersionEdit) -> Result<()> {
        tracing::info!(from = self.manifest_file_number, to = number, "starting a new manifest");
        self.write_manifest_at(number, Some(edit))
    }

    /// Start a fresh manifest holding only a snapshot (create and recover).
    fn write_new_manifest(&mut self) -> Result<()> {
        let number = self.new_file_number();
        self.write_manifest_at(number, None)
    }

    fn write_manifest_at(&mut self, number: u64, edit: Option<&VersionEdit>) -> Result<()> {
        let old = std::mem::take(&mut self.manifest);
        let writer = match self.write_snapshot_file(number, edit) {
            Ok(w) => w,
            Err(e) => {
                // `CURRENT` was never touched: the partial new file is garbage.
                let _ = self.vfs.remove(&manifest_file_name(&self.dir, number));
                self.manifest = old;
                return Err(e);
            }
        };
        if let Err(e) = set_current(&*self.vfs, &self.dir, number) {
            // `CURRENT` may name either manifest now; both are complete, keep both.
            self.stale_manifests.push(number);
            return Err(e);
        }
        let previous = std::mem::replace(&mut self.manifest_file_number, number);
        self.stale_manifests.push(previous);
        self.manifest = Some(writer);
        self.delete_stale_manifests();
        Ok(())
    }

    fn write_snapshot_file(&self, number: u64, edit: Option<&VersionEdit>) -> Result<ManifestWriter> {
        let mut w = ManifestWriter::create(&*self.vfs, &self.dir, number)?;
        w.add_record(&self.snapshot().encoded())?;
        if let Some(e) = edit {
            w.add_record(&e.encoded())?;
        }
        Ok(w)
    }

    fn delete_stale_manifests(&mut self) {
        for n in std::mem::take(&mut self.stale_manifests) {
            if n == 0 || n == self.manifest_file_number {
                continue;
            }
            let path = manifest_file_name(&self.dir, n);
            if self.vfs.exists(&path) {
                if let Err(e) = self.vfs.remove(&path) {
                    tracing::warn!(error = %e, "could not delete an old manifest");
                }
            }
        }
    }

    /// One edit that recreates the whole current state (a checkpoint's manifest starts with it).
    pub fn snapshot_edit(&self) -> VersionEdit {
        self.snapshot()
    }

    /// One edit that recreates the whole current state.
    fn snapshot(&self) -> VersionEdit {
        // Replayed on an empty map, additions then garbage recreate each entry exactly.
        let vlog_added = self.vlog_files.iter().map(|(&n, s)| (n, s.total_bytes)).collect();
        let vlog_garbage =
            (self.vlog_files.iter()).filter(|(_, s)| s.garbage_bytes > 0).map(|(&n, s)| (n, s.garbage_bytes)).collect();
        let others = self.trees.iter().filter(|(&id, _)| id != DEFAULT_KEYSPACE);
        VersionEdit {
            comparator: Some(self.order.name().to_string()),
            format_version: Some(FORMAT_VERSION),
            next_file_number: Some(self.next_file_number),
            last_sequence: Some(self.last_sequence),
            log_head: Some(self.log_head),
            vlog_tail: Some(self.vlog_tail),
            log_durable: (self.log_durable != LogPos::default()).then_some(self.log_durable),
            vlog_added,
            vlog_garbage,
            keyspaces_created: others.clone().map(|(&id, t)| (id, t.name.clone(), t.options.clone())).collect(),
            keyspaces_dropped: others.clone().filter(|(_, t)| t.dropped).map(|(&id, _)| id).collect(),
            next_keyspace_id: Some(self.next_keyspace_id),
            subedits: others.map(|(&id, t)| t.snapshot(id)).collect(),
            ..self.default_tree().snapshot(DEFAULT_KEYSPACE)
        }
    }

    fn default_tree(&self) -> &Tree {
        &self.trees[&DEFAULT_KEYSPACE]
    }

    fn default_tree_mut(&mut self) -> &mut Tree {
        self.trees.get_mut(&DEFAULT_KEYSPACE).expect("the default keyspace's tree always exists")
    }

    /// The newest version of the default keyspace's tree (the files of every level).
    pub fn current(&self) -> Arc<Version> {
        self.default_tree().current.clone()
    }

    /// The newest version of keyspace `id`'s tree, if it exists.
    pub fn current_of(&self, id: u32) -> Option<Arc<Version>> {
        self.trees.get(&id).map(|t| t.current.clone())
    }

    /// Changes whenever `current_of(id)` does.
    pub fn current_id_of(&self, id: u32) -> u64 {
        self.trees.get(&id).map_or(0, |t| t.current_id)
    }

    /// Every keyspace's tree, by id (dropped ones awaiting their finish included).
    pub fn trees(&self) -> &BTreeMap<u32, Tree> {
        &self.trees
    }

    /// Hand out a new keyspace id (recorded by the edit that creates the keyspace).
    pub fn new_keyspace_id(&mut self) -> u32 {
        let id = self.next_keyspace_id;
        self.next_keyspace_id += 1;
        id
    }

    /// Allocate a file number (tables, logs, manifests; run ids may use it too).
    pub fn new_file_number(&mut self) -> u64 {
        let n = self.next_file_number;
        self.next_file_number += 1;
        n
    }

    /// The next file number `new_file_number` will hand out.
    pub fn next_file_number(&self) -> u64 {
        self.next_file_number
    }

    /// Make sure `n` is never handed out again (a file found on disk at recovery).
    pub fn mark_file_number_used(&mut self, n: u64) {
        if self.next_file_number <= n {
            self.next_file_number = n.saturating_add(1);
        }
    }

    /// The newest sequence number recorded.
    pub fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    /// Set the newest sequence number (recorded with the next edit).
    pub fn set_last_sequence(&mut self, s: u64) {
        self.last_sequence = s;
    }

    /// Every log record before this address is reflected in table files.
    pub fn log_head(&self) -> LogPos {
        self.log_head
    }

    /// Where the log was durable at the last clean close (`(0, 0)`: not recorded).
    pub fn log_durable(&self) -> LogPos {
        self.log_durable
    }

    /// Oldest live value-log address (moved forward by GC).
    pub fn vlog_tail(&self) -> LogPos {
        self.vlog_tail
    }

    /// The shaping options the database recorded (`name=value` lines; before format 3 only
    /// the merge policy was recorded, which reads as that one line).
    pub fn recorded_options(&self) -> String {
        self.recorded_options_of(DEFAULT_KEYSPACE)
    }

    /// `recorded_options` of keyspace `id`.
    pub fn recorded_options_of(&self, id: u32) -> String {
        self.trees.get(&id).map(|t| recorded_options(&t.options, &t.policy)).unwrap_or_default()
    }

    /// Record `options` as the shaping options in force from the next manifest snapshot on
    /// (the snapshot that opens a manifest carries them).
    pub fn set_recorded_options(&mut self, options: String) {
        self.set_recorded_options_of(DEFAULT_KEYSPACE, options);
    }

    /// `set_recorded_options` of keyspace `id`.
    pub fn set_recorded_options_of(&mut self, id: u32, options: String) {
        if let Some(t) = self.trees.get_mut(&id) {
            t.options = options;
        }
    }

    /// Name of the compaction policy the database was last opened with.
    pub fn policy(&self) -> &str {
        self.policy_of(DEFAULT_KEYSPACE)
    }

    /// Name of keyspace `id`'s compaction policy as recorded.
    pub fn policy_of(&self, id: u32) -> &str {
        self.trees.get(&id).map_or("", |t| t.policy.as_str())
    }

    /// Why keyspace `id`'s policy last changed, as recorded (a tuner's move), if it did.
    pub fn policy_reason_of(&self, id: u32) -> Option<&str> {
        self.trees.get(&id).and_then(|t| t.policy_reason.as_deref())
    }

    /// Record `policy` as the one in force from the next manifest snapshot on
    /// (`start_manifest`, which recovery calls before anything else is written).
    pub fn set_policy(&mut self, policy: &str) {
        self.set_policy_of(DEFAULT_KEYSPACE, policy);
    }

    /// `set_policy` of keyspace `id`.
    pub fn set_policy_of(&mut self, id: u32, policy: &str) {
        if let Some(t) = self.trees.get_mut(&id) {
            t.policy = policy.to_string();
        }
    }

    /// Where the next compaction of `level` starts (internal key), if recorded.
    #[cfg(test)]
    pub fn compact_pointer(&self, level: usize) -> Option<&[u8]> {
        self.compact_pointer_of(DEFAULT_KEYSPACE, level)
    }

    /// `compact_pointer` of keyspace `id`'s tree.
    pub fn compact_pointer_of(&self, id: u32, level: usize) -> Option<&[u8]> {
        self.trees.get(&id)?.compact_pointers.get(level)?.as_deref()
    }

    /// Statistics of every value-log file that holds separated values, by file number. A log
    /// file before the log head without an entry holds none and may be deleted.
    pub fn vlog_files(&self) -> &BTreeMap<u64, VlogFileStats> {
        &self.vlog_files
    }

    /// Statistics of value-log file `n`, if it holds separated values.
    #[cfg(test)]
    pub fn vlog_file(&self, n: u64) -> Option<VlogFileStats> {
        self.vlog_files.get(&n).copied()
    }

    /// Numbers of every table file referenced by the current version or any older version
    /// someone still holds: the files that must not be deleted.
    pub fn live_files(&self) -> HashSet<u64> {
        let mut live = HashSet::new();
        for t in self.trees.values() {
            let older = t.older.iter().filter_map(Weak::upgrade);
            for v in std::iter::once(t.current.clone()).chain(older) {
                live.extend(v.all_files().map(|(_, f)| f.number));
            }
        }
        live
    }

    /// The manifest `CURRENT` names; every other `MANIFEST-*` file is obsolete.
    pub fn manifest_file_number(&self) -> u64 {
        self.manifest_file_number
    }

    /// Size at which `log_and_apply` rolls to a new manifest (default 64 MiB).
    #[cfg(test)]
    pub fn set_max_manifest_bytes(&mut self, bytes: u64) {
        self.max_manifest_bytes = bytes;
    }
}

fn unknown_keyspace(id: u32) -> String {
    format!("keyspace {id}, which the manifest never created")
}

/// Refuse manifests of another key order than `comparator` (LevelDB's "does not match existing
/// comparator") or of a newer format.
fn check_format(dir: &Path, edit: &VersionEdit, comparator: &str) -> Result<()> {
    let refuse = |reason: String| Error::NotADatabase { path: dir.to_path_buf(), reason };
    if let Some(c) = edit.comparator.as_deref().filter(|&c| c != comparator) {
        return Err(Error::IncompatibleOptions {
            option: "comparator",
            existing: format!("{c:?}, the key order the database was created with"),
            given: format!("{comparator:?}"),
        });
    }
    if let Some(v) = edit.format_version.filter(|v| !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(v)) {
        return Err(refuse(format!(
            "format version {v}, this build reads {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
