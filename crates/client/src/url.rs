//! `nfs://` URLs in libnfs's form: `nfs://host[:port]/path?key=value&...`,
//! one slash between the authority and the path, IPv6 hosts in brackets.
//!
//! Transport keys, as mount.nfs(5) names them: `nconnect=N` (1 to 16
//! connections), `timeo=N` (deciseconds before the first retransmission,
//! growing by as much per retry), `retrans=N` (retries before a soft call
//! fails or a hard one reports the server not responding), `hard=1` (the
//! default: retry for ever) or `soft=1` (fail with a timeout error);
//! `hard` and `soft` alone mean `=1`. Defaults: hard, timeo=600,
//! retrans=2, nconnect=1.
//!
//! Pure: parsing resolves no names. Every key the tools do not know, and
//! every value they cannot honour yet, is an error naming it, so a URL
//! never silently means less than it says.

use std::fmt;

pub const DEFAULT_PORT: u16 = 2049;

/// A parsed URL. `path` is absolute in the server's pseudo filesystem,
/// without a trailing slash (the root is "/").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfsUrl {
    pub host: String,
    pub port: u16,
    pub path: String,
    /// The NFS version; None: 4.2, else 4.1, else 4.0, else 3, the first
    /// the server speaks (as mount.nfs tries them).
    pub vers: Option<Vers>,
    /// AUTH_SYS identity; None means the caller's own.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub sec: Sec,
    /// NFSv3 MOUNT's port (`mountport=`, as libnfs); None: found.
    pub mountport: Option<u16>,
    pub transport: Transport,
    /// RPC-with-TLS (`xprtsec=tls` or `mtls`); None: plain TCP.
    pub tls: Option<TlsUrl>,
}

/// The TLS keys of a URL: `xprtsec=tls|mtls`, `tls-ca=FILE` (the CA the
/// server's certificate must chain to), `tls-cert=FILE` and `tls-key=FILE`
/// (the client's, for mtls), `insecure=1` (do not verify the server).
/// Files not given here come from TARN_TLS_CA, TARN_TLS_CERT, TARN_TLS_KEY.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsUrl {
    pub mtls: bool,
    pub ca: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub insecure: bool,
}

/// An NFS version (`vers=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vers {
    V3,
    /// NFSv4 with this minor version (0, 1 or 2).
    V4(u32),
    /// `vers=4`: NFSv4.2, else 4.1, else 4.0.
    V4Any,
}

/// How calls travel: connections, timeouts, hard or soft.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transport {
    pub nconnect: u8,
    /// Whether the URL said `nconnect=` (else the tools may open more
    /// connections to read a large file: see `transfer::bulk_remote`).
    pub nconnect_set: bool,
    /// Deciseconds.
    pub timeo: u32,
    pub retrans: u32,
    pub hard: bool,
}

impl Default for Transport {
    fn default() -> Self {
        Transport {
            nconnect: 1,
            nconnect_set: false,
            timeo: 600,
            retrans: 2,
            hard: true,
        }
    }
}

/// The security flavor (`sec=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sec {
    #[default]
    Sys,
    /// Kerberos from the caller's credential cache: authentication only,
    /// with integrity, with privacy.
    Krb5,
    Krb5i,
    Krb5p,
}

impl NfsUrl {
    /// `nfs://host:port/path` with no options: AUTH_SYS, any version,
    /// the default transport.
    fn at(host: String, port: u16, path: String) -> NfsUrl {
        NfsUrl {
            host,
            port,
            path,
            vers: None,
            uid: None,
            gid: None,
            sec: Sec::Sys,
            mountport: None,
            transport: Transport::default(),
            tls: None,
        }
    }

