//! One table per RPC program Tarn serves, indexed by procedure number (as
//! Linux nfsd's `nfsd_procedures3[]`): each procedure's name in the spec,
//! its metric label, and whether it may be executed twice. The RPC layer
//! derives its answers from them (versions served, which calls go through
//! the duplicate request cache, names in logs, metric slots), and the
//! metrics name their slots after them. The slot of a procedure is its
//! table's `slot_base` plus its number; the bases place the programs
//! around the NFSv4 operations (`metrics::ops::NFS4_OP_BASE`), and a
//! test below pins every slot and name (dashboards depend on them).
//!
//! Dispatch stays a `match` on the same procedure numbers in each
//! program's `dispatch` (handlers are async and take different argument
//! types; a table of boxed futures would allocate per call).

use rpc::{Procedure, Program};

/// The programs of [`crate::TarnService`].
pub static ALL: &[&Program] = &[&NFS3, &NFS4, &MOUNT3, &NLM4, &NSM1];

/// NFSv3 (RFC 1813). The procedures that change something are not
/// idempotent: a retransmitted REMOVE must get the first reply, not ENOENT.
pub static NFS3: Program = Program {
    prog: proto::nfs3::NFS_PROGRAM,
    vers: 3,
    label: "nfs3",
    slot_base: Some(0),
    unknown: Procedure::new("NFSPROC3_UNKNOWN", "", true),
    procs: &[
        Procedure::new("NFSPROC3_NULL", "NULL", true),
        Procedure::new("NFSPROC3_GETATTR", "GETATTR", true),
        Procedure::new("NFSPROC3_SETATTR", "SETATTR", false),
        Procedure::new("NFSPROC3_LOOKUP", "LOOKUP", true),
        Procedure::new("NFSPROC3_ACCESS", "ACCESS", true),
        Procedure::new("NFSPROC3_READLINK", "READLINK", true),
        Procedure::new("NFSPROC3_READ", "READ", true),
        Procedure::new("NFSPROC3_WRITE", "WRITE", false),
        Procedure::new("NFSPROC3_CREATE", "CREATE", false),
        Procedure::new("NFSPROC3_MKDIR", "MKDIR", false),
        Procedure::new("NFSPROC3_SYMLINK", "SYMLINK", false),
        Procedure::new("NFSPROC3_MKNOD", "MKNOD", false),
        Procedure::new("NFSPROC3_REMOVE", "REMOVE", false),
        Procedure::new("NFSPROC3_RMDIR", "RMDIR", false),
        Procedure::new("NFSPROC3_RENAME", "RENAME", false),
        Procedure::new("NFSPROC3_LINK", "LINK", false),
        Procedure::new("NFSPROC3_READDIR", "READDIR", true),
        Procedure::new("NFSPROC3_READDIRPLUS", "READDIRPLUS", true),
        Procedure::new("NFSPROC3_FSSTAT", "FSSTAT", true),
        Procedure::new("NFSPROC3_FSINFO", "FSINFO", true),
        Procedure::new("NFSPROC3_PATHCONF", "PATHCONF", true),
        Procedure::new("NFSPROC3_COMMIT", "COMMIT", true),
    ],
};

/// NFSv4: NULL and COMPOUND. NFSv4.1 has exactly-once semantics through
/// session slots, so a COMPOUND is idempotent here; NFSv4.0 COMPOUNDs
/// still go through the DRC ([`crate::TarnService`]'s `cacheable`).
pub static NFS4: Program = Program {
    prog: proto::nfs3::NFS_PROGRAM,
    vers: 4,
    label: "nfs4",
    slot_base: Some(28),
    unknown: Procedure::new("NFSPROC4_UNKNOWN", "", true),
    procs: &[
        Procedure::new("NFSPROC4_NULL", "NULL", true),
        Procedure::new("NFSPROC4_COMPOUND", "COMPOUND", true),
    ],
};

/// MOUNT v3: MNT and UMNT only change the advisory mount list, so
/// repeating one is harmless.
pub static MOUNT3: Program = Program {
    prog: proto::mount::MOUNT_PROGRAM,
    vers: 3,
    label: "mount3",
    slot_base: Some(22),
    unknown: Procedure::new("MOUNTPROC3_UNKNOWN", "", true),
    procs: &[
        Procedure::new("MOUNTPROC3_NULL", "NULL", true),
        Procedure::new("MOUNTPROC3_MNT", "MNT", true),
        Procedure::new("MOUNTPROC3_DUMP", "DUMP", true),
        Procedure::new("MOUNTPROC3_UMNT", "UMNT", true),
        Procedure::new("MOUNTPROC3_UMNTALL", "UMNTALL", true),
        Procedure::new("MOUNTPROC3_EXPORT", "EXPORT", true),
    ],
};

