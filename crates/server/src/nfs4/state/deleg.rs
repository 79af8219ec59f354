//! Read delegations (RFC 8881 §10.2): granted on OPEN when no other
//! client writes the file, recalled before another client's conflicting
//! request (which gets NFS4ERR_DELAY meanwhile), revoked when a recall
//! goes unanswered for a lease. Pure like the rest of the core: a recall
//! is an [`Effect::Recall`] for the driver to send, and every timed
//! decision takes `now`.
//!
//! A delegation belongs to its client (`Client::delegs`) and to its file
//! (`Inner::deleg_files`); revoked ones stay answerable
//! (NFS4ERR_DELEG_REVOKED) until FREE_STATEID, with
//! SEQ4_STATUS_RECALLABLE_STATE_REVOKED raised for their client.

use super::*;

/// A granted delegation.
pub struct Deleg {
    pub client: u64,
    pub file: FileKey,
    /// The file's handle as the client knows it (CB_RECALL names it).
    pub fh: Bytes,
    pub seqid: u32,
    /// When CB_RECALL was queued; None until a conflict asks for it.
    pub recalled: Option<Instant>,
}

/// Why no delegation was granted (the 4.1 OPEN_DELEGATE_NONE_EXT reasons
/// Tarn gives, RFC 8881 §18.16.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoDeleg {
    /// Another client has the file open for writing, or a recall is under way.
    Contention,
    /// The bound on outstanding delegations is reached.
    Resource,
    /// The client already holds one on this file, or its callback path is
    /// down (WND4_NOT_SUPP_... has no better fit: knfsd says CONTENTION too).
    Held,
}

/// What a conflicting request learns about the delegations on its file.
#[derive(Debug, PartialEq, Eq)]
pub enum Break {
    /// Nothing stands in the way.
    Clear,
    /// A recall is outstanding (maybe just queued): NFS4ERR_DELAY.
    Delay,
}

/// SEQUENCE's flag for a client some of whose delegations were revoked.
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x40;

impl State {
    /// Grants `client` a read delegation on `file` when nobody else writes
    /// it, no write open or recall stands in the way, and fewer than `max`
    /// are outstanding. The caller has just opened the file for reading.
    pub fn grant_read_delegation(
        &self,
        client: u64,
        file: FileKey,
        fh: Bytes,
        max: usize,
    ) -> Result<Stateid4, NoDeleg> {
        let mut i = self.inner.lock().unwrap();
        if let Some(list) = i.deleg_files.get(&file) {
            for o in list {
                let d = &i.delegs[o];
                if d.client == client {
                    return Err(NoDeleg::Held);
                }
                if d.recalled.is_some() {
                    return Err(NoDeleg::Contention);
                }
            }
        }
        if let Some(list) = i.files.get(&file) {
            for o in list {
                if let Some(Stateful {
                    client: c,
                    kind: Kind::Open { access, .. },
                    ..
                }) = i.stateids.get(o)
                {
                    if *c != client && access & ACCESS_WRITE != 0 {
                        return Err(NoDeleg::Contention);
                    }
                }
            }
        }
        if i.delegs.len() >= max {
            return Err(NoDeleg::Resource);
        }
        if !i.clients.contains_key(&client) {
            return Err(NoDeleg::Held);
        }
        let other = self.new_other(&mut i, client);
        i.delegs.insert(
            other,
            Deleg {
                client,
                file,
                fh,
                seqid: 1,
                recalled: None,
            },
        );
        i.deleg_files.entry(file).or_default().push(other);
        i.clients
            .get_mut(&client)
            .expect("checked above")
            .delegs
            .insert(other);
        Ok(Stateid4 { seqid: 1, other })
    }

