//! Prometheus / OpenMetrics text exposition through `prometheus-client`: a
//! custom collector over a [`Snapshot`] of the sharded counters.

use crate::snapshot::{CacheSnap, ClientSnap, ExportSnap, LimitSnap, OpSnap, ServerSnap, Snapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt::Error;

#[derive(Debug)]
struct SnapCollector(Snapshot);

type Labels = Vec<(&'static str, String)>;

/// A row's value, which makes its family a counter (whole counts, or
/// seconds) or a gauge.
trait Value {
    const TYPE: MetricType;
    fn put(&self, m: &mut MetricEncoder<'_>) -> Result<(), Error>;
}

macro_rules! counter_values {
    ($($t:ty),*) => {$(
        impl Value for $t {
            const TYPE: MetricType = MetricType::Counter;
            fn put(&self, m: &mut MetricEncoder<'_>) -> Result<(), Error> {
                m.encode_counter::<NoLabelSet, $t, $t>(self, None)
            }
        }
    )*};
}

counter_values!(u64, f64);

impl Value for i64 {
    const TYPE: MetricType = MetricType::Gauge;
    fn put(&self, m: &mut MetricEncoder<'_>) -> Result<(), Error> {
        m.encode_gauge(self)
    }
}

/// A family: its descriptor, then its rows.
fn family<V: Value>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, V)>,
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, V::TYPE)?;
    for (l, v) in rows {
        v.put(&mut m.encode_family(&l)?)?;
    }
    Ok(())
}

/// How a family's rows of type `V` are read from one item `T` (an
/// operation's, a client's, an export's, a cache's or a limit's snapshot,
/// or the server's): one row per item, or one per item and value of the
/// label named first (`By` the values given, `Each` the values the item
/// has seen).
enum Rows<T: 'static, V: 'static> {
    One(fn(&T) -> V),
    By(&'static str, &'static [Split<T, V>]),
    Each(&'static str, fn(&T) -> &[(String, V)]),
}

/// One value of a `By` split: the label's value and the row's.
type Split<T, V> = (&'static str, fn(&T) -> V);

impl<T, V: Copy> Rows<T, V> {
    /// The rows of every item of `items`, labelled by `labels` (and the
    /// split's label after them).
    fn of(&self, items: &[T], labels: &impl Fn(&T) -> Labels) -> Vec<(Labels, V)> {
        let mut out = Vec::new();
        for i in items {
            let (key, split): (&'static str, Vec<(String, V)>) = match self {
                One(f) => {
                    out.push((labels(i), f(i)));
                    continue;
                }
                By(key, split) => (
                    key,
                    split.iter().map(|(v, f)| (v.to_string(), f(i))).collect(),
                ),
                Each(key, seen) => (key, seen(i).to_vec()),
            };
            for (value, n) in split {
                let mut l = labels(i);
                l.push((key, value));
                out.push((l, n));
            }
        }
        out
    }
}

/// A family's type and rows.
enum Get<T: 'static> {
    /// A counter of whole counts.
    Count(Rows<T, u64>),
    /// A counter of seconds.
    Secs(Rows<T, f64>),
    /// A gauge.
    Level(Rows<T, i64>),
}

use Get::{Count, Level, Secs};
use Rows::{By, Each, One};

/// One family of a table: name, help, rows.
type Family<T> = (&'static str, &'static str, Get<T>);

/// The families of `fams` in order, each with the rows of every item of
/// `items`, labelled by `labels`.
fn families<T>(
    enc: &mut DescriptorEncoder,
    fams: &[Family<T>],
    items: &[T],
    labels: impl Fn(&T) -> Labels,
) -> Result<(), Error> {
    for (name, help, get) in fams {
        match get {
            Count(r) => family(enc, name, help, r.of(items, &labels))?,
            Secs(r) => family(enc, name, help, r.of(items, &labels))?,
            Level(r) => family(enc, name, help, r.of(items, &labels))?,
        }
    }
    Ok(())
}

impl Collector for SnapCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), Error> {
        let s = &self.0;
        encode_ops(s, &mut enc)?;
        let cl = |c: &ClientSnap| -> Labels { vec![("client", c.addr.clone())] };
        families(&mut enc, CLIENT, &s.clients, cl)?;
        encode_exports(s, &mut enc)?;
        families(
            &mut enc,
            SERVER,
            std::slice::from_ref(&s.server),
            |_| vec![],
        )?;
        let cl = |c: &CacheSnap| -> Labels { vec![("cache", c.name.clone())] };
        families(&mut enc, CACHE, &s.caches, cl)?;
        let lim = |l: &LimitSnap| -> Labels { vec![("limit", l.name.clone())] };
        families(&mut enc, LIMIT, &s.limits, lim)?;
        family(
            &mut enc,
            "tarn_uptime_seconds",
            "Seconds since the server started",
            [(vec![], s.uptime_s as i64)],
        )?;
        Ok(())
    }
}

