//! SHARE / UNSHARE (DOS share reservations) and FREE_ALL.

use super::*;

impl Nlm {
    /// Share reservations are not kept, so SHARE is refused rather than
    /// granted without being enforced (a DOS client relying on deny modes
    /// would be lied to). Linux clients never send it.
    pub(super) fn share(&self, ctx: &CallContext, a: Nlm4Shareargs) -> Nlm4Shareres {
        let f = Fail {
            stat: Nlm4Stats::NLM4_DENIED_NOLOCKS,
            why: "share reservations are not supported",
        };
        log_fail(ctx, &f);
        Nlm4Shareres {
            cookie: a.cookie,
            stat: f.stat,
            sequence: 0,
        }
    }

    /// Nothing was ever shared, so there is nothing to remove.
    pub(super) fn unshare(&self, _ctx: &CallContext, a: Nlm4Shareargs) -> Nlm4Shareres {
        Nlm4Shareres {
            cookie: a.cookie,
            stat: Nlm4Stats::NLM4_GRANTED,
            sequence: 0,
        }
    }

    /// FREE_ALL: a client host (by its caller_name) drops every lock it held,
    /// as a rebooted client's lockd does. The reply is void.
    /// Only calls from the host's own address count: NLM has no other
    /// authentication, and anyone could name any host.
    pub(super) fn free_all(&self, ctx: &CallContext, a: Nlm4Notify) {
        for id in self.hosts_matching(&a.name, ctx.peer.ip()) {
            debug!(peer = %ctx.peer, host = %String::from_utf8_lossy(&a.name), "FREE_ALL: releasing the host's locks");
            self.release_host(id);
        }
    }
}
