//! fattr4: attribute bitmaps, and the attribute values a client commonly
//! needs decoded from (and encoded into) the packed `attr_vals` bytes.
//!
//! Values are packed in bit order with no lengths, so an attribute that is
//! not understood ends decoding: ask only for attributes listed here.

use super::error::{Error, Result};
use bytes::{BufMut, BytesMut};
use proto::nfs4::*;
use xdr::{Decoder, Unpack};

/// A bitmap4 with the given attribute numbers set.
pub fn bitmap(bits: &[u32]) -> Bitmap4 {
    let mut words = vec![];
    for &b in bits {
        let w = (b / 32) as usize;
        if words.len() <= w {
            words.resize(w + 1, 0);
        }
        words[w] |= 1 << (b % 32);
    }
    words
}

/// The attribute numbers set in a bitmap4, ascending.
pub fn bits(map: &[u32]) -> Vec<u32> {
    let mut out = vec![];
    for (w, word) in map.iter().enumerate() {
        for b in 0..32 {
            if word & (1 << b) != 0 {
                out.push(w as u32 * 32 + b);
            }
        }
    }
    out
}

/// Decoded attributes; None for those not returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub supported: Option<Bitmap4>,
    pub ftype: Option<NfsFtype4>,
    /// A device's major and minor numbers.
    pub rawdev: Option<Specdata4>,
    pub change: Option<u64>,
    pub size: Option<u64>,
    pub fsid: Option<Fsid4>,
    pub lease_time: Option<u32>,
    pub rdattr_error: Option<Nfsstat4>,
    pub filehandle: Option<NfsFh4>,
    pub fileid: Option<u64>,
    pub maxread: Option<u64>,
    pub maxwrite: Option<u64>,
    pub mode: Option<u32>,
    pub numlinks: Option<u32>,
    pub owner: Option<String>,
    pub owner_group: Option<String>,
    pub space_used: Option<u64>,
    pub time_access: Option<Nfstime4>,
    pub time_metadata: Option<Nfstime4>,
    pub time_modify: Option<Nfstime4>,
    pub mounted_on_fileid: Option<u64>,
    pub files_avail: Option<u64>,
    pub files_free: Option<u64>,
    pub files_total: Option<u64>,
    pub space_avail: Option<u64>,
    pub space_free: Option<u64>,
    pub space_total: Option<u64>,
}

/// What `statfs(2)` shows: files and space, available, free and total.
pub const FSSTAT: &[u32] = &[
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
];

/// A file's usual attributes, what [`Session::stat`](super::Session::stat)
/// asks for: type, change, size, file ID, mode, links, owner, group, space
/// used and the three times.
pub const STAT_BITS: &[u32] = &[
    FATTR4_TYPE,
    FATTR4_CHANGE,
    FATTR4_SIZE,
    FATTR4_FILEID,
    FATTR4_MODE,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_SPACE_USED,
    FATTR4_TIME_ACCESS,
    FATTR4_TIME_METADATA,
    FATTR4_TIME_MODIFY,
];

/// What `stat(1)` shows: [`STAT_BITS`] and the file system ID (a bitmap:
/// the order is no matter).
pub const STAT: &[u32] = &joined::<13>(STAT_BITS, &[FATTR4_FSID]);

/// `bits` then `more` as one array of `N`, their lengths' sum (checked
/// when the constant is made).
const fn joined<const N: usize>(bits: &[u32], more: &[u32]) -> [u32; N] {
    assert!(bits.len() + more.len() == N);
    let mut out = [0; N];
    let mut i = 0;
    while i < bits.len() {
        out[i] = bits[i];
        i += 1;
    }
    while i < N {
        out[i] = more[i - bits.len()];
        i += 1;
    }
    out
}

/// The attributes [`decode`] understands.
pub const DECODABLE: &[u32] = &[
    FATTR4_SUPPORTED_ATTRS,
    FATTR4_TYPE,
    FATTR4_FH_EXPIRE_TYPE,
    FATTR4_CHANGE,
    FATTR4_SIZE,
    FATTR4_LINK_SUPPORT,
    FATTR4_SYMLINK_SUPPORT,
    FATTR4_NAMED_ATTR,
    FATTR4_FSID,
    FATTR4_UNIQUE_HANDLES,
    FATTR4_LEASE_TIME,
    FATTR4_RDATTR_ERROR,
    FATTR4_FILEHANDLE,
    FATTR4_FILEID,
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_MAXFILESIZE,
    FATTR4_MAXLINK,
    FATTR4_MAXNAME,
    FATTR4_MAXREAD,
    FATTR4_MAXWRITE,
    FATTR4_MODE,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_RAWDEV,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
    FATTR4_SPACE_USED,
    FATTR4_TIME_ACCESS,
    FATTR4_TIME_METADATA,
    FATTR4_TIME_MODIFY,
    FATTR4_MOUNTED_ON_FILEID,
];

fn text(d: &mut Decoder) -> Result<String> {
    let b = d.opaque(None)?;
    String::from_utf8(b.to_vec()).map_err(|_| Error::Protocol("attribute is not UTF-8".into()))
}

