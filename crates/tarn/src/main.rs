//! `tarn`: the one binary. `tarn serve` runs the NFS server; other
//! subcommands are tools that talk to servers.

mod admin;
mod assets;
mod bench;
mod cluster;
mod config;
mod etcd;
mod exports_file;
mod keytab;
mod lognoise;
mod mount;
mod rpcbind;
mod sdnotify;
mod statelock;
mod tls_check;
mod tools;

use clap::{Parser, Subcommand};

/// mimalloc: freed reply buffers (up to 1 MiB each) are reused from
/// per-thread free lists instead of going back to the kernel and faulting
/// in fresh zeroed pages on the next READ (glibc's malloc maps and unmaps
/// buffers that size). Without transparent huge pages (`no_thp`, and
/// [`no_huge_pages`]): each thread keeps its own partly used pages per size
/// class, and with THP every such page touched became 2 MiB resident (the
/// 64-client soak held 1.5 GB, 1.28 GB of it huge pages, against 0.43 GB
/// without).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use config::{Config, ExportConfig};
use server::export::{parse_sec, Cidr, ClientSpec, Export, ExportIds, Exports, Flavor, Rule};
use server::live::Live;
use server::{mount::Mount, nfs3::Nfs3, pool::Pool, TarnService};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tracing::{error, info, warn};

#[derive(Parser)]
#[command(
    name = "tarn",
    version,
    about = "Tarn: a user-space NFS server, and tools to use NFS servers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve DIR (default ./export, created if missing) on one port: NFSv3 with MOUNT, NLM and NSM, and NFSv4.0/4.1/4.2.
    Serve {
        /// The directory to export when no --config is given, or a CephFS directory as `cephfs://[id@][fs]/dir`.
        dir: Option<PathBuf>,
        /// Address and port to listen on.
        #[arg(long, default_value = "127.0.0.1:2049")]
        listen: String,
        /// Allow clients from this network too (CIDR or address); 127.0.0.1 and ::1 are always allowed.
        #[arg(long = "allow", value_name = "CIDR")]
        allow: Vec<String>,
        /// Exports from a TOML file instead of DIR.
        #[arg(long, value_name = "FILE", conflicts_with = "exports")]
        config: Option<PathBuf>,
        /// Exports from an exports(5) file such as /etc/exports instead of DIR
        /// (converted as `tarn import-exports` does; what cannot be is logged).
        #[arg(long, value_name = "FILE")]
        exports: Option<PathBuf>,
        /// Where the file-handle key is kept (default: beside --config, else /var/lib/tarn or ~/.local/state/tarn).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// error, warn, info, debug or trace (RUST_LOG overrides).
        #[arg(long, default_value = "info")]
        log_level: String,
        /// text: one line per event (colours only on a terminal; under systemd,
        /// no timestamps and a syslog priority for the journal); json: one JSON
        /// object per line, for log shippers.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        #[command(flatten)]
        observe: ObserveOpts,
        #[command(flatten)]
        locking: LockOpts,
        #[command(flatten)]
        security: SecOpts,
        #[command(flatten)]
        conns: ConnOpts,
        #[command(flatten)]
        limits: LimitOpts,
        /// Debugging only: files named eio-* fail with EIO, edquot-* run
        /// out of quota at 64 KiB (to test error paths; see vfs::faulty).
        #[arg(long, hide = true)]
        debug_inject_faults: bool,
    },
    /// Per-operation rates of a running server, like nfsiostat: ops/s, kB/s, avg RTT, avg exe, errors.
    Stats {
        #[command(flatten)]
        socket: SocketOpt,
        /// Seconds between reports.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many reports (default: run until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Clients of a running server ranked by load, refreshed live.
    Top {
        #[command(flatten)]
        socket: SocketOpt,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Print one table after one interval and exit.
        #[arg(long)]
        once: bool,
        /// Show at most this many clients.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Watch a running server for a window and report what its clients do wrong, with remedies.
    Doctor {
        #[command(flatten)]
        socket: SocketOpt,
        /// Seconds to observe.
        #[arg(long, default_value_t = 10.0)]
        window: f64,
        /// GETATTR storm: GETATTR/s from one client...
        #[arg(long, default_value_t = 100.0)]
        getattr_rate: f64,
        /// ...over at least this many distinct files.
        #[arg(long, default_value_t = 100)]
        distinct_files: u64,
        /// Small synchronous WRITEs from one client in the window.
        #[arg(long, default_value_t = 50)]
        small_sync_writes: u64,
        /// Connections opened by one client in the window.
        #[arg(long, default_value_t = 10)]
        reconnects: u64,
        /// Percent of an export's bytes or inodes in use.
        #[arg(long, default_value_t = 90.0)]
        full_pct: f64,
    },
    /// What a running server exports to whom (like showmount -e and exportfs -v).
    Exports {
        #[command(flatten)]
        socket: SocketOpt,
        /// Print the server's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Make a running server re-read its --config or --exports file (as SIGHUP
    /// does) and print what changed: exports added, removed, options changed.
    Reload {
        #[command(flatten)]
        socket: SocketOpt,
    },
    /// Write man pages (DIR/man) and shell completions (DIR/completions), for packages.
    #[command(hide = true)]
    GenerateAssets { dir: PathBuf },
    /// Check a configuration file and explain what it exports.
    CheckConfig { file: PathBuf },
    /// Print the Tarn TOML configuration equivalent to an exports(5) file such as
    /// /etc/exports; options Tarn cannot honour are named on stderr with their line.
    ImportExports { file: PathBuf },
    /// Measure a running server: ops/s, MB/s and latency percentiles per operation.
    Bench(bench::BenchArgs),
    /// Mount an NFS export (nfs://host[:port]/path) on DIR through FUSE.
    Mount(mount::MountArgs),
    /// Unmount a `tarn mount` (fusermount3 -u, or umount as root).
    Umount(mount::UmountArgs),
    #[command(flatten)]
    Tools(tools::ToolCmd),
}

#[derive(clap::Args)]
struct ObserveOpts {
    /// Serve Prometheus metrics (GET /metrics) and a JSON status page (GET /status) on ADDR:PORT.
    #[arg(long = "metrics", value_name = "ADDR:PORT")]
    metrics: Option<String>,
    /// Do not count calls (to measure the counters' cost); logs stay rate-limited per client.
    #[arg(long)]
    no_metrics: bool,
    /// The admin socket for `tarn stats|top|doctor` (default: STATE_DIR/admin.sock).
    #[arg(long, value_name = "PATH")]
    admin_socket: Option<PathBuf>,
}

/// NLM (byte-range locks for NFSv3 clients) and its status monitor.
#[derive(clap::Args, Clone, Debug)]
struct LockOpts {
    /// Seconds after a restart during which only reclaims of NFSv4 state
    /// and NLM locks are granted (default 90, or [nfs4] grace_seconds).
    #[arg(long, value_name = "SECONDS")]
    grace: Option<f64>,
    /// Seconds a silent NFSv4 client keeps its opens and locks (default 90,
    /// or [nfs4] lease_seconds).
    #[arg(long, value_name = "SECONDS")]
    lease_time: Option<u64>,
    /// Send NLM GRANTED and SM_NOTIFY calls to this port on the client
    /// instead of asking the client's rpcbind (for tests).
    #[arg(long, value_name = "PORT")]
    nlm_callback_port: Option<u16>,
}

/// Limits on one client connection (faults and misbehaving clients).
#[derive(clap::Args, Clone, Debug)]
struct ConnOpts {
    /// Close a connection with nothing read, running or waiting to be
    /// written for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 360.0)]
    idle_timeout: f64,
    /// Close a connection on which a record was begun and no more of it
    /// came for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    record_timeout: f64,
    /// Stop reading a connection's calls while more than this many bytes
    /// of its replies wait to be written (its client does not read them).
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    max_queued_reply_bytes: usize,
    /// Close a connection whose replies could not be written for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    send_timeout: f64,
    /// Where large READs of a local export go from the page cache to the
    /// socket by splice(2) instead of being copied through the reply
    /// (plain TCP without krb5i/krb5p only): auto = clients on other
    /// hosts (over loopback, copying costs less in all), always, never.
    #[arg(long, value_name = "WHERE", default_value = "auto", value_parser = ["auto", "always", "never"])]
    splice_reads: String,
}

/// Security flavors and Kerberos (RPCSEC_GSS).
#[derive(clap::Args, Clone, Debug)]
struct SecOpts {
    /// Flavors the default export accepts, in preference order: any of
    /// sys, krb5, krb5i, krb5p (default sys). With --config, use `sec` per export.
    #[arg(long, value_name = "LIST")]
    sec: Option<String>,
    /// The keytab holding the nfs/<host> service key (default: KRB5_KTNAME,
    /// else the system keytab). Needed when an export accepts krb5*.
    #[arg(long, value_name = "FILE")]
    keytab: Option<PathBuf>,
    /// RPC-with-TLS (RFC 9289): the server's certificate chain (PEM).
    /// With --tls-key; or [tls] cert in the config file.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// CA (PEM) that client certificates must chain to, for mutual TLS
    /// (exports with xprtsec=mtls).
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Connection protections the default export accepts: any of none,
    /// tls, mtls (default all). With --config, use `xprtsec` per export.
    #[arg(long, value_name = "LIST")]
    xprtsec: Option<String>,
    /// Kernel TLS offload after the handshake: auto (where the kernel has
    /// the TLS ULP and the cipher; else rustls) or off. Or [tls] ktls.
    #[arg(long, value_name = "auto|off")]
    tls_ktls: Option<rpc::ktls_offload::KtlsMode>,
    /// The RPCSEC_GSS sequence window advertised to clients.
    #[arg(long, value_name = "CALLS", default_value_t = 128)]
    gss_window: u32,
}

/// Connection bounds (the other bounds are in the config's [limits]).
#[derive(clap::Args, Clone, Debug)]
struct LimitOpts {
    /// Open connections allowed, all clients together; more are closed at
    /// accept (default 4096, or [limits] max_connections).
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Open connections allowed from one client address (default 256, or
    /// [limits] max_connections_per_client).
    #[arg(long, value_name = "N")]
    max_connections_per_client: Option<usize>,
    /// Calls of one connection executing at once; further calls are not
    /// read until one finishes (default 128, or [limits] max_calls_per_connection).
    #[arg(long, value_name = "CALLS")]
    max_calls_per_connection: Option<usize>,
}

#[derive(clap::Args)]
struct SocketOpt {
    /// The server's admin socket (default: the default state directory's admin.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

impl SocketOpt {
    fn path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| metrics::endpoint::default_socket(&default_state_dir()))
    }
}

fn tool_result<T>(r: Result<T, String>) -> ExitCode {
    match r {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tarn: {e}");
            ExitCode::FAILURE
        }
    }
}

fn secs(s: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(s.max(0.05))
}

/// Transparent huge pages off for this process (PR_SET_THP_DISABLE): the
/// `no_thp` build of mimalloc no longer asks for them, and this keeps a
/// host whose THP setting is `always` from giving them anyway.
fn no_huge_pages() {
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        warn!("cannot turn transparent huge pages off: {e}");
    }
}

