//! Protocol types generated at build time from the `.x` specifications in
//! `specs/`: a wire format is written once, in the language its RFC uses.
//! See `xdr::codegen` for how XDR maps to Rust.

#![forbid(unsafe_code)]

/// ONC RPC v2 messages and AUTH_SYS (RFC 5531).
#[allow(non_camel_case_types, clippy::all)]
pub mod rpc {
    include!(concat!(env!("OUT_DIR"), "/rpc_prot.rs"));
}

/// RPCSEC_GSS version 1 (RFC 2203): credentials, context creation, and
/// the integrity and privacy envelopes.
#[allow(non_camel_case_types, clippy::all)]
pub mod gss {
    include!(concat!(env!("OUT_DIR"), "/rpcsec_gss.rs"));
}

/// MOUNT v3 (RFC 1813 appendix I).
#[allow(non_camel_case_types, clippy::all)]
pub mod mount {
    include!(concat!(env!("OUT_DIR"), "/mount.rs"));
}

/// NFS v3 (RFC 1813).
#[allow(non_camel_case_types, clippy::all)]
pub mod nfs3 {
    include!(concat!(env!("OUT_DIR"), "/nfs3.rs"));
}

/// The port mapper, version 2 (RFC 1833).
#[allow(non_camel_case_types, clippy::all)]
pub mod pmap {
    include!(concat!(env!("OUT_DIR"), "/pmap.rs"));
}

/// The Network Lock Manager, version 4 (X/Open XNFS): byte-range locks
/// for NFSv3 clients.
#[allow(non_camel_case_types, clippy::all)]
pub mod nlm4 {
    include!(concat!(env!("OUT_DIR"), "/nlm4.rs"));
}

/// The Network Status Monitor, version 1 (X/Open XNFS): reboot notification.
#[allow(non_camel_case_types, clippy::all)]
pub mod nsm {
    include!(concat!(env!("OUT_DIR"), "/sm_inter.rs"));
}

/// NFS version 4, minor versions 0, 1 and 2 (RFC 7530/7531, RFC 8881/5662,
/// RFC 7862/7863): COMPOUND with every operation, the attributes, and the
/// callback program. One set of types serves all minor versions.
#[allow(non_camel_case_types, clippy::all)]
pub mod nfs4 {
    include!(concat!(env!("OUT_DIR"), "/nfs4.rs"));
}

#[cfg(test)]
mod nfs4_tests;
