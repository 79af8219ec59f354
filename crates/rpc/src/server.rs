//! The RPC server transport, a thin tokio driver around the pure
//! [`pipeline`](crate::pipeline): one reader task per connection hands each
//! record to the pipeline with the time it was read; each call to run gets
//! its own task (panics caught); replies are written by one writer task per
//! connection in the order they finish (batched into vectored writes).

use crate::callback::{CallbackConn, ConnCallbacks};
use crate::conn_limits::ConnLimits;
use crate::drc::Drc;
use crate::gss::GssServer;
use crate::msg::CallError;
use crate::observe::Limit;
use crate::observe::{CallDone, NoObserver, Observer, PeerStats};
use crate::pipeline::{Admitted, Answered, Arrival, Decision, Pipeline};
use crate::record::{self, Assembler};
use crate::tls::identity::TlsIdentity;
use crate::transport::{quickack, XprtSec, MAX_BATCH};
use crate::zero_copy::Out;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

pub use crate::program::Service;
pub use crate::transport::{Backlog, ConnRead, ReplyWrite};

#[derive(Clone)]
pub struct ServerConfig {
    pub max_record: usize,
    /// Calls of one connection executing at once; further calls wait
    /// (the reader stops reading, so TCP pushes back on the client).
    pub max_in_flight: usize,
    pub drc_per_client: usize,
    /// Bytes of cached replies the DRC keeps, all clients together.
    pub drc_max_bytes: usize,
    /// Open connections, in total and per client address; connections
    /// past either are closed at accept (and logged).
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    /// RPCSEC_GSS (None: GSS credentials get AUTH_BADCRED).
    pub gss: Option<Arc<GssServer>>,
    /// A connection with nothing read, running or queued for this long
    /// is closed (clients reconnect when they need to; knfsd's is 6 min).
    pub idle_timeout: Duration,
    /// A record begun (its header or part of it read) whose next bytes do
    /// not come within this long: the connection is closed, so a client
    /// that stops mid-record holds no buffer and no connection.
    pub record_timeout: Duration,
    /// Bytes of replies waiting to be written on one connection above
    /// which the server stops reading its calls (a client that does not
    /// read its replies is not allowed to make the server hold more).
    pub max_queued_reply_bytes: usize,
    /// A connection whose replies cannot be written for this long (the
    /// client does not read them) is closed.
    pub send_timeout: Duration,
    /// RPC-with-TLS (None: AUTH_TLS probes get AUTH_BADCRED, as from a
    /// server that does not know the flavor).
    pub tls: Option<Arc<crate::tls::TlsServer>>,
    /// Where READ data is spliced from the page cache to plain TCP
    /// connections instead of copied through the reply ([`crate::zero_copy`]).
    pub splice_reads: crate::zero_copy::SpliceReads,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_record: record::DEFAULT_MAX_RECORD,
            max_in_flight: 128,
            drc_per_client: 1024,
            drc_max_bytes: 64 << 20,
            max_connections: 4096,
            max_connections_per_client: 256,
            gss: None,
            idle_timeout: Duration::from_secs(360),
            record_timeout: Duration::from_secs(30),
            max_queued_reply_bytes: 8 << 20,
            send_timeout: Duration::from_secs(60),
            tls: None,
            splice_reads: Default::default(),
        }
    }
}

/// Queues one record for the writer; false if the connection is gone.
async fn send(tx: &mpsc::Sender<Out>, backlog: &Backlog, b: impl Into<Out>) -> bool {
    let b = b.into();
    let n = b.len();
    if tx.send(b).await.is_err() {
        return false;
    }
    backlog.add(n);
    true
}

pub struct Server<S> {
    svc: Arc<S>,
    cfg: ServerConfig,
    drc: Arc<Drc>,
    obs: Arc<dyn Observer>,
    next_conn: AtomicU64,
    conns: Arc<ConnLimits>,
    /// Calls executing, all connections (for the calls-per-connection metric).
    in_flight: Arc<AtomicU64>,
    /// When a refused connection was last logged, and how many since.
    refused_log: std::sync::Mutex<(Option<Instant>, u64)>,
    stop: CancellationToken,
    calls: TaskTracker,
}

impl<S: Service> Server<S> {
    /// A server that counts nothing.
    pub fn new(svc: Arc<S>, cfg: ServerConfig) -> Arc<Self> {
        Self::with_observer(svc, cfg, Arc::new(NoObserver))
    }

