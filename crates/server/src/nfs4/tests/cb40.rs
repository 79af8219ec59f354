//! The NFSv4.0 callback path: SETCLIENTID's callback address, the CB_NULL
//! probe after SETCLIENTID_CONFIRM on a connection the server opens (here
//! a scripted client the fixture hands out for the address), read
//! delegations and their recall by a CB_COMPOUND that carries the
//! callback_ident and no CB_SEQUENCE, RENEW's NFS4ERR_CB_PATH_DOWN,
//! revocation, and a callback update switching the path.

use super::*;
use std::collections::HashMap;
use std::net::SocketAddr;

const READ: u32 = OPEN4_SHARE_ACCESS_READ;
const WRITE: u32 = OPEN4_SHARE_ACCESS_WRITE;

type Clients = Arc<std::sync::Mutex<HashMap<SocketAddr, Arc<FakeBack>>>>;

/// Connections to these addresses reach these scripted clients (the map
/// can be changed later); other addresses refuse.
fn dial_to(fx: &Fx, clients: &[(&str, Arc<FakeBack>)]) -> Clients {
    let m: Clients = Arc::new(std::sync::Mutex::new(
        clients
            .iter()
            .map(|(a, f)| (a.parse().unwrap(), f.clone()))
            .collect(),
    ));
    let m2 = m.clone();
    fx.n.backchannels.v40.set_dial(Arc::new(move |addr| {
        let f = m2.lock().unwrap().get(&addr).cloned();
        Box::pin(async move {
            f.map(|f| f as Arc<dyn rpc::CallbackConn>)
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        })
    }));
    m
}

async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// SETCLIENTID naming `uaddr` and `ident`, then its CONFIRM; the probe
/// is let run.
async fn client(fx: &Fx, id: &str, verifier: u8, netid: &str, uaddr: &str, ident: u32) -> u64 {
    let op = setclientid_op(id, verifier, CB_PROG, (netid, uaddr), ident);
    let (clientid, v) = fx.setclientid_with(op).await;
    assert_eq!(fx.confirm(clientid, v).await, NFS4_OK);
    settle().await;
    clientid
}

/// OPEN of "f" by name, creating it, of 4.0 open owner `owner`.
fn open_f(clientid: u64, owner: &str, seqid: u32, access: u32) -> NfsArgop4 {
    open_named(seqid, super::owner(clientid, owner), access, create(), "f")
}

/// OPEN by name (creating), with OPEN_CONFIRM when the owner is new.
async fn open40(fx: &Fx, clientid: u64, owner: &str, seqid: u32, access: u32) -> (Opened, u32) {
    let ops = vec![
        NfsArgop4::OP_PUTROOTFH,
        open_f(clientid, owner, seqid, access),
        NfsArgop4::OP_GETFH,
    ];
    let r = fx.compound(0, ops).await;
    let mut o = opened(&r, 1).unwrap_or_else(|| panic!("OPEN: {:?}", statuses(&r)));
    let mut next = seqid + 1;
    if o.rflags & OPEN4_RESULT_CONFIRM != 0 {
        let r = fx
            .compound(
                0,
                vec![
                    putfh(&o.fh),
                    NfsArgop4::OP_OPEN_CONFIRM(OpenConfirm4args {
                        open_stateid: o.stateid.clone(),
                        seqid: next,
                    }),
                ],
            )
            .await;
        assert_eq!(r.status, NFS4_OK, "OPEN_CONFIRM: {:?}", statuses(&r));
        next += 1;
        o.stateid.seqid += 1;
    }
    (o, next)
}

/// An OPEN's status; each call a new seqid (a 4.0 owner's retry with
/// the same seqid would be a retransmission, answered from its cache).
async fn open40_status(fx: &Fx, clientid: u64, owner: &str, access: u32) -> Nfsstat4 {
    static SEQ: AtomicU32 = AtomicU32::new(100);
    let seqid = SEQ.fetch_add(1, Ordering::Relaxed);
    let ops = vec![
        NfsArgop4::OP_PUTROOTFH,
        open_f(clientid, owner, seqid, access),
    ];
    fx.compound(0, ops).await.status
}

fn read_deleg(o: &Opened) -> Option<Stateid4> {
    match &o.delegation {
        OpenDelegation4::OPEN_DELEGATE_READ(d) => Some(d.stateid.clone()),
        _ => None,
    }
}

async fn delegreturn(fx: &Fx, fh: &NfsFh4, sid: &Stateid4) -> Nfsstat4 {
    fx.compound(0, vec![putfh(fh), delegreturn_op(sid)])
        .await
        .status
}

