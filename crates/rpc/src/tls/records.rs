//! TLS 1.3 records (RFC 8446 §5) made and opened by Tarn after rustls's
//! handshake, where the kernel does not take the connection (kTLS).
//!
//! Why not rustls's own record layer: it copies each record's plaintext
//! twice more on receipt (into its plaintext queue, then out of it) and
//! once more on sending, and it seals one record after another on the
//! connection's one writer. Here the server seals a long reply where it
//! is ([`RecordWrite::send_batch`]), anything else is copied once into
//! its records and sealed in place, and records are opened where they
//! are received, in the RPC reader's own buffer ([`RecordRead::fill`]):
//! a large call or reply is not copied at all. The keys and sequence
//! numbers are rustls's, taken with
//! `dangerous_extract_secrets` as for kTLS; the AEADs are *ring*'s, the
//! ones rustls itself uses. What this layer cannot follow is what kTLS
//! cannot either: a KeyUpdate (the traffic secret it derives from is not
//! extracted) ends the connection.
//!
//! [`Sealer`] and [`Opener`] are pure (byte vectors in, byte vectors out);
//! [`RecordRead`] and [`RecordWrite`] put them on the two halves of a
//! socket.

use bytes::{Buf, BufMut, BytesMut};
use ring::aead;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::rustls::ConnectionTrafficSecrets;

/// The largest plaintext of one record (2^14).
pub const MAX_PLAIN: usize = 1 << 14;
const HEADER: usize = 5;
const TAG: usize = 16;
/// The largest record a peer may send: 2^14 + 256 of ciphertext.
const MAX_CIPHER: usize = MAX_PLAIN + 256;

const APPLICATION_DATA: u8 = 23;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;

/// A record's failure to open, or one that ends the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Not a TLS 1.3 record header, or longer than the limit.
    Malformed(&'static str),
    /// The tag did not verify: altered, or not from our peer.
    Decrypt,
    /// The peer ended TLS (close_notify).
    CloseNotify,
    /// Any other alert (its description).
    Alert(u8),
    /// A KeyUpdate: its new key cannot be derived here.
    KeyUpdate,
    /// A handshake message other than NewSessionTicket or KeyUpdate.
    Handshake(u8),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Malformed(why) => write!(f, "malformed TLS record: {why}"),
            RecordError::Decrypt => f.write_str("a TLS record did not decrypt (bad_record_mac)"),
            RecordError::CloseNotify => f.write_str("the peer closed TLS (close_notify)"),
            RecordError::Alert(d) => write!(
                f,
                "the peer sent TLS alert {}",
                super::alert::alert_name(tokio_rustls::rustls::AlertDescription::from(*d))
            ),
            RecordError::KeyUpdate => f.write_str(
                "the peer sent a TLS KeyUpdate, which this connection cannot follow (its next key is not known here); closing, the client reconnects",
            ),
            RecordError::Handshake(t) => {
                write!(f, "unexpected TLS handshake message {t} after the handshake")
            }
        }
    }
}

impl From<RecordError> for io::Error {
    fn from(e: RecordError) -> io::Error {
        let kind = match e {
            RecordError::CloseNotify => io::ErrorKind::UnexpectedEof,
            RecordError::Decrypt | RecordError::Malformed(_) => io::ErrorKind::InvalidData,
            _ => io::ErrorKind::ConnectionAborted,
        };
        io::Error::new(kind, e.to_string())
    }
}