    pub fn parse(s: &str) -> Result<NfsUrl, String> {
        let bad = |why: &str| format!("{s}: {why}");
        let rest = s
            .strip_prefix("nfs://")
            .ok_or_else(|| bad("not an nfs:// URL"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = split_host_port(authority).map_err(|e| bad(&e))?;
        let path = normalize(&percent_decode(path).map_err(|e| bad(&e))?);
        let mut url = NfsUrl::at(host, port, path);
        let mut tls: Option<TlsUrl> = None;
        let mut tls_files: (Option<String>, Option<String>, Option<String>, bool) =
            Default::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let pair = match pair {
                "hard" | "soft" => &*format!("{pair}=1"),
                p => p,
            };
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(&format!("query item {pair:?} has no value")))?;
            match k {
                "vers" | "version" => {
                    url.vers = match v {
                        "3" => Some(Vers::V3),
                        "4" => Some(Vers::V4Any),
                        "4.0" => Some(Vers::V4(0)),
                        "4.1" => Some(Vers::V4(1)),
                        "4.2" => Some(Vers::V4(2)),
                        _ => return Err(bad(&format!("unknown NFS version {k}={v}"))),
                    }
                }
                "sec" => {
                    url.sec = match v {
                        "sys" => Sec::Sys,
                        "krb5" => Sec::Krb5,
                        "krb5i" => Sec::Krb5i,
                        "krb5p" => Sec::Krb5p,
                        _ => return Err(bad(&format!("unknown security flavor sec={v}"))),
                    }
                }
                // libnfs's: the NFS port (as :port) and MOUNT's.
                "nfsport" | "mountport" => {
                    let n = match v.parse::<u16>() {
                        Ok(n) if n > 0 => n,
                        _ => return Err(bad(&format!("{k}={v} is not a port"))),
                    };
                    if k == "nfsport" {
                        url.port = n;
                    } else {
                        url.mountport = Some(n);
                    }
                }
                "uid" | "gid" => {
                    let n: u32 = v
                        .parse()
                        .map_err(|_| bad(&format!("{k}={v} is not a number")))?;
                    if k == "uid" {
                        url.uid = Some(n);
                    } else {
                        url.gid = Some(n);
                    }
                }
                "nconnect" | "timeo" | "retrans" => {
                    let n: u32 = v
                        .parse()
                        .map_err(|_| bad(&format!("{k}={v} is not a number")))?;
                    let t = &mut url.transport;
                    match k {
                        "nconnect" if (1..=16).contains(&n) => {
                            t.nconnect = n as u8;
                            t.nconnect_set = true;
                        }
                        "nconnect" => return Err(bad(&format!("nconnect={v}: 1 to 16"))),
                        // At most the 600 s a retry may wait.
                        "timeo" if (1..=6000).contains(&n) => t.timeo = n,
                        "timeo" => return Err(bad(&format!("timeo={v}: 1 to 6000 deciseconds"))),
                        _ => t.retrans = n.min(100),
                    }
                }
                "xprtsec" => match v {
                    "none" => tls = None,
                    "tls" | "mtls" => {
                        tls.get_or_insert_with(TlsUrl::default).mtls = v == "mtls";
                    }
                    _ => return Err(bad(&format!("xprtsec={v}: expected none, tls or mtls"))),
                },
                "tls-ca" => tls_files.0 = Some(v.to_string()),
                "tls-cert" => tls_files.1 = Some(v.to_string()),
                "tls-key" => tls_files.2 = Some(v.to_string()),
                "insecure" => {
                    tls_files.3 = match v {
                        "1" | "true" | "yes" => true,
                        "0" | "false" | "no" => false,
                        _ => return Err(bad(&format!("{k}={v}: expected 1 or 0"))),
                    }
                }
                "hard" | "soft" => {
                    let on = match v {
                        "1" | "true" | "yes" => true,
                        "0" | "false" | "no" => false,
                        _ => return Err(bad(&format!("{k}={v}: expected 1 or 0"))),
                    };
                    url.transport.hard = on == (k == "hard");
                }
                _ => return Err(bad(&format!("unknown query key {k:?}"))),
            }
        }
        if let Some(t) = &mut tls {
            t.ca = tls_files.0;
            t.cert = tls_files.1;
            t.key = tls_files.2;
            t.insecure = tls_files.3;
        } else if tls_files != Default::default() {
            return Err(bad(
                "tls-ca=, tls-cert=, tls-key= and insecure= need xprtsec=tls or mtls",
            ));
        }
        url.tls = tls;
        // Under Kerberos the ticket says who we are.
        if url.sec != Sec::Sys && (url.uid.is_some() || url.gid.is_some()) {
            return Err(bad("uid= and gid= are for sec=sys only"));
        }
        Ok(url)
    }

