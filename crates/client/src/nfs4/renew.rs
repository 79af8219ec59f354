//! When to replace an RPCSEC_GSS context, and what to tell the user: pure
//! decisions over instants the caller passes in (no clock, no I/O), so
//! the tests drive them with a fake clock.
//!
//! Why ahead of expiry: a context that expires under calls in flight costs
//! RPCSEC_GSS_CREDPROBLEM errors and a scramble; Linux's answer (a short
//! key timeout, then synchronous 4 KiB writes for the last minutes of the
//! credential) made writes slow. Here a fresh context is made in the
//! background a margin before the old one ends, from the credential cache
//! as it is then (kinit, k5start or sssd may have refreshed it), and
//! calls move over once it is ready. Nothing about writes changes.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How early to renew, and how often to try again when renewal does not
/// yield a longer-lived context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenewPolicy {
    /// Renew this long before expiry (capped at a quarter of the
    /// context's lifetime, so short tickets are not renewed at once).
    pub margin: Duration,
    /// The pause between attempts while the cache holds no newer ticket.
    pub retry: Duration,
}

impl Default for RenewPolicy {
    fn default() -> Self {
        RenewPolicy {
            margin: Duration::from_secs(300),
            retry: Duration::from_secs(30),
        }
    }
}

/// Expiries are known to the second (GSS-API reports whole seconds left),
/// so two contexts from one ticket may seem to end up to a second apart:
/// a new one counts as longer-lived only beyond this.
pub const SAME_TICKET_SLACK: Duration = Duration::from_secs(2);

/// What to do after an attempt to make a new context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The new context outlives the old: switch to it; renew again at `next`.
    Switch { next: Instant },
    /// The cache holds no newer ticket (the new context ends no later
    /// than the old): keep the old one, warn that the ticket behind it
    /// ends at `expires`, try again at `next`.
    NotRefreshed { next: Instant, expires: Instant },
    /// No context could be made (no ticket, KDC down, server refused):
    /// keep the old one, warn, try again at `next`.
    Failed { next: Instant, expires: Instant },
}

impl RenewPolicy {
    /// The margin for a context that lives `lifetime`.
    pub fn margin_for(&self, lifetime: Duration) -> Duration {
        self.margin.min(lifetime / 4)
    }

    /// When to start renewing a context established at `established` that
    /// expires at `expires`.
    pub fn renew_at(&self, established: Instant, expires: Instant) -> Instant {
        let life = expires.saturating_duration_since(established);
        expires - self.margin_for(life)
    }

    /// The next attempt after one that gave nothing better: after `retry`,
    /// but early enough for two more tries before the old context ends
    /// (at least a second apart, so a dead KDC is not hammered).
    fn retry_at(&self, now: Instant, old_expires: Instant) -> Instant {
        let left = old_expires.saturating_duration_since(now);
        now + self.retry.min(left / 2).max(Duration::from_secs(1))
    }

    /// After a new context was made at `now`.
    pub fn after_success(
        &self,
        now: Instant,
        old_expires: Instant,
        new_expires: Instant,
    ) -> Decision {
        if new_expires > old_expires + SAME_TICKET_SLACK {
            Decision::Switch {
                next: self.renew_at(now, new_expires),
            }
        } else {
            Decision::NotRefreshed {
                next: self.retry_at(now, old_expires),
                expires: old_expires,
            }
        }
    }

    /// After an attempt at `now` failed.
    pub fn after_failure(&self, now: Instant, old_expires: Instant) -> Decision {
        Decision::Failed {
            next: self.retry_at(now, old_expires),
            expires: old_expires,
        }
    }
}

