//! NFS version 3 (RFC 1813): one file per group of procedures, and the
//! helpers they share here: resolving file handles to (export, fid,
//! credential), attribute conversion, and error mapping.
//!
//! Every handler takes its decoded arguments and returns its result type;
//! [`Nfs3::dispatch`] decodes, calls, logs error statuses once and encodes.

/// `?` for a handler: the value of `$r`, or on `Err(f)` the procedure's
/// failure reply ([`failed`]) returned.
macro_rules! or_failed {
    ($ctx:expr, $r:expr) => {
        match $r {
            Ok(v) => v,
            Err(f) => return failed($ctx, f),
        }
    };
}

mod access;
mod attr;
mod commit;
mod create;
mod fsinfo;
mod getattr;
mod link;
mod lookup;
mod read;
mod readdir;
mod readlink;
mod remove;
mod rename;
mod setattr;
mod write;

#[cfg(test)]
mod tests;

pub use attr::{fattr3, post_op_attr, pre_op_attr, wcc_data};

use crate::export::Export;
use crate::live::Live;
use crate::pool::Pool;
use bytes::BytesMut;
use proto::nfs3::*;
use rpc::{CallContext, CallError};
use std::sync::Arc;
use tracing::warn;
use vfs::{Cred, Fid, FsError, HandleKey};
use xdr::{Decoder, Pack, Unpack};

/// What a file handle resolves to for one call.
pub struct Target {
    pub export: Arc<Export>,
    pub fid: Fid,
    pub cred: Cred,
    /// This client may write here (its rule says rw).
    pub rw: bool,
}

pub struct Nfs3 {
    /// The exports in force (swapped on reload; loaded once per call).
    pub live: Arc<Live>,
    pub key: Arc<HandleKey>,
    pub pool: Pool,
    /// Changes at every server start, so clients know to resend UNSTABLE
    /// writes that were not committed before a restart.
    /// Shared with NFSv4 (see [`crate::verf`]).
    pub write_verf: std::sync::Arc<crate::verf::WriteVerf>,
    /// Recalls NFSv4 delegations on a file before NFSv3 or NLM changes or
    /// locks it; true while a recall is outstanding (the caller answers
    /// "try again": NFS3ERR_JUKEBOX, NLM4_DENIED_GRACE_PERIOD). None
    /// where no NFSv4 server runs beside.
    pub recall: Option<Recall>,
}

/// See [`Nfs3::recall`]: (export id, file) → a recall is outstanding.
pub type Recall = Arc<dyn Fn(u32, &Fid) -> bool + Send + Sync>;

/// The NFSv3 status for a backend error.
pub fn status(e: FsError) -> Nfsstat3 {
    use Nfsstat3::*;
    match e {
        FsError::Perm => NFS3ERR_PERM,
        FsError::NoEnt => NFS3ERR_NOENT,
        FsError::Io => NFS3ERR_IO,
        FsError::NxIo => NFS3ERR_NXIO,
        FsError::Acces => NFS3ERR_ACCES,
        FsError::Exist => NFS3ERR_EXIST,
        FsError::XDev => NFS3ERR_XDEV,
        FsError::NoDev => NFS3ERR_NODEV,
        FsError::NotDir => NFS3ERR_NOTDIR,
        FsError::IsDir => NFS3ERR_ISDIR,
        FsError::Inval => NFS3ERR_INVAL,
        FsError::FBig => NFS3ERR_FBIG,
        FsError::NoSpc => NFS3ERR_NOSPC,
        FsError::RoFs => NFS3ERR_ROFS,
        FsError::MLink => NFS3ERR_MLINK,
        FsError::NameTooLong => NFS3ERR_NAMETOOLONG,
        FsError::NotEmpty => NFS3ERR_NOTEMPTY,
        FsError::DQuot => NFS3ERR_DQUOT,
        FsError::Stale => NFS3ERR_STALE,
        FsError::BadHandle => NFS3ERR_BADHANDLE,
        FsError::NotSupp => NFS3ERR_NOTSUPP,
        FsError::TooSmall => NFS3ERR_TOOSMALL,
        FsError::ServerFault => NFS3ERR_SERVERFAULT,
        FsError::Jukebox => NFS3ERR_JUKEBOX,
        FsError::BadCookie => NFS3ERR_BAD_COOKIE,
        FsError::BadType => NFS3ERR_BADTYPE,
        // ELOOP on a single component means a symlink was met where a
        // directory was needed; RFC 1813 has no better code.
        FsError::Loop => NFS3ERR_NOTDIR,
        // NFSv3 has no extended attribute calls.
        FsError::NoXattr | FsError::XattrTooBig => NFS3ERR_IO,
        #[allow(unreachable_patterns)]
        _ => NFS3ERR_SERVERFAULT,
    }
}

