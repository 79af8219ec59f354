//! The RPC server transport: one reader task per connection, each call run
//! as its own task, replies written by one writer task per connection in the
//! order they finish (batched into vectored writes).

use crate::auth::{Auth, AuthGss};
use crate::drc::{self, Drc, Lookup};
use crate::gss::{DropReason, GssCall, GssServer};
use crate::msg::{self, BadCall, CallContext, CallError};
use crate::record::{self, Assembler};
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use metrics::{ops, CallDone, ClientStats, Metrics};
use proto::rpc::AcceptStat;
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
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

    /// Whether this call goes through the duplicate request cache, given
    /// its (unprotected) arguments: by default, when the procedure is not
    /// idempotent. A program whose procedures differ by argument (the
    /// NFSv4 COMPOUND's minor version) looks at them; after the call it
    /// may still drop the entry ([`CallContext::skip_cache`]).
    fn cacheable(&self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> bool {
        let _ = args;
        !self.idempotent(prog, vers, proc_)
    }

    /// A procedure's name, for logs.
    fn procedure_name(&self, prog: u32, vers: u32, proc_: u32) -> &'static str;

    /// The metrics slot of a procedure (per-op counters are an array index).
    fn op_slot(&self, prog: u32, vers: u32, proc_: u32) -> Option<usize> {
        ops::op_slot(prog, vers, proc_)
    }

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
    /// RPCSEC_GSS (None: GSS credentials get AUTH_BADCRED).
    pub gss: Option<Arc<GssServer>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_record: record::DEFAULT_MAX_RECORD,
            max_in_flight: 128,
            drc_per_client: 1024,
            gss: None,
        }
    }
}

pub struct Server<S> {
    svc: Arc<S>,
    cfg: ServerConfig,
    drc: Arc<Drc>,
    metrics: Arc<Metrics>,
    next_conn: AtomicU64,
    stop: CancellationToken,
    calls: TaskTracker,
}

impl<S: Service> Server<S> {
    /// A server that records no metrics (per-client log limits still apply).
    pub fn new(svc: Arc<S>, cfg: ServerConfig) -> Arc<Self> {
        Self::with_metrics(svc, cfg, Metrics::new(false))
    }

