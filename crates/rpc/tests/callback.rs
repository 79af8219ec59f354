//! Calls from the server back to the client over the client's own
//! connection (the NFSv4.1 back channel): the server sends a CALL on the
//! connection a call came on, and the client's REPLY reaches the caller.

use bytes::{BufMut, Bytes, BytesMut};
use rpc::msg::{self, ReplyStatus};
use rpc::{record, CallContext, CallError, Server, ServerConfig, Service};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::{Decoder, Unpack};

const PROG: u32 = 400001;
const CB_PROG: u32 = 0x4000_0123;

/// Procedure 1 calls the client back with its argument and answers what
/// the client answered plus one (or 0xdead when the call back failed).
struct Caller;

impl Service for Caller {
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        (prog == PROG).then_some((1, 1))
    }
    fn procedure_name(&self, _: u32, _: u32, _: u32) -> &'static str {
        "CALL_BACK"
    }
    async fn call(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        let n = u32::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
        let back = ctx.back.as_ref().ok_or(CallError::SystemErr)?;
        let r = back
            .call(
                CB_PROG,
                1,
                1,
                msg::none_verf(),
                Bytes::copy_from_slice(&n.to_be_bytes()),
                Duration::from_secs(5),
            )
            .await;
        match r {
            Ok(res) => {
                let mut d = Decoder::new(res);
                out.put_u32(u32::unpack(&mut d).unwrap() + 1);
            }
            Err(_) => out.put_u32(0xdead),
        }
        Ok(())
    }
}

async fn start() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let s = Server::new(Arc::new(Caller), ServerConfig::default());
    tokio::spawn(async move { s.run(l).await });
    addr
}

fn marked(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut out = BytesMut::new();
    record::begin(&mut out);
    f(&mut out);
    record::finish(&mut out);
    out.to_vec()
}

/// Writes one record, made by `f`.
async fn send(s: &mut TcpStream, f: impl FnOnce(&mut BytesMut)) {
    s.write_all(&marked(f)).await.unwrap();
}

/// Sends procedure 1 (call back with `n`) as call `xid`.
async fn call_back_with(s: &mut TcpStream, xid: u32, n: u32) {
    send(s, |o| {
        msg::encode_call(xid, PROG, 1, 1, &msg::none_verf(), o);
        o.put_u32(n);
    })
    .await
}

async fn read_record(s: &mut TcpStream) -> Bytes {
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark).await.unwrap();
    let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
    let mut b = vec![0; len];
    s.read_exact(&mut b).await.unwrap();
    b.into()
}

#[tokio::test]
async fn the_server_calls_back_on_the_callers_connection() {
    let addr = start().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // A stray REPLY is ignored and does not close the connection.
    send(&mut s, |o| msg::success_header(77, o)).await;
    call_back_with(&mut s, 5, 20).await;
    // The server's call comes first, on this connection.
    let cb = msg::decode_call(read_record(&mut s).await).unwrap();
    assert_eq!((cb.prog, cb.vers, cb.proc_), (CB_PROG, 1, 1));
    let mut args = cb.args;
    assert_eq!(u32::unpack(&mut args).unwrap(), 20);
    send(&mut s, |o| {
        msg::success_header(cb.xid, o);
        o.put_u32(40);
    })
    .await;
    let (xid, st, mut d) = msg::decode_reply(read_record(&mut s).await).unwrap();
    assert_eq!((xid, st), (5, ReplyStatus::Success));
    assert_eq!(u32::unpack(&mut d).unwrap(), 41);
}

#[tokio::test]
async fn a_refused_call_back_reaches_the_caller() {
    let addr = start().await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    call_back_with(&mut s, 6, 1).await;
    let cb = msg::decode_call(read_record(&mut s).await).unwrap();
    send(&mut s, |o| {
        msg::accepted_error(cb.xid, proto::rpc::AcceptStat::PROG_UNAVAIL, o)
    })
    .await;
    let (_, _, mut d) = msg::decode_reply(read_record(&mut s).await).unwrap();
    assert_eq!(u32::unpack(&mut d).unwrap(), 0xdead);
}