/// One direction's key, IV and sequence number.
struct Keys {
    key: aead::LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Keys {
    fn new(seq: u64, s: &ConnectionTrafficSecrets) -> Result<Keys, String> {
        let (alg, key, iv) = match s {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return Err("a cipher suite Tarn's records do not know".into()),
        };
        let key = aead::UnboundKey::new(alg, key.as_ref())
            .map_err(|_| "the extracted key does not fit its cipher".to_string())?;
        let iv: [u8; 12] = iv
            .as_ref()
            .try_into()
            .map_err(|_| "the extracted IV is not 12 bytes".to_string())?;
        Ok(Keys {
            key: aead::LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// RFC 8446 §5.3: the IV with the sequence number XORed into its end.
    fn next_nonce(&mut self) -> aead::Nonce {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        self.seq += 1;
        aead::Nonce::assume_unique_for_key(n)
    }
}

/// Records one key may seal: RFC 8446 §5.5 allows AES-GCM 2^24.5 full-size
/// records per key. Past it a connection would need a KeyUpdate, which
/// this layer does not make; it ends instead and the client reconnects
/// (hundreds of GiB into a connection).
const RECORDS_PER_KEY: u64 = 1 << 24;

/// Makes records of what we send.
pub struct Sealer {
    keys: Keys,
    last: u64,
}

impl Sealer {
    pub fn new(seq: u64, s: &ConnectionTrafficSecrets) -> Result<Sealer, String> {
        Keys::new(seq, s).map(|keys| Sealer {
            last: seq.saturating_add(RECORDS_PER_KEY),
            keys,
        })
    }

    /// Whether the key has sealed as many records as it may; sealing
    /// `plain` next would pass the limit.
    pub fn worn_out(&self, plain: usize) -> bool {
        self.keys.seq + (plain / MAX_PLAIN) as u64 + 2 > self.last
    }

    /// Appends `plain` to `out` as application-data records of at most
    /// [`MAX_PLAIN`] bytes each.
    pub fn seal(&mut self, mut plain: &[u8], out: &mut Vec<u8>) {
        while !plain.is_empty() {
            let n = plain.len().min(MAX_PLAIN);
            self.record(APPLICATION_DATA, &plain[..n], out);
            plain = &plain[n..];
        }
    }

    /// Seals the record whose plaintext is `in_out` but its last byte,
    /// in place: that byte (the next record's first, say) stands in for
    /// the record's content type while sealing and is put back after, so a
    /// large buffer is sealed where it is, record by record, without being
    /// copied into records. Returns the record's header and what follows
    /// its ciphertext (the sealed content type and the tag): the record
    /// on the wire is header, `in_out[..len - 1]`, trailer.
    pub fn seal_at(&mut self, in_out: &mut [u8]) -> ([u8; HEADER], [u8; 1 + TAG]) {
        let last = in_out.len() - 1;
        let kept = in_out[last];
        in_out[last] = APPLICATION_DATA;
        let len = (in_out.len() + TAG) as u16;
        let [l0, l1] = len.to_be_bytes();
        let head = [APPLICATION_DATA, 3, 3, l0, l1];
        let nonce = self.keys.next_nonce();
        let tag = self
            .keys
            .key
            .seal_in_place_separate_tag(nonce, aead::Aad::from(head), in_out)
            .expect("a record under the AEAD's limit");
        let mut trailer = [0u8; 1 + TAG];
        trailer[0] = in_out[last];
        trailer[1..].copy_from_slice(tag.as_ref());
        in_out[last] = kept;
        (head, trailer)
    }

    /// Appends a close_notify alert.
    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        self.record(ALERT, &[1, 0], out);
    }

    fn record(&mut self, ty: u8, body: &[u8], out: &mut Vec<u8>) {
        let len = body.len() + 1 + TAG;
        let start = out.len();
        out.reserve(HEADER + len);
        out.extend_from_slice(&[APPLICATION_DATA, 3, 3]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out.extend_from_slice(body);
        out.push(ty);
        let (head, inner) = out[start..].split_at_mut(HEADER);
        let nonce = self.keys.next_nonce();
        let tag = self
            .keys
            .key
            .seal_in_place_separate_tag(nonce, aead::Aad::from(&*head), inner)
            .expect("a record under the AEAD's limit");
        out.extend_from_slice(tag.as_ref());
    }
}

/// What an opened record holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// Application data: its plaintext is `buf[5..5 + len]`.
    Data(usize),
    /// Nothing for the caller (a NewSessionTicket; the client need not
    /// keep it): the record's bytes may be dropped.
    Skip,
}

/// Opens the records we receive.
pub struct Opener(Keys);

impl Opener {
    pub fn new(seq: u64, s: &ConnectionTrafficSecrets) -> Result<Opener, String> {
        Keys::new(seq, s).map(Opener)
    }

    /// The length of the record at the front of `buf` once its header is
    /// there (header included), or None while fewer than 5 bytes are.
    pub fn record_len(buf: &[u8]) -> Result<Option<usize>, RecordError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        if buf[0] != APPLICATION_DATA || buf[1] != 3 {
            return Err(RecordError::Malformed(
                "not a TLS 1.3 application_data record",
            ));
        }
        let len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
        if !(TAG + 1..=MAX_CIPHER).contains(&len) {
            return Err(RecordError::Malformed("record length out of range"));
        }
        Ok(Some(HEADER + len))
    }

    /// Opens the whole record `rec` (header first) in place.
    pub fn open(&mut self, rec: &mut [u8]) -> Result<Opened, RecordError> {
        let (head, body) = rec.split_at_mut(HEADER);
        let nonce = self.0.next_nonce();
        let plain = self
            .0
            .key
            .open_in_place(nonce, aead::Aad::from(&*head), body)
            .map_err(|_| RecordError::Decrypt)?;
        classify(plain)
    }

    /// Opens the record that starts at `in_out[at..]` (header first, the
    /// record ending where `in_out` does), its plaintext landing at the
    /// front of `in_out`: records received one after another into a
    /// buffer become one run of plaintext without a copy (*ring* decrypts
    /// from the one place into the other).
    pub fn open_to_front(&mut self, in_out: &mut [u8], at: usize) -> Result<Opened, RecordError> {
        let mut head = [0u8; HEADER];
        head.copy_from_slice(&in_out[at..at + HEADER]);
        let nonce = self.0.next_nonce();
        let plain = self
            .0
            .key
            .open_within(nonce, aead::Aad::from(head), in_out, at + HEADER..)
            .map_err(|_| RecordError::Decrypt)?;
        classify(plain)
    }
}

/// What an opened record's inner plaintext is (RFC 8446 §5.4).
fn classify(plain: &[u8]) -> Result<Opened, RecordError> {
    // The content type is the last byte that is not padding.
    let Some(end) = plain.iter().rposition(|&b| b != 0) else {
        return Err(RecordError::Malformed("a record of padding only"));
    };
    let content = &plain[..end];
    match plain[end] {
        APPLICATION_DATA => Ok(Opened::Data(end)),
        ALERT => match content {
            [_, 0] => Err(RecordError::CloseNotify),
            [_, d] => Err(RecordError::Alert(*d)),
            _ => Err(RecordError::Malformed("an alert not 2 bytes long")),
        },
        HANDSHAKE => match content.first() {
            Some(4) => Ok(Opened::Skip),
            Some(24) => Err(RecordError::KeyUpdate),
            Some(t) => Err(RecordError::Handshake(*t)),
            None => Err(RecordError::Malformed("an empty handshake record")),
        },
        _ => Err(RecordError::Malformed("an unknown content type")),
    }
}

/// Room for eight full records per socket read.
const READ_AHEAD: usize = 8 * (HEADER + MAX_CIPHER);

/// The read half: records read from `io` and opened in `buf`; what a
/// caller reads is the plaintext.
pub struct RecordRead<R> {
    io: R,
    opener: Opener,
    /// Received bytes; its front `plain` bytes (from `plain_at`) are
    /// opened plaintext not yet read.
    buf: BytesMut,
    plain_at: usize,
    plain: usize,
    /// Plaintext rustls had already decrypted at the switch.
    pending: bytes::Bytes,
    /// The peer, for the log line of a record that ends the connection.
    peer: Option<std::net::SocketAddr>,
    /// A close_notify came ([`RecordRead::fill`]): the stream has ended.
    ended: bool,
}

impl<R> RecordRead<R> {
    pub fn new(io: R, opener: Opener, pending: bytes::Bytes) -> RecordRead<R> {
        RecordRead {
            peer: None,
            ended: false,
            io,
            opener,
            buf: BytesMut::with_capacity(READ_AHEAD),
            plain_at: 0,
            plain: 0,
            pending,
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.io
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for RecordRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.opened_out(out.remaining(), |p| out.put_slice(p))? > 0 || this.ended {
                return Poll::Ready(Ok(()));
            }
            match this.checked(Opener::record_len(&this.buf))? {
                Some(rec) if this.buf.len() >= rec => {
                    this.open_aside(rec)?;
                    continue;
                }
                _ => {}
            }
            // More bytes: at least the rest of this record, and room for a
            // few more so that a stream of them takes few reads.
            if this.buf.capacity() - this.buf.len() < HEADER + MAX_CIPHER {
                this.buf.reserve(READ_AHEAD);
            }
            let n = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.io),
                cx,
                &mut this.buf
            ))?;
            if n == 0 {
                return Poll::Ready(this.eof().map(|_| ()));
            }
        }
    }
}

