//! Read, write and directory delegations (RFC 8881 §10.2-10.4, §10.9;
//! directory ones are recall-only, see [`DelegType::Dir`]): a read delegation
//! is granted on OPEN when no other client writes the file, a write one
//! when no other client uses it at all; either is recalled before another
//! client's conflicting request (which gets NFS4ERR_DELAY meanwhile), and
//! revoked when a recall goes unanswered for a lease. A write delegation's
//! holder is asked for size and change (CB_GETATTR) before another client
//! reads them (§10.4.3); past a high-water mark, the clients holding most
//! are asked to give some back (CB_RECALL_ANY, §20.6). Pure like the rest
//! of the core: calls to clients are [`Effect`]s for the driver to send,
//! and every timed decision takes `now`.
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
    pub kind: DelegType,
    /// A write delegation's view of the file for CB_GETATTR answers.
    pub attrs: Option<WriteAttrs>,
}

/// What a delegation is asked for: by `client`, of `kind` on `file`
/// (`fh` as the client knows it). `change`: the file's change attribute
/// now, where a write delegation's CB_GETATTR answers start from.
pub struct DelegAsk {
    pub client: u64,
    pub file: FileKey,
    pub fh: Bytes,
    pub kind: DelegType,
    pub change: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelegType {
    Read,
    Write,
    /// A directory delegation (GET_DIR_DELEGATION, RFC 8881 §10.9), keyed
    /// by the directory's FileKey: recalled before another client changes
    /// the directory's entries or attributes. No notifications.
    Dir,
}

/// What the server remembers of a write delegation's file between
/// CB_GETATTRs (RFC 8881 §10.4.3): the change value the holder last
/// reported (at first the file's at grant), the size it reported once it
/// had modified the file, and how often the server bumped the change
/// attribute it answers on the holder's behalf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteAttrs {
    pub last_change: u64,
    pub size: Option<u64>,
    pub bumps: u64,
}

/// A write delegation another client's GETATTR must ask about first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteHolder {
    pub client: u64,
    pub stateid: Stateid4,
    pub fh: Bytes,
}

/// How the server answers for a file under a write delegation after the
/// holder's CB_GETATTR reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbAnswer {
    pub size: u64,
    pub change: u64,
}

/// RCA4_TYPE_MASK_RDATA_DLG and _WDATA_DLG as craa_type_mask bits.
pub const RCA4_MASK_RDATA: u32 = 1 << 0;
pub const RCA4_MASK_WDATA: u32 = 1 << 1;
/// RCA4_TYPE_MASK_DIR_DLG.
pub const RCA4_MASK_DIR: u32 = 1 << 2;

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
    /// The client holds a read delegation on the file and a write one
    /// would take its place: Tarn does not upgrade (WND4_NOT_SUPP_UPGRADE).
    Upgrade,
}

/// What a conflicting request learns about the delegations on its file.
#[derive(Debug, PartialEq, Eq)]
pub enum Break {
    /// Nothing stands in the way.
    Clear,
    /// A recall is outstanding (maybe just queued): NFS4ERR_DELAY.
    Delay,
}

/// How long no delegation is granted on a file after one on it was
/// recalled. A client that returns a delegation and opens the file again
/// at once would otherwise be given a new one in the same OPEN whose
/// attributes show the change that caused the recall, and the Linux client
/// (6.1) ignores a data change it learns while holding a delegation: it
/// keeps serving the old pages. Linux's server refuses delegations on
/// recently recalled files for the same reason (30 to 60 s).
pub const RECALL_BACKOFF: Duration = Duration::from_secs(30);

