//! `lock`: holds a byte-range lock on a file while a command runs, as
//! flock(1) does for local files. NFSv4 LOCK on an open of the file, or
//! NLM4 over NFSv3. The file is created (empty, 0644) when missing, as
//! flock(1) creates its lock file.

use super::conn::{nfs_err, parse, resolve_parent, Client};
use client::remote::{Kind, Range};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct LockArgs {
    /// A shared (read) lock instead of an exclusive (write) one.
    #[arg(short = 's', long)]
    pub shared: bool,
    /// Fail at once if someone else holds a conflicting lock (default: wait).
    #[arg(short = 'n', long)]
    pub nonblock: bool,
    /// First byte of the range.
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Bytes in the range; 0 means to the end of the file (and beyond).
    #[arg(long, default_value_t = 0)]
    pub len: u64,
    /// The file to lock (nfs:// URL).
    pub url: String,
    /// The command to run while the lock is held.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Exit status when the lock is held by someone else and -n was given
/// (flock(1) uses 1 too, so scripts can tell nothing from it but failure).
const BUSY: u8 = 1;

pub async fn lock(c: &mut Client, a: &LockArgs) -> Result<ExitCode, String> {
    let url = parse(&a.url)?;
    let r = c.remote(&url).await?;
    let (dir, name) = resolve_parent(&r, &url).await?;
    let fh = match r.lookup(&dir, &name).await {
        Ok(fh) => fh,
        Err(e) if e.is(Kind::NoEnt) => {
            let f = r
                .open_write(&dir, &name, 0o644, false)
                .await
                .map_err(|e| nfs_err(&url, e))?;
            r.close(&f).await.map_err(|e| nfs_err(&url, e))?;
            f.fh
        }
        Err(e) => return Err(nfs_err(&url, e)),
    };
    let range = Range {
        offset: a.offset,
        len: a.len,
    };
    let exclusive = !a.shared;
    let held = r
        .lock(&fh, (&dir, &name), range, exclusive, !a.nonblock)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    let Some(held) = held else {
        eprintln!(
            "tarn: {url}: locked by someone else ({} lock on bytes {}..{} not granted)",
            if exclusive { "exclusive" } else { "shared" },
            a.offset,
            if a.len == 0 {
                "end".to_string()
            } else {
                (a.offset + a.len).to_string()
            }
        );
        return Ok(ExitCode::from(BUSY));
    };
    let status = run(&a.command).await;
    // Released whatever the command did; an error here is reported but
    // the command's status stands.
    if let Err(e) = r.unlock(held).await {
        eprintln!("tarn: {}", nfs_err(&format!("{url} (unlock)"), e));
    }
    status
}

/// Runs the command, the lock held; its exit status becomes ours (128 +
/// the signal when a signal ended it, as shells report it). Interrupts
/// reach the command (same process group); we outlive it to unlock.
async fn run(cmd: &[String]) -> Result<ExitCode, String> {
    use std::os::unix::process::ExitStatusExt;
    use tokio::signal::unix::{signal, SignalKind};
    let (prog, args) = cmd.split_first().ok_or("lock: no command given")?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut child = match std::process::Command::new(prog).args(args).spawn() {
        Ok(c) => c,
        Err(e) => {
            // As a shell reports it: 127 not found, 126 not runnable.
            eprintln!("tarn: {prog}: {e}");
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Ok(ExitCode::from(code));
        }
    };
    let pid = child.id();
    let mut waiter = tokio::task::spawn_blocking(move || child.wait());
    let st = loop {
        tokio::select! {
            st = &mut waiter => break st.map_err(|e| e.to_string())?.map_err(|e| format!("{prog}: {e}"))?,
            _ = int.recv() => {}
            _ = term.recv() => {
                // Passed on: a terminal's ^C reaches the group, a kill(1) only us.
                let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
            }
        }
    };
    Ok(match (st.code(), st.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from(128 + sig as u8),
        _ => ExitCode::FAILURE,
    })
}
