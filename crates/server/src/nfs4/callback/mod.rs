//! Calls from the server to clients (RFC 8881 §20, RFC 7530 §16): every
//! CB_ operation Tarn sends, and the channels they travel on.
//!
//! - [`channel`]: one back channel, a session's (CB_SEQUENCE first) or an
//!   NFSv4.0 client's; CB_NULL and CB_COMPOUND.
//! - [`cb40`]: NFSv4.0 callback paths, the connections the server opens to
//!   the address SETCLIENTID named.
//! - [`backchannel`]: the table of both, by client: where a call goes, and
//!   the callback-path flags SEQUENCE reports.
//! - [`recall`]: CB_RECALL and CB_RECALL_ANY, sent when the state core
//!   queues them (by `effects::Records::apply`).
//! - [`getattr`]: CB_GETATTR, asked by `deleg` when a GETATTR meets a write
//!   delegation.
//! - [`offload`]: CB_OFFLOAD, a background COPY's result (from `copy`).
//!
//! The layer sits below the handlers: they import it; it imports only the
//! state core and the attribute codec, never a handler, the dispatcher or
//! the server object. Imports inside it run one way: `channel` <- `cb40`
//! <- `backchannel` <- the senders. Tests: `nfs4/tests/backchannel.rs`,
//! `nfs4/tests/cb40.rs`, recalls in `nfs4/tests/deleg*.rs`, CB_OFFLOAD in
//! `nfs4/tests/copy.rs`.

pub mod backchannel;
pub mod cb40;
pub mod channel;
pub mod getattr;
pub mod offload;
pub mod recall;

pub use backchannel::Backchannels;
pub use channel::Backchannel;
