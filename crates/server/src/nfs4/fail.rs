//! How a handler fails: [`Fail`] (an NFSv4 status and why, for the log
//! line), [`status`] (the status for a backend error) and [`log_fail`]
//! (the one log line of a failed operation). A leaf: it imports nothing
//! of `nfs4`.

use proto::nfs4::{self, Nfsstat4};
use rpc::CallContext;
use vfs::FsError;

/// An NFSv4 error together with why, for the log line.
#[derive(Debug, Clone, Copy)]
pub struct Fail {
    pub status: Nfsstat4,
    pub why: &'static str,
}

impl Fail {
    pub fn new(status: Nfsstat4, why: &'static str) -> Fail {
        Fail { status, why }
    }
}

impl From<FsError> for Fail {
    fn from(e: FsError) -> Fail {
        Fail {
            status: status(e),
            why: e.reason(),
        }
    }
}

impl From<Nfsstat4> for Fail {
    fn from(s: Nfsstat4) -> Fail {
        Fail {
            status: s,
            why: "refused by the state manager",
        }
    }
}

/// The NFSv4 status for a backend error.
pub fn status(e: FsError) -> Nfsstat4 {
    use Nfsstat4::*;
    match e {
        FsError::Perm => NFS4ERR_PERM,
        FsError::NoEnt => NFS4ERR_NOENT,
        FsError::Io => NFS4ERR_IO,
        FsError::NxIo => NFS4ERR_NXIO,
        FsError::Acces => NFS4ERR_ACCESS,
        FsError::Exist => NFS4ERR_EXIST,
        FsError::XDev => NFS4ERR_XDEV,
        FsError::NoDev => NFS4ERR_INVAL,
        FsError::NotDir => NFS4ERR_NOTDIR,
        FsError::IsDir => NFS4ERR_ISDIR,
        FsError::Inval => NFS4ERR_INVAL,
        FsError::FBig => NFS4ERR_FBIG,
        FsError::NoSpc => NFS4ERR_NOSPC,
        FsError::RoFs => NFS4ERR_ROFS,
        FsError::MLink => NFS4ERR_MLINK,
        FsError::NameTooLong => NFS4ERR_NAMETOOLONG,
        FsError::NotEmpty => NFS4ERR_NOTEMPTY,
        FsError::DQuot => NFS4ERR_DQUOT,
        FsError::Stale => NFS4ERR_STALE,
        FsError::BadHandle => NFS4ERR_BADHANDLE,
        FsError::NotSupp => NFS4ERR_NOTSUPP,
        FsError::TooSmall => NFS4ERR_TOOSMALL,
        FsError::ServerFault => NFS4ERR_SERVERFAULT,
        FsError::Jukebox => NFS4ERR_DELAY,
        FsError::BadCookie => NFS4ERR_BAD_COOKIE,
        FsError::BadType => NFS4ERR_BADTYPE,
        FsError::Loop => NFS4ERR_SYMLINK,
        FsError::NoXattr => NFS4ERR_NOXATTR,
        FsError::XattrTooBig => NFS4ERR_XATTR2BIG,
        FsError::WouldBlock => NFS4ERR_DELAY,
    }
}

/// An operation's result whose failure carries the status alone.
pub trait Failed {
    fn failed(status: Nfsstat4) -> Self;
}

macro_rules! failed_is_default {
    ($($res:ident),* $(,)?) => {
        $(impl Failed for nfs4::$res {
            fn failed(status: Nfsstat4) -> Self {
                nfs4::$res::Default(status)
            }
        })*
    };
}

failed_is_default!(
    Access4res,
    Close4res,
    Copy4res,
    Create4res,
    GetDirDelegation4res,
    CreateSession4res,
    ExchangeId4res,
    Getxattr4res,
    IoAdvise4res,
    Link4res,
    Listxattrs4res,
    Open4res,
    OpenDowngrade4res,
    Readlink4res,
    Remove4res,
    Removexattr4res,
    Rename4res,
    Seek4res,
    Setxattr4res,
);

/// An operation's reply: `ok` of its result, or its failure's status
/// (the failure logged under `op`).
pub fn reply<T, R: Failed>(
    ctx: &CallContext,
    op: &'static str,
    r: Result<T, Fail>,
    ok: impl FnOnce(T) -> R,
) -> R {
    reply_with(ctx, op, r, ok, R::failed)
}

/// The reply of an operation refused with `f` (logged under `op`).
pub fn failed<R: Failed>(ctx: &CallContext, op: &'static str, f: Fail) -> R {
    log_fail(ctx, op, &f);
    R::failed(f.status)
}

/// [`reply`] for a reply that `failed` makes of the status.
fn reply_with<T, R>(
    ctx: &CallContext,
    op: &'static str,
    r: Result<T, Fail>,
    ok: impl FnOnce(T) -> R,
    failed: impl FnOnce(Nfsstat4) -> R,
) -> R {
    match r {
        Ok(v) => ok(v),
        Err(f) => {
            log_fail(ctx, op, &f);
            failed(f.status)
        }
    }
}

/// A status-only operation's status: NFS4_OK, or its failure's (logged
/// under `op`).
pub fn status_of(ctx: &CallContext, op: &'static str, r: Result<(), Fail>) -> Nfsstat4 {
    reply_with(ctx, op, r, |()| Nfsstat4::NFS4_OK, |s| s)
}

/// Logs a failed operation once: expected statuses at debug, others at warn,
/// rate-limited per client.
/// Logs `op`'s refusal with status `s` for `why` (as [`log_fail`]) and
/// gives the status back, for an operation whose result is the status.
pub fn refused(ctx: &CallContext, op: &'static str, s: Nfsstat4, why: &'static str) -> Nfsstat4 {
    log_fail(ctx, op, &Fail::new(s, why));
    s
}

pub fn log_fail(ctx: &CallContext, op: &'static str, f: &Fail) {
    use Nfsstat4::*;
    let quiet = matches!(
        f.status,
        NFS4ERR_NOENT | NFS4ERR_EXIST | NFS4ERR_NOTEMPTY | NFS4ERR_NOTDIR | NFS4ERR_ISDIR
        | NFS4ERR_NAMETOOLONG | NFS4ERR_DENIED | NFS4ERR_GRACE | NFS4ERR_DELAY
        | NFS4ERR_SYMLINK | NFS4ERR_OLD_STATEID | NFS4ERR_SAME | NFS4ERR_NOT_SAME
        // EXCHANGE_ID's SP4_MACH_CRED, which Linux asks for under krb5i/krb5p
        // and then retries as SP4_NONE: a negotiation, not an error.
        | NFS4ERR_ENCR_ALG_UNSUPP
    );
    log_error_reply!(ctx, quiet, peer = %ctx.peer, xid = ctx.xid, op, status = ?f.status, reason = f.why, "NFSv4 error");
}
