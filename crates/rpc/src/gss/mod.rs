//! RPCSEC_GSS version 1 (RFC 2203) for the server: credential parsing, the
//! context table, context establishment with MIT Kerberos through GSS-API,
//! header checksums, the sequence window ([`window`]), and the integrity
//! and privacy envelopes around arguments and results.
//!
//! Per-message crypto: once MIT has established a context, its keys are
//! exported ([`lucid`]) and MICs and wrap tokens are made and checked in
//! Rust ([`krb5`], with AES-NI), as the Linux kernel server does after
//! rpc.svcgssd. A context whose keys cannot be exported, or whose enctype
//! Rust does not implement, stays with MIT (said once in the log).
//! `TARN_GSS_CRYPTO=mit` keeps every context with MIT (for comparison).
//!
//! Locking: the table is sharded by handle; a shard's lock is held only to
//! find, insert or evict an entry, never during crypto. Rust crypto takes
//! no lock (the keys are immutable, the send sequence number atomic); a
//! context left with MIT has its own lock around its GSS-API handle (MIT
//! forbids concurrent calls on one context). The sequence window has a
//! separate small lock, so window bookkeeping never waits behind a 1 MiB
//! wrap.

pub mod lucid;
pub mod window;

use crate::msg::Call;
use crate::observe::{Event, Observer};
use bytes::{BufMut, Bytes, BytesMut};
use krb5::{Cfx, Enctype, Key, Role};
use libgssapi::credential::{Cred, CredUsage};
use lucid::{Lucid, MitCtx};
use proto::gss::{
    RpcGssCredVers1T, RpcGssInitRes, RpcGssIntegData, RpcGssPrivData, RpcGssProcT, RpcGssServiceT,
    RPCSEC_GSS_MAXSEQ, RPCSEC_GSS_VERS_1,
};
use proto::rpc::{AuthStat, OpaqueAuth, RPCSEC_GSS};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};
pub use window::{DropReason, SeqWindow};
use xdr::{Decoder, Pack, Unpack};

/// Protection of a call's arguments and results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GssService {
    /// krb5: only the header is checksummed.
    None,
    /// krb5i: arguments and results carry a MIC.
    Integrity,
    /// krb5p: arguments and results are encrypted.
    Privacy,
}

impl GssService {
    fn from_wire(s: RpcGssServiceT) -> Self {
        match s {
            RpcGssServiceT::rpc_gss_svc_none => GssService::None,
            RpcGssServiceT::rpc_gss_svc_integrity => GssService::Integrity,
            RpcGssServiceT::rpc_gss_svc_privacy => GssService::Privacy,
        }
    }

    pub fn to_wire(self) -> RpcGssServiceT {
        match self {
            GssService::None => RpcGssServiceT::rpc_gss_svc_none,
            GssService::Integrity => RpcGssServiceT::rpc_gss_svc_integrity,
            GssService::Privacy => RpcGssServiceT::rpc_gss_svc_privacy,
        }
    }
}

/// Local identity a principal maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// Maps an authenticated principal (`user@REALM`, `nfs/host@REALM`) to a
/// local identity; `None` means anonymous. Called once per context.
pub type PrincipalMap = Arc<dyn Fn(&str) -> Option<Ids> + Send + Sync>;

#[derive(Clone)]
pub struct GssConfig {
    /// The sequence window advertised to clients (RFC 2203 seq_window).
    pub window: u32,
    /// How far back replays are remembered: several times the window.
    pub replay_range: u32,
    /// Most contexts kept; the least recently used goes first.
    pub max_contexts: usize,
    pub map: PrincipalMap,
}

impl Default for GssConfig {
    fn default() -> Self {
        GssConfig {
            window: 128,
            replay_range: 1024,
            max_contexts: 16384,
            map: Arc::new(|_| None),
        }
    }
}

impl fmt::Debug for GssConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GssConfig")
            .field("window", &self.window)
            .field("replay_range", &self.replay_range)
            .field("max_contexts", &self.max_contexts)
            .finish()
    }
}

/// A parsed RPCSEC_GSS credential.
#[derive(Debug, Clone)]
pub struct GssCred {
    pub proc_: RpcGssProcT,
    pub seq: u32,
    pub service: GssService,
    pub handle: Bytes,
}

