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
