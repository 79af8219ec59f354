//! The RPC server transport: one reader task per connection, each call run
//! as its own task, replies written by one writer task per connection in the
//! order they finish (batched into vectored writes).

use crate::auth::Auth;
use crate::drc::{self, Drc, Lookup};
use crate::msg::{self, BadCall, CallContext, CallError};
use crate::record::{self, Assembler};
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use proto::rpc::AcceptStat;
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};
use xdr::Decoder;

/// An RPC program (or several): the server calls it for every well-formed call
/// to a program and version it claims, except NULL (procedure 0), which the
/// server answers itself.
pub trait Service: Send + Sync + 'static {
    /// The lowest and highest version of `prog` served, or None if `prog` is not served.
    fn versions(&self, prog: u32) -> Option<(u32, u32)>;

    /// Whether a procedure can safely be executed twice. Non-idempotent
    /// procedures go through the duplicate request cache.
    fn idempotent(&self, prog: u32, vers: u32, proc_: u32) -> bool;

    /// A procedure's name, for logs.
    fn procedure_name(&self, prog: u32, vers: u32, proc_: u32) -> &'static str;

    /// Executes a call. The SUCCESS reply header is already in `out`; the
    /// service appends its results. On `Err`, whatever was appended is
    /// discarded and the server sends the RPC-level error instead.
    fn call<'a>(
        &'a self,
        ctx: &'a CallContext,
        args: Decoder,
        out: &'a mut BytesMut,
    ) -> impl Future<Output = Result<(), CallError>> + Send + 'a;
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub max_record: usize,
    /// Calls of one connection executing at once; further calls wait
    /// (the reader stops reading, so TCP pushes back on the client).
    pub max_in_flight: usize,
    pub drc_per_client: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_record: record::DEFAULT_MAX_RECORD,
            max_in_flight: 128,
            drc_per_client: 1024,
        }
    }
}

pub struct Server<S> {
    svc: Arc<S>,
    cfg: ServerConfig,
    drc: Drc,
    next_conn: AtomicU64,
    stop: CancellationToken,
    calls: TaskTracker,
}

impl<S: Service> Server<S> {
    pub fn new(svc: Arc<S>, cfg: ServerConfig) -> Arc<Self> {
        Arc::new(Server {
            drc: Drc::new(cfg.drc_per_client),
            svc,
            cfg,
            next_conn: AtomicU64::new(1),
            stop: CancellationToken::new(),
            calls: TaskTracker::new(),
        })
    }

    /// Accepts connections until [`Server::shutdown`] is called.
    pub async fn run(self: &Arc<Self>, listener: TcpListener) {
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => break,
                r = listener.accept() => match r {
                    Ok((stream, peer)) => {
                        let me = self.clone();
                        tokio::spawn(async move { serve_connection(me, stream, peer).await });
                    }
                    Err(e) => {
                        // EMFILE and friends: log, breathe, keep serving the others.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }

    /// Stops reading new calls and waits for the calls in flight to be answered.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.calls.close();
        self.calls.wait().await;
    }
}

/// Serves one connection until the peer closes it, it misbehaves, or the server stops.
pub async fn serve_connection<S: Service>(
    server: Arc<Server<S>>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let conn_id = server.next_conn.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nodelay(true);
    debug!(%peer, conn_id, "connection opened");
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Bytes>(server.cfg.max_in_flight.max(1) * 2);
    let writer = tokio::spawn(write_replies(wr, rx, peer));
    let permits = Arc::new(Semaphore::new(server.cfg.max_in_flight.max(1)));
    let mut asm = Assembler::new(server.cfg.max_record);
    let mut buf = BytesMut::with_capacity(256 << 10);
    'conn: loop {
        loop {
            match asm.next(&mut buf) {
                Ok(Some(rec)) => {
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        break 'conn;
                    };
                    if let Some(reply) = handle_record(&server, rec, peer, conn_id, &tx, permit) {
                        if tx.send(reply).await.is_err() {
                            break 'conn;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(%peer, conn_id, error = %e, "closing connection: bad record");
                    break 'conn;
                }
            }
        }
        if buf.capacity() - buf.len() < 64 << 10 {
            buf.reserve(256 << 10);
        }
        tokio::select! {
            _ = server.stop.cancelled() => break,
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    debug!(%peer, conn_id, error = %e, "read failed");
                    break;
                }
            },
        }
    }
    drop(tx);
    // The writer ends once every call task of this connection has sent its reply.
    let _ = writer.await;
    debug!(%peer, conn_id, "connection closed");
}

async fn write_replies(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Bytes>,
    peer: SocketAddr,
) {
    let mut batch: Vec<Bytes> = Vec::with_capacity(64);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < 64 {
            match rx.try_recv() {
                Ok(b) => batch.push(b),
                Err(_) => break,
            }
        }
        if let Err(e) = write_all_vectored(&mut wr, &mut batch).await {
            debug!(%peer, error = %e, "write failed");
            return;
        }
        batch.clear();
    }
    let _ = wr.shutdown().await;
}

async fn write_all_vectored(
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    bufs: &mut [Bytes],
) -> std::io::Result<()> {
    let (mut i, mut off) = (0, 0);
    while i < bufs.len() {
        let slices: Vec<IoSlice> = std::iter::once(IoSlice::new(&bufs[i][off..]))
            .chain(bufs[i + 1..].iter().map(|b| IoSlice::new(b)))
            .collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while i < bufs.len() && n >= bufs[i].len() - off {
            n -= bufs[i].len() - off;
            off = 0;
            i += 1;
        }
        off += n;
    }
    Ok(())
}