impl GssCred {
    pub fn parse(body: &Bytes) -> Result<GssCred, AuthStat> {
        let mut d = Decoder::new(body.clone());
        if d.u32().map_err(|_| AuthStat::AUTH_BADCRED)? != RPCSEC_GSS_VERS_1 {
            return Err(AuthStat::AUTH_BADCRED);
        }
        let c = RpcGssCredVers1T::unpack(&mut d).map_err(|_| AuthStat::AUTH_BADCRED)?;
        if d.remaining() != 0 {
            return Err(AuthStat::AUTH_BADCRED);
        }
        Ok(GssCred {
            proc_: c.gss_proc,
            seq: c.seq_num,
            service: GssService::from_wire(c.service),
            handle: c.handle,
        })
    }

    pub fn encode(&self) -> OpaqueAuth {
        let mut b = BytesMut::with_capacity(32);
        b.put_u32(RPCSEC_GSS_VERS_1);
        RpcGssCredVers1T {
            gss_proc: self.proc_,
            seq_num: self.seq,
            service: self.service.to_wire(),
            handle: self.handle.clone(),
        }
        .pack(&mut b);
        OpaqueAuth {
            flavor: RPCSEC_GSS,
            body: b.freeze(),
        }
    }
}

/// Per-context drop counters, by reason.
#[derive(Debug, Default)]
pub struct CtxDrops {
    pub seq_window: AtomicU64,
    pub replay: AtomicU64,
    pub bad_checksum: AtomicU64,
}

/// What an established context knows about its initiator.
#[derive(Debug)]
struct Peer {
    principal: Arc<str>,
    ids: Option<Ids>,
    expires: Instant,
    expires_unix: u64,
}

/// One security context.
pub struct GssCtx {
    handle: u64,
    /// The MIT context while it is being established.
    mit: Mutex<Option<MitCtx>>,
    /// Once established: its per-message crypto.
    crypto: OnceLock<Crypto>,
    peer: std::sync::OnceLock<Peer>,
    window: Mutex<SeqWindow>,
    /// Second-chance bit for the table's CLOCK eviction.
    used: AtomicBool,
    pub drops: CtxDrops,
}

impl fmt::Debug for GssCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the context itself: it holds keys.
        f.debug_struct("GssCtx")
            .field("handle", &self.handle)
            .field("principal", &self.peer.get().map(|p| &p.principal))
            .finish()
    }
}

impl GssCtx {
    /// The context's handle, as the table knows it.
    pub fn id(&self) -> u64 {
        self.handle
    }

    pub fn principal(&self) -> Option<&Arc<str>> {
        self.peer.get().map(|p| &p.principal)
    }

    pub fn ids(&self) -> Option<&Ids> {
        self.peer.get().and_then(|p| p.ids.as_ref())
    }

    pub fn expires_unix(&self) -> u64 {
        self.peer.get().map_or(0, |p| p.expires_unix)
    }

    fn expired(&self, now: Instant) -> bool {
        self.peer.get().is_some_and(|p| now >= p.expires)
    }

    /// Takes the window snapshot a call carries from the reader.
    pub fn snapshot(&self) -> Option<u32> {
        self.window.lock().unwrap().snapshot()
    }

    /// Judges and records a verified call's sequence number (rule 4).
    pub fn accept_seq(&self, seq: u32, snap: Option<u32>, window: u32) -> Result<(), DropReason> {
        let r = self.window.lock().unwrap().accept(seq, snap, window);
        match r {
            Err(DropReason::SeqWindow) => self.drops.seq_window.fetch_add(1, Relaxed),
            Err(DropReason::Replay) => self.drops.replay.fetch_add(1, Relaxed),
            Ok(()) => 0,
        };
        r
    }

    /// Whether this context's per-message crypto runs in Rust.
    pub fn rust_crypto(&self) -> bool {
        matches!(self.crypto.get(), Some(Crypto::Rust(_)))
    }

    pub fn verify_mic(&self, msg: &[u8], mic: &[u8]) -> bool {
        self.crypto.get().is_some_and(|c| c.verify_mic(msg, mic))
    }

    pub fn get_mic(&self, msg: &[u8]) -> Option<Bytes> {
        self.crypto.get()?.get_mic(msg).map(Into::into)
    }

    /// The verifier of a reply (or of an INIT reply: `value` = the window):
    /// RPCSEC_GSS with a MIC of the XDR-encoded number.
    pub fn verifier(&self, value: u32) -> Option<OpaqueAuth> {
        Some(OpaqueAuth {
            flavor: RPCSEC_GSS,
            body: self.get_mic(&value.to_be_bytes())?,
        })
    }

