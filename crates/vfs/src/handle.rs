//! MAC'd persistent file handles.
//!
//! Wire layout (at most 64 bytes, NFSv3's `NFS3_FHSIZE`):
//!
//! ```text
//! version (1) | export id (4, big endian) | fid (0..=40) | tag (16)
//! ```
//!
//! The fid length is implied by the total length. The tag is HMAC-SHA256 over
//! everything before it, truncated to 16 bytes, under a 32-byte server secret
//! ([`HandleKey`]). Clients therefore cannot forge fids: the local backend's
//! fids are kernel file handles, which `open_by_handle_at` would open anywhere
//! on the filesystem, so only fids we issued (for objects reached beneath the
//! export) may come back.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::{Fid, FsError};

type HmacSha256 = Hmac<Sha256>;

/// Current handle format version.
pub const VERSION: u8 = 1;
/// Truncated tag length (128 bits: far beyond online guessing).
pub const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 1 + 4;
/// Smallest possible handle (empty fid).
pub const MIN_LEN: usize = HEADER_LEN + TAG_LEN;
/// Largest handle: NFSv3 `NFS3_FHSIZE`.
pub const MAX_LEN: usize = 64;
const _: () = assert!(HEADER_LEN + Fid::MAX_LEN + TAG_LEN <= MAX_LEN);

inline_bytes! {
    /// An encoded handle: inline buffer, no heap.
    Handle[MAX_LEN]
}

impl AsRef<[u8]> for Handle {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// The server secret that signs handles. Holds a pre-keyed HMAC so each
/// seal/open only clones the keyed state instead of redoing the key schedule.
#[derive(Clone)]
pub struct HandleKey {
    mac: HmacSha256,
}

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    pub const KEY_LEN: usize = 32;

    pub fn from_bytes(key: &[u8; Self::KEY_LEN]) -> HandleKey {
        HandleKey {
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
        }
    }

    /// A fresh random key (tests, or servers that accept losing handles on restart).
    pub fn random() -> HandleKey {
        let mut k = [0u8; Self::KEY_LEN];
        rand::Rng::fill(&mut rand::rngs::OsRng, &mut k[..]);
        Self::from_bytes(&k)
    }

    /// Reads the key at `path`, or creates it (mode 0600, random bytes) if
    /// missing. Handles stay valid across restarts only if this file is kept.
    pub fn load_or_create(path: &Path) -> io::Result<HandleKey> {
        match fs::File::open(path) {
            Ok(mut f) => Self::read_key(&mut f, path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut k = [0u8; Self::KEY_LEN];
                rand::Rng::fill(&mut rand::rngs::OsRng, &mut k[..]);
                // Never replaces a key: if another process raced us, use its
                // key instead. Durable, and never seen half-written.
                match crate::durable::create_new(path, &k, 0o600) {
                    Ok(()) => Ok(Self::from_bytes(&k)),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        Self::read_key(&mut fs::File::open(path)?, path)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn read_key(f: &mut fs::File, path: &Path) -> io::Result<HandleKey> {
        let mut k = Vec::with_capacity(Self::KEY_LEN);
        f.take(Self::KEY_LEN as u64 + 1).read_to_end(&mut k)?;
        let k: [u8; Self::KEY_LEN] = k.try_into().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "handle key {} must be exactly {} bytes",
                    path.display(),
                    Self::KEY_LEN
                ),
            )
        })?;
        Ok(Self::from_bytes(&k))
    }

    fn tag(&self, body: &[u8]) -> [u8; 32] {
        let mut m = self.mac.clone();
        m.update(body);
        m.finalize().into_bytes().into()
    }

    /// Encodes and signs a handle for `fid` in export `export_id`.
    pub fn seal(&self, export_id: u32, fid: &Fid) -> Handle {
        let mut buf = [0u8; MAX_LEN];
        buf[0] = VERSION;
        buf[1..5].copy_from_slice(&export_id.to_be_bytes());
        let body_len = HEADER_LEN + fid.len();
        buf[HEADER_LEN..body_len].copy_from_slice(fid.as_bytes());
        let tag = self.tag(&buf[..body_len]);
        buf[body_len..body_len + TAG_LEN].copy_from_slice(&tag[..TAG_LEN]);
        Handle {
            len: (body_len + TAG_LEN) as u8,
            buf,
        }
    }

