//! `tarn stats`, `tarn top` and `tarn doctor`: each takes snapshots from a
//! running server's admin socket and prints what changed between them.

use crate::doctor::{self, Thresholds};
use crate::endpoint::fetch;
use crate::snapshot::Snapshot;
use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

fn secs(a: &Snapshot, b: &Snapshot) -> f64 {
    (b.unix_ms.saturating_sub(a.unix_ms) as f64 / 1000.0).max(0.001)
}

fn ms(ns: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        ns as f64 / n as f64 / 1e6
    }
}

/// nfsiostat-like per-op table of the interval from `a` to `b`.
pub fn stats_table(a: &Snapshot, b: &Snapshot) -> String {
    let dt = secs(a, b);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>10} {:>10} {:>8} {:>13} {:>13} {:>8}",
        "op", "ops/s", "kB/s", "kB/op", "avg RTT (ms)", "avg exe (ms)", "errors"
    );
    let (mut tc, mut tb, mut tq, mut ts, mut te) = (0, 0, 0, 0, 0);
    for o in &b.ops {
        let p = a
            .ops
            .iter()
            .find(|x| x.program == o.program && x.op == o.op);
        let d = |f: fn(&crate::snapshot::OpSnap) -> u64| f(o).saturating_sub(p.map(f).unwrap_or(0));
        let calls = d(|x| x.calls);
        if calls == 0 {
            continue;
        }
        let bytes = d(|x| x.bytes_in) + d(|x| x.bytes_out);
        let (q, s, e) = (d(|x| x.queue_ns), d(|x| x.service_ns), d(|x| x.errors));
        // Operations inside COMPOUNDs are shown under it, not added again.
        let sub = o.program == crate::ops::NFS4_OP_PROGRAM;
        if !sub {
            (tc, tb, tq, ts, te) = (tc + calls, tb + bytes, tq + q, ts + s, te + e);
        }
        let name = if sub {
            format!("  {}", o.op)
        } else {
            o.op.to_string()
        };
        let _ = writeln!(
            out,
            "{:<12} {:>10.1} {:>10.1} {:>8.2} {:>13.3} {:>13.3} {:>8}",
            name,
            calls as f64 / dt,
            bytes as f64 / 1024.0 / dt,
            bytes as f64 / 1024.0 / calls as f64,
            ms(q + s, calls),
            ms(s, calls),
            e
        );
    }
    let _ = writeln!(
        out,
        "{:<12} {:>10.1} {:>10.1} {:>8.2} {:>13.3} {:>13.3} {:>8}",
        "total",
        tc as f64 / dt,
        tb as f64 / 1024.0 / dt,
        if tc == 0 {
            0.0
        } else {
            tb as f64 / 1024.0 / tc as f64
        },
        ms(tq + ts, tc),
        ms(ts, tc),
        te
    );
    out
}

/// Clients ranked by calls per second over the interval from `a` to `b`.
pub fn top_table(a: &Snapshot, b: &Snapshot, limit: usize) -> String {
    let dt = secs(a, b);
    struct Row {
        addr: String,
        calls: u64,
        kin: u64,
        kout: u64,
        rtt: f64,
        errors: u64,
        conns: i64,
        delegs: String,
        callback: &'static str,
        top_op: String,
    }
    let mut rows: Vec<Row> = b
        .clients
        .iter()
        .map(|c| {
            let p = a.client(&c.addr);
            let d = |f: fn(&crate::snapshot::ClientSnap) -> u64| {
                f(c).saturating_sub(p.map(f).unwrap_or(0))
            };
            let calls = d(|x| x.calls);
            let top_op = c
                .ops
                .iter()
                .map(|(k, v)| (k, v - p.map(|p| p.op(k)).unwrap_or(0).min(*v)))
                .max_by_key(|(_, n)| *n)
                .filter(|(_, n)| *n > 0)
                .map(|(k, _)| k.clone())
                .unwrap_or_else(|| "-".into());
            Row {
                addr: match &c.principal {
                    Some(p) => format!("{} ({p})", c.addr),
                    None => c.addr.clone(),
                },
                calls,
                kin: d(|x| x.bytes_in),
                kout: d(|x| x.bytes_out),
                rtt: ms(d(|x| x.queue_ns) + d(|x| x.service_ns), calls),
                errors: d(|x| x.errors),
                conns: c.connections_open,
                // NFSv4 clients only: the delegations they hold, and whether
                // the server can call them back (what delegations need).
                delegs: c
                    .nfs4
                    .as_ref()
                    .map_or("-".into(), |p| p.delegations.to_string()),
                callback: match &c.nfs4 {
                    Some(p) if p.callback_down > 0 => "DOWN",
                    Some(p) if p.callback_up > 0 => "up",
                    _ => "-",
                },
                top_op,
            }
        })
        .collect();
    rows.sort_by(|x, y| y.calls.cmp(&x.calls).then(x.addr.cmp(&y.addr)));
    let mut out = String::new();
    let _ = write!(
        out,
        "tarn top: {} clients, {} connections, uptime {:.0} s, interval {:.1} s",
        b.server.clients, b.server.connections_open, b.uptime_s, dt
    );
    // Shown only when there are some, so the usual header stays short.
    if b.server.nfs4_courteous_clients > 0 {
        let _ = write!(
            out,
            ", {} courteous NFSv4 clients",
            b.server.nfs4_courteous_clients
        );
    }
    // Likewise callback paths, shown when some are down: those clients
    // get no delegations and their recalls wait for revocation.
    if b.server.nfs4_callback_paths_down > 0 {
        let _ = write!(
            out,
            ", NFSv4 callback paths {} up / {} down",
            b.server.nfs4_callback_paths_up, b.server.nfs4_callback_paths_down
        );
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{:<40} {:>10} {:>10} {:>10} {:>13} {:>8} {:>6} {:>7} {:>8}  top op",
        "client",
        "ops/s",
        "kB/s in",
        "kB/s out",
        "avg RTT (ms)",
        "errors",
        "conns",
        "delegs",
        "callback"
    );
    for r in rows.iter().take(limit) {
        let _ = writeln!(
            out,
            "{:<40} {:>10.1} {:>10.1} {:>10.1} {:>13.3} {:>8} {:>6} {:>7} {:>8}  {}",
            r.addr,
            r.calls as f64 / dt,
            r.kin as f64 / 1024.0 / dt,
            r.kout as f64 / 1024.0 / dt,
            r.rtt,
            r.errors,
            r.conns,
            r.delegs,
            r.callback,
            r.top_op
        );
    }
    out
}

