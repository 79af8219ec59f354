//! An RPC client over one TCP connection with many calls in flight: calls are
//! written under a lock, replies are matched to callers by xid by a reader task.
//!
//! The connection may carry calls the other way too (the NFSv4.1 back
//! channel, RFC 8881 §2.10.3.1): a CALL record that arrives is handed to the
//! registered [`CallHandler`] and its reply written back on the same
//! connection. Without a handler such calls are answered PROG_UNAVAIL.

use crate::msg::{self, ReplyStatus};
use crate::record::{self, Assembler, DEFAULT_MAX_RECORD};
use bytes::{BufMut, Bytes, BytesMut};
use proto::rpc::{AcceptStat, AuthStat, AuthsysParms, OpaqueAuth, AUTH_NONE, AUTH_SYS};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use xdr::{Decoder, Pack};

/// The calls [`RpcClient`] and [`Channel`] make alike: a record with the
/// client's credential (`cred`), sent as `send` says (given the call's
/// xid and record), answered with the whole reply record or its results.
macro_rules! record_calls {
    (|$this:ident, $xid:ident, $rec:ident| cred: $cred:expr, send: $send:expr) => {
        /// Sends a call whose arguments are already encoded; returns the
        /// whole reply record.
        pub async fn call_raw(
            &$this,
            prog: u32,
            vers: u32,
            proc_: u32,
            args: &[u8],
        ) -> Result<bytes::Bytes, $crate::client::ClientError> {
            let $xid = $this.next_xid();
            let cred = $crate::client::effective_cred($cred);
            let $rec = $crate::client::call_record($xid, prog, vers, proc_, &cred, args);
            $send
        }

        /// Calls a procedure and returns a decoder positioned at its results.
        pub async fn call<A: xdr::Pack>(
            &$this,
            prog: u32,
            vers: u32,
            proc_: u32,
            args: &A,
        ) -> Result<xdr::Decoder, $crate::client::ClientError> {
            $crate::client::results($this.call_packed(prog, vers, proc_, args).await?)
        }

        /// Sends a call with `args` encoded straight into its record (one
        /// copy of a WRITE's data, see
        /// [`call_record_with`](crate::client::call_record_with)); returns
        /// the whole reply record.
        pub async fn call_packed<A: xdr::Pack>(
            &$this,
            prog: u32,
            vers: u32,
            proc_: u32,
            args: &A,
        ) -> Result<bytes::Bytes, $crate::client::ClientError> {
            let $xid = $this.next_xid();
            let cred = $crate::client::effective_cred($cred);
            let $rec =
                $crate::client::call_record_with($xid, prog, vers, proc_, &cred, 0, |o| args.pack(o));
            $send
        }
    };
}

pub mod channel;
pub mod gss;

pub use channel::{Channel, ChannelOptions, ChannelStats, ConnectHook, OpStat};

#[cfg(test)]
mod refusal_tests;

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
    /// RPC-with-TLS refused: the server does not do it, refused our
    /// certificate or we refused its. Final: trying again gets the same
    /// answer, so a hard mount does not reconnect for ever (network
    /// failures around the handshake are [`ClientError::Io`]).
    #[error("RPC-with-TLS: {0}")]
    Tls(String),
    #[error("RPCSEC_GSS: {0}")]
    Gss(String),
    /// A soft call got no reply after its retries ([`Channel`]).
    #[error("no reply from the server (timed out)")]
    TimedOut,
}

/// Callers waiting for replies, by xid. Once the connection has ended
/// (`closed`) nobody may wait: a call written into a socket whose reader
/// is gone (the peer closed before our write failed) would wait for ever.
#[derive(Default)]
struct Waiters {
    by_xid: HashMap<u32, oneshot::Sender<Bytes>>,
    closed: bool,
}

impl Waiters {
    fn end(&mut self) {
        self.closed = true;
        // Dropping the senders wakes every waiting caller with Closed.
        self.by_xid.clear();
    }
}

