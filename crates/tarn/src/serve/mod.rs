//! `tarn serve`: the server started in steps (settings, the state
//! directory, exports, the protocol services, the RPC server, the admin
//! and metrics endpoints), run until SIGTERM or SIGINT, and stopped.

use crate::config::Config;
use crate::{admin, cluster, rpcbind, sdnotify, secs, statelock};
use reload::{reload_on_hangup, reload_on_hangup_tls, Reloader};
use security::{gss_server, tls_server};
use server::cluster::Etcd;
use server::export::Exports;
use server::live::Live;
use server::{mount::Mount, nfs3::Nfs3, pool::Pool, TarnService};
use setup::{build_config, build_exports, ceph_head_id, describe, load_ids, save_ids};
use signals::StopSignals;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tracing::{error, info, warn};

/// The log target of the server's own lines: `tarn`, as before `serve`
/// had a module of its own (filters and journal lines name it).
const LOG: &str = "tarn";

mod opts;
mod reload;
mod security;
mod setup;
mod signals;

pub(crate) use opts::*;
pub(crate) use setup::{default_state_dir, ConfigSource};

/// What `tarn serve`'s command line says, one field per flag group.
pub(crate) struct ServeArgs {
    pub dir: Option<PathBuf>,
    pub listen: String,
    pub allow: Vec<String>,
    pub config: Option<ConfigSource>,
    pub state_dir: Option<PathBuf>,
    pub observe: ObserveOpts,
    pub locking: LockOpts,
    pub security: SecOpts,
    pub conns: ConnOpts,
    pub limits: LimitOpts,
}

/// Step 1: the configuration with the command line's overrides applied,
/// and the security servers it asks for. Nothing on disk touched yet.
struct Settings {
    cfg: Config,
    addr: SocketAddr,
    state_dir: PathBuf,
    gss: Option<Arc<rpc::gss::GssServer>>,
    tls: Option<Arc<rpc::tls::TlsServer>>,
    metrics_addr: Option<SocketAddr>,
}

fn settings(a: &ServeArgs) -> Result<Settings, String> {
    let (mut cfg, addr, state_dir) = build_config(
        a.dir.clone(),
        a.listen.clone(),
        a.allow.clone(),
        a.config.as_ref(),
        a.state_dir.clone(),
        a.security.sec.clone(),
    )?;
    let l = &a.limits;
    if let Some(n) = l.max_connections {
        cfg.limits.max_connections = n.max(1);
    }
    if let Some(n) = l.max_connections_per_client {
        cfg.limits.max_connections_per_client = n.max(1);
    }
    if let Some(n) = l.max_calls_per_connection {
        cfg.limits.max_calls_per_connection = n.max(1);
    }
    let gss = gss_server(&cfg, &a.security)?;
    let tls = tls_server(&mut cfg, &a.security, a.config.is_some())?;
    if let Some(l) = a.locking.lease_time {
        cfg.nfs4.lease = std::time::Duration::from_secs(l.max(1));
    }
    if let Some(g) = a.locking.grace {
        if !(g >= 0.0 && g.is_finite()) {
            return Err(format!("--grace {g}: expected seconds, 0 or more"));
        }
        cfg.nfs4.grace = std::time::Duration::from_secs_f64(g.clamp(0.0, 86400.0));
    }
    let metrics_addr =
        match &a.observe.metrics {
            Some(m) => Some(m.parse().map_err(|_| {
                format!("--metrics {m:?}: expected ADDR:PORT such as 127.0.0.1:9100")
            })?),
            None => None,
        };
    Ok(Settings {
        cfg,
        addr,
        state_dir,
        gss,
        tls,
        metrics_addr,
    })
}

/// Step 2: what the state directory keeps: the handle key, the CephFS
/// head id, the NSM state.
struct StateDir {
    key: vfs::HandleKey,
    nsm: server::nlm::nsm::Nsm,
    notify_hosts: Vec<(bytes::Bytes, std::net::IpAddr)>,
}