impl<R> RecordRead<R> {
    /// Hands up to `max` (> 0) bytes of plaintext opened aside (rustls's,
    /// or a record opened in `buf`) to `put`: how many (0 when there is
    /// none).
    fn opened_out(&mut self, max: usize, put: impl FnOnce(&[u8])) -> io::Result<usize> {
        if !self.pending.is_empty() {
            let k = self.pending.len().min(max);
            put(&self.pending.split_to(k));
            return Ok(k);
        }
        if self.plain == 0 {
            return Ok(0);
        }
        let k = self.plain.min(max);
        put(&self.buf[self.plain_at..self.plain_at + k]);
        self.plain_at += k;
        self.plain -= k;
        if self.plain == 0 {
            // The record is used up: drop it (its tag too).
            let rec = Opener::record_len(&self.buf)?.expect("an opened record");
            self.buf.advance(rec);
        }
        Ok(k)
    }

    /// Opens the whole record at the front of `buf` there; a close_notify
    /// ends the stream.
    fn open_aside(&mut self, rec: usize) -> io::Result<()> {
        match self.opener.open(&mut self.buf[..rec]) {
            Ok(Opened::Data(0)) | Ok(Opened::Skip) => self.buf.advance(rec),
            Ok(Opened::Data(n)) => {
                self.plain_at = HEADER;
                self.plain = n;
            }
            Err(RecordError::CloseNotify) => {
                tracing::debug!(peer = ?self.peer, "TLS: the peer closed TLS (close_notify)");
                self.ended = true;
            }
            Err(e) => return Err(self.fatal(e)),
        }
        Ok(())
    }

    /// The end of the stream: clean between records, else an error.
    fn eof(&self) -> io::Result<usize> {
        if self.buf.is_empty() {
            return Ok(0);
        }
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection ended inside a TLS record",
        ))
    }

    fn checked<T>(&self, r: Result<T, RecordError>) -> io::Result<T> {
        r.map_err(|e| self.fatal(e))
    }

    /// A record that ends the connection, logged.
    fn fatal(&self, e: RecordError) -> io::Error {
        tracing::warn!(peer = ?self.peer, error = %e, "TLS: closing the connection");
        e.into()
    }
}

/// Room in the caller's buffer worth reading into before a record's
/// length is known.
const MIN_DIRECT: usize = 1 << 10;

