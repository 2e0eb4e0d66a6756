//! [`SnapshotFile`], the snapshot data openraft moves between nodes (`TypeConfig::SnapshotData`):
//! a snapshot stream (module `stream`) in a file of the node's database directory, read by
//! openraft chunk by chunk on the sending node and written chunk by chunk on the receiving
//! one. Its one job is to put tokio's `AsyncRead`/`AsyncWrite`/`AsyncSeek`, which openraft
//! 0.9 asks of snapshot data, over a file of the database's [`wisckey::fs::Vfs`].
//!
//! Why not `tokio::fs::File`: every file the store touches goes through the database's VFS,
//! so a store on an in-memory or fault-injecting VFS (the crash tests) has no directory on
//! the real filesystem to put a tokio file in; and the store's calls are synchronous, as its
//! database calls are (a chunk is read or written in the poll that asks for it, which never
//! returns `Pending`). Writing a served stream out of its checkpoint, the one step whose time
//! grows with the state, runs through [`off_the_runtime`].

use std::io::{self, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use wisckey::fs::{RandomAccessFile, Vfs, WritableFile};

use crate::snapshots::Pending;

/// Snapshot data: a snapshot stream being served (written out of its checkpoint when first
/// read or sought) or received, or none (what a build returns: openraft keeps only a built
/// snapshot's metadata).
pub struct SnapshotFile {
    kind: Kind,
    /// Where the next read or write starts.
    pos: u64,
}

enum Kind {
    Empty,
    /// A stream to send, not written yet: written into a file at the first read or seek.
    Pending(Box<Pending>),
    /// A stream to send (or install), opened for reading; the file may be unlinked already.
    Serving(Arc<dyn RandomAccessFile>),
    Receiving(Receiving),
    /// Bytes held in memory, read and written in place (stores that keep a snapshot as one
    /// blob: the RocksDB comparison build). The wisckey store neither makes nor installs one.
    Memory(Vec<u8>),
}

/// A stream being received into `raft-snapshots/incoming-*`, appended to.
pub(crate) struct Receiving {
    pub(crate) file: Box<dyn WritableFile>,
    pub(crate) path: PathBuf,
    vfs: Arc<dyn Vfs>,
    /// Removed when dropped unless an install took charge of it: a stream openraft abandons
    /// (the leader started another) leaves nothing behind.
    remove_on_drop: bool,
    /// Synced and checked whole when its last chunk arrived (`SnapshotFile::poll_shutdown`),
    /// and not written since: the install's own check would read it all again.
    pub(crate) verified: bool,
}

impl Receiving {
    /// A new, empty file at `path`.
    pub(crate) fn create(vfs: &Arc<dyn Vfs>, path: &Path) -> wisckey::Result<Receiving> {
        drop(vfs.create(path)?);
        // Appending (`O_APPEND`), so a write after a cut (a chunk sent again) lands at the cut.
        let file = vfs.open_append(path)?;
        Ok(Receiving { file, path: path.to_owned(), vfs: vfs.clone(), remove_on_drop: true, verified: false })
    }

    /// The file's bytes so far, synced and opened for reading.
    pub(crate) fn readable(&mut self) -> wisckey::Result<Arc<dyn RandomAccessFile>> {
        self.file.sync()?;
        self.vfs.open_read(&self.path)
    }

    /// The install has named the file in its intent record: it is no longer ours to remove.
    pub(crate) fn keep(&mut self) {
        self.remove_on_drop = false;
    }
}

impl Drop for Receiving {
    fn drop(&mut self) {
        if self.remove_on_drop {
            if let Err(e) = self.vfs.remove(&self.path) {
                tracing::warn!(path = ?self.path, error = %e, "an abandoned incoming snapshot could not be removed; the next open removes it");
            }
        }
    }
}

/// What install finds in the data openraft hands it.
pub(crate) enum Received {
    /// Nothing: a build's empty data.
    Empty,
    /// A stream to be read (a served file handed over whole, as openraft's test suite does).
    Readable(Arc<dyn RandomAccessFile>),
    /// A stream received into a file of this node.
    File(Receiving),
}

impl SnapshotFile {
    /// No data.
    pub(crate) fn empty() -> SnapshotFile {
        SnapshotFile { kind: Kind::Empty, pos: 0 }
    }

    /// A stream to send, written out of a checkpoint when first read or sought.
    pub(crate) fn pending(pending: Pending) -> SnapshotFile {
        SnapshotFile { kind: Kind::Pending(Box::new(pending)), pos: 0 }
    }

    /// Snapshot data held in memory: `bytes` to send, or an empty buffer to receive into (for
    /// a store that keeps a snapshot as one blob; the wisckey store streams files instead).
    #[must_use]
    pub fn from_bytes(bytes: Vec<u8>) -> SnapshotFile {
        SnapshotFile { kind: Kind::Memory(bytes), pos: 0 }
    }

    /// The bytes of in-memory data (as received or as made), else the stream's bytes, whole
    /// (see `to_bytes`).
    pub fn into_bytes(mut self) -> wisckey::Result<Vec<u8>> {
        match std::mem::replace(&mut self.kind, Kind::Empty) {
            Kind::Memory(bytes) => Ok(bytes),
            kind => {
                self.kind = kind;
                self.to_bytes()
            }
        }
    }

    /// A pending stream written into its file (and its checkpoint let go); others unchanged.
    fn ready(&mut self) -> wisckey::Result<()> {
        if let Kind::Pending(pending) = &self.kind {
            self.kind = Kind::Serving(off_the_runtime(|| pending.stream())?);
        }
        Ok(())
    }

    /// A stream to send, read from `file`.
    pub(crate) fn serving(file: Arc<dyn RandomAccessFile>) -> SnapshotFile {
        SnapshotFile { kind: Kind::Serving(file), pos: 0 }
    }

    /// A new, empty file at `path` to receive a stream into.
    pub(crate) fn receiving(vfs: &Arc<dyn Vfs>, path: &Path) -> wisckey::Result<SnapshotFile> {
        Ok(SnapshotFile { kind: Kind::Receiving(Receiving::create(vfs, path)?), pos: 0 })
    }

    /// What install reads the snapshot from (a pending stream is written first).
    pub(crate) fn into_received(mut self) -> wisckey::Result<Received> {
        self.ready()?;
        Ok(match self.kind {
            Kind::Empty | Kind::Pending(_) => Received::Empty,
            Kind::Serving(file) => Received::Readable(file),
            Kind::Receiving(r) => Received::File(r),
            Kind::Memory(_) => {
                let e = io::Error::new(io::ErrorKind::Unsupported, "in-memory snapshot data is not a wisckey stream");
                return Err(wisckey::Error::io("install snapshot", "(memory)", e));
            }
        })
    }

    /// The stream's bytes, whole (for tests and tools: a real snapshot is read chunk by
    /// chunk); empty for a file being received.
    pub fn to_bytes(&mut self) -> wisckey::Result<Vec<u8>> {
        self.ready()?;
        match &self.kind {
            Kind::Serving(file) => Ok(file.read_new(0, file.len()? as usize)?.unwrap_or_default()),
            Kind::Memory(bytes) => Ok(bytes.clone()),
            Kind::Empty | Kind::Pending(_) | Kind::Receiving(_) => Ok(Vec::new()),
        }
    }

    /// The stream's pairs, checked and decoded whole (for tests and tools, as `to_bytes`);
    /// none for a file being received or no data.
    pub fn pairs(&mut self) -> wisckey::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.ready()?;
        let Kind::Serving(file) = &self.kind else { return Ok(Vec::new()) };
        let mut r = crate::stream::Reader::new(file.clone(), file.path())?;
        let (mut out, mut value) = (Vec::new(), Vec::new());
        while let Some(key) = r.next(Some(&mut value))? {
            out.push((key.to_vec(), std::mem::take(&mut value)));
        }
        Ok(out)
    }

    fn len(&mut self) -> io::Result<u64> {
        self.ready().map_err(io::Error::other)?;
        match &self.kind {
            Kind::Empty | Kind::Pending(_) => Ok(0),
            Kind::Serving(file) => file.len().map_err(io::Error::other),
            Kind::Receiving(r) => Ok(r.file.len()),
            Kind::Memory(bytes) => Ok(bytes.len() as u64),
        }
    }

    fn read_chunk(&mut self, buf: &mut ReadBuf<'_>) -> io::Result<()> {
        self.ready().map_err(io::Error::other)?;
        if let Kind::Memory(bytes) = &self.kind {
            let from = usize::try_from(self.pos).unwrap_or(usize::MAX).min(bytes.len());
            let n = buf.remaining().min(bytes.len() - from);
            buf.put_slice(&bytes[from..from + n]);
            self.pos += n as u64;
            return Ok(());
        }
        let Kind::Serving(file) = &self.kind else {
            return match self.kind {
                Kind::Empty => Ok(()),
                _ => Err(io::Error::new(io::ErrorKind::Unsupported, "a snapshot being received is not read back")),
            };
        };
        let n = file.read_at(self.pos, buf.initialize_unfilled()).map_err(io::Error::other)?;
        buf.advance(n);
        self.pos += n as u64;
        Ok(())
    }

    /// Write `data` at the current position: appended at the end, or after cutting the file
    /// there when openraft sent a chunk again (it then sends the rest of the stream from it).
    fn write_chunk(&mut self, data: &[u8]) -> io::Result<usize> {
        if let Kind::Memory(bytes) = &mut self.kind {
            let at = usize::try_from(self.pos).unwrap_or(usize::MAX);
            if at > bytes.len() {
                let gap = format!("in-memory snapshot: a write at {at} leaves a gap after its {} bytes", bytes.len());
                return Err(io::Error::new(io::ErrorKind::InvalidInput, gap));
            }
            bytes.truncate(at);
            bytes.extend_from_slice(data);
            self.pos += data.len() as u64;
            return Ok(data.len());
        }
        let Kind::Receiving(r) = &mut self.kind else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "only a snapshot being received is written"));
        };
        let len = r.file.len();
        if self.pos > len {
            let gap = format!("snapshot {:?}: a write at {} leaves a gap after its {len} bytes", r.path, self.pos);
            return Err(io::Error::new(io::ErrorKind::InvalidInput, gap));
        }
        if self.pos < len {
            r.file.truncate(self.pos).map_err(io::Error::other)?;
        }
        r.verified = false;
        r.file.append(data).map_err(io::Error::other)?;
        self.pos += data.len() as u64;
        Ok(data.len())
    }

    fn seek_to(&mut self, to: SeekFrom) -> io::Result<()> {
        let (base, delta) = match to {
            SeekFrom::Start(n) => (0, i128::from(n)),
            SeekFrom::End(d) => (self.len()?, i128::from(d)),
            SeekFrom::Current(d) => (self.pos, i128::from(d)),
        };
        let pos = i128::from(base) + delta;
        self.pos = u64::try_from(pos)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("a seek to {pos} in snapshot data")))?;
        Ok(())
    }
}

