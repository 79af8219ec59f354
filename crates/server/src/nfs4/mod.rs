//! NFS version 4: the attribute codec and owner-name mapping.

pub mod attr;
pub mod idmap;
