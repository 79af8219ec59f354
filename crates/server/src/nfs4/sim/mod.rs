//! Deterministic simulation of the NFSv4 state core and the shared lock
//! manager: many NFSv4.0 and 4.1 clients and NLM hosts open, lock, unlock,
//! close, retransmit on session slots, fall silent (a partition), reboot,
//! and reclaim after server restarts, all in simulated time from one seed.
//! NFSv4.1 clients that open a file for reading only are given read
//! delegations, those that open it for writing write delegations, and
//! return them when recalled unless they are cut off. NFSv4.1 clients
//! also take directory delegations (GET_DIR_DELEGATION) on a few
//! directories whose entries clients, NFSv3 and local processes change;
//! a change waits (DELAY) while the others' are recalled.
//! The world plays the driver's part exactly as `super::Nfs4` does: it
//! carries out the core's effects after each step (the durable client
//! records are a set in memory that survives restarts), runs the lease
//! timer's walk on every simulated second and when the core wakes it.
//!
//! After every step the invariants are checked (see [`World::check`]). A
//! failure names the seed and a replay: the shortest prefix of steps that
//! fails, then with as many steps left out as still fail.
//!
//! `cargo test -p server nfs4::sim` runs the fixed seeds CI runs;
//! `scripts/simulate.sh --seeds N --steps M` runs more (through
//! `TARN_SIM_SEEDS`, `TARN_SIM_STEPS`, `TARN_SIM_FIRST_SEED`).

use super::state::deleg::{Break, DelegAsk, DelegType};
use super::state::session::{plain_channel, Session, SlotUse};
use super::state::{Courtesy, Effect, State, ACCESS_BOTH, ACCESS_READ, ACCESS_WRITE};
use crate::grace::Grace;
use crate::locks::{FileKey, LockKind, LockManager, OwnerKey, NLM_CLIENT_BIT};
use bytes::Bytes;
use proto::nfs4::{ChannelAttrs4, Nfsstat4, Stateid4};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 8;
const HOSTS: usize = 3;
const FILES: u8 = 4;
const DIRS: u8 = 2;
const SLOTS: u32 = 2;
const LEASE: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_secs(15);
const PRINCIPAL: &str = "sys:0";
/// Small bounds, so that courteous clients also run out of courtesy.
const COURTESY: Courtesy = Courtesy {
    max_age: Duration::from_secs(60),
    max_clients: 3,
};

/// One thing that happens. Steps name clients, files and ranges, never
/// ids the server gave out, so any subsequence of them can be replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// EXCHANGE_ID + CREATE_SESSION (4.1) or SETCLIENTID + CONFIRM (4.0).
    Connect {
        c: usize,
    },
    Open {
        c: usize,
        f: u8,
        access: u32,
        deny: u32,
    },
    Close {
        c: usize,
        f: u8,
    },
    Lock {
        c: usize,
        f: u8,
        off: u64,
        len: u64,
        write: bool,
    },
    Unlock {
        c: usize,
        f: u8,
        off: u64,
        len: u64,
    },
    NlmLock {
        h: usize,
        f: u8,
        off: u64,
        len: u64,
        write: bool,
    },
    NlmUnlock {
        h: usize,
        f: u8,
        off: u64,
        len: u64,
    },
    /// A new request on a session slot whose reply is cached.
    Request {
        c: usize,
        slot: u32,
        sum: u64,
    },
    /// The slot's last request sent again.
    Replay {
        c: usize,
        slot: u32,
    },
    /// The client is cut off (renews nothing) for this long.
    Partition {
        c: usize,
        secs: u64,
    },
    /// The client reboots: it forgets everything, new verifier.
    Reboot {
        c: usize,
    },
    /// The client unmounts: CLOSEs, DESTROY_SESSION, DESTROY_CLIENTID.
    Unmount {
        c: usize,
    },
    /// 4.1: TEST_STATEID / FREE_STATEID of what the server revoked.
    Recover {
        c: usize,
    },
    /// Reclaims after a server restart (opens, locks, RECLAIM_COMPLETE).
    Reclaim {
        c: usize,
    },
    NlmReclaim {
        h: usize,
    },
    Advance {
        secs: u64,
    },
    Restart,
    /// 4.1: GET_DIR_DELEGATION on directory `d`.
    GetDirDeleg {
        c: usize,
        d: u8,
    },
    /// A change of directory `d`'s entries by client `c`, or (None) by
    /// NFSv3 or a process on the server, which name no client.
    DirChange {
        c: Option<usize>,
        d: u8,
    },
}

#[derive(Default, Clone)]
struct SlotModel {
    seqid: u32,
    /// (args fingerprint, cached reply) of the slot's last request.
    last: Option<(u64, Bytes)>,
}