impl RecordRead<tokio::net::tcp::OwnedReadHalf> {
    /// Appends plaintext to `out`: what one socket read brings (0 at the
    /// end of the stream), about `want` bytes, `out` having room for them.
    /// The records are read into `out` itself and opened where they
    /// landed, each record's plaintext moved to the end of the one before
    /// as it is decrypted, so a stream of records becomes one run of
    /// plaintext without a copy (a 1 MiB reply lands in a buffer of its
    /// own, as over plain TCP; `poll_read` copies every byte out of the
    /// records). Copied: a record cut by the end of a read (kept aside
    /// until its rest arrives) and one that does not fit in `out`'s room
    /// (opened aside).
    pub async fn fill(&mut self, out: &mut BytesMut, want: usize) -> io::Result<usize> {
        use tokio::io::AsyncReadExt;
        loop {
            // Plaintext opened aside: rustls's, or a record that did not fit.
            let k = self.opened_out(want, |p| out.extend_from_slice(p))?;
            if k > 0 {
                return Ok(k);
            }
            if self.ended {
                return Ok(0);
            }
            let known = self.checked(Opener::record_len(&self.buf))?;
            if let Some(rec) = known.filter(|&rec| self.buf.len() >= rec) {
                self.open_aside(rec)?;
                continue;
            }
            // Ciphertext for `want` bytes of plaintext and the record that
            // ends past them, no more: the rest belongs to the next reply.
            let room = (out.capacity() - out.len()).min(want + (want >> 9) + HEADER + MAX_CIPHER);
            let direct = match known {
                Some(rec) => room >= rec,
                None => room >= MIN_DIRECT,
            };
            if !direct {
                // Aside: the rest of this record (or of its header), no further.
                let more = known.unwrap_or(HEADER) - self.buf.len();
                self.buf.reserve(more);
                if self.io.read_buf(&mut (&mut self.buf).limit(more)).await? == 0 {
                    return self.eof();
                }
                continue;
            }
            self.io.readable().await?;
            let start = out.len();
            // The start of a record cut by the last read goes first.
            out.extend_from_slice(&self.buf);
            self.buf.clear();
            let left = room - (out.len() - start);
            let got = self.io.try_read_buf(&mut (&mut *out).limit(left));
            match got {
                Ok(0) => {
                    self.buf.extend_from_slice(&out[start..]);
                    out.truncate(start);
                    return self.eof();
                }
                Ok(_) => {}
                Err(e) => {
                    self.buf.extend_from_slice(&out[start..]);
                    out.truncate(start);
                    if e.kind() == io::ErrorKind::WouldBlock {
                        continue;
                    }
                    return Err(e);
                }
            }
            // Each whole record opened to the end of the plaintext so far
            // (on one that ends the connection, `out` keeps only the
            // plaintext before it).
            let (mut plain, mut at) = (start, start);
            loop {
                let rec = match Opener::record_len(&out[at..]) {
                    Ok(Some(rec)) if out.len() - at >= rec => rec,
                    Ok(_) => break,
                    Err(e) => {
                        out.truncate(plain);
                        return Err(self.fatal(e));
                    }
                };
                let opened = self
                    .opener
                    .open_to_front(&mut out[plain..at + rec], at - plain);
                match opened {
                    Ok(Opened::Data(n)) => plain += n,
                    Ok(Opened::Skip) => {}
                    Err(RecordError::CloseNotify) => {
                        tracing::debug!(peer = ?self.peer, "TLS: the peer closed TLS (close_notify)");
                        self.ended = true;
                        at = out.len();
                        break;
                    }
                    Err(e) => {
                        out.truncate(plain);
                        return Err(self.fatal(e));
                    }
                }
                at += rec;
            }
            self.buf.extend_from_slice(&out[at..]);
            out.truncate(plain);
            if plain > start || self.ended {
                return Ok(plain - start);
            }
        }
    }
}

/// How much plaintext one write seals before the records go out: enough
/// for a 1 MiB reply in four socket writes, little enough that sending
/// starts early.
const SEAL_AHEAD: usize = 256 << 10;

/// The write half: plaintext written is sealed into records in `out`,
/// which go to `io`; flush and shutdown send what is left, shutdown a
/// close_notify first.
pub struct RecordWrite<W> {
    io: W,
    sealer: Sealer,
    out: Vec<u8>,
    sent: usize,
    closed: bool,
    /// [`RecordWrite::send_batch`]'s, kept between batches: short replies
    /// waiting to share records, and the pieces of one vectored write.
    staged: Vec<u8>,
    wire: Vec<bytes::Bytes>,
}

impl<W> RecordWrite<W> {
    pub fn new(io: W, sealer: Sealer) -> RecordWrite<W> {
        RecordWrite {
            io,
            sealer,
            out: Vec::with_capacity(SEAL_AHEAD + SEAL_AHEAD / MAX_PLAIN * (HEADER + 1 + TAG)),
            sent: 0,
            closed: false,
            staged: Vec::new(),
            wire: Vec::new(),
        }
    }

    /// Seals the staged short replies into `copied` (several to a record).
    fn seal_staged(&mut self, copied: &mut Vec<u8>) {
        self.sealer.seal(&self.staged, copied);
        self.staged.clear();
    }
}