/// The state directory made this server's: the lock returned is held
/// until the server stops.
fn open_state_dir(
    cfg: &Config,
    state_dir: &std::path::Path,
) -> Result<(statelock::StateLock, StateDir), String> {
    std::fs::create_dir_all(state_dir)
        .map_err(|e| format!("cannot create state directory {}: {e}", state_dir.display()))?;
    // Before anything in the directory is read or written.
    let lock = statelock::acquire(state_dir)?;
    info!(target: LOG, lock = %lock.path.display(), "state directory is this server's");
    if cfg.exports.iter().any(|e| e.ceph.is_some()) {
        vfs::cephfs::set_head_id(&ceph_head_id(state_dir)?);
    }
    let key_path = state_dir.join("handle.key");
    let key = vfs::HandleKey::load_or_create(&key_path)
        .map_err(|e| format!("{}: {e}", key_path.display()))?;
    let nsm_dir = state_dir.join("nsm");
    let (nsm, notify_hosts) = server::nlm::nsm::Nsm::start(&nsm_dir)
        .map_err(|e| format!("NSM state in {}: {e}", nsm_dir.display()))?;
    info!(target: LOG,
        state = nsm.state(),
        hosts = notify_hosts.len(),
        "NSM state number; clients to notify of the restart"
    );
    match vfs::local::raise_nofile_limit() {
        Ok(n) if n < 4 * vfs::local::PATH_CACHE_SIZE as u64 => {
            warn!(target: LOG,
                limit = n,
                "few open files allowed (RLIMIT_NOFILE): descriptor caches will thrash"
            )
        }
        Ok(_) => {}
        Err(e) => warn!(target: LOG, error = %e, "cannot raise RLIMIT_NOFILE"),
    }
    Ok((
        lock,
        StateDir {
            key,
            nsm,
            notify_hosts,
        },
    ))
}

/// Step 3: the exports with their stable ids, and the live set every
/// call reads (swapped on reload).
struct LiveExports {
    live: Arc<Live>,
    ids: Arc<std::sync::Mutex<server::export::ExportIds>>,
    ids_path: PathBuf,
}

fn live_exports(cfg: &Config, state_dir: &std::path::Path) -> Result<LiveExports, String> {
    let ids_path = state_dir.join("export-ids");
    let mut ids = load_ids(&ids_path)?;
    let exports = Exports::with_ids(build_exports(cfg, None)?, &mut ids);
    save_ids(&ids_path, &ids)?;
    let names = server::auth_cache::Names::new(
        Arc::new(server::auth_cache::SystemResolver),
        cfg.auth_cache.ttl,
    );
    names.spawn_worker();
    let live = Arc::new(Live::new(exports, names, cfg.auth_cache.clone()));
    Ok(LiveExports {
        live,
        ids: Arc::new(std::sync::Mutex::new(ids)),
        ids_path,
    })
}

/// The auth cache's size and each export's usage, read when scraped.
fn probe_exports(metrics: &Arc<metrics::Metrics>, live: &Arc<Live>) {
    let l = live.clone();
    metrics.add_cache_probe("auth", move || {
        // Entries, and a rough size: a decision per (client, credential).
        let s = l.cache_stats();
        (s.entries, s.entries * 256)
    });
    let l = live.clone();
    metrics.add_cache_probe("cephfs_open_files", move || {
        // Files kept open for READ and WRITE; a libcephfs handle and the
        // inode reference it pins, about 2 KiB each (the data they cache
        // is bounded by Ceph's client_oc_size, not by this).
        let n: u64 = l
            .load()
            .exports
            .iter()
            .filter_map(|e| e.backend.kept_open())
            .sum();
        (n, n * 2048)
    });
    let l = live.clone();
    metrics.set_export_probe(move || {
        l.load()
            .exports
            .iter()
            .map(|e| {
                let usage = e
                    .backend
                    .fsstat(&e.backend.root())
                    .ok()
                    .map(|u| metrics::FsUsage {
                        total_bytes: u.total_bytes,
                        avail_bytes: u.avail_bytes,
                        free_bytes: u.free_bytes,
                        total_files: u.total_files,
                        free_files: u.free_files,
                    });
                metrics::ExportInfo {
                    id: e.id,
                    path: e.path.display().to_string(),
                    usage,
                    delegations: Some(e.delegations.to_string()),
                }
            })
            .collect()
    });
}

