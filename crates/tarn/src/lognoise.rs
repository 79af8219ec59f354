//! The `log` records of libraries (rustls) reach the tracing subscriber
//! through this shim, which lowers to debug the one warning that is noise
//! for an NFS server: Linux's tlshd sends the server's IP address as SNI
//! (RFC 6066 allows only host names there), and rustls warns about it on
//! every such handshake. Everything else passes unchanged.

/// Whether a record is rustls's warning about an IP address sent as SNI.
pub fn is_ip_sni_warning(target: &str, level: log::Level, msg: &str) -> bool {
    level == log::Level::Warn
        && target.starts_with("rustls::")
        && msg.starts_with("Illegal SNI extension: ignoring IP address presented as hostname")
}

/// Forwards to `L`, that one warning at debug.
pub struct Quiet<L>(pub L);

impl<L: log::Log> log::Log for Quiet<L> {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        // The warning may be asked about at warn; it is judged in `log`.
        self.0.enabled(m) || (m.level() == log::Level::Warn && m.target().starts_with("rustls::"))
    }

    fn log(&self, r: &log::Record<'_>) {
        let msg = r.args().to_string();
        if is_ip_sni_warning(r.target(), r.level(), &msg) {
            let m = log::Metadata::builder()
                .level(log::Level::Debug)
                .target(r.target())
                .build();
            if self.0.enabled(&m) {
                self.0.log(
                    &log::Record::builder()
                        .metadata(m)
                        .args(format_args!("{msg}"))
                        .module_path(r.module_path())
                        .file(r.file())
                        .line(r.line())
                        .build(),
                );
            }
            return;
        }
        if self.0.enabled(r.metadata()) {
            self.0.log(r);
        }
    }

    fn flush(&self) {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Log;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Rec(Mutex<Vec<(log::Level, String)>>);
    impl Log for Rec {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, r: &log::Record<'_>) {
            self.0
                .lock()
                .unwrap()
                .push((r.level(), r.args().to_string()));
        }
        fn flush(&self) {}
    }

    fn send(q: &Quiet<Rec>, target: &str, level: log::Level, msg: &str) {
        q.log(
            &log::Record::builder()
                .target(target)
                .level(level)
                .args(format_args!("{msg}"))
                .build(),
        );
    }

    #[test]
    fn only_the_ip_sni_warning_is_lowered() {
        let q = Quiet(Rec::default());
        let sni = "Illegal SNI extension: ignoring IP address presented as hostname ([49, 50, 55])";
        send(&q, "rustls::msgs::handshake", log::Level::Warn, sni);
        send(
            &q,
            "rustls::msgs::handshake",
            log::Level::Warn,
            "Illegal SNI hostname received \"a b\"",
        );
        send(
            &q,
            "rustls::conn",
            log::Level::Warn,
            "Sending fatal alert BadCertificate",
        );
        send(&q, "other", log::Level::Warn, sni);
        let got = q.0 .0.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                (log::Level::Debug, sni.to_string()),
                (
                    log::Level::Warn,
                    "Illegal SNI hostname received \"a b\"".into()
                ),
                (
                    log::Level::Warn,
                    "Sending fatal alert BadCertificate".into()
                ),
                (log::Level::Warn, sni.to_string()),
            ]
        );
    }
}