impl<W: AsyncWrite + Unpin> RecordWrite<W> {
    /// Writes what is sealed until all is sent or the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for RecordWrite<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Room first: what was sealed before goes out.
        ready!(this.poll_send(cx))?;
        if this.sealer.worn_out(SEAL_AHEAD) {
            return Poll::Ready(Err(worn_out()));
        }
        // Small buffers share records; a record never passes MAX_PLAIN.
        let mut taken = 0;
        let mut staged = [0u8; MAX_PLAIN];
        let mut fill = 0;
        'all: for b in bufs {
            let mut b: &[u8] = b;
            while !b.is_empty() {
                if taken >= SEAL_AHEAD {
                    break 'all;
                }
                if fill == 0 && b.len() >= MAX_PLAIN {
                    // Whole records straight from the caller's buffer.
                    let n = (b.len() / MAX_PLAIN * MAX_PLAIN).min(SEAL_AHEAD - taken);
                    this.sealer.seal(&b[..n], &mut this.out);
                    taken += n;
                    b = &b[n..];
                    continue;
                }
                let n = b.len().min(MAX_PLAIN - fill);
                staged[fill..fill + n].copy_from_slice(&b[..n]);
                fill += n;
                taken += n;
                b = &b[n..];
                if fill == MAX_PLAIN {
                    this.sealer.seal(&staged, &mut this.out);
                    fill = 0;
                }
            }
        }
        if fill > 0 {
            this.sealer.seal(&staged[..fill], &mut this.out);
        }
        // Start sending; what the socket does not take now goes on the
        // next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        if !this.closed {
            this.closed = true;
            this.sealer.close_notify(&mut this.out);
            ready!(this.poll_send(cx))?;
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// Replies at least this long are sealed where they are
/// ([`RecordWrite::send_batch`]); shorter ones are copied into records,
/// several to a record.
const SEAL_WHERE_THEY_ARE: usize = 4 * MAX_PLAIN;

impl<W: AsyncWrite + Unpin + Send> RecordWrite<W> {
    /// Sends a batch of replies in order (the server's writer): a long
    /// reply that nothing else holds is sealed in its own buffer, record
    /// by record ([`Sealer::seal_at`]), and goes out as header, ciphertext,
    /// trailer, with no copy of its data; short ones, and the last record
    /// of a long one, are copied into records as `poll_write` does.
    /// TimedOut if no byte goes out for `stall`.
    pub async fn send_batch(
        &mut self,
        batch: &mut Vec<bytes::Bytes>,
        stall: std::time::Duration,
    ) -> io::Result<()> {
        // What earlier writes sealed goes first.
        std::future::poll_fn(|cx| self.poll_send(cx)).await?;
        if !batch
            .iter()
            .any(|b| b.len() >= SEAL_WHERE_THEY_ARE && b.is_unique())
        {
            // Short replies only: copied into records, the buffer reused.
            return crate::transport::write_all_vectored(self, batch, stall).await;
        }
        let total: usize = batch.iter().map(|b| b.len()).sum();
        if self.sealer.worn_out(total) {
            return Err(worn_out());
        }
        let mut copied: Vec<u8> = Vec::new();
        for b in batch.drain(..) {
            if b.len() < SEAL_WHERE_THEY_ARE {
                self.staged.extend_from_slice(&b);
                continue;
            }
            // Staged short replies, sealed, go before this one.
            self.seal_staged(&mut copied);
            let mut m = match b.try_into_mut() {
                Ok(m) => m,
                Err(b) => {
                    // Held elsewhere (the DRC): sealed from where it is
                    // into copied records.
                    self.sealer.seal(&b, &mut copied);
                    continue;
                }
            };
            if !copied.is_empty() {
                self.wire.push(std::mem::take(&mut copied).into());
            }
            // Every record but the last has a byte after it to seal with.
            let whole = (m.len() - 1) / MAX_PLAIN;
            let mut meta = Vec::with_capacity(whole * (HEADER + 1 + TAG));
            for i in 0..whole {
                let (head, trailer) = self
                    .sealer
                    .seal_at(&mut m[i * MAX_PLAIN..=(i + 1) * MAX_PLAIN]);
                meta.extend_from_slice(&head);
                meta.extend_from_slice(&trailer);
            }
            let rest = m.split_off(whole * MAX_PLAIN);
            let (data, meta) = (m.freeze(), bytes::Bytes::from(meta));
            let each = HEADER + 1 + TAG;
            for i in 0..whole {
                let at = i * each;
                self.wire.push(meta.slice(at..at + HEADER));
                self.wire
                    .push(data.slice(i * MAX_PLAIN..(i + 1) * MAX_PLAIN));
                self.wire.push(meta.slice(at + HEADER..at + each));
            }
            self.staged.extend_from_slice(&rest);
        }
        self.seal_staged(&mut copied);
        if !copied.is_empty() {
            self.wire.push(copied.into());
        }
        let sent = crate::transport::write_all_vectored(&mut self.io, &mut self.wire, stall).await;
        self.wire.clear();
        sent
    }
}

fn worn_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "TLS: this connection's key has sealed 2^24 records (RFC 8446 §5.5); closing it, the client reconnects with fresh keys",
    )
}

