//! The state one COMPOUND carries from operation to operation: current and
//! saved filehandle, current and saved stateid, the session slot.

use super::fail::Fail;
use super::pseudo::{node_fileid, MountedOn};
use super::server::Nfs4;
use super::state::session::SlotGuard;
use crate::auth_cache::{Access, Decision};
use crate::export::Export;
use crate::live::Snapshot;
use crate::locks::FileKey;
use bytes::Bytes;
use proto::nfs4::{Nfsstat4, Stateid4};
use rpc::CallContext;
use std::sync::{Arc, OnceLock};
use vfs::{Cred, Fid};

/// The all-zeros special stateid.
pub const ANONYMOUS: Stateid4 = Stateid4 {
    seqid: 0,
    other: [0; 12],
};

/// Most operations one COMPOUND may carry before a session bounds it.
pub const MAX_OPS: u32 = 256;

/// Export id carried in the handles of pseudo filesystem directories.
pub const PSEUDO_EXPORT: u32 = u32::MAX;

/// What a filehandle names.
#[derive(Clone)]
pub enum Fh {
    /// A directory of the pseudo filesystem.
    Pseudo(u32),
    /// An object in an export.
    Obj { export: Arc<Export>, fid: Fid },
}

/// A filehandle with its wire form, sealed only when someone asks.
#[derive(Clone)]
pub struct Cur {
    pub fh: Fh,
    wire: Option<Bytes>,
}

impl Cur {
    pub fn new(fh: Fh) -> Cur {
        Cur { fh, wire: None }
    }

    pub fn with_wire(fh: Fh, wire: Bytes) -> Cur {
        Cur {
            fh,
            wire: Some(wire),
        }
    }

    pub fn wire(&mut self, n: &Nfs4) -> Bytes {
        if let Some(w) = &self.wire {
            return w.clone();
        }
        let w = n.seal(&self.fh);
        self.wire = Some(w.clone());
        w
    }
}

pub struct Compound<'a> {
    pub n: &'a Nfs4,
    pub ctx: &'a CallContext,
    /// The exports in force when this COMPOUND began, used to its end.
    pub snap: Arc<Snapshot>,
    /// This caller's access decisions, looked up at the first need.
    decision: OnceLock<Arc<Decision>>,
    pub minor: u32,
    pub cur: Option<Cur>,
    pub saved: Option<Cur>,
    pub cur_sid: Option<Stateid4>,
    pub saved_sid: Option<Stateid4>,
    /// The slot this COMPOUND holds (NFSv4.1), freed when the reply is sent.
    pub slot: Option<SlotGuard>,
    pub cachethis: bool,
    /// The client the session belongs to.
    pub clientid: Option<u64>,
}

impl<'a> Compound<'a> {
    pub fn new(n: &'a Nfs4, ctx: &'a CallContext, minor: u32) -> Self {
        Compound {
            n,
            ctx,
            snap: n.live.load_full(),
            decision: OnceLock::new(),
            minor,
            cur: None,
            saved: None,
            cur_sid: None,
            saved_sid: None,
            slot: None,
            cachethis: false,
            clientid: None,
        }
    }

    pub fn cur(&self) -> Result<&Cur, Fail> {
        self.cur.as_ref().ok_or(Fail::new(
            Nfsstat4::NFS4ERR_NOFILEHANDLE,
            "no current filehandle",
        ))
    }

    /// What the caller may do on `export` (from the auth cache, once per
    /// COMPOUND); NFS4ERR_ACCESS when its client is not let in.
    pub fn access(&self, export: &Export) -> Result<&Access, Fail> {
        let a = self
            .decision
            .get_or_init(|| self.snap.decision(self.ctx))
            .get(export.id)
            .ok_or(Fail::new(
                Nfsstat4::NFS4ERR_ACCESS,
                "client is not allowed to use this export",
            ))?;
        if a.port_refused(&self.ctx.auth, self.ctx.peer) {
            // Linux's server answers NFS4ERR_PERM here.
            return Err(Fail::new(
                Nfsstat4::NFS4ERR_PERM,
                "request from an unprivileged source port (1024 or above) on a `secure` export",
            ));
        }
        Ok(a)
    }

    /// The current filehandle as an object of an export, with the caller's
    /// credential there; pseudo directories answer `pseudo_err`.
    pub fn obj(&self, pseudo_err: Nfsstat4) -> Result<(Arc<Export>, Fid, Cred), Fail> {
        match &self.cur()?.fh {
            Fh::Obj { export, fid } => {
                Ok((export.clone(), *fid, self.access(export)?.cred.clone()))
            }
            Fh::Pseudo(_) => Err(Fail::new(
                pseudo_err,
                "operation on a pseudo filesystem directory",
            )),
        }
    }

    /// Like [`Compound::obj`], refusing read-only exports.
    pub fn obj_rw(&self, pseudo_err: Nfsstat4) -> Result<(Arc<Export>, Fid, Cred), Fail> {
        let t = self.obj(pseudo_err)?;
        if !self.access(&t.0)?.rw {
            return Err(Fail::new(Nfsstat4::NFS4ERR_ROFS, "export is read-only"));
        }
        Ok(t)
    }

    /// Makes `fh` current. RFC 8881 §16.2.3.1.2: an operation that sets
    /// the current filehandle but returns no stateid (LOOKUP, PUTROOTFH,
    /// CREATE...) sets the current stateid to the all-zeros one; OPEN sets
    /// its own after this.
    pub fn set_cur(&mut self, fh: Fh) {
        if let Fh::Obj { export, .. } = &fh {
            self.ctx.set_export(export.id);
        }
        self.cur = Some(Cur::new(fh));
        self.cur_sid = Some(ANONYMOUS);
    }

    /// The stateid an operation names, resolving the 4.1 "current stateid".
    pub fn stateid(&self, sid: &Stateid4) -> Result<Stateid4, Fail> {
        if self.minor > 0 && super::state::is_current(sid) {
            return self.cur_sid.clone().ok_or(Fail::new(
                Nfsstat4::NFS4ERR_BAD_STATEID,
                "current stateid used before one was set",
            ));
        }
        Ok(sid.clone())
    }

    pub fn clientid(&self) -> Result<u64, Fail> {
        self.clientid
            .ok_or(Fail::new(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION, "no session"))
    }
}

/// File key for the lock manager and open state.
pub fn file_key(export: &Export, fid: &Fid) -> FileKey {
    FileKey {
        export: export.id,
        fid: *fid,
    }
}

/// The fileid an export root reports as mounted_on_fileid.
pub fn mounted_on_fileid(snap: &Snapshot, export: &Export, fid: &Fid, fileid: u64) -> u64 {
    if *fid != export.backend.root() {
        return fileid;
    }
    match snap.pseudo.mounted_on.get(&export.id) {
        Some(MountedOn::Node(node)) => node_fileid(*node),
        Some(MountedOn::Dir { fileid, .. }) => *fileid,
        None => fileid,
    }
}
