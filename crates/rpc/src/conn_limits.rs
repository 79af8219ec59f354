//! Bounds on open connections, in total and per client address, checked
//! at accept. Pure code: the driver asks [`ConnLimits::admit`] and keeps the
//! returned guard for the connection's life.

use crate::observe::Limit;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

pub struct ConnLimits {
    max_total: usize,
    max_per_client: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// One admitted connection; dropping it gives the place back.
pub struct ConnGuard {
    limits: Arc<ConnLimits>,
    ip: IpAddr,
}

impl ConnLimits {
    pub fn new(max_total: usize, max_per_client: usize) -> Arc<ConnLimits> {
        Arc::new(ConnLimits {
            max_total: max_total.max(1),
            max_per_client: max_per_client.max(1),
            open: Mutex::new(Open::default()),
        })
    }

    /// A place for a new connection from `ip`, or the bound that refuses it.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnGuard, Limit> {
        let mut o = self.open.lock().unwrap();
        if o.total >= self.max_total {
            return Err(Limit::Connections);
        }
        let n = o.per_client.entry(ip).or_default();
        if *n >= self.max_per_client {
            return Err(Limit::ConnectionsPerClient);
        }
        *n += 1;
        o.total += 1;
        Ok(ConnGuard {
            limits: self.clone(),
            ip,
        })
    }

    pub fn total(&self) -> usize {
        self.open.lock().unwrap().total
    }

    /// The most connections any one client has open.
    pub fn busiest_client(&self) -> usize {
        let o = self.open.lock().unwrap();
        o.per_client.values().copied().max().unwrap_or(0)
    }

    pub fn max_total(&self) -> usize {
        self.max_total
    }

    pub fn max_per_client(&self) -> usize {
        self.max_per_client
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let mut o = self.limits.open.lock().unwrap();
        o.total -= 1;
        if let Some(n) = o.per_client.get_mut(&self.ip) {
            *n -= 1;
            // A client with no connection costs no memory.
            if *n == 0 {
                o.per_client.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_then_total() {
        let l = ConnLimits::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = l.admit(a).unwrap();
        let _a2 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).err(), Some(Limit::ConnectionsPerClient));
        let _b1 = l.admit(b).unwrap();
        assert_eq!(l.admit(b).err(), Some(Limit::Connections));
        assert_eq!((l.total(), l.busiest_client()), (3, 2));
        drop(a1);
        // The freed place goes to whoever asks next.
        let _b2 = l.admit(b).unwrap();
        assert_eq!(l.admit(a).err(), Some(Limit::Connections));
    }

    #[test]
    fn closed_clients_are_forgotten() {
        let l = ConnLimits::new(10, 10);
        for i in 0..100u32 {
            let g = l.admit(IpAddr::from(i.to_be_bytes())).unwrap();
            drop(g);
        }
        assert_eq!(l.total(), 0);
        assert!(l.open.lock().unwrap().per_client.is_empty());
    }
}
