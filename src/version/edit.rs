//! `VersionEdit`: one change to the set of table files, the value-log statistics and the
//! database's counters, and its tagged byte encoding (the payload of a manifest record, see `docs/format/manifest.md`).

use std::fmt;

use crate::key::TRAILER_LEN;
use crate::log::LogPos;
use crate::util::coding::{put_length_prefixed, put_varint32, put_varint64, Reader};

/// What the manifest knows about one table file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileMeta {
    /// File number: the table lives in `NNNNNN.sst`.
    pub number: u64,
    /// File size in bytes.
    pub size: u64,
    /// Smallest internal key in the file.
    pub smallest: Vec<u8>,
    /// Largest internal key in the file.
    pub largest: Vec<u8>,
    /// Sorted-run id; the files of one run are disjoint. Newer runs have larger ids.
    pub run: u64,
    /// Entries in the file (all kinds).
    pub num_entries: u64,
    /// Deletion markers in the file.
    pub num_deletions: u64,
    /// Bytes of values stored inline plus bytes of values referenced in the value log
    /// (what compaction-driven GC statistics need).
    pub raw_value_bytes: u64,
    /// Segments in the file: light-weight compaction appends sorted segments to a table
    /// (a DTable, `sst/dtable.rs`). 0 and 1 both mean a plain table.
    pub segments: u64,
    /// Range tombstones in the file (over all its segments): readers collect them from the
    /// files that have any, without opening the others.
    pub range_tombstones: u64,
}

/// A change to a `Version` plus the counters the manifest persists.
/// Every field is optional so an edit carries only what changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VersionEdit {
    /// Name of the key order (`wisckey.bytewise`, or a custom comparator's name).
    pub comparator: Option<String>,
    /// On-disk format version of the database.
    pub format_version: Option<u32>,
    /// The next file number to hand out.
    pub next_file_number: Option<u64>,
    /// The newest sequence number written.
    pub last_sequence: Option<u64>,
    /// Every log record before this address is reflected in table files.
    pub log_head: Option<LogPos>,
    /// Oldest live value-log address (moved forward by GC).
    pub vlog_tail: Option<LogPos>,
    /// At a clean close: the log was durable up to here (recovery treats damage before it
    /// as damage to synced data even when the log's own sync marks were destroyed with it).
    pub log_durable: Option<LogPos>,
    /// Where the next compaction of a level starts (internal key).
    pub compact_pointers: Vec<(u32, Vec<u8>)>,
    /// `(level, file number)` of files removed from a level.
    pub deleted_files: Vec<(u32, u64)>,
    /// `(level, file)` of files added to a level (applied after the deletions).
    pub added_files: Vec<(u32, FileMeta)>,
    /// Name and knobs of the compaction policy the database was written with.
    pub policy: Option<String>,
    /// The settings that shape the tree's files (`name=value` lines, `options/recorded.rs`):
    /// an open that does not name a setting takes the recorded value.
    pub options: Option<String>,
    /// Why `policy` changed, when a tuner changed it (`moved from tiering to leveling at op
    /// N, predicted -23 %`).
    pub policy_reason: Option<String>,
    /// `(value-log file, bytes)`: separated values in that file that tables now reference.
    pub vlog_added: Vec<(u64, u64)>,
    /// `(value-log file, bytes)`: separated values in that file that no table references any
    /// more (overwritten or deleted values dropped by compaction, values moved by GC).
    pub vlog_garbage: Vec<(u64, u64)>,
    /// Value-log files removed entirely (by GC). Applied before `vlog_added` and
    /// `vlog_garbage`.
    pub vlog_files_deleted: Vec<u64>,
    /// The keyspace whose tree `compact_pointers`, `deleted_files`, `added_files`, `policy`
    /// and `options` change (0: the default keyspace).
    pub keyspace: u32,
    /// Edits of other keyspaces' trees made in the same atomic step (a flush writes a table
    /// per keyspace): each carries only tree fields and its `keyspace`.
    pub subedits: Vec<VersionEdit>,
    /// Keyspaces created: `(id, name, options record)`.
    pub keyspaces_created: Vec<(u32, String, String)>,
    /// Keyspaces dropped: invisible from now on; their tables stay until the drop is finished.
    pub keyspaces_dropped: Vec<u32>,
    /// Dropped keyspaces finished: their tables are gone and their garbage counted.
    pub keyspaces_forgotten: Vec<u32>,
    /// The next keyspace id to hand out (ids are never reused: the log may still hold
    /// records of a dropped keyspace).
    pub next_keyspace_id: Option<u32>,
}

