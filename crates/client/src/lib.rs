//! Tarn's NFS client library.
//!
//! [`nfs4`] is an NFSv4.1 client in two layers: raw COMPOUNDs and session
//! steps for protocol tests that must be able to send anything, and file
//! operations on a session for tools and benchmarks. [`nfs40`] is the
//! NFSv4.0 client (no sessions: client ID, RENEW, per-owner seqids),
//! sharing the stateless operations with 4.1 ([`nfs4::plain`]). [`nfs3`]
//! is NFSv3 with MOUNT and NLM; [`remote`] puts one interface over all.

#![forbid(unsafe_code)]

pub mod cache;
pub mod connect;
pub mod nfs3;
pub mod nfs4;
pub mod nfs40;
mod pause;
pub mod remote;
pub mod url;