    /// A server that reports every call to `obs` (the metrics).
    pub fn with_observer(svc: Arc<S>, cfg: ServerConfig, obs: Arc<dyn Observer>) -> Arc<Self> {
        let drc = Arc::new(Drc::with_max_bytes(cfg.drc_per_client, cfg.drc_max_bytes));
        let d = drc.clone();
        obs.add_cache_probe("drc", Box::new(move || d.usage()));
        let d = drc.clone();
        obs.add_limit(
            Limit::DrcBytes,
            cfg.drc_max_bytes as u64,
            Box::new(move || d.bytes() as u64),
        );
        obs.programs(svc.programs());
        let conns = ConnLimits::new(cfg.max_connections, cfg.max_connections_per_client);
        let c = conns.clone();
        obs.add_limit(
            Limit::Connections,
            c.max_total() as u64,
            Box::new(move || c.total() as u64),
        );
        let c = conns.clone();
        obs.add_limit(
            Limit::ConnectionsPerClient,
            c.max_per_client() as u64,
            Box::new(move || c.busiest_client() as u64),
        );
        let in_flight = Arc::new(AtomicU64::new(0));
        let f = in_flight.clone();
        obs.add_limit(
            Limit::CallsPerConnection,
            cfg.max_in_flight.max(1) as u64,
            Box::new(move || f.load(Ordering::Relaxed)),
        );
        Arc::new(Server {
            conns,
            in_flight,
            refused_log: Default::default(),
            drc,
            obs,
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
                    Ok((stream, peer)) => match self.conns.admit(peer.ip()) {
                        Ok(place) => {
                            let me = self.clone();
                            tokio::spawn(async move {
                                serve_connection(me, stream, peer).await;
                                drop(place);
                            });
                        }
                        Err(limit) => {
                            drop(stream);
                            self.refused(peer, limit);
                        }
                    },
                    Err(e) => {
                        // EMFILE and friends: log, breathe, keep serving the others.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }

    /// Counts a connection closed at accept, and logs it: at once for the
    /// first, then at most once a second with the number since (a crowd of
    /// reconnecting clients must not flood the log).
    fn refused(&self, peer: SocketAddr, limit: Limit) {
        self.obs.count(crate::observe::Event::LimitReached(limit));
        let mut l = self.refused_log.lock().unwrap();
        l.1 += 1;
        let now = Instant::now();
        if l.0.is_none_or(|t| now.duration_since(t).as_secs() >= 1) {
            let max = match limit {
                Limit::Connections => self.conns.max_total(),
                _ => self.conns.max_per_client(),
            };
            warn!(%peer, limit = limit.name(), max, refused = l.1, "connection refused: limit reached");
            *l = (Some(now), 0);
        }
    }

    fn pipeline(&self) -> Pipeline<'_, S> {
        Pipeline {
            svc: &*self.svc,
            drc: &self.drc,
            gss: self.cfg.gss.as_deref(),
            obs: &*self.obs,
            offload: crypto,
        }
    }

    /// Stops reading new calls and waits for the calls in flight to be answered.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.calls.close();
        self.calls.wait().await;
    }
}

impl ConnRead for crate::tls::records::RecordRead<tokio::net::tcp::OwnedReadHalf> {
    fn quickack(&self) {
        quickack(self.get_ref())
    }

    /// The records opened where they land in `buf` (a WRITE's data is
    /// not copied out of them).
    fn fill(
        &mut self,
        buf: &mut BytesMut,
        want: usize,
    ) -> impl std::future::Future<Output = std::io::Result<usize>> + Send {
        crate::tls::records::RecordRead::fill(self, buf, want)
    }
}

impl ReplyWrite for crate::tls::ktls::KtlsWrite {}

impl ReplyWrite for crate::tls::records::RecordWrite<tokio::net::tcp::OwnedWriteHalf> {
    /// Large replies sealed where they are (see `RecordWrite::send_batch`).
    fn send_batch(
        &mut self,
        batch: &mut Vec<Bytes>,
        stall: Duration,
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        crate::tls::records::RecordWrite::send_batch(self, batch, stall)
    }
}

/// A handshaken TLS connection, by where its records are made.
enum TlsConn {
    /// Tarn's own (the kernel does not take this connection, or kTLS is
    /// off): see tls::records.
    User(Box<crate::tls::records::Halves>),
    /// The kernel's TLS ULP.
    Kernel(crate::tls::ktls::KtlsRead, crate::tls::ktls::KtlsWrite),
}

/// What became of a connection's first record when TLS is configured.
enum Start {
    Plain(TcpStream),
    Tls(TlsConn, XprtSec, Option<Arc<TlsIdentity>>),
    Closed,
}

/// RFC 9289: if the first record is a NULL call with AUTH_TLS, answers it
/// with STARTTLS and runs the TLS handshake; any other first record is
/// left in `buf` for the plain connection to serve.
async fn start<S: Service>(
    server: &Server<S>,
    tls: &crate::tls::TlsServer,
    mut stream: TcpStream,
    peer: SocketAddr,
    asm: &mut Assembler,
    buf: &mut BytesMut,
) -> Start {
    let deadline = Instant::now() + server.cfg.idle_timeout;
    // Enough for the mark and the call header up to the credential flavor.
    loop {
        let have_mark = buf.len() >= 4;
        let len = if have_mark {
            (u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) & 0x7fff_ffff) as usize
        } else {
            0
        };
        if have_mark && (buf.len() >= 32 || buf.len() >= 4 + len) {
            break;
        }
        buf.reserve(4096);
        let r = tokio::select! {
            _ = server.stop.cancelled() => return Start::Closed,
            r = tokio::time::timeout_at(deadline.into(), stream.read_buf(buf)) => r,
        };
        match r {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Start::Closed,
            Ok(Ok(_)) => {}
        }
    }
    let rec_len = (u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) & 0x7fff_ffff) as usize;
    let Some(xid) = crate::tls::starttls_probe(&buf[4..(4 + rec_len).min(buf.len())]) else {
        return Start::Plain(stream);
    };
    // The probe must be the only thing sent before the handshake.
    while buf.len() < 4 + rec_len {
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return Start::Closed,
            Ok(_) => {}
        }
    }
    let Ok(Some(_)) = asm.next(buf) else {
        return Start::Closed;
    };
    if !buf.is_empty() {
        server.obs.tls_handshake(Err("other"));
        warn!(%peer, "TLS: bytes after the STARTTLS probe before its reply; closing");
        return Start::Closed;
    }
    if stream
        .write_all(&crate::tls::starttls_reply(xid))
        .await
        .is_err()
    {
        return Start::Closed;
    }
    let ktls = tls.ktls();
    // rustls must stop reading at a record boundary once the handshake is
    // done, so that the records after it are the kernel's or ours: the
    // cork stream makes it.
    let Some((s, level, id)) = handshake(server, tls, ktls::CorkStream::new(stream), peer).await
    else {
        return Start::Closed;
    };
    let takes = match s.get_ref().1.negotiated_cipher_suite() {
        Some(suite) if ktls.wanted() => ktls.takes(suite).await,
        _ => false,
    };
    if !takes {
        let r =
            tokio::time::timeout(server.cfg.record_timeout, crate::tls::records::records(s)).await;
        return match r {
            Ok(Ok(halves)) => {
                server.obs.tls_path(false);
                Start::Tls(TlsConn::User(Box::new(halves)), level, id)
            }
            Ok(Err(e)) => {
                warn!(%peer, error = %e, "TLS: cannot take the records over from rustls; closing");
                Start::Closed
            }
            Err(_) => {
                warn!(%peer, "TLS: the switch to Tarn's records did not finish in time (a record left unfinished); closing");
                Start::Closed
            }
        };
    }
    // Bounded: rustls may have to finish reading a record the client
    // began right after the handshake.
    let r = tokio::time::timeout(
        server.cfg.record_timeout,
        crate::tls::ktls::offload(s, peer),
    )
    .await;
    let Ok(r) = r else {
        warn!(%peer, "kTLS: the switch did not finish in time (a record left unfinished); closing");
        return Start::Closed;
    };
    match r {
        Ok((rd, wr)) => {
            server.obs.tls_path(true);
            debug!(%peer, "kTLS: records in the kernel");
            Start::Tls(TlsConn::Kernel(rd, wr), level, id)
        }
        Err(e) => {
            ktls.failed(peer, &e);
            Start::Closed
        }
    }
}

