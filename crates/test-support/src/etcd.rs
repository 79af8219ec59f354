//! A throwaway etcd on loopback: its own ports and data directory, killed
//! by PID on drop. None (the test skipped, with a message) when etcd is
//! not installed, unless TARN_REQUIRE_ETCD=1.

use crate::free_port;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    /// `http://127.0.0.1:PORT`, its client URL.
    pub url: String,
    /// Removed after etcd is killed (see [`Etcd::start_temp`]).
    _dir: Option<tempfile::TempDir>,
}

impl Etcd {
    /// etcd with its data and its log (`etcd.log`) in `dir`.
    pub fn start(dir: &Path) -> Option<Etcd> {
        let Some(bin) = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
            .into_iter()
            .find(|p| Path::new(p).exists())
        else {
            assert!(
                std::env::var("TARN_REQUIRE_ETCD").as_deref() != Ok("1"),
                "etcd is not installed (apt-get install etcd-server) and TARN_REQUIRE_ETCD=1"
            );
            eprintln!("SKIPPED: etcd is not installed (apt-get install etcd-server)");
            return None;
        };
        let (cp, pp) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{cp}");
        let peer = format!("http://127.0.0.1:{pp}");
        let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
        let child = Command::new(bin)
            .args(["--name", "t", "--data-dir"])
            .arg(dir.join("etcd-data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("t={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let e = Etcd {
            child,
            url,
            _dir: None,
        };
        let until = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(e.addr()).is_err() {
            assert!(Instant::now() < until, "etcd did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(e)
    }

    /// [`Etcd::start`] in a temporary directory of its own.
    pub fn start_temp() -> Option<Etcd> {
        let dir = tempfile::tempdir().unwrap();
        let mut e = Etcd::start(dir.path())?;
        e._dir = Some(dir);
        Some(e)
    }

    /// `127.0.0.1:PORT`, its client address.
    pub fn addr(&self) -> &str {
        &self.url["http://".len()..]
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