#[derive(Default)]
struct Client {
    name: Bytes,
    minor: u32,
    /// Changes when the client reboots.
    verifier: u8,
    id: Option<u64>,
    session: Option<[u8; 16]>,
    slots: Vec<SlotModel>,
    /// file → (open stateid, access, deny).
    opens: BTreeMap<u8, (Stateid4, u32, u32)>,
    /// file → lock stateid.
    lock_sids: BTreeMap<u8, Stateid4>,
    /// file → ranges held (offset, length, write).
    held: BTreeMap<u8, Vec<(u64, u64, bool)>>,
    /// What to reclaim after a server restart.
    reclaim_opens: BTreeMap<u8, (u32, u32)>,
    reclaim_locks: BTreeMap<u8, Vec<(u64, u64, bool)>>,
    needs_reclaim: bool,
    /// 4.1: stateids the server revoked, still to free.
    revoked: Vec<Stateid4>,
    /// 4.1: file → delegation held.
    delegs: BTreeMap<u8, Stateid4>,
    /// 4.1: directory → directory delegation held.
    dir_delegs: BTreeMap<u8, Stateid4>,
    silent_until: Option<Instant>,
    last_renew: Option<Instant>,
}

#[derive(Default)]
struct Host {
    held: BTreeMap<u8, Vec<(u64, u64, bool)>>,
    reclaim: BTreeMap<u8, Vec<(u64, u64, bool)>>,
}

/// What the run reached, for the coverage test.
#[derive(Default, Debug)]
pub struct Stats {
    pub opens: u32,
    pub share_denied: u32,
    pub locks: u32,
    pub lock_denied: u32,
    pub nlm_locks: u32,
    pub replays: u32,
    pub reclaims: u32,
    pub restarts: u32,
    pub courteous: u32,
    pub expired: u32,
    pub conflict_expired: u32,
    pub unmounts: u32,
    pub delegations: u32,
    /// Of those, write delegations.
    pub write_delegations: u32,
    /// Opens that waited (DELAY) for a delegation to be recalled.
    pub recall_waits: u32,
    pub delegations_returned: u32,
    pub dir_delegations: u32,
    /// Directory changes that waited (DELAY) for a recall.
    pub dir_recall_waits: u32,
    pub dir_changes: u32,
}

pub struct World {
    pub stats: Stats,
    now: Arc<Mutex<Instant>>,
    epoch: u32,
    state: Arc<State>,
    woke: Arc<AtomicBool>,
    grace: Grace,
    /// The durable client records (what the state directory holds).
    durable: HashSet<Bytes>,
    /// The records as loaded at the last restart: who may reclaim.
    reclaimable: HashSet<Bytes>,
    clients: Vec<Client>,
    hosts: Vec<Host>,
    /// Per directory, who made each change of its entries (None: NFSv3
    /// or a local process), in order.
    dir_changes: [Vec<Option<u64>>; DIRS as usize],
    /// (directory, client ID) → how many changes the directory had seen
    /// when that client's delegation on it was granted.
    dir_grants: BTreeMap<(u8, u64), usize>,
}

fn file(f: u8) -> FileKey {
    FileKey {
        export: 1,
        fid: vfs::Fid::new(&[f]).unwrap(),
    }
}

/// Directories have handles no file has.
fn dir(d: u8) -> FileKey {
    FileKey {
        export: 1,
        fid: vfs::Fid::new(&[0x80 | d]).unwrap(),
    }
}

fn attrs() -> ChannelAttrs4 {
    plain_channel(SLOTS)
}

fn kind(write: bool) -> LockKind {
    if write {
        LockKind::Write
    } else {
        LockKind::Read
    }
}

fn last_byte(off: u64, len: u64) -> u64 {
    if len == u64::MAX {
        u64::MAX
    } else {
        off + len - 1
    }
}

const OPEN_OWNER: &[u8] = b"open-owner";
const LOCK_OWNER: &[u8] = b"lock-owner";

impl World {
    pub fn new() -> World {
        let t0 = Instant::now();
        let mut w = World {
            stats: Stats::default(),
            now: Arc::new(Mutex::new(t0)),
            epoch: 0,
            state: Arc::new(State::new(LEASE, Arc::new(LockManager::new()), 0)),
            woke: Arc::new(AtomicBool::new(false)),
            grace: Grace::new(t0, Duration::ZERO),
            durable: HashSet::new(),
            reclaimable: HashSet::new(),
            clients: (0..CLIENTS)
                .map(|n| Client {
                    name: Bytes::from(format!("client-{n}")),
                    // Two in three speak 4.1 (sessions), the rest 4.0.
                    minor: if n % 3 == 2 { 0 } else { 1 },
                    ..Client::default()
                })
                .collect(),
            hosts: (0..HOSTS).map(|_| Host::default()).collect(),
            dir_changes: Default::default(),
            dir_grants: BTreeMap::new(),
        };
        w.boot();
        w
    }

    fn now(&self) -> Instant {
        *self.now.lock().unwrap()
    }

    /// A server (re)start: fresh memory, the durable records loaded, one
    /// grace period for both protocols; wired as `Nfs4::new` does.
    fn boot(&mut self) {
        self.epoch += 1;
        let locks = Arc::new(LockManager::new());
        let state = Arc::new(State::with_courtesy(
            LEASE,
            locks.clone(),
            COURTESY,
            self.epoch,
        ));
        let weak = Arc::downgrade(&state);
        let now = self.now.clone();
        locks.set_conflict_hook(Box::new(move |client| {
            let t = *now.lock().unwrap();
            weak.upgrade()
                .is_some_and(|s| s.expire_courteous(client, t))
        }));
        let woke = self.woke.clone();
        state.set_waker(Box::new(move || woke.store(true, Ordering::Relaxed)));
        self.grace = Grace::new(self.now(), GRACE);
        self.reclaimable = self.durable.clone();
        state.start_grace(self.durable.clone(), self.grace);
        self.state = state;
    }