/// The TLS handshake on a connection that answered STARTTLS: the stream,
/// the protection it gives and the identity its certificate maps to.
async fn handshake<S: Service, IO>(
    server: &Server<S>,
    tls: &crate::tls::TlsServer,
    stream: IO,
    peer: SocketAddr,
) -> Option<(
    tokio_rustls::server::TlsStream<IO>,
    XprtSec,
    Option<Arc<TlsIdentity>>,
)>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let acc = tls.acceptor();
    // The certificate the client presents is noted for the failure record.
    let (r, presented) = crate::tls::events::PRESENTED
        .scope(Default::default(), async {
            let r = tokio::time::timeout(server.cfg.record_timeout, acc.accept(stream)).await;
            (r, crate::tls::events::PRESENTED.with(|p| p.take()))
        })
        .await;
    match r {
        Ok(Ok(s)) => {
            let (_, c) = s.get_ref();
            let level = if c.peer_certificates().is_some_and(|c| !c.is_empty()) {
                XprtSec::Mtls
            } else {
                XprtSec::Tls
            };
            let who = c
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| crate::tls::x509::parse(c))
                .map(|c| c.subject_string())
                .unwrap_or_default();
            server.obs.tls_handshake(Ok(level));
            info!(%peer, xprtsec = %level, client = %who, "TLS handshake done");
            // Only a verified certificate (mtls) is mapped to a user.
            let id = c
                .peer_certificates()
                .and_then(|c| c.first())
                .filter(|_| level == XprtSec::Mtls)
                .and_then(|c| tls.identity(c));
            Some((s, level, id.map(Arc::new)))
        }
        Ok(Err(e)) => {
            let reason = crate::tls::failure_reason(&e);
            server.obs.tls_handshake(Err(reason));
            warn!(%peer, reason, error = %e, "TLS handshake failed");
            crate::tls::events::global().handshake_failed(peer, reason, &e, presented.as_deref());
            None
        }
        Err(_) => {
            server.obs.tls_handshake(Err("timeout"));
            warn!(%peer, "TLS handshake timed out");
            crate::tls::events::global().handshake_timed_out(peer, presented.as_deref());
            None
        }
    }
}

