use super::*;
use proptest::prelude::*;
use LockKind::{Read, Write};

fn file(n: u8) -> FileKey {
    FileKey {
        export: 1,
        fid: vfs::Fid::new(&[n]).unwrap(),
    }
}

/// The conflict and waiter of an attempt that must have queued.
fn queued(a: Attempt) -> (Conflict, Waiter) {
    match a {
        Attempt::Queued(c, w) => (c, w),
        Attempt::Granted => panic!("should block"),
    }
}

/// Owner a (client 1) holds a write lock on bytes 0..10 of file 1, and
/// owner b (client 2) waits for `want` on the same bytes.
fn b_waits_behind_a(want: LockKind, mode: WaitMode) -> (LockManager, OwnerKey, OwnerKey, Waiter) {
    let m = LockManager::new();
    let (a, b) = (owner(1, "a"), owner(2, "b"));
    m.lock(file(1), &a, Write.range(0, 10)).unwrap();
    let (_, w) = queued(m.lock_or_wait(file(1), &b, want.range(0, 10), mode));
    (m, a, b, w)
}

fn owner(client: u64, o: &'static str) -> OwnerKey {
    OwnerKey {
        client,
        owner: Bytes::from_static(o.as_bytes()),
    }
}

const EOF: u64 = u64::MAX;

/// A fresh manager and the owner most tests lock as.
fn manager_and_a() -> (LockManager, OwnerKey) {
    (LockManager::new(), owner(1, "a"))
}

fn held(m: &LockManager, f: FileKey) -> Vec<(u64, u64, LockKind)> {
    m.locks_on(f)
        .into_iter()
        .map(|(_, s, l, k)| (s, l, k))
        .collect()
}

#[test]
fn range_end_rules() {
    assert_eq!(range_end(0, 1), Some(0));
    assert_eq!(range_end(10, 5), Some(14));
    assert_eq!(range_end(10, u64::MAX), Some(u64::MAX));
    assert_eq!(range_end(0, 0), None);
    assert_eq!(range_end(1, u64::MAX - 1), Some(u64::MAX - 1));
    assert_eq!(range_end(2, u64::MAX - 1), Some(u64::MAX));
    assert_eq!(range_end(3, u64::MAX - 1), None);
    assert_eq!(range_end(u64::MAX, 1), Some(u64::MAX));
    assert_eq!(range_end(u64::MAX, 2), None);
}

#[test]
fn read_read_ok_read_write_conflict() {
    let m = LockManager::new();
    let (a, b) = (owner(1, "a"), owner(2, "b"));
    m.lock(file(1), &a, Read.range(0, 100)).unwrap();
    m.lock(file(1), &b, Read.range(50, 100)).unwrap();
    let c = m.lock(file(1), &b, Write.range(90, 20)).unwrap_err();
    assert_eq!(c.owner, a);
    assert_eq!((c.offset, c.length, c.kind), (0, 100, Read));
    let c = m.test(file(1), &a, Write.range(40, 20)).unwrap_err();
    assert!(c.owner == a || c.owner == b);
    assert_eq!(c.owner, b, "a's own locks never conflict");
    // Not overlapping: fine. Other file: fine.
    m.test(file(1), &b, Write.range(150, 10)).unwrap();
    m.lock(file(2), &b, Write.range(0, EOF)).unwrap();
    // A failed lock changes nothing.
    assert_eq!(held(&m, file(1)), vec![(0, 100, Read), (50, 100, Read)]);
}

#[test]
fn write_conflicts_with_read_and_write() {
    let m = LockManager::new();
    let (a, b) = (owner(1, "a"), owner(1, "b"));
    m.lock(file(1), &a, Write.range(10, 10)).unwrap();
    assert_eq!(
        m.lock(file(1), &b, Read.range(19, 1)).unwrap_err().kind,
        Write
    );
    assert_eq!(
        m.lock(file(1), &b, Write.range(0, 11)).unwrap_err().offset,
        10
    );
    m.lock(file(1), &b, Write.range(20, 1)).unwrap();
    m.lock(file(1), &b, Write.range(0, 10)).unwrap();
}

