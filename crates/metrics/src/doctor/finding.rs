//! What a rule of `tarn doctor` reports (the TLS rules as the others).

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// A short stable tag: getattr-storm, small-sync-writes, gss-window-drops,
    /// auth-cache-churn, reconnect-loop, export-near-full.
    pub kind: &'static str,
    /// "client 10.0.0.7" or "export /srv/data".
    pub subject: String,
    pub detail: String,
    pub remedy: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {}: {}\n    remedy: {}",
            self.kind, self.subject, self.detail, self.remedy
        )
    }
}
