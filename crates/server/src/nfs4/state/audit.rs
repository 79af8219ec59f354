//! Test-only views into the state tables, for the simulator's invariants
//! (`nfs4::sim`): consistency of the indexes, and what is granted.

use super::*;

/// An open as granted: (file, stateid, client, access, deny).
pub type OpenView = (FileKey, Other, u64, u32, u32);

impl State {
    /// Every index refers only to what exists, and every stateid, session
    /// and lock belongs to a client that exists (no state outlives its
    /// client). Locks of NFSv4 clients in the lock manager must have a lock
    /// stateid; `files` names the files to look at in the lock manager.
    pub fn audit(&self, files: &[FileKey]) -> Result<(), String> {
        let i = self.inner.lock().unwrap();
        for (o, st) in &i.stateids {
            let c = i
                .clients
                .get(&st.client)
                .ok_or(format!("stateid {o:?} of gone client {:x}", st.client))?;
            let owned = match st.kind {
                Kind::Open { .. } => c.opens.contains(o),
                Kind::Lock { .. } => c.locks.contains(o),
            };
            if !owned {
                return Err(format!("stateid {o:?} not linked from its client"));
            }
            if let Kind::Open { .. } = st.kind {
                if !i.files.get(&st.file).is_some_and(|v| v.contains(o)) {
                    return Err(format!("open {o:?} missing from its file's list"));
                }
            }
        }
        for (f, v) in &i.files {
            for o in v {
                match i.stateids.get(o) {
                    Some(st) if st.file == *f && matches!(st.kind, Kind::Open { .. }) => {}
                    _ => return Err(format!("file list names a gone open {o:?}")),
                }
            }
        }
        for c in i.clients.values() {
            for o in c.opens.iter().chain(c.locks.iter()) {
                if !i.stateids.contains_key(o) {
                    return Err(format!("client {:x} names a gone stateid {o:?}", c.id));
                }
            }
            for o in c.open_index.values().chain(c.lock_index.values()) {
                if !i.stateids.contains_key(o) {
                    return Err(format!("client {:x} indexes a gone stateid", c.id));
                }
            }
            for s in &c.sessions {
                if !i.sessions.contains_key(s) {
                    return Err(format!("client {:x} names a gone session", c.id));
                }
            }
        }
        for s in i.sessions.values() {
            if !i.clients.contains_key(&s.client) {
                return Err(format!("session of gone client {:x}", s.client));
            }
        }
        for (o, c) in i
            .revoked
            .iter()
            .chain(i.closed.iter().map(|(o, (c, _))| (o, c)))
        {
            if !i.clients.contains_key(c) {
                return Err(format!("revoked or closed stateid {o:?} of gone client"));
            }
        }
        for (owner, (conf, unconf)) in &i.owners {
            for id in conf.iter().chain(unconf.iter()) {
                if i.clients.get(id).is_none_or(|c| c.owner != *owner) {
                    return Err(format!("owner index names gone client {id:x}"));
                }
            }
        }
        let lock_sids: HashSet<(OwnerKey, FileKey)> = i
            .stateids
            .values()
            .filter_map(|st| match &st.kind {
                Kind::Lock { owner, .. } => Some((owner.clone(), st.file)),
                Kind::Open { .. } => None,
            })
            .collect();
        for f in files {
            for (owner, ..) in self.locks.locks_on(*f) {
                if owner.client & crate::locks::NLM_CLIENT_BIT != 0 {
                    continue;
                }
                if !i.clients.contains_key(&owner.client) {
                    return Err(format!("lock of gone client {:x}", owner.client));
                }
                if !lock_sids.contains(&(owner.clone(), *f)) {
                    return Err(format!("lock of {owner:?} without a lock stateid"));
                }
            }
        }
        Ok(())
    }

    /// The opens granted now.
    pub fn opens_view(&self) -> Vec<OpenView> {
        let i = self.inner.lock().unwrap();
        i.stateids
            .iter()
            .filter_map(|(o, st)| match st.kind {
                Kind::Open { access, deny, .. } => Some((st.file, *o, st.client, access, deny)),
                Kind::Lock { .. } => None,
            })
            .collect()
    }

    /// The delegations granted now: (file, holder, recalled), after
    /// checking that their indexes agree.
    pub fn delegations_view(&self) -> Result<Vec<(FileKey, u64, bool, bool)>, String> {
        let i = self.inner.lock().unwrap();
        let mut v = Vec::new();
        for (o, d) in &i.delegs {
            if !i
                .clients
                .get(&d.client)
                .is_some_and(|c| c.delegs.contains(o))
            {
                return Err(format!(
                    "delegation {o:?} outlives its client {:x}",
                    d.client
                ));
            }
            if !i.deleg_files.get(&d.file).is_some_and(|f| f.contains(o)) {
                return Err(format!("delegation {o:?} missing from its file's index"));
            }
            v.push((
                d.file,
                d.client,
                d.recalled.is_some(),
                d.kind == super::deleg::DelegType::Write,
            ));
        }
        let indexed: usize = i.deleg_files.values().map(Vec::len).sum();
        if indexed != i.delegs.len() {
            return Err("the delegation file index names delegations that are gone".into());
        }
        Ok(v)
    }

    /// Owners of confirmed clients that hold state and have no revoked
    /// stateids: the ones a restart must let reclaim.
    pub fn holders(&self) -> Vec<Bytes> {
        let i = self.inner.lock().unwrap();
        i.clients
            .values()
            .filter(|c| c.confirmed && c.holds_state() && c.revoked.is_empty())
            .map(|c| c.owner.clone())
            .collect()
    }
}
