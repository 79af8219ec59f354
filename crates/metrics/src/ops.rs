//! Which operation a call is (a fixed slot per (program, version,
//! procedure), so per-op counters are an array index, not a map lookup) and
//! the names of reply statuses.
//!
//! The slots and names of RPC procedures come from the servers' procedure
//! tables ([`rpc::Program`], registered through
//! [`rpc::Observer::programs`]); this module owns only the slot count and
//! the NFSv4 operations inside COMPOUNDs, each in its own slot
//! (`NFS4_OP_BASE + opnum`, see [`nfs4_op_slot`]). NFS4ERR_* share
//! NFS3ERR_* values where they overlap, and the common NFSv4-only codes
//! have their own names in [`STATUSES`].

pub use rpc::observe::{
    RPC_AUTH_ERROR, RPC_DROPPED, RPC_GARBAGE_ARGS, RPC_PROC_UNAVAIL, RPC_SYSTEM_ERR,
};

/// Number of op slots; every per-op array has this many entries. The
/// procedure tables place their programs around the NFSv4 operations
/// (NFSv3, MOUNT v3 and NFSv4 below, NLM v4 and NSM v1 above), and the
/// extended attribute operations come last.
pub const OP_SLOTS: usize = 137;

/// NFSv4 operations 0..=71 (0-2 are unused numbers; OP_ILLEGAL goes to 0).
pub const NFS4_OP_BASE: usize = 30;
pub const NFS4_OPS: usize = 72;

/// The extended attribute operations of RFC 8276 (72..=75), which came
/// after the slots above were laid out: placed after NSM's so no existing
/// slot moves.
pub const NFS4_XATTR_OP_BASE: usize = 133;
pub const NFS4_XATTR_OPS: std::ops::Range<usize> = 72..76;

/// The program label of operations inside COMPOUNDs: their calls are part
/// of the COMPOUND's, so totals skip them.
pub const NFS4_OP_PROGRAM: &str = "nfs4op";

/// The slot of an NFSv4 operation inside a COMPOUND.
#[inline]
pub fn nfs4_op_slot(opnum: u32) -> usize {
    let op = opnum as usize;
    if op < NFS4_OPS {
        NFS4_OP_BASE + op
    } else if NFS4_XATTR_OPS.contains(&op) {
        NFS4_XATTR_OP_BASE + op - NFS4_XATTR_OPS.start
    } else {
        NFS4_OP_BASE
    }
}

/// (program label, op label) of every slot that has a name.
pub type OpNames = Vec<Option<(&'static str, &'static str)>>;