fn main() -> ExitCode {
    no_huge_pages();
    let cli = Cli::parse_from(mount::helper_args(std::env::args_os().collect()));
    match cli.cmd {
        Cmd::Serve {
            dir,
            listen,
            allow,
            config,
            exports,
            state_dir,
            log_level,
            log_format,
            observe,
            locking,
            security,
            conns,
            debug_inject_faults,
            limits,
        } => {
            INJECT_FAULTS.store(debug_inject_faults, std::sync::atomic::Ordering::Relaxed);
            init_logging(&log_level, log_format);
            let source = match (config, exports) {
                (Some(f), _) => Some(ConfigSource::Toml(f)),
                (None, Some(f)) => Some(ConfigSource::Exports(f)),
                (None, None) => None,
            };
            match serve(
                dir, listen, allow, source, state_dir, observe, locking, security, conns, limits,
            ) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tarn: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::CheckConfig { file } => match config::load(&file) {
            Ok(c) => {
                println!(
                    "{}: valid; {} export(s), first matching rule wins",
                    file.display(),
                    c.exports.len()
                );
                for e in &c.exports {
                    print!("{}", config::explain(e));
                }
                print!("{}", config::explain_gss(&c.gss));
                let tls = tls_check::check(c.tls.as_ref(), &c.exports, rpc::x509::unix_now());
                for n in &tls.notes {
                    println!("{n}");
                }
                for r in &c.tls_identities {
                    println!(
                        "TLS: a client certificate matching {} runs its AUTH_SYS calls as uid {} gid {} groups {:?} (first matching rule wins)",
                        r.text, r.uid, r.gid, r.gids
                    );
                }
                for w in &tls.warnings {
                    eprintln!("tarn: warning: {w}");
                }
                for e in &tls.errors {
                    eprintln!("tarn: {e}");
                }
                if !tls.errors.is_empty() {
                    return ExitCode::FAILURE;
                }
                // A CephFS export needs libcephfs at run time (it is not linked).
                if c.exports.iter().any(|e| e.ceph.is_some()) {
                    if let Err(e) = vfs::cephfs::available() {
                        eprintln!("tarn: {e}");
                        return ExitCode::FAILURE;
                    }
                }
                if c.exports
                    .iter()
                    .flat_map(|e| &e.rules)
                    .any(|r| matches!(r.client, ClientSpec::Host(_) | ClientSpec::Domain(_)))
                {
                    println!("host names and *.domain rules are resolved in the background: a client matches them once its lookup has been answered");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tarn: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::ImportExports { file } => match std::fs::read_to_string(&file) {
            Ok(src) => {
                let c = exports_file::convert(&file.display().to_string(), &src);
                for w in &c.warnings {
                    eprintln!("tarn: {}:{}: {}", file.display(), w.line, w.msg);
                }
                print!("{}", c.toml);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tarn: {}: {e}", file.display());
                ExitCode::FAILURE
            }
        },
        Cmd::Exports { socket, json } => tool_result(
            metrics::endpoint::command(&socket.path(), "exports").map(|v| {
                if json {
                    println!("{v}");
                } else {
                    admin::print_exports(&v);
                }
            }),
        ),
        Cmd::Reload { socket } => {
            let path = socket.path();
            tool_result(admin::reload(&path, &admin::state_dir_of(&path)))
        }
        Cmd::GenerateAssets { dir } => tool_result(assets::generate(&dir)),
        Cmd::Bench(a) => bench::main(a),
        Cmd::Tools(t) => tools::run(t),
        Cmd::Mount(a) => mount::run(a),
        Cmd::Umount(a) => mount::umount(a),
        Cmd::Stats {
            socket,
            interval,
            count,
        } => tool_result(metrics::tools::run_stats(
            &socket.path(),
            secs(interval),
            count,
        )),
        Cmd::Top {
            socket,
            interval,
            once,
            limit,
        } => tool_result(metrics::tools::run_top(
            &socket.path(),
            secs(interval),
            once,
            limit,
        )),
        Cmd::Doctor {
            socket,
            window,
            getattr_rate,
            distinct_files,
            small_sync_writes,
            reconnects,
            full_pct,
        } => {
            let t = metrics::doctor::Thresholds {
                getattr_rate,
                distinct_files,
                small_sync_writes,
                reconnects,
                full_pct,
                ..Default::default()
            };
            tool_result(metrics::tools::run_doctor(&socket.path(), secs(window), &t))
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Logs go to stderr: colours only on a terminal, and when stderr is the
/// journal (systemd sets JOURNAL_STREAM to its device:inode) no timestamps,
/// which the journal adds, and a `<N>` syslog priority it parses.
fn init_logging(level: &str, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let journal = stderr_is_journal();
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi && !journal);
    let set = match format {
        LogFormat::Json => {
            tracing::subscriber::set_global_default(b.json().flatten_event(true).finish())
        }
        LogFormat::Text if journal => tracing::subscriber::set_global_default(
            b.event_format(JournalPriority(
                tracing_subscriber::fmt::format().without_time(),
            ))
            .finish(),
        ),
        LogFormat::Text => tracing::subscriber::set_global_default(b.finish()),
    };
    set.expect("the logger is set once");
    // Libraries' `log` records, through the shim that quiets tlshd's SNI.
    use tracing_log::AsLog;
    if log::set_boxed_logger(Box::new(lognoise::Quiet(tracing_log::LogTracer::new()))).is_ok() {
        log::set_max_level(tracing::level_filters::LevelFilter::current().as_log());
    }
}

/// JOURNAL_STREAM is "DEV:INODE" of the journal's stream socket; it is
/// inherited by children, so it counts only if stderr is that socket.
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    match std::fs::metadata("/proc/self/fd/2") {
        Ok(m) => dev.parse() == Ok(m.dev()) && ino.parse() == Ok(m.ino()),
        Err(_) => false,
    }
}

/// Prefixes each event with its syslog priority (`<3>` error .. `<7>`
/// debug) so `journalctl -p warning` works.
struct JournalPriority<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for JournalPriority<F>
where
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        ev: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let p = match *ev.metadata().level() {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        write!(w, "<{p}>")?;
        self.0.format_event(ctx, w, ev)
    }
}

fn describe(e: &ExportConfig) -> String {
    let rules: Vec<String> = e
        .rules
        .iter()
        .map(|r| format!("{}: {}", r.client, r.describe()))
        .collect();
    let sec: Vec<&str> = e.sec.iter().map(|f| f.name()).collect();
    format!(
        "{} as {} (sec={}) to {}",
        e.path.display(),
        e.pseudo,
        sec.join(","),
        if rules.is_empty() {
            "nobody".into()
        } else {
            rules.join("; ")
        }
    )
}

fn default_state_dir() -> PathBuf {
    if effective_uid() == 0 {
        PathBuf::from("/var/lib/tarn")
    } else {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        home.join(".local/state/tarn")
    }
}

fn effective_uid() -> u32 {
    // std has no geteuid; /proc/self/status's Uid line has (real, effective, ...).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|u| u.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

fn build_config(
    dir: Option<PathBuf>,
    listen: String,
    allow: Vec<String>,
    config: Option<&ConfigSource>,
    state_dir: Option<PathBuf>,
    sec: Option<String>,
) -> Result<(Config, SocketAddr, PathBuf), String> {
    let (cfg, state_dir) = match config {
        Some(source) => {
            if dir.is_some() {
                return Err("give either DIR or --config/--exports, not both".into());
            }
            if sec.is_some() {
                return Err(
                    "--sec is for the default export: with --config, set `sec` per export (with --exports, sec= per client)".into(),
                );
            }
            let c = source.load()?;
            let sd = state_dir
                .or(c.state_dir.clone())
                .unwrap_or_else(|| match source {
                    ConfigSource::Toml(file) => {
                        file.parent().unwrap_or(Path::new(".")).to_path_buf()
                    }
                    // /etc is no place for state.
                    ConfigSource::Exports(_) => default_state_dir(),
                });
            (c, sd)
        }
        None => {
            let dir = dir.unwrap_or_else(|| PathBuf::from("export"));
            // `tarn serve cephfs://[id@][fs]/dir`: that directory of a
            // CephFS (ceph.conf and keyring from CEPH_CONF / CEPH_ARGS or
            // /etc/ceph, as every Ceph tool finds them).
            let ceph = match dir.to_str() {
                Some(u) if u.starts_with("cephfs://") => {
                    Some(vfs::cephfs::CephConfig::parse_url(u).map_err(|m| format!("{u}: {m}"))?)
                }
                _ => None,
            };
            if ceph.is_none() && !dir.exists() {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let path = match ceph {
                Some(_) => dir.clone(),
                None => dir
                    .canonicalize()
                    .map_err(|e| format!("{}: {e}", dir.display()))?,
            };
            let mut clients: Vec<Cidr> =
                vec!["127.0.0.1/32".parse().unwrap(), "::1/128".parse().unwrap()];
            for a in &allow {
                clients.push(a.parse::<Cidr>().map_err(|e| format!("--allow {e}"))?);
            }
            let e = ExportConfig {
                path,
                pseudo: "/".into(),
                rules: clients
                    .into_iter()
                    .map(|c| Rule::new(ClientSpec::Net(c), true))
                    .collect(),
                sec: match &sec {
                    Some(s) => parse_sec(s).map_err(|e| format!("--sec {e}"))?,
                    None => vec![Flavor::Sys],
                },
                delegations: config::default_delegations(ceph.is_some()),
                xprtsec: rpc::tls::XprtSec::ALL.to_vec(),
                ceph,
            };
            (
                Config {
                    listen: None,
                    state_dir: None,
                    exports: vec![e],
                    nfs4: Default::default(),
                    auth_cache: Default::default(),
                    gss: Default::default(),
                    limits: Default::default(),
                    tls: None,
                    tls_identities: Vec::new(),
                    cluster: None,
                    tls_ktls: None,
                },
                state_dir.unwrap_or_else(default_state_dir),
            )
        }
    };
    let listen = cfg.listen.clone().unwrap_or(listen);
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| format!("--listen {listen:?}: expected ADDR:PORT such as 127.0.0.1:2049"))?;
    Ok((cfg, addr, state_dir))
}

/// Where the exports come from; read again on reload.
#[derive(Clone, Debug)]
enum ConfigSource {
    Toml(PathBuf),
    /// An exports(5) file, converted by exports_file.
    Exports(PathBuf),
}

impl ConfigSource {
    fn file(&self) -> &Path {
        match self {
            ConfigSource::Toml(f) | ConfigSource::Exports(f) => f,
        }
    }

    /// Loads the configuration; an exports file's warnings are logged.
    fn load(&self) -> Result<Config, String> {
        match self {
            ConfigSource::Toml(f) => config::load(f),
            ConfigSource::Exports(f) => {
                let (c, warnings) = exports_file::load(f)?;
                for w in warnings {
                    warn!(file = %f.display(), line = w.line, "{}", w.msg);
                }
                Ok(c)
            }
        }
    }
}

// One argument per group of `tarn serve` flags, passed through once.
#[allow(clippy::too_many_arguments)]
fn serve(
    dir: Option<PathBuf>,
    listen: String,
    allow: Vec<String>,
    config: Option<ConfigSource>,
    state_dir: Option<PathBuf>,
    observe: ObserveOpts,
    locking: LockOpts,
    security: SecOpts,
    conns: ConnOpts,
    limit_opts: LimitOpts,
) -> Result<(), String> {
    let config_file = config.clone();
    let (mut cfg, addr, state_dir) = build_config(
        dir,
        listen,
        allow,
        config.as_ref(),
        state_dir,
        security.sec.clone(),
    )?;
    if let Some(n) = limit_opts.max_connections {
        cfg.limits.max_connections = n.max(1);
    }
    if let Some(n) = limit_opts.max_connections_per_client {
        cfg.limits.max_connections_per_client = n.max(1);
    }
    if let Some(n) = limit_opts.max_calls_per_connection {
        cfg.limits.max_calls_per_connection = n.max(1);
    }
    let gss = gss_server(&cfg, &security)?;
    let tls = tls_server(&mut cfg, &security, config.is_some())?;
    if let Some(l) = locking.lease_time {
        cfg.nfs4.lease = std::time::Duration::from_secs(l.max(1));
    }
    if let Some(g) = locking.grace {
        cfg.nfs4.grace = std::time::Duration::from_secs_f64(g.clamp(0.0, 86400.0));
    }
    let metrics_addr: Option<SocketAddr> =
        match &observe.metrics {
            Some(a) => Some(a.parse().map_err(|_| {
                format!("--metrics {a:?}: expected ADDR:PORT such as 127.0.0.1:9100")
            })?),
            None => None,
        };
    std::fs::create_dir_all(&state_dir)
        .map_err(|e| format!("cannot create state directory {}: {e}", state_dir.display()))?;
    // Before anything in the directory is read or written.
    let state_lock = statelock::acquire(&state_dir)?;
    info!(lock = %state_lock.path.display(), "state directory is this server's");
    if cfg.exports.iter().any(|e| e.ceph.is_some()) {
        vfs::cephfs::set_head_id(&ceph_head_id(&state_dir)?);
    }
    let key_path = state_dir.join("handle.key");
    let key = vfs::HandleKey::load_or_create(&key_path)
        .map_err(|e| format!("{}: {e}", key_path.display()))?;
    if let Some(g) = locking.grace.filter(|g| !(*g >= 0.0 && g.is_finite())) {
        return Err(format!("--grace {g}: expected seconds, 0 or more"));
    }
    let nsm_dir = state_dir.join("nsm");
    let (nsm, notify_hosts) = server::nlm::nsm::Nsm::start(&nsm_dir)
        .map_err(|e| format!("NSM state in {}: {e}", nsm_dir.display()))?;
    info!(
        state = nsm.state(),
        hosts = notify_hosts.len(),
        "NSM state number; clients to notify of the restart"
    );
    match vfs::local::raise_nofile_limit() {
        Ok(n) if n < 4 * vfs::local::PATH_CACHE_SIZE as u64 => {
            warn!(
                limit = n,
                "few open files allowed (RLIMIT_NOFILE): descriptor caches will thrash"
            )
        }
        Ok(_) => {}
        Err(e) => warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
    let ids_path = state_dir.join("export-ids");
    let mut ids = load_ids(&ids_path)?;
    let exports = Exports::with_ids(build_exports(&cfg, None)?, &mut ids);
    save_ids(&ids_path, &ids)?;
    let ids = Arc::new(std::sync::Mutex::new(ids));
    let names = server::auth_cache::Names::new(
        Arc::new(server::auth_cache::SystemResolver),
        cfg.auth_cache.ttl,
    );
    names.spawn_worker();
    let live = Arc::new(Live::new(exports, names, cfg.auth_cache.clone()));
    let metrics = metrics::Metrics::new(!observe.no_metrics);
    {
        let live = live.clone();
        metrics.add_cache_probe("auth", move || {
            // Entries, and a rough size: a decision per (client, credential).
            let s = live.cache_stats();
            (s.entries, s.entries * 256)
        });
    }
    {
        let live = live.clone();
        metrics.set_export_probe(move || {
            live.load()
                .exports
                .iter()
                .map(|e| {
                    let usage =
                        e.backend
                            .fsstat(&e.backend.root())
                            .ok()
                            .map(|u| metrics::FsUsage {
                                total_bytes: u.total_bytes,
                                avail_bytes: u.avail_bytes,
                                free_bytes: u.free_bytes,
                                total_files: u.total_files,
                                free_files: u.free_files,
                            });
                    metrics::ExportInfo {
                        id: e.id,
                        path: e.path.display().to_string(),
                        usage,
                        delegations: Some(e.delegations.to_string()),
                    }
                })
                .collect()
        });
    }
    let admin_path = observe
        .admin_socket
        .clone()
        .unwrap_or_else(|| metrics::endpoint::default_socket(&state_dir));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(64)
        .thread_name("tarn")
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let stop = StopSignals::install()?;
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let key = Arc::new(key);
        let pool = Pool::new(32);
        let locks = Arc::new(server::locks::LockManager::new());
        // The NFSv4 client records: the state directory's file, or, in a
        // cluster, etcd (shared, so another head can take over a failed
        // one's clients).
        let etcd = cfg.cluster.as_ref().map(|c| Arc::new(etcd::Etcd::new(c.etcd.clone(), &c.name)));
        let recovery = match (&etcd, &cfg.cluster) {
            (Some(e), Some(c)) => {
                let (e, node) = (e.clone(), c.node.clone());
                tokio::task::spawn_blocking(move || server::nfs4::recovery::Recovery::with_store(e, &node, 0))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("cluster: cannot read this head's client records from etcd: {e}"))?
            }
            _ => {
                let recovery_path = state_dir.join("v4clients");
                server::nfs4::recovery::Recovery::open(&recovery_path)
                    .map_err(|e| format!("{}: {e}", recovery_path.display()))?
            }
        };
        let cluster_recovery = recovery.clone();
        // One grace period for NLM and NFSv4: both end together.
        let grace = server::grace::Grace::new(std::time::Instant::now(), cfg.nfs4.grace);
        let mut nfs4 = server::nfs4::Nfs4::with_grace(live.clone(), key.clone(), pool.clone(), locks.clone(), cfg.nfs4.clone(), Some(recovery), grace);
        if nfs4.state.in_grace(std::time::Instant::now()) {
            info!(seconds = cfg.nfs4.grace.as_secs(), "NFSv4 grace period: clients that held state may reclaim it");
        }
        nfs4.metrics = Some(metrics.clone());
        nfs4.spawn_reaper();
        nfs4.spawn_local_recalls();
        nfs4.spawn_backend_delegations();
        {
            let state = nfs4.state.clone();
            metrics.add_cache_probe("nfs4_state", move || state.usage());
            metrics.set_nfs4_probe(server::nfs4::peers::probe_fn(
                nfs4.peers.clone(),
                nfs4.state.clone(),
                nfs4.backchannels.clone(),
            ));
        }
        if let Some(g) = gss.clone() {
            // A context: MIT's (keys, names) plus the window's bitmaps, about 2 KiB.
            let g2 = g.clone();
            metrics.add_cache_probe("gss_contexts", move || {
                let n = g.live().max(0) as u64;
                (n, n * 2048)
            });
            metrics.add_limit(rpc::observe::Limit::GssContexts, cfg.limits.max_gss_contexts as u64, move || g2.live().max(0) as u64);
        }
        register_state_limits(&metrics, &nfs4);
        let callback = server::nlm::RpcCallback {
            port: locking.nlm_callback_port,
            names: cfg.cluster.as_ref().map(|c| c.service_names.clone()).unwrap_or_default(),
            ..Default::default()
        };
        let nlm = server::nlm::Nlm::new(
            locks,
            Arc::new(match (&etcd, &cfg.cluster) {
                // In a cluster, NLM hosts are recorded in etcd too.
                (Some(e), Some(c)) => nsm.share(e.clone(), &c.node),
                _ => nsm,
            }),
            server::nlm::NlmConfig { grace },
            Arc::new(callback),
        );
        // Locks granted here are also taken in backends that keep them for
        // every head (CephFS); releases reach them through this task.
        nlm.share_locks(nfs4.shared.clone());
        nfs4.shared.spawn_flusher();
        if !notify_hosts.is_empty() {
            // NLM hosts held locks: new NFSv4 locks wait for their reclaims.
            nfs4.state.hold_locks_until(grace);
        }
        nlm.notify_restart(notify_hosts);
        if let (Some(e), Some(c)) = (etcd, &cfg.cluster) {
            let mut d = cluster::Driver::new(e.clone(), c.node.clone(), c.lease, cfg.nfs4.grace, cluster_recovery, nfs4.state.clone(), nlm.clone(), tokio::runtime::Handle::current());
            let ceph: Vec<vfs::cephfs::CephConfig> = cfg.exports.iter().filter_map(|x| x.ceph.clone()).collect();
            if let (false, Some(id)) = (ceph.is_empty(), vfs::cephfs::head_id()) {
                // Another head ends this head's CephFS sessions if this
                // head fails (cluster::Driver::on_lost).
                let (e2, node) = (e.clone(), c.node.clone());
                tokio::task::spawn_blocking(move || e2.set_ceph_id(&node, id))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("cluster: etcd: {e}"))?;
                d.on_lost = Some(Box::new(move |node: &str| reset_lost_head(e.clone(), node.to_string(), ceph.clone())));
            }
            // Registered and in the cluster's grace before the first call
            // is served.
            let d = tokio::task::spawn_blocking(move || d.step().map(|()| d))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cluster: etcd: {e}"))?;
            info!(node = c.node, cluster = c.name, "cluster: registered in etcd");
            std::thread::Builder::new().name("tarn-cluster".into()).spawn(move || d.run()).map_err(|e| e.to_string())?;
        }
        let mut nfs3 = Nfs3::new(live.clone(), key, pool);
        // One write verifier: a storage error seen through either protocol
        // concerns the unstable data of both.
        nfs3.write_verf = nfs4.write_verf.clone();
        nfs3.recall = Some(nfs4.recaller());
        let svc = TarnService { nfs3, nfs4, mount: Mount::new(), nlm };
        let rpc_cfg = rpc::ServerConfig {
            gss,
            tls: tls.clone(),
            idle_timeout: secs(conns.idle_timeout),
            record_timeout: secs(conns.record_timeout),
            max_queued_reply_bytes: conns.max_queued_reply_bytes,
            send_timeout: secs(conns.send_timeout),
            splice_reads: match conns.splice_reads.as_str() {
                "always" => rpc::zero_copy::SpliceReads::Always,
                "never" => rpc::zero_copy::SpliceReads::Never,
                _ => rpc::zero_copy::SpliceReads::Auto,
            },
            max_in_flight: cfg.limits.max_calls_per_connection,
            drc_per_client: cfg.limits.drc_entries_per_client,
            drc_max_bytes: cfg.limits.drc_max_bytes,
            max_connections: cfg.limits.max_connections,
            max_connections_per_client: cfg.limits.max_connections_per_client,
            ..Default::default()
        };
        let server = rpc::Server::with_observer(Arc::new(svc), rpc_cfg, metrics.clone());
        tokio::spawn(metrics.clone().run_upkeep());
        tokio::spawn(feed_auth_counters(live.clone(), metrics.clone()));
        let reloader = Reloader {
            source: config_file.clone(),
            live: live.clone(),
            ids: ids.clone(),
            ids_path: ids_path.clone(),
            current: Arc::new(std::sync::Mutex::new(cfg.exports.clone())),
            tls: tls.clone(),
        };
        if config_file.is_some() {
            tokio::spawn(reload_on_hangup(reloader.clone(), tls.clone()));
        } else if let Some(t) = tls.clone() {
            tokio::spawn(reload_on_hangup_tls(t));
        }
        {
            let r = reloader.clone();
            metrics.add_admin_command("exports", move || {
                let live = r.live.load_full();
                let current = r.current.lock().unwrap();
                admin::exports_json(
                    &current,
                    |p| live.exports.by_path(p).map(|e| e.id),
                    r.source.as_ref().map(|s| s.file()),
                )
            });
            let r = reloader.clone();
            metrics.add_admin_command("reload", move || match r.reload() {
                Ok((n, changes)) => serde_json::json!({
                    "source": r.source.as_ref().map(|s| s.file().display().to_string()),
                    "exports": n,
                    "changes": changes,
                }),
                Err(e) => serde_json::json!({ "error": e }),
            });
        }
        let admin = metrics::endpoint::bind_admin(&admin_path)
            .map_err(|e| format!("cannot create the admin socket {}: {e}", admin_path.display()))?;
        info!(path = %admin_path.display(), "admin socket for tarn stats|top|doctor");
        tokio::spawn(metrics::endpoint::serve_admin(admin, metrics.clone()));
        if let Some(a) = metrics_addr {
            let l = tokio::net::TcpListener::bind(a).await.map_err(|e| format!("--metrics: cannot listen on {a}: {e}"))?;
            info!(addr = %a, "metrics on http://{a}/metrics and /status");
            tokio::spawn(metrics::endpoint::serve_http(l, metrics.clone()));
        }
        let registered = match rpcbind::register(port).await {
            Ok(()) => {
                info!(port, "registered NFS v3, MOUNT v3, NLM v4 and NSM v1 with rpcbind");
                true
            }
            Err(e) => {
                info!(reason = %e, "not registered with rpcbind: clients mount with port={port},mountport={port},nolock");
                false
            }
        };
        for e in &cfg.exports {
            let host = match addr.ip() {
                ip if ip.is_unspecified() => "SERVER".to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                ip => ip.to_string(),
            };
            // Without rpcbind the client's lockd cannot find NLM: no locking then.
            let nolock = if registered { "" } else { ",nolock" };
            println!(
                "tarn: exporting {} on {addr} (NFSv3, NFSv4.0/4.1/4.2); mount with: mount -t nfs -o vers=4.2,port={port} {host}:{} /mnt  (or vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp{nolock})",
                describe(e),
                e.pseudo
            );
        }
        let run = {
            let s = server.clone();
            tokio::spawn(async move { s.run(listener).await })
        };
        // Listening, admin socket up: systemd may start what depends on us.
        sdnotify::notify(&format!("READY=1\nSTATUS=serving {} export(s) on {addr}", cfg.exports.len()));
        stop.wait().await;
        sdnotify::notify("STOPPING=1\nSTATUS=stopping: answering calls in flight");
        info!("stopping: answering calls in flight");
        if tokio::time::timeout(std::time::Duration::from_secs(30), server.shutdown()).await.is_err() {
            warn!("calls still in flight after 30 s; stopping anyway");
        }
        run.abort();
        for e in live.load_full().exports.iter() {
            let b = e.backend.clone();
            if let Err(err) = tokio::task::spawn_blocking(move || b.sync_all()).await.unwrap_or(Err(vfs::FsError::ServerFault)) {
                error!(export = %e.path.display(), error = %err, "sync at shutdown failed");
            }
        }
        if registered {
            rpcbind::unregister(port).await;
        }
        let _ = std::fs::remove_file(&admin_path);
        info!("stopped");
        Ok(())
    })
}

/// The NFSv4 state's bounds in the metrics: setting, use, refusals.
fn register_state_limits(metrics: &Arc<metrics::Metrics>, nfs4: &server::nfs4::Nfs4) {
    use rpc::observe::Limit;
    use server::nfs4::state::{LIMIT_CLIENTS, LIMIT_LOCKS, LIMIT_OPENS};
    let l = nfs4.state.limits;
    for (limit, max, k) in [
        (Limit::Nfs4Clients, l.max_clients, LIMIT_CLIENTS),
        (Limit::OpensPerClient, l.max_opens_per_client, LIMIT_OPENS),
        (Limit::LocksPerClient, l.max_locks_per_client, LIMIT_LOCKS),
    ] {
        let st = nfs4.state.clone();
        metrics.add_limit_reached_probe(limit, move || st.limit_hits()[k]);
        let st = nfs4.state.clone();
        metrics.add_limit(limit, max as u64, move || match limit {
            Limit::Nfs4Clients => st.counts().0 as u64,
            Limit::OpensPerClient => st.busiest_client().0 as u64,
            _ => st.busiest_client().1 as u64,
        });
    }
    let st = nfs4.state.clone();
    metrics.add_limit(
        Limit::Delegations,
        nfs4.cfg.max_delegations as u64,
        move || st.delegations() as u64,
    );
}

/// The exports of `cfg`: a directory already exported in `old` keeps its
/// backend (its open descriptors and caches), the rest are opened here.
/// `--debug-inject-faults`: exports are wrapped in [`vfs::faulty::Faulty`].
static INJECT_FAULTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn build_exports(cfg: &Config, old: Option<&Exports>) -> Result<Vec<Export>, String> {
    let mut exports = Vec::new();
    for e in &cfg.exports {
        let backend: Arc<dyn vfs::Backend> = match old.and_then(|o| o.by_path(&e.path)) {
            Some(o) => o.backend.clone(),
            None => {
                let fs: Arc<dyn vfs::Backend> = match &e.ceph {
                    Some(c) => Arc::new(
                        vfs::cephfs::CephFs::new(c)
                            .map_err(|err| format!("cannot export {}: {err}", e.path.display()))?,
                    ),
                    None => Arc::new(
                        vfs::local::LocalFs::new(&e.path)
                            .map_err(|err| format!("cannot export {}: {err}", e.path.display()))?,
                    ),
                };
                if INJECT_FAULTS.load(std::sync::atomic::Ordering::Relaxed) {
                    warn!(export = %e.path.display(), "debug fault injection: files named eio-* fail with EIO, edquot-* run out of quota");
                    Arc::new(vfs::faulty::Faulty::new(fs))
                } else {
                    fs
                }
            }
        };
        exports.push(Export {
            id: 0,
            path: e.path.clone(),
            pseudo: e.pseudo.clone(),
            backend,
            rules: e.rules.clone(),
            sec: e.sec.clone(),
            delegations: e.delegations,
            xprtsec: e.xprtsec.clone(),
        });
    }
    Ok(exports)
}

/// A head of the cluster failed: ends its CephFS sessions (named after
/// the id it recorded in etcd) for every CephFS export, so the POSIX locks
/// it held are released now, not when the MDS times the session out, and
/// its clients' reclaims on this head can take them. On its own thread:
/// ending a session takes a round trip to the monitors and the MDS, and
/// the cluster driver must keep its etcd lease meanwhile.
fn reset_lost_head(etcd: Arc<etcd::Etcd>, node: String, exports: Vec<vfs::cephfs::CephConfig>) {
    let spawned = std::thread::Builder::new()
        .name("tarn-ceph-reset".into())
        .spawn(move || {
            let id = match etcd.ceph_id(&node) {
                Ok(Some(id)) => id,
                Ok(None) => return,
                Err(e) => {
                    warn!(node, error = %e, "cluster: cannot read a failed head's CephFS name; its locks stay until its session times out");
                    return;
                }
            };
            for cfg in exports {
                let t = std::time::Instant::now();
                match vfs::cephfs::reset_head_session(&id, &cfg) {
                    Ok(ended) => info!(node, path = cfg.path, ended, ms = t.elapsed().as_millis() as u64, "cluster: ended a failed head's CephFS session (its locks and capabilities are free)"),
                    Err(e) => warn!(node, path = cfg.path, error = %e, "cluster: cannot end a failed head's CephFS session; its locks stay until it times out"),
                }
            }
        });
    if let Err(e) = spawned {
        warn!(error = %e, "cluster: cannot start a thread to end a failed head's CephFS session");
    }
}

/// This head's name for its CephFS sessions, made once and kept in the
/// state directory, so a restart ends the session a crash left
/// (vfs::cephfs::set_head_id). Only made when a CephFS export is served at
/// startup: one added by a reload mounts without it.
fn ceph_head_id(state_dir: &Path) -> Result<String, String> {
    let path = state_dir.join("ceph-head-id");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        _ => {
            let id = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
                .map(|u| u.trim().to_string())
                .map_err(|e| format!("a name for this head: {e}"))?;
            vfs::durable::replace(&path, id.as_bytes())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(id)
        }
    }
}

/// SIGHUP: re-read the exports. Connections stay; each call after the swap
/// sees the new rules with an empty auth cache. A bad file changes nothing.
/// (listen, state_dir and [nfs4] need a restart: they are logged, not applied.)
/// The export-id map of the state directory (none yet: an empty map, so a
/// first start numbers exports in file order, as before the map existed).
fn load_ids(path: &Path) -> Result<ExportIds, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => ExportIds::parse(&t).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ExportIds::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Replaces the map whole and durably: a crash leaves the old one or the
/// new one, and clients' handles depend on it.
fn save_ids(path: &Path, ids: &ExportIds) -> Result<(), String> {
    vfs::durable::replace(path, ids.render().as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Re-reads the configuration (SIGHUP or `tarn reload`), one reload at a time.
#[derive(Clone)]
struct Reloader {
    source: Option<ConfigSource>,
    live: Arc<Live>,
    ids: Arc<std::sync::Mutex<ExportIds>>,
    ids_path: PathBuf,
    /// The exports in force, as configured (for `tarn exports` and the diff).
    current: Arc<std::sync::Mutex<Vec<ExportConfig>>>,
    /// Its `[[tls.identity]]` rules are replaced on reload.
    tls: Option<Arc<rpc::tls::TlsServer>>,
}

impl Reloader {
    /// Blocking. The number of exports now and what changed; on error the
    /// previous configuration stays in force.
    fn reload(&self) -> Result<(usize, Vec<String>), String> {
        let Some(source) = &self.source else {
            return Err("this server was started with DIR, not --config or --exports: there is no file to reload".into());
        };
        let file = source.file().display().to_string();
        let mut current = self.current.lock().unwrap();
        sdnotify::notify("RELOADING=1");
        let r = (|| {
            let cfg = source.load()?;
            let old = self.live.load_full();
            let built = build_exports(&cfg, Some(&old.exports))?;
            let mut ids = self.ids.lock().unwrap();
            let mut next = ids.clone();
            let exports = Exports::with_ids(built, &mut next);
            if next != *ids {
                save_ids(&self.ids_path, &next)?;
                *ids = next;
            }
            self.live.replace(exports, cfg.auth_cache.clone());
            let mut changes = admin::diff(&current, &cfg.exports);
            if let Some(t) = &self.tls {
                if *t.identities() != cfg.tls_identities {
                    changes.push(format!(
                        "TLS identity rules: {} now, {} before (new connections are mapped by them; connections up keep their user)",
                        cfg.tls_identities.len(),
                        t.identities().len()
                    ));
                    log_identity_rules(&cfg.tls_identities, t);
                    t.set_identities(cfg.tls_identities.clone());
                }
            }
            *current = cfg.exports;
            Ok::<_, String>(changes)
        })();
        sdnotify::notify(&format!(
            "READY=1\nSTATUS=serving {} export(s)",
            current.len()
        ));
        match r {
            Ok(changes) => {
                info!(file = %file, exports = current.len(), changes = changes.len(), "configuration reloaded; auth cache flushed");
                for c in &changes {
                    info!("{c}");
                }
                for e in current.iter() {
                    info!("now exporting {}", describe(e));
                }
                Ok((current.len(), changes))
            }
            Err(e) => {
                error!(error = %e, "configuration NOT reloaded; the previous one stays in force");
                Err(e)
            }
        }
    }
}

async fn reload_on_hangup(r: Reloader, tls: Option<Arc<rpc::tls::TlsServer>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        warn!("cannot catch SIGHUP: configuration reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        let r = r.clone();
        let _ = tokio::task::spawn_blocking(move || r.reload()).await;
        if let Some(t) = &tls {
            reload_tls(t);
        }
    }
}

/// SIGHUP without a config file: the TLS certificate and key are read again.
async fn reload_on_hangup_tls(tls: Arc<rpc::tls::TlsServer>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        warn!("cannot catch SIGHUP: TLS certificate reload disabled");
        return;
    };
    while hup.recv().await.is_some() {
        reload_tls(&tls);
    }
}

/// Reads the certificate, key and client CA again: new connections get
/// them, connections up keep theirs. A bad file changes nothing.
fn reload_tls(t: &rpc::tls::TlsServer) {
    match t.reload(None) {
        Ok(()) => {
            rpc::tls_events::global().set_server(rpc::tls_events::ServerTls::of(&t.files()));
            info!("TLS certificate, key and client CA reloaded")
        }
        Err(e) => error!(error = %e, "TLS files NOT reloaded; the previous ones stay in force"),
    }
}

/// The RPC-with-TLS state: from --tls-cert/--tls-key/--tls-client-ca,
/// else the config's [tls]. Exports that require TLS without it are an
/// error (no client could use them).
fn tls_server(
    cfg: &mut Config,
    sec: &SecOpts,
    from_file: bool,
) -> Result<Option<Arc<rpc::tls::TlsServer>>, String> {
    if let Some(list) = &sec.xprtsec {
        if from_file {
            return Err(
                "--xprtsec is for the default export: with --config, set `xprtsec` per export"
                    .into(),
            );
        }
        let mut v = Vec::new();
        for x in list.split(',').map(str::trim) {
            let x: rpc::tls::XprtSec = x.parse().map_err(|e| format!("--xprtsec {e}"))?;
            if !v.contains(&x) {
                v.push(x);
            }
        }
        for e in &mut cfg.exports {
            e.xprtsec = v.clone();
        }
    }
    let files = match (&sec.tls_cert, &sec.tls_key) {
        (Some(cert), Some(key)) => Some(rpc::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: sec
                .tls_client_ca
                .clone()
                .or_else(|| cfg.tls.as_ref().and_then(|t| t.client_ca.clone())),
        }),
        (None, None) => {
            if sec.tls_client_ca.is_some() {
                return Err("--tls-client-ca needs --tls-cert and --tls-key".into());
            }
            cfg.tls.clone()
        }
        _ => return Err("--tls-cert and --tls-key go together".into()),
    };
    let Some(files) = files else {
        if let Some(e) = cfg
            .exports
            .iter()
            .find(|e| !e.xprtsec.contains(&rpc::tls::XprtSec::None))
        {
            return Err(format!(
                "export {} requires TLS (xprtsec) but no certificate is configured (--tls-cert/--tls-key or [tls])",
                e.path.display()
            ));
        }
        return Ok(None);
    };
    if files.client_ca.is_none() {
        if let Some(e) = cfg
            .exports
            .iter()
            .find(|e| e.xprtsec == [rpc::tls::XprtSec::Mtls])
        {
            warn!(export = %e.path.display(), "export accepts only mtls but no client CA is configured (--tls-client-ca): no client can use it");
        }
    }
    let t = rpc::tls::TlsServer::new(files.clone())?;
    rpc::tls_events::global().set_server(rpc::tls_events::ServerTls::of(&files));
    log_identity_rules(&cfg.tls_identities, &t);
    t.set_identities(cfg.tls_identities.clone());
    let ktls = t.set_ktls(sec.tls_ktls.or(cfg.tls_ktls).unwrap_or_default());
    // The one line that says why connections stay in user space, if they do
    // (the metric tarn_tls_connections counts each path).
    info!(cert = %files.cert.display(), client_ca = ?files.client_ca, ktls = %ktls.mode(), "RPC-with-TLS enabled (TLS 1.3, ALPN sunrpc; {})", ktls.summary());
    Ok(Some(t))
}

fn log_identity_rules(rules: &[rpc::tls_identity::IdentityRule], t: &rpc::tls::TlsServer) {
    if !rules.is_empty() && t.files().client_ca.is_none() {
        warn!("[[tls.identity]] is configured but no client CA: no certificate is verified, none is mapped");
    }
    for r in rules {
        info!(r#match = %r.text, uid = r.uid, gid = r.gid, gids = ?r.gids, "TLS identity mapping");
    }
}

/// Copies the auth cache's counters into the metrics once a second (the
/// cache counts per shard, under locks it already holds, so the request
/// path pays no shared atomic for them).
async fn feed_auth_counters(live: Arc<Live>, m: Arc<metrics::Metrics>) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut t = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        t.tick().await;
        let s = live.cache_stats();
        m.server.auth_cache_hits.store(s.hits, Relaxed);
        m.server.auth_cache_misses.store(s.misses, Relaxed);
        m.server.auth_cache_evictions.store(s.evictions, Relaxed);
    }
}

