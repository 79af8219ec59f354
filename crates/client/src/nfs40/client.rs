//! An NFSv4.0 client ID (RFC 7530 §9.1.1, §16.33, §16.34) and its
//! COMPOUNDs: minor version 0, nothing added in front, retried while the
//! server answers NFS4ERR_DELAY or NFS4ERR_GRACE. RENEW keeps the lease
//! (a READ with the anonymous stateid renews nothing).

use super::owner::{LockOwner, OpenOwner};
use crate::nfs4::error::{Error, Result};
use crate::nfs4::plain;
use crate::nfs4::session::{renewal_loop, safe_to_resend, unique_owner};
use crate::nfs4::{check, Nfs4Conn};
use bytes::Bytes;
use proto::nfs4::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// What the client says about itself in SETCLIENTID.
#[derive(Clone, Debug)]
pub struct Options40 {
    /// `id`: names this client to the server across restarts.
    pub owner: Bytes,
    /// A new value tells the server this client rebooted.
    pub verifier: Verifier4,
    /// How long a COMPOUND answered NFS4ERR_DELAY or NFS4ERR_GRACE is
    /// sent again (a server's grace period is often 90 s).
    pub retry_for: Duration,
    /// RENEW every lease/3 from a task, until the client is dropped.
    pub renew: bool,
}

impl Default for Options40 {
    fn default() -> Self {
        let (owner, verifier) = unique_owner("tarn-client-4.0");
        Options40 {
            owner,
            verifier,
            retry_for: Duration::from_secs(120),
            renew: true,
        }
    }
}

pub struct Client40 {
    conn: Nfs4Conn,
    clientid: Clientid4,
    retry_for: Duration,
    lease: Duration,
    next_owner: AtomicU64,
    open_owner: Arc<OpenOwner>,
    renewal: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The callback SETCLIENTID names: an address no one can be reached at
/// (0.0.0.0 port 0). The server's probe of it fails, so it grants no
/// delegations and never calls back.
fn no_callback() -> CbClient4 {
    CbClient4 {
        cb_program: 0x4000_0000,
        cb_location: Netaddr4 {
            na_r_netid: Bytes::from_static(b"tcp"),
            na_r_addr: Bytes::from_static(b"0.0.0.0.0.0"),
        },
    }
}

/// Whether a status means "the same request later".
pub fn try_again(s: Nfsstat4) -> bool {
    matches!(s, Nfsstat4::NFS4ERR_DELAY | Nfsstat4::NFS4ERR_GRACE)
}

impl Client40 {
    /// SETCLIENTID then SETCLIENTID_CONFIRM on `conn`, then asks the
    /// lease time; with `o.renew` a task sends RENEW every lease/3.
    pub async fn establish(conn: Nfs4Conn, o: &Options40) -> Result<Arc<Client40>> {
        let set = NfsArgop4::OP_SETCLIENTID(Setclientid4args {
            client: NfsClientId4 {
                verifier: o.verifier,
                id: o.owner.clone(),
            },
            callback: no_callback(),
            callback_ident: 0,
        });
        let r = retry(&conn, o.retry_for, vec![set]).await?;
        check(&r)?;
        let (clientid, confirm) = match r.resarray.first() {
            Some(NfsResop4::OP_SETCLIENTID(Setclientid4res::NFS4_OK(ok))) => {
                (ok.clientid, ok.setclientid_confirm)
            }
            _ => return Err(Error::Protocol("SETCLIENTID: wrong result".into())),
        };
        let c = NfsArgop4::OP_SETCLIENTID_CONFIRM(SetclientidConfirm4args {
            clientid,
            setclientid_confirm: confirm,
        });
        check(&retry(&conn, o.retry_for, vec![c]).await?)?;
        let mut c = Client40 {
            conn,
            clientid,
            retry_for: o.retry_for,
            lease: Duration::from_secs(90),
            next_owner: AtomicU64::new(1),
            open_owner: Arc::new(OpenOwner::new(StateOwner4 {
                clientid,
                owner: Bytes::from_static(b"open-default"),
            })),
            renewal: Mutex::new(None),
        };
        let root = plain::lookup_path(&c, "/").await?;
        let a = plain::attrs(&c, &root, &[FATTR4_LEASE_TIME]).await?;
        if let Some(l) = a.lease_time.filter(|l| *l > 0) {
            c.lease = Duration::from_secs(l.into());
        }
        let c = Arc::new(c);
        if o.renew {
            let every = (c.lease / 3).max(Duration::from_secs(1));
            *c.renewal.lock().unwrap() = Some(spawn_renewal(Arc::downgrade(&c), every));
        }
        Ok(c)
    }