fn finish(mut out: BytesMut) -> Bytes {
    record::finish(&mut out);
    out.freeze()
}

fn reply_with(f: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    record::begin(&mut out);
    f(&mut out);
    finish(out)
}

/// Handles one record. Replies that need no program work are returned for
/// the reader to send; a call to a program is spawned and replies by itself.
fn handle_record<S: Service>(
    server: &Arc<Server<S>>,
    rec: Bytes,
    peer: SocketAddr,
    conn_id: u64,
    tx: &mpsc::Sender<Bytes>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Option<Bytes> {
    let call = match msg::decode_call(rec) {
        Ok(c) => c,
        Err(BadCall::Unreadable) => {
            warn!(%peer, "dropping record too short to hold an xid");
            return None;
        }
        Err(BadCall::NotACall(xid)) => {
            warn!(%peer, xid, "dropping a REPLY sent to the server");
            return None;
        }
        Err(BadCall::Garbage(xid)) => {
            warn!(%peer, xid, "GARBAGE_ARGS: malformed call header");
            return Some(reply_with(|o| {
                msg::accepted_error(xid, AcceptStat::GARBAGE_ARGS, o)
            }));
        }
        Err(BadCall::BadCred(xid)) => {
            warn!(%peer, xid, "AUTH_BADCRED: malformed credential or verifier");
            return Some(reply_with(|o| {
                msg::auth_error(xid, proto::rpc::AuthStat::AUTH_BADCRED, o)
            }));
        }
    };
    let xid = call.xid;
    if call.rpcvers != 2 {
        warn!(%peer, xid, rpcvers = call.rpcvers, "RPC_MISMATCH");
        return Some(reply_with(|o| msg::rpc_mismatch(xid, o)));
    }
    let auth = match Auth::from_cred(&call.cred) {
        Ok(a) => a,
        Err(stat) => {
            warn!(%peer, xid, flavor = call.cred.flavor, ?stat, "AUTH_ERROR: credential refused");
            return Some(reply_with(|o| msg::auth_error(xid, stat, o)));
        }
    };
    let Some((low, high)) = server.svc.versions(call.prog) else {
        warn!(%peer, xid, prog = call.prog, "PROG_UNAVAIL");
        return Some(reply_with(|o| {
            msg::accepted_error(xid, AcceptStat::PROG_UNAVAIL, o)
        }));
    };
    if call.vers < low || call.vers > high {
        warn!(%peer, xid, prog = call.prog, vers = call.vers, low, high, "PROG_MISMATCH");
        return Some(reply_with(|o| msg::prog_mismatch(xid, low, high, o)));
    }
    if call.proc_ == 0 {
        return Some(reply_with(|o| msg::success_header(xid, o)));
    }
    let ctx = CallContext {
        xid,
        prog: call.prog,
        vers: call.vers,
        proc_: call.proc_,
        auth,
        peer,
        conn_id,
    };
    let drc_key = if server.svc.idempotent(ctx.prog, ctx.vers, ctx.proc_) {
        None
    } else {
        let key = drc::Key {
            xid,
            prog: ctx.prog,
            vers: ctx.vers,
            proc_: ctx.proc_,
            args_sum: drc::args_sum(&call.args.rest()),
        };
        match server.drc.lookup(peer.ip(), key) {
            Lookup::New => Some(key),
            Lookup::InProgress => {
                debug!(%peer, xid, "retransmission of a call in progress: dropped");
                return None;
            }
            Lookup::Done(r) => {
                debug!(%peer, xid, "retransmission answered from the duplicate request cache");
                return Some(r);
            }
        }
    };
    let server = server.clone();
    let tx = tx.clone();
    let args = call.args;
    server.calls.clone().spawn(async move {
        let _permit = permit;
        let mut out = BytesMut::with_capacity(512);
        record::begin(&mut out);
        msg::success_header(xid, &mut out);
        // A bug in one procedure must not leave its caller waiting forever
        // or take the connection down: a panic becomes SYSTEM_ERR.
        let result = std::panic::AssertUnwindSafe(server.svc.call(&ctx, args, &mut out)).catch_unwind().await.unwrap_or_else(|_| {
            let name = server.svc.procedure_name(ctx.prog, ctx.vers, ctx.proc_);
            tracing::error!(peer = %ctx.peer, xid, procedure = name, "procedure panicked; answering SYSTEM_ERR");
            Err(CallError::SystemErr)
        });
        let reply = match result {
            Ok(()) => Some(finish(out)),
            Err(CallError::Drop) => None,
            Err(e) => {
                let name = server.svc.procedure_name(ctx.prog, ctx.vers, ctx.proc_);
                warn!(peer = %ctx.peer, xid, procedure = name, error = ?e, "RPC error reply");
                out.clear();
                record::begin(&mut out);
                msg::call_error(xid, e, &mut out);
                Some(finish(out))
            }
        };
        if let Some(key) = drc_key {
            match &reply {
                Some(r) => server.drc.complete(ctx.peer.ip(), key, r.clone()),
                None => server.drc.abandon(ctx.peer.ip(), key),
            }
        }
        if let Some(r) = reply {
            let _ = tx.send(r).await;
        }
    });
    None
}

/// Logs where the server listens (a helper for binaries).
pub fn log_listening(addr: SocketAddr) {
    info!(%addr, "listening");
}
