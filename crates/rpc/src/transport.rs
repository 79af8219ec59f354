//! What the RPC layer knows of a connection whatever carries it: how it
//! is protected ([`XprtSec`]), its count of bytes waiting to be written
//! ([`Backlog`]), and its two halves as the driver reads calls from one
//! ([`ConnRead`]) and writes replies to the other ([`ReplyWrite`]). Plain
//! TCP's halves are here; the TLS ones are in [`crate::tls`], which
//! builds on this module, never the other way round.

use crate::zero_copy::Attachment;
use bytes::{BufMut, Bytes, BytesMut};
use std::io::IoSlice;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// `name()`, `FromStr` and `Display` of a fieldless enum from each
/// variant's name, as options and reports spell it.
macro_rules! named_variants {
    ($t:ident { $($v:ident => $name:literal),+ $(,)? }) => {
        impl $t {
            pub fn name(self) -> &'static str {
                match self {
                    $($t::$v => $name,)+
                }
            }
        }

        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($name => Ok($t::$v),)+
                    o => Err(format!(
                        "{o:?}: expected {}",
                        $crate::transport::one_of(&[$($name),+])
                    )),
                }
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use named_variants;

/// The names a parse accepts, quoted, for its error: `"a" or "b"`,
/// `"a", "b" or "c"`.
pub(crate) fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// How a connection is protected, weakest first (knfsd's xprtsec names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum XprtSec {
    /// Plain TCP.
    #[default]
    None,
    /// TLS, the client not authenticated by a certificate.
    Tls,
    /// TLS with a client certificate verified against the client CA.
    Mtls,
}

impl XprtSec {
    pub const ALL: [XprtSec; 3] = [XprtSec::None, XprtSec::Tls, XprtSec::Mtls];
}

named_variants!(XprtSec {
    None => "none",
    Tls => "tls",
    Mtls => "mtls",
});

/// Bytes of one connection's replies (and calls to the client) sent to
/// its writer and not yet written. Signed: a sender counts its record
/// once it is queued, so the writer may take it off first.
#[derive(Debug, Default)]
pub struct Backlog {
    bytes: AtomicI64,
    pub(crate) drained: Notify,
}

impl Backlog {
    pub(crate) fn add(&self, n: usize) {
        self.bytes.fetch_add(n as i64, Ordering::Relaxed);
    }

    pub(crate) fn written(&self, n: usize) {
        self.bytes.fetch_sub(n as i64, Ordering::Relaxed);
        self.drained.notify_one();
    }

    pub(crate) fn over(&self, cap: usize) -> bool {
        self.bytes.load(Ordering::Relaxed) > cap as i64
    }

    pub(crate) fn empty(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) <= 0
    }
}

/// The read half of a connection as the reader loop needs it.
pub trait ConnRead: tokio::io::AsyncRead + Unpin + Send {
    /// Asks the kernel to ACK at once (see the caller).
    fn quickack(&self) {}

    /// Reads about `want` more bytes into `buf` (0 at the end of the
    /// stream); `buf` has room for them.
    fn fill(
        &mut self,
        buf: &mut BytesMut,
        want: usize,
    ) -> impl std::future::Future<Output = std::io::Result<usize>> + Send {
        async move { self.read_buf(&mut buf.limit(want)).await }
    }
}

/// TCP_QUICKACK on the socket under a read half (best effort).
pub(crate) fn quickack(rd: &tokio::net::tcp::OwnedReadHalf) {
    let _ = socket2::SockRef::from(rd.as_ref()).set_tcp_quickack(true);
}

impl ConnRead for tokio::net::tcp::OwnedReadHalf {
    fn quickack(&self) {
        quickack(self)
    }
}

/// The write half of a connection as the writer task needs it.
pub trait ReplyWrite: tokio::io::AsyncWrite + Unpin + Send + Sized {
    /// Whether [`Self::send_spliced`] sends from the pipe without copying
    /// (calls on the connection may then attach file data).
    const SPLICE: bool = false;

    /// Sends a batch of replies in order, failing with TimedOut if no
    /// byte goes out for `stall`. The batch may be taken.
    fn send_batch(
        &mut self,
        batch: &mut Vec<Bytes>,
        stall: Duration,
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        async move { write_all_vectored(self, batch, stall).await }
    }

    /// Sends `batch` (which ends with the part of a reply before its
    /// attachment), then the attachment's bytes. This default copies them
    /// out of the pipe (no connection that cannot splice gets one).
    fn send_spliced(
        &mut self,
        batch: &mut Vec<Bytes>,
        att: &Attachment,
        stall: Duration,
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        async move {
            batch.push(att.pipe().read_all(att.len)?.into());
            self.send_batch(batch, stall).await
        }
    }
}

impl ReplyWrite for tokio::net::tcp::OwnedWriteHalf {
    const SPLICE: bool = true;

    /// The file data goes from the pipe to the socket by splice(2).
    async fn send_spliced(
        &mut self,
        batch: &mut Vec<Bytes>,
        att: &Attachment,
        stall: Duration,
    ) -> std::io::Result<()> {
        write_all_vectored(self, batch, stall).await?;
        let sock: &TcpStream = self.as_ref();
        let mut left = att.len;
        while left > 0 {
            let sent = sock.async_io(tokio::io::Interest::WRITABLE, || {
                att.pipe().splice_to(sock.as_fd(), left)
            });
            let n = match tokio::time::timeout(stall, sent).await {
                Ok(r) => r?,
                Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            left -= n;
        }
        Ok(())
    }
}

/// Replies the writer sends in one vectored write (at most: IOV_MAX is 1024).
pub(crate) const MAX_BATCH: usize = 64;

/// Writes every buffer, failing with TimedOut if no byte goes out for
/// `stall`.
pub(crate) async fn write_all_vectored<W: tokio::io::AsyncWrite + Unpin>(
    wr: &mut W,
    bufs: &mut [Bytes],
    stall: Duration,
) -> std::io::Result<()> {
    let (mut i, mut off) = (0, 0);
    while i < bufs.len() {
        // On the stack: the writer's hot path allocates nothing per batch.
        let mut slices = [IoSlice::new(&[]); MAX_BATCH];
        let k = (bufs.len() - i).min(MAX_BATCH);
        slices[0] = IoSlice::new(&bufs[i][off..]);
        for (s, b) in slices[1..k].iter_mut().zip(&bufs[i + 1..]) {
            *s = IoSlice::new(b);
        }
        let mut n = match tokio::time::timeout(stall, wr.write_vectored(&slices[..k])).await {
            Ok(r) => r?,
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while i < bufs.len() && n >= bufs[i].len() - off {
            n -= bufs[i].len() - off;
            off = 0;
            i += 1;
        }
        off += n;
    }
    // TLS keeps what it has not yet sent until flushed (a no-op on TCP).
    match tokio::time::timeout(stall, wr.flush()).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_variants_parse_print_and_list_what_they_accept() {
        for x in XprtSec::ALL {
            assert_eq!(x.to_string().parse::<XprtSec>(), Ok(x));
        }
        assert_eq!(
            "ssl".parse::<XprtSec>(),
            Err("\"ssl\": expected \"none\", \"tls\" or \"mtls\"".to_string())
        );
    }
}