type Pending = Arc<Mutex<Waiters>>;
/// The write half of a connection, plain or TLS.
pub type BoxWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;
/// The read half of a connection, plain or TLS.
pub type BoxRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// What the reader takes replies off: a byte stream, or Tarn's TLS
/// records, opened where they are received (no copy of a reply's data).
pub enum ReadHalf {
    Stream(BoxRead),
    Records(Box<crate::tls::records::RecordRead<tokio::net::tcp::OwnedReadHalf>>),
}

impl ReadHalf {
    /// Reads about `want` more bytes into `buf` (0 at the end).
    async fn fill(&mut self, buf: &mut BytesMut, want: usize) -> std::io::Result<usize> {
        match self {
            ReadHalf::Stream(rd) => rd.read_buf(&mut buf.limit(want)).await,
            ReadHalf::Records(rd) => rd.fill(buf, want).await,
        }
    }
}
type Writer = Arc<tokio::sync::Mutex<BoxWrite>>;

/// Writes all of `b` and flushes (TLS holds back what is not flushed).
async fn put(wr: &Writer, b: &[u8]) -> std::io::Result<()> {
    let mut w = wr.lock().await;
    w.write_all(b).await?;
    w.flush().await
}
type HandlerSlot = Arc<Mutex<Option<Arc<dyn CallHandler>>>>;

/// Why a call that reached us gets no results: the RPC-level answers a
/// program's server side can give (RFC 5531 §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    ProgUnavail,
    /// The program is here, but only versions `low..=high`.
    ProgMismatch {
        low: u32,
        high: u32,
    },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    Auth(AuthStat),
    /// No reply at all (the caller will retransmit or give up).
    Drop,
}

/// What a call handler returns: the procedure's encoded results.
pub type CallResult = Result<Bytes, Refusal>;

/// A boxed future of a call handler.
pub type HandlerFuture = Pin<Box<dyn Future<Output = CallResult> + Send>>;

/// Serves calls the peer sends on our connection. Each call runs in its
/// own task, so a handler may itself make calls on the same connection.
pub trait CallHandler: Send + Sync + 'static {
    /// `call.args` is positioned at the procedure's arguments.
    fn call(&self, call: msg::Call) -> HandlerFuture;
}

