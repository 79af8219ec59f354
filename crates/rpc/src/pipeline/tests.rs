//! The pipeline driven by byte vectors: no socket, no task, no clock but
//! the arrival time each test passes.

use super::*;
use crate::msg::{decode_reply, ReplyStatus};
use crate::observe::{NoStats, Observer};
use crate::program::{Procedure, Program};
use bytes::BufMut;
use std::sync::Mutex;

const PROG: u32 = 400_100;

static P1: Program = Program {
    prog: PROG,
    vers: 1,
    label: "test",
    slot_base: Some(5),
    unknown: Procedure::new("T_UNKNOWN", "", true),
    procs: &[
        Procedure::new("T_NULL", "NULL", true),
        Procedure::new("T_READ", "READ", true),
        Procedure::new("T_REMOVE", "REMOVE", false),
    ],
};
static P2: Program = Program { vers: 2, ..P1 };

struct Svc;

impl Service for Svc {
    fn programs(&self) -> &'static [&'static Program] {
        static ALL: &[&Program] = &[&P1, &P2];
        ALL
    }

    async fn call(&self, _: &CallContext, _: Decoder, _: &mut BytesMut) -> Result<(), CallError> {
        unreachable!("the pipeline never calls the procedure")
    }
}

/// Counts events.
#[derive(Default)]
struct Count(Mutex<Vec<Event>>);

impl Observer for Count {
    fn connection_opened(&self, _: std::net::IpAddr) -> Arc<dyn PeerStats> {
        Arc::new(NoStats)
    }
    fn count(&self, e: Event) {
        self.0.lock().unwrap().push(e);
    }
}

struct Fixture {
    drc: Drc,
    obs: Count,
    client: Arc<dyn PeerStats>,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            drc: Drc::new(16),
            obs: Count::default(),
            client: Arc::new(NoStats),
        }
    }

    fn pipeline(&self) -> Pipeline<'_, Svc> {
        Pipeline {
            svc: &Svc,
            drc: &self.drc,
            gss: None,
            obs: &self.obs,
            offload: inline,
        }
    }

    fn admit(&self, rec: Vec<u8>) -> Decision<Box<Admitted>> {
        self.admit_on(rec, false)
    }

    /// `zero_copy`: the connection's writer can splice.
    fn admit_on(&self, rec: Vec<u8>, zero_copy: bool) -> Decision<Box<Admitted>> {
        self.pipeline()
            .admit(Bytes::from(rec), self.arrival(zero_copy))
    }

    /// A record's arrival, now, on plain connection 1 from 192.0.2.7:800.
    fn arrival(&self, zero_copy: bool) -> Arrival<'_> {
        Arrival {
            xprtsec: Default::default(),
            tls_id: None,
            zero_copy,
            peer: "192.0.2.7:800".parse().unwrap(),
            conn_id: 1,
            client: &self.client,
            now: Instant::now(),
            back: None,
        }
    }

    /// [`Fixture::pipeline`] with RPCSEC_GSS served by `gss`.
    fn gss_pipeline<'a>(&'a self, gss: &'a GssServer) -> Pipeline<'a, Svc> {
        Pipeline {
            gss: Some(gss),
            ..self.pipeline()
        }
    }

    fn events(&self) -> Vec<Event> {
        self.obs.0.lock().unwrap().clone()
    }
}

fn call(xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    msg::encode_call(xid, prog, vers, proc_, &msg::none_verf(), &mut out);
    out.put_slice(args);
    out.to_vec()
}

/// The reply status of a record (mark stripped).
fn status(r: &Bytes) -> (u32, ReplyStatus) {
    assert_eq!(
        u32::from_be_bytes(r[..4].try_into().unwrap()),
        0x8000_0000 | (r.len() as u32 - 4),
        "one last fragment"
    );
    let (xid, st, _) = decode_reply(r.slice(4..)).unwrap();
    (xid, st)
}