/// A usage gauge of the exports: name, help, value.
type Usage = (&'static str, &'static str, fn(&crate::FsUsage) -> u64);

/// The tables of families: one family a line, in the order they are
/// written out.
#[rustfmt::skip]
mod tables {
    use super::*;

    pub(super) static OP_TOTALS: &[Family<OpSnap>] = &[
        ("tarn_op_received_bytes", "Call bytes received per operation", Count(One(|o| o.bytes_in))),
        ("tarn_op_sent_bytes", "Reply bytes sent per operation", Count(One(|o| o.bytes_out))),
        ("tarn_op_queue_seconds", "Time from a call being read to its handler starting", Secs(One(|o| o.queue_ns as f64 / 1e9))),
        ("tarn_op_service_seconds", "Time spent in handlers", Secs(One(|o| o.service_ns as f64 / 1e9))),
        ("tarn_op_in_flight", "Calls executing now", Level(One(|o| o.in_flight))),
    ];

    pub(super) static CLIENT: &[Family<ClientSnap>] = &[
        ("tarn_client_calls", "Calls per client", Count(One(|c| c.calls))),
        ("tarn_client_errors", "Error replies per client", Count(One(|c| c.errors))),
        ("tarn_client_received_bytes", "Call bytes received per client", Count(One(|c| c.bytes_in))),
        ("tarn_client_sent_bytes", "Reply bytes sent per client", Count(One(|c| c.bytes_out))),
        ("tarn_client_queue_seconds", "Queue wait per client", Secs(One(|c| c.queue_ns as f64 / 1e9))),
        ("tarn_client_service_seconds", "Handler time per client", Secs(One(|c| c.service_ns as f64 / 1e9))),
        ("tarn_client_in_flight", "Calls of the client executing now", Level(One(|c| c.in_flight))),
        ("tarn_client_connections", "Connections opened per client (reconnects = this - 1)", Count(One(|c| c.connections_opened))),
        ("tarn_client_connections_open", "Open connections per client", Level(One(|c| c.connections_open))),
        ("tarn_client_getattr_distinct_files", "Estimated distinct files revalidated recently", Level(One(|c| c.getattr_distinct_files as i64))),
        ("tarn_client_sync_writes", "FILE_SYNC/DATA_SYNC WRITEs per client", Count(One(|c| c.sync_writes))),
        ("tarn_client_small_sync_writes", "Synchronous WRITEs under 32 KiB per client", Count(One(|c| c.small_sync_writes))),
        ("tarn_client_gss_dropped_calls", "RPCSEC_GSS calls dropped per client and reason", Count(By("reason", &[("seq_window", |c| c.gss_dropped_seq_window), ("other", |c| c.gss_dropped_other)]))),
    ];

    pub(super) static EXPORT: &[Family<ExportSnap>] = &[
        ("tarn_export_calls", "Calls per export", Count(One(|e| e.calls))),
        ("tarn_export_errors", "Error replies per export", Count(One(|e| e.errors))),
        ("tarn_export_received_bytes", "Call bytes received per export", Count(One(|e| e.bytes_in))),
        ("tarn_export_sent_bytes", "Reply bytes sent per export", Count(One(|e| e.bytes_out))),
    ];

    /// The file system usage of the exports that report it.
    pub(super) static EXPORT_USAGE: &[Usage] = &[
        ("tarn_export_fs_size_bytes", "Size of the export's filesystem", |u| u.total_bytes),
        ("tarn_export_fs_avail_bytes", "Bytes available to users", |u| u.avail_bytes),
        ("tarn_export_fs_files", "Inodes of the export's filesystem", |u| u.total_files),
        ("tarn_export_fs_files_free", "Free inodes", |u| u.free_files),
    ];

