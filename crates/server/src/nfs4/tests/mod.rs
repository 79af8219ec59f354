//! In-process NFSv4 tests: COMPOUND argument bytes go to
//! [`Nfs4::dispatch`] as the RPC layer hands them over, against a MemFs
//! export, with a [`ManualClock`] so leases and grace run out when a test
//! says so instead of after a sleep. Helpers are named after the
//! operations, so a test reads like the exchange it checks.
//!
//! A "restart" here ([`Fx::restart`]) builds a new server over the same
//! files, handle key and recovery record, as a restarted process would;
//! the real process restart stays in `crates/client/tests`.

mod backchannel;
mod cb40;
mod cinfo;
mod copy;
mod deleg;
mod deleg_write;
mod dir_deleg;
mod fuzz_found;
mod grace;
mod lease;
mod open_xor;
mod removed;
mod secinfo;
mod sparse;
mod stateids;
mod v40;
mod xattr;

use super::clock::ManualClock;
use super::recovery::Recovery;
use super::*;
use crate::export::{Cidr, Export, Exports, Squash};
use crate::grace::Grace;
use crate::live::Live;
use crate::locks::LockManager;
use crate::pool::Pool;
use crate::test_util::{call_ctx, user_1000};
use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs4::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vfs::HandleKey;
use xdr::{Decoder, Unpack};
use Nfsstat4::*;

pub const BOTH: u32 = OPEN4_SHARE_ACCESS_BOTH;
pub const OP_CLONE: u32 = NfsOpnum4::OP_CLONE as u32;
pub const OP_ILLEGAL: u32 = NfsOpnum4::OP_ILLEGAL as u32;
pub const OP_RECLAIM_COMPLETE: u32 = NfsOpnum4::OP_RECLAIM_COMPLETE as u32;
/// CREATE_SESSION4_FLAG_CONN_BACK_CHAN.
pub const CONN_BACK_CHAN: u32 = 0x2;
/// The callback program the fixture's clients name.
pub const CB_PROG: u32 = 0x4000_0000;
/// OPEN's share_access bits asking for a delegation (or none), short.
pub const WANT_READ: u32 = OPEN4_SHARE_ACCESS_WANT_READ_DELEG;
pub const WANT_WRITE: u32 = OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG;
pub const WANT_ANY: u32 = OPEN4_SHARE_ACCESS_WANT_ANY_DELEG;
pub const WANT_NO: u32 = OPEN4_SHARE_ACCESS_WANT_NO_DELEG;

/// How a scripted client answers calls on its back channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Every operation succeeds.
    Ok,
    /// No reply comes (the call times out).
    Ignore,
    /// The connection is gone.
    Closed,
}

/// One call a [`FakeBack`] received: procedure, credential flavor,
/// program and CB_COMPOUND arguments.
pub type CbCall = (u32, u32, u32, Option<CbCompound4args>);

/// A client's connection as the back channel sees it: records each call
/// and answers as told.
#[derive(Debug)]
pub struct FakeBack {
    pub calls: std::sync::Mutex<Vec<CbCall>>,
    pub answer: std::sync::Mutex<Answer>,
    /// What CB_GETATTR answers: (change, size), or None to refuse it.
    pub getattr: std::sync::Mutex<Option<(u64, u64)>>,
}

impl FakeBack {
    pub fn new() -> Arc<FakeBack> {
        Arc::new(FakeBack {
            calls: std::sync::Mutex::new(Vec::new()),
            answer: std::sync::Mutex::new(Answer::Ok),
            getattr: std::sync::Mutex::new(None),
        })
    }

    pub fn answer(&self, a: Answer) {
        *self.answer.lock().unwrap() = a;
    }

    /// The CB_COMPOUNDs received so far.
    pub fn compounds(&self) -> Vec<CbCompound4args> {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter_map(|c| c.3.clone()).collect()
    }

