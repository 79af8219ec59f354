//! A throwaway MIT Kerberos realm on loopback for tests and benchmarks:
//! kdb5_util creates the database, kadmin.local adds `nfs/localhost`
//! (into a keytab) and a user with a password, and `krb5kdc -n` serves it
//! on a free port until the [`Kdc`] is dropped (its process is killed by
//! PID). Keys come in all four AES enctypes; [`Kdc::conf_for`] writes a
//! krb5.conf that makes every session key (and so every GSS context) use
//! one of them. A 2 s clock skew, so expiry tests need not wait five
//! minutes. Needs krb5-kdc, krb5-admin-server and krb5-user.

#![forbid(unsafe_code)]

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REALM: &str = "TARN.TEST";
pub const USER: &str = "alice";
pub const USER_PW: &str = "alice-pw-1";
/// The AES enctypes, by name and number.
pub const ENCTYPES: [(&str, u32); 4] = [
    ("aes256-cts-hmac-sha1-96", 18),
    ("aes128-cts-hmac-sha1-96", 17),
    ("aes256-cts-hmac-sha384-192", 20),
    ("aes128-cts-hmac-sha256-128", 19),
];

/// A loopback port free for TCP and UDP, for a server a test starts.
///
/// Port 0 would hand out a port from the kernel's ephemeral range, and a
/// client connection made by a parallel test can take that port as its
/// source between the check and the server's bind (a CI run failed so).
/// Ports below the ephemeral range (32768 on Linux) are never given to
/// outgoing connections; each process walks them from its own offset, and
/// the atomic counter keeps the threads of one test binary apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN)
}

