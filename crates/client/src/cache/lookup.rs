//! `lookupcache=all|pos|none` (nfs(5)): how long a name looked up in a
//! directory is trusted. A found name is trusted as long as its directory's
//! attributes are (Linux revalidates a dentry with its parent's
//! attributes); a missing name likewise with `all`, never with `pos` or
//! `none`; with `none` nothing is trusted.

use std::time::Duration;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LookupCache {
    #[default]
    All,
    Pos,
    None,
}

impl LookupCache {
    /// How long a found entry may be kept, given what is left of its
    /// directory's attribute timeout.
    pub fn positive(self, dir_ttl: Duration) -> Duration {
        match self {
            LookupCache::All | LookupCache::Pos => dir_ttl,
            LookupCache::None => Duration::ZERO,
        }
    }

    /// How long "no such name" may be kept; None: not at all.
    pub fn negative(self, dir_ttl: Duration) -> Option<Duration> {
        match self {
            LookupCache::All if !dir_ttl.is_zero() => Some(dir_ttl),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        let d = Duration::from_secs(30);
        assert_eq!(LookupCache::All.positive(d), d);
        assert_eq!(LookupCache::All.negative(d), Some(d));
        assert_eq!(LookupCache::All.negative(Duration::ZERO), None);
        assert_eq!(LookupCache::Pos.positive(d), d);
        assert_eq!(LookupCache::Pos.negative(d), None);
        assert_eq!(LookupCache::None.positive(d), Duration::ZERO);
        assert_eq!(LookupCache::None.negative(d), None);
    }
}
