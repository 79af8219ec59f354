//! Tarn's NFS server: exports and who may use them, the MOUNT v3 and NFSv3
//! programs, and the [`service::TarnService`] that the RPC transport calls.

// Unsafe code only where allowed by name: the NSS calls in nss.rs.
#![deny(unsafe_code)]

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