#[test]
fn same_owner_upgrade_and_downgrade() {
    let (m, a) = manager_and_a();
    let b = owner(2, "b");
    m.lock(file(1), &a, Read.range(0, 100)).unwrap();
    m.lock(file(1), &a, Write.range(20, 10)).unwrap();
    assert_eq!(
        held(&m, file(1)),
        vec![(0, 20, Read), (20, 10, Write), (30, 70, Read)]
    );
    // Upgrade of the whole: the pieces become one write lock.
    m.lock(file(1), &a, Write.range(0, 100)).unwrap();
    assert_eq!(held(&m, file(1)), vec![(0, 100, Write)]);
    // Upgrade refused when another reader is there; nothing changes.
    m.lock(file(1), &a, Read.range(0, 100)).unwrap();
    m.lock(file(1), &b, Read.range(50, 1)).unwrap();
    assert!(m.lock(file(1), &a, Write.range(0, 100)).is_err());
    assert_eq!(m.locks_on(file(1)).len(), 2);
    assert_eq!(m.locks_on(file(1))[0].1, 0);
    assert_eq!(m.locks_on(file(1))[0].2, 100);
}

#[test]
fn unlock_middle_splits() {
    let (m, a) = manager_and_a();
    m.lock(file(1), &a, Write.range(0, 100)).unwrap();
    m.unlock(file(1), &a, 40, 20);
    assert_eq!(held(&m, file(1)), vec![(0, 40, Write), (60, 40, Write)]);
    let b = owner(2, "b");
    m.lock(file(1), &b, Write.range(40, 20)).unwrap();
    assert!(m.lock(file(1), &b, Write.range(39, 2)).is_err());
    // Unlocking what is not held is not an error.
    m.unlock(file(1), &a, 1000, 5);
    m.unlock(file(9), &a, 0, EOF);
}

#[test]
fn adjacent_ranges_merge() {
    let (m, a) = manager_and_a();
    m.lock(file(1), &a, Read.range(0, 10)).unwrap();
    m.lock(file(1), &a, Read.range(20, 10)).unwrap();
    m.lock(file(1), &a, Read.range(10, 10)).unwrap();
    assert_eq!(held(&m, file(1)), vec![(0, 30, Read)]);
    // Different kinds stay apart.
    m.lock(file(1), &a, Write.range(30, 10)).unwrap();
    assert_eq!(held(&m, file(1)), vec![(0, 30, Read), (30, 10, Write)]);
    // Overlapping same kind merges.
    m.lock(file(1), &a, Write.range(35, 100)).unwrap();
    assert_eq!(held(&m, file(1)), vec![(0, 30, Read), (30, 105, Write)]);
}

#[test]
fn to_eof_locks() {
    let m = LockManager::new();
    let (a, b) = (owner(1, "a"), owner(2, "b"));
    m.lock(file(1), &a, Write.range(100, EOF)).unwrap();
    let c = m
        .test(file(1), &b, Read.range(u64::MAX - 1, 1))
        .unwrap_err();
    assert_eq!((c.offset, c.length), (100, EOF));
    assert!(m.test(file(1), &b, Read.range(1 << 62, EOF)).is_err());
    m.test(file(1), &b, Write.range(0, 100)).unwrap();
    // Overflowing range clamps to EOF inside the manager.
    assert!(m.test(file(1), &b, Read.range(50, u64::MAX - 1)).is_err());
    // Unlock the tail of an EOF lock: the head stays, with a finite length.
    m.unlock(file(1), &a, 200, EOF);
    assert_eq!(held(&m, file(1)), vec![(100, 100, Write)]);
    // A whole-file lock: offset 0, to EOF.
    m.unlock(file(1), &a, 0, EOF);
    m.lock(file(1), &b, Read.range(0, EOF)).unwrap();
    assert_eq!(held(&m, file(1)), vec![(0, EOF, Read)]);
    // Last byte only.
    m.lock(file(1), &a, Read.range(u64::MAX, 1)).unwrap();
    m.unlock(file(1), &b, 0, EOF);
    m.lock(file(1), &a, Write.range(u64::MAX, 1)).unwrap();
    assert_eq!(held(&m, file(1)), vec![(u64::MAX, EOF, Write)]);
}

#[test]
fn zero_length_is_empty() {
    let m = LockManager::new();
    let (a, b) = (owner(1, "a"), owner(2, "b"));
    m.lock(file(1), &a, Write.range(0, 0)).unwrap();
    assert_eq!(m.file_count(), 0);
    m.lock(file(1), &a, Write.range(0, 10)).unwrap();
    m.test(file(1), &b, Write.range(5, 0)).unwrap();
}

