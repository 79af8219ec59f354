//! `tarn`: the one binary. `tarn serve` runs the NFS server; other
//! subcommands are tools that talk to servers.

// Unsafe code only where allowed by name (bench.rs: sysconf).
#![deny(unsafe_code)]

mod admin;
mod assets;
mod bench;
mod cluster;
mod config;
mod exports_file;
mod keytab;
mod lognoise;
mod rpcbind;
mod sdnotify;
mod serve;
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
use serve::{ConfigSource, ConnOpts, LimitOpts, LockOpts, ObserveOpts, SecOpts};
use server::export::ClientSpec;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tracing::warn;

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
struct SocketOpt {
    /// The server's admin socket (default: the default state directory's admin.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

impl SocketOpt {
    fn path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| metrics::endpoint::default_socket(&serve::default_state_dir()))
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

pub(crate) fn secs(s: f64) -> std::time::Duration {
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
            match serve::serve(serve::ServeArgs {
                dir,
                listen,
                allow,
                config: source,
                state_dir,
                observe,
                locking,
                security,
                conns,
                limits,
            }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tarn: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::CheckConfig { file } => check_config(&file),
        Cmd::ImportExports { file } => import_exports(&file),
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

/// `tarn check-config FILE`: the file parsed and explained, TLS material
/// checked, libcephfs looked for when an export needs it.
fn check_config(file: &Path) -> ExitCode {
    match config::load(file) {
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
    }
}

/// `tarn import-exports FILE`: exports(5) as Tarn's TOML on stdout, what
/// could not be carried over on stderr.
fn import_exports(file: &Path) -> ExitCode {
    match std::fs::read_to_string(file) {
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

/// The exports of `cfg`: a directory already exported in `old` keeps its
/// backend (its open descriptors and caches), the rest are opened here.
/// `--debug-inject-faults`: exports are wrapped in [`vfs::faulty::Faulty`].
pub(crate) static INJECT_FAULTS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
