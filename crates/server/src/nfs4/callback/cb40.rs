//! The NFSv4.0 callback path (RFC 7530 §3.3.5, §10.2.1): the client names
//! a callback service in SETCLIENTID (program, netid, universal address);
//! after SETCLIENTID_CONFIRM the server opens a TCP connection of its own
//! to it, probes it with CB_NULL, and sends CB_COMPOUNDs (carrying the
//! callback_ident, no CB_SEQUENCE) on it. The connection is opened again
//! when it broke and a call is needed.
//!
//! Driver state like the 4.1 back channels: each confirmed client's path
//! is a [`Backchannel`] of minor version 0 whose connection is a
//! [`Path40`], kept here by client id. [`Backchannels::for_client`]
//! consults this table for clients with no session.
//!
//! [`Backchannels::for_client`]: super::backchannel::Backchannels::for_client

use super::channel::{Backchannel, CALL_TIMEOUT};
use bytes::Bytes;
use proto::rpc::OpaqueAuth;
use rpc::{CallbackConn, CallbackError};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

/// How long opening the callback connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a connection to a client's callback service (TCP; tests put a
/// scripted client here).
pub type Dial = Arc<
    dyn Fn(
            SocketAddr,
        ) -> Pin<Box<dyn Future<Output = std::io::Result<Arc<dyn CallbackConn>>> + Send>>
        + Send
        + Sync,
>;

fn tcp_dial() -> Dial {
    Arc::new(|addr| {
        Box::pin(async move {
            let s = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
            let c = rpc::client::RpcClient::from_stream(s, rpc::client::auth_none())
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            Ok(Arc::new(c) as Arc<dyn CallbackConn>)
        })
    })
}

/// A universal address (RFC 5665 §5.2.3.3: "h1.h2.h3.h4.p1.p2" for
/// "tcp", "x:x::x.p1.p2" for "tcp6") as a socket address; None for other
/// netids, garbage, port 0 or an unspecified host (clients that want no
/// callbacks send "0.0.0.0.0.0").
pub fn parse_uaddr(netid: &[u8], uaddr: &[u8]) -> Option<SocketAddr> {
    let s = std::str::from_utf8(uaddr).ok()?;
    let mut parts = s.rsplitn(3, '.');
    let (p2, p1, host) = (parts.next()?, parts.next()?, parts.next()?);
    let port = p1.parse::<u8>().ok()? as u16 * 256 + p2.parse::<u8>().ok()? as u16;
    let ip: IpAddr = match netid {
        b"tcp" => IpAddr::V4(host.parse().ok()?),
        b"tcp6" => IpAddr::V6(host.parse().ok()?),
        _ => return None,
    };
    (port != 0 && !ip.is_unspecified()).then_some(SocketAddr::new(ip, port))
}

/// What SETCLIENTID said about the callback, awaiting its CONFIRM.
#[derive(Clone, Debug)]
pub struct Target {
    /// None: no usable address (the path will be down).
    pub addr: Option<SocketAddr>,
    pub prog: u32,
    pub ident: u32,
    /// None: the client's flavor cannot be sent (RPCSEC_GSS: callbacks
    /// need a context the server initiates, not done yet).
    pub cred: Option<OpaqueAuth>,
}

/// The credential callbacks carry: the flavor the client used for
/// SETCLIENTID (RFC 7530 §3.3.5), as the server's machine for AUTH_SYS.
pub fn cred_for(auth: &rpc::Auth) -> Option<OpaqueAuth> {
    match auth {
        rpc::Auth::None => Some(rpc::msg::none_verf()),
        rpc::Auth::Sys(_) => Some(rpc::client::auth_sys(0, 0, &[], "tarn")),
        rpc::Auth::Gss(_) => None,
    }
}

const UNKNOWN: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// One client's callback connection: opened on first use and again after
/// it broke; `is_open` says whether the path is believed up (the last
/// probe or call was answered with success).
pub struct Path40 {
    pub client: u64,
    pub addr: SocketAddr,
    prog: u32,
    cred: Option<OpaqueAuth>,
    dial: Dial,
    conn: tokio::sync::Mutex<Option<Arc<dyn CallbackConn>>>,
    state: AtomicU8,
    probing: AtomicBool,
}

impl std::fmt::Debug for Path40 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Path40")
            .field("client", &self.client)
            .field("addr", &self.addr)
            .field("up", &self.up())
            .finish()
    }
}