pub(crate) fn serve(a: ServeArgs) -> Result<(), String> {
    let s = settings(&a)?;
    // Held until serve returns: another server on this directory waits.
    let (_lock, dir) = open_state_dir(&s.cfg, &s.state_dir)?;
    let LiveExports {
        live,
        ids,
        ids_path,
    } = live_exports(&s.cfg, &s.state_dir)?;
    let metrics = metrics::Metrics::new(!a.observe.no_metrics);
    probe_exports(&metrics, &live);
    let admin_path = a
        .observe
        .admin_socket
        .clone()
        .unwrap_or_else(|| metrics::endpoint::default_socket(&s.state_dir));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(64)
        .thread_name("tarn")
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let stop = StopSignals::install()?;
        let addr = s.addr;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let svc = services(&s, dir, &live, &metrics, &a.locking).await?;
        let server = rpc::Server::with_observer(
            Arc::new(svc),
            rpc_config(&s, &a.conns),
            metrics.clone(),
        );
        tokio::spawn(metrics.clone().run_upkeep());
        tokio::spawn(feed_auth_counters(live.clone(), metrics.clone()));
        let reloader = Reloader {
            source: a.config.clone(),
            live: live.clone(),
            ids,
            ids_path,
            current: Arc::new(std::sync::Mutex::new(s.cfg.exports.clone())),
            tls: s.tls.clone(),
        };
        if a.config.is_some() {
            tokio::spawn(reload_on_hangup(reloader.clone(), s.tls.clone()));
        } else if let Some(t) = s.tls.clone() {
            tokio::spawn(reload_on_hangup_tls(t));
        }
        endpoints(&metrics, &reloader, &admin_path, s.metrics_addr).await?;
        let registered = match rpcbind::register(port).await {
            Ok(()) => {
                info!(target: LOG, port, "registered NFS v3, MOUNT v3, NLM v4 and NSM v1 with rpcbind");
                true
            }
            Err(e) => {
                info!(target: LOG, reason = %e, "not registered with rpcbind: clients mount with port={port},mountport={port},nolock");
                false
            }
        };
        announce(&s.cfg, addr, port, registered);
        let run = {
            let srv = server.clone();
            tokio::spawn(async move { srv.run(listener).await })
        };
        // Listening, admin socket up: systemd may start what depends on us.
        sdnotify::notify(&format!(
            "READY=1\nSTATUS=serving {} export(s) on {addr}",
            s.cfg.exports.len()
        ));
        stop.wait().await;
        sdnotify::notify("STOPPING=1\nSTATUS=stopping: answering calls in flight");
        info!(target: LOG, "stopping: answering calls in flight");
        if tokio::time::timeout(std::time::Duration::from_secs(30), server.shutdown())
            .await
            .is_err()
        {
            warn!(target: LOG, "calls still in flight after 30 s; stopping anyway");
        }
        run.abort();
        sync_exports(&live).await;
        if registered {
            rpcbind::unregister(port).await;
        }
        let _ = std::fs::remove_file(&admin_path);
        info!(target: LOG, "stopped");
        Ok(())
    })
}