/// The RPCSEC_GSS acceptor, when an export accepts a Kerberos flavor:
/// the keytab must exist and hold a usable key, or the server does not start.
fn gss_server(cfg: &Config, sec: &SecOpts) -> Result<Option<Arc<rpc::gss::GssServer>>, String> {
    let krb = cfg
        .exports
        .iter()
        .any(|e| e.sec.iter().any(|f| f.gss_service().is_some()));
    if !krb {
        if sec.keytab.is_some() {
            warn!("--keytab given but no export accepts krb5, krb5i or krb5p");
        }
        return Ok(None);
    }
    let keytab_arg = match (&sec.keytab, &cfg.gss.keytab) {
        (Some(k), _) => Some(("--keytab", k)),
        (None, Some(k)) => Some(("[gss] keytab", k)),
        (None, None) => None,
    };
    if let Some((what, k)) = keytab_arg {
        if !k.is_file() {
            return Err(format!("{what} {}: no such file", k.display()));
        }
        let abs = k
            .canonicalize()
            .map_err(|e| format!("{what} {}: {e}", k.display()))?;
        // MIT reads the acceptor keytab from here; set before any thread starts.
        std::env::set_var("KRB5_KTNAME", format!("FILE:{}", abs.display()));
    }
    let keytab = std::env::var("KRB5_KTNAME").unwrap_or_else(|_| "/etc/krb5.keytab".into());
    let services = keytab::check(&keytab)?;
    if sec.gss_window == 0 {
        return Err("--gss-window must be at least 1".into());
    }
    let mut map = server::principal::PrincipalMap {
        principals: cfg.gss.principals.clone(),
        ..Default::default()
    };
    if cfg.gss.machines_anonymous {
        map.machine = None;
    }
    map.local_realms = match &cfg.gss.local_realms {
        Some(r) => r.clone(),
        None => server::principal::default_realm().into_iter().collect(),
    };
    if map.local_realms.is_empty() {
        warn!("no default_realm in krb5.conf and no [gss] local_realms: user@ANY-REALM maps to the local user");
    }
    let gcfg = rpc::gss::GssConfig {
        window: sec.gss_window,
        max_contexts: cfg.limits.max_gss_contexts,
        // Replays are remembered over 8x the window (rule 4).
        replay_range: sec.gss_window.saturating_mul(8).max(1024),
        map: {
            let map = map.clone();
            Arc::new(move |p| map.map(p))
        },
    };
    let map_realms = map.local_realms;
    let g = rpc::gss::GssServer::new(gcfg).map_err(|e| format!("{e} (keytab {keytab})"))?;
    info!(keytab = %keytab, ?services, window = sec.gss_window, local_realms = ?map_realms, "RPCSEC_GSS enabled (krb5, krb5i, krb5p)");
    Ok(Some(Arc::new(g)))
}

/// SIGTERM and SIGINT, caught from the moment this is made: installed
/// before the server announces itself, so a stop request that comes right
/// after cannot hit the default action and kill the process uncleanly.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> Result<StopSignals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?,
            int: signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT handler: {e}"))?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