/// The names of the slots: the NFSv4 operations, and every procedure of
/// `programs` whose table gives it a slot and a metric label.
pub fn op_names(programs: &[&'static rpc::Program]) -> OpNames {
    let mut v = vec![None; OP_SLOTS];
    for op in (0..NFS4_OPS).chain(NFS4_XATTR_OPS) {
        if let Some(o) = proto::nfs4::NfsOpnum4::from_i32(op as i32) {
            let n: &'static str = Box::leak(format!("{o:?}").into_boxed_str());
            v[nfs4_op_slot(op as u32)] =
                Some((NFS4_OP_PROGRAM, n.strip_prefix("OP_").unwrap_or(n)));
        }
    }
    v[NFS4_OP_BASE] = Some((NFS4_OP_PROGRAM, "ILLEGAL"));
    for p in programs {
        for (n, proc_) in p.procs.iter().enumerate() {
            if let (Some(slot), false) = (p.slot(n as u32), proc_.metric.is_empty()) {
                if let Some(e) = v.get_mut(slot) {
                    *e = Some((p.label, proc_.metric));
                }
            }
        }
    }
    v
}

/// Every status that gets its own error counter; anything else counts as OTHER.
pub const STATUSES: &[(u32, &str)] = &[
    (0, "OK"),
    (1, "NFS3ERR_PERM"),
    (2, "NFS3ERR_NOENT"),
    (5, "NFS3ERR_IO"),
    (6, "NFS3ERR_NXIO"),
    (13, "NFS3ERR_ACCES"),
    (17, "NFS3ERR_EXIST"),
    (18, "NFS3ERR_XDEV"),
    (19, "NFS3ERR_NODEV"),
    (20, "NFS3ERR_NOTDIR"),
    (21, "NFS3ERR_ISDIR"),
    (22, "NFS3ERR_INVAL"),
    (27, "NFS3ERR_FBIG"),
    (28, "NFS3ERR_NOSPC"),
    (30, "NFS3ERR_ROFS"),
    (31, "NFS3ERR_MLINK"),
    (63, "NFS3ERR_NAMETOOLONG"),
    (66, "NFS3ERR_NOTEMPTY"),
    (69, "NFS3ERR_DQUOT"),
    (70, "NFS3ERR_STALE"),
    (71, "NFS3ERR_REMOTE"),
    (10001, "NFS3ERR_BADHANDLE"),
    (10002, "NFS3ERR_NOT_SYNC"),
    (10003, "NFS3ERR_BAD_COOKIE"),
    (10004, "NFS3ERR_NOTSUPP"),
    (10005, "NFS3ERR_TOOSMALL"),
    (10006, "NFS3ERR_SERVERFAULT"),
    (10007, "NFS3ERR_BADTYPE"),
    (10008, "NFS3ERR_JUKEBOX"),
    (10010, "NFS4ERR_DENIED"),
    (10011, "NFS4ERR_EXPIRED"),
    (10013, "NFS4ERR_GRACE"),
    (10015, "NFS4ERR_SHARE_DENIED"),
    (10016, "NFS4ERR_WRONGSEC"),
    (10020, "NFS4ERR_NOFILEHANDLE"),
    (10021, "NFS4ERR_MINOR_VERS_MISMATCH"),
    (10022, "NFS4ERR_STALE_CLIENTID"),
    (10023, "NFS4ERR_STALE_STATEID"),
    (10024, "NFS4ERR_OLD_STATEID"),
    (10025, "NFS4ERR_BAD_STATEID"),
    (10026, "NFS4ERR_BAD_SEQID"),
    (10029, "NFS4ERR_SYMLINK"),
    (10033, "NFS4ERR_NO_GRACE"),
    (10034, "NFS4ERR_RECLAIM_BAD"),
    (10036, "NFS4ERR_BADXDR"),
    (10037, "NFS4ERR_LOCKS_HELD"),
    (10038, "NFS4ERR_OPENMODE"),
    (10041, "NFS4ERR_BADNAME"),
    (10044, "NFS4ERR_OP_ILLEGAL"),
    (10052, "NFS4ERR_BADSESSION"),
    (10063, "NFS4ERR_SEQ_MISORDERED"),
    (10095, "NFS4ERR_NOXATTR"),
    (RPC_PROC_UNAVAIL, "RPC_PROC_UNAVAIL"),
    (RPC_GARBAGE_ARGS, "RPC_GARBAGE_ARGS"),
    (RPC_SYSTEM_ERR, "RPC_SYSTEM_ERR"),
    (RPC_AUTH_ERROR, "RPC_AUTH_ERROR"),
    (RPC_DROPPED, "RPC_DROPPED"),
];

/// Number of status counters per op: [`STATUSES`] and OTHER.
pub const N_STATUS: usize = STATUSES.len() + 1;

/// The counter index of a status (a match, compiled to a jump table or a
/// short binary search; only error replies get here).
pub fn status_index(code: u32) -> usize {
    STATUSES
        .binary_search_by(|(c, _)| c.cmp(&code))
        .unwrap_or(STATUSES.len())
}

pub fn status_name(index: usize) -> &'static str {
    STATUSES.get(index).map(|s| s.1).unwrap_or("OTHER")
}