    /// Verifies and decodes a handle from the wire. Anything not sealed by
    /// this key → `BadHandle`. Whether the object still exists is the
    /// backend's business (`Stale`).
    pub fn open(&self, bytes: &[u8]) -> Result<(u32, Fid), FsError> {
        if bytes.len() < MIN_LEN || bytes.len() > HEADER_LEN + Fid::MAX_LEN + TAG_LEN {
            return Err(FsError::BadHandle);
        }
        if bytes[0] != VERSION {
            return Err(FsError::BadHandle);
        }
        let body_len = bytes.len() - TAG_LEN;
        let tag = self.tag(&bytes[..body_len]);
        // Constant time, so the tag can't be guessed byte by byte from timing.
        if !bool::from(tag[..TAG_LEN].ct_eq(&bytes[body_len..])) {
            return Err(FsError::BadHandle);
        }
        let export_id = u32::from_be_bytes(bytes[1..5].try_into().unwrap());
        let fid = Fid::new(&bytes[HEADER_LEN..body_len]).ok_or(FsError::BadHandle)?;
        Ok((export_id, fid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> HandleKey {
        HandleKey::from_bytes(&[7u8; 32])
    }

    #[test]
    fn roundtrip() {
        let k = key();
        for n in [0usize, 1, 12, 40] {
            let fid = Fid::new(&vec![0xab; n]).unwrap();
            let h = k.seal(42, &fid);
            assert!(h.len() <= 64);
            assert_eq!(k.open(h.as_bytes()).unwrap(), (42, fid));
        }
    }

    #[test]
    fn export_id_is_kept() {
        let k = key();
        let fid = Fid::new(b"abcdefgh").unwrap();
        let h = k.seal(0xdead_beef, &fid);
        assert_eq!(k.open(h.as_bytes()).unwrap().0, 0xdead_beef);
        // Changing the export id breaks the tag.
        let mut b = h.as_bytes().to_vec();
        b[4] ^= 1;
        assert_eq!(k.open(&b), Err(FsError::BadHandle));
    }

    #[test]
    fn any_flipped_bit_is_rejected() {
        let k = key();
        let h = k.seal(1, &Fid::new(b"0123456789").unwrap());
        for i in 0..h.len() {
            for bit in 0..8 {
                let mut b = h.as_bytes().to_vec();
                b[i] ^= 1 << bit;
                assert_eq!(k.open(&b), Err(FsError::BadHandle), "byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn truncated_or_extended_is_rejected() {
        let k = key();
        let h = k.seal(1, &Fid::new(b"0123456789").unwrap());
        for n in 0..h.len() {
            assert_eq!(k.open(&h.as_bytes()[..n]), Err(FsError::BadHandle));
        }
        let mut b = h.as_bytes().to_vec();
        b.push(0);
        assert_eq!(k.open(&b), Err(FsError::BadHandle));
    }

    #[test]
    fn other_key_is_rejected() {
        let h = key().seal(1, &Fid::new(b"x").unwrap());
        assert_eq!(
            HandleKey::from_bytes(&[8u8; 32]).open(h.as_bytes()),
            Err(FsError::BadHandle)
        );
    }

    #[test]
    fn load_or_create_persists() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("handle.key");
        let k1 = HandleKey::load_or_create(&p).unwrap();
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let k2 = HandleKey::load_or_create(&p).unwrap();
        let h = k1.seal(3, &Fid::new(b"fid").unwrap());
        assert!(k2.open(h.as_bytes()).is_ok());
        fs::write(&p, b"short").unwrap();
        assert!(HandleKey::load_or_create(&p).is_err());
    }

    proptest! {
        #[test]
        fn random_bytes_never_open(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            prop_assert_eq!(key().open(&bytes), Err(FsError::BadHandle));
        }

        #[test]
        fn sealed_roundtrips(id in any::<u32>(), fid in proptest::collection::vec(any::<u8>(), 0..=40)) {
            let k = key();
            let fid = Fid::new(&fid).unwrap();
            let h = k.seal(id, &fid);
            prop_assert!(h.len() <= MAX_LEN);
            prop_assert_eq!(k.open(h.as_bytes()), Ok((id, fid)));
        }

        #[test]
        fn mutated_never_opens(id in any::<u32>(), fid in proptest::collection::vec(any::<u8>(), 0..=40),
                               pos in any::<prop::sample::Index>(), x in 1u8..=255) {
            let k = key();
            let h = k.seal(id, &Fid::new(&fid).unwrap());
            let mut b = h.as_bytes().to_vec();
            let i = pos.index(b.len());
            b[i] ^= x;
            prop_assert_eq!(k.open(&b), Err(FsError::BadHandle));
        }
    }
}
