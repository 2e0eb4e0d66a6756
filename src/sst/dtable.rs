//! DTables (LWC-tree §III-A): a table file that light-weight compaction appended sorted
//! segments to instead of rewriting it. Each segment is a complete table as `TableBuilder`
//! writes one (data blocks, filter, properties, index, footer), laid after the previous one;
//! after the newest segment a *tail* (segment directory + DTable footer) lists where every
//! segment ends. A plain table is a DTable of one segment with no tail. Byte diagram in
//! `docs/format/sst.md`.
//!
//! Crash safety rests on the manifest: it records the file's length, and a reader finds the
//! footer at that length. Bytes past it (an append the manifest never recorded) are ignored.
//! Nothing is ever truncated: the next append writes after them (the directory allows gaps
//! between segments), because a manifest write that *failed* may still have become durable
//! and name them; they are dead space until the table is rewritten.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::{RandomAccessFile, Vfs, WritableFile};
use crate::util::coding::{put_fixed32, put_fixed64, put_varint64, Reader};
use crate::util::crc;

use super::compression::TYPE_NONE;
use super::format::{block_trailer, read_block, BlockHandle, FOOTER_LEN, FORMAT_VERSION};
use super::table_builder::{TableBuilder, TableOptions, TableSummary};

/// "wisckeyD" read as a little-endian u64: the last 8 bytes of a table with segments appended.
pub const DTABLE_MAGIC: u64 = 0x7769_7363_6b65_7944;

/// Most segments one file may list (a damaged count cannot make a reader allocate more).
pub const MAX_SEGMENTS: usize = 1 << 16;

/// The magic number in the last 8 bytes of a footer.
pub fn footer_magic(footer: &[u8; FOOTER_LEN]) -> u64 {
    let mut m = [0u8; 8];
    m.copy_from_slice(&footer[56..64]);
    u64::from_le_bytes(m)
}

/// The tail written after the newest segment: the directory block (`count ‖ end…` as varint64s,
/// with a block trailer) and the 64-byte DTable footer pointing at it. `tail_offset` is where
/// the tail starts (the newest segment's end).
pub fn encode_tail(segment_ends: &[u64], tail_offset: u64) -> Vec<u8> {
    let mut dir = Vec::with_capacity(10 * (segment_ends.len() + 1));
    put_varint64(&mut dir, segment_ends.len() as u64);
    for &end in segment_ends {
        put_varint64(&mut dir, end);
    }
    let handle = BlockHandle { offset: tail_offset, size: dir.len() as u64 };
    let trailer = block_trailer(&dir, TYPE_NONE);
    dir.extend_from_slice(&trailer);
    let mut footer = Vec::with_capacity(FOOTER_LEN);
    put_fixed64(&mut footer, handle.offset);
    put_fixed64(&mut footer, handle.size);
    put_fixed32(&mut footer, segment_ends.len() as u32);
    footer.resize(48, 0); // reserved
    put_fixed32(&mut footer, FORMAT_VERSION);
    let c = crc(&footer);
    put_fixed32(&mut footer, c);
    put_fixed64(&mut footer, DTABLE_MAGIC);
    dir.extend_from_slice(&footer);
    dir
}

