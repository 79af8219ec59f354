//! The asynchronous copies' part of the state core: who may ask about a
//! copy, the bounds, cancellation, and how long results stay.

use super::copy::{CopyLimits, CopyStatus, NoCopy};
use super::session::{plain_channel, Session};
use super::*;
use vfs::Fid;

const LEASE: Duration = Duration::from_secs(90);

fn state() -> State {
    State::new(LEASE, Arc::new(LockManager::new()), 7)
}

fn file(n: u8) -> FileKey {
    FileKey {
        export: 0,
        fid: Fid::new(&[n]).unwrap(),
    }
}

fn attrs() -> proto::nfs4::ChannelAttrs4 {
    plain_channel(8)
}

/// A confirmed 4.1 client with a session, heard from at `now`.
fn client(st: &State, name: &str, now: Instant) -> u64 {
    let owner = Bytes::copy_from_slice(name.as_bytes());
    let (id, seq, _) = st
        .exchange_id(&owner, [1; 8], "sys:0", false, 1, now)
        .unwrap();
    st.create_session_seq(id, seq, "sys:0", now).unwrap();
    let sid = st.new_sessionid(id);
    let s = Arc::new(Session::new(sid, id, attrs(), attrs(), 0));
    assert!(st.add_session(s, Bytes::new(), now).unwrap());
    id
}

fn limits(per_client: usize, per_server: usize, keep_done: usize) -> CopyLimits {
    CopyLimits {
        per_client,
        per_server,
        keep_done,
    }
}

fn running(copied: u64) -> Result<CopyStatus, Nfsstat4> {
    Ok(CopyStatus { copied, done: None })
}

fn finished(copied: u64, s: Nfsstat4) -> Result<CopyStatus, Nfsstat4> {
    Ok(CopyStatus {
        copied,
        done: Some(s),
    })
}

