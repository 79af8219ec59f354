//! The RPCSEC_GSS (Kerberos) and RPC-with-TLS servers from the configuration.

use super::opts::SecOpts;
use super::LOG;
use crate::config::Config;
use crate::keytab;
use std::sync::Arc;
use tracing::{info, warn};

/// The RPC-with-TLS state: from --tls-cert/--tls-key/--tls-client-ca,
/// else the config's [tls]. Exports that require TLS without it are an
/// error (no client could use them).
pub(crate) fn tls_server(
    cfg: &mut Config,
    sec: &SecOpts,
    from_file: bool,
) -> Result<Option<Arc<rpc::tls::TlsServer>>, String> {
    if let Some(list) = &sec.xprtsec {
        if from_file {
            return Err(
                "--xprtsec is for the default export: with --config, set `xprtsec` per export"
                    .into(),
            );
        }
        let mut v = Vec::new();
        for x in list.split(',').map(str::trim) {
            let x: rpc::tls::XprtSec = x.parse().map_err(|e| format!("--xprtsec {e}"))?;
            if !v.contains(&x) {
                v.push(x);
            }
        }
        for e in &mut cfg.exports {
            e.xprtsec = v.clone();
        }
    }
    let files = match (&sec.tls_cert, &sec.tls_key) {
        (Some(cert), Some(key)) => Some(rpc::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: sec
                .tls_client_ca
                .clone()
                .or_else(|| cfg.tls.as_ref().and_then(|t| t.client_ca.clone())),
        }),
        (None, None) => {
            if sec.tls_client_ca.is_some() {
                return Err("--tls-client-ca needs --tls-cert and --tls-key".into());
            }
            cfg.tls.clone()
        }
        _ => return Err("--tls-cert and --tls-key go together".into()),
    };
    let Some(files) = files else {
        if let Some(e) = cfg
            .exports
            .iter()
            .find(|e| !e.xprtsec.contains(&rpc::tls::XprtSec::None))
        {
            return Err(format!(
                "export {} requires TLS (xprtsec) but no certificate is configured (--tls-cert/--tls-key or [tls])",
                e.path.display()
            ));
        }
        return Ok(None);
    };
    if files.client_ca.is_none() {
        if let Some(e) = cfg
            .exports
            .iter()
            .find(|e| e.xprtsec == [rpc::tls::XprtSec::Mtls])
        {
            warn!(target: LOG, export = %e.path.display(), "export accepts only mtls but no client CA is configured (--tls-client-ca): no client can use it");
        }
    }
    let t = rpc::tls::TlsServer::new(files.clone())?;
    rpc::tls_events::global().set_server(rpc::tls_events::ServerTls::of(&files));
    log_identity_rules(&cfg.tls_identities, &t);
    t.set_identities(cfg.tls_identities.clone());
    let ktls = t.set_ktls(sec.tls_ktls.or(cfg.tls_ktls).unwrap_or_default());
    // The one line that says why connections stay in user space, if they do
    // (the metric tarn_tls_connections counts each path).
    info!(target: LOG, cert = %files.cert.display(), client_ca = ?files.client_ca, ktls = %ktls.mode(), "RPC-with-TLS enabled (TLS 1.3, ALPN sunrpc; {})", ktls.summary());
    Ok(Some(t))
}

pub(crate) fn log_identity_rules(
    rules: &[rpc::tls_identity::IdentityRule],
    t: &rpc::tls::TlsServer,
) {
    if !rules.is_empty() && t.files().client_ca.is_none() {
        warn!(target: LOG, "[[tls.identity]] is configured but no client CA: no certificate is verified, none is mapped");
    }
    for r in rules {
        info!(target: LOG, r#match = %r.text, uid = r.uid, gid = r.gid, gids = ?r.gids, "TLS identity mapping");
    }
}

/// The RPCSEC_GSS acceptor, when an export accepts a Kerberos flavor:
/// the keytab must exist and hold a usable key, or the server does not start.
pub(crate) fn gss_server(
    cfg: &Config,
    sec: &SecOpts,
) -> Result<Option<Arc<rpc::gss::GssServer>>, String> {
    let krb = cfg
        .exports
        .iter()
        .any(|e| e.sec.iter().any(|f| f.gss_service().is_some()));
    if !krb {
        if sec.keytab.is_some() {
            warn!(target: LOG, "--keytab given but no export accepts krb5, krb5i or krb5p");
        }
        return Ok(None);
    }
    let keytab_arg = match (&sec.keytab, &cfg.gss.keytab) {
        (Some(k), _) => Some(("--keytab", k)),
        (None, Some(k)) => Some(("[gss] keytab", k)),
        (None, None) => None,
    };
    if let Some((what, k)) = keytab_arg {
        if !k.is_file() {
            return Err(format!("{what} {}: no such file", k.display()));
        }
        let abs = k
            .canonicalize()
            .map_err(|e| format!("{what} {}: {e}", k.display()))?;
        // MIT reads the acceptor keytab from here; set before any thread starts.
        std::env::set_var("KRB5_KTNAME", format!("FILE:{}", abs.display()));
    }
    let keytab = std::env::var("KRB5_KTNAME").unwrap_or_else(|_| "/etc/krb5.keytab".into());
    let services = keytab::check(&keytab)?;
    if sec.gss_window == 0 {
        return Err("--gss-window must be at least 1".into());
    }
    let mut map = server::principal::PrincipalMap {
        principals: cfg.gss.principals.clone(),
        ..Default::default()
    };
    if cfg.gss.machines_anonymous {
        map.machine = None;
    }
    map.local_realms = match &cfg.gss.local_realms {
        Some(r) => r.clone(),
        None => server::principal::default_realm().into_iter().collect(),
    };
    if map.local_realms.is_empty() {
        warn!(target: LOG, "no default_realm in krb5.conf and no [gss] local_realms: user@ANY-REALM maps to the local user");
    }
    let gcfg = rpc::gss::GssConfig {
        window: sec.gss_window,
        max_contexts: cfg.limits.max_gss_contexts,
        // Replays are remembered over 8x the window (rule 4).
        replay_range: sec.gss_window.saturating_mul(8).max(1024),
        map: {
            let map = map.clone();
            Arc::new(move |p| map.map(p))
        },
    };
    let map_realms = map.local_realms;
    let g = rpc::gss::GssServer::new(gcfg).map_err(|e| format!("{e} (keytab {keytab})"))?;
    info!(target: LOG, keytab = %keytab, ?services, window = sec.gss_window, local_realms = ?map_realms, "RPCSEC_GSS enabled (krb5, krb5i, krb5p)");
    Ok(Some(Arc::new(g)))
}
