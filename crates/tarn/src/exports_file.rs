//! `/etc/exports` (exports(5)) read as Tarn configuration: a pure parser
//! and a mapper to the TOML of `config.rs`, so `tarn import-exports` prints
//! exactly what `tarn serve --exports` runs.
//!
//! What maps: rw/ro, root_squash/no_root_squash/all_squash/no_all_squash,
//! secure/insecure (exports(5)'s default, secure, is written out, as
//! Tarn's own default is insecure), anonuid/anongid,
//! sec=sys:krb5:krb5i:krb5p, xprtsec=none:tls:mtls (RPC-with-TLS; the
//! certificate comes from `--tls-cert`), fsid=0|root (the NFSv4
//! pseudo root: exports below it are mounted relative to it), and clients
//! given as `*`, an address, a CIDR or address/netmask, a host name or
//! `*.domain`.
//!
//! Accepted without a word because they describe what Tarn does anyway:
//! sync, no_subtree_check, crossmnt, nohide, no_wdelay, no_pnfs,
//! and fsid=NUMBER|UUID (Tarn keeps export ids in STATE_DIR/export-ids).
//!
//! Everything else is named with its line number in a warning: options
//! Tarn has no equivalent for (async, subtree_check, hide,
//! netgroups, `?` wildcards, ...) are left out, never guessed at.
//! Warnings go to stderr (or the log) rather than into the TOML, so the
//! printed configuration can be redirected to a file as it is and the same
//! messages appear whether the file is imported or served directly.

use server::export::ClientSpec;
use std::fmt::Write as _;

/// A remark about one line of the exports file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub line: usize,
    pub msg: String,
}

/// The TOML configuration and what did not carry over.
#[derive(Debug, Clone)]
pub struct Converted {
    pub toml: String,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Clone)]
struct Tok {
    text: String,
    line: usize,
}