    /// The driver's part after a step: carry out the effects; if the core
    /// asked to be woken, run the lease timer's walk too.
    fn drive(&mut self) {
        if self.woke.swap(false, Ordering::Relaxed) {
            self.reap();
        }
        for e in self.state.take_effects() {
            match e {
                Effect::PersistClient { owner } => {
                    self.durable.insert(owner);
                }
                Effect::ForgetClient { owner } => {
                    self.durable.remove(&owner);
                }
                Effect::Recall {
                    client, stateid, ..
                } => self.recalled(client, stateid),
                Effect::RecallAny { client, .. } => self.state.recall_any_done(client),
            }
        }
    }

    /// The lease timer's walk.
    fn reap(&mut self) {
        use super::state::{Event, Why};
        for e in self.state.reap(self.now()) {
            match e {
                Event::Courteous { .. } => self.stats.courteous += 1,
                Event::Expired {
                    why: Why::Conflict, ..
                } => self.stats.conflict_expired += 1,
                Event::Expired { .. } => self.stats.expired += 1,
                _ => {}
            }
        }
    }

    // ---- the generator ---------------------------------------------------

    fn generate(&self, rng: &mut StdRng) -> Step {
        let c = rng.gen_range(0..CLIENTS);
        let h = rng.gen_range(0..HOSTS);
        let cl = &self.clients[c];
        // Mostly a file the client has open, so locks and closes happen.
        let f = match cl.opens.keys().nth(rng.gen_range(0..cl.opens.len().max(1))) {
            Some(f) if rng.gen_bool(0.8) => *f,
            _ => rng.gen_range(0..FILES),
        };
        let off = rng.gen_range(0..16u64);
        let len = if rng.gen_bool(0.1) {
            u64::MAX
        } else {
            rng.gen_range(1..8u64)
        };
        let write = rng.gen_bool(0.5);
        if cl.needs_reclaim && rng.gen_bool(0.3) {
            return Step::Reclaim { c };
        }
        match rng.gen_range(0..216) {
            0..=9 => Step::Connect { c },
            10..=39 => Step::Open {
                c,
                f,
                access: rng.gen_range(1..=ACCESS_BOTH),
                deny: if rng.gen_bool(0.6) {
                    0
                } else {
                    rng.gen_range(1..=ACCESS_BOTH)
                },
            },
            40..=51 => Step::Close { c, f },
            52..=81 => Step::Lock {
                c,
                f,
                off,
                len,
                write,
            },
            82..=93 => Step::Unlock { c, f, off, len },
            94..=107 => Step::NlmLock {
                h,
                f,
                off,
                len,
                write,
            },
            108..=115 => Step::NlmUnlock { h, f, off, len },
            116..=129 => Step::Request {
                c,
                slot: rng.gen_range(0..SLOTS),
                sum: rng.gen(),
            },
            130..=139 => Step::Replay {
                c,
                slot: rng.gen_range(0..SLOTS),
            },
            140..=143 => Step::Partition {
                c,
                secs: if rng.gen_bool(0.8) {
                    rng.gen_range(5..40)
                } else {
                    rng.gen_range(60..200)
                },
            },
            144 => Step::Reboot { c },
            145..=146 => Step::Unmount { c },
            147..=150 => Step::Recover { c },
            151..=154 => Step::NlmReclaim { h },
            155..=198 => Step::Advance {
                secs: rng.gen_range(1..6),
            },
            199 => Step::Restart,
            200..=207 => Step::GetDirDeleg {
                c,
                d: rng.gen_range(0..DIRS),
            },
            _ => Step::DirChange {
                c: rng.gen_bool(0.8).then_some(c),
                d: rng.gen_range(0..DIRS),
            },
        }
    }

    // ---- steps -----------------------------------------------------------

