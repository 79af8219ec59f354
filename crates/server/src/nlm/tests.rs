//! NLM handler tests: calls go through `Nlm::dispatch` as XDR, against a
//! MemFs export; callbacks are recorded instead of sent.

use super::*;
use crate::export::Exports;
use crate::locks::LockManager;
use crate::pool::Pool;
use proto::nsm::{StatChge, SM_NOTIFY, SM_PROG};
use vfs::{Backend, Cred, HandleKey};

const PEER: &str = "127.0.0.1:700";

#[derive(Default)]
struct Recorder {
    granted: Mutex<Vec<(IpAddr, Nlm4Testargs)>>,
    notified: Mutex<Vec<(IpAddr, i32)>>,
    /// What the "client" answers to GRANTED.
    answer: Mutex<Option<Nlm4Stats>>,
    wake: tokio::sync::Notify,
}

impl Callback for Recorder {
    fn granted(
        &self,
        to: IpAddr,
        args: Nlm4Testargs,
    ) -> callback::BoxFut<'_, Result<Nlm4Stats, String>> {
        self.granted.lock().unwrap().push((to, args));
        self.wake.notify_one();
        let a = self
            .answer
            .lock()
            .unwrap()
            .unwrap_or(Nlm4Stats::NLM4_GRANTED);
        Box::pin(async move { Ok(a) })
    }

    fn notify(&self, to: IpAddr, state: i32) -> callback::BoxFut<'_, Result<(), String>> {
        self.notified.lock().unwrap().push((to, state));
        self.wake.notify_one();
        Box::pin(async { Ok(()) })
    }
}

struct Fx {
    nfs: Nfs3,
    nlm: Arc<Nlm>,
    rec: Arc<Recorder>,
    file: Netobj,
    fid: vfs::Fid,
}

fn fixture_grace(grace: Duration) -> Fx {
    fixture_with(grace, &rpc::tls::XprtSec::ALL)
}

/// A fixture whose export accepts connections protected as `xprtsec`.
fn fixture_with(grace: Duration, xprtsec: &[rpc::tls::XprtSec]) -> Fx {
    let backend: Arc<dyn Backend> = Arc::new(vfs::memory::MemFs::new());
    let root = backend.root();
    let (fid, _) = backend
        .create(
            &Cred::root(),
            &root,
            b"f",
            &vfs::CreateHow::Unchecked(Default::default()),
        )
        .unwrap();
    let mut e = crate::test_util::export(backend, false, "127.0.0.1/32");
    e.xprtsec = xprtsec.to_vec();
    let nfs = Nfs3::new(
        crate::live::Live::fixed(Exports::new(vec![e])),
        Arc::new(HandleKey::random()),
        Pool::new(2),
    );
    let fh = nfs.handle(nfs.live.load().exports.get(0).unwrap(), &fid);
    let rec = Arc::new(Recorder::default());
    let nlm = Nlm::new(
        Arc::new(LockManager::new()),
        Arc::new(nsm::Nsm::in_memory(1)),
        NlmConfig {
            grace: crate::grace::Grace::new(std::time::Instant::now(), grace),
        },
        rec.clone(),
    );
    Fx {
        nfs,
        nlm,
        rec,
        file: Netobj(fh.data),
        fid,
    }
}

fn fixture() -> Fx {
    fixture_grace(Duration::ZERO)
}

fn ctx_from(prog: u32, proc_: u32, peer: &str) -> CallContext {
    let vers = if prog == NLM_PROG { 4 } else { 1 };
    crate::test_util::call_ctx(1, (prog, vers, proc_), rpc::Auth::None, peer)
}

impl Fx {
    /// The encoded reply of procedure `proc_` called from `peer`.
    async fn dispatch_from<A: Pack>(&self, proc_: u32, args: &A, peer: &str) -> BytesMut {
        let ctx = ctx_from(NLM_PROG, proc_, peer);
        let (r, out) = self.dispatch_raw(&ctx, xdr::to_bytes(args)).await;
        r.unwrap();
        out
    }

