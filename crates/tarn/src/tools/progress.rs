//! What a copy has done so far: counted as chunks land, shown on one
//! self-rewriting stderr line while a copy to a terminal runs longer than
//! a second, and summed up at the end.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Progress {
    bytes: AtomicU64,
    files: AtomicU64,
    /// Files the server copied itself (NFSv4.2 COPY).
    by_server: AtomicU64,
    /// Bytes to copy, when known (a single file).
    total: Option<u64>,
    start: Instant,
    shown: AtomicBool,
}

impl Progress {
    pub fn new(total: Option<u64>) -> Arc<Progress> {
        Arc::new(Progress {
            bytes: AtomicU64::new(0),
            files: AtomicU64::new(0),
            by_server: AtomicU64::new(0),
            total,
            start: Instant::now(),
            shown: AtomicBool::new(false),
        })
    }

    pub fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_file(&self) {
        self.files.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_server_copy(&self) {
        self.by_server.fetch_add(1, Ordering::Relaxed);
    }

    pub fn files(&self) -> u64 {
        self.files.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// "  512.0 MB of 1073.7 MB (47%), 3 files, 250.1 MB/s".
    pub fn line(&self, elapsed: Duration) -> String {
        let b = self.bytes();
        let mb = b as f64 / 1e6;
        let rate = mb / elapsed.as_secs_f64().max(1e-6);
        let of = match self.total {
            Some(t) if t > 0 => format!(" of {:.1} MB ({}%)", t as f64 / 1e6, b * 100 / t),
            _ => String::new(),
        };
        format!("{mb:.1} MB{of}, {} files, {rate:.1} MB/s", self.files())
    }

    /// The summary printed when the copy is done.
    pub fn summary(&self) -> String {
        let secs = self.elapsed().as_secs_f64();
        let by_server = match self.by_server.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(" ({n} by server-side COPY)"),
        };
        format!(
            "{} files, {} bytes in {secs:.2} s, {:.1} MB/s{by_server}",
            self.files(),
            self.bytes(),
            self.bytes() as f64 / secs.max(1e-6) / 1e6
        )
    }

    /// Redraws the progress line twice a second from the first second on,
    /// if stderr is a terminal. Stop it with [`Progress::finish`].
    pub fn show(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let p = self.clone();
        Some(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                p.shown.store(true, Ordering::Relaxed);
                // \r and erase-to-end-of-line: one line, rewritten.
                eprint!("\r{}\x1b[K", p.line(p.elapsed()));
            }
        }))
    }

    /// Stops the redrawing and erases the line.
    pub fn finish(&self, shower: Option<tokio::task::JoinHandle<()>>) {
        if let Some(h) = shower {
            h.abort();
        }
        if self.shown.load(Ordering::Relaxed) {
            eprint!("\r\x1b[K");
            let _ = std::io::stderr().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let p = Progress::new(Some(4_000_000));
        p.add_bytes(1_000_000);
        p.add_file();
        assert_eq!(
            p.line(Duration::from_secs(2)),
            "1.0 MB of 4.0 MB (25%), 1 files, 0.5 MB/s"
        );
        let p = Progress::new(None);
        p.add_bytes(3_000_000);
        assert_eq!(p.line(Duration::from_secs(1)), "3.0 MB, 0 files, 3.0 MB/s");
        assert!(p.summary().starts_with("0 files, 3000000 bytes in "));
        assert!(p.summary().ends_with(" MB/s"));
        p.add_server_copy();
        assert!(p.summary().ends_with(" MB/s (1 by server-side COPY)"));
    }
}