/// Decodes `attr_vals` by the bits of `attrmask`.
pub fn decode(f: &Fattr4) -> Result<Attrs> {
    let mut d = Decoder::new(f.attr_vals.clone());
    let mut a = Attrs::default();
    for bit in bits(&f.attrmask) {
        match bit {
            FATTR4_SUPPORTED_ATTRS => a.supported = Some(Vec::<u32>::unpack(&mut d)?),
            FATTR4_TYPE => a.ftype = Some(NfsFtype4::unpack(&mut d)?),
            FATTR4_CHANGE => a.change = Some(d.u64()?),
            FATTR4_SIZE => a.size = Some(d.u64()?),
            FATTR4_FSID => a.fsid = Some(Fsid4::unpack(&mut d)?),
            FATTR4_LEASE_TIME => a.lease_time = Some(d.u32()?),
            FATTR4_RDATTR_ERROR => a.rdattr_error = Some(Nfsstat4::unpack(&mut d)?),
            FATTR4_FILEHANDLE => a.filehandle = Some(NfsFh4(d.opaque(Some(NFS4_FHSIZE))?)),
            FATTR4_FILEID => a.fileid = Some(d.u64()?),
            FATTR4_MAXREAD => a.maxread = Some(d.u64()?),
            FATTR4_MAXWRITE => a.maxwrite = Some(d.u64()?),
            FATTR4_MODE => a.mode = Some(d.u32()?),
            FATTR4_NUMLINKS => a.numlinks = Some(d.u32()?),
            FATTR4_OWNER => a.owner = Some(text(&mut d)?),
            FATTR4_OWNER_GROUP => a.owner_group = Some(text(&mut d)?),
            FATTR4_SPACE_USED => a.space_used = Some(d.u64()?),
            FATTR4_TIME_ACCESS => a.time_access = Some(Nfstime4::unpack(&mut d)?),
            FATTR4_TIME_METADATA => a.time_metadata = Some(Nfstime4::unpack(&mut d)?),
            FATTR4_TIME_MODIFY => a.time_modify = Some(Nfstime4::unpack(&mut d)?),
            FATTR4_MOUNTED_ON_FILEID => a.mounted_on_fileid = Some(d.u64()?),
            FATTR4_FILES_AVAIL => a.files_avail = Some(d.u64()?),
            FATTR4_FILES_FREE => a.files_free = Some(d.u64()?),
            FATTR4_FILES_TOTAL => a.files_total = Some(d.u64()?),
            FATTR4_SPACE_AVAIL => a.space_avail = Some(d.u64()?),
            FATTR4_SPACE_FREE => a.space_free = Some(d.u64()?),
            FATTR4_SPACE_TOTAL => a.space_total = Some(d.u64()?),
            // Understood but not kept: skipped by their fixed size.
            FATTR4_FH_EXPIRE_TYPE
            | FATTR4_LINK_SUPPORT
            | FATTR4_SYMLINK_SUPPORT
            | FATTR4_NAMED_ATTR
            | FATTR4_UNIQUE_HANDLES
            | FATTR4_MAXLINK
            | FATTR4_MAXNAME => {
                d.u32()?;
            }
            FATTR4_RAWDEV => a.rawdev = Some(Specdata4::unpack(&mut d)?),
            FATTR4_MAXFILESIZE => {
                d.u64()?;
            }
            other => return Err(Error::Protocol(format!("cannot decode attribute {other}"))),
        }
    }
    Ok(a)
}

/// Attributes to set (CREATE, OPEN with create, SETATTR).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttrs {
    pub size: Option<u64>,
    pub mode: Option<u32>,
    /// `owner` and `owner_group` as the server names them ("1000" or
    /// "user@domain").
    pub owner: Option<String>,
    pub owner_group: Option<String>,
    /// `time_access_set`: a given time, or the server's own.
    pub atime: Option<Settime4>,
    /// `time_modify_set`: a given time (what `cp -p` keeps), or the server's own.
    pub mtime: Option<Settime4>,
}

impl SetAttrs {
    pub fn mode(mode: u32) -> Self {
        SetAttrs {
            mode: Some(mode),
            ..Default::default()
        }
    }

