//! RPC-with-TLS (RFC 9289): a NULL call with AUTH_TLS is answered with the
//! STARTTLS verifier, then both ends run a TLS 1.3 handshake (ALPN
//! "sunrpc") on the same TCP connection and speak RPC inside it.
//!
//! The handshake runs in user space (rustls); the record layer then stays
//! there or goes to the kernel ([`ktls`], `tls.ktls`).
//!
//! The parts, each depending only on the ones listed before it (and on
//! [`crate::transport`], never the other way round): [`x509`] (what an
//! operator is told about certificates), `alert` (failures by name),
//! `starttls` (the exchange that opens TLS), [`identity`] (client
//! certificates mapped to users), [`records`] (Tarn's own TLS records),
//! [`ktls`] (the kernel's), `config` (the rustls configurations, server
//! and client) and [`events`] (what went wrong lately, for `tarn doctor`).
//! This module only names them.

mod alert;
mod config;
pub mod events;
pub mod identity;
pub mod ktls;
pub mod records;
mod starttls;
pub mod x509;

pub use crate::transport::XprtSec;
pub use alert::{alert_name, failure_reason, FAILURE_REASONS};
pub use config::{load_certs, load_key, TlsClient, TlsClientOptions, TlsFiles, TlsServer};
pub use starttls::{
    is_starttls_reply, starttls_call, starttls_probe, starttls_reply, ALPN, AUTH_TLS, STARTTLS,
};
