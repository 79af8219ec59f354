//! The NFSv4.1 back channel (RFC 8881 §2.10.3.1, §20): CB_COMPOUNDs sent
//! to a client over a connection of its session, each led by CB_SEQUENCE
//! on the back channel's slot.
//!
//! This is driver code beside the pure state core: a session's back
//! channel is an I/O handle (an [`rpc::CallbackConn`]), so it is kept here,
//! keyed by client and session, and not in `state`. What a callback
//! decides about state (a recall outstanding, a revocation) belongs to the
//! core; this module only carries the calls and reports how the path is.

use bytes::Bytes;
use proto::nfs4::*;
use proto::rpc::OpaqueAuth;
use rpc::{CallbackConn, CallbackError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use xdr::Pack;

/// RFC 8881 §18.46: SEQUENCE's callback-path status flags.
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x400;
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x200;

/// How long one callback waits for its reply.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The procedure numbers of the callback program (RFC 8881 §20.1).
const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;

/// Why a callback got no usable answer.
#[derive(Debug, PartialEq, Eq)]
pub enum CbFail {
    /// The session has no back channel a call can travel on.
    NoPath,
    /// The call was sent and failed (lost connection, no reply, refused).
    Call(CallbackError),
    /// The client's CB_SEQUENCE refused the call.
    Sequence(Nfsstat4),
}

/// The security a callback carries: the first flavor the client offered
/// that Tarn can send (AUTH_NONE or AUTH_SYS); RPCSEC_GSS callbacks need
/// a context the server initiates and are not sent (yet).
pub fn callback_cred(parms: &[CallbackSecParms4]) -> Option<OpaqueAuth> {
    parms.iter().find_map(|p| match p {
        CallbackSecParms4::AUTH_NONE => Some(rpc::msg::none_verf()),
        CallbackSecParms4::AUTH_SYS(sys) => Some(OpaqueAuth {
            flavor: proto::rpc::AUTH_SYS,
            body: xdr::to_bytes(sys),
        }),
        CallbackSecParms4::RPCSEC_GSS(_) => None,
    })
}

/// What a back channel sends on: program, security, connection.
struct Path {
    prog: u32,
    cred: Option<OpaqueAuth>,
    conn: Option<Arc<dyn CallbackConn>>,
}

/// One session's back channel. Calls go one at a time on slot 0.
pub struct Backchannel {
    pub session: Sessionid4,
    pub client: Clientid4,
    /// The minor version the session was made with: its CB_COMPOUNDs
    /// carry it (clients refuse others with MINOR_VERS_MISMATCH).
    pub minor: u32,
    path: Mutex<Path>,
    /// Slot 0's next sequence id; the lock also keeps calls in order.
    slot: tokio::sync::Mutex<Sequenceid4>,
    /// The last call failed other than by the connection closing.
    fault: AtomicBool,
    /// The client asked for this back channel (CREATE_SESSION's
    /// CONN_BACK_CHAN, or a connection bound for the back direction).
    wanted: AtomicBool,
    /// NFSv4.0: SETCLIENTID's callback_ident, carried by every
    /// CB_COMPOUND (see `cb40`).
    callback_ident: u32,
}

impl std::fmt::Debug for Backchannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backchannel")
            .field("client", &self.client)
            .field("usable", &self.usable())
            .finish()
    }
}

impl Backchannel {
    /// `wanted`: the client asked for a back channel (it may still have
    /// no connection to carry it).
    pub fn new(
        session: Sessionid4,
        client: Clientid4,
        minor: u32,
        prog: u32,
        cred: Option<OpaqueAuth>,
        conn: Option<Arc<dyn CallbackConn>>,
        wanted: bool,
    ) -> Self {
        Backchannel {
            session,
            client,
            minor,
            path: Mutex::new(Path { prog, cred, conn }),
            slot: tokio::sync::Mutex::new(1),
            fault: AtomicBool::new(false),
            wanted: AtomicBool::new(wanted),
            callback_ident: 0,
        }
    }

    /// An NFSv4.0 client's callback path (`session` only names it).
    pub fn v40(
        session: Sessionid4,
        client: Clientid4,
        prog: u32,
        callback_ident: u32,
        cred: Option<OpaqueAuth>,
        conn: Arc<dyn CallbackConn>,
    ) -> Self {
        Backchannel {
            callback_ident,
            ..Self::new(session, client, 0, prog, cred, Some(conn), true)
        }
    }

    /// Whether a call can be sent: a connection still open and a security
    /// flavor Tarn can use.
    pub fn usable(&self) -> bool {
        let p = self.path.lock().unwrap();
        p.cred.is_some() && p.conn.as_ref().is_some_and(|c| c.is_open())
    }