    /// The call `ctx` with the argument bytes `args`: the dispatcher's
    /// answer and the reply it wrote.
    async fn dispatch_raw(
        &self,
        ctx: &CallContext,
        args: Bytes,
    ) -> (Result<(), CallError>, BytesMut) {
        let mut out = BytesMut::new();
        let r = self
            .nlm
            .dispatch(&self.nfs, ctx, Decoder::new(args), &mut out)
            .await;
        (r, out)
    }

    async fn call_from<A: Pack, R: Unpack>(&self, proc_: u32, args: &A, peer: &str) -> R {
        let out = self.dispatch_from(proc_, args, peer).await;
        xdr::from_bytes(out.freeze()).unwrap()
    }

    /// A procedure with a void result.
    async fn call_void_from<A: Pack>(&self, proc_: u32, args: &A, peer: &str) {
        let out = self.dispatch_from(proc_, args, peer).await;
        assert!(out.is_empty(), "void reply");
    }

    async fn call<A: Pack, R: Unpack>(&self, proc_: u32, args: &A) -> R {
        self.call_from(proc_, args, PEER).await
    }

    fn alock(&self, svid: i32, offset: u64, len: u64) -> Nlm4Lock {
        Nlm4Lock {
            caller_name: Bytes::from_static(b"client1"),
            fh: self.file.clone(),
            oh: Netobj(Bytes::from(format!("{svid}@client1"))),
            svid,
            l_offset: offset,
            l_len: len,
        }
    }

    async fn lock(&self, svid: i32, excl: bool, block: bool, off: u64, len: u64) -> Nlm4Stats {
        self.lock_args(svid, excl, block, false, off, len).await
    }

    async fn lock_args(
        &self,
        svid: i32,
        excl: bool,
        block: bool,
        reclaim: bool,
        off: u64,
        len: u64,
    ) -> Nlm4Stats {
        let r: Nlm4Res = self
            .call(
                NLMPROC4_LOCK,
                &Nlm4Lockargs {
                    cookie: Netobj(Bytes::from_static(b"c1")),
                    block,
                    exclusive: excl,
                    alock: self.alock(svid, off, len),
                    reclaim,
                    state: 1,
                },
            )
            .await;
        assert_eq!(r.cookie.0, Bytes::from_static(b"c1"), "cookie echoed");
        r.stat.stat
    }

    async fn test(&self, svid: i32, excl: bool, off: u64, len: u64) -> Nlm4Testrply {
        let r: Nlm4Testres = self
            .call(
                NLMPROC4_TEST,
                &Nlm4Testargs {
                    cookie: Netobj(Bytes::new()),
                    exclusive: excl,
                    alock: self.alock(svid, off, len),
                },
            )
            .await;
        r.test_stat
    }

    async fn unlock(&self, svid: i32, off: u64, len: u64) -> Nlm4Stats {
        let r: Nlm4Res = self
            .call(
                NLMPROC4_UNLOCK,
                &Nlm4Unlockargs {
                    cookie: Netobj(Bytes::new()),
                    alock: self.alock(svid, off, len),
                },
            )
            .await;
        r.stat.stat
    }

    async fn cancel(&self, svid: i32, excl: bool, off: u64, len: u64) -> Nlm4Stats {
        let r: Nlm4Res = self
            .call(
                NLMPROC4_CANCEL,
                &Nlm4Cancargs {
                    cookie: Netobj(Bytes::new()),
                    block: true,
                    exclusive: excl,
                    alock: self.alock(svid, off, len),
                },
            )
            .await;
        r.stat.stat
    }

    async fn wait_granted(&self, n: usize) {
        within_5s("GRANTED callback", async {
            while self.rec.granted.lock().unwrap().len() < n {
                self.rec.wake.notified().await;
            }
        })
        .await;
    }
}

/// Waits at most five seconds for `f`; past them the test fails, saying
/// `what` did not come.
async fn within_5s(what: &str, f: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect(what)
}

use Nlm4Stats::*;

