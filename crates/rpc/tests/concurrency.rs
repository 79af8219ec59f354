//! Calls on one connection run concurrently and their replies go out in the
//! order they finish; non-idempotent calls are executed once per xid.

use bytes::{BufMut, BytesMut};
use rpc::client::{auth_none, RpcClient};
use rpc::{CallContext, CallError, Server, ServerConfig, Service};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use xdr::{Decoder, Unpack};

/// Program 400000 v1: procedure 1 sleeps for the number of milliseconds it is
/// given and echoes it; procedure 2 counts how often it ran (non-idempotent).
struct Sleeper {
    runs: AtomicU32,
}

impl Service for Sleeper {
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        (prog == 400000).then_some((1, 1))
    }
    fn idempotent(&self, _: u32, _: u32, proc_: u32) -> bool {
        proc_ != 2
    }
    fn procedure_name(&self, _: u32, _: u32, _: u32) -> &'static str {
        "SLEEP"
    }
    async fn call(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        match ctx.proc_ {
            1 => {
                let ms = u32::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                tokio::time::sleep(Duration::from_millis(ms as u64)).await;
                out.put_u32(ms);
            }
            2 => {
                out.put_u32(self.runs.fetch_add(1, Ordering::SeqCst) + 1);
            }
            _ => return Err(CallError::ProcUnavail),
        }
        Ok(())
    }
}

async fn start() -> (std::net::SocketAddr, Arc<Server<Sleeper>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let s = Server::new(
        Arc::new(Sleeper {
            runs: AtomicU32::new(0),
        }),
        ServerConfig::default(),
    );
    let s2 = s.clone();
    tokio::spawn(async move { s2.run(l).await });
    (addr, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_come_back_in_the_order_calls_finish() {
    let (addr, _s) = start().await;
    let c = Arc::new(RpcClient::connect(addr, auth_none()).await.unwrap());
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for ms in [400u32, 300, 200, 100, 0] {
        let (c, order) = (c.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let mut d = c.call(400000, 1, 1, &ms).await.unwrap();
            order.lock().unwrap().push(u32::unpack(&mut d).unwrap());
        }));
        tokio::time::sleep(Duration::from_millis(5)).await; // send in this order
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Sent longest first: only calls that run concurrently can finish shortest first.
    assert_eq!(*order.lock().unwrap(), vec![0, 100, 200, 300, 400]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_in_flight_on_one_connection() {
    let (addr, _s) = start().await;
    let c = Arc::new(RpcClient::connect(addr, auth_none()).await.unwrap());
    let mut tasks = Vec::new();
    for i in 0..2000u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut d = c.call(400000, 1, 1, &(i % 3)).await.unwrap();
            assert_eq!(u32::unpack(&mut d).unwrap(), i % 3);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_calls_in_flight() {
    let (addr, s) = start().await;
    let c = Arc::new(RpcClient::connect(addr, auth_none()).await.unwrap());
    let c2 = c.clone();
    let pending = tokio::spawn(async move {
        c2.call(400000, 1, 1, &300u32)
            .await
            .map(|mut d| u32::unpack(&mut d).unwrap())
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.shutdown().await;
    assert_eq!(
        pending.await.unwrap().unwrap(),
        300,
        "the call in flight was answered"
    );
}