/// `at` (an instant) as a UTC wall-clock time, `now` being both
/// `now_instant` and `now_wall`: for warnings people read.
pub fn wall_clock(at: Instant, now_instant: Instant, now_wall: SystemTime) -> String {
    let wall = if at >= now_instant {
        now_wall + (at - now_instant)
    } else {
        now_wall - (now_instant - at)
    };
    let secs = wall
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (the usual era-based conversion).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The warning for a context that could not be replaced by a longer one.
pub fn warning(
    principal: &str,
    expires: Instant,
    now: Instant,
    now_wall: SystemTime,
    why: &str,
) -> String {
    let left = expires.saturating_duration_since(now).as_secs();
    let when = wall_clock(expires, now, now_wall);
    if left == 0 {
        format!(
            "the Kerberos credential of {principal} expired at {when} and could not be renewed ({why}): \
             NFS calls fail until a new ticket is in the credential cache (kinit)"
        )
    } else {
        format!(
            "the Kerberos credential of {principal} expires at {when} (in {left} s) and could not be renewed \
             ({why}): get a new ticket into the credential cache (kinit) before then"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake clock: instants as offsets from a fixed origin.
    struct Clock(Instant);
    impl Clock {
        fn at(&self, s: u64) -> Instant {
            self.0 + Duration::from_secs(s)
        }
        fn not_refreshed(&self, next: u64, expires: u64) -> Decision {
            Decision::NotRefreshed {
                next: self.at(next),
                expires: self.at(expires),
            }
        }
        fn failed(&self, next: u64, expires: u64) -> Decision {
            Decision::Failed {
                next: self.at(next),
                expires: self.at(expires),
            }
        }
    }
    fn clock() -> Clock {
        Clock(Instant::now())
    }
    /// The fake clock and the default policy most tests start from.
    fn clock_and_policy() -> (Clock, RenewPolicy) {
        (clock(), RenewPolicy::default())
    }

    #[test]
    fn long_contexts_renew_the_margin_before_expiry() {
        let (c, p) = clock_and_policy();
        // A 10 h ticket: renewed 5 min before its end.
        assert_eq!(p.renew_at(c.at(0), c.at(36_000)), c.at(36_000 - 300));
    }

    #[test]
    fn short_contexts_renew_a_quarter_of_their_life_before_expiry() {
        let (c, p) = clock_and_policy();
        // 60 s: renewed at 45 s, not at once (a 5 min margin would).
        assert_eq!(p.renew_at(c.at(0), c.at(60)), c.at(45));
        assert_eq!(p.renew_at(c.at(100), c.at(1300)), c.at(1000));
    }

    #[test]
    fn a_context_established_late_counts_its_own_lifetime() {
        let (c, p) = clock_and_policy();
        // Made at 45 from a ticket ending at 100: a 55 s life, renewed at 86.25.
        let at = p.renew_at(c.at(45), c.at(100));
        assert_eq!(at, c.at(100) - Duration::from_millis(13_750));
    }

    #[test]
    fn a_longer_context_is_switched_to() {
        let (c, p) = clock_and_policy();
        // The old ends at 60; kinit refreshed the cache; the new ends at 105.
        let d = p.after_success(c.at(45), c.at(60), c.at(105));
        assert_eq!(
            d,
            Decision::Switch {
                next: c.at(105) - Duration::from_secs(15)
            }
        );
    }

    #[test]
    fn an_unrefreshed_cache_keeps_the_old_context_and_retries_before_expiry() {
        let c = clock();
        let p = RenewPolicy {
            margin: Duration::from_secs(300),
            retry: Duration::from_secs(30),
        };
        // Long ticket, 300 s left, nothing newer: retry after 30 s.
        let d = p.after_success(c.at(1000), c.at(1300), c.at(1300));
        assert_eq!(d, c.not_refreshed(1030, 1300));
        // 20 s left: retry in 10 (two more chances), not after 30.
        let d = p.after_success(c.at(1280), c.at(1300), c.at(1300));
        assert_eq!(d, c.not_refreshed(1290, 1300));
    }

    #[test]
    fn a_context_from_the_same_ticket_is_not_longer_for_a_rounded_second() {
        let (c, p) = clock_and_policy();
        let d = p.after_success(c.at(45), c.at(60), c.at(61));
        assert!(matches!(d, Decision::NotRefreshed { .. }), "{d:?}");
        let d = p.after_success(c.at(45), c.at(60), c.at(63));
        assert!(matches!(d, Decision::Switch { .. }), "{d:?}");
    }

    #[test]
    fn failures_retry_no_faster_than_once_a_second_even_after_expiry() {
        let (c, p) = clock_and_policy();
        let d = p.after_failure(c.at(59), c.at(60));
        assert_eq!(d, c.failed(60, 60));
        // Expired already: keep trying (a kinit brings calls back).
        let d = p.after_failure(c.at(90), c.at(60));
        assert_eq!(d, c.failed(91, 60));
    }

    #[test]
    fn a_renewal_schedule_over_three_refreshed_tickets() {
        // Tickets of 60 s refreshed by k5start every 40 s; the client must
        // switch before each context's end, every time.
        let (c, p) = clock_and_policy();
        let mut expires = c.at(60);
        let mut next = p.renew_at(c.at(0), expires);
        let mut ticket_end = 60;
        let mut switches = 0;
        for t in 0..200u64 {
            if t > 0 && t % 40 == 0 {
                ticket_end = t + 60; // kinit
            }
            if c.at(t) >= next {
                match p.after_success(c.at(t), expires, c.at(ticket_end)) {
                    Decision::Switch { next: n } => {
                        assert!(c.at(t) < expires, "switched after expiry at {t}");
                        expires = c.at(ticket_end);
                        next = n;
                        switches += 1;
                    }
                    Decision::NotRefreshed { next: n, .. } => next = n,
                    Decision::Failed { .. } => unreachable!(),
                }
            }
            assert!(c.at(t) < expires, "context expired at {t}");
        }
        assert!(switches >= 4, "{switches}");
    }

    #[test]
    fn warnings_name_the_principal_and_the_expiry() {
        let c = clock();
        let wall = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let w = warning(
            "alice@TARN.TEST",
            c.at(90),
            c.at(0),
            wall,
            "no newer ticket",
        );
        assert!(w.contains("alice@TARN.TEST"), "{w}");
        assert!(w.contains("2026-11-18 11:08:10 UTC"), "{w}");
        assert!(w.contains("in 90 s"), "{w}");
        let w = warning("alice@TARN.TEST", c.at(0), c.at(5), wall, "x");
        assert!(w.contains("expired at"), "{w}");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_781), (2026, 11, 24));
    }
}