/// Serves one connection until the peer closes it, it misbehaves, or the server stops.
pub async fn serve_connection<S: Service>(
    server: Arc<Server<S>>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let _ = stream.set_nodelay(true);
    let mut asm = Assembler::new(server.cfg.max_record);
    let mut buf = BytesMut::new();
    let (stream, level) = match server.cfg.tls.clone() {
        None => (stream, XprtSec::None),
        Some(tls) => match start(&server, &tls, stream, peer, &mut asm, &mut buf).await {
            Start::Plain(s) => (s, XprtSec::None),
            Start::Tls(conn, level, id) => {
                let sec = (level, id);
                match conn {
                    TlsConn::User(halves) => {
                        let (rd, wr) = *halves;
                        run_connection(server, rd, wr, peer, sec, asm, buf).await;
                    }
                    TlsConn::Kernel(rd, wr) => {
                        run_connection(server, rd, wr, peer, sec, asm, buf).await;
                    }
                }
                return;
            }
            Start::Closed => return,
        },
    };
    let (rd, wr) = stream.into_split();
    run_connection(server, rd, wr, peer, (level, None), asm, buf).await;
}

async fn run_connection<S: Service, R: ConnRead, W: ReplyWrite + 'static>(
    server: Arc<Server<S>>,
    mut rd: R,
    wr: W,
    peer: SocketAddr,
    (xprtsec, tls_id): (XprtSec, Option<Arc<TlsIdentity>>),
    mut asm: Assembler,
    mut buf: BytesMut,
) {
    let conn_id = server.next_conn.fetch_add(1, Ordering::Relaxed);
    // The one client lookup of this connection: every call carries the handle.
    let client = server.obs.connection_opened(peer.ip());
    if let Some(id) = &tls_id {
        info!(%peer, conn_id, client = %id.subject, rule = %id.rule, uid = id.uid, gid = id.gid, "TLS identity mapped: AUTH_SYS calls on this connection run as this user");
        client.note_tls_identity(&format!("{} (uid {})", id.subject, id.uid));
    }
    let timed = server.obs.timed();
    // Whether its READ data may be spliced (see zero_copy).
    let splice = W::SPLICE && server.cfg.splice_reads.for_peer(peer.ip());
    debug!(%peer, conn_id, splice, "connection opened");
    let Wiring {
        tx,
        close,
        backlog,
        writer,
        callbacks,
    } = wire(&server, wr, peer, conn_id);
    let back: Arc<dyn CallbackConn> = callbacks.clone();
    let max_in_flight = server.cfg.max_in_flight.max(1);
    let permits = Arc::new(Semaphore::new(max_in_flight));
    // When the bytes in `buf` came off the socket: the arrival time the
    // pipeline judges GSS expiry by, and the start of every queue wait
    // (one clock read per read, not per call).
    let mut read_at = Instant::now();
    let timer = tokio::time::sleep(server.cfg.idle_timeout);
    tokio::pin!(timer);
    'conn: loop {
        loop {
            if close.is_cancelled() {
                break 'conn;
            }
            // A client that does not read its replies: its calls are not
            // read either until the writer has caught up (TCP pushes back on
            // it); the writer closes the connection if it stays stuck.
            if backlog.over(server.cfg.max_queued_reply_bytes)
                && !wait_for_reader(&server, &backlog, &close, &*client, peer, conn_id).await
            {
                break 'conn;
            }
            match asm.next(&mut buf) {
                Ok(Some(rec)) => {
                    let Some(permit) = call_permit(&server, &permits).await else {
                        break 'conn;
                    };
                    let conn = Conn {
                        peer,
                        conn_id,
                        client: &client,
                        tx: &tx,
                        backlog: &backlog,
                        close: &close,
                        callbacks: &callbacks,
                        back: &back,
                        xprtsec,
                        tls_id: tls_id.as_ref(),
                        zero_copy: splice,
                    };
                    if let Some(reply) = handle_record(&server, rec, &conn, read_at, timed, permit)
                    {
                        if !send(&tx, &backlog, reply).await {
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
                        rd.quickack();
                    }
                    break;
                }
                Err(e) => {
                    server.obs.count(crate::observe::Event::BadCall);
                    if client.log_allowed() {
                        warn!(%peer, conn_id, error = %e, "closing connection: bad record");
                    }
                    break 'conn;
                }
            }
        }
        // No further than the next record's mark: a WRITE's data is then
        // received into a buffer of its own, never copied.
        let want = asm.prepare_read(&mut buf);
        let mid = asm.mid_record(&buf);
        let limit = if mid {
            server.cfg.record_timeout
        } else {
            server.cfg.idle_timeout
        };
        // Re-armed, not allocated, at each read.
        timer.as_mut().reset((read_at + limit).into());
        tokio::select! {
            _ = close.cancelled() => break,
            r = rd.fill(&mut buf, want) => match r {
                Ok(0) => break,
                Ok(_) => read_at = Instant::now(),
                Err(e) => {
                    debug!(%peer, conn_id, error = %e, "read failed");
                    break;
                }
            },
            _ = &mut timer => {
                if mid {
                    server.obs.count(crate::observe::Event::ClosedStalledRecord);
                    if client.log_allowed() {
                        warn!(%peer, conn_id, seconds = limit.as_secs_f64(), bytes = buf.len(), "closing connection: a record was begun and not finished in time");
                    }
                    break;
                }
                // Idle only if nothing runs or waits to be written either
                // (a long COMMIT, a reply being sent), and no call to the
                // client waits for its answer.
                if permits.available_permits() == max_in_flight
                    && backlog.empty()
                    && callbacks.outstanding() == 0
                {
                    server.obs.count(crate::observe::Event::ClosedIdle);
                    debug!(%peer, conn_id, seconds = limit.as_secs_f64(), "closing idle connection");
                    break;
                }
                read_at = Instant::now();
            }
        }
    }
    drop(tx);
    // Sessions may keep the handle: it lets go of the writer queue, and
    // callers still waiting learn the connection is gone.
    callbacks.close();
    // The writer ends once every call task of this connection has sent its reply.
    let _ = writer.await;
    server.obs.connection_closed(&*client);
    debug!(%peer, conn_id, "connection closed");
}