/// `c` with the four bytes `at` replaced by `word` (a header made wrong).
fn with_word(mut c: Vec<u8>, at: std::ops::Range<usize>, word: u32) -> Vec<u8> {
    c[at].copy_from_slice(&word.to_be_bytes());
    c
}

/// A decision that must be a reply: why, and the reply's xid and status.
fn answered<T: std::fmt::Debug>(d: Decision<T>) -> (Answered, (u32, ReplyStatus)) {
    let (r, why) = reply(d);
    (why, status(&r))
}

fn reply<T: std::fmt::Debug>(d: Decision<T>) -> (Bytes, Answered) {
    match d {
        Decision::Reply { bytes, why } => (bytes, why),
        d => panic!("expected a reply, got {d:?}"),
    }
}

#[test]
fn null_is_answered_by_the_pipeline() {
    let f = Fixture::new();
    let (r, why) = reply(f.admit(call(9, PROG, 1, 0, &[])));
    assert_eq!(why, Answered::Null { slot: Some(5) });
    assert_eq!(status(&r), (9, ReplyStatus::Success));
    assert_eq!(r.len(), 4 + 24, "header only: void results");
    assert!(f.events().is_empty());
}

#[test]
fn wrong_rpc_version_gets_rpc_mismatch() {
    let f = Fixture::new();
    let c = with_word(call(10, PROG, 1, 1, &[]), 8..12, 3);
    let (why, st) = answered(f.admit(c));
    assert_eq!(why, Answered::RpcMismatch);
    assert_eq!(st, (10, ReplyStatus::RpcMismatch(2, 2)));
    assert_eq!(f.events(), [Event::BadCall]);
}

#[test]
fn unknown_program_gets_prog_unavail() {
    let f = Fixture::new();
    let (why, st) = answered(f.admit(call(11, PROG + 1, 1, 1, &[])));
    assert_eq!(why, Answered::ProgUnavail);
    assert_eq!(st, (11, ReplyStatus::Accepted(AcceptStat::PROG_UNAVAIL)));
}

#[test]
fn version_out_of_range_gets_prog_mismatch_with_the_range() {
    let f = Fixture::new();
    for v in [0, 3] {
        let (why, st) = answered(f.admit(call(12, PROG, v, 1, &[])));
        assert_eq!(why, Answered::ProgMismatch);
        assert_eq!(st, (12, ReplyStatus::ProgMismatch(1, 2)));
    }
}

#[test]
fn garbage_header_gets_garbage_args() {
    let f = Fixture::new();
    // A CALL whose credential length runs past the record.
    let c = with_word(call(13, PROG, 1, 1, &[]), 28..32, 1000);
    let (r, why) = reply(f.admit(c));
    assert!(
        matches!(why, Answered::GarbageArgs | Answered::BadCred),
        "{why:?}"
    );
    let (xid, _) = status(&r);
    assert_eq!(xid, 13);
    // A header cut short after the xid and message type.
    let (why, st) = answered(f.admit(call(14, PROG, 1, 1, &[])[..12].to_vec()));
    assert_eq!(why, Answered::GarbageArgs);
    assert_eq!(st, (14, ReplyStatus::Accepted(AcceptStat::GARBAGE_ARGS)));
}

#[test]
fn reply_sent_to_the_server_and_scraps_are_dropped() {
    let f = Fixture::new();
    // A REPLY (message type 1) goes to the driver, which knows whether a
    // call waits for it.
    let c = with_word(call(15, PROG, 1, 1, &[]), 4..8, 1);
    match f.admit(c.clone()) {
        Decision::CallbackReply { xid, record } => assert_eq!((xid, &record[..]), (15, &c[..])),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        f.admit(vec![1, 2]),
        Decision::Drop {
            why: Dropped::Unreadable,
            close: false
        }
    ));
    // The driver counts a REPLY only if no call waited for it.
    assert_eq!(f.events(), [Event::BadCall]);
}

