//! `tarn doctor`'s rules: pure functions of two snapshots taken a window
//! apart. Each finding names its subject (a client, or an export) and the
//! remedy. Each rule is unit-tested here on synthetic snapshots and
//! provoked end to end by a scripted client in crates/tarn/tests
//! (observe.rs; gss_doctor.rs for the Kerberos ones).

mod finding;
pub mod tls;

pub use finding::Finding;

use crate::snapshot::{ClientSnap, Snapshot};

#[derive(Debug, Clone)]
pub struct Thresholds {
    /// GETATTR storm: at least this many GETATTR/s from one client...
    pub getattr_rate: f64,
    /// ...over at least this many distinct files.
    pub distinct_files: u64,
    /// Small synchronous writes: at least this many in the window...
    pub small_sync_writes: u64,
    /// ...making at least this share of the client's WRITEs.
    pub small_sync_share: f64,
    /// A context expiring (or expired) within this many seconds of the window counts as "near expiry".
    pub gss_expiry_margin_s: u64,
    /// Reconnect loop: at least this many connections opened by one client in the window.
    pub reconnects: u64,
    /// Export near full: percent of bytes or inodes in use.
    pub full_pct: f64,
    /// Auth-cache churn: miss ratio over at least `auth_min_lookups` lookups.
    pub auth_miss_ratio: f64,
    pub auth_min_lookups: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            getattr_rate: 100.0,
            distinct_files: 100,
            small_sync_writes: 50,
            small_sync_share: 0.5,
            gss_expiry_margin_s: 600,
            reconnects: 10,
            full_pct: 90.0,
            auth_miss_ratio: 0.5,
            auth_min_lookups: 100,
        }
    }
}

fn delta(a: Option<&ClientSnap>, b: &ClientSnap, f: impl Fn(&ClientSnap) -> u64) -> u64 {
    f(b).saturating_sub(a.map(&f).unwrap_or(0))
}

/// Why a client revalidating attributes holds no delegations (the cure of
/// the attribute storm: a client trusts its cache while it holds one), and
/// the remedy that follows, to be put before the attribute-cache advice.
fn delegation_context(c: &ClientSnap, b: &Snapshot) -> (String, String) {
    let held = c.nfs4.as_ref().map_or(0, |p| p.delegations);
    if held > 0 {
        return (
            format!("it holds {held} delegations (files it does not hold one for are revalidated)"),
            String::new(),
        );
    }
    let off: Vec<&str> = b
        .exports
        .iter()
        .filter(|e| c.exports.contains(&e.id) && e.delegations.as_deref() == Some("none"))
        .map(|e| e.path.as_str())
        .collect();
    if !off.is_empty() {
        let paths = off.join(", ");
        return (
            format!("it holds no delegations: delegations are off for export {paths}"),
            format!(
                "turn delegations on for {paths} (delegations = \"read\" or \"read-write\" in \
                 its export section): a client holding a delegation trusts its cached attributes \
                 and stops asking; or "
            ),
        );
    }
    match &c.nfs4 {
        None => (
            "it holds no delegations: it has no NFSv4 client record here (NFSv3 has no \
             delegations)"
                .into(),
            "mount it with -o vers=4.2 (or 4.1) so the server can delegate files and the client \
             stop revalidating them; or "
                .into(),
        ),
        Some(p) if p.callback_down > 0 && p.callback_up == 0 => (
            "it holds no delegations: its callback path is down, and a delegation is only \
             granted to a client the server can recall it from"
                .into(),
            "let the server reach the client: NFSv4.1+ calls back over the client's own \
             connection (look for a client that did not bind one), NFSv4.0 connects to the \
             address the client gave in SETCLIENTID (a firewall or NAT between them blocks it); \
             or "
            .into(),
        ),
        Some(p) if p.callback_up == 0 => (
            "it holds no delegations: it asked for no callback path (NFSv4.0 without a callback \
             address, or a session without a back channel)"
                .into(),
            "mount it with -o vers=4.2 (or 4.1): the Linux client then asks for a back channel \
             and can be given delegations; or "
                .into(),
        ),
        Some(_) => (
            "it holds no delegations although they are on and its callback path works: other \
             clients write these files (no delegation is granted on a file someone else writes), \
             or the client returned them (Linux keeps at most nfs.delegation_watermark, 5000 by \
             default)"
                .into(),
            String::new(),
        ),
    }
}

