//! All of RPCSEC_GSS's `unsafe`: context establishment over MIT's GSS-API,
//! as acceptor (the server) and initiator (Tarn's client; libgssapi's
//! context types hide their raw handles, which the key export needs), the
//! export of the negotiated keys as a "lucid"
//! context (what rpc.svcgssd/gssproxy hand to the Linux kernel), and MIT's
//! per-message calls, kept for contexts whose keys cannot be exported.
//!
//! Ownership: a [`MitCtx`] owns one `gss_ctx_id_t` and deletes it on
//! drop unless MIT already has. `gss_krb5_export_lucid_sec_context`
//! deletes the context and sets the handle to `GSS_C_NO_CONTEXT` when it
//! succeeds and leaves it alone when it fails (MIT krb5_gss_glue.c), so
//! after a failed export the context still works for the MIT path. Every
//! buffer, name and buffer set MIT returns is released exactly once, by
//! the guard that holds it.

#![allow(unsafe_code)]

use libgssapi_sys as sys;
use std::ffi::c_void;
use std::fmt;
use std::ptr::{null_mut, NonNull};
use std::time::Duration;

const GSS_S_CONTINUE_NEEDED: u32 = 1;
const GSS_C_GSS_CODE: i32 = 1;
const GSS_C_MECH_CODE: i32 = 2;
/// GSS_C_INDEFINITE: a context without an expiry.
const GSS_C_INDEFINITE: u32 = u32::MAX;

fn gss_error(major: u32) -> bool {
    // The routine-error and calling-error fields (RFC 2744 §3.9.1).
    major & 0xffff_0000 != 0
}

/// A failed GSS-API call.
#[derive(Debug, Clone)]
pub struct GssError {
    pub major: u32,
    pub minor: u32,
    pub text: String,
}

impl fmt::Display for GssError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (major {:#x}, minor {})",
            self.text, self.major, self.minor
        )
    }
}

/// A buffer MIT allocated; released on drop.
struct OutBuf(sys::gss_buffer_desc);

impl OutBuf {
    fn new() -> OutBuf {
        OutBuf(sys::gss_buffer_desc {
            length: 0,
            value: null_mut(),
        })
    }

    fn bytes(&self) -> &[u8] {
        if self.0.value.is_null() || self.0.length == 0 {
            return &[];
        }
        // SAFETY: MIT filled value/length with one allocation of that size.
        unsafe { std::slice::from_raw_parts(self.0.value as *const u8, self.0.length) }
    }
}

impl Drop for OutBuf {
    fn drop(&mut self) {
        if !self.0.value.is_null() {
            let mut minor = 0;
            // SAFETY: a buffer MIT allocated, released once.
            unsafe { sys::gss_release_buffer(&mut minor, &mut self.0) };
        }
    }
}

/// An input buffer borrowing `b` (MIT never writes through it).
fn in_buf(b: &[u8]) -> sys::gss_buffer_desc {
    sys::gss_buffer_desc {
        length: b.len(),
        value: b.as_ptr() as *mut c_void,
    }
}

fn status_text(code: u32, kind: i32) -> String {
    let mut out = String::new();
    let mut ctx = 0u32;
    // display_status may yield several messages; bounded in case it loops.
    for _ in 0..8 {
        let mut minor = 0;
        let mut b = OutBuf::new();
        // SAFETY: plain out-parameters; `b` is released by its guard.
        let major = unsafe {
            sys::gss_display_status(&mut minor, code, kind, null_mut(), &mut ctx, &mut b.0)
        };
        if gss_error(major) {
            break;
        }
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(&String::from_utf8_lossy(b.bytes()));
        if ctx == 0 {
            break;
        }
    }
    out
}

/// What one context-establishment call came to: the token it produced
/// and whether the context is complete, or its error.
fn step(major: u32, minor: u32, out: &OutBuf) -> Result<Step, GssError> {
    if gss_error(major) {
        return Err(error(major, minor));
    }
    Ok(Step {
        token: out.bytes().to_vec(),
        complete: major & GSS_S_CONTINUE_NEEDED == 0,
    })
}

fn error(major: u32, minor: u32) -> GssError {
    let mut text = status_text(major, GSS_C_GSS_CODE);
    if minor != 0 {
        text = format!("{text}: {}", status_text(minor, GSS_C_MECH_CODE));
    }
    GssError { major, minor, text }
}