impl VersionEdit {
    /// An empty edit of keyspace `keyspace`'s tree.
    pub fn of_keyspace(keyspace: u32) -> Self {
        VersionEdit { keyspace, ..Default::default() }
    }

    /// This edit and its subedits: every tree it changes, with the edit that changes it.
    pub fn tree_edits(&self) -> impl Iterator<Item = &VersionEdit> {
        std::iter::once(self).chain(&self.subedits)
    }
}

/// Why an encoded edit could not be decoded: a reason and the byte offset in the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditDecodeError {
    pub offset: u64,
    pub reason: String,
}

impl fmt::Display for EditDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad version edit at payload byte {}: {}", self.offset, self.reason)
    }
}

// Field tags. Numbers are part of the on-disk format: never reuse one.
const TAG_COMPARATOR: u32 = 1;
const TAG_FORMAT_VERSION: u32 = 2;
const TAG_NEXT_FILE_NUMBER: u32 = 3;
const TAG_LAST_SEQUENCE: u32 = 4;
const TAG_LOG_HEAD: u32 = 5;
const TAG_VLOG_TAIL: u32 = 6;
const TAG_COMPACT_POINTER: u32 = 7;
const TAG_DELETED_FILE: u32 = 8;
const TAG_ADDED_FILE: u32 = 9;
const TAG_POLICY: u32 = 10;
const TAG_VLOG_ADDED: u32 = 11;
const TAG_VLOG_GARBAGE: u32 = 12;
const TAG_VLOG_FILE_DELETED: u32 = 13;
const TAG_LOG_DURABLE: u32 = 14;
/// An added file with segments appended (a DTable): the added-file fields, then the segment
/// count. A plain table keeps tag 9, so databases without DTables read as before.
const TAG_ADDED_DTABLE: u32 = 15;
const TAG_OPTIONS: u32 = 16;
/// The keyspace an edit's tree fields belong to (absent: the default keyspace).
const TAG_KEYSPACE: u32 = 17;
/// A length-prefixed edit of another keyspace's tree, applied in the same step.
const TAG_SUBEDIT: u32 = 18;
const TAG_KEYSPACE_CREATED: u32 = 19;
const TAG_KEYSPACE_DROPPED: u32 = 20;
const TAG_KEYSPACE_FORGOTTEN: u32 = 21;
const TAG_NEXT_KEYSPACE_ID: u32 = 22;
/// An added file holding range tombstones: the added-file fields, the segment count (>= 1)
/// and the tombstone count (>= 1). Other files keep tags 9 and 15, and a build that does not
/// know range tombstones refuses a manifest naming such a file (unknown tag) instead of
/// opening a database whose deleted keys it would bring back.
const TAG_ADDED_FILE_RANGE_DELS: u32 = 23;
/// Why the policy changed (the auto-tuner's note), beside the tag 10/16 fields it explains.
/// Informational; a build that predates it refuses the manifest at the unknown tag.
const TAG_POLICY_REASON: u32 = 24;

