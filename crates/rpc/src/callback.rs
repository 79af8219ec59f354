//! Calls from the server to a client over the client's own connection:
//! the NFSv4.1 back channel (RFC 8881 §2.10.3.1), where a connection
//! carries calls both ways and a REPLY arriving at the server answers a
//! call the server sent.
//!
//! The pipeline stays pure: it hands a REPLY record back as
//! [`Decision::CallbackReply`](crate::pipeline::Decision) and the driver
//! gives it to the connection's [`ConnCallbacks`], which wakes the caller
//! waiting on that xid. A program reaches the connection through
//! [`CallContext::back`](crate::context::CallContext), as a [`CallbackConn`],
//! a trait so that tests can put a scripted client behind it.

use crate::msg::{self, ReplyStatus};
use crate::record;
use bytes::{BufMut, Bytes, BytesMut};
use proto::rpc::OpaqueAuth;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use xdr::Pack;

/// A boxed future borrowing the connection handle.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Bytes, CallbackError>> + Send + 'a>>;

/// Why a call to the client got no results.
#[derive(Debug, PartialEq, Eq)]
pub enum CallbackError {
    /// The connection is gone (or closed before the reply came).
    Closed,
    /// No reply within the time given.
    Timeout,
    /// The client answered with an RPC-level error.
    Refused(ReplyStatus),
    /// The reply could not be decoded.
    Garbage,
}

impl std::fmt::Display for CallbackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallbackError::Closed => f.write_str("connection closed"),
            CallbackError::Timeout => f.write_str("no reply in time"),
            CallbackError::Refused(s) => write!(f, "refused: {s:?}"),
            CallbackError::Garbage => f.write_str("undecodable reply"),
        }
    }
}

/// A connection the server can call the client on.
pub trait CallbackConn: Send + Sync + std::fmt::Debug {
    /// Sends a call with these encoded arguments and waits at most
    /// `timeout` for the reply; returns the procedure's results.
    fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        cred: OpaqueAuth,
        args: Bytes,
        timeout: Duration,
    ) -> CallFuture<'_>;
    /// Whether calls can still be sent (the connection is open).
    fn is_open(&self) -> bool;
    /// The connection's id (as in [`CallContext::conn_id`](crate::context::CallContext)).
    fn conn_id(&self) -> u64;
}

/// The calls the server has outstanding on one connection, and the way to
/// send more: made by the driver per connection, closed when it ends.
#[derive(Debug)]
pub struct ConnCallbacks {
    /// Taken out when the connection ends, so the writer can finish even
    /// while sessions still hold this handle.
    tx: Mutex<Option<mpsc::Sender<crate::zero_copy::Out>>>,
    pending: Mutex<HashMap<u32, oneshot::Sender<Bytes>>>,
    next_xid: AtomicU32,
    conn_id: u64,
    /// The connection's count of bytes waiting to be written, which
    /// calls join too (the writer takes them off as it writes).
    backlog: Option<Arc<crate::transport::Backlog>>,
}

impl ConnCallbacks {
    /// `tx` is the connection's writer queue; `xid_seed` starts the xids.
    pub fn new(tx: mpsc::Sender<crate::zero_copy::Out>, conn_id: u64, xid_seed: u32) -> Self {
        ConnCallbacks {
            tx: Mutex::new(Some(tx)),
            pending: Mutex::new(HashMap::new()),
            next_xid: AtomicU32::new(xid_seed),
            conn_id,
            backlog: None,
        }
    }

    /// Counts the calls sent in the connection's write backlog.
    pub(crate) fn with_backlog(mut self, b: Arc<crate::transport::Backlog>) -> Self {
        self.backlog = Some(b);
        self
    }

    /// Hands a REPLY record to the call waiting for `xid`; false when no
    /// call waits for it (a late or stray reply, to be dropped).
    pub fn deliver(&self, xid: u32, record: Bytes) -> bool {
        match self.pending.lock().unwrap().remove(&xid) {
            Some(w) => {
                let _ = w.send(record);
                true
            }
            None => false,
        }
    }

    /// The connection ended: no more calls; every waiting caller gets
    /// [`CallbackError::Closed`].
    pub fn close(&self) {
        self.tx.lock().unwrap().take();
        self.pending.lock().unwrap().clear();
    }

    /// Calls waiting for their reply.
    pub fn outstanding(&self) -> usize {
        self.pending.lock().unwrap().len()
    }