#[test]
fn a_copy_reports_progress_then_its_result_to_its_client_only() {
    let st = state();
    let now = Instant::now();
    let a = client(&st, "a", now);
    let b = client(&st, "b", now);
    let sid = st.start_copy(a, file(1), &CopyLimits::default()).unwrap();
    assert_eq!(st.copies_running(), 1);
    assert_eq!(st.copy_status(a, &sid), running(0));
    assert!(st.copy_progress(&sid.other, 4096));
    assert_eq!(st.copy_status(a, &sid), running(4096));
    // Another client's stateid, as far as b can tell, does not exist.
    assert_eq!(st.copy_status(b, &sid), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
    assert_eq!(st.cancel_copy(b, &sid), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
    assert_eq!(st.test_stateid(a, &sid), Nfsstat4::NFS4_OK);
    assert_eq!(st.test_stateid(b, &sid), Nfsstat4::NFS4ERR_BAD_STATEID);
    // A running copy is cancelled, not freed.
    assert_eq!(st.free_stateid(a, &sid), Nfsstat4::NFS4ERR_LOCKS_HELD);
    assert!(st.copy_done(&sid.other, 8192, Nfsstat4::NFS4_OK, now));
    assert_eq!(st.copies_running(), 0);
    assert_eq!(st.copy_status(a, &sid), finished(8192, Nfsstat4::NFS4_OK));
    // Reported once: a second completion changes nothing.
    assert!(!st.copy_done(&sid.other, 1, Nfsstat4::NFS4ERR_IO, now));
    assert_eq!(st.copy_status(a, &sid), finished(8192, Nfsstat4::NFS4_OK));
    // The client forgets it with FREE_STATEID.
    assert_eq!(st.free_stateid(a, &sid), Nfsstat4::NFS4_OK);
    assert_eq!(st.copy_status(a, &sid), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
}

#[test]
fn cancel_stops_a_running_copy_and_forgets_a_finished_one() {
    let st = state();
    let now = Instant::now();
    let a = client(&st, "a", now);
    let sid = st.start_copy(a, file(1), &CopyLimits::default()).unwrap();
    assert_eq!(st.cancel_copy(a, &sid), Ok(true));
    assert_eq!(st.copies_running(), 0);
    // The task learns it at its next chunk, and sends no CB_OFFLOAD.
    assert!(!st.copy_progress(&sid.other, 100));
    assert!(!st.copy_done(&sid.other, 100, Nfsstat4::NFS4_OK, now));
    assert_eq!(st.copy_status(a, &sid), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
    assert_eq!(st.cancel_copy(a, &sid), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
    let done = st.start_copy(a, file(1), &CopyLimits::default()).unwrap();
    assert!(st.copy_done(&done.other, 5, Nfsstat4::NFS4_OK, now));
    assert_eq!(st.cancel_copy(a, &done), Ok(false));
    assert_eq!(st.copy_status(a, &done), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
}

#[test]
fn bounds_per_client_and_per_server() {
    let st = state();
    let now = Instant::now();
    let (a, b, c) = (
        client(&st, "a", now),
        client(&st, "b", now),
        client(&st, "c", now),
    );
    let l = limits(2, 3, 8);
    let a1 = st.start_copy(a, file(1), &l).unwrap();
    st.start_copy(a, file(2), &l).unwrap();
    assert_eq!(st.start_copy(a, file(3), &l), Err(NoCopy::ClientBusy));
    st.start_copy(b, file(4), &l).unwrap();
    assert_eq!(st.start_copy(c, file(5), &l), Err(NoCopy::ServerBusy));
    // A finished copy no longer counts against either bound.
    assert!(st.copy_done(&a1.other, 1, Nfsstat4::NFS4_OK, now));
    st.start_copy(c, file(5), &l).unwrap();
    assert_eq!(st.start_copy(99, file(6), &l), Err(NoCopy::NoClient));
}

#[test]
fn finished_results_are_kept_for_a_lease_and_bounded_in_number() {
    let st = state();
    let t0 = Instant::now();
    let a = client(&st, "a", t0);
    let l = limits(4, 16, 2);
    let mut sids = Vec::new();
    for n in 0..3u8 {
        let at = t0 + Duration::from_secs(n as u64);
        let sid = st.start_copy(a, file(n), &l).unwrap();
        assert!(st.copy_done(&sid.other, n as u64, Nfsstat4::NFS4_OK, at));
        sids.push(sid);
    }
    // The fourth copy makes room: only the newest results are kept.
    let last = st.start_copy(a, file(9), &l).unwrap();
    assert_eq!(
        st.copy_status(a, &sids[0]),
        Err(Nfsstat4::NFS4ERR_BAD_STATEID)
    );
    assert_eq!(
        st.copy_status(a, &sids[1]),
        Err(Nfsstat4::NFS4ERR_BAD_STATEID)
    );
    assert_eq!(st.copy_status(a, &sids[2]), finished(2, Nfsstat4::NFS4_OK));
    assert!(st.copy_done(&last.other, 7, Nfsstat4::NFS4ERR_NOSPC, t0 + LEASE));
    // The client stays in touch: results go a lease after they finished.
    let t = t0 + LEASE + Duration::from_secs(10);
    st.renew(a, t).unwrap();
    st.reap(t);
    assert_eq!(
        st.copy_status(a, &sids[2]),
        Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        "finished more than a lease ago"
    );
    assert_eq!(
        st.copy_status(a, &last),
        finished(7, Nfsstat4::NFS4ERR_NOSPC)
    );
    let t = t0 + LEASE * 2 + Duration::from_secs(1);
    st.renew(a, t).unwrap();
    st.reap(t);
    assert_eq!(st.copy_status(a, &last), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
}

#[test]
fn a_clients_copies_go_with_its_lease_and_with_the_client() {
    let st = state();
    let t0 = Instant::now();
    let (a, b) = (client(&st, "a", t0), client(&st, "b", t0));
    let sa = st.start_copy(a, file(1), &CopyLimits::default()).unwrap();
    let sb = st.start_copy(b, file(2), &CopyLimits::default()).unwrap();
    // b renews, a falls silent: a's copy is cancelled, b's runs on.
    let t = t0 + LEASE + Duration::from_secs(1);
    st.renew(b, t).unwrap();
    st.reap(t);
    assert!(!st.copy_progress(&sa.other, 1));
    assert!(st.copy_progress(&sb.other, 1));
    assert_eq!(st.copies_running(), 1);
    // Destroying a client takes its copies with it.
    let sessions: Vec<_> = {
        let i = st.inner.lock().unwrap();
        i.clients[&b].sessions.clone()
    };
    for s in sessions {
        st.destroy_session(&s).unwrap();
    }
    st.destroy_clientid(b, &[]).unwrap();
    assert!(!st.copy_progress(&sb.other, 2));
    assert_eq!(st.copies_running(), 0);
    assert!(st.inner.lock().unwrap().copies.is_empty());
}
