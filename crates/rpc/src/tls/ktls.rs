//! kTLS offload for RPC-with-TLS server connections: after the rustls
//! handshake the record layer is handed to the kernel's TLS ULP, so
//! replies are encrypted by the kernel on their way out and calls arrive
//! already decrypted. Where the kernel has no TLS ULP (no `CONFIG_TLS`),
//! or not the negotiated cipher, the connection's records are Tarn's own in
//! user space (tls::records).
//!
//! The `ktls` crate does the socket options (its `unsafe` stays there);
//! reading non-data records (alerts, post-handshake messages) uses nix's
//! safe `recvmsg` with the `TLS_GET_RECORD_TYPE` control message.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tracing::{debug, info, warn};

/// `tls.ktls` / `--tls-ktls`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KtlsMode {
    /// Offload where the kernel can, Tarn's records in user space elsewhere.
    #[default]
    Auto,
    /// Always Tarn's records in user space.
    Off,
}

crate::transport::named_variants!(KtlsMode {
    Auto => "auto",
    Off => "off",
});

/// Whether the kernel has the TLS ULP: tried once on a loopback
/// connection made for the purpose, so the reason (ENOENT: no tls
/// module) is known before any client comes.
pub fn probe_ulp() -> Result<(), String> {
    let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot make a loopback socket to probe with: {e}"))?;
    let c = std::net::TcpStream::connect(l.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| format!("cannot make a loopback socket to probe with: {e}"))?;
    let _accepted = l.accept().map_err(|e| e.to_string())?;
    use nix::sys::socket::{setsockopt, sockopt::TcpUlp};
    match setsockopt(&c, TcpUlp::default(), b"tls") {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::ENOENT) => Err(
            "the kernel has no TLS ULP (setsockopt(TCP_ULP, \"tls\"): ENOENT: no tls module, CONFIG_TLS)"
                .into(),
        ),
        Err(e) => Err(format!("setsockopt(TCP_ULP, \"tls\"): {e}")),
    }
}

/// The server's kTLS state: the mode, what the kernel can do, and
/// whether a setup failed (then the server stops trying).
pub struct Ktls {
    mode: KtlsMode,
    /// Ok if the TLS ULP is there (probed with `Auto` only).
    ulp: Result<(), String>,
    /// The ciphers the kernel takes, probed at the first connection.
    ciphers: tokio::sync::OnceCell<Option<ktls::CompatibleCiphers>>,
    broken: AtomicBool,
    told_suite: AtomicBool,
}

impl Ktls {
    pub fn new(mode: KtlsMode) -> Ktls {
        let ulp = match mode {
            KtlsMode::Auto => probe_ulp(),
            KtlsMode::Off => Err("tls.ktls = \"off\"".into()),
        };
        Ktls {
            mode,
            ulp,
            ciphers: Default::default(),
            broken: AtomicBool::new(false),
            told_suite: AtomicBool::new(false),
        }
    }

    pub fn mode(&self) -> KtlsMode {
        self.mode
    }

    /// Why connections use Tarn's TLS records in user space, if they all do.
    pub fn unavailable(&self) -> Option<&str> {
        self.ulp.as_ref().err().map(|s| s.as_str())
    }

    /// For the startup log line.
    pub fn summary(&self) -> String {
        match &self.ulp {
            Ok(()) => "kTLS offload: auto (kernel TLS ULP present; TLS 1.3 AES-GCM, ChaCha20 where the kernel has it)".into(),
            Err(why) if self.mode == KtlsMode::Off => format!("no kTLS offload ({why})"),
            Err(why) => format!("no kTLS offload: {why}; connections use Tarn's TLS records in user space"),
        }
    }

    /// Whether to prepare the handshake for the switch.
    pub(crate) fn wanted(&self) -> bool {
        self.ulp.is_ok() && !self.broken.load(Ordering::Relaxed)
    }

