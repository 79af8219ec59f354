//! NFSv4 state: clients, sessions, open and lock stateids, share
//! reservations, leases and the grace period. Pure: no sockets, no disks,
//! no clock (every timed decision takes `now`, the epoch is given at
//! construction); what needs I/O comes out as [`Effect`]s that the driver
//! (`super::Nfs4::apply_effects`) carries out. The handlers in `super` call
//! in with short critical sections and never hold the lock across a backend
//! call. A test (`purity.rs`) keeps it so.
//!
//! Ownership (docs/design.md rule 2): every open and lock stateid belongs to its
//! client (the client's `opens`/`locks` sets) and to its file (`files`);
//! sessions belong to their client. Expiring a client walks only what it
//! owns. The global maps are hash indexes for O(1) lookup by id, never
//! scanned on a request path.

pub mod copy;
pub mod deleg;
pub mod session;

#[cfg(test)]
mod audit;

use crate::grace::Grace as GracePeriod;
use crate::locks::{FileKey, LockManager, OwnerKey};
use bytes::Bytes;
use proto::nfs4::{Nfsstat4, Sessionid4, Stateid4};
use session::Session;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub type Other = [u8; 12];

/// OPEN4_SHARE_ACCESS_* / OPEN4_SHARE_DENY_* bits.
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_WRITE: u32 = 2;
pub const ACCESS_BOTH: u32 = 3;

pub struct Client {
    pub id: u64,
    pub owner: Bytes,
    pub verifier: [u8; 8],
    /// Who created the record ("sys:0", later a Kerberos principal): another
    /// principal may not take over a client owner that still holds state.
    pub principal: String,
    pub confirmed: bool,
    pub minor: u32,
    /// CREATE_SESSION's sequence id and its last reply, for retries.
    pub cs_seq: u32,
    pub cs_reply: Option<Bytes>,
    pub sessions: Vec<Sessionid4>,
    pub opens: HashSet<Other>,
    pub locks: HashSet<Other>,
    /// (open owner, file) → open stateid: one per owner per file.
    open_index: HashMap<(Bytes, FileKey), Other>,
    /// (lock owner, file) → lock stateid.
    lock_index: HashMap<(Bytes, FileKey), Other>,
    pub renewed: Instant,
    pub reclaim_complete: bool,
    /// NFSv4.0: SETCLIENTID_CONFIRM's verifier.
    pub confirm_verf: [u8; 8],
    /// NFSv4.0: the confirm verifier `t` of a pending callback update (RFC
    /// 7530 §16.33.5 case 2: SETCLIENTID with this record's own verifier
    /// makes the unconfirmed `{v, x, c, k, t}` that shares its clientid).
    /// Confirming with it keeps all state.
    cb_update: Option<[u8; 8]>,
    /// Since when the lease has run out while the client still held
    /// state: a courteous client (see [`Courtesy`]). Its state stays until
    /// another client needs it or a bound is reached; its return clears this.
    courteous_since: Option<Instant>,
    /// NFSv4.0: the last seqid and reply of each open and lock owner.
    seqids: HashMap<SeqOwner, (u32, Option<Bytes>)>,
    /// NFSv4.1: stateids revoked when the lease expired, kept until the
    /// client frees them (TEST_STATEID says EXPIRED, SEQUENCE flags it).
    revoked: HashSet<Other>,
    /// When the lease expired and the state was revoked.
    expired_at: Option<Instant>,
    /// NFSv4.0: each open owner's last closed stateid, so a retransmitted
    /// CLOSE still finds its owner (and gets the cached reply).
    last_closed: HashMap<SeqOwner, Other>,
    /// NFSv4.0: open owners that confirmed their first OPEN (RFC 7530
    /// §16.18); an owner not in here gets OPEN4_RESULT_CONFIRM.
    confirmed_owners: HashSet<Bytes>,
    /// Delegations held, and revoked ones not yet freed (see [`deleg`]).
    delegs: HashSet<Other>,
    deleg_revoked: HashSet<Other>,
    /// Asynchronous copies, running or finished (see [`copy`]).
    copies: HashSet<Other>,
}

/// An NFSv4.0 open owner (`lock == false`) or lock owner, within its client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeqOwner {
    pub owner: Bytes,
    pub lock: bool,
}

/// What an NFSv4.0 owner's seqid says about a request (RFC 7530 §9.1.7).
#[derive(Debug, PartialEq, Eq)]
pub enum SeqCheck {
    /// The next request (or the owner's first): execute it.
    New,
    /// The last request again: answer with its reply.
    Replay(Bytes),
    /// Anything else: NFS4ERR_BAD_SEQID.
    Bad,
}

impl Client {
    fn status_flags(&self) -> u32 {
        const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x8;
        let mut flags = 0;
        if !self.revoked.is_empty() {
            flags |= SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED;
        }
        if !self.deleg_revoked.is_empty() {
            flags |= deleg::SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
        }
        flags
    }

    fn holds_state(&self) -> bool {
        !self.opens.is_empty() || !self.locks.is_empty() || !self.delegs.is_empty()
    }
}

pub enum Kind {
    Open {
        owner: Bytes,
        access: u32,
        deny: u32,
        /// The (access, deny) pairs of the OPENs in effect, one bit each
        /// (see [`mode_bit`]): OPEN_DOWNGRADE may only go to the union of
        /// some of them.
        modes: u16,
        /// Lock stateids opened through this open.
        locks: Vec<Other>,
    },
    Lock {
        open: Other,
        owner: OwnerKey,
    },
}

pub struct Stateful {
    pub client: u64,
    pub file: FileKey,
    pub seqid: u32,
    pub kind: Kind,
}

/// Bounds on keeping a lapsed client's state (a courteous server, as
/// Linux's knfsd since 5.19). RFC 8881 §8.4.3 and RFC 7530 §9.6.3 allow
/// such "courtesy locks": the state of a client whose lease ran out may
/// stay as long as no other client is refused because of it; a client that
/// lost its network for a few minutes then finds its opens and locks intact.
#[derive(Clone, Copy, Debug)]
pub struct Courtesy {
    /// Longest a client stays courteous before its state goes anyway
    /// (knfsd's NFSD_COURTESY_CLIENT_TIMEOUT: a day).
    pub max_age: Duration,
    /// Most courteous clients kept at once; beyond it the ones courteous
    /// longest go first. A courteous client costs its record (about half
    /// a KiB) plus its stateids and locks; 1024 of them stay within a few
    /// MiB for typical clients, far more than a healthy site has lapsed at
    /// once, and bounds what a crowd of vanished clients can pin.
    pub max_clients: usize,
}

impl Default for Courtesy {
    fn default() -> Self {
        Courtesy {
            max_age: Duration::from_secs(24 * 3600),
            max_clients: 1024,
        }
    }
}

/// Bounds on what NFSv4 clients may make the server hold. Past one, the
/// request that would go beyond it is refused (see [`State::over_limit`])
/// and counted in [`State::limit_hits`].
#[derive(Clone, Copy, Debug)]
pub struct StateLimits {
    /// Client records, confirmed or not, courteous ones included (those
    /// give way first: one is released to make room for a new client).
    pub max_clients: usize,
    /// Open stateids of one client (one per open owner per file).
    pub max_opens_per_client: usize,
    /// Lock stateids of one client (one per lock owner per file).
    pub max_locks_per_client: usize,
}

impl Default for StateLimits {
    fn default() -> Self {
        // A client record with a session costs about 2 KiB plus its slot
        // cache; an open or lock stateid about 200 bytes. These defaults
        // keep a full table within a few hundred MiB while staying far
        // above what healthy clients hold (Linux's client keeps one open
        // stateid per open file per user).
        StateLimits {
            max_clients: 8192,
            max_opens_per_client: 65536,
            max_locks_per_client: 65536,
        }
    }
}

/// The bounds of [`StateLimits`], as indexes into [`State::limit_hits`].
pub const LIMIT_CLIENTS: usize = 0;
pub const LIMIT_OPENS: usize = 1;
pub const LIMIT_LOCKS: usize = 2;

/// Why a client's state was released for real.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Another client's OPEN, LOCK, LOCKT or NLM lock needed it.
    Conflict,
    /// Courteous longer than [`Courtesy::max_age`].
    CourtesyTimeout,
    /// More than [`Courtesy::max_clients`] courteous clients.
    TooManyCourteous,
    /// Its locks keep a queued (blocking) lock request waiting.
    LockWaiters,
    /// No state, silent for ten leases: the record is forgotten.
    Silent,
    /// No state, silent longest (a tenth of a lease at least), and the
    /// client table full: the record makes room for a new client (if it
    /// comes back it starts again, with nothing to lose).
    TableFull,
    /// An unconfirmed record not confirmed within a lease (RFC 8881
    /// §18.35.4, RFC 7530 §16.33.5: it SHOULD be removed).
    Unconfirmed,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Conflict => "another client's request conflicts with its state",
            Why::CourtesyTimeout => "courteous for longer than the bound",
            Why::TooManyCourteous => "too many courteous clients",
            Why::LockWaiters => "its locks block a waiting lock request",
            Why::Silent => "silent for ten leases with no state",
            Why::TableFull => "client table full: no state, silent longest",
            Why::Unconfirmed => "never confirmed within a lease",
        }
    }
}

