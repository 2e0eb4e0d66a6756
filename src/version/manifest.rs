//! The manifest file (a log of checksummed `VersionEdit` records) and the `CURRENT` file
//! that names the live manifest. Byte layout and crash analysis: `docs/format/manifest.md`.

use std::path::Path;

use super::edit::VersionEdit;
use crate::error::{Error, Result};
use crate::filename::{current_file_name, manifest_file_name, parse_file_name, temp_file_name, FileKind};
use crate::fs::{Vfs, WritableFile};
use crate::util::coding::{decode_fixed32, put_fixed32};
use crate::util::{crc, crc_extend};

/// Bytes before each payload: crc32c (u32 LE) then payload length (u32 LE).
pub const RECORD_HEADER_LEN: usize = 8;

/// `CURRENT` is a short name; anything larger is not a file we wrote.
const MAX_CURRENT_BYTES: u64 = 4096;

/// Frame `payload` as one manifest record: `[crc32c(len ‖ payload)][len][payload]`.
/// Payloads over 4 GiB cannot be framed.
pub fn encode_record(payload: &[u8]) -> Result<Vec<u8>> {
    let len = u32::try_from(payload.len())
        .map_err(|_| Error::invalid(format!("manifest record of {} bytes exceeds 4 GiB", payload.len())))?;
    let len_bytes = len.to_le_bytes();
    let mut rec = Vec::with_capacity(RECORD_HEADER_LEN + payload.len());
    put_fixed32(&mut rec, crc_extend(crc(&len_bytes), payload));
    rec.extend_from_slice(&len_bytes);
    rec.extend_from_slice(payload);
    Ok(rec)
}

/// Appends records to a manifest file; every record is synced before `add_record` returns.
pub struct ManifestWriter {
    file: Box<dyn WritableFile>,
}

impl ManifestWriter {
    /// Create (truncate) `MANIFEST-<number>` in `dir`.
    pub fn create(vfs: &dyn Vfs, dir: &Path, number: u64) -> Result<Self> {
        let path = manifest_file_name(dir, number);
        let file = vfs.create(&path)?;
        Ok(ManifestWriter { file })
    }

    /// Append one encoded edit as a record and `fsync` the file.
    pub fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        let rec = encode_record(payload)?;
        self.file.append(&rec)?;
        self.file.sync()
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.file.len()
    }
}

/// Everything a manifest file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestContents {
    /// The edits in file order, each with the offset of its record.
    pub edits: Vec<(u64, VersionEdit)>,
    /// Length of the intact prefix (offset just past the last good record).
    pub valid_bytes: u64,
    /// Bytes of a torn last record that were ignored (0 when the file ends cleanly).
    pub dropped_bytes: u64,
}

/// Read every edit of the manifest at `path`.
///
/// A damaged record followed by no intact record is a torn tail (a crash while the last
/// record was being appended): reading stops there and `dropped_bytes` says how much was
/// ignored. A damaged record with an intact record after it means bytes were lost from the
/// middle: that, and a checksummed record whose edit does not decode, is `Corruption`.
pub fn read_manifest(vfs: &dyn Vfs, path: &Path) -> Result<ManifestContents> {
    let buf = read_whole_file(vfs, path)?;
    let mut edits = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        match record_at(&buf, pos) {
            Ok((payload, next)) => {
                let edit =
                    VersionEdit::decode(payload).map_err(|e| Error::corruption(path, pos as u64, e.to_string()))?;
                edits.push((pos as u64, edit));
                pos = next;
            }
            Err(reason) => {
                if let Some(good) = (pos + 1..buf.len()).find(|&at| record_at(&buf, at).is_ok()) {
                    let msg =
                        format!("damaged manifest record ({reason}) followed by an intact record at offset {good}");
                    return Err(Error::corruption(path, pos as u64, msg));
                }
                break;
            }
        }
    }
    Ok(ManifestContents { edits, valid_bytes: pos as u64, dropped_bytes: (buf.len() - pos) as u64 })
}

