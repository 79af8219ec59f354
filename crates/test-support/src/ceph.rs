//! A throwaway Ceph cluster on loopback, started by
//! scripts/ceph-cluster.sh in a temporary directory; its daemons are
//! stopped (by PID, by the script) on drop. None (the test skipped, with
//! a message) when Ceph is not installed, unless TARN_REQUIRE_CEPH=1
//! (scripts/deps.sh --ceph installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub struct Cluster {
    dir: tempfile::TempDir,
    script: PathBuf,
}

impl Cluster {
    /// Starts a cluster for `what` (named in the skip message);
    /// `libcephfs` is whether libcephfs can be loaded here
    /// (`vfs::cephfs::available()`).
    pub fn start(what: &str, libcephfs: Result<(), String>) -> Option<Cluster> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ceph-cluster.sh");
        let have = |b: &str| {
            Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {b}"))
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let why = match ["ceph-mon", "ceph-osd", "ceph-mds"]
            .into_iter()
            .find(|b| !have(b))
        {
            Some(b) => Some(format!("{b} not installed")),
            None => libcephfs.err(),
        };
        if let Some(why) = why {
            if std::env::var("TARN_REQUIRE_CEPH").as_deref() == Ok("1") {
                panic!("TARN_REQUIRE_CEPH=1 but {why} (scripts/deps.sh --ceph)");
            }
            eprintln!("SKIP {what}: {why} (scripts/deps.sh --ceph)");
            return None;
        }
        let dir = crate::var_tmp("tarn-ceph-");
        let t = Instant::now();
        let out = Command::new("bash")
            .arg(&script)
            .arg("start")
            .arg(dir.path())
            .output()
            .unwrap();
        let c = Cluster { dir, script };
        assert!(
            out.status.success(),
            "ceph-cluster.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("ceph cluster started in {:.1?}", t.elapsed());
        Some(c)
    }

    /// The cluster's directory (its ceph.conf, keyrings, daemons' data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its ceph.conf.
    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("ceph.conf")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}