/// Splits the file into entries (logical lines: `\` joins physical lines)
/// of tokens. Quotes group a token with spaces; `\NNN` is an octal byte.
fn tokenize(src: &str) -> Vec<Vec<Tok>> {
    let b = src.as_bytes();
    let (mut i, mut line) = (0, 1);
    let mut entries = Vec::new();
    let mut cur: Vec<Tok> = Vec::new();
    let continuation = |i: usize| {
        b[i] == b'\\'
            && (b.get(i + 1) == Some(&b'\n')
                || (b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n')))
    };
    let skip_continuation = |i: &mut usize| {
        *i += if b[*i + 1] == b'\r' { 3 } else { 2 };
    };
    while i < b.len() {
        let c = b[i];
        if continuation(i) {
            skip_continuation(&mut i);
            line += 1;
        } else if c == b'\n' {
            if !cur.is_empty() {
                entries.push(std::mem::take(&mut cur));
            }
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else {
            let start = line;
            let mut text = Vec::new();
            let (mut quoted, mut depth) = (false, 0usize);
            while i < b.len() {
                let c = b[i];
                if continuation(i) {
                    skip_continuation(&mut i);
                    line += 1;
                    if !quoted && depth == 0 {
                        break;
                    }
                    continue;
                }
                if c == b'\n' || (!quoted && depth == 0 && c.is_ascii_whitespace()) {
                    break;
                }
                match c {
                    b'"' => quoted = !quoted,
                    b'\\'
                        if i + 3 < b.len()
                            && b[i + 1..i + 4].iter().all(|d| (b'0'..=b'7').contains(d)) =>
                    {
                        let v = b[i + 1..i + 4]
                            .iter()
                            .fold(0u32, |a, d| a * 8 + (d - b'0') as u32);
                        text.push(v as u8);
                        i += 4;
                        continue;
                    }
                    b'(' if !quoted => {
                        depth += 1;
                        text.push(c)
                    }
                    b')' if !quoted => {
                        depth = depth.saturating_sub(1);
                        text.push(c)
                    }
                    // Spaces inside an option list are dropped.
                    c if c.is_ascii_whitespace() && depth > 0 && !quoted => {}
                    c => text.push(c),
                }
                i += 1;
            }
            cur.push(Tok {
                text: String::from_utf8_lossy(&text).into_owned(),
                line: start,
            });
        }
    }
    if !cur.is_empty() {
        entries.push(cur);
    }
    entries
}

/// The options in force for one client.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Opts {
    rw: bool,
    root_squash: bool,
    all_squash: bool,
    anonuid: Option<u32>,
    anongid: Option<u32>,
    /// None: not given (sys).
    sec: Option<Vec<String>>,
    /// None: not given (any of none, tls, mtls).
    xprtsec: Option<Vec<String>>,
    fsid_root: bool,
    /// Calls only from reserved source ports.
    secure: bool,
}

impl Default for Opts {
    fn default() -> Opts {
        // exports(5)'s defaults: ro, root_squash, no_all_squash.
        Opts {
            rw: false,
            root_squash: true,
            all_squash: false,
            anonuid: None,
            anongid: None,
            sec: None,
            xprtsec: None,
            fsid_root: false,
            secure: true,
        }
    }
}

/// Options exports(5) has and Tarn does not, with why they are dropped.
fn unsupported(name: &str) -> Option<&'static str> {
    Some(match name {
        "async" => "Tarn answers stable WRITEs and COMMIT only once data is on disk (as sync)",
        "subtree_check" => "Tarn does not check subtrees: a file handle is valid in its whole export (as no_subtree_check)",
        "hide" => "Tarn shows file systems mounted below an export (as nohide/crossmnt)",
        "wdelay" => "Tarn does not hold writes back to gather them (as no_wdelay)",
        "secure_locks" | "auth_nlm" | "insecure_locks" | "no_auth_nlm" => {
            "Tarn has no separate credential check for NLM lock requests"
        }
        "mountpoint" | "mp" => "Tarn exports the directory whether or not a file system is mounted on it",
        "nordirplus" => "Tarn always answers READDIRPLUS",
        "refer" | "replicas" => "Tarn has no NFSv4 referrals or replicas",
        "pnfs" => "Tarn has no pNFS",
        "security_label" => "Tarn has no NFSv4.2 security labels",
        "acl" | "no_acl" => "Tarn has no such ACL switch",
        _ => return None,
    })
}

fn parse_opts(list: &str, line: usize, o: &mut Opts, warn: &mut Vec<Warning>) {
    for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let mut w = |msg: String| warn.push(Warning { line, msg });
        match (name, value) {
            ("rw", None) => o.rw = true,
            ("ro", None) => o.rw = false,
            ("root_squash", None) => o.root_squash = true,
            ("no_root_squash", None) => o.root_squash = false,
            ("all_squash", None) => o.all_squash = true,
            ("no_all_squash", None) => o.all_squash = false,
            ("secure", None) => o.secure = true,
            ("insecure", None) => o.secure = false,
            ("anonuid" | "anongid", Some(v)) => match v.parse::<u32>() {
                Ok(id) if name == "anonuid" => o.anonuid = Some(id),
                Ok(id) => o.anongid = Some(id),
                Err(_) => w(format!("{opt}: expected a number 0..4294967295; ignored")),
            },
            ("sec", Some(v)) => {
                let (mut list, mut warned) = (Vec::new(), false);
                for f in v.split(':') {
                    warned |= !matches!(f, "sys" | "krb5" | "krb5i" | "krb5p");
                    match f {
                        "sys" | "krb5" | "krb5i" | "krb5p" => {
                            if !list.iter().any(|x| x == f) {
                                list.push(f.to_string())
                            }
                        }
                        "none" => w("sec=none is not supported by Tarn (AUTH_NONE calls are refused); left out (sys if nothing else is left)".into()),
                        other => w(format!("sec={other}: unknown flavor; left out")),
                    }
                }
                if list.is_empty() {
                    if !warned {
                        w(format!("{opt}: no flavor Tarn knows; sys kept"));
                    }
                    o.sec = None;
                } else {
                    o.sec = Some(list);
                }
            }
            ("xprtsec", Some(v)) => {
                // knfsd's spelling: colon-separated, any of none, tls, mtls.
                let mut list: Vec<String> = Vec::new();
                for x in v.split(':') {
                    match x.parse::<rpc::tls::XprtSec>() {
                        Ok(x) if !list.iter().any(|l| l == x.name()) => list.push(x.name().into()),
                        Ok(_) => {}
                        Err(e) => w(format!("xprtsec={e}; left out")),
                    }
                }
                if list.is_empty() {
                    w(format!(
                        "{opt}: no protection Tarn knows; this export will NOT require TLS"
                    ));
                    o.xprtsec = None;
                } else {
                    o.xprtsec = Some(list);
                }
            }
            ("fsid", Some("0" | "root")) => o.fsid_root = true,
            ("fsid", Some(_)) => {}
            (
                "sync" | "no_subtree_check" | "crossmnt" | "nohide" | "no_wdelay" | "no_pnfs",
                None,
            ) => {}
            _ => match unsupported(name) {
                Some(why) => w(format!("{opt}: not supported, ignored: {why}")),
                None => w(format!("{opt}: unknown option, ignored")),
            },
        }
    }
}

