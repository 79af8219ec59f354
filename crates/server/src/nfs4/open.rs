//! OPEN, CLOSE, OPEN_DOWNGRADE and DELEGRETURN: share reservations, open
//! stateids, and the delegations OPEN may grant (see `super::deleg`).

use super::attr;
use super::compound::{file_key, Compound, Fh};
use super::fail::{reply, status_of, Fail};
use super::state::{ACCESS_BOTH, ACCESS_READ, ACCESS_WRITE};
use crate::export::Export;
use proto::nfs4::*;
use std::sync::Arc;
use vfs::{Access, Attr, Backend, CreateHow, Cred, Fid, FileType, FsError, SetAttr};

/// The server supports POSIX byte-range locks (RFC 8881 §18.16.4).
const OPEN4_RESULT_CONFIRM: u32 = 0x2;
const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x4;

pub async fn open(c: &mut Compound<'_>, a: Open4args) -> Open4res {
    let r = do_open(c, a).await;
    reply(c.ctx, "OP_OPEN", r, Open4res::NFS4_OK)
}

/// Refuses non-regular files: a directory is NFS4ERR_ISDIR and a symlink
/// NFS4ERR_SYMLINK in every minor version; any other type is
/// NFS4ERR_SYMLINK in NFSv4.0 (RFC 7530 §16.16, which has no better
/// error) and NFS4ERR_WRONG_TYPE from NFSv4.1 on (RFC 8881 §18.16.3).
fn regular(a: &Attr, minor: u32) -> Result<(), Fail> {
    match a.ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(Fail::new(Nfsstat4::NFS4ERR_ISDIR, "OPEN of a directory")),
        FileType::Symlink => Err(Fail::new(
            Nfsstat4::NFS4ERR_SYMLINK,
            "OPEN of a symbolic link",
        )),
        _ if minor == 0 => Err(Fail::new(
            Nfsstat4::NFS4ERR_SYMLINK,
            "OPEN of a special file",
        )),
        _ => Err(Fail::new(
            Nfsstat4::NFS4ERR_WRONG_TYPE,
            "OPEN of a special file",
        )),
    }
}

/// Permission to open an existing file with this share access.
fn may_open(b: &dyn Backend, cred: &Cred, fid: &Fid, access: u32) -> Result<(), FsError> {
    let mut want = Access::empty();
    if access & ACCESS_READ != 0 {
        want |= Access::READ;
    }
    if access & ACCESS_WRITE != 0 {
        want |= Access::MODIFY;
    }
    if b.access(cred, fid, want)?.contains(want) {
        Ok(())
    } else {
        Err(FsError::Acces)
    }
}

struct Opened {
    fid: Fid,
    cinfo: ChangeInfo4,
    attrset: Bitmap4,
}

/// How an OPEN may create its file: the backend's way, what to set after
/// an exclusive create, the attributes it sets, and what to ask before the
/// name is made (the recall of directory delegations on `dir`).
struct Creating<'a> {
    how: CreateHow,
    after: Option<SetAttr>,
    bits: Bitmap4,
    recalling: &'a crate::dirlock::Recalling,
}

