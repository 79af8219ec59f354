//! Runs blocking backend calls off the async workers, with a bound on how
//! many run at once (sized for the disk, not one thread per request).

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
}
