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

// Unsafe code only where allowed by name: the GSS-API calls in gss/lucid.rs.
#![deny(unsafe_code)]

pub mod auth;
pub mod callback;
pub mod client;
pub mod conn_limits;
pub mod context;
pub mod drc;
pub mod gss;
pub mod msg;
pub mod observe;
pub mod pipeline;
pub mod program;
pub mod record;
pub mod server;
pub mod tls;
pub mod transport;
pub mod zero_copy;

pub use auth::{Auth, AuthGss, AuthSys};
pub use callback::{CallbackConn, CallbackError};
pub use context::CallContext;
pub use msg::CallError;
pub use observe::{CallDone, Event, NoObserver, Observer, PeerStats};
pub use program::{Procedure, Program, Service};
pub use server::{serve_connection, Server, ServerConfig};
// The TLS modules' paths from before they moved into tls/.
pub use tls::events as tls_events;
pub use tls::identity as tls_identity;
pub use tls::ktls as ktls_offload;
pub use tls::records as tls_records;
pub use tls::x509;
