//! 4 KiB random reads of one file through the client library, one at a
//! time, for a number of seconds: the library's side of the random-read
//! line of scripts/fuse-bench.sh (the same work through `tarn mount`).
//! NFSv4.1/4.2 with AUTH_SYS as uid/gid 1000; PATH is below the server's
//! root.
//!
//! `cargo run --release -p client --example randread -- ADDR PATH SECONDS [MINOR]`

use client::nfs4::{Nfs4Conn, Session, SessionOptions};
use client::remote::Remote;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: randread ADDR PATH SECONDS [MINOR]");
        std::process::exit(2);
    }
    let addr: SocketAddr = a[1].parse().expect("ADDR is host:port");
    let path = a[2].clone();
    let secs: f64 = a[3].parse().expect("SECONDS");
    let minor: u32 = a.get(4).map_or(1, |m| m.parse().expect("MINOR"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let conn = Nfs4Conn::connect(addr, 1000, 1000).await.expect("connect");
        let o = SessionOptions {
            minorversion: minor,
            ..SessionOptions::default()
        };
        let s = Session::establish(conn, &o).await.expect("session");
        let r = Remote::from_v4(Arc::new(s)).await.expect("remote");
        let (fh, attr) = r.lookup_path_attr(&path).await.expect("lookup");
        let blocks = attr.size.unwrap_or(0) / 4096;
        assert!(blocks > 0, "{path}: smaller than 4 KiB");
        // xorshift: offsets spread over the file, no dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut lat: Vec<Duration> = vec![];
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < secs {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = (x % blocks) * 4096;
            let t = Instant::now();
            let (b, _) = r.read(&fh, off, 4096).await.expect("read");
            lat.push(t.elapsed());
            assert_eq!(b.len(), 4096);
        }
        let total = t0.elapsed().as_secs_f64();
        lat.sort();
        let n = lat.len();
        let mean = lat.iter().sum::<Duration>().as_secs_f64() / n as f64;
        println!(
            "{n} reads in {total:.1} s: {:.0} IOPS, latency mean {:.0} us, p50 {} us, p99 {} us",
            n as f64 / total,
            mean * 1e6,
            lat[n / 2].as_micros(),
            lat[n * 99 / 100].as_micros()
        );
        r.close_all().await;
    });
}