#[test]
fn release_owner_and_client() {
    let m = LockManager::new();
    let (a1, a2, b) = (owner(1, "a1"), owner(1, "a2"), owner(2, "b"));
    for n in 0..5 {
        m.lock(file(n), &a1, Write.range(0, 10)).unwrap();
        m.lock(file(n), &a2, Read.range(10, 10)).unwrap();
        m.lock(file(n), &b, Read.range(20, 10)).unwrap();
    }
    assert!(m.owner_holds(&a1));
    m.release_owner(&a1);
    assert!(!m.owner_holds(&a1));
    assert!(m.owner_holds(&a2));
    m.lock(file(3), &b, Write.range(0, 10)).unwrap();
    m.release_client(1);
    assert!(!m.owner_holds(&a2));
    assert!(!m.client_has_state(1));
    assert_eq!(m.file_count(), 5);
    m.release_client(2);
    assert_eq!(m.file_count(), 0, "empty file entries are removed");
    assert!(!m.client_has_state(2));
    // Releasing what does not exist is fine.
    m.release_client(7);
    m.release_owner(&a1);
}

#[test]
fn unlock_everything_leaves_no_state() {
    let (m, a) = manager_and_a();
    m.lock(file(1), &a, Write.range(0, 10)).unwrap();
    m.lock(file(2), &a, Write.range(0, 10)).unwrap();
    m.unlock(file(1), &a, 0, EOF);
    assert!(m.owner_holds(&a));
    m.unlock(file(2), &a, 0, 10);
    assert!(!m.owner_holds(&a));
    assert!(!m.client_has_state(1));
    assert_eq!(m.file_count(), 0);
}

#[test]
fn waiters_are_granted_in_order() {
    let m = LockManager::new();
    let (a, b, c) = (owner(1, "a"), owner(2, "b"), owner(3, "c"));
    m.lock(file(1), &a, Write.range(0, 100)).unwrap();
    let (conf, mut wb) = queued(m.lock_or_wait(file(1), &b, Write.range(10, 10), WaitMode::Grant));
    assert_eq!(conf.owner, a);
    let (_, mut wc) = queued(m.lock_or_wait(file(1), &c, Write.range(15, 10), WaitMode::Grant));
    assert!(m.client_has_state(2));
    assert_eq!(wb.try_served(), None);
    m.unlock(file(1), &a, 0, 50);
    // b got it on its behalf; c still conflicts, now with b.
    assert_eq!(wb.try_served(), Some(true));
    assert_eq!(wc.try_served(), None);
    assert!(m.owner_holds(&b));
    m.release_owner(&b);
    assert_eq!(wc.try_served(), Some(true));
    assert_eq!(
        m.locks_on(file(1))
            .into_iter()
            .map(|l| (l.0.client, l.1, l.2))
            .collect::<Vec<_>>(),
        vec![(1, 50, 50), (3, 15, 10)]
    );
}

#[test]
fn cancel_and_release_remove_waiters() {
    let m = LockManager::new();
    let (a, b) = (owner(1, "a"), owner(2, "b"));
    m.lock(file(1), &a, Write.range(0, EOF)).unwrap();
    let (_, mut w1) = queued(m.lock_or_wait(file(1), &b, Read.range(0, 1), WaitMode::Grant));
    assert!(m.cancel_wait(file(1), &b, w1.id));
    assert_eq!(w1.try_served(), Some(false));
    assert!(!m.cancel_wait(file(1), &b, w1.id));
    assert!(
        !m.client_has_state(2),
        "a cancelled waiter leaves no index entry"
    );
    let (_, mut w2) = queued(m.lock_or_wait(file(1), &b, Read.range(0, 1), WaitMode::Grant));
    m.release_client(2);
    assert_eq!(w2.try_served(), Some(false));
    m.unlock(file(1), &a, 0, EOF);
    assert_eq!(m.file_count(), 0);
}

#[test]
fn notify_waiters_are_woken_without_a_grant() {
    let (m, a, b, mut w) = b_waits_behind_a(Write, WaitMode::Notify);
    // A downgrade to read is not enough for a writer.
    m.lock(file(1), &a, Read.range(0, 10)).unwrap();
    assert_eq!(w.try_served(), None);
    m.release_owner(&a);
    assert_eq!(w.try_served(), Some(true));
    assert!(!m.owner_holds(&b));
    assert_eq!(m.file_count(), 0);
}

