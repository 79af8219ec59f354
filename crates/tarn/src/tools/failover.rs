//! The failover test's NFSv4.1 clients (hidden commands; tests/cluster/failover.sh runs them).
//!
//! `tarn failover-hold ADDR --dir DIR --name FILE` is the client that follows the service
//! address: it creates FILE, writes data acknowledged as stable (FILE_SYNC, then UNSTABLE +
//! COMMIT), takes a write lock on the whole file and says so (`DIR/held`). Once `DIR/go` appears
//! (the head behind ADDR has been killed) it keeps writing until a write succeeds again, and
//! writes that moment (`DIR/first-ok`, ns since the epoch). The session's own recovery (new
//! client, CLAIM_PREVIOUS open, reclaimed lock) happens inside that call. It then checks the
//! lock was reclaimed, finishes its writes, reads the whole file back and compares it byte for
//! byte, says `DIR/reclaimed`, and holds the lock until `DIR/release` appears.
//!
//! `tarn failover-probe ADDR --name FILE` is another client trying to take a conflicting lock
//! once, without waiting: it prints GRANTED (and lets go at once), DENIED or GRACE.

use bytes::Bytes;
use client::nfs4::{Nfs4Conn, Session, SessionOptions};
use proto::nfs4::{NfsLockType4, Nfsstat4, StableHow4, OPEN4_SHARE_ACCESS_BOTH};
use rpc::client::ChannelOptions;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
pub struct HoldArgs {
    /// The service address, ADDR:PORT.
    addr: SocketAddr,
    /// Where the handshake files are (held, go, first-ok, reclaimed, release).
    #[arg(long)]
    dir: PathBuf,
    /// The file to create in the export's root.
    #[arg(long)]
    name: String,
    /// KiB written before the failover (half FILE_SYNC, half UNSTABLE + COMMIT).
    #[arg(long, default_value_t = 4096)]
    before_kib: u64,
    /// KiB written after it.
    #[arg(long, default_value_t = 4096)]
    after_kib: u64,
    /// Seconds to wait for each handshake file, and for the first write after the kill.
    #[arg(long, default_value_t = 300)]
    wait: u64,
}

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// A head's address, ADDR:PORT.
    addr: SocketAddr,
    /// The file (in the export's root) to lock.
    #[arg(long)]
    name: String,
}

const CHUNK: u64 = 64 << 10;

