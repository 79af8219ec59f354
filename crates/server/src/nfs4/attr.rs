//! NFSv4 attributes (RFC 8881 §5): which ones Tarn supports, encoding them
//! for GETATTR/READDIR, decoding them for SETATTR/CREATE/OPEN, and comparing
//! them for VERIFY/NVERIFY. Pure code: the caller fetches the `vfs::Attr`
//! (and `vfs::FsStat` when [`needs_fsstat`] says so) and passes them in.
//!
//! An `fattr4` is a bitmap plus one opaque holding the values of the set bits
//! in increasing bit order, each in its own XDR type. Every value Tarn sends
//! is a multiple of four bytes, so values never need padding between them.
//!
//! What the caller still has to do, because these functions cannot return an
//! error or do not see the request's context:
//! - GETATTR/READDIR: [`check_get_request`] first (write-only attributes are
//!   NFS4ERR_INVAL); fetch `vfs::FsStat` when [`needs_fsstat`] is true.
//! - READDIR: if an entry's attributes cannot be read and the request lacks
//!   FATTR4_RDATTR_ERROR, fail the whole READDIR with that error instead of
//!   calling [`encode_into`] with `rdattr_error` set.
//! - OPEN EXCLUSIVE4_1: createattrs outside [`suppattr_exclcreat`] are the
//!   caller's to refuse.

use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs4::*;
use vfs::{FileType, SetAttr, SetTime, Timespec};
use xdr::{Decoder, Pack, Unpack};

pub use super::idmap::IdMap;

/// Largest READ and WRITE Tarn advertises (maxread/maxwrite); the COMPOUND
/// engine should clamp READ counts to the same numbers.
pub const MAXREAD: u64 = 1 << 20;
pub const MAXWRITE: u64 = 1 << 20;
/// maxlink is advisory and the backend's filesystem is unknown here; 255 is
/// the conservative value (the Linux server sends the same).
pub const MAXLINK: u32 = 255;
pub const MAXNAME: u32 = 255;
/// Files are addressed with signed 64-bit offsets by every backend.
pub const MAXFILESIZE: u64 = NFS4_INT64_MAX;

/// Every bit Tarn knows lies in the first three words (the highest is
/// open_arguments, 86); later request words can only hold unknown bits.
const WORDS: usize = 3;
type Mask = [u32; WORDS];

const fn mask_of(bits: &[u32]) -> Mask {
    let mut m = [0u32; WORDS];
    let mut i = 0;
    while i < bits.len() {
        m[(bits[i] / 32) as usize] |= 1 << (bits[i] % 32);
        i += 1;
    }
    m
}

const fn and(a: Mask, b: Mask) -> Mask {
    [a[0] & b[0], a[1] & b[1], a[2] & b[2]]
}

const fn not(a: Mask) -> Mask {
    [!a[0], !a[1], !a[2]]
}

/// Attributes that do not depend on the object: they can still be given for a
/// READDIR entry whose attributes could not be read (with rdattr_error).
const PER_FS: Mask = mask_of(&[
    FATTR4_SUPPORTED_ATTRS,
    FATTR4_FH_EXPIRE_TYPE,
    FATTR4_LINK_SUPPORT,
    FATTR4_SYMLINK_SUPPORT,
    FATTR4_NAMED_ATTR,
    FATTR4_FSID,
    FATTR4_UNIQUE_HANDLES,
    FATTR4_LEASE_TIME,
    FATTR4_RDATTR_ERROR,
    FATTR4_ACLSUPPORT,
    FATTR4_CANSETTIME,
    FATTR4_CASE_INSENSITIVE,
    FATTR4_CASE_PRESERVING,
    FATTR4_CHOWN_RESTRICTED,
    FATTR4_HOMOGENEOUS,
    FATTR4_MAXFILESIZE,
    FATTR4_MAXLINK,
    FATTR4_MAXNAME,
    FATTR4_MAXREAD,
    FATTR4_MAXWRITE,
    FATTR4_NO_TRUNC,
    FATTR4_TIME_DELTA,
    // Comes from the directory entry, not from the object.
    FATTR4_MOUNTED_ON_FILEID,
    FATTR4_SUPPATTR_EXCLCREAT,
    // NFSv4.2 (RFC 8276): the export's filesystem takes user xattrs.
    FATTR4_XATTR_SUPPORT,
    // NFSv4.2 (RFC 9754): what OPEN takes here.
    FATTR4_OPEN_ARGUMENTS,
]);