/// The findings over the window from `a` to `b` (same server, `a` first).
pub fn diagnose(a: &Snapshot, b: &Snapshot, t: &Thresholds) -> Vec<Finding> {
    let w = Window {
        secs: ((b.unix_ms.saturating_sub(a.unix_ms)) as f64 / 1000.0).max(0.001),
        now_s: b.unix_ms / 1000,
    };
    let mut out = Vec::new();
    for c in &b.clients {
        client_findings(a.client(&c.addr), c, b, t, &w, &mut out);
    }
    auth_churn(a, b, t, &mut out);
    exports_near_full(b, t, &mut out);
    out.extend(self::tls::diagnose(a, b));
    out
}

/// The window's length, and its end in Unix seconds.
struct Window {
    secs: f64,
    now_s: u64,
}

/// One client's findings: a GETATTR storm, small synchronous writes
/// (near its Kerberos context's expiry or not), GSS window drops, a
/// reconnect loop. `p` is the client at the window's start, if it was
/// known then.
fn client_findings(
    p: Option<&ClientSnap>,
    c: &ClientSnap,
    b: &Snapshot,
    t: &Thresholds,
    w: &Window,
    out: &mut Vec<Finding>,
) {
    let (secs, now_s) = (w.secs, w.now_s);
    let subject = format!("client {}", c.addr);
    let calls = delta(p, c, |x| x.calls).max(1);

    // GETATTR storms over many distinct files (the attribute-storm report).
    let getattr = delta(p, c, |x| x.op("GETATTR"));
    let rate = getattr as f64 / secs;
    if rate >= t.getattr_rate && c.getattr_distinct_files >= t.distinct_files {
        let (why, cure) = delegation_context(c, b);
        out.push(Finding {
            kind: "getattr-storm",
            subject: subject.clone(),
            detail: format!(
                "{rate:.0} GETATTR/s over ~{} distinct files ({:.0}% of its calls); {why}",
                c.getattr_distinct_files,
                100.0 * getattr as f64 / calls as f64
            ),
            remedy: format!(
                "{cure}the client revalidates attributes of many files: mount it with a \
                 longer attribute cache (-o actimeo=60, or acregmin/acdirmin), and with -o \
                 nocto if no other client changes these files"
            ),
        });
    }

    // Bursts of small FILE_SYNC writes (the credential-expiry report).
    let small = delta(p, c, |x| x.small_sync_writes);
    let writes = delta(p, c, |x| x.op("WRITE")).max(1);
    if small >= t.small_sync_writes && small as f64 / writes as f64 >= t.small_sync_share {
        let exp = c.gss_ctx_expires_unix;
        // The client's latest GSS context (0: it has none).
        let near = exp != 0 && exp.abs_diff(now_s) <= t.gss_expiry_margin_s;
        let mut detail = format!(
            "{small} small synchronous WRITEs ({:.0}/s, {:.0}% of its writes)",
            small as f64 / secs,
            100.0 * small as f64 / writes as f64
        );
        let mut remedy = String::from(
            "the client writes synchronously in small pieces: look for the 'sync' mount option, \
             applications using O_SYNC/O_DSYNC or fsync after each write, or memory pressure on \
             the client; with Kerberos, an ageing credential makes the Linux client flush \
             synchronously",
        );
        if near {
            if exp >= now_s {
                detail += &format!("; its GSS context expires in {} s", exp - now_s);
            } else {
                detail += &format!("; its GSS context expired {} s ago", now_s - exp);
            }
            remedy = "this started near the expiry of the client's Kerberos context: renew \
                      tickets well before they expire (krb5 renew lifetime, a longer ticket \
                      lifetime, or the client's credential-refresh margin)"
                .into();
        }
        out.push(Finding {
            kind: "small-sync-writes",
            subject: subject.clone(),
            detail,
            remedy,
        });
    }

    // GSS sequence-window drops.
    let drops = delta(p, c, |x| x.gss_dropped_seq_window);
    if drops > 0 {
        out.push(Finding {
            kind: "gss-window-drops",
            subject: subject.clone(),
            detail: format!("{drops} RPCSEC_GSS calls dropped as outside the sequence window"),
            remedy: "the client keeps more calls in flight than the window: raise the server's \
                     advertised GSS window, or lower the client's slot table \
                     (sunrpc.tcp_max_slot_table_entries)"
                .into(),
        });
    }

    // Reconnect loops.
    let opened = delta(p, c, |x| x.connections_opened);
    if opened >= t.reconnects {
        out.push(Finding {
            kind: "reconnect-loop",
            subject: subject.clone(),
            detail: format!(
                "{opened} connections opened in {secs:.1} s ({} open now)",
                c.connections_open
            ),
            remedy: "the client keeps reconnecting: look for calls it gives up on (timeo too \
                     short for the server's latency, dropped calls), a firewall or load \
                     balancer resetting idle connections, or a mount loop in its automounter"
                .into(),
        });
    }
}

