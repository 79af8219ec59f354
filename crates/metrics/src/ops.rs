//! Which operation a call is (a fixed slot per (program, version,
//! procedure), so per-op counters are an array index, not a map lookup) and
//! the names of reply statuses.
//!
//! NFSv4 counts the COMPOUND as a call (`NFS4_BASE`) and each operation in
//! it in its own slot (`NFS4_OP_BASE + opnum`, see [`nfs4_op_slot`]);
//! NFS4ERR_* share NFS3ERR_* values where they overlap, and the common
//! NFSv4-only codes have their own names in [`STATUSES`].

use std::sync::OnceLock;

/// Number of op slots; every per-op array has this many entries.
pub const OP_SLOTS: usize = NSM_BASE + NSM_PROCS as usize;

pub const NFS_PROGRAM: u32 = 100003;
pub const MOUNT_PROGRAM: u32 = 100005;
const NFS3_BASE: usize = 0;
const NFS3_PROCS: u32 = 22;
const MOUNT3_BASE: usize = 22;
const MOUNT3_PROCS: u32 = 6;
/// NFSv4 NULL and COMPOUND; per-operation counters inside COMPOUND are
/// still to come.
const NFS4_BASE: usize = 28;
const NFS4_PROCS: u32 = 2;
/// NFSv4 operations 0..=71 (0-2 are unused numbers; OP_ILLEGAL goes to 0).
const NFS4_OP_BASE: usize = 30;
const NFS4_OPS: usize = 72;

/// NLM v4 (procedures 0..=23) and NSM v1 (0..=6), after the NFSv4 operations.
pub const NLM_PROGRAM: u32 = 100021;
pub const NSM_PROGRAM: u32 = 100024;
const NLM_BASE: usize = NFS4_OP_BASE + NFS4_OPS;
const NLM_PROCS: u32 = 24;
const NSM_BASE: usize = NLM_BASE + NLM_PROCS as usize;
const NSM_PROCS: u32 = 7;

/// The program label of operations inside COMPOUNDs: their calls are part
/// of the COMPOUND's, so totals skip them.
pub const NFS4_OP_PROGRAM: &str = "nfs4op";

/// The slot of an NFSv4 operation inside a COMPOUND.
#[inline]
pub fn nfs4_op_slot(opnum: u32) -> usize {
    NFS4_OP_BASE
        + if (opnum as usize) < NFS4_OPS {
            opnum as usize
        } else {
            0
        }
}

pub const NFS3_GETATTR: usize = NFS3_BASE + 1;
pub const NFS3_WRITE: usize = NFS3_BASE + 7;

/// The slot of a call, or None for programs without per-op counters.
#[inline]
pub fn op_slot(prog: u32, vers: u32, proc_: u32) -> Option<usize> {
    match (prog, vers) {
        (NFS_PROGRAM, 3) if proc_ < NFS3_PROCS => Some(NFS3_BASE + proc_ as usize),
        (MOUNT_PROGRAM, 3) if proc_ < MOUNT3_PROCS => Some(MOUNT3_BASE + proc_ as usize),
        (NFS_PROGRAM, 4) if proc_ < NFS4_PROCS => Some(NFS4_BASE + proc_ as usize),
        (NLM_PROGRAM, 4) if proc_ < NLM_PROCS => Some(NLM_BASE + proc_ as usize),
        (NSM_PROGRAM, 1) if proc_ < NSM_PROCS => Some(NSM_BASE + proc_ as usize),
        _ => None,
    }
}