    /// Before a request of `by` (None: a client the request does not name)
    /// that conflicts with read delegations on `file` held by others: the
    /// first time, queues a recall of each ([`Effect::Recall`]) and says
    /// Delay; once the holders returned them, Clear. A recall unanswered
    /// for a lease revokes the delegation here (as the lease timer would),
    /// and a lapsed holder's goes at once.
    pub fn break_delegations(&self, file: &FileKey, by: Option<u64>, now: Instant) -> Break {
        let mut i = self.inner.lock().unwrap();
        let Some(list) = i.deleg_files.get(file) else {
            return Break::Clear;
        };
        let mut revoke = Vec::new();
        let mut delay = false;
        let mut recalls = Vec::new();
        for o in list.clone() {
            let d = &i.delegs[&o];
            if Some(d.client) == by {
                continue;
            }
            let lapsed = i.clients.get(&d.client).is_none_or(|c| self.lapsed(c, now));
            match d.recalled {
                _ if lapsed => revoke.push(o),
                Some(at) if now.saturating_duration_since(at) >= self.lease => revoke.push(o),
                Some(_) => delay = true,
                None => {
                    recalls.push(o);
                    delay = true;
                }
            }
        }
        for o in recalls {
            let d = i.delegs.get_mut(&o).expect("listed");
            d.recalled = Some(now);
            let e = Effect::Recall {
                client: d.client,
                stateid: Stateid4 {
                    seqid: d.seqid,
                    other: o,
                },
                fh: d.fh.clone(),
            };
            i.effects.push(e);
            i.deleg_events.recalled += 1;
        }
        for o in revoke {
            Self::revoke_deleg(&mut i, o);
        }
        if delay {
            Break::Delay
        } else {
            Break::Clear
        }
    }

    /// Whether any delegation is outstanding (a cheap test before a
    /// lookup that only a conflict check needs).
    pub fn has_delegations(&self) -> bool {
        !self.inner.lock().unwrap().delegs.is_empty()
    }

    /// Delegations `client` holds (RENEW's callback-path check).
    pub fn client_delegations(&self, client: u64) -> usize {
        let i = self.inner.lock().unwrap();
        i.clients.get(&client).map_or(0, |c| c.delegs.len())
    }

    /// The client a live delegation's stateid was granted to (NFSv4.0's
    /// DELEGRETURN names no client otherwise).
    pub fn deleg_client(&self, sid: &Stateid4) -> Option<u64> {
        let i = self.inner.lock().unwrap();
        i.delegs.get(&sid.other).map(|d| d.client)
    }

    /// Outstanding delegations.
    pub fn delegations(&self) -> usize {
        self.inner.lock().unwrap().delegs.len()
    }

    /// Delegations recalled and revoked since the last call (for the
    /// metrics counters).
    pub fn take_deleg_counts(&self) -> DelegCounts {
        std::mem::take(&mut self.inner.lock().unwrap().deleg_events)
    }

    /// A delegation stays recallable state of its client no more: revoked,
    /// answerable as such until freed.
    fn revoke_deleg(i: &mut Inner, o: Other) {
        let Some(d) = Self::unlink_deleg(i, o) else {
            return;
        };
        i.deleg_events.revoked += 1;
        // NFSv4.0 has no revoked state to free: the stateid is no longer
        // known and answers NFS4ERR_BAD_STATEID, as from knfsd.
        if i.clients.get(&d.client).is_some_and(|c| c.minor == 0) {
            return;
        }
        i.deleg_revoked.insert(o, d.client);
        if let Some(c) = i.clients.get_mut(&d.client) {
            c.deleg_revoked.insert(o);
        }
    }

    fn unlink_deleg(i: &mut Inner, o: Other) -> Option<Deleg> {
        let d = i.delegs.remove(&o)?;
        if let Some(v) = i.deleg_files.get_mut(&d.file) {
            v.retain(|x| *x != o);
            if v.is_empty() {
                i.deleg_files.remove(&d.file);
            }
        }
        if let Some(c) = i.clients.get_mut(&d.client) {
            c.delegs.remove(&o);
        }
        Some(d)
    }

    /// The lease timer's part: revokes delegations whose recall went
    /// unanswered for a lease.
    pub(super) fn reap_delegations(&self, i: &mut Inner, now: Instant) {
        let late: Vec<Other> = i
            .delegs
            .iter()
            .filter(|(_, d)| {
                d.recalled
                    .is_some_and(|at| now.saturating_duration_since(at) >= self.lease)
            })
            .map(|(o, _)| *o)
            .collect();
        for o in late {
            Self::revoke_deleg(i, o);
        }
    }

    /// A 4.1 client's lease expired for real: its delegations are revoked
    /// as its opens and locks are (answered EXPIRED until freed, and
    /// counted in what the client must free before it is recorded again).
    pub(super) fn expire_client_delegations(i: &mut Inner, clientid: u64) {
        let held: Vec<Other> = i
            .clients
            .get(&clientid)
            .map(|c| c.delegs.iter().copied().collect())
            .unwrap_or_default();
        for o in held {
            if Self::unlink_deleg(i, o).is_some() {
                i.revoked.insert(o, clientid);
                if let Some(c) = i.clients.get_mut(&clientid) {
                    c.revoked.insert(o);
                }
            }
        }
    }

