//! Prometheus / OpenMetrics text exposition through `prometheus-client`: a
//! custom collector over a [`Snapshot`] of the sharded counters.

use crate::snapshot::Snapshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeExemplarValue, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt::Error;

#[derive(Debug)]
struct SnapCollector(Snapshot);

type Labels = Vec<(&'static str, String)>;

/// A counter family: whole counts (u64) or seconds (f64).
fn counter<V: EncodeCounterValue + EncodeExemplarValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, V)>,
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in rows {
        m.encode_family(&l)?
            .encode_counter::<NoLabelSet, V, V>(&v, None)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, i64)>,
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (l, v) in rows {
        m.encode_family(&l)?.encode_gauge(&v)?;
    }
    Ok(())
}

fn one(v: u64) -> Vec<(Labels, u64)> {
    vec![(vec![], v)]
}

impl Collector for SnapCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), Error> {
        let s = &self.0;
        encode_ops(s, &mut enc)?;
        encode_clients(s, &mut enc)?;
        encode_exports(s, &mut enc)?;
        encode_server(s, &mut enc)?;
        encode_security(s, &mut enc)?;
        encode_state(s, &mut enc)?;
        encode_limits(s, &mut enc)?;
        Ok(())
    }
}

/// Per operation: calls, errors, bytes, time, latency histograms.
fn encode_ops(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let op_l = |o: &crate::snapshot::OpSnap| -> Labels {
        vec![("program", o.program.clone()), ("op", o.op.clone())]
    };
    let ops = &s.ops;
    counter(
        enc,
        "tarn_op_calls",
        "Calls answered, per operation",
        ops.iter().map(|o| (op_l(o), o.calls)),
    )?;
    counter(
        enc,
        "tarn_op_errors",
        "Error replies per operation and status",
        ops.iter().flat_map(|o| {
            o.errors_by_status.iter().map(move |(st, n)| {
                let mut l = op_l(o);
                l.push(("status", st.clone()));
                (l, *n)
            })
        }),
    )?;
    counter(
        enc,
        "tarn_op_received_bytes",
        "Call bytes received per operation",
        ops.iter().map(|o| (op_l(o), o.bytes_in)),
    )?;
    counter(
        enc,
        "tarn_op_sent_bytes",
        "Reply bytes sent per operation",
        ops.iter().map(|o| (op_l(o), o.bytes_out)),
    )?;
    counter(
        enc,
        "tarn_op_queue_seconds",
        "Time from a call being read to its handler starting",
        ops.iter().map(|o| (op_l(o), o.queue_ns as f64 / 1e9)),
    )?;
    counter(
        enc,
        "tarn_op_service_seconds",
        "Time spent in handlers",
        ops.iter().map(|o| (op_l(o), o.service_ns as f64 / 1e9)),
    )?;
    gauge(
        enc,
        "tarn_op_in_flight",
        "Calls executing now",
        ops.iter().map(|o| (op_l(o), o.in_flight)),
    )?;
    for (name, help, rtt) in [
        (
            "tarn_op_service_latency_seconds",
            "Handler time per call",
            false,
        ),
        (
            "tarn_op_rtt_latency_seconds",
            "Queue wait plus handler time per call",
            true,
        ),
    ] {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for o in ops.iter().filter(|o| o.calls > 0) {
            let h = if rtt { &o.rtt_hist } else { &o.service_hist };
            // Per-bucket counts: the encoder makes them cumulative.
            let buckets: Vec<(f64, u64)> = h
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let le = s
                        .buckets_le_us
                        .get(i)
                        .map(|us| *us as f64 / 1e6)
                        .unwrap_or(f64::INFINITY);
                    (le, *n)
                })
                .collect();
            let count = h.iter().sum();
            let sum = if rtt {
                o.service_ns + o.queue_ns
            } else {
                o.service_ns
            } as f64
                / 1e9;
            let l = op_l(o);
            m.encode_family(&l)?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
    }
    Ok(())
}

