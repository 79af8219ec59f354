//! An NFSv4.1 session (RFC 8881 §2.10): EXCHANGE_ID, CREATE_SESSION and
//! RECLAIM_COMPLETE to set it up, then COMPOUNDs that start with a SEQUENCE
//! on a free slot, many in flight at once.
//!
//! The steps are public one by one, and so is the slot table, so a protocol
//! test can stop anywhere and send what it likes.
//!
//! A session outlives a server restart (RFC 8881 §8.4.2.1): when SEQUENCE
//! says the session or client ID is gone, `call` makes a new client ID and
//! session with the same owner, reclaims the opens and locks it saw made
//! (OPEN CLAIM_PREVIOUS, LOCK reclaim) during the grace period, says
//! RECLAIM_COMPLETE, and sends the call again with the stateids its caller
//! holds mapped to the new ones ([`recover`](super::recover)). Answers of
//! NFS4ERR_DELAY and NFS4ERR_GRACE are retried after a pause.

use super::callback::ForeChannel;
use super::conn::Nfs4Conn;
use super::deleg::{DelegTable, Delegation};
use super::error::{op_status, Error, Nfs4Error, Result};
use super::recover::StateBook;
use super::renew::RenewPolicy;
use super::slots::{Outcome, SlotLease, SlotTable};
use bytes::Bytes;
use proto::nfs4::*;
use rpc::gss::GssService;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How a connection authenticates its calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Security {
    /// AUTH_SYS with these ids (`gid` also the one supplementary group).
    Sys { uid: u32, gid: u32 },
    /// RPCSEC_GSS with Kerberos from the caller's credential cache: a
    /// context with `target` (`nfs@host`), renewed ahead of expiry.
    Krb5 {
        service: GssService,
        target: String,
        renew: RenewPolicy,
    },
}

impl Security {
    /// Kerberos with the default renewal policy, `nfs@host`.
    pub fn krb5(service: GssService, host: &str) -> Security {
        Security::Krb5 {
            service,
            target: format!("nfs@{host}"),
            renew: RenewPolicy::default(),
        }
    }

    /// Opens a connection to `addr` authenticated so.
    pub async fn connect(&self, addr: std::net::SocketAddr) -> Result<Nfs4Conn> {
        match self {
            Security::Sys { uid, gid } => Nfs4Conn::connect(addr, *uid, *gid).await,
            Security::Krb5 {
                service,
                target,
                renew,
            } => Nfs4Conn::connect_gss(addr, *service, target, *renew).await,
        }
    }
}

/// What the client asks for when it sets up a session.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// How [`Session::connect`] authenticates the session's connection
    /// (with [`Session::establish`] the caller brings a connection).
    pub security: Security,
    /// `co_ownerid`: names this client to the server across restarts.
    pub owner: Bytes,
    /// `co_verifier`: a new value tells the server this client rebooted.
    pub verifier: Verifier4,
    /// `eia_flags`. 0 is fine for a client that wants no pNFS and does not
    /// mean to update an existing record.
    pub exchange_flags: u32,
    pub minorversion: u32,
    /// Fore channel `ca_maxrequests`: the number of slots asked for.
    pub slots: u32,
    pub max_request: u32,
    pub max_response: u32,
    pub max_ops: u32,
    /// How long `call` keeps retrying a COMPOUND answered NFS4ERR_DELAY.
    pub delay_retry_for: Duration,
    /// How long `call` keeps retrying a COMPOUND answered NFS4ERR_GRACE
    /// (the server restarted and takes only reclaims for a while). 0: the
    /// caller sees GRACE, as protocol tests want; a session that has
    /// itself recovered from a restart retries for at least 5 minutes.
    pub grace_retry_for: Duration,
    /// Ask for a back channel on the session's connection
    /// (CREATE_SESSION4_FLAG_CONN_BACK_CHAN): the server can then grant
    /// delegations and recall them. Off, the client gets none.
    pub callbacks: bool,
    /// `csa_cb_program`: the program number the server calls us with.
    pub cb_program: u32,
    /// Back channel `ca_maxrequests`: callbacks the server may have in flight.
    pub cb_slots: u32,
}

/// A client owner named after `prefix`, unique per process and instant
/// (concurrent clients and tests never share a client record on the
/// server), and a verifier from the same instant.
pub(crate) fn unique_owner(prefix: &str) -> (Bytes, Verifier4) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let owner = format!("{prefix}/{}/{}", std::process::id(), now.as_nanos());
    (Bytes::from(owner), (now.as_nanos() as u64).to_be_bytes())
}

/// Calls `renew` on the client every `every`, until the client is dropped
/// (`weak` no longer upgrades) or a renewal fails.
pub(crate) fn renewal_loop<C, R, Fut>(
    weak: Weak<C>,
    every: Duration,
    renew: impl Fn(Arc<C>) -> Fut + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    C: Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<R>> + Send,
{
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(c) = weak.upgrade() else { return };
            if renew(c).await.is_err() {
                return;
            }
        }
    })
}

