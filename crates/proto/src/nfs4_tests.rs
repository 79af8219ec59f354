//! Test vectors for the NFSv4 types: each message is written out by hand,
//! word by word, from the RFCs' XDR (RFC 5662, RFC 7863) and compared with
//! what the generated code encodes, then decoded back. The generated
//! round-trip tests cannot catch a field out of order (encode and decode
//! would agree with each other); these can.

use crate::nfs4::*;
use bytes::Bytes;

/// Bytes from hex text; spaces, newlines and `|` separators are ignored.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// Encodes `v`, checks the bytes, decodes them back and checks the value.
fn check<T: xdr::Pack + xdr::Unpack + PartialEq + std::fmt::Debug>(v: &T, wire: &str) {
    let want = hex(wire);
    let got = xdr::to_bytes(v);
    assert!(got.len().is_multiple_of(4));
    assert_eq!(
        hex_dump(&got),
        hex_dump(&want),
        "encoding differs from the hand-written vector"
    );
    let mut d = xdr::Decoder::new(Bytes::from(want));
    assert_eq!(&T::unpack(&mut d).unwrap(), v);
    assert_eq!(d.remaining(), 0, "decoding left bytes over");
}

/// One XDR word per line, so that a mismatch shows where it starts.
fn hex_dump(b: &[u8]) -> String {
    b.chunks(4)
        .map(|w| w.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

const SESSION: Sessionid4 = [
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
];
const SESSION_HEX: &str = "01020304 05060708 090a0b0c 0d0e0f10";

/// A bitmap4 with the given attribute numbers set (word n holds 32n..32n+31).
fn bitmap(attrs: &[u32]) -> Bitmap4 {
    let words = attrs.iter().map(|a| a / 32 + 1).max().unwrap_or(0);
    let mut b = vec![0u32; words as usize];
    for a in attrs {
        b[(a / 32) as usize] |= 1 << (a % 32);
    }
    b
}

#[test]
fn compound_sequence_putrootfh_getattr() {
    // What a 4.1 client sends first on a new session: SEQUENCE, PUTROOTFH,
    // GETATTR for type, change, size, fsid, fileid, mode, numlinks.
    let attrs = bitmap(&[
        FATTR4_TYPE,
        FATTR4_CHANGE,
        FATTR4_SIZE,
        FATTR4_FSID,
        FATTR4_FILEID,
        FATTR4_MODE,
        FATTR4_NUMLINKS,
    ]);
    // type=1, change=3, size=4, fsid=8, fileid=20 in word 0; mode=33, numlinks=35 in word 1.
    assert_eq!(
        attrs,
        vec![
            (1 << 1) | (1 << 3) | (1 << 4) | (1 << 8) | (1 << 20),
            (1 << 1) | (1 << 3)
        ]
    );
    let args = Compound4args {
        tag: Bytes::from_static(b"mnt"),
        minorversion: 1,
        argarray: vec![
            NfsArgop4::OP_SEQUENCE(Sequence4args {
                sa_sessionid: SESSION,
                sa_sequenceid: 7,
                sa_slotid: 0,
                sa_highest_slotid: 3,
                sa_cachethis: false,
            }),
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_GETATTR(Getattr4args {
                attr_request: attrs,
            }),
        ],
    };
    let wire = [
        "00000003 6d6e7400",          // tag<>: length 3, "mnt", one byte of padding
        "00000001",                   // minorversion
        "00000003",                   // argarray<>: 3 operations
        "00000035",                   // OP_SEQUENCE = 53
        SESSION_HEX,                  //   sa_sessionid (opaque[16], no length)
        "00000007",                   //   sa_sequenceid
        "00000000",                   //   sa_slotid
        "00000003",                   //   sa_highest_slotid
        "00000000",                   //   sa_cachethis = FALSE
        "00000018",                   // OP_PUTROOTFH = 24, no arguments
        "00000009",                   // OP_GETATTR = 9
        "00000002 0010011a 0000000a", //   attr_request: bitmap4<> of 2 words
    ]
    .join(" ");
    check(&args, &wire);

    // The reply: SEQUENCE ok, PUTROOTFH ok, GETATTR ok with type and size.
    let res = Compound4res {
        status: Nfsstat4::NFS4_OK,
        tag: Bytes::from_static(b"mnt"),
        resarray: vec![
            NfsResop4::OP_SEQUENCE(Sequence4res::NFS4_OK(Sequence4resok {
                sr_sessionid: SESSION,
                sr_sequenceid: 7,
                sr_slotid: 0,
                sr_highest_slotid: 3,
                sr_target_highest_slotid: 63,
                sr_status_flags: SEQ4_STATUS_RESTART_RECLAIM_NEEDED,
            })),
            NfsResop4::OP_PUTROOTFH(Putrootfh4res {
                status: Nfsstat4::NFS4_OK,
            }),
            NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(Getattr4resok {
                obj_attributes: Fattr4 {
                    attrmask: bitmap(&[FATTR4_TYPE, FATTR4_SIZE]),
                    // fattr4_type NF4DIR, then fattr4_size 4096, in bit order.
                    attr_vals: Bytes::from(hex("00000002 00000000 00001000")),
                },
            })),
        ],
    };
    let wire = [
        "00000000",                   // status NFS4_OK
        "00000003 6d6e7400",          // tag
        "00000003",                   // resarray<>: 3 results
        "00000035 00000000",          // OP_SEQUENCE, sr_status NFS4_OK
        SESSION_HEX,                  //   sr_sessionid
        "00000007 00000000 00000003", //   sr_sequenceid, sr_slotid, sr_highest_slotid
        "0000003f",                   //   sr_target_highest_slotid
        "00000100",                   //   sr_status_flags
        "00000018 00000000",          // OP_PUTROOTFH, status NFS4_OK
        "00000009 00000000",          // OP_GETATTR, status NFS4_OK
        "00000001 00000012",          //   attrmask: 1 word, bits 1 and 4
        "0000000c",                   //   attr_vals<>: 12 bytes
        "00000002 00000000 00001000", //     NF4DIR, size 4096
    ]
    .join(" ");
    check(&res, &wire);
}

#[test]
fn compound_with_an_error_ends_the_results() {
    // COMPOUND stops at the first failing operation: its result is the last.
    let res = Compound4res {
        status: Nfsstat4::NFS4ERR_NOENT,
        tag: Bytes::new(),
        resarray: vec![
            NfsResop4::OP_PUTFH(Putfh4res {
                status: Nfsstat4::NFS4_OK,
            }),
            NfsResop4::OP_LOOKUP(Lookup4res {
                status: Nfsstat4::NFS4ERR_NOENT,
            }),
        ],
    };
    check(
        &res,
        "00000002 00000000 00000002 00000016 00000000 0000000f 00000002",
    );
    // An error result of a union-shaped reply carries only the status.
    check(
        &NfsResop4::OP_GETATTR(Getattr4res::Default(Nfsstat4::NFS4ERR_STALE)),
        "00000009 00000046",
    );
}

#[test]
fn open_create_unchecked_claim_null() {
    let op = NfsArgop4::OP_OPEN(Open4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: OpenOwner4 {
            clientid: 0x0102030405060708,
            owner: Bytes::from_static(b"ab"),
        },
        openhow: Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(Fattr4 {
            attrmask: bitmap(&[FATTR4_MODE]),
            attr_vals: Bytes::from(hex("000001a4")),
        })),
        claim: OpenClaim4::CLAIM_NULL(Bytes::from_static(b"f")),
    });
    let wire = [
        "00000012",                   // OP_OPEN = 18
        "00000000",                   //   seqid
        "00000401",                   //   share_access: READ | WANT_NO_DELEG
        "00000000",                   //   share_deny
        "01020304 05060708",          //   owner.clientid
        "00000002 61620000",          //   owner.owner<>
        "00000001",                   //   openhow: OPEN4_CREATE
        "00000000",                   //     createhow4: UNCHECKED4
        "00000002 00000000 00000002", //     createattrs.attrmask: mode (33)
        "00000004 000001a4",          //     createattrs.attr_vals: 0644
        "00000000",                   //   claim: CLAIM_NULL
        "00000001 66000000",          //     file
    ]
    .join(" ");
    check(&op, &wire);

    // CLAIM_FH (4.1) has no body; OPEN4_NOCREATE falls to the default arm.
    let op = NfsArgop4::OP_OPEN(Open4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_WRITE,
        owner: OpenOwner4 {
            clientid: 1,
            owner: Bytes::new(),
        },
        openhow: Openflag4::Default(Opentype4::OPEN4_NOCREATE),
        claim: OpenClaim4::CLAIM_FH,
    });
    check(
        &op,
        "00000012 00000000 00000003 00000002 00000000 00000001 00000000 00000000 00000004",
    );
}