/// NLM v4 only (64-bit offsets): calls to versions 1 and 3 get
/// PROG_MISMATCH 4..4, and the client retries with 4. Procedures that
/// change state go through the duplicate request cache; numbers 16-19
/// are unused.
pub static NLM4: Program = Program {
    prog: proto::nlm4::NLM_PROG,
    vers: 4,
    label: "nlm4",
    slot_base: Some(102),
    unknown: UNUSED_NLM,
    procs: &[
        Procedure::new("NLMPROC4_NULL", "NLM_NULL", true),
        Procedure::new("NLMPROC4_TEST", "NLM_TEST", true),
        Procedure::new("NLMPROC4_LOCK", "NLM_LOCK", false),
        Procedure::new("NLMPROC4_CANCEL", "NLM_CANCEL", false),
        Procedure::new("NLMPROC4_UNLOCK", "NLM_UNLOCK", false),
        Procedure::new("NLMPROC4_GRANTED", "NLM_GRANTED", false),
        Procedure::new("NLMPROC4_TEST_MSG", "NLM_TEST_MSG", false),
        Procedure::new("NLMPROC4_LOCK_MSG", "NLM_LOCK_MSG", false),
        Procedure::new("NLMPROC4_CANCEL_MSG", "NLM_CANCEL_MSG", false),
        Procedure::new("NLMPROC4_UNLOCK_MSG", "NLM_UNLOCK_MSG", false),
        Procedure::new("NLMPROC4_GRANTED_MSG", "NLM_GRANTED_MSG", false),
        Procedure::new("NLMPROC4_TEST_RES", "NLM_TEST_RES", false),
        Procedure::new("NLMPROC4_LOCK_RES", "NLM_LOCK_RES", false),
        Procedure::new("NLMPROC4_CANCEL_RES", "NLM_CANCEL_RES", false),
        Procedure::new("NLMPROC4_UNLOCK_RES", "NLM_UNLOCK_RES", false),
        Procedure::new("NLMPROC4_GRANTED_RES", "NLM_GRANTED_RES", false),
        UNUSED_NLM,
        UNUSED_NLM,
        UNUSED_NLM,
        UNUSED_NLM,
        Procedure::new("NLMPROC4_SHARE", "NLM_SHARE", false),
        Procedure::new("NLMPROC4_UNSHARE", "NLM_UNSHARE", false),
        Procedure::new("NLMPROC4_NM_LOCK", "NLM_NM_LOCK", false),
        Procedure::new("NLMPROC4_FREE_ALL", "NLM_FREE_ALL", false),
    ],
};

const UNUSED_NLM: Procedure = Procedure::new("NLMPROC4_UNKNOWN", "", false);