    /// The same server and options, another path.
    pub fn with_path(&self, path: &str) -> NfsUrl {
        NfsUrl {
            path: normalize(path),
            ..self.clone()
        }
    }

    /// The URL of an entry of this directory.
    pub fn join(&self, name: &str) -> NfsUrl {
        self.with_path(&format!("{}/{name}", self.path))
    }

    /// The path's components.
    pub fn components(&self) -> Vec<&str> {
        self.path.split('/').filter(|c| !c.is_empty()).collect()
    }

    /// The parent directory's URL and the last component; None at the root.
    pub fn split_last(&self) -> Option<(NfsUrl, String)> {
        let mut c = self.components();
        let last = c.pop()?.to_string();
        Some((self.with_path(&c.join("/")), last))
    }

    /// Whether two URLs name the same server with the same identity and
    /// version (so one session serves both).
    pub fn same_server(&self, o: &NfsUrl) -> bool {
        (
            &self.host,
            self.port,
            self.vers,
            self.uid,
            self.gid,
            self.sec,
            self.mountport,
            self.transport,
        ) == (
            &o.host,
            o.port,
            o.vers,
            o.uid,
            o.gid,
            o.sec,
            o.mountport,
            o.transport,
        )
    }

    /// `host:port` for a socket address lookup.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Server and path, without the query: what messages name.
impl fmt::Display for NfsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == DEFAULT_PORT {
            write!(f, "nfs://{host}{}", self.path)
        } else {
            write!(f, "nfs://{host}:{}{}", self.port, self.path)
        }
    }
}

fn split_host_port(a: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or("an IPv6 host needs its closing ']'")?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("[{h}] is not an IPv6 address"));
        }
        match after {
            "" => (h, None),
            p => (
                h,
                Some(
                    p.strip_prefix(':')
                        .ok_or("expected ':port' after the IPv6 host")?,
                ),
            ),
        }
    } else {
        match a.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h, Some(p)),
            Some(_) => return Err("an IPv6 host must be in brackets, e.g. [::1]".into()),
            None => (a, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("bad port {p:?}")),
        },
    };
    Ok((host.to_string(), port))
}