#[test]
fn lock_with_a_new_lock_owner() {
    // locker4 is a union on bool whose both arms carry data.
    let op = NfsArgop4::OP_LOCK(Lock4args {
        locktype: NfsLockType4::WRITE_LT,
        reclaim: false,
        offset: 0,
        length: NFS4_UINT64_MAX,
        locker: Locker4::TRUE(OpenToLockOwner4 {
            open_seqid: 1,
            open_stateid: Stateid4 {
                seqid: 1,
                other: [0xaa; 12],
            },
            lock_seqid: 0,
            lock_owner: LockOwner4 {
                clientid: 5,
                owner: Bytes::from_static(b"lk"),
            },
        }),
    });
    let wire = [
        "0000000c",                            // OP_LOCK = 12
        "00000002",                            //   locktype WRITE_LT
        "00000000",                            //   reclaim FALSE
        "00000000 00000000",                   //   offset
        "ffffffff ffffffff",                   //   length: to the end of file
        "00000001",                            //   locker: new_lock_owner TRUE
        "00000001",                            //     open_seqid
        "00000001 aaaaaaaa aaaaaaaa aaaaaaaa", // open_stateid: seqid, other[12]
        "00000000",                            //     lock_seqid
        "00000000 00000005 00000002 6c6b0000", // lock_owner
    ]
    .join(" ");
    check(&op, &wire);

    let denied = NfsResop4::OP_LOCK(Lock4res::NFS4ERR_DENIED(Lock4denied {
        offset: 10,
        length: 1,
        locktype: NfsLockType4::READ_LT,
        owner: LockOwner4 {
            clientid: 9,
            owner: Bytes::from_static(b"x"),
        },
    }));
    check(
        &denied,
        "0000000c 0000271a 00000000 0000000a 00000000 00000001 00000001 00000000 00000009 00000001 78000000",
    );
}