    /// How many CB_NULLs were received.
    pub fn nulls(&self) -> usize {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|c| c.0 == 0).count()
    }

    fn reply(&self, args: &CbCompound4args) -> Bytes {
        let getattr = *self.getattr.lock().unwrap();
        let resarray = args
            .argarray
            .iter()
            .map(|op| match op {
                NfsCbArgop4::OP_CB_SEQUENCE(s) => {
                    NfsCbResop4::OP_CB_SEQUENCE(CbSequence4res::NFS4_OK(CbSequence4resok {
                        csr_sessionid: s.csa_sessionid,
                        csr_sequenceid: s.csa_sequenceid,
                        csr_slotid: s.csa_slotid,
                        csr_highest_slotid: 0,
                        csr_target_highest_slotid: 0,
                    }))
                }
                NfsCbArgop4::OP_CB_RECALL(_) => {
                    NfsCbResop4::OP_CB_RECALL(CbRecall4res { status: NFS4_OK })
                }
                NfsCbArgop4::OP_CB_GETATTR(_) => NfsCbResop4::OP_CB_GETATTR(match getattr {
                    Some((change, size)) => {
                        let mut vals = bytes::BytesMut::new();
                        bytes::BufMut::put_u64(&mut vals, change);
                        bytes::BufMut::put_u64(&mut vals, size);
                        CbGetattr4res::NFS4_OK(CbGetattr4resok {
                            obj_attributes: Fattr4 {
                                attrmask: vec![(1 << FATTR4_CHANGE) | (1 << FATTR4_SIZE)],
                                attr_vals: vals.freeze(),
                            },
                        })
                    }
                    None => CbGetattr4res::Default(NFS4ERR_BADHANDLE),
                }),
                NfsCbArgop4::OP_CB_RECALL_ANY(_) => {
                    NfsCbResop4::OP_CB_RECALL_ANY(CbRecallAny4res {
                        crar_status: NFS4_OK,
                    })
                }
                NfsCbArgop4::OP_CB_OFFLOAD(_) => NfsCbResop4::OP_CB_OFFLOAD(CbOffload4res {
                    cor_status: NFS4_OK,
                }),
                _ => NfsCbResop4::OP_CB_ILLEGAL(CbIllegal4res {
                    status: NFS4ERR_OP_ILLEGAL,
                }),
            })
            .collect();
        xdr::to_bytes(&CbCompound4res {
            status: NFS4_OK,
            tag: args.tag.clone(),
            resarray,
        })
    }
}

impl rpc::CallbackConn for FakeBack {
    fn call(
        &self,
        prog: u32,
        _vers: u32,
        proc_: u32,
        cred: proto::rpc::OpaqueAuth,
        args: Bytes,
        _timeout: Duration,
    ) -> rpc::callback::CallFuture<'_> {
        let compound = (proc_ == 1).then(|| xdr::from_bytes::<CbCompound4args>(args).unwrap());
        let answer = *self.answer.lock().unwrap();
        let r = match answer {
            Answer::Ok => Ok(compound.as_ref().map_or_else(Bytes::new, |c| self.reply(c))),
            Answer::Ignore => Err(rpc::CallbackError::Timeout),
            Answer::Closed => Err(rpc::CallbackError::Closed),
        };
        if answer != Answer::Closed {
            self.calls
                .lock()
                .unwrap()
                .push((proc_, cred.flavor, prog, compound));
        }
        Box::pin(std::future::ready(r))
    }

    fn is_open(&self) -> bool {
        *self.answer.lock().unwrap() != Answer::Closed
    }

    fn conn_id(&self) -> u64 {
        2
    }
}
pub const DENY_NONE: u32 = OPEN4_SHARE_DENY_NONE;

/// One server over a MemFs export at `/`, driven by hand.
pub struct Fx {
    pub n: Nfs4,
    pub clock: Arc<ManualClock>,
    live: Arc<Live>,
    key: Arc<HandleKey>,
    cfg: Nfs4Config,
    /// Holds the recovery record (`v4clients`) across restarts.
    dir: tempfile::TempDir,
    xid: AtomicU32,
    /// The connection calls arrive on, for calls back to the client
    /// (None: a connection with no back channel).
    back: std::sync::Mutex<Option<Arc<dyn rpc::CallbackConn>>>,
    xprtsec: std::sync::Mutex<rpc::tls::XprtSec>,
}

/// A client's session (NFSv4.1+), one slot used in order.
pub struct Sess {
    pub clientid: u64,
    pub id: Sessionid4,
    seq: Cell<u32>,
}

/// A successful OPEN: the file's handle and the open stateid.
#[derive(Clone, Debug)]
pub struct Opened {
    pub fh: NfsFh4,
    pub stateid: Stateid4,
    pub rflags: u32,
    pub delegation: OpenDelegation4,
}

pub fn cfg(lease_secs: u64, grace_secs: u64) -> Nfs4Config {
    Nfs4Config {
        lease: Duration::from_secs(lease_secs),
        grace: Duration::from_secs(grace_secs),
        ..Nfs4Config::default()
    }
}