#[tokio::test]
async fn two_owners_conflict_test_names_holder() {
    let fx = fixture();
    assert_eq!(fx.lock(1, true, false, 100, 0).await, NLM4_GRANTED);
    match fx.test(2, false, 0, 200).await {
        Nlm4Testrply::NLM4_DENIED(h) => {
            assert!(h.exclusive);
            assert_eq!(h.svid, 1);
            assert_eq!(h.oh.0, Bytes::from_static(b"1@client1"));
            assert_eq!((h.l_offset, h.l_len), (100, 0), "to EOF is l_len 0");
        }
        other => panic!("{other:?}"),
    }
    // Before the lock: free. Same owner: never conflicts with itself.
    assert_eq!(
        fx.test(2, true, 0, 100).await,
        Nlm4Testrply::Default(NLM4_GRANTED)
    );
    assert_eq!(
        fx.test(1, true, 0, 1000).await,
        Nlm4Testrply::Default(NLM4_GRANTED)
    );
    assert_eq!(fx.lock(2, false, false, 150, 10).await, NLM4_DENIED);
    assert_eq!(fx.unlock(1, 0, 0).await, NLM4_GRANTED);
    assert_eq!(fx.lock(2, false, false, 150, 10).await, NLM4_GRANTED);
    // Shared locks coexist.
    assert_eq!(fx.lock(1, false, false, 100, 100).await, NLM4_GRANTED);
    // Unlocking what is not held is fine.
    assert_eq!(fx.unlock(3, 0, 0).await, NLM4_GRANTED);
}

