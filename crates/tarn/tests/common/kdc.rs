#![allow(dead_code)]
//! A throwaway MIT Kerberos realm on loopback for tests: kdb5_util creates
//! the database, kadmin.local adds `nfs/localhost` (into a keytab) and a
//! user with a password, and `krb5kdc -n` serves it on a free port until
//! the [`Kdc`] is dropped (its process is killed by PID). Short clock skew
//! so that expiry tests need not wait five minutes.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REALM: &str = "TARN.TEST";
pub const USER: &str = "alice";
pub const USER_PW: &str = "alice-pw-1";

pub struct Kdc {
    pub realm: String,
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
    pub keytab: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn which(tool: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
}

impl Kdc {
    pub fn start() -> Kdc {
        Kdc::start_realm(REALM)
    }

    /// A realm of another name (its own database and port), e.g. to show
    /// that tickets from a realm the server has no key for are refused.
    pub fn start_realm(realm: &str) -> Kdc {
        for t in ["krb5kdc", "kdb5_util", "kadmin.local", "kinit"] {
            assert!(
                which(t).is_some(),
                "{t} not found: install krb5-kdc, krb5-admin-server and krb5-user (scripts/deps.sh --test)"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("tarn-kdc-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        let port = free_port();
        let conf = d.join("krb5.conf");
        std::fs::write(
            &conf,
            format!(
                "[libdefaults]\n default_realm = {realm}\n dns_lookup_realm = false\n dns_lookup_kdc = false\n \
                 rdns = false\n dns_canonicalize_hostname = false\n clockskew = 2\n ticket_lifetime = 1h\n \
                 udp_preference_limit = 1\n\n[realms]\n {realm} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\n\
                 [domain_realm]\n localhost = {realm}\n"
            ),
        )
        .unwrap();
        let kdc_conf = d.join("kdc.conf");
        std::fs::write(
            &kdc_conf,
            format!(
                "[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n\n[realms]\n {realm} = {{\n  \
                 database_name = {db}\n  key_stash_file = {stash}\n  acl_file = {acl}\n  max_life = 1h\n  \
                 supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n }}\n\n\
                 [logging]\n kdc = FILE:{log}\n",
                db = d.join("principal").display(),
                stash = d.join("stash").display(),
                acl = d.join("kadm5.acl").display(),
                log = d.join("kdc.log").display(),
            ),
        )
        .unwrap();
        std::fs::write(d.join("kadm5.acl"), "").unwrap();
        let env = |c: &mut Command| {
            c.env("KRB5_CONFIG", &conf)
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
        let keytab = d.join("nfs.keytab");
        run(&[
            "kadmin.local",
            "-r",
            realm,
            "-q",
            "addprinc -randkey nfs/localhost",
        ]);
        run(&[
            "kadmin.local",
            "-r",
            realm,
            "-q",
            &format!("addprinc -pw {USER_PW} {USER}"),
        ]);
        run(&[
            "kadmin.local",
            "-r",
            realm,
            "-q",
            &format!("ktadd -k {} nfs/localhost", keytab.display()),
        ]);
        let mut c = Command::new("krb5kdc");
        c.args(["-n", "-r", realm])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        env(&mut c);
        let child = c.spawn().expect("start krb5kdc");
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "krb5kdc does not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Kdc {
            realm: realm.to_string(),
            dir,
            conf,
            keytab,
            port,
            child: Some(child),
        }
    }

    /// Points this process (its GSS clients, and servers it starts) at the
    /// realm, with `cc` as the credential cache and no keytab of its own.
    pub fn activate(&self, cc: &Path) {
        std::env::set_var("KRB5_CONFIG", &self.conf);
        std::env::remove_var("KRB5_KTNAME");
        std::env::set_var("KRB5CCNAME", format!("FILE:{}", cc.display()));
    }

    /// `kinit` the user into a fresh credential cache (a cache, never a
    /// client keytab: a keytab would silently renew and hide expiry);
    /// `lifetime` like kinit's -l ("10m", "5s").
    pub fn kinit(&self, name: &str, lifetime: &str) -> PathBuf {
        let cc = self.dir.path().join(format!("cc-{name}"));
        let mut c = Command::new("kinit");
        c.args([
            "-l",
            lifetime,
            "-c",
            &format!("FILE:{}", cc.display()),
            &format!("{USER}@{}", self.realm),
        ])
        .env("KRB5_CONFIG", &self.conf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut ch = c.spawn().unwrap();
        ch.stdin
            .take()
            .unwrap()
            .write_all(format!("{USER_PW}\n").as_bytes())
            .unwrap();
        let o = ch.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "kinit: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        cc
    }
}

impl Drop for Kdc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // this child's PID only
            let _ = c.wait();
        }
    }
}
