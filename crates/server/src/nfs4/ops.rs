//! The operation table: one row per NFSv4 operation, in operation-number
//! order, saying what the dispatcher needs to know about it (after
//! Linux's `nfsd4_ops[]`). Operation numbers come from the protocol enum
//! [`NfsOpnum4`], generated from `crates/proto/specs/nfs4.x`; the table
//! only indexes by them.
//!
//! To find an operation, say OPEN:
//! - its row below: `A::OP_OPEN(a) => R::OP_OPEN(open::open(c, a).await)`
//!   names the handler, `open::open` in `nfs4/open.rs`;
//! - its wire types: `OPEN4args` / `OPEN4res` in `crates/proto/specs/nfs4.x`,
//!   generated as `proto::nfs4::Open4args` / `Open4res` (the argument and
//!   result enums `NfsArgop4::OP_OPEN`, `NfsResop4::OP_OPEN`);
//! - its tests: in-process, against the whole COMPOUND path, in
//!   `nfs4/tests/` (one file per group, below; the fixture in
//!   `nfs4/tests/mod.rs`), the state core's in `nfs4/state/tests.rs`, and
//!   end to end over TCP in `crates/client/tests/tarn_*.rs`.
//!
//! | handler module | operations | in-process tests (`nfs4/tests/`) |
//! |---|---|---|
//! | `fh` | PUTFH, PUTROOTFH, PUTPUBFH, GETFH, LOOKUP(P), SAVEFH, RESTOREFH | `mod.rs` |
//! | `getattr` | ACCESS, GETATTR, SETATTR, VERIFY, NVERIFY | `mod.rs`, `deleg_write.rs` |
//! | `dir` | CREATE, LINK, REMOVE, RENAME, READLINK | `mod.rs`, `deleg.rs` |
//! | `dir_deleg` | GET_DIR_DELEGATION | `dir_deleg.rs` |
//! | `readdir` | READDIR | `mod.rs` |
//! | `io` | READ, WRITE, COMMIT | `mod.rs`, `deleg_write.rs` |
//! | `open` (+ `deleg`) | OPEN, CLOSE, OPEN_DOWNGRADE, DELEGRETURN | `mod.rs`, `deleg.rs`, `deleg_write.rs`, `grace.rs` |
//! | `lock` | LOCK, LOCKT, LOCKU, RELEASE_LOCKOWNER | `lease.rs`, `grace.rs`, `v40.rs` |
//! | `v40` | SETCLIENTID(_CONFIRM), OPEN_CONFIRM, RENEW; 4.0 seqids | `v40.rs`, `cb40.rs` |
//! | `session` | SEQUENCE, EXCHANGE_ID, CREATE/DESTROY_SESSION, BIND_CONN_TO_SESSION, BACKCHANNEL_CTL, DESTROY_CLIENTID, RECLAIM_COMPLETE | `mod.rs`, `lease.rs`, `grace.rs`, `backchannel.rs` |
//! | `stateid` | FREE_STATEID, TEST_STATEID | `stateids.rs` |
//! | `secinfo` | SECINFO, SECINFO_NO_NAME | `secinfo.rs` |
//! | `sparse` | ALLOCATE, DEALLOCATE, SEEK, READ_PLUS | `sparse.rs` |
//! | `copy` | COPY, CLONE, IO_ADVISE, OFFLOAD_STATUS, OFFLOAD_CANCEL | `copy.rs` (and `state/copy_tests.rs`) |
//! | `xattr` | GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR | `xattr.rs` |
//!
//! Callbacks the handlers cause (CB_RECALL, CB_GETATTR, CB_OFFLOAD, ...)
//! are in `nfs4/callback/`; `nfs4/tests/fuzz_found.rs` holds COMPOUNDs a
//! fuzzer found.
//!
//! A handler takes the COMPOUND state and its own arguments and returns
//! its own result; the row adapts it to the table's one type ([`Run`]):
//! `now!` for one that answers without waiting, `wait!` for one that
//! awaits (the backend, a callback), `wait_out!` for one that writes its
//! result straight into the reply (READ's data, READDIR's entries).

use super::compound::Compound;
use super::{
    copy, dir, dir_deleg, fh, getattr, io, lock, open, readdir, secinfo, session, sparse, stateid,
};
use super::{v40, xattr};
use bytes::BytesMut;
use proto::nfs4::{NfsArgop4 as A, NfsResop4 as R, *};
use std::future::Future;
use std::pin::Pin;
use xdr::Pack;