impl VersionEdit {
    /// Append the tagged encoding of this edit to `dst`.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        if let Some(c) = &self.comparator {
            put_varint32(dst, TAG_COMPARATOR);
            put_length_prefixed(dst, c.as_bytes());
        }
        if let Some(v) = self.format_version {
            put_varint32(dst, TAG_FORMAT_VERSION);
            put_varint32(dst, v);
        }
        if let Some(n) = self.next_file_number {
            put_varint32(dst, TAG_NEXT_FILE_NUMBER);
            put_varint64(dst, n);
        }
        if let Some(s) = self.last_sequence {
            put_varint32(dst, TAG_LAST_SEQUENCE);
            put_varint64(dst, s);
        }
        if let Some(p) = self.log_head {
            put_varint32(dst, TAG_LOG_HEAD);
            put_position(dst, p);
        }
        if let Some(p) = self.vlog_tail {
            put_varint32(dst, TAG_VLOG_TAIL);
            put_position(dst, p);
        }
        if let Some(p) = self.log_durable {
            put_varint32(dst, TAG_LOG_DURABLE);
            put_position(dst, p);
        }
        for (level, key) in &self.compact_pointers {
            put_varint32(dst, TAG_COMPACT_POINTER);
            put_varint32(dst, *level);
            put_length_prefixed(dst, key);
        }
        for (level, number) in &self.deleted_files {
            put_varint32(dst, TAG_DELETED_FILE);
            put_varint32(dst, *level);
            put_varint64(dst, *number);
        }
        for (level, f) in &self.added_files {
            if f.range_tombstones > 0 {
                put_varint32(dst, TAG_ADDED_FILE_RANGE_DELS);
                put_varint32(dst, *level);
                put_file_meta(dst, f);
                put_varint64(dst, f.segments.max(1));
                put_varint64(dst, f.range_tombstones);
                continue;
            }
            put_varint32(dst, if f.segments > 1 { TAG_ADDED_DTABLE } else { TAG_ADDED_FILE });
            put_varint32(dst, *level);
            put_file_meta(dst, f);
            if f.segments > 1 {
                put_varint64(dst, f.segments);
            }
        }
        if let Some(p) = &self.policy {
            put_varint32(dst, TAG_POLICY);
            put_length_prefixed(dst, p.as_bytes());
        }
        if let Some(o) = &self.options {
            put_varint32(dst, TAG_OPTIONS);
            put_length_prefixed(dst, o.as_bytes());
        }
        if let Some(r) = &self.policy_reason {
            put_varint32(dst, TAG_POLICY_REASON);
            put_length_prefixed(dst, r.as_bytes());
        }
        self.encode_vlog_fields(dst);
        self.encode_keyspace_fields(dst);
    }

    /// The keyspace fields (tags 17-22).
    fn encode_keyspace_fields(&self, dst: &mut Vec<u8>) {
        if self.keyspace != 0 {
            put_varint32(dst, TAG_KEYSPACE);
            put_varint32(dst, self.keyspace);
        }
        for (id, name, options) in &self.keyspaces_created {
            put_varint32(dst, TAG_KEYSPACE_CREATED);
            put_varint32(dst, *id);
            put_length_prefixed(dst, name.as_bytes());
            put_length_prefixed(dst, options.as_bytes());
        }
        for (tag, ids) in
            [(TAG_KEYSPACE_DROPPED, &self.keyspaces_dropped), (TAG_KEYSPACE_FORGOTTEN, &self.keyspaces_forgotten)]
        {
            for id in ids {
                put_varint32(dst, tag);
                put_varint32(dst, *id);
            }
        }
        if let Some(n) = self.next_keyspace_id {
            put_varint32(dst, TAG_NEXT_KEYSPACE_ID);
            put_varint32(dst, n);
        }
        for sub in &self.subedits {
            put_varint32(dst, TAG_SUBEDIT);
            put_length_prefixed(dst, &sub.encoded());
        }
    }

    /// The value-log statistics fields (tags 11-13).
    fn encode_vlog_fields(&self, dst: &mut Vec<u8>) {
        for &(file, bytes) in &self.vlog_added {
            put_varint32(dst, TAG_VLOG_ADDED);
            put_varint64(dst, file);
            put_varint64(dst, bytes);
        }
        for &(file, bytes) in &self.vlog_garbage {
            put_varint32(dst, TAG_VLOG_GARBAGE);
            put_varint64(dst, file);
            put_varint64(dst, bytes);
        }
        for &file in &self.vlog_files_deleted {
            put_varint32(dst, TAG_VLOG_FILE_DELETED);
            put_varint64(dst, file);
        }
    }

    /// The encoding as a fresh buffer.
    pub fn encoded(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// Decode an edit. Any malformed input (truncated field, unknown tag, a scalar field
    /// given twice, non-UTF-8 name, key shorter than an internal-key trailer) is an error.
    pub fn decode(src: &[u8]) -> Result<VersionEdit, EditDecodeError> {
        let mut r = Reader::new(src);
        let mut edit = VersionEdit::default();
        while !r.is_empty() {
            let at = r.pos();
            let fail = |reason: String| EditDecodeError { offset: at as u64, reason };
            let tag = r.varint32().ok_or_else(|| fail("truncated tag".into()))?;
            edit.decode_field(tag, &mut r).map_err(fail)?;
        }
        Ok(edit)
    }

    /// Whether the edit carries nothing but one keyspace's tree fields (what a subedit may).
    fn only_tree_fields(&self) -> bool {
        let tree = VersionEdit {
            keyspace: self.keyspace,
            compact_pointers: self.compact_pointers.clone(),
            deleted_files: self.deleted_files.clone(),
            added_files: self.added_files.clone(),
            policy: self.policy.clone(),
            options: self.options.clone(),
            policy_reason: self.policy_reason.clone(),
            ..Default::default()
        };
        tree == *self
    }

    /// Decode the field of `tag` at the reader's position into `self`.
    fn decode_field(&mut self, tag: u32, r: &mut Reader<'_>) -> Result<(), String> {
        let trunc = |what: &str| format!("truncated {what}");
        match tag {
            TAG_COMPARATOR => {
                let s = utf8(r.length_prefixed().ok_or_else(|| trunc("comparator"))?, "comparator")?;
                set_once(&mut self.comparator, s, "comparator")
            }
            TAG_FORMAT_VERSION => {
                let v = r.varint32().ok_or_else(|| trunc("format version"))?;
                set_once(&mut self.format_version, v, "format version")
            }
            TAG_NEXT_FILE_NUMBER => {
                let v = r.varint64().ok_or_else(|| trunc("next file number"))?;
                set_once(&mut self.next_file_number, v, "next file number")
            }
            TAG_LAST_SEQUENCE => {
                let v = r.varint64().ok_or_else(|| trunc("last sequence"))?;
                set_once(&mut self.last_sequence, v, "last sequence")
            }
            TAG_LOG_HEAD => {
                let p = get_position(r).ok_or_else(|| trunc("log head"))?;
                set_once(&mut self.log_head, p, "log head")
            }
            TAG_VLOG_TAIL => {
                let p = get_position(r).ok_or_else(|| trunc("vlog tail"))?;
                set_once(&mut self.vlog_tail, p, "vlog tail")
            }
            TAG_LOG_DURABLE => {
                let p = get_position(r).ok_or_else(|| trunc("durable log end"))?;
                set_once(&mut self.log_durable, p, "durable log end")
            }
            TAG_COMPACT_POINTER => {
                let level = r.varint32().ok_or_else(|| trunc("compact pointer level"))?;
                let key = internal_key(r.length_prefixed(), "compact pointer")?;
                self.compact_pointers.push((level, key));
                Ok(())
            }
            TAG_DELETED_FILE => {
                let level = r.varint32().ok_or_else(|| trunc("deleted file level"))?;
                let number = r.varint64().ok_or_else(|| trunc("deleted file number"))?;
                self.deleted_files.push((level, number));
                Ok(())
            }
            TAG_ADDED_FILE => {
                let level = r.varint32().ok_or_else(|| trunc("added file level"))?;
                let f = get_file_meta(r)?;
                self.added_files.push((level, f));
                Ok(())
            }
            TAG_ADDED_DTABLE => {
                let level = r.varint32().ok_or_else(|| trunc("added file level"))?;
                let mut f = get_file_meta(r)?;
                f.segments = r.varint64().filter(|&n| n > 1).ok_or_else(|| trunc("segment count"))?;
                self.added_files.push((level, f));
                Ok(())
            }
            TAG_ADDED_FILE_RANGE_DELS => {
                let level = r.varint32().ok_or_else(|| trunc("added file level"))?;
                let mut f = get_file_meta(r)?;
                f.segments = r.varint64().filter(|&n| n >= 1).ok_or_else(|| trunc("segment count"))?;
                f.range_tombstones = r.varint64().filter(|&n| n >= 1).ok_or_else(|| trunc("range tombstone count"))?;
                self.added_files.push((level, f));
                Ok(())
            }
            TAG_POLICY => {
                let s = utf8(r.length_prefixed().ok_or_else(|| trunc("policy"))?, "policy")?;
                set_once(&mut self.policy, s, "policy")
            }
            TAG_OPTIONS => {
                let s = utf8(r.length_prefixed().ok_or_else(|| trunc("options"))?, "options")?;
                set_once(&mut self.options, s, "options")
            }
            TAG_POLICY_REASON => {
                let s = utf8(r.length_prefixed().ok_or_else(|| trunc("policy reason"))?, "policy reason")?;
                set_once(&mut self.policy_reason, s, "policy reason")
            }
            TAG_VLOG_ADDED => {
                let v = get_vlog_bytes(r).ok_or_else(|| trunc("vlog bytes added"))?;
                self.vlog_added.push(v);
                Ok(())
            }
            TAG_VLOG_GARBAGE => {
                let v = get_vlog_bytes(r).ok_or_else(|| trunc("vlog garbage"))?;
                self.vlog_garbage.push(v);
                Ok(())
            }
            TAG_VLOG_FILE_DELETED => {
                let file = r.varint64().ok_or_else(|| trunc("deleted vlog file"))?;
                self.vlog_files_deleted.push(file);
                Ok(())
            }
            TAG_KEYSPACE => {
                let id = r.varint32().ok_or_else(|| trunc("keyspace"))?;
                if id == 0 || self.keyspace != 0 {
                    return Err(format!("keyspace tag {id} is the default's or appears twice"));
                }
                self.keyspace = id;
                Ok(())
            }
            TAG_SUBEDIT => {
                let bytes = r.length_prefixed().ok_or_else(|| trunc("subedit"))?;
                let sub = VersionEdit::decode(bytes).map_err(|e| format!("in a subedit: {}", e.reason))?;
                if !sub.only_tree_fields() {
                    return Err("a subedit carries more than one keyspace's tree fields".into());
                }
                self.subedits.push(sub);
                Ok(())
            }
            TAG_KEYSPACE_CREATED => {
                let id = r.varint32().ok_or_else(|| trunc("created keyspace"))?;
                let name = utf8(r.length_prefixed().ok_or_else(|| trunc("keyspace name"))?, "keyspace name")?;
                let options = utf8(r.length_prefixed().ok_or_else(|| trunc("keyspace options"))?, "keyspace options")?;
                self.keyspaces_created.push((id, name, options));
                Ok(())
            }
            TAG_KEYSPACE_DROPPED => {
                self.keyspaces_dropped.push(r.varint32().ok_or_else(|| trunc("dropped keyspace"))?);
                Ok(())
            }
            TAG_KEYSPACE_FORGOTTEN => {
                self.keyspaces_forgotten.push(r.varint32().ok_or_else(|| trunc("forgotten keyspace"))?);
                Ok(())
            }
            TAG_NEXT_KEYSPACE_ID => {
                let n = r.varint32().ok_or_else(|| trunc("next keyspace id"))?;
                set_once(&mut self.next_keyspace_id, n, "next keyspace id")
            }
            other => Err(format!("unknown tag {other}")),
        }
    }
}