/// Per client address.
fn encode_clients(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let cl = |c: &crate::snapshot::ClientSnap| -> Labels { vec![("client", c.addr.clone())] };
    let cs = &s.clients;
    counter(
        enc,
        "tarn_client_calls",
        "Calls per client",
        cs.iter().map(|c| (cl(c), c.calls)),
    )?;
    counter(
        enc,
        "tarn_client_errors",
        "Error replies per client",
        cs.iter().map(|c| (cl(c), c.errors)),
    )?;
    counter(
        enc,
        "tarn_client_received_bytes",
        "Call bytes received per client",
        cs.iter().map(|c| (cl(c), c.bytes_in)),
    )?;
    counter(
        enc,
        "tarn_client_sent_bytes",
        "Reply bytes sent per client",
        cs.iter().map(|c| (cl(c), c.bytes_out)),
    )?;
    counter(
        enc,
        "tarn_client_queue_seconds",
        "Queue wait per client",
        cs.iter().map(|c| (cl(c), c.queue_ns as f64 / 1e9)),
    )?;
    counter(
        enc,
        "tarn_client_service_seconds",
        "Handler time per client",
        cs.iter().map(|c| (cl(c), c.service_ns as f64 / 1e9)),
    )?;
    gauge(
        enc,
        "tarn_client_in_flight",
        "Calls of the client executing now",
        cs.iter().map(|c| (cl(c), c.in_flight)),
    )?;
    counter(
        enc,
        "tarn_client_connections",
        "Connections opened per client (reconnects = this - 1)",
        cs.iter().map(|c| (cl(c), c.connections_opened)),
    )?;
    gauge(
        enc,
        "tarn_client_connections_open",
        "Open connections per client",
        cs.iter().map(|c| (cl(c), c.connections_open)),
    )?;
    gauge(
        enc,
        "tarn_client_getattr_distinct_files",
        "Estimated distinct files revalidated recently",
        cs.iter().map(|c| (cl(c), c.getattr_distinct_files as i64)),
    )?;
    counter(
        enc,
        "tarn_client_sync_writes",
        "FILE_SYNC/DATA_SYNC WRITEs per client",
        cs.iter().map(|c| (cl(c), c.sync_writes)),
    )?;
    counter(
        enc,
        "tarn_client_small_sync_writes",
        "Synchronous WRITEs under 32 KiB per client",
        cs.iter().map(|c| (cl(c), c.small_sync_writes)),
    )?;
    counter(
        enc,
        "tarn_client_gss_dropped_calls",
        "RPCSEC_GSS calls dropped per client and reason",
        cs.iter().flat_map(|c| {
            [
                (
                    {
                        let mut l = cl(c);
                        l.push(("reason", "seq_window".into()));
                        l
                    },
                    c.gss_dropped_seq_window,
                ),
                (
                    {
                        let mut l = cl(c);
                        l.push(("reason", "other".into()));
                        l
                    },
                    c.gss_dropped_other,
                ),
            ]
        }),
    )?;
    Ok(())
}

/// Per export: calls, bytes, and the file system's usage.
fn encode_exports(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let el = |e: &crate::snapshot::ExportSnap| -> Labels { vec![("export", e.path.clone())] };
    let es = &s.exports;
    counter(
        enc,
        "tarn_export_calls",
        "Calls per export",
        es.iter().map(|e| (el(e), e.calls)),
    )?;
    counter(
        enc,
        "tarn_export_errors",
        "Error replies per export",
        es.iter().map(|e| (el(e), e.errors)),
    )?;
    counter(
        enc,
        "tarn_export_received_bytes",
        "Call bytes received per export",
        es.iter().map(|e| (el(e), e.bytes_in)),
    )?;
    counter(
        enc,
        "tarn_export_sent_bytes",
        "Reply bytes sent per export",
        es.iter().map(|e| (el(e), e.bytes_out)),
    )?;
    let usage = |f: fn(&crate::FsUsage) -> u64| {
        es.iter()
            .filter_map(move |e| e.usage.as_ref().map(|u| (el(e), f(u) as i64)))
    };
    gauge(
        enc,
        "tarn_export_fs_size_bytes",
        "Size of the export's filesystem",
        usage(|u| u.total_bytes),
    )?;
    gauge(
        enc,
        "tarn_export_fs_avail_bytes",
        "Bytes available to users",
        usage(|u| u.avail_bytes),
    )?;
    gauge(
        enc,
        "tarn_export_fs_files",
        "Inodes of the export's filesystem",
        usage(|u| u.total_files),
    )?;
    gauge(
        enc,
        "tarn_export_fs_files_free",
        "Free inodes",
        usage(|u| u.free_files),
    )?;
    Ok(())
}

