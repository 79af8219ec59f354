//! The cluster driver: keeps this head registered in etcd, runs the pure
//! grace rules ([`server::cluster::ClusterGrace`]) on the shared record,
//! and applies what they decide to the NFSv4 and NLM grace of this head.
//! One step every third of the lease; blocking (etcd over HTTP), so it
//! runs on a blocking thread.

use server::cluster::{Change, ClusterGrace, Etcd, Params, RecoveryStore};
use server::grace::Grace;
use server::nfs4::recovery::Recovery;
use server::nfs4::state::{ClusterHold, State};
use server::nlm::Nlm;
use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{info, warn};

/// See [`Driver::on_lost`].
pub type OnLost = Box<dyn Fn(&str) + Send>;

pub struct Driver {
    pub etcd: Arc<Etcd>,
    pub node: String,
    /// etcd's lease for `heads/<node>`.
    pub ttl: Duration,
    /// The grace bound (the `[nfs4] grace_seconds`).
    pub bound: Duration,
    pub recovery: Recovery,
    pub state: Arc<State>,
    pub nlm: Arc<Nlm>,
    /// For SM_NOTIFY to a failed head's NLM hosts (sent from tasks).
    pub rt: tokio::runtime::Handle,
    lease: Option<u64>,
    started: bool,
    in_grace: bool,
    /// Failed heads whose clients this head already lets reclaim.
    adopted: BTreeSet<String>,
    /// Called (on this thread: it must return at once) with each head newly
    /// found failed: ends its CephFS sessions, so the locks it held there
    /// are free for the reclaims.
    pub on_lost: Option<OnLost>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        etcd: Arc<Etcd>,
        node: String,
        ttl: Duration,
        bound: Duration,
        recovery: Recovery,
        state: Arc<State>,
        nlm: Arc<Nlm>,
        rt: tokio::runtime::Handle,
    ) -> Driver {
        Driver {
            etcd,
            node,
            ttl,
            bound,
            recovery,
            state,
            nlm,
            rt,
            lease: None,
            started: false,
            in_grace: false,
            adopted: BTreeSet::new(),
            on_lost: None,
        }
    }

    fn params(&self) -> Params {
        // Liveness is etcd's lease (a head's key goes with it), so the
        // record's own leases never run out.
        Params {
            lease: u64::MAX,
            bound: self.bound.as_millis() as u64,
        }
    }

    /// One round: renew the registration, update the shared record,
    /// apply it here.
    pub fn step(&mut self) -> io::Result<()> {
        let alive = match self.lease {
            Some(id) => self.etcd.keepalive(id)?,
            None => false,
        };
        if !alive {
            if self.lease.is_some() {
                warn!(node = self.node, "etcd lease of this head expired: registering again (the other heads may have taken over its clients)");
            }
            self.lease = Some(self.etcd.register(&self.node, self.ttl)?);
        }
        let live = self.etcd.live_heads()?;
        let recovered = self.state.local_recovery_done(Instant::now());
        let p = self.params();
        let (g, changes) = loop {
            let (cur, version) = self.etcd.grace()?;
            let mut g = cur.clone().unwrap_or_default();
            let now = now_ms();
            let mut ch = if self.started {
                g.renew(&self.node, now, recovered, p)
            } else {
                g.start(&self.node, now, p)
            };
            let dead: Vec<String> = g
                .live()
                .map(|(n, _)| n.clone())
                .filter(|n| *n != self.node && !live.contains(n))
                .collect();
            ch.extend(g.lose(&dead, now, p));
            let pending: Vec<String> = g
                .heads
                .iter()
                .filter(|(_, h)| h.lost && h.need_grace)
                .map(|(n, _)| n.clone())
                .collect();
            // Drained: every NFSv4 client reclaimed (each RECLAIM_COMPLETE
            // moved its record away). NLM hosts never say they are done,
            // so a failed head that had some keeps the grace to its bound,
            // as lockd's grace always runs its full length.
            for x in pending {
                if self.etcd.clients(&x)?.is_empty() && self.etcd.monitored(&x)?.is_empty() {
                    ch.extend(g.drained(&x, now));
                }
            }
            ch.extend(g.tick(now, p));
            if cur.as_ref() == Some(&g) || self.etcd.swap_grace(&g, version)? {
                break (g, ch);
            }
        };
        self.started = true;
        for c in &changes {
            self.report(c);
        }
        self.apply(&g)
    }

    fn report(&self, c: &Change) {
        match c {
            Change::Registered(n) => info!(node = n, "cluster: head registered"),
            Change::GraceStarted { recovery } => {
                info!(recovery, "cluster: grace started on every head")
            }
            Change::Lost(n) => {
                warn!(
                    node = n,
                    "cluster: head lost (etcd lease expired): its clients may reclaim on any head"
                )
            }
            Change::GraceLifted {
                recovery,
                timed_out,
            } => info!(recovery, timed_out, "cluster: grace lifted"),
            Change::Removed(n) => {
                // Its clients that did not reclaim had their chance.
                if let Err(e) = self.etcd.drop_clients(n) {
                    warn!(node = n, error = %e, "cluster: cannot drop a failed head's client records");
                }
                info!(node = n, "cluster: failed head's entry removed");
            }
        }
    }

    fn apply(&mut self, g: &ClusterGrace) -> io::Result<()> {
        self.recovery.set_epoch(g.current);
        if !g.in_grace() {
            if self.in_grace || !self.adopted.is_empty() {
                self.state.end_grace();
                self.nlm.end_grace();
                self.adopted.clear();
            }
            self.in_grace = false;
            return Ok(());
        }
        self.in_grace = true;
        let period = Grace::new(Instant::now(), self.bound);
        for (n, _) in g.heads.iter().filter(|(_, h)| h.lost) {
            if n == &self.node || self.adopted.contains(n) {
                continue;
            }
            if let Some(f) = &self.on_lost {
                f(n);
            }
            let owners = self.recovery.adopt(n)?;
            info!(
                node = n,
                clients = owners.len(),
                "cluster: taking over a failed head's clients: they may reclaim here"
            );
            self.state.join_grace(owners, period);
            self.nlm.join_grace(period);
            // Its NLM hosts hear from this head: with the service address
            // moved here, their statd takes it for the server's restart
            // and their lockd reclaims here.
            let hosts = self.etcd.monitored(n)?;
            if !hosts.is_empty() {
                info!(
                    node = n,
                    hosts = hosts.len(),
                    "cluster: SM_NOTIFY to a failed head's NLM hosts"
                );
                let _enter = self.rt.enter();
                self.nlm.notify_restart(hosts);
            }
            self.adopted.insert(n.clone());
        }
        let hold = if g.all_enforcing() {
            ClusterHold::Reclaiming
        } else {
            ClusterHold::Starting
        };
        self.state.set_cluster_grace(Some(hold));
        self.nlm.set_cluster_grace(true);
        Ok(())
    }

    /// Steps forever (on a blocking thread), every third of the lease.
    pub fn run(mut self) {
        let pause = (self.ttl / 3).max(Duration::from_millis(500));
        loop {
            std::thread::sleep(pause);
            if let Err(e) = self.step() {
                warn!(error = %e, "cluster: etcd step failed; retried");
            }
        }
    }
}
