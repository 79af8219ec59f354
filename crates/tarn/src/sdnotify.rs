//! sd_notify(3) without libsystemd: one datagram per state change to the
//! socket systemd names in $NOTIFY_SOCKET (a path, or `@name` for the
//! abstract namespace). Without it (not under a Type=notify unit) nothing
//! is sent. Failures are ignored: readiness is a courtesy to the manager,
//! never a reason to stop serving.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. "READY=1\nSTATUS=...") if systemd asked for it.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return false;
    };
    let bytes = path.as_encoded_bytes();
    let sent = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
        }
        None => sock.send_to(state.as_bytes(), &path),
    };
    sent.is_ok()
}