/// Run `f`, blocking work of a size that grows with the state (writing a snapshot stream out,
/// installing one), without holding up the runtime's other tasks: on a worker of a
/// multi-thread runtime (the server's), tokio first hands this worker's other tasks to
/// another thread (`block_in_place`), so heartbeats, appends and applies go on while a stream
/// of gigabytes is written. Elsewhere (tests polling by hand, a current-thread runtime) it
/// simply runs.
pub(crate) fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "server")]
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            return tokio::task::block_in_place(f);
        }
    }
    f()
}

impl AsyncRead for SnapshotFile {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().read_chunk(buf))
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(self.get_mut().write_chunk(data))
    }

    /// The bytes are in the file already; the install makes them durable (it syncs the file
    /// before it relies on it).
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// openraft shuts the data down when the last chunk has arrived: a received stream is
    /// checked whole here (`stream::verify`), so that one which does not check out fails the
    /// chunk's RPC on this node (the leader is told and sends it again) instead of reaching
    /// `install_snapshot`, whose storage error would stop openraft on this node.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().verify_received())
    }
}

/// Begins the message of a received stream that failed its check (`poll_shutdown`): the
/// server answers the chunk that ended it with 422 instead of openraft's fatal error.
pub(crate) const UNVERIFIED: &str = "received snapshot stream does not verify";