/// What one establishment step produced: the token to send back, and
/// whether the context is complete.
pub struct Step {
    pub token: Vec<u8>,
    pub complete: bool,
}

/// An MIT context, acceptor or initiator.
pub struct MitCtx {
    ctx: sys::gss_ctx_id_t,
}

// SAFETY: MIT contexts may move between threads; they are never used by
// two threads at once (callers hold a Mutex around each).
unsafe impl Send for MitCtx {}

impl Drop for MitCtx {
    fn drop(&mut self) {
        if !self.ctx.is_null() {
            let mut minor = 0;
            // SAFETY: our handle, deleted once; MIT sets it to NO_CONTEXT.
            unsafe { sys::gss_delete_sec_context(&mut minor, &mut self.ctx, null_mut()) };
        }
    }
}

impl Default for MitCtx {
    fn default() -> Self {
        Self::new()
    }
}

/// An initiator credential from a credential cache named explicitly (a
/// FUSE mount acting for several users holds one per user, where the
/// default credential would be the mounter's).
pub struct InitCred {
    cred: sys::gss_cred_id_t,
}

// SAFETY: a credential handle may move between threads; MIT only reads it
// while a context is initiated, and we use it from one task at a time.
unsafe impl Send for InitCred {}

impl Drop for InitCred {
    fn drop(&mut self) {
        let mut minor = 0;
        // SAFETY: our handle, released once.
        unsafe { sys::gss_release_cred(&mut minor, &mut self.cred) };
    }
}

impl InitCred {
    /// The initiator credential in credential cache `ccache` (as
    /// KRB5CCNAME names one: `FILE:/path`), through gss_acquire_cred_from.
    pub fn from_ccache(ccache: &str) -> Result<InitCred, GssError> {
        let value = std::ffi::CString::new(ccache).map_err(|_| GssError {
            major: 0,
            minor: 0,
            text: "a credential cache name with a NUL byte".into(),
        })?;
        let mut el = sys::gss_key_value_element_desc {
            key: c"ccache".as_ptr(),
            value: value.as_ptr(),
        };
        let store = sys::gss_key_value_set_desc {
            count: 1,
            elements: &mut el,
        };
        let mut minor = 0;
        let mut cred: sys::gss_cred_id_t = null_mut();
        // SAFETY: the store and its strings live across the call (MIT only
        // reads them); `cred` is an out-parameter released by the guard;
        // the other out-parameters are null.
        let major = unsafe {
            sys::gss_acquire_cred_from(
                &mut minor,
                null_mut(),
                0,
                null_mut(),
                sys::GSS_C_INITIATE as sys::gss_cred_usage_t,
                &store,
                &mut cred,
                null_mut(),
                null_mut(),
            )
        };
        if gss_error(major) {
            return Err(error(major, minor));
        }
        Ok(InitCred { cred })
    }
}

impl MitCtx {
    pub fn new() -> MitCtx {
        MitCtx { ctx: null_mut() }
    }

    /// One gss_accept_sec_context step with the default acceptor
    /// credential: any service key in the keytab (KRB5_KTNAME).
    pub fn step(&mut self, token: &[u8]) -> Result<Step, GssError> {
        let mut minor = 0;
        let mut input = in_buf(token);
        let mut out = OutBuf::new();
        // SAFETY: the handle is ours (null on the first step, which MIT
        // then allocates); every out-parameter is either ours or null.
        let major = unsafe {
            sys::gss_accept_sec_context(
                &mut minor,
                &mut self.ctx,
                null_mut(),
                &mut input,
                null_mut(),
                null_mut(),
                null_mut(),
                &mut out.0,
                null_mut(),
                null_mut(),
                null_mut(),
            )
        };
        step(major, minor, &out)
    }

    /// [`MitCtx::init_step_as`] with the default initiator credential
    /// (the credential cache KRB5CCNAME names).
    pub fn init_step(&mut self, target: &Target, token: Option<&[u8]>) -> Result<Step, GssError> {
        self.init_step_as(None, target, token)
    }

