//! Whole records through the RPC call pipeline and Tarn's service, as the
//! server's connection driver runs them: record marking, call header,
//! credential, program and version, duplicate request cache, then MOUNT,
//! NFSv3, NLM, NSM or NFSv4 over an in-memory export. Every call whose
//! header decodes gets a reply with its xid.

use bytes::{Bytes, BytesMut};
use proto::nlm4::{Nlm4Stats, Nlm4Testargs};
use rpc::drc::Drc;
use rpc::msg::decode_reply;
use rpc::observe::{NoObserver, NoStats, PeerStats};
use rpc::pipeline::{Arrival, Decision, Dropped, Pipeline};
use rpc::record::{Assembler, DEFAULT_MAX_RECORD};
use rpc::Service;
use server::locks::LockManager;
use server::nlm::{nsm::Nsm, Callback, Nlm, NlmConfig};
use server::TarnService;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Lock clients that always take what they are granted.
struct Granted;

impl Callback for Granted {
    fn granted(&self, _: IpAddr, _: Nlm4Testargs) -> BoxFut<'_, Result<Nlm4Stats, String>> {
        Box::pin(std::future::ready(Ok(Nlm4Stats::NLM4_GRANTED)))
    }
    fn notify(&self, _: IpAddr, _: i32) -> BoxFut<'_, Result<(), String>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

fn service() -> TarnService {
    let nfs3 = crate::nfs3::server();
    let locks = Arc::new(LockManager::new());
    TarnService {
        nfs4: crate::nfs4::server_with(nfs3.live.clone(), locks.clone()),
        mount: server::mount::Mount::new(),
        nlm: Nlm::new(
            locks,
            Arc::new(Nsm::in_memory(1)),
            NlmConfig::default(),
            Arc::new(Granted),
        ),
        nfs3,
    }
}

/// Input: a byte stream as a client sends it on one connection.
pub fn run(data: &[u8]) {
    crate::block_on(async {
        let svc = service();
        let drc = Drc::new(64);
        let p = Pipeline {
            svc: &svc,
            drc: &drc,
            gss: None,
            obs: &NoObserver,
            offload: rpc::pipeline::inline,
        };
        let client: Arc<dyn PeerStats> = Arc::new(NoStats);
        let peer: SocketAddr = "127.0.0.1:700".parse().unwrap();
        let mut asm = Assembler::new(DEFAULT_MAX_RECORD);
        let mut buf = BytesMut::from(data);
        let mut n = 0;
        while let Ok(Some(rec)) = asm.next(&mut buf) {
            n += 1;
            if n > 32 {
                break;
            }
            let at = Arrival {
                peer,
                conn_id: 1,
                client: &client,
                now: Instant::now(),
                back: None,
                xprtsec: Default::default(),
                tls_id: None,
                // No writer here to splice READ data.
                zero_copy: false,
            };
            let is_call = rec.len() >= 8 && rec[4..8] == [0, 0, 0, 0];
            let xid = (rec.len() >= 4).then(|| u32::from_be_bytes(rec[..4].try_into().unwrap()));
            let reply = match p.admit(rec.clone(), at) {
                Decision::Reply { bytes, .. } => Some(bytes),
                Decision::Run(a) => match p.prepare(a) {
                    Decision::Reply { bytes, .. } => Some(bytes),
                    Decision::Run((mut ready, args)) => {
                        let mut out = ready.begin_reply();
                        let r = if ready.runs_procedure() {
                            svc.call(&ready.ctx, args, &mut out).await
                        } else {
                            Ok(())
                        };
                        p.finish(&ready, r, out).reply
                    }
                    Decision::Drop { why, .. } => {
                        assert!(!matches!(why, Dropped::Unreadable));
                        None
                    }
                    Decision::CallbackReply { .. } => panic!("a call prepared into a reply"),
                },
                Decision::Drop { why, .. } => {
                    // Only what has no xid, or a retransmission of a call
                    // still running (none here: calls run one at a time).
                    assert!(matches!(why, Dropped::Unreadable), "{why:?}");
                    None
                }
                Decision::CallbackReply { .. } => {
                    assert!(!is_call);
                    None
                }
            };
            match reply {
                Some(r) => {
                    // A whole record: mark, then a reply with the call's xid.
                    let mut a = Assembler::new(usize::MAX >> 1);
                    let mut rb = BytesMut::from(&r[..]);
                    let body = a
                        .next(&mut rb)
                        .unwrap()
                        .expect("the reply is one whole record");
                    assert!(rb.is_empty());
                    let (rx, _, _) = decode_reply(body).expect("the reply decodes");
                    assert_eq!(Some(rx), xid);
                }
                None => assert!(!is_call || xid.is_none() || !replies_expected(&rec)),
            }
        }
    });
}

/// Calls the service may deliberately leave unanswered: the procedure asked
/// to drop it (NLM's asynchronous _MSG and _RES procedures have no reply).
fn replies_expected(rec: &Bytes) -> bool {
    match rpc::msg::decode_call(rec.clone()) {
        Ok(c) => !(c.prog == proto::nlm4::NLM_PROG && (6..=15).contains(&c.proc_)),
        Err(_) => true,
    }
}