/// What changed in the client table, for the driver (the lease timer) to
/// log and carry out: the state core does no I/O itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The lease ran out while the client held state: kept, courteous.
    Courteous { clientid: u64 },
    /// A courteous client came back before its state was needed.
    Reactivated { clientid: u64 },
    /// The client's state was released. `unrecord`: remove the owner's
    /// stable recovery record, so it cannot reclaim what it lost after a
    /// restart (RFC 8881 §8.4.3).
    Expired {
        clientid: u64,
        owner: Bytes,
        why: Why,
        unrecord: bool,
    },
    /// An NFSv4.1 client whose state was revoked freed all of it: it holds
    /// state normally again, so its recovery record comes back.
    Recovered { clientid: u64, owner: Bytes },
}

/// I/O a state transition needs, queued in order for the driver to carry
/// out (see [`State::take_effects`]). The durable client records have this
/// one writer: a client is recorded when it is confirmed (or recovers from a
/// revocation) and forgotten when it is destroyed or its state is released
/// for real, so after a restart exactly the recorded owners may reclaim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Record the client owner in stable storage.
    PersistClient { owner: Bytes },
    /// Remove the client owner's record.
    ForgetClient { owner: Bytes },
    /// Send CB_RECALL for this delegation of `client` on the file `fh`.
    Recall {
        client: u64,
        stateid: Stateid4,
        fh: Bytes,
    },
    /// Send CB_RECALL_ANY to `client`: keep `keep` of the delegation
    /// types in `mask` (craa_type_mask bits); then call
    /// [`State::recall_any_done`].
    RecallAny { client: u64, keep: u32, mask: u32 },
}

/// Called when an effect or an event was queued outside the lease timer's
/// walk (a conflict expired a courteous client, a revocation was freed), so
/// the driver can carry it out at once.
pub type Waker = Box<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Inner {
    next: u64,
    clients: HashMap<u64, Client>,
    /// Client owner → (confirmed record, newest unconfirmed record).
    owners: HashMap<Bytes, (Option<u64>, Option<u64>)>,
    sessions: HashMap<Sessionid4, Arc<Session>>,
    stateids: HashMap<Other, Stateful>,
    /// Open stateids per file, for share reservation checks.
    files: HashMap<FileKey, Vec<Other>>,
    /// NFSv4.0: closed stateids still answerable (one per open owner, see
    /// [`Client::last_closed`]).
    closed: HashMap<Other, (u64, SeqOwner)>,
    /// Stateids revoked by lease expiry → their client (see [`Client::revoked`]).
    revoked: HashMap<Other, u64>,
    /// Delegations by id, by file, and revoked ones until freed (→ client).
    delegs: HashMap<Other, deleg::Deleg>,
    deleg_files: HashMap<FileKey, Vec<Other>>,
    deleg_revoked: HashMap<Other, u64>,
    deleg_events: deleg::DelegCounts,
    /// Files whose delegations were recalled, and when: none is granted on
    /// them for [`deleg::RECALL_BACKOFF`] (see there).
    recently_recalled: HashMap<FileKey, Instant>,
    /// Asynchronous copies by id, and how many of them still run.
    copies: HashMap<Other, copy::Copy>,
    copies_running: usize,
    /// Clients with a CB_RECALL_ANY in flight.
    recall_any_pending: HashSet<u64>,
    /// Changes for the driver, taken by [`State::reap`].
    events: Vec<Event>,
    /// I/O for the driver, taken by [`State::take_effects`].
    effects: Vec<Effect>,
}

pub struct State {
    inner: Mutex<Inner>,
    pub locks: Arc<LockManager>,
    /// Distinguishes this server instance's ids from a previous one's.
    pub epoch: u32,
    pub lease: Duration,
    pub courtesy: Courtesy,
    pub limits: StateLimits,
    /// Requests refused by each bound of [`StateLimits`] (LIMIT_* order).
    limit_hits: [std::sync::atomic::AtomicU64; 3],
    grace: Mutex<Grace>,
    /// The driver's wake-up (see [`Waker`]).
    waker: Mutex<Option<Waker>>,
    /// At least the number of outstanding delegations (raised under the
    /// lock at each grant, brought down when looked at): lets the other
    /// protocols' hot paths skip the lock while there are none.
    delegs_hint: std::sync::atomic::AtomicUsize,
}

/// Who may reclaim after a restart, and until when. The period itself is
/// the server's one [`GracePeriod`], shared with NLM; NFSv4's own rule is
/// that it is over for NFSv4 once every recorded client has reclaimed (or
/// when nobody was recorded).
#[derive(Default)]
struct Grace {
    until: Option<Instant>,
    /// The end of the server's shared period: until then NLM clients may
    /// still reclaim locks (see [`State::locks_in_grace`]).
    locks_until: Option<Instant>,
    /// Client owners recorded as holding state before the restart.
    reclaimable: HashSet<Bytes>,
    /// Of those, the ones that finished reclaiming.
    done: HashSet<Bytes>,
    /// A cluster-wide grace holds this head in grace whatever its own
    /// clients did (another head's clients may still reclaim, here or
    /// elsewhere); set and cleared by the cluster driver.
    cluster: Option<ClusterHold>,
}

/// How a cluster-wide grace holds this head (see [`State::set_cluster_grace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterHold {
    /// Not every head enforces the grace yet: reclaims wait (NFS4ERR_DELAY),
    /// as a head that has not seen it could still grant what they want back.
    Starting,
    /// Every head enforces it: the recorded clients may reclaim.
    Reclaiming,
}

/// The outcome of checking a stateid for READ/WRITE/SETATTR.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// An anonymous or READ-bypass special stateid.
    Special,
    /// An open or lock stateid that grants this access.
    Granted,
}

impl State {
    /// `epoch` tells this server instance's ids from a previous one's
    /// (the driver derives it from the wall clock, see `super::new_epoch`);
    /// its top bit is cleared, as bit 63 of a client id marks NLM hosts in
    /// the shared lock manager.
    pub fn new(lease: Duration, locks: Arc<LockManager>, epoch: u32) -> State {
        Self::with_courtesy(lease, locks, Courtesy::default(), epoch)
    }

    pub fn with_courtesy(
        lease: Duration,
        locks: Arc<LockManager>,
        courtesy: Courtesy,
        epoch: u32,
    ) -> State {
        State {
            inner: Mutex::new(Inner::default()),
            locks,
            epoch: epoch & 0x7fff_ffff,
            lease,
            courtesy,
            limits: StateLimits::default(),
            limit_hits: Default::default(),
            grace: Mutex::new(Grace::default()),
            waker: Mutex::new(None),
            delegs_hint: Default::default(),
        }
    }

    /// The same state core with other bounds (set before it is shared).
    pub fn with_limits(mut self, limits: StateLimits) -> State {
        self.limits = limits;
        self
    }

