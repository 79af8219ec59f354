//! Kerberos per-message crypto for GSS-API contexts whose keys are known,
//! in pure Rust: the simplified-profile AES enctypes of RFC 3961/3962
//! (aes128/aes256-cts-hmac-sha1-96), the RFC 8009 ones
//! (aes128-cts-hmac-sha256-128, aes256-cts-hmac-sha384-192), and the RFC
//! 4121 MIC and Wrap tokens built on them.
//!
//! Why: MIT's library as Debian builds it does AES without AES-NI, so
//! krb5p tops out near 70 MiB/s per core; RustCrypto's `aes` picks AES-NI
//! at run time. MIT still establishes the context; the caller exports the
//! keys (the lucid context) and hands them to [`Cfx`].
//!
//! Nothing here touches sockets, files or FFI, and there is no `unsafe`:
//! everything is testable with byte vectors.

#![forbid(unsafe_code)]

mod cts;
mod enctype;
mod nfold;
mod token;

pub use enctype::{Enctype, Key};
pub use token::{Cfx, Role, TokenError, Unwrapped};
