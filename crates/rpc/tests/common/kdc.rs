#![allow(dead_code)]
//! A throwaway MIT realm on loopback (after crates/tarn/tests/common/kdc.rs)
//! whose keys come in all four AES enctypes, with one krb5.conf per enctype
//! that makes every ticket's session key (and so every GSS context) use
//! that enctype. `krb5kdc -n` is killed by PID when the [`Kdc`] drops.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REALM: &str = "TARN.TEST";
pub const USER: &str = "alice";
pub const USER_PW: &str = "alice-pw-1";
pub const ENCTYPES: [(&str, u32); 4] = [
    ("aes256-cts-hmac-sha1-96", 18),
    ("aes128-cts-hmac-sha1-96", 17),
    ("aes256-cts-hmac-sha384-192", 20),
    ("aes128-cts-hmac-sha256-128", 19),
];

/// Held by each test for its whole run: the GSS environment variables
/// are process-wide.
pub static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub struct Kdc {
    pub dir: tempfile::TempDir,
    pub keytab: PathBuf,
    port: u16,
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
        assert!(
            available(),
            "MIT KDC tools not found: install krb5-kdc, krb5-admin-server and krb5-user (scripts/deps.sh --test)"
        );
        let dir = tempfile::Builder::new()
            .prefix("tarn-kdc-")
            .tempdir()
            .unwrap();
        let d = dir.path().to_path_buf();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let all: Vec<&str> = ENCTYPES.iter().map(|e| e.0).collect();
        let kdc_conf = d.join("kdc.conf");
        std::fs::write(
            &kdc_conf,
            format!(
                "[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n\n[realms]\n {REALM} = {{\n  \
                 database_name = {db}\n  key_stash_file = {stash}\n  acl_file = {acl}\n  max_life = 1h\n  \
                 supported_enctypes = {st}\n }}\n\n[logging]\n kdc = FILE:{log}\n",
                db = d.join("principal").display(),
                stash = d.join("stash").display(),
                acl = d.join("kadm5.acl").display(),
                log = d.join("kdc.log").display(),
                st = all.iter().map(|e| format!("{e}:normal")).collect::<Vec<_>>().join(" "),
            ),
        )
        .unwrap();
        std::fs::write(d.join("kadm5.acl"), "").unwrap();
        let k = Kdc {
            dir,
            keytab: d.join("nfs.keytab"),
            port,
            child: None,
        };
        let conf = k.conf(None);
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
            REALM,
            "create",
            "-s",
            "-P",
            "master-pw-1",
        ]);
        run(&[
            "kadmin.local",
            "-r",
            REALM,
            "-q",
            "addprinc -randkey nfs/localhost",
        ]);
        run(&[
            "kadmin.local",
            "-r",
            REALM,
            "-q",
            &format!("addprinc -pw {USER_PW} {USER}"),
        ]);
        run(&[
            "kadmin.local",
            "-r",
            REALM,
            "-q",
            &format!("ktadd -k {} nfs/localhost", k.keytab.display()),
        ]);
        let mut c = Command::new("krb5kdc");
        c.args(["-n", "-r", REALM])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        env(&mut c);
        let mut k = k;
        k.child = Some(c.spawn().expect("start krb5kdc"));
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "krb5kdc does not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        k
    }

    /// A krb5.conf; with `enctype`, the only one clients ask for as
    /// session key, so contexts made under it use it (the service ticket
    /// stays in the service's strongest key).
    pub fn conf(&self, enctype: Option<&str>) -> PathBuf {
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
                "[libdefaults]\n default_realm = {REALM}\n dns_lookup_realm = false\n dns_lookup_kdc = false\n \
                 rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n{only}\n\
                 [realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\n[domain_realm]\n localhost = {REALM}\n",
                port = self.port
            ),
        )
        .unwrap();
        p
    }

    /// `kinit` the user into a fresh cache under `conf`.
    pub fn kinit(&self, conf: &Path, name: &str) -> PathBuf {
        let cc = self.dir.path().join(format!("cc-{name}"));
        let mut ch = Command::new("kinit")
            .args(["-c", &format!("FILE:{}", cc.display()), USER])
            .env("KRB5_CONFIG", conf)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
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

/// Points this process's GSS-API at the realm with `enctype` only, and
/// establishes a context: MIT initiator (`nfs@localhost`, with sequence
/// checking so that our sequence numbers are checked too) against the
/// server's accept path. Callers hold [`ENV`].
pub fn establish(
    kdc: &Kdc,
    enctype: &str,
) -> (libgssapi::context::ClientCtx, rpc::gss::lucid::MitCtx) {
    use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext};
    use libgssapi::credential::{Cred, CredUsage};
    use libgssapi::name::Name;
    use libgssapi::oid::{GSS_MECH_KRB5, GSS_NT_HOSTBASED_SERVICE};
    let conf = kdc.conf(Some(enctype));
    let cc = kdc.kinit(&conf, enctype);
    std::env::set_var("KRB5_CONFIG", &conf);
    std::env::set_var("KRB5CCNAME", format!("FILE:{}", cc.display()));
    std::env::set_var("KRB5_KTNAME", format!("FILE:{}", kdc.keytab.display()));
    let name = Name::new(b"nfs@localhost", Some(GSS_NT_HOSTBASED_SERVICE)).unwrap();
    let cred = Cred::acquire(None, None, CredUsage::Initiate, None).unwrap();
    let mut client = ClientCtx::new(
        Some(cred),
        name,
        CtxFlags::GSS_C_MUTUAL_FLAG | CtxFlags::GSS_C_SEQUENCE_FLAG | CtxFlags::GSS_C_REPLAY_FLAG,
        Some(GSS_MECH_KRB5),
    );
    let mut server = rpc::gss::lucid::MitCtx::new();
    let mut tok = client.step(None, None).unwrap();
    loop {
        let t = tok.expect("the initiator has a token to send");
        let s = server.step(&t).unwrap();
        let reply = (!s.token.is_empty()).then_some(s.token);
        tok = client.step(reply.as_deref(), None).unwrap();
        if s.complete {
            assert!(tok.is_none() && client.is_complete());
            break;
        }
    }
    (client, server)
}