    /// Whether the kernel takes `suite` (TLS 1.3 only: the server offers
    /// nothing else).
    pub(crate) async fn takes(&self, suite: rustls::SupportedCipherSuite) -> bool {
        let c = self
            .ciphers
            .get_or_init(|| async {
                match ktls::CompatibleCiphers::new().await {
                    Ok(c) => {
                        info!(tls13 = ?c.tls13, "kTLS: ciphers the kernel takes");
                        Some(c)
                    }
                    Err(e) => {
                        warn!(error = %e, "kTLS: cannot probe the kernel's ciphers; connections use Tarn's TLS records in user space");
                        None
                    }
                }
            })
            .await;
        let ok = c.as_ref().is_some_and(|c| c.is_compatible(suite));
        if !ok && !self.told_suite.swap(true, Ordering::Relaxed) {
            info!(suite = ?suite.suite(), "kTLS: the kernel does not take this cipher; such connections use Tarn's TLS records in user space (said once)");
        }
        ok
    }

    /// A setup failed after the probe said yes: later connections stay in
    /// user space (this one is lost: its rustls state went to the kernel).
    pub(crate) fn failed(&self, peer: SocketAddr, e: &ktls::Error) {
        if !self.broken.swap(true, Ordering::Relaxed) {
            warn!(%peer, error = %e, "kTLS setup failed; closing this connection, later ones use Tarn's TLS records in user space");
        }
    }
}

/// Hands a handshaken connection to the kernel: its two halves.
pub(crate) async fn offload(
    s: tokio_rustls::server::TlsStream<ktls::CorkStream<TcpStream>>,
    peer: SocketAddr,
) -> Result<(KtlsRead, KtlsWrite), ktls::Error> {
    let ks = ktls::config_ktls_server(s).await?;
    let (drained, tcp) = ks.into_raw();
    let (rd, wr) = tcp.into_split();
    Ok((
        KtlsRead {
            rd,
            pending: drained.map(bytes::Bytes::from).unwrap_or_default(),
            peer,
        },
        KtlsWrite(ktls::KtlsStream::new(WriteFd(wr), None)),
    ))
}

/// The read half of a kTLS connection: application data is read as from
/// plain TCP; any other record makes `read` fail with EIO and is then
/// taken with `recvmsg` to learn its type.
pub struct KtlsRead {
    rd: OwnedReadHalf,
    /// Plaintext rustls had already decrypted at the switch.
    pending: bytes::Bytes,
    peer: SocketAddr,
}

/// What a non-data record means for the connection.
enum Control {
    /// Application data after all (read into `pending`).
    Data,
    /// The connection ends here (logged).
    Close,
    /// Nothing at the head any more.
    Again,
}

impl KtlsRead {
    fn control_record(&mut self) -> io::Result<Control> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, TlsGetRecordType};
        let peer = self.peer;
        // Alerts are 2 bytes and a KeyUpdate 5; a record never passes 16 KiB.
        let mut data = vec![0u8; 16 * 1024 + 256];
        let mut cmsg = nix::cmsg_space!(u8);
        let (n, ty) = {
            let mut iov = [io::IoSliceMut::new(&mut data)];
            let r = match recvmsg::<()>(
                self.rd.as_ref().as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            ) {
                Ok(r) => r,
                Err(nix::errno::Errno::EAGAIN) => return Ok(Control::Again),
                Err(e) => return Err(e.into()),
            };
            let ty = r.cmsgs()?.find_map(|c| match c {
                ControlMessageOwned::TlsGetRecordType(t) => Some(t),
                _ => None,
            });
            (r.bytes, ty)
        };
        let body = &data[..n];
        match ty {
            None | Some(TlsGetRecordType::ApplicationData) => {
                self.pending = bytes::Bytes::copy_from_slice(body);
                Ok(if n == 0 {
                    Control::Close
                } else {
                    Control::Data
                })
            }
            Some(TlsGetRecordType::Alert) => {
                match body {
                    [_, 0] => debug!(%peer, "kTLS: the client closed TLS (close_notify)"),
                    [level, d] => {
                        let a = rustls::AlertDescription::from(*d);
                        warn!(%peer, level, alert = %super::alert::alert_name(a), "kTLS: the client sent a TLS alert; closing the connection")
                    }
                    _ => {
                        warn!(%peer, bytes = n, "kTLS: malformed TLS alert; closing the connection")
                    }
                }
                Ok(Control::Close)
            }
            Some(TlsGetRecordType::Handshake) => {
                match body.first() {
                    // KeyUpdate (RFC 8446 §4.6.3): the client's next records
                    // use a key derived from a traffic secret the ktls crate
                    // does not keep, so the kernel cannot be given it (and
                    // Linux 6.12 refuses a second TLS_RX with EBUSY anyway).
                    Some(24) => {
                        warn!(%peer, "kTLS: the client sent a TLS KeyUpdate; this server cannot give the kernel the client's next key (see docs/tls.md, kTLS); closing the connection, the client reconnects")
                    }
                    Some(t) => {
                        warn!(%peer, msg_type = t, "kTLS: unexpected TLS handshake message after the handshake; closing the connection")
                    }
                    None => {
                        warn!(%peer, "kTLS: empty TLS handshake record; closing the connection")
                    }
                }
                Ok(Control::Close)
            }
            Some(t) => {
                warn!(%peer, record = ?t, "kTLS: unexpected TLS record type; closing the connection");
                Ok(Control::Close)
            }
        }
    }
}

