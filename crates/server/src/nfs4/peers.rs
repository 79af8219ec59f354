//! Where each NFSv4 client record calls from, so that `tarn top` and `tarn
//! doctor` (which count by address) can say how many delegations the
//! clients at an address hold and whether their callback paths work. The
//! address is noted when a client confirms (CREATE_SESSION,
//! SETCLIENTID_CONFIRM), not per call: the request path pays nothing.

use super::callback::Backchannels;
use super::state::State;
use metrics::Nfs4Peer;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct Peers {
    by_client: Mutex<HashMap<u64, IpAddr>>,
}

impl Peers {
    pub fn note(&self, client: u64, ip: IpAddr) {
        self.by_client.lock().unwrap().insert(client, ip);
    }

    /// Per address: the client records there, their delegations and
    /// callback paths. Records the state no longer has are forgotten here.
    pub fn probe(&self, state: &State, backchannels: &Backchannels) -> Vec<(IpAddr, Nfs4Peer)> {
        let held: HashMap<u64, usize> = state.delegations_by_client().into_iter().collect();
        let mut m = self.by_client.lock().unwrap();
        m.retain(|id, _| held.contains_key(id));
        let mut out: HashMap<IpAddr, Nfs4Peer> = HashMap::new();
        for (id, ip) in m.iter() {
            let p = out.entry(*ip).or_default();
            p.clients += 1;
            p.delegations += held[id] as u64;
            match backchannels.path_up(*id) {
                Some(true) => p.callback_up += 1,
                Some(false) => p.callback_down += 1,
                None => {}
            }
        }
        out.into_iter().collect()
    }
}

/// The probe `metrics::Metrics::set_nfs4_probe` wants, over shared handles.
pub fn probe_fn(
    peers: Arc<Peers>,
    state: Arc<State>,
    backchannels: Arc<Backchannels>,
) -> impl Fn() -> Vec<(IpAddr, Nfs4Peer)> + Send + Sync + 'static {
    move || peers.probe(&state, &backchannels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::LockManager;
    use crate::nfs4::callback::Backchannel;
    use bytes::Bytes;
    use std::time::{Duration, Instant};

    #[test]
    fn counts_by_address_and_forgets_vanished_clients() {
        let st = State::new(Duration::from_secs(90), Arc::new(LockManager::new()), 1);
        let now = Instant::now();
        let client = |o: &'static [u8]| {
            st.exchange_id(&Bytes::from_static(o), [1; 8], "sys:0", false, 1, now)
                .unwrap()
                .0
        };
        let (a, b) = (client(b"a"), client(b"b"));
        let peers = Peers::default();
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        peers.note(a, ip);
        peers.note(b, ip);
        peers.note(999, "10.0.0.8".parse().unwrap()); // no such record
        let bcs = Backchannels::default();
        // b asked for a back channel but has no connection for it: down.
        bcs.insert(Arc::new(Backchannel::new(
            [1; 16],
            b,
            1,
            0x4000_0000,
            None,
            None,
            true,
        )));
        let got = peers.probe(&st, &bcs);
        assert_eq!(
            got,
            vec![(
                ip,
                Nfs4Peer {
                    clients: 2,
                    delegations: 0,
                    callback_up: 0,
                    callback_down: 1,
                }
            )]
        );
        assert_eq!(peers.by_client.lock().unwrap().len(), 2);
    }
}
