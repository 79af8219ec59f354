//! NFS version 4.0, 4.1 and 4.2 (RFC 7530, RFC 8881, RFC 7862).
//!
//! Where things are, top down (each layer imports only those below it):
//! - [`Nfs4`] (`server.rs`): the server object, its config and constructors.
//! - `dispatch.rs`: the COMPOUND loop; `ops.rs`: the operation table
//!   (number, name, handler, flags; where each op's handler, wire type and
//!   tests are); `lease.rs`: the lease timer.
//! - Handlers, one module per operation group: `fh`, `getattr`, `dir`,
//!   `readdir`, `io`, `open` (+ `deleg`, `dir_deleg`), `lock`, `v40`, `session`,
//!   `stateid`, `secinfo`, `sparse`, `copy`, `xattr`.
//! - Helpers they import directly: `compound` (the state one COMPOUND
//!   carries), [`fail`] (`Fail`, `status`, `log_fail`), [`attr`],
//!   [`pseudo`], `effects` ([`Records`], the effects applier).
//! - [`callback`]: every CB_ call and the back channels (never imports a
//!   handler or the dispatcher).
//! - [`state`]: the pure state core (clients, sessions, opens, locks,
//!   delegations); [`recovery`], [`clock`], [`idmap`], [`peers`].
//!
//! In-process tests of the whole COMPOUND path: `tests/`.

pub mod attr;
mod backend_delegs;
mod backend_held;
pub mod callback;
pub mod clock;
mod compound;
mod config;
pub mod copy;
mod deleg;
mod dir;
mod dir_deleg;
mod dispatch;
mod effects;
pub mod fail;
mod fh;
mod getattr;
pub mod idmap;
mod io;
mod lease;
mod local_changes;
mod lock;
mod open;
mod ops;
pub mod peers;
pub mod pseudo;
mod readdir;
pub mod recovery;
mod secinfo;
mod server;
mod session;
mod sparse;
pub mod state;
mod stateid;
mod v40;
mod xattr;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use config::Nfs4Config;
pub use dispatch::minor_version;
pub use effects::Records;
pub use server::Nfs4;