/// CLAIM_NULL: open (and maybe create) `name` in directory `dir`.
fn open_by_name(
    b: &dyn Backend,
    cred: &Cred,
    dir: &Fid,
    name: &[u8],
    how: Option<Creating<'_>>,
    access: u32,
    minor: u32,
) -> Result<Opened, Fail> {
    // Only an open that may create changes the directory; plain opens of
    // one directory stay parallel.
    let _held = how.is_some().then(|| crate::dirlock::hold(dir));
    let before = super::dir::change_of(b, dir);
    let mut created = false;
    let (fid, attrset) = match b.lookup(cred, dir, name) {
        Ok((fid, a)) => {
            regular(&a, minor)?;
            let attrset = match &how {
                Some(Creating {
                    how: CreateHow::Guarded(_),
                    ..
                }) => {
                    return Err(Fail::new(
                        Nfsstat4::NFS4ERR_EXIST,
                        "GUARDED create of an existing name",
                    ))
                }
                // A retried exclusive create finds its own file: the
                // backend recognises the verifier.
                Some(Creating {
                    how: h @ CreateHow::Exclusive(_),
                    ..
                }) => {
                    b.create(cred, dir, name, h)?;
                    Vec::new()
                }
                // UNCHECKED4 on an existing file ignores createattrs, except
                // that size 0 truncates it (RFC 7530 §16.16, RFC 8881
                // §18.16.3): an O_CREAT|O_TRUNC open. Any other size or
                // attribute would change a file the caller did not create.
                Some(Creating {
                    how: CreateHow::Unchecked(set),
                    ..
                }) if set.size == Some(0) => {
                    may_open(b, cred, &fid, access | ACCESS_WRITE)?;
                    b.setattr(
                        cred,
                        &fid,
                        &SetAttr {
                            size: Some(0),
                            ..SetAttr::default()
                        },
                    )?;
                    let mut s = Vec::new();
                    attr::bitmap_set(&mut s, FATTR4_SIZE);
                    s
                }
                _ => Vec::new(),
            };
            may_open(b, cred, &fid, access)?;
            (fid, attrset)
        }
        Err(FsError::NoEnt) => {
            let Some(Creating {
                how,
                after,
                bits,
                recalling,
            }) = how
            else {
                return Err(Fail::new(Nfsstat4::NFS4ERR_NOENT, "no such file"));
            };
            // Only now is the directory changed: other clients' directory
            // delegations on it are recalled first (NFS4ERR_DELAY).
            if recalling(dir) {
                return Err(FsError::Jukebox.into());
            }
            // Creating: the creator may open what it made whatever its mode.
            let how = match how {
                CreateHow::Unchecked(s) => CreateHow::Guarded(s),
                h => h,
            };
            let (fid, _) = b.create(cred, dir, name, &how)?;
            created = true;
            if let Some(set) = after {
                b.setattr(cred, &fid, &set)?;
            }
            (fid, bits)
        }
        Err(e) => return Err(e.into()),
    };
    // Nothing changed the directory unless this call created the file.
    let after = if created {
        super::dir::change_of(b, dir)
    } else {
        before
    };
    Ok(Opened {
        fid,
        cinfo: super::dir::cinfo(b, before, after),
        attrset,
    })
}

async fn do_open(c: &mut Compound<'_>, a: Open4args) -> Result<Open4resok, Fail> {
    let clientid = open_clientid(c, a.owner.clientid)?;
    // The low byte is the access; 4.1 puts delegation wishes above it.
    let access = a.share_access & 0xff;
    let deny = a.share_deny;
    if access == 0 || access > ACCESS_BOTH || deny > ACCESS_BOTH {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_INVAL,
            "bad share access or deny bits",
        ));
    }
    let reclaim = matches!(a.claim, OpenClaim4::CLAIM_PREVIOUS(_));
    grace_allows(c, clientid, reclaim)?;
    let (export, cur, cred) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
    let creating = matches!(a.openhow, Openflag4::OPEN4_CREATE(_));
    if (creating || access & ACCESS_WRITE != 0) && !c.access(&export)?.rw {
        return Err(Fail::new(Nfsstat4::NFS4ERR_ROFS, "export is read-only"));
    }
    let (claim, under) = deleg_claim(c, clientid, a.claim)?;
    let plain =
        under.is_none() && matches!(claim, OpenClaim4::CLAIM_NULL(_) | OpenClaim4::CLAIM_FH);
    // A reclaim names the delegation the client held before the restart.
    let prev_deleg = match &claim {
        OpenClaim4::CLAIM_PREVIOUS(t) => Some(*t),
        _ => None,
    };
    let deleg_cred = cred.clone();
    let opened = open_claimed(c, &export, cur, cred, claim, a.openhow, access).await?;
    let fk = file_key(&export, &opened.fid);
    if let Some(sid) = &under {
        match c.n.state.check_delegation(clientid, sid, Some(&fk)) {
            Nfsstat4::NFS4_OK => {}
            s => return Err(Fail::new(s, "the delegation is for another file")),
        }
    }
    // Writing, or denying reads, conflicts with other clients'
    // delegations, any open with their write delegations: they are
    // recalled first.
    if access & ACCESS_WRITE != 0 || deny & ACCESS_READ != 0 {
        super::deleg::break_file(c, &export, &opened.fid, super::deleg::Intent::Change, None)
            .await?;
    } else {
        super::deleg::break_file(c, &export, &opened.fid, super::deleg::Intent::Read, None).await?;
    }
    let owner = a.owner.owner.clone();
    let sid = c.n.state.open(
        clientid,
        &owner,
        file_key(&export, &opened.fid),
        access,
        deny,
        c.n.clock.now(),
    )?;
    let confirm = c.minor == 0 && c.n.state.needs_open_confirm(clientid, &owner, reclaim);
    let claim = match prev_deleg {
        Some(t) => super::deleg::Claim::Reclaim(t),
        // As knfsd: a 4.0 open owner not yet confirmed is given no delegation.
        None if plain && !confirm => super::deleg::Claim::Plain,
        None => super::deleg::Claim::Other,
    };
    let delegation = super::deleg::on_open(
        c,
        clientid,
        a.share_access,
        claim,
        &export,
        &opened.fid,
        &deleg_cred,
    )
    .await;
    c.set_cur(Fh::Obj {
        export,
        fid: opened.fid,
    });
    let mut rflags = OPEN4_RESULT_LOCKTYPE_POSIX;
    if confirm {
        rflags |= OPEN4_RESULT_CONFIRM;
    }
    let sid = match delegation_only(c.minor, a.share_access, &sid, &delegation) {
        // The delegation stands for the open: the client sends no CLOSE.
        Some(deleg) => {
            c.n.state.close(&sid, &fk, c.minor)?;
            rflags |= OPEN4_RESULT_NO_OPEN_STATEID;
            c.cur_sid = Some(deleg);
            Stateid4 {
                seqid: 0,
                other: [0; 12],
            }
        }
        None => {
            c.cur_sid = Some(sid.clone());
            sid
        }
    };
    Ok(Open4resok {
        stateid: sid,
        cinfo: opened.cinfo,
        rflags,
        attrset: opened.attrset,
        delegation,
    })
}