impl Default for SessionOptions {
    fn default() -> Self {
        let (owner, verifier) = unique_owner("tarn-client");
        SessionOptions {
            security: Security::Sys { uid: 0, gid: 0 },
            owner,
            verifier,
            exchange_flags: 0,
            minorversion: 1,
            slots: 64,
            // A 1 MiB WRITE or READ plus its COMPOUND around it.
            max_request: (1 << 20) + (64 << 10),
            max_response: (1 << 20) + (64 << 10),
            max_ops: 16,
            delay_retry_for: Duration::from_secs(60),
            grace_retry_for: Duration::ZERO,
            callbacks: true,
            cb_program: 0x4000_0000,
            cb_slots: 4,
        }
    }
}

impl SessionOptions {
    pub fn fore_channel(&self) -> ChannelAttrs4 {
        ChannelAttrs4 {
            ca_headerpadsize: 0,
            ca_maxrequestsize: self.max_request,
            ca_maxresponsesize: self.max_response,
            // Only SEQUENCE-only or small replies would be cached; we never
            // ask for caching (sa_cachethis false).
            ca_maxresponsesize_cached: 8 << 10,
            ca_maxoperations: self.max_ops,
            ca_maxrequests: self.slots,
            ca_rdma_ird: vec![],
        }
    }

    /// The back channel's attributes: small calls (CB_RECALL, CB_GETATTR
    /// of a few attributes, each with CB_SEQUENCE), every reply cached.
    pub fn back_channel(&self) -> ChannelAttrs4 {
        ChannelAttrs4 {
            ca_headerpadsize: 0,
            ca_maxrequestsize: 4096,
            ca_maxresponsesize: 4096,
            ca_maxresponsesize_cached: 4096,
            ca_maxoperations: 8,
            ca_maxrequests: self.cb_slots.max(1),
            ca_rdma_ird: vec![],
        }
    }

    /// `csa_sec_parms`: callbacks carry AUTH_SYS as root of this machine.
    pub fn cb_sec_parms(&self) -> Vec<CallbackSecParms4> {
        vec![CallbackSecParms4::AUTH_SYS(AuthsysParms {
            stamp: 0,
            machinename: Bytes::from_static(b"tarn-client"),
            uid: 0,
            gid: 0,
            gids: vec![],
        })]
    }
}

/// The result of `op` sent alone in a COMPOUND (the calls that make a
/// session go without SEQUENCE).
async fn alone(
    conn: &Nfs4Conn,
    o: &SessionOptions,
    op: NfsArgop4,
    what: &str,
) -> Result<NfsResop4> {
    let res = conn.compound(o.minorversion, vec![op]).await?;
    check(&res)?;
    res.resarray
        .into_iter()
        .next()
        .ok_or_else(|| Error::Protocol(format!("{what}: empty reply")))
}

/// Turns a non-OK COMPOUND into the error of the operation that failed (the
/// last one in the reply).
pub fn check(res: &Compound4res) -> Result<()> {
    if res.status == Nfsstat4::NFS4_OK {
        return Ok(());
    }
    let op = res
        .resarray
        .last()
        .map(|r| op_status(r).0)
        .unwrap_or(NfsOpnum4::OP_ILLEGAL);
    Err(Nfs4Error {
        op,
        status: res.status,
    }
    .into())
}

/// EXCHANGE_ID alone in a COMPOUND, with SP4_NONE.
pub async fn exchange_id(conn: &Nfs4Conn, o: &SessionOptions) -> Result<ExchangeId4resok> {
    let args = ExchangeId4args {
        eia_clientowner: ClientOwner4 {
            co_verifier: o.verifier,
            co_ownerid: o.owner.clone(),
        },
        eia_flags: o.exchange_flags,
        eia_state_protect: StateProtect4A::SP4_NONE,
        eia_client_impl_id: vec![],
    };
    let op = NfsArgop4::OP_EXCHANGE_ID(args);
    match alone(conn, o, op, "EXCHANGE_ID").await? {
        NfsResop4::OP_EXCHANGE_ID(ExchangeId4res::NFS4_OK(ok)) => Ok(ok),
        _ => Err(Error::Protocol("EXCHANGE_ID: wrong result".into())),
    }
}

/// CREATE_SESSION alone in a COMPOUND. `sequence` is `eir_sequenceid` from
/// EXCHANGE_ID for the first session of a client ID.
pub async fn create_session(
    conn: &Nfs4Conn,
    clientid: Clientid4,
    sequence: Sequenceid4,
    o: &SessionOptions,
) -> Result<CreateSession4resok> {
    let args = CreateSession4args {
        csa_clientid: clientid,
        csa_sequence: sequence,
        csa_flags: if o.callbacks {
            CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        } else {
            0
        },
        csa_fore_chan_attrs: o.fore_channel(),
        csa_back_chan_attrs: o.back_channel(),
        csa_cb_program: o.cb_program,
        csa_sec_parms: o.cb_sec_parms(),
    };
    let op = NfsArgop4::OP_CREATE_SESSION(args);
    match alone(conn, o, op, "CREATE_SESSION").await? {
        NfsResop4::OP_CREATE_SESSION(CreateSession4res::NFS4_OK(ok)) => Ok(ok),
        _ => Err(Error::Protocol("CREATE_SESSION: wrong result".into())),
    }
}

