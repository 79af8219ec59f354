//! Asynchronous COPY (RFC 7862 §15.2, §15.8, §15.9): the copy stateids
//! the server hands out in COPY's `wr_callback_id`, each naming one copy
//! running in the background or finished. Pure like the rest of the
//! core: the driver (`nfs4::copy`) does the copying and tells the core
//! how far it got; the core decides who may ask about a copy, when one
//! is cancelled, and how long a result is kept.
//!
//! A copy belongs to its client (`Client::copies`). Cancelling a copy
//! (OFFLOAD_CANCEL, the client's lease running out, the client going)
//! removes it here; the driver's copy task sees that at its next chunk
//! and stops. A finished copy's result stays for a lease after it
//! finished, so a client whose CB_OFFLOAD was lost can still learn it
//! with OFFLOAD_STATUS (knfsd once forgot results once it had sent the
//! callback, and clients that missed the callback waited forever), and
//! at most [`CopyLimits::keep_done`] per client, the oldest going first.

use super::*;

/// Bounds on asynchronous copies.
#[derive(Clone, Copy, Debug)]
pub struct CopyLimits {
    /// Copies one client may have running at once.
    pub per_client: usize,
    /// Copies running at once on the whole server. A cancelled copy
    /// stops counting at once, though its task may still finish the step
    /// under way.
    pub per_server: usize,
    /// Finished copies' results kept per client.
    pub keep_done: usize,
}

impl Default for CopyLimits {
    fn default() -> Self {
        CopyLimits {
            // Each running copy takes a pool thread for one chunk at a
            // time: a few per client, and a quarter of the server's pool
            // (32 threads) in all, leave the pool to the clients' other
            // calls. (knfsd allows as many as it has threads.)
            per_client: 4,
            per_server: 8,
            keep_done: 64,
        }
    }
}

/// One asynchronous copy.
pub struct Copy {
    pub client: u64,
    /// The destination file (the one OFFLOAD_STATUS is sent for).
    pub file: FileKey,
    /// Bytes copied so far.
    pub copied: u64,
    /// Set when it finished: its status and when.
    pub done: Option<(Nfsstat4, Instant)>,
}

/// Why no asynchronous copy may start now (the caller copies
/// synchronously instead, as knfsd does at its bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoCopy {
    /// The client has [`CopyLimits::per_client`] copies running.
    ClientBusy,
    /// The server has [`CopyLimits::per_server`] copies running.
    ServerBusy,
    /// No such client.
    NoClient,
}

/// What OFFLOAD_STATUS reports: bytes copied and, once finished, how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyStatus {
    pub copied: u64,
    pub done: Option<Nfsstat4>,
}

impl State {
    /// Starts an asynchronous copy into `file` for `client`: its stateid,
    /// unless a bound is reached.
    pub fn start_copy(
        &self,
        client: u64,
        file: FileKey,
        limits: &CopyLimits,
    ) -> Result<Stateid4, NoCopy> {
        let mut i = self.inner.lock().unwrap();
        let Some(c) = i.clients.get(&client) else {
            return Err(NoCopy::NoClient);
        };
        let mine: Vec<Other> = c.copies.iter().copied().collect();
        let running = mine
            .iter()
            .filter(|o| i.copies.get(*o).is_some_and(|x| x.done.is_none()))
            .count();
        if running >= limits.per_client {
            return Err(NoCopy::ClientBusy);
        }
        if i.copies_running >= limits.per_server {
            return Err(NoCopy::ServerBusy);
        }
        // Room for this one's result among the kept ones: the oldest
        // finished results go.
        let mut done: Vec<(Instant, Other)> = mine
            .iter()
            .filter_map(|o| i.copies.get(o).and_then(|x| x.done).map(|(_, at)| (at, *o)))
            .collect();
        if done.len() >= limits.keep_done.max(1) {
            done.sort();
            let excess = done.len() + 1 - limits.keep_done.max(1);
            for (_, o) in &done[..excess] {
                Self::forget_copy(&mut i, o);
            }
        }
        let other = self.new_other(&mut i, client);
        i.copies.insert(
            other,
            Copy {
                client,
                file,
                copied: 0,
                done: None,
            },
        );
        i.copies_running += 1;
        i.clients
            .get_mut(&client)
            .expect("checked above")
            .copies
            .insert(other);
        Ok(Stateid4 { seqid: 1, other })
    }

    /// The copy task's report after each chunk: false when the copy was
    /// cancelled meanwhile (the task stops).
    pub fn copy_progress(&self, other: &Other, copied: u64) -> bool {
        let mut i = self.inner.lock().unwrap();
        match i.copies.get_mut(other) {
            Some(c) if c.done.is_none() => {
                c.copied = copied;
                true
            }
            _ => false,
        }
    }

