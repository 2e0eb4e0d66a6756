//! Read-only inspection of a database's files, for diagnostic tools such as `wisckey dump`:
//! what a table ([`TableFile`]), a manifest ([`ManifestFile`]) or a log file ([`LogFile`])
//! holds, and the shape of a database's tree beside its merge policy's model ([`Tree`]).
//!
//! **A diagnostic API.** Everything here is decoded by the engine's own decoders (the ones
//! `Db` reads with) and reported as plain structs; nothing here writes, locks or repairs
//! anything, so it may be pointed at the files of a database another process has open. The
//! structs are `#[non_exhaustive]`, so fields can be added as the formats grow, but what they
//! report is the on-disk format as it is (`docs/format/*.md`), which may change between
//! releases: use it to look, not to build on.
//!
//! **Damage.** Every decoder checks what it reads: damaged bytes come back as
//! [`Error::Corruption`](crate::Error) naming the file and the offset, never as a
//! panic. Where the format allows, reading goes on after damage (the next data block of a
//! table, the next intact manifest record, the next valid log record, found as recovery
//! finds it), so a tool can show everything that is still readable and then the damage.
//!
//! ```no_run
//! use wisckey::inspect::{EntryValue, TableFile};
//!
//! let table = TableFile::open("/tmp/db/000012.sst")?;
//! for i in 0..table.num_segments() {
//!     let segment = table.segment(i)?;
//!     for block in segment.index() {
//!         for entry in segment.read_block(block.block)?.entries() {
//!             let entry = entry?;
//!             if let EntryValue::Pointer(p) = entry.value {
//!                 println!("{:?}@{} -> {}:{}:{}", entry.key.user_key, entry.key.seq, p.file, p.offset, p.op_len);
//!             }
//!         }
//!     }
//! }
//! # Ok::<(), wisckey::Error>(())
//! ```

mod log;
mod manifest;
mod table;
mod tree;

use std::path::Path;
use std::sync::Arc;

pub use self::log::{LogEntry, LogFile, LogOp, LogOps, RecordGroup};
pub use manifest::{ManifestEdit, ManifestFile, ManifestRecord, ManifestRecords, TableRecord};
pub use table::{
    BlockCompression, BlockRange, DTableTail, DataBlock, Entries, Entry, EntryValue, FilterInfo, Footer, IndexEntry,
    Properties, RangeTombstone, TableFile, TableSegment,
};
pub use tree::{policy_knobs, recorded_options, LevelTarget, Tree, TreeLevel, TreeModel, TreeRun, VlogFile};

use crate::error::{Error, Result};
use crate::fs::{PosixFs, RandomAccessFile, Vfs};

/// What an entry or key says about its user key: the low byte of an internal key's trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// The key was deleted (a tombstone).
    Deletion,
    /// A value stored inline, in the tree.
    Value,
    /// A value pointer: the value lives in a value-log or cold file.
    Pointer,
    /// A merge operand, stored inline.
    Merge,
    /// A value stored inline with an expiry time (`expires_at_ms | value`).
    ExpiringValue,
    /// A value pointer with an expiry time (`expires_at_ms | pointer`).
    ExpiringPointer,
    /// Any other byte. Index separators and seek keys carry 255, which sorts before every
    /// entry of the same user key and sequence number.
    Other(u8),
}

impl KeyKind {
    fn from_byte(b: u8) -> KeyKind {
        match crate::key::ValueKind::from_u8(b) {
            Some(crate::key::ValueKind::Deletion) => KeyKind::Deletion,
            Some(crate::key::ValueKind::Value) => KeyKind::Value,
            Some(crate::key::ValueKind::Pointer) => KeyKind::Pointer,
            Some(crate::key::ValueKind::Merge) => KeyKind::Merge,
            Some(crate::key::ValueKind::ExpiringValue) => KeyKind::ExpiringValue,
            Some(crate::key::ValueKind::ExpiringPointer) => KeyKind::ExpiringPointer,
            None => KeyKind::Other(b),
        }
    }
}

