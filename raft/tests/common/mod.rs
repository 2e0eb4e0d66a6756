//! What the store's test files share.

/// Run `f` to its end on this thread: the store's futures never wait on anything but their
/// own synchronous calls (the append callback is sent before the append returns).
pub fn run_fut<T>(f: impl std::future::Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

/// Send snapshot data from `from` (a served snapshot) into `to` (what `begin_receiving_snapshot`
/// returned) as openraft's chunked transport does: the length from a seek to the end, then
/// chunks of at most `chunk` bytes read at their offsets and written in order.
#[allow(dead_code)] // Not every test file sends snapshots.
pub async fn send_snapshot(
    from: &mut wisckey_raft::SnapshotFile,
    to: &mut wisckey_raft::SnapshotFile,
    chunk: usize,
) -> std::io::Result<()> {
    use std::io::SeekFrom;
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
    let end = from.seek(SeekFrom::End(0)).await?;
    let mut offset = 0;
    while offset < end {
        from.seek(SeekFrom::Start(offset)).await?;
        let mut buf = Vec::with_capacity(chunk);
        while buf.len() < chunk && from.read_buf(&mut buf).await? > 0 {}
        to.write_all(&buf).await?;
        offset += buf.len() as u64;
    }
    to.shutdown().await
}
