//! Protocol types generated at build time from the `.x` specifications in
//! `specs/`: a wire format is written once, in the language its RFC uses.
//! See `xdr::codegen` for how XDR maps to Rust.

#![forbid(unsafe_code)]

/// `pub mod NAME` for each `NAME => "FILE"`: the code build.rs generated
/// into FILE, with the doc comments given.
macro_rules! generated {
    ($($(#[$doc:meta])* $name:ident => $file:literal,)*) => {$(
        $(#[$doc])*
        #[allow(non_camel_case_types, clippy::all)]
        pub mod $name {
            include!(concat!(env!("OUT_DIR"), "/", $file));
        }
    )*};
}

generated! {
    /// ONC RPC v2 messages and AUTH_SYS (RFC 5531).
    rpc => "rpc_prot.rs",
    /// RPCSEC_GSS version 1 (RFC 2203): credentials, context creation, and
    /// the integrity and privacy envelopes.
    gss => "rpcsec_gss.rs",
    /// MOUNT v3 (RFC 1813 appendix I).
    mount => "mount.rs",
    /// NFS v3 (RFC 1813).
    nfs3 => "nfs3.rs",
    /// The port mapper, version 2 (RFC 1833).
    pmap => "pmap.rs",
    /// The Network Lock Manager, version 4 (X/Open XNFS): byte-range locks
    /// for NFSv3 clients.
    nlm4 => "nlm4.rs",
    /// The Network Status Monitor, version 1 (X/Open XNFS): reboot notification.
    nsm => "sm_inter.rs",
    /// NFS version 4, minor versions 0, 1 and 2 (RFC 7530/7531, RFC 8881/5662,
    /// RFC 7862/7863): COMPOUND with every operation, the attributes, and the
    /// callback program. One set of types serves all minor versions.
    nfs4 => "nfs4.rs",
}

#[cfg(test)]
mod nfs4_tests;
