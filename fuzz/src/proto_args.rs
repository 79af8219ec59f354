//! The argument types of the MOUNT, NFSv3, NLM and NSM procedures, and a
//! few results Tarn's client decodes: the table the `proto_args` target
//! picks from with its first byte (the seed generator names them).

use crate::roundtrip;
use bytes::Bytes;
use proto::{mount, nfs3::*, nlm4::*, nsm::*};

macro_rules! table {
    ($($t:ty),* $(,)?) => {
        /// Each type's name and its round-trip check.
        pub const TABLE: &[(&str, fn(&Bytes))] = &[$((stringify!($t), |b| { let _ = roundtrip::<$t>(b); })),*];
    };
}

table!(
    // MOUNT v3
    mount::Dirpath,
    // NFSv3
    Getattr3args,
    Setattr3args,
    Lookup3args,
    Access3args,
    Readlink3args,
    Read3args,
    Write3args,
    Create3args,
    Mkdir3args,
    Symlink3args,
    Mknod3args,
    Remove3args,
    Rmdir3args,
    Rename3args,
    Link3args,
    Readdir3args,
    Readdirplus3args,
    Fsstat3args,
    Fsinfo3args,
    Pathconf3args,
    Commit3args,
    // NLM v4 (the _MSG procedures take the same arguments, the _RES
    // ones the results)
    Nlm4Testargs,
    Nlm4Lockargs,
    Nlm4Cancargs,
    Nlm4Unlockargs,
    Nlm4Testres,
    Nlm4Res,
    Nlm4Shareargs,
    Nlm4Notify,
    // NSM
    SmName,
    Mon,
    MonId,
    MyId,
    StatChge,
    // Replies a client decodes (Tarn is also a client).
    Getattr3res,
    Lookup3res,
    Read3res,
    Readdirplus3res,
    mount::Mountres3,
    mount::Exports,
);

/// The selector byte of a type in [`TABLE`].
pub fn selector(name: &str) -> u8 {
    TABLE
        .iter()
        .position(|(n, _)| n.replace(' ', "") == name)
        .expect("a type of the table") as u8
}
