//! An RPC client over one TCP connection with many calls in flight: calls are
//! written under a lock, replies are matched to callers by xid by a reader task.

use crate::msg::{self, ReplyStatus};
use crate::record::{self, Assembler, DEFAULT_MAX_RECORD};
use bytes::{BufMut, Bytes, BytesMut};
use proto::rpc::{AuthsysParms, OpaqueAuth, AUTH_NONE, AUTH_SYS};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use xdr::{Decoder, Pack};

pub mod gss;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed before the reply")]
    Closed,
    #[error("undecodable reply: {0}")]
    Xdr(#[from] xdr::Error),
    #[error("RPC error: {0:?}")]
    Rpc(ReplyStatus),
    #[error("RPCSEC_GSS: {0}")]
    Gss(String),
}

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Bytes>>>>;

pub struct RpcClient {
    wr: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Pending,
    next_xid: AtomicU32,
    cred: OpaqueAuth,
    local: SocketAddr,
    reader: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("local", &self.local)
            .finish()
    }
}

impl Drop for RpcClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// An AUTH_SYS credential.
pub fn auth_sys(uid: u32, gid: u32, gids: &[u32], machine: &str) -> OpaqueAuth {
    let p = AuthsysParms {
        stamp: 0,
        machinename: Bytes::copy_from_slice(machine.as_bytes()),
        uid,
        gid,
        gids: gids.to_vec(),
    };
    OpaqueAuth {
        flavor: AUTH_SYS,
        body: xdr::to_bytes(&p),
    }
}

pub fn auth_none() -> OpaqueAuth {
    OpaqueAuth {
        flavor: AUTH_NONE,
        body: Bytes::new(),
    }
}

impl RpcClient {
    pub async fn connect(addr: SocketAddr, cred: OpaqueAuth) -> Result<Self, ClientError> {
        Self::from_stream(TcpStream::connect(addr).await?, cred)
    }

    /// A client over a connection made elsewhere (e.g. from a chosen
    /// source address).
    pub fn from_stream(s: TcpStream, cred: OpaqueAuth) -> Result<Self, ClientError> {
        s.set_nodelay(true)?;
        let local = s.local_addr()?;
        let (mut rd, wr) = s.into_split();
        let pending: Pending = Arc::default();
        let p2 = pending.clone();
        let reader = tokio::spawn(async move {
            let mut asm = Assembler::new(DEFAULT_MAX_RECORD * 2);
            let mut buf = BytesMut::with_capacity(1 << 20);
            loop {
                while let Ok(Some(rec)) = asm.next(&mut buf) {
                    if rec.len() >= 4 {
                        let xid = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
                        if let Some(tx) = p2.lock().unwrap().remove(&xid) {
                            let _ = tx.send(rec);
                        }
                    }
                }
                if buf.capacity() - buf.len() < 64 << 10 {
                    buf.reserve(1 << 20);
                }
                match rd.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            // Dropping the senders wakes every waiting caller with Closed.
            p2.lock().unwrap().clear();
        });
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        Ok(RpcClient {
            wr: tokio::sync::Mutex::new(wr),
            pending,
            next_xid: AtomicU32::new(seed),
            cred,
            local,
            reader,
        })
    }

    /// This end's address: the address the peer sees us at (an NSM
    /// notification names the server by it).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A fresh xid for a call built by the caller (see [`RpcClient::send_record`]).
    pub fn next_xid(&self) -> u32 {
        self.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a whole record (record mark included) whose call has `xid`;
    /// returns the reply record.
    pub async fn send_record(&self, xid: u32, rec: &[u8]) -> Result<Bytes, ClientError> {
        self.write_record(xid, rec).await?.await
    }

    /// Writes a whole call record; the returned future is its reply. For
    /// callers that must keep the order in which their calls leave.
    pub async fn write_record(
        &self,
        xid: u32,
        rec: &[u8],
    ) -> Result<impl std::future::Future<Output = Result<Bytes, ClientError>>, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(xid, tx);
        if let Err(e) = self.wr.lock().await.write_all(rec).await {
            self.pending.lock().unwrap().remove(&xid);
            return Err(e.into());
        }
        Ok(async move { rx.await.map_err(|_| ClientError::Closed) })
    }

    /// Sends a call whose arguments are already encoded; returns the whole reply record.
    pub async fn call_raw(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &[u8],
    ) -> Result<Bytes, ClientError> {
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let mut out = BytesMut::with_capacity(64 + args.len());
        record::begin(&mut out);
        msg::encode_call(xid, prog, vers, proc_, &self.cred, &mut out);
        out.put_slice(args);
        record::finish(&mut out);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(xid, tx);
        if let Err(e) = self.wr.lock().await.write_all(&out).await {
            self.pending.lock().unwrap().remove(&xid);
            return Err(e.into());
        }
        rx.await.map_err(|_| ClientError::Closed)
    }

    /// Calls a procedure and returns a decoder positioned at its results.
    pub async fn call<A: Pack>(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &A,
    ) -> Result<Decoder, ClientError> {
        let mut a = BytesMut::new();
        args.pack(&mut a);
        let rec = self.call_raw(prog, vers, proc_, &a).await?;
        let (_, st, d) = msg::decode_reply(rec)?;
        match st {
            ReplyStatus::Success => Ok(d),
            other => Err(ClientError::Rpc(other)),
        }
    }

    /// Whether the connection ended (the peer closed it or it broke):
    /// calls on it can only fail.
    pub fn is_closed(&self) -> bool {
        self.reader.is_finished()
    }

    /// Sends raw bytes on the connection (for tests of malformed input).
    pub async fn send_bytes(&self, b: &[u8]) -> Result<(), ClientError> {
        Ok(self.wr.lock().await.write_all(b).await?)
    }
}

/// A connection the server opened to a client's callback service (the
/// NFSv4.0 callback path, RFC 7530 §3.3.5): calls carry the credential
/// given per call, not the client's own.
impl crate::callback::CallbackConn for RpcClient {
    fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        cred: OpaqueAuth,
        args: Bytes,
        timeout: std::time::Duration,
    ) -> crate::callback::CallFuture<'_> {
        use crate::callback::CallbackError;
        Box::pin(async move {
            let xid = self.next_xid();
            let mut out = BytesMut::with_capacity(128 + args.len());
            record::begin(&mut out);
            msg::encode_call_head(xid, prog, vers, proc_, &cred, &mut out);
            msg::none_verf().pack(&mut out);
            out.put_slice(&args);
            record::finish(&mut out);
            let r = tokio::time::timeout(timeout, self.send_record(xid, &out)).await;
            // A reply that never came leaves no waiter behind.
            self.pending.lock().unwrap().remove(&xid);
            match r {
                Err(_) => Err(CallbackError::Timeout),
                Ok(Err(_)) => Err(CallbackError::Closed),
                Ok(Ok(rec)) => crate::callback::results(rec),
            }
        })
    }

    fn is_open(&self) -> bool {
        !self.is_closed()
    }

    fn conn_id(&self) -> u64 {
        0
    }
}