fn put_position(dst: &mut Vec<u8>, p: LogPos) {
    put_varint64(dst, p.file);
    put_varint64(dst, p.offset);
}

fn get_position(r: &mut Reader<'_>) -> Option<LogPos> {
    Some(LogPos { file: r.varint64()?, offset: r.varint64()? })
}

/// `varint64 file`, `varint64 bytes` of tags 11 and 12.
fn get_vlog_bytes(r: &mut Reader<'_>) -> Option<(u64, u64)> {
    Some((r.varint64()?, r.varint64()?))
}

fn put_file_meta(dst: &mut Vec<u8>, f: &FileMeta) {
    put_varint64(dst, f.number);
    put_varint64(dst, f.size);
    put_length_prefixed(dst, &f.smallest);
    put_length_prefixed(dst, &f.largest);
    put_varint64(dst, f.run);
    put_varint64(dst, f.num_entries);
    put_varint64(dst, f.num_deletions);
    put_varint64(dst, f.raw_value_bytes);
}

fn get_file_meta(r: &mut Reader<'_>) -> Result<FileMeta, String> {
    let mut num = |what: &str| r.varint64().ok_or_else(|| format!("truncated added file {what}"));
    let number = num("number")?;
    let size = num("size")?;
    let smallest = internal_key(r.length_prefixed(), "smallest key")?;
    let largest = internal_key(r.length_prefixed(), "largest key")?;
    let mut num = |what: &str| r.varint64().ok_or_else(|| format!("truncated added file {what}"));
    Ok(FileMeta {
        number,
        size,
        smallest,
        largest,
        run: num("run")?,
        num_entries: num("entry count")?,
        num_deletions: num("deletion count")?,
        raw_value_bytes: num("value bytes")?,
        segments: 1,
        range_tombstones: 0,
    })
}

