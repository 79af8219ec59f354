//! Where the metrics leave the process: a tiny HTTP/1.1 responder
//! (`GET /metrics`, `GET /status`) and the admin unix socket (one command
//! line in, one JSON document out). Snapshots are built on a blocking
//! thread: they walk the client table and statvfs each export.

use crate::{prom, Metrics, Snapshot};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tracing::debug;

async fn snapshot(m: &Arc<Metrics>) -> Snapshot {
    let m = m.clone();
    tokio::task::spawn_blocking(move || m.snapshot())
        .await
        .unwrap_or_default()
}

/// The small JSON page of `GET /status`.
pub fn status_json(s: &Snapshot) -> serde_json::Value {
    let calls: u64 = s.ops.iter().map(|o| o.calls).sum();
    let errors: u64 = s.ops.iter().map(|o| o.errors).sum();
    serde_json::json!({
        "uptime_s": s.uptime_s,
        "metrics_enabled": s.metrics_enabled,
        "connections_open": s.server.connections_open,
        "clients": s.server.clients,
        "calls": calls,
        "errors": errors,
        "exports": s.exports.iter().map(|e| {
            let (b, f) = e.used_pct().unwrap_or((0.0, 0.0));
            serde_json::json!({"path": e.path, "calls": e.calls, "bytes_used_pct": b, "files_used_pct": f})
        }).collect::<Vec<_>>(),
        "caches": s.caches,
    })
}

/// Serves `GET /metrics` and `GET /status` until the task is dropped.
pub async fn serve_http(listener: TcpListener, m: Arc<Metrics>) {
    loop {
        let Ok((mut s, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let m = m.clone();
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            let read = async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                true
            };
            if !tokio::time::timeout(Duration::from_secs(5), read)
                .await
                .unwrap_or(false)
            {
                return;
            }
            let line = String::from_utf8_lossy(&head);
            let mut parts = line.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let path = path.split('?').next().unwrap_or("");
            debug!(%peer, method, path, "metrics HTTP request");
            let (code, ctype, body) = match (method, path) {
                ("GET", "/metrics") => (
                    "200 OK",
                    prom::CONTENT_TYPE,
                    prom::encode(snapshot(&m).await),
                ),
                ("GET", "/status") => (
                    "200 OK",
                    "application/json",
                    status_json(&snapshot(&m).await).to_string() + "\n",
                ),
                ("GET", _) => (
                    "404 Not Found",
                    "text/plain",
                    "try /metrics or /status\n".into(),
                ),
                _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
            };
            let resp = format!(
                "HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
            let _ = s.write_all(body.as_bytes()).await;
            let _ = s.shutdown().await;
        });
    }
}

/// The admin socket: binds `path` (replacing a stale socket), mode 0600.
pub fn bind_admin(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(md) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if md.file_type().is_socket() {
            std::fs::remove_file(path)?;
        }
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Answers admin commands: `snapshot` (the JSON [`Snapshot`]), `ping`, and
/// those the server added ([`Metrics::add_admin_command`]).
pub async fn serve_admin(listener: UnixListener, m: Arc<Metrics>) {
    loop {
        let Ok((s, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let m = m.clone();
        tokio::spawn(async move {
            let (rd, mut wr) = s.into_split();
            let mut line = String::new();
            let mut rd = BufReader::new(rd.take(256));
            if tokio::time::timeout(Duration::from_secs(5), rd.read_line(&mut line))
                .await
                .is_err()
            {
                return;
            }
            let out = match line.trim() {
                "snapshot" | "" => serde_json::to_string(&snapshot(&m).await).unwrap_or_default(),
                "ping" => "\"pong\"".into(),
                other => match m.admin_command(other) {
                    Some(f) => tokio::task::spawn_blocking(move || f().to_string())
                        .await
                        .unwrap_or_else(|e| {
                            serde_json::json!({"error": e.to_string()}).to_string()
                        }),
                    None => serde_json::json!({"error": format!("unknown command {other:?}")})
                        .to_string(),
                },
            };
            let _ = wr.write_all(out.as_bytes()).await;
            let _ = wr.write_all(b"\n").await;
            let _ = wr.shutdown().await;
        });
    }
}

/// The default admin socket of a state directory.
pub fn default_socket(state_dir: &Path) -> PathBuf {
    state_dir.join("admin.sock")
}

/// Sends one command line to a running server's admin socket and reads
/// its whole answer, waiting at most `timeout` for it (blocking).
fn ask(socket: &Path, line: &str, timeout: Duration) -> Result<String, String> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to {}: {e} (is `tarn serve` running with this state directory?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(timeout)).ok();
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    Ok(body)
}

/// Sends one command to a running server's admin socket and parses its
/// JSON answer (blocking; for the tools). An `{"error": ...}` answer is an Err.
pub fn command(socket: &Path, cmd: &str) -> Result<serde_json::Value, String> {
    let body = ask(socket, cmd, Duration::from_secs(60))?;
    let v: serde_json::Value = serde_json::from_str(&body)
        .map_err(|e| format!("bad answer from {}: {e}", socket.display()))?;
    match v.get("error").and_then(|e| e.as_str()) {
        Some(e) => Err(e.to_string()),
        None => Ok(v),
    }
}

/// Fetches one snapshot from a running server's admin socket (blocking; for the tools).
pub fn fetch(socket: &Path) -> Result<Snapshot, String> {
    let body = ask(socket, "snapshot", Duration::from_secs(30))?;
    serde_json::from_str(&body).map_err(|e| format!("bad snapshot from {}: {e}", socket.display()))
}