const PER_OBJECT: Mask = mask_of(&[
    FATTR4_TYPE,
    FATTR4_CHANGE,
    FATTR4_SIZE,
    FATTR4_FILEHANDLE,
    FATTR4_FILEID,
    FATTR4_MODE,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_RAWDEV,
    FATTR4_SPACE_USED,
    FATTR4_TIME_ACCESS,
    FATTR4_TIME_METADATA,
    FATTR4_TIME_MODIFY,
]);

/// Filesystem usage, which needs a statfs of the export.
const FSSTAT: Mask = mask_of(&[
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
]);

/// Settable but never returned (RFC 8881 §5.5: GETATTR of them is an error).
const WRITE_ONLY: Mask = mask_of(&[FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET]);

const SETTABLE: Mask = mask_of(&[
    FATTR4_SIZE,
    FATTR4_MODE,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_TIME_ACCESS_SET,
    FATTR4_TIME_MODIFY_SET,
]);

/// EXCLUSIVE4_1 keeps the create verifier out of band, so everything settable
/// except the times can be given with it (the times are left out as the Linux
/// server does, so a client never relies on them being set atomically).
const EXCLCREAT: Mask = mask_of(&[FATTR4_SIZE, FATTR4_MODE, FATTR4_OWNER, FATTR4_OWNER_GROUP]);

const fn or(a: Mask, b: Mask) -> Mask {
    [a[0] | b[0], a[1] | b[1], a[2] | b[2]]
}

const fn or4(a: Mask, b: Mask, c: Mask, d: Mask) -> Mask {
    [
        a[0] | b[0] | c[0] | d[0],
        a[1] | b[1] | c[1] | d[1],
        a[2] | b[2] | c[2] | d[2],
    ]
}

const SUPPORTED: Mask = or4(PER_FS, PER_OBJECT, FSSTAT, WRITE_ONLY);

/// Bits `lo..=hi`.
const fn range(lo: u32, hi: u32) -> Mask {
    let mut m = [0u32; WORDS];
    let mut b = lo;
    while b <= hi {
        m[(b / 32) as usize] |= 1 << (b % 32);
        b += 1;
    }
    m
}

/// Attributes NFSv4.1 added (RFC 8881 §5.6-5.7: dir_notif_delay, 56,
/// through fs_charset_cap, 76) and those NFSv4.2 and its extensions added
/// (RFC 7862 §12: clone_blksize, 77, onwards). A minor version's
/// supported_attrs must not name attributes of a later one, which its
/// clients do not know (RFC 7530 §5 lists all of NFSv4.0's).
const NEW_IN_41: Mask = range(56, 76);
const NEW_IN_42: Mask = range(77, WORDS as u32 * 32 - 1);

/// What Tarn supports in `minor`.
const fn supported(minor: u32) -> Mask {
    match minor {
        0 => and(SUPPORTED, not(or(NEW_IN_41, NEW_IN_42))),
        1 => and(SUPPORTED, not(NEW_IN_42)),
        _ => SUPPORTED,
    }
}

/// The first [`WORDS`] words of a client's bitmap; later words hold no bit
/// Tarn supports.
fn prefix(bm: &[u32]) -> Mask {
    let mut m = [0u32; WORDS];
    for (d, s) in m.iter_mut().zip(bm) {
        *d = *s;
    }
    m
}

/// Words up to the last non-zero one.
fn trimmed(m: &Mask) -> &[u32] {
    let n = m.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
    &m[..n]
}

fn to_bitmap(m: &Mask) -> Bitmap4 {
    trimmed(m).to_vec()
}

fn pack_mask(m: &Mask, out: &mut BytesMut) {
    let words = trimmed(m);
    out.put_u32(words.len() as u32);
    for &w in words {
        out.put_u32(w);
    }
}

/// Set bits of `m` in increasing order.
fn bits(m: Mask) -> impl Iterator<Item = u32> {
    (0..WORDS as u32).flat_map(move |i| {
        let mut w = m[i as usize];
        std::iter::from_fn(move || {
            if w == 0 {
                return None;
            }
            let b = w.trailing_zeros();
            w &= w - 1;
            Some(i * 32 + b)
        })
    })
}

