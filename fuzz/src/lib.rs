//! Shared pieces of the fuzz targets: the round-trip property of XDR
//! decoders, and the in-memory NFSv4 server COMPOUNDs run against.
//!
//! Fuzzer: libFuzzer through cargo-fuzz, built with `-s none` on the
//! stable toolchain (see README.md for the measurements behind the choice).

use bytes::Bytes;
use rpc::{Auth, AuthSys, CallContext};
use server::export::{Cidr, Export, Exports, Squash};
use server::live::Live;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use xdr::{Decoder, Pack, Unpack};

pub mod nfs3;
pub mod nfs4;
pub mod pipeline;
pub mod proto_args;

/// Decodes a `T` from the front of `data`; if that works, its encoding must
/// be exactly the bytes consumed (XDR has one encoding per value: padding is
/// zero, booleans are 0 or 1), and decoding that again gives it back.
/// Returns the value and the bytes consumed.
pub fn roundtrip<T: Unpack + Pack>(data: &Bytes) -> Option<(T, usize)> {
    let mut d = Decoder::new(data.clone());
    let v = T::unpack(&mut d).ok()?;
    let used = d.position();
    let again = xdr::to_bytes(&v);
    assert_eq!(
        &again[..],
        &data[..used],
        "re-encoding differs from the input"
    );
    let mut d2 = Decoder::new(again.clone());
    let w = T::unpack(&mut d2).expect("an encoding decodes");
    assert_eq!(d2.remaining(), 0);
    assert_eq!(xdr::to_bytes(&w), again);
    Some((v, used))
}

/// `s` cut at every `sep` (several calls in one input).
pub fn split<'a>(mut s: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    while let Some(i) = s.windows(sep.len()).position(|w| w == sep) {
        out.push(&s[..i]);
        s = &s[i + sep.len()..];
    }
    out.push(s);
    out
}

/// Runs `f` to completion on a fresh single-threaded runtime (with timers),
/// as each input gets; tasks it spawned are not waited for.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let out = rt.block_on(f);
    rt.shutdown_background();
    out
}

/// A call of `prog` version `vers` procedure `proc_` from `uid` (AUTH_SYS,
/// its gid the same) on 127.0.0.1.
pub fn call_context(xid: u32, prog: u32, vers: u32, proc_: u32, uid: u32) -> CallContext {
    let peer: SocketAddr = "127.0.0.1:900".parse().unwrap();
    CallContext::new(
        xid,
        prog,
        vers,
        proc_,
        Auth::Sys(AuthSys {
            stamp: 0,
            machinename: Bytes::from_static(b"fuzz"),
            uid,
            gid: uid,
            gids: vec![],
        }),
        peer,
        1,
        Arc::new(rpc::observe::NoStats),
    )
}

/// One in-memory export of `/` at /srv/fuzz for 127.0.0.0/8, squashing as
/// `squash` says. Files of at most 1 MiB: a WRITE far out is FBIG, not
/// gigabytes of zeros.
pub fn exports(squash: Squash) -> Arc<Live> {
    let backend: Arc<dyn vfs::Backend> = Arc::new(vfs::memory::MemFs::with_max_file(1 << 20));
    let export = Export::simple(
        "/srv/fuzz",
        "/",
        backend,
        &["127.0.0.0/8".parse::<Cidr>().unwrap()],
        false,
        squash,
    );
    Live::fixed(Exports::new(vec![export]))
}

/// The fixed handle key: the root's handle is the same in every run, so
/// the seeds can carry it.
pub fn handle_key() -> Arc<vfs::handle::HandleKey> {
    Arc::new(vfs::handle::HandleKey::from_bytes(
        &[7; vfs::handle::HandleKey::KEY_LEN],
    ))
}