#[test]
fn nfsv40_setclientid() {
    let op = NfsArgop4::OP_SETCLIENTID(Setclientid4args {
        client: NfsClientId4 {
            verifier: [1, 2, 3, 4, 5, 6, 7, 8],
            id: Bytes::from_static(b"linux"),
        },
        callback: CbClient4 {
            cb_program: 0x40000000,
            cb_location: Netaddr4 {
                na_r_netid: Bytes::from_static(b"tcp"),
                na_r_addr: Bytes::from_static(b"127.0.0.1.3.232"),
            },
        },
        callback_ident: 1,
    });
    let wire = [
        "00000023",                                     // OP_SETCLIENTID = 35
        "01020304 05060708",                            //   client.verifier
        "00000005 6c696e75 78000000",                   //   client.id
        "40000000",                                     //   callback.cb_program
        "00000003 74637000",                            //   cb_location.na_r_netid
        "0000000f 3132372e 302e302e 312e332e 32333200", // na_r_addr
        "00000001",                                     //   callback_ident
    ]
    .join(" ");
    check(&op, &wire);
}

#[test]
fn exchange_id_and_create_session() {
    let op = NfsArgop4::OP_EXCHANGE_ID(ExchangeId4args {
        eia_clientowner: ClientOwner4 {
            co_verifier: [0; 8],
            co_ownerid: Bytes::from_static(b"c1"),
        },
        eia_flags: EXCHGID4_FLAG_SUPP_MOVED_REFER | EXCHGID4_FLAG_BIND_PRINC_STATEID,
        eia_state_protect: StateProtect4A::SP4_NONE,
        eia_client_impl_id: vec![],
    });
    check(
        &op,
        "0000002a 00000000 00000000 00000002 63310000 00000101 00000000 00000000",
    );

    let attrs = ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1049620,
        ca_maxresponsesize: 1049480,
        ca_maxresponsesize_cached: 7584,
        ca_maxoperations: 8,
        ca_maxrequests: 64,
        ca_rdma_ird: vec![],
    };
    let op = NfsArgop4::OP_CREATE_SESSION(CreateSession4args {
        csa_clientid: 0x1122334455667788,
        csa_sequence: 1,
        csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        csa_fore_chan_attrs: attrs.clone(),
        csa_back_chan_attrs: attrs,
        csa_cb_program: 0x40000000,
        csa_sec_parms: vec![
            CallbackSecParms4::AUTH_NONE,
            CallbackSecParms4::AUTH_SYS(AuthsysParms {
                stamp: 0,
                machinename: Bytes::from_static(b"h"),
                uid: 0,
                gid: 0,
                gids: vec![],
            }),
        ],
    });
    let chan = "00000000 00100414 00100388 00001da0 00000008 00000040 00000000";
    let wire = [
        "0000002b",                            // OP_CREATE_SESSION = 43
        "11223344 55667788 00000001 00000002", // clientid, sequence, flags
        chan,
        chan,
        "40000000",                                                       // csa_cb_program
        "00000002",                                                       // csa_sec_parms<>: 2
        "00000000",                                                       //   AUTH_NONE
        "00000001 00000000 00000001 68000000 00000000 00000000 00000000", // AUTH_SYS
    ]
    .join(" ");
    check(&op, &wire);
}