    /// A server that counts every call into `metrics`.
    pub fn with_metrics(svc: Arc<S>, cfg: ServerConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        let drc = Arc::new(Drc::new(cfg.drc_per_client));
        let d = drc.clone();
        metrics.add_cache_probe("drc", move || d.usage());
        Arc::new(Server {
            drc,
            metrics,
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
    // The one client lookup of this connection: every call carries the handle.
    let client = server.metrics.clients.connection_opened(peer.ip());
    let sc = &server.metrics.server;
    sc.connections_total.fetch_add(1, Ordering::Relaxed);
    sc.connections_open.fetch_add(1, Ordering::Relaxed);
    let timed = server.metrics.enabled();
    debug!(%peer, conn_id, "connection opened");
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Bytes>(server.cfg.max_in_flight.max(1) * 2);
    // Cancelled when the server stops, or by a call that had to be dropped
    // (RPCSEC_GSS): closing makes the client retransmit at once.
    let close = server.stop.child_token();
    let writer = tokio::spawn(write_replies(wr, rx, peer));
    let permits = Arc::new(Semaphore::new(server.cfg.max_in_flight.max(1)));
    let mut asm = Assembler::new(server.cfg.max_record);
    let mut buf = BytesMut::with_capacity(256 << 10);
    // When the bytes in `buf` came off the socket: the start of every
    // queue wait (one clock read per read, not per call).
    let mut read_at = timed.then(Instant::now);
    'conn: loop {
        loop {
            if close.is_cancelled() {
                break 'conn;
            }
            match asm.next(&mut buf) {
                Ok(Some(rec)) => {
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        break 'conn;
                    };
                    let conn = Conn {
                        peer,
                        conn_id,
                        client: &client,
                        tx: &tx,
                        close: &close,
                    };
                    if let Some(reply) = handle_record(&server, rec, &conn, read_at, permit) {
                        if tx.send(reply).await.is_err() {
                            break 'conn;
                        }
                    }
                }
                Ok(None) => {
                    if asm.mid_record(&buf) {
                        // A client that writes one record in several segments
                        // without TCP_NODELAY (pynfs sends 2 KiB fragments)
                        // holds the rest back until this part is ACKed, and
                        // the kernel would delay that ACK by up to 40 ms:
                        // ask for it now. The flag does not stick, so it is
                        // set at each partial read; whole-record clients
                        // never pay the syscall.
                        let _ = socket2::SockRef::from(rd.as_ref()).set_tcp_quickack(true);
                    }
                    break;
                }
                Err(e) => {
                    server
                        .metrics
                        .server
                        .bad_calls
                        .fetch_add(1, Ordering::Relaxed);
                    if client.log_allowed() {
                        warn!(%peer, conn_id, error = %e, "closing connection: bad record");
                    }
                    break 'conn;
                }
            }
        }
        if buf.capacity() - buf.len() < 64 << 10 {
            buf.reserve(256 << 10);
        }
        tokio::select! {
            _ = close.cancelled() => break,
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) => break,
                Ok(_) => {
                    if timed {
                        read_at = Some(Instant::now());
                    }
                }
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
    client.connection_closed();
    server
        .metrics
        .server
        .connections_open
        .fetch_sub(1, Ordering::Relaxed);
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

/// What a call needs to know about its connection.
struct Conn<'a> {
    peer: SocketAddr,
    conn_id: u64,
    client: &'a Arc<ClientStats>,
    tx: &'a mpsc::Sender<Bytes>,
    close: &'a CancellationToken,
}

/// Handles one record. Replies that need no program work are returned for
/// the reader to send; a call to a program is spawned and replies by itself.
fn handle_record<S: Service>(
    server: &Arc<Server<S>>,
    rec: Bytes,
    conn: &Conn<'_>,
    read_at: Option<Instant>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Option<Bytes> {
    let peer = conn.peer;
    let client = conn.client;
    let m = &server.metrics;
    let bad = || {
        m.server.bad_calls.fetch_add(1, Ordering::Relaxed);
        client.log_allowed()
    };
    let bytes_in = rec.len() as u64;
    let call = match msg::decode_call(rec) {
        Ok(c) => c,
        Err(BadCall::Unreadable) => {
            if bad() {
                warn!(%peer, "dropping record too short to hold an xid");
            }
            return None;
        }
        Err(BadCall::NotACall(xid)) => {
            if bad() {
                warn!(%peer, xid, "dropping a REPLY sent to the server");
            }
            return None;
        }
        Err(BadCall::Garbage(xid)) => {
            if bad() {
                warn!(%peer, xid, "GARBAGE_ARGS: malformed call header");
            }
            return Some(reply_with(|o| {
                msg::accepted_error(xid, AcceptStat::GARBAGE_ARGS, o)
            }));
        }
        Err(BadCall::BadCred(xid)) => {
            if bad() {
                warn!(%peer, xid, "AUTH_BADCRED: malformed credential or verifier");
            }
            return Some(reply_with(|o| {
                msg::auth_error(xid, proto::rpc::AuthStat::AUTH_BADCRED, o)
            }));
        }
    };
    let xid = call.xid;
    if call.rpcvers != 2 {
        if bad() {
            warn!(%peer, xid, rpcvers = call.rpcvers, "RPC_MISMATCH");
        }
        return Some(reply_with(|o| msg::rpc_mismatch(xid, o)));
    }
    let mut gss_call = None;
    let auth = match (&server.cfg.gss, call.cred.flavor) {
        (Some(g), proto::rpc::RPCSEC_GSS) => match g.classify(&call, &m.server) {
            Ok(c) => {
                gss_call = Some(c);
                Ok(Auth::None) // replaced once the call is verified
            }
            Err(e) => Err(e),
        },
        _ => Auth::from_cred(&call.cred),
    };
    let auth = match auth {
        Ok(a) => a,
        Err(stat) => {
            if bad() {
                warn!(%peer, xid, flavor = call.cred.flavor, ?stat, "AUTH_ERROR: credential refused");
            }
            return Some(reply_with(|o| msg::auth_error(xid, stat, o)));
        }
    };
    let Some((low, high)) = server.svc.versions(call.prog) else {
        if bad() {
            warn!(%peer, xid, prog = call.prog, "PROG_UNAVAIL");
        }
        return Some(reply_with(|o| {
            msg::accepted_error(xid, AcceptStat::PROG_UNAVAIL, o)
        }));
    };
    if call.vers < low || call.vers > high {
        if bad() {
            warn!(%peer, xid, prog = call.prog, vers = call.vers, low, high, "PROG_MISMATCH");
        }
        return Some(reply_with(|o| msg::prog_mismatch(xid, low, high, o)));
    }
    let slot = server.svc.op_slot(call.prog, call.vers, call.proc_);
    if call.proc_ == 0 && gss_call.is_none() {
        let r = reply_with(|o| msg::success_header(xid, o));
        if let Some(t) = read_at {
            let d = CallDone {
                export: u32::MAX,
                bytes_in,
                bytes_out: r.len() as u64,
                queue_ns: t.elapsed().as_nanos() as u64,
                ..Default::default()
            };
            m.call_end(slot, client, &d, false);
        }
        return Some(r);
    }
    let mut ctx = CallContext::new(
        xid,
        call.prog,
        call.vers,
        call.proc_,
        auth,
        peer,
        conn.conn_id,
        client.clone(),
    );
    // RPCSEC_GSS calls consult the DRC once verified and unwrapped: a
    // retransmission carries a new sequence number, so its protected
    // arguments differ, and its reply must be protected anew.
    let drc_key = if ctx.proc_ == 0
        || gss_call.is_some()
        || !server
            .svc
            .cacheable(ctx.prog, ctx.vers, ctx.proc_, &call.args.rest())
    {
        None
    } else {
        let key = drc::Key {
            xid,
            prog: ctx.prog,
            vers: ctx.vers,
            proc_: ctx.proc_,
            args_sum: drc::args_sum(&call.args.rest()),
            gss_ctx: 0,
        };
        match server.drc.lookup(peer.ip(), key) {
            Lookup::New => Some(key),
            Lookup::InProgress => {
                m.server.drc_in_progress.fetch_add(1, Ordering::Relaxed);
                debug!(%peer, xid, "retransmission of a call in progress: dropped");
                return None;
            }
            Lookup::Done(r) => {
                m.server.drc_hits.fetch_add(1, Ordering::Relaxed);
                debug!(%peer, xid, "retransmission answered from the duplicate request cache");
                return Some(r);
            }
        }
    };
    let server = server.clone();
    let tx = conn.tx.clone();
    let close = conn.close.clone();
    let (header, verf) = (call.header, call.verf);
    let args = call.args;
    server.calls.clone().spawn(async move {
        let _permit = permit;
        let started = read_at.map(|t| (t, Instant::now()));
        // RPCSEC_GSS: verify, judge the window, unwrap; or answer here.
        let (args, gss) = match gss_call {
            None => (args, None),
            Some(g) => match gss_prelude(&server, &ctx, g, &header, &verf, args, &close) {
                Prelude::Run { args, auth, sealer } => {
                    ctx.auth = auth;
                    (args, Some(sealer))
                }
                Prelude::Reply(r) => {
                    if let Some(r) = r {
                        let _ = tx.send(r).await;
                    }
                    return;
                }
            },
        };
        let mut drc_key = drc_key;
        let cacheable = gss.is_some()
            && ctx.proc_ != 0
            && server
                .svc
                .cacheable(ctx.prog, ctx.vers, ctx.proc_, &args.rest());
        if let (Some(s), true) = (&gss, cacheable) {
            let key = drc::Key {
                xid,
                prog: ctx.prog,
                vers: ctx.vers,
                proc_: ctx.proc_,
                args_sum: drc::args_sum(&args.rest()),
                gss_ctx: s.ctx.id(),
            };
            match server.drc.lookup(ctx.peer.ip(), key) {
                Lookup::New => drc_key = Some(key),
                Lookup::InProgress => {
                    server.metrics.server.drc_in_progress.fetch_add(1, Ordering::Relaxed);
                    debug!(peer = %ctx.peer, xid, "RPCSEC_GSS retransmission of a call in progress: dropped");
                    return;
                }
                Lookup::Done(results) => {
                    server.metrics.server.drc_hits.fetch_add(1, Ordering::Relaxed);
                    debug!(peer = %ctx.peer, xid, seq = s.seq, "RPCSEC_GSS retransmission answered from the DRC, protected anew");
                    let mut out = BytesMut::with_capacity(64 + results.len());
                    record::begin(&mut out);
                    msg::success_header_verf(xid, s.verf.clone(), &mut out);
                    if s.service == crate::gss::GssService::None {
                        out.extend_from_slice(&results);
                    } else if crypto(results.len(), || {
                        s.ctx.wrap_results(s.service, s.seq, &results, &mut out)
                    })
                    .is_none()
                    {
                        return;
                    }
                    let _ = tx.send(finish(out)).await;
                    return;
                }
            }
        }
        server.metrics.call_begin(slot, &ctx.client);
        let mut out = BytesMut::with_capacity(512);
        record::begin(&mut out);
        match &gss {
            None => msg::success_header(xid, &mut out),
            Some(s) => msg::success_header_verf(xid, s.verf.clone(), &mut out),
        }
        let head_len = out.len();
        // A bug in one procedure must not leave its caller waiting forever
        // or take the connection down: a panic becomes SYSTEM_ERR.
        let result = if ctx.proc_ == 0 {
            Ok(()) // NULL under RPCSEC_GSS DATA: void results, still protected
        } else {
            std::panic::AssertUnwindSafe(server.svc.call(&ctx, args, &mut out)).catch_unwind().await.unwrap_or_else(|_| {
                let name = server.svc.procedure_name(ctx.prog, ctx.vers, ctx.proc_);
                tracing::error!(peer = %ctx.peer, xid, procedure = name, "procedure panicked; answering SYSTEM_ERR");
                Err(CallError::SystemErr)
            })
        };
        // What the DRC keeps of a GSS call: its results, unprotected.
        let gss_results = match (&gss, &result, drc_key) {
            (Some(_), Ok(()), Some(_)) => Some(Bytes::copy_from_slice(&out[head_len..])),
            _ => None,
        };
        // Integrity and privacy protect the results (not the header).
        let result = match (&gss, result) {
            (Some(s), Ok(())) if s.service != crate::gss::GssService::None => {
                let results = out.split_off(head_len);
                let ok = crypto(results.len(), || {
                    s.ctx.wrap_results(s.service, s.seq, &results, &mut out)
                });
                ok.ok_or(CallError::SystemErr)
            }
            (_, r) => r,
        };
        let status = match result {
            Ok(()) => ctx.status(),
            Err(CallError::ProcUnavail) => ops::RPC_PROC_UNAVAIL,
            Err(CallError::GarbageArgs) => ops::RPC_GARBAGE_ARGS,
            Err(CallError::SystemErr) => ops::RPC_SYSTEM_ERR,
            Err(CallError::Auth(_)) => ops::RPC_AUTH_ERROR,
            Err(CallError::Drop) => ops::RPC_DROPPED,
        };
        let reply = match result {
            Ok(()) => Some(finish(out)),
            Err(CallError::Drop) => None,
            Err(e) => {
                if ctx.client.log_allowed() {
                    let name = server.svc.procedure_name(ctx.prog, ctx.vers, ctx.proc_);
                    warn!(peer = %ctx.peer, xid, procedure = name, error = ?e, "RPC error reply");
                }
                out.clear();
                record::begin(&mut out);
                match &gss {
                    None => msg::call_error(xid, e, &mut out),
                    Some(s) => msg::call_error_verf(xid, e, s.verf.clone(), &mut out),
                }
                Some(finish(out))
            }
        };
        if let Some((read_at, start)) = started {
            let end = Instant::now();
            let d = CallDone {
                status,
                export: ctx.export(),
                bytes_in,
                bytes_out: reply.as_ref().map_or(0, |r| r.len() as u64),
                queue_ns: start.duration_since(read_at).as_nanos() as u64,
                service_ns: end.duration_since(start).as_nanos() as u64,
            };
            server.metrics.call_end(slot, &ctx.client, &d, true);
        }
        if let Some(key) = drc_key {
            let keep = if gss.is_some() {
                gss_results.filter(|_| result.is_ok())
            } else {
                reply.clone()
            };
            match keep.filter(|_| !ctx.cache_skipped()) {
                Some(r) => server.drc.complete(ctx.peer.ip(), key, r),
                None => server.drc.abandon(ctx.peer.ip(), key),
            }
        }
        if let Some(r) = reply {
            let _ = tx.send(r).await;
        }
    });
    None
}

/// What a verified RPCSEC_GSS DATA call needs to protect its reply.
struct Sealer {
    ctx: Arc<crate::gss::GssCtx>,
    service: crate::gss::GssService,
    seq: u32,
    verf: proto::rpc::OpaqueAuth,
}

enum Prelude {
    /// Run the procedure with these arguments as this caller.
    Run {
        args: Decoder,
        auth: Auth,
        sealer: Sealer,
    },
    /// Answered (or dropped: None) without the program.
    Reply(Option<Bytes>),
}

/// Runs `f` (GSS crypto over `len` bytes) so that a large wrap or unwrap
/// does not stall the other tasks of this async worker.
fn crypto<T>(len: usize, f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if len >= 64 << 10 && multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// The RPCSEC_GSS part of a call, in order: INIT is answered here; DATA
/// and DESTROY have their header checksum verified before the sequence
/// window is touched, then are judged against the window snapshot taken
/// when they were read (DESIGN.md rule 4); a call that must be dropped is
/// counted and closes the connection so the client retransmits at once.
fn gss_prelude<S: Service>(
    server: &Arc<Server<S>>,
    ctx: &CallContext,
    call: GssCall,
    header: &Bytes,
    verf: &proto::rpc::OpaqueAuth,
    args: Decoder,
    close: &CancellationToken,
) -> Prelude {
    let g = server.cfg.gss.as_ref().expect("GSS call without GSS");
    let m = &server.metrics.server;
    let xid = ctx.xid;
    let denied = |stat| Prelude::Reply(Some(reply_with(|o| msg::auth_error(xid, stat, o))));
    match call {
        GssCall::Init { cred, ctx: gctx } => {
            let mut a = args;
            let Ok(arg) = <proto::gss::RpcGssInitArg as xdr::Unpack>::unpack(&mut a) else {
                return Prelude::Reply(Some(reply_with(|o| {
                    msg::accepted_error(xid, AcceptStat::GARBAGE_ARGS, o)
                })));
            };
            // Reads the keytab and decrypts the ticket: off the async workers.
            let (v, res) = crypto(usize::MAX, || g.init_step(&cred, gctx, &arg.gss_token, m));
            Prelude::Reply(Some(reply_with(|o| {
                msg::success_header_verf(xid, v.unwrap_or_else(msg::none_verf), o);
                xdr::Pack::pack(&res, o);
            })))
        }
        GssCall::Data {
            cred,
            ctx: gctx,
            snap,
        } => {
            if !g.verify_header(&gctx, header, verf, m) {
                if ctx.client.log_allowed() {
                    warn!(peer = %ctx.peer, xid, principal = ?gctx.principal(), "RPCSEC_GSS header checksum fails: refused");
                }
                return denied(proto::rpc::AuthStat::RPCSEC_GSS_CREDPROBLEM);
            }
            if let Err(why) = gctx.accept_seq(cred.seq, snap, g.cfg.window) {
                match why {
                    DropReason::SeqWindow => {
                        m.gss_dropped_seq_window.fetch_add(1, Ordering::Relaxed);
                        ctx.client
                            .gss_dropped_seq_window
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    DropReason::Replay => {
                        m.gss_dropped_other.fetch_add(1, Ordering::Relaxed);
                        ctx.client.gss_dropped_other.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if ctx.client.log_allowed() {
                    warn!(peer = %ctx.peer, xid, seq = cred.seq, ?snap, reason = ?why, "RPCSEC_GSS call dropped; closing the connection so the client retransmits");
                }
                close.cancel();
                return Prelude::Reply(None);
            }
            ctx.client.note_gss(gctx.expires_unix(), gctx.principal());
            let Some(rverf) = gctx.verifier(cred.seq) else {
                return Prelude::Reply(Some(reply_with(|o| {
                    msg::accepted_error(xid, AcceptStat::SYSTEM_ERR, o)
                })));
            };
            if cred.proc_ == proto::gss::RpcGssProcT::RPCSEC_GSS_DESTROY {
                g.destroy(&gctx, m);
                return Prelude::Reply(Some(reply_with(|o| {
                    msg::success_header_verf(xid, rverf, o)
                })));
            }
            let n = args.remaining();
            let Some(args) = crypto(n, || gctx.unwrap_args(cred.service, cred.seq, args)) else {
                if ctx.client.log_allowed() {
                    warn!(peer = %ctx.peer, xid, service = ?cred.service, "RPCSEC_GSS arguments fail their checksum or do not decrypt: GARBAGE_ARGS");
                }
                return Prelude::Reply(Some(reply_with(|o| {
                    msg::accepted_error_verf(xid, AcceptStat::GARBAGE_ARGS, rverf, o)
                })));
            };
            let auth = Auth::Gss(AuthGss {
                principal: gctx.principal().cloned().unwrap_or_else(|| "".into()),
                service: cred.service,
                ids: gctx.ids().cloned(),
            });
            Prelude::Run {
                args,
                auth,
                sealer: Sealer {
                    ctx: gctx,
                    service: cred.service,
                    seq: cred.seq,
                    verf: rverf,
                },
            }
        }
    }
}

/// Logs where the server listens (a helper for binaries).
pub fn log_listening(addr: SocketAddr) {
    info!(%addr, "listening");
}