/// The fore channel: what a COMPOUND on the session needs. Shared with the
/// callback service, which returns recalled delegations over it.
pub(crate) struct Fore {
    pub(crate) conn: Nfs4Conn,
    minorversion: u32,
    /// Replaced, with the slot table and under its lock, by a recovery.
    sessionid: Mutex<Sessionid4>,
    clientid: AtomicU64,
    slots: Mutex<SlotTable>,
    freed: Notify,
    status_flags: AtomicU32,
    delay_retry_for: Duration,
    /// Sessions made so far less one: a slot leased under an older epoch
    /// belongs to a table that is gone.
    epoch: AtomicU64,
    opts: SessionOptions,
    /// The opens and locks to reclaim after a restart.
    book: Mutex<StateBook>,
    /// Held by a recovery; `in_recovery` tells calls to wait for it.
    recovering: tokio::sync::Mutex<()>,
    in_recovery: AtomicBool,
    /// DESTROY_SESSION was sent: a lost session is not made anew.
    destroyed: AtomicBool,
    /// `csa_sequence` for the next CREATE_SESSION of a confirmed client ID.
    cs_sequence: AtomicU32,
    delegs: Arc<DelegTable>,
    me: OnceLock<Weak<Fore>>,
}

/// SEQUENCE failed because the server no longer knows the session or
/// client (it restarted, or dropped them).
fn session_lost(res: &Compound4res) -> bool {
    matches!(
        res.resarray.first(),
        Some(NfsResop4::OP_SEQUENCE(Sequence4res::Default(
            Nfsstat4::NFS4ERR_BADSESSION
                | Nfsstat4::NFS4ERR_DEADSESSION
                | Nfsstat4::NFS4ERR_STALE_CLIENTID
        )))
    )
}

/// SEQUENCE refused because the slot's sequence ID is not the one the
/// server expects: a call given up on (a soft mount's timeout) left the
/// slot's state unknown here (the server may have run it late, or not).
fn misordered(res: &Compound4res) -> bool {
    matches!(
        res.resarray.first(),
        Some(NfsResop4::OP_SEQUENCE(Sequence4res::Default(
            Nfsstat4::NFS4ERR_SEQ_MISORDERED
        )))
    )
}

/// Whether a COMPOUND that failed with NFS4ERR_DELAY or NFS4ERR_GRACE at
/// its last result may be sent again whole: only when no operation before
/// the failing one changed anything. A REMOVE that succeeded before its
/// trailing GETATTR was told to wait must not run again: meanwhile another
/// client may have made a new file of that name. `ops` and `results` are
/// both without SEQUENCE.
pub(crate) fn safe_to_resend(ops: &[NfsArgop4], results: usize) -> bool {
    let done = results.saturating_sub(1).min(ops.len());
    !changes_state(&ops[..done])
}

/// Whether operations change state in a way that must not happen twice.
/// A COMPOUND holding one asks for its reply to be cached (sa_cachethis), so
/// that a retransmission after a lost reply is answered from the slot, not
/// run again (RFC 8881 §2.10.6.1.3); others are simply sent anew if the
/// server kept no reply. Also what [`safe_to_resend`] looks for.
fn changes_state(ops: &[NfsArgop4]) -> bool {
    ops.iter().any(|op| {
        matches!(
            op,
            NfsArgop4::OP_OPEN(_)
                | NfsArgop4::OP_CLOSE(_)
                | NfsArgop4::OP_OPEN_DOWNGRADE(_)
                | NfsArgop4::OP_LOCK(_)
                | NfsArgop4::OP_LOCKU(_)
                | NfsArgop4::OP_CREATE(_)
                | NfsArgop4::OP_REMOVE(_)
                | NfsArgop4::OP_RENAME(_)
                | NfsArgop4::OP_LINK(_)
                | NfsArgop4::OP_SETATTR(_)
                | NfsArgop4::OP_DELEGRETURN(_)
                | NfsArgop4::OP_FREE_STATEID(_)
                | NfsArgop4::OP_RECLAIM_COMPLETE(_)
                | NfsArgop4::OP_COPY(_)
                | NfsArgop4::OP_CLONE(_)
                | NfsArgop4::OP_ALLOCATE(_)
                | NfsArgop4::OP_DEALLOCATE(_)
        )
    })
}

/// How long a session that recovered from a restart retries
/// NFS4ERR_GRACE: a grace period lasts 90 s by default, and a server in it
/// answers only reclaims.
const GRACE_RETRY_FOR: Duration = Duration::from_secs(300);

pub struct Session {
    fore: Arc<Fore>,
    fore_attrs: ChannelAttrs4,
    back_attrs: Option<ChannelAttrs4>,
    next_owner: AtomicU64,
    delegs: Arc<DelegTable>,
}

impl Session {
    /// Connects to `addr` as `o.security` says, then [`Session::establish`].
    pub async fn connect(addr: std::net::SocketAddr, o: &SessionOptions) -> Result<Session> {
        let conn = o.security.connect(addr).await?;
        Session::establish(conn, o).await
    }