/// What an awaiting handler returns.
pub type OpFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// How the dispatcher runs an operation. A handler packs its result
/// (operation number first) into the reply; given arguments of another
/// operation (which the dispatcher never does: it reads the number and
/// the arguments from the same bytes) it writes nothing.
#[derive(Clone, Copy)]
pub enum Run {
    /// Answers without waiting.
    Now(for<'a, 'c> fn(&'a mut Compound<'c>, NfsArgop4, &'a mut BytesMut)),
    /// Awaits the backend or a callback.
    Wait(for<'a, 'c> fn(&'a mut Compound<'c>, NfsArgop4, &'a mut BytesMut) -> OpFuture<'a>),
    /// SEQUENCE: run by the dispatcher itself (`session::sequence`), as it
    /// may answer the whole COMPOUND from the slot's reply cache.
    Sequence,
    /// Defined, not implemented: NFS4ERR_NOTSUPP.
    NotSupp,
}

/// One operation.
pub struct Op {
    pub op: NfsOpnum4,
    /// For logs and metrics ("OP_OPEN").
    pub name: &'static str,
    pub run: Run,
    /// It works on the current filehandle (RFC 8881 §16.2.3.1.1; LINK and
    /// RENAME on the saved one too). Descriptive: each handler checks it
    /// itself (`Compound::cur`), in the order its RFC section gives.
    pub needs_fh: bool,
    /// It changes files or state: an NFSv4.0 COMPOUND holding it keeps its
    /// reply in the duplicate request cache, so a retransmission gets the
    /// reply instead of running again. (4.1 and later replay from the
    /// session's slot whatever the operations; this is not consulted.)
    pub changes: bool,
    /// NFSv4.1: may come without SEQUENCE, then as the sole operation
    /// (RFC 8881 §15.1.3.3 and the op descriptions).
    pub sessionless: bool,
    /// NFSv4.0 only ("mandatory not-to-implement" in 4.1): NOTSUPP in
    /// later minor versions.
    pub v40_only: bool,
}

/// The table's builder methods: `.name()` sets the flag `field`.
macro_rules! flag_setters {
    ($($name:ident => $field:ident),* $(,)?) => {
        $(const fn $name(mut self) -> Op {
            self.$field = true;
            self
        })*
    };
}

impl Op {
    const fn new(op: NfsOpnum4, name: &'static str, run: Run) -> Op {
        Op {
            op,
            name,
            run,
            needs_fh: false,
            changes: false,
            sessionless: false,
            v40_only: false,
        }
    }

    flag_setters! {
        fh => needs_fh,
        changes => changes,
        sessionless => sessionless,
        v40_only => v40_only,
    }

    /// Its slot in the per-operation metrics (laid out by
    /// `metrics::ops`).
    pub fn metric_slot(&self) -> usize {
        metrics::ops::nfs4_op_slot(self.op as u32)
    }
}

/// The row of operation number `op`, if it has one (OP_ILLEGAL and
/// numbers below OP_ACCESS or past the table have none).
pub fn get(op: u32) -> Option<&'static Op> {
    OPS.get((op as usize).checked_sub(FIRST)?)
}

/// An operation's name for logs and metrics ("OP_READ").
pub fn name(op: u32) -> &'static str {
    get(op).map_or("OP_ILLEGAL", |o| o.name)
}

/// The first operation number (OP_ACCESS): the table starts there.
const FIRST: usize = NfsOpnum4::OP_ACCESS as usize;

macro_rules! op {
    ($op:ident, $run:expr) => {
        Op::new(NfsOpnum4::$op, stringify!($op), $run)
    };
}

/// A handler that answers without waiting; `$res` is its NfsResop4.
macro_rules! now {
    (|$c:ident| $pat:pat => $res:expr) => {
        Run::Now({
            fn run($c: &mut Compound<'_>, a: NfsArgop4, out: &mut BytesMut) {
                if let $pat = a {
                    $res.pack(out)
                }
            }
            run
        })
    };
}

/// A handler that awaits; `$res` is its NfsResop4.
macro_rules! wait {
    (|$c:ident| $pat:pat => $res:expr) => {
        Run::Wait({
            fn run<'a>(
                $c: &'a mut Compound<'_>,
                a: NfsArgop4,
                out: &'a mut BytesMut,
            ) -> OpFuture<'a> {
                Box::pin(async move {
                    if let $pat = a {
                        $res.pack(out)
                    }
                })
            }
            run
        })
    };
}