impl Path40 {
    pub fn up(&self) -> bool {
        self.state.load(Ordering::Relaxed) == UP
    }

    /// Records the path's state, logging a change.
    fn mark(&self, up: bool, why: &dyn std::fmt::Display) {
        let new = if up { UP } else { DOWN };
        if self.state.swap(new, Ordering::Relaxed) == new {
            return;
        }
        let clientid = format!("{:016x}", self.client);
        if up {
            info!(clientid, callback = %self.addr, "NFSv4.0 callback path up");
        } else {
            warn!(clientid, callback = %self.addr, reason = %why, "NFSv4.0 callback path down: no delegations for this client until it answers again");
        }
    }

    /// The open connection, or a new one.
    async fn socket(&self, fresh: bool) -> Result<Arc<dyn CallbackConn>, CallbackError> {
        let mut g = self.conn.lock().await;
        if let Some(c) = g.as_ref().filter(|c| !fresh && c.is_open()) {
            return Ok(c.clone());
        }
        *g = None;
        match (self.dial)(self.addr).await {
            Ok(c) => {
                *g = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                self.mark(false, &format_args!("cannot connect: {e}"));
                Err(CallbackError::Closed)
            }
        }
    }

    /// CB_NULL whatever the path's state: whether the client answers.
    pub async fn probe(&self) -> bool {
        let Some(cred) = self.cred.clone() else {
            self.mark(false, &"RPCSEC_GSS callbacks are not supported");
            return false;
        };
        self.call(self.prog, 1, 0, cred, Bytes::new(), CALL_TIMEOUT)
            .await
            .is_ok()
    }
}

impl CallbackConn for Path40 {
    fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        cred: OpaqueAuth,
        args: Bytes,
        timeout: Duration,
    ) -> rpc::callback::CallFuture<'_> {
        Box::pin(async move {
            let conn = self.socket(false).await?;
            let mut r = conn
                .call(prog, vers, proc_, cred.clone(), args.clone(), timeout)
                .await;
            if r == Err(CallbackError::Closed) {
                // The connection broke (the client may have closed an idle
                // one): once more on a new one. A callback run twice is
                // harmless (a second CB_RECALL of the same delegation).
                let conn = self.socket(true).await?;
                r = conn.call(prog, vers, proc_, cred, args, timeout).await;
            }
            // A refusal (wrong program, credential not accepted) or a garbled
            // reply is no working path either, as knfsd judges its probes.
            match &r {
                Ok(_) => self.mark(true, &"answered"),
                Err(e) => self.mark(false, e),
            }
            r
        })
    }

    fn is_open(&self) -> bool {
        self.up()
    }

    fn conn_id(&self) -> u64 {
        0
    }
}

/// A confirmed client's path: as the recall code sends on it, and its
/// connection.
type Active = (Arc<Backchannel>, Arc<Path40>);

/// Every NFSv4.0 client's callback path.
#[derive(Default)]
pub struct Paths40 {
    /// SETCLIENTID's callback, until SETCLIENTID_CONFIRM (a callback
    /// update leaves the confirmed path in use until then).
    pending: Mutex<HashMap<u64, Target>>,
    active: Mutex<HashMap<u64, Active>>,
    /// None: TCP.
    dial: Mutex<Option<Dial>>,
}

impl Paths40 {
    /// Tests: connections come from `dial` instead of TCP.
    pub fn set_dial(&self, dial: Dial) {
        *self.dial.lock().unwrap() = Some(dial);
    }

    /// SETCLIENTID: the callback the client named, used once confirmed.
    pub fn setclientid(&self, client: u64, t: Target) {
        self.pending.lock().unwrap().insert(client, t);
    }