/// NSM v1, for the SM_NOTIFY of a rebooted client. SM_NOTIFY releases
/// locks: done twice, it would release the reclaims made in between.
pub static NSM1: Program = Program {
    prog: proto::nsm::SM_PROG,
    vers: 1,
    label: "nsm",
    slot_base: Some(126),
    unknown: Procedure::new("SM_UNKNOWN", "", true),
    procs: &[
        Procedure::new("SM_NULL", "SM_NULL", true),
        Procedure::new("SM_STAT", "SM_STAT", true),
        Procedure::new("SM_MON", "SM_MON", true),
        Procedure::new("SM_UNMON", "SM_UNMON", true),
        Procedure::new("SM_UNMON_ALL", "SM_UNMON_ALL", true),
        Procedure::new("SM_SIMU_CRASH", "SM_SIMU_CRASH", true),
        Procedure::new("SM_NOTIFY", "SM_NOTIFY", false),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Every named metric slot, as it was when the slots were computed in
    /// the metrics crate (dashboards and tests depend on them).
    const SLOTS: &[(usize, &str, &str)] = &[
        (0, "nfs3", "NULL"),
        (1, "nfs3", "GETATTR"),
        (2, "nfs3", "SETATTR"),
        (3, "nfs3", "LOOKUP"),
        (4, "nfs3", "ACCESS"),
        (5, "nfs3", "READLINK"),
        (6, "nfs3", "READ"),
        (7, "nfs3", "WRITE"),
        (8, "nfs3", "CREATE"),
        (9, "nfs3", "MKDIR"),
        (10, "nfs3", "SYMLINK"),
        (11, "nfs3", "MKNOD"),
        (12, "nfs3", "REMOVE"),
        (13, "nfs3", "RMDIR"),
        (14, "nfs3", "RENAME"),
        (15, "nfs3", "LINK"),
        (16, "nfs3", "READDIR"),
        (17, "nfs3", "READDIRPLUS"),
        (18, "nfs3", "FSSTAT"),
        (19, "nfs3", "FSINFO"),
        (20, "nfs3", "PATHCONF"),
        (21, "nfs3", "COMMIT"),
        (22, "mount3", "NULL"),
        (23, "mount3", "MNT"),
        (24, "mount3", "DUMP"),
        (25, "mount3", "UMNT"),
        (26, "mount3", "UMNTALL"),
        (27, "mount3", "EXPORT"),
        (28, "nfs4", "NULL"),
        (29, "nfs4", "COMPOUND"),
        (30, "nfs4op", "ILLEGAL"),
        (33, "nfs4op", "ACCESS"),
        (34, "nfs4op", "CLOSE"),
        (35, "nfs4op", "COMMIT"),
        (36, "nfs4op", "CREATE"),
        (37, "nfs4op", "DELEGPURGE"),
        (38, "nfs4op", "DELEGRETURN"),
        (39, "nfs4op", "GETATTR"),
        (40, "nfs4op", "GETFH"),
        (41, "nfs4op", "LINK"),
        (42, "nfs4op", "LOCK"),
        (43, "nfs4op", "LOCKT"),
        (44, "nfs4op", "LOCKU"),
        (45, "nfs4op", "LOOKUP"),
        (46, "nfs4op", "LOOKUPP"),
        (47, "nfs4op", "NVERIFY"),
        (48, "nfs4op", "OPEN"),
        (49, "nfs4op", "OPENATTR"),
        (50, "nfs4op", "OPEN_CONFIRM"),
        (51, "nfs4op", "OPEN_DOWNGRADE"),
        (52, "nfs4op", "PUTFH"),
        (53, "nfs4op", "PUTPUBFH"),
        (54, "nfs4op", "PUTROOTFH"),
        (55, "nfs4op", "READ"),
        (56, "nfs4op", "READDIR"),
        (57, "nfs4op", "READLINK"),
        (58, "nfs4op", "REMOVE"),
        (59, "nfs4op", "RENAME"),
        (60, "nfs4op", "RENEW"),
        (61, "nfs4op", "RESTOREFH"),
        (62, "nfs4op", "SAVEFH"),
        (63, "nfs4op", "SECINFO"),
        (64, "nfs4op", "SETATTR"),
        (65, "nfs4op", "SETCLIENTID"),
        (66, "nfs4op", "SETCLIENTID_CONFIRM"),
        (67, "nfs4op", "VERIFY"),
        (68, "nfs4op", "WRITE"),
        (69, "nfs4op", "RELEASE_LOCKOWNER"),
        (70, "nfs4op", "BACKCHANNEL_CTL"),
        (71, "nfs4op", "BIND_CONN_TO_SESSION"),
        (72, "nfs4op", "EXCHANGE_ID"),
        (73, "nfs4op", "CREATE_SESSION"),
        (74, "nfs4op", "DESTROY_SESSION"),
        (75, "nfs4op", "FREE_STATEID"),
        (76, "nfs4op", "GET_DIR_DELEGATION"),
        (77, "nfs4op", "GETDEVICEINFO"),
        (78, "nfs4op", "GETDEVICELIST"),
        (79, "nfs4op", "LAYOUTCOMMIT"),
        (80, "nfs4op", "LAYOUTGET"),
        (81, "nfs4op", "LAYOUTRETURN"),
        (82, "nfs4op", "SECINFO_NO_NAME"),
        (83, "nfs4op", "SEQUENCE"),
        (84, "nfs4op", "SET_SSV"),
        (85, "nfs4op", "TEST_STATEID"),
        (86, "nfs4op", "WANT_DELEGATION"),
        (87, "nfs4op", "DESTROY_CLIENTID"),
        (88, "nfs4op", "RECLAIM_COMPLETE"),
        (89, "nfs4op", "ALLOCATE"),
        (90, "nfs4op", "COPY"),
        (91, "nfs4op", "COPY_NOTIFY"),
        (92, "nfs4op", "DEALLOCATE"),
        (93, "nfs4op", "IO_ADVISE"),
        (94, "nfs4op", "LAYOUTERROR"),
        (95, "nfs4op", "LAYOUTSTATS"),
        (96, "nfs4op", "OFFLOAD_CANCEL"),
        (97, "nfs4op", "OFFLOAD_STATUS"),
        (98, "nfs4op", "READ_PLUS"),
        (99, "nfs4op", "SEEK"),
        (100, "nfs4op", "WRITE_SAME"),
        (101, "nfs4op", "CLONE"),
        (102, "nlm4", "NLM_NULL"),
        (103, "nlm4", "NLM_TEST"),
        (104, "nlm4", "NLM_LOCK"),
        (105, "nlm4", "NLM_CANCEL"),
        (106, "nlm4", "NLM_UNLOCK"),
        (107, "nlm4", "NLM_GRANTED"),
        (108, "nlm4", "NLM_TEST_MSG"),
        (109, "nlm4", "NLM_LOCK_MSG"),
        (110, "nlm4", "NLM_CANCEL_MSG"),
        (111, "nlm4", "NLM_UNLOCK_MSG"),
        (112, "nlm4", "NLM_GRANTED_MSG"),
        (113, "nlm4", "NLM_TEST_RES"),
        (114, "nlm4", "NLM_LOCK_RES"),
        (115, "nlm4", "NLM_CANCEL_RES"),
        (116, "nlm4", "NLM_UNLOCK_RES"),
        (117, "nlm4", "NLM_GRANTED_RES"),
        (122, "nlm4", "NLM_SHARE"),
        (123, "nlm4", "NLM_UNSHARE"),
        (124, "nlm4", "NLM_NM_LOCK"),
        (125, "nlm4", "NLM_FREE_ALL"),
        (126, "nsm", "SM_NULL"),
        (127, "nsm", "SM_STAT"),
        (128, "nsm", "SM_MON"),
        (129, "nsm", "SM_UNMON"),
        (130, "nsm", "SM_UNMON_ALL"),
        (131, "nsm", "SM_SIMU_CRASH"),
        (132, "nsm", "SM_NOTIFY"),
        (133, "nfs4op", "GETXATTR"),
        (134, "nfs4op", "SETXATTR"),
        (135, "nfs4op", "LISTXATTRS"),
        (136, "nfs4op", "REMOVEXATTR"),
    ];

    #[test]
    fn metric_slots_and_names_are_unchanged() {
        let names = metrics::ops::op_names(ALL);
        let got: Vec<(usize, &str, &str)> = names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.map(|(p, o)| (i, p, o)))
            .collect();
        assert_eq!(got, SLOTS);
    }

    #[test]
    fn tables_fit_the_slots_and_do_not_overlap() {
        let mut used = [false; metrics::ops::OP_SLOTS];
        let nfs4_ops =
            metrics::ops::NFS4_OP_BASE..metrics::ops::NFS4_OP_BASE + metrics::ops::NFS4_OPS;
        used[nfs4_ops].iter_mut().for_each(|u| *u = true);
        for p in ALL {
            for n in 0..p.procs.len() as u32 {
                let s = p.slot(n).unwrap();
                assert!(
                    !std::mem::replace(&mut used[s], true),
                    "{} {n}: slot {s} taken twice",
                    p.label
                );
            }
        }
    }

    #[test]
    fn names_are_the_specs() {
        for (n, p) in NFS3.procs.iter().enumerate() {
            assert_eq!(
                proto::nfs3::nfs_program_procedure_name(3, n as u32),
                Some(p.name)
            );
        }
        for (n, p) in MOUNT3.procs.iter().enumerate() {
            assert_eq!(
                proto::mount::mount_program_procedure_name(3, n as u32),
                Some(p.name)
            );
        }
        for (n, p) in NFS4.procs.iter().enumerate() {
            assert_eq!(
                proto::nfs4::nfs4_program_procedure_name(4, n as u32),
                Some(p.name)
            );
        }
        for (n, p) in NLM4.procs.iter().enumerate() {
            let spec = proto::nlm4::nlm_prog_procedure_name(4, n as u32);
            assert_eq!(spec.unwrap_or("NLMPROC4_UNKNOWN"), p.name);
        }
        for (n, p) in NSM1.procs.iter().enumerate() {
            assert_eq!(
                proto::nsm::sm_prog_procedure_name(1, n as u32),
                Some(p.name)
            );
        }
    }
}
