//! What a session must remember to survive a server restart (RFC 8881
//! §8.4.2.1): the files it has open and the locks it holds, learnt from the
//! COMPOUNDs it sends, so that after a restart it can reclaim them (OPEN
//! CLAIM_PREVIOUS, LOCK reclaim) and map the stateids its callers still
//! hold to the ones the server gave anew. No I/O: the session feeds it
//! each COMPOUND and its reply, and asks it to rewrite stateids.

use bytes::Bytes;
use proto::nfs4::*;
use std::collections::HashMap;

/// An open file, as OPEN and GETFH told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRec {
    /// The handle; None until a GETFH (or PUTFH before OPEN CLAIM_FH) gave it.
    pub fh: Option<NfsFh4>,
    /// The open owner's opaque part (the client ID changes with a restart).
    pub owner: Bytes,
    pub access: u32,
    pub deny: u32,
    pub stateid: Stateid4,
}

/// A byte range locked under a lock stateid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRec {
    pub fh: NfsFh4,
    /// The open stateid the lock owner was created from.
    pub open: [u8; 12],
    pub owner: Bytes,
    pub locktype: NfsLockType4,
    pub offset: u64,
    pub length: u64,
    pub stateid: Stateid4,
}

#[derive(Clone, Debug, Default)]
pub struct StateBook {
    pub opens: Vec<OpenRec>,
    pub locks: Vec<LockRec>,
    /// Stateids from before a restart (their `other`) and what replaced them.
    map: HashMap<[u8; 12], Stateid4>,
    /// Lock owners by lock stateid (`other`), learnt from LOCK new-owner.
    lock_owners: HashMap<[u8; 12], (Bytes, [u8; 12])>,
}

fn is_special(s: &Stateid4) -> bool {
    s.other == [0; 12] || s.other == [0xff; 12]
}

/// Whether an operation changes the current file handle to one the
/// COMPOUND does not name (GETFH is needed to learn it).
fn moves_fh(op: &NfsArgop4) -> bool {
    matches!(
        op,
        NfsArgop4::OP_PUTROOTFH
            | NfsArgop4::OP_PUTPUBFH
            | NfsArgop4::OP_LOOKUP(_)
            | NfsArgop4::OP_LOOKUPP
            | NfsArgop4::OP_CREATE(_)
            | NfsArgop4::OP_RESTOREFH
            | NfsArgop4::OP_OPEN(_)
            | NfsArgop4::OP_OPENATTR(_)
    )
}

impl StateBook {
    /// The stateid to send for one a caller holds.
    pub fn current(&self, s: &Stateid4) -> Stateid4 {
        if is_special(s) {
            return s.clone();
        }
        match self.map.get(&s.other) {
            // seqid 0 means "the current one" in NFSv4.1: keep it so.
            Some(n) => Stateid4 {
                seqid: if s.seqid == 0 { 0 } else { n.seqid },
                other: n.other,
            },
            None => s.clone(),
        }
    }

    /// Rewrites the stateids in `ops` that a restart replaced.
    pub fn rewrite(&self, ops: &mut [NfsArgop4]) {
        if self.map.is_empty() {
            return;
        }
        let f = |s: &mut Stateid4| *s = self.current(s);
        for op in ops {
            match op {
                NfsArgop4::OP_READ(a) => f(&mut a.stateid),
                NfsArgop4::OP_WRITE(a) => f(&mut a.stateid),
                NfsArgop4::OP_SETATTR(a) => f(&mut a.stateid),
                NfsArgop4::OP_CLOSE(a) => f(&mut a.open_stateid),
                NfsArgop4::OP_OPEN_DOWNGRADE(a) => f(&mut a.open_stateid),
                NfsArgop4::OP_LOCKU(a) => f(&mut a.lock_stateid),
                NfsArgop4::OP_LOCK(a) => match &mut a.locker {
                    Locker4::TRUE(o) => f(&mut o.open_stateid),
                    Locker4::FALSE(e) => f(&mut e.lock_stateid),
                },
                NfsArgop4::OP_COPY(a) => {
                    f(&mut a.ca_src_stateid);
                    f(&mut a.ca_dst_stateid);
                }
                NfsArgop4::OP_CLONE(a) => {
                    f(&mut a.cl_src_stateid);
                    f(&mut a.cl_dst_stateid);
                }
                NfsArgop4::OP_ALLOCATE(a) => f(&mut a.aa_stateid),
                NfsArgop4::OP_DEALLOCATE(a) => f(&mut a.da_stateid),
                NfsArgop4::OP_SEEK(a) => f(&mut a.sa_stateid),
                NfsArgop4::OP_READ_PLUS(a) => f(&mut a.rpa_stateid),
                _ => {}
            }
        }
    }