/// Admits and prepares a call: its ready state and arguments.
fn run(f: &Fixture, rec: Vec<u8>) -> (Ready, Decoder) {
    let Decision::Run(a) = f.admit(rec) else {
        panic!("not admitted")
    };
    match f.pipeline().prepare(a) {
        Decision::Run(r) => r,
        d => panic!("not prepared: {d:?}"),
    }
}

#[test]
fn a_call_runs_with_its_context_and_arguments() {
    let f = Fixture::new();
    let (mut r, args) = run(&f, call(16, PROG, 2, 1, &[0, 0, 0, 42]));
    assert_eq!(
        (r.ctx.xid, r.ctx.prog, r.ctx.vers, r.ctx.proc_),
        (16, PROG, 2, 1)
    );
    assert_eq!((r.slot, r.bytes_in), (Some(6), 44));
    assert!(r.runs_procedure());
    assert_eq!(&args.rest()[..], &[0, 0, 0, 42]);
    let mut out = r.begin_reply();
    out.put_u32(7);
    let done = f.pipeline().finish(&r, Ok(()), out);
    assert_eq!(done.status, 0);
    let rep = done.reply.unwrap();
    assert_eq!(status(&rep), (16, ReplyStatus::Success));
    assert_eq!(&rep[rep.len() - 4..], &[0, 0, 0, 7]);
}

/// A connection whose client certificate maps to a user: its AUTH_SYS
/// calls run as that user, whatever ids they carry.
#[test]
fn mapped_tls_identity_replaces_auth_sys_ids() {
    let f = Fixture::new();
    let cred = OpaqueAuth {
        flavor: proto::rpc::AUTH_SYS,
        body: xdr::to_bytes(&proto::rpc::AuthsysParms {
            stamp: 1,
            machinename: Bytes::from_static(b"h"),
            uid: 0,
            gid: 0,
            gids: vec![0, 10],
        }),
    };
    let mut rec = BytesMut::new();
    msg::encode_call(21, PROG, 1, 1, &cred, &mut rec);
    let id = Arc::new(crate::tls::identity::TlsIdentity {
        subject: "CN=guest".into(),
        rule: "CN=guest".into(),
        uid: 1234,
        gid: 1234,
        gids: vec![5000],
    });
    let admit = |tls_id| {
        let at = Arrival {
            xprtsec: crate::transport::XprtSec::Mtls,
            tls_id,
            ..f.arrival(false)
        };
        let Decision::Run(a) = f.pipeline().admit(rec.clone().freeze(), at) else {
            panic!("not admitted")
        };
        match a.ctx.auth.clone() {
            Auth::Sys(s) => (s.uid, s.gid, s.gids),
            a => panic!("{a:?}"),
        }
    };
    assert_eq!(admit(Some(&id)), (1234, 1234, vec![5000]));
    assert_eq!(admit(None), (0, 0, vec![0, 10]));
}

#[test]
fn rpc_errors_replace_the_results_and_carry_their_status() {
    let f = Fixture::new();
    let (mut r, _) = run(&f, call(17, PROG, 1, 1, &[]));
    let mut out = r.begin_reply();
    out.put_u32(99); // discarded
    let done = f.pipeline().finish(&r, Err(CallError::ProcUnavail), out);
    assert_eq!(done.status, observe::RPC_PROC_UNAVAIL);
    assert_eq!(
        status(&done.reply.unwrap()),
        (17, ReplyStatus::Accepted(AcceptStat::PROC_UNAVAIL))
    );
    let (mut r, _) = run(&f, call(18, PROG, 1, 1, &[]));
    let out = r.begin_reply();
    let done = f.pipeline().finish(&r, Err(CallError::Drop), out);
    assert_eq!((done.reply, done.status), (None, observe::RPC_DROPPED));
}