    /// The copy finished with `status` after `copied` bytes: kept for
    /// OFFLOAD_STATUS. False when it was cancelled meanwhile (no
    /// CB_OFFLOAD is then sent: the client forgot it).
    pub fn copy_done(&self, other: &Other, copied: u64, status: Nfsstat4, now: Instant) -> bool {
        let mut i = self.inner.lock().unwrap();
        let Some(c) = i.copies.get_mut(other) else {
            return false;
        };
        if c.done.is_some() {
            return false;
        }
        c.copied = copied;
        c.done = Some((status, now));
        i.copies_running -= 1;
        true
    }

    /// Looks a copy up for `client`: any other client's, or none, is
    /// NFS4ERR_BAD_STATEID.
    fn client_copy<'a>(i: &'a Inner, client: u64, sid: &Stateid4) -> Result<&'a Copy, Nfsstat4> {
        match i.copies.get(&sid.other) {
            Some(c) if c.client == client && sid.seqid <= 1 => Ok(c),
            _ => Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
    }

    /// OFFLOAD_STATUS.
    pub fn copy_status(&self, client: u64, sid: &Stateid4) -> Result<CopyStatus, Nfsstat4> {
        let i = self.inner.lock().unwrap();
        let c = Self::client_copy(&i, client, sid)?;
        Ok(CopyStatus {
            copied: c.copied,
            done: c.done.map(|(s, _)| s),
        })
    }

    /// OFFLOAD_CANCEL: the copy is forgotten; a running one stops at its
    /// next chunk. Returns whether it was still running.
    pub fn cancel_copy(&self, client: u64, sid: &Stateid4) -> Result<bool, Nfsstat4> {
        let mut i = self.inner.lock().unwrap();
        let running = Self::client_copy(&i, client, sid)?.done.is_none();
        Self::forget_copy(&mut i, &sid.other);
        Ok(running)
    }

    /// Copies running now.
    pub fn copies_running(&self) -> usize {
        self.inner.lock().unwrap().copies_running
    }

    /// FREE_STATEID of a copy stateid: a finished copy's result is
    /// forgotten; a running copy must be cancelled first. None when `sid`
    /// is no copy of `client`'s.
    pub(super) fn free_copy(i: &mut Inner, client: u64, sid: &Stateid4) -> Option<Nfsstat4> {
        let c = Self::client_copy(i, client, sid).ok()?;
        if c.done.is_none() {
            return Some(Nfsstat4::NFS4ERR_LOCKS_HELD);
        }
        Self::forget_copy(i, &sid.other);
        Some(Nfsstat4::NFS4_OK)
    }

    /// TEST_STATEID of a copy stateid; None when it is none of `client`'s.
    pub(super) fn test_copy(i: &Inner, client: u64, sid: &Stateid4) -> Option<Nfsstat4> {
        Self::client_copy(i, client, sid)
            .ok()
            .map(|_| Nfsstat4::NFS4_OK)
    }

    fn forget_copy(i: &mut Inner, other: &Other) {
        let Some(c) = i.copies.remove(other) else {
            return;
        };
        if c.done.is_none() {
            i.copies_running -= 1;
        }
        if let Some(cl) = i.clients.get_mut(&c.client) {
            cl.copies.remove(other);
        }
    }

    /// A client's copies go: its lease ran out, it was expired or
    /// destroyed. Running ones stop at their next chunk.
    pub(super) fn drop_client_copies(i: &mut Inner, client: u64) {
        let Some(c) = i.clients.get_mut(&client) else {
            return;
        };
        let mine: Vec<Other> = c.copies.drain().collect();
        for o in mine {
            Self::forget_copy(i, &o);
        }
    }

    /// The lease timer's part: results kept for a lease are dropped, and
    /// the copies of clients whose lease ran out are cancelled (nobody
    /// will ask for them).
    pub(super) fn reap_copies(&self, i: &mut Inner, now: Instant) {
        if i.copies.is_empty() {
            return;
        }
        let lease = self.lease;
        let stale: Vec<Other> = i
            .copies
            .iter()
            .filter(|(_, c)| {
                let old = c
                    .done
                    .is_some_and(|(_, at)| now.saturating_duration_since(at) > lease);
                let lapsed = i
                    .clients
                    .get(&c.client)
                    .is_none_or(|cl| now.saturating_duration_since(cl.renewed) > lease);
                old || lapsed
            })
            .map(|(o, _)| *o)
            .collect();
        for o in stale {
            Self::forget_copy(i, &o);
        }
    }
}