    pub fn conn(&self) -> &Nfs4Conn {
        &self.conn
    }
    pub fn clientid(&self) -> Clientid4 {
        self.clientid
    }
    /// The lease the server gave (its `lease_time`).
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The client's default open owner: one is enough for a tool, whose
    /// opens are then sequenced one after the other.
    pub fn open_owner(&self) -> &Arc<OpenOwner> {
        &self.open_owner
    }

    /// A new open owner, unique within this client.
    pub fn new_open_owner(&self) -> Arc<OpenOwner> {
        Arc::new(OpenOwner::new(self.owner_name("open")))
    }

    /// A new lock owner, unique within this client.
    pub fn new_lock_owner(&self) -> Arc<LockOwner> {
        Arc::new(LockOwner::new(self.owner_name("lock")))
    }

    fn owner_name(&self, kind: &str) -> StateOwner4 {
        let n = self.next_owner.fetch_add(1, Ordering::Relaxed);
        StateOwner4 {
            clientid: self.clientid,
            owner: Bytes::from(format!("{kind}-{n}")),
        }
    }

    /// `ops` in one COMPOUND, sent again while the server answers
    /// NFS4ERR_DELAY or NFS4ERR_GRACE. The whole reply, whatever its
    /// status. Not for seqid-mutating operations (see [`super::state`]).
    pub async fn call_raw(&self, ops: Vec<NfsArgop4>) -> Result<Compound4res> {
        retry(&self.conn, self.retry_for, ops).await
    }

    /// `ops` in one COMPOUND; their results, or the error of the one that failed.
    pub async fn call(&self, ops: Vec<NfsArgop4>) -> Result<Vec<NfsResop4>> {
        let r = self.call_raw(ops).await?;
        check(&r)?;
        Ok(r.resarray)
    }

    /// A deadline for retries that starts now.
    pub(crate) fn retry_deadline(&self) -> Instant {
        Instant::now() + self.retry_for
    }

    /// RENEW: the lease runs for another lease time.
    pub async fn renew(&self) -> Result<()> {
        self.call(vec![NfsArgop4::OP_RENEW(Renew4args {
            clientid: self.clientid,
        })])
        .await?;
        Ok(())
    }

    /// Stops renewing: the server forgets the client at lease expiry
    /// (NFSv4.0 has no DESTROY_CLIENTID). Its files should be closed first.
    pub fn stop_renewal(&self) {
        if let Some(h) = self.renewal.lock().unwrap().take() {
            h.abort();
        }
    }
}

impl Drop for Client40 {
    fn drop(&mut self) {
        self.stop_renewal();
    }
}

plain::compound_client!(Client40);

/// The pause before the next try, growing to at most 1 s.
pub(crate) async fn pause(p: &mut Duration) {
    tokio::time::sleep(*p).await;
    *p = (*p * 2).min(Duration::from_secs(1));
}

async fn retry(conn: &Nfs4Conn, retry_for: Duration, ops: Vec<NfsArgop4>) -> Result<Compound4res> {
    let args = Compound4args {
        tag: Bytes::new(),
        minorversion: 0,
        argarray: ops,
    };
    let deadline = Instant::now() + retry_for;
    let mut p = Duration::from_millis(5);
    loop {
        let res = conn.send(&args).await?;
        if !try_again(res.status)
            || !safe_to_resend(&args.argarray, res.resarray.len())
            || Instant::now() >= deadline
        {
            return Ok(res);
        }
        pause(&mut p).await;
    }
}

fn spawn_renewal(weak: Weak<Client40>, every: Duration) -> tokio::task::JoinHandle<()> {
    renewal_loop(weak, every, |c| async move { c.renew().await })
}
