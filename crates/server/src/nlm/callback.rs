//! Calls from the server to a client host: NLMPROC4_GRANTED to its lockd,
//! SM_NOTIFY to its statd. Both are found through the client's rpcbind
//! (port 111), unless a fixed port is configured (tests run one listener).

use proto::nlm4::{Nlm4Res, Nlm4Stats, Nlm4Testargs, NLMPROC4_GRANTED, NLM_PROG};
use proto::nsm::{StatChge, SM_NOTIFY, SM_PROG, SM_VERS};
use proto::pmap::{Mapping, IPPROTO_TCP, PMAPPROC_GETPORT, PMAP_PORT, PMAP_PROG, PMAP_VERS};
use rpc::client::{auth_sys, RpcClient};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;
use xdr::Unpack;

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The calls the NLM service makes to clients; a trait so handler tests
/// can record them instead of using the network.
pub trait Callback: Send + Sync + 'static {
    /// NLMPROC4_GRANTED to the lockd at `to`; the client's answer.
    fn granted(&self, to: IpAddr, args: Nlm4Testargs) -> BoxFut<'_, Result<Nlm4Stats, String>>;
    /// SM_NOTIFY to the statd at `to`: this server is now at `state`.
    fn notify(&self, to: IpAddr, state: i32) -> BoxFut<'_, Result<(), String>>;
}

/// Calls over TCP, each on a fresh connection.
pub struct RpcCallback {
    /// Every callback goes to this port instead of asking rpcbind (tests).
    pub port: Option<u16>,
    pub timeout: Duration,
    /// The names clients know this server by (service addresses that move
    /// between heads, DNS names): SM_NOTIFY is sent with each as mon_name,
    /// as `sm-notify -v` does. Empty: the address the notice leaves from.
    pub names: Vec<String>,
}

impl Default for RpcCallback {
    fn default() -> Self {
        RpcCallback {
            port: None,
            timeout: Duration::from_secs(5),
            names: Vec::new(),
        }
    }
}

impl RpcCallback {
    async fn connect(&self, to: IpAddr, prog: u32, vers: u32) -> Result<RpcClient, String> {
        let port = match self.port {
            Some(p) => p,
            None => self.getport(to, prog, vers).await?,
        };
        // Linux lockd takes AUTH_UNIX or AUTH_NULL; statd does not look.
        let cred = auth_sys(0, 0, &[], "tarn");
        tokio::time::timeout(
            self.timeout,
            RpcClient::connect(SocketAddr::new(to, port), cred),
        )
        .await
        .map_err(|_| format!("connecting to {to}:{port} timed out"))?
        .map_err(|e| format!("{to}:{port}: {e}"))
    }

    async fn getport(&self, to: IpAddr, prog: u32, vers: u32) -> Result<u16, String> {
        let pm = tokio::time::timeout(
            self.timeout,
            RpcClient::connect(
                SocketAddr::new(to, PMAP_PORT as u16),
                rpc::client::auth_none(),
            ),
        )
        .await
        .map_err(|_| format!("rpcbind on {to} does not answer"))?
        .map_err(|e| format!("rpcbind on {to}: {e}"))?;
        let m = Mapping {
            prog,
            vers,
            prot: IPPROTO_TCP,
            port: 0,
        };
        let mut d = tokio::time::timeout(
            self.timeout,
            pm.call(PMAP_PROG, PMAP_VERS, PMAPPROC_GETPORT, &m),
        )
        .await
        .map_err(|_| format!("rpcbind on {to} timed out"))?
        .map_err(|e| format!("rpcbind on {to}: {e}"))?;
        match u32::unpack(&mut d).map_err(|e| e.to_string())? {
            0 => Err(format!(
                "program {prog} version {vers} is not registered on {to}"
            )),
            p => u16::try_from(p).map_err(|_| format!("rpcbind on {to} gave port {p}")),
        }
    }
}