    /// Runs one step, then the driver; Err names a broken invariant.
    pub fn step(&mut self, s: &Step) -> Result<(), String> {
        let r = match *s {
            Step::Connect { c } => {
                self.connect(c);
                Ok(())
            }
            Step::Open { c, f, access, deny } => {
                self.open(c, f, access, deny);
                Ok(())
            }
            Step::Close { c, f } => {
                self.close(c, f);
                Ok(())
            }
            Step::Lock {
                c,
                f,
                off,
                len,
                write,
            } => {
                self.lock(c, f, off, len, write);
                Ok(())
            }
            Step::Unlock { c, f, off, len } => {
                self.unlock(c, f, off, len);
                Ok(())
            }
            Step::NlmLock {
                h,
                f,
                off,
                len,
                write,
            } => {
                self.nlm_lock(h, f, off, len, write, false);
                Ok(())
            }
            Step::NlmUnlock { h, f, off, len } => {
                let owner = nlm_owner(h);
                self.state.locks.unlock(file(f), &owner, off, len);
                self.hosts[h].held.remove(&f);
                Ok(())
            }
            Step::Request { c, slot, sum } => {
                self.request(c, slot, sum);
                Ok(())
            }
            Step::Replay { c, slot } => self.replay(c, slot),
            Step::Partition { c, secs } => {
                let until = self.now() + Duration::from_secs(secs);
                self.clients[c].silent_until = Some(until);
                Ok(())
            }
            Step::Reboot { c } => {
                let cl = &mut self.clients[c];
                *cl = Client {
                    name: cl.name.clone(),
                    minor: cl.minor,
                    verifier: cl.verifier.wrapping_add(1),
                    ..Client::default()
                };
                Ok(())
            }
            Step::Recover { c } => {
                self.recover(c);
                Ok(())
            }
            Step::Unmount { c } => {
                self.unmount(c);
                Ok(())
            }
            Step::Reclaim { c } => self.reclaim(c),
            Step::NlmReclaim { h } => {
                let want = std::mem::take(&mut self.hosts[h].reclaim);
                for (f, ranges) in want {
                    for (off, len, write) in ranges {
                        self.nlm_lock(h, f, off, len, write, true);
                    }
                }
                Ok(())
            }
            Step::Advance { secs } => {
                for _ in 0..secs {
                    let t = self.now() + Duration::from_secs(1);
                    *self.now.lock().unwrap() = t;
                    self.heartbeats();
                    self.reap();
                    self.drive();
                    self.check()?;
                }
                Ok(())
            }
            Step::Restart => {
                self.restart();
                Ok(())
            }
            Step::GetDirDeleg { c, d } => {
                self.get_dir_deleg(c, d);
                Ok(())
            }
            Step::DirChange { c, d } => {
                self.dir_change(c, d);
                Ok(())
            }
        };
        r?;
        self.drive();
        self.check()
    }

    fn reachable(&self, c: usize) -> bool {
        self.clients[c].silent_until.is_none_or(|t| self.now() >= t)
    }

    /// The client learnt its client ID is gone (expired, or the server
    /// restarted): it keeps nothing but what it will reclaim.
    fn lost(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        cl.id = None;
        cl.session = None;
        cl.slots.clear();
        cl.opens.clear();
        cl.lock_sids.clear();
        cl.held.clear();
        cl.revoked.clear();
        cl.delegs.clear();
        cl.dir_delegs.clear();
    }

    /// The lease renewal a stateful request carries (SEQUENCE, or a 4.0
    /// operation); false if the client found its state gone.
    fn renew(&mut self, c: usize) -> bool {
        let Some(id) = self.clients[c].id else {
            return false;
        };
        let now = self.now();
        let cl = &self.clients[c];
        let r = if cl.minor > 0 {
            match cl.session.and_then(|s| self.state.session(&s)) {
                Some(_) => self.state.renew_flags(id, now),
                None => Err(Nfsstat4::NFS4ERR_BADSESSION),
            }
        } else {
            self.state.renew(id, now).map(|()| 0)
        };
        let cl = &mut self.clients[c];
        match r {
            Ok(flags) => {
                cl.last_renew = Some(now);
                if flags & 0x8 != 0 && cl.revoked.is_empty() {
                    // SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: what it held is
                    // gone; it frees the stateids (Step::Recover).
                    let sids: Vec<Stateid4> = cl
                        .opens
                        .values()
                        .map(|o| o.0.clone())
                        .chain(cl.lock_sids.values().cloned())
                        .collect();
                    cl.revoked = sids;
                    cl.opens.clear();
                    cl.lock_sids.clear();
                    cl.held.clear();
                }
                true
            }
            Err(_) => {
                self.lost(c);
                false
            }
        }
    }

    /// Reachable clients renew their leases as a real client's heartbeat
    /// does, every third of a lease.
    fn heartbeats(&mut self) {
        let now = self.now();
        for c in 0..CLIENTS {
            let cl = &self.clients[c];
            if cl.id.is_none() || !self.reachable(c) {
                continue;
            }
            if cl
                .last_renew
                .is_none_or(|t| now.duration_since(t) >= LEASE / 3)
            {
                self.renew(c);
            }
        }
    }

    fn connect(&mut self, c: usize) {
        if !self.reachable(c) || self.clients[c].id.is_some() {
            return;
        }
        let now = self.now();
        let st = self.state.clone();
        let cl = &mut self.clients[c];
        let verifier = [cl.verifier; 8];
        if cl.minor > 0 {
            let Ok((id, seq, _)) = st.exchange_id(&cl.name, verifier, PRINCIPAL, false, 1, now)
            else {
                return;
            };
            if st.create_session_seq(id, seq, PRINCIPAL, now) != Ok(None) {
                return;
            }
            let sid = st.new_sessionid(id);
            let s = Arc::new(Session::new(sid, id, attrs(), attrs(), 0));
            if st.add_session(s, Bytes::new(), now).is_err() {
                return;
            }
            cl.session = Some(sid);
            cl.slots = vec![SlotModel::default(); SLOTS as usize];
            cl.id = Some(id);
            if !cl.needs_reclaim {
                let _ = st.reclaim_complete(id);
            }
        } else {
            let Ok((id, v)) = st.setclientid(&cl.name, verifier, PRINCIPAL, now) else {
                return;
            };
            if st.confirm_v40(id, v, PRINCIPAL, now).is_err() {
                return;
            }
            cl.id = Some(id);
        }
        cl.last_renew = Some(now);
    }

