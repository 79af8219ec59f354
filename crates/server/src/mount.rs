//! MOUNT v3 (RFC 1813 appendix I): hands out root handles of exports and
//! keeps the list of mounts that DUMP reports (advisory, as on every server).

use crate::nfs3::Nfs3;
use bytes::{Bytes, BytesMut};
use proto::mount::*;
use rpc::{CallContext, CallError};
use std::collections::BTreeSet;
use std::sync::Mutex;
use tracing::{info, warn};
use xdr::{Decoder, Pack, Unpack};

pub struct Mount {
    /// (client address, directory) pairs, for DUMP.
    mounts: Mutex<BTreeSet<(String, Bytes)>>,
}

impl Default for Mount {
    fn default() -> Self {
        Self::new()
    }
}

impl Mount {
    pub fn new() -> Self {
        Mount {
            mounts: Mutex::new(BTreeSet::new()),
        }
    }

    pub async fn dispatch(
        &self,
        nfs: &Nfs3,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        let client = ctx.peer.ip().to_string();
        match ctx.proc_ {
            MOUNTPROC3_MNT => return self.mnt(nfs, ctx, args, out, client).await,
            MOUNTPROC3_DUMP => {
                let list = self
                    .mounts
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(h, d)| Mountbody {
                        ml_hostname: Name(Bytes::copy_from_slice(h.as_bytes())),
                        ml_directory: Dirpath(d.clone()),
                    })
                    .collect();
                Mountlist(list).pack(out);
            }
            MOUNTPROC3_UMNT => {
                let path = Dirpath::unpack(&mut args)
                    .map_err(|_| CallError::GarbageArgs)?
                    .0;
                self.mounts.lock().unwrap().remove(&(client, path));
            }
            MOUNTPROC3_UMNTALL => {
                self.mounts.lock().unwrap().retain(|(h, _)| *h != client);
            }
            MOUNTPROC3_EXPORT => {
                let snap = nfs.live.load();
                let list = snap
                    .exports
                    .iter()
                    .map(|e| Exportnode {
                        ex_dir: Dirpath(Bytes::copy_from_slice(e.pseudo.as_bytes())),
                        ex_groups: Groups(
                            e.rules
                                .iter()
                                .map(|r| Groupnode {
                                    gr_name: Name(Bytes::from(r.client.to_string())),
                                })
                                .collect(),
                        ),
                    })
                    .collect();
                Exports(list).pack(out);
            }
            _ => return Err(CallError::ProcUnavail),
        }
        Ok(())
    }

    /// MNT: the export (or a directory below its root, walked as the
    /// caller) checked against the client's access, its root handle and
    /// flavors returned, the mount recorded for DUMP.
    async fn mnt(
        &self,
        nfs: &Nfs3,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
        client: String,
    ) -> Result<(), CallError> {
        let path = Dirpath::unpack(&mut args)
            .map_err(|_| CallError::GarbageArgs)?
            .0;
        let shown = String::from_utf8_lossy(&path).into_owned();
        if path.is_empty() && ctx.client.log_allowed() {
            // Answered as "/", like knfsd's mountd. libnfs sends it for
            // nfs://HOST/FILE (its export is the URL path before the
            // last '/') and then gives up on its own with "mount_cb:
            // (null)" unless auto-traverse-mounts=0: say what works.
            info!(
                peer = %ctx.peer,
                "MNT of an empty path, answered as \"/\"; libnfs cannot use an empty export: \
                 use nfs://HOST//FILE or nfs://HOST/EXPORT-DIRECTORY/FILE"
            );
        }
        let snap = nfs.live.load_full();
        let found = snap
            .exports
            .by_mount_path(&path)
            .map(|(e, below)| (e, below, snap.access(ctx, e)));
        let res = match found {
            None => {
                refused(ctx, Mountstat3::MNT3ERR_NOENT, &shown, "no such export");
                Mountres3::Default(Mountstat3::MNT3ERR_NOENT)
            }
            Some((_, _, None)) => {
                refused(
                    ctx,
                    Mountstat3::MNT3ERR_ACCES,
                    &shown,
                    "client not allowed by the export",
                );
                Mountres3::Default(Mountstat3::MNT3ERR_ACCES)
            }
            Some((_, _, Some(access))) if access.port_refused(&ctx.auth, ctx.peer) => {
                // mountd's answer to an "illegal port".
                refused(
                    ctx,
                    Mountstat3::MNT3ERR_ACCES,
                    &shown,
                    "unprivileged source port (1024 or above) on a `secure` export",
                );
                Mountres3::Default(Mountstat3::MNT3ERR_ACCES)
            }
            // No xprtsec check here: the Linux client sends MNT in the
            // clear even for `-o xprtsec=tls` (knfsd's mountd has no TLS
            // at all), and only its NFS connection does the handshake.
            // The handle MNT returns is of no use without TLS: every
            // NFSv3 call on it still needs the protection (AUTH_TOOWEAK).
            Some((e, below, Some(access))) => {
                // A directory below the export's root: walk to it as the caller.
                let (e, cred) = (e.clone(), access.cred);
                let below: Vec<Vec<u8>> = below.iter().map(|c| c.to_vec()).collect();
                let b = e.backend.clone();
                let walked = nfs
                    .run(move || {
                        let mut fid = b.root();
                        for c in &below {
                            let (f, a) = b.lookup(&cred, &fid, c)?;
                            if a.ftype != vfs::FileType::Directory {
                                return Err(vfs::FsError::NotDir);
                            }
                            fid = f;
                        }
                        Ok(fid)
                    })
                    .await;
                match walked {
                    Ok(fid) => {
                        let fh = nfs.handle(&e, &fid);
                        self.mounts.lock().unwrap().insert((client, path));
                        info!(peer = %ctx.peer, path = %shown, "mounted");
                        Mountres3::MNT3_OK(Mountres3Ok {
                            fhandle: Fhandle3(fh.data),
                            // The client picks its flavor from these
                            // (MNT itself is usually sent with AUTH_SYS).
                            auth_flavors: e.sec.iter().map(|f| f.pseudo_flavor() as i32).collect(),
                        })
                    }
                    Err(err) => {
                        let st = match err {
                            vfs::FsError::NoEnt => Mountstat3::MNT3ERR_NOENT,
                            vfs::FsError::NotDir => Mountstat3::MNT3ERR_NOTDIR,
                            vfs::FsError::Acces | vfs::FsError::Perm => Mountstat3::MNT3ERR_ACCES,
                            vfs::FsError::NameTooLong => Mountstat3::MNT3ERR_NAMETOOLONG,
                            _ => Mountstat3::MNT3ERR_IO,
                        };
                        refused(ctx, st, &shown, err.reason());
                        Mountres3::Default(st)
                    }
                }
            }
        };
        res.pack(out);
        Ok(())
    }
}

/// Counts a refused MNT by status and logs it once, within the client's log budget.
fn refused(ctx: &CallContext, st: Mountstat3, path: &str, reason: &str) {
    ctx.set_status(st as u32);
    if ctx.client.log_allowed() {
        warn!(peer = %ctx.peer, path, status = ?st, reason, "MNT refused");
    }
}
