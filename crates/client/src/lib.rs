//! Tarn's NFS client library.
//!
//! [`nfs4`] is an NFSv4.1 client in two layers: raw COMPOUNDs and session
//! steps for protocol tests that must be able to send anything, and file
//! operations on a session for tools and benchmarks.

pub mod nfs3;
pub mod nfs4;
pub mod nfs40;
pub mod remote;
