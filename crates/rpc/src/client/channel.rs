//! A reconnecting, retransmitting RPC transport over up to `nconnect` TCP
//! connections to one server, with [`RpcClient`]'s call API.
//!
//! Each call is written once, on the least-loaded connection. A call whose
//! connection breaks is sent again, with the same xid, on a new connection
//! as soon as one is made (the server's duplicate request cache or NFSv4.1
//! slot answers a call it already executed). A call with no reply after a
//! timeout is sent again on the next connection; the timeout grows by
//! `timeo` each time, up to [`ChannelOptions::max_timeo`], as Linux does over
//! TCP. After `retrans` such retries a soft call fails with
//! [`ClientError::TimedOut`]; a hard call logs "server H not responding,
//! still trying" once and goes on for ever, and the first reply after that
//! logs "server H OK".
//!
//! While the server is away, connections are retried with a pause that
//! doubles up to [`ChannelOptions::max_backoff`], never in a busy loop.
//! A server that refuses the connection itself (RPC-with-TLS: it refuses
//! our certificate, or we its) is not: the call fails with that reason,
//! hard or soft ([`ClientError::is_final`]).
//!
//! The layer above may rebuild a call for each transmission
//! ([`Channel::send_record_with`]): RPCSEC_GSS must put a new sequence
//! number on a retransmission (RFC 2203 §5.3.3.1) under the same xid.

use super::{CallHandler, ClientError, RpcClient};
use bytes::Bytes;
use proto::rpc::OpaqueAuth;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How a [`Channel`] waits, retries and spreads its calls. The defaults
/// are those of a Linux NFS mount over TCP (`hard,timeo=600,retrans=2`).
#[derive(Clone, Debug)]
pub struct ChannelOptions {
    /// TCP connections to the server (at least 1).
    pub nconnect: usize,
    /// How long the first transmission waits for its reply.
    pub timeo: Duration,
    /// Retries before a soft call fails or a hard one reports the server
    /// not responding.
    pub retrans: u32,
    /// Retry for ever (true) or fail after `retrans` retries.
    pub hard: bool,
    /// The timeout never grows beyond this.
    pub max_timeo: Duration,
    /// First pause before reconnecting; doubles while connecting fails.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// The server's name in log messages.
    pub server: String,
    /// Connect from a reserved source port when the process may bind one
    /// ([`tcp_reserved`](super::tcp_reserved)): NFSv3 servers exporting
    /// `secure` (knfsd's default) want it.
    pub reserved_port: bool,
    /// RPC-with-TLS on every connection (RFC 9289).
    pub tls: Option<crate::tls::TlsClient>,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            nconnect: 1,
            timeo: Duration::from_secs(60),
            retrans: 2,
            hard: true,
            max_timeo: Duration::from_secs(600),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(3),
            server: String::new(),
            reserved_port: false,
            tls: None,
        }
    }
}

/// Runs on every new connection before the channel sends a call on it
/// (e.g. BIND_CONN_TO_SESSION for NFSv4.1). It gets the connection itself
/// and its index; a failure is the hook's to report, the connection is
/// used anyway.
pub type ConnectHook =
    Arc<dyn Fn(Arc<RpcClient>, usize) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

struct SlotState {
    conn: Option<Arc<RpcClient>>,
    /// Connections made on this slot so far.
    made: u64,
    pause: Duration,
}

struct Slot {
    /// Held while connecting, so callers wait for one connection, not
    /// make one each.
    state: tokio::sync::Mutex<SlotState>,
    /// Calls waiting for a reply on this slot.
    load: AtomicUsize,
    /// A reply came on the current connection: the next reconnect starts
    /// from the shortest pause again.
    answered: AtomicBool,
}

struct Inner {
    addr: SocketAddr,
    cred: OpaqueAuth,
    opts: ChannelOptions,
    slots: Vec<Slot>,
    next_xid: AtomicU32,
    rr: AtomicUsize,
    handler: Mutex<Option<Arc<dyn CallHandler>>>,
    hook: Mutex<Option<ConnectHook>>,
    /// Set while a hard call reported the server not responding.
    not_responding: AtomicBool,
    /// Set once a reconnect was refused for good (logged once).
    refused: AtomicBool,
    /// Transmissions beyond the first of a call (for tests and metrics).
    retransmits: AtomicU64,
    /// Connections made after the first ones.
    reconnects: AtomicU64,
    /// Calls made (first transmissions).
    calls: AtomicU64,
    /// Transmissions whose wait for a reply ran out.
    timeouts: AtomicU64,
    /// Soft calls failed after `retrans` retries (the caller got EIO).
    major_timeouts: AtomicU64,
    /// Since when transmissions have gone unanswered (a timeout or a lost
    /// connection, no reply since); None while replies come.
    trouble_since: Mutex<Option<std::time::SystemTime>>,
    /// Per operation, as the layer above names its calls
    /// ([`Channel::count_op`]).
    ops: Mutex<std::collections::BTreeMap<&'static str, OpStat>>,
}