/// RFC 9754 OPEN_XOR_DELEGATION: a 4.1 client that asked for a delegation
/// instead of an open stateid, and got one, keeps no open when this OPEN
/// made a new one (seqid 1); an open the owner already had stays, as with
/// knfsd. Returns the delegation's stateid then.
fn delegation_only(
    minor: u32,
    share_access: u32,
    sid: &Stateid4,
    delegation: &OpenDelegation4,
) -> Option<Stateid4> {
    if minor == 0
        || share_access & OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION == 0
        || sid.seqid != 1
    {
        return None;
    }
    match delegation {
        OpenDelegation4::OPEN_DELEGATE_READ(d) => Some(d.stateid.clone()),
        OpenDelegation4::OPEN_DELEGATE_WRITE(d) => Some(d.stateid.clone()),
        _ => None,
    }
}

/// The client an OPEN is for: 4.0 names it in the owner (and the OPEN
/// renews its lease); 4.1 has it from the session.
fn open_clientid(c: &mut Compound<'_>, owner_clientid: u64) -> Result<u64, Fail> {
    if c.minor == 0 {
        c.n.state.renew(owner_clientid, c.n.clock.now())?;
        // The client's own delegations do not stand in the way of what
        // follows, as for a 4.1 session's client (knfsd does the same).
        c.clientid = Some(owner_clientid);
        Ok(owner_clientid)
    } else {
        c.clientid()
    }
}

/// During grace only reclaims; after it, a 4.1 client must have sent
/// RECLAIM_COMPLETE before a new open.
fn grace_allows(c: &Compound<'_>, clientid: u64, reclaim: bool) -> Result<(), Fail> {
    let now = c.n.clock.now();
    if reclaim {
        c.n.state.may_reclaim(clientid, now)?;
    } else if c.n.state.in_grace(now) {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_GRACE,
            "grace period: only reclaims are allowed",
        ));
    } else {
        c.n.state
            .reclaim_done(clientid)
            .map_err(|s| Fail::new(s, "no RECLAIM_COMPLETE yet (RFC 8881 §18.51.3)"))?;
    }
    Ok(())
}

