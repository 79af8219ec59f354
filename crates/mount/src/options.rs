//! `-o` options of `tarn mount`, named as mount.nfs(5) names them. Pure:
//! every option is checked here and an unknown one is an error naming it.
//! The transport ones (vers, sec, nconnect, timeo, retrans, hard, soft)
//! are applied to the URL, so the mount connects as the tools do.

use client::cache::attr::AcOptions;
use client::cache::lookup::LookupCache;
use client::url::{NfsUrl, Sec, Vers};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOptions {
    pub vers: Option<Vers>,
    pub sec: Option<Sec>,
    /// Caps on the transfer sizes (the server's may be smaller).
    pub rsize: Option<u32>,
    pub wsize: Option<u32>,
    pub nconnect: Option<u8>,
    pub hard: Option<bool>,
    pub timeo: Option<u32>,
    pub retrans: Option<u32>,
    pub ac: AcOptions,
    /// Close-to-open: GETATTR on open, flush on close.
    pub cto: bool,
    pub lookupcache: LookupCache,
    pub ro: bool,
    /// Other users may use the mount (FUSE's allow_other; on for root).
    pub allow_other: Option<bool>,
    /// Inodes cached before the least recently used are dropped
    /// (`inodecap=N`, Tarn's own).
    pub inode_cap: usize,
    /// NFSv4.1/4.2: a back channel, so the server may grant delegations
    /// (`deleg`, the default, or `nodeleg`; Tarn's own).
    pub deleg: bool,
    /// RPC-with-TLS (`xprtsec=none|tls|mtls`, as mount.nfs names it); the
    /// CA and client certificate from the URL (tls-ca=, ...) or
    /// TARN_TLS_CA, TARN_TLS_CERT, TARN_TLS_KEY.
    pub xprtsec: Option<rpc::tls::XprtSec>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            vers: None,
            sec: None,
            rsize: None,
            wsize: None,
            nconnect: None,
            hard: None,
            timeo: None,
            retrans: None,
            ac: AcOptions::default(),
            cto: true,
            lookupcache: LookupCache::All,
            ro: false,
            allow_other: None,
            inode_cap: 500_000,
            deleg: true,
            xprtsec: None,
        }
    }
}

/// Options mount(8) passes from /etc/fstab that concern mount(8) itself
/// or that a FUSE file system has anyway; accepted and ignored.
const GENERIC: &[&str] = &[
    "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail", "exec", "noexec",
    "suid", "nosuid", "dev", "nodev", "atime", "noatime", "relatime", "bg", "fg",
];

/// What an option without a value does to the options.
type SetFlag = fn(&mut MountOptions);

/// Options without a value, and what each sets.
const FLAGS: &[(&str, SetFlag)] = &[
    ("hard", |o| o.hard = Some(true)),
    ("soft", |o| o.hard = Some(false)),
    ("ac", |o| o.ac.noac = false),
    ("noac", |o| o.ac.noac = true),
    ("cto", |o| o.cto = true),
    ("nocto", |o| o.cto = false),
    ("ro", |o| o.ro = true),
    ("rw", |o| o.ro = false),
    ("deleg", |o| o.deleg = true),
    ("nodeleg", |o| o.deleg = false),
    ("allow_other", |o| o.allow_other = Some(true)),
];

/// actimeo and the ac*min/max as given: they combine as in nfs(5),
/// actimeo setting all four and the specific ones winning whatever the
/// order.
#[derive(Default)]
struct AcTimes {
    all: Option<u64>,
    regmin: Option<u64>,
    regmax: Option<u64>,
    dirmin: Option<u64>,
    dirmax: Option<u64>,
}

impl AcTimes {
    fn apply(&self, ac: &mut AcOptions) {
        let s = Duration::from_secs;
        if let Some(t) = self.all {
            ac.acregmin = s(t);
            ac.acregmax = s(t);
            ac.acdirmin = s(t);
            ac.acdirmax = s(t);
        }
        if let Some(t) = self.regmin {
            ac.acregmin = s(t);
        }
        if let Some(t) = self.regmax {
            ac.acregmax = s(t);
        }
        if let Some(t) = self.dirmin {
            ac.acdirmin = s(t);
        }
        if let Some(t) = self.dirmax {
            ac.acdirmax = s(t);
        }
        // A max below its min is raised to it (Linux does the same).
        ac.acregmax = ac.acregmax.max(ac.acregmin);
        ac.acdirmax = ac.acdirmax.max(ac.acdirmin);
    }
}

