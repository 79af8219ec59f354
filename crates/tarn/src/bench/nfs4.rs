//! NFSv4.1 workloads for `tarn bench`, through the client crate's session:
//! `v4getattr` (SEQUENCE+PUTFH+GETATTR of the data file) and
//! `v4open-read-close` (OPEN by name, READ 4 KiB, CLOSE: three COMPOUNDs,
//! counted as one operation, each worker with its own open owner as
//! separate processes would have).

use super::{err, micros, workers, Phase, DATA_FILE};
use client::nfs4::{Nfs4Conn, Session, SessionOptions};
use proto::nfs4::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const OPS: &[&str] = &["v4getattr", "v4open-read-close"];

const GETATTR_BITS: &[u32] = client::nfs4::attr::STAT;

pub struct Fixture4 {
    session: Arc<Session>,
    root: NfsFh4,
    file: NfsFh4,
}

pub async fn setup(
    server: SocketAddr,
    export: &str,
    uid: u32,
    gid: u32,
) -> Result<Fixture4, String> {
    let conn = Nfs4Conn::connect(server, uid, gid).await.map_err(err)?;
    let session = Session::establish(conn, &SessionOptions::default())
        .await
        .map_err(err)?;
    let root = session.lookup_path(export).await.map_err(err)?;
    let name = std::str::from_utf8(DATA_FILE).expect("ASCII name");
    let file = session.lookup(&root, name).await.map_err(err)?;
    Ok(Fixture4 {
        session: Arc::new(session),
        root,
        file,
    })
}

impl Fixture4 {
    pub async fn close(&self) {
        let _ = self.session.destroy().await;
    }
}

async fn one(
    fx: &Fixture4,
    op: &str,
    owner: &StateOwner4,
    i: u64,
    blocks: u64,
) -> Result<(u64, u64), String> {
    let s = &fx.session;
    match op {
        "v4getattr" => {
            // What the Linux client asks for when it revalidates a file.
            s.getattr(&fx.file, GETATTR_BITS).await.map_err(err)?;
            Ok((0, 1))
        }
        "v4open-read-close" => {
            let name = std::str::from_utf8(DATA_FILE).expect("ASCII name");
            let o = s
                .open_with(
                    owner,
                    &fx.root,
                    name,
                    Openflag4::Default(Opentype4::OPEN4_NOCREATE),
                    1,
                    0,
                )
                .await
                .map_err(err)?;
            let off = (i.wrapping_mul(2654435761) % blocks.max(1)) * 4096;
            let r = s.read(&o.stateid, &o.fh, off, 4096).await.map_err(err)?;
            s.close(&o.fh, &o.stateid).await.map_err(err)?;
            Ok((r.data.len() as u64, 3))
        }
        other => Err(format!("unknown NFSv4 operation {other:?}")),
    }
}

pub async fn run(
    fx: &Arc<Fixture4>,
    op: &str,
    inflight: usize,
    secs: f64,
    file_size: u64,
) -> Result<Phase, String> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let results = workers(inflight, |w| {
        let (fx, op) = (fx.clone(), op.to_string());
        async move {
            let owner = fx.session.new_owner("bench");
            let (mut n, mut calls, mut bytes, mut lat) =
                (0u64, 0u64, 0u64, Vec::with_capacity(1 << 16));
            let mut i = w as u64 * 1_000_003;
            while Instant::now() < deadline {
                let t = Instant::now();
                let (b, c) = one(&fx, &op, &owner, i, file_size / 4096).await?;
                lat.push(micros(t));
                bytes += b;
                calls += c;
                n += 1;
                i += 1;
            }
            Ok::<_, String>((n, calls, bytes, lat))
        }
    })
    .await?;
    let mut r = Phase::new(op, inflight);
    for (n, c, b, l) in results {
        r.ops += n as f64;
        r.calls += c;
        r.bytes += b;
        r.lat_us.extend(l);
    }
    r.secs = start.elapsed().as_secs_f64();
    Ok(r)
}