/// The two halves of a connection on Tarn's records.
pub type Halves = (
    RecordRead<tokio::net::tcp::OwnedReadHalf>,
    RecordWrite<tokio::net::tcp::OwnedWriteHalf>,
);

/// Takes a connection's records over from rustls once its handshake is
/// done (server or client side): what rustls already decrypted is read
/// first.
pub async fn records<S: Handshaken>(mut s: S) -> io::Result<Halves> {
    let drained = drain(&mut s).await?;
    let (tcp, secrets) = s.into_secrets();
    let secrets =
        secrets.map_err(|e| io::Error::other(format!("extracting the traffic keys: {e}")))?;
    halves(tcp, secrets, drained)
}

fn halves(
    tcp: tokio::net::TcpStream,
    secrets: tokio_rustls::rustls::ExtractedSecrets,
    drained: Vec<u8>,
) -> io::Result<Halves> {
    let (tx_seq, tx) = secrets.tx;
    let (rx_seq, rx) = secrets.rx;
    let sealer = Sealer::new(tx_seq, &tx).map_err(io::Error::other)?;
    let opener = Opener::new(rx_seq, &rx).map_err(io::Error::other)?;
    let peer = tcp.peer_addr().ok();
    let (rd, wr) = tcp.into_split();
    let mut rd = RecordRead::new(rd, opener, drained.into());
    rd.peer = peer;
    Ok((rd, RecordWrite::new(wr, sealer)))
}

/// Sends what rustls still holds (the server's session tickets), then
/// reads what it has decrypted: the cork stream ends the reading at the
/// next record boundary, finishing a record rustls began.
async fn drain<S: Handshaken>(s: &mut S) -> io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.flush().await?;
    s.cork();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk).await {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(out),
            Err(e) => return Err(e),
        }
    }
}

/// A rustls stream over a cork stream, its handshake done.
pub trait Handshaken: AsyncRead + AsyncWrite + Unpin {
    fn cork(&mut self);
    /// The socket, and the keys and sequence numbers rustls was at.
    fn into_secrets(
        self,
    ) -> (
        tokio::net::TcpStream,
        Result<tokio_rustls::rustls::ExtractedSecrets, tokio_rustls::rustls::Error>,
    );
}

