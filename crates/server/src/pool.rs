//! Runs blocking backend calls off the async workers, with a bound on how
//! many run at once (sized for the disk, not one thread per request).

use bytes::BytesMut;
use std::sync::Arc;
use tokio::sync::Semaphore;

#[derive(Clone)]
pub struct Pool {
    slots: Arc<Semaphore>,
}

impl Pool {
    pub fn new(max_concurrent: usize) -> Self {
        Pool {
            slots: Arc::new(Semaphore::new(max_concurrent.max(1))),
        }
    }

    /// Runs `f` on tokio's blocking threads once a slot is free.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let _slot = self
            .slots
            .acquire()
            .await
            .expect("pool semaphore is never closed");
        match tokio::task::spawn_blocking(f).await {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Runs a read-only backend call inline on this async worker if the
    /// backend can finish it without waiting for a disk (see `vfs::nowait`),
    /// else on the pool. The hand-off to the pool and back costs more than a
    /// cached stat, lookup or read.
    pub async fn run_fast<T: Send + 'static>(
        &self,
        b: &dyn vfs::Backend,
        f: impl Fn() -> T + Send + 'static,
    ) -> T {
        if b.supports_nowait() {
            if let Some(v) = vfs::nowait::attempt(&f) {
                return v;
            }
        }
        self.run(f).await
    }

    /// Like [`Pool::run_fast`] for a call that appends to `out` (READ data
    /// read straight into the reply): an inline attempt that would block is
    /// undone, and the buffer moves to the pool and back.
    pub async fn run_fast_into<T: Send + 'static>(
        &self,
        b: &dyn vfs::Backend,
        out: &mut BytesMut,
        f: impl Fn(&mut BytesMut) -> T + Send + 'static,
    ) -> T {
        let start = out.len();
        if b.supports_nowait() {
            if let Some(v) = vfs::nowait::attempt(|| f(out)) {
                return v;
            }
            out.truncate(start);
        }
        let mut buf = std::mem::take(out);
        let (buf, v) = self
            .run(move || {
                let v = f(&mut buf);
                (buf, v)
            })
            .await;
        *out = buf;
        v
    }
}