/// An NFS error together with why, for the log line.
#[derive(Debug, Clone, Copy)]
pub struct Fail {
    pub status: Nfsstat3,
    pub why: &'static str,
}

impl From<FsError> for Fail {
    fn from(e: FsError) -> Fail {
        Fail {
            status: status(e),
            why: e.reason(),
        }
    }
}

impl Fail {
    pub fn new(status: Nfsstat3, why: &'static str) -> Fail {
        Fail { status, why }
    }
}

impl Nfs3 {
    pub fn new(live: Arc<Live>, key: Arc<HandleKey>, pool: Pool) -> Self {
        let write_verf = Default::default();
        Nfs3 {
            live,
            key,
            pool,
            write_verf,
            recall: None,
        }
    }

    /// Whether NFSv4 delegations on `fid` stand in the way of a change or a
    /// lock by another protocol (their recall is then under way).
    pub fn recalling(&self, export: u32, fid: &Fid) -> bool {
        self.recall.as_ref().is_some_and(|r| r(export, fid))
    }

    /// Asked under a directory's namespace lock before a change of its
    /// entries in `export` ([`crate::dirlock::Recalling`]): recalls NFSv4
    /// directory delegations on it.
    fn dir_recalling(&self, export: u32) -> impl Fn(&Fid) -> bool + Send + Sync + 'static {
        let recall = self.recall.clone();
        move |dir| recall.as_ref().is_some_and(|r| r(export, dir))
    }

    /// A change to `t`'s file waits (NFS3ERR_JUKEBOX) while NFSv4
    /// delegations on it are being recalled.
    fn not_recalling(&self, t: &Target) -> Result<(), Fail> {
        if self.recalling(t.export.id, &t.fid) {
            return Err(Fail::new(
                Nfsstat3::NFS3ERR_JUKEBOX,
                "an NFSv4 delegation on the file is being recalled",
            ));
        }
        Ok(())
    }

    /// [`Nfs3::resolve_rw`] for a change to the file itself, which waits
    /// for the recall of NFSv4 delegations on it.
    fn resolve_change(&self, ctx: &CallContext, fh: &NfsFh3) -> Result<Target, Fail> {
        let t = self.resolve_rw(ctx, fh)?;
        self.not_recalling(&t)?;
        Ok(t)
    }

    /// Checks a file handle (MAC first, no syscall), its export, and whether
    /// this client may use that export; maps the caller's credential.
    pub fn resolve(&self, ctx: &CallContext, fh: &NfsFh3) -> Result<Target, Fail> {
        let (export_id, fid) = self.key.open(&fh.data).map_err(|_| {
            Fail::new(
                Nfsstat3::NFS3ERR_BADHANDLE,
                "handle fails its MAC or is malformed",
            )
        })?;
        let snap = self.live.load();
        let export = snap.exports.get(export_id).ok_or(Fail::new(
            Nfsstat3::NFS3ERR_STALE,
            "handle names an export that no longer exists",
        ))?;
        ctx.set_export(export_id);
        let Some(access) = snap.access(ctx, export) else {
            return Err(Fail::new(
                Nfsstat3::NFS3ERR_ACCES,
                "client is not allowed to use this export",
            ));
        };
        if access.port_refused(&ctx.auth, ctx.peer) {
            // Linux's server answers NFSERR_PERM here.
            return Err(Fail::new(
                Nfsstat3::NFS3ERR_PERM,
                "request from an unprivileged source port (1024 or above) on a `secure` export",
            ));
        }
        Ok(Target {
            export: export.clone(),
            fid,
            cred: access.cred,
            rw: access.rw,
        })
    }

    /// Like [`Nfs3::resolve`], for procedures that modify: read-only exports refuse.
    pub fn resolve_rw(&self, ctx: &CallContext, fh: &NfsFh3) -> Result<Target, Fail> {
        let t = self.resolve(ctx, fh)?;
        if !t.rw {
            return Err(Fail::new(
                Nfsstat3::NFS3ERR_ROFS,
                "export is read-only to this client",
            ));
        }
        Ok(t)
    }

    /// [`Nfs3::resolve_rw`] of both handles, which must name one export:
    /// LINK and RENAME never cross exports (NFS3ERR_XDEV, `across`).
    pub fn resolve_rw_pair(
        &self,
        ctx: &CallContext,
        (a, b): (&NfsFh3, &NfsFh3),
        across: &'static str,
    ) -> Result<(Target, Target), Fail> {
        let (a, b) = match (self.resolve_rw(ctx, a), self.resolve_rw(ctx, b)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(f), _) | (_, Err(f)) => return Err(f),
        };
        if a.export.id != b.export.id {
            return Err(Fail::new(Nfsstat3::NFS3ERR_XDEV, across));
        }
        Ok((a, b))
    }

    /// The handle a client gets for `fid` of `export`.
    pub fn handle(&self, export: &Export, fid: &Fid) -> NfsFh3 {
        seal(&self.key, export.id, fid)
    }

    /// Runs a backend call on the blocking pool.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.pool.run(f).await
    }

    /// Runs a read-only backend call inline when it can finish without
    /// waiting for a disk, else on the pool (see [`Pool::run_fast`]).
    pub async fn run_fast<T: Send + 'static>(
        &self,
        b: &dyn vfs::Backend,
        f: impl Fn() -> T + Send + 'static,
    ) -> T {
        self.pool.run_fast(b, f).await
    }

    /// Export `sec=` for NFSv3 (RFC 2623 §2.3.2): every procedure's
    /// arguments start with a file handle; a call whose flavor that
    /// handle's export does not accept gets AUTH_TOOWEAK. Skipped when
    /// every export accepts the flavor (the common case: one MAC less).
    fn check_flavor(&self, ctx: &CallContext, args: &Decoder) -> Result<(), CallError> {
        let snap = self.live.load();
        if snap.exports.call_everywhere(ctx) {
            return Ok(());
        }
        let Ok(fh) = NfsFh3::unpack(&mut args.clone()) else {
            return Ok(()); // the procedure reports the garbage
        };
        match self
            .key
            .open(&fh.data)
            .ok()
            .and_then(|(id, _)| snap.exports.get(id))
        {
            Some(e) if !e.permits_call(ctx) => {
                e.note_xprt_refusal(ctx);
                if ctx.client.log_allowed() {
                    if e.permits(&ctx.auth) {
                        warn!(peer = %ctx.peer, xid = ctx.xid, export = %e.path.display(), xprtsec = %ctx.xprtsec, "AUTH_TOOWEAK: the export requires a TLS connection of another kind (xprtsec)");
                    } else {
                        warn!(peer = %ctx.peer, xid = ctx.xid, export = %e.path.display(), "AUTH_TOOWEAK: the export does not accept this security flavor");
                    }
                }
                Err(CallError::Auth(proto::rpc::AuthStat::AUTH_TOOWEAK))
            }
            _ => Ok(()),
        }
    }

    pub async fn dispatch(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        macro_rules! call {
            (@args $args:ty) => {
                <$args>::unpack(&mut args).map_err(|e| {
                    if ctx.client.log_allowed() {
                        warn!(peer = %ctx.peer, xid = ctx.xid, procedure = proc_name(ctx.proc_), error = %e, "GARBAGE_ARGS");
                    }
                    CallError::GarbageArgs
                })?
            };
            // A handler that encodes its reply into `out` itself (READ's data,
            // READDIRPLUS's entries as they come).
            (@into $args:ty, $handler:path) => {{
                let a = call!(@args $args);
                $handler(self, ctx, a, out).await;
            }};
            ($args:ty, $handler:path) => {{
                let a = call!(@args $args);
                let res = $handler(self, ctx, a).await;
                res.pack(out);
            }};
        }
        self.check_flavor(ctx, &args)?;
        match ctx.proc_ {
            NFSPROC3_GETATTR => call!(Getattr3args, getattr::getattr),
            NFSPROC3_SETATTR => call!(Setattr3args, setattr::setattr),
            NFSPROC3_LOOKUP => call!(Lookup3args, lookup::lookup),
            NFSPROC3_ACCESS => call!(Access3args, access::access),
            NFSPROC3_READLINK => call!(Readlink3args, readlink::readlink),
            NFSPROC3_READ => call!(@into Read3args, read::read),
            NFSPROC3_WRITE => call!(Write3args, write::write),
            NFSPROC3_CREATE => call!(Create3args, create::create),
            NFSPROC3_MKDIR => call!(Mkdir3args, create::mkdir),
            NFSPROC3_SYMLINK => call!(Symlink3args, create::symlink),
            NFSPROC3_MKNOD => call!(Mknod3args, create::mknod),
            NFSPROC3_REMOVE => call!(Remove3args, remove::remove),
            NFSPROC3_RMDIR => call!(Rmdir3args, remove::rmdir),
            NFSPROC3_RENAME => call!(Rename3args, rename::rename),
            NFSPROC3_LINK => call!(Link3args, link::link),
            NFSPROC3_READDIR => call!(Readdir3args, readdir::readdir),
            NFSPROC3_READDIRPLUS => call!(@into Readdirplus3args, readdir::readdirplus),
            NFSPROC3_FSSTAT => call!(Fsstat3args, fsinfo::fsstat),
            NFSPROC3_FSINFO => call!(Fsinfo3args, fsinfo::fsinfo),
            NFSPROC3_PATHCONF => call!(Pathconf3args, fsinfo::pathconf),
            NFSPROC3_COMMIT => call!(Commit3args, commit::commit),
            _ => return Err(CallError::ProcUnavail),
        }
        Ok(())
    }
}

