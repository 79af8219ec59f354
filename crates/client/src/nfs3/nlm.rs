//! Byte-range locks over NLM version 4.
//!
//! Locks are asked for non-blocking and not monitored (NM_LOCK): the
//! client runs no status monitor, so it cannot promise the reboot
//! notifications a monitored lock relies on, and a blocked lock's GRANTED
//! callback would need an NLM server of our own. While the answer is
//! DENIED (when the caller waits) or DENIED_GRACE_PERIOD, the call is
//! repeated after a pause that grows to one second. A server without
//! NM_LOCK (PROC_UNAVAIL) is asked with LOCK, non-blocking.

use super::error::{Error, Result};
use super::Nfs3;
use bytes::Bytes;
use proto::nfs3::NfsFh3;
use proto::nlm4::*;
use std::time::Duration;
use xdr::Unpack;

/// Who holds a lock: the owner handle and the process id (svid), as the
/// server tells one holder from another on the same host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOwner {
    pub oh: Bytes,
    pub svid: i32,
}

impl LockOwner {
    /// This process's owner.
    pub fn this_process(machine: &str) -> LockOwner {
        let pid = std::process::id();
        LockOwner {
            oh: Bytes::from(format!("tarn:{pid}@{machine}")),
            svid: pid as i32,
        }
    }
}

/// Bytes `offset..offset+len`; `len` 0 means to the end of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRange {
    pub offset: u64,
    pub len: u64,
    pub exclusive: bool,
}

const MAX_PAUSE: Duration = Duration::from_secs(1);

impl Nfs3 {
    fn alock(&self, fh: &NfsFh3, owner: &LockOwner, r: LockRange) -> Nlm4Lock {
        Nlm4Lock {
            caller_name: Bytes::copy_from_slice(self.options().machine.as_bytes()),
            fh: Netobj(fh.data.clone()),
            oh: Netobj(owner.oh.clone()),
            svid: owner.svid,
            l_offset: r.offset,
            l_len: r.len,
        }
    }

    async fn nlm_call<A: xdr::Pack, R: Unpack>(&self, proc_: u32, a: &A) -> Result<R> {
        let c = self.nlm_conn().await?;
        let mut d = c.call(NLM_PROG, NLM4_VERS, proc_, a).await?;
        Ok(R::unpack(&mut d)?)
    }

    /// Takes the lock. With `wait`, a conflicting lock is waited out
    /// (asked again until granted); without, Ok(false) says it is held
    /// by someone else. The grace period after a server restart is
    /// always waited out.
    pub async fn nlm_lock(
        &self,
        fh: &NfsFh3,
        owner: &LockOwner,
        r: LockRange,
        wait: bool,
    ) -> Result<bool> {
        let mut pause = Duration::from_millis(50);
        let mut n = 0u32;
        loop {
            n += 1;
            let a = Nlm4Lockargs {
                cookie: Netobj(Bytes::copy_from_slice(&n.to_be_bytes())),
                block: false,
                exclusive: r.exclusive,
                alock: self.alock(fh, owner, r),
                reclaim: false,
                state: 0,
            };
            let res: Nlm4Res = match self.nlm_call(NLMPROC4_NM_LOCK, &a).await {
                Err(Error::Rpc(rpc::client::ClientError::Rpc(
                    rpc::msg::ReplyStatus::Accepted(proto::rpc::AcceptStat::PROC_UNAVAIL),
                ))) => self.nlm_call(NLMPROC4_LOCK, &a).await?,
                r => r?,
            };
            match res.stat.stat {
                Nlm4Stats::NLM4_GRANTED => return Ok(true),
                Nlm4Stats::NLM4_DENIED if !wait => return Ok(false),
                Nlm4Stats::NLM4_DENIED | Nlm4Stats::NLM4_DENIED_GRACE_PERIOD => {}
                other => return Err(Error::Nlm(other)),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// Releases the lock (granted also when nothing was held).
    pub async fn nlm_unlock(&self, fh: &NfsFh3, owner: &LockOwner, r: LockRange) -> Result<()> {
        let a = Nlm4Unlockargs {
            cookie: Netobj(Bytes::from_static(b"u")),
            alock: self.alock(fh, owner, r),
        };
        let mut pause = Duration::from_millis(50);
        loop {
            let res: Nlm4Res = self.nlm_call(NLMPROC4_UNLOCK, &a).await?;
            match res.stat.stat {
                Nlm4Stats::NLM4_GRANTED => return Ok(()),
                Nlm4Stats::NLM4_DENIED_GRACE_PERIOD => {}
                other => return Err(Error::Nlm(other)),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// TEST: None if `owner` could take the lock now, else who holds what.
    pub async fn nlm_test(
        &self,
        fh: &NfsFh3,
        owner: &LockOwner,
        r: LockRange,
    ) -> Result<Option<Nlm4Holder>> {
        let a = Nlm4Testargs {
            cookie: Netobj(Bytes::from_static(b"t")),
            exclusive: r.exclusive,
            alock: self.alock(fh, owner, r),
        };
        let res: Nlm4Testres = self.nlm_call(NLMPROC4_TEST, &a).await?;
        match res.test_stat {
            Nlm4Testrply::NLM4_DENIED(h) => Ok(Some(h)),
            Nlm4Testrply::Default(Nlm4Stats::NLM4_GRANTED) => Ok(None),
            Nlm4Testrply::Default(other) => Err(Error::Nlm(other)),
        }
    }
}