fn take_pending(pending: &mut bytes::Bytes, buf: &mut ReadBuf<'_>) {
    let k = pending.len().min(buf.remaining());
    buf.put_slice(&pending.split_to(k));
}

impl AsyncRead for KtlsRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            take_pending(&mut this.pending, buf);
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut this.rd).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.raw_os_error() == Some(nix::libc::EIO) => {
                match this.control_record()? {
                    Control::Data => {
                        take_pending(&mut this.pending, buf);
                        Poll::Ready(Ok(()))
                    }
                    // End of stream: the reader closes the connection as
                    // when the client does.
                    Control::Close => Poll::Ready(Ok(())),
                    // Not expected (EIO means a record is waiting): tried
                    // again from the executor, not in a loop here.
                    Control::Again => {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                }
            }
            Poll::Ready(Err(e)) if e.raw_os_error() == Some(nix::libc::EBADMSG) => {
                warn!(peer = %this.peer, "kTLS: a record from the client did not decrypt (EBADMSG); closing the connection");
                Poll::Ready(Err(e))
            }
            r => r,
        }
    }
}

impl crate::transport::ConnRead for KtlsRead {
    fn quickack(&self) {
        crate::transport::quickack(&self.rd)
    }
}

/// The write half as the `ktls` crate's stream wants it (a descriptor to
/// send its close_notify on).
pub struct WriteFd(OwnedWriteHalf);

impl AsRawFd for WriteFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_ref().as_raw_fd()
    }
}

impl AsyncWrite for WriteFd {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The write half of a kTLS connection: plain (vectored) socket writes,
/// the kernel makes the records; shutting down sends close_notify
/// (through the `ktls` crate's stream, whose own writes are not vectored).
pub struct KtlsWrite(ktls::KtlsStream<WriteFd>);

impl AsyncWrite for KtlsWrite {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_parses() {
        assert_eq!("auto".parse::<KtlsMode>(), Ok(KtlsMode::Auto));
        assert_eq!("off".parse::<KtlsMode>(), Ok(KtlsMode::Off));
        assert!("on".parse::<KtlsMode>().is_err());
        assert_eq!(
            "on".parse::<KtlsMode>(),
            Err("\"on\": expected \"auto\" or \"off\"".to_string())
        );
        assert_eq!(KtlsMode::default(), KtlsMode::Auto);
    }

    #[test]
    fn off_never_probes() {
        let k = Ktls::new(KtlsMode::Off);
        assert!(!k.wanted());
        assert!(k.summary().starts_with("no kTLS offload"));
    }

    /// On a kernel without the TLS ULP (the development host) the probe
    /// says why and the server does not try; where it is there, it does.
    #[test]
    fn auto_follows_the_kernel() {
        let k = Ktls::new(KtlsMode::Auto);
        match probe_ulp() {
            Ok(()) => assert!(k.wanted()),
            Err(why) => {
                assert!(!k.wanted());
                assert_eq!(k.unavailable(), Some(why.as_str()));
                assert!(k
                    .summary()
                    .contains("connections use Tarn's TLS records in user space"));
            }
        }
    }
}
