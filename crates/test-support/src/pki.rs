//! A throwaway PKI for the RPC-with-TLS tests, made with the openssl CLI,
//! and servers that use it.

use crate::server::TestServer;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A throwaway CA, a server certificate for localhost and 127.0.0.1, and
/// a client certificate, in `dir`.
pub fn make_pki(dir: &Path) {
    let run = |args: &[&str]| openssl(dir, args);
    let ec = EC_KEY;
    make_ca(dir, "/CN=Tarn test CA");
    // A client certificate no configured CA signed.
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "rogue.key",
        "-out",
        "rogue.pem",
        "-days",
        "2",
        "-subj",
        "/CN=rogue",
        "-addext",
        "basicConstraints=CA:FALSE",
    ]);
    run(&a);
    for (name, subj, san, usage) in [
        (
            "server",
            "/CN=localhost",
            "DNS:localhost,IP:127.0.0.1",
            "serverAuth",
        ),
        (
            "client",
            "/CN=client1/O=Tarn tests",
            "DNS:client1",
            "clientAuth",
        ),
    ] {
        leaf(
            dir,
            name,
            subj,
            &format!("subjectAltName={san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"),
            "2",
        );
    }
}

/// ca.key and ca.pem in `dir`: a self-signed CA for `subj`, valid for 2 days.
pub fn make_ca(dir: &Path, subj: &str) {
    let mut a = vec!["req", "-x509"];
    a.extend(EC_KEY);
    a.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        subj,
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(dir, &a);
}

/// The `openssl req` flags for a new P-256 key, unencrypted.
pub const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// `openssl ARGS` in `dir`, which must succeed.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// NAME.key and NAME.pem in `dir`: an EC key and a certificate for
/// `subj` signed by the CA there, with the extensions `ext` (an openssl
/// extension file's lines), valid for `days` (-1: already expired).
pub fn leaf(dir: &Path, name: &str, subj: &str, ext: &str, days: &str) {
    let extf = format!("{name}.ext");
    std::fs::write(dir.join(&extf), ext).unwrap();
    signed_by(
        dir,
        name,
        subj,
        "ca",
        &["-CAcreateserial", "-days", days, "-extfile", &extf],
    );
}

/// NAME.key and NAME.pem in `dir`: an EC key and a certificate for
/// `subj` signed by BY.key (its certificate BY.pem) there; `x509` are
/// further `openssl x509` arguments (serial, validity, extensions).
pub fn signed_by(dir: &Path, name: &str, subj: &str, by: &str, x509: &[&str]) {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    openssl(
        dir,
        &[
            &["req"][..],
            &EC_KEY,
            &["-keyout", &key, "-out", &csr, "-subj", subj],
        ]
        .concat(),
    );
    let (by_pem, by_key) = (format!("{by}.pem"), format!("{by}.key"));
    let sign = [
        "x509", "-req", "-in", &csr, "-CA", &by_pem, "-CAkey", &by_key, "-out", &pem,
    ];
    openssl(dir, &[&sign[..], x509].concat());
}

pub struct Pki {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}

impl Pki {
    pub fn new() -> Pki {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        make_pki(&dir);
        Pki { _tmp: tmp, dir }
    }

    /// NAME.key and NAME.pem signed by this PKI's CA (see [`leaf`]).
    pub fn leaf(&self, name: &str, subj: &str, ext: &str, days: &str) {
        leaf(&self.dir, name, subj, ext, days)
    }

    pub fn file(&self, n: &str) -> String {
        self.dir.join(n).to_str().unwrap().to_string()
    }

    /// A server exporting with `xprtsec`, TLS configured (client CA too).
    pub fn server(&self, xprtsec: &str) -> TestServer {
        self.server_with(xprtsec, &[])
    }

    /// The `tarn serve` flags of [`Pki::server_with`] (for a restart).
    pub fn server_args(&self, xprtsec: &str) -> Vec<String> {
        [
            "--tls-cert",
            &self.file("server.pem"),
            "--tls-key",
            &self.file("server.key"),
            "--tls-client-ca",
            &self.file("ca.pem"),
            "--xprtsec",
            xprtsec,
        ]
        .map(String::from)
        .to_vec()
    }

    pub fn server_with(&self, xprtsec: &str, extra: &[&str]) -> TestServer {
        let (cert, key, ca) = (
            self.file("server.pem"),
            self.file("server.key"),
            self.file("ca.pem"),
        );
        let mut args = vec![
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
            "--xprtsec",
            xprtsec,
        ];
        args.extend(extra);
        TestServer::start_with(&args)
    }

    /// A URL for `path` on `port` with `query` (acting as uid 1000).
    pub fn url(&self, port: u16, path: &str, query: &str) -> String {
        let ca = self.file("ca.pem");
        let q = query
            .replace("ROGUE", &self.file("rogue"))
            .replace("CA", &ca)
            .replace("CERT", &self.file("client.pem"))
            .replace("KEY", &self.file("client.key"));
        format!("nfs://127.0.0.1:{port}/{path}?uid=1000&gid=1000&{q}")
    }
}