pub struct RpcClient {
    wr: Writer,
    pending: Pending,
    handler: HandlerSlot,
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

tokio::task_local! {
    /// The AUTH_SYS credential of the caller on whose behalf a task calls
    /// (a FUSE mount serving many users over one connection).
    static CALLER: OpaqueAuth;
}

/// Runs `f` with its calls over AUTH_SYS connections made as `cred`
/// instead of the connection's own credential (connections under
/// RPCSEC_GSS or AUTH_NONE keep theirs). Tasks `f` spawns do not inherit it.
pub async fn as_caller<F: std::future::Future>(cred: OpaqueAuth, f: F) -> F::Output {
    CALLER.scope(cred, f).await
}

/// The credential [`as_caller`] set for this task, if any.
pub fn current_caller() -> Option<OpaqueAuth> {
    CALLER.try_with(|c| c.clone()).ok()
}

tokio::task_local! {
    /// The process a FUSE request came from, beside its [`CALLER`]: where
    /// RPCSEC_GSS looks for the caller's credential cache (its KRB5CCNAME).
    static CALLER_PID: u32;
}

/// [`as_caller`], also naming the calling process (`pid`).
pub async fn as_caller_pid<F: std::future::Future>(cred: OpaqueAuth, pid: u32, f: F) -> F::Output {
    CALLER.scope(cred, CALLER_PID.scope(pid, f)).await
}

/// The calling process [`as_caller_pid`] set for this task, if any.
pub fn current_caller_pid() -> Option<u32> {
    CALLER_PID.try_with(|p| *p).ok()
}

/// The uid of the credential [`as_caller`] set for this task, if it is
/// an AUTH_SYS one.
pub fn current_caller_uid() -> Option<u32> {
    let c = current_caller()?;
    if c.flavor != AUTH_SYS {
        return None;
    }
    let mut d = Decoder::new(c.body);
    <AuthsysParms as xdr::Unpack>::unpack(&mut d)
        .ok()
        .map(|p| p.uid)
}

/// The credential a call goes with: the caller's (see [`as_caller`]) when
/// the connection's own is AUTH_SYS.
fn effective_cred(own: &OpaqueAuth) -> std::borrow::Cow<'_, OpaqueAuth> {
    if own.flavor == AUTH_SYS {
        if let Ok(c) = CALLER.try_with(|c| c.clone()) {
            return std::borrow::Cow::Owned(c);
        }
    }
    std::borrow::Cow::Borrowed(own)
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

/// Source ports below 1024 tried when the process may bind them.
pub const RESERVED: std::ops::Range<u16> = 665..1024;

/// A TCP connection to `addr`, from a reserved source port (below 1024)
/// when the process may bind one: servers exporting with knfsd's default
/// `secure` option, and many MOUNT daemons, refuse calls from other
/// ports, as they expect a kernel client or root. Otherwise any port.
pub async fn tcp_reserved(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    use std::io::ErrorKind;
    let start = RESERVED.start + (std::process::id() % (RESERVED.len() as u32)) as u16;
    for i in 0..16u16 {
        let port = RESERVED.start + (start - RESERVED.start + i * 7) % RESERVED.len() as u16;
        let sock = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        sock.set_reuseaddr(true)?;
        let local = SocketAddr::new(
            match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
            },
            port,
        );
        match sock.bind(local) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::PermissionDenied => break,
            Err(_) => continue,
        }
        match sock.connect(addr).await {
            Ok(s) => return Ok(s),
            // This source port is still tied to `addr` (TIME_WAIT): the next.
            Err(e)
                if e.kind() == ErrorKind::AddrInUse || e.kind() == ErrorKind::AddrNotAvailable =>
            {
                continue
            }
            Err(e) => return Err(e),
        }
    }
    tokio::net::TcpStream::connect(addr).await
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
        let (rd, wr) = s.into_split();
        Ok(Self::from_halves(
            ReadHalf::Stream(Box::new(rd)),
            Box::new(wr),
            local,
            cred,
        ))
    }

    /// RPC-with-TLS (RFC 9289) over a fresh connection: the STARTTLS
    /// probe, the TLS 1.3 handshake, then a client inside TLS.
    pub async fn from_stream_tls(
        mut s: TcpStream,
        cred: OpaqueAuth,
        tls: &crate::tls::TlsClient,
    ) -> Result<Self, ClientError> {
        s.set_nodelay(true)?;
        let local = s.local_addr()?;
        let xid = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        s.write_all(&crate::tls::starttls_call(xid, 100003, 3))
            .await?;
        // Read exactly the one reply record: what follows is TLS.
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark).await?;
        let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
        if len > 4096 {
            return Err(ClientError::Tls(
                "oversized reply to the STARTTLS probe".into(),
            ));
        }
        let mut rec = vec![0u8; len];
        s.read_exact(&mut rec).await?;
        if !crate::tls::is_starttls_reply(&rec, xid) {
            let why = match msg::decode_reply(Bytes::from(rec)) {
                Ok((_, st, _)) => format!("{st:?}"),
                Err(e) => e.to_string(),
            };
            return Err(ClientError::Tls(format!(
                "the server does not do RPC-with-TLS (its answer to the STARTTLS probe: {why})"
            )));
        }
        let conn = tokio_rustls::TlsConnector::from(tls.config.clone());
        // On a cork stream, so that the records after the handshake can
        // be taken over from rustls (tls::records).
        let mut t = conn
            .connect(tls.server_name.clone(), ktls::CorkStream::new(s))
            .await
            .map_err(|e| handshake_error(e, false))?;
        // Under TLS 1.3 our side of the handshake ends before the server
        // has judged our certificate (or its absence): its refusal, an
        // alert or a close, comes after. A NULL call, answered by any
        // server that took us, brings that refusal out here, where it is
        // final, rather than as a connection lost later, which a hard
        // mount would make again and again.
        let xid = xid.wrapping_add(1);
        let mut ping = BytesMut::with_capacity(48);
        record::begin(&mut ping);
        msg::encode_call(xid, 100003, 3, 0, &auth_none(), &mut ping);
        record::finish(&mut ping);
        let confirm = async {
            t.write_all(&ping).await?;
            t.flush().await?;
            let mut mark = [0u8; 4];
            t.read_exact(&mut mark).await?;
            let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
            if len > 4096 {
                return Err(std::io::Error::other("oversized reply to a NULL call"));
            }
            let mut rec = vec![0u8; len];
            t.read_exact(&mut rec).await
        };
        match tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(handshake_error(e, true)),
            Err(_) => {
                return Err(ClientError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer to a NULL call after the TLS handshake",
                )))
            }
        }
        let (rd, wr) = crate::tls::records::records(t).await?;
        Ok(Self::from_halves(
            ReadHalf::Records(Box::new(rd)),
            Box::new(wr),
            local,
            cred,
        ))
    }

    /// A client over the two halves of a connection.
    pub fn from_halves(
        mut rd: ReadHalf,
        wr: BoxWrite,
        local: SocketAddr,
        cred: OpaqueAuth,
    ) -> Self {
        let pending: Pending = Arc::default();
        let handler: HandlerSlot = Arc::default();
        let wr: Writer = Arc::new(tokio::sync::Mutex::new(wr));
        let (p2, h2, w2) = (pending.clone(), handler.clone(), wr.clone());
        let reader = tokio::spawn(async move {
            let mut asm = Assembler::new(DEFAULT_MAX_RECORD * 2);
            let mut buf = BytesMut::new();
            'conn: loop {
                loop {
                    let rec = match asm.next(&mut buf) {
                        Ok(Some(rec)) => rec,
                        Ok(None) => break,
                        // A record past the limit: the stream cannot be followed.
                        Err(_) => break 'conn,
                    };
                    if rec.len() < 8 {
                        continue;
                    }
                    // The message type follows the xid: 0 CALL, 1 REPLY.
                    if rec[4..8] == [0, 0, 0, 0] {
                        serve_call(rec, &h2, &w2);
                        continue;
                    }
                    let xid = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
                    if let Some(tx) = p2.lock().unwrap().by_xid.remove(&xid) {
                        let _ = tx.send(rec);
                    }
                }
                // No further than the next record's mark: a READ's data
                // is then received into a buffer of its own, never copied.
                let want = asm.prepare_read(&mut buf);
                match rd.fill(&mut buf, want).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            p2.lock().unwrap().end();
        });
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        RpcClient {
            wr,
            pending,
            handler,
            next_xid: AtomicU32::new(seed),
            cred,
            local,
            reader,
        }
    }

    /// Serves the calls the peer sends on this connection from now on
    /// (replacing any handler set before).
    pub fn set_call_handler(&self, h: Arc<dyn CallHandler>) {
        *self.handler.lock().unwrap() = Some(h);
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
        let rx = self.wait_for(xid)?;
        if let Err(e) = put(&self.wr, rec).await {
            self.forget(xid);
            return Err(e.into());
        }
        Ok(async move { rx.await.map_err(|_| ClientError::Closed) })
    }

    record_calls!(|self, xid, rec| cred: &self.cred, send: self.send_record(xid, &rec).await);

    /// Stops waiting for the reply to `xid` (its call is being resent
    /// elsewhere, or abandoned).
    pub fn forget(&self, xid: u32) {
        self.pending.lock().unwrap().by_xid.remove(&xid);
    }

    /// Registers a wait for `xid`'s reply; Closed if the connection ended.
    fn wait_for(&self, xid: u32) -> Result<oneshot::Receiver<Bytes>, ClientError> {
        let (tx, rx) = oneshot::channel();
        let mut p = self.pending.lock().unwrap();
        if p.closed {
            return Err(ClientError::Closed);
        }
        p.by_xid.insert(xid, tx);
        Ok(rx)
    }

    /// Ends the connection: every waiting caller gets Closed. (After a
    /// write that was cut short the byte stream cannot be trusted.)
    pub fn close(&self) {
        self.reader.abort();
        self.pending.lock().unwrap().end();
        let wr = self.wr.clone();
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(async move {
                let _ = wr.lock().await.shutdown().await;
            });
        }
    }

    /// Whether the connection ended (the peer closed it or it broke):
    /// calls on it can only fail.
    pub fn is_closed(&self) -> bool {
        self.reader.is_finished()
    }

    /// Sends raw bytes on the connection (for tests of malformed input).
    pub async fn send_bytes(&self, b: &[u8]) -> Result<(), ClientError> {
        Ok(put(&self.wr, b).await?)
    }
}

