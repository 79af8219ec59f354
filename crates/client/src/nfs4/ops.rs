//! The convenience layer: one method per file operation, each one COMPOUND
//! on the session (SEQUENCE, PUTFH, the operation, sometimes GETFH).

use super::attr::{self, Attrs, SetAttrs};
use super::deleg::DelegKind;
use super::error::{Error, Result};
use super::plain::{self, name, putfh, take, DirEntry};
use super::session::Session;
use bytes::Bytes;
use proto::nfs4::*;

plain::compound_client!(Session);

/// The anonymous stateid (all zeros): I/O and SETATTR with no open state.
pub const ANON_STATEID: Stateid4 = Stateid4 {
    seqid: 0,
    other: [0; 12],
};

pub use super::attr::STAT_BITS;

/// What OPEN returned, and the file's handle.
#[derive(Clone, Debug)]
pub struct Opened {
    pub stateid: Stateid4,
    pub fh: NfsFh4,
    pub res: Open4resok,
}

impl Session {
    /// The handle of a path from the server's root (the pseudo-fs root).
    pub async fn lookup_path(&self, path: &str) -> Result<NfsFh4> {
        plain::lookup_path(self, path).await
    }

    /// The handle and attributes `bits` of a path from the server's root,
    /// in one COMPOUND (what a tool does first with a path it was given).
    pub async fn lookup_path_attrs(&self, path: &str, bits: &[u32]) -> Result<(NfsFh4, Attrs)> {
        plain::lookup_path_attrs(self, path, bits).await
    }

    pub async fn lookup(&self, dir: &NfsFh4, n: &str) -> Result<NfsFh4> {
        plain::lookup(self, dir, n).await
    }

    /// GETATTR of the given attribute numbers (`FATTR4_*`), undecoded.
    pub async fn getattr(&self, fh: &NfsFh4, bits: &[u32]) -> Result<Fattr4> {
        plain::getattr(self, fh, bits).await
    }

    /// GETATTR, decoded; `bits` must be among [`attr::DECODABLE`].
    pub async fn attrs(&self, fh: &NfsFh4, bits: &[u32]) -> Result<Attrs> {
        attr::decode(&self.getattr(fh, bits).await?)
    }

    /// The file's usual attributes ([`STAT_BITS`]). Under a delegation they
    /// come from the client's cache after the first fetch (nobody else can
    /// change the file without recalling it first); under a write
    /// delegation the client's own writes count. A server that reported
    /// revoked delegations gets asked about them first.
    pub async fn stat(&self, fh: &NfsFh4) -> Result<Attrs> {
        if self.status_flags() & SEQ4_STATUS_RECALLABLE_STATE_REVOKED != 0 {
            self.free_revoked_delegations().await?;
        }
        if let Some(a) = self.delegations().local_attrs(fh) {
            return Ok(a);
        }
        let held = self.delegations().get(fh).map(|d| d.stateid);
        let a = self.attrs(fh, STAT_BITS).await?;
        if let Some(sid) = held {
            self.delegations().store_attrs(fh, &sid, a.clone());
        }
        Ok(a)
    }