/// Step 4: the protocol services: NFSv4 (its client records from the
/// state directory, or etcd in a cluster), NLM and NSM sharing one grace
/// period, NFSv3 and MOUNT; in a cluster, registered in etcd before the
/// first call is served.
async fn services(
    s: &Settings,
    dir: StateDir,
    live: &Arc<Live>,
    metrics: &Arc<metrics::Metrics>,
    locking: &LockOpts,
) -> Result<TarnService, String> {
    let cfg = &s.cfg;
    let key = Arc::new(dir.key);
    let pool = Pool::new(32);
    let locks = Arc::new(server::locks::LockManager::new());
    // The NFSv4 client records: the state directory's file, or, in a
    // cluster, etcd (shared, so another head can take over a failed
    // one's clients).
    let etcd = cfg
        .cluster
        .as_ref()
        .map(|c| Arc::new(Etcd::new(c.etcd.clone(), &c.name)));
    let recovery = match (&etcd, &cfg.cluster) {
        (Some(e), Some(c)) => {
            let (e, node) = (e.clone(), c.node.clone());
            tokio::task::spawn_blocking(move || {
                server::nfs4::recovery::Recovery::with_store(e, &node, 0)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| {
                format!("cluster: cannot read this head's client records from etcd: {e}")
            })?
        }
        _ => {
            let recovery_path = s.state_dir.join("v4clients");
            server::nfs4::recovery::Recovery::open(&recovery_path)
                .map_err(|e| format!("{}: {e}", recovery_path.display()))?
        }
    };
    let cluster_recovery = recovery.clone();
    // One grace period for NLM and NFSv4: both end together.
    let grace = server::grace::Grace::new(std::time::Instant::now(), cfg.nfs4.grace);
    let mut nfs4 = server::nfs4::Nfs4::new(
        live.clone(),
        key.clone(),
        pool.clone(),
        locks.clone(),
        cfg.nfs4.clone(),
        Some(recovery),
        grace,
        Arc::new(server::nfs4::clock::SystemClock),
    );
    if nfs4.state.in_grace(std::time::Instant::now()) {
        info!(target: LOG,
            seconds = cfg.nfs4.grace.as_secs(),
            "NFSv4 grace period: clients that held state may reclaim it"
        );
    }
    nfs4.metrics = Some(metrics.clone());
    nfs4.spawn_reaper();
    nfs4.spawn_local_recalls();
    nfs4.spawn_backend_delegations();
    {
        let state = nfs4.state.clone();
        metrics.add_cache_probe("nfs4_state", move || state.usage());
        metrics.set_nfs4_probe(server::nfs4::peers::probe_fn(
            nfs4.peers.clone(),
            nfs4.state.clone(),
            nfs4.backchannels.clone(),
        ));
    }
    if let Some(g) = s.gss.clone() {
        // A context: MIT's (keys, names) plus the window's bitmaps, about 2 KiB.
        let g2 = g.clone();
        metrics.add_cache_probe("gss_contexts", move || {
            let n = g.live().max(0) as u64;
            (n, n * 2048)
        });
        metrics.add_limit(
            rpc::observe::Limit::GssContexts,
            cfg.limits.max_gss_contexts as u64,
            move || g2.live().max(0) as u64,
        );
    }
    register_state_limits(metrics, &nfs4);
    let callback = server::nlm::RpcCallback {
        port: locking.nlm_callback_port,
        names: cfg
            .cluster
            .as_ref()
            .map(|c| c.service_names.clone())
            .unwrap_or_default(),
        ..Default::default()
    };
    let nlm = server::nlm::Nlm::new(
        locks,
        Arc::new(match (&etcd, &cfg.cluster) {
            // In a cluster, NLM hosts are recorded in etcd too.
            (Some(e), Some(c)) => dir.nsm.share(e.clone(), &c.node),
            _ => dir.nsm,
        }),
        server::nlm::NlmConfig { grace },
        Arc::new(callback),
    );
    // Locks granted here are also taken in backends that keep them for
    // every head (CephFS); releases reach them through this task.
    nlm.share_locks(nfs4.shared.clone());
    nfs4.shared.spawn_flusher();
    if !dir.notify_hosts.is_empty() {
        // NLM hosts held locks: new NFSv4 locks wait for their reclaims.
        nfs4.state.hold_locks_until(grace);
    }
    nlm.notify_restart(dir.notify_hosts);
    if let (Some(e), Some(c)) = (etcd, &cfg.cluster) {
        join_cluster(cfg, e, c, cluster_recovery, &nfs4, &nlm).await?;
    }
    let mut nfs3 = Nfs3::new(live.clone(), key, pool);
    // One write verifier: a storage error seen through either protocol
    // concerns the unstable data of both.
    nfs3.write_verf = nfs4.write_verf.clone();
    nfs3.recall = Some(nfs4.recaller());
    Ok(TarnService {
        nfs3,
        nfs4,
        mount: Mount::new(),
        nlm,
    })
}

/// This head in the cluster: its driver registered in etcd (and in the
/// cluster's grace) before the first call, then run on a thread of its own.
async fn join_cluster(
    cfg: &Config,
    e: Arc<Etcd>,
    c: &crate::config::ClusterConfig,
    recovery: server::nfs4::recovery::Recovery,
    nfs4: &server::nfs4::Nfs4,
    nlm: &Arc<server::nlm::Nlm>,
) -> Result<(), String> {
    let mut d = cluster::Driver::new(
        e.clone(),
        c.node.clone(),
        c.lease,
        cfg.nfs4.grace,
        recovery,
        nfs4.state.clone(),
        nlm.clone(),
        tokio::runtime::Handle::current(),
    );
    let ceph: Vec<vfs::cephfs::CephConfig> =
        cfg.exports.iter().filter_map(|x| x.ceph.clone()).collect();
    if let (false, Some(id)) = (ceph.is_empty(), vfs::cephfs::head_id()) {
        // Another head ends this head's CephFS sessions if this
        // head fails (cluster::Driver::on_lost).
        let (e2, node) = (e.clone(), c.node.clone());
        tokio::task::spawn_blocking(move || e2.set_ceph_id(&node, id))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cluster: etcd: {e}"))?;
        d.on_lost = Some(Box::new(move |node: &str| {
            reset_lost_head(e.clone(), node.to_string(), ceph.clone())
        }));
    }
    let d = tokio::task::spawn_blocking(move || d.step().map(|()| d))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cluster: etcd: {e}"))?;
    info!(target: LOG,
        node = c.node,
        cluster = c.name,
        "cluster: registered in etcd"
    );
    std::thread::Builder::new()
        .name("tarn-cluster".into())
        .spawn(move || d.run())
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Step 5: the RPC server's settings from the configuration and flags.
fn rpc_config(s: &Settings, conns: &ConnOpts) -> rpc::ServerConfig {
    let l = &s.cfg.limits;
    rpc::ServerConfig {
        gss: s.gss.clone(),
        tls: s.tls.clone(),
        idle_timeout: secs(conns.idle_timeout),
        record_timeout: secs(conns.record_timeout),
        max_queued_reply_bytes: conns.max_queued_reply_bytes,
        send_timeout: secs(conns.send_timeout),
        splice_reads: match conns.splice_reads.as_str() {
            "always" => rpc::zero_copy::SpliceReads::Always,
            "never" => rpc::zero_copy::SpliceReads::Never,
            _ => rpc::zero_copy::SpliceReads::Auto,
        },
        max_in_flight: l.max_calls_per_connection,
        drc_per_client: l.drc_entries_per_client,
        drc_max_bytes: l.drc_max_bytes,
        max_connections: l.max_connections,
        max_connections_per_client: l.max_connections_per_client,
        ..Default::default()
    }
}

/// Step 6: the admin socket (tarn stats, top, doctor, exports, reload)
/// and, when asked, the HTTP metrics endpoint.
async fn endpoints(
    metrics: &Arc<metrics::Metrics>,
    reloader: &Reloader,
    admin_path: &std::path::Path,
    metrics_addr: Option<SocketAddr>,
) -> Result<(), String> {
    let r = reloader.clone();
    metrics.add_admin_command("exports", move || {
        let live = r.live.load_full();
        let current = r.current.lock().unwrap();
        admin::exports_json(
            &current,
            |p| live.exports.by_path(p).map(|e| e.id),
            r.source.as_ref().map(|s| s.file()),
        )
    });
    let r = reloader.clone();
    metrics.add_admin_command("reload", move || match r.reload() {
        Ok((n, changes)) => serde_json::json!({
            "source": r.source.as_ref().map(|s| s.file().display().to_string()),
            "exports": n,
            "changes": changes,
        }),
        Err(e) => serde_json::json!({ "error": e }),
    });
    let admin = metrics::endpoint::bind_admin(admin_path).map_err(|e| {
        format!(
            "cannot create the admin socket {}: {e}",
            admin_path.display()
        )
    })?;
    info!(target: LOG, path = %admin_path.display(), "admin socket for tarn stats|top|doctor");
    tokio::spawn(metrics::endpoint::serve_admin(admin, metrics.clone()));
    if let Some(a) = metrics_addr {
        let l = tokio::net::TcpListener::bind(a)
            .await
            .map_err(|e| format!("--metrics: cannot listen on {a}: {e}"))?;
        info!(target: LOG, addr = %a, "metrics on http://{a}/metrics and /status");
        tokio::spawn(metrics::endpoint::serve_http(l, metrics.clone()));
    }
    Ok(())
}

/// One line per export: what is served where, and the mount command.
fn announce(cfg: &Config, addr: SocketAddr, port: u16, registered: bool) {
    for e in &cfg.exports {
        let host = match addr.ip() {
            ip if ip.is_unspecified() => "SERVER".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        // Without rpcbind the client's lockd cannot find NLM: no locking then.
        let nolock = if registered { "" } else { ",nolock" };
        println!(
            "tarn: exporting {} on {addr} (NFSv3, NFSv4.0/4.1/4.2); mount with: mount -t nfs -o vers=4.2,port={port} {host}:{} /mnt  (or vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp{nolock})",
            describe(e),
            e.pseudo
        );
    }
}

/// At shutdown: every export's data made stable.
async fn sync_exports(live: &Arc<Live>) {
    for e in live.load_full().exports.iter() {
        let b = e.backend.clone();
        if let Err(err) = tokio::task::spawn_blocking(move || b.sync_all())
            .await
            .unwrap_or(Err(vfs::FsError::ServerFault))
        {
            error!(target: LOG, export = %e.path.display(), error = %err, "sync at shutdown failed");
        }
    }
}

pub(crate) fn register_state_limits(metrics: &Arc<metrics::Metrics>, nfs4: &server::nfs4::Nfs4) {
    use rpc::observe::Limit;
    use server::nfs4::state::{LIMIT_CLIENTS, LIMIT_LOCKS, LIMIT_OPENS};
    let l = nfs4.state.limits;
    for (limit, max, k) in [
        (Limit::Nfs4Clients, l.max_clients, LIMIT_CLIENTS),
        (Limit::OpensPerClient, l.max_opens_per_client, LIMIT_OPENS),
        (Limit::LocksPerClient, l.max_locks_per_client, LIMIT_LOCKS),
    ] {
        let st = nfs4.state.clone();
        metrics.add_limit_reached_probe(limit, move || st.limit_hits()[k]);
        let st = nfs4.state.clone();
        metrics.add_limit(limit, max as u64, move || match limit {
            Limit::Nfs4Clients => st.counts().0 as u64,
            Limit::OpensPerClient => st.busiest_client().0 as u64,
            _ => st.busiest_client().1 as u64,
        });
    }
    let st = nfs4.state.clone();
    metrics.add_limit(
        Limit::Delegations,
        nfs4.cfg.max_delegations as u64,
        move || st.delegations() as u64,
    );
}

/// A head of the cluster failed: ends its CephFS sessions (named after
/// the id it recorded in etcd) for every CephFS export, so the POSIX locks
/// it held are released now, not when the MDS times the session out, and
/// its clients' reclaims on this head can take them. On its own thread:
/// ending a session takes a round trip to the monitors and the MDS, and
/// the cluster driver must keep its etcd lease meanwhile.
pub(crate) fn reset_lost_head(
    etcd: Arc<Etcd>,
    node: String,
    exports: Vec<vfs::cephfs::CephConfig>,
) {
    let spawned = std::thread::Builder::new()
        .name("tarn-ceph-reset".into())
        .spawn(move || {
            let id = match etcd.ceph_id(&node) {
                Ok(Some(id)) => id,
                Ok(None) => return,
                Err(e) => {
                    warn!(target: LOG, node, error = %e, "cluster: cannot read a failed head's CephFS name; its locks stay until its session times out");
                    return;
                }
            };
            for cfg in exports {
                let t = std::time::Instant::now();
                match vfs::cephfs::reset_head_session(&id, &cfg) {
                    Ok(ended) => info!(target: LOG, node, path = cfg.path, ended, ms = t.elapsed().as_millis() as u64, "cluster: ended a failed head's CephFS session (its locks and capabilities are free)"),
                    Err(e) => warn!(target: LOG, node, path = cfg.path, error = %e, "cluster: cannot end a failed head's CephFS session; its locks stay until it times out"),
                }
            }
        });
    if let Err(e) = spawned {
        warn!(target: LOG, error = %e, "cluster: cannot start a thread to end a failed head's CephFS session");
    }
}

/// Copies the auth cache's counters into the metrics once a second (the
/// cache counts per shard, under locks it already holds, so the request
/// path pays no shared atomic for them).
pub(crate) async fn feed_auth_counters(live: Arc<Live>, m: Arc<metrics::Metrics>) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut t = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        t.tick().await;
        let s = live.cache_stats();
        m.server.auth_cache_hits.store(s.hits, Relaxed);
        m.server.auth_cache_misses.store(s.misses, Relaxed);
        m.server.auth_cache_evictions.store(s.evictions, Relaxed);
    }
}