    pub fn faulted(&self) -> bool {
        self.fault.load(Ordering::Relaxed)
    }

    /// BACKCHANNEL_CTL: a new program and security for later calls.
    pub fn set_program(&self, prog: u32, cred: Option<OpaqueAuth>) {
        let mut p = self.path.lock().unwrap();
        p.prog = prog;
        p.cred = cred;
    }

    /// BIND_CONN_TO_SESSION for the back direction: later calls use `conn`.
    pub fn bind(&self, conn: Arc<dyn CallbackConn>) {
        self.path.lock().unwrap().conn = Some(conn);
        self.fault.store(false, Ordering::Relaxed);
        self.wanted.store(true, Ordering::Relaxed);
    }

    fn target(&self) -> Result<(u32, OpaqueAuth, Arc<dyn CallbackConn>), CbFail> {
        let p = self.path.lock().unwrap();
        match (&p.cred, &p.conn) {
            (Some(cred), Some(conn)) if conn.is_open() => Ok((p.prog, cred.clone(), conn.clone())),
            _ => Err(CbFail::NoPath),
        }
    }

    fn note(&self, r: &Result<Bytes, CallbackError>) {
        let fault = matches!(
            r,
            Err(CallbackError::Timeout | CallbackError::Garbage | CallbackError::Refused(_))
        );
        self.fault.store(fault, Ordering::Relaxed);
    }

    /// CB_NULL: whether the client answers on this path (the probe made
    /// when a back channel is set up).
    pub async fn null(&self, timeout: Duration) -> Result<(), CbFail> {
        let (prog, cred, conn) = self.target()?;
        let r = conn
            .call(prog, 1, CB_NULL, cred, Bytes::new(), timeout)
            .await;
        self.note(&r);
        r.map(|_| ()).map_err(CbFail::Call)
    }

    /// A CB_COMPOUND of CB_SEQUENCE and `ops`; the results after
    /// CB_SEQUENCE's, with the COMPOUND's status.
    pub async fn compound(
        &self,
        ops: Vec<NfsCbArgop4>,
        timeout: Duration,
    ) -> Result<(Nfsstat4, Vec<NfsCbResop4>), CbFail> {
        let (prog, cred, conn) = self.target()?;
        let mut seq = self.slot.lock().await;
        if self.minor == 0 {
            return self.compound40(prog, cred, conn, ops, timeout).await;
        }
        let mut argarray = Vec::with_capacity(ops.len() + 1);
        argarray.push(NfsCbArgop4::OP_CB_SEQUENCE(CbSequence4args {
            csa_sessionid: self.session,
            csa_sequenceid: *seq,
            csa_slotid: 0,
            csa_highest_slotid: 0,
            csa_cachethis: false,
            csa_referring_call_lists: Vec::new(),
        }));
        argarray.extend(ops);
        let args = CbCompound4args {
            tag: Bytes::new(),
            minorversion: self.minor,
            callback_ident: 0,
            argarray,
        };
        let mut b = bytes::BytesMut::new();
        args.pack(&mut b);
        let r = conn
            .call(prog, 1, CB_COMPOUND, cred, b.freeze(), timeout)
            .await;
        self.note(&r);
        let res: CbCompound4res = xdr::from_bytes(r.map_err(CbFail::Call)?).map_err(|_| {
            self.fault.store(true, Ordering::Relaxed);
            CbFail::Call(CallbackError::Garbage)
        })?;
        let mut results = res.resarray.into_iter();
        match results.next() {
            Some(NfsCbResop4::OP_CB_SEQUENCE(CbSequence4res::NFS4_OK(_))) => {
                // The slot was used: the next call takes the next id.
                *seq = seq.wrapping_add(1);
                Ok((res.status, results.collect()))
            }
            Some(NfsCbResop4::OP_CB_SEQUENCE(CbSequence4res::Default(s))) => {
                Err(CbFail::Sequence(s))
            }
            _ => Err(CbFail::Sequence(res.status)),
        }
    }

    /// NFSv4.0's CB_COMPOUND (RFC 7530 §17.2):
    /// the callback_ident and the operations, no CB_SEQUENCE.
    async fn compound40(
        &self,
        prog: u32,
        cred: OpaqueAuth,
        conn: Arc<dyn CallbackConn>,
        ops: Vec<NfsCbArgop4>,
        timeout: Duration,
    ) -> Result<(Nfsstat4, Vec<NfsCbResop4>), CbFail> {
        let args = CbCompound4args {
            tag: Bytes::new(),
            minorversion: 0,
            callback_ident: self.callback_ident,
            argarray: ops,
        };
        let r = conn
            .call(prog, 1, CB_COMPOUND, cred, xdr::to_bytes(&args), timeout)
            .await;
        self.note(&r);
        let res: CbCompound4res = xdr::from_bytes(r.map_err(CbFail::Call)?).map_err(|_| {
            self.fault.store(true, Ordering::Relaxed);
            CbFail::Call(CallbackError::Garbage)
        })?;
        Ok((res.status, res.resarray))
    }
}