/// A connection's reply side: the queue to its writer task, the token
/// that closes it, the bytes queued, and its back channel.
struct Wiring {
    tx: mpsc::Sender<Out>,
    close: CancellationToken,
    backlog: Arc<Backlog>,
    writer: tokio::task::JoinHandle<()>,
    callbacks: Arc<ConnCallbacks>,
}

fn wire<S: Service, W: ReplyWrite + 'static>(
    server: &Arc<Server<S>>,
    wr: W,
    peer: SocketAddr,
    conn_id: u64,
) -> Wiring {
    let (tx, rx) = mpsc::channel::<Out>(server.cfg.max_in_flight.max(1) * 2);
    // Cancelled when the server stops, or by a call that had to be dropped
    // (RPCSEC_GSS): closing makes the client retransmit at once.
    let close = server.stop.child_token();
    let backlog = Arc::new(Backlog::default());
    let writer = tokio::spawn(write_replies(
        wr,
        rx,
        peer,
        backlog.clone(),
        close.clone(),
        server.clone() as Arc<dyn Watch>,
    ));
    // Calls the server makes to the client on this connection (the
    // NFSv4.1 back channel); their xids start where the client's are
    // unlikely to be, though the two directions never mix.
    let callbacks = Arc::new(
        ConnCallbacks::new(
            tx.clone(),
            conn_id,
            0x8000_0000 ^ (conn_id as u32).rotate_left(16),
        )
        .with_backlog(backlog.clone()),
    );
    Wiring {
        tx,
        close,
        backlog,
        writer,
        callbacks,
    }
}