/// Server and client streams alike (their connections differ in type).
macro_rules! handshaken {
    ($side:ident) => {
        impl Handshaken
            for tokio_rustls::$side::TlsStream<ktls::CorkStream<tokio::net::TcpStream>>
        {
            fn cork(&mut self) {
                self.get_mut().0.corked = true;
            }
            fn into_secrets(
                self,
            ) -> (
                tokio::net::TcpStream,
                Result<tokio_rustls::rustls::ExtractedSecrets, tokio_rustls::rustls::Error>,
            ) {
                let (io, conn) = self.into_inner();
                (io.io, conn.dangerous_extract_secrets())
            }
        }
    };
}
handshaken!(server);
handshaken!(client);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_rustls::rustls::crypto::cipher::{AeadKey, Iv};

    /// `len` bytes cut into pieces of the `sizes` in turn (the last one
    /// shorter): each piece's number and range.
    fn pieces(len: usize, sizes: &[usize]) -> Vec<(usize, std::ops::Range<usize>)> {
        let mut at = 0;
        let mut out = vec![];
        for (i, n) in sizes.iter().cycle().enumerate() {
            if at >= len {
                break;
            }
            let n = (*n).min(len - at);
            out.push((i, at..at + n));
            at += n;
        }
        out
    }

    fn secrets(k: u8) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from([k; 32]),
            iv: Iv::from([k; 12]),
        }
    }

    #[test]
    fn what_is_sealed_opens_in_records_of_at_most_16k() {
        let mut s = Sealer::new(7, &secrets(1)).unwrap();
        let mut o = Opener::new(7, &secrets(1)).unwrap();
        let plain: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let mut wire = Vec::new();
        s.seal(&plain, &mut wire);
        let mut got = Vec::new();
        let mut at = 0;
        while at < wire.len() {
            let len = Opener::record_len(&wire[at..]).unwrap().unwrap();
            assert!(len <= HEADER + MAX_PLAIN + 1 + TAG);
            match o.open(&mut wire[at..at + len]).unwrap() {
                Opened::Data(n) => got.extend_from_slice(&wire[at + HEADER..at + HEADER + n]),
                Opened::Skip => panic!("data expected"),
            }
            at += len;
        }
        assert_eq!(got, plain);
    }

    #[test]
    fn an_altered_record_or_wrong_sequence_does_not_open() {
        let mut s = Sealer::new(0, &secrets(2)).unwrap();
        let mut wire = Vec::new();
        s.seal(b"hello", &mut wire);
        let mut bad = wire.clone();
        bad[8] ^= 1;
        assert_eq!(
            Opener::new(0, &secrets(2)).unwrap().open(&mut bad),
            Err(RecordError::Decrypt)
        );
        assert_eq!(
            Opener::new(1, &secrets(2)).unwrap().open(&mut wire.clone()),
            Err(RecordError::Decrypt)
        );
        assert_eq!(
            Opener::new(0, &secrets(2)).unwrap().open(&mut wire),
            Ok(Opened::Data(5))
        );
    }

    #[test]
    fn close_notify_and_key_update_end_the_stream() {
        let mut s = Sealer::new(0, &secrets(3)).unwrap();
        let mut o = Opener::new(0, &secrets(3)).unwrap();
        let mut wire = Vec::new();
        s.close_notify(&mut wire);
        assert_eq!(o.open(&mut wire), Err(RecordError::CloseNotify));
        let mut wire = Vec::new();
        s.record(HANDSHAKE, &[24, 0, 0, 1, 0], &mut wire);
        assert_eq!(o.open(&mut wire), Err(RecordError::KeyUpdate));
        let mut wire = Vec::new();
        s.record(HANDSHAKE, &[4, 0, 0, 0], &mut wire);
        assert_eq!(o.open(&mut wire), Ok(Opened::Skip));
    }

    #[test]
    fn a_key_wears_out_before_rfc_8446s_limit() {
        let s = Sealer::new(0, &secrets(5)).unwrap();
        assert!(!s.worn_out(SEAL_AHEAD));
        let s = Sealer::new(RECORDS_PER_KEY - 17, &secrets(5)).unwrap();
        assert!(!s.worn_out(SEAL_AHEAD));
        let mut s = Sealer {
            last: 40,
            ..Sealer::new(30, &secrets(5)).unwrap()
        };
        assert!(s.worn_out(SEAL_AHEAD));
        s.keys.seq = 0;
        assert!(!s.worn_out(MAX_PLAIN));
    }

    #[test]
    fn headers_that_are_not_tls13_records_are_refused() {
        assert_eq!(Opener::record_len(&[23, 3, 3, 0]), Ok(None));
        assert!(Opener::record_len(&[22, 3, 3, 0, 40]).is_err());
        assert!(Opener::record_len(&[23, 3, 3, 0x50, 0]).is_err());
        assert!(Opener::record_len(&[23, 3, 3, 0, 3]).is_err());
    }

    /// The adapters: writes of many sizes through RecordWrite, read back
    /// through RecordRead in small reads, then close_notify as the end.
    #[tokio::test]
    async fn the_halves_carry_a_stream_and_close_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, b) = tokio::io::duplex(64 << 10);
        let mut w = RecordWrite::new(a, Sealer::new(3, &secrets(4)).unwrap());
        let mut r = RecordRead::new(
            b,
            Opener::new(3, &secrets(4)).unwrap(),
            bytes::Bytes::from_static(b"early"),
        );
        let data: Vec<u8> = (0..1_300_000u32).map(|i| (i * 7) as u8).collect();
        let d2 = data.clone();
        let writer = tokio::spawn(async move {
            for (i, r) in pieces(d2.len(), &[1, 3, 16384, 100_000, 1 << 20]) {
                let (at, n) = (r.start, r.len());
                if i % 2 == 0 {
                    w.write_all(&d2[at..at + n]).await.unwrap();
                } else {
                    let (x, y) = d2[at..at + n].split_at(n / 2);
                    let bufs = [io::IoSlice::new(x), io::IoSlice::new(y)];
                    let mut done = 0;
                    while done < n {
                        let k = w.write_vectored(&bufs).await.unwrap();
                        assert!(k > 0);
                        done += k;
                        if done < n {
                            w.write_all(&d2[at + done..at + n]).await.unwrap();
                            done = n;
                        }
                    }
                }
            }
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        let mut small = [0u8; 5000];
        loop {
            let n = r.read(&mut small).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&small[..n]);
        }
        writer.await.unwrap();
        assert_eq!(&got[..5], b"early");
        assert_eq!(got[5..], data[..]);
    }

    /// A connected pair on loopback: the sending end, and the receiving
    /// end's halves (the write half kept so the connection stays up).
    async fn loopback() -> (
        tokio::net::TcpStream,
        tokio::net::tcp::OwnedReadHalf,
        tokio::net::tcp::OwnedWriteHalf,
    ) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tx = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (rx, _) = l.accept().await.unwrap();
        let (rx, keep) = rx.into_split();
        (tx, rx, keep)
    }

    /// `fill` over a socket: records cut anywhere by the writes, runs of
    /// plaintext as long as the caller has room for, records that do not
    /// fit opened aside, a NewSessionTicket skipped, close_notify the end.
    #[tokio::test]
    async fn fill_opens_records_in_the_callers_buffer() {
        use tokio::io::AsyncWriteExt;
        let (mut tx, rx, _keep) = loopback().await;
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 13 + i / 7) as u8).collect();
        let mut wire = Vec::new();
        let mut s = Sealer::new(9, &secrets(2)).unwrap();
        for (i, r) in pieces(
            data.len(),
            &[1 << 20, 300, 5, 70_000, 16384, 16385, 1 << 20],
        ) {
            s.seal(&data[r], &mut wire);
            if i == 2 {
                s.record(HANDSHAKE, &[4, 0, 0, 1, 0], &mut wire);
            }
        }
        s.close_notify(&mut wire);
        let writer = tokio::spawn(async move {
            for (i, r) in pieces(wire.len(), &[7, 100_000, 16_406, 3, 250_000, 1]) {
                tx.write_all(&wire[r]).await.unwrap();
                if i % 5 == 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
            }
            tx.shutdown().await.unwrap();
        });
        let mut r = RecordRead::new(
            rx,
            Opener::new(9, &secrets(2)).unwrap(),
            bytes::Bytes::from_static(b"early"),
        );
        let (mut got, mut longest) = (BytesMut::new(), 0);
        for want in [1usize, 100, 1 << 20, 8192, 40_000].iter().cycle() {
            let mut buf = BytesMut::with_capacity(*want);
            let n = r.fill(&mut buf, *want).await.unwrap();
            assert_eq!(n, buf.len());
            if n == 0 {
                break;
            }
            longest = longest.max(n);
            got.extend_from_slice(&buf);
        }
        // Runs of many records opened in place (one opened aside is
        // copied out a record at most).
        assert!(longest > 4 * MAX_PLAIN, "{longest}");
        writer.await.unwrap();
        assert_eq!(&got[..5], b"early");
        assert!(got[5..] == data[..], "the plaintext differs");
        // After close_notify, the end, and again.
        assert_eq!(
            r.fill(&mut BytesMut::with_capacity(100), 100)
                .await
                .unwrap(),
            0
        );
    }

    #[tokio::test]
    async fn fill_refuses_an_altered_record() {
        use tokio::io::AsyncWriteExt;
        let (mut tx, rx, _keep) = loopback().await;
        let mut wire = Vec::new();
        let mut s = Sealer::new(0, &secrets(5)).unwrap();
        s.seal(&[1u8; 40_000], &mut wire);
        let last = wire.len() - 30;
        wire[last] ^= 1;
        tx.write_all(&wire).await.unwrap();
        let mut r = RecordRead::new(
            rx,
            Opener::new(0, &secrets(5)).unwrap(),
            bytes::Bytes::new(),
        );
        let mut buf = BytesMut::with_capacity(1 << 20);
        let mut err = None;
        for _ in 0..10 {
            match r.fill(&mut buf, 1 << 20).await {
                Ok(n) => assert!(n > 0),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let e = err.expect("the altered record fails");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        // What came before it is all there is.
        assert!(buf.len() <= 32_768 && buf.iter().all(|&b| b == 1));
        drop(tx);
    }

    /// Opens a stream of records: the plaintext.
    fn open_all(o: &mut Opener, mut wire: Vec<u8>) -> Vec<u8> {
        let mut plain = Vec::new();
        while !wire.is_empty() {
            let rec = Opener::record_len(&wire).unwrap().unwrap();
            if let Opened::Data(n) = o.open(&mut wire[..rec]).unwrap() {
                plain.extend_from_slice(&wire[HEADER..HEADER + n]);
            }
            wire.drain(..rec);
        }
        plain
    }

    #[tokio::test]
    async fn a_long_reply_sealed_where_it_is_is_the_same_records() {
        let data: Vec<u8> = (0..(1u32 << 20) + 7)
            .map(|i| (i * 31 + i / 5) as u8)
            .collect();
        let mut want = Vec::new();
        Sealer::new(5, &secrets(8)).unwrap().seal(&data, &mut want);
        let mut w = RecordWrite::new(Vec::new(), Sealer::new(5, &secrets(8)).unwrap());
        let mut batch = vec![bytes::Bytes::from(data.clone())];
        w.send_batch(&mut batch, std::time::Duration::from_secs(5))
            .await
            .unwrap();
        assert!(w.io == want, "the records differ");
    }

    #[tokio::test]
    async fn a_batch_of_long_short_and_shared_replies_opens_in_order() {
        let long = |n: usize, k: u8| -> Vec<u8> { (0..n).map(|i| (i as u8) ^ k).collect() };
        let shared = bytes::Bytes::from(long(200_000, 3));
        let _other_holder = shared.clone();
        let replies = vec![
            bytes::Bytes::from(long(100, 1)),
            bytes::Bytes::from(long((1 << 20) + 7, 2)),
            bytes::Bytes::from(long(3, 4)),
            shared,
            bytes::Bytes::from(long(SEAL_WHERE_THEY_ARE, 5)),
            bytes::Bytes::from(long(SEAL_WHERE_THEY_ARE + 1, 6)),
            bytes::Bytes::from(long(MAX_PLAIN * 5, 7)),
        ];
        let want: Vec<u8> = replies.iter().flat_map(|b| b.iter().copied()).collect();
        let mut w = RecordWrite::new(Vec::new(), Sealer::new(0, &secrets(6)).unwrap());
        // Something sealed by an earlier write goes out first.
        tokio::io::AsyncWriteExt::write_all(&mut w, b"before")
            .await
            .unwrap();
        let mut batch = replies;
        w.send_batch(&mut batch, std::time::Duration::from_secs(5))
            .await
            .unwrap();
        assert!(batch.is_empty());
        let got = open_all(&mut Opener::new(0, &secrets(6)).unwrap(), w.io.clone());
        assert_eq!(&got[..6], b"before");
        assert!(got[6..] == want[..], "the plaintext differs");
    }
}
