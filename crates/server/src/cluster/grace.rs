//! Cluster-wide grace: one record all heads share (kept in the recovery
//! store, changed by compare-and-swap), and the pure rules that change it.
//! No I/O; `now` (milliseconds of wall-clock time, the one clock heads on
//! different machines share) is passed in.
//!
//! The model follows the shape of NFS-Ganesha's rados_cluster: two
//! epochs, `current` (the epoch new client records belong to) and
//! `recovery` (the epoch whose records may be reclaimed; 0 outside
//! grace), and per head a "needs grace" flag (it, or the clients it had,
//! still have state to reclaim) and an "enforcing" flag (it has seen the
//! grace and refuses new conflicting state). Differences: a head's
//! liveness is a lease (an etcd lease in production) and a head whose
//! lease is lost keeps its entry, flagged `lost`, needing grace until its
//! clients reclaimed elsewhere (or the bound); and a head that finds no
//! entry for itself registers one rather than giving up.

use std::collections::BTreeMap;

/// One head's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// Its lease runs until then (ms); renewed by the head itself.
    pub lease_until: u64,
    /// It (or, when lost, its clients) still has state to reclaim.
    pub need_grace: bool,
    /// It has seen the current grace and refuses new conflicting state.
    pub enforcing: bool,
    /// Its lease ran out: it is gone, its clients may reclaim elsewhere.
    pub lost: bool,
}

/// The shared record.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClusterGrace {
    /// The epoch new client records belong to; moves on at each grace.
    pub current: u64,
    /// The epoch whose records may be reclaimed; 0: not in grace.
    pub recovery: u64,
    /// The grace ends at the latest then (ms), whoever still needs it.
    pub deadline: u64,
    pub heads: BTreeMap<String, Head>,
}

/// Timing, the same on every head.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// How long a head's lease lasts without renewal (ms).
    pub lease: u64,
    /// The longest a grace lasts (ms).
    pub bound: u64,
}

/// What a step changed, for the driver to act on and log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A head had no entry and now has one.
    Registered(String),
    /// A grace began (`recovery` epoch's records may be reclaimed).
    GraceStarted { recovery: u64 },
    /// A head's lease ran out: its clients may reclaim on any head.
    Lost(String),
    /// The grace ended (every head recovered, or the bound passed).
    GraceLifted { recovery: u64, timed_out: bool },
    /// A lost head's entry went when the grace it caused ended.
    Removed(String),
}

impl ClusterGrace {
    pub fn in_grace(&self) -> bool {
        self.recovery != 0
    }

    /// Heads that are alive (not lost).
    pub fn live(&self) -> impl Iterator<Item = (&String, &Head)> {
        self.heads.iter().filter(|(_, h)| !h.lost)
    }

    /// Every live head enforces the grace: only then may reclaims be
    /// granted anywhere (a head that has not seen the grace yet could
    /// still hand out what a reclaim wants back).
    pub fn all_enforcing(&self) -> bool {
        self.in_grace() && self.live().all(|(_, h)| h.enforcing)
    }

    /// A head (re)starts: it registers if it has no entry (never an
    /// error), needs grace for its previous clients and begins one
    /// cluster-wide (or joins the one running).
    pub fn start(&mut self, node: &str, now: u64, p: Params) -> Vec<Change> {
        let mut out = Vec::new();
        if !self.heads.contains_key(node) {
            out.push(Change::Registered(node.to_string()));
        }
        self.heads.insert(
            node.to_string(),
            Head {
                lease_until: now.saturating_add(p.lease),
                need_grace: true,
                // A starting head applies the grace before it serves.
                enforcing: true,
                lost: false,
            },
        );
        self.begin(node, now, p, &mut out);
        out
    }

    /// A head renews its lease and says whether its own recovery is over
    /// (`recovered`) and that it enforces the grace it saw. A missing
    /// entry (removed by hand, or the store was reset) is registered
    /// again, as a start.
    pub fn renew(&mut self, node: &str, now: u64, recovered: bool, p: Params) -> Vec<Change> {
        let mut out = Vec::new();
        match self.heads.get_mut(node) {
            Some(h) if !h.lost => {
                h.lease_until = now.saturating_add(p.lease);
                h.enforcing = true;
                if recovered {
                    h.need_grace = false;
                }
            }
            // Declared lost while it was in fact alive (a pause longer
            // than the lease): its clients may have reclaimed elsewhere,
            // so it comes back as a restart would.
            _ => return self.start(node, now, p),
        }
        self.settle(now, &mut out);
        out
    }

    /// The clients of `lost` have all reclaimed elsewhere (its record
    /// has no entry of the recovery epoch left).
    pub fn drained(&mut self, lost: &str, now: u64) -> Vec<Change> {
        let mut out = Vec::new();
        if let Some(h) = self.heads.get_mut(lost) {
            if h.lost {
                h.need_grace = false;
            }
        }
        self.settle(now, &mut out);
        out
    }