/// A place for one more call of this connection in flight; at the limit,
/// back-pressure: the connection is not read until one of its calls
/// finishes. None: the semaphore closed.
async fn call_permit<S: Service>(
    server: &Server<S>,
    permits: &Arc<Semaphore>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    match permits.clone().try_acquire_owned() {
        Ok(p) => Some(p),
        Err(_) => {
            server.obs.count(crate::observe::Event::LimitReached(
                Limit::CallsPerConnection,
            ));
            permits.clone().acquire_owned().await.ok()
        }
    }
}

/// A client that does not read its replies: its calls are not read either
/// until the writer has caught up (TCP pushes back on it); the writer
/// closes the connection if it stays stuck. False: the connection closed
/// meanwhile.
async fn wait_for_reader<S: Service>(
    server: &Server<S>,
    backlog: &Backlog,
    close: &CancellationToken,
    client: &dyn PeerStats,
    peer: SocketAddr,
    conn_id: u64,
) -> bool {
    let limit = server.cfg.max_queued_reply_bytes;
    server.obs.count(crate::observe::Event::ReadingPaused);
    if client.log_allowed() {
        warn!(%peer, conn_id, limit, "client is not reading its replies: its calls are not read until they are");
    }
    while backlog.over(limit) {
        tokio::select! {
            _ = close.cancelled() => return false,
            _ = backlog.drained.notified() => {}
        }
    }
    true
}

/// What the writer of a connection needs of its server (not generic, so
/// one writer serves every service type).
trait Watch: Send + Sync {
    fn send_timeout(&self) -> Duration;
    fn closed_unread(&self);
    /// A reply goes out with `bytes` of data spliced from a pipe.
    fn spliced(&self, bytes: usize);
}

impl<S: Service> Watch for Server<S> {
    fn send_timeout(&self) -> Duration {
        self.cfg.send_timeout
    }

    fn closed_unread(&self) {
        self.obs.count(crate::observe::Event::ClosedUnread);
    }

    fn spliced(&self, bytes: usize) {
        self.obs
            .count(crate::observe::Event::ReadSpliced(bytes as u64));
    }
}

async fn write_replies<W: ReplyWrite>(
    mut wr: W,
    mut rx: mpsc::Receiver<Out>,
    peer: SocketAddr,
    backlog: Arc<Backlog>,
    close: CancellationToken,
    watch: Arc<dyn Watch>,
) {
    let mut batch: Vec<Bytes> = Vec::with_capacity(MAX_BATCH);
    let stall = watch.send_timeout();
    let failed = |e: std::io::Error, bytes: usize| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            // The client does not read what it asked for: it loses the
            // connection (and what it holds), the others keep theirs.
            watch.closed_unread();
            warn!(%peer, seconds = stall.as_secs_f64(), queued = bytes, "closing connection: the client has not read its replies");
        } else {
            debug!(%peer, error = %e, "write failed");
        }
        close.cancel();
    };
    while let Some(first) = rx.recv().await {
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(out) = next.take() {
            bytes += out.len();
            match out {
                Out::Bytes(b) => batch.push(b),
                Out::Spliced(s) => {
                    // What is batched goes first, then this reply up to its
                    // data, the data, and the rest of it with what follows.
                    let (reply, att) = *s;
                    // Counted before it goes: a client that has the data
                    // may look at the metrics before this task runs again.
                    watch.spliced(att.len);
                    batch.push(reply.slice(..att.at));
                    if let Err(e) = wr.send_spliced(&mut batch, &att, stall).await {
                        return failed(e, bytes);
                    }
                    let at = att.at;
                    att.sent();
                    batch.clear();
                    if reply.len() > at {
                        batch.push(reply.slice(at..));
                    }
                }
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            if let Err(e) = wr.send_batch(&mut batch, stall).await {
                return failed(e, bytes);
            }
        }
        batch.clear();
        backlog.written(bytes);
    }
    let _ = wr.shutdown().await;
}

/// What a call needs to know about its connection.
struct Conn<'a> {
    peer: SocketAddr,
    conn_id: u64,
    client: &'a Arc<dyn PeerStats>,
    tx: &'a mpsc::Sender<Out>,
    backlog: &'a Arc<Backlog>,
    close: &'a CancellationToken,
    callbacks: &'a ConnCallbacks,
    back: &'a Arc<dyn CallbackConn>,
    xprtsec: XprtSec,
    tls_id: Option<&'a Arc<TlsIdentity>>,
    zero_copy: bool,
}

