//! NFSv4.0 client (RFC 7530), for servers that offer no newer minor
//! version. Over the same [`Nfs4Conn`](crate::nfs4::Nfs4Conn) as 4.1, with
//! minor version 0 and no SEQUENCE:
//!
//! - [`Client40`] ([`client`]): SETCLIENTID and SETCLIENTID_CONFIRM with a
//!   callback address nobody can reach (no delegations: what a short-lived
//!   tool wants), RENEW every lease/3, COMPOUNDs retried on
//!   NFS4ERR_DELAY and NFS4ERR_GRACE.
//! - Open and lock owners ([`owner`]): their seqids, one seqid-mutating
//!   operation per owner at a time (RFC 7530 §9.1.7).
//! - OPEN (with OPEN_CONFIRM), CLOSE, LOCK, LOCKU, LOCKT ([`state`]).
//! - Everything stateless is shared with 4.1 ([`crate::nfs4::plain`]):
//!   [`Client40`] is a [`Compound`](crate::nfs4::plain::Compound).

pub mod client;
pub mod owner;
pub mod state;

pub use client::{Client40, Options40};
pub use owner::{LockOwner, OpenOwner};
pub use state::Open40;