impl MountOptions {
    /// Parses one or more comma-separated `-o` lists.
    pub fn parse<'a>(lists: impl IntoIterator<Item = &'a str>) -> Result<MountOptions, String> {
        let mut o = MountOptions::default();
        let mut ac = AcTimes::default();
        for item in lists
            .into_iter()
            .flat_map(|l| l.split(','))
            .filter(|s| !s.is_empty())
        {
            let (k, v) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            let num = |max: u64| -> Result<u64, String> {
                let v = v.ok_or_else(|| format!("option {k} needs a value ({k}=N)"))?;
                match v.parse::<u64>() {
                    Ok(n) if n <= max => Ok(n),
                    _ => Err(format!("option {k}={v}: expected a number up to {max}")),
                }
            };
            match k {
                "vers" | "nfsvers" => {
                    o.vers = Some(match v {
                        Some("3") => Vers::V3,
                        Some("4") => Vers::V4Any,
                        Some("4.0") => Vers::V4(0),
                        Some("4.1") => Vers::V4(1),
                        Some("4.2") => Vers::V4(2),
                        _ => return Err(format!("option {item}: vers is 3, 4, 4.0, 4.1 or 4.2")),
                    })
                }
                "sec" => {
                    o.sec = Some(match v {
                        Some("sys") => Sec::Sys,
                        Some("krb5") => Sec::Krb5,
                        Some("krb5i") => Sec::Krb5i,
                        Some("krb5p") => Sec::Krb5p,
                        _ => {
                            return Err(format!("option {item}: sec is sys, krb5, krb5i or krb5p"))
                        }
                    })
                }
                "rsize" | "wsize" => {
                    let n = num(1 << 20)?.max(4096) as u32 & !4095;
                    if k == "rsize" {
                        o.rsize = Some(n);
                    } else {
                        o.wsize = Some(n);
                    }
                }
                "nconnect" => {
                    let n = num(16)?;
                    if n == 0 {
                        return Err(format!("option {item}: 1 to 16"));
                    }
                    o.nconnect = Some(n as u8);
                }
                "timeo" => {
                    let n = num(6000)?;
                    if n == 0 {
                        return Err(format!("option {item}: 1 to 6000 deciseconds"));
                    }
                    o.timeo = Some(n as u32);
                }
                "retrans" => o.retrans = Some(num(100)? as u32),
                "xprtsec" => {
                    o.xprtsec = Some(
                        v.unwrap_or_default()
                            .parse()
                            .map_err(|e| format!("option {item}: {e}"))?,
                    )
                }
                "actimeo" => ac.all = Some(num(86400)?),
                "acregmin" => ac.regmin = Some(num(86400)?),
                "acregmax" => ac.regmax = Some(num(86400)?),
                "acdirmin" => ac.dirmin = Some(num(86400)?),
                "acdirmax" => ac.dirmax = Some(num(86400)?),
                "lookupcache" => {
                    o.lookupcache = match v {
                        Some("all") => LookupCache::All,
                        Some("pos" | "positive") => LookupCache::Pos,
                        Some("none") => LookupCache::None,
                        _ => return Err(format!("option {item}: lookupcache is all, pos or none")),
                    }
                }
                "inodecap" => o.inode_cap = num(1 << 32)?.max(16) as usize,
                f if FLAGS.iter().any(|(n, _)| *n == f) => {
                    if v.is_some() {
                        return Err(format!("option {k} takes no value"));
                    }
                    let set = FLAGS.iter().find(|(n, _)| *n == f).expect("found").1;
                    set(&mut o)
                }
                g if GENERIC.contains(&g) && v.is_none() => {}
                g if g.starts_with("x-") || g.starts_with("comment=") => {}
                _ => return Err(format!("unknown mount option {item:?}")),
            }
        }
        ac.apply(&mut o.ac);
        Ok(o)
    }

    /// The URL with the transport options applied (an option wins over
    /// the URL's query).
    pub fn apply(&self, url: &NfsUrl) -> NfsUrl {
        let mut u = url.clone();
        if let Some(v) = self.vers {
            u.vers = Some(v);
        }
        if let Some(s) = self.sec {
            u.sec = s;
        }
        let t = &mut u.transport;
        if let Some(n) = self.nconnect {
            t.nconnect = n;
        }
        if let Some(n) = self.timeo {
            t.timeo = n;
        }
        if let Some(n) = self.retrans {
            t.retrans = n;
        }
        if let Some(h) = self.hard {
            t.hard = h;
        }
        match self.xprtsec {
            None => {}
            Some(rpc::tls::XprtSec::None) => u.tls = None,
            Some(x) => {
                u.tls.get_or_insert_with(Default::default).mtls = x == rpc::tls::XprtSec::Mtls;
            }
        }
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<MountOptions, String> {
        MountOptions::parse([s])
    }

    #[test]
    fn defaults_are_linuxs() {
        let o = p("").unwrap();
        assert!(o.cto && !o.ro && !o.ac.noac);
        assert_eq!(o.ac, AcOptions::default());
        assert_eq!(o.lookupcache, LookupCache::All);
    }

    #[test]
    fn every_nfs_option() {
        let o = MountOptions::parse([
            "vers=4.1,sec=sys,rsize=65536,wsize=131072,nconnect=4,soft,timeo=50,retrans=3",
            "noac,nocto,lookupcache=pos,ro,acregmin=1,acregmax=2,acdirmin=3,acdirmax=4",
        ])
        .unwrap();
        assert_eq!(o.vers, Some(Vers::V4(1)));
        assert_eq!(o.sec, Some(Sec::Sys));
        assert_eq!((o.rsize, o.wsize), (Some(65536), Some(131072)));
        assert_eq!(
            (o.nconnect, o.hard, o.timeo, o.retrans),
            (Some(4), Some(false), Some(50), Some(3))
        );
        assert!(o.ac.noac && !o.cto && o.ro);
        assert_eq!(o.lookupcache, LookupCache::Pos);
        assert_eq!(o.ac.acregmin, Duration::from_secs(1));
        assert_eq!(o.ac.acdirmax, Duration::from_secs(4));
    }

    #[test]
    fn xprtsec_turns_tls_on_and_off() {
        let url = NfsUrl::parse("nfs://srv/x?xprtsec=tls&tls-ca=/ca.pem").unwrap();
        let u = p("xprtsec=mtls").unwrap().apply(&url);
        let t = u.tls.expect("TLS on");
        assert!(t.mtls);
        assert_eq!(t.ca.as_deref(), Some("/ca.pem"), "the URL's files stay");
        assert_eq!(p("xprtsec=none").unwrap().apply(&url).tls, None);
        let plain = NfsUrl::parse("nfs://srv/x").unwrap();
        let t = p("xprtsec=tls").unwrap().apply(&plain).tls.unwrap();
        assert!(!t.mtls && t.ca.is_none());
        assert!(p("xprtsec=ssl").unwrap_err().contains("xprtsec=ssl"));
        assert!(p("xprtsec").is_err());
    }

    #[test]
    fn actimeo_sets_all_and_specific_ones_win() {
        let o = p("acregmin=5,actimeo=10").unwrap();
        assert_eq!(o.ac.acregmin, Duration::from_secs(5));
        assert_eq!(o.ac.acregmax, Duration::from_secs(10));
        assert_eq!(o.ac.acdirmin, Duration::from_secs(10));
        let o = p("acregmin=100").unwrap();
        assert_eq!(o.ac.acregmax, Duration::from_secs(100));
    }

    #[test]
    fn errors_name_the_option() {
        assert!(p("bogus").unwrap_err().contains("bogus"));
        assert!(p("rw,frobnicate=3").unwrap_err().contains("frobnicate=3"));
        assert!(p("vers=5").unwrap_err().contains("vers=5"));
        assert!(p("nconnect=0").unwrap_err().contains("nconnect"));
        assert!(p("timeo").unwrap_err().contains("timeo"));
        assert!(p("noac=1").unwrap_err().contains("noac"));
        assert!(p("lookupcache=some").unwrap_err().contains("lookupcache"));
        // fstab's own options pass.
        p("defaults,_netdev,noauto,x-systemd.automount").unwrap();
    }

    #[test]
    fn delegations_on_unless_nodeleg() {
        assert!(p("").unwrap().deleg);
        assert!(!p("nodeleg").unwrap().deleg);
        assert!(p("nodeleg,deleg").unwrap().deleg);
        assert!(p("deleg=1").unwrap_err().contains("deleg"));
    }

    #[test]
    fn transport_options_override_the_url() {
        let url = NfsUrl::parse("nfs://h/x?vers=3&timeo=10").unwrap();
        let o = p("vers=4.2,timeo=20,nconnect=2,soft").unwrap();
        let u = o.apply(&url);
        assert_eq!(u.vers, Some(Vers::V4(2)));
        assert_eq!(u.transport.timeo, 20);
        assert_eq!(u.transport.nconnect, 2);
        assert!(!u.transport.hard);
    }
}