/// [`Nfs3::handle`] for use inside a blocking closure (READDIRPLUS seals
/// thousands of handles; the MACs belong on the pool, not the async workers).
pub fn seal(key: &HandleKey, export_id: u32, fid: &Fid) -> NfsFh3 {
    NfsFh3 {
        data: bytes::Bytes::copy_from_slice(key.seal(export_id, fid).as_bytes()),
    }
}

/// Largest READ / WRITE payload (FSINFO rtmax / wtmax).
pub const MAX_IO: u32 = 1 << 20;

/// A procedure's name, for logs (from [`crate::procedures::NFS3`]).
pub fn proc_name(proc_: u32) -> &'static str {
    crate::procedures::NFS3.name(proc_)
}

/// A procedure's reply to a failure: the status, with what attributes (or
/// wcc data) were read.
trait FailReply {
    type Attrs: NoAttrs;
    fn with_status(status: Nfsstat3, attrs: Self::Attrs) -> Self;
}

/// What a failure reply carries when nothing was read.
trait NoAttrs {
    fn none() -> Self;
}

impl NoAttrs for PostOpAttr {
    fn none() -> Self {
        None
    }
}

impl NoAttrs for WccData {
    fn none() -> Self {
        attr::empty_wcc()
    }
}

impl<A: NoAttrs, B: NoAttrs> NoAttrs for (A, B) {
    fn none() -> Self {
        (A::none(), B::none())
    }
}

