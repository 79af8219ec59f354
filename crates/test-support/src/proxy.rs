//! A TCP proxy on loopback, in the caller's tokio runtime: forwards each
//! connection to where `target` points when it is accepted (a server
//! restarted elsewhere, a service address moved to another head), and with
//! `cut` set drops the server's next bytes with both connections (a reply
//! lost with its connection).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Proxy {
    pub addr: SocketAddr,
    pub target: Arc<Mutex<SocketAddr>>,
    pub cut: Arc<AtomicBool>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = Proxy {
            addr: l.local_addr().unwrap(),
            target: Arc::new(Mutex::new(target)),
            cut: Arc::default(),
            accepted: Arc::default(),
        };
        let (target, cut, accepted) = (p.target.clone(), p.cut.clone(), p.accepted.clone());
        tokio::spawn(async move {
            loop {
                let (c, _) = l.accept().await.unwrap();
                accepted.fetch_add(1, Ordering::SeqCst);
                let to = *target.lock().unwrap();
                tokio::spawn(forward(c, to, cut.clone()));
            }
        });
        p
    }

    /// Where new connections go from now on.
    pub fn point_at(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = target;
    }
}

async fn forward(mut c: TcpStream, to: SocketAddr, cut: Arc<AtomicBool>) {
    // Nobody there (the server is restarting): the client sees its
    // connection closed and tries again later.
    let Ok(mut s) = TcpStream::connect(to).await else {
        return;
    };
    let (mut b1, mut b2) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        tokio::select! {
            n = c.read(&mut b1) => match n {
                Ok(n) if n > 0 => if s.write_all(&b1[..n]).await.is_err() { return },
                _ => return,
            },
            n = s.read(&mut b2) => match n {
                Ok(n) if n > 0 => {
                    if cut.swap(false, Ordering::SeqCst) {
                        return; // both connections close
                    }
                    if c.write_all(&b2[..n]).await.is_err() { return }
                }
                _ => return,
            },
        }
    }
}