    /// The arguments of a DATA call as the program sees them: for
    /// integrity and privacy, unwrapped and checked against `seq`.
    pub fn unwrap_args(&self, service: GssService, seq: u32, args: Decoder) -> Option<Decoder> {
        let body = match service {
            GssService::None => return Some(args),
            GssService::Integrity => {
                let mut d = args;
                let i = RpcGssIntegData::unpack(&mut d).ok()?;
                if !self.verify_mic(&i.databody_integ, &i.checksum) {
                    return None;
                }
                i.databody_integ
            }
            GssService::Privacy => {
                let mut d = args;
                let p = RpcGssPrivData::unpack(&mut d).ok()?;
                self.crypto.get()?.unseal(&p.databody_priv)?
            }
        };
        let mut d = Decoder::new(body);
        (d.u32().ok()? == seq).then_some(d)
    }

    /// Protects `results` for the reply: appends to `out` what goes after
    /// the reply header.
    pub fn wrap_results(
        &self,
        service: GssService,
        seq: u32,
        results: &[u8],
        out: &mut BytesMut,
    ) -> Option<()> {
        let crypto = self.crypto.get()?;
        if let Crypto::Rust(c) = crypto {
            wrap_results_rust(c, service, seq, results, out);
            return Some(());
        }
        match service {
            GssService::None => out.put_slice(results),
            GssService::Integrity => {
                let body = seq_and(seq, results);
                let mic = crypto.get_mic(&body)?;
                xdr::pack_opaque(&body, out);
                xdr::pack_opaque(&mic, out);
            }
            GssService::Privacy => {
                let body = seq_and(seq, results);
                let w = crypto.seal(&body)?;
                xdr::pack_opaque(&w, out);
            }
        }
        Some(())
    }
}

/// An established context's per-message crypto, for the server and for
/// Tarn's client alike: in Rust with the keys MIT exported, or MIT's own
/// (one call at a time: MIT forbids concurrent calls on one context).
pub enum Crypto {
    Rust(Box<Cfx>),
    Mit(Mutex<MitCtx>),
}

impl Crypto {
    /// Moves a complete context's crypto to Rust when possible (see
    /// [`export_keys`]); None if MIT gave its keys up but they are
    /// unusable, so the context is lost.
    pub(crate) fn of(ctx: MitCtx) -> Option<Crypto> {
        match export_keys(ctx) {
            Ok(c) => Some(Crypto::Rust(Box::new(c))),
            Err(Some(m)) => Some(Crypto::Mit(Mutex::new(m))),
            Err(None) => None,
        }
    }

    pub fn get_mic(&self, msg: &[u8]) -> Option<Vec<u8>> {
        match self {
            Crypto::Rust(c) => Some(c.get_mic(&[msg])),
            Crypto::Mit(m) => m.lock().unwrap().get_mic(msg).ok(),
        }
    }

    pub fn verify_mic(&self, msg: &[u8], tok: &[u8]) -> bool {
        match self {
            Crypto::Rust(c) => c.verify_mic(msg, tok).is_ok(),
            Crypto::Mit(m) => m.lock().unwrap().verify_mic(msg, tok).is_ok(),
        }
    }

    /// A wrap token with confidentiality (krb5p).
    pub fn seal(&self, msg: &[u8]) -> Option<Vec<u8>> {
        match self {
            Crypto::Rust(c) => Some(c.wrap(true, msg)),
            Crypto::Mit(m) => m.lock().unwrap().wrap(true, msg).ok(),
        }
    }

    /// The message in a krb5p wrap token. Privacy means encrypted: a token
    /// that is only checksummed is refused.
    pub fn unseal(&self, tok: &[u8]) -> Option<Bytes> {
        match self {
            Crypto::Rust(c) => {
                // The one copy: the token into the buffer it is decrypted in.
                let mut buf = BytesMut::from(tok);
                let u = c.unwrap_in_place(&mut buf).ok()?;
                u.sealed.then(|| buf.freeze().slice(u.range))
            }
            Crypto::Mit(m) => {
                let (plain, sealed) = m.lock().unwrap().unwrap(tok).ok()?;
                sealed.then(|| plain.into())
            }
        }
    }
}