/// Handles one record: the pipeline decides, the driver carries it out.
/// Replies that need no program work are returned for the reader to send;
/// a call to a program is spawned and replies by itself.
fn handle_record<S: Service>(
    server: &Arc<Server<S>>,
    rec: Bytes,
    conn: &Conn<'_>,
    read_at: Instant,
    timed: bool,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Option<Bytes> {
    let bytes_in = rec.len() as u64;
    let at = Arrival {
        peer: conn.peer,
        conn_id: conn.conn_id,
        client: conn.client,
        now: read_at,
        back: Some(conn.back),
        xprtsec: conn.xprtsec,
        tls_id: conn.tls_id,
        zero_copy: conn.zero_copy,
    };
    match server.pipeline().admit(rec, at) {
        Decision::Reply { bytes, why } => {
            if let (Answered::Null { slot }, true) = (why, timed) {
                let d = CallDone {
                    export: u32::MAX,
                    bytes_in,
                    bytes_out: bytes.len() as u64,
                    queue_ns: read_at.elapsed().as_nanos() as u64,
                    ..Default::default()
                };
                server.obs.call_end(slot, &**conn.client, &d, false);
            }
            Some(bytes)
        }
        Decision::Drop { close, .. } => {
            if close {
                conn.close.cancel();
            }
            None
        }
        Decision::CallbackReply { xid, record } => {
            if !conn.callbacks.deliver(xid, record) {
                // RFC 5531: a stray REPLY is ignored.
                server.obs.count(crate::observe::Event::BadCall);
                if conn.client.log_allowed() {
                    warn!(peer = %conn.peer, xid, "dropping a REPLY no call waits for");
                }
            }
            None
        }
        Decision::Run(call) => {
            let server = server.clone();
            let tx = conn.tx.clone();
            let backlog = conn.backlog.clone();
            let close = conn.close.clone();
            let read_at = timed.then_some(read_at);
            server.in_flight.fetch_add(1, Ordering::Relaxed);
            server.calls.clone().spawn(async move {
                let _permit = permit;
                run_call(&server, call, read_at, &tx, &backlog, &close).await;
                server.in_flight.fetch_sub(1, Ordering::Relaxed);
            });
            None
        }
    }
}

/// Runs one admitted call in its own task: prepare, the procedure (a
/// panic becomes SYSTEM_ERR), finish, count, send.
async fn run_call<S: Service>(
    server: &Server<S>,
    call: Box<Admitted>,
    read_at: Option<Instant>,
    tx: &mpsc::Sender<Out>,
    backlog: &Backlog,
    close: &CancellationToken,
) {
    let started = read_at.map(|t| (t, Instant::now()));
    let p = server.pipeline();
    let (mut ready, args) = match p.prepare(call) {
        Decision::Run(r) => r,
        Decision::Reply { bytes, .. } => {
            send(tx, backlog, bytes).await;
            return;
        }
        Decision::Drop { close: c, .. } => {
            if c {
                close.cancel();
            }
            return;
        }
        // prepare answers calls only.
        Decision::CallbackReply { .. } => return,
    };
    let ctx = &ready.ctx;
    server.obs.call_begin(ready.slot, &*ctx.client);
    let mut out = ready.begin_reply();
    // A bug in one procedure must not leave its caller waiting forever
    // or take the connection down: a panic becomes SYSTEM_ERR.
    let result = if !ready.runs_procedure() {
        Ok(())
    } else {
        let ctx = &ready.ctx;
        std::panic::AssertUnwindSafe(server.svc.call(ctx, args, &mut out))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                let name = server.svc.procedure_name(ctx.prog, ctx.vers, ctx.proc_);
                tracing::error!(peer = %ctx.peer, xid = ctx.xid, procedure = name, "procedure panicked; answering SYSTEM_ERR");
                Err(CallError::SystemErr)
            })
    };
    let done = p.finish(&ready, result, out);
    if let Some((read_at, start)) = started {
        let end = Instant::now();
        let d = CallDone {
            status: done.status,
            export: ready.ctx.export(),
            bytes_in: ready.bytes_in,
            bytes_out: done.reply.as_ref().map_or(0, |r| r.len() as u64)
                + done.attached.as_ref().map_or(0, |a| a.len as u64),
            queue_ns: start.duration_since(read_at).as_nanos() as u64,
            service_ns: end.duration_since(start).as_nanos() as u64,
        };
        server
            .obs
            .call_end(ready.slot, &*ready.ctx.client, &d, true);
    }
    if let Some(r) = done.reply {
        let out = match done.attached {
            Some(a) => Out::Spliced(Box::new((r, a))),
            None => Out::Bytes(r),
        };
        send(tx, backlog, out).await;
    }
}