/// The doctor's report of the window from `a` to `b`.
pub fn doctor_report(a: &Snapshot, b: &Snapshot, t: &Thresholds) -> String {
    let f = doctor::diagnose(a, b, t);
    let calls: u64 = b.ops.iter().map(|o| o.calls).sum::<u64>()
        - a.ops
            .iter()
            .map(|o| o.calls)
            .sum::<u64>()
            .min(b.ops.iter().map(|o| o.calls).sum());
    let mut out = String::new();
    if f.is_empty() {
        let _ = writeln!(
            out,
            "tarn doctor: no findings ({} clients, {calls} calls in {:.1} s)",
            b.clients.len(),
            secs(a, b)
        );
    } else {
        let _ = writeln!(
            out,
            "tarn doctor: {} finding{} over {:.1} s",
            f.len(),
            if f.len() == 1 { "" } else { "s" },
            secs(a, b)
        );
        for x in f {
            let _ = writeln!(out, "{x}");
        }
    }
    if !b.metrics_enabled {
        out += "note: the server runs with --no-metrics; per-call findings cannot be seen\n";
    }
    out
}

/// Writes to stdout; a closed pipe (`tarn stats | head`) ends the tool
/// quietly instead of panicking.
fn emit(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(format!("stdout: {e}")),
    }
}

pub fn run_stats(socket: &Path, interval: Duration, count: Option<u64>) -> Result<(), String> {
    let mut a = fetch(socket)?;
    let mut n = 0;
    loop {
        std::thread::sleep(interval);
        let b = fetch(socket)?;
        emit(&format!("{}\n", stats_table(&a, &b)))?;
        a = b;
        n += 1;
        if count.is_some_and(|c| n >= c) {
            return Ok(());
        }
    }
}

pub fn run_top(socket: &Path, interval: Duration, once: bool, limit: usize) -> Result<(), String> {
    let mut a = fetch(socket)?;
    loop {
        std::thread::sleep(interval);
        let b = fetch(socket)?;
        let t = top_table(&a, &b, limit);
        if once {
            return emit(&t);
        }
        // Clear the screen and home the cursor, like top.
        emit(&format!("\x1b[H\x1b[2J{t}"))?;
        a = b;
    }
}

pub fn run_doctor(socket: &Path, window: Duration, t: &Thresholds) -> Result<usize, String> {
    let a = fetch(socket)?;
    std::thread::sleep(window);
    let b = fetch(socket)?;
    emit(&doctor_report(&a, &b, t))?;
    Ok(doctor::diagnose(&a, &b, t).len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_shows_callback_paths_only_when_some_are_down() {
        let a = Snapshot::default();
        let mut b = Snapshot {
            unix_ms: 1000,
            uptime_s: 1.0,
            ..Snapshot::default()
        };
        b.server.nfs4_callback_paths_up = 3;
        let head = |b: &Snapshot| top_table(&a, b, 10).lines().next().unwrap().to_string();
        assert!(!head(&b).contains("callback"), "{}", head(&b));
        b.server.nfs4_callback_paths_down = 2;
        assert!(
            head(&b).contains("NFSv4 callback paths 3 up / 2 down"),
            "{}",
            head(&b)
        );
    }
}