#[test]
fn cb_compound_sequence_recall() {
    // nfs_cb_argop4 switches on a plain unsigned int, as RFC 5662 has it.
    let args = CbCompound4args {
        tag: Bytes::new(),
        minorversion: 1,
        callback_ident: 0,
        argarray: vec![
            NfsCbArgop4::OP_CB_SEQUENCE(CbSequence4args {
                csa_sessionid: SESSION,
                csa_sequenceid: 1,
                csa_slotid: 0,
                csa_highest_slotid: 0,
                csa_cachethis: false,
                csa_referring_call_lists: vec![],
            }),
            NfsCbArgop4::OP_CB_RECALL(CbRecall4args {
                stateid: Stateid4 {
                    seqid: 1,
                    other: [0x55; 12],
                },
                truncate: false,
                fh: NfsFh4(Bytes::from_static(&[1, 2, 3, 4])),
            }),
        ],
    };
    let wire = [
        "00000000 00000001 00000000", // tag, minorversion, callback_ident
        "00000002",                   // argarray<>: 2
        "0000000b",                   // OP_CB_SEQUENCE = 11
        SESSION_HEX,
        "00000001 00000000 00000000 00000000 00000000",
        "00000004", // OP_CB_RECALL = 4
        "00000001 55555555 55555555 55555555 00000000",
        "00000004 01020304", // fh
    ]
    .join(" ");
    check(&args, &wire);
    assert_eq!(NFS4_CALLBACK, 0x40000000);
    assert_eq!(CB_COMPOUND, 1);
}

