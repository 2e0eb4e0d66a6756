//! Test helpers: table metadata and Versions built by hand, for policy and job tests.

use crate::compaction::PickContext;
use crate::key::{make_internal_key, ValueKind};
use crate::version::{Builder, FileMeta, Version, VersionEdit};

/// A 1000-byte table of run `run` holding user keys `lo..=hi` (versions 100 down to 1).
pub fn file(number: u64, run: u64, lo: &str, hi: &str) -> FileMeta {
    FileMeta {
        number,
        size: 1000,
        smallest: make_internal_key(lo.as_bytes(), 100, ValueKind::Value),
        largest: make_internal_key(hi.as_bytes(), 1, ValueKind::Value),
        run,
        num_entries: 10,
        ..Default::default()
    }
}

/// `file` holding only tombstones.
pub fn tombstones(number: u64, run: u64, lo: &str, hi: &str) -> FileMeta {
    FileMeta { num_deletions: 10, ..file(number, run, lo, hi) }
}

/// A Version of `num_levels` levels holding `files` (level, table).
pub fn version(num_levels: usize, files: &[(u32, FileMeta)]) -> Version {
    let mut b = Builder::new(&Version::empty(num_levels));
    b.apply(&VersionEdit { added_files: files.to_vec(), ..Default::default() }).expect("apply");
    b.finish().expect("finish")
}

/// What a policy sees of `v` with `busy` levels busy and no compaction pointer or candidate.
pub fn context<'a>(v: &'a Version, busy: &'a [usize]) -> PickContext<'a> {
    PickContext {
        version: v,
        compact_pointers: &[],
        seek_candidate: None,
        collapse_candidate: None,
        busy_levels: busy,
        readers_only: false,
    }
}