    /// The server as a whole: connections, the reply cache, TLS, spliced
    /// reads, NFSv4 slots and callback paths, the auth cache and RPCSEC_GSS
    /// contexts, NFSv4 state (delegations, copies, callbacks), suppressed
    /// logs.
    pub(super) static SERVER: &[Family<ServerSnap>] = &[
        ("tarn_connections_open", "Open connections", Level(One(|v| v.connections_open))),
        ("tarn_connections", "Connections accepted", Count(One(|v| v.connections_total))),
        ("tarn_clients", "Clients in the metrics table", Level(One(|v| v.clients as i64))),
        ("tarn_drc_hits", "Retransmissions answered from the duplicate request cache", Count(One(|v| v.drc_hits))),
        ("tarn_drc_in_progress_drops", "Retransmissions dropped while the original executes", Count(One(|v| v.drc_in_progress))),
        ("tarn_bad_calls", "Records refused before reaching a program", Count(One(|v| v.bad_calls))),
        ("tarn_connections_closed_by_server", "Connections the server closed, by reason: idle, a record begun and not finished in time (stalled_record), replies the client did not read (unread)", Count(By("reason", &[("idle", |v| v.closed_idle), ("stalled_record", |v| v.closed_stalled_record), ("unread", |v| v.closed_unread)]))),
        ("tarn_tls_handshakes", "RPC-with-TLS handshakes done, by the protection given (tls: no client certificate, mtls: a verified one)", Count(By("xprtsec", &[("tls", |v| v.tls_handshakes[0]), ("mtls", |v| v.tls_handshakes[1])]))),
        ("tarn_tls_connections", "RPC-with-TLS connections by where their records are encrypted (ktls: the kernel's TLS ULP, rustls: user space)", Count(By("path", &[("ktls", |v| v.tls_paths[0]), ("user", |v| v.tls_paths[1])]))),
        ("tarn_tls_handshake_failures", "RPC-with-TLS handshakes that failed, by reason (unknown-ca, expired-certificate, no-client-certificate, timeout...)", Count(Each("reason", |v| &v.tls_failures))),
        ("tarn_reading_paused", "Times a connection's calls stopped being read because its unread replies passed the limit", Count(One(|v| v.reading_paused))),
        ("tarn_read_spliced_replies", "READ replies whose data went from the page cache to the socket by splice(2), not copied (--splice-reads)", Count(One(|v| v.read_spliced_replies))),
        ("tarn_read_spliced_bytes", "File data sent by splice(2) in READ replies", Count(One(|v| v.read_spliced_bytes))),
        ("tarn_read_splice_no_pipe", "READs that could have spliced but copied: all pipes in use, or the kernel refused a 1 MiB pipe", Count(One(|v| v.read_splice_no_pipe))),
        ("tarn_slot_replays", "NFSv4.1 retransmissions answered from their slot's reply cache", Count(One(|v| v.slot_replays))),
        ("tarn_nfs4_courteous_clients", "NFSv4 clients whose lease ran out, their state kept until another client needs it", Level(One(|v| v.nfs4_courteous_clients))),
        ("tarn_nfs4_callback_paths", "NFSv4 clients by the state of their callback path (clients that want one)", Level(By("state", &[("up", |v| v.nfs4_callback_paths_up), ("down", |v| v.nfs4_callback_paths_down)]))),
        ("tarn_auth_cache_hits", "Auth cache hits", Count(One(|v| v.auth_cache_hits))),
        ("tarn_auth_cache_misses", "Auth cache misses", Count(One(|v| v.auth_cache_misses))),
        ("tarn_auth_cache_evictions", "Auth cache evictions", Count(One(|v| v.auth_cache_evictions))),
        ("tarn_gss_contexts_live", "Live RPCSEC_GSS contexts", Level(One(|v| v.gss_contexts_live))),
        ("tarn_gss_contexts_created", "RPCSEC_GSS contexts created", Count(One(|v| v.gss_contexts_created))),
        ("tarn_gss_contexts_expired", "RPCSEC_GSS contexts expired", Count(One(|v| v.gss_contexts_expired))),
        ("tarn_gss_dropped_calls", "RPCSEC_GSS calls dropped, by reason", Count(By("reason", &[("seq_window", |v| v.gss_dropped_seq_window), ("bad_checksum", |v| v.gss_dropped_bad_checksum), ("other", |v| v.gss_dropped_other)]))),
        ("tarn_delegations", "NFSv4 delegations, by event", Count(By("event", &[("granted", |v| v.delegations_granted), ("recalled", |v| v.delegations_recalled), ("revoked", |v| v.delegations_revoked)]))),
        ("tarn_async_copies", "NFSv4.2 COPYs run in the background, by event", Count(By("event", &[("started", |v| v.copies_async_started), ("completed", |v| v.copies_async_completed), ("cancelled", |v| v.copies_async_cancelled)]))),
        ("tarn_async_copy_bytes", "Bytes copied by NFSv4.2 COPYs run in the background", Count(One(|v| v.copy_async_bytes))),
        ("tarn_delegations_granted", "NFSv4 delegations granted, by type", Count(By("type", &[("read", |v| v.delegations_granted_read), ("write", |v| v.delegations_granted_write), ("dir", |v| v.delegations_granted_dir)]))),
        ("tarn_dir_delegations_unavailable", "GET_DIR_DELEGATIONs answered GDD4_UNAVAIL, by reason", Count(By("reason", &[("no_callback", |v| v.dir_delegations_unavail_no_callback), ("policy", |v| v.dir_delegations_unavail_policy), ("contention", |v| v.dir_delegations_unavail_contention), ("resource", |v| v.dir_delegations_unavail_resource)]))),
        ("tarn_cb_getattr", "CB_GETATTR calls to write delegation holders, by outcome", Count(By("outcome", &[("sent", |v| v.cb_getattr_sent), ("failed", |v| v.cb_getattr_failed)]))),
        ("tarn_cb_recall_any", "CB_RECALL_ANY calls sent past the delegations' high-water mark", Count(One(|v| v.recall_any_sent))),
        ("tarn_log_suppressed", "Log lines suppressed by the per-client rate limit", Count(One(|v| v.log_suppressed))),
    ];

