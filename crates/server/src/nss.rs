//! Users and groups from the system's name service (NSS: files, LDAP,
//! SSSD, ... as nsswitch.conf says), for NFSv4 owner strings and Kerberos
//! principals. Reading /etc/passwd and /etc/group directly would map
//! directory users to anonymous.
//!
//! Lookups go through glibc's reentrant calls (getpwnam_r, getpwuid_r,
//! getgrnam_r, getgrgid_r, getgrouplist) in [`sys`], the crate's only
//! unsafe code, and are cached: a directory lookup can take milliseconds,
//! and owner strings are asked for on every GETATTR when names are on.
//! Each table is bounded (least recently used entries go first); answers
//! expire after a TTL so account changes are seen, and "no such name"
//! expires sooner, so a newly created account appears quickly.

use lru::LruCache;
use std::hash::Hash;
use std::io;
use std::num::NonZeroUsize;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::warn;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gid: u32,
}

/// Entries per table, and how long answers are trusted (nscd's defaults
/// are in the same range: 600 s positive, 20 s negative).
pub const DEFAULT_CAPACITY: usize = 4096;
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(30);

/// A bounded map of lookup answers (`None`: no such entry) with expiry.
pub struct TtlCache<K: Hash + Eq, V> {
    entries: Mutex<LruCache<K, (Option<V>, Instant)>>,
    ttl: Duration,
    negative_ttl: Duration,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(capacity: usize, ttl: Duration, negative_ttl: Duration) -> Self {
        TtlCache {
            entries: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
            ttl,
            negative_ttl,
        }
    }