    /// One gss_init_sec_context step towards `target` with `cred` (None:
    /// the default initiator credential), mechanism krb5, asking
    /// for mutual authentication, integrity and confidentiality; never the
    /// replay or sequence flags (RPCSEC_GSS sequences calls itself, and
    /// those flags turn out-of-order messages into errors). `token`: the
    /// acceptor's last token, none on the first step.
    pub fn init_step_as(
        &mut self,
        cred: Option<&InitCred>,
        target: &Target,
        token: Option<&[u8]>,
    ) -> Result<Step, GssError> {
        const MUTUAL: u32 = 2;
        const CONF: u32 = 16;
        const INTEG: u32 = 32;
        // 1.2.840.113554.1.2.2
        const KRB5: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02";
        let mut mech = sys::gss_OID_desc {
            length: KRB5.len() as u32,
            elements: KRB5.as_ptr() as *mut c_void,
        };
        let mut minor = 0;
        let mut input = in_buf(token.unwrap_or(&[]));
        let mut out = OutBuf::new();
        let cred = cred.map_or(null_mut(), |c| c.cred);
        // SAFETY: the handle is ours (null on the first step, which MIT
        // then allocates); the name lives in `target`, the credential in
        // `cred` (borrowed for the call); MIT only reads the mechanism OID
        // and the input token; out-parameters are ours or null.
        let major = unsafe {
            sys::gss_init_sec_context(
                &mut minor,
                cred,
                &mut self.ctx,
                target.0,
                &mut mech,
                MUTUAL | CONF | INTEG,
                0,
                null_mut(),
                if token.is_some() {
                    &mut input
                } else {
                    null_mut()
                },
                null_mut(),
                &mut out.0,
                null_mut(),
                null_mut(),
            )
        };
        step(major, minor, &out)
    }

    /// The initiator's principal and the context's remaining lifetime.
    pub fn peer(&self) -> Result<(String, Duration), GssError> {
        let mut minor = 0;
        let mut name: sys::gss_name_t = null_mut();
        let mut lifetime = 0u32;
        // SAFETY: a complete context; `name` is released below.
        let major = unsafe {
            sys::gss_inquire_context(
                &mut minor,
                self.ctx,
                &mut name,
                null_mut(),
                &mut lifetime,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
            )
        };
        if gss_error(major) {
            return Err(error(major, minor));
        }
        let mut b = OutBuf::new();
        // SAFETY: `name` came from MIT just above.
        let major = unsafe { sys::gss_display_name(&mut minor, name, &mut b.0, null_mut()) };
        let r = if gss_error(major) {
            Err(error(major, minor))
        } else {
            Ok(String::from_utf8_lossy(b.bytes()).into_owned())
        };
        let mut m2 = 0;
        // SAFETY: released once.
        unsafe { sys::gss_release_name(&mut m2, &mut name) };
        let life = if lifetime == GSS_C_INDEFINITE {
            Duration::from_secs(u32::MAX as u64)
        } else {
            Duration::from_secs(lifetime as u64)
        };
        r.map(|n| (n, life))
    }