macro_rules! fail_reply {
    ($($res:ident($fail:ident { $field:ident: $attrs:ty })),* $(,)?) => {
        $(impl FailReply for $res {
            type Attrs = $attrs;
            fn with_status(status: Nfsstat3, $field: $attrs) -> Self {
                $res::Default(status, $fail { $field })
            }
        })*
    };
}

/// The replies whose failures carry two things, given as a pair.
macro_rules! fail_reply_pair {
    ($($res:ident($fail:ident { $a:ident: $at:ty, $b:ident: $bt:ty })),* $(,)?) => {
        $(impl FailReply for $res {
            type Attrs = ($at, $bt);
            fn with_status(status: Nfsstat3, ($a, $b): ($at, $bt)) -> Self {
                $res::Default(status, $fail { $a, $b })
            }
        })*
    };
}

fail_reply_pair! {
    Link3res(Link3resfail { file_attributes: PostOpAttr, linkdir_wcc: WccData }),
    Rename3res(Rename3resfail { fromdir_wcc: WccData, todir_wcc: WccData }),
}

fail_reply! {
    Access3res(Access3resfail { obj_attributes: PostOpAttr }),
    Readlink3res(Readlink3resfail { symlink_attributes: PostOpAttr }),
    Commit3res(Commit3resfail { file_wcc: WccData }),
    Write3res(Write3resfail { file_wcc: WccData }),
    Fsstat3res(Fsstat3resfail { obj_attributes: PostOpAttr }),
    Fsinfo3res(Fsinfo3resfail { obj_attributes: PostOpAttr }),
    Pathconf3res(Pathconf3resfail { obj_attributes: PostOpAttr }),
    Lookup3res(Lookup3resfail { dir_attributes: PostOpAttr }),
    Readdir3res(Readdir3resfail { dir_attributes: PostOpAttr }),
    Readdirplus3res(Readdirplus3resfail { dir_attributes: PostOpAttr }),
    Setattr3res(Setattr3resfail { obj_wcc: WccData }),
    Create3res(Create3resfail { dir_wcc: WccData }),
    Mkdir3res(Mkdir3resfail { dir_wcc: WccData }),
    Symlink3res(Symlink3resfail { dir_wcc: WccData }),
    Mknod3res(Mknod3resfail { dir_wcc: WccData }),
}

