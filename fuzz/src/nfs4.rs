//! One NFSv4 server over an in-memory export, built afresh for every input
//! (so a run depends on its input only), with an NFSv4.1 client and session
//! already established: a fuzzed COMPOUND that starts with SEQUENCE gets
//! the real session id written over its own, so the handlers behind the
//! session checks are reached.

use crate::call_context;
use bytes::{Bytes, BytesMut};
use proto::nfs4::*;
use server::export::Squash;
use server::grace::Grace;
use server::live::Live;
use server::locks::LockManager;
use server::nfs4::clock::SystemClock;
use server::nfs4::{Nfs4, Nfs4Config};
use server::pool::Pool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xdr::{Decoder, Unpack};

fn server() -> Nfs4 {
    server_with(crate::exports(Squash::None), Arc::new(LockManager::new()))
}

/// An NFSv4 server over these exports and locks (no grace period, a fixed
/// handle key, no recovery record).
pub fn server_with(live: Arc<Live>, locks: Arc<LockManager>) -> Nfs4 {
    let cfg = Nfs4Config {
        grace: Duration::ZERO,
        ..Nfs4Config::default()
    };
    let grace = Grace::new(Instant::now(), cfg.grace);
    Nfs4::new(
        live,
        crate::handle_key(),
        Pool::new(1),
        locks,
        cfg,
        None,
        grace,
        Arc::new(SystemClock),
    )
}

/// Runs one COMPOUND; checks the reply and returns it decoded (None: the
/// call was refused at the RPC level, which needs no COMPOUND reply).
async fn call(n: &Nfs4, xid: u32, uid: u32, args: Bytes) -> Option<Compound4res> {
    let nops = {
        // The operation count, where the header has one.
        let mut d = Decoder::new(args.clone());
        d.opaque(None)
            .and_then(|_| d.u32())
            .and_then(|_| d.u32())
            .ok()
    };
    let mut out = BytesMut::new();
    let r = n
        .dispatch(
            &call_context(xid, NFS4_PROGRAM, 4, 1, uid),
            Decoder::new(args),
            &mut out,
        )
        .await;
    if r.is_err() {
        return None;
    }
    let out = out.freeze();
    let mut d = Decoder::new(out.clone());
    let res = Compound4res::unpack(&mut d)
        .unwrap_or_else(|e| panic!("COMPOUND reply does not decode ({e}): {out:02x?}"));
    assert_eq!(d.remaining(), 0, "bytes after the COMPOUND reply");
    let nops = nops.expect("a reply to a COMPOUND without a header");
    assert!(
        res.resarray.len() as u64 <= nops as u64,
        "more results than operations"
    );
    if std::env::var_os("TARN_FUZZ_DEBUG").is_some() {
        // To see how far a seed gets: each result's operation and status.
        let st: Vec<String> = res
            .resarray
            .iter()
            .map(|r| {
                let b = xdr::to_bytes(r);
                format!(
                    "{}:{}",
                    u32::from_be_bytes(b[..4].try_into().unwrap()),
                    u32::from_be_bytes(b[4..8].try_into().unwrap())
                )
            })
            .collect();
        eprintln!("COMPOUND {:?}: {}", res.status, st.join(" "));
    }
    Some(res)
}

fn op_bytes(minor: u32, ops: Vec<NfsArgop4>) -> Bytes {
    xdr::to_bytes(&Compound4args {
        tag: Bytes::new(),
        minorversion: minor,
        argarray: ops,
    })
}

async fn session(n: &Nfs4) -> Option<Sessionid4> {
    let r = call(
        n,
        1,
        0,
        op_bytes(
            1,
            vec![NfsArgop4::OP_EXCHANGE_ID(ExchangeId4args {
                eia_clientowner: ClientOwner4 {
                    co_verifier: [1; 8],
                    co_ownerid: Bytes::from_static(b"fuzz-client"),
                },
                eia_flags: 0,
                eia_state_protect: StateProtect4A::SP4_NONE,
                eia_client_impl_id: vec![],
            })],
        ),
    )
    .await?;
    let [NfsResop4::OP_EXCHANGE_ID(ExchangeId4res::NFS4_OK(x))] = &r.resarray[..] else {
        panic!("EXCHANGE_ID failed: {:?}", r.status)
    };
    let chan = server::nfs4::state::session::channel;
    let r = call(
        n,
        2,
        0,
        op_bytes(
            1,
            vec![NfsArgop4::OP_CREATE_SESSION(CreateSession4args {
                csa_clientid: x.eir_clientid,
                csa_sequence: x.eir_sequenceid,
                csa_flags: 0,
                csa_fore_chan_attrs: chan(1 << 20, 16, 4, 8 << 10),
                csa_back_chan_attrs: chan(4096, 2, 1, 0),
                csa_cb_program: 0x4000_0000,
                csa_sec_parms: vec![CallbackSecParms4::AUTH_NONE],
            })],
        ),
    )
    .await?;
    let sid = match &r.resarray[..] {
        [NfsResop4::OP_CREATE_SESSION(CreateSession4res::NFS4_OK(s))] => s.csr_sessionid,
        _ => panic!("CREATE_SESSION failed: {:?}", r.status),
    };
    // Until RECLAIM_COMPLETE a client may only reclaim (RFC 8881 §18.51):
    // the fuzzed COMPOUNDs start past it, at slot 0's sequence id 2.
    let seq = NfsArgop4::OP_SEQUENCE(Sequence4args {
        sa_sessionid: sid,
        sa_sequenceid: 1,
        sa_slotid: 0,
        sa_highest_slotid: 0,
        sa_cachethis: false,
    });
    let done = NfsArgop4::OP_RECLAIM_COMPLETE(ReclaimComplete4args { rca_one_fs: false });
    let r = call(n, 3, 0, op_bytes(1, vec![seq, done])).await?;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "RECLAIM_COMPLETE");
    Some(sid)
}

/// Where the session id of a leading SEQUENCE sits in `args`, if it starts with one.
fn sequence_sessionid_at(args: &[u8]) -> Option<usize> {
    let mut d = Decoder::new(Bytes::copy_from_slice(args));
    d.opaque(None).ok()?;
    let minor = d.u32().ok()?;
    let n = d.u32().ok()?;
    let op = d.u32().ok()?;
    (minor > 0 && n > 0 && op == NfsOpnum4::OP_SEQUENCE as u32 && d.remaining() >= 16)
        .then(|| d.position())
}

/// Input: one byte of options (bit 0: the caller is root, else uid 1000;
/// bit 1: keep the fuzzed session id), then COMPOUND arguments. Several
/// COMPOUNDs may follow each other, separated by the bytes `#CMP`, and run
/// in order on the same server.
pub fn run(data: &[u8]) {
    let Some((&opt, rest)) = data.split_first() else {
        return;
    };
    let uid = if opt & 1 != 0 { 0 } else { 1000 };
    crate::block_on(async {
        let n = server();
        let sid = session(&n).await.expect("session set up");
        for (i, part) in crate::split(rest, b"#CMP").into_iter().enumerate().take(8) {
            let mut args = part.to_vec();
            if opt & 2 == 0 {
                if let Some(at) = sequence_sessionid_at(&args) {
                    args[at..at + 16].copy_from_slice(&sid);
                }
            }
            call(&n, 10 + i as u32, uid, args.into()).await;
        }
    });
}
