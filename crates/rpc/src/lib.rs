//! ONC RPC version 2 (RFC 5531) over TCP.
//!
//! This crate knows nothing about NFS. A program implements [`Service`]; the
//! [`server`] reads records off connections, decodes call headers and
//! credentials, answers every RPC-level failure itself (RPC_MISMATCH,
//! PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR,
//! AUTH_ERROR), answers NULL for every program and version, runs calls of
//! one connection concurrently, and sends replies in whatever order they
//! finish. Non-idempotent procedures go through the [`drc`].
//!
//! The pure parts ([`record`], [`msg`], [`auth`], [`drc`]) never touch a
//! socket and are tested with byte vectors.

pub mod auth;
pub mod client;
pub mod drc;
pub mod gss;
pub mod msg;
pub mod record;
pub mod server;

pub use auth::{Auth, AuthGss, AuthSys};
pub use msg::{CallContext, CallError};
pub use server::{serve_connection, Server, ServerConfig, Service};
