//! `tarn mount -f` in tests: a mount process and its mount point,
//! unmounted and the process ended (by PID) on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether FUSE mounts can be made here (says why not).
pub fn fuse_usable() -> bool {
    let ok = Path::new("/dev/fuse").exists()
        && Command::new("fusermount3")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
    if !ok {
        eprintln!("SKIP: FUSE tests need /dev/fuse and fusermount3 (Debian's fuse3)");
    }
    ok
}

/// `#[test]`s that need FUSE, one a line: `name => scenario(args)` makes
/// `fn name()` that runs `scenario(args)` where [`fuse_usable`] (and is
/// skipped, with its message, where not). For scenarios run over several
/// NFS versions, one test each.
#[macro_export]
macro_rules! fuse_tests {
    ($($name:ident => $run:ident($($arg:expr),* $(,)?)),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                if $crate::fuse::fuse_usable() {
                    $run($($arg),*);
                }
            }
        )+
    };
}

pub fn is_mounted(dir: &Path) -> bool {
    let want = dir.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(want.as_str()))
}

/// The FUSE connection number (the minor device of the mount, as
/// /sys/fs/fuse/connections names it) of the mount at `dir`.
pub fn fuse_conn_of(dir: &Path) -> Option<u32> {
    let want = dir.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()?
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            if f.get(4) != Some(&want.as_str()) {
                return None;
            }
            let (_, minor) = f.get(2)?.split_once(':')?;
            minor.parse().ok()
        })
}

pub struct Mounted {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub log: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Mounted {
    /// `tarn mount -f URL DIR [-o opts]` on a fresh directory; panics if
    /// it does not mount.
    pub fn new(url: &str, opts: &str) -> Mounted {
        Mounted::try_new(url, opts).unwrap_or_else(|e| panic!("mount {url}: {e}"))
    }

    /// Err(the mount's log) if it ends instead of mounting.
    pub fn try_new(url: &str, opts: &str) -> Result<Mounted, String> {
        Mounted::try_with_env(url, opts, &[])
    }

    /// [`Mounted::try_new`] with `env` in the mount's environment.
    pub fn try_with_env(url: &str, opts: &str, env: &[(&str, &str)]) -> Result<Mounted, String> {
        let tmp = crate::var_tmp("tarn-mnt-");
        let dir = tmp.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let log = tmp.path().join("mount.log");
        Mounted::start(url, opts, env, dir, log, Some(tmp))
    }

    /// On a mount point and log file of the caller's.
    pub fn at(url: &str, dir: &Path, log: &Path) -> Mounted {
        Mounted::start(url, "", &[], dir.into(), log.into(), None)
            .unwrap_or_else(|e| panic!("mount {url}: {e}"))
    }

    fn start(
        url: &str,
        opts: &str,
        env: &[(&str, &str)],
        dir: PathBuf,
        log: PathBuf,
        tmp: Option<tempfile::TempDir>,
    ) -> Result<Mounted, String> {
        let mut cmd = Command::new(crate::tarn_bin());
        cmd.args(["mount", "-f", url])
            .arg(&dir)
            .env("TARN_LOG", "info,fuser=off")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if !opts.is_empty() {
            cmd.args(["-o", opts]);
        }
        let child = cmd.spawn().expect("start tarn mount");
        let mut m = Mounted {
            child: Some(child),
            dir,
            log,
            _tmp: tmp,
        };
        let t = Instant::now();
        while !is_mounted(&m.dir) {
            if m.child.as_mut().unwrap().try_wait().unwrap().is_some() {
                m.child = None;
                return Err(m.log_text());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "not mounted in 30 s: {}",
                m.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(m)
    }

    /// The mount process's PID (None once it ended or was taken).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL to the mount process (a crash), reaped; the mount point
    /// stays until [`Mounted::abort`] ends the dead connection.
    pub fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Ends the FUSE connection of this mount through fusectl (what is
    /// left of a mount whose process died: calls on it fail with
    /// ENOTCONN instead of hanging) and lazily unmounts it.
    pub fn abort(&mut self) {
        if let Some(dev) = fuse_conn_of(&self.dir) {
            let ctl = Path::new("/sys/fs/fuse/connections").join(dev.to_string());
            if !ctl.exists() {
                let _ = Command::new("mount")
                    .args(["-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"])
                    .status();
            }
            let _ = std::fs::write(ctl.join("abort"), b"1");
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Unmounts and waits (10 s at most, then kills) for the mount process
    /// to end by itself.
    pub fn unmount(&mut self) {
        if is_mounted(&self.dir) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .status();
            if is_mounted(&self.dir) {
                let _ = Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(&self.dir)
                    .status();
            }
        }
        if let Some(mut c) = self.child.take() {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if c.try_wait().unwrap().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.unmount();
    }
}
