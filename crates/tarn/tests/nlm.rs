//! NLM v4 end to end over raw RPC against a real `tarn serve`: two owners
//! conflicting, TEST naming the holder, a blocking lock granted through an
//! NLMPROC4_GRANTED call to a small RPC listener this test runs (standing
//! in for the client's lockd), the grace period, and SM_NOTIFY to that
//! listener (standing in for the client's statd) after a restart.

mod common;
use bytes::{Bytes, BytesMut};
use common::*;
use proto::nfs3::*;
use proto::nlm4::*;
use proto::nsm::{StatChge, SM_NOTIFY, SM_PROG};
use rpc::client::{auth_sys, RpcClient};
use rpc::msg::ReplyStatus;
use rpc::{CallContext, CallError, Service};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use xdr::{Decoder, Pack, Unpack};

/// What the fake client host received.
#[derive(Debug)]
enum Heard {
    Granted(Nlm4Testargs),
    Notify(StatChge),
}

/// The client side's lockd (GRANTED) and statd (SM_NOTIFY) on one port.
struct ClientHost {
    tx: mpsc::UnboundedSender<Heard>,
}

impl Service for ClientHost {
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        match prog {
            NLM_PROG => Some((4, 4)),
            SM_PROG => Some((1, 1)),
            _ => None,
        }
    }
    fn idempotent(&self, _: u32, _: u32, _: u32) -> bool {
        true
    }
    fn procedure_name(&self, _: u32, _: u32, _: u32) -> &'static str {
        "client-host"
    }
    async fn call(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        match (ctx.prog, ctx.proc_) {
            (NLM_PROG, NLMPROC4_GRANTED) => {
                let a = Nlm4Testargs::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                Nlm4Res {
                    cookie: a.cookie.clone(),
                    stat: Nlm4Stat {
                        stat: Nlm4Stats::NLM4_GRANTED,
                    },
                }
                .pack(out);
                let _ = self.tx.send(Heard::Granted(a));
            }
            (SM_PROG, SM_NOTIFY) => {
                let a = StatChge::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                let _ = self.tx.send(Heard::Notify(a));
            }
            _ => return Err(CallError::ProcUnavail),
        }
        Ok(())
    }
}

async fn client_host() -> (u16, mpsc::UnboundedReceiver<Heard>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let srv = rpc::Server::new(Arc::new(ClientHost { tx }), rpc::ServerConfig::default());
    tokio::spawn(async move { srv.run(l).await });
    (port, rx)
}

/// The NFSv3 handle of a new file `name` in the export.
fn file_handle(s: &TestServer, name: &str) -> Netobj {
    std::fs::write(s.export.join(name), b"data").unwrap();
    let (mut c, root) = mounted_root(s);
    let l: Lookup3res = nfs_call(
        &mut c,
        1,
        NFSPROC3_LOOKUP,
        &Lookup3args {
            what: Diropargs3 {
                dir: root,
                name: Bytes::copy_from_slice(name.as_bytes()),
            },
        },
    );
    let Lookup3res::NFS3_OK(ok) = l else {
        panic!("lookup: {l:?}")
    };
    Netobj(ok.object.data)
}

struct Nlm {
    c: RpcClient,
    fh: Netobj,
}

impl Nlm {
    async fn connect(addr: SocketAddr, fh: Netobj) -> Nlm {
        let c = RpcClient::connect(addr, auth_sys(0, 0, &[], "client1"))
            .await
            .unwrap();
        Nlm { c, fh }
    }

    fn alock(&self, svid: i32, off: u64, len: u64) -> Nlm4Lock {
        Nlm4Lock {
            caller_name: Bytes::from_static(b"client1"),
            fh: self.fh.clone(),
            oh: Netobj(Bytes::from(format!("{svid}@client1"))),
            svid,
            l_offset: off,
            l_len: len,
        }
    }

    async fn lock(&self, svid: i32, block: bool, reclaim: bool, off: u64, len: u64) -> Nlm4Stats {
        let a = Nlm4Lockargs {
            cookie: Netobj(Bytes::from(svid.to_be_bytes().to_vec())),
            block,
            exclusive: true,
            alock: self.alock(svid, off, len),
            reclaim,
            state: 1,
        };
        let mut d = self.c.call(NLM_PROG, 4, NLMPROC4_LOCK, &a).await.unwrap();
        Nlm4Res::unpack(&mut d).unwrap().stat.stat
    }

    async fn test(&self, svid: i32, off: u64, len: u64) -> Nlm4Testrply {
        let a = Nlm4Testargs {
            cookie: Netobj(Bytes::new()),
            exclusive: true,
            alock: self.alock(svid, off, len),
        };
        let mut d = self.c.call(NLM_PROG, 4, NLMPROC4_TEST, &a).await.unwrap();
        Nlm4Testres::unpack(&mut d).unwrap().test_stat
    }