/// Turns one exports(5) client into Tarn's spelling, or says why it cannot.
fn client(host: &str) -> Result<String, String> {
    if host == "*" {
        return Ok("*".into());
    }
    if let Some(g) = host.strip_prefix('@') {
        return Err(format!(
            "netgroup @{g}: Tarn has no NIS netgroups; list its hosts or networks instead"
        ));
    }
    if host.starts_with("gss/") {
        return Err(format!(
            "{host}: the old gss/ client syntax; give sec= in the options instead"
        ));
    }
    // address/netmask, as in 10.0.0.0/255.255.0.0.
    let host = match host.split_once('/') {
        Some((a, m)) if m.contains('.') => {
            let mask: std::net::Ipv4Addr =
                m.parse().map_err(|_| format!("{host}: bad netmask {m}"))?;
            let bits = u32::from(mask);
            if bits.leading_ones() + bits.trailing_zeros() != 32 {
                return Err(format!("{host}: netmask {m} is not contiguous"));
            }
            format!("{a}/{}", bits.leading_ones())
        }
        _ => host.to_string(),
    };
    let rest = host.strip_prefix("*.").unwrap_or(&host);
    if rest.contains(['*', '?', '[']) {
        return Err(format!(
            "{host}: Tarn matches only *.domain wildcards; list the hosts or their network instead"
        ));
    }
    host.parse::<ClientSpec>().map(|c| c.to_string())
}

