//! Every session's back channel, by client, and the NFSv4.0 clients'
//! callback paths: where a callback finds its way to a client.
//!
//! This is driver code beside the pure state core: a back channel is an
//! I/O handle (an [`rpc::CallbackConn`]), so it is kept here, keyed by
//! client and session, and not in `state`. What a callback decides about
//! state (a recall outstanding, a revocation) belongs to the core; this
//! module only finds the path and reports how it is.

use super::cb40::Paths40;
use super::channel::{
    Backchannel, SEQ4_STATUS_BACKCHANNEL_FAULT, SEQ4_STATUS_CB_PATH_DOWN,
    SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};
use proto::nfs4::{Clientid4, Sessionid4};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Every session's back channel, by client.
#[derive(Default)]
pub struct Backchannels {
    by_client: Mutex<HashMap<Clientid4, Vec<Arc<Backchannel>>>>,
    /// NFSv4.0 clients' callback paths (they have no sessions).
    pub v40: Paths40,
}

impl Backchannels {
    /// Sets up (or replaces) a session's back channel.
    pub fn insert(&self, b: Arc<Backchannel>) {
        let mut m = self.by_client.lock().unwrap();
        let v = m.entry(b.client).or_default();
        v.retain(|x| x.session != b.session);
        v.push(b);
    }

    pub fn session(&self, client: Clientid4, session: &Sessionid4) -> Option<Arc<Backchannel>> {
        let m = self.by_client.lock().unwrap();
        m.get(&client)?
            .iter()
            .find(|b| &b.session == session)
            .cloned()
    }

    /// A usable back channel of the client, if it has one.
    pub fn for_client(&self, client: Clientid4) -> Option<Arc<Backchannel>> {
        let m = self.by_client.lock().unwrap();
        match m.get(&client) {
            Some(v) => v.iter().find(|b| b.usable()).cloned(),
            None => {
                drop(m);
                self.v40.usable(client)
            }
        }
    }

    /// Clients whose callback path is up, and down: 4.1 clients that
    /// asked for a back channel (up when some session's is usable), and
    /// 4.0 clients that named a callback address.
    pub fn path_counts(&self) -> (usize, usize) {
        let (mut up, mut down) = self.v40.counts();
        for v in self.by_client.lock().unwrap().values() {
            match session_paths_up(v) {
                Some(true) => up += 1,
                Some(false) => down += 1,
                None => {}
            }
        }
        (up, down)
    }

    pub fn remove_session(&self, client: Clientid4, session: &Sessionid4) {
        let mut m = self.by_client.lock().unwrap();
        if let Some(v) = m.get_mut(&client) {
            v.retain(|b| &b.session != session);
            if v.is_empty() {
                m.remove(&client);
            }
        }
    }

    /// Forgets back channels whose session is gone (the lease timer's walk).
    pub fn retain(&self, live: impl Fn(&Sessionid4) -> bool) {
        let mut m = self.by_client.lock().unwrap();
        m.retain(|_, v| {
            v.retain(|b| live(&b.session));
            !v.is_empty()
        });
    }

    /// Whether `client`'s callback path works: None when it never asked
    /// for one.
    pub fn path_up(&self, client: Clientid4) -> Option<bool> {
        let m = self.by_client.lock().unwrap();
        let Some(v) = m.get(&client) else {
            drop(m);
            // NFSv4.0: a callback address given in SETCLIENTID.
            return self.v40.known(client).then(|| self.v40.is_up(client));
        };
        session_paths_up(v)
    }

    /// SEQUENCE's callback-path flags for a session of `client`. A client
    /// that never asked for a back channel on any session hears nothing:
    /// it is given no recallable state, so its path is not its concern.
    pub fn status_flags(&self, client: Clientid4, session: &Sessionid4) -> u32 {
        let m = self.by_client.lock().unwrap();
        let Some(v) = m.get(&client) else {
            return 0;
        };
        if !v.iter().any(|b| b.wanted()) {
            return 0;
        }
        let mut flags = 0;
        if !v.iter().any(|b| b.usable()) {
            flags |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        if let Some(b) = v.iter().find(|b| &b.session == session) {
            if b.wanted() && !b.usable() {
                flags |= SEQ4_STATUS_CB_PATH_DOWN_SESSION;
            }
        }
        if v.iter().any(|b| b.faulted()) {
            flags |= SEQ4_STATUS_BACKCHANNEL_FAULT;
        }
        flags
    }
}

/// Whether a 4.1 client's sessions give it a working callback path: None
/// when none of them asked for a back channel.
fn session_paths_up(v: &[Arc<Backchannel>]) -> Option<bool> {
    if !v.iter().any(|b| b.wanted()) {
        return None;
    }
    Some(v.iter().any(|b| b.usable()))
}