    /// A client's delegations go with the client (purge).
    pub(super) fn drop_client_delegations(i: &mut Inner, clientid: u64) {
        let Some(c) = i.clients.get_mut(&clientid) else {
            return;
        };
        let held: Vec<Other> = c.delegs.drain().collect();
        let revoked: Vec<Other> = c.deleg_revoked.drain().collect();
        for o in held {
            Self::unlink_deleg(i, o);
        }
        for o in revoked {
            i.deleg_revoked.remove(&o);
        }
    }

    /// DELEGRETURN of `sid` on `file` by `client`.
    pub fn delegreturn(&self, client: u64, sid: &Stateid4, file: &FileKey) -> Nfsstat4 {
        let mut i = self.inner.lock().unwrap();
        match self.deleg_status(&i, client, sid, Some(file)) {
            Nfsstat4::NFS4_OK => {
                Self::unlink_deleg(&mut i, sid.other);
                Nfsstat4::NFS4_OK
            }
            s => s,
        }
    }

    /// Whether `sid` names a delegation of `client` (on `file`), or why not.
    /// NFS4ERR_BAD_STATEID when it is no delegation at all.
    fn deleg_status(
        &self,
        i: &Inner,
        client: u64,
        sid: &Stateid4,
        file: Option<&FileKey>,
    ) -> Nfsstat4 {
        if i.deleg_revoked.get(&sid.other) == Some(&client) {
            return Nfsstat4::NFS4ERR_DELEG_REVOKED;
        }
        match i.delegs.get(&sid.other) {
            Some(d) if d.client != client => Nfsstat4::NFS4ERR_BAD_STATEID,
            Some(d) if file.is_some_and(|f| *f != d.file) => Nfsstat4::NFS4ERR_BAD_STATEID,
            Some(d) if sid.seqid != 0 && sid.seqid < d.seqid => Nfsstat4::NFS4ERR_OLD_STATEID,
            Some(d) if sid.seqid != 0 && sid.seqid > d.seqid => Nfsstat4::NFS4ERR_BAD_STATEID,
            Some(_) => Nfsstat4::NFS4_OK,
            None => Nfsstat4::NFS4ERR_BAD_STATEID,
        }
    }

    /// CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH: the delegation the client
    /// opens under, checked against the file (None: any file, checked by
    /// name later).
    pub fn check_delegation(
        &self,
        client: u64,
        sid: &Stateid4,
        file: Option<&FileKey>,
    ) -> Nfsstat4 {
        let i = self.inner.lock().unwrap();
        self.deleg_status(&i, client, sid, file)
    }

    /// READ (or WRITE) with a delegation stateid: Some(answer) when `sid`
    /// is a delegation's (live or revoked), None when it is not one.
    pub(super) fn check_deleg_io(
        i: &Inner,
        sid: &Stateid4,
        file: &FileKey,
        write: bool,
    ) -> Option<Result<Checked, Nfsstat4>> {
        if i.deleg_revoked.contains_key(&sid.other) {
            return Some(Err(Nfsstat4::NFS4ERR_DELEG_REVOKED));
        }
        let d = i.delegs.get(&sid.other)?;
        Some(if d.file != *file {
            Err(Nfsstat4::NFS4ERR_BAD_STATEID)
        } else if write {
            Err(Nfsstat4::NFS4ERR_OPENMODE)
        } else {
            Ok(Checked::Granted)
        })
    }

    /// TEST_STATEID for a delegation's stateid; None when it is not one.
    pub(super) fn test_deleg(&self, i: &Inner, client: u64, sid: &Stateid4) -> Option<Nfsstat4> {
        (i.delegs.contains_key(&sid.other) || i.deleg_revoked.contains_key(&sid.other))
            .then(|| self.deleg_status(i, client, sid, None))
    }

    /// FREE_STATEID of a revoked delegation (true) — a live one must be
    /// returned with DELEGRETURN.
    pub(super) fn free_deleg(i: &mut Inner, client: u64, sid: &Stateid4) -> Option<Nfsstat4> {
        if i.deleg_revoked.get(&sid.other) == Some(&client) {
            i.deleg_revoked.remove(&sid.other);
            if let Some(c) = i.clients.get_mut(&client) {
                c.deleg_revoked.remove(&sid.other);
            }
            return Some(Nfsstat4::NFS4_OK);
        }
        match i.delegs.get(&sid.other) {
            Some(d) if d.client == client => Some(Nfsstat4::NFS4ERR_LOCKS_HELD),
            _ => None,
        }
    }
}

/// Delegation events since the metrics last looked.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegCounts {
    pub recalled: u64,
    pub revoked: u64,
}