    /// Any head runs this with its view of time: heads whose lease ran
    /// out are lost and begin a grace; a grace whose heads all recovered
    /// or whose bound passed ends.
    pub fn tick(&mut self, now: u64, p: Params) -> Vec<Change> {
        let expired: Vec<String> = self
            .live()
            .filter(|(_, h)| h.lease_until <= now)
            .map(|(n, _)| n.clone())
            .collect();
        self.lose(&expired, now, p)
    }

    /// Heads found dead some other way (their etcd lease is gone; the
    /// driver then runs with an endless lease here): as an expiry.
    pub fn lose(&mut self, expired: &[String], now: u64, p: Params) -> Vec<Change> {
        let mut out = Vec::new();
        for n in expired {
            let Some(h) = self.heads.get_mut(n).filter(|h| !h.lost) else {
                continue;
            };
            h.lost = true;
            h.need_grace = true;
            h.enforcing = false;
            out.push(Change::Lost(n.clone()));
        }
        if out.iter().any(|c| matches!(c, Change::Lost(_))) {
            self.begin("", now, p, &mut out);
        }
        self.settle(now, &mut out);
        out
    }

    /// Begins a grace, or, with one running, extends its bound for the
    /// new reason. Every live head but `by` must acknowledge it.
    fn begin(&mut self, by: &str, now: u64, p: Params, out: &mut Vec<Change>) {
        if !self.in_grace() {
            // Records of the epoch before may be reclaimed; new ones go
            // to the next. Epoch 0 means "no grace", so start at 1.
            self.recovery = self.current.max(1);
            self.current = self.recovery + 1;
            self.deadline = now.saturating_add(p.bound);
            out.push(Change::GraceStarted {
                recovery: self.recovery,
            });
        } else {
            self.deadline = self.deadline.max(now.saturating_add(p.bound));
        }
        for (n, h) in self.heads.iter_mut() {
            if !h.lost && n != by {
                h.enforcing = false;
            }
        }
    }

    /// Ends the grace if nobody needs it or its bound passed; lost heads
    /// go with it (their clients had their chance).
    fn settle(&mut self, now: u64, out: &mut Vec<Change>) {
        if !self.in_grace() {
            return;
        }
        let needed = self.heads.values().any(|h| h.need_grace);
        let timed_out = now >= self.deadline;
        if needed && !timed_out {
            return;
        }
        out.push(Change::GraceLifted {
            recovery: self.recovery,
            timed_out: needed,
        });
        self.recovery = 0;
        self.deadline = 0;
        let lost: Vec<String> = self
            .heads
            .iter()
            .filter(|(_, h)| h.lost)
            .map(|(n, _)| n.clone())
            .collect();
        for n in lost {
            self.heads.remove(&n);
            out.push(Change::Removed(n));
        }
        for h in self.heads.values_mut() {
            h.need_grace = false;
            h.enforcing = false;
        }
    }

    /// A compact text form for the store: one line of epochs, one per head.
    pub fn encode(&self) -> String {
        let mut s = format!("{} {} {}\n", self.current, self.recovery, self.deadline);
        for (n, h) in &self.heads {
            s.push_str(&format!(
                "{} {} {} {} {}\n",
                n, h.lease_until, h.need_grace as u8, h.enforcing as u8, h.lost as u8
            ));
        }
        s
    }