/// NFSv4's names of the codes it shares with NFSv3 (RFC 7530 §13.1 took
/// them over, a few renamed).
const NFS4_SHARED: &[(u32, &str)] = &[
    (1, "NFS4ERR_PERM"),
    (2, "NFS4ERR_NOENT"),
    (5, "NFS4ERR_IO"),
    (6, "NFS4ERR_NXIO"),
    (13, "NFS4ERR_ACCESS"),
    (17, "NFS4ERR_EXIST"),
    (18, "NFS4ERR_XDEV"),
    (20, "NFS4ERR_NOTDIR"),
    (21, "NFS4ERR_ISDIR"),
    (22, "NFS4ERR_INVAL"),
    (27, "NFS4ERR_FBIG"),
    (28, "NFS4ERR_NOSPC"),
    (30, "NFS4ERR_ROFS"),
    (31, "NFS4ERR_MLINK"),
    (63, "NFS4ERR_NAMETOOLONG"),
    (66, "NFS4ERR_NOTEMPTY"),
    (69, "NFS4ERR_DQUOT"),
    (70, "NFS4ERR_STALE"),
    (10001, "NFS4ERR_BADHANDLE"),
    (10003, "NFS4ERR_BAD_COOKIE"),
    (10004, "NFS4ERR_NOTSUPP"),
    (10005, "NFS4ERR_TOOSMALL"),
    (10006, "NFS4ERR_SERVERFAULT"),
    (10007, "NFS4ERR_BADTYPE"),
    (10008, "NFS4ERR_DELAY"),
];

/// The name of a status counter of an operation of `program`: NFSv4
/// operations' errors by NFSv4's names.
pub fn status_name_of(program: &str, index: usize) -> &'static str {
    if program == NFS4_OP_PROGRAM {
        if let Some((code, _)) = STATUSES.get(index) {
            if let Some((_, n)) = NFS4_SHARED.iter().find(|(c, _)| c == code) {
                return n;
            }
        }
    }
    status_name(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfs4_operations_and_tables_are_named() {
        static T: rpc::Program = rpc::Program {
            prog: 1,
            vers: 1,
            label: "t",
            slot_base: Some(126),
            unknown: rpc::Procedure::new("T_UNKNOWN", "", true),
            procs: &[
                rpc::Procedure::new("T_NULL", "NULL", true),
                rpc::Procedure::new("T_HOLE", "", true),
                rpc::Procedure::new("T_SET", "SET", false),
            ],
        };
        let n = op_names(&[&T]);
        assert_eq!(n.len(), OP_SLOTS);
        assert_eq!(n[nfs4_op_slot(25)], Some((NFS4_OP_PROGRAM, "READ")));
        assert_eq!(n[nfs4_op_slot(10044)], Some((NFS4_OP_PROGRAM, "ILLEGAL")));
        assert_eq!(n[nfs4_op_slot(72)], Some((NFS4_OP_PROGRAM, "GETXATTR")));
        assert_eq!(n[nfs4_op_slot(75)], Some((NFS4_OP_PROGRAM, "REMOVEXATTR")));
        assert_eq!(nfs4_op_slot(75), OP_SLOTS - 1);
        assert_eq!(nfs4_op_slot(76), nfs4_op_slot(10044));
        assert_eq!(n[126], Some(("t", "NULL")));
        assert_eq!(n[127], None, "a hole has no name");
        assert_eq!(n[128], Some(("t", "SET")));
        assert_eq!(n[0], None);
    }

    #[test]
    fn statuses_sorted_and_found() {
        assert!(STATUSES.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(status_name(status_index(2)), "NFS3ERR_NOENT");
        assert_eq!(
            status_name_of(NFS4_OP_PROGRAM, status_index(2)),
            "NFS4ERR_NOENT"
        );
        assert_eq!(
            status_name_of(NFS4_OP_PROGRAM, status_index(10025)),
            "NFS4ERR_BAD_STATEID"
        );
        assert_eq!(status_name_of("nfs3", status_index(13)), "NFS3ERR_ACCES");
        assert_eq!(status_name(status_index(10001)), "NFS3ERR_BADHANDLE");
        assert_eq!(
            status_name(status_index(RPC_GARBAGE_ARGS)),
            "RPC_GARBAGE_ARGS"
        );
        assert_eq!(status_name(status_index(12345)), "OTHER");
    }
}
