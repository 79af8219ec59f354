//! Tarn's NFS server: exports and who may use them, the MOUNT v3 and NFSv3
//! programs, and the [`service::TarnService`] that the RPC transport calls.

// Unsafe code only where allowed by name: the NSS calls in nss.rs.
#![deny(unsafe_code)]

/// Logs an error reply (NFSv3's and NFSv4's) at the level
/// [`error_log_level`] gives it, if any: `$event` is the event's fields and
/// message as `tracing::debug!` takes them.
macro_rules! log_error_reply {
    ($ctx:expr, $quiet:expr, $($event:tt)+) => {
        match $crate::error_log_level($ctx, $quiet) {
            Some(tracing::Level::DEBUG) => tracing::debug!($($event)+),
            Some(_) => tracing::warn!($($event)+),
            None => {}
        }
    };
}

pub mod auth_cache;
pub mod cluster;
pub mod dirlock;
pub mod export;
pub mod grace;
pub mod live;
pub mod locks;
pub mod mount;
pub mod nfs3;
pub mod nfs4;
pub mod nlm;
pub mod nss;
pub mod pool;
pub mod principal;
pub mod procedures;
pub mod service;
pub mod shared_locks;
pub mod verf;
pub mod zero_copy;

#[cfg(test)]
mod test_util;

pub use export::{Export, Exports};
pub use service::TarnService;

/// The level an error reply is logged at, if it is logged: `quiet` ones
/// (statuses ordinary work produces: a LOOKUP that misses, an EXIST) at
/// debug, the rest at warn. None when debug is off for a quiet one, or the
/// client's lines are rate-limited (a token bucket; the metrics upkeep
/// writes one "suppressed N" line). NFSv3 and NFSv4 both log through it.
pub(crate) fn error_log_level(ctx: &rpc::CallContext, quiet: bool) -> Option<tracing::Level> {
    // Debug being off is asked first, so that it spends no token.
    if quiet && !tracing::enabled!(tracing::Level::DEBUG) {
        return None;
    }
    let level = if quiet {
        tracing::Level::DEBUG
    } else {
        tracing::Level::WARN
    };
    ctx.client.log_allowed().then_some(level)
}
