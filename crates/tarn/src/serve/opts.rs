//! `tarn serve`'s command-line option groups (flattened into its clap command).

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ObserveOpts {
    /// Serve Prometheus metrics (GET /metrics) and a JSON status page (GET /status) on ADDR:PORT.
    #[arg(long = "metrics", value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Do not count calls (to measure the counters' cost); logs stay rate-limited per client.
    #[arg(long)]
    pub no_metrics: bool,
    /// The admin socket for `tarn stats|top|doctor` (default: STATE_DIR/admin.sock).
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,
}

/// NLM (byte-range locks for NFSv3 clients) and its status monitor.
#[derive(clap::Args, Clone, Debug)]
pub struct LockOpts {
    /// Seconds after a restart during which only reclaims of NFSv4 state
    /// and NLM locks are granted (default 90, or [nfs4] grace_seconds).
    #[arg(long, value_name = "SECONDS")]
    pub grace: Option<f64>,
    /// Seconds a silent NFSv4 client keeps its opens and locks (default 90,
    /// or [nfs4] lease_seconds).
    #[arg(long, value_name = "SECONDS")]
    pub lease_time: Option<u64>,
    /// Send NLM GRANTED and SM_NOTIFY calls to this port on the client
    /// instead of asking the client's rpcbind (for tests).
    #[arg(long, value_name = "PORT")]
    pub nlm_callback_port: Option<u16>,
}

/// Limits on one client connection (faults and misbehaving clients).
#[derive(clap::Args, Clone, Debug)]
pub struct ConnOpts {
    /// Close a connection with nothing read, running or waiting to be
    /// written for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 360.0)]
    pub idle_timeout: f64,
    /// Close a connection on which a record was begun and no more of it
    /// came for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub record_timeout: f64,
    /// Stop reading a connection's calls while more than this many bytes
    /// of its replies wait to be written (its client does not read them).
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    pub max_queued_reply_bytes: usize,
    /// Close a connection whose replies could not be written for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub send_timeout: f64,
    /// Where large READs of a local export go from the page cache to the
    /// socket by splice(2) instead of being copied through the reply
    /// (plain TCP without krb5i/krb5p only): auto = clients on other
    /// hosts (over loopback, copying costs less in all), always, never.
    #[arg(long, value_name = "WHERE", default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub splice_reads: String,
}

/// Security flavors and Kerberos (RPCSEC_GSS).
#[derive(clap::Args, Clone, Debug)]
pub struct SecOpts {
    /// Flavors the default export accepts, in preference order: any of
    /// sys, krb5, krb5i, krb5p (default sys). With --config, use `sec` per export.
    #[arg(long, value_name = "LIST")]
    pub sec: Option<String>,
    /// The keytab holding the nfs/<host> service key (default: KRB5_KTNAME,
    /// else the system keytab). Needed when an export accepts krb5*.
    #[arg(long, value_name = "FILE")]
    pub keytab: Option<PathBuf>,
    /// RPC-with-TLS (RFC 9289): the server's certificate chain (PEM).
    /// With --tls-key; or [tls] cert in the config file.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that client certificates must chain to, for mutual TLS
    /// (exports with xprtsec=mtls).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Connection protections the default export accepts: any of none,
    /// tls, mtls (default all). With --config, use `xprtsec` per export.
    #[arg(long, value_name = "LIST")]
    pub xprtsec: Option<String>,
    /// Kernel TLS offload after the handshake: auto (where the kernel has
    /// the TLS ULP and the cipher; else rustls) or off. Or [tls] ktls.
    #[arg(long, value_name = "auto|off")]
    pub tls_ktls: Option<rpc::ktls_offload::KtlsMode>,
    /// The RPCSEC_GSS sequence window advertised to clients.
    #[arg(long, value_name = "CALLS", default_value_t = 128)]
    pub gss_window: u32,
}

/// Connection bounds (the other bounds are in the config's [limits]).
#[derive(clap::Args, Clone, Debug)]
pub struct LimitOpts {
    /// Open connections allowed, all clients together; more are closed at
    /// accept (default 4096, or [limits] max_connections).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Open connections allowed from one client address (default 256, or
    /// [limits] max_connections_per_client).
    #[arg(long, value_name = "N")]
    pub max_connections_per_client: Option<usize>,
    /// Calls of one connection executing at once; further calls are not
    /// read until one finishes (default 128, or [limits] max_calls_per_connection).
    #[arg(long, value_name = "CALLS")]
    pub max_calls_per_connection: Option<usize>,
}