/// The payload of an intact record starting at `pos` and the offset after it, or why not.
pub(crate) fn record_at(buf: &[u8], pos: usize) -> std::result::Result<(&[u8], usize), &'static str> {
    let header = buf.get(pos..pos + RECORD_HEADER_LEN).ok_or("file ends inside a record header")?;
    let expected_crc = decode_fixed32(header);
    let len_bytes = &header[4..8];
    let len = decode_fixed32(len_bytes) as usize;
    let start = pos + RECORD_HEADER_LEN;
    let payload = start
        .checked_add(len)
        .and_then(|end| buf.get(start..end))
        .ok_or("record length runs past the end of the file")?;
    if crc_extend(crc(len_bytes), payload) != expected_crc {
        return Err("checksum mismatch");
    }
    Ok((payload, start + len))
}

pub(crate) fn read_whole_file(vfs: &dyn Vfs, path: &Path) -> Result<Vec<u8>> {
    let file = vfs.open_read(path)?;
    let len = file.len()?;
    let len = usize::try_from(len)
        .map_err(|_| Error::corruption(path, 0, format!("file of {len} bytes is too large to read")))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(0, &mut buf)?;
    Ok(buf)
}

/// Point `CURRENT` at `MANIFEST-<manifest_number>` atomically: write `<number>.dbtmp`,
/// sync it, rename it over `CURRENT`, sync the directory.
pub fn set_current(vfs: &dyn Vfs, dir: &Path, manifest_number: u64) -> Result<()> {
    let tmp = temp_file_name(dir, manifest_number);
    let result = write_and_rename(vfs, dir, &tmp, manifest_number);
    if result.is_err() {
        // Best effort: a leftover temp file is harmless (the DB sweeps `.dbtmp` files).
        let _ = vfs.remove(&tmp);
    }
    result
}

fn write_and_rename(vfs: &dyn Vfs, dir: &Path, tmp: &Path, manifest_number: u64) -> Result<()> {
    let name = format!("MANIFEST-{manifest_number:06}\n");
    let mut f = vfs.create(tmp)?;
    f.append(name.as_bytes())?;
    f.sync()?;
    drop(f);
    vfs.rename(tmp, &current_file_name(dir))?;
    vfs.sync_dir(dir)
}