/// Opens under a delegation (CLAIM_DELEGATE_CUR by name,
/// CLAIM_DELEG_CUR_FH by handle) name a delegation the client holds;
/// they are then opened as CLAIM_NULL and CLAIM_FH are. Returns the claim
/// to open by and the delegation's stateid, checked as the client's.
fn deleg_claim(
    c: &Compound<'_>,
    clientid: u64,
    claim: OpenClaim4,
) -> Result<(OpenClaim4, Option<Stateid4>), Fail> {
    let mut under = None;
    let claim = match claim {
        OpenClaim4::CLAIM_DELEGATE_CUR(d) => {
            under = Some(d.delegate_stateid);
            OpenClaim4::CLAIM_NULL(d.file)
        }
        OpenClaim4::CLAIM_DELEG_CUR_FH(sid) => {
            let sid = c.stateid(&sid)?;
            under = Some(sid);
            OpenClaim4::CLAIM_FH
        }
        other => other,
    };
    if let Some(sid) = &under {
        match c.n.state.check_delegation(clientid, sid, None) {
            Nfsstat4::NFS4_OK => {}
            s => {
                return Err(Fail::new(
                    s,
                    "OPEN under a delegation the client does not hold",
                ))
            }
        }
    }
    Ok((claim, under))
}

/// The file the claim names, looked up or created (CLAIM_NULL), or the
/// current filehandle checked for opening (CLAIM_FH, CLAIM_PREVIOUS).
async fn open_claimed(
    c: &Compound<'_>,
    export: &Arc<Export>,
    cur: Fid,
    cred: Cred,
    claim: OpenClaim4,
    openhow: Openflag4,
    access: u32,
) -> Result<Opened, Fail> {
    let b = export.backend.clone();
    let minor = c.minor;
    Ok(match claim {
        OpenClaim4::CLAIM_NULL(name) => {
            super::fh::check_name(&name)?;
            if c.snap.pseudo.junction(export.id, &cur, &name).is_some() {
                return Err(Fail::new(
                    Nfsstat4::NFS4ERR_ISDIR,
                    "name is another export's root",
                ));
            }
            let how = match openhow {
                Openflag4::OPEN4_CREATE(h) => Some(create_how(c, h)?),
                Openflag4::Default(_) => None,
            };
            if how.is_none() {
                // Opening an existing file is a lookup and a permission
                // check: inline when nothing waits for the disk.
                c.n.pool.run_fast(&*b.clone(), move || {
                    open_by_name(&*b, &cred, &cur, &name, None, access, minor)
                })
                .await?
            } else {
                let recalling = c.n.dir_recaller(c.clientid, export.id);
                c.n.run(move || {
                    let how = how.map(|(how, after, bits)| Creating {
                        how,
                        after,
                        bits,
                        recalling: &recalling,
                    });
                    open_by_name(&*b, &cred, &cur, &name, how, access, minor)
                })
                .await?
            }
        }
        OpenClaim4::CLAIM_FH | OpenClaim4::CLAIM_PREVIOUS(_) => {
            let fid = cur;
            c.n.run(move || {
                let a = b.getattr(&fid)?;
                regular(&a, minor)?;
                may_open(&*b, &cred, &fid, access)?;
                Ok::<_, Fail>(())
            })
            .await?;
            Opened {
                fid,
                cinfo: ChangeInfo4 {
                    atomic: false,
                    before: 0,
                    after: 0,
                },
                attrset: Vec::new(),
            }
        }
        // RFC 8881 §18.16.3 lets a server without persistent delegations
        // answer these NFS4ERR_NOTSUPP: they reclaim, after the *client*
        // restarted, delegations the server kept on stable storage, and
        // Tarn keeps none there (a server restart's reclaims are
        // CLAIM_PREVIOUS, above).
        _ => {
            return Err(Fail::new(
                Nfsstat4::NFS4ERR_NOTSUPP,
                "CLAIM_DELEGATE_PREV / CLAIM_DELEG_PREV_FH: delegations are not kept across a client restart here",
            ))
        }
    })
}

