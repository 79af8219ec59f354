//! The attribute timeout of one inode (Linux fs/nfs/inode.c's attrtimeo):
//! it starts at the minimum for the file's type, goes back to the minimum
//! whenever a revalidation finds the attributes changed, and doubles (up to
//! the maximum) when a revalidation after the timeout found them unchanged,
//! so a file that has not changed for long is asked about less often.
//!
//! A delegation (RFC 8881 §10.2) suspends the timeout: attributes fetched
//! while one is held stay true until it is recalled, since nobody else can
//! change the file before the server has the delegation back. Under a
//! write delegation this client's own writes update size and mtime here;
//! under a read one (or none) they drop the cache. When the delegation
//! goes, the timeout applies again: from that moment after a read one,
//! at once after a write one (the server's mtime is not ours).

use crate::remote::{Attr, Time};
use std::time::{Duration, Instant};

/// `ac*` mount options, in force for one mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcOptions {
    pub acregmin: Duration,
    pub acregmax: Duration,
    pub acdirmin: Duration,
    pub acdirmax: Duration,
    /// `noac`: attributes are never trusted from the cache.
    pub noac: bool,
}

impl Default for AcOptions {
    /// Linux's defaults: 3..60 s for files, 30..60 s for directories.
    fn default() -> Self {
        AcOptions {
            acregmin: Duration::from_secs(3),
            acregmax: Duration::from_secs(60),
            acdirmin: Duration::from_secs(30),
            acdirmax: Duration::from_secs(60),
            noac: false,
        }
    }
}

impl AcOptions {
    fn bounds(&self, dir: bool) -> (Duration, Duration) {
        if self.noac {
            (Duration::ZERO, Duration::ZERO)
        } else if dir {
            (self.acdirmin, self.acdirmax)
        } else {
            (self.acregmin, self.acregmax)
        }
    }
}

/// Cached attributes and how long they are good for.
#[derive(Clone, Debug)]
pub struct CachedAttr {
    pub attr: Attr,
    /// When the attributes were last checked with the server.
    pub checked: Instant,
    /// The current timeout (between the type's min and max).
    pub timeo: Duration,
    /// The attributes were fetched while this kind of delegation was held
    /// (and it still is, as far as this cache was told).
    pub deleg: Option<Delegated>,
}

/// A delegation the cached attributes are held under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delegated {
    Read,
    Write,
}

/// What a refresh found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// First attributes for this inode.
    New,
    /// The data or metadata moved (change attribute, size or mtime).
    Changed,
    Unchanged,
}

/// Whether the file changed between two sets of attributes: the change
/// attribute when both have one, else size and mtime and ctime.
pub fn changed(old: &Attr, new: &Attr) -> bool {
    match (old.change, new.change) {
        (Some(a), Some(b)) => a != b,
        _ => old.size != new.size || old.mtime != new.mtime || old.ctime != new.ctime,
    }
}

impl CachedAttr {
    pub fn new(attr: Attr, now: Instant, ac: &AcOptions) -> CachedAttr {
        let (min, _) = ac.bounds(attr.is_dir());
        CachedAttr {
            attr,
            checked: now,
            timeo: min,
            deleg: None,
        }
    }

    /// Whether the cached attributes may be used at `now` without asking:
    /// within the timeout, or under a delegation.
    pub fn fresh(&self, now: Instant) -> bool {
        self.deleg.is_some() || now.saturating_duration_since(self.checked) < self.timeo
    }

    /// What is left of the timeout at `now` (what a kernel cache may keep
    /// the attributes for). Under a delegation, a whole timeout: the
    /// kernel asks again after it, and is answered from here.
    pub fn ttl(&self, now: Instant) -> Duration {
        if self.deleg.is_some() {
            return self.timeo;
        }
        self.timeo
            .saturating_sub(now.saturating_duration_since(self.checked))
    }

    /// The attributes were just fetched (or confirmed) while a delegation
    /// of `kind` is held: trusted until [`CachedAttr::released`].
    pub fn held(&mut self, kind: Delegated) {
        self.deleg = Some(kind);
    }

    /// The delegation went back (recalled or returned) at `now`.
    pub fn released(&mut self, now: Instant) {
        match self.deleg.take() {
            // Nobody could change the file until now.
            Some(Delegated::Read) => self.checked = now,
            Some(Delegated::Write) => self.invalidate(),
            None => {}
        }
    }

    /// This client wrote up to byte `end` at wall time `at`. Under a write
    /// delegation the client is the authority on size and mtime (RFC 8881
    /// §10.4.3), so they are updated here; otherwise the cache is dropped.
    pub fn wrote(&mut self, end: u64, at: Time) {
        if self.deleg == Some(Delegated::Write) {
            let a = &mut self.attr;
            a.size = Some(a.size.unwrap_or(0).max(end));
            a.mtime = Some(at);
            a.ctime = Some(at);
        } else {
            self.invalidate();
        }
    }

