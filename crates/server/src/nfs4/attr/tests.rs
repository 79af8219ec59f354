//! Attribute codec tests. Expected encodings are written out by hand, word by
//! word, from RFC 8881's XDR, so a value in the wrong order or of the wrong
//! width shows up as a byte mismatch rather than agreeing with itself.

use super::*;
use proptest::prelude::*;
use vfs::{Attr, FsStat};

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n";
const GROUP: &str = "root:x:0:\nstaff:x:50:alice\n";

fn idmap(use_names: bool) -> IdMap {
    IdMap::from_tables("example.com", use_names, PASSWD, GROUP)
}

fn attr() -> Attr {
    Attr {
        ftype: FileType::Regular,
        mode: 0o4755,
        nlink: 2,
        uid: 1000,
        gid: 50,
        size: 0x0102_0304_0506_0708,
        used: 4096,
        rdev: (8, 1),
        fsid: 7,
        fileid: 42,
        atime: Timespec { secs: 1, nsecs: 2 },
        mtime: Timespec { secs: 3, nsecs: 4 },
        ctime: Timespec { secs: 5, nsecs: 6 },
    }
}

const FSSTAT_VAL: FsStat = FsStat {
    total_bytes: 1000,
    free_bytes: 600,
    avail_bytes: 500,
    total_files: 100,
    free_files: 60,
    avail_files: 50,
};

const FH: &[u8] = &[0xaa, 0xbb, 0xcc, 0xdd, 0xee];

fn src<'a>(a: &'a Attr, m: &'a IdMap, fs: Option<&'a FsStat>) -> AttrSource<'a> {
    AttrSource {
        attr: a,
        fh: FH,
        fsid: Fsid4 {
            major: 0x11,
            minor: 0x22,
        },
        mounted_on_fileid: 99,
        lease_time: 90,
        fsstat: fs,
        idmap: m,
        read_only: false,
        rdattr_error: None,
        // NFSv4.1: every attribute Tarn has; minor-version tests set their own.
        minor: 1,
        xattr_support: true,
    }
}