/// How long a new TLS connection waits for the answer to its first call.
const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// A failed TLS handshake (`after`: the first call after it) as a client
/// error: final ([`ClientError::Tls`]) when a side refused the other,
/// else an I/O error to retry.
fn handshake_error(e: std::io::Error, after: bool) -> ClientError {
    use tokio_rustls::rustls::Error as E;
    let t = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<tokio_rustls::rustls::Error>());
    match t {
        Some(E::AlertReceived(a)) => {
            use tokio_rustls::rustls::AlertDescription as A;
            let why = match a {
                A::UnknownCA => " (it does not trust the CA of our client certificate)",
                A::CertificateRequired => " (it wants a client certificate: xprtsec=mtls)",
                A::CertificateExpired => " (our client certificate has expired)",
                A::BadCertificate | A::UnsupportedCertificate | A::CertificateUnknown => {
                    " (it does not accept our client certificate)"
                }
                A::CertificateRevoked => " (our client certificate was revoked)",
                _ => "",
            };
            ClientError::Tls(format!(
                "the server refused the connection{}: TLS alert {}{why}",
                if after { " after the handshake" } else { "" },
                crate::tls::alert_name(*a)
            ))
        }
        Some(E::InvalidCertificate(c)) => ClientError::Tls(format!(
            "the server's certificate is not accepted: {c:?} (check tls-ca= and the host name)"
        )),
        Some(other) => ClientError::Tls(format!("handshake: {other}")),
        // The server closed as soon as the handshake was over: what a TLS
        // 1.3 server that refuses a client certificate without an alert
        // (or with one lost to the close) does.
        None if after
            && matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
            ) =>
        {
            ClientError::Tls(
                "the server closed the connection right after the TLS handshake \
                 (it refuses our client certificate, or wants one)"
                    .into(),
            )
        }
        None => ClientError::Io(e),
    }
}