    /// SETCLIENTID_CONFIRM succeeded: the callback named last (if any not
    /// yet confirmed) becomes the client's path and is probed in the
    /// background. A retransmitted CONFIRM changes nothing.
    pub fn confirm(&self, client: u64) {
        let Some(t) = self.pending.lock().unwrap().remove(&client) else {
            return;
        };
        let Some(addr) = t.addr else {
            // No address Tarn can reach: the path is down.
            self.active.lock().unwrap().remove(&client);
            info!(
                clientid = format!("{client:016x}"),
                "NFSv4.0 client named no usable callback address: no delegations for it"
            );
            return;
        };
        let dial = self.dial.lock().unwrap().clone().unwrap_or_else(tcp_dial);
        let path = Arc::new(Path40 {
            client,
            addr,
            prog: t.prog,
            cred: t.cred.clone(),
            dial,
            conn: tokio::sync::Mutex::new(None),
            state: AtomicU8::new(UNKNOWN),
            probing: AtomicBool::new(false),
        });
        let mut session = [0u8; 16];
        session[..8].copy_from_slice(&client.to_be_bytes());
        let bc = Arc::new(Backchannel::v40(
            session,
            client,
            t.prog,
            t.ident,
            t.cred,
            path.clone(),
        ));
        // The previous path (and its connection) goes.
        self.active
            .lock()
            .unwrap()
            .insert(client, (bc, path.clone()));
        Self::probe_in_background(path);
    }

    fn probe_in_background(path: Arc<Path40>) {
        if tokio::runtime::Handle::try_current().is_err()
            || path.probing.swap(true, Ordering::Relaxed)
        {
            return;
        }
        tokio::spawn(async move {
            path.probe().await;
            path.probing.store(false, Ordering::Relaxed);
        });
    }

    fn get(&self, client: u64) -> Option<Active> {
        self.active.lock().unwrap().get(&client).cloned()
    }

    /// The client's path if it is up.
    pub fn usable(&self, client: u64) -> Option<Arc<Backchannel>> {
        self.get(client).filter(|(b, _)| b.usable()).map(|(b, _)| b)
    }

    /// Whether the client has a callback path (up or down).
    pub fn known(&self, client: u64) -> bool {
        self.active.lock().unwrap().contains_key(&client)
    }

    pub fn is_up(&self, client: u64) -> bool {
        self.get(client).is_some_and(|(_, p)| p.up())
    }

    /// RENEW found the path down while the client holds delegations: try
    /// it again in the background (it may have been a passing failure).
    pub fn retry(&self, client: u64) {
        if let Some((_, p)) = self.get(client) {
            Self::probe_in_background(p);
        }
    }

    /// A recall must reach the client: its path, probed first when down
    /// (a new connection); None if it does not answer.
    pub async fn revive(&self, client: u64) -> Option<Arc<Backchannel>> {
        let (bc, path) = self.get(client)?;
        if !path.up() && !path.probe().await {
            return None;
        }
        Some(bc)
    }

    /// Forgets the paths (and pending callbacks) of clients that are gone.
    pub fn retain(&self, live: impl Fn(u64) -> bool) {
        self.pending.lock().unwrap().retain(|c, _| live(*c));
        self.active.lock().unwrap().retain(|c, _| live(*c));
    }

    /// Clients whose path is up, and down (probed and not answering, or
    /// not probed yet).
    pub fn counts(&self) -> (usize, usize) {
        let m = self.active.lock().unwrap();
        let up = m.values().filter(|(_, p)| p.up()).count();
        (up, m.len() - up)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_addresses() {
        let p = |n: &str, a: &str| parse_uaddr(n.as_bytes(), a.as_bytes());
        assert_eq!(
            p("tcp", "127.0.0.1.3.232"),
            Some("127.0.0.1:1000".parse().unwrap())
        );
        assert_eq!(p("tcp6", "::1.0.80"), Some("[::1]:80".parse().unwrap()));
        assert_eq!(
            p("tcp6", "fe80::1:2.1.1"),
            Some("[fe80::1:2]:257".parse().unwrap())
        );
        assert_eq!(
            p("tcp6", "::ffff:10.0.0.1.0.111"),
            Some("[::ffff:10.0.0.1]:111".parse().unwrap())
        );
        // No callback wanted, garbage, wrong family or netid.
        for (n, a) in [
            ("tcp", "0.0.0.0.0.0"),
            ("tcp", "127.0.0.1.0.0"),
            ("tcp", "127.0.0.1.256.1"),
            ("tcp", "127.0.0.1"),
            ("tcp", "localhost.1.1"),
            ("tcp", ""),
            ("tcp", "::1.0.80"),
            ("tcp6", "127.0.0.1.0.80"),
            ("udp", "127.0.0.1.3.232"),
            ("rdma", "127.0.0.1.3.232"),
        ] {
            assert_eq!(p(n, a), None, "{n} {a}");
        }
        assert_eq!(parse_uaddr(b"tcp", &[0xff, 0x2e, 0x31, 0x2e, 0x31]), None);
    }
}