/// An internal key taken apart: user key, sequence number and kind
/// (`user_key ‖ u64 LE (seq << 8 | kind)`, `docs/format/sst.md`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct InternalKey {
    /// The user's key.
    pub user_key: Vec<u8>,
    /// Sequence number of the write (56 bits).
    pub seq: u64,
    /// What the entry says about the key.
    pub kind: KeyKind,
}

impl InternalKey {
    /// Split encoded internal-key bytes; `None` when they are shorter than the 8-byte trailer.
    pub fn parse(bytes: &[u8]) -> Option<InternalKey> {
        let at = bytes.len().checked_sub(crate::key::TRAILER_LEN)?;
        let mut trailer = [0u8; 8];
        trailer.copy_from_slice(&bytes[at..]);
        let trailer = u64::from_le_bytes(trailer);
        Some(InternalKey { user_key: bytes[..at].to_vec(), seq: trailer >> 8, kind: KeyKind::from_byte(trailer as u8) })
    }
}

/// A position in the log: a log file's number and a byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[non_exhaustive]
pub struct LogPosition {
    /// Number of the log file (`NNNNNN.vlog`).
    pub file: u64,
    /// Byte offset in that file.
    pub offset: u64,
}

impl From<crate::log::LogPos> for LogPosition {
    fn from(p: crate::log::LogPos) -> Self {
        LogPosition { file: p.file, offset: p.offset }
    }
}

/// Where a separated value lives: the address and checksum a table entry of kind
/// [`KeyKind::Pointer`] (or a GC pointer put in the log) holds instead of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ValuePointer {
    /// Number of the value file (`NNNNNN.vlog` or `NNNNNN.cold`).
    pub file: u64,
    /// Offset of the op holding the value in that file (the op, not the value).
    pub offset: u64,
    /// Bytes of the whole op (`kind | klen | vlen | key | value`).
    pub op_len: u32,
    /// crc32c of the value.
    pub value_crc: u32,
}

impl ValuePointer {
    /// Decode an encoded pointer (`docs/format/vlog.md`); `None` when the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<ValuePointer> {
        crate::vlog::ValuePointer::decode(bytes).map(|p| ValuePointer {
            file: p.file,
            offset: p.offset,
            op_len: p.op_len,
            value_crc: p.value_crc,
        })
    }
}

/// Open `path` for reads through the real filesystem, with its size; an empty file is
/// refused here (every file kind inspected holds at least one record or footer).
fn open_nonempty(path: &Path, what: &str) -> Result<(Arc<dyn RandomAccessFile>, u64)> {
    let file = PosixFs::new().open_read(path)?;
    let size = file.len()?;
    if size == 0 {
        return Err(Error::corruption(path, 0, format!("the file is empty (0 bytes): no {what} in it")));
    }
    Ok((file, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, seek_key, ValueKind, MAX_SEQ};

    #[test]
    fn internal_keys_come_apart_into_user_key_sequence_and_kind() {
        let k = InternalKey::parse(&make_internal_key(b"apple", 42, ValueKind::Pointer)).expect("a key");
        assert_eq!((k.user_key.as_slice(), k.seq, k.kind), (&b"apple"[..], 42, KeyKind::Pointer));
        let sep = InternalKey::parse(&seek_key(b"b", MAX_SEQ)).expect("a separator");
        assert_eq!((sep.seq, sep.kind), (MAX_SEQ, KeyKind::Other(255)));
        assert_eq!(InternalKey::parse(b"short"), None, "shorter than a trailer");
    }

    #[test]
    fn value_pointers_decode_as_the_tree_stores_them() {
        let p = crate::vlog::ValuePointer { file: 7, offset: 1 << 33, op_len: 4100, value_crc: 0xdead_beef };
        let got = ValuePointer::decode(&p.encoded()).expect("a pointer");
        assert_eq!((got.file, got.offset, got.op_len, got.value_crc), (7, 1 << 33, 4100, 0xdead_beef));
        assert_eq!(ValuePointer::decode(&p.encoded()[..5]), None);
    }
}
