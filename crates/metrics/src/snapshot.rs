//! A point-in-time copy of every counter, summed over shards: what the
//! admin socket sends (JSON), what `/metrics` encodes, and what `tarn
//! stats|top|doctor` subtract from each other over an interval.

use crate::ops::{self, N_STATUS, OP_SLOTS};
use crate::{bucket_le_us, FsUsage, Metrics, Nfs4Peer, BUCKETS, MAX_EXPORTS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub unix_ms: u64,
    pub uptime_s: f64,
    pub metrics_enabled: bool,
    /// Upper bounds (microseconds) of the histogram buckets; the last bucket is +Inf.
    pub buckets_le_us: Vec<u64>,
    pub ops: Vec<OpSnap>,
    pub clients: Vec<ClientSnap>,
    pub exports: Vec<ExportSnap>,
    pub server: ServerSnap,
    pub caches: Vec<CacheSnap>,
    /// Every configurable bound: its setting, use and times reached.
    #[serde(default)]
    pub limits: Vec<LimitSnap>,
    /// Recent TLS handshake failures and refusals, with the server's TLS setting.
    #[serde(default)]
    pub tls: rpc::tls_events::TlsEventsSnap,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LimitSnap {
    pub name: String,
    /// The setting (0: not registered, e.g. no GSS).
    pub max: u64,
    pub in_use: u64,
    pub reached: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpSnap {
    pub program: String,
    pub op: String,
    pub calls: u64,
    pub errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Summed time from the record being read off the socket to its handler starting.
    pub queue_ns: u64,
    /// Summed time in the handler.
    pub service_ns: u64,
    pub in_flight: i64,
    pub errors_by_status: BTreeMap<String, u64>,
    /// Handler time, per bucket (not cumulative).
    pub service_hist: Vec<u64>,
    /// Queue wait plus handler time, per bucket.
    pub rtt_hist: Vec<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientSnap {
    pub addr: String,
    /// The RPCSEC_GSS principals of the client's contexts, newest first,
    /// comma-separated (none with AUTH_SYS only).
    pub principal: Option<String>,
    /// The shared entry of clients beyond the table's cap.
    pub overflow: bool,
    pub calls: u64,
    pub errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub queue_ns: u64,
    pub service_ns: u64,
    pub in_flight: i64,
    pub connections_opened: u64,
    pub connections_open: i64,
    pub ops: BTreeMap<String, u64>,
    /// Estimated distinct file handles revalidated (GETATTR) in the last one or two sketch windows.
    pub getattr_distinct_files: u64,
    pub sync_writes: u64,
    pub small_sync_writes: u64,
    pub gss_dropped_seq_window: u64,
    pub gss_dropped_other: u64,
    pub gss_ctx_expires_unix: u64,
    pub auth_cache_misses: u64,
    /// The ids of the exports the client's calls touched.
    #[serde(default)]
    pub exports: Vec<u32>,
    /// The NFSv4 clients at this address: delegations held, callback
    /// paths (None: no NFSv4 client record, e.g. NFSv3 only).
    #[serde(default)]
    pub nfs4: Option<Nfs4Peer>,
}

impl ClientSnap {
    pub fn op(&self, name: &str) -> u64 {
        self.ops.get(name).copied().unwrap_or(0)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExportSnap {
    pub id: u32,
    pub path: String,
    pub calls: u64,
    pub errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub service_ns: u64,
    pub usage: Option<FsUsage>,
    /// The export's delegation policy: "none", "read" or "read-write".
    #[serde(default)]
    pub delegations: Option<String>,
}

impl ExportSnap {
    /// Percent of bytes and of inodes in use, as `df` counts them.
    pub fn used_pct(&self) -> Option<(f64, f64)> {
        let u = self.usage.as_ref()?;
        let pct = |used: u64, total: u64| {
            if total == 0 {
                0.0
            } else {
                100.0 * used as f64 / total as f64
            }
        };
        let used_b = u.total_bytes.saturating_sub(u.free_bytes);
        let bytes = pct(used_b, used_b + u.avail_bytes);
        let files = pct(u.total_files.saturating_sub(u.free_files), u.total_files);
        Some((bytes, files))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerSnap {
    pub connections_total: u64,
    pub connections_open: i64,
    pub clients: u64,
    pub drc_hits: u64,
    pub drc_in_progress: u64,
    pub bad_calls: u64,
    pub slot_replays: u64,
    #[serde(default)]
    pub closed_idle: u64,
    #[serde(default)]
    pub closed_stalled_record: u64,
    #[serde(default)]
    pub closed_unread: u64,
    /// RPC-with-TLS handshakes done: [tls, mtls].
    #[serde(default)]
    pub tls_handshakes: [u64; 2],
    /// TLS connections by record path: [ktls, rustls].
    #[serde(default)]
    pub tls_paths: [u64; 2],
    /// Failed handshakes by reason (only reasons seen).
    #[serde(default)]
    pub tls_failures: Vec<(String, u64)>,
    #[serde(default)]
    pub reading_paused: u64,
    /// READ replies whose data was spliced, those bytes, and READs that
    /// copied for want of a pipe (`rpc::zero_copy`).
    #[serde(default)]
    pub read_spliced_replies: u64,
    #[serde(default)]
    pub read_spliced_bytes: u64,
    #[serde(default)]
    pub read_splice_no_pipe: u64,
    #[serde(default)]
    pub nfs4_courteous_clients: i64,
    #[serde(default)]
    pub nfs4_callback_paths_up: i64,
    #[serde(default)]
    pub nfs4_callback_paths_down: i64,
    pub auth_cache_hits: u64,
    pub auth_cache_misses: u64,
    pub auth_cache_evictions: u64,
    pub gss_contexts_live: i64,
    pub gss_contexts_created: u64,
    pub gss_contexts_expired: u64,
    pub gss_dropped_seq_window: u64,
    pub gss_dropped_bad_checksum: u64,
    pub gss_dropped_other: u64,
    pub delegations_granted: u64,
    pub delegations_recalled: u64,
    pub delegations_revoked: u64,
    #[serde(default)]
    pub copies_async_started: u64,
    #[serde(default)]
    pub copies_async_completed: u64,
    #[serde(default)]
    pub copies_async_cancelled: u64,
    #[serde(default)]
    pub copy_async_bytes: u64,
    #[serde(default)]
    pub delegations_granted_read: u64,
    #[serde(default)]
    pub delegations_granted_write: u64,
    #[serde(default)]
    pub delegations_granted_dir: u64,
    #[serde(default)]
    pub dir_delegations_unavail_no_callback: u64,
    #[serde(default)]
    pub dir_delegations_unavail_policy: u64,
    #[serde(default)]
    pub dir_delegations_unavail_contention: u64,
    #[serde(default)]
    pub dir_delegations_unavail_resource: u64,
    #[serde(default)]
    pub cb_getattr_sent: u64,
    #[serde(default)]
    pub cb_getattr_failed: u64,
    #[serde(default)]
    pub recall_any_sent: u64,
    pub log_suppressed: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CacheSnap {
    pub name: String,
    pub entries: u64,
    pub bytes: u64,
}

impl Snapshot {
    pub fn client(&self, addr: &str) -> Option<&ClientSnap> {
        self.clients.iter().find(|c| c.addr == addr)
    }
    pub fn op(&self, name: &str) -> Option<&OpSnap> {
        self.ops.iter().find(|o| o.op == name)
    }
}

impl Metrics {
    /// Sums every shard. Walks the client table and, through the export
    /// probe, statvfs's each export: call it off the async workers.
    pub fn snapshot(&self) -> Snapshot {
        let ops_v = self.snap_ops();
        let clients = self.snap_clients();
        let exports = self.snap_exports();
        let server = self.snap_server();
        let caches = self.snap_caches();
        let limits = self.snap_limits();
        Snapshot {
            limits,
            tls: rpc::tls_events::global().snapshot(),
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            uptime_s: self.uptime().as_secs_f64(),
            metrics_enabled: self.enabled(),
            buckets_le_us: (0..BUCKETS - 1).filter_map(bucket_le_us).collect(),
            ops: ops_v,
            clients,
            exports,
            server,
            caches,
        }
    }

    /// Each operation summed over the shards, with its errors by status.
    fn snap_ops(&self) -> Vec<OpSnap> {
        let mut ops_v = Vec::new();
        for slot in 0..OP_SLOTS {
            let Some((program, op)) = self.op_name(slot) else {
                continue;
            };
            let mut o = OpSnap {
                program: program.into(),
                op: op.into(),
                service_hist: vec![0; BUCKETS],
                rtt_hist: vec![0; BUCKETS],
                ..Default::default()
            };
            for sh in self.shards.iter() {
                let c = &sh.ops[slot];
                o.calls += c.n.calls.load(Relaxed);
                o.errors += c.n.errors.load(Relaxed);
                o.bytes_in += c.n.bytes_in.load(Relaxed);
                o.bytes_out += c.n.bytes_out.load(Relaxed);
                o.queue_ns += c.n.queue_ns.load(Relaxed);
                o.service_ns += c.n.service_ns.load(Relaxed);
                o.in_flight += c.n.in_flight.load(Relaxed);
                for b in 0..BUCKETS {
                    o.service_hist[b] += c.service_hist[b].load(Relaxed);
                    o.rtt_hist[b] += c.rtt_hist[b].load(Relaxed);
                }
            }
            for st in 0..N_STATUS {
                let n = self.errors[slot * N_STATUS + st].load(Relaxed);
                if n > 0 {
                    o.errors_by_status
                        .insert(ops::status_name_of(&o.program, st).into(), n);
                }
            }
            ops_v.push(o);
        }
        ops_v
    }

    /// Each client, with its NFSv4 state from the probe.
    fn snap_clients(&self) -> Vec<ClientSnap> {
        let mut clients: Vec<ClientSnap> = self
            .clients
            .list()
            .iter()
            .map(|c| {
                let mut ops_m = BTreeMap::new();
                for slot in 0..OP_SLOTS {
                    let n = c.op_calls(slot);
                    if n > 0 {
                        if let Some((_, name)) = self.op_name(slot) {
                            ops_m.insert(name.to_string(), n);
                        }
                    }
                }
                ClientSnap {
                    addr: if c.overflow {
                        "overflow".into()
                    } else {
                        c.addr.to_string()
                    },
                    principal: Some(c.principals())
                        .filter(|p| !p.is_empty())
                        .map(|p| p.join(",")),
                    overflow: c.overflow,
                    calls: c.sum(|s| &s.n.calls),
                    errors: c.sum(|s| &s.n.errors),
                    bytes_in: c.sum(|s| &s.n.bytes_in),
                    bytes_out: c.sum(|s| &s.n.bytes_out),
                    queue_ns: c.sum(|s| &s.n.queue_ns),
                    service_ns: c.sum(|s| &s.n.service_ns),
                    in_flight: c.in_flight(),
                    connections_opened: c.connections_opened.load(Relaxed),
                    connections_open: c.connections_open.load(Relaxed),
                    ops: ops_m,
                    getattr_distinct_files: c.distinct_files(),
                    sync_writes: c.sum(|s| &s.sync_writes),
                    small_sync_writes: c.sum(|s| &s.small_sync_writes),
                    gss_dropped_seq_window: c.gss_dropped_seq_window.load(Relaxed),
                    gss_dropped_other: c.gss_dropped_other.load(Relaxed),
                    gss_ctx_expires_unix: c.gss_ctx_expires_unix.load(Relaxed),
                    auth_cache_misses: c.auth_cache_misses.load(Relaxed),
                    exports: c.exports(),
                    nfs4: None,
                }
            })
            .collect();
        if let Some(probe) = self.nfs4.lock().unwrap().as_ref() {
            let peers: BTreeMap<String, Nfs4Peer> = probe()
                .into_iter()
                .map(|(ip, p)| (crate::client::canonical(ip).to_string(), p))
                .fold(BTreeMap::new(), |mut m, (a, p)| {
                    let e: &mut Nfs4Peer = m.entry(a).or_default();
                    e.clients += p.clients;
                    e.delegations += p.delegations;
                    e.callback_up += p.callback_up;
                    e.callback_down += p.callback_down;
                    m
                });
            for c in &mut clients {
                c.nfs4 = peers.get(&c.addr).cloned();
            }
        }
        clients
    }

    /// Each export, with its file system's usage from the probe.
    fn snap_exports(&self) -> Vec<ExportSnap> {
        let mut exports = Vec::new();
        if let Some(probe) = self.exports.lock().unwrap().as_ref() {
            for x in probe() {
                let i = (x.id as usize).min(MAX_EXPORTS - 1);
                let mut e = ExportSnap {
                    id: x.id,
                    path: x.path,
                    usage: x.usage,
                    delegations: x.delegations,
                    ..Default::default()
                };
                for sh in self.shards.iter() {
                    let c = &sh.exports[i].0;
                    e.calls += c.calls.load(Relaxed);
                    e.errors += c.errors.load(Relaxed);
                    e.bytes_in += c.bytes_in.load(Relaxed);
                    e.bytes_out += c.bytes_out.load(Relaxed);
                    e.service_ns += c.service_ns.load(Relaxed);
                }
                exports.push(e);
            }
        }
        exports
    }

    /// The server-wide counters.
    fn snap_server(&self) -> ServerSnap {
        let s = &self.server;
        ServerSnap {
            connections_total: s.connections_total.load(Relaxed),
            connections_open: s.connections_open.load(Relaxed),
            clients: self.clients.len() as u64,
            drc_hits: s.drc_hits.load(Relaxed),
            drc_in_progress: s.drc_in_progress.load(Relaxed),
            bad_calls: s.bad_calls.load(Relaxed),
            slot_replays: s.slot_replays.load(Relaxed),
            closed_idle: s.closed_idle.load(Relaxed),
            closed_stalled_record: s.closed_stalled_record.load(Relaxed),
            closed_unread: s.closed_unread.load(Relaxed),
            tls_handshakes: [
                s.tls_handshakes[0].load(Relaxed),
                s.tls_handshakes[1].load(Relaxed),
            ],
            tls_paths: [s.tls_paths[0].load(Relaxed), s.tls_paths[1].load(Relaxed)],
            tls_failures: rpc::tls::FAILURE_REASONS
                .iter()
                .zip(&s.tls_failures)
                .map(|(r, n)| (r.to_string(), n.load(Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            reading_paused: s.reading_paused.load(Relaxed),
            read_spliced_replies: s.read_spliced_replies.load(Relaxed),
            read_spliced_bytes: s.read_spliced_bytes.load(Relaxed),
            read_splice_no_pipe: rpc::zero_copy::no_pipe_total(),
            nfs4_courteous_clients: s.nfs4_courteous_clients.load(Relaxed),
            nfs4_callback_paths_up: s.nfs4_callback_paths_up.load(Relaxed),
            nfs4_callback_paths_down: s.nfs4_callback_paths_down.load(Relaxed),
            auth_cache_hits: s.auth_cache_hits.load(Relaxed),
            auth_cache_misses: s.auth_cache_misses.load(Relaxed),
            auth_cache_evictions: s.auth_cache_evictions.load(Relaxed),
            gss_contexts_live: s.gss_contexts_live.load(Relaxed),
            gss_contexts_created: s.gss_contexts_created.load(Relaxed),
            gss_contexts_expired: s.gss_contexts_expired.load(Relaxed),
            gss_dropped_seq_window: s.gss_dropped_seq_window.load(Relaxed),
            gss_dropped_bad_checksum: s.gss_dropped_bad_checksum.load(Relaxed),
            gss_dropped_other: s.gss_dropped_other.load(Relaxed),
            delegations_granted: s.delegations_granted.load(Relaxed),
            delegations_recalled: s.delegations_recalled.load(Relaxed),
            delegations_revoked: s.delegations_revoked.load(Relaxed),
            copies_async_started: s.copies_async_started.load(Relaxed),
            copies_async_completed: s.copies_async_completed.load(Relaxed),
            copies_async_cancelled: s.copies_async_cancelled.load(Relaxed),
            copy_async_bytes: s.copy_async_bytes.load(Relaxed),
            delegations_granted_read: s.delegations_granted_read.load(Relaxed),
            delegations_granted_write: s.delegations_granted_write.load(Relaxed),
            delegations_granted_dir: s.delegations_granted_dir.load(Relaxed),
            dir_delegations_unavail_no_callback: s
                .dir_delegations_unavail_no_callback
                .load(Relaxed),
            dir_delegations_unavail_policy: s.dir_delegations_unavail_policy.load(Relaxed),
            dir_delegations_unavail_contention: s.dir_delegations_unavail_contention.load(Relaxed),
            dir_delegations_unavail_resource: s.dir_delegations_unavail_resource.load(Relaxed),
            cb_getattr_sent: s.cb_getattr_sent.load(Relaxed),
            cb_getattr_failed: s.cb_getattr_failed.load(Relaxed),
            recall_any_sent: s.recall_any_sent.load(Relaxed),
            log_suppressed: s.log_suppressed.load(Relaxed),
        }
    }

    /// Each cache's entries and bytes from its probe.
    fn snap_caches(&self) -> Vec<CacheSnap> {
        let mut caches = vec![CacheSnap {
            name: "metrics_clients".into(),
            entries: self.clients.len() as u64,
            bytes: self.clients.bytes(),
        }];
        for (name, probe) in self.caches.lock().unwrap().iter() {
            let (entries, bytes) = probe();
            caches.push(CacheSnap {
                name: name.clone(),
                entries,
                bytes,
            });
        }
        caches
    }

    /// Each limit: its bound, its use, how often it was reached.
    fn snap_limits(&self) -> Vec<LimitSnap> {
        let registered = self.limits.lock().unwrap();
        let limits = rpc::observe::Limit::ALL
            .iter()
            .map(|l| {
                let (max, in_use) = registered
                    .iter()
                    .find(|(x, _, _)| x == l)
                    .map_or((0, 0), |(_, max, probe)| (*max, probe()));
                LimitSnap {
                    name: l.name().to_string(),
                    max,
                    in_use,
                    reached: self.server.limit_reached[l.index()].load(Relaxed)
                        + self
                            .reached_probes
                            .lock()
                            .unwrap()
                            .iter()
                            .filter(|(x, _)| x == l)
                            .map(|(_, p)| p())
                            .sum::<u64>(),
                }
            })
            .collect();
        drop(registered);
        limits
    }
}