/// The server as a whole: connections, the reply cache, TLS, spliced reads, NFSv4 slots and callback paths.
fn encode_server(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let v = &s.server;
    gauge(
        enc,
        "tarn_connections_open",
        "Open connections",
        [(vec![], v.connections_open)],
    )?;
    counter(
        enc,
        "tarn_connections",
        "Connections accepted",
        one(v.connections_total),
    )?;
    gauge(
        enc,
        "tarn_clients",
        "Clients in the metrics table",
        [(vec![], v.clients as i64)],
    )?;
    counter(
        enc,
        "tarn_drc_hits",
        "Retransmissions answered from the duplicate request cache",
        one(v.drc_hits),
    )?;
    counter(
        enc,
        "tarn_drc_in_progress_drops",
        "Retransmissions dropped while the original executes",
        one(v.drc_in_progress),
    )?;
    counter(
        enc,
        "tarn_bad_calls",
        "Records refused before reaching a program",
        one(v.bad_calls),
    )?;
    counter(
        enc,
        "tarn_connections_closed_by_server",
        "Connections the server closed, by reason: idle, a record begun and not finished in time (stalled_record), replies the client did not read (unread)",
        [
            (vec![("reason", "idle".to_string())], v.closed_idle),
            (vec![("reason", "stalled_record".to_string())], v.closed_stalled_record),
            (vec![("reason", "unread".to_string())], v.closed_unread),
        ],
    )?;
    counter(
        enc,
        "tarn_tls_handshakes",
        "RPC-with-TLS handshakes done, by the protection given (tls: no client certificate, mtls: a verified one)",
        [
            (vec![("xprtsec", "tls".to_string())], v.tls_handshakes[0]),
            (vec![("xprtsec", "mtls".to_string())], v.tls_handshakes[1]),
        ],
    )?;
    counter(
        enc,
        "tarn_tls_connections",
        "RPC-with-TLS connections by where their records are encrypted (ktls: the kernel's TLS ULP, rustls: user space)",
        [
            (vec![("path", "ktls".to_string())], v.tls_paths[0]),
            (vec![("path", "user".to_string())], v.tls_paths[1]),
        ],
    )?;
    counter(
        enc,
        "tarn_tls_handshake_failures",
        "RPC-with-TLS handshakes that failed, by reason (unknown-ca, expired-certificate, no-client-certificate, timeout...)",
        v.tls_failures
            .iter()
            .map(|(r, n)| (vec![("reason", r.clone())], *n)),
    )?;
    counter(
        enc,
        "tarn_reading_paused",
        "Times a connection's calls stopped being read because its unread replies passed the limit",
        one(v.reading_paused),
    )?;
    counter(
        enc,
        "tarn_read_spliced_replies",
        "READ replies whose data went from the page cache to the socket by splice(2), not copied (--splice-reads)",
        one(v.read_spliced_replies),
    )?;
    counter(
        enc,
        "tarn_read_spliced_bytes",
        "File data sent by splice(2) in READ replies",
        one(v.read_spliced_bytes),
    )?;
    counter(
        enc,
        "tarn_read_splice_no_pipe",
        "READs that could have spliced but copied: all pipes in use, or the kernel refused a 1 MiB pipe",
        one(v.read_splice_no_pipe),
    )?;
    counter(
        enc,
        "tarn_slot_replays",
        "NFSv4.1 retransmissions answered from their slot's reply cache",
        one(v.slot_replays),
    )?;
    gauge(
        enc,
        "tarn_nfs4_courteous_clients",
        "NFSv4 clients whose lease ran out, their state kept until another client needs it",
        [(vec![], v.nfs4_courteous_clients)],
    )?;
    gauge(
        enc,
        "tarn_nfs4_callback_paths",
        "NFSv4 clients by the state of their callback path (clients that want one)",
        [
            (vec![("state", "up".to_string())], v.nfs4_callback_paths_up),
            (
                vec![("state", "down".to_string())],
                v.nfs4_callback_paths_down,
            ),
        ],
    )?;
    Ok(())
}

