//! One back channel (RFC 8881 §2.10.3.1, §20): CB_COMPOUNDs sent to a
//! client over a connection of its session, each led by CB_SEQUENCE on
//! the back channel's slot; for an NFSv4.0 client (RFC 7530 §17.2) over
//! its callback path (see [`super::cb40`]), with no CB_SEQUENCE.
//!
//! The bottom of the callback layer: it knows neither the table of
//! channels ([`super::backchannel`]) nor NFSv4.0's paths.

use bytes::Bytes;
use proto::nfs4::*;
use proto::rpc::OpaqueAuth;
use rpc::{CallbackConn, CallbackError};
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

    /// The client asked for this back channel (it may have no usable
    /// connection).
    pub fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
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
        let res = self.send(prog, cred, &conn, b.freeze(), timeout).await?;
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
        let res = self
            .send(prog, cred, &conn, xdr::to_bytes(&args), timeout)
            .await?;
        Ok((res.status, res.resarray))
    }

    /// Sends one packed CB_COMPOUND and decodes the reply; a garbled one
    /// marks the channel faulty.
    async fn send(
        &self,
        prog: u32,
        cred: OpaqueAuth,
        conn: &Arc<dyn CallbackConn>,
        args: Bytes,
        timeout: Duration,
    ) -> Result<CbCompound4res, CbFail> {
        let r = conn.call(prog, 1, CB_COMPOUND, cred, args, timeout).await;
        self.note(&r);
        xdr::from_bytes(r.map_err(CbFail::Call)?).map_err(|_| {
            self.fault.store(true, Ordering::Relaxed);
            CbFail::Call(CallbackError::Garbage)
        })
    }
}