/// `f` logged and made the procedure's reply, with `attrs`.
fn failed_with<R: FailReply>(ctx: &CallContext, f: Fail, attrs: R::Attrs) -> R {
    log_fail(ctx, &f);
    R::with_status(f.status, attrs)
}

/// `f`, before anything was read, logged and made the procedure's reply.
fn failed<R: FailReply>(ctx: &CallContext, f: Fail) -> R {
    failed_with(ctx, f, R::Attrs::none())
}

/// The one place every NFSv3 error reply goes through: records its status
/// for the per-status error counters, and logs it once, at the level
/// [`crate::error_log_level`] gives it.
pub fn log_fail(ctx: &CallContext, f: &Fail) {
    use Nfsstat3::*;
    ctx.set_status(f.status as u32);
    let procedure = proc_name(ctx.proc_);
    let quiet = matches!(
        f.status,
        NFS3ERR_NOENT
            | NFS3ERR_EXIST
            | NFS3ERR_NOTEMPTY
            | NFS3ERR_NOTDIR
            | NFS3ERR_ISDIR
            | NFS3ERR_NAMETOOLONG
    );
    log_error_reply!(ctx, quiet, peer = %ctx.peer, xid = ctx.xid, procedure, status = ?f.status, reason = f.why, "NFS error reply");
}