    /// The enctype of the key the context now protects messages with (the
    /// acceptor subkey if any, else the context key), asked without
    /// consuming the context, so that an enctype we do not implement can
    /// stay with MIT. `None` if MIT will not say.
    pub fn session_enctype(&self) -> Option<u32> {
        // 1.2.840.113554.1.2.2.4 (GSS_KRB5_SESSION_KEY_ENCTYPE_OID) + enctype.
        const PREFIX: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x04";
        let mut minor = 0;
        let mut set: sys::gss_buffer_set_t = null_mut();
        // SAFETY: the OID is MIT's static; `set` is released below.
        let major = unsafe {
            sys::gss_inquire_sec_context_by_oid(
                &mut minor,
                self.ctx,
                sys::GSS_C_INQ_SSPI_SESSION_KEY,
                &mut set,
            )
        };
        if gss_error(major) || set.is_null() {
            return None;
        }
        // SAFETY: MIT's buffer set: `count` buffers at `elements`.
        let oid: Option<Vec<u8>> = unsafe {
            let s = &*set;
            (s.count >= 2 && !s.elements.is_null()).then(|| {
                let b = &*s.elements.add(1);
                if b.value.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(b.value as *const u8, b.length).to_vec()
                }
            })
        };
        let mut m2 = 0;
        // SAFETY: released once (this also wipes the session key copy).
        unsafe { sys::gss_release_buffer_set(&mut m2, &mut set) };
        let arcs = oid?.strip_prefix(PREFIX)?.to_vec();
        // The enctype is one base-128 arc (the AES ones fit in a byte).
        let mut v: u32 = 0;
        for (i, b) in arcs.iter().enumerate() {
            v = v.checked_mul(128)? | (b & 0x7f) as u32;
            if b & 0x80 == 0 {
                return (i == arcs.len() - 1).then_some(v);
            }
        }
        None
    }

    /// Exports the keys (lucid context version 1). On success MIT has
    /// deleted the context; on failure it is handed back, still usable.
    pub fn export(mut self) -> Result<Lucid, (MitCtx, GssError)> {
        let mut minor = 0;
        let mut kctx: *mut c_void = null_mut();
        // SAFETY: our handle; on success MIT deletes it and nulls it.
        let major =
            unsafe { gss_krb5_export_lucid_sec_context(&mut minor, &mut self.ctx, 1, &mut kctx) };
        if gss_error(major) {
            return Err((self, error(major, minor)));
        }
        debug_assert!(self.ctx.is_null());
        let Some(kctx) = NonNull::new(kctx) else {
            return Err((self, error(major, minor)));
        };
        // SAFETY: MIT returned a version-1 lucid context (checked below
        // before anything else is read); it stays valid until freed.
        let lucid = unsafe { Lucid::copy(kctx.cast::<LucidV1>().as_ref()) };
        let mut m2 = 0;
        // SAFETY: freed once, with MIT's own free (it wipes the keys).
        unsafe { gss_krb5_free_lucid_sec_context(&mut m2, kctx.as_ptr()) };
        lucid.ok_or_else(|| {
            (
                self,
                GssError {
                    major: 0,
                    minor: 0,
                    text: "the lucid context is not version 1".into(),
                },
            )
        })
    }

    pub fn get_mic(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError> {
        let (mut minor, mut m, mut out) = (0, in_buf(msg), OutBuf::new());
        // SAFETY: an established context; `out` is released by its guard.
        let major = unsafe { sys::gss_get_mic(&mut minor, self.ctx, 0, &mut m, &mut out.0) };
        if gss_error(major) {
            return Err(error(major, minor));
        }
        Ok(out.bytes().to_vec())
    }

    pub fn verify_mic(&mut self, msg: &[u8], tok: &[u8]) -> Result<(), GssError> {
        let (mut minor, mut m, mut t) = (0, in_buf(msg), in_buf(tok));
        // SAFETY: an established context; inputs are borrowed.
        let major =
            unsafe { sys::gss_verify_mic(&mut minor, self.ctx, &mut m, &mut t, null_mut()) };
        // Supplementary bits (duplicate, old, gap token) are not errors:
        // RPCSEC_GSS does its own sequencing.
        if gss_error(major) {
            return Err(error(major, minor));
        }
        Ok(())
    }

    pub fn wrap(&mut self, conf: bool, msg: &[u8]) -> Result<Vec<u8>, GssError> {
        let (mut minor, mut m, mut out) = (0, in_buf(msg), OutBuf::new());
        let mut conf_state = 0;
        // SAFETY: an established context; `out` is released by its guard.
        let major = unsafe {
            sys::gss_wrap(
                &mut minor,
                self.ctx,
                conf as i32,
                0,
                &mut m,
                &mut conf_state,
                &mut out.0,
            )
        };
        if gss_error(major) || (conf && conf_state == 0) {
            return Err(error(major, minor));
        }
        Ok(out.bytes().to_vec())
    }

    /// Unwraps; also says whether the token was encrypted.
    pub fn unwrap(&mut self, tok: &[u8]) -> Result<(Vec<u8>, bool), GssError> {
        let (mut minor, mut t, mut out) = (0, in_buf(tok), OutBuf::new());
        let mut conf_state = 0;
        // SAFETY: an established context; `out` is released by its guard.
        let major = unsafe {
            sys::gss_unwrap(
                &mut minor,
                self.ctx,
                &mut t,
                &mut out.0,
                &mut conf_state,
                null_mut(),
            )
        };
        if gss_error(major) {
            return Err(error(major, minor));
        }
        Ok((out.bytes().to_vec(), conf_state != 0))
    }
}

/// An initiator's target: a host-based service name such as `nfs@server`.
pub struct Target(sys::gss_name_t);

// SAFETY: an MIT name is immutable once imported.
unsafe impl Send for Target {}
unsafe impl Sync for Target {}