    /// EXCHANGE_ID, CREATE_SESSION, then RECLAIM_COMPLETE (one_fs false): a
    /// fresh client has nothing to reclaim, and says so at once so that the
    /// server lets it create state.
    pub async fn establish(conn: Nfs4Conn, o: &SessionOptions) -> Result<Session> {
        let mut tries = 0;
        let (ex, cs) = loop {
            tries += 1;
            let ex = exchange_id(&conn, o).await?;
            match create_session(&conn, ex.eir_clientid, ex.eir_sequenceid, o).await {
                Ok(cs) => break (ex, cs),
                // A retransmitted EXCHANGE_ID ran again after the one
                // answered and replaced its unconfirmed client ID (as
                // knfsd does too): ask again.
                Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_STALE_CLIENTID) && tries < 5 => {}
                Err(e) => return Err(e),
            }
        };
        let s = Session::from_parts(conn, o, ex.eir_clientid, &cs);
        s.bind_all().await;
        let args = ReclaimComplete4args { rca_one_fs: false };
        match s.call(vec![NfsArgop4::OP_RECLAIM_COMPLETE(args)]).await {
            Ok(_) => {}
            // A server may already consider us done (e.g. no grace period).
            Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_COMPLETE_ALREADY) => {}
            Err(e) => return Err(e),
        }
        Ok(s)
    }

    /// A session from the results of a CREATE_SESSION the caller sent.
    /// When the server bound the connection for callbacks, the
    /// connection's callback service starts serving this session.
    pub fn from_parts(
        conn: Nfs4Conn,
        o: &SessionOptions,
        clientid: Clientid4,
        cs: &CreateSession4resok,
    ) -> Session {
        let fore_attrs = cs.csr_fore_chan_attrs.clone();
        let delegs = Arc::new(DelegTable::default());
        let fore = Arc::new(Fore {
            conn,
            minorversion: o.minorversion,
            sessionid: Mutex::new(cs.csr_sessionid),
            clientid: AtomicU64::new(clientid),
            slots: Mutex::new(SlotTable::new(fore_attrs.ca_maxrequests)),
            freed: Notify::new(),
            status_flags: AtomicU32::new(0),
            delay_retry_for: o.delay_retry_for,
            epoch: AtomicU64::new(0),
            opts: o.clone(),
            book: Mutex::new(StateBook::default()),
            recovering: tokio::sync::Mutex::new(()),
            in_recovery: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
            cs_sequence: AtomicU32::new(cs.csr_sequence.wrapping_add(1)),
            delegs: delegs.clone(),
            me: OnceLock::new(),
        });
        let _ = fore.me.set(Arc::downgrade(&fore));
        if let Some(ch) = fore.conn.channel() {
            // A connection made after a break is bound to the session
            // before it carries a call.
            let w = Arc::downgrade(&fore);
            ch.set_connect_hook(Arc::new(move |rpc, i| {
                let w = w.clone();
                Box::pin(async move {
                    if let Some(f) = w.upgrade() {
                        f.bind(&rpc, i).await;
                    }
                })
            }));
        }
        let back = cs.csr_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0;
        if back {
            fore.conn.callbacks().attach(
                o.cb_program,
                o.minorversion,
                cs.csr_sessionid,
                cs.csr_back_chan_attrs.clone(),
                delegs.clone(),
                Arc::downgrade(&fore) as Weak<dyn ForeChannel>,
            );
        }
        Session {
            fore,
            fore_attrs,
            back_attrs: back.then(|| cs.csr_back_chan_attrs.clone()),
            next_owner: AtomicU64::new(1),
            delegs,
        }
    }

    pub fn conn(&self) -> &Nfs4Conn {
        &self.fore.conn
    }
    pub fn clientid(&self) -> Clientid4 {
        self.fore.clientid.load(Ordering::SeqCst)
    }
    pub fn sessionid(&self) -> Sessionid4 {
        *self.fore.sessionid.lock().unwrap()
    }
    /// Sessions made anew after the server lost the first (a restart).
    pub fn recoveries(&self) -> u64 {
        self.fore.epoch.load(Ordering::SeqCst)
    }
    /// The opens and locks the session would reclaim after a restart.
    pub fn state_book(&self) -> StateBook {
        self.fore.book.lock().unwrap().clone()
    }
    /// Binds every connection of the session's channel to the session
    /// (with nconnect > 1, all but the one that made the session are not
    /// yet); the back channel, if any, goes on connection 0. `establish`
    /// does it; connections made later are bound as they are made.
    pub async fn bind_all(&self) {
        if let Some(ch) = self
            .fore
            .conn
            .channel()
            .filter(|c| c.options().nconnect > 1)
        {
            for (i, c) in ch.connections().await {
                self.fore.bind(&c, i).await;
            }
        }
    }
    pub fn minorversion(&self) -> u32 {
        self.fore.minorversion
    }
    /// The fore channel attributes the server granted.
    pub fn fore_channel(&self) -> &ChannelAttrs4 {
        &self.fore_attrs
    }
    /// The back channel attributes, when the session has a back channel.
    pub fn back_channel(&self) -> Option<&ChannelAttrs4> {
        self.back_attrs.as_ref()
    }
    pub(crate) fn fore(&self) -> &Fore {
        &self.fore
    }
    /// The delegations this client holds (and the attributes they cache).
    pub fn delegations(&self) -> &DelegTable {
        &self.delegs
    }
    /// `sr_status_flags` of the last successful SEQUENCE.
    pub fn status_flags(&self) -> u32 {
        self.fore.status_flags.load(Ordering::Relaxed)
    }
    /// A copy of the slot table as it is now.
    pub fn slot_table(&self) -> SlotTable {
        self.fore.slots.lock().unwrap().clone()
    }

    /// A state owner (open or lock owner) unique within this session.
    pub fn new_owner(&self, kind: &str) -> StateOwner4 {
        let n = self.next_owner.fetch_add(1, Ordering::Relaxed);
        StateOwner4 {
            clientid: self.clientid(),
            owner: Bytes::from(format!("{kind}-{n}")),
        }
    }

    /// Waits for a free slot within the server's limits.
    pub async fn acquire(&self) -> SlotGuard<'_> {
        self.fore.acquire().await
    }

    /// Takes one given slot even beyond the server's limits (for tests of
    /// NFS4ERR_BADSLOT and the like). None if busy or outside the table.
    pub fn acquire_slot(&self, slot: u32) -> Option<SlotGuard<'_>> {
        let lease = self.fore.slots.lock().unwrap().acquire_slot(slot)?;
        let epoch = self.fore.epoch.load(Ordering::SeqCst);
        Some(SlotGuard::new(&self.fore, lease, epoch))
    }

    /// SEQUENCE plus `ops`, retried while the server answers NFS4ERR_DELAY.
    /// Returns the whole reply, SEQUENCE's result first, whatever its status.
    pub async fn call_raw(&self, ops: Vec<NfsArgop4>) -> Result<Compound4res> {
        self.fore.call_raw(ops).await
    }

    /// SEQUENCE plus `ops`; the results after SEQUENCE's, or the error of
    /// the operation that failed.
    pub async fn call(&self, ops: Vec<NfsArgop4>) -> Result<Vec<NfsResop4>> {
        self.fore.call(ops).await
    }

    /// A SEQUENCE-only COMPOUND: renews the lease (RFC 8881 §8.3). Returns
    /// `sr_status_flags`, which tell of trouble with state or callbacks.
    pub async fn renew(&self) -> Result<u32> {
        self.call(vec![]).await?;
        Ok(self.status_flags())
    }

    /// Renews the lease every `every` until the session is dropped or a
    /// renewal fails.
    pub fn spawn_renewal(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Session> = Arc::downgrade(self);
        renewal_loop(weak, every, |s| async move { s.renew().await })
    }

    /// DESTROY_SESSION then DESTROY_CLIENTID, each alone in its COMPOUND
    /// (both may be sent without SEQUENCE). The delegations still held
    /// are returned first; the rest of the client's state must be gone
    /// (files closed) or the server answers NFS4ERR_CLIENTID_BUSY.
    pub async fn destroy(&self) -> Result<()> {
        for d in self.delegs.take_all() {
            self.fore.return_delegation(&d).await?;
        }
        self.fore.destroyed.store(true, Ordering::SeqCst);
        let ds = DestroySession4args {
            dsa_sessionid: self.sessionid(),
        };
        let res = self
            .conn()
            .compound(self.minorversion(), vec![NfsArgop4::OP_DESTROY_SESSION(ds)])
            .await?;
        check(&res)?;
        let dc = DestroyClientid4args {
            dca_clientid: self.clientid(),
        };
        let res = self
            .conn()
            .compound(
                self.minorversion(),
                vec![NfsArgop4::OP_DESTROY_CLIENTID(dc)],
            )
            .await?;
        check(&res)
    }
}