/// The pipeline's [`Offload`](crate::pipeline::Offload) hook: runs GSS
/// crypto over `len` bytes so that a large wrap or unwrap (or the blocking
/// INIT step, `usize::MAX`) does not stall the other tasks of this async
/// worker.
fn crypto(len: usize, f: &mut dyn FnMut()) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if len >= 64 << 10 && multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}
/// Logs where the server listens (a helper for binaries).
pub fn log_listening(addr: SocketAddr) {
    info!(%addr, "listening");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::write_all_vectored;
    use std::io::IoSlice;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// Takes at most 7 bytes per write, across slices.
    #[derive(Default)]
    struct Trickle(Vec<u8>);

    impl tokio::io::AsyncWrite for Trickle {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            b: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = b.len().min(7);
            self.get_mut().0.extend_from_slice(&b[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let me = self.get_mut();
            let mut left = 7;
            for b in bufs {
                let n = b.len().min(left);
                me.0.extend_from_slice(&b[..n]);
                left -= n;
            }
            Poll::Ready(Ok(7 - left))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn vectored_writes_keep_order_past_one_batch() {
        // More buffers than one vectored write takes, of uneven sizes
        // (an empty one too), written a few bytes at a time.
        let mut bufs: Vec<Bytes> = (0..MAX_BATCH as u8 * 2 + 3)
            .map(|i| Bytes::from(vec![i; (i % 5) as usize]))
            .collect();
        let want: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let mut w = Trickle::default();
        write_all_vectored(&mut w, &mut bufs, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(w.0, want);
    }

    /// Counts the bytes spliced.
    #[derive(Default)]
    struct Quiet(std::sync::atomic::AtomicUsize);
    impl Watch for Quiet {
        fn send_timeout(&self) -> Duration {
            Duration::from_secs(10)
        }
        fn closed_unread(&self) {}
        fn spliced(&self, bytes: usize) {
            self.0
                .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// File data in pipes goes out in its replies' places, between other
    /// replies, over a socket the reader drains slowly (the splice waits
    /// for room), and the drained pipes are reused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spliced_replies_keep_their_place_among_the_others() {
        use nix::fcntl::{splice, SpliceFFlags};
        use tokio::io::AsyncReadExt;
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
        std::io::Write::write_all(&mut file, &data).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 5000];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break got;
                }
                got.extend_from_slice(&buf[..n]);
                tokio::task::yield_now().await;
            }
        });
        let (_rd, wr) = TcpStream::connect(addr).await.unwrap().into_split();
        let (tx, rx) = mpsc::channel(8);
        let backlog = Arc::new(Backlog::default());
        let watch = Arc::new(Quiet::default());
        let writer = tokio::spawn(write_replies(
            wr,
            rx,
            addr,
            backlog.clone(),
            CancellationToken::new(),
            watch.clone(),
        ));
        let (mut want, mut attached) = (Vec::new(), 0);
        let mut off: i64 = 0;
        for i in 0..6u8 {
            // Small replies, then one whose data (not page-aligned) sits
            // between a head and a tail, then one that ends with its data.
            let small = Bytes::from(vec![i; 37]);
            want.extend_from_slice(&small);
            assert!(send(&tx, &backlog, small).await);
            let Some(pipe) = crate::zero_copy::Pipe::get() else {
                return; // no 1 MiB pipes on this kernel
            };
            let len = 400_000 + i as usize * 1001;
            let start = off as usize;
            let n = splice(
                &file,
                Some(&mut off),
                pipe.input(),
                None,
                len,
                SpliceFFlags::empty(),
            )
            .unwrap();
            assert_eq!(n, len);
            attached += len;
            let head = vec![0xA0 | i; 11];
            let tail = if i % 2 == 0 {
                vec![0xB0 | i; 3]
            } else {
                vec![]
            };
            want.extend_from_slice(&head);
            want.extend_from_slice(&data[start..start + len]);
            want.extend_from_slice(&tail);
            let reply = Bytes::from([head.clone(), tail].concat());
            let att = crate::zero_copy::Attachment::new(head.len(), len, pipe);
            assert!(send(&tx, &backlog, Out::Spliced(Box::new((reply, att)))).await);
        }
        drop(tx);
        writer.await.unwrap();
        assert_eq!(reader.await.unwrap(), want);
        assert!(backlog.empty());
        assert_eq!(watch.0.load(std::sync::atomic::Ordering::Relaxed), attached);
    }
}