/// The file's content: bytes that differ with their offset, so a block
/// written at the wrong place or lost shows.
fn pattern(off: u64, len: u64) -> Bytes {
    (off..off + len)
        .map(|i| ((i * 7 + i / 4096) % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn say(dir: &Path, file: &str, text: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), text).map_err(|e| format!("{file}: {e}"))
}

async fn wait_for(dir: &Path, file: &str, secs: u64) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(secs);
    while !dir.join(file).exists() {
        if Instant::now() > until {
            return Err(format!("{file} did not appear in {secs} s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn session(
    addr: SocketAddr,
    who: &str,
    grace_retry: Duration,
) -> Result<Arc<Session>, String> {
    // Short timeouts and reconnect pauses: the server behind the address
    // dies, and the measure is how soon the client gets through again.
    let opts = ChannelOptions {
        timeo: Duration::from_secs(10),
        min_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        server: addr.to_string(),
        ..Default::default()
    };
    let conn = Nfs4Conn::connect_channel(addr, 0, 0, opts)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let o = SessionOptions {
        owner: Bytes::from(format!("{who}-{}-{}", std::process::id(), epoch_ns())),
        grace_retry_for: grace_retry,
        ..SessionOptions::default()
    };
    Ok(Arc::new(
        Session::establish(conn, &o)
            .await
            .map_err(|e| format!("session with {addr}: {e}"))?,
    ))
}

pub async fn hold(a: HoldArgs) -> Result<ExitCode, String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |e: client::nfs4::Error| format!("{what}: {e}")
    };
    let s = session(a.addr, "failover-hold", Duration::from_secs(a.wait)).await?;
    let renewal = s.spawn_renewal(Duration::from_secs(5));
    let dir = s.lookup_path("/").await.map_err(e("lookup /"))?;
    let (sid, fh) = s
        .open(&dir, &a.name, Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
        .await
        .map_err(e("open"))?;
    let before = a.before_kib << 10;
    let mut off = 0;
    while off < before {
        let n = CHUNK.min(before - off);
        let how = if off < before / 2 {
            StableHow4::FILE_SYNC4
        } else {
            StableHow4::UNSTABLE4
        };
        s.write(&sid, &fh, off, pattern(off, n), how)
            .await
            .map_err(e("write"))?;
        off += n;
    }
    s.commit(&fh, 0, 0).await.map_err(e("commit"))?;
    let owner = s.new_owner("lock");
    let locker = s.new_lock_owner(&sid, &owner);
    let lsid = s
        .lock(&fh, locker, NfsLockType4::WRITE_LT, 0, u64::MAX)
        .await
        .map_err(e("lock"))?
        .map_err(|d| format!("lock denied: {d:?}"))?;
    println!("held: {before} bytes stable, write lock on the whole file");
    say(&a.dir, "held", "")?;

    wait_for(&a.dir, "go", a.wait).await?;
    let t0 = Instant::now();
    let n = CHUNK;
    loop {
        match s
            .write(&sid, &fh, off, pattern(off, n), StableHow4::FILE_SYNC4)
            .await
        {
            Ok(_) => break,
            Err(err) if t0.elapsed() < Duration::from_secs(a.wait) => {
                eprintln!("write after the kill: {err}; again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => return Err(format!("no write went through in {} s: {err}", a.wait)),
        }
    }
    let first = epoch_ns();
    say(&a.dir, "first-ok", &first.to_string())?;
    off += n;
    let book = s.state_book();
    println!(
        "first write after the kill: {:.2} s after go; recoveries {}, opens {}, locks {}",
        t0.elapsed().as_secs_f64(),
        s.recoveries(),
        book.opens.len(),
        book.locks.len()
    );
    if s.recoveries() < 1 || book.opens.len() != 1 || book.locks.len() != 1 {
        return Err("the open and the lock were not both reclaimed".into());
    }

    let end = off + (a.after_kib << 10);
    while off < end {
        let n = CHUNK.min(end - off);
        s.write(&sid, &fh, off, pattern(off, n), StableHow4::UNSTABLE4)
            .await
            .map_err(e("write after failover"))?;
        off += n;
    }
    s.commit(&fh, 0, 0)
        .await
        .map_err(e("commit after failover"))?;
    let mut h = Sha256::new();
    let mut at = 0;
    while at < end {
        let r = s
            .read(&sid, &fh, at, CHUNK.min(end - at) as u32)
            .await
            .map_err(e("read back"))?;
        if r.data.is_empty() {
            break;
        }
        if r.data != pattern(at, r.data.len() as u64) {
            return Err(format!(
                "data differs in the {} bytes at {at}",
                r.data.len()
            ));
        }
        h.update(&r.data);
        at += r.data.len() as u64;
    }
    if at != end {
        return Err(format!("read back {at} bytes, wrote {end}"));
    }
    let sum: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    println!("verified: {end} bytes read back as written, sha256 {sum}");
    say(&a.dir, "reclaimed", &sum)?;

    wait_for(&a.dir, "release", a.wait).await?;
    s.locku(&fh, &lsid, NfsLockType4::WRITE_LT, 0, u64::MAX)
        .await
        .map_err(e("unlock"))?;
    s.close(&fh, &sid).await.map_err(e("close"))?;
    renewal.abort();
    let _ = s.destroy().await;
    println!("released and closed");
    Ok(ExitCode::SUCCESS)
}

/// Exit statuses of a probe, for the script.
const DENIED: u8 = 2;
const GRACE: u8 = 3;

pub async fn probe(a: ProbeArgs) -> Result<ExitCode, String> {
    // grace_retry_for 0: NFS4ERR_GRACE comes back to us instead of being waited out.
    let s = session(a.addr, "failover-probe", Duration::ZERO).await?;
    let r = async {
        let dir = s.lookup_path("/").await.map_err(|e| e.to_string())?;
        let (sid, fh) = match s.open(&dir, &a.name, None, OPEN4_SHARE_ACCESS_BOTH).await {
            Ok(o) => o,
            Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_GRACE) => return Ok(GRACE),
            Err(e) => return Err(format!("open: {e}")),
        };
        let owner = s.new_owner("probe");
        let code = match s
            .lock(
                &fh,
                s.new_lock_owner(&sid, &owner),
                NfsLockType4::WRITE_LT,
                0,
                u64::MAX,
            )
            .await
        {
            Ok(Ok(l)) => {
                let _ = s.locku(&fh, &l, NfsLockType4::WRITE_LT, 0, u64::MAX).await;
                0
            }
            Ok(Err(_)) => DENIED,
            Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_GRACE) => GRACE,
            Err(e) => return Err(format!("lock: {e}")),
        };
        let _ = s.close(&fh, &sid).await;
        Ok(code)
    }
    .await;
    let _ = s.destroy().await;
    let code = r?;
    println!(
        "{}",
        match code {
            0 => "GRANTED",
            DENIED => "DENIED",
            _ => "GRACE",
        }
    );
    Ok(ExitCode::from(code))
}