/// Is `bit` set in a bitmap of any length?
pub fn bitmap_has(bm: &[u32], bit: u32) -> bool {
    bm.get((bit / 32) as usize)
        .is_some_and(|w| w & (1 << (bit % 32)) != 0)
}

/// Sets `bit`, growing the bitmap as needed.
pub fn bitmap_set(bm: &mut Bitmap4, bit: u32) {
    let i = (bit / 32) as usize;
    if bm.len() <= i {
        bm.resize(i + 1, 0);
    }
    bm[i] |= 1 << (bit % 32);
}

/// Everything needed to answer a GETATTR for one object.
pub struct AttrSource<'a> {
    pub attr: &'a vfs::Attr,
    /// The object's NFSv4 file handle (FATTR4_FILEHANDLE).
    pub fh: &'a [u8],
    /// Per export (major, minor).
    pub fsid: Fsid4,
    /// The fileid to report for FATTR4_MOUNTED_ON_FILEID.
    pub mounted_on_fileid: u64,
    /// Seconds.
    pub lease_time: u32,
    /// Present when [`needs_fsstat`] was true for the request; without it the
    /// files_* and space_{avail,free,total} attributes are left out.
    pub fsstat: Option<&'a vfs::FsStat>,
    pub idmap: &'a IdMap,
    /// The export is read-only. No mandatory attribute depends on it (times
    /// can still be set where the export allows writes at all).
    pub read_only: bool,
    /// For a READDIR entry whose attributes could not be read: only
    /// rdattr_error and the attributes that do not depend on the object are
    /// encoded, and `attr`, `fh` and `fsstat` are not looked at.
    pub rdattr_error: Option<Nfsstat4>,
    /// The COMPOUND's minor version: attributes of later minor versions are
    /// neither listed in supported_attrs nor returned.
    pub minor: u32,
    /// The export's backend takes user extended attributes (xattr_support).
    pub xattr_support: bool,
}

/// The bitmap of attributes Tarn supports in minor version `minor`.
pub fn supported_attrs(minor: u32) -> Bitmap4 {
    to_bitmap(&supported(minor))
}

/// Attributes a client may set in an EXCLUSIVE4_1 create.
pub fn suppattr_exclcreat() -> Bitmap4 {
    to_bitmap(&EXCLCREAT)
}

/// Whether answering `request` needs the export's `vfs::FsStat`.
pub fn needs_fsstat(request: &[u32]) -> bool {
    and(prefix(request), FSSTAT).iter().any(|&w| w != 0)
}