    /// The client's id if it can send a request now (renewing its lease).
    fn ready(&mut self, c: usize) -> Option<u64> {
        if !self.reachable(c) || self.clients[c].needs_reclaim {
            return None;
        }
        // A client without a client ID gets one first, as a real one does.
        self.connect(c);
        if !self.renew(c) {
            return None;
        }
        self.clients[c].id
    }

    /// OPEN's grace rules, as the handler applies them.
    fn may_take_new_state(&self, id: u64) -> bool {
        !self.state.in_grace(self.now()) && self.state.reclaim_done(id).is_ok()
    }

    fn open(&mut self, c: usize, f: u8, access: u32, deny: u32) {
        let Some(id) = self.ready(c) else { return };
        if !self.may_take_new_state(id) {
            return;
        }
        // As the driver does: other clients' delegations are recalled
        // before a write or deny-read open, their write delegations before
        // any open (DELAY meanwhile).
        let reader = access & ACCESS_WRITE == 0 && deny & ACCESS_READ == 0;
        if self
            .state
            .break_delegations(&file(f), Some(id), reader, self.now())
            == Break::Delay
        {
            self.stats.recall_waits += 1;
            return;
        }
        let r = self.state.open(
            id,
            &Bytes::from_static(OPEN_OWNER),
            file(f),
            access,
            deny,
            self.now(),
        );
        if r.is_ok() && self.clients[c].minor > 0 {
            let kind = if access & ACCESS_WRITE != 0 {
                DelegType::Write
            } else {
                DelegType::Read
            };
            let ask = DelegAsk {
                client: id,
                file: file(f),
                fh: Bytes::new(),
                kind,
                change: 0,
            };
            if let Ok(d) = self.state.grant_delegation(ask, 8, self.now()) {
                self.clients[c].delegs.insert(f, d);
                self.stats.delegations += 1;
                if kind == DelegType::Write {
                    self.stats.write_delegations += 1;
                }
            }
        }
        if r.is_err() {
            self.stats.share_denied += 1;
        }
        if let Ok(sid) = r {
            self.stats.opens += 1;
            let e = self.clients[c]
                .opens
                .entry(f)
                .or_insert((sid.clone(), 0, 0));
            *e = (sid, e.1 | access, e.2 | deny);
        }
    }

    /// CB_RECALL reached the client (if it is not cut off): it returns
    /// the delegation with DELEGRETURN. A cut-off client's is revoked a
    /// lease later.
    fn recalled(&mut self, id: u64, sid: Stateid4) {
        let Some(c) = self.clients.iter().position(|cl| cl.id == Some(id)) else {
            return;
        };
        if !self.reachable(c) {
            return;
        }
        let held = |m: &BTreeMap<u8, Stateid4>| {
            m.iter()
                .find(|(_, s)| s.other == sid.other)
                .map(|(k, _)| *k)
        };
        if let Some(d) = held(&self.clients[c].dir_delegs) {
            self.clients[c].dir_delegs.remove(&d);
            if self.state.delegreturn(id, &sid, &dir(d)) == Nfsstat4::NFS4_OK {
                self.stats.delegations_returned += 1;
            }
            return;
        }
        let Some(f) = held(&self.clients[c].delegs) else {
            return;
        };
        self.clients[c].delegs.remove(&f);
        if self.state.delegreturn(id, &sid, &file(f)) == Nfsstat4::NFS4_OK {
            self.stats.delegations_returned += 1;
        }
    }

    fn close(&mut self, c: usize, f: u8) {
        let Some(_) = self.ready(c) else { return };
        let cl = &self.clients[c];
        let Some((sid, ..)) = cl.opens.get(&f).cloned() else {
            return;
        };
        if self.state.close(&sid, &file(f), cl.minor).is_ok() {
            let cl = &mut self.clients[c];
            cl.opens.remove(&f);
            // CLOSE frees the locks still held through the open.
            cl.lock_sids.remove(&f);
            cl.held.remove(&f);
        }
    }

    fn lock(&mut self, c: usize, f: u8, off: u64, len: u64, write: bool) {
        let Some(id) = self.ready(c) else { return };
        if !self.may_take_new_state(id) {
            return;
        }
        if self.take_lock(c, id, f, off, len, write) {
            self.clients[c]
                .held
                .entry(f)
                .or_default()
                .push((off, len, write));
        }
    }

    /// LOCK through the state core and the lock manager, as the handler
    /// does it; true if granted.
    fn take_lock(&mut self, c: usize, id: u64, f: u8, off: u64, len: u64, write: bool) -> bool {
        let st = self.state.clone();
        let cl = &self.clients[c];
        let minor = cl.minor;
        let (other, fresh, owner) = match cl.lock_sids.get(&f) {
            Some(sid) => match st.lock_state(sid, &file(f), minor) {
                Ok(owner) => (sid.other, false, owner),
                Err(_) => return false,
            },
            None => {
                let Some((open, ..)) = cl.opens.get(&f) else {
                    return false;
                };
                let owner = OwnerKey {
                    client: id,
                    owner: Bytes::from_static(LOCK_OWNER),
                };
                match st.lock_state_from_open(open, &file(f), &owner, minor) {
                    Ok((other, _)) => (other, true, owner),
                    Err(_) => return false,
                }
            }
        };
        if st
            .locks
            .lock(file(f), &owner, kind(write).range(off, len))
            .is_err()
        {
            if fresh {
                st.free_stateid(id, &Stateid4 { seqid: 0, other });
            }
            self.stats.lock_denied += 1;
            return false;
        }
        let sid = st.bump(&other);
        self.clients[c].lock_sids.insert(f, sid);
        self.stats.locks += 1;
        true
    }