    /// How many requests each bound refused so far (LIMIT_* order).
    pub fn limit_hits(&self) -> [u64; 3] {
        std::array::from_fn(|k| self.limit_hits[k].load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The error for a request past a bound, counted. NFSv4.0 has
    /// NFS4ERR_RESOURCE for this (RFC 7530 allows it for every operation);
    /// in NFSv4.1 that error is about a COMPOUND's size (sessions have
    /// REP_TOO_BIG for it), so 4.1 clients get NFS4ERR_DELAY, as Linux's
    /// server answers when it cannot make a client or stateid: they retry
    /// later, by when a courteous client may have gone or the client
    /// closed something.
    fn over_limit(&self, which: usize, minor: u32) -> Nfsstat4 {
        self.limit_hits[which].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if minor == 0 {
            Nfsstat4::NFS4ERR_RESOURCE
        } else {
            Nfsstat4::NFS4ERR_DELAY
        }
    }

    /// Room for one more client record: at the bound, the client courteous
    /// longest is released (its state exists only by courtesy); failing
    /// that, the one without state silent longest, if silent for a tenth
    /// of a lease at least (a crowd of one-shot clients, such as a script
    /// running one libnfs `nfs-cp` per file, 300 a second, filled the
    /// 8,192 records in half a lease, and then every new client was
    /// refused); failing that, the bound's error.
    fn make_room_for_client(
        &self,
        i: &mut Inner,
        minor: u32,
        now: Instant,
    ) -> Result<(), Nfsstat4> {
        if i.clients.len() < self.limits.max_clients {
            return Ok(());
        }
        let oldest = i
            .clients
            .values()
            .filter_map(|c| c.courteous_since.map(|t| (t, c.id)))
            .min();
        let (id, why) = match oldest {
            Some((_, id)) => (id, Why::TooManyCourteous),
            None => {
                let idle = i
                    .clients
                    .values()
                    .filter(|c| !c.holds_state() && c.copies.is_empty())
                    .map(|c| (c.renewed, c.id))
                    .min()
                    .filter(|(renewed, _)| {
                        now.saturating_duration_since(*renewed) >= self.lease / 10
                    });
                match idle {
                    Some((_, id)) => (id, Why::TableFull),
                    None => return Err(self.over_limit(LIMIT_CLIENTS, minor)),
                }
            }
        };
        self.expire_now(i, id, why, now);
        self.wake();
        Ok(())
    }

    /// The most open and lock stateids any one client holds (for the metrics).
    pub fn busiest_client(&self) -> (usize, usize) {
        let i = self.inner.lock().unwrap();
        i.clients.values().fold((0, 0), |(o, l), c| {
            (o.max(c.opens.len()), l.max(c.locks.len()))
        })
    }

    /// Installs the driver's wake-up (see [`Waker`]).
    pub fn set_waker(&self, w: Waker) {
        *self.waker.lock().unwrap() = Some(w);
    }

    fn wake(&self) {
        if let Some(w) = &*self.waker.lock().unwrap() {
            w();
        }
    }

    /// The I/O queued since the last call, oldest first, for the driver to
    /// carry out in this order.
    pub fn take_effects(&self) -> Vec<Effect> {
        std::mem::take(&mut self.inner.lock().unwrap().effects)
    }

    // ---- grace -------------------------------------------------------

    /// Starts NFSv4's part of the server's grace period for the client
    /// owners recorded before a restart. With none recorded, NFSv4 has
    /// nobody to wait for and is not in grace at all.
    pub fn start_grace(&self, owners: HashSet<Bytes>, period: GracePeriod) {
        let mut g = self.grace.lock().unwrap();
        if !owners.is_empty() {
            g.until = Some(period.until());
        }
        if !owners.is_empty() {
            g.locks_until = Some(period.until());
        }
        g.reclaimable = owners;
    }

    /// Enters grace again while serving (a cluster: another head failed
    /// or started): `owners` may reclaim too, until `period` ends at the
    /// latest. Established state keeps working; new opens and locks get
    /// NFS4ERR_GRACE meanwhile, as at a restart (RFC 8881 §8.4.2.1 lets a
    /// server keep serving what is established during grace; knfsd's
    /// locks_in_grace() likewise refuses only new opens and locks).
    pub fn join_grace(&self, owners: HashSet<Bytes>, period: GracePeriod) {
        let mut g = self.grace.lock().unwrap();
        let until = period.until();
        if !owners.is_empty() {
            g.until = Some(g.until.map_or(until, |t| t.max(until)));
            for o in &owners {
                g.done.remove(o);
            }
            g.reclaimable.extend(owners);
        }
        g.locks_until = Some(g.locks_until.map_or(until, |t| t.max(until)));
    }

    /// The cluster-wide grace as the cluster driver sees it: None once it
    /// is lifted (then only this head's own period, if any, remains).
    pub fn set_cluster_grace(&self, hold: Option<ClusterHold>) {
        self.grace.lock().unwrap().cluster = hold;
    }

    /// The cluster-wide grace was lifted: every head recovered (the
    /// failed heads' clients reclaimed here or elsewhere) or its bound
    /// passed, so nothing of this head's own period is left either.
    pub fn end_grace(&self) {
        let mut g = self.grace.lock().unwrap();
        g.cluster = None;
        g.until = None;
        g.locks_until = None;
    }

    /// Whether this head's own recovery is over at `now`: every client
    /// that may reclaim here said RECLAIM_COMPLETE, or its period ended.
    pub fn local_recovery_done(&self, now: Instant) -> bool {
        let g = self.grace.lock().unwrap();
        match g.until {
            Some(t) => now >= t || g.reclaimable.iter().all(|o| g.done.contains(o)),
            None => true,
        }
    }

    /// Whether `owner` was to reclaim here (and finished), so its record
    /// moves to this head.
    pub fn reclaimed_here(&self, owner: &Bytes) -> bool {
        self.grace.lock().unwrap().done.contains(owner)
    }

    /// New NFSv4 byte-range locks wait for the shared period's end: NLM
    /// hosts are known to have held locks (the driver calls this when the
    /// status monitor has hosts to notify).
    pub fn hold_locks_until(&self, period: GracePeriod) {
        self.grace.lock().unwrap().locks_until = Some(period.until());
    }

    /// Whether a new (non-reclaim) byte-range lock must wait: NFSv4's own
    /// grace, or, after a restart with state to reclaim, the server's
    /// shared period while it runs, though every NFSv4 client already
    /// reclaimed: NLM clients may still be reclaiming locks a new NFSv4
    /// LOCK would otherwise take from them (Linux's locks_in_grace() counts
    /// lockd's grace likewise). Opens do not wait: NLM holds no opens.
    pub fn locks_in_grace(&self, now: Instant) -> bool {
        self.in_grace(now)
            || self
                .grace
                .lock()
                .unwrap()
                .locks_until
                .is_some_and(|t| now < t)
    }

    pub fn in_grace(&self, now: Instant) -> bool {
        let mut g = self.grace.lock().unwrap();
        if g.cluster.is_some() {
            return true;
        }
        match g.until {
            Some(t) if now < t && g.done.len() < g.reclaimable.len() => true,
            Some(_) => {
                g.until = None;
                false
            }
            None => false,
        }
    }

    /// Whether `client` may reclaim now (NFS4ERR_NO_GRACE / RECLAIM_BAD otherwise).
    pub fn may_reclaim(&self, client: u64, now: Instant) -> Result<(), Nfsstat4> {
        if !self.in_grace(now) {
            return Err(Nfsstat4::NFS4ERR_NO_GRACE);
        }
        let owner = {
            let i = self.inner.lock().unwrap();
            let c = i
                .clients
                .get(&client)
                .ok_or(Nfsstat4::NFS4ERR_STALE_CLIENTID)?;
            if c.reclaim_complete {
                return Err(Nfsstat4::NFS4ERR_NO_GRACE);
            }
            c.owner.clone()
        };
        let g = self.grace.lock().unwrap();
        if g.cluster == Some(ClusterHold::Starting) {
            return Err(Nfsstat4::NFS4ERR_DELAY);
        }
        if g.reclaimable.contains(&owner) {
            Ok(())
        } else {
            Err(Nfsstat4::NFS4ERR_RECLAIM_BAD)
        }
    }

    /// Whether `client` may take new (non-reclaim) locking state. RFC 8881
    /// §18.51.3: an NFSv4.1 client with a new client ID MUST send
    /// RECLAIM_COMPLETE (even with nothing to reclaim) before such an
    /// operation, which otherwise gets NFS4ERR_GRACE; the rule is the
    /// client's, whether or not the server is in its grace period.
    pub fn reclaim_done(&self, client: u64) -> Result<(), Nfsstat4> {
        let i = self.inner.lock().unwrap();
        match i.clients.get(&client) {
            Some(c) if c.minor > 0 && !c.reclaim_complete => Err(Nfsstat4::NFS4ERR_GRACE),
            _ => Ok(()),
        }
    }

    // ---- ids -------------------------------------------------------------

    fn next_id(i: &mut Inner) -> u64 {
        i.next += 1;
        i.next
    }

    fn new_clientid(&self, i: &mut Inner) -> u64 {
        ((self.epoch as u64) << 32) | (Self::next_id(i) & 0xffff_ffff)
    }

    /// A stateid's `other`: this instance's epoch, the low half of its
    /// client's id (as knfsd's stateids carry their clientid), a counter.
    /// A stateid outliving its client then still names it, so NFSv4.0 can
    /// answer NFS4ERR_EXPIRED rather than BAD_STATEID (RFC 7530 §9.6.3).
    fn new_other(&self, i: &mut Inner, client: u64) -> Other {
        let mut o = [0u8; 12];
        o[..4].copy_from_slice(&self.epoch.to_be_bytes());
        o[4..8].copy_from_slice(&(client as u32).to_be_bytes());
        o[8..].copy_from_slice(&(Self::next_id(i) as u32).to_be_bytes());
        o
    }

    /// The client a stateid of this instance was issued to.
    fn other_client(&self, other: &Other) -> u64 {
        ((self.epoch as u64) << 32) | u32::from_be_bytes(other[4..8].try_into().unwrap()) as u64
    }

    pub fn is_current_epoch_clientid(&self, id: u64) -> bool {
        (id >> 32) as u32 == self.epoch
    }

    // ---- clients ---------------------------------------------------------

    /// EXCHANGE_ID (NFSv4.1 and later; NFSv4.0's SETCLIENTID is
    /// [`State::setclientid`]), by the case table of RFC 8881 §18.35.4
    /// (numbers below): returns (clientid, sequenceid, confirmed).
    pub fn exchange_id(
        &self,
        owner: &Bytes,
        verifier: [u8; 8],
        principal: &str,
        update: bool,
        minor: u32,
        now: Instant,
    ) -> Result<(u64, u32, bool), Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let (conf, unconf) = i.owners.get(owner).copied().unwrap_or((None, None));
        if let Some(cid) = conf {
            let c = &i.clients[&cid];
            let (same_princ, same_verf) = (c.principal == principal, c.verifier == verifier);
            if update {
                // 9 (wrong principal), 8 (wrong verifier), 6 (update: the
                // record is left as it is; nothing in it can change yet).
                if !same_princ {
                    return Err(Nfsstat4::NFS4ERR_PERM);
                }
                if !same_verf {
                    return Err(Nfsstat4::NFS4ERR_NOT_SAME);
                }
                return Ok((cid, c.cs_seq, true));
            }
            if !same_princ {
                // 3, client collision: refused while the other client has
                // state (its sessions count: DESTROY_CLIENTID, §18.50.3,
                // counts them as the client ID's) and an unexpired lease;
                // otherwise its record and state go now, as in case 1.
                let expired = now.duration_since(c.renewed) > self.lease;
                if !expired && (c.holds_state() || !c.sessions.is_empty()) {
                    return Err(Nfsstat4::NFS4ERR_CLID_INUSE);
                }
                self.purge(&mut i, cid);
            } else if same_verf {
                // 2: the same incarnation asking again.
                return Ok((cid, c.cs_seq, true));
            }
            // 5, client restart: the old incarnation's state goes when the
            // new record is confirmed by CREATE_SESSION.
        } else if update {
            // 7: nothing to update; an unconfirmed record stays.
            return Err(Nfsstat4::NFS4ERR_NOENT);
        }
        // 4: an unconfirmed record is replaced by a new client ID, whatever
        // its verifier and principal (a retry gets a new one too).
        if let Some(u) = unconf {
            self.purge(&mut i, u);
        }
        self.make_room_for_client(&mut i, minor, now)?;
        let id = self.insert_client(&mut i, owner, verifier, principal, minor, now);
        Ok((id, 1, false))
    }

    /// A new unconfirmed client record, the owner's newest.
    fn insert_client(
        &self,
        i: &mut Inner,
        owner: &Bytes,
        verifier: [u8; 8],
        principal: &str,
        minor: u32,
        now: Instant,
    ) -> u64 {
        let id = self.new_clientid(i);
        i.clients.insert(
            id,
            Client {
                id,
                owner: owner.clone(),
                verifier,
                principal: principal.to_string(),
                confirmed: false,
                minor,
                cs_seq: 1,
                cs_reply: None,
                sessions: Vec::new(),
                opens: HashSet::new(),
                locks: HashSet::new(),
                open_index: HashMap::new(),
                lock_index: HashMap::new(),
                renewed: now,
                reclaim_complete: false,
                confirm_verf: rand::random(),
                cb_update: None,
                courteous_since: None,
                seqids: HashMap::new(),
                last_closed: HashMap::new(),
                confirmed_owners: HashSet::new(),
                revoked: HashSet::new(),
                expired_at: None,
                delegs: HashSet::new(),
                deleg_revoked: HashSet::new(),
                copies: HashSet::new(),
            },
        );
        i.owners.entry(owner.clone()).or_default().1 = Some(id);
        id
    }

    /// NFSv4.0 SETCLIENTID (RFC 7530 §16.33.5): returns the clientid and
    /// the verifier SETCLIENTID_CONFIRM must present.
    pub fn setclientid(
        &self,
        owner: &Bytes,
        verifier: [u8; 8],
        principal: &str,
        now: Instant,
    ) -> Result<(u64, [u8; 8]), Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let (conf, unconf) = i.owners.get(owner).copied().unwrap_or((None, None));
        if let Some(cid) = conf {
            let c = &i.clients[&cid];
            // Another principal may not take over a client owner that holds
            // state, nor may 4.0 take over a 4.1 client's owner that does.
            if c.holds_state() && (c.principal != principal || c.minor != 0) {
                return Err(Nfsstat4::NFS4ERR_CLID_INUSE);
            }
        }
        // Whatever the case, a new request replaces the unconfirmed record
        // (cases 4 and 5: a new clientid and verifier every time).
        if let Some(u) = unconf {
            self.purge(&mut i, u);
        }
        if let Some(cid) = conf {
            let c = i.clients.get_mut(&cid).expect("confirmed record exists");
            c.cb_update = None;
            if c.verifier == verifier && c.principal == principal {
                // Case 2: the same incarnation updates its callback: the
                // same clientid with a new confirm verifier; its state stays.
                let t = loop {
                    let t: [u8; 8] = rand::random();
                    if t != c.confirm_verf && t != [0; 8] {
                        break t;
                    }
                };
                c.cb_update = Some(t);
                return Ok((cid, t));
            }
            // Case 3: the client rebooted. A new record; the old one and its
            // state go when the new one is confirmed.
        }
        self.make_room_for_client(&mut i, 0, now)?;
        let id = self.insert_client(&mut i, owner, verifier, principal, 0, now);
        Ok((id, i.clients[&id].confirm_verf))
    }