/// Calls of one operation: how many, how many failed (no reply, or the
/// transport refused), and their total time to the reply (retries in).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpStat {
    pub count: u64,
    pub errors: u64,
    pub total: Duration,
}

impl OpStat {
    pub fn mean(&self) -> Duration {
        if self.count == 0 {
            Duration::ZERO
        } else {
            self.total / self.count as u32
        }
    }
}

/// What a [`Channel`] has seen, for `nfsstat -m`-like reports.
#[derive(Clone, Debug, Default)]
pub struct ChannelStats {
    pub calls: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub major_timeouts: u64,
    pub reconnects: u64,
    /// Connections open now, of `nconnect`.
    pub connected: usize,
    pub nconnect: usize,
    /// Unanswered since then (reconnecting or not responding).
    pub trouble_since: Option<std::time::SystemTime>,
    pub ops: Vec<(&'static str, OpStat)>,
}

/// A cloneable handle: clones share the connections.
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("addr", &self.inner.addr)
            .field("nconnect", &self.inner.slots.len())
            .finish()
    }
}

/// Counts a call on a slot while it waits.
struct Load<'a>(&'a AtomicUsize);

impl<'a> Load<'a> {
    fn new(a: &'a AtomicUsize) -> Self {
        a.fetch_add(1, Ordering::Relaxed);
        Load(a)
    }
}

impl Drop for Load<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A new TCP connection as `opts` want it.
async fn dial(addr: SocketAddr, opts: &ChannelOptions) -> std::io::Result<TcpStream> {
    if opts.reserved_port {
        super::tcp_reserved(addr).await
    } else {
        TcpStream::connect(addr).await
    }
}

/// A new connection, TLS started on it if `opts` want it.
async fn open(
    addr: SocketAddr,
    opts: &ChannelOptions,
    cred: &OpaqueAuth,
) -> Result<RpcClient, ClientError> {
    let s = dial(addr, opts).await?;
    match &opts.tls {
        None => RpcClient::from_stream(s, cred.clone()),
        Some(t) => RpcClient::from_stream_tls(s, cred.clone(), t).await,
    }
}

impl Channel {
    /// Connects every connection now: an error here (nobody listening) is
    /// the caller's to report. Later losses are the channel's to repair.
    pub async fn connect(
        addr: SocketAddr,
        cred: OpaqueAuth,
        mut opts: ChannelOptions,
    ) -> Result<Channel, ClientError> {
        opts.nconnect = opts.nconnect.max(1);
        if opts.server.is_empty() {
            opts.server = addr.ip().to_string();
        }
        let first = open(addr, &opts, &cred).await?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let slots = (0..opts.nconnect)
            .map(|_| Slot {
                state: tokio::sync::Mutex::new(SlotState {
                    conn: None,
                    made: 0,
                    pause: opts.min_backoff,
                }),
                load: AtomicUsize::new(0),
                answered: AtomicBool::new(false),
            })
            .collect();
        let ch = Channel {
            inner: Arc::new(Inner {
                addr,
                cred,
                opts,
                slots,
                next_xid: AtomicU32::new(seed),
                rr: AtomicUsize::new(0),
                handler: Mutex::new(None),
                hook: Mutex::new(None),
                not_responding: AtomicBool::new(false),
                refused: AtomicBool::new(false),
                retransmits: AtomicU64::new(0),
                reconnects: AtomicU64::new(0),
                calls: AtomicU64::new(0),
                timeouts: AtomicU64::new(0),
                major_timeouts: AtomicU64::new(0),
                trouble_since: Mutex::new(None),
                ops: Mutex::new(Default::default()),
            }),
        };
        {
            let mut st = ch.inner.slots[0].state.lock().await;
            st.conn = Some(Arc::new(first));
            st.made = 1;
        }
        for i in 1..ch.inner.slots.len() {
            let c = open(addr, &ch.inner.opts, &ch.inner.cred).await?;
            let mut st = ch.inner.slots[i].state.lock().await;
            st.conn = Some(Arc::new(c));
            st.made = 1;
        }
        Ok(ch)
    }