impl Fore {
    async fn acquire(&self) -> SlotGuard<'_> {
        loop {
            // Registered before looking, so a release in between still wakes us.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut t = self.slots.lock().unwrap();
                if let Some(lease) = t.try_acquire() {
                    let epoch = self.epoch.load(Ordering::SeqCst);
                    return SlotGuard::new(self, lease, epoch);
                }
            }
            freed.await;
        }
    }

    fn release(&self, lease: &SlotLease, outcome: Outcome, epoch: u64) {
        {
            let mut t = self.slots.lock().unwrap();
            // A slot of a table replaced by a recovery is not this table's.
            if self.epoch.load(Ordering::SeqCst) != epoch {
                return;
            }
            t.release(lease.slot, lease.seqid, outcome);
        }
        self.freed.notify_waiters();
    }

    /// CB_RECALL_SLOT: the server wants no slot above `target` used.
    pub(crate) fn lower_slots(&self, target: u32) {
        self.slots.lock().unwrap().server_limits(target, target);
    }

    pub(crate) async fn call_raw(&self, ops: Vec<NfsArgop4>) -> Result<Compound4res> {
        self.call_raw_as(ops, false).await
    }

    /// SEQUENCE plus `ops`. Not `recovery`: waits while a recovery runs,
    /// recovers when the session is lost, sends the stateids a recovery
    /// replaced, and records the opens and locks made.
    async fn call_raw_as(&self, ops: Vec<NfsArgop4>, recovery: bool) -> Result<Compound4res> {
        let mut args = Compound4args {
            tag: Bytes::new(),
            minorversion: self.minorversion,
            argarray: Vec::with_capacity(ops.len() + 1),
        };
        args.argarray.push(NfsArgop4::OP_ILLEGAL); // SEQUENCE goes here
        args.argarray.extend(ops);
        let cachethis = changes_state(&args.argarray[1..]);
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        let mut resynced = false;
        loop {
            if !recovery && self.in_recovery.load(Ordering::SeqCst) {
                drop(self.recovering.lock().await);
            }
            let slot = self.acquire().await;
            if !recovery && self.in_recovery.load(Ordering::SeqCst) {
                slot.release(Outcome::NotProcessed);
                continue;
            }
            let epoch = slot.epoch;
            args.argarray[0] = slot.sequence(cachethis);
            if !recovery {
                self.book.lock().unwrap().rewrite(&mut args.argarray[1..]);
            }
            let res = match self.conn.send(&args).await {
                Ok(res) => res,
                Err(e) => {
                    if e.not_executed() {
                        slot.release(Outcome::NotProcessed);
                    }
                    return Err(e);
                }
            };
            if let Some(NfsResop4::OP_SEQUENCE(Sequence4res::Default(
                Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP,
            ))) = res.resarray.first()
            {
                // A retransmission of a request the server ran and kept no
                // reply for (we did not ask it to): the slot holds it, and
                // an idempotent request is simply sent again as a new one.
                slot.release(Outcome::Processed);
                continue;
            }
            slot.finish(&res);
            if !recovery && session_lost(&res) && !self.destroyed.load(Ordering::SeqCst) {
                // Boxed: a recovery's own calls come back through here.
                Box::pin(self.recover(epoch)).await?;
                continue;
            }
            if !recovery && !resynced && misordered(&res) && !self.destroyed.load(Ordering::SeqCst)
            {
                // Every slot starts afresh in a new session of the same
                // client (its opens and locks stay): once per call, so a
                // server that keeps refusing gets its answer through.
                resynced = true;
                tracing::warn!("NFSv4.1 slot out of step (a call given up on?): new session");
                Box::pin(self.recover(epoch)).await?;
                continue;
            }
            if !recovery && res.resarray.len() > 1 {
                self.book
                    .lock()
                    .unwrap()
                    .observe(&args.argarray[1..], &res.resarray[1..]);
            }
            let limit = match res.status {
                Nfsstat4::NFS4ERR_DELAY => self.delay_retry_for,
                Nfsstat4::NFS4ERR_GRACE if self.epoch.load(Ordering::SeqCst) > 0 => {
                    GRACE_RETRY_FOR.max(self.opts.grace_retry_for)
                }
                Nfsstat4::NFS4ERR_GRACE => self.opts.grace_retry_for,
                _ => return Ok(res),
            };
            let done = res.resarray.len().saturating_sub(1);
            if start.elapsed() >= limit || !safe_to_resend(&args.argarray[1..], done) {
                return Ok(res);
            }
            tokio::time::sleep(pause).await;
            let cap = if res.status == Nfsstat4::NFS4ERR_GRACE {
                Duration::from_secs(1)
            } else {
                Duration::from_millis(500)
            };
            pause = (pause * 2).min(cap);
        }
    }

    /// BIND_CONN_TO_SESSION on a new connection of the channel (RFC 8881
    /// §18.34): the fore channel, and the back channel on connection 0 when
    /// the session has one. Failure is logged: a lost session shows on the
    /// next SEQUENCE and is recovered there.
    async fn bind(&self, rpc: &rpc::client::RpcClient, i: usize) {
        let dir = if self.opts.callbacks && i == 0 {
            ChannelDirFromClient4::CDFC4_FORE_OR_BOTH
        } else {
            ChannelDirFromClient4::CDFC4_FORE
        };
        let args = Compound4args {
            tag: Bytes::new(),
            minorversion: self.minorversion,
            argarray: vec![NfsArgop4::OP_BIND_CONN_TO_SESSION(BindConnToSession4args {
                bctsa_sessid: *self.sessionid.lock().unwrap(),
                bctsa_dir: dir,
                bctsa_use_conn_in_rdma_mode: false,
            })],
        };
        let call = rpc.call(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, &args);
        match tokio::time::timeout(Duration::from_secs(10), call).await {
            Ok(Ok(mut d)) => match <Compound4res as xdr::Unpack>::unpack(&mut d) {
                Ok(r) if r.status == Nfsstat4::NFS4_OK => {
                    tracing::debug!(conn = i, "connection bound to the session")
                }
                Ok(r) => tracing::debug!(conn = i, status = ?r.status, "BIND_CONN_TO_SESSION"),
                Err(e) => tracing::debug!(conn = i, "BIND_CONN_TO_SESSION: {e}"),
            },
            Ok(Err(e)) => tracing::debug!(conn = i, "BIND_CONN_TO_SESSION: {e}"),
            Err(_) => tracing::debug!(conn = i, "BIND_CONN_TO_SESSION: no answer"),
        }
    }

    /// Makes a new session after the one of `epoch` was lost, unless
    /// another call already did.
    async fn recover(&self, epoch: u64) -> Result<()> {
        let _g = self.recovering.lock().await;
        if self.epoch.load(Ordering::SeqCst) != epoch {
            return Ok(());
        }
        self.in_recovery.store(true, Ordering::SeqCst);
        let r = self.recover_locked().await;
        self.in_recovery.store(false, Ordering::SeqCst);
        r
    }

    async fn recover_locked(&self) -> Result<()> {
        let o = &self.opts;
        let mut tries = 0;
        loop {
            tries += 1;
            let ex = exchange_id(&self.conn, o).await?;
            let old = self.clientid.load(Ordering::SeqCst);
            // The server kept our client ID (only the session went): our
            // state is still there and needs no reclaim.
            let kept = ex.eir_clientid == old && ex.eir_flags & EXCHGID4_FLAG_CONFIRMED_R != 0;
            let seq = if kept {
                self.cs_sequence.load(Ordering::SeqCst)
            } else {
                ex.eir_sequenceid
            };
            let cs = match create_session(&self.conn, ex.eir_clientid, seq, o).await {
                Ok(cs) => cs,
                Err(e) if tries < 10 => {
                    tracing::debug!("CREATE_SESSION after a lost session: {e}; again");
                    tokio::time::sleep(Duration::from_millis(100 * tries)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.cs_sequence
                .store(cs.csr_sequence.wrapping_add(1), Ordering::SeqCst);
            {
                let mut t = self.slots.lock().unwrap();
                *t = SlotTable::new(cs.csr_fore_chan_attrs.ca_maxrequests);
                *self.sessionid.lock().unwrap() = cs.csr_sessionid;
                self.clientid.store(ex.eir_clientid, Ordering::SeqCst);
                self.epoch.fetch_add(1, Ordering::SeqCst);
            }
            self.freed.notify_waiters();
            if cs.csr_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
                // Delegations do not survive a new client ID: the next stat
                // asks the server. (The same client keeps them.)
                if !kept {
                    self.delegs.take_all();
                }
                if let Some(me) = self.me.get() {
                    self.conn.callbacks().attach(
                        o.cb_program,
                        o.minorversion,
                        cs.csr_sessionid,
                        cs.csr_back_chan_attrs.clone(),
                        self.delegs.clone(),
                        me.clone(),
                    );
                }
            }
            tracing::warn!(
                reclaim = !kept,
                "NFSv4.1 session lost (server restarted?): new session made"
            );
            if !kept {
                self.reclaim(ex.eir_clientid).await?;
            }
            return Ok(());
        }
    }

    /// Reclaims the opens and locks of the book under `clientid`, then
    /// RECLAIM_COMPLETE. One that cannot be reclaimed is forgotten: its
    /// caller gets the server's answer to the old stateid.
    async fn reclaim(&self, clientid: Clientid4) -> Result<()> {
        let (opens, locks) = {
            let b = self.book.lock().unwrap();
            (b.opens.clone(), b.locks.clone())
        };
        let (mut reopened, mut failed) = (0, 0);
        for op in opens {
            let Some(fh) = op.fh.clone() else {
                self.book.lock().unwrap().lost(&op.stateid);
                continue;
            };
            let ops = vec![
                NfsArgop4::OP_PUTFH(Putfh4args { object: fh }),
                NfsArgop4::OP_OPEN(Open4args {
                    seqid: 0,
                    share_access: op.access,
                    share_deny: op.deny,
                    owner: StateOwner4 {
                        clientid,
                        owner: op.owner.clone(),
                    },
                    openhow: Openflag4::Default(Opentype4::OPEN4_NOCREATE),
                    claim: OpenClaim4::CLAIM_PREVIOUS(OpenDelegationType4::OPEN_DELEGATE_NONE),
                }),
            ];
            let res = self.call_raw_as(ops, true).await?;
            match res.resarray.last() {
                Some(NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok))) => {
                    self.book.lock().unwrap().replaced(&op.stateid, &ok.stateid);
                    reopened += 1;
                }
                _ => {
                    tracing::warn!(status = ?res.status, "reclaim of an open file failed");
                    self.book.lock().unwrap().lost(&op.stateid);
                    failed += 1;
                }
            }
        }
        // Lock stateids already made anew, by their old `other`.
        let mut relocked: std::collections::HashMap<[u8; 12], Stateid4> = Default::default();
        for l in locks {
            let open = self.book.lock().unwrap().current(&Stateid4 {
                seqid: 0,
                other: l.open,
            });
            let locker = match relocked.get(&l.stateid.other) {
                Some(s) => Locker4::FALSE(ExistLockOwner4 {
                    lock_stateid: s.clone(),
                    lock_seqid: 0,
                }),
                None => Locker4::TRUE(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: open,
                    lock_seqid: 0,
                    lock_owner: StateOwner4 {
                        clientid,
                        owner: l.owner.clone(),
                    },
                }),
            };
            let ops = vec![
                NfsArgop4::OP_PUTFH(Putfh4args {
                    object: l.fh.clone(),
                }),
                NfsArgop4::OP_LOCK(Lock4args {
                    locktype: l.locktype,
                    reclaim: true,
                    offset: l.offset,
                    length: l.length,
                    locker,
                }),
            ];
            let res = self.call_raw_as(ops, true).await?;
            match res.resarray.last() {
                Some(NfsResop4::OP_LOCK(Lock4res::NFS4_OK(ok))) => {
                    relocked.insert(l.stateid.other, ok.lock_stateid.clone());
                    reopened += 1;
                }
                _ => {
                    tracing::warn!(status = ?res.status, "reclaim of a lock failed");
                    failed += 1;
                }
            }
        }
        {
            let mut b = self.book.lock().unwrap();
            for (old, new) in &relocked {
                let old = Stateid4 {
                    seqid: 0,
                    other: *old,
                };
                b.replaced(&old, new);
            }
        }
        let args = ReclaimComplete4args { rca_one_fs: false };
        let res = self
            .call_raw_as(vec![NfsArgop4::OP_RECLAIM_COMPLETE(args)], true)
            .await?;
        if !matches!(
            res.status,
            Nfsstat4::NFS4_OK | Nfsstat4::NFS4ERR_COMPLETE_ALREADY
        ) {
            check(&res)?;
        }
        tracing::warn!(
            reclaimed = reopened,
            failed,
            "state reclaimed after a server restart"
        );
        Ok(())
    }

    pub(crate) async fn call(&self, ops: Vec<NfsArgop4>) -> Result<Vec<NfsResop4>> {
        let res = self.call_raw(ops).await?;
        check(&res)?;
        let mut r = res.resarray;
        if r.is_empty() {
            return Err(Error::Protocol("no SEQUENCE result".into()));
        }
        r.remove(0);
        Ok(r)
    }

    /// Gives a delegation back: COMMIT first if UNSTABLE writes made under
    /// it are not yet stable, then DELEGRETURN. A delegation the server
    /// already revoked or forgot is gone either way.
    pub(crate) async fn return_delegation(&self, d: &Delegation) -> Result<()> {
        let putfh = NfsArgop4::OP_PUTFH(Putfh4args {
            object: d.fh.clone(),
        });
        // Data buffered above the session (a mount's write-back) goes out
        // first: once the delegation is back, another client reads the file.
        let mut uncommitted = d.uncommitted;
        if let Some(hook) = self.delegs.before_return() {
            if hook(d.fh.clone()).await {
                uncommitted = false;
            }
        }
        if uncommitted {
            self.call(vec![
                putfh.clone(),
                NfsArgop4::OP_COMMIT(Commit4args {
                    offset: 0,
                    count: 0,
                }),
            ])
            .await?;
        }
        let r = self
            .call(vec![
                putfh,
                NfsArgop4::OP_DELEGRETURN(Delegreturn4args {
                    deleg_stateid: d.stateid.clone(),
                }),
            ])
            .await;
        match r {
            Ok(_) => {
                self.delegs.count_returned();
                Ok(())
            }
            Err(e)
                if matches!(
                    e.status(),
                    Some(
                        Nfsstat4::NFS4ERR_DELEG_REVOKED
                            | Nfsstat4::NFS4ERR_BAD_STATEID
                            | Nfsstat4::NFS4ERR_EXPIRED
                    )
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// One slot held for one request. Dropping it without `finish` or
/// `release` assumes the server processed the request: the safe guess for
/// a request that may have been sent (a wrong guess costs one
/// NFS4ERR_SEQ_MISORDERED; the other wrong guess would replay a stale reply).
pub struct SlotGuard<'a> {
    session: &'a Fore,
    pub lease: SlotLease,
    done: bool,
    /// The session (table) the slot belongs to.
    epoch: u64,
}

impl<'a> SlotGuard<'a> {
    fn new(session: &'a Fore, lease: SlotLease, epoch: u64) -> Self {
        SlotGuard {
            session,
            lease,
            done: false,
            epoch,
        }
    }

    /// The SEQUENCE operation for this slot.
    pub fn sequence(&self, cachethis: bool) -> NfsArgop4 {
        self.sequence_with(self.lease.seqid, cachethis)
    }

    /// A SEQUENCE on this slot with any sequence ID (replays, misordering).
    pub fn sequence_with(&self, seqid: u32, cachethis: bool) -> NfsArgop4 {
        NfsArgop4::OP_SEQUENCE(Sequence4args {
            sa_sessionid: *self.session.sessionid.lock().unwrap(),
            sa_sequenceid: seqid,
            sa_slotid: self.lease.slot,
            sa_highest_slotid: self.lease.highest_slotid,
            sa_cachethis: cachethis,
        })
    }

    /// Releases the slot according to the reply: moved on if SEQUENCE
    /// succeeded (taking the server's new slot limits), unchanged if not.
    pub fn finish(mut self, res: &Compound4res) -> Outcome {
        let outcome = match res.resarray.first() {
            Some(NfsResop4::OP_SEQUENCE(Sequence4res::NFS4_OK(ok))) => {
                let s = self.session;
                s.status_flags.store(ok.sr_status_flags, Ordering::Relaxed);
                s.slots
                    .lock()
                    .unwrap()
                    .server_limits(ok.sr_highest_slotid, ok.sr_target_highest_slotid);
                // The seqid the server confirms is what the slot now holds.
                self.lease.seqid = ok.sr_sequenceid;
                Outcome::Processed
            }
            _ => Outcome::NotProcessed,
        };
        self.done = true;
        self.session.release(&self.lease, outcome, self.epoch);
        outcome
    }

    /// Releases the slot with a known outcome.
    pub fn release(mut self, outcome: Outcome) {
        self.done = true;
        self.session.release(&self.lease, outcome, self.epoch);
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.session
                .release(&self.lease, Outcome::Processed, self.epoch);
        }
    }
}

impl ForeChannel for Fore {
    fn lower_slots(&self, target: u32) {
        Fore::lower_slots(self, target)
    }

    fn give_back<'a>(
        &'a self,
        d: &'a Delegation,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            // A failure leaves it to the server to revoke it.
            let _ = self.return_delegation(d).await;
        })
    }
}
