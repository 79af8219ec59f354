//! NFSv4.1 client (RFC 8881).
//!
//! - [`Nfs4Conn`]: one TCP connection with AUTH_SYS or RPCSEC_GSS (krb5,
//!   krb5i, krb5p; contexts renewed ahead of expiry: [`sec`], [`renew`];
//!   per local user when one client acts for many: [`users`], [`ccache`]); `compound` sends any
//!   operations with any minor version, nothing added.
//! - [`Session`]: EXCHANGE_ID + CREATE_SESSION + RECLAIM_COMPLETE, then
//!   `call` puts a SEQUENCE on a free slot in front of the operations.
//!   Share it (`Arc<Session>`) to keep many calls in flight.
//! - The file operations (`lookup_path`, `open`, `read`, `write`, ...) are
//!   methods on [`Session`], in `ops.rs`; those that hold no state are
//!   written once in [`plain`], over any [`plain::Compound`] (the NFSv4.0
//!   client, [`crate::nfs40`], uses them too).
//! - Delegations: a session asks for a back channel (on by default), each
//!   connection serves the callback program ([`callback`]), OPEN records
//!   what the server delegated ([`deleg`]) and `stat` of a delegated file
//!   is answered from the client's own cache until the server recalls it.

pub mod attr;
pub mod callback;
pub mod ccache;
pub mod conn;
pub mod deleg;
pub mod error;
pub mod ops;
pub mod plain;
pub mod recover;
pub mod renew;
pub mod sec;
pub mod session;
pub mod slots;
pub mod users;

pub use attr::{Attrs, SetAttrs};
pub use callback::CbService;
pub use conn::Nfs4Conn;
pub use deleg::{DelegKind, DelegTable, Delegation};
pub use error::{describe, Error, Nfs4Error, Result};
pub use ops::{Opened, ANON_STATEID};
pub use plain::DirEntry;
pub use renew::RenewPolicy;
pub use rpc::gss::GssService;
pub use sec::{GssSec, GssTarget};
pub use session::{
    check, create_session, exchange_id, Security, Session, SessionOptions, SlotGuard,
};
pub use slots::{Outcome, SlotLease, SlotTable};