/// The manifest number `CURRENT` names. No `CURRENT` → `NotADatabase`; a `CURRENT` that is
/// not one manifest name plus `\n` → `Corruption`.
pub fn read_current(vfs: &dyn Vfs, dir: &Path) -> Result<u64> {
    let path = current_file_name(dir);
    if !vfs.exists(&path) {
        return Err(Error::NotADatabase { path: dir.to_path_buf(), reason: "there is no CURRENT file".into() });
    }
    let size = vfs.file_size(&path)?;
    if size > MAX_CURRENT_BYTES {
        return Err(Error::corruption(&path, 0, format!("CURRENT is {size} bytes, too long for a manifest name")));
    }
    let buf = read_whole_file(vfs, &path)?;
    let name = buf
        .strip_suffix(b"\n")
        .and_then(|n| std::str::from_utf8(n).ok())
        .ok_or_else(|| Error::corruption(&path, 0, "CURRENT is not a file name ending in a newline"))?;
    match parse_file_name(name) {
        Some((FileKind::Manifest, n)) => Ok(n),
        _ => Err(Error::corruption(&path, 0, format!("CURRENT names {name:?}, which is not a manifest"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::log::LogPos;

    fn edit(seq: u64) -> VersionEdit {
        VersionEdit {
            last_sequence: Some(seq),
            log_head: Some(LogPos { file: 3, offset: seq * 10 }),
            ..Default::default()
        }
    }

    /// A manifest with three edits; returns the fs, path and the record offsets.
    fn three_records() -> (MemFs, std::path::PathBuf, Vec<u64>) {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let mut w = ManifestWriter::create(&fs, dir, 7).unwrap();
        let mut offsets = Vec::new();
        for seq in 1..=3 {
            offsets.push(w.len());
            w.add_record(&edit(seq).encoded()).unwrap();
        }
        (fs, manifest_file_name(dir, 7), offsets)
    }

    fn rewrite(fs: &MemFs, path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
        let mut bytes = read_whole_file(fs, path).unwrap();
        f(&mut bytes);
        let mut w = fs.create(path).unwrap();
        w.append(&bytes).unwrap();
        w.sync().unwrap();
    }

    #[test]
    fn intact_manifest_returns_every_edit_in_order() {
        let (fs, path, offsets) = three_records();
        let c = read_manifest(&fs, &path).unwrap();
        let got: Vec<_> = c.edits.iter().map(|(o, e)| (*o, e.clone())).collect();
        assert_eq!(got, offsets.iter().zip(1..=3).map(|(o, s)| (*o, edit(s))).collect::<Vec<_>>());
        assert_eq!(c.dropped_bytes, 0);
    }

    #[test]
    fn torn_last_record_is_dropped_and_counted() {
        let (fs, path, offsets) = three_records();
        let intact = read_whole_file(&fs, &path).unwrap();
        for cut in [offsets[2] + 3, offsets[2] + 9, intact.len() as u64 - 1] {
            rewrite(&fs, &path, |b| *b = intact[..cut as usize].to_vec());
            let c = read_manifest(&fs, &path).unwrap();
            assert_eq!(c.edits.len(), 2, "cut at {cut}");
            assert_eq!((c.valid_bytes, c.dropped_bytes), (offsets[2], cut - offsets[2]));
        }
    }

    #[test]
    fn zero_filled_tail_after_crash_is_a_torn_tail() {
        let (fs, path, _) = three_records();
        let full = fs.file_size(&path).unwrap();
        rewrite(&fs, &path, |b| b.extend(std::iter::repeat_n(0, 100)));
        let c = read_manifest(&fs, &path).unwrap();
        assert_eq!((c.edits.len(), c.valid_bytes, c.dropped_bytes), (3, full, 100));
    }

    #[test]
    fn flipped_byte_in_a_middle_record_is_corruption_naming_file_and_offset() {
        let (fs, path, offsets) = three_records();
        rewrite(&fs, &path, |b| b[offsets[1] as usize + 10] ^= 0x40);
        match read_manifest(&fs, &path) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!((file, offset), (path, offsets[1]))
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn flipped_length_in_a_middle_record_is_not_mistaken_for_a_torn_tail() {
        let (fs, path, offsets) = three_records();
        rewrite(&fs, &path, |b| b[offsets[0] as usize + 6] = 0x7f);
        let err = read_manifest(&fs, &path).unwrap_err();
        assert!(matches!(err, Error::Corruption { offset: 0, .. }), "{err}");
    }

    #[test]
    fn checksummed_garbage_edit_is_corruption() {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let mut w = ManifestWriter::create(&fs, dir, 1).unwrap();
        w.add_record(&[0x63, 0x01]).unwrap();
        let err = read_manifest(&fs, &manifest_file_name(dir, 1)).unwrap_err();
        assert!(err.to_string().contains("unknown tag 99"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn random_manifest_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let (fs, path, _) = three_records();
            rewrite(&fs, &path, |b| *b = bytes);
            let _ = read_manifest(&fs, &path);
        }

        #[test]
        fn a_flipped_byte_yields_corruption_or_a_prefix_never_other_edits(at in 0usize..10_000, bit in 0u8..8) {
            let (fs, path, _) = three_records();
            let original = read_manifest(&fs, &path).unwrap().edits;
            let at = at % fs.file_size(&path).unwrap() as usize;
            rewrite(&fs, &path, |b| b[at] ^= 1 << bit);
            match read_manifest(&fs, &path) {
                Ok(c) => {
                    proptest::prop_assert!(c.edits.len() < original.len());
                    proptest::prop_assert_eq!(&c.edits[..], &original[..c.edits.len()]);
                }
                Err(e) => proptest::prop_assert!(e.is_corruption(), "{}", e),
            }
        }
    }

    #[test]
    fn current_round_trips_and_rejects_garbage() {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        assert!(matches!(read_current(&fs, dir), Err(Error::NotADatabase { .. })));
        set_current(&fs, dir, 12).unwrap();
        assert_eq!(read_current(&fs, dir).unwrap(), 12);
        assert!(!fs.exists(&temp_file_name(dir, 12)));
        for bad in [&b"MANIFEST-000012"[..], b"000012.sst\n", b"\xff\n", b""] {
            rewrite(&fs, &current_file_name(dir), |b| *b = bad.to_vec());
            assert!(read_current(&fs, dir).unwrap_err().is_corruption(), "{bad:?}");
        }
    }
}