    pub fn options(&self) -> &ChannelOptions {
        &self.inner.opts
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Serves the peer's calls on every connection, present and future.
    pub fn set_call_handler(&self, h: Arc<dyn CallHandler>) {
        *self.inner.handler.lock().unwrap() = Some(h.clone());
        for s in &self.inner.slots {
            if let Ok(st) = s.state.try_lock() {
                if let Some(c) = &st.conn {
                    c.set_call_handler(h.clone());
                }
            }
        }
    }

    /// Runs `hook` on every connection made from now on (not on those
    /// already open: see [`Channel::connections`]).
    pub fn set_connect_hook(&self, hook: ConnectHook) {
        *self.inner.hook.lock().unwrap() = Some(hook);
    }

    /// The connections open now, by index.
    pub async fn connections(&self) -> Vec<(usize, Arc<RpcClient>)> {
        let mut v = Vec::new();
        for (i, s) in self.inner.slots.iter().enumerate() {
            if let Some(c) = &s.state.lock().await.conn {
                if !c.is_closed() {
                    v.push((i, c.clone()));
                }
            }
        }
        v
    }

    /// Transmissions beyond each call's first, so far.
    pub fn retransmits(&self) -> u64 {
        self.inner.retransmits.load(Ordering::Relaxed)
    }

    /// Connections made to replace lost ones, so far.
    pub fn reconnects(&self) -> u64 {
        self.inner.reconnects.load(Ordering::Relaxed)
    }

    /// Counts one call of operation `name` that took `took` (from the
    /// first transmission to the reply); `failed`: it got none.
    pub fn count_op(&self, name: &'static str, took: Duration, failed: bool) {
        let mut ops = self.inner.ops.lock().unwrap();
        let o = ops.entry(name).or_default();
        o.count += 1;
        o.errors += failed as u64;
        o.total += took;
    }

    /// The counts so far and the state of the connections now.
    pub fn stats(&self) -> ChannelStats {
        let i = &self.inner;
        let connected = i
            .slots
            .iter()
            .filter(|s| {
                s.state
                    .try_lock()
                    .is_ok_and(|st| st.conn.as_ref().is_some_and(|c| !c.is_closed()))
            })
            .count();
        ChannelStats {
            calls: i.calls.load(Ordering::Relaxed),
            retransmits: i.retransmits.load(Ordering::Relaxed),
            timeouts: i.timeouts.load(Ordering::Relaxed),
            major_timeouts: i.major_timeouts.load(Ordering::Relaxed),
            reconnects: i.reconnects.load(Ordering::Relaxed),
            connected,
            nconnect: i.slots.len(),
            trouble_since: *i.trouble_since.lock().unwrap(),
            ops: i
                .ops
                .lock()
                .unwrap()
                .iter()
                .map(|(k, v)| (*k, *v))
                .collect(),
        }
    }

    /// A transmission went unanswered: the trouble starts now unless it
    /// already had.
    fn trouble(&self) {
        self.inner
            .trouble_since
            .lock()
            .unwrap()
            .get_or_insert_with(std::time::SystemTime::now);
    }

    /// A fresh xid for a call built by the caller.
    pub fn next_xid(&self) -> u32 {
        self.inner.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// The local address of the first connection open now.
    pub async fn local_addr(&self) -> Option<SocketAddr> {
        self.connections()
            .await
            .first()
            .map(|(_, c)| c.local_addr())
    }

    /// An open connection (made now if none is): for calls that must go
    /// on one connection, such as RPCSEC_GSS context creation.
    pub async fn any_connection(&self) -> Result<Arc<RpcClient>, ClientError> {
        self.conn(self.pick()).await
    }

    /// The least-loaded connection, round-robin among equals.
    fn pick(&self) -> usize {
        let n = self.inner.slots.len();
        let start = self.inner.rr.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| self.inner.slots[i].load.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// The open connection of slot `i`, reconnecting (after a pause) if it
    /// was lost. Gives up only when the server refuses us for good (a
    /// [final](ClientError::is_final) error: TLS refused); else the caller
    /// bounds the wait.
    async fn conn(&self, i: usize) -> Result<Arc<RpcClient>, ClientError> {
        let slot = &self.inner.slots[i];
        let mut st = slot.state.lock().await;
        if let Some(c) = &st.conn {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        st.conn = None;
        loop {
            if slot.answered.swap(false, Ordering::Relaxed) {
                st.pause = self.inner.opts.min_backoff;
            }
            // Even the first reconnect waits: a server that accepts and
            // closes at once must not be hammered.
            tokio::time::sleep(st.pause).await;
            st.pause = (st.pause * 2).min(self.inner.opts.max_backoff);
            let c = match open(self.inner.addr, &self.inner.opts, &self.inner.cred).await {
                Ok(c) => Arc::new(c),
                Err(e) if e.is_final() => {
                    // Logged once until a connection is made again.
                    if !self.inner.refused.swap(true, Ordering::Relaxed) {
                        tracing::error!(server = %self.inner.opts.server, "cannot reconnect: {e}");
                    }
                    return Err(e);
                }
                Err(e) => {
                    tracing::debug!(server = %self.inner.opts.server, conn = i, "reconnect: {e}");
                    continue;
                }
            };
            if let Some(h) = self.inner.handler.lock().unwrap().clone() {
                c.set_call_handler(h);
            }
            let hook = self.inner.hook.lock().unwrap().clone();
            if let Some(hook) = hook {
                hook(c.clone(), i).await;
            }
            st.made += 1;
            self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(server = %self.inner.opts.server, conn = i, "reconnected");
            st.conn = Some(c.clone());
            self.inner.refused.store(false, Ordering::Relaxed);
            return Ok(c);
        }
    }

    /// Drops slot `i`'s connection if it is still `c` (it broke).
    async fn invalidate(&self, i: usize, c: &Arc<RpcClient>) {
        let mut st = self.inner.slots[i].state.lock().await;
        if st.conn.as_ref().is_some_and(|x| Arc::ptr_eq(x, c)) {
            st.conn = None;
        }
    }

    /// Sends the call with `xid` whose record `build(n)` makes for its
    /// n-th transmission (0 first); returns the reply record. Each
    /// transmission carries the same xid.
    pub async fn send_record_with<F>(&self, xid: u32, mut build: F) -> Result<Bytes, ClientError>
    where
        F: FnMut(u32) -> Result<Bytes, ClientError>,
    {
        let o = &self.inner.opts;
        let mut timeout = o.timeo;
        let mut retries = 0u32;
        let mut sent = 0u32;
        let mut i = self.pick();
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        loop {
            let deadline = Instant::now() + timeout;
            // One wait of `timeout`: a broken connection is replaced and
            // the call resent within it.
            let reply = loop {
                let conn = match tokio::time::timeout_at(deadline, self.conn(i)).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return Err(e),
                    Err(_) => break None,
                };
                let rec = build(sent)?;
                if sent > 0 {
                    self.inner.retransmits.fetch_add(1, Ordering::Relaxed);
                }
                sent += 1;
                let slot = &self.inner.slots[i];
                let _load = Load::new(&slot.load);
                // A server that stops reading blocks the write: bounded too.
                let fut =
                    match tokio::time::timeout_at(deadline, conn.write_record(xid, &rec)).await {
                        Ok(Ok(f)) => f,
                        Ok(Err(_)) => {
                            self.trouble();
                            self.invalidate(i, &conn).await;
                            continue;
                        }
                        Err(_) => {
                            // Cut mid-record: the connection is unusable.
                            conn.close();
                            self.invalidate(i, &conn).await;
                            break None;
                        }
                    };
                match tokio::time::timeout_at(deadline, fut).await {
                    Ok(Ok(rep)) => {
                        slot.answered.store(true, Ordering::Relaxed);
                        break Some(rep);
                    }
                    Ok(Err(_)) => {
                        self.trouble();
                        self.invalidate(i, &conn).await;
                        continue;
                    }
                    Err(_) => {
                        conn.forget(xid);
                        break None;
                    }
                }
            };
            if let Some(rep) = reply {
                *self.inner.trouble_since.lock().unwrap() = None;
                if self.inner.not_responding.swap(false, Ordering::Relaxed) {
                    tracing::warn!("server {} OK", o.server);
                }
                return Ok(rep);
            }
            self.inner.timeouts.fetch_add(1, Ordering::Relaxed);
            self.trouble();
            retries += 1;
            if retries > o.retrans {
                if !o.hard {
                    self.inner.major_timeouts.fetch_add(1, Ordering::Relaxed);
                    return Err(ClientError::TimedOut);
                }
                if !self.inner.not_responding.swap(true, Ordering::Relaxed) {
                    tracing::warn!("server {} not responding, still trying", o.server);
                }
            }
            timeout = (timeout + o.timeo).min(o.max_timeo);
            i = (i + 1) % self.inner.slots.len();
        }
    }

    /// Sends a whole record (record mark included) whose call has `xid`,
    /// the same bytes on every transmission.
    pub async fn send_record(&self, xid: u32, rec: &[u8]) -> Result<Bytes, ClientError> {
        let rec = Bytes::copy_from_slice(rec);
        self.send_record_with(xid, |_| Ok(rec.clone())).await
    }

    // The same record on every transmission.
    record_calls!(|self, xid, rec| cred: &self.inner.cred, send: {
        self.send_record_with(xid, |_| Ok(rec.clone())).await
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::auth_none;
    use crate::msg;
    use crate::record::{self, Assembler};
    use bytes::{BufMut, BytesMut};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What the test server does with a call.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Act {
        Reply,
        Drop,
        Close,
    }

    /// Every call the server saw: (connection number, xid).
    type Seen = Arc<Mutex<Vec<(usize, u32)>>>;

    /// A server answering each call with its xid, after asking `act`
    /// (given the connection number and how many calls it saw so far).
    /// Serves the echo program on connection number `k`: records each call
    /// in `seen`, then acts as `act` says (given `k` and the calls seen so
    /// far), replying with the call's xid.
    async fn serve_conn(s: TcpStream, k: usize, seen: Seen, act: impl Fn(usize, usize) -> Act) {
        let (mut rd, mut wr) = s.into_split();
        let mut asm = Assembler::new(1 << 20);
        let mut buf = BytesMut::new();
        loop {
            while let Ok(Some(rec)) = asm.next(&mut buf) {
                let c = msg::decode_call(rec).unwrap();
                let count = {
                    let mut v = seen.lock().unwrap();
                    v.push((k, c.xid));
                    v.len()
                };
                match act(k, count) {
                    Act::Reply => {
                        let mut out = BytesMut::new();
                        record::begin(&mut out);
                        msg::success_header(c.xid, &mut out);
                        out.put_u32(c.xid);
                        record::finish(&mut out);
                        wr.write_all(&out).await.unwrap();
                    }
                    Act::Drop => {}
                    Act::Close => return,
                }
            }
            if rd.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        }
    }

    async fn server(
        act: impl Fn(usize, usize) -> Act + Send + Sync + 'static,
    ) -> (SocketAddr, Seen) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen: Seen = Arc::default();
        let act = Arc::new(act);
        let s2 = seen.clone();
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let (s, _) = l.accept().await.unwrap();
                let (k, seen, act) = (n, s2.clone(), act.clone());
                n += 1;
                tokio::spawn(serve_conn(s, k, seen, move |k, n| act(k, n)));
            }
        });
        (addr, seen)
    }

    fn quick(nconnect: usize, hard: bool) -> ChannelOptions {
        ChannelOptions {
            nconnect,
            timeo: Duration::from_millis(200),
            retrans: 2,
            hard,
            max_timeo: Duration::from_secs(1),
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            server: "test".into(),
            reserved_port: false,
            tls: None,
        }
    }

    async fn connect_quick(addr: SocketAddr, nconnect: usize, hard: bool) -> Channel {
        Channel::connect(addr, auth_none(), quick(nconnect, hard))
            .await
            .unwrap()
    }

    /// One echo over a hard one-connection channel to a [`server`] that
    /// acts as `act` says: the channel, the call's xid and what the server saw.
    async fn echo_once_hard(
        act: impl Fn(usize, usize) -> Act + Send + Sync + 'static,
    ) -> (Channel, u32, Vec<(usize, u32)>) {
        let (addr, seen) = server(act).await;
        let ch = connect_quick(addr, 1, true).await;
        let xid = echo(&ch).await.unwrap();
        let v = seen.lock().unwrap().clone();
        (ch, xid, v)
    }

    async fn echo(ch: &Channel) -> Result<u32, ClientError> {
        Ok(ch.call(9, 1, 1, &0u32).await?.u32()?)
    }

    #[tokio::test]
    async fn a_dropped_reply_is_resent_with_the_same_xid() {
        let (ch, xid, v) = echo_once_hard(|_, n| if n == 1 { Act::Drop } else { Act::Reply }).await;
        assert_eq!(v, vec![(0, xid), (0, xid)]);
        assert_eq!(ch.retransmits(), 1);
    }

    #[tokio::test]
    async fn a_closed_connection_is_replaced_and_the_call_resent() {
        let (ch, xid, v) =
            echo_once_hard(|conn, _| if conn == 0 { Act::Close } else { Act::Reply }).await;
        assert_eq!(v, vec![(0, xid), (1, xid)]);
        assert_eq!(ch.reconnects(), 1);
        // The new connection carries later calls too.
        echo(&ch).await.unwrap();
        assert_eq!(ch.reconnects(), 1);
    }

    #[tokio::test]
    async fn a_soft_call_times_out_after_retrans_retries() {
        let (addr, seen) = server(|_, _| Act::Drop).await;
        let ch = connect_quick(addr, 1, false).await;
        let t = Instant::now();
        let e = echo(&ch).await.unwrap_err();
        assert!(matches!(e, ClientError::TimedOut), "{e:?}");
        // 200 + 400 + 600 ms: the timeout grows by timeo each retry.
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(1200), "{took:?}");
        let v = seen.lock().unwrap().clone();
        assert_eq!(v.len(), 3, "one transmission and two retries");
        assert!(v.iter().all(|&(_, x)| x == v[0].1));
        let st = ch.stats();
        assert_eq!(
            (st.calls, st.retransmits, st.timeouts, st.major_timeouts),
            (1, 2, 3, 1)
        );
        assert!(
            st.trouble_since.is_some(),
            "unanswered since the first timeout"
        );
        assert_eq!((st.connected, st.nconnect), (1, 1));
    }

