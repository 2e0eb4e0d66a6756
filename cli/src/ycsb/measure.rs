//! Amplification measured from outside the engine, the same way for every engine: the
//! process's block-device I/O from `/proc/self/io` and the database directory's size on disk.

use std::path::Path;

/// The counters of `/proc/self/io` (all threads of this process, background ones included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProcIo {
    /// Bytes passed to read/pread (page-cache hits included; mmap reads not).
    pub rchar: u64,
    pub wchar: u64,
    /// Bytes this process caused to be read from the device.
    pub read_bytes: u64,
    /// Bytes this process caused to be written to the device (counted when pages are dirtied).
    pub write_bytes: u64,
    /// Dirty bytes that were never written because their file was truncated or deleted.
    pub cancelled_write_bytes: u64,
}

impl ProcIo {
    /// `None` where the kernel has no task I/O accounting.
    pub fn now() -> Option<ProcIo> {
        let text = std::fs::read_to_string("/proc/self/io").ok()?;
        Some(Self::parse(&text))
    }

    fn parse(text: &str) -> ProcIo {
        let mut io = ProcIo::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else { continue };
            let v = v.trim().parse().unwrap_or(0);
            match k.trim() {
                "rchar" => io.rchar = v,
                "wchar" => io.wchar = v,
                "read_bytes" => io.read_bytes = v,
                "write_bytes" => io.write_bytes = v,
                "cancelled_write_bytes" => io.cancelled_write_bytes = v,
                _ => {}
            }
        }
        io
    }

    /// Counts since `earlier`.
    pub fn since(&self, earlier: &ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self.cancelled_write_bytes.saturating_sub(earlier.cancelled_write_bytes),
        }
    }
}

/// Bytes the files under `dir` occupy on the device (`st_blocks * 512`, what `du` shows),
/// so sparse and hole-punched files count only what they hold.
pub fn disk_usage(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { disk_usage(&entry.path())? } else { meta.blocks() * 512 };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io_and_takes_differences() {
        let a = ProcIo::parse(
            "rchar: 10\nwchar: 20\nsyscr: 1\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n",
        );
        assert_eq!((a.rchar, a.wchar, a.read_bytes, a.write_bytes), (10, 20, 4096, 8192));
        let b = ProcIo { write_bytes: 10000, ..a };
        assert_eq!(b.since(&a).write_bytes, 10000 - 8192);
        assert_eq!(a.since(&b).write_bytes, 0);
    }

    #[test]
    fn disk_usage_counts_nested_files_by_blocks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/f"), vec![1u8; 10_000]).unwrap();
        // A sparse file: 1 MiB long, nothing written.
        std::fs::File::create(dir.path().join("sparse")).unwrap().set_len(1 << 20).unwrap();
        let du = disk_usage(dir.path()).unwrap();
        assert!((10_000..(1 << 20)).contains(&du), "{du}");
    }
}