#[test]
fn downgrade_wakes_readers() {
    let (m, a, b, mut w) = b_waits_behind_a(Read, WaitMode::Grant);
    m.lock(file(1), &a, Read.range(0, 10)).unwrap();
    assert_eq!(w.try_served(), Some(true));
    assert!(m.owner_holds(&b));
}

#[test]
fn dropped_waiter_is_not_granted() {
    let (m, a, b, w) = b_waits_behind_a(Write, WaitMode::Grant);
    drop(w);
    m.unlock(file(1), &a, 0, 10);
    assert!(!m.owner_holds(&b));
    assert_eq!(m.file_count(), 0);
}

#[tokio::test]
async fn waiter_future_completes() {
    let (m, _, b, w) = b_waits_behind_a(Write, WaitMode::Grant);
    let t = tokio::spawn(w.wait());
    m.release_client(1);
    assert!(t.await.unwrap());
    assert!(m.owner_holds(&b));
}

// ---- model check: a byte array per owner, small offsets ----

const SIZE: usize = 48; // offsets < 16, lengths < 24: the last byte stands for "beyond"
const OWNERS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Lock(usize, bool, u64, u64),
    Test(usize, bool, u64, u64),
    Unlock(usize, u64, u64),
    ReleaseOwner(usize),
    ReleaseClient(u64),
}

fn len_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..24, Just(u64::MAX)]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..OWNERS, any::<bool>(), 0u64..16, len_strategy()).prop_map(|(o, w, s, l)| Op::Lock(o, w, s, l)),
        2 => (0..OWNERS, any::<bool>(), 0u64..16, len_strategy()).prop_map(|(o, w, s, l)| Op::Test(o, w, s, l)),
        3 => (0..OWNERS, 0u64..16, len_strategy()).prop_map(|(o, s, l)| Op::Unlock(o, s, l)),
        1 => (0..OWNERS).prop_map(Op::ReleaseOwner),
        1 => (0u64..2).prop_map(Op::ReleaseClient),
    ]
}

/// Owners 0 and 1 belong to client 0, owner 2 to client 1.
fn model_owner(i: usize) -> OwnerKey {
    OwnerKey {
        client: if i < 2 { 0 } else { 1 },
        owner: Bytes::from(vec![i as u8]),
    }
}

fn model_bytes(s: u64, l: u64) -> std::ops::Range<usize> {
    let e = if l == u64::MAX {
        SIZE
    } else {
        (s + l) as usize
    };
    s as usize..e
}

type Model = [[Option<LockKind>; SIZE]; OWNERS];

fn model_conflict(m: &Model, me: usize, kind: LockKind, r: std::ops::Range<usize>) -> bool {
    (0..OWNERS).filter(|&o| o != me).any(|o| {
        r.clone()
            .any(|b| m[o][b].is_some_and(|k| kind.conflicts(k)))
    })
}

/// The model's locks as the manager reports them: runs of equal kind per owner.
fn model_runs(m: &Model) -> Vec<(u64, u64, u64, LockKind)> {
    let mut v = Vec::new();
    for (o, bytes) in m.iter().enumerate() {
        let mut b = 0;
        while b < SIZE {
            let Some(k) = bytes[b] else {
                b += 1;
                continue;
            };
            let start = b;
            while b < SIZE && bytes[b] == Some(k) {
                b += 1;
            }
            let len = if b == SIZE {
                u64::MAX
            } else {
                (b - start) as u64
            };
            v.push((o as u64, start as u64, len, k));
        }
    }
    v
}

