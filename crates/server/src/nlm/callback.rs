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
}

impl Default for RpcCallback {
    fn default() -> Self {
        RpcCallback {
            port: None,
            timeout: Duration::from_secs(5),
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
            // The client's statd matches the name against the server it
            // monitors; the address it reaches us at is the name it used.
            let me = c.local_addr().ip().to_string();
            let args = StatChge {
                mon_name: bytes::Bytes::from(me),
                state,
            };
            tokio::time::timeout(self.timeout, c.call(SM_PROG, SM_VERS, SM_NOTIFY, &args))
                .await
                .map_err(|_| format!("SM_NOTIFY to {to} timed out"))?
                .map_err(|e| format!("SM_NOTIFY to {to}: {e}"))?;
            Ok(())
        })
    }
}
