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
//! The pure parts ([`record`], [`msg`], [`auth`], [`drc`], [`program`] and
//! the call [`pipeline`]) never touch a socket or a clock and are tested
//! with byte vectors; [`server`] is the tokio driver around them. Counting
//! goes through the [`observe`] traits, which the metrics implement.

pub mod auth;
pub mod callback;
pub mod client;
pub mod conn_limits;
pub mod drc;
pub mod gss;
pub mod ktls_offload;
pub mod msg;
pub mod observe;
pub mod pipeline;
pub mod program;
pub mod record;
pub mod server;
pub mod tls;
pub mod tls_events;
pub mod tls_identity;
pub mod tls_records;
pub mod x509;
pub mod zero_copy;

pub use auth::{Auth, AuthGss, AuthSys};
pub use callback::{CallbackConn, CallbackError};
pub use msg::{CallContext, CallError};
pub use observe::{CallDone, Event, NoObserver, Observer, PeerStats};
pub use program::{Procedure, Program, Service};
pub use server::{serve_connection, Server, ServerConfig};