proptest! {
    #[test]
    fn matches_byte_model(ops in proptest::collection::vec(op_strategy(), 1..60)) {
        let mgr = LockManager::new();
        let f = file(0);
        let mut model: Model = [[None; SIZE]; OWNERS];
        for op in ops {
            match op {
                Op::Lock(o, w, s, l) => {
                    let kind = if w { Write } else { Read };
                    let r = model_bytes(s, l);
                    let want_conflict = model_conflict(&model, o, kind, r.clone());
                    let got = mgr.lock(f, &model_owner(o), kind.range(s, l));
                    prop_assert_eq!(got.is_err(), want_conflict, "lock {:?}", op);
                    if let Err(c) = got {
                        prop_assert!(c.owner != model_owner(o));
                        prop_assert!(kind.conflicts(c.kind));
                    } else {
                        for b in r { model[o][b] = Some(kind); }
                    }
                }
                Op::Test(o, w, s, l) => {
                    let kind = if w { Write } else { Read };
                    let want = model_conflict(&model, o, kind, model_bytes(s, l));
                    let got = mgr.test(f, &model_owner(o), kind.range(s, l));
                    prop_assert_eq!(got.is_err(), want, "test {:?}", op);
                    if let Err(c) = got {
                        // The named conflict really overlaps the tested range.
                        let (cs, ce) = (c.offset, range_end(c.offset, c.length).unwrap());
                        let (ts, te) = (s, range_end(s, l).unwrap());
                        prop_assert!(cs <= te && ts <= ce);
                    }
                }
                Op::Unlock(o, s, l) => {
                    mgr.unlock(f, &model_owner(o), s, l);
                    for b in model_bytes(s, l) { model[o][b] = None; }
                }
                Op::ReleaseOwner(o) => {
                    mgr.release_owner(&model_owner(o));
                    model[o] = [None; SIZE];
                }
                Op::ReleaseClient(c) => {
                    mgr.release_client(c);
                    for (o, bytes) in model.iter_mut().enumerate() {
                        if model_owner(o).client == c { *bytes = [None; SIZE]; }
                    }
                }
            }
            let got: Vec<_> = mgr.locks_on(f).into_iter()
                .map(|(o, s, l, k)| (o.owner[0] as u64, s, l, k)).collect();
            prop_assert_eq!(got, model_runs(&model));
            for (o, bytes) in model.iter().enumerate() {
                let holds = bytes.iter().any(|b| b.is_some());
                prop_assert_eq!(mgr.owner_holds(&model_owner(o)), holds);
            }
            prop_assert_eq!(mgr.file_count(), usize::from(model.iter().flatten().any(|b| b.is_some())));
        }
    }
}

#[test]
fn releases_are_noted_once_recording_is_on() {
    let m = LockManager::new();
    let (f, a, b) = (file(1), owner(1, "a"), owner(2, "b"));
    m.lock(f, &a, Write.range(0, 10)).unwrap();
    m.unlock(f, &a, 0, 10);
    assert!(m.take_released().is_empty(), "off by default");
    let woken = std::sync::Arc::new(AtomicU64::new(0));
    let w = woken.clone();
    m.record_releases(Box::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    m.lock(f, &a, Write.range(0, 10)).unwrap();
    m.lock(f, &b, Read.range(20, 5)).unwrap();
    m.unlock(f, &a, 2, 3);
    m.release_client(2);
    let r = m.take_released();
    assert_eq!(
        r.iter()
            .map(|r| (r.owner.client, r.offset, r.length))
            .collect::<Vec<_>>(),
        vec![(1, 2, 3), (2, 0, EOF)]
    );
    assert_eq!(woken.load(Ordering::Relaxed), 2);
    assert!(m.take_released().is_empty());
}

#[test]
fn held_in_and_restore_undo_a_grant() {
    let m = LockManager::new();
    let (f, a, b) = (file(1), owner(1, "a"), owner(2, "b"));
    m.lock(f, &a, Read.range(0, 10)).unwrap();
    m.lock(f, &a, Write.range(20, EOF)).unwrap();
    assert_eq!(m.held_in(f, &a, 5, 20), vec![(5, 5, Read), (20, 5, Write)]);
    // An upgrade over both, undone: the old locks are back as they were.
    let prev = m.held_in(f, &a, 0, 30);
    m.lock(f, &a, Write.range(0, 30)).unwrap();
    m.restore(f, &a, 0, 30, &prev);
    assert_eq!(held(&m, f), vec![(0, 10, Read), (20, EOF, Write)]);
    // Nothing before: undone to nothing, and the file forgets the owner.
    m.unlock(f, &a, 0, EOF);
    let prev = m.held_in(f, &b, 0, 5);
    assert!(prev.is_empty());
    m.lock(f, &b, Write.range(0, 5)).unwrap();
    m.restore(f, &b, 0, 5, &prev);
    assert!(held(&m, f).is_empty());
    assert!(!m.client_has_state(2));
    assert_eq!(m.file_count(), 0);
}
