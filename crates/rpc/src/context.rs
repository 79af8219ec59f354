//! A call's context: what a program knows about a call besides its
//! arguments (who sent it, over which connection, with what credential)
//! and what it tells the metrics and the driver about its answer.

use crate::auth::Auth;
use crate::callback::CallbackConn;
use crate::observe::PeerStats;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// Everything a program needs to know about a call besides its arguments,
/// and what it tells the metrics about its answer.
#[derive(Debug)]
pub struct CallContext {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub auth: Auth,
    pub peer: SocketAddr,
    /// Identifies the connection, for per-connection state and logs.
    pub conn_id: u64,
    /// The client's statistics and log limiter, resolved once per connection.
    pub client: Arc<dyn PeerStats>,
    /// The connection the call came on, for calls back to the client
    /// over it (the NFSv4.1 back channel); None where there is none.
    pub back: Option<Arc<dyn CallbackConn>>,
    /// How the connection is protected (RPC-with-TLS), for exports that
    /// require TLS.
    pub xprtsec: crate::transport::XprtSec,
    /// The program-level status of the reply (0 = OK): only the program
    /// knows it. Set once per error reply; relaxed atomics, no lock.
    status: AtomicU32,
    /// The export the call touched (`u32::MAX` = none), set where the file handle is resolved.
    export: AtomicU32,
    /// The program asked that its reply not be kept in the duplicate request cache.
    skip_cache: AtomicBool,
    /// Whether the reply may carry file data outside its buffer (set by
    /// the driver: plain TCP, no GSS protection of the results).
    zero_copy: bool,
    /// The file data so carried (see [`crate::zero_copy`]).
    attached: std::sync::Mutex<Option<crate::zero_copy::Attachment>>,
}

impl CallContext {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        xid: u32,
        prog: u32,
        vers: u32,
        proc_: u32,
        auth: Auth,
        peer: SocketAddr,
        conn_id: u64,
        client: Arc<dyn PeerStats>,
    ) -> Self {
        CallContext {
            xid,
            prog,
            vers,
            proc_,
            auth,
            peer,
            conn_id,
            client,
            back: None,
            xprtsec: Default::default(),
            status: AtomicU32::new(0),
            export: AtomicU32::new(u32::MAX),
            skip_cache: AtomicBool::new(false),
            zero_copy: false,
            attached: std::sync::Mutex::new(None),
        }
    }

    /// Records the status of an error reply (for the per-status error counters).
    #[inline]
    pub fn set_status(&self, status: u32) {
        self.status.store(status, Relaxed);
    }

    pub fn status(&self) -> u32 {
        self.status.load(Relaxed)
    }

    /// Keeps this call's reply out of the duplicate request cache (it
    /// changed nothing, so a retransmission may simply run again).
    pub fn skip_cache(&self) {
        self.skip_cache.store(true, Relaxed);
    }

    pub fn cache_skipped(&self) -> bool {
        self.skip_cache.load(Relaxed)
    }

    /// Whether the procedure may attach file data instead of copying it
    /// into its results ([`Self::attach`]).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    pub(crate) fn allow_zero_copy(&mut self, yes: bool) {
        self.zero_copy = yes;
    }

    /// `len` bytes in `pipe` are the reply's from offset `at` of the reply
    /// buffer on (what the procedure appends next follows them). One per
    /// call; the reply is then never cached (the pipe is drained when sent).
    pub fn attach(&self, at: usize, len: usize, pipe: crate::zero_copy::Pipe) {
        debug_assert!(self.zero_copy);
        self.skip_cache();
        let old = self
            .attached
            .lock()
            .unwrap()
            .replace(crate::zero_copy::Attachment::new(at, len, pipe));
        debug_assert!(old.is_none(), "one attachment per reply");
    }

    /// Whether a procedure has attached data (a second READ in a
    /// COMPOUND then copies).
    pub fn has_attachment(&self) -> bool {
        self.attached.lock().unwrap().is_some()
    }

    /// The bytes attached: part of the reply's length.
    pub fn attached_len(&self) -> usize {
        self.attached.lock().unwrap().as_ref().map_or(0, |a| a.len)
    }

    /// The reply buffer was cut back to `at`: data attached from there on
    /// is no longer part of it.
    pub fn detach_from(&self, at: usize) {
        let mut a = self.attached.lock().unwrap();
        if a.as_ref().is_some_and(|a| a.at >= at) {
            *a = None;
        }
    }

    pub(crate) fn take_attachment(&self) -> Option<crate::zero_copy::Attachment> {
        self.attached.lock().unwrap().take()
    }

    /// Records which export the call is about (for the per-export counters).
    #[inline]
    pub fn set_export(&self, id: u32) {
        self.export.store(id, Relaxed);
    }

    pub fn export(&self) -> u32 {
        self.export.load(Relaxed)
    }
}

impl Clone for CallContext {
    fn clone(&self) -> Self {
        let mut c = CallContext::new(
            self.xid,
            self.prog,
            self.vers,
            self.proc_,
            self.auth.clone(),
            self.peer,
            self.conn_id,
            self.client.clone(),
        );
        c.back = self.back.clone();
        c.xprtsec = self.xprtsec;
        c.set_status(self.status());
        c.set_export(self.export());
        c
    }
}