/// A 4.0 client with a read delegation on "f" over `fake`: (clientid,
/// file handle, delegation stateid).
/// A server (10 s leases) whose callback path for 127.0.0.1:2049 reaches
/// one fake client.
fn calling_back() -> (Fx, Arc<FakeBack>) {
    let fx = Fx::new(cfg(10, 0));
    let fake = FakeBack::new();
    dial_to(&fx, &[("127.0.0.1:2049", fake.clone())]);
    (fx, fake)
}

async fn delegated(fx: &Fx, fake: &Arc<FakeBack>, ident: u32) -> (u64, NfsFh4, Stateid4) {
    let id = client(fx, "holder", 1, "tcp", "127.0.0.1.8.1", ident).await;
    assert_eq!(fake.nulls(), 1, "CB_NULL probe after SETCLIENTID_CONFIRM");
    // A new owner's first OPEN (to be confirmed) gets none, as from knfsd.
    let (first, _) = open40(fx, id, "o1", 1, READ).await;
    assert!(read_deleg(&first).is_none());
    let (o, _) = open40(fx, id, "o1", 3, READ).await;
    let sid = read_deleg(&o).expect("a read delegation over the 4.0 callback path");
    (id, o.fh, sid)
}

#[tokio::test]
async fn v40_read_delegation_recalled_over_the_callback_path() {
    let (fx, fake) = calling_back();
    let (holder, fh, sid) = delegated(&fx, &fake, 77).await;
    {
        let calls = fake.calls.lock().unwrap();
        assert_eq!(
            (calls[0].0, calls[0].1, calls[0].2),
            (0, proto::rpc::AUTH_SYS, CB_PROG),
            "CB_NULL to the client's program with AUTH_SYS (as the client used)"
        );
    }
    // The holder opening for writing itself recalls nothing.
    let other = client(&fx, "writer", 2, "tcp", "0.0.0.0.0.0", 1).await;
    assert_eq!(open40_status(&fx, holder, "o2", WRITE).await, NFS4_OK);
    settle().await;
    assert!(fake.compounds().is_empty(), "no recall of the client's own");
    // Another client's write open waits for the recall.
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4ERR_DELAY);
    settle().await;
    let cbs = fake.compounds();
    assert_eq!(cbs.len(), 1);
    assert_eq!((cbs[0].minorversion, cbs[0].callback_ident), (0, 77));
    match &cbs[0].argarray[..] {
        [NfsCbArgop4::OP_CB_RECALL(r)] => {
            assert_eq!(r.stateid, sid);
            assert_eq!(r.fh, fh);
        }
        other => panic!("CB_RECALL alone, no CB_SEQUENCE: {other:?}"),
    }
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4ERR_DELAY);
    assert_eq!(delegreturn(&fx, &fh, &sid).await, NFS4_OK);
    assert_eq!(fx.n.state.delegations(), 0);
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4_OK);
    // Returned twice: unknown.
    assert_eq!(delegreturn(&fx, &fh, &sid).await, NFS4ERR_BAD_STATEID);
    assert_eq!(fx.n.backchannels.path_counts(), (1, 0), "holder up");
}

#[tokio::test]
async fn v40_unanswered_recall_path_down_renew_and_revocation() {
    let (fx, fake) = calling_back();
    let (holder, fh, sid) = delegated(&fx, &fake, 5).await;
    let other = client(&fx, "writer", 2, "tcp", "garbage", 1).await;
    assert_eq!(fx.renew40(holder).await, NFS4_OK);
    // The client stops answering: the recall times out, the path is down.
    fake.answer(Answer::Ignore);
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4ERR_DELAY);
    settle().await;
    assert!(!fx.n.backchannels.v40.is_up(holder));
    assert_eq!(fx.n.backchannels.path_counts(), (0, 1));
    assert_eq!(
        fx.renew40(holder).await,
        NFS4ERR_CB_PATH_DOWN,
        "RFC 7530 §16.29: delegations held, path down"
    );
    // A lease after the recall the delegation is revoked; the writer goes
    // on and the stateid is no longer known (4.0 has no revoked state).
    for _ in 0..4 {
        fx.advance(secs(3));
        assert_ne!(fx.renew40(holder).await, NFS4ERR_EXPIRED);
        fx.renew40(other).await;
        fx.reap().await;
    }
    assert_eq!(fx.n.state.delegations(), 0);
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4_OK);
    assert_eq!(delegreturn(&fx, &fh, &sid).await, NFS4ERR_BAD_STATEID);
    assert_eq!(fx.renew40(holder).await, NFS4_OK, "nothing held any more");
}