/// What krb5i and krb5p protect, both ways: the sequence number, then the
/// arguments or results (RFC 2203 §5.3.2.2-3).
pub(crate) fn seq_and(seq: u32, data: &[u8]) -> BytesMut {
    let mut body = BytesMut::with_capacity(4 + data.len());
    body.put_u32(seq);
    body.put_slice(data);
    body
}

/// [`GssCtx::wrap_results`] in Rust: the token is written straight into
/// `out`, without an intermediate body.
fn wrap_results_rust(c: &Cfx, service: GssService, seq: u32, results: &[u8], out: &mut BytesMut) {
    let seq = seq.to_be_bytes();
    let pad = |n: usize| (4 - n % 4) % 4;
    match service {
        GssService::None => out.put_slice(results),
        GssService::Integrity => {
            let n = 4 + results.len();
            out.put_u32(n as u32);
            out.put_slice(&seq);
            out.put_slice(results);
            out.put_bytes(0, pad(n));
            xdr::pack_opaque(&c.get_mic(&[&seq, results]), out);
        }
        GssService::Privacy => {
            let n = c.wrap_len(true, 4 + results.len());
            out.put_u32(n as u32);
            let at = out.len();
            out.resize(at + n, 0);
            c.wrap_into(true, &[&seq, results], &mut out[at..]);
            out.put_bytes(0, pad(n));
        }
    }
}

/// The Rust side of a context from its exported keys; `Err` says why not.
pub fn cfx_from_lucid(l: &Lucid) -> Result<Cfx, String> {
    if l.protocol != 1 {
        return Err(format!(
            "the context uses RFC 1964 tokens (protocol {}), not RFC 4121",
            l.protocol
        ));
    }
    let key = |k: &lucid::LucidKey| {
        let e = Enctype::from_number(k.enctype)
            .ok_or_else(|| format!("enctype {} is not implemented in Rust", k.enctype))?;
        Key::new(e, &k.bytes)
            .ok_or_else(|| format!("a {} key of {} bytes", e.name(), k.bytes.len()))
    };
    let ctx_key = key(&l.ctx_key)?;
    let sub = l.acceptor_subkey.as_ref().map(key).transpose()?;
    let role = if l.initiate {
        Role::Initiator
    } else {
        Role::Acceptor
    };
    Ok(Cfx::new(role, &ctx_key, sub.as_ref(), l.send_seq))
}

/// `TARN_GSS_CRYPTO=mit` keeps all per-message crypto with MIT.
fn rust_crypto_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TARN_GSS_CRYPTO").map_or(true, |v| v != "mit"))
}

/// Says once (at info) why a context's crypto stays with MIT; later
/// contexts only at debug, so a realm of RC4 clients does not flood the log.
fn stays_with_mit(why: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Relaxed) {
        info!(
            reason = why,
            "RPCSEC_GSS per-message crypto stays with MIT GSS-API for such contexts"
        );
    } else {
        debug!(reason = why, "RPCSEC_GSS per-message crypto stays with MIT");
    }
}

/// Moves a complete context's per-message crypto to Rust when possible.
/// `Err(Some(ctx))`: it stays with MIT; `Err(None)`: MIT gave its keys up
/// but they are unusable, so the context is lost.
fn export_keys(acc: MitCtx) -> Result<Cfx, Option<MitCtx>> {
    if !rust_crypto_enabled() {
        stays_with_mit("TARN_GSS_CRYPTO=mit");
        return Err(Some(acc));
    }
    // Asked first because the export consumes the MIT context.
    match acc.session_enctype() {
        Some(e) if Enctype::from_number(e).is_some() => {}
        Some(e) => {
            stays_with_mit(&format!("enctype {e} is not implemented in Rust"));
            return Err(Some(acc));
        }
        None => {
            stays_with_mit("MIT does not tell the context's enctype");
            return Err(Some(acc));
        }
    }
    let l = match acc.export() {
        Ok(l) => l,
        Err((acc, e)) => {
            stays_with_mit(&format!("the key export failed: {e}"));
            return Err(Some(acc));
        }
    };
    match cfx_from_lucid(&l) {
        Ok(c) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Relaxed) {
                info!(
                    enctype = c.enctype().name(),
                    "RPCSEC_GSS per-message crypto runs in Rust"
                );
            }
            Ok(c)
        }
        Err(why) => {
            warn!(reason = %why, "RPCSEC_GSS context dropped: its exported keys are unusable");
            Err(None)
        }
    }
}

