//! NFSv3 client (RFC 1813), with MOUNT v3 and NLM v4.
//!
//! - [`Nfs3`]: one TCP connection to the NFS program (AUTH_SYS, or
//!   RPCSEC_GSS krb5/krb5i/krb5p with contexts renewed ahead of expiry,
//!   the same [`GssSec`](crate::nfs4::GssSec) as NFSv4), many calls in
//!   flight on it. Exports are mounted as paths reach them: MNT of the
//!   longest export enclosing the path (from EXPORT), its flavor list
//!   checked against the caller's choice.
//! - `mount.rs`: MOUNT and portmapper calls; MOUNT and NLM are tried on
//!   the NFS port first (Tarn serves them there), then where the
//!   portmapper on port 111 says (knfsd, NFS-Ganesha).
//! - `ops.rs`: one method per NFSv3 procedure.
//! - `nlm.rs`: byte-range locks with NLM4, non-blocking, retried, and
//!   reclaimed after a server restart (seen on a new connection).
//!
//! rsize and wsize are FSINFO's rtmax and wtmax of the first export
//! mounted, capped at 1 MiB. Connections come from a reserved source
//! port when the process may bind one (knfsd's `secure` exports want it).

pub mod error;
pub mod mount;
pub mod nlm;
pub mod ops;

pub use error::{describe, describe_nlm, Error, Nfs3Error, Result};
pub use nlm::{HeldNlmLock, LockOwner, LockRange};
pub use ops::{sattr_mode, DirEntry3, Written};

use crate::nfs4::{GssSec, GssTarget, Security};
use proto::nfs3::{NfsFh3, NFS_PROGRAM, NFS_V3};
use rpc::client::{auth_none, auth_sys, Channel, ChannelOptions, RpcClient};
use rpc::gss::GssService;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest READ or WRITE asked for, whatever the server allows.
pub const MAX_IO: u32 = 1 << 20;

/// How long a directory's handle is used for paths through it without
/// LOOKUP (as the Linux client's dentry cache trusts a directory for its
/// attribute cache time): a tree of files costs one LOOKUP per file, not
/// one per component. RENAME and RMDIR through this client forget them all.
pub const DIR_CACHE_TTL: Duration = Duration::from_secs(5);

/// How to reach the server and who to be.
#[derive(Clone, Debug)]
pub struct Nfs3Options {
    pub security: Security,
    /// The AUTH_SYS identity of MOUNT and NLM calls (they go under
    /// AUTH_SYS also when NFS calls use Kerberos, as with the Linux client).
    pub sys_ids: (u32, u32),
    /// The name this host gives itself (AUTH_SYS machine name, NLM caller_name).
    pub machine: String,
    /// MOUNT's port when known (libnfs's `mountport=`): neither the NFS
    /// port nor the portmapper is asked.
    pub mount_port: Option<u16>,
    /// How NFS calls travel: connections (nconnect), timeo/retrans,
    /// hard or soft. A lost connection is made again and its calls resent
    /// with the same xid, so the server's duplicate request cache answers
    /// a call it already executed. Connections come from a reserved port
    /// when the process may bind one.
    pub transport: ChannelOptions,
}

pub struct Nfs3 {
    addr: SocketAddr,
    opts: Nfs3Options,
    ch: Channel,
    gss: Option<Arc<GssSec>>,
    mountc: RpcClient,
    /// Mounted exports and their root handles.
    mounts: Mutex<Vec<(String, NfsFh3)>>,
    /// EXPORT's answer; empty when the server did not give one.
    exports: Vec<String>,
    rtmax: AtomicU32,
    wtmax: AtomicU32,
    nlm: Arc<nlm::NlmClient>,
    /// Directory handles by path, and when they were looked up.
    dirs: Mutex<HashMap<String, (NfsFh3, Instant)>>,
}

impl std::fmt::Debug for Nfs3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nfs3").field("addr", &self.addr).finish()
    }
}

/// The flavor MNT must list for `security`.
fn wanted_flavor(s: &Security) -> i32 {
    match s {
        Security::Sys { .. } => mount::AUTH_SYS,
        Security::Krb5 { service, .. } => match service {
            GssService::None => mount::KRB5,
            GssService::Integrity => mount::KRB5I,
            GssService::Privacy => mount::KRB5P,
        },
    }
}