    fn unlock(&mut self, c: usize, f: u8, off: u64, len: u64) {
        let Some(_) = self.ready(c) else { return };
        let cl = &self.clients[c];
        let Some(sid) = cl.lock_sids.get(&f).cloned() else {
            return;
        };
        if let Ok(owner) = self.state.lock_state(&sid, &file(f), cl.minor) {
            self.state.locks.unlock(file(f), &owner, off, len);
            let sid = self.state.bump(&sid.other);
            let cl = &mut self.clients[c];
            cl.lock_sids.insert(f, sid);
            // What the client still believes it holds only shrinks: the
            // reclaim after a restart asks again for what is left.
            cl.held
                .entry(f)
                .or_default()
                .retain(|&(o, l, _)| last_byte(o, l) < off || o > last_byte(off, len));
        }
    }

    /// NLM LOCK: during the grace period only reclaims, after it none
    /// (the NLM handler's rule, on the shared period).
    fn nlm_lock(&mut self, h: usize, f: u8, off: u64, len: u64, write: bool, reclaim: bool) {
        if self.grace.running(self.now()) != reclaim {
            return;
        }
        let owner = nlm_owner(h);
        if self
            .state
            .locks
            .lock(file(f), &owner, kind(write).range(off, len))
            .is_ok()
        {
            self.stats.nlm_locks += 1;
            self.hosts[h]
                .held
                .entry(f)
                .or_default()
                .push((off, len, write));
        }
    }

    fn request(&mut self, c: usize, slot: u32, sum: u64) {
        if self.clients[c].minor == 0 || self.ready(c).is_none() {
            return;
        }
        let Some(s) = self.clients[c]
            .session
            .and_then(|sid| self.state.session(&sid))
        else {
            return;
        };
        let m = &self.clients[c].slots[slot as usize];
        let seqid = m.seqid.wrapping_add(1);
        match s.begin(slot, seqid, sum) {
            Ok(SlotUse::New(g)) => {
                let reply = Bytes::from(format!("c{c} slot {slot} seq {seqid} sum {sum:x}"));
                g.finish(Some(reply.clone()));
                let m = &mut self.clients[c].slots[slot as usize];
                m.seqid = seqid;
                m.last = Some((sum, reply));
                self.renew(c);
            }
            Ok(SlotUse::Replay(_)) | Err(_) => {}
        }
    }

    fn replay(&mut self, c: usize, slot: u32) -> Result<(), String> {
        if !self.reachable(c) || self.clients[c].minor == 0 {
            return Ok(());
        }
        let Some(s) = self.clients[c]
            .session
            .and_then(|sid| self.state.session(&sid))
        else {
            return Ok(());
        };
        let m = self.clients[c].slots[slot as usize].clone();
        let Some((sum, reply)) = m.last else {
            return Ok(());
        };
        match s.begin(slot, m.seqid, sum) {
            Ok(SlotUse::Replay(r)) if r == reply => {
                self.stats.replays += 1;
                Ok(())
            }
            Ok(SlotUse::Replay(r)) => Err(format!(
                "client {c} slot {slot}: replay answered {r:?}, cached was {reply:?}"
            )),
            Ok(SlotUse::New(_)) => Err(format!("client {c} slot {slot}: a replay ran again")),
            Err(e) => Err(format!(
                "client {c} slot {slot}: replay refused with {e:?} instead of the cached reply"
            )),
        }
    }

    /// GET_DIR_DELEGATION as the handler grants it (4.1 only).
    fn get_dir_deleg(&mut self, c: usize, d: u8) {
        let Some(id) = self.ready(c) else { return };
        if self.clients[c].minor == 0 || !self.may_take_new_state(id) {
            return;
        }
        let ask = DelegAsk {
            client: id,
            file: dir(d),
            fh: Bytes::new(),
            kind: DelegType::Dir,
            change: 0,
        };
        if let Ok(sid) = self.state.grant_delegation(ask, 8, self.now()) {
            self.clients[c].dir_delegs.insert(d, sid);
            let seen = self.dir_changes[d as usize].len();
            self.dir_grants.insert((d, id), seen);
            self.stats.dir_delegations += 1;
        }
    }

    /// A change of `d`'s entries, as the handlers make it under the
    /// directory's lock: others' directory delegations are recalled first
    /// (DELAY meanwhile).
    fn dir_change(&mut self, c: Option<usize>, d: u8) {
        let by = match c {
            Some(c) => match self.ready(c) {
                // A 4.0 COMPOUND names no client.
                Some(id) if self.clients[c].minor > 0 => Some(id),
                Some(_) => None,
                None => return,
            },
            None => None,
        };
        if self.state.break_dir_delegations(&dir(d), by, self.now()) == Break::Delay {
            self.stats.dir_recall_waits += 1;
            return;
        }
        self.dir_changes[d as usize].push(by);
        self.stats.dir_changes += 1;
    }