impl SnapshotFile {
    /// A received stream, synced and checked whole; anything else has nothing to check. Damage
    /// in the stream is `UNVERIFIED` (the leader sends it again); a failure of this node's
    /// disk is reported as what it is.
    fn verify_received(&mut self) -> io::Result<()> {
        let Kind::Receiving(r) = &mut self.kind else { return Ok(()) };
        let checked = r.readable().and_then(|file| off_the_runtime(|| crate::stream::verify(file, &r.path)));
        match checked {
            Ok(_) => {
                r.verified = true;
                Ok(())
            }
            Err(e) if e.is_corruption() => {
                tracing::warn!(path = ?r.path, error = %e, "a received snapshot stream does not verify");
                Err(io::Error::new(io::ErrorKind::InvalidData, format!("{UNVERIFIED}: {e}")))
            }
            Err(e) => {
                tracing::error!(path = ?r.path, error = %e, "a received snapshot stream could not be checked");
                Err(io::Error::other(e))
            }
        }
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        self.get_mut().seek_to(to)
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

impl std::fmt::Debug for SnapshotFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Empty => "empty".to_owned(),
            Kind::Pending(p) => format!("pending, from checkpoint {}", p.name()),
            Kind::Serving(file) => format!("serving {:?}", file.path()),
            Kind::Receiving(r) => format!("receiving {:?}", r.path),
            Kind::Memory(bytes) => format!("in memory, {} bytes", bytes.len()),
        };
        f.debug_struct("SnapshotFile").field("kind", &kind).field("pos", &self.pos).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    /// Run a future of this module to its end (they never return `Pending`).
    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())) {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("a snapshot file's I/O never waits"),
        }
    }

    #[test]
    fn in_memory_data_is_read_and_written_in_place_and_not_installed_as_a_stream() {
        let mut sent = SnapshotFile::from_bytes(b"abcdef".to_vec());
        let mut out = Vec::new();
        assert_eq!(run(sent.read_to_end(&mut out)).ok(), Some(6));
        assert_eq!(out, b"abcdef");
        let mut got = SnapshotFile::from_bytes(Vec::new());
        assert!(run(got.write_all(b"abcdef")).is_ok());
        // A chunk sent again after a seek back replaces the tail; a gap is refused.
        assert_eq!(run(got.seek(SeekFrom::Start(3))).ok(), Some(3));
        assert!(run(got.write_all(b"XYZW")).is_ok());
        assert!(run(got.seek(SeekFrom::Start(9))).is_ok() && run(got.write_all(b"gap")).is_err());
        assert_eq!(got.into_bytes().ok().as_deref(), Some(&b"abcXYZW"[..]));
        assert!(SnapshotFile::from_bytes(b"x".to_vec()).into_received().is_err(), "the wisckey store refuses it");
    }

    #[test]
    fn a_chunk_sent_again_replaces_the_tail_and_a_gap_is_refused() -> wisckey::Result<()> {
        let dir = tempfile::tempdir().map_err(|e| wisckey::Error::io("tempdir", "/tmp", e))?;
        let vfs: Arc<dyn Vfs> = Arc::new(wisckey::fs::PosixFs::new());
        let path = dir.path().join("incoming-1");
        let mut f = SnapshotFile::receiving(&vfs, &path)?;
        run(f.write_all(b"abcdef")).map_err(|e| wisckey::Error::io("write", &path, e))?;
        // openraft seeks back to a chunk's offset when it is sent again, then writes on.
        assert_eq!(run(f.seek(SeekFrom::Start(3))).map_err(|e| wisckey::Error::io("seek", &path, e))?, 3);
        run(f.write_all(b"XYZW")).map_err(|e| wisckey::Error::io("write", &path, e))?;
        assert_eq!(run(f.seek(SeekFrom::End(0))).map_err(|e| wisckey::Error::io("seek", &path, e))?, 7);
        assert!(run(f.seek(SeekFrom::Start(9))).is_ok() && run(f.write_all(b"gap")).is_err(), "a gap is refused");
        let Received::File(mut r) = f.into_received()? else { panic!("a received file") };
        let back = r.readable()?;
        assert_eq!(back.read_new(0, 7)?.as_deref(), Some(&b"abcXYZW"[..]));
        drop(r);
        assert!(!path.exists(), "a received file no install took is removed when dropped");
        Ok(())
    }

    #[test]
    fn a_served_file_reads_in_chunks_at_any_offset() -> wisckey::Result<()> {
        let fs = wisckey::fs::MemFs::new();
        fs.create_dir_all(Path::new("/s"))?;
        let mut w = fs.create(Path::new("/s/f"))?;
        w.append(b"0123456789")?;
        let mut f = SnapshotFile::serving(fs.open_read(Path::new("/s/f"))?);
        fs.remove(Path::new("/s/f"))?;
        let io = |e| wisckey::Error::io("read", "/s/f", e);
        assert_eq!(run(f.seek(SeekFrom::End(0))).map_err(io)?, 10);
        run(f.seek(SeekFrom::Start(4))).map_err(io)?;
        let mut buf = Vec::with_capacity(4);
        run(f.read_buf(&mut buf)).map_err(io)?;
        assert_eq!(buf, b"4567", "read after the file was unlinked");
        let mut rest = Vec::new();
        run(f.read_to_end(&mut rest)).map_err(io)?;
        assert_eq!(rest, b"89");
        Ok(())
    }
}