    #[tokio::test]
    async fn a_hard_call_outlasts_a_server_that_is_away() {
        // Unanswered for the first 5 transmissions, then answered.
        let (addr, seen) = server(|_, n| if n <= 5 { Act::Drop } else { Act::Reply }).await;
        let mut o = quick(1, true);
        o.timeo = Duration::from_millis(50);
        o.max_timeo = Duration::from_millis(100);
        let ch = Channel::connect(addr, auth_none(), o).await.unwrap();
        let xid = echo(&ch).await.unwrap();
        assert_eq!(seen.lock().unwrap().len(), 6);
        assert!(seen.lock().unwrap().iter().all(|&(_, x)| x == xid));
        assert!(!ch.inner.not_responding.load(Ordering::Relaxed));
        let st = ch.stats();
        assert_eq!((st.calls, st.timeouts, st.major_timeouts), (1, 5, 0));
        assert_eq!(st.trouble_since, None, "answered again");
        ch.count_op("NULL", Duration::from_millis(4), false);
        ch.count_op("NULL", Duration::from_millis(2), true);
        let ops = ch.stats().ops;
        assert_eq!(ops.len(), 1);
        assert_eq!((ops[0].1.count, ops[0].1.errors), (2, 1));
        assert_eq!(ops[0].1.mean(), Duration::from_millis(3));
    }

