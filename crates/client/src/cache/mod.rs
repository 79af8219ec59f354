//! Client-side caching policy, as the Linux NFS client does it, kept pure
//! (time is passed in as `now`) so a mount (or anything else over
//! [`Remote`](crate::remote::Remote)) can use it and tests can drive it.
//!
//! - [`attr`]: how long cached attributes are trusted (acregmin..acregmax,
//!   acdirmin..acdirmax, growing while a file stays unchanged), `noac`.
//! - [`lookup`]: how long a name's positive or negative lookup is trusted
//!   (`lookupcache=all|pos|none`).
//! - [`inodes`]: one mount's table of inodes (number ↔ handle, attributes,
//!   the kernel's lookup count), with no state shared between mounts.

pub mod attr;
pub mod inodes;
pub mod lookup;