    async fn unlock(&self, svid: i32, off: u64, len: u64) -> Nlm4Stats {
        let a = Nlm4Unlockargs {
            cookie: Netobj(Bytes::new()),
            alock: self.alock(svid, off, len),
        };
        let mut d = self.c.call(NLM_PROG, 4, NLMPROC4_UNLOCK, &a).await.unwrap();
        Nlm4Res::unpack(&mut d).unwrap().stat.stat
    }
}

async fn heard(rx: &mut mpsc::UnboundedReceiver<Heard>) -> Heard {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("a call from the server")
        .unwrap()
}

use Nlm4Stats::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_owners_and_a_blocked_lock_granted_by_callback() {
    let (cb_port, mut rx) = client_host().await;
    let port = cb_port.to_string();
    let s = tokio::task::spawn_blocking(move || {
        TestServer::start_with(&["--grace", "0", "--nlm-callback-port", &port])
    })
    .await
    .unwrap();
    let fh = file_handle(&s, "f");
    let n = Nlm::connect(s.addr, fh).await;

    // Only version 4 is served.
    for v in [1, 3] {
        match n.c.call_raw(NLM_PROG, v, 0, &[]).await {
            Ok(r) => assert_eq!(
                rpc::msg::decode_reply(r).unwrap().1,
                ReplyStatus::ProgMismatch(4, 4)
            ),
            Err(e) => panic!("NLM v{v}: {e}"),
        }
    }
    let r = n.c.call_raw(NLM_PROG, 4, NLMPROC4_NULL, &[]).await.unwrap();
    assert_eq!(rpc::msg::decode_reply(r).unwrap().1, ReplyStatus::Success);

    assert_eq!(n.lock(1, false, false, 0, 100).await, NLM4_GRANTED);
    match n.test(2, 50, 1).await {
        Nlm4Testrply::NLM4_DENIED(h) => {
            assert_eq!(
                (h.svid, h.l_offset, h.l_len, h.exclusive),
                (1, 0, 100, true)
            )
        }
        other => panic!("TEST: {other:?}"),
    }
    assert_eq!(n.lock(2, false, false, 50, 10).await, NLM4_DENIED);
    assert_eq!(n.lock(2, true, false, 50, 10).await, NLM4_BLOCKED);
    // Nothing is granted while svid 1 holds the range.
    assert!(rx.try_recv().is_err());
    assert_eq!(n.unlock(1, 0, 100).await, NLM4_GRANTED);
    match heard(&mut rx).await {
        Heard::Granted(a) => {
            assert_eq!((a.alock.svid, a.alock.l_offset, a.alock.l_len), (2, 50, 10));
            assert_eq!(a.alock.fh, n.fh);
            assert_eq!(a.cookie.0, Bytes::from(2i32.to_be_bytes().to_vec()));
        }
        other => panic!("{other:?}"),
    }
    match n.test(1, 0, 0).await {
        Nlm4Testrply::NLM4_DENIED(h) => assert_eq!((h.svid, h.l_offset), (2, 50)),
        other => panic!("TEST after grant: {other:?}"),
    }
    assert_eq!(n.unlock(2, 50, 10).await, NLM4_GRANTED);
    assert_eq!(n.test(1, 0, 0).await, Nlm4Testrply::Default(NLM4_GRANTED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_bumps_state_notifies_and_holds_a_grace_period() {
    let (cb_port, mut rx) = client_host().await;
    let (tmp, export, state) = temp_export();
    let port = free_port();
    let cb = cb_port.to_string();
    let (e2, s2) = (export.clone(), state.clone());
    let launch = move |grace: &'static str| {
        let (export, state) = (&e2, &s2);
        let (export, state, cb) = (export.clone(), state.clone(), cb.clone());
        tokio::task::spawn_blocking(move || {
            TestServer::launch(
                &export,
                &state,
                port,
                &["--grace", grace, "--nlm-callback-port", &cb],
                &[],
            )
        })
    };
    let mut s = launch("0").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(state.join("nsm/state")).unwrap(),
        "1\n"
    );
    let fh = file_handle(&s, "f");
    let n = Nlm::connect(s.addr, fh.clone()).await;
    assert_eq!(n.lock(7, false, false, 0, 0).await, NLM4_GRANTED);
    drop(n);
    assert_eq!(
        std::fs::read_dir(state.join("nsm/hosts")).unwrap().count(),
        1,
        "the lock holder is recorded before its lock is granted"
    );
    tokio::task::spawn_blocking(move || s.stop()).await.unwrap();

    let s = launch("600").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(state.join("nsm/state")).unwrap(),
        "3\n"
    );
    match heard(&mut rx).await {
        Heard::Notify(a) => {
            assert_eq!(a.state, 3);
            assert_eq!(a.mon_name, Bytes::from_static(b"127.0.0.1"));
        }
        other => panic!("{other:?}"),
    }
    let n = Nlm::connect(s.addr, fh).await;
    assert_eq!(
        n.lock(8, false, false, 0, 1).await,
        NLM4_DENIED_GRACE_PERIOD
    );
    assert_eq!(n.lock(7, false, true, 0, 0).await, NLM4_GRANTED, "reclaim");
    assert_eq!(n.lock(8, false, true, 0, 1).await, NLM4_DENIED);
    drop(tmp);
}