#[test]
fn non_idempotent_retransmission_is_dropped_then_answered_from_the_cache() {
    let f = Fixture::new();
    let c = call(20, PROG, 1, 2, &[0, 0, 0, 1]);
    let (mut r, _) = run(&f, c.clone());
    // The original is still executing.
    assert!(matches!(
        f.admit(c.clone()),
        Decision::Drop {
            why: Dropped::DrcInProgress,
            close: false
        }
    ));
    let mut out = r.begin_reply();
    out.put_u32(5);
    let done = f.pipeline().finish(&r, Ok(()), out);
    let (cached, why) = reply(f.admit(c.clone()));
    assert_eq!(why, Answered::DrcHit);
    assert_eq!(Some(cached), done.reply);
    assert_eq!(f.events(), [Event::DrcInProgress, Event::DrcHit]);
    // Different arguments under the same xid: a new call.
    assert!(matches!(
        f.admit(call(20, PROG, 1, 2, &[0, 0, 0, 2])),
        Decision::Run(_)
    ));
}

#[test]
fn idempotent_calls_and_skipped_entries_are_not_cached() {
    let f = Fixture::new();
    let c = call(21, PROG, 1, 1, &[]);
    let _running = run(&f, c.clone());
    assert!(matches!(f.admit(c), Decision::Run(_)), "READ runs again");
    let c = call(22, PROG, 1, 2, &[]);
    let (mut r, _) = run(&f, c.clone());
    r.ctx.skip_cache();
    let out = r.begin_reply();
    f.pipeline().finish(&r, Ok(()), out);
    assert!(
        matches!(f.admit(c), Decision::Run(_)),
        "the entry was dropped"
    );
}

/// An RPCSEC_GSS call (AUTH_NONE verifier; these are refused before it matters).
fn gss_call(xid: u32, proc_: u32, gss_proc: proto::gss::RpcGssProcT, handle: &[u8]) -> Vec<u8> {
    let cred = crate::gss::GssCred {
        proc_: gss_proc,
        seq: 1,
        service: GssService::None,
        handle: Bytes::copy_from_slice(handle),
    }
    .encode();
    let mut out = BytesMut::new();
    msg::encode_call(xid, PROG, 1, proc_, &cred, &mut out);
    out.to_vec()
}

#[test]
fn gss_calls_on_unknown_contexts_or_procedures_are_refused_at_admission() {
    use proto::gss::RpcGssProcT::*;
    let f = Fixture::new();
    let g = GssServer::with_cred(Default::default(), None);
    let (p, at) = (f.gss_pipeline(&g), f.arrival(false));
    let admit = |rec: Vec<u8>| reply(p.admit(Bytes::from(rec), at));
    // DATA on a handle this server never gave out.
    let (r, why) = admit(gss_call(30, 1, RPCSEC_GSS_DATA, &[0; 8]));
    assert_eq!(why, Answered::AuthError);
    assert_eq!(
        status(&r),
        (30, ReplyStatus::AuthError(AuthStat::RPCSEC_GSS_CREDPROBLEM))
    );
    // INIT is a call to NULL only.
    let (r, _) = admit(gss_call(31, 1, RPCSEC_GSS_INIT, &[]));
    assert_eq!(
        status(&r),
        (31, ReplyStatus::AuthError(AuthStat::AUTH_BADCRED))
    );
    // Without GSS configured, the flavor itself is refused.
    let (r, _) = reply(f.admit(gss_call(32, 1, RPCSEC_GSS_DATA, &[0; 8])));
    assert_eq!(
        status(&r),
        (32, ReplyStatus::AuthError(AuthStat::AUTH_BADCRED))
    );
    assert_eq!(f.events(), [Event::BadCall, Event::BadCall, Event::BadCall]);
}

#[test]
fn gss_init_with_garbage_arguments_gets_garbage_args_from_prepare() {
    use proto::gss::RpcGssProcT::*;
    let f = Fixture::new();
    let g = GssServer::with_cred(Default::default(), None);
    let (p, at) = (f.gss_pipeline(&g), f.arrival(false));
    // INIT to NULL is admitted (even though proc 0) and answered by prepare.
    let Decision::Run(a) = p.admit(Bytes::from(gss_call(33, 0, RPCSEC_GSS_INIT, &[])), at) else {
        panic!("INIT not admitted")
    };
    let (why, st) = answered(p.prepare(a));
    assert_eq!(why, Answered::GarbageArgs, "no init token");
    assert_eq!(st, (33, ReplyStatus::Accepted(AcceptStat::GARBAGE_ARGS)));
}