impl Nfs3 {
    /// Finds MOUNT, mounts the export holding `path` (checking that it
    /// takes the asked flavor), connects to NFS and asks FSINFO for the
    /// transfer sizes.
    pub async fn connect(addr: SocketAddr, opts: Nfs3Options, path: &str) -> Result<Nfs3> {
        let (uid, gid) = opts.sys_ids;
        let cred = auth_sys(uid, gid, &[gid], &opts.machine);
        let mountc = mount::locate_tls(
            addr,
            proto::mount::MOUNT_PROGRAM,
            proto::mount::MOUNT_V3,
            cred,
            opts.transport.tls.as_ref(),
        )
        .await?;
        // A server may hide its export list; MNT of the path's ancestors then.
        let exports = mount::exports(&mountc).await.unwrap_or_default();
        let (export, root, flavors) = first_mount(&mountc, &exports, path).await?;
        mount::check_flavor(&export, wanted_flavor(&opts.security), &flavors)?;
        let transport = ChannelOptions {
            reserved_port: true,
            ..opts.transport.clone()
        };
        let (ch, gss) = match &opts.security {
            Security::Sys { uid, gid } => {
                let cred = auth_sys(*uid, *gid, &[*gid], &opts.machine);
                (Channel::connect(addr, cred, transport).await?, None)
            }
            Security::Krb5 {
                service,
                target,
                renew,
            } => {
                let ch = Channel::connect(addr, auth_none(), transport).await?;
                let t = GssTarget {
                    prog: NFS_PROGRAM,
                    vers: NFS_V3,
                    service: *service,
                    target,
                    policy: *renew,
                };
                let g = GssSec::establish_channel(ch.clone(), t).await?;
                (ch, Some(g))
            }
        };
        let nlm = Arc::new(nlm::NlmClient::new(
            addr,
            opts.machine.clone(),
            auth_sys(uid, gid, &[gid], &opts.machine),
            opts.transport.tls.clone(),
        ));
        let c = Nfs3 {
            addr,
            opts,
            ch,
            gss,
            mountc,
            mounts: Mutex::new(vec![(export, root.clone())]),
            exports,
            rtmax: AtomicU32::new(MAX_IO),
            wtmax: AtomicU32::new(MAX_IO),
            nlm,
            dirs: Mutex::default(),
        };
        // A connection made again may reach a restarted server: locks
        // held are reclaimed in its grace period (see `nlm.rs`).
        let w = Arc::downgrade(&c.nlm);
        c.ch.set_connect_hook(Arc::new(move |_, _| {
            if let Some(n) = w.upgrade() {
                tokio::spawn(async move { n.check_reboot().await });
            }
            Box::pin(async {})
        }));
        let fi = c.fsinfo(&root).await?;
        let cap = |n: u32| if n == 0 { MAX_IO } else { n.min(MAX_IO) };
        c.rtmax.store(cap(fi.rtmax), Ordering::Relaxed);
        c.wtmax.store(cap(fi.wtmax), Ordering::Relaxed);
        Ok(c)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn options(&self) -> &Nfs3Options {
        &self.opts
    }

    /// The channel NFS calls go over (retransmissions, reconnects).
    pub fn channel(&self) -> &Channel {
        &self.ch
    }

    /// The RPCSEC_GSS layer, when NFS calls go under it.
    pub fn gss(&self) -> Option<&Arc<GssSec>> {
        self.gss.as_ref()
    }

    /// Largest READ: the server's rtmax, at most [`MAX_IO`].
    pub fn rsize(&self) -> u32 {
        self.rtmax.load(Ordering::Relaxed)
    }

    /// Largest WRITE: the server's wtmax, at most [`MAX_IO`].
    pub fn wsize(&self) -> u32 {
        self.wtmax.load(Ordering::Relaxed)
    }

    /// The exports mounted so far.
    pub fn mounted(&self) -> Vec<String> {
        self.mounts
            .lock()
            .unwrap()
            .iter()
            .map(|(e, _)| e.clone())
            .collect()
    }

    /// The root handle of the export holding `path` (mounting it on first
    /// use) and the components of `path` below it.
    pub async fn root_for(&self, path: &str) -> Result<(NfsFh3, Vec<String>)> {
        let rest = |export: &str| -> Vec<String> {
            path[export.trim_end_matches('/').len().min(path.len())..]
                .split('/')
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        };
        let wanted = mount::export_for(path, &self.exports).map(String::from);
        {
            let m = self.mounts.lock().unwrap();
            let hit = m
                .iter()
                .filter(|(e, _)| match &wanted {
                    Some(w) => e == w,
                    None => mount::under(path, e),
                })
                .max_by_key(|(e, _)| e.len());
            if let Some((e, fh)) = hit {
                return Ok((fh.clone(), rest(e)));
            }
        }
        let (export, root, flavors) = first_mount(&self.mountc, &self.exports, path).await?;
        mount::check_flavor(&export, wanted_flavor(&self.opts.security), &flavors)?;
        self.mounts
            .lock()
            .unwrap()
            .push((export.clone(), root.clone()));
        Ok((root, rest(&export)))
    }

    /// UMNT of every export mounted (the server's mount list is advisory:
    /// failures change nothing).
    pub async fn unmount_all(&self) {
        let exports = self.mounted();
        for e in exports {
            // Bounded: MOUNT's connection is not a retransmitting channel,
            // and a server that restarted never answers on the old one.
            let _ =
                tokio::time::timeout(Duration::from_secs(5), mount::umnt(&self.mountc, &e)).await;
        }
        self.mounts.lock().unwrap().clear();
    }

    fn remembered_dir(&self, path: &str) -> Option<NfsFh3> {
        let d = self.dirs.lock().unwrap();
        d.get(path)
            .filter(|(_, at)| at.elapsed() < DIR_CACHE_TTL)
            .map(|(fh, _)| fh.clone())
    }

    fn remember_dir(&self, path: String, fh: &NfsFh3) {
        let mut d = self.dirs.lock().unwrap();
        if d.len() > 4096 {
            d.retain(|_, (_, at)| at.elapsed() < DIR_CACHE_TTL);
        }
        d.insert(path, (fh.clone(), Instant::now()));
    }

    /// Forgets every remembered directory handle.
    pub fn forget_dirs(&self) {
        self.dirs.lock().unwrap().clear();
    }
}

/// MNT of the export holding `path`: the longest listed export enclosing
/// it, or without a list, `path` and then each ancestor until one mounts.
async fn first_mount(
    c: &RpcClient,
    exports: &[String],
    path: &str,
) -> Result<(String, NfsFh3, Vec<i32>)> {
    let candidates = match mount::export_for(path, exports) {
        Some(e) => vec![e.to_string()],
        None if !exports.is_empty() => {
            return Err(Error::Setup(format!(
                "{path}: not under any export of the server (exports: {})",
                exports.join(", ")
            )))
        }
        None => mount::ancestors(path),
    };
    let mut last = None;
    for e in candidates {
        match mount::mnt(c, &e).await {
            Ok((fh, flavors)) => return Ok((e, NfsFh3 { data: fh }, flavors)),
            Err(err @ Error::Mount { .. }) => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| Error::Setup(format!("{path}: nothing to mount"))))
}