#[test]
fn program_numbers_and_constants() {
    assert_eq!(
        (NFS4_PROGRAM, NFS_V4, NFSPROC4_NULL, NFSPROC4_COMPOUND),
        (100003, 4, 0, 1)
    );
    assert_eq!(nfs4_program_procedure_name(4, 1), Some("NFSPROC4_COMPOUND"));
    assert_eq!(nfs4_callback_procedure_name(1, 1), Some("CB_COMPOUND"));
    // 64-bit constants keep their full value and type.
    let max: u64 = NFS4_UINT64_MAX;
    assert_eq!(max, u64::MAX);
    assert_eq!(NFS4_MAXFILEOFF, u64::MAX - 1);
    assert_eq!(
        (
            FATTR4_SUPPATTR_EXCLCREAT,
            FATTR4_SEC_LABEL,
            FATTR4_MODE_UMASK
        ),
        (75, 80, 81)
    );
    assert_eq!(NfsOpnum4::OP_ILLEGAL as i32, 10044);
    assert_eq!(NfsOpnum4::OP_CLONE as i32, 71);
    assert_eq!(Nfsstat4::NFS4ERR_OFFLOAD_NO_REQS as i32, 10094);
}

#[test]
fn an_unknown_operation_can_be_answered_with_op_illegal() {
    // The RFCs have no default arm in nfs_argop4, so an operation number
    // outside nfs_opnum4 fails to decode. A server decodes the operations one
    // at a time (the count first) to answer the ones before it and then
    // OP_ILLEGAL, as RFC 8881 section 15.2 asks.
    let wire = hex("00000000 00000000 00000002 00000018 00000063");
    let mut d = xdr::Decoder::new(Bytes::from(wire.clone()));
    let _tag: Bytes = xdr::Unpack::unpack(&mut d).unwrap();
    let _minor: u32 = xdr::Unpack::unpack(&mut d).unwrap();
    let n = d.count(None).unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        <NfsArgop4 as xdr::Unpack>::unpack(&mut d).unwrap(),
        NfsArgop4::OP_PUTROOTFH
    );
    assert_eq!(
        <NfsArgop4 as xdr::Unpack>::unpack(&mut d),
        Err(xdr::Error::BadEnum {
            name: "nfs_opnum4",
            value: 99
        })
    );
    // Decoded whole, the same request is garbage.
    assert!(xdr::from_bytes::<Compound4args>(Bytes::from(wire)).is_err());
    check(
        &NfsResop4::OP_ILLEGAL(Illegal4res {
            status: Nfsstat4::NFS4ERR_OP_ILLEGAL,
        }),
        "0000273c 0000273c",
    );
}

#[test]
fn readdir_entries_are_a_list() {
    // entry4 is an XDR linked list: each entry preceded by TRUE, then FALSE.
    let res = Readdir4res::NFS4_OK(Readdir4resok {
        cookieverf: [0; 8],
        reply: Dirlist4 {
            entries: vec![
                Entry4 {
                    cookie: 3,
                    name: Bytes::from_static(b"a"),
                    attrs: Fattr4 {
                        attrmask: vec![],
                        attr_vals: Bytes::new(),
                    },
                },
                Entry4 {
                    cookie: 4,
                    name: Bytes::from_static(b"bc"),
                    attrs: Fattr4 {
                        attrmask: vec![],
                        attr_vals: Bytes::new(),
                    },
                },
            ],
            eof: true,
        },
    });
    let wire = [
        "00000000",          // NFS4_OK
        "00000000 00000000", // cookieverf
        "00000001 00000000 00000003 00000001 61000000 00000000 00000000",
        "00000001 00000000 00000004 00000002 62630000 00000000 00000000",
        "00000000", // end of list
        "00000001", // eof
    ]
    .join(" ");
    check(&res, &wire);
}