/// The pipeline is pure: its sources use no runtime, socket, file or clock.
#[test]
fn pipeline_sources_do_no_io() {
    let sources = [
        ("mod.rs", include_str!("mod.rs")),
        ("gss.rs", include_str!("gss.rs")),
    ];
    let banned = [
        "tokio",
        "std::net::TcpStream",
        "TcpListener",
        "UdpSocket",
        "std::fs",
        "File::",
        "Instant::now",
        "SystemTime::now",
        "thread::spawn",
        "block_in_place",
    ];
    for (name, src) in sources {
        // The doc comments may name what the driver does.
        let code: String = src
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for b in banned {
            assert!(!code.contains(b), "pipeline/{name} uses {b}");
        }
    }
}

/// Admits and prepares a call on a connection that can splice.
fn run_zero_copy(f: &Fixture, rec: Vec<u8>) -> Ready {
    let Decision::Run(a) = f.admit_on(rec, true) else {
        panic!("not admitted")
    };
    match f.pipeline().prepare(a) {
        Decision::Run((r, _)) => {
            assert!(r.ctx.zero_copy());
            r
        }
        d => panic!("not prepared: {d:?}"),
    }
}

/// A reply that carries file data in a pipe: its record mark counts the
/// data, the DRC does not keep it, and an error reply lets go of it.
#[test]
fn attached_data_is_counted_in_the_record_and_never_cached() {
    let Some(pipe) = crate::zero_copy::Pipe::get() else {
        return; // this kernel makes no 1 MiB pipe: READs copy
    };
    let f = Fixture::new();
    let c = call(23, PROG, 1, 2, &[]);
    let mut r = run_zero_copy(&f, c.clone());
    let mut out = r.begin_reply();
    out.put_u32(9);
    // 100 bytes at the end of the results, then 2 bytes after them (the
    // pipe itself is empty: the writer, not the pipeline, reads it).
    r.ctx.attach(out.len(), 100, pipe);
    let at = out.len();
    out.put_u16(0);
    assert_eq!(r.ctx.attached_len(), 100);
    let done = f.pipeline().finish(&r, Ok(()), out);
    let rep = done.reply.unwrap();
    let att = done
        .attached
        .expect("the attachment travels with the reply");
    assert_eq!((att.at, att.len), (at, 100));
    let mark = u32::from_be_bytes(rep[..4].try_into().unwrap());
    assert_eq!(mark, 0x8000_0000 | (rep.len() as u32 - 4 + 100));
    assert!(
        matches!(f.admit(c), Decision::Run(_)),
        "a non-idempotent call with attached data is not cached"
    );
    drop(att);

    // A procedure error: the attachment is dropped with the results.
    let Some(pipe) = crate::zero_copy::Pipe::get() else {
        return;
    };
    let mut r = run_zero_copy(&f, call(24, PROG, 1, 1, &[]));
    let out = r.begin_reply();
    r.ctx.attach(out.len(), 10, pipe);
    let done = f.pipeline().finish(&r, Err(CallError::SystemErr), out);
    assert!(done.attached.is_none());
    assert_eq!(status(&done.reply.unwrap()).0, 24);
}

#[test]
fn the_driver_decides_whether_data_may_be_attached() {
    let f = Fixture::new();
    let (r, _) = run(&f, call(25, PROG, 1, 1, &[]));
    assert!(!r.ctx.zero_copy(), "the fixture's connection cannot splice");
    let Decision::Run(a) = f.admit_on(call(26, PROG, 1, 1, &[]), true) else {
        panic!("not admitted")
    };
    assert!(a.ctx.zero_copy());
}
