//! Client tools: `ls`, `cat`, `stat`, `df`, `mkdir`, `rm`, `mv`, `ln`,
//! `cp` and `lock` on `nfs://` URLs, over NFSv3 or NFSv4.1/4.2 with
//! AUTH_SYS or Kerberos (crates/client, through `client::remote`).
//!
//! One file per command group (the URL and the connection it names are
//! the client library's `client::url` and `client::connect`): `fmt` (mode
//! strings, times), `list` (ls, stat, df),
//! `change` (mkdir, rm, mv, ln), `copy` (cp, cat) over `transfer` (the
//! pipelined data mover), `small` (a small file in one NFSv4 COMPOUND),
//! `lock` (a lock held while a command runs) and `progress` (counts,
//! the progress line).

mod change;
// The URL and the connection it names live in the client library, where
// `tarn mount` uses them too.
pub(crate) use client::connect as conn;
mod copy;
mod failover;
mod fmt;
mod list;
mod lock;
mod progress;
mod small;
mod soak;
mod transfer;
pub use client::url;

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum ToolCmd {
    /// List a directory on an NFS server (nfs://host[:port]/path).
    Ls {
        /// Long format: mode, links, owner, group, size, mtime, name.
        #[arg(short = 'l')]
        long: bool,
        /// List subdirectories too.
        #[arg(short = 'R')]
        recursive: bool,
        /// Show entries whose names start with '.'.
        #[arg(short = 'a')]
        all: bool,
        url: String,
    },
    /// Write a file on an NFS server to standard output.
    Cat { url: String },
    /// Show a file's attributes (type, size, mode, owner, times, fileid, change).
    Stat { url: String },
    /// Space and files used and free on the server's file system.
    Df { url: String },
    /// Create a directory on an NFS server.
    Mkdir {
        /// Create missing parents; no error if it exists.
        #[arg(short = 'p')]
        parents: bool,
        url: String,
    },
    /// Remove a file, or with -r a directory tree, on an NFS server.
    Rm {
        #[arg(short = 'r', short_alias = 'R')]
        recursive: bool,
        url: String,
    },
    /// Rename within one server (into TO if it is a directory).
    Mv { from: String, to: String },
    /// Copy between local paths and nfs:// URLs, keeping modes and modification times.
    Cp(copy::CpArgs),
    /// Make a hard link to TARGET (a URL on the same server), or with -s
    /// a symbolic link holding the text TARGET.
    Ln {
        #[arg(short = 's', long)]
        symbolic: bool,
        target: String,
        /// The new name (into it, if it is a directory).
        url: String,
    },
    /// Hold a byte-range lock on a file while a command runs (exit status: the command's).
    Lock(lock::LockArgs),
    /// The soak test's client (scripts/soak.sh).
    #[command(hide = true)]
    SoakClient(soak::SoakArgs),
    /// The soak test's check of acknowledged data (scripts/soak.sh).
    #[command(hide = true)]
    SoakVerify(soak::VerifyArgs),
    /// The failover test's client that follows the service address (tests/cluster/failover.sh).
    #[command(hide = true)]
    FailoverHold(failover::HoldArgs),
    /// The failover test's competing lock attempt (tests/cluster/failover.sh).
    #[command(hide = true)]
    FailoverProbe(failover::ProbeArgs),
}

/// Runs one tool on a fresh runtime. Errors go to stderr, one line each,
/// and the exit status is non-zero.
pub fn run(cmd: ToolCmd) -> ExitCode {
    // Warnings reach the user (a Kerberos credential about to expire with
    // no newer ticket); TARN_LOG=info shows context renewals too.
    let filter = tracing_subscriber::EnvFilter::try_from_env("TARN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .without_time()
        .with_writer(std::io::stderr)
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tarn: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = rt.block_on(async {
        let mut c = conn::Client::default();
        let r = match cmd {
            ToolCmd::Ls {
                long,
                recursive,
                all,
                url,
            } => {
                list::ls(
                    &mut c,
                    &url,
                    list::LsOpts {
                        long,
                        recursive,
                        all,
                    },
                )
                .await
            }
            ToolCmd::Cat { url } => copy::cat(&mut c, &url).await,
            ToolCmd::Stat { url } => list::stat(&mut c, &url).await,
            ToolCmd::Df { url } => list::df(&mut c, &url).await,
            ToolCmd::Mkdir { parents, url } => change::mkdir(&mut c, &url, parents).await,
            ToolCmd::Rm { recursive, url } => change::rm(&mut c, &url, recursive).await,
            ToolCmd::Mv { from, to } => change::mv(&mut c, &from, &to).await,
            ToolCmd::Cp(a) => copy::cp(&mut c, &a).await,
            ToolCmd::Ln {
                symbolic,
                target,
                url,
            } => change::ln(&mut c, &target, &url, symbolic).await,
            ToolCmd::SoakClient(a) => soak::client(a).await,
            ToolCmd::SoakVerify(a) => soak::verify(a),
            ToolCmd::FailoverHold(a) => return failover::hold(a).await,
            ToolCmd::FailoverProbe(a) => return failover::probe(a).await,
            ToolCmd::Lock(a) => {
                let r = lock::lock(&mut c, &a).await;
                c.close().await;
                return r;
            }
        };
        c.close().await;
        r.map(|()| ExitCode::SUCCESS)
    });
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tarn: {e}");
            ExitCode::FAILURE
        }
    }
}
