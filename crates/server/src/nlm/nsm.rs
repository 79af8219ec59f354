//! The server's side of the Network Status Monitor.
//!
//! Stable storage, in `<state-dir>/nsm/`:
//! - `state`: this server's NSM state number, odd while up; every start
//!   moves it to the next odd number, so clients see a new value.
//! - `hosts/<hex of caller_name>`: one file per client host that was
//!   granted a monitored lock, holding the address it called from. Written
//!   (and synced) before the host's first lock is granted.
//!
//! At start every recorded host is sent SM_NOTIFY (to the statd its
//! rpcbind names), so its lockd reclaims during our grace period; a host
//! notified successfully is forgotten (its reclaims record it again).
//! SM_NOTIFY from a client means the client rebooted: its locks are released.

use super::*;
use proto::nsm::*;
use std::io;
use std::path::{Path, PathBuf};

pub struct Nsm {
    /// None: no stable storage (handler tests).
    dir: Option<PathBuf>,
    state: i32,
    /// In a cluster, the host records are also kept in the shared store
    /// under this head's name, for the head that takes over if it fails.
    shared: Option<(std::sync::Arc<dyn crate::cluster::RecoveryStore>, String)>,
}

/// How a restart notification is retried: pauses double up to the last.
const NOTIFY_BACKOFF: &[u64] = &[1, 2, 4, 8, 15, 30, 60];

impl Nsm {
    /// Opens `dir` (creating it), moves the state number to the next odd
    /// value durably, and returns the hosts to notify.
    pub fn start(dir: &Path) -> io::Result<(Nsm, Vec<(Bytes, IpAddr)>)> {
        std::fs::create_dir_all(dir.join("hosts"))?;
        let path = dir.join("state");
        let old: i32 = match std::fs::read_to_string(&path) {
            Ok(s) => s.trim().parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: not a number", path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let state = if old % 2 == 0 {
            old.wrapping_add(1)
        } else {
            old.wrapping_add(2)
        };
        vfs::durable::replace(&path, format!("{state}\n").as_bytes())?;
        let nsm = Nsm {
            dir: Some(dir.to_path_buf()),
            state,
            shared: None,
        };
        let hosts = nsm.recorded()?;
        Ok((nsm, hosts))
    }

    /// No stable storage: for tests.
    pub fn in_memory(state: i32) -> Nsm {
        Nsm {
            dir: None,
            state,
            shared: None,
        }
    }

    /// Keeps the host records in `store` too, as `node`'s.
    pub fn share(
        mut self,
        store: std::sync::Arc<dyn crate::cluster::RecoveryStore>,
        node: &str,
    ) -> Nsm {
        self.shared = Some((store, node.to_string()));
        self
    }

    pub fn state(&self) -> i32 {
        self.state
    }

    fn host_path(&self, name: &[u8]) -> Option<PathBuf> {
        let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.as_ref().map(|d| d.join("hosts").join(hex))
    }

    /// Records that `name` (calling from `addr`) holds locks; durable on return.
    pub fn record(&self, name: &[u8], addr: IpAddr) -> io::Result<()> {
        if let Some((store, node)) = &self.shared {
            store.monitor(node, name, addr)?;
        }
        let Some(p) = self.host_path(name) else {
            return Ok(());
        };
        vfs::durable::replace(&p, addr.to_string().as_bytes())
    }

    pub fn forget(&self, name: &[u8]) -> io::Result<()> {
        if let Some((store, node)) = &self.shared {
            store.unmonitor(node, name)?;
        }
        let Some(p) = self.host_path(name) else {
            return Ok(());
        };
        vfs::durable::remove(&p)
    }

    /// The recorded hosts: (caller_name, address).
    pub fn recorded(&self) -> io::Result<Vec<(Bytes, IpAddr)>> {
        let Some(d) = &self.dir else {
            return Ok(Vec::new());
        };
        let mut v = Vec::new();
        for e in std::fs::read_dir(d.join("hosts"))? {
            let e = e?;
            let fname = e.file_name();
            let Some(name) = fname.to_str().and_then(unhex) else {
                continue; // a temporary file of an interrupted write
            };
            let Ok(addr) = std::fs::read_to_string(e.path())?.trim().parse() else {
                warn!(file = %e.path().display(), "unreadable NSM host record; skipped");
                continue;
            };
            v.push((Bytes::from(name), addr));
        }
        Ok(v)
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.is_empty() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Nlm {
    /// Sends SM_NOTIFY to every host recorded before this start, in the
    /// background, retrying with backoff; a host that got it is forgotten.
    pub fn notify_restart(self: &Arc<Self>, hosts: Vec<(Bytes, IpAddr)>) {
        for (name, addr) in hosts {
            let me = self.clone();
            tokio::spawn(async move {
                let shown = String::from_utf8_lossy(&name).into_owned();
                for (i, pause) in std::iter::once(&0).chain(NOTIFY_BACKOFF).enumerate() {
                    tokio::time::sleep(Duration::from_secs(*pause)).await;
                    match me.callback.notify(addr, me.nsm.state()).await {
                        Ok(()) => {
                            tracing::info!(host = %shown, %addr, state = me.nsm.state(), "sent SM_NOTIFY: the client may reclaim its locks");
                            if let Err(e) = me.nsm.forget(&name) {
                                warn!(host = %shown, error = %e, "cannot remove NSM host record");
                            }
                            return;
                        }
                        Err(e) => {
                            debug!(host = %shown, attempt = i + 1, error = %e, "SM_NOTIFY failed")
                        }
                    }
                }
                warn!(host = %shown, %addr, "client never answered SM_NOTIFY; it keeps its record for the next start");
            });
        }
    }

    /// The NSM program (100024 v1), served beside NLM so a rebooted client's
    /// statd can tell us. We are not a general status monitor: SM_MON is
    /// refused, the rest answer with our state.
    pub fn dispatch_nsm(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        let state = self.nsm.state();
        match ctx.proc_ {
            SM_STAT => {
                SmName::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                SmStatRes {
                    res_stat: SmRes::STAT_SUCC,
                    state,
                }
                .pack(out)
            }
            SM_MON => {
                Mon::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                ctx.set_status(SmRes::STAT_FAIL as u32);
                SmStatRes {
                    res_stat: SmRes::STAT_FAIL,
                    state,
                }
                .pack(out)
            }
            SM_UNMON => {
                MonId::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                SmStat { state }.pack(out)
            }
            SM_UNMON_ALL => {
                MyId::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                SmStat { state }.pack(out)
            }
            SM_SIMU_CRASH => {}
            SM_NOTIFY => {
                let a = StatChge::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
                let hosts = self.hosts_at(ctx.peer.ip());
                tracing::info!(peer = %ctx.peer, mon_name = %String::from_utf8_lossy(&a.mon_name), state = a.state, hosts = hosts.len(), "SM_NOTIFY: client rebooted; releasing its locks");
                for id in hosts {
                    self.release_host(id);
                }
            }
            _ => return Err(CallError::ProcUnavail),
        }
        Ok(())
    }

    /// A procedure's name, for logs (from [`crate::procedures::NSM1`]).
    pub fn nsm_proc_name(proc_: u32) -> &'static str {
        crate::procedures::NSM1.name(proc_)
    }
}
