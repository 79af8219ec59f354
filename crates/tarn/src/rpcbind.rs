//! Registration with a local rpcbind, when one runs. Tarn does not need it
//! (MOUNT shares the NFS port), but clients that ask rpcbind find us.

use proto::pmap::{
    Mapping, IPPROTO_TCP, PMAPPROC_SET, PMAPPROC_UNSET, PMAP_PORT, PMAP_PROG, PMAP_VERS,
};
use rpc::client::{auth_none, RpcClient};
use std::net::SocketAddr;
use std::time::Duration;
use xdr::Unpack;

/// NLM only as version 4 (what NFSv3 clients use); NSM so that a rebooted
/// client's statd can reach us. A system rpc.statd on this host would hold
/// 100024 itself: run Tarn's host without one.
const PROGRAMS: &[(u32, u32)] = &[
    (proto::nfs3::NFS_PROGRAM, 3),
    (proto::mount::MOUNT_PROGRAM, 3),
    (proto::nlm4::NLM_PROG, 4),
    (proto::nsm::SM_PROG, 1),
];

async fn client() -> Option<RpcClient> {
    let addr = SocketAddr::from(([127, 0, 0, 1], PMAP_PORT as u16));
    tokio::time::timeout(
        Duration::from_secs(1),
        RpcClient::connect(addr, auth_none()),
    )
    .await
    .ok()?
    .ok()
}

fn tcp_mapping(prog: u32, vers: u32, port: u16) -> Mapping {
    Mapping {
        prog,
        vers,
        prot: IPPROTO_TCP,
        port: port as u32,
    }
}

/// Registers NFS v3, MOUNT v3, NLM v4 and NSM v1 on `port`; returns whether rpcbind took them.
pub async fn register(port: u16) -> Result<(), String> {
    let c = client().await.ok_or("no rpcbind on 127.0.0.1:111")?;
    for &(prog, vers) in PROGRAMS {
        let m = tcp_mapping(prog, vers, port);
        // A stale mapping from an earlier run would make SET fail.
        let _ = c.call(PMAP_PROG, PMAP_VERS, PMAPPROC_UNSET, &m).await;
        let mut d = c
            .call(PMAP_PROG, PMAP_VERS, PMAPPROC_SET, &m)
            .await
            .map_err(|e| e.to_string())?;
        if !bool::unpack(&mut d).map_err(|e| e.to_string())? {
            return Err(format!("rpcbind refused program {prog} version {vers}"));
        }
    }
    Ok(())
}

pub async fn unregister(port: u16) {
    if let Some(c) = client().await {
        for &(prog, vers) in PROGRAMS {
            let m = tcp_mapping(prog, vers, port);
            let _ = c.call(PMAP_PROG, PMAP_VERS, PMAPPROC_UNSET, &m).await;
        }
    }
}