/// The auth cache and RPCSEC_GSS contexts.
fn encode_security(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let v = &s.server;
    counter(
        enc,
        "tarn_auth_cache_hits",
        "Auth cache hits",
        one(v.auth_cache_hits),
    )?;
    counter(
        enc,
        "tarn_auth_cache_misses",
        "Auth cache misses",
        one(v.auth_cache_misses),
    )?;
    counter(
        enc,
        "tarn_auth_cache_evictions",
        "Auth cache evictions",
        one(v.auth_cache_evictions),
    )?;
    gauge(
        enc,
        "tarn_gss_contexts_live",
        "Live RPCSEC_GSS contexts",
        [(vec![], v.gss_contexts_live)],
    )?;
    counter(
        enc,
        "tarn_gss_contexts_created",
        "RPCSEC_GSS contexts created",
        one(v.gss_contexts_created),
    )?;
    counter(
        enc,
        "tarn_gss_contexts_expired",
        "RPCSEC_GSS contexts expired",
        one(v.gss_contexts_expired),
    )?;
    counter(
        enc,
        "tarn_gss_dropped_calls",
        "RPCSEC_GSS calls dropped, by reason",
        [
            (
                vec![("reason", "seq_window".to_string())],
                v.gss_dropped_seq_window,
            ),
            (
                vec![("reason", "bad_checksum".to_string())],
                v.gss_dropped_bad_checksum,
            ),
            (vec![("reason", "other".to_string())], v.gss_dropped_other),
        ],
    )?;
    Ok(())
}

/// NFSv4 state (delegations, copies, callbacks), suppressed logs, caches.
fn encode_state(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let v = &s.server;
    counter(
        enc,
        "tarn_delegations",
        "NFSv4 delegations, by event",
        [
            (
                vec![("event", "granted".to_string())],
                v.delegations_granted,
            ),
            (
                vec![("event", "recalled".to_string())],
                v.delegations_recalled,
            ),
            (
                vec![("event", "revoked".to_string())],
                v.delegations_revoked,
            ),
        ],
    )?;
    counter(
        enc,
        "tarn_async_copies",
        "NFSv4.2 COPYs run in the background, by event",
        [
            (
                vec![("event", "started".to_string())],
                v.copies_async_started,
            ),
            (
                vec![("event", "completed".to_string())],
                v.copies_async_completed,
            ),
            (
                vec![("event", "cancelled".to_string())],
                v.copies_async_cancelled,
            ),
        ],
    )?;
    counter(
        enc,
        "tarn_async_copy_bytes",
        "Bytes copied by NFSv4.2 COPYs run in the background",
        one(v.copy_async_bytes),
    )?;
    counter(
        enc,
        "tarn_delegations_granted",
        "NFSv4 delegations granted, by type",
        [
            (
                vec![("type", "read".to_string())],
                v.delegations_granted_read,
            ),
            (
                vec![("type", "write".to_string())],
                v.delegations_granted_write,
            ),
        ],
    )?;
    counter(
        enc,
        "tarn_cb_getattr",
        "CB_GETATTR calls to write delegation holders, by outcome",
        [
            (vec![("outcome", "sent".to_string())], v.cb_getattr_sent),
            (vec![("outcome", "failed".to_string())], v.cb_getattr_failed),
        ],
    )?;
    counter(
        enc,
        "tarn_cb_recall_any",
        "CB_RECALL_ANY calls sent past the delegations' high-water mark",
        one(v.recall_any_sent),
    )?;
    counter(
        enc,
        "tarn_log_suppressed",
        "Log lines suppressed by the per-client rate limit",
        one(v.log_suppressed),
    )?;
    gauge(
        enc,
        "tarn_cache_entries",
        "Entries per cache",
        s.caches
            .iter()
            .map(|c| (vec![("cache", c.name.clone())], c.entries as i64)),
    )?;
    gauge(
        enc,
        "tarn_cache_bytes",
        "Approximate memory per cache",
        s.caches
            .iter()
            .map(|c| (vec![("cache", c.name.clone())], c.bytes as i64)),
    )?;
    Ok(())
}