impl Target {
    pub fn hostbased(service_at_host: &str) -> Result<Target, GssError> {
        let mut minor = 0;
        let mut b = in_buf(service_at_host.as_bytes());
        let mut name: sys::gss_name_t = null_mut();
        // SAFETY: MIT copies the buffer; GSS_C_NT_HOSTBASED_SERVICE is its
        // static; `name` is released by the Target's drop.
        let major = unsafe {
            sys::gss_import_name(
                &mut minor,
                &mut b,
                sys::GSS_C_NT_HOSTBASED_SERVICE,
                &mut name,
            )
        };
        if gss_error(major) {
            return Err(error(major, minor));
        }
        Ok(Target(name))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if !self.0.is_null() {
            let mut minor = 0;
            // SAFETY: imported above, released once.
            unsafe { sys::gss_release_name(&mut minor, &mut self.0) };
        }
    }
}

/// A key from the lucid context: enctype number and bytes (wiped on drop,
/// never printed).
pub struct LucidKey {
    pub enctype: u32,
    pub bytes: Vec<u8>,
}

impl fmt::Debug for LucidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LucidKey")
            .field("enctype", &self.enctype)
            .finish_non_exhaustive()
    }
}

impl Drop for LucidKey {
    fn drop(&mut self) {
        self.bytes.fill(0);
        std::hint::black_box(&self.bytes);
    }
}

/// What the lucid export tells, copied out of MIT's memory.
#[derive(Debug)]
pub struct Lucid {
    pub initiate: bool,
    pub send_seq: u64,
    pub recv_seq: u64,
    /// 0: RFC 1964 (DES, RC4, DES3); 1: RFC 4121 (CFX).
    pub protocol: u32,
    pub ctx_key: LucidKey,
    pub acceptor_subkey: Option<LucidKey>,
}

impl Lucid {
    /// # Safety
    /// `l` points at a lucid context MIT returned and has not freed.
    unsafe fn copy(l: &LucidV1) -> Option<Lucid> {
        if l.version != 1 {
            return None;
        }
        let key = |k: &LucidKeyC| -> Option<LucidKey> {
            if k.data.is_null() || k.length == 0 || k.length > 64 {
                return None;
            }
            // SAFETY: `length` bytes at `data`, owned by the lucid context.
            let b = unsafe { std::slice::from_raw_parts(k.data as *const u8, k.length as usize) };
            Some(LucidKey {
                enctype: k.type_,
                bytes: b.to_vec(),
            })
        };
        let (ctx_key, acceptor_subkey) = if l.protocol == 1 {
            let sub = if l.cfx_kd.have_acceptor_subkey != 0 {
                Some(key(&l.cfx_kd.acceptor_subkey)?)
            } else {
                None
            };
            (key(&l.cfx_kd.ctx_key)?, sub)
        } else {
            (key(&l.rfc1964_kd.ctx_key)?, None)
        };
        Some(Lucid {
            initiate: l.initiate != 0,
            send_seq: l.send_seq,
            recv_seq: l.recv_seq,
            protocol: l.protocol,
            ctx_key,
            acceptor_subkey,
        })
    }
}

// The layout of gss_krb5_lucid_context_v1_t and its parts, from MIT's
// <gssapi/gssapi_krb5.h>.
#[repr(C)]
struct LucidKeyC {
    type_: u32,
    length: u32,
    data: *mut c_void,
}

#[repr(C)]
struct Rfc1964Kd {
    sign_alg: u32,
    seal_alg: u32,
    ctx_key: LucidKeyC,
}

#[repr(C)]
struct CfxKd {
    have_acceptor_subkey: u32,
    ctx_key: LucidKeyC,
    acceptor_subkey: LucidKeyC,
}

#[repr(C)]
struct LucidV1 {
    version: u32,
    initiate: u32,
    endtime: u32,
    send_seq: u64,
    recv_seq: u64,
    protocol: u32,
    rfc1964_kd: Rfc1964Kd,
    cfx_kd: CfxKd,
}

#[link(name = "gssapi_krb5")]
extern "C" {
    fn gss_krb5_export_lucid_sec_context(
        minor: *mut u32,
        ctx: *mut sys::gss_ctx_id_t,
        version: u32,
        kctx: *mut *mut c_void,
    ) -> u32;
    fn gss_krb5_free_lucid_sec_context(minor: *mut u32, kctx: *mut c_void) -> u32;
}