/// Past this many files remembered as recently recalled, the old ones go.
const RECALLED_FILES: usize = 4096;

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
        now: Instant,
    ) -> Result<Stateid4, NoDeleg> {
        let ask = DelegAsk {
            client,
            file,
            fh,
            kind: DelegType::Read,
            change: 0,
        };
        self.grant_delegation(ask, max, now)
    }

    /// Grants the delegation `ask` names (see
    /// [`Self::delegation_conflict`] for when), if fewer than `max` are
    /// outstanding.
    pub fn grant_delegation(
        &self,
        ask: DelegAsk,
        max: usize,
        now: Instant,
    ) -> Result<Stateid4, NoDeleg> {
        let (client, file, kind) = (ask.client, ask.file, ask.kind);
        let mut i = self.inner.lock().unwrap();
        if i.recently_recalled
            .get(&file)
            .is_some_and(|at| now.saturating_duration_since(*at) < RECALL_BACKOFF)
        {
            return Err(NoDeleg::Contention);
        }
        // Byte-range locks of others (NLM hosts too): the holder would take
        // its own locks locally, unseen by theirs.
        if self.locks.locked_by_others(file, client) {
            return Err(NoDeleg::Contention);
        }
        Self::delegation_conflict(&i, client, &file, kind)?;
        if i.delegs.len() >= max {
            return Err(NoDeleg::Resource);
        }
        if !i.clients.contains_key(&client) {
            return Err(NoDeleg::Held);
        }
        Ok(self.insert_deleg(&mut i, ask, None))
    }

    /// OPEN CLAIM_PREVIOUS asking for the delegation `client` held before
    /// the restart (RFC 8881 §10.2.1, §18.16.3): it is given back whatever
    /// the bound, and when it now conflicts (another client reclaimed an
    /// open that stands in its way, or the client has no back channel) it
    /// is given pre-recalled: the bool is `recall`, and the delegation is
    /// revoked if not returned within a lease as a recalled one is.
    pub fn reclaim_delegation(
        &self,
        ask: DelegAsk,
        callback: bool,
        now: Instant,
    ) -> Result<(Stateid4, bool), NoDeleg> {
        let (client, file, kind) = (ask.client, ask.file, ask.kind);
        let mut i = self.inner.lock().unwrap();
        if !i.clients.contains_key(&client) {
            return Err(NoDeleg::Held);
        }
        let recall = match Self::delegation_conflict(&i, client, &file, kind) {
            Ok(()) => !callback,
            Err(e @ (NoDeleg::Held | NoDeleg::Upgrade)) => return Err(e),
            Err(_) => true,
        };
        let recalled = recall.then_some(now);
        let sid = self.insert_deleg(&mut i, ask, recalled);
        if recall {
            i.deleg_events.recalled += 1;
        }
        Ok((sid, recall))
    }

    /// Why `client` may not have a delegation of `kind` on `file`: it holds
    /// one already (Held, or Upgrade for a read one when it asks for a
    /// write one); one is being recalled; another client writes
    /// the file or holds a write delegation on it (a read delegation); or
    /// another client has it open or holds any delegation on it (a write
    /// delegation, RFC 8881 §10.4: its holder may change the file unseen).
    /// A directory delegation meets the rules of a read one (directories
    /// are not opened, so only a recall under way stands in its way).
    fn delegation_conflict(
        i: &Inner,
        client: u64,
        file: &FileKey,
        kind: DelegType,
    ) -> Result<(), NoDeleg> {
        if let Some(list) = i.deleg_files.get(file) {
            // The client's own first: what it holds says more than others.
            if let Some(d) = list
                .iter()
                .map(|o| &i.delegs[o])
                .find(|d| d.client == client)
            {
                return Err(if d.kind == DelegType::Read && kind == DelegType::Write {
                    NoDeleg::Upgrade
                } else {
                    NoDeleg::Held
                });
            }
            for o in list {
                let d = &i.delegs[o];
                if d.recalled.is_some() || kind == DelegType::Write || d.kind == DelegType::Write {
                    return Err(NoDeleg::Contention);
                }
            }
        }
        if let Some(list) = i.files.get(file) {
            for o in list {
                if let Some(Stateful {
                    client: c,
                    kind: Kind::Open { access, .. },
                    ..
                }) = i.stateids.get(o)
                {
                    if *c != client && (kind == DelegType::Write || access & ACCESS_WRITE != 0) {
                        return Err(NoDeleg::Contention);
                    }
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_deleg(&self, i: &mut Inner, ask: DelegAsk, recalled: Option<Instant>) -> Stateid4 {
        let DelegAsk {
            client,
            file,
            fh,
            kind,
            change,
        } = ask;
        // Under the lock, so that `has_delegations` never reads it low.
        self.delegs_hint
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let other = self.new_other(i, client);
        let attrs = (kind == DelegType::Write).then_some(WriteAttrs {
            last_change: change,
            size: None,
            bumps: 0,
        });
        i.delegs.insert(
            other,
            Deleg {
                client,
                file,
                fh,
                seqid: 1,
                recalled,
                kind,
                attrs,
            },
        );
        i.deleg_files.entry(file).or_default().push(other);
        i.clients
            .get_mut(&client)
            .expect("checked by the caller")
            .delegs
            .insert(other);
        Stateid4 { seqid: 1, other }
    }

    /// Before a request of `by` (None: a client the request does not name)
    /// that conflicts with delegations on `file` held by others — all of
    /// them for a change to the file, only write delegations when
    /// `reader` (a READ, LOCK, read OPEN or GETATTR does not disturb a
    /// read delegation): the first time, queues a recall of each
    /// ([`Effect::Recall`]) and says Delay; once the holders returned
    /// them, Clear. A recall unanswered for a lease revokes the delegation
    /// here (as the lease timer would), and a lapsed holder's goes at once.
    pub fn break_delegations(
        &self,
        file: &FileKey,
        by: Option<u64>,
        reader: bool,
        now: Instant,
    ) -> Break {
        // A reader disturbs neither a read delegation nor a directory's
        // (a GETATTR or LOOKUP in it changes nothing).
        self.break_where(file, by, |k| !reader || k == DelegType::Write, now)
    }

    /// [`Self::break_delegations`] for directory delegations only: before
    /// a change of `dir`'s entries or attributes by `by` (None: a client
    /// the request does not name, NFSv3, a local process).
    pub fn break_dir_delegations(&self, dir: &FileKey, by: Option<u64>, now: Instant) -> Break {
        self.break_where(dir, by, |k| k == DelegType::Dir, now)
    }

    /// Recalls (or revokes, see [`Self::break_delegations`]) the
    /// delegations on `file` of kinds `stands` says are in the way, held
    /// by others than `by`.
    fn break_where(
        &self,
        file: &FileKey,
        by: Option<u64>,
        stands: impl Fn(DelegType) -> bool,
        now: Instant,
    ) -> Break {
        let mut i = self.inner.lock().unwrap();
        let Some(list) = i.deleg_files.get(file) else {
            return Break::Clear;
        };
        let mut revoke = Vec::new();
        let mut delay = false;
        let mut recalls = Vec::new();
        for o in list.clone() {
            let d = &i.delegs[&o];
            if Some(d.client) == by || !stands(d.kind) {
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
        if !recalls.is_empty() {
            if i.recently_recalled.len() >= RECALLED_FILES {
                i.recently_recalled
                    .retain(|_, at| now.saturating_duration_since(*at) < RECALL_BACKOFF);
            }
            i.recently_recalled.insert(*file, now);
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

    /// The write delegation on `file` another client than `by` holds, which
    /// a GETATTR of size or change must ask about first (CB_GETATTR, RFC
    /// 8881 §10.4.3). None when there is none, or it is being recalled
    /// (the recall settles what the file is; the caller breaks it).
    pub fn write_holder(&self, file: &FileKey, by: Option<u64>) -> Option<WriteHolder> {
        let i = self.inner.lock().unwrap();
        i.deleg_files.get(file)?.iter().find_map(|o| {
            let d = &i.delegs[o];
            (d.kind == DelegType::Write && Some(d.client) != by && d.recalled.is_none()).then(
                || WriteHolder {
                    client: d.client,
                    stateid: Stateid4 {
                        seqid: d.seqid,
                        other: *o,
                    },
                    fh: d.fh.clone(),
                },
            )
        })
    }

    /// The holder of write delegation `sid` answered CB_GETATTR with
    /// `change` and `size`; `file_size` is the server's. Whether this
    /// shows a modification not reported before (RFC 8881 §10.4.3: its
    /// change differs from the one it last reported, first the file's at
    /// grant, or its size from the one known): then the server bumps the
    /// change attribute it answers with, and the caller updates the file's
    /// time_modify. None when the delegation is gone meanwhile.
    pub fn cb_getattr_report(
        &self,
        sid: &Stateid4,
        change: u64,
        size: u64,
        file_size: u64,
    ) -> Option<bool> {
        let mut i = self.inner.lock().unwrap();
        let a = i.delegs.get_mut(&sid.other)?.attrs.as_mut()?;
        let modified = change != a.last_change || size != a.size.unwrap_or(file_size);
        if modified {
            a.last_change = change;
            a.size = Some(size);
            a.bumps += 1;
        }
        Some(modified)
    }

    /// What a GETATTR answers for size and change of a file under write
    /// delegation `sid`, given the server's own: the holder's size once
    /// it reported a modification, and the server's change attribute
    /// bumped once per reported modification (so it moves whenever the
    /// holder's does, and never backwards while the delegation lasts).
    pub fn cb_getattr_answer(&self, sid: &Stateid4, change: u64, size: u64) -> CbAnswer {
        let i = self.inner.lock().unwrap();
        match i.delegs.get(&sid.other).and_then(|d| d.attrs) {
            Some(a) => CbAnswer {
                size: a.size.unwrap_or(size),
                change: change.wrapping_add(a.bumps),
            },
            None => CbAnswer { size, change },
        }
    }

    /// Past the high-water mark (nine tenths of the bound `max`), asks the
    /// clients holding the most delegations — at least the average of
    /// those holding any — to keep only half of theirs (CB_RECALL_ANY, RFC
    /// 8881 §20.6), one call per client in flight. Returns how many calls
    /// were queued ([`Effect::RecallAny`]).
    pub fn recall_any(&self, max: usize) -> usize {
        let mut i = self.inner.lock().unwrap();
        let held = i.delegs.len();
        if held == 0 || held * 10 < max * 9 {
            return 0;
        }
        let holders: Vec<(u64, usize, u32)> = i
            .clients
            .values()
            .filter(|c| !c.delegs.is_empty())
            .map(|c| {
                let mask = c.delegs.iter().fold(0, |m, o| {
                    m | match i.delegs.get(o).map(|d| d.kind) {
                        Some(DelegType::Write) => RCA4_MASK_WDATA,
                        Some(DelegType::Read) => RCA4_MASK_RDATA,
                        Some(DelegType::Dir) => RCA4_MASK_DIR,
                        None => 0,
                    }
                });
                (c.id, c.delegs.len(), mask)
            })
            .collect();
        let average = held.div_ceil(holders.len().max(1));
        let mut queued = 0;
        for (client, n, mask) in holders {
            if n < average || mask == 0 || !i.recall_any_pending.insert(client) {
                continue;
            }
            i.effects.push(Effect::RecallAny {
                client,
                keep: (n / 2) as u32,
                mask,
            });
            i.deleg_events.recall_any += 1;
            queued += 1;
        }
        queued
    }

    /// The driver is done with `client`'s CB_RECALL_ANY (answered or not):
    /// another may be sent when the mark is passed again.
    pub fn recall_any_done(&self, client: u64) {
        self.inner
            .lock()
            .unwrap()
            .recall_any_pending
            .remove(&client);
    }

    /// Whether any delegation is outstanding (a cheap test before a
    /// lookup that only a conflict check needs).
    pub fn has_delegations(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        if self.delegs_hint.load(SeqCst) == 0 {
            return false;
        }
        let i = self.inner.lock().unwrap();
        self.delegs_hint.store(i.delegs.len(), SeqCst);
        !i.delegs.is_empty()
    }

    /// Whether anyone holds a delegation on `file`.
    pub fn delegated(&self, file: &FileKey) -> bool {
        self.inner.lock().unwrap().deleg_files.contains_key(file)
    }

    /// Each client record and how many delegations it holds.
    pub fn delegations_by_client(&self) -> Vec<(u64, usize)> {
        let i = self.inner.lock().unwrap();
        i.clients.values().map(|c| (c.id, c.delegs.len())).collect()
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

    /// The client an open, lock or delegation stateid belongs to (an
    /// NFSv4.0 WRITE or SETATTR names its client only through it).
    pub fn stateid_client(&self, sid: &Stateid4) -> Option<u64> {
        let i = self.inner.lock().unwrap();
        i.stateids
            .get(&sid.other)
            .map(|s| s.client)
            .or_else(|| i.delegs.get(&sid.other).map(|d| d.client))
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
        i.recall_any_pending.remove(&clientid);
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
        Some(if d.file != *file || d.kind == DelegType::Dir {
            Err(Nfsstat4::NFS4ERR_BAD_STATEID)
        } else if write && d.kind == DelegType::Read {
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
    /// CB_RECALL_ANY calls queued.
    pub recall_any: u64,
}
