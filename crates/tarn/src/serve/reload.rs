//! Reloading exports and TLS material on SIGHUP (and `tarn reload`).

use super::security::log_identity_rules;
use super::setup::{build_exports, describe, save_ids, ConfigSource};
use super::LOG;
use crate::config::ExportConfig;
use crate::{admin, sdnotify};
use server::export::{ExportIds, Exports};
use server::live::Live;
use std::path::PathBuf;
use std::sync::Arc;
use tracing::{error, info, warn};

/// Re-reads the configuration (SIGHUP or `tarn reload`), one reload at a time.
#[derive(Clone)]
pub(crate) struct Reloader {
    pub(crate) source: Option<ConfigSource>,
    pub(crate) live: Arc<Live>,
    pub(crate) ids: Arc<std::sync::Mutex<ExportIds>>,
    pub(crate) ids_path: PathBuf,
    /// The exports in force, as configured (for `tarn exports` and the diff).
    pub(crate) current: Arc<std::sync::Mutex<Vec<ExportConfig>>>,
    /// Its `[[tls.identity]]` rules are replaced on reload.
    pub(crate) tls: Option<Arc<rpc::tls::TlsServer>>,
}

impl Reloader {
    /// Blocking. The number of exports now and what changed; on error the
    /// previous configuration stays in force.
    pub(crate) fn reload(&self) -> Result<(usize, Vec<String>), String> {
        let Some(source) = &self.source else {
            return Err("this server was started with DIR, not --config or --exports: there is no file to reload".into());
        };
        let file = source.file().display().to_string();
        let mut current = self.current.lock().unwrap();
        sdnotify::notify("RELOADING=1");
        let r = (|| {
            let cfg = source.load()?;
            let old = self.live.load_full();
            let built = build_exports(&cfg, Some(&old.exports))?;
            let mut ids = self.ids.lock().unwrap();
            let mut next = ids.clone();
            let exports = Exports::with_ids(built, &mut next);
            if next != *ids {
                save_ids(&self.ids_path, &next)?;
                *ids = next;
            }
            self.live.replace(exports, cfg.auth_cache.clone());
            let mut changes = admin::diff(&current, &cfg.exports);
            if let Some(t) = &self.tls {
                if *t.identities() != cfg.tls_identities {
                    changes.push(format!(
                        "TLS identity rules: {} now, {} before (new connections are mapped by them; connections up keep their user)",
                        cfg.tls_identities.len(),
                        t.identities().len()
                    ));
                    log_identity_rules(&cfg.tls_identities, t);
                    t.set_identities(cfg.tls_identities.clone());
                }
            }
            *current = cfg.exports;
            Ok::<_, String>(changes)
        })();
        sdnotify::notify(&format!(
            "READY=1\nSTATUS=serving {} export(s)",
            current.len()
        ));
        match r {
            Ok(changes) => {
                info!(target: LOG, file = %file, exports = current.len(), changes = changes.len(), "configuration reloaded; auth cache flushed");
                for c in &changes {
                    info!(target: LOG, "{c}");
                }
                for e in current.iter() {
                    info!(target: LOG, "now exporting {}", describe(e));
                }
                Ok((current.len(), changes))
            }
            Err(e) => {
                error!(target: LOG, error = %e, "configuration NOT reloaded; the previous one stays in force");
                Err(e)
            }
        }
    }
}

pub(crate) async fn reload_on_hangup(r: Reloader, tls: Option<Arc<rpc::tls::TlsServer>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        warn!(target: LOG, "cannot catch SIGHUP: configuration reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        let r = r.clone();
        let _ = tokio::task::spawn_blocking(move || r.reload()).await;
        if let Some(t) = &tls {
            reload_tls(t);
        }
    }
}

/// SIGHUP without a config file: the TLS certificate and key are read again.
pub(crate) async fn reload_on_hangup_tls(tls: Arc<rpc::tls::TlsServer>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        warn!(target: LOG, "cannot catch SIGHUP: TLS certificate reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        reload_tls(&tls);
    }
}

/// Reads the certificate, key and client CA again: new connections get
/// them, connections up keep theirs. A bad file changes nothing.
pub(crate) fn reload_tls(t: &rpc::tls::TlsServer) {
    match t.reload(None) {
        Ok(()) => {
            rpc::tls_events::global().set_server(rpc::tls_events::ServerTls::of(&t.files()));
            info!(target: LOG, "TLS certificate, key and client CA reloaded")
        }
        Err(e) => {
            error!(target: LOG, error = %e, "TLS files NOT reloaded; the previous ones stay in force")
        }
    }
}