    /// New attributes from the server at `now`: the timeout goes back to
    /// the minimum if they changed, doubles (to the maximum) if they did
    /// not and the old timeout had run out (a refresh inside it, as after
    /// a WRITE, keeps it).
    pub fn refresh(&mut self, attr: Attr, now: Instant, ac: &AcOptions) -> Refresh {
        let (min, max) = ac.bounds(attr.is_dir());
        let r = if changed(&self.attr, &attr) {
            self.timeo = min;
            Refresh::Changed
        } else {
            if !self.fresh(now) {
                self.timeo = (self.timeo * 2).clamp(min, max);
            }
            self.timeo = self.timeo.clamp(min, max);
            Refresh::Unchanged
        };
        self.attr = attr;
        self.checked = now;
        r
    }

    /// The attributes are no longer to be trusted (after a change made
    /// through this mount whose result was not returned).
    pub fn invalidate(&mut self) {
        self.timeo = Duration::ZERO;
        self.deleg = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::FileType;

    fn file(change: u64) -> Attr {
        Attr {
            ftype: Some(FileType::Regular),
            change: Some(change),
            ..Default::default()
        }
    }

    fn dir(change: u64) -> Attr {
        Attr {
            ftype: Some(FileType::Directory),
            ..file(change)
        }
    }

    #[test]
    fn starts_at_the_types_minimum() {
        let ac = AcOptions::default();
        let t0 = Instant::now();
        assert_eq!(CachedAttr::new(file(1), t0, &ac).timeo, ac.acregmin);
        assert_eq!(CachedAttr::new(dir(1), t0, &ac).timeo, ac.acdirmin);
        let c = CachedAttr::new(file(1), t0, &ac);
        assert!(c.fresh(t0 + Duration::from_secs(2)));
        assert!(!c.fresh(t0 + Duration::from_secs(3)));
        assert_eq!(c.ttl(t0 + Duration::from_secs(1)), Duration::from_secs(2));
    }

    #[test]
    fn doubles_while_unchanged_up_to_the_maximum_and_resets_on_change() {
        let ac = AcOptions::default();
        let mut t = Instant::now();
        let mut c = CachedAttr::new(file(1), t, &ac);
        let mut seen = vec![];
        for _ in 0..7 {
            t += c.timeo;
            assert_eq!(c.refresh(file(1), t, &ac), Refresh::Unchanged);
            seen.push(c.timeo.as_secs());
        }
        assert_eq!(seen, [6, 12, 24, 48, 60, 60, 60]);
        t += Duration::from_secs(1);
        assert_eq!(c.refresh(file(2), t, &ac), Refresh::Changed);
        assert_eq!(c.timeo, ac.acregmin);
    }

    #[test]
    fn a_refresh_inside_the_timeout_keeps_it() {
        let ac = AcOptions::default();
        let t = Instant::now();
        let mut c = CachedAttr::new(file(1), t, &ac);
        c.refresh(file(1), t + Duration::from_secs(1), &ac);
        assert_eq!(c.timeo, ac.acregmin);
    }

    #[test]
    fn noac_never_trusts_the_cache() {
        let ac = AcOptions {
            noac: true,
            ..Default::default()
        };
        let t = Instant::now();
        let mut c = CachedAttr::new(dir(1), t, &ac);
        assert!(!c.fresh(t));
        c.refresh(dir(1), t + Duration::from_secs(5), &ac);
        assert_eq!(c.timeo, Duration::ZERO);
        assert_eq!(c.ttl(t), Duration::ZERO);
    }

    #[test]
    fn a_delegation_suspends_the_timeout_until_released() {
        let ac = AcOptions::default();
        let t = Instant::now();
        let mut c = CachedAttr::new(file(1), t, &ac);
        c.held(Delegated::Read);
        let late = t + Duration::from_secs(3600);
        assert!(c.fresh(late), "an hour later, still trusted");
        assert_eq!(c.ttl(late), ac.acregmin);
        c.released(late);
        assert!(
            c.fresh(late + Duration::from_secs(2)),
            "timeout from release"
        );
        assert!(!c.fresh(late + Duration::from_secs(3)));
        c.held(Delegated::Read);
        c.wrote(10, Time::default());
        assert!(!c.fresh(late), "own write under a read delegation drops it");
        assert_eq!(c.deleg, None);
    }

    #[test]
    fn a_write_delegation_keeps_local_size_and_mtime() {
        let ac = AcOptions::default();
        let t = Instant::now();
        let mut c = CachedAttr::new(
            Attr {
                size: Some(100),
                ..file(1)
            },
            t,
            &ac,
        );
        c.held(Delegated::Write);
        let at = Time {
            seconds: 1_700_000_000,
            nseconds: 5,
        };
        c.wrote(50, at);
        assert_eq!(c.attr.size, Some(100), "a write inside does not shrink it");
        c.wrote(4096, at);
        assert_eq!((c.attr.size, c.attr.mtime), (Some(4096), Some(at)));
        assert!(c.fresh(t + Duration::from_secs(600)));
        c.released(t + Duration::from_secs(600));
        assert!(
            !c.fresh(t + Duration::from_secs(600)),
            "the server's view is asked for after a write delegation"
        );
        c.held(Delegated::Write);
        c.invalidate();
        assert_eq!(c.deleg, None, "invalidated attributes are not held");
    }

    #[test]
    fn without_a_change_attribute_size_and_times_decide() {
        let a = Attr {
            size: Some(1),
            ..Default::default()
        };
        let b = Attr {
            size: Some(2),
            ..Default::default()
        };
        assert!(changed(&a, &b));
        assert!(!changed(&a, &a.clone()));
    }
}