    /// DELEGRETURN of the delegation held on `fh`, if any (COMMIT first
    /// when UNSTABLE writes under it are not yet stable).
    pub async fn delegreturn(&self, fh: &NfsFh4) -> Result<bool> {
        match self.delegations().take(fh) {
            Some(d) => {
                self.fore().return_delegation(&d).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// TEST_STATEID: each stateid's status, in order.
    pub async fn test_stateids(&self, ids: &[Stateid4]) -> Result<Vec<Nfsstat4>> {
        let ops = vec![NfsArgop4::OP_TEST_STATEID(TestStateid4args {
            ts_stateids: ids.to_vec(),
        })];
        let r = self.call(ops).await?;
        take!(r, "TEST_STATEID", NfsResop4::OP_TEST_STATEID(TestStateid4res::NFS4_OK(ok)) => ok.tsr_status_codes)
    }

    /// FREE_STATEID (of revoked or expired state).
    pub async fn free_stateid(&self, id: &Stateid4) -> Result<()> {
        let ops = vec![NfsArgop4::OP_FREE_STATEID(FreeStateid4args {
            fsa_stateid: id.clone(),
        })];
        self.call(ops).await?;
        Ok(())
    }

    /// After SEQ4_STATUS_RECALLABLE_STATE_REVOKED (RFC 8881 §18.46.3):
    /// tests every delegation held, frees the revoked ones and forgets
    /// them (their files are asked about again). Returns those freed.
    pub async fn free_revoked_delegations(&self) -> Result<Vec<Stateid4>> {
        let held = self.delegations().stateids();
        if held.is_empty() {
            return Ok(vec![]);
        }
        let ids: Vec<Stateid4> = held.into_iter().map(|(_, s)| s).collect();
        let st = self.test_stateids(&ids).await?;
        let mut freed = vec![];
        for (id, s) in ids.into_iter().zip(st) {
            if s == Nfsstat4::NFS4_OK {
                continue;
            }
            self.delegations().forget(&id);
            if matches!(
                s,
                Nfsstat4::NFS4ERR_DELEG_REVOKED
                    | Nfsstat4::NFS4ERR_ADMIN_REVOKED
                    | Nfsstat4::NFS4ERR_EXPIRED
            ) {
                self.free_stateid(&id).await?;
                freed.push(id);
            }
        }
        Ok(freed)
    }

    /// The server's lease time in seconds (renew well within it).
    pub async fn lease_time(&self) -> Result<u32> {
        let root = self.lookup_path("/").await?;
        let a = self.attrs(&root, &[FATTR4_LEASE_TIME]).await?;
        a.lease_time
            .ok_or_else(|| Error::Protocol("lease_time not returned".into()))
    }

    /// OPEN by name with the session's own open owner, no share denial.
    /// `create`: Some(mode) creates the file if missing (UNCHECKED4).
    /// `access`: OPEN4_SHARE_ACCESS_READ, _WRITE or _BOTH.
    pub async fn open(
        &self,
        dir: &NfsFh4,
        n: &str,
        create: Option<u32>,
        access: u32,
    ) -> Result<(Stateid4, NfsFh4)> {
        let how = plain::open_how(create);
        let owner = self.open_owner();
        let o = self
            .open_with(&owner, dir, n, how, access, OPEN4_SHARE_DENY_NONE)
            .await?;
        Ok((o.stateid, o.fh))
    }

    /// OPEN with everything chosen by the caller (CLAIM_NULL), then GETFH.
    /// NFSv4.1 has no OPEN_CONFIRM and ignores the seqid, so it is 0.
    pub async fn open_with(
        &self,
        owner: &StateOwner4,
        dir: &NfsFh4,
        n: &str,
        openhow: Openflag4,
        share_access: u32,
        share_deny: u32,
    ) -> Result<Opened> {
        let how = (openhow, share_access, share_deny);
        Ok(self.open_null(owner, dir, n, how, None, None).await?.0)
    }

    /// [`Session::open_with`] with a GETATTR of `bits` in the same
    /// COMPOUND (a new file's attributes come with its OPEN; a write
    /// delegation granted then needs no GETATTR of its own). With
    /// `with_dir`, the directory's attributes after the OPEN too (PUTFH of
    /// `dir`, GETATTR; None when that GETATTR alone failed): a mount that
    /// creates a file keeps its directory's attributes current without a
    /// GETATTR of its own.
    pub async fn open_with_attrs(
        &self,
        owner: &StateOwner4,
        dir: &NfsFh4,
        n: &str,
        (openhow, share_access, share_deny): (Openflag4, u32, u32),
        bits: &[u32],
        with_dir: bool,
    ) -> Result<(Opened, Attrs, Option<Attrs>)> {
        let how = (openhow, share_access, share_deny);
        let dir_bits = with_dir.then_some(bits);
        let (o, a, d) = self
            .open_null(owner, dir, n, how, Some(bits), dir_bits)
            .await?;
        Ok((o, a.expect("GETATTR was in the COMPOUND"), d))
    }

    /// The CLAIM_NULL OPEN of all three: `how` is (openhow, share_access,
    /// share_deny); with `bits`, a GETATTR after the GETFH; with
    /// `dir_bits`, the directory's GETATTR after that.
    async fn open_null(
        &self,
        owner: &StateOwner4,
        dir: &NfsFh4,
        n: &str,
        (openhow, share_access, share_deny): (Openflag4, u32, u32),
        bits: Option<&[u32]>,
        dir_bits: Option<&[u32]>,
    ) -> Result<(Opened, Option<Attrs>, Option<Attrs>)> {
        let ops = vec![
            putfh(dir),
            NfsArgop4::OP_OPEN(Open4args {
                seqid: 0,
                share_access,
                share_deny,
                owner: owner.clone(),
                openhow,
                claim: OpenClaim4::CLAIM_NULL(name(n)),
            }),
            NfsArgop4::OP_GETFH,
        ];
        self.open_compound(ops, None, bits, dir_bits.map(|b| (dir, b)))
            .await
    }

    /// OPEN of a file by its handle (CLAIM_FH, RFC 8881 §18.16.3), and
    /// with `bits` a GETATTR in the same COMPOUND (a mount's close-to-open
    /// check costs no extra call). `share_access` may carry
    /// OPEN4_SHARE_ACCESS_WANT_* bits.
    pub async fn open_fh(
        &self,
        owner: &StateOwner4,
        fh: &NfsFh4,
        share_access: u32,
        bits: Option<&[u32]>,
    ) -> Result<(Opened, Option<Attrs>)> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::OP_OPEN(Open4args {
                seqid: 0,
                share_access,
                share_deny: OPEN4_SHARE_DENY_NONE,
                owner: owner.clone(),
                openhow: Openflag4::Default(Opentype4::OPEN4_NOCREATE),
                claim: OpenClaim4::CLAIM_FH,
            }),
        ];
        let (o, a, _) = self.open_compound(ops, Some(fh), bits, None).await?;
        Ok((o, a))
    }

    /// Sends an OPEN's `ops` (PUTFH, OPEN and, when the handle is not
    /// `known`, GETFH) with a GETATTR of `bits` after them, and takes the
    /// opened file and its attributes from the reply, recording any
    /// delegation it brought; with `dir_after`, a PUTFH of that directory
    /// and its GETATTR last.
    async fn open_compound(
        &self,
        mut ops: Vec<NfsArgop4>,
        known: Option<&NfsFh4>,
        bits: Option<&[u32]>,
        dir_after: Option<(&NfsFh4, &[u32])>,
    ) -> Result<(Opened, Option<Attrs>, Option<Attrs>)> {
        let getattr = |bits| {
            NfsArgop4::OP_GETATTR(Getattr4args {
                attr_request: attr::bitmap(bits),
            })
        };
        if let Some(bits) = bits {
            ops.push(getattr(bits));
        }
        if let Some((dir, bits)) = dir_after {
            ops.push(putfh(dir));
            ops.push(getattr(bits));
        }
        let sent = ops.len();
        let in_flight = self.delegations().open_in_flight();
        let res = self.call_raw(ops).await?;
        // The directory's GETATTR alone failing leaves the file opened:
        // the open is kept (its state would otherwise leak until the
        // lease ends), without the directory's attributes.
        let dir_failed = dir_after.is_some()
            && res.status != Nfsstat4::NFS4_OK
            && res.resarray.len() == sent + 1;
        if !dir_failed {
            super::session::check(&res)?;
        }
        let mut r = res.resarray;
        r.remove(0); // SEQUENCE
        let dir_attrs = match dir_after {
            Some(_) => {
                let a = r.pop();
                r.pop(); // PUTFH
                match a {
                    Some(NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok))) => {
                        Some(attr::decode(&ok.obj_attributes)?)
                    }
                    _ => None,
                }
            }
            None => None,
        };
        let attrs = match bits {
            Some(_) => Some(attr::decode(&take!(
                r.pop(),
                "GETATTR",
                NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok)) => ok.obj_attributes
            )?)?),
            None => None,
        };
        let fh = match known {
            Some(fh) => fh.clone(),
            None => {
                take!(r.pop(), "GETFH", NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => ok.object)?
            }
        };
        let res = take!(r, "OPEN", NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)) => ok)?;
        self.opened_delegation(&fh, &res, attrs.clone(), in_flight)
            .await?;
        let opened = Opened {
            stateid: res.stateid.clone(),
            fh,
            res,
        };
        Ok((opened, attrs, dir_attrs))
    }

    /// Records the delegation an OPEN reply brought, if any (returned at
    /// once when it was recalled before we got here). `attrs`: the file's
    /// attributes from the same COMPOUND.
    async fn opened_delegation(
        &self,
        fh: &NfsFh4,
        res: &Open4resok,
        attrs: Option<Attrs>,
        in_flight: super::deleg::OpenInFlight<'_>,
    ) -> Result<()> {
        let granted = match &res.delegation {
            OpenDelegation4::OPEN_DELEGATE_READ(d) => {
                Some((d.stateid.clone(), DelegKind::Read, d.recall))
            }
            OpenDelegation4::OPEN_DELEGATE_WRITE(d) => {
                Some((d.stateid.clone(), DelegKind::Write, d.recall))
            }
            _ => None,
        };
        let Some((sid, kind, recall)) = granted else {
            return Ok(());
        };
        let now_back = self.delegations().granted(fh, sid.clone(), kind, recall);
        drop(in_flight);
        match (now_back, attrs) {
            (Some(d), _) => self.fore().return_delegation(&d).await?,
            (None, Some(a)) => self.delegations().store_attrs(fh, &sid, a),
            // The client answers CB_GETATTR from what it knows: know
            // it from the start.
            (None, None) if kind == DelegKind::Write => {
                self.stat(fh).await?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    pub async fn read(
        &self,
        stateid: &Stateid4,
        fh: &NfsFh4,
        offset: u64,
        count: u32,
    ) -> Result<Read4resok> {
        plain::read(self, stateid, fh, offset, count).await
    }

    pub async fn write(
        &self,
        stateid: &Stateid4,
        fh: &NfsFh4,
        offset: u64,
        data: Bytes,
        stable: StableHow4,
    ) -> Result<Write4resok> {
        let ok = plain::write(self, stateid, fh, offset, data, stable).await?;
        self.delegations().wrote(
            fh,
            offset,
            ok.count as u64,
            ok.committed == StableHow4::UNSTABLE4,
        );
        Ok(ok)
    }

    /// A FILE_SYNC WRITE of `data` at `offset`, then a SETATTR of `set`
    /// (anonymous stateid: for mode and times) and a GETATTR of `bits`,
    /// in one COMPOUND: a file's last data and the times set after it
    /// (`tar x`'s futimens) cost one round trip. Returns the WRITE's
    /// result, or its error; then the SETATTR's outcome, with the
    /// attributes it left (None when the GETATTR alone failed).
    pub async fn write_then_setattr(
        &self,
        stateid: &Stateid4,
        fh: &NfsFh4,
        offset: u64,
        data: Bytes,
        set: &SetAttrs,
        bits: &[u32],
    ) -> Result<(Write4resok, Result<Option<Attrs>>)> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::OP_WRITE(Write4args {
                stateid: stateid.clone(),
                offset,
                stable: StableHow4::FILE_SYNC4,
                data,
            }),
            NfsArgop4::OP_SETATTR(Setattr4args {
                stateid: ANON_STATEID,
                obj_attributes: set.encode(),
            }),
            NfsArgop4::OP_GETATTR(Getattr4args {
                attr_request: attr::bitmap(bits),
            }),
        ];
        let res = self.call_raw(ops).await?;
        let r = &res.resarray;
        let Some(NfsResop4::OP_WRITE(Write4res::NFS4_OK(w))) = r.get(2) else {
            super::session::check(&res)?;
            return Err(Error::Protocol("WRITE: result missing".into()));
        };
        self.delegations().wrote(
            fh,
            offset,
            w.count as u64,
            w.committed == StableHow4::UNSTABLE4,
        );
        let after = match r.get(4) {
            Some(NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok))) => {
                attr::decode(&ok.obj_attributes).map(Some)
            }
            // The SETATTR failed (the error), or only the GETATTR (None).
            _ => super::session::check(&res)
                .map(|_| None)
                .or_else(|e| match &e {
                    Error::Nfs(n) if n.op == NfsOpnum4::OP_GETATTR => Ok(None),
                    _ => Err(e),
                }),
        };
        Ok((w.clone(), after))
    }

    /// COMMIT; `count` 0 means to the end of the file. Returns the write
    /// verifier, to compare with those of the UNSTABLE writes.
    pub async fn commit(&self, fh: &NfsFh4, offset: u64, count: u32) -> Result<Verifier4> {
        let v = plain::commit(self, fh, offset, count).await?;
        if offset == 0 && count == 0 {
            self.delegations().committed(fh);
        }
        Ok(v)
    }

    pub async fn close(&self, fh: &NfsFh4, stateid: &Stateid4) -> Result<Stateid4> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::OP_CLOSE(Close4args {
                seqid: 0,
                open_stateid: stateid.clone(),
            }),
        ];
        let r = self.call(ops).await?;
        take!(r, "CLOSE", NfsResop4::OP_CLOSE(Close4res::NFS4_OK(s)) => s)
    }

    pub async fn remove(&self, dir: &NfsFh4, n: &str) -> Result<ChangeInfo4> {
        plain::remove(self, dir, n).await
    }

    /// CREATE of a directory, then GETFH.
    pub async fn mkdir(&self, dir: &NfsFh4, n: &str, mode: u32) -> Result<NfsFh4> {
        plain::mkdir(self, dir, n, mode).await
    }

    /// CREATE of a symbolic link holding `target`, then GETFH.
    pub async fn symlink(&self, dir: &NfsFh4, n: &str, target: &str) -> Result<NfsFh4> {
        plain::symlink(self, dir, n, target).await
    }

    /// READLINK: a symbolic link's text.
    pub async fn readlink(&self, fh: &NfsFh4) -> Result<Bytes> {
        plain::readlink(self, fh).await
    }

    /// LINK: a new name `n` in `dir` for the file `fh` (the saved handle).
    pub async fn link(&self, fh: &NfsFh4, dir: &NfsFh4, n: &str) -> Result<ChangeInfo4> {
        plain::link(self, fh, dir, n).await
    }

    /// Every entry of a directory, page after page, with type and file ID.
    pub async fn readdir(&self, dir: &NfsFh4) -> Result<Vec<DirEntry>> {
        self.readdir_with(dir, &[FATTR4_TYPE, FATTR4_FILEID]).await
    }

    /// Every entry of a directory with the attributes `bits` (among
    /// [`attr::DECODABLE`]): what `ls -l` and a recursive copy need in one
    /// pass instead of a GETATTR per entry.
    pub async fn readdir_with(&self, dir: &NfsFh4, bits: &[u32]) -> Result<Vec<DirEntry>> {
        plain::readdir_with(self, dir, bits).await
    }

    /// RENAME of `from` in directory `from_dir` to `to` in `to_dir` (the
    /// source directory is the saved handle, the target the current one).
    pub async fn rename(
        &self,
        from_dir: &NfsFh4,
        from: &str,
        to_dir: &NfsFh4,
        to: &str,
    ) -> Result<Rename4resok> {
        plain::rename(self, from_dir, from, to_dir, to).await
    }

    /// SETATTR under `stateid` (an open's, or [`ANON_STATEID`] for mode and
    /// times). Returns the attributes the server set. Attributes cached
    /// under a delegation are not updated: callers that hold one should
    /// not change its file this way.
    pub async fn setattr(
        &self,
        fh: &NfsFh4,
        stateid: &Stateid4,
        set: &SetAttrs,
    ) -> Result<Bitmap4> {
        plain::setattr(self, fh, stateid, set).await
    }

    /// NFSv4.2 COPY within the server, synchronous (RFC 7862 §15.2): up
    /// to `count` bytes of `src` at `src_off` to `dst` at `dst_off`. The
    /// server may copy less (continue from `wr_count`); `wr_committed`
    /// says whether a COMMIT is still needed.
    #[allow(clippy::too_many_arguments)]
    pub async fn copy_range(
        &self,
        src: &NfsFh4,
        src_stateid: &Stateid4,
        dst: &NfsFh4,
        dst_stateid: &Stateid4,
        src_off: u64,
        dst_off: u64,
        count: u64,
    ) -> Result<WriteResponse4> {
        let ops = vec![
            putfh(src),
            NfsArgop4::OP_SAVEFH,
            putfh(dst),
            NfsArgop4::OP_COPY(Copy4args {
                ca_src_stateid: src_stateid.clone(),
                ca_dst_stateid: dst_stateid.clone(),
                ca_src_offset: src_off,
                ca_dst_offset: dst_off,
                ca_count: count,
                ca_consecutive: true,
                ca_synchronous: true,
                ca_source_server: vec![],
            }),
        ];
        let r = self.call(ops).await?;
        let ok = take!(r, "COPY", NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok)) => ok)?;
        if !ok.cr_response.wr_callback_id.is_empty() {
            // Asked synchronous, answered asynchronous: not allowed.
            return Err(Error::Protocol(
                "COPY: asynchronous answer to a synchronous copy".into(),
            ));
        }
        let w = ok.cr_response;
        self.delegations().wrote(
            dst,
            dst_off,
            w.wr_count,
            w.wr_committed == StableHow4::UNSTABLE4,
        );
        Ok(w)
    }

    /// NFSv4.2 ALLOCATE (RFC 7862 §15.1): space for `[offset, offset +
    /// len)` reserved, the size raised to its end if it was below. Under a
    /// write delegation the client's cached size follows, as for a WRITE.
    pub async fn allocate(
        &self,
        fh: &NfsFh4,
        stateid: &Stateid4,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::OP_ALLOCATE(Allocate4args {
                aa_stateid: stateid.clone(),
                aa_offset: offset,
                aa_length: len,
            }),
        ];
        self.call(ops).await?;
        self.delegations().wrote(fh, offset, len, false);
        Ok(())
    }

    /// NFSv4.2 DEALLOCATE (RFC 7862 §15.4): `[offset, offset + len)`
    /// becomes a hole that reads as zeros; the size does not change.
    pub async fn deallocate(
        &self,
        fh: &NfsFh4,
        stateid: &Stateid4,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::OP_DEALLOCATE(Deallocate4args {
                da_stateid: stateid.clone(),
                da_offset: offset,
                da_length: len,
            }),
        ];
        self.call(ops).await?;
        Ok(())
    }

    /// NFSv4.2 SEEK (RFC 7862 §15.11): the first offset at or after
    /// `offset` where data (or with `hole`, a hole) begins. No data after
    /// `offset` is NFS4ERR_NXIO, as lseek(2) says ENXIO.
    pub async fn seek(
        &self,
        fh: &NfsFh4,
        stateid: &Stateid4,
        offset: u64,
        hole: bool,
    ) -> Result<SeekRes4> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::OP_SEEK(Seek4args {
                sa_stateid: stateid.clone(),
                sa_offset: offset,
                sa_what: if hole {
                    DataContent4::NFS4_CONTENT_HOLE
                } else {
                    DataContent4::NFS4_CONTENT_DATA
                },
            }),
        ];
        let r = self.call(ops).await?;
        take!(r, "SEEK", NfsResop4::OP_SEEK(Seek4res::NFS4_OK(ok)) => ok)
    }

    /// The session's default open owner (one is enough in NFSv4.1: there
    /// are no per-owner sequence IDs to serialize on).
    pub fn open_owner(&self) -> StateOwner4 {
        StateOwner4 {
            clientid: self.clientid(),
            owner: Bytes::from_static(b"open-default"),
        }
    }

    /// A locker for a lock owner's first lock on a file opened as `open_stateid`.
    pub fn new_lock_owner(&self, open_stateid: &Stateid4, owner: &StateOwner4) -> Locker4 {
        Locker4::TRUE(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open_stateid.clone(),
            lock_seqid: 0,
            lock_owner: owner.clone(),
        })
    }

    /// A locker for a lock owner that already holds `lock_stateid`.
    pub fn existing_lock_owner(lock_stateid: &Stateid4) -> Locker4 {
        Locker4::FALSE(ExistLockOwner4 {
            lock_stateid: lock_stateid.clone(),
            lock_seqid: 0,
        })
    }

    /// LOCK. Ok(Err(denied)) when another owner holds a conflicting lock.
    pub async fn lock(
        &self,
        fh: &NfsFh4,
        locker: Locker4,
        locktype: NfsLockType4,
        offset: u64,
        length: u64,
    ) -> Result<std::result::Result<Stateid4, Lock4denied>> {
        let ops = plain::lock_ops(fh, locker, locktype, offset, length);
        plain::lock_result(self.call_raw(ops).await?)
    }

    pub async fn locku(
        &self,
        fh: &NfsFh4,
        lock_stateid: &Stateid4,
        locktype: NfsLockType4,
        offset: u64,
        length: u64,
    ) -> Result<Stateid4> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::OP_LOCKU(Locku4args {
                locktype,
                seqid: 0,
                lock_stateid: lock_stateid.clone(),
                offset,
                length,
            }),
        ];
        let r = self.call(ops).await?;
        take!(r, "LOCKU", NfsResop4::OP_LOCKU(Locku4res::NFS4_OK(s)) => s)
    }
}