/// (program label, op label) of a slot, e.g. ("nfs3", "GETATTR").
pub fn op_name(slot: usize) -> Option<(&'static str, &'static str)> {
    static NAMES: OnceLock<Vec<Option<(&'static str, &'static str)>>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            let mut v = vec![None; OP_SLOTS];
            for p in 0..NFS3_PROCS {
                if let Some(n) = proto::nfs3::nfs_program_procedure_name(3, p) {
                    v[NFS3_BASE + p as usize] =
                        Some(("nfs3", n.strip_prefix("NFSPROC3_").unwrap_or(n)));
                }
            }
            for p in 0..MOUNT3_PROCS {
                if let Some(n) = proto::mount::mount_program_procedure_name(3, p) {
                    v[MOUNT3_BASE + p as usize] =
                        Some(("mount3", n.strip_prefix("MOUNTPROC3_").unwrap_or(n)));
                }
            }
            for op in 0..NFS4_OPS as i32 {
                if let Some(o) = proto::nfs4::NfsOpnum4::from_i32(op) {
                    let n: &'static str = Box::leak(format!("{o:?}").into_boxed_str());
                    v[NFS4_OP_BASE + op as usize] =
                        Some((NFS4_OP_PROGRAM, n.strip_prefix("OP_").unwrap_or(n)));
                }
            }
            v[NFS4_OP_BASE] = Some((NFS4_OP_PROGRAM, "ILLEGAL"));
            for p in 0..NLM_PROCS {
                if let Some(n) = proto::nlm4::nlm_prog_procedure_name(4, p) {
                    let n: &'static str =
                        Box::leak(n.replace("NLMPROC4_", "NLM_").into_boxed_str());
                    v[NLM_BASE + p as usize] = Some(("nlm4", n));
                }
            }
            for p in 0..NSM_PROCS {
                if let Some(n) = proto::nsm::sm_prog_procedure_name(1, p) {
                    v[NSM_BASE + p as usize] = Some(("nsm", n));
                }
            }
            v[NFS4_BASE] = Some(("nfs4", "NULL"));
            v[NFS4_BASE + 1] = Some(("nfs4", "COMPOUND"));
            v
        })
        .get(slot)
        .copied()
        .flatten()
}

/// Pseudo statuses for replies that are RPC-level errors, not program results.
pub const RPC_PROC_UNAVAIL: u32 = 0x8000_0001;
pub const RPC_GARBAGE_ARGS: u32 = 0x8000_0002;
pub const RPC_SYSTEM_ERR: u32 = 0x8000_0003;
pub const RPC_AUTH_ERROR: u32 = 0x8000_0004;
pub const RPC_DROPPED: u32 = 0x8000_0005;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_names() {
        assert_eq!(op_slot(NFS_PROGRAM, 3, 1), Some(NFS3_GETATTR));
        assert_eq!(op_name(NFS3_GETATTR), Some(("nfs3", "GETATTR")));
        assert_eq!(op_name(NFS3_WRITE), Some(("nfs3", "WRITE")));
        assert_eq!(
            op_name(op_slot(MOUNT_PROGRAM, 3, 1).unwrap()),
            Some(("mount3", "MNT"))
        );
        assert_eq!(
            op_name(op_slot(NFS_PROGRAM, 4, 1).unwrap()),
            Some(("nfs4", "COMPOUND"))
        );
        assert_eq!(op_slot(NFS_PROGRAM, 3, 22), None);
        assert!(MOUNT3_BASE + MOUNT3_PROCS as usize <= OP_SLOTS);
        assert_eq!(
            op_name(op_slot(NLM_PROGRAM, 4, 2).unwrap()),
            Some(("nlm4", "NLM_LOCK"))
        );
        assert_eq!(
            op_name(op_slot(NSM_PROGRAM, 1, 6).unwrap()),
            Some(("nsm", "SM_NOTIFY"))
        );
        assert_eq!(op_name(nfs4_op_slot(25)), Some((NFS4_OP_PROGRAM, "READ")));
        assert_eq!(
            op_name(nfs4_op_slot(10044)),
            Some((NFS4_OP_PROGRAM, "ILLEGAL"))
        );
    }

    #[test]
    fn statuses_sorted_and_found() {
        assert!(STATUSES.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(status_name(status_index(2)), "NFS3ERR_NOENT");
        assert_eq!(status_name(status_index(10001)), "NFS3ERR_BADHANDLE");
        assert_eq!(
            status_name(status_index(RPC_GARBAGE_ARGS)),
            "RPC_GARBAGE_ARGS"
        );
        assert_eq!(status_name(status_index(12345)), "OTHER");
    }
}