    /// The client's CREATE_SESSION checks before a session is made (RFC 8881
    /// §18.36.4 phases 1 to 3): Ok(None) for a new request, Ok(Some(reply))
    /// for a retry to answer from the cache.
    pub fn create_session_seq(
        &self,
        clientid: u64,
        seq: u32,
        principal: &str,
        now: Instant,
    ) -> Result<Option<Bytes>, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let c = i
            .clients
            .get(&clientid)
            .ok_or(Nfsstat4::NFS4ERR_STALE_CLIENTID)?;
        if !c.confirmed {
            // An unconfirmed record lives one lease (§18.35.4: it is
            // removed when not confirmed in time): after that the client ID
            // is stale, whatever the reaper has got to.
            if now.duration_since(c.renewed) > self.lease {
                self.purge(&mut i, clientid);
                return Err(Nfsstat4::NFS4ERR_STALE_CLIENTID);
            }
            // Phase 3, unsuccessful confirmation: another principal than
            // the one that sent EXCHANGE_ID. Nothing changes, so a retry
            // gets the same answer.
            if c.principal != principal {
                return Err(Nfsstat4::NFS4ERR_CLID_INUSE);
            }
        }
        if seq == c.cs_seq {
            return Ok(None);
        }
        if seq == c.cs_seq.wrapping_sub(1) {
            return c
                .cs_reply
                .clone()
                .map(Some)
                .ok_or(Nfsstat4::NFS4ERR_SEQ_MISORDERED);
        }
        Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED)
    }

    /// Records a new session, confirming the client if it was not yet
    /// (which retires a previous incarnation and all its state).
    /// Returns whether the client was newly confirmed.
    pub fn add_session(
        &self,
        s: Arc<Session>,
        reply: Bytes,
        now: Instant,
    ) -> Result<bool, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let cid = s.client;
        let c = i
            .clients
            .get_mut(&cid)
            .ok_or(Nfsstat4::NFS4ERR_STALE_CLIENTID)?;
        c.cs_seq = c.cs_seq.wrapping_add(1);
        c.cs_reply = Some(reply);
        c.sessions.push(s.id);
        i.sessions.insert(s.id, s);
        Self::heard(&mut i, cid, now);
        Ok(self.confirm(&mut i, cid))
    }

    /// Marks a client confirmed, retiring the previous incarnation of the
    /// same client owner with all its state. Returns whether it was newly
    /// confirmed.
    fn confirm(&self, i: &mut Inner, clientid: u64) -> bool {
        let Some(c) = i.clients.get_mut(&clientid) else {
            return false;
        };
        if c.confirmed {
            return false;
        }
        c.confirmed = true;
        let owner = c.owner.clone();
        let e = i.owners.entry(owner.clone()).or_default();
        let old = e.0.replace(clientid);
        if e.1 == Some(clientid) {
            e.1 = None;
        }
        if let Some(old) = old.filter(|o| *o != clientid) {
            self.purge(i, old);
        }
        i.effects.push(Effect::PersistClient { owner });
        true
    }

    /// NFSv4.0 SETCLIENTID_CONFIRM (RFC 7530 §16.34.5): confirms the
    /// record (retiring an older incarnation of the same client and its
    /// state), applies a callback update, or accepts a retransmission.
    /// Returns whether a record was newly confirmed.
    pub fn confirm_v40(
        &self,
        clientid: u64,
        verf: [u8; 8],
        principal: &str,
        now: Instant,
    ) -> Result<bool, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let c = i
            .clients
            .get_mut(&clientid)
            .ok_or(Nfsstat4::NFS4ERR_STALE_CLIENTID)?;
        let matches = c.confirm_verf == verf || (c.confirmed && c.cb_update == Some(verf));
        if !matches {
            // Case 5: no record {*, *, c, *, verf}.
            return Err(Nfsstat4::NFS4ERR_STALE_CLIENTID);
        }
        if c.principal != principal {
            return Err(Nfsstat4::NFS4ERR_CLID_INUSE);
        }
        if c.confirmed {
            // Case 1 (callback update: the record keeps its state) or
            // case 4 (a retransmission of the confirmation).
            if c.cb_update == Some(verf) {
                c.confirm_verf = verf;
                c.cb_update = None;
            }
            Self::heard(&mut i, clientid, now);
            return Ok(false);
        }
        // Cases 2 and 3: confirm, retiring a previous incarnation.
        Self::heard(&mut i, clientid, now);
        Ok(self.confirm(&mut i, clientid))
    }

    pub fn new_sessionid(&self, clientid: u64) -> Sessionid4 {
        let mut i = self.inner.lock().unwrap();
        let n = Self::next_id(&mut i);
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&clientid.to_be_bytes());
        id[8..12].copy_from_slice(&(n as u32).to_be_bytes());
        id[12..].copy_from_slice(&self.epoch.to_be_bytes());
        id
    }

    pub fn session(&self, id: &Sessionid4) -> Option<Arc<Session>> {
        self.inner.lock().unwrap().sessions.get(id).cloned()
    }

    pub fn destroy_session(&self, id: &Sessionid4) -> Result<(), Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let s = i.sessions.remove(id).ok_or(Nfsstat4::NFS4ERR_BADSESSION)?;
        if let Some(c) = i.clients.get_mut(&s.client) {
            c.sessions.retain(|x| x != id);
        }
        Ok(())
    }

    /// The files `clientid`'s opens, locks and delegations are on (each
    /// once), for [`State::destroy_clientid`]'s `gone`.
    pub fn files_held(&self, clientid: u64) -> Vec<FileKey> {
        let i = self.inner.lock().unwrap();
        let Some(c) = i.clients.get(&clientid) else {
            return Vec::new();
        };
        let mut files: Vec<FileKey> = Self::client_files(&i, c).flatten().collect();
        files.sort_unstable_by(|a, b| {
            (a.export, a.fid.as_bytes()).cmp(&(b.export, b.fid.as_bytes()))
        });
        files.dedup();
        files
    }

    /// The file of each open, lock and delegation of `c` (None: a stateid
    /// with no entry, which counts as still held).
    fn client_files<'a>(i: &'a Inner, c: &'a Client) -> impl Iterator<Item = Option<FileKey>> + 'a {
        let states = c.opens.iter().chain(c.locks.iter());
        let states = states.map(|o| i.stateids.get(o).map(|s| s.file));
        states.chain(c.delegs.iter().map(|o| i.delegs.get(o).map(|d| d.file)))
    }

    /// DESTROY_CLIENTID: refused while the client has sessions or state,
    /// except state on files in `gone` (files that no longer exist: removed
    /// by another client, NFSv3 or a local process while this one had them
    /// open, so its CLOSE and LOCKU met NFS4ERR_STALE). That state can never
    /// be given back, and goes with the client.
    pub fn destroy_clientid(&self, clientid: u64, gone: &[FileKey]) -> Result<Bytes, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let c = i
            .clients
            .get(&clientid)
            .ok_or(Nfsstat4::NFS4ERR_STALE_CLIENTID)?;
        if !c.sessions.is_empty() {
            return Err(Nfsstat4::NFS4ERR_CLIENTID_BUSY);
        }
        if Self::client_files(&i, c).any(|f| f.is_none_or(|f| !gone.contains(&f))) {
            return Err(Nfsstat4::NFS4ERR_CLIENTID_BUSY);
        }
        let owner = c.owner.clone();
        self.purge(&mut i, clientid);
        // An unconfirmed record destroyed leaves the owner's confirmed one
        // (and its stable record) alone.
        if i.owners.get(&owner).and_then(|e| e.0).is_none() {
            i.effects.push(Effect::ForgetClient {
                owner: owner.clone(),
            });
        }
        Ok(owner)
    }

    /// Renews a client's lease (SEQUENCE, RENEW, and any 4.0 stateful op).
    /// A courteous client is active again with all its state.
    pub fn renew(&self, clientid: u64, now: Instant) -> Result<(), Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        match i.clients.get(&clientid) {
            // RFC 7530 §16.33.5: an unconfirmed clientid is good for
            // SETCLIENTID_CONFIRM only.
            Some(c) if !c.confirmed => Err(Nfsstat4::NFS4ERR_STALE_CLIENTID),
            Some(_) => {
                Self::heard(&mut i, clientid, now);
                Ok(())
            }
            None if self.is_current_epoch_clientid(clientid) => Err(Nfsstat4::NFS4ERR_EXPIRED),
            None => Err(Nfsstat4::NFS4ERR_STALE_CLIENTID),
        }
    }

    /// A client was heard from: its lease starts again and, had it become
    /// courteous, it is active again with everything it held.
    fn heard(i: &mut Inner, clientid: u64, now: Instant) {
        let Some(c) = i.clients.get_mut(&clientid) else {
            return;
        };
        c.renewed = now;
        if c.courteous_since.take().is_some() {
            i.events.push(Event::Reactivated { clientid });
        }
    }

    pub fn client_owner(&self, clientid: u64) -> Option<Bytes> {
        self.inner
            .lock()
            .unwrap()
            .clients
            .get(&clientid)
            .map(|c| c.owner.clone())
    }

    /// The owner of a client record not confirmed yet (the one a
    /// confirmation would make durable); None once confirmed or gone.
    pub fn unconfirmed_owner(&self, clientid: u64) -> Option<Bytes> {
        let i = self.inner.lock().unwrap();
        i.clients
            .get(&clientid)
            .filter(|c| !c.confirmed)
            .map(|c| c.owner.clone())
    }

    pub fn client_exists(&self, clientid: u64) -> bool {
        self.inner.lock().unwrap().clients.contains_key(&clientid)
    }

    pub fn reclaim_complete(&self, clientid: u64) -> Result<(), Nfsstat4> {
        let owner = {
            let mut i = self.inner.lock().unwrap();
            let c = i
                .clients
                .get_mut(&clientid)
                .ok_or(Nfsstat4::NFS4ERR_STALE_CLIENTID)?;
            if c.reclaim_complete {
                return Err(Nfsstat4::NFS4ERR_COMPLETE_ALREADY);
            }
            c.reclaim_complete = true;
            c.owner.clone()
        };
        let mut g = self.grace.lock().unwrap();
        if g.reclaimable.contains(&owner) {
            g.done.insert(owner);
        }
        Ok(())
    }

    /// Clients whose lease ran out at `now` (the reaper then expires them):
    /// those still holding state, and those silent for ten leases. A
    /// background walk, never on a request path.
    pub fn expired_clients(&self, now: Instant) -> Vec<u64> {
        let i = self.inner.lock().unwrap();
        i.clients
            .values()
            .filter(|c| {
                let silent = now.duration_since(c.renewed);
                silent > self.lease + self.lease / 2
                    && (c.holds_state() || silent > self.lease * 10)
            })
            .map(|c| c.id)
            .collect()
    }

    /// Expires one client; others' state is untouched. An NFSv4.1 client
    /// keeps its record and sessions at first: its opens and locks are
    /// revoked (so others can proceed) and its next SEQUENCE says so with
    /// SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED, so it can recover without
    /// losing its session. A 4.0 client, or one silent for ten leases, is
    /// removed with everything; then the client owner is returned, so its
    /// stable record can be dropped.
    pub fn expire_at(&self, clientid: u64, now: Instant) -> Option<Bytes> {
        let mut i = self.inner.lock().unwrap();
        let c = i.clients.get(&clientid)?;
        let owner = c.owner.clone();
        if c.minor == 0 || now.duration_since(c.renewed) > self.lease * 10 {
            self.purge(&mut i, clientid);
            return Some(owner);
        }
        self.revoke_all(&mut i, clientid, now);
        None
    }

    /// Whether a client's state may be taken from it: it is courteous, or
    /// its lease ran out and the lease timer has not marked it yet.
    fn lapsed(&self, c: &Client, now: Instant) -> bool {
        c.courteous_since.is_some()
            || (c.confirmed
                && c.holds_state()
                && now.saturating_duration_since(c.renewed) > self.lease)
    }

    /// The conflict hook: another client's OPEN, LOCK, LOCKT or NLM lock
    /// is refused because of `clientid`'s state. If that client is
    /// courteous its state is released now (true: retry); an active
    /// client keeps it (false).
    pub fn expire_courteous(&self, clientid: u64, now: Instant) -> bool {
        let mut i = self.inner.lock().unwrap();
        match i.clients.get(&clientid) {
            Some(c) if self.lapsed(c, now) => {}
            _ => return false,
        }
        self.expire_now(&mut i, clientid, Why::Conflict, now);
        drop(i);
        self.wake();
        true
    }

    /// Releases a client's state for real: an NFSv4.0 client goes with
    /// everything (its stateids then answer NFS4ERR_EXPIRED); an NFSv4.1
    /// client keeps its record and sessions, its state revoked (see
    /// [`State::expire_at`]), unless it is being forgotten for silence.
    fn expire_now(&self, i: &mut Inner, clientid: u64, why: Why, now: Instant) {
        let Some(c) = i.clients.get(&clientid) else {
            return;
        };
        let (owner, unrecord, minor) = (c.owner.clone(), c.confirmed, c.minor);
        if minor == 0 || matches!(why, Why::Silent | Why::Unconfirmed | Why::TableFull) {
            self.purge(i, clientid);
        } else {
            // Delegations are revoked with the rest (EXPIRED until freed).
            Self::expire_client_delegations(i, clientid);
            self.revoke_all(i, clientid, now);
        }
        i.events.push(Event::Expired {
            clientid,
            owner,
            why,
            unrecord,
        });
    }

    /// The lease timer's walk (a background task, never on a request
    /// path): clients whose lease ran out while holding state become
    /// courteous; courteous clients past the bounds of [`Courtesy`], or
    /// whose locks keep a queued lock request waiting, are expired for
    /// real; clients without state silent for ten leases are forgotten.
    /// Returns what happened since the last walk (conflict expiries and
    /// reactivations included) for the driver to log and carry out.
    pub fn reap(&self, now: Instant) -> Vec<Event> {
        let mut i = self.inner.lock().unwrap();
        self.reap_delegations(&mut i, now);
        self.reap_copies(&mut i, now);
        let mut newly = Vec::new();
        let mut expire = Vec::new();
        let mut courteous: Vec<(Instant, u64)> = Vec::new();
        for c in i.clients.values_mut() {
            let silent = now.saturating_duration_since(c.renewed);
            if silent <= self.lease {
                continue;
            }
            if c.confirmed && c.holds_state() {
                let since = *c.courteous_since.get_or_insert_with(|| {
                    newly.push(c.id);
                    now
                });
                if now.saturating_duration_since(since) > self.courtesy.max_age {
                    expire.push((c.id, Why::CourtesyTimeout));
                } else if self.locks.client_blocks_waiters(c.id) {
                    // Nobody else would wake the waiter: knfsd expires such
                    // a client too (nfs4_anylock_blockers).
                    expire.push((c.id, Why::LockWaiters));
                } else {
                    courteous.push((since, c.id));
                }
            } else if !c.confirmed {
                expire.push((c.id, Why::Unconfirmed));
            } else if silent > self.lease * 10 {
                expire.push((c.id, Why::Silent));
            }
        }
        if courteous.len() > self.courtesy.max_clients {
            courteous.sort();
            let excess = courteous.len() - self.courtesy.max_clients;
            expire.extend(
                courteous[..excess]
                    .iter()
                    .map(|(_, id)| (*id, Why::TooManyCourteous)),
            );
        }
        for clientid in newly {
            i.events.push(Event::Courteous { clientid });
        }
        for (id, why) in expire {
            self.expire_now(&mut i, id, why, now);
        }
        let mut events = std::mem::take(&mut i.events);
        // A newer incarnation of the owner confirmed since: its record stays.
        for e in &mut events {
            if let Event::Expired {
                clientid,
                owner,
                unrecord,
                ..
            } = e
            {
                if i.owners
                    .get(owner)
                    .and_then(|x| x.0)
                    .is_some_and(|c| c != *clientid)
                {
                    *unrecord = false;
                }
            }
        }
        // The record changes the events call for, in their order.
        for e in &events {
            match e {
                Event::Expired {
                    owner,
                    unrecord: true,
                    ..
                } => i.effects.push(Effect::ForgetClient {
                    owner: owner.clone(),
                }),
                Event::Recovered { owner, .. } => i.effects.push(Effect::PersistClient {
                    owner: owner.clone(),
                }),
                _ => {}
            }
        }
        events
    }

    /// Courteous clients now (the metrics gauge).
    pub fn courteous_clients(&self) -> usize {
        let i = self.inner.lock().unwrap();
        i.clients
            .values()
            .filter(|c| c.courteous_since.is_some())
            .count()
    }

    /// Revokes a client's opens and locks, remembering their ids.
    fn revoke_all(&self, i: &mut Inner, clientid: u64, now: Instant) {
        Self::drop_client_copies(i, clientid);
        let Some(c) = i.clients.get_mut(&clientid) else {
            return;
        };
        let gone: Vec<Other> = c.opens.drain().chain(c.locks.drain()).collect();
        c.open_index.clear();
        c.lock_index.clear();
        c.expired_at = Some(now);
        c.courteous_since = None;
        c.revoked.extend(gone.iter().copied());
        for o in &gone {
            if let Some(st) = i.stateids.remove(o) {
                if let Kind::Open { .. } = st.kind {
                    Self::unlink_file(i, &st.file, o);
                }
            }
            i.revoked.insert(*o, clientid);
        }
        self.locks.release_client(clientid);
    }

    /// SEQUENCE's sr_status_flags for a client.
    pub fn status_flags(&self, clientid: u64) -> u32 {
        let i = self.inner.lock().unwrap();
        i.clients.get(&clientid).map_or(0, Client::status_flags)
    }

    /// SEQUENCE: renews the lease and returns the status flags, under one lock.
    pub fn renew_flags(&self, clientid: u64, now: Instant) -> Result<u32, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        if !i.clients.contains_key(&clientid) {
            return Err(Nfsstat4::NFS4ERR_EXPIRED);
        }
        Self::heard(&mut i, clientid, now);
        Ok(i.clients[&clientid].status_flags())
    }

    /// Removes a client and everything it owns: cost proportional to what
    /// it holds, whatever else is in the tables.
    fn purge(&self, i: &mut Inner, clientid: u64) {
        Self::drop_client_delegations(i, clientid);
        Self::drop_client_copies(i, clientid);
        let Some(c) = i.clients.remove(&clientid) else {
            return;
        };
        for s in &c.sessions {
            i.sessions.remove(s);
        }
        for o in c.locks.iter().chain(c.opens.iter()) {
            if let Some(st) = i.stateids.remove(o) {
                if let Kind::Open { .. } = st.kind {
                    Self::unlink_file(i, &st.file, o);
                }
            }
        }
        for o in c.last_closed.values() {
            i.closed.remove(o);
        }
        for o in &c.revoked {
            i.revoked.remove(o);
        }
        self.locks.release_client(clientid);
        if let Some(e) = i.owners.get_mut(&c.owner) {
            if e.0 == Some(clientid) {
                e.0 = None;
            }
            if e.1 == Some(clientid) {
                e.1 = None;
            }
            if *e == (None, None) {
                i.owners.remove(&c.owner);
            }
        }
    }

    fn unlink_file(i: &mut Inner, file: &FileKey, other: &Other) {
        if let Some(v) = i.files.get_mut(file) {
            v.retain(|x| x != other);
            if v.is_empty() {
                i.files.remove(file);
            }
        }
    }

    // ---- opens -----------------------------------------------------------

    /// OPEN: a new open stateid, or the owner's existing one for this file
    /// with its access and deny bits widened and its seqid bumped.
    pub fn open(
        &self,
        clientid: u64,
        owner: &Bytes,
        file: FileKey,
        access: u32,
        deny: u32,
        now: Instant,
    ) -> Result<Stateid4, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        if !i.clients.get(&clientid).is_some_and(|c| c.confirmed) {
            return Err(Nfsstat4::NFS4ERR_STALE_CLIENTID);
        }
        // Writing, or denying reads, must wait for other clients'
        // delegations to be recalled, and any open for their write
        // delegations (the caller asked for the recall first; one granted
        // since is recalled when the client retries).
        let changes = access & ACCESS_WRITE != 0 || deny & ACCESS_READ != 0;
        if i.deleg_files.get(&file).is_some_and(|v| {
            v.iter().any(|o| {
                let d = &i.delegs[o];
                d.client != clientid && (changes || d.kind == deleg::DelegType::Write)
            })
        }) {
            return Err(Nfsstat4::NFS4ERR_DELAY);
        }
        let existing = i.clients[&clientid]
            .open_index
            .get(&(owner.clone(), file))
            .copied();
        // Share reservations: another open's deny bits against our access,
        // our deny bits against another open's access. RFC 7530 §9.9 (and
        // RFC 8881 §9.7): "with no exception for an existing OPEN for the
        // same open-owner", so the owner's own open counts too.
        let mut courteous = Vec::new();
        if let Some(list) = i.files.get(&file) {
            for o in list {
                if let Some(Stateful {
                    client,
                    kind:
                        Kind::Open {
                            access: a, deny: d, ..
                        },
                    ..
                }) = i.stateids.get(o)
                {
                    if d & access != 0 || a & deny != 0 {
                        // A courteous client's open gives way (below); an
                        // active one's refuses, and then nobody is expired.
                        match i.clients.get(client) {
                            Some(c) if *client != clientid && self.lapsed(c, now) => {
                                courteous.push(*client)
                            }
                            _ => return Err(Nfsstat4::NFS4ERR_SHARE_DENIED),
                        }
                    }
                }
            }
        }
        courteous.sort_unstable();
        courteous.dedup();
        let woke = !courteous.is_empty();
        for c in courteous {
            self.expire_now(&mut i, c, Why::Conflict, now);
        }
        if woke {
            self.wake();
        }
        if let Some(o) = existing {
            let st = i.stateids.get_mut(&o).expect("indexed open exists");
            st.seqid = st.seqid.wrapping_add(1);
            if let Kind::Open {
                access: a,
                deny: d,
                modes,
                ..
            } = &mut st.kind
            {
                *a |= access;
                *d |= deny;
                *modes |= mode_bit(access, deny);
            }
            return Ok(Stateid4 {
                seqid: st.seqid,
                other: o,
            });
        }
        let c = &i.clients[&clientid];
        if c.opens.len() >= self.limits.max_opens_per_client {
            return Err(self.over_limit(LIMIT_OPENS, c.minor));
        }
        let other = self.new_other(&mut i, clientid);
        i.stateids.insert(
            other,
            Stateful {
                client: clientid,
                file,
                seqid: 1,
                kind: Kind::Open {
                    owner: owner.clone(),
                    access,
                    deny,
                    modes: mode_bit(access, deny),
                    locks: Vec::new(),
                },
            },
        );
        i.files.entry(file).or_default().push(other);
        let c = i.clients.get_mut(&clientid).expect("checked above");
        c.opens.insert(other);
        c.open_index.insert((owner.clone(), file), other);
        Ok(Stateid4 { seqid: 1, other })
    }

    /// Finds a stateid of this client on this file, checking its seqid.
    fn lookup<'a>(
        &self,
        i: &'a mut Inner,
        sid: &Stateid4,
        file: Option<&FileKey>,
        minor: u32,
    ) -> Result<&'a mut Stateful, Nfsstat4> {
        // RFC 7530 §9.1.4.3: a special stateid where no special stateid is
        // allowed is bad; it does not come from another server instance.
        if sid.other == [0; 12] || sid.other == [0xff; 12] {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        // The epoch says which server instance issued it: another one's is
        // stale; an unknown one of ours was never issued (or is gone): bad.
        let stale = u32::from_be_bytes(sid.other[..4].try_into().unwrap()) != self.epoch;
        if i.revoked.contains_key(&sid.other) {
            return Err(Nfsstat4::NFS4ERR_EXPIRED);
        }
        if !i.stateids.contains_key(&sid.other) {
            return Err(if stale && minor == 0 {
                Nfsstat4::NFS4ERR_STALE_STATEID
            } else if minor == 0 && !i.clients.contains_key(&self.other_client(&sid.other)) {
                // Its client's lease expired (or the client rebooted and
                // confirmed anew): RFC 7530 §9.6.3 says EXPIRED.
                Nfsstat4::NFS4ERR_EXPIRED
            } else {
                Nfsstat4::NFS4ERR_BAD_STATEID
            });
        }
        let st = i.stateids.get_mut(&sid.other).expect("checked above");
        if file.is_some_and(|f| *f != st.file) {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        // seqid 0 in NFSv4.1 means "the current one".
        if !(minor > 0 && sid.seqid == 0) && sid.seqid != st.seqid {
            return Err(if sid.seqid < st.seqid {
                Nfsstat4::NFS4ERR_OLD_STATEID
            } else {
                Nfsstat4::NFS4ERR_BAD_STATEID
            });
        }
        Ok(st)
    }

    /// Checks a stateid presented with READ, WRITE or SETATTR(size).
    pub fn check_io(
        &self,
        sid: &Stateid4,
        file: &FileKey,
        write: bool,
        minor: u32,
    ) -> Result<Checked, Nfsstat4> {
        let want = if write { ACCESS_WRITE } else { ACCESS_READ };
        let mut i = self.inner.lock().unwrap();
        if is_special(sid) {
            // RFC 7530 §9.1.4.3 (RFC 8881 §8.2.3): I/O with the anonymous
            // stateid is refused when an open denies that access; the READ
            // bypass stateid MAY read anyway (it is anonymous for writes).
            let bypass = !write && sid.seqid == u32::MAX;
            if !bypass {
                Self::share_denied(&i, file, want, None)?;
            }
            return Ok(Checked::Special);
        }
        if let Some(r) = Self::check_deleg_io(&i, sid, file, write) {
            return r;
        }
        let st = self.lookup(&mut i, sid, Some(file), minor)?;
        let open_other = match &st.kind {
            Kind::Open { .. } => sid.other,
            Kind::Lock { open, .. } => *open,
        };
        let access = match i.stateids.get(&open_other).map(|s| &s.kind) {
            Some(Kind::Open { access, .. }) => *access,
            _ => return Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        };
        if write && access & ACCESS_WRITE == 0 {
            return Err(Nfsstat4::NFS4ERR_OPENMODE);
        }
        // A READ through a write-only open is allowed, but its open's share
        // check never covered reading: another open denying reads wins.
        if access & want == 0 {
            Self::share_denied(&i, file, want, Some(open_other))?;
        }
        Ok(Checked::Granted)
    }

    /// NFS4ERR_LOCKED when an open of `file` other than `except` denies
    /// the `want` access (RFC 7530 §9.9: a READ or WRITE that conflicts
    /// with a share reservation).
    fn share_denied(
        i: &Inner,
        file: &FileKey,
        want: u32,
        except: Option<Other>,
    ) -> Result<(), Nfsstat4> {
        let Some(list) = i.files.get(file) else {
            return Ok(());
        };
        for o in list {
            if Some(*o) == except {
                continue;
            }
            if let Some(Stateful {
                kind: Kind::Open { deny, .. },
                ..
            }) = i.stateids.get(o)
            {
                if deny & want != 0 {
                    return Err(Nfsstat4::NFS4ERR_LOCKED);
                }
            }
        }
        Ok(())
    }

    /// NFSv4.0: whether an OPEN by `owner` must be confirmed with
    /// OPEN_CONFIRM before its stateid is used (RFC 7530 §16.18.5: the
    /// first OPEN of an open owner the server does not know as confirmed,
    /// as knfsd asks). A reclaim (CLAIM_PREVIOUS) comes from an owner that
    /// was confirmed before the restart: it is taken as confirmed, as knfsd
    /// does. Sessions (4.1) confirm nothing this way.
    pub fn needs_open_confirm(&self, clientid: u64, owner: &Bytes, reclaim: bool) -> bool {
        let mut i = self.inner.lock().unwrap();
        match i.clients.get_mut(&clientid) {
            Some(c) if c.minor == 0 => {
                if reclaim {
                    c.confirmed_owners.insert(owner.clone());
                }
                !c.confirmed_owners.contains(owner)
            }
            _ => false,
        }
    }

    /// NFSv4.0 OPEN_CONFIRM of an open stateid of `file` (checked as every
    /// stateid is): its owner becomes confirmed and the stateid's seqid
    /// moves on, so the OPEN's stateid is now old. An owner confirmed
    /// already is NFS4ERR_BAD_STATEID (§16.18.5; knfsd answers the same).
    pub fn open_confirm(
        &self,
        sid: &Stateid4,
        file: &FileKey,
        minor: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let st = self.lookup(&mut i, sid, Some(file), minor)?;
        let (client, owner) = match &st.kind {
            Kind::Open { owner, .. } => (st.client, owner.clone()),
            Kind::Lock { .. } => return Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        };
        let c = i
            .clients
            .get_mut(&client)
            .ok_or(Nfsstat4::NFS4ERR_EXPIRED)?;
        if !c.confirmed_owners.insert(owner) {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        let st = i.stateids.get_mut(&sid.other).expect("found above");
        st.seqid = st.seqid.wrapping_add(1);
        Ok(Stateid4 {
            seqid: st.seqid,
            other: sid.other,
        })
    }

    /// The share access of the open a lock stateid was made through.
    pub fn lock_open_access(&self, lock: &Other) -> Option<u32> {
        let i = self.inner.lock().unwrap();
        let Kind::Lock { open, .. } = &i.stateids.get(lock)?.kind else {
            return None;
        };
        match &i.stateids.get(open)?.kind {
            Kind::Open { access, .. } => Some(*access),
            Kind::Lock { .. } => None,
        }
    }

    /// The client an open or lock stateid belongs to (for lease renewal in 4.0).
    pub fn owner_client(&self, sid: &Stateid4) -> Option<u64> {
        self.inner
            .lock()
            .unwrap()
            .stateids
            .get(&sid.other)
            .map(|s| s.client)
    }

    /// CLOSE: the open stateid goes, with its lock stateids and the locks
    /// they still hold on this file.
    pub fn close(&self, sid: &Stateid4, file: &FileKey, minor: u32) -> Result<Stateid4, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let st = self.lookup(&mut i, sid, Some(file), minor)?;
        let (client, seqid) = (st.client, st.seqid);
        let Kind::Open { owner, locks, .. } = &st.kind else {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        };
        let owner = owner.clone();
        let locks = locks.clone();
        // RFC 8881 §18.2.4: a server MAY free the locks still held at CLOSE
        // instead of refusing with LOCKS_HELD. Linux sends the LOCKU of a
        // closing file without waiting for it, so its CLOSE can overtake the
        // unlock; freeing them here (as knfsd does) keeps the file usable.
        for l in &locks {
            if let Some(st) = i.stateids.remove(l) {
                if let Kind::Lock { owner, .. } = &st.kind {
                    self.locks.unlock(st.file, owner, 0, u64::MAX);
                    if let Some(c) = i.clients.get_mut(&client) {
                        c.locks.remove(l);
                        c.lock_index.remove(&(owner.owner.clone(), st.file));
                    }
                }
            }
        }
        i.stateids.remove(&sid.other);
        Self::unlink_file(&mut i, file, &sid.other);
        if let Some(c) = i.clients.get_mut(&client) {
            c.opens.remove(&sid.other);
            c.open_index.remove(&(owner.clone(), *file));
            if minor == 0 {
                let so = SeqOwner { owner, lock: false };
                if let Some(prev) = c.last_closed.insert(so.clone(), sid.other) {
                    i.closed.remove(&prev);
                }
                i.closed.insert(sid.other, (client, so));
            }
        }
        Ok(Stateid4 {
            seqid: seqid.wrapping_add(1),
            other: sid.other,
        })
    }

    pub fn downgrade(
        &self,
        sid: &Stateid4,
        file: &FileKey,
        access: u32,
        deny: u32,
        minor: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let st = self.lookup(&mut i, sid, Some(file), minor)?;
        let Kind::Open {
            access: a,
            deny: d,
            modes,
            ..
        } = &mut st.kind
        else {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        };
        // RFC 7530 §16.19.4 (RFC 8881 §18.18.3): the new bits must be
        // exactly the union of some subset of the OPENs in effect. The
        // OPENs within the new bits are the largest such subset: the
        // downgrade is valid iff their union is the new bits.
        let within = downgrade_within(*modes, access, deny);
        if access == 0 || union_of(within) != (access, deny) {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        // The OPENs outside the new bits are no longer in effect.
        *modes = within;
        *a = access;
        *d = deny;
        st.seqid = st.seqid.wrapping_add(1);
        Ok(Stateid4 {
            seqid: st.seqid,
            other: sid.other,
        })
    }

    // ---- locks -----------------------------------------------------------

    /// The lock stateid for (lock owner, file), made from an open stateid
    /// the first time (LOCK with open_to_lock_owner).
    pub fn lock_state_from_open(
        &self,
        open: &Stateid4,
        file: &FileKey,
        owner: &OwnerKey,
        minor: u32,
    ) -> Result<(Other, u32), Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let st = self.lookup(&mut i, open, Some(file), minor)?;
        let client = st.client;
        if !matches!(st.kind, Kind::Open { .. }) {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        if owner.client != client {
            // A lock owner's clientid from another server instance is
            // stale (RFC 7530 §16.10.5), whatever the open stateid says.
            if !self.is_current_epoch_clientid(owner.client) {
                return Err(Nfsstat4::NFS4ERR_STALE_CLIENTID);
            }
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        if let Some(o) = i.clients[&client]
            .lock_index
            .get(&(owner.owner.clone(), *file))
        {
            let o = *o;
            return Ok((o, i.stateids[&o].seqid));
        }
        if i.clients[&client].locks.len() >= self.limits.max_locks_per_client {
            return Err(self.over_limit(LIMIT_LOCKS, minor));
        }
        let other = self.new_other(&mut i, client);
        i.stateids.insert(
            other,
            Stateful {
                client,
                file: *file,
                seqid: 0,
                kind: Kind::Lock {
                    open: open.other,
                    owner: owner.clone(),
                },
            },
        );
        if let Some(Stateful {
            kind: Kind::Open { locks, .. },
            ..
        }) = i.stateids.get_mut(&open.other)
        {
            locks.push(other);
        }
        let c = i.clients.get_mut(&client).expect("open's client exists");
        c.locks.insert(other);
        c.lock_index.insert((owner.owner.clone(), *file), other);
        Ok((other, 0))
    }

    /// An existing lock stateid: its owner, checked against the file.
    pub fn lock_state(
        &self,
        sid: &Stateid4,
        file: &FileKey,
        minor: u32,
    ) -> Result<OwnerKey, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let st = self.lookup(&mut i, sid, Some(file), minor)?;
        match &st.kind {
            Kind::Lock { owner, .. } => Ok(owner.clone()),
            Kind::Open { .. } => Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
    }

    /// Bumps a lock stateid's seqid after a successful LOCK or LOCKU.
    pub fn bump(&self, other: &Other) -> Stateid4 {
        let mut i = self.inner.lock().unwrap();
        let seqid = match i.stateids.get_mut(other) {
            Some(st) => {
                st.seqid = st.seqid.wrapping_add(1);
                st.seqid
            }
            None => 0,
        };
        Stateid4 {
            seqid,
            other: *other,
        }
    }

    // ---- TEST_STATEID / FREE_STATEID ----------------------------------------

    pub fn test_stateid(&self, clientid: u64, sid: &Stateid4) -> Nfsstat4 {
        if is_special(sid) {
            return Nfsstat4::NFS4ERR_BAD_STATEID;
        }
        let mut i = self.inner.lock().unwrap();
        if let Some(s) = self.test_deleg(&i, clientid, sid) {
            return s;
        }
        if let Some(s) = Self::test_copy(&i, clientid, sid) {
            return s;
        }
        match self.lookup(&mut i, sid, None, 1) {
            Ok(st) if st.client == clientid => Nfsstat4::NFS4_OK,
            Ok(_) => Nfsstat4::NFS4ERR_BAD_STATEID,
            Err(e) => e,
        }
    }

    /// FREE_STATEID: only a lock stateid holding no locks can be freed;
    /// an open stateid must be CLOSEd.
    pub fn free_stateid(&self, clientid: u64, sid: &Stateid4) -> Nfsstat4 {
        let mut i = self.inner.lock().unwrap();
        if let Some(s) = Self::free_deleg(&mut i, clientid, sid) {
            return s;
        }
        if let Some(s) = Self::free_copy(&mut i, clientid, sid) {
            return s;
        }
        if i.revoked.get(&sid.other) == Some(&clientid) {
            i.revoked.remove(&sid.other);
            let mut recovered = None;
            if let Some(c) = i.clients.get_mut(&clientid) {
                c.revoked.remove(&sid.other);
                if c.revoked.is_empty() {
                    // The client acknowledged the revocation: what it opens
                    // from now on is reclaimable again after a restart.
                    recovered = Some(c.owner.clone());
                }
            }
            if let Some(owner) = recovered {
                i.events.push(Event::Recovered { clientid, owner });
                drop(i);
                self.wake();
            }
            return Nfsstat4::NFS4_OK;
        }
        let st = match self.lookup(&mut i, sid, None, 1) {
            Ok(st) if st.client == clientid => st,
            Ok(_) => return Nfsstat4::NFS4ERR_BAD_STATEID,
            Err(e) => return e,
        };
        let file = st.file;
        match &st.kind {
            Kind::Open { .. } => Nfsstat4::NFS4ERR_LOCKS_HELD,
            Kind::Lock { owner, open } => {
                if self.locks.owner_holds(owner) {
                    return Nfsstat4::NFS4ERR_LOCKS_HELD;
                }
                let (owner, open) = (owner.clone(), *open);
                i.stateids.remove(&sid.other);
                if let Some(Stateful {
                    kind: Kind::Open { locks, .. },
                    ..
                }) = i.stateids.get_mut(&open)
                {
                    locks.retain(|l| *l != sid.other);
                }
                if let Some(c) = i.clients.get_mut(&clientid) {
                    c.locks.remove(&sid.other);
                    c.lock_index.remove(&(owner.owner, file));
                }
                Nfsstat4::NFS4_OK
            }
        }
    }

    // ---- NFSv4.0 owner seqids -----------------------------------------------

    /// The owner an open or lock stateid belongs to: (client, owner).
    pub fn stateid_owner(&self, sid: &Stateid4) -> Option<(u64, SeqOwner)> {
        let i = self.inner.lock().unwrap();
        if let Some(closed) = i.closed.get(&sid.other) {
            return Some(closed.clone());
        }
        i.stateids.get(&sid.other).map(|st| match &st.kind {
            Kind::Open { owner, .. } => (
                st.client,
                SeqOwner {
                    owner: owner.clone(),
                    lock: false,
                },
            ),
            Kind::Lock { owner, .. } => (
                st.client,
                SeqOwner {
                    owner: owner.owner.clone(),
                    lock: true,
                },
            ),
        })
    }

    pub fn seq_check(&self, client: u64, owner: &SeqOwner, seqid: u32) -> SeqCheck {
        let i = self.inner.lock().unwrap();
        let Some((last, reply)) = i.clients.get(&client).and_then(|c| c.seqids.get(owner)) else {
            return SeqCheck::New;
        };
        if seqid == last.wrapping_add(1) {
            SeqCheck::New
        } else if seqid == *last {
            reply.clone().map_or(SeqCheck::Bad, SeqCheck::Replay)
        } else {
            SeqCheck::Bad
        }
    }

    /// NFSv4.0 LOCK with open_to_lock_owner: the lock owner's sequence
    /// starts at that request's lock_seqid (RFC 7530 §16.10.4), so its next
    /// LOCK or LOCKU must carry lock_seqid + 1. The request itself was
    /// sequenced (and its reply kept) by the open owner.
    pub fn seq_begin(&self, client: u64, owner: SeqOwner, seqid: u32) {
        let mut i = self.inner.lock().unwrap();
        if let Some(c) = i.clients.get_mut(&client) {
            c.seqids.insert(owner, (seqid, None));
        }
    }

    /// Records an owner's request as done, with its reply for a retransmission.
    pub fn seq_done(&self, client: u64, owner: SeqOwner, seqid: u32, reply: Bytes) {
        let mut i = self.inner.lock().unwrap();
        if let Some(c) = i.clients.get_mut(&client) {
            c.seqids.insert(owner, (seqid, Some(reply)));
        }
    }

    /// For the metrics' cache report: objects (clients, sessions, stateids)
    /// and a rough size, the sessions' cached replies counted exactly.
    pub fn usage(&self) -> (u64, u64) {
        let i = self.inner.lock().unwrap();
        let replies: usize = i.sessions.values().map(|s| s.cached_bytes()).sum();
        let n = i.clients.len() + i.sessions.len() + i.stateids.len();
        let rough = i.clients.len() * 512 + i.sessions.len() * 1024 + i.stateids.len() * 192;
        (n as u64, (replies + rough) as u64)
    }

    /// Counts for metrics and tests: (clients, sessions, stateids, files with opens).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let i = self.inner.lock().unwrap();
        (
            i.clients.len(),
            i.sessions.len(),
            i.stateids.len(),
            i.files.len(),
        )
    }
}

/// The bit of an OPEN's (access, deny) pair in [`Kind::Open`]'s `modes`.
fn mode_bit(access: u32, deny: u32) -> u16 {
    1 << ((access & ACCESS_BOTH) * 4 + (deny & ACCESS_BOTH))
}

/// The pairs of `modes` whose access and deny lie within (access, deny).
fn downgrade_within(modes: u16, access: u32, deny: u32) -> u16 {
    let mut keep = 0;
    for a in 1..=ACCESS_BOTH {
        for d in 0..=ACCESS_BOTH {
            let bit = mode_bit(a, d);
            if modes & bit != 0 && a & !access == 0 && d & !deny == 0 {
                keep |= bit;
            }
        }
    }
    keep
}

/// The union (access, deny) of the pairs in `modes`.
fn union_of(modes: u16) -> (u32, u32) {
    let (mut access, mut deny) = (0, 0);
    for a in 1..=ACCESS_BOTH {
        for d in 0..=ACCESS_BOTH {
            if modes & mode_bit(a, d) != 0 {
                access |= a;
                deny |= d;
            }
        }
    }
    (access, deny)
}

/// The anonymous stateid (all zeros) and the READ bypass stateid (all ones).
pub fn is_special(sid: &Stateid4) -> bool {
    (sid.seqid == 0 && sid.other == [0; 12]) || (sid.seqid == u32::MAX && sid.other == [0xff; 12])
}

/// The NFSv4.1 "current stateid" (seqid 1, other all zeros).
pub fn is_current(sid: &Stateid4) -> bool {
    sid.seqid == 1 && sid.other == [0; 12]
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod purity;

#[cfg(test)]
mod copy_tests;