    pub(super) static CACHE: &[Family<CacheSnap>] = &[
        ("tarn_cache_entries", "Entries per cache", Level(One(|c| c.entries as i64))),
        ("tarn_cache_bytes", "Approximate memory per cache", Level(One(|c| c.bytes as i64))),
    ];

    pub(super) static LIMIT: &[Family<LimitSnap>] = &[
        ("tarn_limit", "Each configured bound's setting", Level(One(|l| l.max as i64))),
        ("tarn_limit_in_use", "Each bound's current use (the largest client's for per-client bounds; all connections' calls for calls_per_connection)", Level(One(|l| l.in_use as i64))),
        ("tarn_limit_reached", "Times each bound was reached (connections refused, reads paused, entries evicted, requests refused)", Count(One(|l| l.reached))),
    ];
}

use tables::*;

/// Per operation: calls, errors (split by the statuses seen), bytes,
/// time, latency histograms.
fn encode_ops(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let op_l =
        |o: &OpSnap| -> Labels { vec![("program", o.program.clone()), ("op", o.op.clone())] };
    let ops = &s.ops;
    family(
        enc,
        "tarn_op_calls",
        "Calls answered, per operation",
        ops.iter().map(|o| (op_l(o), o.calls)),
    )?;
    family(
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
    families(enc, OP_TOTALS, ops, op_l)?;
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

/// Per export: calls, bytes, and the file system's usage.
fn encode_exports(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), Error> {
    let el = |e: &ExportSnap| -> Labels { vec![("export", e.path.clone())] };
    let es = &s.exports;
    families(enc, EXPORT, es, el)?;
    for (name, help, f) in EXPORT_USAGE {
        let rows = es
            .iter()
            .filter_map(|e| e.usage.as_ref().map(|u| (el(e), f(u) as i64)));
        family(enc, name, help, rows)?;
    }
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
        m.server.delegations_granted_dir.fetch_add(6, Relaxed);
        m.server
            .dir_delegations_unavail_no_callback
            .fetch_add(7, Relaxed);
        let t = encode(m.snapshot());
        for line in [
            "tarn_delegations_total{event=\"granted\"} 3",
            "tarn_delegations_granted_total{type=\"read\"} 1",
            "tarn_delegations_granted_total{type=\"write\"} 2",
            "tarn_cb_getattr_total{outcome=\"sent\"} 5",
            "tarn_cb_getattr_total{outcome=\"failed\"} 1",
            "tarn_cb_recall_any_total{} 4",
            "tarn_delegations_granted_total{type=\"dir\"} 6",
            "tarn_dir_delegations_unavailable_total{reason=\"no_callback\"} 7",
        ] {
            assert!(t.contains(line), "{line} in {t}");
        }
    }
}