    pub fn encode(&self) -> Fattr4 {
        let mut set = vec![];
        let mut v = BytesMut::new();
        // In bit order: size (4), mode (33), owner (36), owner_group
        // (37), time_access_set (48), time_modify_set (54).
        if let Some(s) = self.size {
            set.push(FATTR4_SIZE);
            v.put_u64(s);
        }
        if let Some(m) = self.mode {
            set.push(FATTR4_MODE);
            v.put_u32(m);
        }
        if let Some(o) = &self.owner {
            set.push(FATTR4_OWNER);
            xdr::Pack::pack(&bytes::Bytes::copy_from_slice(o.as_bytes()), &mut v);
        }
        if let Some(g) = &self.owner_group {
            set.push(FATTR4_OWNER_GROUP);
            xdr::Pack::pack(&bytes::Bytes::copy_from_slice(g.as_bytes()), &mut v);
        }
        if let Some(t) = &self.atime {
            set.push(FATTR4_TIME_ACCESS_SET);
            xdr::Pack::pack(t, &mut v);
        }
        if let Some(t) = &self.mtime {
            set.push(FATTR4_TIME_MODIFY_SET);
            xdr::Pack::pack(t, &mut v);
        }
        Fattr4 {
            attrmask: bitmap(&set),
            attr_vals: v.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn stat_is_the_usual_attributes_and_the_fsid() {
        assert_eq!(STAT.len(), STAT_BITS.len() + 1);
        assert!(STAT_BITS.iter().all(|b| STAT.contains(b)));
        assert!(STAT.contains(&FATTR4_FSID));
    }

    #[test]
    fn bitmap_round_trip() {
        let b = bitmap(&[
            FATTR4_TYPE,
            FATTR4_SIZE,
            FATTR4_MODE,
            FATTR4_MOUNTED_ON_FILEID,
        ]);
        assert_eq!(b, vec![(1 << 1) | (1 << 4), (1 << 1) | (1 << 23)]);
        assert_eq!(bits(&b), [1, 4, 33, 55]);
        assert_eq!(bitmap(&[]), Vec::<u32>::new());
    }

    #[test]
    fn decodes_in_bit_order_and_skips_fixed_size_ones() {
        let mut v = BytesMut::new();
        v.put_i32(NfsFtype4::NF4REG as i32); // type
        v.put_u64(7); // change
        v.put_u64(4096); // size
        v.put_u32(1); // link_support
        v.put_u64(99); // fileid
        v.put_u32(0o640); // mode
        xdr::pack_opaque(b"1000", &mut v); // owner
        let f = Fattr4 {
            attrmask: bitmap(&[
                FATTR4_TYPE,
                FATTR4_CHANGE,
                FATTR4_SIZE,
                FATTR4_LINK_SUPPORT,
                FATTR4_FILEID,
                FATTR4_MODE,
                FATTR4_OWNER,
            ]),
            attr_vals: v.freeze(),
        };
        let a = decode(&f).unwrap();
        assert_eq!(a.ftype, Some(NfsFtype4::NF4REG));
        assert_eq!(
            (a.change, a.size, a.fileid),
            (Some(7), Some(4096), Some(99))
        );
        assert_eq!(a.mode, Some(0o640));
        assert_eq!(a.owner.as_deref(), Some("1000"));
    }

    #[test]
    fn unknown_attribute_and_short_values_are_errors() {
        let f = Fattr4 {
            attrmask: bitmap(&[FATTR4_ACL]),
            attr_vals: Bytes::from_static(&[0, 0, 0, 0]),
        };
        assert!(decode(&f).is_err());
        let f = Fattr4 {
            attrmask: bitmap(&[FATTR4_SIZE]),
            attr_vals: Bytes::from_static(&[0, 0, 0, 1]),
        };
        assert!(decode(&f).is_err());
    }

    #[test]
    fn set_attrs_encode_decodes_back() {
        let f = SetAttrs {
            size: Some(10),
            mode: Some(0o600),
            ..Default::default()
        }
        .encode();
        let a = decode(&f).unwrap();
        assert_eq!((a.size, a.mode), (Some(10), Some(0o600)));
    }

    #[test]
    fn set_times_are_encoded_after_mode_in_bit_order() {
        let t = Nfstime4 {
            seconds: 1_700_000_000,
            nseconds: 5,
        };
        let f = SetAttrs {
            mode: Some(0o644),
            atime: Some(Settime4::Default(TimeHow4::SET_TO_SERVER_TIME4)),
            mtime: Some(Settime4::SET_TO_CLIENT_TIME4(t.clone())),
            ..Default::default()
        }
        .encode();
        assert_eq!(
            bits(&f.attrmask),
            [FATTR4_MODE, FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET]
        );
        let mut d = Decoder::new(f.attr_vals.clone());
        assert_eq!(d.u32().unwrap(), 0o644);
        assert_eq!(d.u32().unwrap(), TimeHow4::SET_TO_SERVER_TIME4 as u32);
        assert_eq!(d.u32().unwrap(), TimeHow4::SET_TO_CLIENT_TIME4 as u32);
        assert_eq!(Nfstime4::unpack(&mut d).unwrap(), t);
        assert_eq!(d.remaining(), 0);
    }

    #[test]
    fn space_and_files_counts_are_decoded() {
        let mut v = BytesMut::new();
        for x in [1u64, 2, 3, 4, 5, 6] {
            v.put_u64(x);
        }
        let f = Fattr4 {
            attrmask: bitmap(FSSTAT),
            attr_vals: v.freeze(),
        };
        let a = decode(&f).unwrap();
        assert_eq!(
            (a.files_avail, a.files_free, a.files_total),
            (Some(1), Some(2), Some(3))
        );
        assert_eq!(
            (a.space_avail, a.space_free, a.space_total),
            (Some(4), Some(5), Some(6))
        );
    }
}