    fn recover(&mut self, c: usize) {
        let Some(id) = self.ready(c) else { return };
        for sid in std::mem::take(&mut self.clients[c].revoked) {
            self.state.test_stateid(id, &sid);
            self.state.free_stateid(id, &sid);
        }
    }

    fn unmount(&mut self, c: usize) {
        let Some(id) = self.ready(c) else { return };
        // Directory delegations are given back (the client keeps no open
        // to close on them).
        for (d, sid) in std::mem::take(&mut self.clients[c].dir_delegs) {
            self.state.delegreturn(id, &sid, &dir(d));
        }
        let files: Vec<u8> = self.clients[c].opens.keys().copied().collect();
        for f in files {
            self.close(c, f);
        }
        let cl = &self.clients[c];
        if !cl.opens.is_empty() || !cl.revoked.is_empty() {
            return;
        }
        if let Some(s) = cl.session {
            let _ = self.state.destroy_session(&s);
        }
        if self.state.destroy_clientid(id, &[]).is_ok() {
            self.stats.unmounts += 1;
        }
        self.lost(c);
    }

    fn restart(&mut self) {
        self.stats.restarts += 1;
        // Every effect was carried out at the end of the step before; what
        // is in `durable` is what the state directory holds.
        for cl in &mut self.clients {
            if cl.id.is_some() && (!cl.opens.is_empty() || cl.needs_reclaim) {
                if !cl.needs_reclaim {
                    cl.reclaim_opens = cl.opens.iter().map(|(f, o)| (*f, (o.1, o.2))).collect();
                    cl.reclaim_locks = std::mem::take(&mut cl.held);
                }
                cl.needs_reclaim = true;
            }
        }
        for c in 0..CLIENTS {
            self.lost(c);
        }
        for h in &mut self.hosts {
            let held = std::mem::take(&mut h.held);
            for (f, mut r) in held {
                h.reclaim.entry(f).or_default().append(&mut r);
            }
        }
        self.boot();
    }

    /// A client's reclaims after a restart; checks that only recorded
    /// clients may, and that a recorded one may while NFSv4 is in grace.
    fn reclaim(&mut self, c: usize) -> Result<(), String> {
        if !self.reachable(c) || !self.clients[c].needs_reclaim {
            return Ok(());
        }
        self.connect(c);
        let Some(id) = self.clients[c].id else {
            return Ok(());
        };
        let now = self.now();
        let name = self.clients[c].name.clone();
        let recorded = self.reclaimable.contains(&name);
        let opens = std::mem::take(&mut self.clients[c].reclaim_opens);
        let locks = std::mem::take(&mut self.clients[c].reclaim_locks);
        for (f, (access, deny)) in opens {
            let in_grace = self.state.in_grace(now);
            match self.state.may_reclaim(id, now) {
                Ok(()) if !recorded => {
                    return Err(format!(
                        "client {c} may reclaim though not in the durable records"
                    ))
                }
                Ok(()) => self.stats.reclaims += 1,
                Err(e) if recorded && in_grace => {
                    return Err(format!(
                        "recorded client {c} refused a reclaim in grace: {e:?}"
                    ))
                }
                Err(_) => continue,
            }
            let owner = Bytes::from_static(OPEN_OWNER);
            if let Ok(sid) = self.state.open(id, &owner, file(f), access, deny, now) {
                self.clients[c].opens.insert(f, (sid, access, deny));
                for &(off, len, write) in locks.get(&f).into_iter().flatten() {
                    if self.state.may_reclaim(id, now).is_ok()
                        && self.take_lock(c, id, f, off, len, write)
                    {
                        self.clients[c]
                            .held
                            .entry(f)
                            .or_default()
                            .push((off, len, write));
                    }
                }
            }
        }
        self.clients[c].needs_reclaim = false;
        if self.clients[c].minor > 0 {
            let _ = self.state.reclaim_complete(id);
        }
        Ok(())
    }

    // ---- invariants ------------------------------------------------------