/// Every session's back channel, by client.
#[derive(Default)]
pub struct Backchannels {
    by_client: Mutex<HashMap<Clientid4, Vec<Arc<Backchannel>>>>,
    /// NFSv4.0 clients' callback paths (they have no sessions).
    pub v40: super::cb40::Paths40,
}

impl Backchannels {
    /// Sets up (or replaces) a session's back channel.
    pub fn insert(&self, b: Arc<Backchannel>) {
        let mut m = self.by_client.lock().unwrap();
        let v = m.entry(b.client).or_default();
        v.retain(|x| x.session != b.session);
        v.push(b);
    }

    pub fn session(&self, client: Clientid4, session: &Sessionid4) -> Option<Arc<Backchannel>> {
        let m = self.by_client.lock().unwrap();
        m.get(&client)?
            .iter()
            .find(|b| &b.session == session)
            .cloned()
    }

    /// A usable back channel of the client, if it has one.
    pub fn for_client(&self, client: Clientid4) -> Option<Arc<Backchannel>> {
        let m = self.by_client.lock().unwrap();
        match m.get(&client) {
            Some(v) => v.iter().find(|b| b.usable()).cloned(),
            None => {
                drop(m);
                self.v40.usable(client)
            }
        }
    }

    /// Clients whose callback path is up, and down: 4.1 clients that
    /// asked for a back channel (up when some session's is usable), and
    /// 4.0 clients that named a callback address.
    pub fn path_counts(&self) -> (usize, usize) {
        let (mut up, mut down) = self.v40.counts();
        for v in self.by_client.lock().unwrap().values() {
            match session_paths_up(v) {
                Some(true) => up += 1,
                Some(false) => down += 1,
                None => {}
            }
        }
        (up, down)
    }

    pub fn remove_session(&self, client: Clientid4, session: &Sessionid4) {
        let mut m = self.by_client.lock().unwrap();
        if let Some(v) = m.get_mut(&client) {
            v.retain(|b| &b.session != session);
            if v.is_empty() {
                m.remove(&client);
            }
        }
    }

    /// Forgets back channels whose session is gone (the lease timer's walk).
    pub fn retain(&self, live: impl Fn(&Sessionid4) -> bool) {
        let mut m = self.by_client.lock().unwrap();
        m.retain(|_, v| {
            v.retain(|b| live(&b.session));
            !v.is_empty()
        });
    }

    /// Whether `client`'s callback path works: None when it never asked
    /// for one.
    pub fn path_up(&self, client: Clientid4) -> Option<bool> {
        let m = self.by_client.lock().unwrap();
        let Some(v) = m.get(&client) else {
            drop(m);
            // NFSv4.0: a callback address given in SETCLIENTID.
            return self.v40.known(client).then(|| self.v40.is_up(client));
        };
        session_paths_up(v)
    }

    /// SEQUENCE's callback-path flags for a session of `client`. A client
    /// that never asked for a back channel on any session hears nothing:
    /// it is given no recallable state, so its path is not its concern.
    pub fn status_flags(&self, client: Clientid4, session: &Sessionid4) -> u32 {
        let m = self.by_client.lock().unwrap();
        let Some(v) = m.get(&client) else {
            return 0;
        };
        if !v.iter().any(|b| b.wanted.load(Ordering::Relaxed)) {
            return 0;
        }
        let mut flags = 0;
        if !v.iter().any(|b| b.usable()) {
            flags |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        if let Some(b) = v.iter().find(|b| &b.session == session) {
            if b.wanted.load(Ordering::Relaxed) && !b.usable() {
                flags |= SEQ4_STATUS_CB_PATH_DOWN_SESSION;
            }
        }
        if v.iter().any(|b| b.faulted()) {
            flags |= SEQ4_STATUS_BACKCHANNEL_FAULT;
        }
        flags
    }
}

/// Whether a 4.1 client's sessions give it a working callback path: None
/// when none of them asked for a back channel.
fn session_paths_up(v: &[Arc<Backchannel>]) -> Option<bool> {
    if !v.iter().any(|b| b.wanted.load(Ordering::Relaxed)) {
        return None;
    }
    Some(v.iter().any(|b| b.usable()))
}