/// A handler that awaits and writes its result into the reply itself.
macro_rules! wait_out {
    (|$c:ident, $out:ident| $pat:pat => $body:expr) => {
        Run::Wait({
            fn run<'a>(
                $c: &'a mut Compound<'_>,
                a: NfsArgop4,
                $out: &'a mut BytesMut,
            ) -> OpFuture<'a> {
                Box::pin(async move {
                    if let $pat = a {
                        $body
                    }
                })
            }
            run
        })
    };
}

/// Every operation from OP_ACCESS (3) to OP_REMOVEXATTR (75), in order
/// (a test checks the order against [`NfsOpnum4`]).
#[rustfmt::skip]
pub static OPS: [Op; 73] = [
    // NFSv4.0 (RFC 7530)
    op!(OP_ACCESS, wait!(|c| A::OP_ACCESS(a) => R::OP_ACCESS(getattr::access(c, a).await))).fh(),
    op!(OP_CLOSE, wait!(|c| A::OP_CLOSE(a) => R::OP_CLOSE(open::close(c, a).await))).fh().changes(),
    op!(OP_COMMIT, wait!(|c| A::OP_COMMIT(a) => R::OP_COMMIT(io::commit(c, a).await))).fh(),
    op!(OP_CREATE, wait!(|c| A::OP_CREATE(a) => R::OP_CREATE(dir::create(c, a).await))).fh().changes(),
    op!(OP_DELEGPURGE, Run::NotSupp),
    op!(OP_DELEGRETURN, now!(|c| A::OP_DELEGRETURN(a) => R::OP_DELEGRETURN(open::delegreturn(c, a)))).fh(),
    op!(OP_GETATTR, wait_out!(|c, out| A::OP_GETATTR(a) => getattr::getattr(c, a, out).await)).fh(),
    op!(OP_GETFH, now!(|c| A::OP_GETFH => R::OP_GETFH(fh::getfh(c)))).fh(),
    op!(OP_LINK, wait!(|c| A::OP_LINK(a) => R::OP_LINK(dir::link(c, a).await))).fh().changes(),
    op!(OP_LOCK, wait!(|c| A::OP_LOCK(a) => R::OP_LOCK(lock::lock(c, a).await))).fh().changes(),
    op!(OP_LOCKT, wait!(|c| A::OP_LOCKT(a) => R::OP_LOCKT(lock::lockt(c, a).await))).fh(),
    op!(OP_LOCKU, wait!(|c| A::OP_LOCKU(a) => R::OP_LOCKU(lock::locku(c, a).await))).fh().changes(),
    op!(OP_LOOKUP, wait!(|c| A::OP_LOOKUP(a) => R::OP_LOOKUP(fh::lookup(c, a).await))).fh(),
    op!(OP_LOOKUPP, wait!(|c| A::OP_LOOKUPP => R::OP_LOOKUPP(fh::lookupp(c).await))).fh(),
    op!(OP_NVERIFY, wait!(|c| A::OP_NVERIFY(a) => R::OP_NVERIFY(getattr::nverify(c, a).await))).fh(),
    op!(OP_OPEN, wait!(|c| A::OP_OPEN(a) => R::OP_OPEN(open::open(c, a).await))).fh().changes(),
    op!(OP_OPENATTR, Run::NotSupp).fh(),
    op!(OP_OPEN_CONFIRM, now!(|c| A::OP_OPEN_CONFIRM(a) => R::OP_OPEN_CONFIRM(v40::open_confirm(c, a)))).fh().changes().v40_only(),
    op!(OP_OPEN_DOWNGRADE, now!(|c| A::OP_OPEN_DOWNGRADE(a) => R::OP_OPEN_DOWNGRADE(open::downgrade(c, a)))).fh().changes(),
    op!(OP_PUTFH, now!(|c| A::OP_PUTFH(a) => R::OP_PUTFH(fh::putfh(c, a)))),
    op!(OP_PUTPUBFH, now!(|c| A::OP_PUTPUBFH => R::OP_PUTPUBFH(Putpubfh4res { status: fh::putrootfh(c) }))),
    op!(OP_PUTROOTFH, now!(|c| A::OP_PUTROOTFH => R::OP_PUTROOTFH(Putrootfh4res { status: fh::putrootfh(c) }))),
    op!(OP_READ, wait_out!(|c, out| A::OP_READ(a) => io::read(c, a, out).await)).fh(),
    op!(OP_READDIR, wait_out!(|c, out| A::OP_READDIR(a) => readdir::readdir(c, a, out).await)).fh(),
    op!(OP_READLINK, wait!(|c| A::OP_READLINK => R::OP_READLINK(dir::readlink(c).await))).fh(),
    op!(OP_REMOVE, wait!(|c| A::OP_REMOVE(a) => R::OP_REMOVE(dir::remove(c, a).await))).fh().changes(),
    op!(OP_RENAME, wait!(|c| A::OP_RENAME(a) => R::OP_RENAME(dir::rename(c, a).await))).fh().changes(),
    op!(OP_RENEW, now!(|c| A::OP_RENEW(a) => R::OP_RENEW(v40::renew(c, a)))).v40_only(),
    op!(OP_RESTOREFH, now!(|c| A::OP_RESTOREFH => R::OP_RESTOREFH(Restorefh4res { status: fh::restorefh(c) }))),
    op!(OP_SAVEFH, now!(|c| A::OP_SAVEFH => R::OP_SAVEFH(Savefh4res { status: fh::savefh(c) }))).fh(),
    op!(OP_SECINFO, wait!(|c| A::OP_SECINFO(a) => R::OP_SECINFO(secinfo::secinfo(c, a).await))).fh(),
    op!(OP_SETATTR, wait!(|c| A::OP_SETATTR(a) => R::OP_SETATTR(getattr::setattr(c, a).await))).fh().changes(),
    op!(OP_SETCLIENTID, now!(|c| A::OP_SETCLIENTID(a) => R::OP_SETCLIENTID(v40::setclientid(c, a)))).changes().v40_only(),
    op!(OP_SETCLIENTID_CONFIRM, wait!(|c| A::OP_SETCLIENTID_CONFIRM(a) => R::OP_SETCLIENTID_CONFIRM(v40::setclientid_confirm(c, a).await))).changes().v40_only(),
    op!(OP_VERIFY, wait!(|c| A::OP_VERIFY(a) => R::OP_VERIFY(getattr::verify(c, a).await))).fh(),
    op!(OP_WRITE, wait!(|c| A::OP_WRITE(a) => R::OP_WRITE(io::write(c, a).await))).fh().changes(),
    op!(OP_RELEASE_LOCKOWNER, now!(|c| A::OP_RELEASE_LOCKOWNER(a) => R::OP_RELEASE_LOCKOWNER(lock::release_lockowner(c, a)))).changes().v40_only(),
    // NFSv4.1 (RFC 8881)
    op!(OP_BACKCHANNEL_CTL, now!(|c| A::OP_BACKCHANNEL_CTL(a) => R::OP_BACKCHANNEL_CTL(session::backchannel_ctl(c, a)))),
    op!(OP_BIND_CONN_TO_SESSION, now!(|c| A::OP_BIND_CONN_TO_SESSION(a) => R::OP_BIND_CONN_TO_SESSION(session::bind_conn(c, a)))).sessionless(),
    op!(OP_EXCHANGE_ID, now!(|c| A::OP_EXCHANGE_ID(a) => R::OP_EXCHANGE_ID(session::exchange_id(c, a)))).sessionless(),
    op!(OP_CREATE_SESSION, wait!(|c| A::OP_CREATE_SESSION(a) => R::OP_CREATE_SESSION(session::create_session(c, a).await))).sessionless(),
    op!(OP_DESTROY_SESSION, now!(|c| A::OP_DESTROY_SESSION(a) => R::OP_DESTROY_SESSION(session::destroy_session(c, a)))).sessionless(),
    op!(OP_FREE_STATEID, now!(|c| A::OP_FREE_STATEID(a) => R::OP_FREE_STATEID(stateid::free_stateid(c, a)))),
    op!(OP_GET_DIR_DELEGATION, wait!(|c| A::OP_GET_DIR_DELEGATION(a) => R::OP_GET_DIR_DELEGATION(dir_deleg::get_dir_delegation(c, a).await))).fh(),
    op!(OP_GETDEVICEINFO, Run::NotSupp),
    op!(OP_GETDEVICELIST, Run::NotSupp).fh(),
    op!(OP_LAYOUTCOMMIT, Run::NotSupp).fh(),
    op!(OP_LAYOUTGET, Run::NotSupp).fh(),
    op!(OP_LAYOUTRETURN, Run::NotSupp).fh(),
    op!(OP_SECINFO_NO_NAME, wait!(|c| A::OP_SECINFO_NO_NAME(a) => R::OP_SECINFO_NO_NAME(secinfo::secinfo_no_name(c, a).await))).fh(),
    op!(OP_SEQUENCE, Run::Sequence),
    op!(OP_SET_SSV, Run::NotSupp),
    op!(OP_TEST_STATEID, now!(|c| A::OP_TEST_STATEID(a) => R::OP_TEST_STATEID(stateid::test_stateid(c, a)))),
    op!(OP_WANT_DELEGATION, Run::NotSupp),
    op!(OP_DESTROY_CLIENTID, wait!(|c| A::OP_DESTROY_CLIENTID(a) => R::OP_DESTROY_CLIENTID(session::destroy_clientid(c, a).await))).sessionless(),
    op!(OP_RECLAIM_COMPLETE, wait!(|c| A::OP_RECLAIM_COMPLETE(a) => R::OP_RECLAIM_COMPLETE(session::reclaim_complete(c, a).await))),
    // NFSv4.2 (RFC 7862)
    op!(OP_ALLOCATE, wait!(|c| A::OP_ALLOCATE(a) => R::OP_ALLOCATE(sparse::allocate(c, a).await))).fh(),
    op!(OP_COPY, wait!(|c| A::OP_COPY(a) => R::OP_COPY(copy::copy(c, a).await))).fh(),
    op!(OP_COPY_NOTIFY, Run::NotSupp).fh(),
    op!(OP_DEALLOCATE, wait!(|c| A::OP_DEALLOCATE(a) => R::OP_DEALLOCATE(sparse::deallocate(c, a).await))).fh(),
    op!(OP_IO_ADVISE, wait!(|c| A::OP_IO_ADVISE(a) => R::OP_IO_ADVISE(copy::io_advise(c, a).await))).fh(),
    op!(OP_LAYOUTERROR, Run::NotSupp).fh(),
    op!(OP_LAYOUTSTATS, Run::NotSupp).fh(),
    op!(OP_OFFLOAD_CANCEL, now!(|c| A::OP_OFFLOAD_CANCEL(a) => R::OP_OFFLOAD_CANCEL(copy::offload_cancel(c, a)))).fh(),
    op!(OP_OFFLOAD_STATUS, now!(|c| A::OP_OFFLOAD_STATUS(a) => R::OP_OFFLOAD_STATUS(copy::offload_status(c, a)))).fh(),
    op!(OP_READ_PLUS, wait_out!(|c, out| A::OP_READ_PLUS(a) => sparse::read_plus(c, a, out).await)).fh(),
    op!(OP_SEEK, wait!(|c| A::OP_SEEK(a) => R::OP_SEEK(sparse::seek(c, a).await))).fh(),
    op!(OP_WRITE_SAME, Run::NotSupp).fh(),
    op!(OP_CLONE, wait!(|c| A::OP_CLONE(a) => R::OP_CLONE(copy::clone(c, a).await))).fh(),
    // Extended attributes (RFC 8276)
    op!(OP_GETXATTR, wait!(|c| A::OP_GETXATTR(a) => R::OP_GETXATTR(xattr::getxattr(c, a).await))).fh(),
    op!(OP_SETXATTR, wait!(|c| A::OP_SETXATTR(a) => R::OP_SETXATTR(xattr::setxattr(c, a).await))).fh(),
    op!(OP_LISTXATTRS, wait!(|c| A::OP_LISTXATTRS(a) => R::OP_LISTXATTRS(xattr::listxattrs(c, a).await))).fh(),
    op!(OP_REMOVEXATTR, wait!(|c| A::OP_REMOVEXATTR(a) => R::OP_REMOVEXATTR(xattr::removexattr(c, a).await))).fh(),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_protocol_numbers() {
        for (i, o) in OPS.iter().enumerate() {
            assert_eq!(o.op as usize, FIRST + i, "{} out of place", o.name);
            assert_eq!(format!("{:?}", o.op), o.name);
        }
        assert_eq!(OPS.last().map(|o| o.op), Some(NfsOpnum4::OP_REMOVEXATTR));
        assert_eq!(name(NfsOpnum4::OP_ILLEGAL as u32), "OP_ILLEGAL");
        assert_eq!(name(2), "OP_ILLEGAL");
        assert_eq!(name(76), "OP_ILLEGAL");
    }
}