/// GETATTR and READDIR must refuse write-only attributes (time_access_set,
/// time_modify_set) with NFS4ERR_INVAL; [`encode`] itself just leaves them out.
pub fn check_get_request(request: &[u32]) -> Result<(), Nfsstat4> {
    if and(prefix(request), WRITE_ONLY).iter().any(|&w| w != 0) {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    Ok(())
}

/// The change attribute: ctime as nanoseconds, so it moves whenever the
/// backend's ctime does. Clamped (not wrapped) to stay monotonic.
pub fn change(attr: &vfs::Attr) -> u64 {
    let t = attr.ctime;
    let ns = t.secs as i128 * 1_000_000_000 + t.nsecs as i128;
    ns.clamp(0, u64::MAX as i128) as u64
}

/// Makes `attr` answer `change` as its change attribute (a value the
/// server chose for a file under write delegation): being ctime, the
/// metadata time moves with it.
pub fn set_change(attr: &mut vfs::Attr, change: u64) {
    attr.ctime = Timespec {
        secs: (change / 1_000_000_000) as i64,
        nsecs: (change % 1_000_000_000) as u32,
    };
}

/// RFC 9754 open_arguments: the OPEN arguments Tarn takes, each a bitmap
/// of the enum values it supports. Delegation wishes: any, none, cancel
/// and OPEN_XOR_DELEGATION (not delegated timestamps); claims: all but
/// the CLAIM_DELEGATE_PREV pair (delegations do not survive a client's
/// restart here).
fn pack_open_arguments(out: &mut BytesMut) {
    let bm = |vals: &[u32], out: &mut BytesMut| {
        let mut b = Vec::new();
        for v in vals {
            bitmap_set(&mut b, *v);
        }
        b.pack(out);
    };
    bm(&[1, 2, 3], out); // share access: read, write, both
    bm(&[0, 1, 2, 3], out); // share deny: none, read, write, both
    bm(&[3, 4, 5, 21], out); // want: any delegation, no delegation, cancel, open xor delegation
    bm(&[0, 1, 2, 4, 5], out); // claims: NULL, PREVIOUS, DELEGATE_CUR, FH, DELEG_CUR_FH
    bm(&[0, 1, 2, 3], out); // create modes: unchecked, guarded, exclusive, exclusive4_1
}

/// Change and size out of a CB_GETATTR reply's attributes (the two a
/// write delegation's holder is asked for; later ones are ignored).
pub fn decode_change_size(f: &Fattr4) -> Option<(u64, u64)> {
    if !bitmap_has(&f.attrmask, FATTR4_CHANGE) || !bitmap_has(&f.attrmask, FATTR4_SIZE) {
        return None;
    }
    // Bits below change (supported_attrs, type, fh_expire_type) would come
    // first and are not asked for: a reply holding them is not used.
    if f.attrmask.first().is_some_and(|w| w & 0b111 != 0) {
        return None;
    }
    let mut d = Decoder::new(f.attr_vals.clone());
    let change = d.u64().ok()?;
    let size = d.u64().ok()?;
    Some((change, size))
}

pub fn ftype4(t: FileType) -> NfsFtype4 {
    match t {
        FileType::Regular => NfsFtype4::NF4REG,
        FileType::Directory => NfsFtype4::NF4DIR,
        FileType::Symlink => NfsFtype4::NF4LNK,
        FileType::BlockDev => NfsFtype4::NF4BLK,
        FileType::CharDev => NfsFtype4::NF4CHR,
        FileType::Socket => NfsFtype4::NF4SOCK,
        FileType::Fifo => NfsFtype4::NF4FIFO,
    }
}

/// What will be encoded for `request`: known, readable and available bits.
fn result_mask(request: &[u32], src: &AttrSource) -> Mask {
    let mut m = and(and(prefix(request), supported(src.minor)), not(WRITE_ONLY));
    if src.rdattr_error.is_some() {
        m = and(m, PER_FS);
    } else if src.fsstat.is_none() {
        m = and(m, not(FSSTAT));
    }
    m
}

/// The attributes of `request` that Tarn supports, as an `fattr4`.
pub fn encode(request: &[u32], src: &AttrSource) -> Fattr4 {
    let m = result_mask(request, src);
    let mut vals = BytesMut::new();
    for bit in bits(m) {
        encode_attr(bit, src, &mut vals);
    }
    Fattr4 {
        attrmask: to_bitmap(&m),
        attr_vals: vals.freeze(),
    }
}

/// Same as [`encode`], packed as an XDR `fattr4` straight onto `out`.
pub fn encode_into(request: &[u32], src: &AttrSource, out: &mut BytesMut) {
    let m = result_mask(request, src);
    pack_mask(&m, out);
    // The opaque's length is known only afterwards: reserve it, then patch.
    let at = out.len();
    out.put_u32(0);
    for bit in bits(m) {
        encode_attr(bit, src, out);
    }
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn pack_time(t: Timespec, out: &mut BytesMut) {
    out.put_i64(t.secs);
    out.put_u32(t.nsecs);
}

/// One attribute's value. Only called for bits of [`SUPPORTED`] minus the
/// write-only ones.
fn encode_attr(bit: u32, src: &AttrSource, out: &mut BytesMut) {
    let a = src.attr;
    // result_mask keeps these bits only when fsstat is present.
    let fs = || src.fsstat.copied().unwrap_or_default();
    match bit {
        FATTR4_SUPPORTED_ATTRS => pack_mask(&supported(src.minor), out),
        FATTR4_TYPE => ftype4(a.ftype).pack(out),
        FATTR4_FH_EXPIRE_TYPE => out.put_u32(FH4_PERSISTENT),
        FATTR4_CHANGE => out.put_u64(change(a)),
        FATTR4_SIZE => out.put_u64(a.size),
        FATTR4_LINK_SUPPORT => true.pack(out),
        FATTR4_SYMLINK_SUPPORT => true.pack(out),
        FATTR4_NAMED_ATTR => false.pack(out),
        FATTR4_FSID => src.fsid.pack(out),
        FATTR4_UNIQUE_HANDLES => true.pack(out),
        FATTR4_LEASE_TIME => out.put_u32(src.lease_time),
        FATTR4_RDATTR_ERROR => src.rdattr_error.unwrap_or(Nfsstat4::NFS4_OK).pack(out),
        FATTR4_FILEHANDLE => xdr::pack_opaque(src.fh, out),
        FATTR4_ACLSUPPORT => out.put_u32(0),
        FATTR4_CANSETTIME => true.pack(out),
        FATTR4_CASE_INSENSITIVE => false.pack(out),
        FATTR4_CASE_PRESERVING => true.pack(out),
        FATTR4_CHOWN_RESTRICTED => true.pack(out),
        FATTR4_FILEID => out.put_u64(a.fileid),
        FATTR4_FILES_AVAIL => out.put_u64(fs().avail_files),
        FATTR4_FILES_FREE => out.put_u64(fs().free_files),
        FATTR4_FILES_TOTAL => out.put_u64(fs().total_files),
        FATTR4_HOMOGENEOUS => true.pack(out),
        FATTR4_MAXFILESIZE => out.put_u64(MAXFILESIZE),
        FATTR4_MAXLINK => out.put_u32(MAXLINK),
        FATTR4_MAXNAME => out.put_u32(MAXNAME),
        FATTR4_MAXREAD => out.put_u64(MAXREAD),
        FATTR4_MAXWRITE => out.put_u64(MAXWRITE),
        FATTR4_MODE => out.put_u32(a.mode & 0o7777),
        FATTR4_NO_TRUNC => true.pack(out),
        FATTR4_NUMLINKS => out.put_u32(a.nlink),
        FATTR4_OWNER => src.idmap.pack_owner(a.uid, out),
        FATTR4_OWNER_GROUP => src.idmap.pack_group(a.gid, out),
        FATTR4_RAWDEV => {
            out.put_u32(a.rdev.0);
            out.put_u32(a.rdev.1);
        }
        FATTR4_SPACE_AVAIL => out.put_u64(fs().avail_bytes),
        FATTR4_SPACE_FREE => out.put_u64(fs().free_bytes),
        FATTR4_SPACE_TOTAL => out.put_u64(fs().total_bytes),
        FATTR4_SPACE_USED => out.put_u64(a.used),
        FATTR4_TIME_ACCESS => pack_time(a.atime, out),
        FATTR4_TIME_DELTA => pack_time(Timespec { secs: 0, nsecs: 1 }, out),
        FATTR4_TIME_METADATA => pack_time(a.ctime, out),
        FATTR4_TIME_MODIFY => pack_time(a.mtime, out),
        FATTR4_MOUNTED_ON_FILEID => out.put_u64(src.mounted_on_fileid),
        FATTR4_SUPPATTR_EXCLCREAT => pack_mask(&EXCLCREAT, out),
        FATTR4_XATTR_SUPPORT => src.xattr_support.pack(out),
        FATTR4_OPEN_ARGUMENTS => pack_open_arguments(out),
        _ => debug_assert!(false, "encode_attr called for unsupported bit {bit}"),
    }
}

/// Steps over one value of a supported attribute, checking that it is
/// well-formed XDR of the attribute's type.
fn skip_attr(bit: u32, d: &mut Decoder) -> xdr::Result<()> {
    match bit {
        FATTR4_SUPPORTED_ATTRS | FATTR4_SUPPATTR_EXCLCREAT => {
            for _ in 0..d.count(None)? {
                d.u32()?;
            }
        }
        FATTR4_OPEN_ARGUMENTS => {
            for _ in 0..5 {
                for _ in 0..d.count(None)? {
                    d.u32()?;
                }
            }
        }
        FATTR4_TYPE => {
            NfsFtype4::unpack(d)?;
        }
        FATTR4_RDATTR_ERROR => {
            Nfsstat4::unpack(d)?;
        }
        FATTR4_LINK_SUPPORT
        | FATTR4_SYMLINK_SUPPORT
        | FATTR4_NAMED_ATTR
        | FATTR4_UNIQUE_HANDLES
        | FATTR4_CANSETTIME
        | FATTR4_CASE_INSENSITIVE
        | FATTR4_CASE_PRESERVING
        | FATTR4_CHOWN_RESTRICTED
        | FATTR4_HOMOGENEOUS
        | FATTR4_NO_TRUNC
        | FATTR4_XATTR_SUPPORT => {
            d.bool()?;
        }
        FATTR4_FH_EXPIRE_TYPE
        | FATTR4_LEASE_TIME
        | FATTR4_ACLSUPPORT
        | FATTR4_MAXLINK
        | FATTR4_MAXNAME
        | FATTR4_MODE
        | FATTR4_NUMLINKS => {
            d.u32()?;
        }
        FATTR4_FSID => {
            Fsid4::unpack(d)?;
        }
        FATTR4_RAWDEV => {
            Specdata4::unpack(d)?;
        }
        FATTR4_FILEHANDLE => {
            NfsFh4::unpack(d)?;
        }
        FATTR4_OWNER | FATTR4_OWNER_GROUP => {
            d.opaque(None)?;
        }
        FATTR4_TIME_ACCESS | FATTR4_TIME_DELTA | FATTR4_TIME_METADATA | FATTR4_TIME_MODIFY => {
            Nfstime4::unpack(d)?;
        }
        FATTR4_TIME_ACCESS_SET | FATTR4_TIME_MODIFY_SET => {
            Settime4::unpack(d)?;
        }
        // The remaining supported attributes are all uint64_t.
        _ => {
            d.u64()?;
        }
    }
    Ok(())
}

/// Checks a client's bitmap against what Tarn supports in `minor`: unknown
/// or unsupported bits, in any word, are NFS4ERR_ATTRNOTSUPP.
fn client_mask(bm: &[u32], minor: u32) -> Result<Mask, Nfsstat4> {
    let m = prefix(bm);
    let unsupported = and(m, not(supported(minor))).iter().any(|&w| w != 0)
        || bm.iter().skip(WORDS).any(|&w| w != 0);
    if unsupported {
        return Err(Nfsstat4::NFS4ERR_ATTRNOTSUPP);
    }
    Ok(m)
}

fn bad_xdr(_: xdr::Error) -> Nfsstat4 {
    Nfsstat4::NFS4ERR_BADXDR
}

/// A client's time: RFC 8881 §3.3.1 requires nseconds < 10^9.
fn client_time(t: Nfstime4) -> Result<Timespec, Nfsstat4> {
    if t.nseconds >= 1_000_000_000 {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    Ok(Timespec {
        secs: t.seconds,
        nsecs: t.nseconds,
    })
}

fn set_time(s: Settime4) -> Result<SetTime, Nfsstat4> {
    Ok(match s {
        Settime4::SET_TO_CLIENT_TIME4(t) => SetTime::ClientTime(client_time(t)?),
        Settime4::Default(_) => SetTime::ServerTime,
    })
}

/// The attributes of a SETATTR, CREATE or OPEN as a backend `SetAttr`, and
/// the bitmap of what it sets (SETATTR's attrsset).
///
/// Errors, checked in this order: a bit Tarn does not support in `minor` is
/// NFS4ERR_ATTRNOTSUPP; a supported read-only one NFS4ERR_INVAL; values that
/// do not decode, or bytes left over, NFS4ERR_BADXDR; a time with nseconds
/// out of range NFS4ERR_INVAL; a size beyond [`MAXFILESIZE`] NFS4ERR_FBIG;
/// an empty owner or group NFS4ERR_INVAL; an owner or group without an id
/// NFS4ERR_BADOWNER.
pub fn decode_set(f: &Fattr4, idmap: &IdMap, minor: u32) -> Result<(SetAttr, Bitmap4), Nfsstat4> {
    let m = client_mask(&f.attrmask, minor)?;
    if and(m, not(SETTABLE)).iter().any(|&w| w != 0) {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    let mut d = Decoder::new(f.attr_vals.clone());
    let mut set = SetAttr::default();
    let mut owner: Option<Bytes> = None;
    let mut group: Option<Bytes> = None;
    let mut atime = None;
    let mut mtime = None;
    // Decode everything before mapping names, so garbage is BADXDR whatever
    // comes first.
    for bit in bits(m) {
        match bit {
            FATTR4_SIZE => set.size = Some(d.u64().map_err(bad_xdr)?),
            FATTR4_MODE => set.mode = Some(d.u32().map_err(bad_xdr)? & 0o7777),
            FATTR4_OWNER => owner = Some(d.opaque(None).map_err(bad_xdr)?),
            FATTR4_OWNER_GROUP => group = Some(d.opaque(None).map_err(bad_xdr)?),
            FATTR4_TIME_ACCESS_SET => atime = Some(Settime4::unpack(&mut d).map_err(bad_xdr)?),
            FATTR4_TIME_MODIFY_SET => mtime = Some(Settime4::unpack(&mut d).map_err(bad_xdr)?),
            _ => unreachable!("bit {bit} is not in SETTABLE"),
        }
    }
    if d.remaining() != 0 {
        return Err(Nfsstat4::NFS4ERR_BADXDR);
    }
    if let Some(t) = atime {
        set.atime = set_time(t)?;
    }
    if let Some(t) = mtime {
        set.mtime = set_time(t)?;
    }
    // maxfilesize is what the client was told it may use; a larger size
    // (say U64_MAX, which no backend's signed offsets can hold) grows the
    // file past the server's limit: NFS4ERR_FBIG (RFC 8881 §15.1, RFC 7530
    // §13.1), not merely an invalid argument.
    if set.size.is_some_and(|s| s > MAXFILESIZE) {
        return Err(Nfsstat4::NFS4ERR_FBIG);
    }
    // An empty string names no principal at all: it is malformed, not an
    // unknown user (the Linux server answers the same).
    if owner.as_ref().is_some_and(|s| s.is_empty()) || group.as_ref().is_some_and(|s| s.is_empty())
    {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    if let Some(s) = owner {
        set.uid = Some(idmap.uid(&s)?);
    }
    if let Some(s) = group {
        set.gid = Some(idmap.gid(&s)?);
    }
    Ok((set, to_bitmap(&m)))
}

/// VERIFY/NVERIFY: whether every attribute in `f` equals the object's.
///
/// Values are compared as XDR encodings, except that an owner or group the
/// client names differently ("alice@domain" for our "1000") is compared by the
/// id it maps to. NFS4ERR_ATTRNOTSUPP for unsupported bits, NFS4ERR_INVAL for
/// rdattr_error or a write-only attribute, NFS4ERR_BADXDR for garbage
/// (checked to the end even after a mismatch), NFS4ERR_SERVERFAULT if `src`
/// lacks the fsstat the bitmap needs.
pub fn verify(f: &Fattr4, src: &AttrSource) -> Result<bool, Nfsstat4> {
    let m = client_mask(&f.attrmask, src.minor)?;
    if bitmap_has(&m, FATTR4_RDATTR_ERROR) || and(m, WRITE_ONLY).iter().any(|&w| w != 0) {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    if src.fsstat.is_none() && needs_fsstat(&m) {
        return Err(Nfsstat4::NFS4ERR_SERVERFAULT);
    }
    let vals = &f.attr_vals;
    let mut d = Decoder::new(vals.clone());
    let mut ours = BytesMut::new();
    let mut equal = true;
    for bit in bits(m) {
        let start = d.position();
        skip_attr(bit, &mut d).map_err(bad_xdr)?;
        if !equal {
            continue;
        }
        let theirs = &vals[start..d.position()];
        ours.clear();
        encode_attr(bit, src, &mut ours);
        if theirs != &ours[..] {
            equal = same_owner(bit, theirs, src);
        }
    }
    if d.remaining() != 0 {
        return Err(Nfsstat4::NFS4ERR_BADXDR);
    }
    Ok(equal)
}

/// An owner or group string that differs from ours but maps to the same id.
fn same_owner(bit: u32, theirs: &[u8], src: &AttrSource) -> bool {
    let Ok(s) = Decoder::new(Bytes::copy_from_slice(theirs)).opaque(None) else {
        return false;
    };
    match bit {
        FATTR4_OWNER => src.idmap.uid(&s) == Ok(src.attr.uid),
        FATTR4_OWNER_GROUP => src.idmap.gid(&s) == Ok(src.attr.gid),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