/// "/a//b/./c/" -> "/a/b/c". ".." is kept: the server resolves it (or not).
fn normalize(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

fn percent_decode(p: &str) -> Result<String, String> {
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = p
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape at {:?}", &p[i..]))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the path is not UTF-8 once decoded".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(host: &str, port: u16, path: &str, minor: Option<u32>) -> NfsUrl {
        NfsUrl {
            vers: minor.map(Vers::V4),
            ..NfsUrl::at(host.into(), port, path.into())
        }
    }

    #[test]
    fn tls_keys() {
        let u =
            NfsUrl::parse("nfs://srv/x?xprtsec=mtls&tls-ca=/ca.pem&tls-cert=/c.pem&tls-key=/k.pem")
                .unwrap();
        assert_eq!(
            u.tls,
            Some(TlsUrl {
                mtls: true,
                ca: Some("/ca.pem".into()),
                cert: Some("/c.pem".into()),
                key: Some("/k.pem".into()),
                insecure: false,
            })
        );
        let u = NfsUrl::parse("nfs://srv/x?xprtsec=tls&insecure=1").unwrap();
        assert!(u.tls.as_ref().is_some_and(|t| !t.mtls && t.insecure));
        assert_eq!(NfsUrl::parse("nfs://srv/x?xprtsec=none").unwrap().tls, None);
        for (s, why) in [
            (
                "nfs://srv/x?xprtsec=ssl",
                "xprtsec=ssl: expected none, tls or mtls",
            ),
            ("nfs://srv/x?tls-ca=/ca.pem", "need xprtsec=tls or mtls"),
        ] {
            let e = NfsUrl::parse(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn transport_keys() {
        let u = NfsUrl::parse("nfs://srv/x?nconnect=4&timeo=50&retrans=3&soft=1").unwrap();
        let want = Transport {
            nconnect: 4,
            nconnect_set: true,
            timeo: 50,
            retrans: 3,
            hard: false,
        };
        assert_eq!(u.transport, want);
        assert!(!NfsUrl::parse("nfs://srv/x?soft").unwrap().transport.hard);
        assert!(
            NfsUrl::parse("nfs://srv/x?soft=1&hard")
                .unwrap()
                .transport
                .hard
        );
        assert!(!NfsUrl::parse("nfs://srv/x?hard=0").unwrap().transport.hard);
        assert_eq!(
            NfsUrl::parse("nfs://srv/x").unwrap().transport,
            Transport::default()
        );
        let a = NfsUrl::parse("nfs://srv/x?nconnect=2").unwrap();
        assert!(!a.same_server(&NfsUrl::parse("nfs://srv/x").unwrap()));
    }

    #[test]
    fn good_urls() {
        let with_ids = NfsUrl {
            uid: Some(1000),
            gid: Some(50),
            ..url("srv", 2049, "/exp/f", Some(1))
        };
        let cases: &[(&str, NfsUrl)] = &[
            ("nfs://srv/exp/f", url("srv", 2049, "/exp/f", None)),
            ("nfs://srv", url("srv", 2049, "/", None)),
            ("nfs://srv/", url("srv", 2049, "/", None)),
            ("nfs://srv:20490/a/", url("srv", 20490, "/a", None)),
            ("nfs://srv//a/./b//", url("srv", 2049, "/a/b", None)),
            (
                "nfs://10.0.0.1:111/x?vers=4.1",
                url("10.0.0.1", 111, "/x", Some(1)),
            ),
            ("nfs://[::1]/x?vers=4.2", url("::1", 2049, "/x", Some(2))),
            ("nfs://srv/x?vers=4.0", url("srv", 2049, "/x", Some(0))),
            (
                "nfs://srv/x?vers=4",
                NfsUrl {
                    vers: Some(Vers::V4Any),
                    ..url("srv", 2049, "/x", None)
                },
            ),
            ("nfs://[fe80::1]:2050/", url("fe80::1", 2050, "/", None)),
            ("nfs://h/a%20b?sec=sys", url("h", 2049, "/a b", None)),
            ("nfs://srv/exp/f?vers=4.1&sec=sys&uid=1000&gid=50", with_ids),
            ("nfs://srv/x?version=4.1&", url("srv", 2049, "/x", Some(1))),
            (
                "nfs://srv//x?version=3&nfsport=2050&mountport=2051&uid=0",
                NfsUrl {
                    vers: Some(Vers::V3),
                    uid: Some(0),
                    mountport: Some(2051),
                    ..url("srv", 2050, "/x", None)
                },
            ),
            (
                "nfs://srv/x?vers=3&uid=0",
                NfsUrl {
                    vers: Some(Vers::V3),
                    uid: Some(0),
                    ..url("srv", 2049, "/x", None)
                },
            ),
            (
                "nfs://srv/x?sec=krb5",
                NfsUrl {
                    sec: Sec::Krb5,
                    ..url("srv", 2049, "/x", None)
                },
            ),
            (
                "nfs://srv/x?sec=krb5i&vers=4.2",
                NfsUrl {
                    sec: Sec::Krb5i,
                    ..url("srv", 2049, "/x", Some(2))
                },
            ),
            (
                "nfs://srv/x?sec=krb5p",
                NfsUrl {
                    sec: Sec::Krb5p,
                    ..url("srv", 2049, "/x", None)
                },
            ),
        ];
        for (s, want) in cases {
            assert_eq!(&NfsUrl::parse(s).unwrap(), want, "{s}");
        }
    }

    #[test]
    fn bad_urls_name_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("http://srv/x", "not an nfs:// URL"),
            ("/local/path", "not an nfs:// URL"),
            ("nfs:///x", "no host"),
            ("nfs://srv:0/x", "bad port \"0\""),
            ("nfs://srv:http/x", "bad port \"http\""),
            ("nfs://srv:99999/x", "bad port"),
            ("nfs://::1/x", "must be in brackets"),
            ("nfs://[::1/x", "closing ']'"),
            ("nfs://[nothost]/x", "is not an IPv6 address"),
            ("nfs://[::1]2049/x", "expected ':port'"),
            ("nfs://srv/x?vers=4.3", "unknown NFS version vers=4.3"),
            ("nfs://srv/x?vers=5", "unknown NFS version vers=5"),
            (
                "nfs://srv/x?sec=krb5p&uid=0",
                "uid= and gid= are for sec=sys only",
            ),
            ("nfs://srv/x?sec=none", "unknown security flavor sec=none"),
            ("nfs://srv/x?uid=me", "uid=me is not a number"),
            ("nfs://srv/x?mountport=0", "mountport=0 is not a port"),
            ("nfs://srv/x?nfsport=x", "nfsport=x is not a port"),
            ("nfs://srv/x?gid=-1", "gid=-1 is not a number"),
            ("nfs://srv/x?nconnect=0", "nconnect=0: 1 to 16"),
            ("nfs://srv/x?nconnect=17", "nconnect=17: 1 to 16"),
            ("nfs://srv/x?timeo=0", "timeo=0: 1 to 6000"),
            ("nfs://srv/x?retrans=x", "retrans=x is not a number"),
            ("nfs://srv/x?soft=maybe", "soft=maybe: expected 1 or 0"),
            ("nfs://srv/x?rsize=4096", "unknown query key \"rsize\""),
            ("nfs://srv/x?vers", "query item \"vers\" has no value"),
            ("nfs://srv/a%2", "bad %-escape"),
            ("nfs://srv/a%ff", "not UTF-8"),
        ];
        for (s, want) in cases {
            let e = NfsUrl::parse(s).expect_err(s);
            assert!(e.starts_with(s), "{s}: {e}");
            assert!(e.contains(want), "{s}: {e:?} should say {want:?}");
        }
    }

    #[test]
    fn display_join_and_split() {
        let u = NfsUrl::parse("nfs://[::1]:2050/a/b?vers=4.1&uid=7").unwrap();
        assert_eq!(u.to_string(), "nfs://[::1]:2050/a/b");
        assert_eq!(u.authority(), "[::1]:2050");
        assert_eq!(u.join("c").to_string(), "nfs://[::1]:2050/a/b/c");
        let (parent, last) = u.split_last().unwrap();
        assert_eq!((parent.path.as_str(), last.as_str()), ("/a", "b"));
        assert_eq!(parent.uid, Some(7), "options follow the path");
        assert!(u.same_server(&parent));
        assert!(!u.same_server(&NfsUrl::parse("nfs://[::1]:2050/a").unwrap()));
        let k = NfsUrl::parse("nfs://srv/a?sec=krb5p").unwrap();
        assert!(!k.same_server(&NfsUrl::parse("nfs://srv/a").unwrap()));
        let v3 = NfsUrl::parse("nfs://srv/a?vers=3").unwrap();
        assert!(!v3.same_server(&NfsUrl::parse("nfs://srv/a").unwrap()));
        let root = NfsUrl::parse("nfs://srv").unwrap();
        assert_eq!(root.to_string(), "nfs://srv/");
        assert_eq!(root.split_last(), None);
        assert_eq!(root.join("x").path, "/x");
    }
}