    /// The invariants, after every step (and every simulated second).
    fn check(&self) -> Result<(), String> {
        let now = self.now();
        let files: Vec<FileKey> = (0..FILES).map(file).collect();
        // No two conflicting byte-range locks of different owners.
        for f in &files {
            let locks = self.state.locks.locks_on(*f);
            for (i, a) in locks.iter().enumerate() {
                for b in &locks[i + 1..] {
                    let overlap = a.1 <= last_byte(b.1, b.2) && b.1 <= last_byte(a.1, a.2);
                    let exclusive = a.3 == LockKind::Write || b.3 == LockKind::Write;
                    if a.0 != b.0 && overlap && exclusive {
                        return Err(format!("conflicting locks granted: {a:?} and {b:?}"));
                    }
                }
            }
        }
        // No two conflicting share reservations.
        let opens = self.state.opens_view();
        for (i, a) in opens.iter().enumerate() {
            for b in &opens[i + 1..] {
                if a.0 == b.0 && (a.3 & b.4 != 0 || b.3 & a.4 != 0) {
                    return Err(format!(
                        "conflicting opens granted on file {:?}: client {:x} access {} deny {}, \
                         client {:x} access {} deny {}",
                        a.0.fid, a.2, a.3, a.4, b.2, b.3, b.4
                    ));
                }
            }
        }
        // No read delegation beside another client's write or deny-read
        // open (such an open waits with DELAY until it is returned or
        // revoked); delegations go with their client.
        // No write delegation beside another client's open of any kind or
        // another client's delegation.
        let delegs = self.state.delegations_view()?;
        // A directory delegation never outlives a change it was not told
        // about: every change since its grant was its holder's own.
        for (k, holder, _, _) in &delegs {
            let Some(d) = (0..DIRS).find(|d| dir(*d) == *k) else {
                continue;
            };
            let since = self.dir_grants.get(&(d, *holder)).copied().unwrap_or(0);
            if let Some(by) = self.dir_changes[d as usize][since..]
                .iter()
                .find(|by| **by != Some(*holder))
            {
                return Err(format!(
                    "client {holder:x} holds a delegation on directory {d} that outlived a \
                     change by {by:x?} it was not told about"
                ));
            }
        }
        for (f, holder, _, write) in &delegs {
            if !write {
                continue;
            }
            if let Some(o) = opens.iter().find(|o| o.0 == *f && o.2 != *holder) {
                return Err(format!(
                    "client {holder:x} holds a write delegation on file {:?} that client {:x} \
                     has open",
                    f.fid, o.2
                ));
            }
            if let Some(d) = delegs.iter().find(|d| d.0 == *f && d.1 != *holder) {
                return Err(format!(
                    "client {holder:x} holds a write delegation on file {:?} beside client \
                     {:x}'s delegation",
                    f.fid, d.1
                ));
            }
        }
        for (f, holder, _, _) in delegs {
            for o in &opens {
                if o.0 == f && o.2 != holder && (o.3 & ACCESS_WRITE != 0 || o.4 & ACCESS_READ != 0)
                {
                    return Err(format!(
                        "client {holder:x} holds a delegation on file {:?} that client {:x} \
                         has open with access {} deny {}",
                        f.fid, o.2, o.3, o.4
                    ));
                }
            }
        }
        // No state outlives its client; the indexes agree.
        self.state.audit(&files)?;
        // Every client holding state is recorded, so it could reclaim.
        for owner in self.state.holders() {
            if !self.durable.contains(&owner) {
                return Err(format!("{owner:?} holds state but is not recorded"));
            }
        }
        // One grace period: NFSv4 is never in grace after it ended.
        if self.state.in_grace(now) && !self.grace.running(now) {
            return Err("NFSv4 in grace after the shared grace period ended".into());
        }
        Ok(())
    }
}

fn nlm_owner(h: usize) -> OwnerKey {
    OwnerKey {
        client: NLM_CLIENT_BIT | (h as u64 + 1),
        owner: Bytes::from_static(b"svid 1"),
    }
}

/// Generates and runs `steps` steps from `seed`; on a broken invariant,
/// the steps run so far and the failure (at the last of them).
fn generate_and_run(seed: u64, steps: usize) -> Result<(), (Vec<Step>, String)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut w = World::new();
    let mut done = Vec::with_capacity(steps);
    for _ in 0..steps {
        let s = w.generate(&mut rng);
        done.push(s.clone());
        if let Err(e) = w.step(&s) {
            return Err((done, e));
        }
    }
    Ok(())
}

/// Replays `steps` in a fresh world: the first failure, if any.
fn replay(steps: &[Step]) -> Result<(), String> {
    let mut w = World::new();
    for (i, s) in steps.iter().enumerate() {
        w.step(s).map_err(|e| format!("step {i}: {e}"))?;
    }
    Ok(())
}

/// Leaves out as many steps as still fail: chunks halving down to one
/// step (the failing prefix is already the shortest, it ends at the
/// failure).
fn shrink(mut steps: Vec<Step>) -> Vec<Step> {
    let mut budget = 4000;
    loop {
        let before = steps.len();
        let mut chunk = steps.len() / 2;
        while chunk >= 1 && budget > 0 {
            let mut i = 0;
            while i + chunk <= steps.len() && budget > 0 {
                budget -= 1;
                let mut shorter = steps.clone();
                shorter.drain(i..i + chunk);
                if replay(&shorter).is_err() {
                    steps = shorter;
                } else {
                    i += chunk;
                }
            }
            chunk /= 2;
        }
        if steps.len() == before || budget == 0 {
            return steps;
        }
    }
}

/// Runs one seed; on failure, the report: seed, failure, minimal replay.
pub fn simulate(seed: u64, steps: usize) -> Result<(), String> {
    let Err((prefix, why)) = generate_and_run(seed, steps) else {
        return Ok(());
    };
    let n = prefix.len();
    let small = shrink(prefix);
    let last = replay(&small).err().unwrap_or_default();
    let mut r = format!(
        "simulation seed {seed} failed at step {}: {why}\n\
         minimal replay ({} steps; fails with: {last}):\n",
        n - 1,
        small.len()
    );
    for s in &small {
        let _ = writeln!(r, "    Step::{s:?},");
    }
    let _ = writeln!(
        r,
        "rerun: scripts/simulate.sh --from {seed} --seeds 1 --steps {steps}"
    );
    Err(r)
}

#[cfg(test)]
mod cluster;
#[cfg(test)]
mod tests;
