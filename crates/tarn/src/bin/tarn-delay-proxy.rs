//! A TCP proxy that adds a fixed one-way delay in each direction, for
//! benchmarks of latency on loopback (scripts/bench-client.sh `DELAY_MS`),
//! where the kernel has no netem.
//!
//!   tarn-delay-proxy LISTEN_ADDR TARGET_ADDR DELAY_MS
//!
//! Each connection to LISTEN_ADDR gets its own to TARGET_ADDR. Bytes are
//! forwarded both ways, each chunk DELAY_MS (fractions allowed) after it
//! was read, so the round trip grows by twice that; bandwidth is not
//! limited (chunks queue up, up to [`QUEUE`] of them, each as it came).
//! Threads and blocking I/O: the sleeps must be finer than tokio's
//! millisecond timer. Prints "listening on ADDR" once ready; runs until
//! killed.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread;
use std::time::{Duration, Instant};

/// Chunks in flight per direction: past this the reader waits (TCP's own
/// flow control then holds the sender back).
const QUEUE: usize = 4096;
/// The largest chunk read at once.
const CHUNK: usize = 256 << 10;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: tarn-delay-proxy LISTEN_ADDR TARGET_ADDR DELAY_MS");
        std::process::exit(2);
    }
    let parse = |a: &str| -> SocketAddr {
        a.parse().unwrap_or_else(|e| {
            eprintln!("tarn-delay-proxy: {a}: {e}");
            std::process::exit(2)
        })
    };
    let (listen, target) = (parse(&args[1]), parse(&args[2]));
    let delay = match args[3].parse::<f64>() {
        Ok(ms) if ms >= 0.0 => Duration::from_secs_f64(ms / 1000.0),
        _ => {
            eprintln!("tarn-delay-proxy: bad DELAY_MS {}", args[3]);
            std::process::exit(2)
        }
    };
    let l = TcpListener::bind(listen).unwrap_or_else(|e| {
        eprintln!("tarn-delay-proxy: listen on {listen}: {e}");
        std::process::exit(1)
    });
    println!("listening on {}", l.local_addr().expect("bound"));
    for c in l.incoming() {
        let Ok(c) = c else { continue };
        let s = match TcpStream::connect(target) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tarn-delay-proxy: connect to {target}: {e}");
                continue;
            }
        };
        for sock in [&c, &s] {
            let _ = sock.set_nodelay(true);
        }
        let (c2, s2) = match (c.try_clone(), s.try_clone()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => continue,
        };
        forward(c, s2, delay);
        forward(s, c2, delay);
    }
}

/// Bytes from `from` to `to`, each chunk `delay` after it was read; at
/// the end of `from`, `to` is shut for writing (the peer sees the close).
fn forward(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = sync_channel::<(Instant, Vec<u8>)>(QUEUE);
    thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Read);
    });
    thread::spawn(move || deliver(rx, &mut to));
}

fn deliver(rx: Receiver<(Instant, Vec<u8>)>, to: &mut TcpStream) {
    while let Ok((at, data)) = rx.recv() {
        let now = Instant::now();
        if at > now {
            thread::sleep(at - now);
        }
        if to.write_all(&data).is_err() {
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