/// An internal key field: present and long enough to hold the 8-byte trailer.
fn internal_key(field: Option<&[u8]>, what: &str) -> Result<Vec<u8>, String> {
    let k = field.ok_or_else(|| format!("truncated {what}"))?;
    if k.len() < TRAILER_LEN {
        return Err(format!("{what} is {} bytes, shorter than an internal key trailer", k.len()));
    }
    Ok(k.to_vec())
}

fn utf8(b: &[u8], what: &str) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

/// Scalar fields appear at most once per edit; a repeat means the bytes are not ours.
fn set_once<T>(slot: &mut Option<T>, v: T, what: &str) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("{what} appears twice"));
    }
    *slot = Some(v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ikey() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), TRAILER_LEN..40)
    }

    fn file_meta() -> impl Strategy<Value = FileMeta> {
        (any::<[u64; 6]>(), ikey(), ikey(), prop_oneof![Just(0u64), 1u64..1000]).prop_map(
            |(n, smallest, largest, rt)| FileMeta {
                number: n[0],
                size: n[1],
                smallest,
                largest,
                run: n[2],
                num_entries: n[3],
                num_deletions: n[4],
                raw_value_bytes: n[5],
                segments: 1 + n[0] % 4,
                range_tombstones: rt,
            },
        )
    }

    fn position() -> impl Strategy<Value = LogPos> {
        (any::<u64>(), any::<u64>()).prop_map(|(file, offset)| LogPos { file, offset })
    }

    prop_compose! {
        fn base_edit()(
            comparator in proptest::option::of(".{0,20}"),
            format_version in proptest::option::of(any::<u32>()),
            next_file_number in proptest::option::of(any::<u64>()),
            last_sequence in proptest::option::of(any::<u64>()),
            log_head in proptest::option::of(position()),
            vlog_tail in proptest::option::of(position()),
            log_durable in proptest::option::of(position()),
            compact_pointers in proptest::collection::vec((any::<u32>(), ikey()), 0..4),
            deleted_files in proptest::collection::vec((any::<u32>(), any::<u64>()), 0..6),
            added_files in proptest::collection::vec((any::<u32>(), file_meta()), 0..6),
            policy in proptest::option::of(".{0,30}"),
            options in proptest::option::of(".{0,60}"),
            vlog_added in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5),
            vlog_garbage in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5),
            vlog_files_deleted in proptest::collection::vec(any::<u64>(), 0..5),
        ) -> VersionEdit {
            VersionEdit { comparator, format_version, next_file_number, last_sequence, log_head,
                vlog_tail, log_durable, compact_pointers, deleted_files, added_files, policy, options, vlog_added,
                vlog_garbage, vlog_files_deleted, ..Default::default() }
        }
    }

    prop_compose! {
        /// An edit of one keyspace's tree, as a subedit carries it.
        fn tree_edit()(
            keyspace in 1u32..1000,
            compact_pointers in proptest::collection::vec((any::<u32>(), ikey()), 0..2),
            deleted_files in proptest::collection::vec((any::<u32>(), any::<u64>()), 0..3),
            added_files in proptest::collection::vec((any::<u32>(), file_meta()), 0..3),
            options in proptest::option::of(".{0,20}"),
            policy_reason in proptest::option::of(".{0,20}"),
        ) -> VersionEdit {
            VersionEdit { keyspace, compact_pointers, deleted_files, added_files, options, policy_reason,
                ..Default::default() }
        }
    }

    prop_compose! {
        fn edit()(
            base in base_edit(),
            keyspace in prop_oneof![Just(0u32), 1u32..100],
            subedits in proptest::collection::vec(tree_edit(), 0..3),
            keyspaces_created in proptest::collection::vec((any::<u32>(), ".{0,10}", ".{0,20}"), 0..3),
            keyspaces_dropped in proptest::collection::vec(any::<u32>(), 0..3),
            keyspaces_forgotten in proptest::collection::vec(any::<u32>(), 0..2),
            next_keyspace_id in proptest::option::of(any::<u32>()),
        ) -> VersionEdit {
            VersionEdit { keyspace, subedits, keyspaces_created, keyspaces_dropped, keyspaces_forgotten,
                next_keyspace_id, ..base }
        }
    }

    /// Bytes that look like an edit: known (and a few unknown) tags followed by short random
    /// payloads, so the decoder of every field sees garbage, not just the tag parser.
    fn tagged_garbage() -> impl Strategy<Value = Vec<u8>> {
        let field = (0u32..24, proptest::collection::vec(any::<u8>(), 0..12));
        proptest::collection::vec(field, 0..8).prop_map(|fields| {
            let mut b = Vec::new();
            for (tag, payload) in fields {
                put_varint32(&mut b, tag);
                b.extend(payload);
            }
            b
        })
    }

    proptest! {
        #[test]
        fn any_edit_round_trips(e in edit()) {
            prop_assert_eq!(VersionEdit::decode(&e.encoded()), Ok(e));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = VersionEdit::decode(&bytes);
        }

        #[test]
        fn garbage_after_any_tag_never_panics_and_decodes_consistently(bytes in tagged_garbage()) {
            // Whatever decodes must be something we would write ourselves (modulo field order).
            if let Ok(e) = VersionEdit::decode(&bytes) {
                prop_assert_eq!(VersionEdit::decode(&e.encoded()), Ok(e));
            }
        }

        #[test]
        fn flipped_byte_in_an_edit_never_panics(e in edit(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut enc = e.encoded();
            prop_assume!(!enc.is_empty());
            let i = at.index(enc.len());
            enc[i] ^= 1 << bit;
            let _ = VersionEdit::decode(&enc);
        }

        #[test]
        fn every_truncation_of_an_edit_is_rejected_or_a_prefix(e in edit(), cut in any::<prop::sample::Index>()) {
            let enc = e.encoded();
            prop_assume!(!enc.is_empty());
            let cut = cut.index(enc.len());
            // A cut on a field boundary decodes to fewer fields; inside a field it must fail.
            if let Ok(d) = VersionEdit::decode(&enc[..cut]) {
                prop_assert!(d.encoded().len() == cut);
            }
        }
    }

    #[test]
    fn unknown_tag_is_rejected_with_its_number() {
        let mut b = Vec::new();
        put_varint32(&mut b, 99);
        let err = VersionEdit::decode(&b).unwrap_err();
        assert!(err.reason.contains("unknown tag 99"), "{err}");
    }

    #[test]
    fn repeated_scalar_field_is_rejected() {
        let e = VersionEdit { last_sequence: Some(5), ..Default::default() };
        let mut b = e.encoded();
        b.extend(e.encoded());
        assert!(VersionEdit::decode(&b).unwrap_err().reason.contains("twice"));
    }

    #[test]
    fn vlog_statistics_fields_round_trip_with_their_tags() {
        let e = VersionEdit {
            vlog_added: vec![(7, 1 << 40), (9, 0)],
            vlog_garbage: vec![(7, 300)],
            vlog_files_deleted: vec![3, 4],
            ..Default::default()
        };
        let enc = e.encoded();
        assert_eq!(enc[0], 11, "vlog_added is tag 11");
        assert_eq!(VersionEdit::decode(&enc), Ok(e));
        assert_eq!(VersionEdit::decode(&[12, 7, 0x80]).unwrap_err().reason, "truncated vlog garbage");
        assert_eq!(VersionEdit::decode(&[13]).unwrap_err().reason, "truncated deleted vlog file");
    }

    #[test]
    fn short_key_in_added_file_is_rejected() {
        let f = FileMeta { smallest: b"abc".to_vec(), largest: vec![0; 8], ..Default::default() };
        let e = VersionEdit { added_files: vec![(0, f)], ..Default::default() };
        assert!(VersionEdit::decode(&e.encoded()).unwrap_err().reason.contains("smallest key"));
    }
}