struct Export {
    line: usize,
    path: String,
    rules: Vec<(String, Opts)>,
    sec: Vec<Vec<String>>,
    /// Each client's xprtsec list (None: any).
    xprtsec: Vec<Option<Vec<String>>>,
    fsid_root: bool,
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Converts the text of an exports file. `origin` names it in the output.
pub fn convert(origin: &str, src: &str) -> Converted {
    let mut warn = Vec::new();
    let exports = read_exports(src, &mut warn);
    let root = pseudo_root(&exports, &mut warn);
    let mut out = format!(
        "# Tarn configuration imported from {origin} by `tarn import-exports`.\n\
         # Check it with `tarn check-config FILE`.\n"
    );
    for e in &exports {
        write_export(&mut out, origin, e, root.as_deref(), &mut warn);
    }
    if exports.is_empty() {
        warn.push(Warning {
            line: 1,
            msg: "no exports: Tarn needs at least one".into(),
        });
    }
    warn.sort_by_key(|w| w.line);
    Converted {
        toml: out,
        warnings: warn,
    }
}

/// The exports file's entries, one per path (lines naming a path again
/// add their clients to it).
fn read_exports(src: &str, warn: &mut Vec<Warning>) -> Vec<Export> {
    let mut exports: Vec<Export> = Vec::new();
    for entry in tokenize(src) {
        let line = entry[0].line;
        let path = entry[0].text.clone();
        if !path.starts_with('/') {
            warn.push(Warning {
                line,
                msg: format!("{path:?}: expected an absolute path first; line left out"),
            });
            continue;
        }
        let path = match path.trim_end_matches('/') {
            "" => "/".to_string(),
            p => p.to_string(),
        };
        let mut defaults = Opts::default();
        let mut clients: Vec<(String, usize, Opts)> = Vec::new();
        for t in &entry[1..] {
            if let Some(o) = t.text.strip_prefix('-') {
                parse_opts(o, t.line, &mut defaults, warn);
                continue;
            }
            let (host, opts) = match t.text.split_once('(') {
                Some((h, o)) => (h, Some(o.trim_end_matches(')'))),
                None => (t.text.as_str(), None),
            };
            let mut o = defaults.clone();
            if let Some(list) = opts {
                parse_opts(list, t.line, &mut o, warn);
            }
            let host = if host.is_empty() {
                warn.push(Warning {
                    line: t.line,
                    msg: format!("({}) has no host before it: it applies to everyone (*), as exportfs does; a space between a host and its options is a common mistake", opts.unwrap_or("")),
                });
                "*"
            } else {
                host
            };
            clients.push((host.to_string(), t.line, o));
        }
        if clients.is_empty() {
            warn.push(Warning {
                line,
                msg: format!(
                    "{path}: no client given: exported to everyone (*) with the default options, as exportfs does"
                ),
            });
            clients.push(("*".into(), line, defaults.clone()));
        }
        let ex = match exports.iter_mut().position(|e| e.path == path) {
            Some(i) => &mut exports[i],
            None => {
                exports.push(Export {
                    line,
                    path: path.clone(),
                    rules: Vec::new(),
                    sec: Vec::new(),
                    xprtsec: Vec::new(),
                    fsid_root: false,
                });
                exports.last_mut().unwrap()
            }
        };
        for (host, hline, o) in clients {
            let spec = match client(&host) {
                Ok(s) => s,
                Err(e) => {
                    warn.push(Warning {
                        line: hline,
                        msg: format!("{e}; this client is left out"),
                    });
                    continue;
                }
            };
            if ex.rules.iter().any(|(c, _)| *c == spec) {
                warn.push(Warning {
                    line: hline,
                    msg: format!("{path}: client {spec} listed twice; the first wins"),
                });
                continue;
            }
            ex.fsid_root |= o.fsid_root;
            let sec = o.sec.clone().unwrap_or_else(|| vec!["sys".into()]);
            if !ex.sec.contains(&sec) {
                ex.sec.push(sec);
            }
            if !ex.xprtsec.contains(&o.xprtsec) {
                ex.xprtsec.push(o.xprtsec.clone());
            }
            ex.rules.push((spec, o));
        }
    }
    exports
}

/// The NFSv4 pseudo root (fsid=0): it is mounted as "/", exports below it
/// relative to it, as Linux does.
fn pseudo_root(exports: &[Export], warn: &mut Vec<Warning>) -> Option<String> {
    let roots: Vec<(usize, String)> = exports
        .iter()
        .filter(|e| e.fsid_root)
        .map(|e| (e.line, e.path.clone()))
        .collect();
    if roots.len() > 1 {
        for (l, p) in &roots[1..] {
            warn.push(Warning {
                line: *l,
                msg: format!(
                    "{p}: fsid=0 again (the first is {}); only the first is the NFSv4 root",
                    roots[0].1
                ),
            });
        }
    }
    roots.first().map(|r| r.1.clone())
}

/// One `[[export]]` table: path, pseudo path, sec and xprtsec (the
/// union of its clients'), and its rules.
fn write_export(
    out: &mut String,
    origin: &str,
    e: &Export,
    root: Option<&str>,
    warn: &mut Vec<Warning>,
) {
    let _ = write!(
        out,
        "\n# {origin}:{}\n[[export]]\npath = {}\n",
        e.line,
        quote(&e.path)
    );
    if let Some(r) = root {
        let pseudo = if r == e.path {
            Some("/".to_string())
        } else if r == "/" {
            None
        } else {
            e.path
                .strip_prefix(r)
                .filter(|rest| rest.starts_with('/'))
                .map(str::to_string)
        };
        match pseudo {
            Some(p) if p != e.path => {
                let _ = writeln!(out, "pseudo = {}", quote(&p));
            }
            Some(_) => {}
            None => warn.push(Warning {
                line: e.line,
                msg: format!(
                    "{}: outside the fsid=0 root {r}: NFSv4 clients reach it only where {} exists inside the root (Linux hides it from them); NFSv3 mounts it by its path",
                    e.path, e.path
                ),
            }),
        }
    }
    // exports(5) gives sec per client; Tarn per export: the union.
    let mut sec: Vec<String> = Vec::new();
    for s in e.sec.iter().flatten() {
        if !sec.contains(s) {
            sec.push(s.clone());
        }
    }
    if e.sec.len() > 1 {
        warn.push(Warning {
            line: e.line,
            msg: format!(
                "{}: clients have different sec= lists; Tarn has one per export, so every client of it may use any of {}",
                e.path,
                sec.join(":")
            ),
        });
    }
    if !sec.is_empty() && sec != ["sys"] {
        let list: Vec<String> = sec.iter().map(|s| quote(s)).collect();
        let _ = writeln!(out, "sec = [{}]", list.join(", "));
    }
    // xprtsec too: one list per export, the union of its clients'
    // (a client without xprtsec= takes any, so the export does).
    let xprtsec: Option<Vec<String>> = if e.xprtsec.iter().any(|x| x.is_none()) {
        None
    } else {
        let mut u: Vec<String> = Vec::new();
        for x in e.xprtsec.iter().flatten().flatten() {
            if !u.contains(x) {
                u.push(x.clone());
            }
        }
        // In knfsd's order, weakest first.
        u.sort_by_key(|x| x.parse::<rpc::tls::XprtSec>().ok());
        Some(u).filter(|u| !u.is_empty() && u.len() < rpc::tls::XprtSec::ALL.len())
    };
    if e.xprtsec.len() > 1 {
        warn.push(Warning {
            line: e.line,
            msg: format!(
                "{}: clients have different xprtsec= lists; Tarn has one per export, so every client of it may use any of {}",
                e.path,
                xprtsec.as_deref().unwrap_or(&["none".into(), "tls".into(), "mtls".into()]).join(":")
            ),
        });
    }
    if let Some(x) = &xprtsec {
        let list: Vec<String> = x.iter().map(|s| quote(s)).collect();
        let _ = writeln!(out, "xprtsec = [{}]", list.join(", "));
    }
    if e.rules.is_empty() {
        out.push_str("rules = []  # no client could be carried over: nobody may mount this\n");
        return;
    }
    write_rules(out, &e.rules);
}

/// An export's `rules = [...]`, one per client in file order.
fn write_rules(out: &mut String, rules: &[(String, Opts)]) {
    out.push_str("rules = [\n");
    for (c, o) in rules {
        let squash = if o.all_squash {
            "all_squash"
        } else if o.root_squash {
            "root_squash"
        } else {
            "no_root_squash"
        };
        let _ = write!(
            out,
            "  {{ client = {}, options = [\"{}\", \"{squash}\"{}]",
            quote(c),
            if o.rw { "rw" } else { "ro" },
            if o.secure { ", \"secure\"" } else { "" }
        );
        if let Some(u) = o.anonuid {
            let _ = write!(out, ", anonuid = {u}");
        }
        if let Some(g) = o.anongid {
            let _ = write!(out, ", anongid = {g}");
        }
        out.push_str(" },\n");
    }
    out.push_str("]\n");
}

/// Reads and converts an exports file, then parses the result as Tarn
/// configuration (errors name the exports file).
pub fn load(file: &std::path::Path) -> Result<(crate::config::Config, Vec<Warning>), String> {
    let src = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let c = convert(&file.display().to_string(), &src);
    let cfg = crate::config::parse(file, &c.toml)
        .map_err(|e| format!("{e} (in the configuration converted from it)"))?;
    Ok((cfg, c.warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn syntax() {
        let src = "# comment\n\"/srv/my data\" 10.0.0.1(rw) \\\n   host.example.com(ro,no_root_squash) # trailing\n\
                   /srv/oct\\040al -rw,all_squash,anonuid=1000 *.lab.example.com 192.168.0.0/255.255.0.0(ro)\n";
        let c = convert("x", src);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert!(c.toml.contains("path = \"/srv/my data\""), "{}", c.toml);
        assert!(c.toml.contains(
            "{ client = \"host.example.com\", options = [\"ro\", \"no_root_squash\", \"secure\"] }"
        ));
        assert!(c.toml.contains("path = \"/srv/oct al\""));
        assert!(c.toml.contains("{ client = \"*.lab.example.com\", options = [\"rw\", \"all_squash\", \"secure\"], anonuid = 1000 }"));
        assert!(c.toml.contains(
            "{ client = \"192.168.0.0/16\", options = [\"ro\", \"all_squash\", \"secure\"], anonuid = 1000 }"
        ));
        assert!(c.toml.contains("# x:4\n"));
    }

    #[test]
    fn unsupported_named_with_line() {
        let c = convert("x", "/a *(rw,async)\n/b \\\n  @ng(rw) h?.x.org\n");
        let lines: Vec<usize> = c.warnings.iter().map(|w| w.line).collect();
        assert_eq!(lines, vec![1, 3, 3], "{:?}", c.warnings);
        assert!(c.warnings[0].msg.starts_with("async: not supported"));
        assert!(c.warnings[1].msg.contains("netgroup"));
    }

    fn corpus() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exports")
    }

    /// Every NAME.exports in tests/exports converts to NAME.toml and the
    /// warnings in NAME.warnings, exactly; the TOML is valid configuration.
    /// TARN_BLESS=1 rewrites the expected files (review the diff).
    #[test]
    fn exports_corpus() {
        let bless = std::env::var_os("TARN_BLESS").is_some();
        let mut n = 0;
        let mut names: Vec<_> = std::fs::read_dir(corpus())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "exports"))
            .collect();
        names.sort();
        for p in names {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let c = convert(&name, &std::fs::read_to_string(&p).unwrap());
            let warnings: String = c
                .warnings
                .iter()
                .map(|w| format!("{}: {}\n", w.line, w.msg))
                .collect();
            let (tp, wp) = (p.with_extension("toml"), p.with_extension("warnings"));
            if bless {
                std::fs::write(&tp, &c.toml).unwrap();
                std::fs::write(&wp, &warnings).unwrap();
            }
            assert_eq!(
                std::fs::read_to_string(&tp).unwrap_or_default(),
                c.toml,
                "{name}"
            );
            assert_eq!(
                std::fs::read_to_string(&wp).unwrap_or_default(),
                warnings,
                "{name}"
            );
            if let Err(e) = crate::config::parse(&tp, &c.toml) {
                assert!(
                    c.warnings.iter().any(|w| w.msg.starts_with("no exports")),
                    "{name}: {e}"
                );
            }
            n += 1;
        }
        assert!(n >= 12, "only {n} exports files in the corpus");
    }
}