/// How the reader classifies an RPCSEC_GSS call before spawning it.
#[derive(Debug)]
pub enum GssCall {
    /// INIT or CONTINUE_INIT (to procedure NULL): the server answers it.
    Init {
        cred: GssCred,
        ctx: Option<Arc<GssCtx>>,
    },
    /// DATA or DESTROY on an established context, with the window snapshot
    /// taken as the call was read.
    Data {
        cred: GssCred,
        ctx: Arc<GssCtx>,
        snap: Option<u32>,
    },
}

const SHARDS: usize = 16;

#[derive(Default)]
struct Shard {
    map: HashMap<u64, Arc<GssCtx>>,
    /// Insertion order for CLOCK eviction (a handle may appear once).
    clock: VecDeque<u64>,
}

/// The server's RPCSEC_GSS state: acceptor credential and context table.
pub struct GssServer {
    pub cfg: GssConfig,
    /// Acquired at start only to refuse an unusable keytab early; contexts
    /// are accepted with the default credential, which is the same keys.
    _cred: Option<Cred>,
    shards: Vec<Mutex<Shard>>,
    next: AtomicU64,
    /// High half of every handle: differs per server start, so a handle
    /// from before a restart is unknown (CREDPROBLEM), not someone else's.
    boot: u64,
    live: AtomicI64,
}

impl fmt::Debug for GssServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GssServer")
            .field("cfg", &self.cfg)
            .field("live", &self.live)
            .finish()
    }
}