    async fn send_call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        cred: OpaqueAuth,
        args: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, CallbackError> {
        let Some(tx) = self.tx.lock().unwrap().clone() else {
            return Err(CallbackError::Closed);
        };
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let mut out = BytesMut::with_capacity(128 + args.len());
        record::begin(&mut out);
        msg::encode_call_head(xid, prog, vers, proc_, &cred, &mut out);
        msg::none_verf().pack(&mut out);
        out.put_slice(&args);
        record::finish(&mut out);
        let (wake, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(xid, wake);
        let out = out.freeze();
        let len = out.len();
        let sent = tokio::time::timeout(timeout, async {
            tx.send(out.into())
                .await
                .map_err(|_| CallbackError::Closed)?;
            if let Some(b) = &self.backlog {
                b.add(len);
            }
            drop(tx);
            rx.await.map_err(|_| CallbackError::Closed)
        })
        .await;
        let rec = match sent {
            Ok(r) => r,
            Err(_) => Err(CallbackError::Timeout),
        };
        if rec.is_err() {
            self.pending.lock().unwrap().remove(&xid);
        }
        results(rec?)
    }
}

/// The results of a REPLY record, or why there are none.
pub fn results(rec: Bytes) -> Result<Bytes, CallbackError> {
    let (_, st, d) = msg::decode_reply(rec).map_err(|_| CallbackError::Garbage)?;
    match st {
        ReplyStatus::Success => Ok(d.rest()),
        other => Err(CallbackError::Refused(other)),
    }
}

impl CallbackConn for ConnCallbacks {
    fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        cred: OpaqueAuth,
        args: Bytes,
        timeout: Duration,
    ) -> CallFuture<'_> {
        Box::pin(self.send_call(prog, vers, proc_, cred, args, timeout))
    }

    fn is_open(&self) -> bool {
        self.tx.lock().unwrap().is_some()
    }

    fn conn_id(&self) -> u64 {
        self.conn_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_record(xid: u32, results: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        msg::success_header(xid, &mut out);
        out.put_slice(results);
        out.freeze()
    }

    /// Procedure 0 of program 1 version 1, AUTH_NONE, no arguments.
    async fn null_call(cb: &ConnCallbacks, timeout: Duration) -> Result<Bytes, CallbackError> {
        cb.call(1, 1, 0, msg::none_verf(), Bytes::new(), timeout)
            .await
    }

    #[tokio::test]
    async fn a_call_is_sent_and_its_reply_routed_by_xid() {
        let (tx, mut rx) = mpsc::channel(4);
        let cb = std::sync::Arc::new(ConnCallbacks::new(tx, 7, 100));
        let c2 = cb.clone();
        let call = tokio::spawn(async move {
            c2.call(
                0x4000_0000,
                1,
                1,
                msg::none_verf(),
                Bytes::from_static(&[0, 0, 0, 5]),
                Duration::from_secs(5),
            )
            .await
        });
        let rec: Bytes = rx.recv().await.unwrap().into_bytes().unwrap();
        let c = msg::decode_call(rec.slice(4..)).unwrap();
        assert_eq!((c.xid, c.prog, c.vers, c.proc_), (100, 0x4000_0000, 1, 1));
        assert_eq!(cb.outstanding(), 1);
        assert!(
            !cb.deliver(99, reply_record(99, &[])),
            "no call waits for 99"
        );
        assert!(cb.deliver(100, reply_record(100, &[0, 0, 0, 9])));
        assert_eq!(
            call.await.unwrap().unwrap(),
            Bytes::from_static(&[0, 0, 0, 9])
        );
        assert_eq!(cb.outstanding(), 0);
    }

    // Real time, not a paused clock: tokio's test-util feature would reach
    // the tarn binary the integration tests start (features unify under
    // `cargo test --workspace`) and put every clock read behind a lock.
    #[tokio::test]
    async fn unanswered_calls_time_out_and_closing_wakes_callers() {
        let (tx, _rx) = mpsc::channel(4);
        let cb = std::sync::Arc::new(ConnCallbacks::new(tx, 1, 0));
        let r = null_call(&cb, Duration::from_millis(50)).await;
        assert_eq!(r, Err(CallbackError::Timeout));
        assert_eq!(cb.outstanding(), 0, "a timed-out call leaves no waiter");
        let c2 = cb.clone();
        let call = tokio::spawn(async move { null_call(&c2, Duration::from_secs(60)).await });
        tokio::task::yield_now().await;
        cb.close();
        assert_eq!(call.await.unwrap(), Err(CallbackError::Closed));
        assert!(!cb.is_open());
        let r = null_call(&cb, Duration::from_secs(1)).await;
        assert_eq!(r, Err(CallbackError::Closed));
    }
}