    /// The inverse of [`ClusterGrace::encode`]; None: not such a record.
    pub fn decode(s: &str) -> Option<ClusterGrace> {
        let mut lines = s.lines();
        let mut first = lines.next()?.split(' ').map(|x| x.parse::<u64>());
        let mut g = ClusterGrace {
            current: first.next()?.ok()?,
            recovery: first.next()?.ok()?,
            deadline: first.next()?.ok()?,
            heads: BTreeMap::new(),
        };
        for l in lines.filter(|l| !l.is_empty()) {
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() != 5 {
                return None;
            }
            let flag = |x: &str| match x {
                "0" => Some(false),
                "1" => Some(true),
                _ => None,
            };
            g.heads.insert(
                f[0].to_string(),
                Head {
                    lease_until: f[1].parse().ok()?,
                    need_grace: flag(f[2])?,
                    enforcing: flag(f[3])?,
                    lost: flag(f[4])?,
                },
            );
        }
        Some(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: Params = Params {
        lease: 10_000,
        bound: 90_000,
    };

    #[test]
    fn a_start_registers_and_begins_grace() {
        let mut g = ClusterGrace::default();
        let c = g.start("a", 1_000, P);
        assert_eq!(
            c,
            vec![
                Change::Registered("a".into()),
                Change::GraceStarted { recovery: 1 }
            ]
        );
        assert!(g.in_grace());
        assert_eq!((g.current, g.recovery), (2, 1));
        assert!(g.all_enforcing());
        // Its clients reclaimed: the grace ends well before the bound.
        let c = g.renew("a", 2_000, true, P);
        assert_eq!(
            c,
            vec![Change::GraceLifted {
                recovery: 1,
                timed_out: false
            }]
        );
        assert!(!g.in_grace());
    }

    #[test]
    fn a_second_head_starting_joins_and_the_others_must_acknowledge() {
        let mut g = ClusterGrace::default();
        g.start("a", 0, P);
        g.renew("a", 1, true, P);
        g.start("b", 2, P);
        assert!(g.in_grace());
        assert_eq!((g.current, g.recovery), (3, 2));
        // a has not seen it yet: no reclaims anywhere.
        assert!(!g.all_enforcing());
        g.renew("a", 3, true, P);
        assert!(g.all_enforcing());
        g.renew("b", 4, true, P);
        assert!(!g.in_grace());
    }

    #[test]
    fn a_lost_lease_begins_grace_until_its_clients_drained() {
        let mut g = ClusterGrace::default();
        for n in ["a", "b", "c"] {
            g.start(n, 0, P);
        }
        for n in ["a", "b", "c"] {
            g.renew(n, 1, true, P);
        }
        assert!(!g.in_grace());
        // a stops renewing; b and c do.
        g.renew("b", 9_000, false, P);
        g.renew("c", 9_000, false, P);
        let c = g.tick(10_001, P);
        assert_eq!(
            c,
            vec![
                Change::Lost("a".into()),
                Change::GraceStarted { recovery: 2 }
            ]
        );
        assert!(!g.all_enforcing());
        g.renew("b", 10_002, true, P);
        g.renew("c", 10_002, true, P);
        assert!(g.all_enforcing());
        assert!(g.in_grace(), "a's clients still to reclaim");
        let c = g.drained("a", 12_000);
        assert_eq!(
            c,
            vec![
                Change::GraceLifted {
                    recovery: 2,
                    timed_out: false
                },
                Change::Removed("a".into())
            ]
        );
        assert_eq!(g.heads.len(), 2);
    }

    #[test]
    fn the_bound_ends_a_grace_nobody_finishes() {
        let mut g = ClusterGrace::default();
        g.start("a", 0, P);
        g.renew("a", 85_000, false, P);
        assert!(g.tick(89_999, P).is_empty());
        let c = g.tick(90_000, P);
        assert!(c.contains(&Change::GraceLifted {
            recovery: 1,
            timed_out: true
        }));
    }

    #[test]
    fn a_head_declared_lost_comes_back_as_a_start() {
        let mut g = ClusterGrace::default();
        g.start("a", 0, P);
        g.start("b", 0, P);
        g.renew("b", 20_000, true, P);
        g.tick(20_000, P);
        assert!(g.heads["a"].lost);
        let c = g.renew("a", 20_001, true, P);
        assert!(!c.contains(&Change::Registered("a".into())));
        assert!(!g.heads["a"].lost && g.heads["a"].need_grace);
    }

    #[test]
    fn a_missing_entry_is_registered_not_an_error() {
        let mut g = ClusterGrace::default();
        let c = g.renew("z", 5, true, P);
        assert!(c.contains(&Change::Registered("z".into())));
        assert!(g.heads.contains_key("z"));
    }

    #[test]
    fn encodes_and_decodes() {
        let mut g = ClusterGrace::default();
        g.start("head-1", 7, P);
        g.start("head-2", 8, P);
        g.tick(100_000, P);
        assert_eq!(ClusterGrace::decode(&g.encode()), Some(g));
        assert_eq!(ClusterGrace::decode("x"), None);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Start(u8),
        Renew(u8, bool),
        Drain(u8),
        Tick,
        Wait(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..4).prop_map(Op::Start),
            (0u8..4, any::<bool>()).prop_map(|(n, r)| Op::Renew(n, r)),
            (0u8..4).prop_map(Op::Drain),
            Just(Op::Tick),
            (0u32..40_000).prop_map(Op::Wait),
        ]
    }

    proptest! {
        /// Whatever happens: epochs only grow and `recovery` is the one
        /// before `current` during grace; a grace never outlives its
        /// bound by more than a tick; a head with a fresh lease is never
        /// lost after a tick; a starting head is always in grace; and the
        /// record survives its text form.
        #[test]
        fn invariants(ops in proptest::collection::vec(op(), 1..80)) {
            let mut g = ClusterGrace::default();
            let mut now = 0u64;
            let mut last_current = 0;
            for o in ops {
                match o {
                    Op::Start(n) => {
                        g.start(&n.to_string(), now, P);
                        prop_assert!(g.in_grace());
                        prop_assert!(g.heads[&n.to_string()].need_grace);
                    }
                    Op::Renew(n, r) => { g.renew(&n.to_string(), now, r, P); }
                    Op::Drain(n) => { g.drained(&n.to_string(), now); }
                    Op::Tick => {
                        g.tick(now, P);
                        prop_assert!(!g.in_grace() || now < g.deadline);
                        for h in g.heads.values() {
                            prop_assert!(h.lost || h.lease_until > now);
                        }
                    }
                    Op::Wait(ms) => now += ms as u64,
                }
                prop_assert!(g.current >= last_current);
                last_current = g.current;
                if g.in_grace() {
                    prop_assert_eq!(g.recovery + 1, g.current);
                    prop_assert!(g.deadline <= now + P.bound);
                } else {
                    prop_assert!(g.heads.values().all(|h| !h.lost && !h.need_grace));
                }
                prop_assert_eq!(ClusterGrace::decode(&g.encode()), Some(g.clone()));
            }
        }
    }
}