    /// The answer for `key` if one is cached and fresh at `now`, else
    /// `lookup`'s (cached from `now`). A failed lookup counts as "no such
    /// entry" for the negative TTL, so a dead directory server is not
    /// asked again on every call.
    pub fn get_with(
        &self,
        key: &K,
        now: Instant,
        lookup: impl FnOnce() -> io::Result<Option<V>>,
    ) -> Option<V> {
        if let Some((v, expires)) = self.entries.lock().unwrap().get(key) {
            if now < *expires {
                return v.clone();
            }
        }
        // Asked without the lock: a slow directory must not stall other keys.
        let v = lookup().unwrap_or_else(|e| {
            warn!(error = %e, "name service lookup failed; treated as no such entry");
            None
        });
        let ttl = if v.is_some() {
            self.ttl
        } else {
            self.negative_ttl
        };
        self.entries
            .lock()
            .unwrap()
            .put(key.clone(), (v.clone(), now + ttl));
        v
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Cached NSS lookups.
pub struct Nss {
    users_by_name: TtlCache<String, User>,
    users_by_uid: TtlCache<u32, User>,
    groups_by_name: TtlCache<String, Group>,
    groups_by_gid: TtlCache<u32, Group>,
    group_lists: TtlCache<(String, u32), Vec<u32>>,
}

impl Nss {
    pub fn new(capacity: usize, ttl: Duration, negative_ttl: Duration) -> Nss {
        Nss {
            users_by_name: TtlCache::new(capacity, ttl, negative_ttl),
            users_by_uid: TtlCache::new(capacity, ttl, negative_ttl),
            groups_by_name: TtlCache::new(capacity, ttl, negative_ttl),
            groups_by_gid: TtlCache::new(capacity, ttl, negative_ttl),
            group_lists: TtlCache::new(capacity, ttl, negative_ttl),
        }
    }

    /// The process-wide instance with the default limits.
    pub fn system() -> &'static Nss {
        static NSS: OnceLock<Nss> = OnceLock::new();
        NSS.get_or_init(|| Nss::new(DEFAULT_CAPACITY, DEFAULT_TTL, DEFAULT_NEGATIVE_TTL))
    }

    pub fn user_by_name(&self, name: &str) -> Option<User> {
        self.users_by_name
            .get_with(&name.to_string(), Instant::now(), || {
                sys::user_by_name(name)
            })
    }

    pub fn user_by_uid(&self, uid: u32) -> Option<User> {
        self.users_by_uid
            .get_with(&uid, Instant::now(), || sys::user_by_uid(uid))
    }

    pub fn group_by_name(&self, name: &str) -> Option<Group> {
        self.groups_by_name
            .get_with(&name.to_string(), Instant::now(), || {
                sys::group_by_name(name)
            })
    }

    pub fn group_by_gid(&self, gid: u32) -> Option<Group> {
        self.groups_by_gid
            .get_with(&gid, Instant::now(), || sys::group_by_gid(gid))
    }

    /// Every group `user` (primary group `gid`) is in, `gid` included, as
    /// getgrouplist(3) reports them.
    pub fn groups_of(&self, user: &str, gid: u32) -> Vec<u32> {
        self.group_lists
            .get_with(&(user.to_string(), gid), Instant::now(), || {
                sys::group_list(user, gid).map(Some)
            })
            .unwrap_or_default()
    }

    /// Entries held, all tables together (for tests and probes).
    pub fn len(&self) -> usize {
        self.users_by_name.len()
            + self.users_by_uid.len()
            + self.groups_by_name.len()
            + self.groups_by_gid.len()
            + self.group_lists.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// glibc's reentrant account lookups: the only unsafe code of this crate.
///
/// Each call gets a caller-owned buffer for the strings it returns; the
/// results are copied out before the buffer is dropped. A buffer that is
/// too small (ERANGE) is doubled, up to a bound.
#[allow(unsafe_code)]
mod sys {
    use super::{Group, User};
    use libc::{c_char, c_int};
    use std::ffi::{CStr, CString};
    use std::io;

    const FIRST_BUF: usize = 1024;
    /// Entries bigger than this (a group with tens of thousands of members)
    /// are reported as errors rather than grown without end.
    const MAX_BUF: usize = 4 << 20;

    /// Runs `call(buf, len)` with a growing buffer. `call` returns the
    /// function's error number and whether an entry was found (having
    /// copied it out).
    fn with_buffer<T>(
        mut call: impl FnMut(*mut c_char, usize) -> (c_int, Option<T>),
    ) -> io::Result<Option<T>> {
        let mut len = FIRST_BUF;
        loop {
            let mut buf = vec![0u8; len];
            match call(buf.as_mut_ptr().cast(), len) {
                (0, found) => return Ok(found),
                (libc::ERANGE, _) if len < MAX_BUF => len *= 2,
                // POSIX lets these mean "no such entry".
                (libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM, _) => return Ok(None),
                (e, _) => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }

    /// A lookup of `getpw*_r`'s shape, after its key argument.
    type PwFn<'a> =
        dyn Fn(*mut libc::passwd, *mut c_char, usize, *mut *mut libc::passwd) -> c_int + 'a;
    type GrFn<'a> =
        dyn Fn(*mut libc::group, *mut c_char, usize, *mut *mut libc::group) -> c_int + 'a;

    fn passwd(f: &PwFn) -> io::Result<Option<User>> {
        with_buffer(|buf, len| {
            // SAFETY: an all-zero passwd is valid (null pointers, zero ids);
            // it is only read after the call filled it in.
            let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
            let mut found: *mut libc::passwd = std::ptr::null_mut();
            let rc = f(&mut pw, buf, len, &mut found);
            if rc != 0 || found.is_null() {
                return (rc, None);
            }
            // SAFETY: on success pw_name points into `buf`, NUL-terminated,
            // and `buf` is alive until with_buffer's loop iteration ends.
            let name = unsafe { CStr::from_ptr(pw.pw_name) };
            let user = User {
                name: name.to_string_lossy().into_owned(),
                uid: pw.pw_uid,
                gid: pw.pw_gid,
            };
            (0, Some(user))
        })
    }

    fn group(f: &GrFn) -> io::Result<Option<Group>> {
        with_buffer(|buf, len| {
            // SAFETY: as in `passwd`.
            let mut gr: libc::group = unsafe { std::mem::zeroed() };
            let mut found: *mut libc::group = std::ptr::null_mut();
            let rc = f(&mut gr, buf, len, &mut found);
            if rc != 0 || found.is_null() {
                return (rc, None);
            }
            // SAFETY: as in `passwd`.
            let name = unsafe { CStr::from_ptr(gr.gr_name) };
            let group = Group {
                name: name.to_string_lossy().into_owned(),
                gid: gr.gr_gid,
            };
            (0, Some(group))
        })
    }

    pub fn user_by_name(name: &str) -> io::Result<Option<User>> {
        // A name with a NUL in it names nobody.
        let Ok(c) = CString::new(name) else {
            return Ok(None);
        };
        // SAFETY: every pointer is valid for the call and `c` outlives it.
        passwd(&|pw, b, n, r| unsafe { libc::getpwnam_r(c.as_ptr(), pw, b, n, r) })
    }

    pub fn user_by_uid(uid: u32) -> io::Result<Option<User>> {
        // SAFETY: every pointer is valid for the call.
        passwd(&|pw, b, n, r| unsafe { libc::getpwuid_r(uid, pw, b, n, r) })
    }

    pub fn group_by_name(name: &str) -> io::Result<Option<Group>> {
        let Ok(c) = CString::new(name) else {
            return Ok(None);
        };
        // SAFETY: every pointer is valid for the call and `c` outlives it.
        group(&|gr, b, n, r| unsafe { libc::getgrnam_r(c.as_ptr(), gr, b, n, r) })
    }

    pub fn group_by_gid(gid: u32) -> io::Result<Option<Group>> {
        // SAFETY: every pointer is valid for the call.
        group(&|gr, b, n, r| unsafe { libc::getgrgid_r(gid, gr, b, n, r) })
    }

    pub fn group_list(user: &str, gid: u32) -> io::Result<Vec<u32>> {
        let Ok(c) = CString::new(user) else {
            return Ok(vec![gid]);
        };
        let mut cap: c_int = 64;
        loop {
            let mut gids: Vec<libc::gid_t> = vec![0; cap as usize];
            let mut n = cap;
            // SAFETY: `gids` holds `n` elements; getgrouplist writes at
            // most that many and sets `n` to the count (or the count needed).
            let rc = unsafe { libc::getgrouplist(c.as_ptr(), gid, gids.as_mut_ptr(), &mut n) };
            if rc >= 0 {
                gids.truncate(n.max(0) as usize);
                return Ok(gids);
            }
            cap = if n > cap { n } else { cap * 2 };
            if cap > 1 << 16 {
                return Err(io::Error::other(format!("{user}: too many groups")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn accounts_in_the_files_database_resolve() {
        let nss = Nss::new(16, DEFAULT_TTL, DEFAULT_NEGATIVE_TTL);
        let root = nss.user_by_name("root").expect("root");
        assert_eq!((root.uid, root.name.as_str()), (0, "root"));
        assert_eq!(nss.user_by_uid(0).map(|u| u.name), Some("root".into()));
        let nobody = nss.user_by_name("nobody").expect("nobody");
        assert_eq!(
            nss.user_by_uid(nobody.uid).map(|u| u.name),
            Some("nobody".into())
        );
        let g = nss.group_by_gid(0).expect("group 0");
        assert_eq!(nss.group_by_name(&g.name).map(|g| g.gid), Some(0));
        assert!(nss.groups_of("root", root.gid).contains(&root.gid));
    }

    #[test]
    fn unknown_names_are_none() {
        let nss = Nss::new(16, DEFAULT_TTL, DEFAULT_NEGATIVE_TTL);
        assert_eq!(nss.user_by_name("no-such-user-tarn-test"), None);
        assert_eq!(nss.group_by_name("no-such-group-tarn-test"), None);
        assert_eq!(nss.user_by_name("root\0x"), None);
        assert_eq!(nss.user_by_name(""), None);
        assert_eq!(nss.user_by_uid(4_000_000_123), None);
    }

    #[test]
    fn the_cache_is_bounded() {
        let nss = Nss::new(2, DEFAULT_TTL, DEFAULT_NEGATIVE_TTL);
        for uid in [0, 1, 2, 3, 4_000_000_123] {
            nss.user_by_uid(uid);
        }
        assert_eq!(nss.users_by_uid.len(), 2);
        let c: TtlCache<u32, u32> = TtlCache::new(3, DEFAULT_TTL, DEFAULT_NEGATIVE_TTL);
        let now = Instant::now();
        for k in 0..100 {
            c.get_with(&k, now, || Ok(Some(k)));
        }
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn answers_expire_and_misses_expire_sooner() {
        let c: TtlCache<&str, u32> =
            TtlCache::new(8, Duration::from_secs(300), Duration::from_secs(30));
        let asked = Cell::new(0);
        let ask = |v: Option<u32>| {
            asked.set(asked.get() + 1);
            Ok(v)
        };
        let t0 = Instant::now();
        assert_eq!(c.get_with(&"alice", t0, || ask(Some(1000))), Some(1000));
        assert_eq!(c.get_with(&"ghost", t0, || ask(None)), None);
        assert_eq!(asked.get(), 2);
        // Within both TTLs: nothing is asked again.
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(c.get_with(&"alice", t1, || ask(Some(1))), Some(1000));
        assert_eq!(c.get_with(&"ghost", t1, || ask(None)), None);
        assert_eq!(asked.get(), 2);
        // Past the negative TTL only: the miss is asked again (and now exists).
        let t2 = t0 + Duration::from_secs(31);
        assert_eq!(c.get_with(&"alice", t2, || ask(Some(1))), Some(1000));
        assert_eq!(c.get_with(&"ghost", t2, || ask(Some(7))), Some(7));
        assert_eq!(asked.get(), 3);
        // Past the TTL: asked again.
        let t3 = t0 + Duration::from_secs(301);
        assert_eq!(c.get_with(&"alice", t3, || ask(Some(1001))), Some(1001));
        assert_eq!(asked.get(), 4);
        // A failed lookup is a short-lived miss.
        assert_eq!(
            c.get_with(&"down", t3, || Err(io::Error::other("ldap down"))),
            None
        );
        assert_eq!(c.get_with(&"down", t3, || ask(Some(5))), None);
    }
}