/// GSS major status codes this module names.
pub const GSS_S_COMPLETE: u32 = 0;
pub const GSS_S_CONTINUE_NEEDED: u32 = 1;
pub const GSS_S_FAILURE: u32 = 13 << 16;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl GssServer {
    /// Acquires the acceptor credential from the keytab (`KRB5_KTNAME`,
    /// which the binary sets from `--keytab`): any service key in it may
    /// be used, as with rpc.svcgssd.
    pub fn new(cfg: GssConfig) -> Result<Self, String> {
        let cred = Cred::acquire(None, None, CredUsage::Accept, None).map_err(|e| {
            format!("cannot use the keytab (KRB5_KTNAME or --keytab) for RPCSEC_GSS: {e}")
        })?;
        Ok(Self::with_cred(cfg, Some(cred)))
    }

    pub(crate) fn with_cred(cfg: GssConfig, cred: Option<Cred>) -> Self {
        let boot = (unix_now() as u32 as u64 ^ std::process::id() as u64 ^ rand_u32() as u64) << 32;
        GssServer {
            cfg,
            _cred: cred,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            next: AtomicU64::new(1),
            boot,
            live: AtomicI64::new(0),
        }
    }

    pub fn live(&self) -> i64 {
        self.live.load(Relaxed)
    }

    fn shard(&self, h: u64) -> &Mutex<Shard> {
        &self.shards[(h as usize) % SHARDS]
    }

    fn find(&self, handle: &[u8]) -> Option<Arc<GssCtx>> {
        let h = u64::from_be_bytes(handle.try_into().ok()?);
        let c = self.shard(h).lock().unwrap().map.get(&h).cloned()?;
        c.used.store(true, Relaxed);
        Some(c)
    }

    fn remove(&self, h: u64, m: &dyn Observer) -> bool {
        let gone = self.shard(h).lock().unwrap().map.remove(&h).is_some();
        if gone {
            self.live.fetch_sub(1, Relaxed);
            m.count(Event::GssContextsLive(-1));
        }
        gone
    }

    fn insert(&self, ctx: Arc<GssCtx>, m: &dyn Observer) {
        let per_shard = (self.cfg.max_contexts / SHARDS).max(1);
        let now = Instant::now();
        let mut evicted = 0;
        {
            let mut s = self.shard(ctx.handle).lock().unwrap();
            // CLOCK: the oldest entry goes unless used since it was last
            // looked at; expired entries go first. Amortised O(1).
            let mut turns = 2 * s.clock.len();
            while s.map.len() >= per_shard && turns > 0 {
                turns -= 1;
                let Some(h) = s.clock.pop_front() else { break };
                let Some(c) = s.map.get(&h) else { continue };
                if !c.expired(now) && c.used.swap(false, Relaxed) {
                    s.clock.push_back(h);
                    continue;
                }
                if !c.expired(now) {
                    // A live context pushed out by the bound: its client
                    // gets CREDPROBLEM at its next call and makes another.
                    m.count(Event::LimitReached(crate::observe::Limit::GssContexts));
                }
                s.map.remove(&h);
                evicted += 1;
            }
            s.clock.push_back(ctx.handle);
            s.map.insert(ctx.handle, ctx);
            // Drop stale clock entries of removed contexts now and then.
            if s.clock.len() > 2 * s.map.len() + 16 {
                let Shard { map, clock } = &mut *s;
                clock.retain(|h| map.contains_key(h));
            }
        }
        self.live.fetch_add(1 - evicted, Relaxed);
        m.count(Event::GssContextsLive(1 - evicted));
    }

    /// Classifies a call in the reader, before it is spawned: parses the
    /// credential, finds the context, refuses expired ones, and takes the
    /// window snapshot. `now` is when the call was read: expiry is judged
    /// as of then. `Err` is the auth_stat to reply with at once.
    pub fn classify(
        &self,
        call: &Call,
        now: Instant,
        m: &dyn Observer,
    ) -> Result<GssCall, AuthStat> {
        let cred = GssCred::parse(&call.cred.body)?;
        match cred.proc_ {
            RpcGssProcT::RPCSEC_GSS_INIT => {
                if call.proc_ != 0 {
                    return Err(AuthStat::AUTH_BADCRED);
                }
                Ok(GssCall::Init { cred, ctx: None })
            }
            RpcGssProcT::RPCSEC_GSS_CONTINUE_INIT => {
                let ctx = self
                    .find(&cred.handle)
                    .ok_or(AuthStat::RPCSEC_GSS_CREDPROBLEM)?;
                if call.proc_ != 0 || ctx.peer.get().is_some() {
                    return Err(AuthStat::AUTH_BADCRED);
                }
                Ok(GssCall::Init {
                    cred,
                    ctx: Some(ctx),
                })
            }
            RpcGssProcT::RPCSEC_GSS_DATA | RpcGssProcT::RPCSEC_GSS_DESTROY => {
                let ctx = self
                    .find(&cred.handle)
                    .ok_or(AuthStat::RPCSEC_GSS_CREDPROBLEM)?;
                if ctx.peer.get().is_none() {
                    return Err(AuthStat::RPCSEC_GSS_CREDPROBLEM);
                }
                if ctx.expired(now) {
                    // MIT keeps MIC and wrap working past the lifetime: the
                    // server must say so itself, and the client then
                    // establishes a new context.
                    if self.remove(ctx.handle, m) {
                        m.count(Event::GssContextExpired);
                        debug!(principal = ?ctx.principal(), "GSS context expired");
                    }
                    return Err(AuthStat::RPCSEC_GSS_CREDPROBLEM);
                }
                if cred.seq >= RPCSEC_GSS_MAXSEQ {
                    return Err(AuthStat::RPCSEC_GSS_CTXPROBLEM);
                }
                if call.verf.flavor != RPCSEC_GSS {
                    return Err(AuthStat::AUTH_BADVERF);
                }
                let snap = ctx.snapshot();
                Ok(GssCall::Data { cred, ctx, snap })
            }
        }
    }

    /// Verifies a DATA or DESTROY call's header checksum (the verifier is a
    /// MIC over the header from the xid to the end of the credential).
    /// Must pass before the sequence window is touched.
    pub fn verify_header(
        &self,
        ctx: &GssCtx,
        header: &[u8],
        verf: &OpaqueAuth,
        m: &dyn Observer,
    ) -> bool {
        if ctx.verify_mic(header, &verf.body) {
            return true;
        }
        ctx.drops.bad_checksum.fetch_add(1, Relaxed);
        m.count(Event::GssDroppedBadChecksum);
        false
    }

    /// Ends a context (RPCSEC_GSS_DESTROY).
    pub fn destroy(&self, ctx: &GssCtx, m: &dyn Observer) {
        self.remove(ctx.handle, m);
    }

    /// Runs one step of context establishment (blocking: it reads the
    /// keytab and decrypts the ticket) and returns the INIT reply's
    /// verifier (None = AUTH_NONE) and results.
    pub fn init_step(
        &self,
        cred: &GssCred,
        ctx: Option<Arc<GssCtx>>,
        token: &[u8],
        m: &dyn Observer,
    ) -> (Option<OpaqueAuth>, RpcGssInitRes) {
        let fail = |major: u32, minor: u32| {
            (
                None,
                RpcGssInitRes {
                    handle: Bytes::new(),
                    gss_major: major,
                    gss_minor: minor,
                    seq_window: 0,
                    gss_token: Bytes::new(),
                },
            )
        };
        let _ = cred;
        let (ctx, fresh) = match ctx {
            Some(c) => (c, false),
            None => {
                let n = self.next.fetch_add(1, Relaxed) & 0xffff_ffff;
                (
                    Arc::new(GssCtx {
                        handle: self.boot | n,
                        mit: Mutex::new(Some(MitCtx::new())),
                        crypto: OnceLock::new(),
                        peer: Default::default(),
                        window: Mutex::new(SeqWindow::new(self.cfg.replay_range)),
                        used: AtomicBool::new(false),
                        drops: Default::default(),
                    }),
                    true,
                )
            }
        };
        let step = match ctx.mit.lock().unwrap().as_mut() {
            Some(m) => m.step(token),
            None => Err(lucid::GssError {
                major: GSS_S_FAILURE,
                minor: 0,
                text: "no context".into(),
            }),
        };
        let (out, complete) = match step {
            Err(e) => {
                // The error text names the cause (clock skew, no such key,
                // ...) but never key material.
                warn!(error = %e, "RPCSEC_GSS context establishment failed");
                if !fresh {
                    self.remove(ctx.handle, m);
                }
                return fail(e.major, e.minor);
            }
            Ok(s) => (Bytes::from(s.token), s.complete),
        };
        let handle = Bytes::copy_from_slice(&ctx.handle.to_be_bytes());
        if !complete {
            if fresh {
                self.insert(ctx.clone(), m);
            }
            return (
                None,
                RpcGssInitRes {
                    handle,
                    gss_major: GSS_S_CONTINUE_NEEDED,
                    gss_minor: 0,
                    seq_window: 0,
                    gss_token: out,
                },
            );
        }
        // Established: who it is, then its crypto (the MIT context moves
        // into it, or is lost if its exported keys are unusable).
        let established = ctx.mit.lock().unwrap().take().and_then(|acc| {
            let peer = acc.peer().ok()?;
            let _ = ctx.crypto.set(Crypto::of(acc)?);
            Some(peer)
        });
        let Some((principal, lifetime)) = established else {
            if !fresh {
                self.remove(ctx.handle, m);
            }
            return fail(GSS_S_FAILURE, 0);
        };
        let ids = (self.cfg.map)(&principal);
        let _ = ctx.peer.set(Peer {
            ids,
            expires: Instant::now() + lifetime,
            expires_unix: unix_now() + lifetime.as_secs(),
            principal: principal.clone().into(),
        });
        let Some(verf) = ctx.verifier(self.cfg.window) else {
            if !fresh {
                self.remove(ctx.handle, m);
            }
            return fail(GSS_S_FAILURE, 0);
        };
        if fresh {
            self.insert(ctx.clone(), m);
        }
        m.count(Event::GssContextCreated);
        info!(%principal, lifetime_s = lifetime.as_secs(), "RPCSEC_GSS context established");
        (
            Some(verf),
            RpcGssInitRes {
                handle,
                gss_major: GSS_S_COMPLETE,
                gss_minor: 0,
                seq_window: self.cfg.window,
                gss_token: out,
            },
        )
    }
}

fn rand_u32() -> u32 {
    // Enough to tell server starts apart; handles are not secrets (every
    // call is checksummed with the context's key).
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    t.subsec_nanos().rotate_left(13) ^ (t.as_secs() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cred_roundtrip_and_garbage() {
        let c = GssCred {
            proc_: RpcGssProcT::RPCSEC_GSS_DATA,
            seq: 77,
            service: GssService::Privacy,
            handle: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]),
        };
        let o = c.encode();
        let p = GssCred::parse(&o.body).unwrap();
        assert_eq!(
            (p.seq, p.service, p.handle),
            (77, GssService::Privacy, c.handle)
        );
        let mut v = o.body.to_vec();
        v[3] = 2; // version 2
        assert_eq!(
            GssCred::parse(&v.into()).unwrap_err(),
            AuthStat::AUTH_BADCRED
        );
        assert_eq!(
            GssCred::parse(&Bytes::from_static(&[0, 0, 0, 1, 0])).unwrap_err(),
            AuthStat::AUTH_BADCRED
        );
    }
}