    #[tokio::test]
    async fn nconnect_spreads_calls_over_its_connections() {
        let (addr, seen) = server(|_, _| Act::Reply).await;
        let ch = connect_quick(addr, 4, true).await;
        let calls: Vec<_> = (0..64).map(|_| echo(&ch)).collect();
        for r in futures::future::join_all(calls).await {
            r.unwrap();
        }
        let v = seen.lock().unwrap().clone();
        let mut per = [0usize; 4];
        for (c, _) in v {
            per[c] += 1;
        }
        assert!(per.iter().all(|&n| n > 0), "{per:?}");
        assert_eq!(per.iter().sum::<usize>(), 64);
    }

    #[tokio::test]
    async fn a_server_gone_for_a_while_is_reconnected_with_backoff() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        // Accept one connection and close it with the listener: nobody
        // listens for a while, then a server comes back on the same port.
        let first = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            drop(s);
        });
        let ch = connect_quick(addr, 1, true).await;
        first.await.unwrap();
        let ch2 = ch.clone();
        let call = tokio::spawn(async move { echo(&ch2).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let l = TcpListener::bind(addr).await.unwrap();
        let seen: Seen = Arc::default();
        let s2 = seen.clone();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            serve_conn(s, 1, s2, |_, _| Act::Reply).await
        });
        let xid = call.await.unwrap().unwrap();
        assert_eq!(seen.lock().unwrap().clone(), vec![(1, xid)]);
        // A few attempts in 300 ms with a pause from 10 to 50 ms, not thousands.
        assert!(ch.reconnects() == 1);
    }
}