impl Callback for RpcCallback {
    fn granted(&self, to: IpAddr, args: Nlm4Testargs) -> BoxFut<'_, Result<Nlm4Stats, String>> {
        Box::pin(async move {
            let c = self.connect(to, NLM_PROG, 4).await?;
            let mut d =
                tokio::time::timeout(self.timeout, c.call(NLM_PROG, 4, NLMPROC4_GRANTED, &args))
                    .await
                    .map_err(|_| format!("GRANTED to {to} timed out"))?
                    .map_err(|e| format!("GRANTED to {to}: {e}"))?;
            Ok(Nlm4Res::unpack(&mut d)
                .map_err(|e| e.to_string())?
                .stat
                .stat)
        })
    }

    fn notify(&self, to: IpAddr, state: i32) -> BoxFut<'_, Result<(), String>> {
        Box::pin(async move {
            let c = self.connect(to, SM_PROG, SM_VERS).await?;
            // The client's statd takes a notice whose mon_name, or whose
            // source address, is the server it monitors: the name it
            // mounted. Without configured names, the address we reach it
            // from, which is that name unless the server's address floats
            // (a notice from the head that took a service address over
            // leaves from the head's own address).
            let names = if self.names.is_empty() {
                vec![c.local_addr().ip().to_string()]
            } else {
                self.names.clone()
            };
            for me in names {
                let args = StatChge {
                    mon_name: bytes::Bytes::from(me),
                    state,
                };
                tokio::time::timeout(self.timeout, c.call(SM_PROG, SM_VERS, SM_NOTIFY, &args))
                    .await
                    .map_err(|_| format!("SM_NOTIFY to {to} timed out"))?
                    .map_err(|e| format!("SM_NOTIFY to {to}: {e}"))?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use rpc::{CallContext, CallError, Service};
    use std::sync::{Arc, Mutex};
    use xdr::Decoder;

    /// A client's statd: keeps the notices it gets.
    struct Statd(Mutex<Vec<StatChge>>);

    impl Service for Statd {
        fn versions(&self, prog: u32) -> Option<(u32, u32)> {
            (prog == SM_PROG).then_some((SM_VERS, SM_VERS))
        }
        fn idempotent(&self, _: u32, _: u32, _: u32) -> bool {
            true
        }
        fn procedure_name(&self, _: u32, _: u32, _: u32) -> &'static str {
            "statd"
        }
        async fn call(
            &self,
            _: &CallContext,
            mut args: Decoder,
            _: &mut BytesMut,
        ) -> Result<(), CallError> {
            let a = StatChge::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
            self.0.lock().unwrap().push(a);
            Ok(())
        }
    }

    async fn statd() -> (u16, Arc<Statd>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let s = Arc::new(Statd(Mutex::new(Vec::new())));
        let srv = rpc::Server::new(s.clone(), rpc::ServerConfig::default());
        tokio::spawn(async move { srv.run(l).await });
        (port, s)
    }

    fn heard(s: &Statd) -> Vec<(String, i32)> {
        s.0.lock()
            .unwrap()
            .iter()
            .map(|a| (String::from_utf8_lossy(&a.mon_name).into_owned(), a.state))
            .collect()
    }

    /// After a failover the notice leaves from the new head's own address,
    /// while the client monitors the service address it mounted: the
    /// configured names are what its statd matches.
    #[tokio::test]
    async fn sm_notify_names_the_server_as_its_clients_know_it() {
        let (port, s) = statd().await;
        let to: IpAddr = "127.0.0.1".parse().unwrap();
        let plain = RpcCallback {
            port: Some(port),
            ..Default::default()
        };
        plain.notify(to, 3).await.unwrap();
        assert_eq!(heard(&s), [("127.0.0.1".to_string(), 3)]);

        let (port, s) = statd().await;
        let named = RpcCallback {
            port: Some(port),
            names: vec!["10.0.0.10".into(), "nfs.example.com".into()],
            ..Default::default()
        };
        named.notify(to, 5).await.unwrap();
        assert_eq!(
            heard(&s),
            [
                ("10.0.0.10".to_string(), 5),
                ("nfs.example.com".to_string(), 5)
            ]
        );
    }
}