/// For tests that change the process-wide GSS environment variables: hold
/// it for the whole test.
pub static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub struct Kdc {
    pub realm: String,
    pub dir: tempfile::TempDir,
    /// A krb5.conf for the realm, every enctype allowed.
    pub conf: PathBuf,
    /// `nfs/localhost@REALM`'s keys.
    pub keytab: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

pub fn which(tool: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
}

/// Whether the MIT tools are installed (scripts/deps.sh --test).
pub fn available() -> bool {
    ["krb5kdc", "kdb5_util", "kadmin.local", "kinit"]
        .iter()
        .all(|t| which(t).is_some())
}

impl Kdc {
    pub fn start() -> Kdc {
        Kdc::start_realm(REALM)
    }

    /// A realm of another name (its own database and port), e.g. to show
    /// that tickets from a realm the server has no key for are refused.
    pub fn start_realm(realm: &str) -> Kdc {
        assert!(
            available(),
            "MIT KDC tools not found: install krb5-kdc, krb5-admin-server and krb5-user (scripts/deps.sh --test)"
        );
        let dir = tempfile::Builder::new()
            .prefix("tarn-kdc-")
            .tempdir()
            .unwrap();
        let d = dir.path().to_path_buf();
        let port = free_port();
        let all: Vec<String> = ENCTYPES.iter().map(|e| format!("{}:normal", e.0)).collect();
        let kdc_conf = d.join("kdc.conf");
        std::fs::write(
            &kdc_conf,
            format!(
                "[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n\n[realms]\n {realm} = {{\n  \
                 database_name = {db}\n  key_stash_file = {stash}\n  acl_file = {acl}\n  max_life = 1h\n  \
                 supported_enctypes = {st}\n }}\n\n[logging]\n kdc = FILE:{log}\n",
                db = d.join("principal").display(),
                stash = d.join("stash").display(),
                acl = d.join("kadm5.acl").display(),
                log = d.join("kdc.log").display(),
                st = all.join(" "),
            ),
        )
        .unwrap();
        std::fs::write(d.join("kadm5.acl"), "").unwrap();
        let mut k = Kdc {
            realm: realm.to_string(),
            dir,
            conf: PathBuf::new(),
            keytab: d.join("nfs.keytab"),
            port,
            child: None,
        };
        k.conf = k.conf_for(None);
        let env = |c: &mut Command| {
            c.env("KRB5_CONFIG", &k.conf)
                .env("KRB5_KDC_PROFILE", &kdc_conf)
                .env_remove("KRB5CCNAME")
                .env_remove("KRB5_KTNAME");
        };
        let run = |args: &[&str]| {
            let mut c = Command::new(args[0]);
            c.args(&args[1..]);
            env(&mut c);
            let o = c.output().unwrap();
            assert!(
                o.status.success(),
                "{args:?}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        };
        run(&[
            "kdb5_util",
            "-r",
            realm,
            "create",
            "-s",
            "-P",
            "master-pw-1",
        ]);
        let admin = |q: &str| run(&["kadmin.local", "-r", realm, "-q", q]);
        admin("addprinc -randkey nfs/localhost");
        admin(&format!("addprinc -pw {USER_PW} {USER}"));
        admin(&format!("ktadd -k {} nfs/localhost", k.keytab.display()));
        let mut c = Command::new("krb5kdc");
        c.args(["-n", "-r", realm])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        env(&mut c);
        k.child = Some(c.spawn().expect("start krb5kdc"));
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "krb5kdc does not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        k
    }

    /// A krb5.conf; with `enctype`, the only one clients ask for as
    /// session key, so contexts made under it use it (the service ticket
    /// stays in the service's strongest key).
    pub fn conf_for(&self, enctype: Option<&str>) -> PathBuf {
        let p = self
            .dir
            .path()
            .join(format!("krb5-{}.conf", enctype.unwrap_or("all")));
        let only = enctype
            .map(|e| format!(" default_tkt_enctypes = {e}\n default_tgs_enctypes = {e}\n"))
            .unwrap_or_default();
        std::fs::write(
            &p,
            format!(
                "[libdefaults]\n default_realm = {realm}\n dns_lookup_realm = false\n dns_lookup_kdc = false\n \
                 rdns = false\n dns_canonicalize_hostname = false\n clockskew = 2\n ticket_lifetime = 1h\n \
                 udp_preference_limit = 1\n{only}\n\
                 [realms]\n {realm} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\n[domain_realm]\n localhost = {realm}\n",
                realm = self.realm,
                port = self.port
            ),
        )
        .unwrap();
        p
    }

    /// Points this process (its GSS clients, and servers it starts) at the
    /// realm, with `cc` as the credential cache and no keytab of its own.
    pub fn activate(&self, cc: &Path) {
        std::env::set_var("KRB5_CONFIG", &self.conf);
        std::env::remove_var("KRB5_KTNAME");
        std::env::set_var("KRB5CCNAME", format!("FILE:{}", cc.display()));
    }

    /// Runs the kadmin.local query `q` on this realm's database, outside
    /// any credential cache or keytab the caller has set.
    fn kadmin(&self, q: &str) -> std::process::Output {
        Command::new("kadmin.local")
            .args(["-r", &self.realm, "-q", q])
            .env("KRB5_CONFIG", &self.conf)
            .env("KRB5_KDC_PROFILE", self.dir.path().join("kdc.conf"))
            .env_remove("KRB5CCNAME")
            .env_remove("KRB5_KTNAME")
            .output()
            .unwrap()
    }

    /// A client keytab with the user's keys (their password stays valid):
    /// MIT's GSS library gets and refreshes tickets from it by itself when
    /// `KRB5_CLIENT_KTNAME` names it, as for a service account or a batch job.
    pub fn user_keytab(&self) -> PathBuf {
        let kt = self.dir.path().join("user.keytab");
        let o = self.kadmin(&format!("ktadd -norandkey -k {} {USER}", kt.display()));
        assert!(
            o.status.success() && kt.exists(),
            "ktadd: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        kt
    }

    /// A krb5.conf whose clients ask for tickets of `secs` seconds (what a
    /// client keytab's tickets live for: no kinit -l there).
    pub fn conf_with_lifetime(&self, secs: u64) -> PathBuf {
        let p = self.dir.path().join(format!("krb5-life{secs}.conf"));
        let all = std::fs::read_to_string(&self.conf).unwrap();
        std::fs::write(
            &p,
            all.replace(
                "ticket_lifetime = 1h",
                &format!("ticket_lifetime = {secs}s"),
            ),
        )
        .unwrap();
        p
    }

    /// `kinit` the user into a fresh credential cache (a cache, never a
    /// client keytab: a keytab would silently renew and hide expiry);
    /// `lifetime` like kinit's -l ("10m", "5s").
    pub fn kinit(&self, name: &str, lifetime: &str) -> PathBuf {
        self.kinit_with(&self.conf, name, lifetime)
    }

    /// Adds user principal `name@REALM` with password `pw` (more users
    /// than [`USER`], e.g. several local users of one client).
    pub fn add_user(&self, name: &str, pw: &str) {
        let o = self.kadmin(&format!("addprinc -pw {pw} {name}"));
        assert!(
            o.status.success(),
            "addprinc {name}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// `kinit` principal `name` (added by [`Kdc::add_user`] with `pw`)
    /// into the fresh credential cache `cc`.
    pub fn kinit_user(&self, name: &str, pw: &str, lifetime: &str, cc: &Path) {
        kinit_into(
            &self.conf,
            &format!("{name}@{}", self.realm),
            pw,
            lifetime,
            cc,
        );
    }

    /// [`Kdc::kinit`] under another krb5.conf (see [`Kdc::conf_for`]).
    pub fn kinit_with(&self, conf: &Path, name: &str, lifetime: &str) -> PathBuf {
        let cc = self.dir.path().join(format!("cc-{name}"));
        kinit_into(
            conf,
            &format!("{USER}@{}", self.realm),
            USER_PW,
            lifetime,
            &cc,
        );
        cc
    }
}

fn kinit_into(conf: &Path, principal: &str, pw: &str, lifetime: &str, cc: &Path) {
    let mut ch = Command::new("kinit")
        .args([
            "-l",
            lifetime,
            "-c",
            &format!("FILE:{}", cc.display()),
            principal,
        ])
        .env("KRB5_CONFIG", conf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ch.stdin
        .take()
        .unwrap()
        .write_all(format!("{pw}\n").as_bytes())
        .unwrap();
    let o = ch.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "kinit: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Drop for Kdc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // this child's PID only
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kadmin.local adds is there: a second user can kinit with its
    /// password, and the user's keytab is written.
    #[test]
    fn added_users_and_keytabs_are_usable() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let kdc = Kdc::start();
        kdc.add_user("second", "second-pw");
        let cc = kdc.dir.path().join("cc-second");
        kdc.kinit_user("second", "second-pw", "5m", &cc);
        assert!(cc.exists());
        assert!(kdc.user_keytab().exists());
    }
}