    /// Learns from a COMPOUND that was answered: opens and locks made,
    /// changed and given up. `ops` are the arguments as sent.
    pub fn observe(&mut self, ops: &[NfsArgop4], res: &[NfsResop4]) {
        let mut cur: Option<NfsFh4> = None;
        // The open whose file is the current handle (waiting for GETFH).
        let mut opened: Option<usize> = None;
        for (op, r) in ops.iter().zip(res) {
            match (op, r) {
                (NfsArgop4::OP_PUTFH(a), _) => {
                    cur = Some(a.object.clone());
                    opened = None;
                }
                (NfsArgop4::OP_GETFH, NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok))) => {
                    if let Some(i) = opened.take() {
                        self.opens[i].fh = Some(ok.object.clone());
                    }
                    cur = Some(ok.object.clone());
                }
                (NfsArgop4::OP_OPEN(a), NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok))) => {
                    let fh = match a.claim {
                        OpenClaim4::CLAIM_FH
                        | OpenClaim4::CLAIM_PREVIOUS(_)
                        | OpenClaim4::CLAIM_DELEG_CUR_FH(_)
                        | OpenClaim4::CLAIM_DELEG_PREV_FH => cur.clone(),
                        _ => None,
                    };
                    let rec = OpenRec {
                        fh,
                        owner: a.owner.owner.clone(),
                        access: a.share_access & OPEN4_SHARE_ACCESS_BOTH,
                        deny: a.share_deny,
                        stateid: ok.stateid.clone(),
                    };
                    // Another OPEN by the same owner of the same file
                    // upgrades the one open (same `other`).
                    match self
                        .opens
                        .iter()
                        .position(|o| o.stateid.other == ok.stateid.other)
                    {
                        Some(i) => {
                            let o = &mut self.opens[i];
                            o.access |= rec.access;
                            o.deny |= rec.deny;
                            o.stateid = rec.stateid;
                            if o.fh.is_none() {
                                o.fh = rec.fh;
                            }
                            opened = o.fh.is_none().then_some(i);
                        }
                        None => {
                            let known = rec.fh.is_some();
                            self.opens.push(rec);
                            opened = (!known).then_some(self.opens.len() - 1);
                        }
                    }
                    cur = None;
                }
                (NfsArgop4::OP_OPEN_DOWNGRADE(a), NfsResop4::OP_OPEN_DOWNGRADE(r)) => {
                    if let OpenDowngrade4res::NFS4_OK(ok) = r {
                        let other = self.current(&a.open_stateid).other;
                        if let Some(o) = self.opens.iter_mut().find(|o| o.stateid.other == other) {
                            o.access = a.share_access & OPEN4_SHARE_ACCESS_BOTH;
                            o.deny = a.share_deny;
                            o.stateid = ok.open_stateid.clone();
                        }
                    }
                }
                (NfsArgop4::OP_CLOSE(a), NfsResop4::OP_CLOSE(Close4res::NFS4_OK(_))) => {
                    let other = self.current(&a.open_stateid).other;
                    self.opens.retain(|o| o.stateid.other != other);
                    self.locks.retain(|l| l.open != other);
                    self.map.retain(|_, n| n.other != other);
                }
                (NfsArgop4::OP_LOCK(a), NfsResop4::OP_LOCK(Lock4res::NFS4_OK(ok))) => {
                    let Some(fh) = cur.clone() else { continue };
                    let sid = &ok.lock_stateid;
                    let owner = match &a.locker {
                        Locker4::TRUE(o) => {
                            let open = self.current(&o.open_stateid).other;
                            let v = (o.lock_owner.owner.clone(), open);
                            self.lock_owners.insert(sid.other, v.clone());
                            Some(v)
                        }
                        Locker4::FALSE(_) => self.lock_owners.get(&sid.other).cloned(),
                    };
                    let Some((owner, open)) = owner else { continue };
                    for l in self
                        .locks
                        .iter_mut()
                        .filter(|l| l.stateid.other == sid.other)
                    {
                        l.stateid = sid.clone();
                    }
                    self.locks.push(LockRec {
                        fh,
                        open,
                        owner,
                        locktype: a.locktype,
                        offset: a.offset,
                        length: a.length,
                        stateid: sid.clone(),
                    });
                }
                (NfsArgop4::OP_LOCKU(a), NfsResop4::OP_LOCKU(Locku4res::NFS4_OK(sid))) => {
                    // A range unlocked exactly as locked goes; a part of
                    // one is kept whole (reclaiming too much is refused
                    // only if someone else took it meanwhile).
                    let other = sid.other;
                    self.locks.retain(|l| {
                        !(l.stateid.other == other && l.offset == a.offset && l.length == a.length)
                    });
                    for l in self.locks.iter_mut().filter(|l| l.stateid.other == other) {
                        l.stateid = sid.clone();
                    }
                }
                _ => {
                    if moves_fh(op) {
                        cur = None;
                        opened = None;
                    }
                }
            }
        }
    }

    /// After a restart: `old` (an open or lock stateid) is now `new`.
    pub fn replaced(&mut self, old: &Stateid4, new: &Stateid4) {
        for n in self.map.values_mut() {
            if n.other == old.other {
                *n = new.clone();
            }
        }
        self.map.insert(old.other, new.clone());
        for o in self
            .opens
            .iter_mut()
            .filter(|o| o.stateid.other == old.other)
        {
            o.stateid = new.clone();
        }
        for l in self.locks.iter_mut() {
            if l.stateid.other == old.other {
                l.stateid = new.clone();
            }
            if l.open == old.other {
                l.open = new.other;
            }
        }
        if let Some(v) = self.lock_owners.remove(&old.other) {
            self.lock_owners.insert(new.other, v);
        }
        for v in self.lock_owners.values_mut() {
            if v.1 == old.other {
                v.1 = new.other;
            }
        }
    }

    /// Forgets an open that could not be reclaimed (its callers will get
    /// the server's error for the old stateid).
    pub fn lost(&mut self, s: &Stateid4) {
        self.opens.retain(|o| o.stateid.other != s.other);
        self.locks
            .retain(|l| l.open != s.other && l.stateid.other != s.other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(n: u8, seq: u32) -> Stateid4 {
        Stateid4 {
            seqid: seq,
            other: [n; 12],
        }
    }

    fn fh(b: &'static [u8]) -> NfsFh4 {
        NfsFh4(Bytes::from_static(b))
    }

    fn open_args(owner: &'static [u8]) -> NfsArgop4 {
        NfsArgop4::OP_OPEN(Open4args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_WRITE,
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: StateOwner4 {
                clientid: 1,
                owner: Bytes::from_static(owner),
            },
            openhow: Openflag4::Default(Opentype4::OPEN4_NOCREATE),
            claim: OpenClaim4::CLAIM_NULL(Bytes::from_static(b"f")),
        })
    }

    fn open_ok(s: Stateid4) -> NfsResop4 {
        NfsResop4::OP_OPEN(Open4res::NFS4_OK(Open4resok {
            stateid: s,
            cinfo: ChangeInfo4 {
                atomic: true,
                before: 0,
                after: 0,
            },
            rflags: 0,
            attrset: vec![],
            delegation: OpenDelegation4::OPEN_DELEGATE_NONE,
        }))
    }

    #[test]
    fn an_open_is_learnt_with_its_handle_and_mapped_after_a_restart() {
        let mut b = StateBook::default();
        let ops = vec![
            NfsArgop4::OP_PUTROOTFH,
            open_args(b"o1"),
            NfsArgop4::OP_GETFH,
        ];
        let res = vec![
            NfsResop4::OP_PUTROOTFH(Putrootfh4res {
                status: Nfsstat4::NFS4_OK,
            }),
            open_ok(sid(1, 1)),
            NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(Getfh4resok { object: fh(b"F") })),
        ];
        b.observe(&ops, &res);
        assert_eq!(b.opens.len(), 1);
        assert_eq!(b.opens[0].fh, Some(fh(b"F")));
        assert_eq!(b.opens[0].owner, Bytes::from_static(b"o1"));

        b.replaced(&sid(1, 1), &sid(7, 1));
        let mut w = vec![NfsArgop4::OP_WRITE(Write4args {
            stateid: sid(1, 1),
            offset: 0,
            stable: StableHow4::UNSTABLE4,
            data: Bytes::new(),
        })];
        b.rewrite(&mut w);
        match &w[0] {
            NfsArgop4::OP_WRITE(a) => assert_eq!(a.stateid, sid(7, 1)),
            _ => unreachable!(),
        }
        // The anonymous stateid is never rewritten.
        assert_eq!(b.current(&sid(0, 0)), sid(0, 0));

        // A second restart maps the first stateid to the newest one.
        b.replaced(&sid(7, 1), &sid(9, 1));
        assert_eq!(b.current(&sid(1, 1)), sid(9, 1));

        // CLOSE (with the stateid the caller holds) forgets it.
        let ops = vec![
            NfsArgop4::OP_PUTFH(Putfh4args { object: fh(b"F") }),
            NfsArgop4::OP_CLOSE(Close4args {
                seqid: 0,
                open_stateid: sid(1, 1),
            }),
        ];
        let res = vec![
            NfsResop4::OP_PUTFH(Putfh4res {
                status: Nfsstat4::NFS4_OK,
            }),
            NfsResop4::OP_CLOSE(Close4res::NFS4_OK(sid(9, 2))),
        ];
        b.observe(&ops, &res);
        assert!(b.opens.is_empty());
    }

    #[test]
    fn a_lock_is_learnt_with_its_owner_and_unlocked_ranges_go() {
        let mut b = StateBook::default();
        b.opens.push(OpenRec {
            fh: Some(fh(b"F")),
            owner: Bytes::from_static(b"o"),
            access: OPEN4_SHARE_ACCESS_BOTH,
            deny: 0,
            stateid: sid(1, 1),
        });
        let lock = NfsArgop4::OP_LOCK(Lock4args {
            locktype: NfsLockType4::WRITE_LT,
            reclaim: false,
            offset: 0,
            length: 10,
            locker: Locker4::TRUE(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: sid(1, 1),
                lock_seqid: 0,
                lock_owner: StateOwner4 {
                    clientid: 1,
                    owner: Bytes::from_static(b"L"),
                },
            }),
        });
        let putfh = NfsArgop4::OP_PUTFH(Putfh4args { object: fh(b"F") });
        let putfh_ok = NfsResop4::OP_PUTFH(Putfh4res {
            status: Nfsstat4::NFS4_OK,
        });
        b.observe(
            &[putfh.clone(), lock],
            &[
                putfh_ok.clone(),
                NfsResop4::OP_LOCK(Lock4res::NFS4_OK(Lock4resok {
                    lock_stateid: sid(2, 1),
                })),
            ],
        );
        assert_eq!(b.locks.len(), 1);
        assert_eq!(b.locks[0].owner, Bytes::from_static(b"L"));
        assert_eq!(b.locks[0].open, [1; 12]);
        b.replaced(&sid(1, 1), &sid(5, 1));
        assert_eq!(b.locks[0].open, [5; 12]);
        let unlock = NfsArgop4::OP_LOCKU(Locku4args {
            locktype: NfsLockType4::WRITE_LT,
            seqid: 0,
            lock_stateid: sid(2, 1),
            offset: 0,
            length: 10,
        });
        b.observe(
            &[putfh, unlock],
            &[putfh_ok, NfsResop4::OP_LOCKU(Locku4res::NFS4_OK(sid(2, 2)))],
        );
        assert!(b.locks.is_empty());
    }
}