/// Where each segment of a `file_size`-byte DTable ends, oldest first, read from its tail
/// (`footer`: its last 64 bytes). Every end must lie after the previous one and before the
/// directory; the checks name the file and offset of what is wrong.
pub fn read_segment_ends(file: &dyn RandomAccessFile, footer: &[u8; FOOTER_LEN], file_size: u64) -> Result<Vec<u64>> {
    let at = file_size.saturating_sub(FOOTER_LEN as u64);
    let path = file.path();
    let corrupt = |off: u64, why: &str| Error::corruption(path, off, format!("DTable tail: {why}"));
    let field32 = |i: usize| u32::from_le_bytes([footer[i], footer[i + 1], footer[i + 2], footer[i + 3]]);
    if crc(&footer[..52]) != field32(52) {
        return Err(corrupt(at + 52, "footer checksum mismatch"));
    }
    if field32(48) != FORMAT_VERSION {
        return Err(corrupt(at + 48, &format!("unsupported table format version {}", field32(48))));
    }
    let mut r = Reader::new(&footer[..16]);
    let dir = match (r.fixed64(), r.fixed64()) {
        (Some(offset), Some(size)) => BlockHandle { offset, size },
        _ => return Err(corrupt(at, "footer too short")),
    };
    let raw = read_block(file, dir, at)?;
    let ends = decode_directory(&raw).ok_or_else(|| corrupt(dir.offset, "malformed segment directory"))?;
    let count = field32(16) as usize;
    let ordered = ends.windows(2).all(|w| w[0] + FOOTER_LEN as u64 <= w[1]);
    let first_ok = ends.first().is_some_and(|&e| e >= FOOTER_LEN as u64);
    let inside = ends.last().is_some_and(|&e| e <= dir.offset);
    if ends.len() != count || !ordered || !first_ok || !inside {
        return Err(corrupt(dir.offset, &format!("segment ends {ends:?} (count {count}) do not fit the file")));
    }
    Ok(ends)
}

/// The directory's segment ends; `None` when it is truncated, overlong or lists too many.
pub fn decode_directory(raw: &[u8]) -> Option<Vec<u64>> {
    let mut r = Reader::new(raw);
    let n = usize::try_from(r.varint64()?).ok().filter(|&n| n <= MAX_SEGMENTS)?;
    let ends = (0..n).map(|_| r.varint64()).collect::<Option<Vec<u64>>>()?;
    r.is_empty().then_some(ends)
}

/// Appends one segment to an existing table file, then the tail listing every segment.
pub struct SegmentWriter {
    builder: TableBuilder,
    ends: Vec<u64>,
}

/// What an append left: the new segment's own summary and the file as a whole.
#[derive(Debug, Clone)]
pub struct AppendSummary {
    pub segment: TableSummary,
    /// Length of the file with the new tail: what the manifest must record.
    pub file_size: u64,
    pub segments: usize,
}

impl SegmentWriter {
    /// Open table `path` to append a segment after its first `recorded_size` bytes (what the
    /// manifest records). A longer file ends in an append this process never installed; the
    /// new segment goes after it (see the module comment). `prior_ends`: where the existing
    /// segments of the table at `recorded_size` end (`Table::segment_ends`).
    pub fn open(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        recorded_size: u64,
        prior_ends: Vec<u64>,
        opts: TableOptions,
    ) -> Result<Self> {
        let file: Box<dyn WritableFile> = vfs.open_append(path)?;
        if file.len() < recorded_size {
            let why = format!("table file is {} bytes, the manifest records {recorded_size}", file.len());
            return Err(Error::corruption(path, file.len(), why));
        }
        Ok(SegmentWriter { builder: TableBuilder::new(file, opts), ends: prior_ends })
    }