#[tokio::test]
async fn nlm_and_nfsv4_owners_meet_on_one_file() {
    let fx = fixture();
    let file = FileKey {
        export: 0,
        fid: fx.fid,
    };
    let v4 = OwnerKey {
        client: 42,
        owner: Bytes::from_static(b"v4-owner"),
    };
    fx.nlm
        .locks
        .lock(file, &v4, LockKind::Write.range(0, 10))
        .unwrap();
    match fx.test(1, false, 5, 1).await {
        Nlm4Testrply::NLM4_DENIED(h) => {
            assert_eq!((h.svid, h.l_offset, h.l_len), (0, 0, 10));
            assert_eq!(h.oh.0, Bytes::from_static(b"v4-owner"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fx.lock(1, true, false, 10, 5).await, NLM4_GRANTED);
    assert!(fx
        .nlm
        .locks
        .test(file, &v4, LockKind::Read.range(12, 1))
        .is_err());
}

#[tokio::test]
async fn grace_period_admits_only_reclaims() {
    let fx = fixture_grace(Duration::from_secs(3600));
    assert_eq!(
        fx.lock(1, true, false, 0, 10).await,
        NLM4_DENIED_GRACE_PERIOD
    );
    assert_eq!(
        fx.test(1, true, 0, 10).await,
        Nlm4Testrply::Default(NLM4_DENIED_GRACE_PERIOD)
    );
    assert_eq!(
        fx.lock_args(1, true, false, true, 0, 10).await,
        NLM4_GRANTED
    );
    assert_eq!(fx.unlock(1, 0, 10).await, NLM4_GRANTED);
    // After the grace period a reclaim is refused: the lock was not kept.
    let fx = fixture();
    assert_eq!(
        fx.lock_args(1, true, false, true, 0, 10).await,
        NLM4_DENIED_GRACE_PERIOD
    );
}

/// A cluster head re-enters grace while serving (another head failed):
/// only reclaims until the cluster's grace is lifted, then new locks again.
#[tokio::test]
async fn grace_can_be_entered_again_and_lifted() {
    let fx = fixture();
    assert_eq!(fx.lock(1, true, false, 0, 10).await, NLM4_GRANTED);
    fx.nlm.join_grace(crate::grace::Grace::new(
        std::time::Instant::now(),
        Duration::from_secs(3600),
    ));
    fx.nlm.set_cluster_grace(true);
    assert_eq!(
        fx.lock(2, true, false, 20, 10).await,
        NLM4_DENIED_GRACE_PERIOD
    );
    assert_eq!(
        fx.lock_args(2, true, false, true, 40, 10).await,
        NLM4_GRANTED,
        "a failed head's host reclaims here"
    );
    // Established locks are released as usual.
    assert_eq!(fx.unlock(1, 0, 10).await, NLM4_GRANTED);
    fx.nlm.end_grace();
    assert_eq!(fx.lock(2, true, false, 20, 10).await, NLM4_GRANTED);
    assert_eq!(
        fx.lock_args(3, true, false, true, 60, 10).await,
        NLM4_DENIED_GRACE_PERIOD,
        "no reclaims once lifted"
    );
}

#[tokio::test]
async fn blocked_lock_is_granted_by_callback() {
    let fx = fixture();
    assert_eq!(fx.lock(1, true, false, 0, 100).await, NLM4_GRANTED);
    assert_eq!(fx.lock(2, true, true, 50, 10).await, NLM4_BLOCKED);
    // A retransmission does not queue twice.
    assert_eq!(fx.lock(2, true, true, 50, 10).await, NLM4_BLOCKED);
    assert!(fx.rec.granted.lock().unwrap().is_empty());
    assert_eq!(fx.unlock(1, 0, 100).await, NLM4_GRANTED);
    fx.wait_granted(1).await;
    let (to, args) = fx.rec.granted.lock().unwrap()[0].clone();
    assert_eq!(to, "127.0.0.1".parse::<IpAddr>().unwrap());
    assert!(args.exclusive);
    assert_eq!(
        (args.alock.svid, args.alock.l_offset, args.alock.l_len),
        (2, 50, 10)
    );
    assert_eq!(args.alock.fh, fx.file);
    assert_eq!(args.cookie.0, Bytes::from_static(b"c1"));
    // svid 2 holds it now.
    match fx.test(3, false, 55, 1).await {
        Nlm4Testrply::NLM4_DENIED(h) => assert_eq!(h.svid, 2),
        other => panic!("{other:?}"),
    }
    // The client's next retransmission is simply granted.
    assert_eq!(fx.lock(2, true, true, 50, 10).await, NLM4_GRANTED);
    assert_eq!(fx.rec.granted.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn refused_grant_is_released() {
    let fx = fixture();
    *fx.rec.answer.lock().unwrap() = Some(NLM4_DENIED);
    assert_eq!(fx.lock(1, true, false, 0, 0).await, NLM4_GRANTED);
    assert_eq!(fx.lock(2, false, true, 0, 1).await, NLM4_BLOCKED);
    fx.unlock(1, 0, 0).await;
    fx.wait_granted(1).await;
    // The grant task releases the lock once the client says it no longer waits.
    within_5s("lock released after the refused GRANTED", async {
        while fx.nlm.locks.file_count() != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn cancel_removes_a_blocked_lock() {
    let fx = fixture();
    assert_eq!(fx.lock(1, true, false, 0, 100).await, NLM4_GRANTED);
    assert_eq!(fx.lock(2, true, true, 0, 10).await, NLM4_BLOCKED);
    assert_eq!(fx.cancel(2, true, 0, 10).await, NLM4_GRANTED);
    assert_eq!(fx.cancel(2, true, 0, 10).await, NLM4_DENIED, "gone");
    fx.unlock(1, 0, 100).await;
    tokio::task::yield_now().await;
    assert!(fx.rec.granted.lock().unwrap().is_empty());
    assert_eq!(fx.nlm.locks.file_count(), 0);
}

#[tokio::test]
async fn nm_lock_never_blocks() {
    let fx = fixture();
    assert_eq!(fx.lock(1, true, false, 0, 0).await, NLM4_GRANTED);
    let r: Nlm4Res = fx
        .call(
            NLMPROC4_NM_LOCK,
            &Nlm4Lockargs {
                cookie: Netobj(Bytes::new()),
                block: true,
                exclusive: true,
                alock: fx.alock(2, 0, 1),
                reclaim: false,
                state: 0,
            },
        )
        .await;
    assert_eq!(r.stat.stat, NLM4_DENIED);
}

#[tokio::test]
async fn bad_handle_is_stale() {
    let fx = fixture();
    let mut a = fx.alock(1, 0, 1);
    a.fh = Netobj(Bytes::from_static(b"not a handle"));
    let r: Nlm4Res = fx
        .call(
            NLMPROC4_UNLOCK,
            &Nlm4Unlockargs {
                cookie: Netobj(Bytes::new()),
                alock: a,
            },
        )
        .await;
    assert_eq!(r.stat.stat, NLM4_STALE_FH);
}

/// An export that requires TLS refuses locks asked for on a plain
/// connection with NLM4_FAILED (final: not a conflict to wait out), and
/// grants them over TLS.
#[tokio::test]
async fn an_export_requiring_tls_takes_nlm_in_the_clear() {
    use rpc::tls::XprtSec;
    let fx = fixture_with(Duration::ZERO, &[XprtSec::Tls, XprtSec::Mtls]);
    let call = |x: XprtSec, proc_: u32, excl: bool| {
        let mut ctx = ctx_from(NLM_PROG, proc_, PEER);
        ctx.xprtsec = x;
        let args = Nlm4Lockargs {
            cookie: Netobj(Bytes::new()),
            block: false,
            exclusive: excl,
            alock: fx.alock(1, 0, 10),
            reclaim: false,
            state: 1,
        };
        let fx = &fx;
        async move {
            let (r, out) = fx.dispatch_raw(&ctx, xdr::to_bytes(&args)).await;
            r.unwrap();
            xdr::from_bytes::<Nlm4Res>(out.freeze()).unwrap().stat.stat
        }
    };
    // The Linux client sends NLM in the clear beside its TLS NFS
    // connection (knfsd takes it so): the same owner's lock, by any
    // transport, is granted.
    assert_eq!(call(XprtSec::None, NLMPROC4_LOCK, true).await, NLM4_GRANTED);
    assert_eq!(call(XprtSec::Tls, NLMPROC4_LOCK, true).await, NLM4_GRANTED);
    assert_eq!(call(XprtSec::Mtls, NLMPROC4_LOCK, true).await, NLM4_GRANTED);
    // And unlocked in the clear too.
    let mut ctx = ctx_from(NLM_PROG, NLMPROC4_UNLOCK, PEER);
    ctx.xprtsec = XprtSec::None;
    let u = Nlm4Unlockargs {
        cookie: Netobj(Bytes::new()),
        alock: fx.alock(1, 0, 10),
    };
    let (r, out) = fx.dispatch_raw(&ctx, xdr::to_bytes(&u)).await;
    r.unwrap();
    let r: Nlm4Res = xdr::from_bytes(out.freeze()).unwrap();
    assert_eq!(r.stat.stat, NLM4_GRANTED);
}

#[tokio::test]
async fn free_all_releases_only_from_the_hosts_address() {
    let fx = fixture();
    assert_eq!(fx.lock(1, true, false, 0, 0).await, NLM4_GRANTED);
    let args = Nlm4Notify {
        name: Bytes::from_static(b"client1"),
        state: 3,
    };
    // From elsewhere: ignored (the export only allows 127.0.0.1, but
    // FREE_ALL names no file, so it is the address check that refuses).
    fx.call_void_from(NLMPROC4_FREE_ALL, &args, "10.1.1.1:800")
        .await;
    assert_eq!(fx.nlm.locks.file_count(), 1);
    fx.call_void_from(NLMPROC4_FREE_ALL, &args, PEER).await;
    assert_eq!(fx.nlm.locks.file_count(), 0);
}

#[tokio::test]
async fn sm_notify_releases_the_rebooted_hosts_locks() {
    let fx = fixture();
    assert_eq!(fx.lock(1, true, false, 0, 0).await, NLM4_GRANTED);
    assert_eq!(fx.lock(2, true, true, 0, 0).await, NLM4_BLOCKED);
    let mut out = BytesMut::new();
    fx.nlm
        .dispatch_nsm(
            &ctx_from(SM_PROG, SM_NOTIFY, PEER),
            Decoder::new(xdr::to_bytes(&StatChge {
                mon_name: Bytes::from_static(b"client1.example"),
                state: 5,
            })),
            &mut out,
        )
        .unwrap();
    assert!(out.is_empty(), "void reply");
    assert_eq!(fx.nlm.locks.file_count(), 0);
    assert!(fx.nlm.blocked.lock().unwrap().is_empty());
    tokio::task::yield_now().await;
    assert!(fx.rec.granted.lock().unwrap().is_empty());
}

#[tokio::test]
async fn unserved_procedures_are_proc_unavail() {
    let fx = fixture();
    for p in [
        NLMPROC4_GRANTED,
        NLMPROC4_LOCK_MSG,
        NLMPROC4_GRANTED_RES,
        16,
        99,
    ] {
        let ctx = ctx_from(NLM_PROG, p, PEER);
        let (r, _) = fx.dispatch_raw(&ctx, Bytes::new()).await;
        assert!(matches!(r, Err(CallError::ProcUnavail)), "proc {p}");
    }
    let ctx = ctx_from(NLM_PROG, NLMPROC4_LOCK, PEER);
    let (r, _) = fx.dispatch_raw(&ctx, Bytes::from_static(&[0, 0])).await;
    assert!(matches!(r, Err(CallError::GarbageArgs)));
}

#[tokio::test]
async fn share_is_refused_honestly() {
    let fx = fixture();
    let args = Nlm4Shareargs {
        cookie: Netobj(Bytes::new()),
        share: Nlm4Share {
            caller_name: Bytes::from_static(b"client1"),
            fh: fx.file.clone(),
            oh: Netobj(Bytes::new()),
            mode: Fsh4Mode::fsm_DW,
            access: Fsh4Access::fsa_RW,
        },
        reclaim: false,
    };
    let r: Nlm4Shareres = fx.call(NLMPROC4_SHARE, &args).await;
    assert_eq!(r.stat, NLM4_DENIED_NOLOCKS);
    let r: Nlm4Shareres = fx.call(NLMPROC4_UNSHARE, &args).await;
    assert_eq!(r.stat, NLM4_GRANTED);
}

#[test]
fn nsm_state_is_odd_and_grows_and_hosts_persist() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("nsm");
    let (n, hosts) = nsm::Nsm::start(&d).unwrap();
    assert_eq!(n.state(), 1);
    assert!(hosts.is_empty());
    n.record(b"client1", "10.0.0.7".parse().unwrap()).unwrap();
    n.record(b"c/2", "::1".parse().unwrap()).unwrap();
    n.forget(b"nobody").unwrap();
    let (n, mut hosts) = nsm::Nsm::start(&d).unwrap();
    assert_eq!(n.state(), 3);
    hosts.sort();
    assert_eq!(
        hosts,
        vec![
            (Bytes::from_static(b"c/2"), "::1".parse().unwrap()),
            (Bytes::from_static(b"client1"), "10.0.0.7".parse().unwrap()),
        ]
    );
    n.forget(b"c/2").unwrap();
    // An even number left by someone else moves to the next odd one.
    std::fs::write(d.join("state"), "10\n").unwrap();
    let (n, hosts) = nsm::Nsm::start(&d).unwrap();
    assert_eq!((n.state(), hosts.len()), (11, 1));
}

#[tokio::test]
async fn restart_notifies_recorded_hosts() {
    let fx = fixture();
    fx.nlm.notify_restart(vec![(
        Bytes::from_static(b"client1"),
        "10.0.0.7".parse().unwrap(),
    )]);
    within_5s("SM_NOTIFY", async {
        while fx.rec.notified.lock().unwrap().is_empty() {
            fx.rec.wake.notified().await;
        }
    })
    .await;
    assert_eq!(
        fx.rec.notified.lock().unwrap()[0],
        ("10.0.0.7".parse().unwrap(), 1)
    );
}