/// Configured limits, their use, and uptime.
fn encode_limits(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let lim = |l: &crate::snapshot::LimitSnap| -> Labels { vec![("limit", l.name.clone())] };
    gauge(
        enc,
        "tarn_limit",
        "Each configured bound's setting",
        s.limits.iter().map(|l| (lim(l), l.max as i64)),
    )?;
    gauge(
        enc,
        "tarn_limit_in_use",
        "Each bound's current use (the largest client's for per-client bounds; all connections' calls for calls_per_connection)",
        s.limits.iter().map(|l| (lim(l), l.in_use as i64)),
    )?;
    counter(
        enc,
        "tarn_limit_reached",
        "Times each bound was reached (connections refused, reads paused, entries evicted, requests refused)",
        s.limits.iter().map(|l| (lim(l), l.reached)),
    )?;
    gauge(
        enc,
        "tarn_uptime_seconds",
        "Seconds since the server started",
        [(vec![], s.uptime_s as i64)],
    )?;
    Ok(())
}

/// The OpenMetrics text of a snapshot.
pub fn encode(s: Snapshot) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(SnapCollector(s)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).expect("writing to a String");
    out
}

/// The content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Metrics;

    #[test]
    fn encodes() {
        let m = Metrics::new(true);
        m.set_programs(&[&crate::test_tables::NFS3]);
        let c = m.clients.connection_opened("127.0.0.1".parse().unwrap());
        m.call_begin(Some(1), &c);
        m.call_end(
            Some(1),
            &c,
            &crate::CallDone {
                status: 2,
                export: u32::MAX,
                bytes_in: 1,
                bytes_out: 2,
                queue_ns: 3000,
                service_ns: 5000,
            },
            true,
        );
        let t = encode(m.snapshot());
        assert!(
            t.contains("tarn_op_calls_total{program=\"nfs3\",op=\"GETATTR\"} 1"),
            "{t}"
        );
        assert!(t.contains("status=\"NFS3ERR_NOENT\"} 1"), "{t}");
        assert!(t.contains("tarn_op_service_latency_seconds_bucket{le=\"0.000004\",program=\"nfs3\",op=\"GETATTR\"} 0"), "{t}");
        assert!(t.contains("tarn_op_service_latency_seconds_bucket{le=\"inf\",program=\"nfs3\",op=\"GETATTR\"} 1"), "{t}");
        assert!(t.contains("tarn_client_calls_total{client=\"127.0.0.1\"} 1"));
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn delegation_counters() {
        use std::sync::atomic::Ordering::Relaxed;
        let m = Metrics::new(true);
        m.server.delegations_granted.fetch_add(3, Relaxed);
        m.server.delegations_granted_read.fetch_add(1, Relaxed);
        m.server.delegations_granted_write.fetch_add(2, Relaxed);
        m.server.cb_getattr_sent.fetch_add(5, Relaxed);
        m.server.cb_getattr_failed.fetch_add(1, Relaxed);
        m.server.recall_any_sent.fetch_add(4, Relaxed);
        let t = encode(m.snapshot());
        for line in [
            "tarn_delegations_total{event=\"granted\"} 3",
            "tarn_delegations_granted_total{type=\"read\"} 1",
            "tarn_delegations_granted_total{type=\"write\"} 2",
            "tarn_cb_getattr_total{outcome=\"sent\"} 5",
            "tarn_cb_getattr_total{outcome=\"failed\"} 1",
            "tarn_cb_recall_any_total{} 4",
        ] {
            assert!(t.contains(line), "{line} in {t}");
        }
    }
}