/// Bytes from hex text; anything but hex digits is ignored.
fn hex(s: &str) -> Vec<u8> {
    let d: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    d.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// One word per line, so a mismatch shows where it starts.
fn dump(b: &[u8]) -> String {
    b.chunks(4)
        .map(|w| w.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn req(bits: &[u32]) -> Bitmap4 {
    let mut b = Vec::new();
    for &bit in bits {
        bitmap_set(&mut b, bit);
    }
    b
}

fn packed(request: &[u32], s: &AttrSource) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_into(request, s, &mut out);
    out.to_vec()
}

fn fattr(bits: &[u32], vals: &str) -> Fattr4 {
    Fattr4 {
        attrmask: req(bits),
        attr_vals: Bytes::from(hex(vals)),
    }
}

#[test]
fn type_size_mode_exact_bytes() {
    let (a, m) = (attr(), idmap(false));
    let s = src(&a, &m, None);
    let got = packed(&req(&[FATTR4_MODE, FATTR4_TYPE, FATTR4_SIZE]), &s);
    let want = hex("00000002 00000012 00000002
         00000010
         00000001
         01020304 05060708
         000009ed");
    assert_eq!(dump(&got), dump(&want));
}

#[test]
fn strings_and_structs_exact_bytes() {
    let a = attr();
    let bits = [
        FATTR4_FSID,
        FATTR4_FILEHANDLE,
        FATTR4_OWNER,
        FATTR4_OWNER_GROUP,
        FATTR4_RAWDEV,
        FATTR4_TIME_MODIFY,
    ];
    let m = idmap(false);
    let got = packed(&req(&bits), &src(&a, &m, None));
    let want = hex("00000002 00080100 00200230
         00000040
         00000000 00000011 00000000 00000022
         00000005 aabbccdd ee000000
         00000004 31303030
         00000002 35300000
         00000008 00000001
         00000000 00000003 00000004");
    assert_eq!(dump(&got), dump(&want));

    let m = idmap(true);
    let got = packed(
        &req(&[FATTR4_OWNER, FATTR4_OWNER_GROUP]),
        &src(&a, &m, None),
    );
    let want = hex("00000002 00000000 00000030
         00000030
         00000011 616c6963 65406578 616d706c 652e636f 6d000000
         00000011 73746166 66406578 616d706c 652e636f 6d000000");
    assert_eq!(dump(&got), dump(&want));
}

#[test]
fn constants_exact_bytes() {
    let (a, m) = (attr(), idmap(false));
    let s = src(&a, &m, None);
    let bits = [
        FATTR4_FH_EXPIRE_TYPE,
        FATTR4_CHANGE,
        FATTR4_LINK_SUPPORT,
        FATTR4_NAMED_ATTR,
        FATTR4_LEASE_TIME,
        FATTR4_RDATTR_ERROR,
        FATTR4_ACLSUPPORT,
        FATTR4_MAXFILESIZE,
        FATTR4_MAXREAD,
        FATTR4_TIME_DELTA,
        FATTR4_MOUNTED_ON_FILEID,
        FATTR4_SUPPATTR_EXCLCREAT,
    ];
    let got = packed(&req(&bits), &s);
    let want = hex("00000003 48002cac 00880000 00000800
         00000050
         00000000
         00000001 2a05f206
         00000001
         00000000
         0000005a
         00000000
         00000000
         7fffffff ffffffff
         00000000 00100000
         00000000 00000000 00000001
         00000000 00000063
         00000002 00000010 00000032");
    assert_eq!(dump(&got), dump(&want));
}

#[test]
fn supported_bitmap_is_the_documented_set() {
    let want: &[u32] = &[
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23, 26, 27, 28,
        29, 30, 31, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 47, 48, 51, 52, 53, 54, 55, 75,
    ];
    // 4.2 adds xattr_support (82, RFC 8276) and open_arguments (86, RFC 9754).
    let want42 = [want, &[FATTR4_XATTR_SUPPORT, FATTR4_OPEN_ARGUMENTS]].concat();
    for (minor, want) in [(1, want), (2, &want42[..])] {
        let sup = supported_attrs(minor);
        assert_eq!(sup, req(want), "minor {minor}");
        // Never claimed: acl, fs_locations, time_create, sec_label, layouts.
        for bit in [12, 24, 50, 62, 64, 80] {
            assert!(!bitmap_has(&sup, bit), "{bit}");
        }
    }
    assert_eq!(
        suppattr_exclcreat(),
        req(&[FATTR4_SIZE, FATTR4_MODE, FATTR4_OWNER, FATTR4_OWNER_GROUP])
    );
    // The supported_attrs attribute carries the same bitmap.
    let (a, m) = (attr(), idmap(false));
    let f = encode(&req(&[FATTR4_SUPPORTED_ATTRS]), &src(&a, &m, None));
    assert_eq!(f.attr_vals, xdr::to_bytes(&supported_attrs(1)));
}

/// A minor version's supported_attrs names no attribute a later one added:
/// 4.0 ends at mounted_on_fileid (55), 4.1 at fs_charset_cap (76).
#[test]
fn supported_attrs_follow_the_minor_version() {
    let v40 = supported_attrs(0);
    let mut want = supported_attrs(1);
    // suppattr_exclcreat (75) is 4.1's only attribute in the third word.
    assert_eq!(want[2], 1 << (FATTR4_SUPPATTR_EXCLCREAT - 64));
    want.truncate(2);
    assert_eq!(v40, want);
    for bit in 56..96 {
        assert!(!bitmap_has(&v40, bit), "4.0 lists {bit}");
    }
    for minor in [1, 2] {
        let sup = supported_attrs(minor);
        assert!(bitmap_has(&sup, FATTR4_SUPPATTR_EXCLCREAT));
    }
    for bit in 77..96 {
        assert!(!bitmap_has(&supported_attrs(1), bit), "4.1 lists {bit}");
    }

    let (a, m) = (attr(), idmap(false));
    let mut s = src(&a, &m, None);
    s.minor = 0;
    // The attribute's value is the minor version's set too.
    let f = encode(&req(&[FATTR4_SUPPORTED_ATTRS]), &s);
    assert_eq!(f.attr_vals, xdr::to_bytes(&v40));
    // A later version's attribute is left out like an unknown one...
    let request = req(&[FATTR4_SIZE, FATTR4_SUPPATTR_EXCLCREAT]);
    assert_eq!(encode(&request, &s).attrmask, req(&[FATTR4_SIZE]));
    assert_eq!(packed(&request, &s), {
        let mut out = BytesMut::new();
        encode_into(&req(&[FATTR4_SIZE]), &s, &mut out);
        out.to_vec()
    });
    // ...and is unsupported where a client gives a value.
    let f = fattr(&[FATTR4_SUPPATTR_EXCLCREAT], "00000000");
    assert_eq!(verify(&f, &s), Err(Nfsstat4::NFS4ERR_ATTRNOTSUPP));
    assert_eq!(
        decode_set(&f, &m, 0).unwrap_err(),
        Nfsstat4::NFS4ERR_ATTRNOTSUPP
    );
    // In 4.1 it is known, and read-only.
    assert_eq!(decode_set(&f, &m, 1).unwrap_err(), Nfsstat4::NFS4ERR_INVAL);
    // The settable attributes are all 4.0 ones.
    let f = fattr(&[FATTR4_SIZE], "00000000 00000005");
    assert_eq!(decode_set(&f, &m, 0).unwrap().0.size, Some(5));
}

#[test]
fn encode_and_encode_into_agree() {
    let (a, fs) = (attr(), FSSTAT_VAL);
    for use_names in [false, true] {
        let m = idmap(use_names);
        for fsstat in [None, Some(&fs)] {
            let s = src(&a, &m, fsstat);
            for request in [
                vec![],
                vec![u32::MAX; 6],
                req(&[FATTR4_TYPE]),
                req(&[FATTR4_OWNER, FATTR4_SPACE_FREE, FATTR4_SUPPATTR_EXCLCREAT]),
            ] {
                let f = encode(&request, &s);
                // encode_into appends: start with something in the buffer.
                let mut out = BytesMut::from(&b"head"[..]);
                encode_into(&request, &s, &mut out);
                assert_eq!(&out[..4], b"head");
                assert_eq!(&out[4..], &xdr::to_bytes(&f)[..]);
            }
        }
    }
}

#[test]
fn encode_into_writes_only_into_the_buffer() {
    let (a, m, fs) = (attr(), idmap(true), FSSTAT_VAL);
    let s = src(&a, &m, Some(&fs));
    let mut out = BytesMut::with_capacity(4096);
    let ptr = out.as_ptr();
    encode_into(&[u32::MAX; 3], &s, &mut out);
    assert_eq!(out.as_ptr(), ptr, "buffer was reallocated");
    assert!(out.len() > 200);
}

#[test]
fn everything_requested_is_well_formed() {
    let (a, m, fs) = (attr(), idmap(true), FSSTAT_VAL);
    let s = src(&a, &m, Some(&fs));
    let f = encode(&[u32::MAX; 8], &s);
    let mut want = supported_attrs(1);
    for bit in [FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET] {
        want[(bit / 32) as usize] &= !(1 << (bit % 32));
    }
    assert_eq!(f.attrmask, want);
    // Every value has the width its type says, and nothing is left over.
    let mut d = Decoder::new(f.attr_vals.clone());
    for bit in bits(prefix(&f.attrmask)) {
        skip_attr(bit, &mut d).unwrap();
    }
    assert_eq!(d.remaining(), 0);
    // And VERIFY agrees with GETATTR (rdattr_error cannot be verified).
    let mut request = f.attrmask.clone();
    request[0] &= !(1 << FATTR4_RDATTR_ERROR);
    assert_eq!(verify(&encode(&request, &s), &s), Ok(true));
}

#[test]
fn unknown_bits_and_extra_words_are_ignored() {
    let (a, m) = (attr(), idmap(false));
    let s = src(&a, &m, None);
    // acl (12) and bits in words 3 and 4 are unknown or unsupported.
    let f = encode(&[(1 << 12) | (1 << 1), 0, 0, u32::MAX, u32::MAX], &s);
    assert_eq!(f.attrmask, vec![1 << 1]);
    assert_eq!(&f.attr_vals[..], &hex("00000001")[..]);
    // Nothing known: an empty bitmap and no values.
    assert_eq!(packed(&[0, 0, 0, 1], &s), hex("00000000 00000000"));
    assert_eq!(packed(&[], &s), hex("00000000 00000000"));
    // Trailing zero words are trimmed from the result.
    assert_eq!(encode(&[1 << 4, 0, 0], &s).attrmask, vec![1 << 4]);
    assert_eq!(
        encode(&[0, 1 << (FATTR4_MODE - 32), 0, 0], &s).attrmask,
        vec![0, 1 << 1]
    );
}

#[test]
fn fsstat_attributes_need_fsstat() {
    let fs_bits = [
        FATTR4_FILES_AVAIL,
        FATTR4_FILES_FREE,
        FATTR4_FILES_TOTAL,
        FATTR4_SPACE_AVAIL,
        FATTR4_SPACE_FREE,
        FATTR4_SPACE_TOTAL,
    ];
    for bit in fs_bits {
        assert!(needs_fsstat(&req(&[bit])), "{bit}");
    }
    assert!(!needs_fsstat(&req(&[FATTR4_SPACE_USED, FATTR4_SIZE])));
    assert!(!needs_fsstat(&[]));
    assert!(!needs_fsstat(&[0, 0, 0, u32::MAX]));

    let (a, m, fs) = (attr(), idmap(false), FSSTAT_VAL);
    let request = req(&fs_bits);
    // Without the numbers the attributes are left out, not sent as zeros.
    assert_eq!(
        encode(&request, &src(&a, &m, None)).attrmask,
        Vec::<u32>::new()
    );
    let f = encode(&request, &src(&a, &m, Some(&fs)));
    assert_eq!(f.attrmask, request);
    let want = hex("00000000 00000032  00000000 0000003c  00000000 00000064
         00000000 000001f4  00000000 00000258  00000000 000003e8");
    assert_eq!(dump(&f.attr_vals), dump(&want));
}

#[test]
fn rdattr_error_gives_only_what_does_not_need_the_object() {
    let (a, m) = (attr(), idmap(false));
    let mut s = src(&a, &m, None);
    let request = req(&[
        FATTR4_TYPE,
        FATTR4_SIZE,
        FATTR4_RDATTR_ERROR,
        FATTR4_FILEHANDLE,
        FATTR4_FILEID,
        FATTR4_MOUNTED_ON_FILEID,
    ]);
    // No error: rdattr_error is NFS4_OK and everything else is there.
    let f = encode(&request, &s);
    assert_eq!(f.attrmask, request);
    s.rdattr_error = Some(Nfsstat4::NFS4ERR_ACCESS);
    let got = packed(&request, &s);
    let want = hex("00000002 00000800 00800000
         0000000c
         0000000d
         00000000 00000063");
    assert_eq!(dump(&got), dump(&want));
}

#[test]
fn write_only_attributes_are_not_returned() {
    let (a, m) = (attr(), idmap(false));
    let s = src(&a, &m, None);
    let request = req(&[FATTR4_SIZE, FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET]);
    assert_eq!(encode(&request, &s).attrmask, req(&[FATTR4_SIZE]));
    assert_eq!(check_get_request(&request), Err(Nfsstat4::NFS4ERR_INVAL));
    assert_eq!(check_get_request(&[u32::MAX, 0]), Ok(()));
    assert_eq!(check_get_request(&[]), Ok(()));
}

#[test]
fn change_follows_ctime() {
    let mut a = attr();
    assert_eq!(change(&a), 5_000_000_006);
    let mut last = 0;
    for (secs, nsecs) in [(5, 7), (5, 999_999_999), (6, 0), (1 << 40, 0)] {
        a.ctime = Timespec { secs, nsecs };
        let c = change(&a);
        assert!(c > last);
        last = c;
    }
    a.ctime = Timespec { secs: -1, nsecs: 0 };
    assert_eq!(change(&a), 0);
    a.ctime = Timespec {
        secs: i64::MAX,
        nsecs: 0,
    };
    assert_eq!(change(&a), u64::MAX);
}

#[test]
fn file_types() {
    let cases = [
        (FileType::Regular, NfsFtype4::NF4REG),
        (FileType::Directory, NfsFtype4::NF4DIR),
        (FileType::Symlink, NfsFtype4::NF4LNK),
        (FileType::BlockDev, NfsFtype4::NF4BLK),
        (FileType::CharDev, NfsFtype4::NF4CHR),
        (FileType::Socket, NfsFtype4::NF4SOCK),
        (FileType::Fifo, NfsFtype4::NF4FIFO),
    ];
    for (t, want) in cases {
        assert_eq!(ftype4(t), want);
    }
}

#[test]
fn bitmap_helpers() {
    let mut b = Vec::new();
    assert!(!bitmap_has(&b, 0));
    bitmap_set(&mut b, 75);
    assert_eq!(b, vec![0, 0, 1 << 11]);
    bitmap_set(&mut b, 0);
    bitmap_set(&mut b, 33);
    assert_eq!(b, vec![1, 2, 1 << 11]);
    assert!(bitmap_has(&b, 0) && bitmap_has(&b, 33) && bitmap_has(&b, 75));
    assert!(!bitmap_has(&b, 1) && !bitmap_has(&b, 200));
}

// ---- decode_set ----

fn set_ok(f: &Fattr4) -> SetAttr {
    let (set, bm) = decode_set(f, &idmap(false), 1).unwrap();
    assert_eq!(bm, to_bitmap(&prefix(&f.attrmask)));
    set
}

#[test]
fn decode_set_each_attribute() {
    let s = set_ok(&fattr(&[FATTR4_SIZE], "00000001 23456789"));
    assert_eq!(s.size, Some(0x1_2345_6789));
    assert_eq!(SetAttr { size: None, ..s }, SetAttr::default());

    // Type bits and anything above them are dropped.
    let s = set_ok(&fattr(&[FATTR4_MODE], "0008ffed"));
    assert_eq!(s, SetAttr::mode(0o7755));

    let owner = |s: &str| {
        let mut b = BytesMut::new();
        xdr::pack_opaque(s.as_bytes(), &mut b);
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    };
    for (name, uid) in [("alice@example.com", 1000), ("alice", 1000), ("1001", 1001)] {
        let s = set_ok(&fattr(&[FATTR4_OWNER], &owner(name)));
        assert_eq!(s.uid, Some(uid), "{name}");
    }
    for (name, gid) in [("staff@EXAMPLE.COM", 50), ("0", 0)] {
        let s = set_ok(&fattr(&[FATTR4_OWNER_GROUP], &owner(name)));
        assert_eq!(s.gid, Some(gid), "{name}");
    }

    for bit in [FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET] {
        let pick = |s: SetAttr| {
            if bit == FATTR4_TIME_ACCESS_SET {
                (s.atime, s.mtime)
            } else {
                (s.mtime, s.atime)
            }
        };
        let (t, other) = pick(set_ok(&fattr(&[bit], "00000000")));
        assert_eq!((t, other), (SetTime::ServerTime, SetTime::DontChange));
        let (t, _) = pick(set_ok(&fattr(
            &[bit],
            "00000001 ffffffff fffffffe 3b9ac9ff",
        )));
        let want = Timespec {
            secs: -2,
            nsecs: 999_999_999,
        };
        assert_eq!(t, SetTime::ClientTime(want));
    }
}

#[test]
fn decode_set_everything_at_once() {
    let f = fattr(
        &[
            FATTR4_SIZE,
            FATTR4_MODE,
            FATTR4_OWNER,
            FATTR4_OWNER_GROUP,
            FATTR4_TIME_ACCESS_SET,
            FATTR4_TIME_MODIFY_SET,
        ],
        "00000000 00000000
         000001a4
         00000005 616c6963 65000000
         00000002 35300000
         00000001 00000000 0000000a 00000014
         00000000",
    );
    let (set, bm) = decode_set(&f, &idmap(false), 1).unwrap();
    assert_eq!(
        set,
        SetAttr {
            mode: Some(0o644),
            uid: Some(1000),
            gid: Some(50),
            size: Some(0),
            atime: SetTime::ClientTime(Timespec {
                secs: 10,
                nsecs: 20
            }),
            mtime: SetTime::ServerTime,
        }
    );
    assert_eq!(
        bm,
        vec![
            1 << 4,
            (1 << 1) | (1 << 4) | (1 << 5) | (1 << 16) | (1 << 22)
        ]
    );
}

#[test]
fn decode_set_empty_and_padded_bitmaps() {
    let (set, bm) = decode_set(&fattr(&[], ""), &idmap(false), 1).unwrap();
    assert_eq!((set, bm), (SetAttr::default(), vec![]));
    let f = Fattr4 {
        attrmask: vec![1 << 4, 0, 0, 0, 0],
        attr_vals: Bytes::from(hex("00000000 00000005")),
    };
    let (set, bm) = decode_set(&f, &idmap(false), 1).unwrap();
    assert_eq!((set.size, bm), (Some(5), vec![1 << 4]));
}

fn set_err(f: &Fattr4) -> Nfsstat4 {
    decode_set(f, &idmap(true), 1).unwrap_err()
}

#[test]
fn decode_set_unsupported_is_attrnotsupp() {
    use Nfsstat4::NFS4ERR_ATTRNOTSUPP as E;
    for bit in [
        FATTR4_ACL,
        FATTR4_ARCHIVE,
        FATTR4_HIDDEN,
        FATTR4_MIMETYPE,
        FATTR4_SYSTEM,
        FATTR4_TIME_BACKUP,
        FATTR4_TIME_CREATE,
        FATTR4_MODE_SET_MASKED,
        FATTR4_SEC_LABEL,
        FATTR4_MODE_UMASK,
        100,
        1000,
    ] {
        assert_eq!(set_err(&fattr(&[bit], "00000000")), E, "{bit}");
    }
    // Before read-only checks and before looking at the values.
    assert_eq!(set_err(&fattr(&[FATTR4_TYPE, FATTR4_ACL], "")), E);
    assert_eq!(
        set_err(&Fattr4 {
            attrmask: vec![1 << 4, 0, 0, 0, 1],
            attr_vals: Bytes::new()
        }),
        E
    );
}

#[test]
fn decode_set_read_only_is_inval() {
    for bit in [
        FATTR4_SUPPORTED_ATTRS,
        FATTR4_TYPE,
        FATTR4_CHANGE,
        FATTR4_FSID,
        FATTR4_RDATTR_ERROR,
        FATTR4_FILEHANDLE,
        FATTR4_FILEID,
        FATTR4_NUMLINKS,
        FATTR4_SPACE_USED,
        FATTR4_SPACE_AVAIL,
        FATTR4_TIME_ACCESS,
        FATTR4_TIME_MODIFY,
        FATTR4_TIME_METADATA,
        FATTR4_MOUNTED_ON_FILEID,
        FATTR4_SUPPATTR_EXCLCREAT,
    ] {
        let f = fattr(&[bit, FATTR4_SIZE], "00000000 00000000 00000000 00000000");
        assert_eq!(set_err(&f), Nfsstat4::NFS4ERR_INVAL, "{bit}");
    }
}

#[test]
fn decode_set_garbage_is_badxdr() {
    let cases: &[(&[u32], &str)] = &[
        (&[FATTR4_SIZE], "00000001"),
        (&[FATTR4_MODE], ""),
        (&[FATTR4_MODE], "000001a4 00000000"),
        (&[], "00000000"),
        (&[FATTR4_OWNER], "00000064 31303030"),
        (&[FATTR4_OWNER], "00000001 31"),
        (&[FATTR4_OWNER], "00000001 31000001"),
        (&[FATTR4_TIME_ACCESS_SET], "00000002"),
        (&[FATTR4_TIME_MODIFY_SET], "00000001 00000000 00000001"),
        (&[FATTR4_SIZE, FATTR4_MODE], "00000000 00000001"),
        // Garbage wins over an unknown owner.
        (&[FATTR4_OWNER], "00000006 6e6f626f 64790000 00000000"),
    ];
    for (bits, vals) in cases {
        assert_eq!(
            set_err(&fattr(bits, vals)),
            Nfsstat4::NFS4ERR_BADXDR,
            "{bits:?} {vals}"
        );
    }
}

#[test]
fn decode_set_bad_time_and_owner() {
    let f = fattr(
        &[FATTR4_TIME_MODIFY_SET],
        "00000001 00000000 00000001 3b9aca00",
    );
    assert_eq!(set_err(&f), Nfsstat4::NFS4ERR_INVAL);
    let cases: &[(u32, &str)] = &[
        (FATTR4_OWNER, "00000006 6e6f626f 64790000"),
        (FATTR4_OWNER, "0000000f 616c6963 65406f74 6865722e 6f726700"),
        (FATTR4_OWNER_GROUP, "00000005 616c6963 65000000"),
    ];
    for (bit, vals) in cases {
        let f = fattr(&[*bit], vals);
        assert_eq!(set_err(&f), Nfsstat4::NFS4ERR_BADOWNER, "{vals}");
    }
}

/// An empty owner or group names nobody: malformed (NFS4ERR_INVAL), not an
/// unknown principal (NFS4ERR_BADOWNER), with or without names in use.
#[test]
fn decode_set_empty_owner_is_inval() {
    for use_names in [false, true] {
        let m = idmap(use_names);
        for bits in [&[FATTR4_OWNER][..], &[FATTR4_OWNER_GROUP]] {
            let f = fattr(bits, "00000000");
            assert_eq!(
                decode_set(&f, &m, 1).unwrap_err(),
                Nfsstat4::NFS4ERR_INVAL,
                "{bits:?} {use_names}"
            );
        }
        // Beside a good group, the empty owner still fails the whole set.
        let f = fattr(
            &[FATTR4_OWNER, FATTR4_OWNER_GROUP],
            "00000000 00000002 35300000",
        );
        assert_eq!(decode_set(&f, &m, 0).unwrap_err(), Nfsstat4::NFS4ERR_INVAL);
    }
    // Garbage is still reported as garbage first.
    assert_eq!(
        set_err(&fattr(&[FATTR4_OWNER], "00000000 00000000")),
        Nfsstat4::NFS4ERR_BADXDR
    );
}

/// A size past maxfilesize is NFS4ERR_FBIG; maxfilesize itself is allowed.
#[test]
fn decode_set_size_beyond_maxfilesize_is_fbig() {
    let m = idmap(false);
    for size in [MAXFILESIZE + 1, u64::MAX] {
        let f = fattr(&[FATTR4_SIZE], &format!("{size:016x}"));
        assert_eq!(
            decode_set(&f, &m, 0).unwrap_err(),
            Nfsstat4::NFS4ERR_FBIG,
            "{size}"
        );
    }
    let f = fattr(&[FATTR4_SIZE], &format!("{MAXFILESIZE:016x}"));
    assert_eq!(decode_set(&f, &m, 0).unwrap().0.size, Some(MAXFILESIZE));
}

// ---- verify ----

#[test]
fn verify_equal_and_different() {
    let (a, fs) = (attr(), FSSTAT_VAL);
    for use_names in [false, true] {
        let m = idmap(use_names);
        let s = src(&a, &m, Some(&fs));
        let request = req(&[
            FATTR4_TYPE,
            FATTR4_SIZE,
            FATTR4_OWNER,
            FATTR4_OWNER_GROUP,
            FATTR4_SPACE_AVAIL,
            FATTR4_TIME_MODIFY,
        ]);
        assert_eq!(verify(&encode(&request, &s), &s), Ok(true));
        let mut b = a.clone();
        b.size += 1;
        assert_eq!(
            verify(&encode(&request, &src(&b, &m, Some(&fs))), &s),
            Ok(false)
        );
    }
    // Nothing to compare: trivially equal.
    let m = idmap(false);
    assert_eq!(verify(&fattr(&[], ""), &src(&a, &m, None)), Ok(true));
}

#[test]
fn verify_owner_by_id() {
    let (a, m) = (attr(), idmap(false));
    let s = src(&a, &m, None);
    let cases: &[(&str, bool)] = &[
        ("00000004 31303030", true),           // "1000"
        ("00000005 616c6963 65000000", true),  // "alice"
        ("00000004 726f6f74", false),          // "root"
        ("00000006 6e6f626f 64790000", false), // unknown: no error
        (
            "00000011 616c6963 65406578 616d706c 652e636f 6d000000",
            true,
        ), // alice@example.com
    ];
    for (vals, want) in cases {
        assert_eq!(
            verify(&fattr(&[FATTR4_OWNER], vals), &s),
            Ok(*want),
            "{vals}"
        );
    }
    let f = fattr(&[FATTR4_OWNER_GROUP], "00000005 73746166 66000000");
    assert_eq!(verify(&f, &s), Ok(true));
}

#[test]
fn verify_errors() {
    let (a, m) = (attr(), idmap(false));
    let s = src(&a, &m, None);
    let cases: &[(&[u32], &str, Nfsstat4)] = &[
        (&[FATTR4_ACL], "00000000", Nfsstat4::NFS4ERR_ATTRNOTSUPP),
        (&[FATTR4_SIZE, 100], "", Nfsstat4::NFS4ERR_ATTRNOTSUPP),
        (&[FATTR4_RDATTR_ERROR], "00000000", Nfsstat4::NFS4ERR_INVAL),
        (
            &[FATTR4_TIME_ACCESS_SET],
            "00000000",
            Nfsstat4::NFS4ERR_INVAL,
        ),
        (&[FATTR4_SIZE], "00000000", Nfsstat4::NFS4ERR_BADXDR),
        (
            &[FATTR4_TYPE],
            "00000001 00000000",
            Nfsstat4::NFS4ERR_BADXDR,
        ),
        (&[FATTR4_TYPE], "00000000", Nfsstat4::NFS4ERR_BADXDR),
        (&[FATTR4_LINK_SUPPORT], "00000002", Nfsstat4::NFS4ERR_BADXDR),
        (&[FATTR4_FILEHANDLE], "00000081", Nfsstat4::NFS4ERR_BADXDR),
        (&[], "00000000", Nfsstat4::NFS4ERR_BADXDR),
        // A mismatch does not hide garbage after it.
        (
            &[FATTR4_TYPE, FATTR4_SIZE],
            "00000002 00000000",
            Nfsstat4::NFS4ERR_BADXDR,
        ),
        (
            &[FATTR4_SPACE_FREE],
            "00000000 00000000",
            Nfsstat4::NFS4ERR_SERVERFAULT,
        ),
    ];
    for (bits, vals, want) in cases {
        assert_eq!(
            verify(&fattr(bits, vals), &s),
            Err(*want),
            "{bits:?} {vals}"
        );
    }
}

proptest! {
    #[test]
    fn decode_set_and_verify_never_panic(
        mask in proptest::collection::vec(any::<u32>(), 0..5),
        settable in any::<bool>(),
        vals in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        // Half the cases keep to settable bits so decoding is reached.
        let mask: Vec<u32> = if settable {
            mask.iter().zip(SETTABLE.iter()).map(|(a, b)| a & b).collect()
        } else {
            mask
        };
        let f = Fattr4 { attrmask: mask, attr_vals: Bytes::from(vals) };
        let m = idmap(true);
        let _ = decode_set(&f, &m, 1);
        let (a, fs) = (attr(), FSSTAT_VAL);
        let _ = verify(&f, &src(&a, &m, Some(&fs)));
        let _ = verify(&f, &src(&a, &m, None));
    }

    #[test]
    fn decode_set_round_trip(
        // Larger sizes are NFS4ERR_FBIG: decode_set_size_beyond_maxfilesize_is_fbig.
        size in 0..=MAXFILESIZE, mode in 0u32..0o10000, uid: u32, gid: u32,
        asecs: i64, ansecs in 0u32..1_000_000_000, mserver: bool,
    ) {
        let m = idmap(false);
        let mut vals = BytesMut::new();
        size.pack(&mut vals);
        mode.pack(&mut vals);
        m.owner(uid).pack(&mut vals);
        m.group(gid).pack(&mut vals);
        Settime4::SET_TO_CLIENT_TIME4(Nfstime4 { seconds: asecs, nseconds: ansecs }).pack(&mut vals);
        let mt = if mserver {
            Settime4::Default(TimeHow4::SET_TO_SERVER_TIME4)
        } else {
            Settime4::SET_TO_CLIENT_TIME4(Nfstime4 { seconds: 0, nseconds: 0 })
        };
        mt.pack(&mut vals);
        let f = Fattr4 { attrmask: to_bitmap(&SETTABLE), attr_vals: vals.freeze() };
        let (set, bm) = decode_set(&f, &m, 1).unwrap();
        prop_assert_eq!(bm, to_bitmap(&SETTABLE));
        prop_assert_eq!(set, SetAttr {
            size: Some(size), mode: Some(mode), uid: Some(uid), gid: Some(gid),
            atime: SetTime::ClientTime(Timespec { secs: asecs, nsecs: ansecs }),
            mtime: if mserver { SetTime::ServerTime } else { SetTime::ClientTime(Timespec::default()) },
        });
    }
}

#[test]
fn open_arguments_lists_what_open_takes() {
    let (a, m) = (attr(), idmap(false));
    let mut s = src(&a, &m, None);
    s.minor = 2;
    let got = packed(&req(&[FATTR4_OPEN_ARGUMENTS]), &s);
    // Bitmap word 2 bit 22 (86); then five bitmap4s: share access {1,2,3},
    // deny {0..3}, wants {any, none, cancel, open xor delegation (21)},
    // claims without the
    // DELEGATE_PREV pair, create modes {0..3}.
    let want = hex("00000003 00000000 00000000 00400000
         00000028
         00000001 0000000e
         00000001 0000000f
         00000001 00200038
         00000001 00000037
         00000001 0000000f");
    assert_eq!(dump(&got), dump(&want));
    // Not an NFSv4.1 attribute.
    s.minor = 1;
    let got = packed(&req(&[FATTR4_OPEN_ARGUMENTS]), &s);
    assert_eq!(dump(&got), dump(&hex("00000000 00000000")));
}

#[test]
fn change_and_size_come_out_of_a_cb_getattr_reply() {
    let (a, m) = (attr(), idmap(false));
    let s = src(&a, &m, None);
    let mut f = encode(&req(&[FATTR4_CHANGE, FATTR4_SIZE]), &s);
    assert_eq!(decode_change_size(&f), Some((change(&a), a.size)));
    // Delegated timestamps after them (84, 85) are ignored.
    bitmap_set(&mut f.attrmask, 84);
    assert_eq!(decode_change_size(&f), Some((change(&a), a.size)));
    // Without size it is unusable.
    let f = encode(&req(&[FATTR4_CHANGE]), &s);
    assert_eq!(decode_change_size(&f), None);
}

#[test]
fn a_chosen_change_reads_back() {
    let mut a = attr();
    set_change(&mut a, 1_700_000_000_123_456_789);
    assert_eq!(change(&a), 1_700_000_000_123_456_789);
}
