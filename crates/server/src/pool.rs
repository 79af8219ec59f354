//! Runs blocking backend calls off the async workers, with a bound on how
//! many run at once (sized for the disk, not one thread per request).
//!
//! Calls that the kernel serializes anyway, such as buffered writes to one
//! file (the inode lock), go through [`Pool::run_serial`]: one pool thread
//! runs them back to back instead of many threads blocking on that lock,
//! each woken in turn.

use bytes::BytesMut;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

#[derive(Clone)]
pub struct Pool {
    slots: Arc<Semaphore>,
    serial: Arc<Serial>,
}

type Job = Box<dyn FnOnce() + Send>;
/// Per key: the jobs waiting behind the one running.
type Queues = HashMap<u64, VecDeque<Job>>;

/// Keys with a drainer, and the jobs waiting behind the running one.
struct Serial {
    shards: Box<[Mutex<Queues>]>,
    hasher: std::collections::hash_map::RandomState,
}

const SERIAL_SHARDS: usize = 16;
/// Jobs a drainer runs before it lets other calls have its pool slot.
const DRAIN_TURN: usize = 64;

impl Pool {
    pub fn new(max_concurrent: usize) -> Self {
        Pool {
            slots: Arc::new(Semaphore::new(max_concurrent.max(1))),
            serial: Arc::new(Serial {
                shards: (0..SERIAL_SHARDS)
                    .map(|_| Mutex::new(HashMap::new()))
                    .collect(),
                hasher: Default::default(),
            }),
        }
    }

    /// Runs `f` on the pool after every earlier call with the same `key`
    /// (which must not wait for a later one). One pool thread drains a
    /// key's queue, so a burst of writes to one file costs one hand-off,
    /// and no threads pile up on the file's lock.
    pub async fn run_serial<T: Send + 'static>(
        &self,
        key: impl Hash,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let key = self.serial.hasher.hash_one(key);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        });
        let start = {
            let mut q = self.serial.shard(key).lock().unwrap();
            match q.get_mut(&key) {
                Some(waiting) => {
                    waiting.push_back(job);
                    None
                }
                None => {
                    q.insert(key, VecDeque::new());
                    Some(job)
                }
            }
        };
        if let Some(job) = start {
            // Started on its own task: the drainer must run even if this
            // caller goes away, or the jobs queued behind it would wait forever.
            tokio::spawn(drain(self.clone(), key, job));
        }
        match rx.await {
            Ok(Ok(v)) => v,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => unreachable!("a serial job is always run"),
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

impl Serial {
    fn shard(&self, key: u64) -> &Mutex<Queues> {
        &self.shards[(key >> 32) as usize % SERIAL_SHARDS]
    }

    /// The next job of `key`, or None after removing the key (the next
    /// caller then starts a new drainer).
    fn next(&self, key: u64) -> Option<Job> {
        let mut q = self.shard(key).lock().unwrap();
        let next = q.get_mut(&key).and_then(|w| w.pop_front());
        if next.is_none() {
            q.remove(&key);
        }
        next
    }
}

/// Runs `first`, then `key`'s queued jobs, a turn at a time on a pool slot.
async fn drain(pool: Pool, key: u64, first: Job) {
    let mut job = Some(first);
    while let Some(first) = job.take() {
        let _slot = pool
            .slots
            .acquire()
            .await
            .expect("pool semaphore is never closed");
        let serial = pool.serial.clone();
        // Jobs catch their own panics, so the drainer itself cannot fail.
        job = tokio::task::spawn_blocking(move || {
            first();
            for _ in 1..DRAIN_TURN {
                match serial.next(key) {
                    Some(j) => j(),
                    None => return None,
                }
            }
            serial.next(key)
        })
        .await
        .expect("serial jobs catch their panics");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_key_runs_in_order_one_at_a_time() {
        let pool = Pool::new(8);
        let log = Arc::new(Mutex::new(Vec::new()));
        let busy = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for i in 0..500 {
            let (pool, log, busy) = (pool.clone(), log.clone(), busy.clone());
            // Each call is queued before the next starts: submission order.
            let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
            calls.push(tokio::spawn(async move {
                let f = pool.run_serial("file", move || {
                    assert_eq!(busy.fetch_add(1, Ordering::SeqCst), 0, "two at once");
                    log.lock().unwrap().push(i);
                    busy.fetch_sub(1, Ordering::SeqCst);
                    i * 2
                });
                tokio::pin!(f);
                // Poll once so the job is queued, then say so.
                let r = tokio::select! {
                    biased;
                    r = &mut f => Some(r),
                    _ = std::future::ready(()) => None,
                };
                let _ = queued_tx.send(());
                match r {
                    Some(r) => r,
                    None => f.await,
                }
            }));
            queued_rx.await.unwrap();
        }
        for (i, c) in calls.into_iter().enumerate() {
            assert_eq!(c.await.unwrap(), i * 2);
        }
        assert_eq!(*log.lock().unwrap(), (0..500).collect::<Vec<_>>());
        // Nothing left behind: the next call starts a fresh drainer.
        assert!(pool
            .serial
            .shards
            .iter()
            .all(|s| s.lock().unwrap().is_empty()));
        assert_eq!(pool.run_serial("file", || 7).await, 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn different_keys_run_side_by_side() {
        let pool = Pool::new(8);
        let (a, b) = (pool.clone(), pool.clone());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // A's job waits for B's: it only finishes if both run at once.
        let ja = tokio::spawn(async move {
            a.run_serial(1u32, move || {
                rx.recv_timeout(Duration::from_secs(10)).is_ok()
            })
            .await
        });
        let jb = tokio::spawn(async move { b.run_serial(2u32, move || tx.send(()).is_ok()).await });
        assert!(jb.await.unwrap());
        assert!(ja.await.unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_reaches_its_caller_and_the_queue_goes_on() {
        let pool = Pool::new(2);
        let p = pool.clone();
        let bad = tokio::spawn(async move { p.run_serial("k", || panic!("boom")).await });
        assert!(bad.await.is_err());
        assert_eq!(pool.run_serial("k", || 1).await, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_callers_many_keys_nothing_lost() {
        let pool = Pool::new(3);
        let done = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for i in 0..2000usize {
            let (pool, done) = (pool.clone(), done.clone());
            calls.push(tokio::spawn(async move {
                pool.run_serial(i % 7, move || {
                    done.fetch_add(1, Ordering::SeqCst);
                })
                .await
            }));
        }
        for c in calls {
            c.await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 2000);
    }
}