/// The auth cache missing most lookups, named after the client missing most.
fn auth_churn(a: &Snapshot, b: &Snapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    let hits = b
        .server
        .auth_cache_hits
        .saturating_sub(a.server.auth_cache_hits);
    let misses = b
        .server
        .auth_cache_misses
        .saturating_sub(a.server.auth_cache_misses);
    let evictions = b
        .server
        .auth_cache_evictions
        .saturating_sub(a.server.auth_cache_evictions);
    if hits + misses >= t.auth_min_lookups
        && misses as f64 / (hits + misses) as f64 >= t.auth_miss_ratio
    {
        let worst = b
            .clients
            .iter()
            .max_by_key(|c| delta(a.client(&c.addr), c, |x| x.auth_cache_misses))
            .filter(|c| c.auth_cache_misses > 0);
        out.push(Finding {
            kind: "auth-cache-churn",
            subject: match worst {
                Some(c) => format!("client {}", c.addr),
                None => "server".into(),
            },
            detail: format!(
                "auth cache missed {misses} of {} lookups, {evictions} evictions",
                hits + misses
            ),
            remedy:
                "credentials are resolved again and again: raise the auth cache's size and TTL, \
                     and check that the client does not use a new credential per call"
                    .into(),
        });
    }
}

/// Exports whose file system is nearly full (bytes or inodes).
fn exports_near_full(b: &Snapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    for e in &b.exports {
        if let Some((bytes, files)) = e.used_pct() {
            if bytes >= t.full_pct || files >= t.full_pct {
                out.push(Finding {
                    kind: "export-near-full",
                    subject: format!("export {}", e.path),
                    detail: format!("{bytes:.0}% of bytes and {files:.0}% of inodes in use"),
                    remedy: "free space or grow the filesystem: clients will get NFS3ERR_NOSPC \
                             and may lose buffered writes"
                        .into(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ExportSnap;
    use crate::FsUsage;

    fn snap(ms: u64, clients: Vec<ClientSnap>) -> Snapshot {
        Snapshot {
            unix_ms: ms,
            clients,
            ..Default::default()
        }
    }

    fn client(addr: &str) -> ClientSnap {
        ClientSnap {
            addr: addr.into(),
            connections_opened: 1,
            connections_open: 1,
            ..Default::default()
        }
    }

    #[test]
    fn healthy_is_silent() {
        let mut c = client("10.0.0.1");
        let a = snap(1_000_000, vec![c.clone()]);
        c.calls += 50;
        c.ops.insert("GETATTR".into(), 40);
        c.getattr_distinct_files = 500;
        c.ops.insert("WRITE".into(), 10);
        c.small_sync_writes = 10;
        let b = snap(1_010_000, vec![c]);
        assert!(diagnose(&a, &b, &Thresholds::default()).is_empty());
    }

    /// A client revalidating 500 files at 1000 GETATTR/s, NFSv4 on export 3.
    fn storm(nfs4: Option<crate::Nfs4Peer>, export_delegations: &str) -> Vec<Finding> {
        let mut c = client("10.0.0.3");
        c.exports = vec![3];
        c.nfs4 = nfs4.clone();
        let a = snap(1_000_000, vec![c.clone()]);
        c.calls += 10_000;
        c.ops.insert("GETATTR".into(), 10_000);
        c.getattr_distinct_files = 500;
        let mut b = snap(1_010_000, vec![c]);
        b.exports.push(ExportSnap {
            id: 3,
            path: "/srv/home".into(),
            delegations: Some(export_delegations.into()),
            ..Default::default()
        });
        let f = diagnose(&a, &b, &Thresholds::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].kind, f[0].subject.as_str()),
            ("getattr-storm", "client 10.0.0.3")
        );
        f
    }

    #[test]
    fn getattr_storm_says_why_the_client_holds_no_delegations() {
        let peer = |delegations, callback_up, callback_down| {
            Some(crate::Nfs4Peer {
                clients: 1,
                delegations,
                callback_up,
                callback_down,
            })
        };
        let f = storm(peer(0, 1, 0), "none");
        assert!(
            f[0].detail
                .contains("delegations are off for export /srv/home"),
            "{}",
            f[0]
        );
        assert!(f[0].remedy.starts_with("turn delegations on for /srv/home"));

        let f = storm(None, "read");
        assert!(f[0].detail.contains("no NFSv4 client record"), "{}", f[0]);
        assert!(f[0].remedy.contains("vers=4.2"));

        let f = storm(peer(0, 0, 1), "read");
        assert!(f[0].detail.contains("callback path is down"), "{}", f[0]);

        let f = storm(peer(0, 0, 0), "read-write");
        assert!(
            f[0].detail.contains("asked for no callback path"),
            "{}",
            f[0]
        );

        let f = storm(peer(0, 1, 0), "read");
        assert!(f[0].detail.contains("other clients write"), "{}", f[0]);
        assert!(f[0].remedy.starts_with("the client revalidates"));

        let f = storm(peer(7, 1, 0), "read");
        assert!(f[0].detail.contains("it holds 7 delegations"), "{}", f[0]);
    }

    #[test]
    fn gss_window_drops_and_expiry_correlation() {
        let mut c = client("10.0.0.9");
        let a = snap(1_000_000, vec![c.clone()]);
        c.gss_dropped_seq_window = 12;
        c.ops.insert("WRITE".into(), 200);
        c.small_sync_writes = 200;
        c.gss_ctx_expires_unix = 1_000 + 120;
        let b = snap(1_010_000, vec![c]);
        let f = diagnose(&a, &b, &Thresholds::default());
        let kinds: Vec<_> = f.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, ["small-sync-writes", "gss-window-drops"]);
        assert!(f[0].detail.contains("GSS context expires in"), "{}", f[0]);
        assert!(f[0].remedy.contains("renew"));
        assert_eq!(f[1].subject, "client 10.0.0.9");
    }

    #[test]
    fn auth_cache_churn_names_the_worst_client() {
        let mut c = client("10.0.0.4");
        let mut a = snap(0, vec![c.clone(), client("10.0.0.5")]);
        a.server.auth_cache_hits = 10;
        c.auth_cache_misses = 900;
        let mut b = snap(10_000, vec![c, client("10.0.0.5")]);
        b.server.auth_cache_hits = 110;
        b.server.auth_cache_misses = 900;
        let f = diagnose(&a, &b, &Thresholds::default());
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].kind, f[0].subject.as_str()),
            ("auth-cache-churn", "client 10.0.0.4")
        );
    }

    #[test]
    fn export_full() {
        let mut b = snap(1000, vec![]);
        b.exports.push(ExportSnap {
            path: "/srv/x".into(),
            usage: Some(FsUsage {
                total_bytes: 100,
                free_bytes: 5,
                avail_bytes: 5,
                total_files: 10,
                free_files: 9,
            }),
            ..Default::default()
        });
        let f = diagnose(&snap(0, vec![]), &b, &Thresholds::default());
        assert_eq!(f[0].kind, "export-near-full");
        assert_eq!(f[0].subject, "export /srv/x");
    }
}