/// A server with a 60 s lease, no grace, and at most `max` delegations.
pub fn capped_delegations(max: usize) -> Fx {
    Fx::new(Nfs4Config {
        max_delegations: max,
        ..cfg(60, 0)
    })
}

/// An open and the stateid of the delegation `deleg` finds in it.
pub fn with_deleg(o: Opened, deleg: fn(&Opened) -> Stateid4) -> (Opened, Stateid4) {
    let sid = deleg(&o);
    (o, sid)
}

pub fn name(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub fn putfh(fh: &NfsFh4) -> NfsArgop4 {
    NfsArgop4::OP_PUTFH(Putfh4args { object: fh.clone() })
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Each result's operation number and status, read from its encoding
/// (every result starts with both).
pub fn statuses(r: &Compound4res) -> Vec<(u32, Nfsstat4)> {
    r.resarray
        .iter()
        .map(|res| {
            let b = xdr::to_bytes(res);
            let word = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
            (word(0), Nfsstat4::from_i32(word(4) as i32).unwrap())
        })
        .collect()
}

pub fn create() -> Openflag4 {
    Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(Fattr4 {
        attrmask: vec![],
        attr_vals: Bytes::new(),
    }))
}

pub fn nocreate() -> Openflag4 {
    Openflag4::Default(Opentype4::OPEN4_NOCREATE)
}

pub fn claim_previous() -> OpenClaim4 {
    OpenClaim4::CLAIM_PREVIOUS(OpenDelegationType4::OPEN_DELEGATE_NONE)
}

pub fn owner(clientid: u64, name: &str) -> StateOwner4 {
    StateOwner4 {
        clientid,
        owner: self::name(name),
    }
}

pub fn open_args(
    seqid: u32,
    owner: StateOwner4,
    access: u32,
    deny: u32,
    how: Openflag4,
    claim: OpenClaim4,
) -> NfsArgop4 {
    NfsArgop4::OP_OPEN(Open4args {
        seqid,
        share_access: access,
        share_deny: deny,
        owner,
        openhow: how,
        claim,
    })
}

/// PUTROOTFH, OPEN of `file` (created if missing) by `s`'s open owner
/// `owner`, GETFH.
pub fn open_ops(s: &Sess, file: &str, owner: &str, access: u32, deny: u32) -> Vec<NfsArgop4> {
    let owner = self::owner(s.clientid, owner);
    let claim = OpenClaim4::CLAIM_NULL(name(file));
    vec![
        NfsArgop4::OP_PUTROOTFH,
        open_args(0, owner, access, deny, create(), claim),
        NfsArgop4::OP_GETFH,
    ]
}

/// OPEN of `file` in the current directory, denying nothing.
pub fn open_named(
    seqid: u32,
    owner: StateOwner4,
    access: u32,
    how: Openflag4,
    file: &str,
) -> NfsArgop4 {
    let claim = OpenClaim4::CLAIM_NULL(name(file));
    open_args(seqid, owner, access, DENY_NONE, how, claim)
}

/// OPEN of `file` in the export root (created if missing) by `s`'s open
/// owner `owner`, which must succeed.
pub async fn open_ok(fx: &Fx, s: &Sess, file: &str, owner: &str, access: u32) -> Opened {
    fx.open(s, file, owner, access, DENY_NONE)
        .await
        .unwrap_or_else(|e| panic!("OPEN {file}: {e:?}"))
}

/// The stateid of the read delegation an OPEN granted.
pub fn read_deleg(o: &Opened) -> Stateid4 {
    match &o.delegation {
        OpenDelegation4::OPEN_DELEGATE_READ(d) => d.stateid.clone(),
        other => panic!("no read delegation: {other:?}"),
    }
}

/// OPEN for reading of the current file under delegation `deleg`
/// (CLAIM_DELEG_CUR_FH) by `s`'s open owner `owner`.
pub fn open_under(s: &Sess, owner: &str, deleg: &Stateid4) -> NfsArgop4 {
    let claim = OpenClaim4::CLAIM_DELEG_CUR_FH(deleg.clone());
    let owner = self::owner(s.clientid, owner);
    open_args(
        0,
        owner,
        OPEN4_SHARE_ACCESS_READ,
        DENY_NONE,
        nocreate(),
        claim,
    )
}

/// CREATE of directory `n` in the current directory, no attributes set.
pub fn mkdir_op(n: &str) -> NfsArgop4 {
    NfsArgop4::OP_CREATE(Create4args {
        objtype: Createtype4::NF4DIR,
        objname: name(n),
        createattrs: Fattr4 {
            attrmask: vec![],
            attr_vals: Bytes::new(),
        },
    })
}

/// GET_DIR_DELEGATION of the current directory, asking for every
/// notification (Tarn offers none).
pub fn get_dir_delegation_op() -> NfsArgop4 {
    let now = Nfstime4 {
        seconds: 0,
        nseconds: 0,
    };
    NfsArgop4::OP_GET_DIR_DELEGATION(GetDirDelegation4args {
        gdda_signal_deleg_avail: true,
        gdda_notification_types: vec![!0],
        gdda_child_attr_delay: now.clone(),
        gdda_dir_attr_delay: now,
        gdda_child_attributes: vec![!0, !0],
        gdda_dir_attributes: vec![!0, !0],
    })
}

/// A locker for a lock owner new to the server (NFSv4.1: seqids 0).
pub fn new_lock_owner(open_stateid: &Stateid4, owner: StateOwner4) -> Locker4 {
    Locker4::TRUE(OpenToLockOwner4 {
        open_seqid: 0,
        open_stateid: open_stateid.clone(),
        lock_seqid: 0,
        lock_owner: owner,
    })
}

pub fn lock_args(
    kind: NfsLockType4,
    reclaim: bool,
    offset: u64,
    length: u64,
    locker: Locker4,
) -> NfsArgop4 {
    NfsArgop4::OP_LOCK(Lock4args {
        locktype: kind,
        reclaim,
        offset,
        length,
        locker,
    })
}

pub fn allocate_op(sid: &Stateid4, offset: u64, length: u64) -> NfsArgop4 {
    NfsArgop4::OP_ALLOCATE(Allocate4args {
        aa_stateid: sid.clone(),
        aa_offset: offset,
        aa_length: length,
    })
}

pub fn deallocate_op(sid: &Stateid4, offset: u64, length: u64) -> NfsArgop4 {
    NfsArgop4::OP_DEALLOCATE(Deallocate4args {
        da_stateid: sid.clone(),
        da_offset: offset,
        da_length: length,
    })
}

pub fn close_op(seqid: u32, open_sid: &Stateid4) -> NfsArgop4 {
    NfsArgop4::OP_CLOSE(Close4args {
        seqid,
        open_stateid: open_sid.clone(),
    })
}

pub fn locku_op(
    locktype: NfsLockType4,
    seqid: u32,
    lock_stateid: &Stateid4,
    offset: u64,
    length: u64,
) -> NfsArgop4 {
    NfsArgop4::OP_LOCKU(Locku4args {
        locktype,
        seqid,
        lock_stateid: lock_stateid.clone(),
        offset,
        length,
    })
}

/// CREATE_SESSION with the fixture's channels (1 MiB fore, 4 KiB back)
/// and callback program.
pub fn create_session_op(
    clientid: u64,
    sequence: u32,
    flags: u32,
    sec: Vec<CallbackSecParms4>,
) -> NfsArgop4 {
    NfsArgop4::OP_CREATE_SESSION(CreateSession4args {
        csa_clientid: clientid,
        csa_sequence: sequence,
        csa_flags: flags,
        csa_fore_chan_attrs: channel(1 << 20, 16, 8, 8 << 10),
        csa_back_chan_attrs: channel(4096, 2, 1, 0),
        csa_cb_program: CB_PROG,
        csa_sec_parms: sec,
    })
}

pub fn reclaim_complete() -> NfsArgop4 {
    NfsArgop4::OP_RECLAIM_COMPLETE(ReclaimComplete4args { rca_one_fs: false })
}

pub fn test_stateid(ids: &[Stateid4]) -> NfsArgop4 {
    NfsArgop4::OP_TEST_STATEID(TestStateid4args {
        ts_stateids: ids.to_vec(),
    })
}

pub fn free_stateid(id: &Stateid4) -> NfsArgop4 {
    NfsArgop4::OP_FREE_STATEID(FreeStateid4args {
        fsa_stateid: id.clone(),
    })
}

pub fn read_op(sid: &Stateid4, offset: u64, count: u32) -> NfsArgop4 {
    NfsArgop4::OP_READ(Read4args {
        stateid: sid.clone(),
        offset,
        count,
    })
}

pub fn write_op(sid: &Stateid4, offset: u64, stable: StableHow4, data: Bytes) -> NfsArgop4 {
    NfsArgop4::OP_WRITE(Write4args {
        stateid: sid.clone(),
        offset,
        stable,
        data,
    })
}

pub fn delegreturn_op(sid: &Stateid4) -> NfsArgop4 {
    NfsArgop4::OP_DELEGRETURN(Delegreturn4args {
        deleg_stateid: sid.clone(),
    })
}

/// Lets the recalls the server spawned reach the scripted client.
pub async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

/// The (stateid, file handle) of each CB_RECALL the client received.
pub fn recalls(fake: &FakeBack) -> Vec<(Stateid4, NfsFh4)> {
    fake.compounds()
        .iter()
        .flat_map(|c| c.argarray.iter())
        .filter_map(|op| match op {
            NfsCbArgop4::OP_CB_RECALL(r) => Some((r.stateid.clone(), r.fh.clone())),
            _ => None,
        })
        .collect()
}

/// DELEGRETURN of `sid` on `fh`: its status.
pub async fn delegreturn(fx: &Fx, s: &Sess, fh: &NfsFh4, sid: &Stateid4) -> Nfsstat4 {
    fx.call(s, vec![putfh(fh), delegreturn_op(sid)])
        .await
        .status
}

/// `s`'s delegation `sid` was revoked: SEQUENCE says so
/// (SEQ4_STATUS_RECALLABLE_STATE_REVOKED) and TEST_STATEID answers
/// NFS4ERR_DELEG_REVOKED.
pub async fn assert_deleg_revoked(fx: &Fx, s: &Sess, sid: &Stateid4) {
    use crate::nfs4::state::deleg::SEQ4_STATUS_RECALLABLE_STATE_REVOKED as REVOKED;
    assert_eq!(fx.renew(s).await.unwrap() & REVOKED, REVOKED);
    assert_eq!(
        fx.tested(s, std::slice::from_ref(sid)).await,
        [NFS4ERR_DELEG_REVOKED]
    );
}

/// SETCLIENTID of client `id` (verifier all `verifier`) with its callback
/// program `cb_program` at `netid` address `uaddr`, identified by `ident`.
pub fn setclientid_op(
    id: &str,
    verifier: u8,
    cb_program: u32,
    (netid, uaddr): (&str, &str),
    ident: u32,
) -> NfsArgop4 {
    NfsArgop4::OP_SETCLIENTID(Setclientid4args {
        client: NfsClientId4 {
            verifier: [verifier; 8],
            id: name(id),
        },
        callback: CbClient4 {
            cb_program,
            cb_location: Netaddr4 {
                na_r_netid: name(netid),
                na_r_addr: name(uaddr),
            },
        },
        callback_ident: ident,
    })
}

/// SEQUENCE then `ops` in minor version 2.
pub async fn call42(fx: &Fx, s: &Sess, ops: Vec<NfsArgop4>) -> Compound4res {
    let mut all = vec![fx.sequence(s)];
    all.extend(ops);
    fx.compound(2, all).await
}

pub use crate::nfs4::state::session::channel;

impl Fx {
    /// A server that has just started with no clients on record, whose
    /// export allows read delegations only (the tests of write ones ask
    /// for them with [`Fx::with_delegations`]).
    pub fn new(cfg: Nfs4Config) -> Fx {
        Self::with_delegations(cfg, crate::export::Delegations::Read)
    }

    /// [`Fx::new`] with the export allowing these delegations.
    pub fn with_delegations(cfg: Nfs4Config, delegations: crate::export::Delegations) -> Fx {
        Self::with_export(cfg, |e| e.delegations = delegations)
    }

    /// [`Fx::new`] with the export's options changed by `set`.
    pub fn with_export(cfg: Nfs4Config, set: impl FnOnce(&mut Export)) -> Fx {
        let backend: Arc<dyn vfs::Backend> = Arc::new(vfs::memory::MemFs::new());
        let mut export = crate::test_util::export(backend, false, "127.0.0.1/32");
        export.delegations = crate::export::Delegations::Read;
        set(&mut export);
        let live = Live::fixed(Exports::new(vec![export]));
        let key = Arc::new(HandleKey::random());
        let clock = Arc::new(ManualClock::new());
        let dir = tempfile::tempdir().unwrap();
        let n = Self::server(&live, &key, &cfg, &clock, &dir);
        Fx {
            n,
            clock,
            live,
            key,
            cfg,
            dir,
            xid: AtomicU32::new(1),
            back: std::sync::Mutex::new(None),
            xprtsec: std::sync::Mutex::new(rpc::tls::XprtSec::None),
        }
    }

    /// The protection of the connection later calls arrive on.
    pub fn set_xprtsec(&self, x: rpc::tls::XprtSec) {
        *self.xprtsec.lock().unwrap() = x;
    }

    fn server(
        live: &Arc<Live>,
        key: &Arc<HandleKey>,
        cfg: &Nfs4Config,
        clock: &Arc<ManualClock>,
        dir: &tempfile::TempDir,
    ) -> Nfs4 {
        let recovery = Recovery::open(&dir.path().join("v4clients")).unwrap();
        Nfs4::new(
            live.clone(),
            key.clone(),
            Pool::new(2),
            Arc::new(LockManager::new()),
            cfg.clone(),
            Some(recovery),
            crate::grace::Grace::new(super::clock::Clock::now(clock.as_ref()), cfg.grace),
            clock.clone(),
        )
    }

    /// The server dies and starts again with `cfg` (its grace length):
    /// the files, handle key and recovery record survive, the client
    /// table and locks do not.
    pub fn restart(&mut self, cfg: Nfs4Config) {
        self.cfg = cfg;
        self.n = Self::server(&self.live, &self.key, &self.cfg, &self.clock, &self.dir);
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// One walk of the lease timer, as `spawn_reaper` runs it.
    pub async fn reap(&self) {
        self.n.lease_walk().await;
    }

    /// Lets `total` pass in steps of a quarter lease (the lease timer's
    /// period), the timer walking after each step and `keep` renewing by
    /// SEQUENCE, as a live client's renewal would.
    pub async fn pass(&self, total: Duration, keep: &[&Sess]) {
        let step = self.cfg.lease / 4;
        let mut left = total;
        while !left.is_zero() {
            let d = step.min(left);
            self.advance(d);
            left -= d;
            for s in keep {
                self.renew(s).await.expect("renewal SEQUENCE");
            }
            self.reap().await;
        }
    }

    /// The COMPOUND reply bytes for `ops`, dispatched as the RPC layer does.
    pub async fn raw(&self, minor: u32, ops: Vec<NfsArgop4>) -> Bytes {
        let args = xdr::to_bytes(&Compound4args {
            tag: Bytes::from_static(b"in-process"),
            minorversion: minor,
            argarray: ops,
        });
        self.raw_bytes(args).await
    }

    pub async fn raw_bytes(&self, args: Bytes) -> Bytes {
        let mut ctx = call_ctx(
            self.xid.fetch_add(1, Ordering::Relaxed),
            (NFS4_PROGRAM, 4, 1),
            user_1000(),
            "127.0.0.1:900",
        );
        ctx.back = self.back.lock().unwrap().clone();
        ctx.xprtsec = *self.xprtsec.lock().unwrap();
        let mut out = BytesMut::new();
        self.n
            .dispatch(&ctx, Decoder::new(args), &mut out)
            .await
            .expect("COMPOUND dispatched");
        out.freeze()
    }

    pub async fn compound(&self, minor: u32, ops: Vec<NfsArgop4>) -> Compound4res {
        let raw = self.raw(minor, ops).await;
        Compound4res::unpack(&mut Decoder::new(raw)).expect("COMPOUND reply decodes")
    }

    // ---- NFSv4.1 client and session ------------------------------------

    pub async fn exchange_id(&self, owner: &str, verifier: u64) -> ExchangeId4resok {
        let r = self
            .compound(
                1,
                vec![NfsArgop4::OP_EXCHANGE_ID(ExchangeId4args {
                    eia_clientowner: ClientOwner4 {
                        co_verifier: verifier.to_be_bytes(),
                        co_ownerid: name(owner),
                    },
                    eia_flags: 0,
                    eia_state_protect: StateProtect4A::SP4_NONE,
                    eia_client_impl_id: vec![],
                })],
            )
            .await;
        match &r.resarray[..] {
            [NfsResop4::OP_EXCHANGE_ID(ExchangeId4res::NFS4_OK(ok))] => ok.clone(),
            _ => panic!("EXCHANGE_ID: {:?}", statuses(&r)),
        }
    }

    pub async fn create_session(&self, clientid: u64, sequence: u32) -> Sess {
        self.create_session_with(clientid, sequence, 0, vec![CallbackSecParms4::AUTH_NONE])
            .await
    }

    /// CREATE_SESSION with these flags and callback security.
    pub async fn create_session_with(
        &self,
        clientid: u64,
        sequence: u32,
        flags: u32,
        sec: Vec<CallbackSecParms4>,
    ) -> Sess {
        let r = self
            .compound(1, vec![create_session_op(clientid, sequence, flags, sec)])
            .await;
        match &r.resarray[..] {
            [NfsResop4::OP_CREATE_SESSION(CreateSession4res::NFS4_OK(ok))] => Sess {
                clientid,
                id: ok.csr_sessionid,
                seq: Cell::new(1),
            },
            _ => panic!("CREATE_SESSION: {:?}", statuses(&r)),
        }
    }

    /// CREATE_SESSION for `ex`'s client asking for a back channel, with
    /// AUTH_NONE callbacks.
    pub async fn create_back_session(&self, ex: &ExchangeId4resok) -> Sess {
        let sec = vec![CallbackSecParms4::AUTH_NONE];
        self.create_session_with(ex.eir_clientid, ex.eir_sequenceid, CONN_BACK_CHAN, sec)
            .await
    }

    /// Later calls arrive on `conn` (None: on a connection with no back channel).
    pub fn connect(&self, conn: Option<Arc<dyn rpc::CallbackConn>>) {
        *self.back.lock().unwrap() = conn;
    }

    /// A client past RECLAIM_COMPLETE whose session has a back channel on
    /// a scripted client connection.
    pub async fn client_with_back(&self, owner: &str) -> (Sess, Arc<FakeBack>) {
        let (s, fake) = self.session_with_back(owner).await;
        let r = self.call(&s, vec![reclaim_complete()]).await;
        assert_eq!(r.status, NFS4_OK, "RECLAIM_COMPLETE: {:?}", statuses(&r));
        // Let the CB_NULL probe run.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        (s, fake)
    }

    /// EXCHANGE_ID and CREATE_SESSION with a back channel on a scripted
    /// client connection, no RECLAIM_COMPLETE (a client that may reclaim).
    pub async fn session_with_back(&self, owner: &str) -> (Sess, Arc<FakeBack>) {
        let fake = FakeBack::new();
        let ex = self.exchange_id(owner, 1).await;
        self.connect(Some(fake.clone()));
        let s = self.create_back_session(&ex).await;
        self.connect(None);
        (s, fake)
    }

    /// EXCHANGE_ID and CREATE_SESSION only: a client that may still reclaim.
    pub async fn reclaiming_client(&self, owner: &str, verifier: u64) -> Sess {
        let ex = self.exchange_id(owner, verifier).await;
        self.create_session(ex.eir_clientid, ex.eir_sequenceid)
            .await
    }

    /// A client with a session that has said RECLAIM_COMPLETE, free to
    /// create state.
    pub async fn client(&self, owner: &str) -> Sess {
        let s = self.reclaiming_client(owner, 1).await;
        let r = self.call(&s, vec![reclaim_complete()]).await;
        assert_eq!(r.status, NFS4_OK, "RECLAIM_COMPLETE: {:?}", statuses(&r));
        s
    }

    pub fn sequence(&self, s: &Sess) -> NfsArgop4 {
        let seq = s.seq.get();
        s.seq.set(seq + 1);
        NfsArgop4::OP_SEQUENCE(Sequence4args {
            sa_sessionid: s.id,
            sa_sequenceid: seq,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: false,
        })
    }

    /// SEQUENCE (slot 0, next seqid) then `ops`; the whole reply.
    pub async fn call(&self, s: &Sess, ops: Vec<NfsArgop4>) -> Compound4res {
        let mut all = vec![self.sequence(s)];
        all.extend(ops);
        self.compound(1, all).await
    }

    /// A SEQUENCE alone: renews the lease; its status flags.
    pub async fn renew(&self, s: &Sess) -> Result<u32, Nfsstat4> {
        let r = self.call(s, vec![]).await;
        match &r.resarray[..] {
            [NfsResop4::OP_SEQUENCE(Sequence4res::NFS4_OK(ok))] => Ok(ok.sr_status_flags),
            _ => Err(r.status),
        }
    }

    /// OPEN by name in the export root, creating the file if missing.
    pub async fn open(
        &self,
        s: &Sess,
        file: &str,
        owner: &str,
        access: u32,
        deny: u32,
    ) -> Result<Opened, Nfsstat4> {
        let r = self.call(s, open_ops(s, file, owner, access, deny)).await;
        opened(&r, 2).ok_or(r.status)
    }

    /// A 4.0 client's first OPEN (seqid 1) of `file` in the export root,
    /// by open owner "o".
    pub async fn open40_first(
        &self,
        clientid: u64,
        access: u32,
        how: Openflag4,
        file: &str,
    ) -> Compound4res {
        let open = open_named(1, owner(clientid, "o"), access, how, file);
        self.compound(0, vec![NfsArgop4::OP_PUTROOTFH, open]).await
    }

    /// LOCK of a new lock owner named `lock_owner`, from open `open_sid`:
    /// a write lock on `(offset, length)` of `fh`.
    pub async fn new_write_lock(
        &self,
        s: &Sess,
        fh: &NfsFh4,
        open_sid: &Stateid4,
        (offset, length): (u64, u64),
        lock_owner: &str,
    ) -> Result<Stateid4, Nfsstat4> {
        let locker = new_lock_owner(open_sid, owner(s.clientid, lock_owner));
        let kind = NfsLockType4::WRITE_LT;
        self.lock(s, fh, kind, offset, length, locker).await
    }

    /// LOCK: the lock stateid, or the status (NFS4ERR_DENIED on a conflict).
    pub async fn lock(
        &self,
        s: &Sess,
        fh: &NfsFh4,
        kind: NfsLockType4,
        offset: u64,
        length: u64,
        locker: Locker4,
    ) -> Result<Stateid4, Nfsstat4> {
        let r = self
            .call(
                s,
                vec![putfh(fh), lock_args(kind, false, offset, length, locker)],
            )
            .await;
        match r.resarray.last() {
            Some(NfsResop4::OP_LOCK(Lock4res::NFS4_OK(ok))) => Ok(ok.lock_stateid.clone()),
            _ => Err(r.status),
        }
    }

    /// TEST_STATEID's answer for each of `ids`.
    pub async fn tested(&self, s: &Sess, ids: &[Stateid4]) -> Vec<Nfsstat4> {
        let r = self.call(s, vec![test_stateid(ids)]).await;
        match r.resarray.last() {
            Some(NfsResop4::OP_TEST_STATEID(TestStateid4res::NFS4_OK(t))) => {
                t.tsr_status_codes.clone()
            }
            _ => panic!("TEST_STATEID: {:?}", statuses(&r)),
        }
    }

    // ---- NFSv4.0 client --------------------------------------------------

    /// SETCLIENTID: the client id and the confirm verifier.
    pub async fn setclientid(&self, id: &str) -> (u64, Verifier4) {
        self.setclientid_with(setclientid_op(
            id,
            7,
            0x4000_0000,
            ("tcp", "127.0.0.1.0.0"),
            1,
        ))
        .await
    }

    /// SETCLIENTID `op`, which must succeed: the client id and the
    /// confirm verifier.
    pub async fn setclientid_with(&self, op: NfsArgop4) -> (u64, Verifier4) {
        let r = self.compound(0, vec![op]).await;
        match &r.resarray[..] {
            [NfsResop4::OP_SETCLIENTID(Setclientid4res::NFS4_OK(ok))] => {
                (ok.clientid, ok.setclientid_confirm)
            }
            _ => panic!("SETCLIENTID: {:?}", statuses(&r)),
        }
    }

    pub async fn confirm(&self, clientid: u64, verifier: Verifier4) -> Nfsstat4 {
        self.compound(
            0,
            vec![NfsArgop4::OP_SETCLIENTID_CONFIRM(SetclientidConfirm4args {
                clientid,
                setclientid_confirm: verifier,
            })],
        )
        .await
        .status
    }

    /// SETCLIENTID and SETCLIENTID_CONFIRM: a confirmed 4.0 client id.
    pub async fn client40(&self, id: &str) -> u64 {
        let (clientid, v) = self.setclientid(id).await;
        assert_eq!(
            self.confirm(clientid, v).await,
            NFS4_OK,
            "SETCLIENTID_CONFIRM"
        );
        clientid
    }

    pub async fn renew40(&self, clientid: u64) -> Nfsstat4 {
        self.compound(0, vec![NfsArgop4::OP_RENEW(Renew4args { clientid })])
            .await
            .status
    }
}

/// The OPEN at `at` and the GETFH after it, if both succeeded.
pub fn opened(r: &Compound4res, at: usize) -> Option<Opened> {
    match (r.resarray.get(at), r.resarray.get(at + 1)) {
        (
            Some(NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok))),
            Some(NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(fh))),
        ) => Some(Opened {
            fh: fh.object.clone(),
            stateid: ok.stateid.clone(),
            rflags: ok.rflags,
            delegation: ok.delegation.clone(),
        }),
        _ => None,
    }
}
