//! The exports in force, swappable at run time (SIGHUP reload) without
//! stopping calls: each call loads the current [`Snapshot`] once (one
//! atomic load) and uses it to the end, so a call never sees half of an
//! old configuration and half of a new one.

use crate::auth_cache::{self, Access, AuthCache, CacheConfig, CacheStats, Decision, Names};
use crate::export::{Export, Exports};
use crate::nfs4::pseudo::Pseudo;
use arc_swap::{ArcSwap, Guard};
use rpc::CallContext;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One configuration: its exports, the NFSv4 tree over them, and the auth
/// decisions made under it (a reload starts an empty cache, which is the flush).
pub struct Snapshot {
    pub exports: Exports,
    pub pseudo: Pseudo,
    pub cache: AuthCache,
    names: Arc<Names>,
}

impl Snapshot {
    /// The decision for this call's client and credential over all exports.
    pub fn decision(&self, ctx: &CallContext) -> Arc<Decision> {
        let ip = ctx.peer.ip();
        let now = Instant::now();
        let names = &self.names;
        let (d, outcome) = self.cache.get(
            ip,
            &ctx.auth,
            now,
            || names.generation(),
            || auth_cache::decide(&self.exports, names, ip, &ctx.auth, now),
        );
        if outcome == auth_cache::Outcome::Miss {
            ctx.client.auth_cache_miss();
        }
        d
    }

    /// What this call may do on `export`: `None` if its client is not let in.
    pub fn access(&self, ctx: &CallContext, export: &Export) -> Option<Access> {
        self.decision(ctx).get(export.id).cloned()
    }
}

pub struct Live {
    cur: ArcSwap<Snapshot>,
    names: Arc<Names>,
    /// Counters of caches already replaced, so totals survive reloads.
    retired: Mutex<CacheStats>,
}

impl Live {
    pub fn new(exports: Exports, names: Arc<Names>, cfg: CacheConfig) -> Live {
        let snap = Self::snapshot(exports, &names, &cfg);
        Live {
            cur: ArcSwap::from_pointee(snap),
            names,
            retired: Mutex::new(CacheStats::default()),
        }
    }

    /// Exports with the defaults and a resolver that knows no names (tests).
    pub fn fixed(exports: Exports) -> Arc<Live> {
        let names = Names::new(Arc::new(NoNames), std::time::Duration::from_secs(300));
        Arc::new(Live::new(exports, names, CacheConfig::default()))
    }

    fn snapshot(exports: Exports, names: &Arc<Names>, cfg: &CacheConfig) -> Snapshot {
        names.prefetch(exports.iter().flat_map(|e| e.host_names()));
        Snapshot {
            pseudo: Pseudo::build(&exports),
            exports,
            cache: AuthCache::new(cfg.clone()),
            names: names.clone(),
        }
    }

    /// The current snapshot, for use within one call (not across awaits).
    pub fn load(&self) -> Guard<Arc<Snapshot>> {
        self.cur.load()
    }

    /// The current snapshot as an owned pointer (kept across awaits).
    pub fn load_full(&self) -> Arc<Snapshot> {
        self.cur.load_full()
    }

    /// Puts new exports (and cache tunables) in force; calls already
    /// running finish with the old. (The name TTL stays as started.)
    pub fn replace(&self, exports: Exports, cfg: CacheConfig) {
        let old = self
            .cur
            .swap(Arc::new(Self::snapshot(exports, &self.names, &cfg)));
        let s = old.cache.stats();
        let mut r = self.retired.lock().unwrap();
        *r = CacheStats {
            entries: 0,
            ..(*r + s)
        };
    }

    /// Totals since start; `entries` is the current cache's.
    pub fn cache_stats(&self) -> CacheStats {
        let cur = self.cur.load().cache.stats();
        *self.retired.lock().unwrap() + cur
    }

    pub fn names(&self) -> &Arc<Names> {
        &self.names
    }
}

/// A resolver that knows no names (tests and configurations without any).
pub struct NoNames;

impl auth_cache::Resolver for NoNames {
    fn forward(&self, _: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
        Ok(Vec::new())
    }
    fn reverse(&self, _: std::net::IpAddr) -> std::io::Result<Option<String>> {
        Ok(None)
    }
}