    /// Add an entry; keys ascend as in `TableBuilder::add`.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        self.builder.add(ikey, value)
    }

    /// Store `tombstones` in the segment (`TableBuilder::set_range_tombstones`).
    pub fn set_range_tombstones(&mut self, tombstones: Vec<crate::range_del::RangeTombstone>) {
        self.builder.set_range_tombstones(tombstones);
    }

    /// Finish the segment, write the tail and sync the file once (tests and fuzz targets;
    /// compactions sync their appends together, `finish_unsynced`).
    #[cfg(any(test, feature = "test-util"))]
    pub fn finish(self) -> Result<AppendSummary> {
        let (summary, mut file) = self.finish_unsynced()?;
        file.sync()?;
        Ok(summary)
    }

    /// `finish` without the sync, handing the file back: a compaction appending to many tables
    /// syncs them together at its end (`fs::SyncBatch`).
    pub fn finish_unsynced(mut self) -> Result<(AppendSummary, Box<dyn WritableFile>)> {
        let (segment, mut file) = self.builder.finish_unsynced()?;
        self.ends.push(segment.file_size);
        let tail = encode_tail(&self.ends, segment.file_size);
        file.append(&tail)?;
        let file_size = segment.file_size + tail.len() as u64;
        Ok((AppendSummary { file_size, segments: self.ends.len(), segment }, file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::fs::MemFs;
    use crate::key::{compare_internal, make_internal_key, parse_internal_key, seek_key, ValueKind, MAX_SEQ};
    use crate::sst::filter::FilterHash;
    use crate::sst::table_reader::tests::{scan_backward, scan_forward};
    use crate::sst::Table;

    /// One version of a key: sequence, kind, value.
    type Version = (u64, ValueKind, Vec<u8>);

    /// Internal key → value, in internal-key order (the model of a table's entries).
    #[derive(Default, Clone)]
    struct Entries(Vec<(Vec<u8>, Vec<u8>)>);

    impl Entries {
        fn sorted(mut self) -> Self {
            self.0.sort_by(|a, b| compare_internal(&a.0, &b.0));
            self
        }
    }

    thread_local! {
        /// The block size `opts` gives: 256 B, or a page for tests run on aligned blocks too.
        static BLOCK_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(256) };
    }

    fn opts() -> TableOptions {
        TableOptions { block_size_bytes: BLOCK_BYTES.get(), restart_interval: 4, ..TableOptions::default() }
    }

    /// Run `f` on tables of 256 B blocks, then of page-aligned 4 KiB blocks (each segment's
    /// first block then starts on the page after the previous segment's tail).
    fn on_both_block_layouts(f: impl Fn()) {
        for bytes in [256, 4096] {
            BLOCK_BYTES.set(bytes);
            f();
        }
        BLOCK_BYTES.set(256);
    }

    /// Segment `n`: keys `lo..hi` (step `step`) at sequence `base + i`, every tenth a deletion
    /// from segment 1 on.
    fn segment(n: u64, lo: u32, hi: u32, step: usize, base: u64) -> Entries {
        let e = (lo..hi).step_by(step).map(|i| {
            let kind = if n > 0 && i % 10 == 0 { ValueKind::Deletion } else { ValueKind::Value };
            let value = if kind == ValueKind::Deletion { Vec::new() } else { format!("v{n}-{i}").into_bytes() };
            (make_internal_key(format!("k{i:03}").as_bytes(), base + u64::from(i), kind), value)
        });
        Entries(e.collect()).sorted()
    }

    fn write_plain(vfs: &Arc<dyn Vfs>, path: &Path, e: &Entries) -> u64 {
        let mut b = TableBuilder::new(vfs.create(path).unwrap(), opts());
        for (k, v) in &e.0 {
            b.add(k, v).unwrap();
        }
        b.finish().unwrap().file_size
    }

    fn append(vfs: &Arc<dyn Vfs>, path: &Path, size: u64, e: &Entries) -> AppendSummary {
        let ends = open(vfs, path, size).segment_ends();
        let mut w = SegmentWriter::open(vfs, path, size, ends, opts()).unwrap();
        for (k, v) in &e.0 {
            w.add(k, v).unwrap();
        }
        w.finish().unwrap()
    }

    fn open(vfs: &Arc<dyn Vfs>, path: &Path, size: u64) -> Arc<Table> {
        Arc::new(Table::open(vfs.open_read(path).unwrap(), 1, size, None).unwrap())
    }

    /// The table holds exactly `model`'s entries: forward, backward, and a point lookup of
    /// every key at the newest sequence and at sequence 150.
    fn check(t: &Arc<Table>, model: &Entries) {
        assert_eq!(scan_forward(t).unwrap(), model.0, "forward");
        assert_eq!(scan_backward(t).unwrap(), model.0, "backward");
        let mut newest: BTreeMap<Vec<u8>, Vec<Version>> = BTreeMap::new();
        for (k, v) in &model.0 {
            let p = parse_internal_key(k).unwrap();
            newest.entry(p.user_key.to_vec()).or_default().push((p.seq, p.kind, v.clone()));
        }
        for (uk, versions) in &newest {
            for at in [MAX_SEQ, 150] {
                let want = versions.iter().find(|(seq, _, _)| *seq <= at).map(|(_, kind, v)| (*kind, v.clone()));
                let found = t
                    .get(&seek_key(uk, at), crate::sst::BlockReads::filling(false))
                    .unwrap()
                    .map(|(kind, v)| (kind, v.to_vec()));
                assert_eq!(found, want, "{} at {at}", String::from_utf8_lossy(uk));
                // The DB's path: each segment's filter asked once, with the key hashed once.
                let probe = t
                    .get_filtered(&seek_key(uk, at), FilterHash::of(uk), crate::sst::BlockReads::filling(false))
                    .unwrap();
                assert!(probe.passed, "{}: a segment holds it, so its filter lets it in", String::from_utf8_lossy(uk));
                assert_eq!(
                    probe.found.map(|(kind, v)| (kind, v.to_vec())),
                    want,
                    "get_filtered {}",
                    String::from_utf8_lossy(uk)
                );
            }
        }
    }

    #[test]
    fn appended_segments_read_newest_first_and_every_length_stays_its_own_table() {
        on_both_block_layouts(appended_segments_read_newest_first);
    }

    fn appended_segments_read_newest_first() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let path = Path::new("/t/000001.sst");
        vfs.create_dir_all(Path::new("/t")).unwrap();
        let s0 = segment(0, 0, 100, 1, 1);
        let size0 = write_plain(&vfs, path, &s0);
        let s1 = segment(1, 0, 100, 2, 200);
        let a1 = append(&vfs, path, size0, &s1);
        assert_eq!(a1.segments, 2);
        let s2 = segment(2, 50, 150, 1, 400);
        let a2 = append(&vfs, path, a1.file_size, &s2);
        assert_eq!(a2.segments, 3);
        let all = |parts: &[&Entries]| Entries(parts.iter().flat_map(|e| e.0.clone()).collect()).sorted();
        check(&open(&vfs, path, size0), &s0);
        check(&open(&vfs, path, a1.file_size), &all(&[&s0, &s1]));
        let t2 = open(&vfs, path, a2.file_size);
        assert_eq!(t2.num_segments(), 3);
        assert_eq!(t2.segment_ends().len(), 3);
        check(&t2, &all(&[&s0, &s1, &s2]));
    }

    /// Seeks into a DTable (one search of its merged fences, then each segment at its entry,
    /// from blocks made before or through its index) land where a merge of the model does
    /// and step on from there, through real mapped files and `MemFs`, blocks cold and warm.
    #[test]
    fn seeks_into_a_dtable_land_and_step_like_a_sorted_model() {
        on_both_block_layouts(seeks_into_a_dtable_land);
    }

    fn seeks_into_a_dtable_land() {
        use crate::fs::PosixFs;
        use crate::internal_iter::InternalIterator;
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let fss: [(Arc<dyn Vfs>, bool); 2] = [(Arc::new(PosixFs::new()), true), (Arc::new(MemFs::new()), false)];
        for (vfs, mapped) in fss {
            let path = dir.path().join(format!("00000{}.sst", u8::from(mapped)));
            vfs.create_dir_all(dir.path()).unwrap();
            let parts = [segment(0, 0, 900, 1, 1), segment(1, 0, 900, 3, 1000), segment(2, 300, 600, 1, 2000)];
            let mut size = write_plain(&vfs, &path, &parts[0]);
            for p in &parts[1..] {
                size = append(&vfs, &path, size, p).file_size;
            }
            let model = Entries(parts.iter().flat_map(|e| e.0.clone()).collect()).sorted().0;
            let file = if mapped { vfs.open_read_mapped(&path).unwrap() } else { vfs.open_read(&path).unwrap() };
            let t = Arc::new(Table::open(file, 1, size, None).unwrap());
            assert!(t.cascade_bytes() > 0, "three segments with fences have merged fences");
            let mut rng = rand::rngs::StdRng::seed_from_u64(9);
            for round in 0..4000 {
                let uk = format!("k{:03}", rng.gen_range(0..1000));
                let seq = [MAX_SEQ, 150, 1500, 2400][round % 4];
                let target = seek_key(uk.as_bytes(), seq);
                // Reads that fill the caches keep the blocks they make; the others use them.
                let mut it = t.iter(crate::sst::BlockReads::filling(round % 3 != 0));
                it.seek(&target).unwrap();
                let mut at = model.partition_point(|(k, _)| compare_internal(k, &target).is_lt());
                for _ in 0..6 {
                    assert_eq!(it.valid().then(|| it.key().to_vec()), model.get(at).map(|e| e.0.clone()), "{uk}@{seq}");
                    if at == model.len() {
                        break;
                    }
                    if round % 2 == 0 {
                        it.next().unwrap();
                        at += 1;
                    } else if at == 0 {
                        break;
                    } else {
                        it.prev().unwrap();
                        at -= 1;
                    }
                }
            }
        }
    }

    #[test]
    fn bytes_past_the_recorded_length_are_ignored_and_the_next_append_goes_after_them() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let path = Path::new("/t/000001.sst");
        vfs.create_dir_all(Path::new("/t")).unwrap();
        let s0 = segment(0, 0, 60, 1, 1);
        let size0 = write_plain(&vfs, path, &s0);
        // An append this process never installed: the file is longer than recorded. (Its
        // manifest write failed — and may still have become durable, naming this length.)
        let s_orphan = segment(1, 0, 60, 3, 200);
        let orphan = append(&vfs, path, size0, &s_orphan);
        assert_eq!(vfs.file_size(path).unwrap(), orphan.file_size);
        check(&open(&vfs, path, size0), &s0);
        let s1 = segment(1, 10, 30, 1, 300);
        let a1 = append(&vfs, path, size0, &s1);
        assert_eq!(a1.segments, 2, "the orphan segment is not listed");
        assert!(a1.file_size > orphan.file_size, "written after the orphan, which stays");
        check(&open(&vfs, path, a1.file_size), &Entries([s0.0.clone(), s1.0].concat()).sorted());
        check(&open(&vfs, path, orphan.file_size), &Entries([s0.0, s_orphan.0].concat()).sorted());
    }

    #[test]
    fn a_damaged_tail_or_a_file_shorter_than_recorded_is_reported_as_corruption() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let path = Path::new("/t/000001.sst");
        vfs.create_dir_all(Path::new("/t")).unwrap();
        let size0 = write_plain(&vfs, path, &segment(0, 0, 40, 1, 1));
        let a1 = append(&vfs, path, size0, &segment(1, 0, 40, 2, 100));
        let mut bytes = vec![0u8; a1.file_size as usize];
        vfs.open_read(path).unwrap().read_exact_at(0, &mut bytes).unwrap();
        // Every byte of the tail (directory and footer) is covered by a checksum.
        for i in size0 as usize..bytes.len() {
            if i >= a1.segment.file_size as usize {
                let mut bad = bytes.clone();
                bad[i] ^= 0x40;
                let mut f = vfs.create(path).unwrap();
                f.append(&bad).unwrap();
                let r = Table::open(vfs.open_read(path).unwrap(), 1, a1.file_size, None);
                assert!(r.as_ref().is_err_and(|e| e.is_corruption()), "byte {i}: {:?}", r.map(|_| ()));
            }
        }
        let mut f = vfs.create(path).unwrap();
        f.append(&bytes[..size0 as usize]).unwrap();
        let e = SegmentWriter::open(&vfs, path, a1.file_size, vec![size0], opts()).err().unwrap();
        assert!(e.is_corruption() && e.to_string().contains("manifest records"), "{e}");
    }

    #[test]
    fn a_directory_round_trips_and_a_truncated_or_overlong_one_is_refused() {
        let tail = encode_tail(&[100, 250, 900], 900);
        let dir_len = tail.len() - FOOTER_LEN - super::super::format::BLOCK_TRAILER_LEN;
        assert_eq!(decode_directory(&tail[..dir_len]), Some(vec![100, 250, 900]));
        assert_eq!(decode_directory(&tail[..dir_len - 1]), None);
        let mut long = tail[..dir_len].to_vec();
        long.push(0);
        assert_eq!(decode_directory(&long), None);
        let footer: [u8; FOOTER_LEN] = tail[tail.len() - FOOTER_LEN..].try_into().unwrap();
        assert_eq!(footer_magic(&footer), DTABLE_MAGIC);
    }
}