/// createhow4 → the backend's create mode, attributes to set after an
/// exclusive create, and the bits the reply reports as set.
fn create_how(
    c: &Compound<'_>,
    h: Createhow4,
) -> Result<(CreateHow, Option<SetAttr>, Bitmap4), Fail> {
    let dec = |f: &Fattr4| {
        attr::decode_set(f, &c.n.idmap, c.minor)
            .map_err(|s| Fail::new(s, "create attributes could not be decoded"))
    };
    Ok(match h {
        Createhow4::UNCHECKED4(f) => {
            let (s, bits) = dec(&f)?;
            (CreateHow::Unchecked(s), None, bits)
        }
        Createhow4::GUARDED4(f) => {
            let (s, bits) = dec(&f)?;
            (CreateHow::Guarded(s), None, bits)
        }
        Createhow4::EXCLUSIVE4(v) => (CreateHow::Exclusive(v), None, Vec::new()),
        Createhow4::EXCLUSIVE4_1(v) => {
            let (s, bits) = dec(&v.cva_attrs)?;
            let allowed = attr::suppattr_exclcreat();
            for (w, word) in bits.iter().enumerate() {
                if word & !allowed.get(w).copied().unwrap_or(0) != 0 {
                    return Err(Fail::new(
                        Nfsstat4::NFS4ERR_INVAL,
                        "attribute not settable in an exclusive create",
                    ));
                }
            }
            (CreateHow::Exclusive(v.cva_verf), Some(s), bits)
        }
    })
}

pub async fn close(c: &mut Compound<'_>, a: Close4args) -> Close4res {
    let r = (|| {
        let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        let sid = c.stateid(&a.open_stateid)?;
        let closed = c.n.state.close(&sid, &file_key(&export, &fid), c.minor)?;
        Ok::<_, Fail>((closed, export, fid))
    })();
    let r = match r {
        Ok((closed, export, fid)) => {
            // A backend keeping the file open (CephFS) ends its write open
            // before the reply, so another head's client that opens the
            // file next finds it closed here.
            let b = export.backend.clone();
            if b.kept_open().is_some() {
                c.n.pool.run(move || b.closed(&fid)).await;
            }
            Ok(closed)
        }
        Err(e) => Err(e),
    };
    let r = r.inspect(|sid| c.cur_sid = Some(sid.clone()));
    reply(c.ctx, "OP_CLOSE", r, Close4res::NFS4_OK)
}

pub fn downgrade(c: &mut Compound<'_>, a: OpenDowngrade4args) -> OpenDowngrade4res {
    let r = (|| {
        let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        let sid = c.stateid(&a.open_stateid)?;
        Ok::<_, Fail>(c.n.state.downgrade(
            &sid,
            &file_key(&export, &fid),
            a.share_access & 0xff,
            a.share_deny,
            c.minor,
        )?)
    })();
    let r = r.inspect(|sid| c.cur_sid = Some(sid.clone()));
    let ok = |open_stateid| OpenDowngrade4res::NFS4_OK(OpenDowngrade4resok { open_stateid });
    reply(c.ctx, "OP_OPEN_DOWNGRADE", r, ok)
}

/// DELEGRETURN: the delegation on the current file goes back.
pub fn delegreturn(c: &mut Compound<'_>, a: Delegreturn4args) -> Delegreturn4res {
    let r = (|| {
        let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        let sid = c.stateid(&a.deleg_stateid)?;
        // NFSv4.0 names no client: the delegation's holder returns it
        // (one revoked or never granted is unknown: BAD_STATEID).
        let client = match c.clientid {
            Some(id) => id,
            None => c.n.state.deleg_client(&sid).ok_or(Fail::new(
                Nfsstat4::NFS4ERR_BAD_STATEID,
                "no such delegation",
            ))?,
        };
        if c.minor == 0 {
            c.n.state.renew(client, c.n.clock.now())?;
        }
        let file = file_key(&export, &fid);
        match c.n.state.delegreturn(client, &sid, &file) {
            Nfsstat4::NFS4_OK => {
                // The file system's delegation behind it, if the last went.
                c.n.bdelegs.check(file);
                Ok(())
            }
            s => Err(Fail::new(s, "not a delegation of this client on this file")),
        }
    })();
    let status = status_of(c.ctx, "OP_DELEGRETURN", r);
    Delegreturn4res { status }
}