impl ClientError {
    /// Whether trying again cannot help (see [`ClientError::Tls`]).
    pub fn is_final(&self) -> bool {
        matches!(self, ClientError::Tls(_))
    }
}

/// A whole call record (record mark included) with `cred` and the encoded
/// `args`.
pub fn call_record(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &OpaqueAuth,
    args: &[u8],
) -> Bytes {
    call_record_with(xid, prog, vers, proc_, cred, args.len(), |out| {
        out.put_slice(args)
    })
}

/// A whole call record with `cred` and the arguments `pack` appends
/// (about `hint` bytes), encoded straight into the record: a WRITE's data
/// is copied once, not into an argument buffer and then into the record.
pub fn call_record_with(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &OpaqueAuth,
    hint: usize,
    pack: impl FnOnce(&mut BytesMut),
) -> Bytes {
    // The header: record mark, call body, credential, verifier.
    let head = 4 + 40 + cred.body.len() + 8;
    let mut out = BytesMut::with_capacity(head + hint);
    record::begin(&mut out);
    msg::encode_call(xid, prog, vers, proc_, cred, &mut out);
    pack(&mut out);
    record::finish(&mut out);
    out.freeze()
}

/// A reply record's results when the call succeeded; otherwise the RPC
/// error it carries (PROG_UNAVAIL, an auth error, ...).
pub fn results(rec: Bytes) -> Result<Decoder, ClientError> {
    match msg::decode_reply(rec)? {
        (_, ReplyStatus::Success, d) => Ok(d),
        (_, other, _) => Err(ClientError::Rpc(other)),
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
            self.forget(xid);
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

/// Answers one CALL record from the peer: decoded here, run by the handler
/// in a task of its own (it may call us back over this connection, whose
/// replies this reader must keep delivering), the reply written back.
fn serve_call(rec: Bytes, handler: &HandlerSlot, wr: &Writer) {
    let call = match msg::decode_call(rec) {
        Ok(c) => c,
        Err(msg::BadCall::Garbage(xid) | msg::BadCall::BadCred(xid)) => {
            let wr = wr.clone();
            tokio::spawn(async move {
                write_reply(&wr, xid, Err(Refusal::GarbageArgs)).await;
            });
            return;
        }
        Err(_) => return,
    };
    let h = handler.lock().unwrap().clone();
    let wr = wr.clone();
    tokio::spawn(async move {
        let xid = call.xid;
        if call.rpcvers != 2 {
            let mut out = BytesMut::new();
            record::begin(&mut out);
            msg::rpc_mismatch(xid, &mut out);
            record::finish(&mut out);
            let _ = put(&wr, &out).await;
            return;
        }
        let r = match h {
            Some(h) => h.call(call).await,
            None => Err(Refusal::ProgUnavail),
        };
        write_reply(&wr, xid, r).await;
    });
}

async fn write_reply(wr: &Writer, xid: u32, r: CallResult) {
    let mut out = BytesMut::with_capacity(64 + r.as_ref().map_or(0, |b| b.len()));
    record::begin(&mut out);
    match r {
        Ok(results) => {
            msg::success_header(xid, &mut out);
            out.put_slice(&results);
        }
        Err(Refusal::Drop) => return,
        Err(Refusal::ProgUnavail) => msg::accepted_error(xid, AcceptStat::PROG_UNAVAIL, &mut out),
        Err(Refusal::ProgMismatch { low, high }) => msg::prog_mismatch(xid, low, high, &mut out),
        Err(Refusal::ProcUnavail) => msg::accepted_error(xid, AcceptStat::PROC_UNAVAIL, &mut out),
        Err(Refusal::GarbageArgs) => msg::accepted_error(xid, AcceptStat::GARBAGE_ARGS, &mut out),
        Err(Refusal::SystemErr) => msg::accepted_error(xid, AcceptStat::SYSTEM_ERR, &mut out),
        Err(Refusal::Auth(s)) => msg::auth_error(xid, s, &mut out),
    }
    record::finish(&mut out);
    // A write error means the connection is going: the reader sees it too.
    let _ = put(wr, &out).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{OnceLock, Weak};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    const CB_PROG: u32 = 0x4000_0000;

    /// Answers CB_PROG proc 1 with its argument plus one, after a call of
    /// its own to the peer over the same connection (as a recalled
    /// delegation is returned over the connection that carried the recall).
    struct Echo {
        client: OnceLock<Weak<RpcClient>>,
    }

    impl CallHandler for Echo {
        fn call(&self, mut call: msg::Call) -> HandlerFuture {
            let client = self.client.get().and_then(|w| w.upgrade());
            Box::pin(async move {
                match (call.prog, call.proc_) {
                    (CB_PROG, 0) => Ok(Bytes::new()),
                    (CB_PROG, 1) => {
                        let n = call.args.u32().map_err(|_| Refusal::GarbageArgs)?;
                        if let Some(c) = client {
                            c.call(7, 1, 1, &n).await.map_err(|_| Refusal::SystemErr)?;
                        }
                        Ok(Bytes::copy_from_slice(&(n + 1).to_be_bytes()))
                    }
                    (CB_PROG, _) => Err(Refusal::ProcUnavail),
                    _ => Err(Refusal::ProgUnavail),
                }
            })
        }
    }

    /// A peer that answers every call with 42 and hands the replies it
    /// gets to the test; `calls` are sent to the client.
    async fn peer(l: TcpListener, mut calls: mpsc::Receiver<Bytes>, replies: mpsc::Sender<Bytes>) {
        let (s, _) = l.accept().await.unwrap();
        let (mut rd, mut wr) = s.into_split();
        let mut asm = Assembler::new(1 << 20);
        let mut buf = BytesMut::new();
        loop {
            while let Ok(Some(rec)) = asm.next(&mut buf) {
                if rec[4..8] == [0, 0, 0, 0] {
                    let c = msg::decode_call(rec).unwrap();
                    let mut out = BytesMut::new();
                    record::begin(&mut out);
                    msg::success_header(c.xid, &mut out);
                    out.put_u32(42);
                    record::finish(&mut out);
                    wr.write_all(&out).await.unwrap();
                } else {
                    replies.send(rec).await.unwrap();
                }
            }
            tokio::select! {
                n = rd.read_buf(&mut buf) => if n.unwrap_or(0) == 0 { return },
                Some(c) = calls.recv() => wr.write_all(&c).await.unwrap(),
            }
        }
    }

    fn call_record(xid: u32, prog: u32, vers: u32, proc_: u32, arg: Option<u32>) -> Bytes {
        let mut out = BytesMut::new();
        record::begin(&mut out);
        msg::encode_call(xid, prog, vers, proc_, &auth_none(), &mut out);
        if let Some(a) = arg {
            out.put_u32(a);
        }
        record::finish(&mut out);
        out.freeze()
    }

    #[tokio::test]
    async fn calls_from_the_peer_are_served_on_the_same_connection() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (call_tx, call_rx) = mpsc::channel(8);
        let (rep_tx, mut rep_rx) = mpsc::channel(8);
        tokio::spawn(peer(l, call_rx, rep_tx));
        let c = Arc::new(RpcClient::connect(addr, auth_none()).await.unwrap());

        // No handler yet: PROG_UNAVAIL.
        call_tx
            .send(call_record(1, CB_PROG, 1, 0, None))
            .await
            .unwrap();
        let (xid, st, _) = msg::decode_reply(rep_rx.recv().await.unwrap()).unwrap();
        assert_eq!(
            (xid, st),
            (1, ReplyStatus::Accepted(AcceptStat::PROG_UNAVAIL))
        );

        let h = Arc::new(Echo {
            client: OnceLock::new(),
        });
        h.client.set(Arc::downgrade(&c)).ok().unwrap();
        c.set_call_handler(h);
        // Our own calls still get their replies, alongside the peer's calls.
        let mut d = c.call(9, 1, 1, &5u32).await.unwrap();
        assert_eq!(d.u32().unwrap(), 42);
        call_tx
            .send(call_record(2, CB_PROG, 1, 1, Some(10)))
            .await
            .unwrap();
        let (xid, st, mut d) = msg::decode_reply(rep_rx.recv().await.unwrap()).unwrap();
        assert_eq!((xid, st), (2, ReplyStatus::Success));
        assert_eq!(
            d.u32().unwrap(),
            11,
            "answered after its own call came back"
        );
        call_tx
            .send(call_record(3, CB_PROG, 1, 9, None))
            .await
            .unwrap();
        let (_, st, _) = msg::decode_reply(rep_rx.recv().await.unwrap()).unwrap();
        assert_eq!(st, ReplyStatus::Accepted(AcceptStat::PROC_UNAVAIL));
        call_tx.send(call_record(4, 77, 1, 0, None)).await.unwrap();
        let (_, st, _) = msg::decode_reply(rep_rx.recv().await.unwrap()).unwrap();
        assert_eq!(st, ReplyStatus::Accepted(AcceptStat::PROG_UNAVAIL));
    }

    /// A call on a connection the peer has closed fails at once: the
    /// first write into such a socket still succeeds, and with the reader
    /// gone nobody would ever answer its waiter (an UMNT at exit after a
    /// server restart hung the tools so).
    #[tokio::test]
    async fn a_call_after_the_peer_closed_fails_instead_of_waiting() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accept = tokio::spawn(async move { drop(l.accept().await.unwrap()) });
        let c = RpcClient::connect(addr, auth_none()).await.unwrap();
        accept.await.unwrap();
        while !c.is_closed() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let r = tokio::time::timeout(std::time::Duration::from_secs(5), c.call_raw(7, 1, 0, &[]))
            .await
            .expect("the call must not wait for ever");
        assert!(
            matches!(r, Err(ClientError::Closed) | Err(ClientError::Io(_))),
            "{r:?}"
        );
    }
}