#[tokio::test]
async fn v40_no_delegation_without_a_working_path() {
    let fx = Fx::new(cfg(10, 0));
    let fake = FakeBack::new();
    fake.answer(Answer::Closed);
    dial_to(&fx, &[("[::1]:2049", fake.clone())]);
    // Garbage, or an address nobody answers at: SETCLIENTID still works.
    let bad = client(&fx, "bad", 1, "tcp", "not.an.address", 1).await;
    let refused = client(&fx, "refused", 2, "tcp", "127.0.0.1.0.9", 1).await;
    let closed = client(&fx, "closed", 3, "tcp6", "::1.8.1", 1).await;
    for id in [bad, refused, closed] {
        let (first, _) = open40(&fx, id, "o", 1, READ).await;
        assert!(read_deleg(&first).is_none());
        let (o, _) = open40(&fx, id, "o", 3, READ).await;
        assert!(read_deleg(&o).is_none(), "no path, no delegation");
        assert_eq!(fx.renew40(id).await, NFS4_OK, "holds none: RENEW is fine");
    }
    assert_eq!(
        fx.n.backchannels.path_counts(),
        (0, 2),
        "two named an address, neither answers"
    );
    // The path comes back: a new SETCLIENTID (callback update) is probed.
    fake.answer(Answer::Ok);
    let again = client(&fx, "closed", 3, "tcp6", "::1.8.1", 1).await;
    assert_eq!(again, closed);
    assert!(fx.n.backchannels.v40.is_up(closed));
}

#[tokio::test]
async fn v40_callback_update_switches_the_path() {
    let fx = Fx::new(cfg(10, 0));
    let (a, b) = (FakeBack::new(), FakeBack::new());
    dial_to(&fx, &[("127.0.0.1:2049", a.clone())]);
    let (holder, fh, sid) = delegated(&fx, &a, 1).await;
    dial_to(
        &fx,
        &[("127.0.0.1:2049", a.clone()), ("127.0.0.1:2050", b.clone())],
    );
    // Same verifier: a callback update, same clientid, state kept.
    let id = client(&fx, "holder", 1, "tcp", "127.0.0.1.8.2", 9).await;
    assert_eq!(id, holder);
    assert_eq!(b.nulls(), 1, "the new path is probed");
    let other = client(&fx, "writer", 2, "tcp", "0.0.0.0.0.0", 1).await;
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4ERR_DELAY);
    settle().await;
    assert!(a.compounds().is_empty(), "the old path is not used");
    let cbs = b.compounds();
    assert_eq!(cbs.len(), 1);
    assert_eq!(cbs[0].callback_ident, 9);
    assert_eq!(delegreturn(&fx, &fh, &sid).await, NFS4_OK);
}

#[tokio::test]
async fn v40_broken_connection_is_opened_again_for_a_recall() {
    let fx = Fx::new(cfg(10, 0));
    let (first, second) = (FakeBack::new(), FakeBack::new());
    let clients = dial_to(&fx, &[("127.0.0.1:2049", first.clone())]);
    let (_, fh, sid) = delegated(&fx, &first, 3).await;
    // The connection breaks; a new one reaches the client.
    first.answer(Answer::Closed);
    clients
        .lock()
        .unwrap()
        .insert("127.0.0.1:2049".parse().unwrap(), second.clone());
    let other = client(&fx, "writer", 2, "tcp", "0.0.0.0.0.0", 1).await;
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4ERR_DELAY);
    settle().await;
    let cbs = second.compounds();
    assert_eq!(cbs.len(), 1, "CB_RECALL on the new connection");
    assert_eq!(cbs[0].callback_ident, 3);
    assert_eq!(delegreturn(&fx, &fh, &sid).await, NFS4_OK);
    assert_eq!(open40_status(&fx, other, "w", WRITE).await, NFS4_OK);
}

/// A client whose callback service refuses every call (a wrong program).
#[derive(Debug)]
struct Refuses;

impl rpc::CallbackConn for Refuses {
    fn call(
        &self,
        _prog: u32,
        _vers: u32,
        _proc: u32,
        _cred: proto::rpc::OpaqueAuth,
        _args: Bytes,
        _timeout: Duration,
    ) -> rpc::callback::CallFuture<'_> {
        Box::pin(std::future::ready(Err(rpc::CallbackError::Refused(
            rpc::msg::ReplyStatus::Accepted(proto::rpc::AcceptStat::PROG_UNAVAIL),
        ))))
    }

    fn is_open(&self) -> bool {
        true
    }

    fn conn_id(&self) -> u64 {
        3
    }
}

#[tokio::test]
async fn v40_a_refused_probe_leaves_the_path_down() {
    let fx = Fx::new(cfg(10, 0));
    fx.n.backchannels.v40.set_dial(Arc::new(|_| {
        Box::pin(async { Ok(Arc::new(Refuses) as Arc<dyn rpc::CallbackConn>) })
    }));
    let id = client(&fx, "refused", 1, "tcp", "127.0.0.1.8.1", 1).await;
    assert!(!fx.n.backchannels.v40.is_up(id));
    let (_, _) = open40(&fx, id, "o", 1, READ).await;
    let (o, _) = open40(&fx, id, "o", 3, READ).await;
    assert!(read_deleg(&o).is_none());
}
