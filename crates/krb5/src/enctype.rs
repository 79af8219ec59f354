//! The four AES enctypes: key derivation (RFC 3961 §5.1 DK for the SHA-1
//! ones, RFC 8009 KDF-HMAC-SHA2 for the others), encryption with a
//! confounder and an integrity tag, and keyed checksums.

use crate::{cts, nfold::nfold};
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes128, Aes256};
use hmac::Hmac;
use sha1::Sha1;
use sha2::{Sha256, Sha384};
use std::fmt;

/// An encryption type (RFC 3961 numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Enctype {
    /// aes128-cts-hmac-sha1-96 (17, RFC 3962)
    Aes128CtsHmacSha1,
    /// aes256-cts-hmac-sha1-96 (18, RFC 3962)
    Aes256CtsHmacSha1,
    /// aes128-cts-hmac-sha256-128 (19, RFC 8009)
    Aes128CtsHmacSha256,
    /// aes256-cts-hmac-sha384-192 (20, RFC 8009)
    Aes256CtsHmacSha384,
}

impl Enctype {
    pub fn from_number(n: u32) -> Option<Enctype> {
        Some(match n {
            17 => Enctype::Aes128CtsHmacSha1,
            18 => Enctype::Aes256CtsHmacSha1,
            19 => Enctype::Aes128CtsHmacSha256,
            20 => Enctype::Aes256CtsHmacSha384,
            _ => return None,
        })
    }

    pub fn number(self) -> u32 {
        match self {
            Enctype::Aes128CtsHmacSha1 => 17,
            Enctype::Aes256CtsHmacSha1 => 18,
            Enctype::Aes128CtsHmacSha256 => 19,
            Enctype::Aes256CtsHmacSha384 => 20,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Enctype::Aes128CtsHmacSha1 => "aes128-cts-hmac-sha1-96",
            Enctype::Aes256CtsHmacSha1 => "aes256-cts-hmac-sha1-96",
            Enctype::Aes128CtsHmacSha256 => "aes128-cts-hmac-sha256-128",
            Enctype::Aes256CtsHmacSha384 => "aes256-cts-hmac-sha384-192",
        }
    }

    /// Key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Enctype::Aes128CtsHmacSha1 | Enctype::Aes128CtsHmacSha256 => 16,
            Enctype::Aes256CtsHmacSha1 | Enctype::Aes256CtsHmacSha384 => 32,
        }
    }

    /// Length of the (truncated) HMAC, for both checksums and encryption.
    pub fn mac_len(self) -> usize {
        match self {
            Enctype::Aes128CtsHmacSha1 | Enctype::Aes256CtsHmacSha1 => 12,
            Enctype::Aes128CtsHmacSha256 => 16,
            Enctype::Aes256CtsHmacSha384 => 24,
        }
    }

    /// Length of Kc and Ki (RFC 8009 shortens them for SHA-384).
    fn mac_key_len(self) -> usize {
        match self {
            Enctype::Aes256CtsHmacSha384 => 24,
            _ => self.key_len(),
        }
    }

    fn sha2(self) -> bool {
        matches!(
            self,
            Enctype::Aes128CtsHmacSha256 | Enctype::Aes256CtsHmacSha384
        )
    }
}

/// A base key (a session key or subkey). Never printed.
#[derive(Clone)]
pub struct Key {
    enctype: Enctype,
    bytes: [u8; 32],
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("enctype", &self.enctype)
            .finish_non_exhaustive()
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // Best effort: the derived cipher and HMAC states are not wiped.
        self.bytes = [0; 32];
        std::hint::black_box(&self.bytes);
    }
}

impl Key {
    /// `None` if the length does not fit the enctype.
    pub fn new(enctype: Enctype, bytes: &[u8]) -> Option<Key> {
        if bytes.len() != enctype.key_len() {
            return None;
        }
        let mut k = Key {
            enctype,
            bytes: [0; 32],
        };
        k.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(k)
    }

    pub fn enctype(&self) -> Enctype {
        self.enctype
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.enctype.key_len()]
    }

    /// Derives the `len`-byte key for `usage` and `kind` (0x99 Kc, 0xAA
    /// Ke, 0x55 Ki).
    fn derive(&self, usage: u32, kind: u8, len: usize) -> Vec<u8> {
        let mut label = [0u8; 5];
        label[..4].copy_from_slice(&usage.to_be_bytes());
        label[4] = kind;
        if self.enctype.sha2() {
            // RFC 8009 §3: KDF-HMAC-SHA2(key, label, k) = first k bits of
            // HMAC(key, 00000001 | label | 00 | k as 32 bits).
            let bits = (8 * len as u32).to_be_bytes();
            let parts: [&[u8]; 4] = [&[0, 0, 0, 1], &label, &[0], &bits];
            let (full, n) = match self.enctype {
                Enctype::Aes256CtsHmacSha384 => hmac_parts::<Hmac<Sha384>>(self.bytes(), &parts),
                _ => hmac_parts::<Hmac<Sha256>>(self.bytes(), &parts),
            };
            assert!(len <= n);
            full[..len].to_vec()
        } else {
            // RFC 3961 §5.1: DR = E(key, n-fold(label)) chained until long
            // enough; random-to-key is the identity for AES.
            let aes = Aes::new(self.bytes());
            let mut out = Vec::with_capacity(32);
            let mut blk: [u8; 16] = nfold(&label, 16).try_into().unwrap();
            while out.len() < len {
                aes.encrypt_block(&mut blk);
                out.extend_from_slice(&blk);
            }
            out.truncate(len);
            out
        }
    }
}

fn hmac_parts<M: hmac::Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> ([u8; 64], usize) {
    let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    let r = m.finalize().into_bytes();
    let mut out = [0u8; 64];
    out[..r.len()].copy_from_slice(&r);
    (out, r.len())
}

#[derive(Clone)]
pub(crate) enum Aes {
    A128(Box<Aes128>),
    A256(Box<Aes256>),
}

impl Aes {
    fn new(key: &[u8]) -> Aes {
        match key.len() {
            16 => Aes::A128(Box::new(Aes128::new_from_slice(key).unwrap())),
            32 => Aes::A256(Box::new(Aes256::new_from_slice(key).unwrap())),
            n => unreachable!("AES key of {n} bytes"),
        }
    }

    fn encrypt_block(&self, b: &mut [u8; 16]) {
        match self {
            Aes::A128(c) => c.encrypt_block(b.into()),
            Aes::A256(c) => c.encrypt_block(b.into()),
        }
    }

    fn cts_encrypt(&self, buf: &mut [u8]) {
        match self {
            Aes::A128(c) => cts::encrypt(&**c, buf),
            Aes::A256(c) => cts::encrypt(&**c, buf),
        }
    }

    fn cts_decrypt(&self, buf: &mut [u8]) {
        match self {
            Aes::A128(c) => cts::decrypt(&**c, buf),
            Aes::A256(c) => cts::decrypt(&**c, buf),
        }
    }
}

/// A keyed HMAC with the key schedule done once; each message clones it.
#[derive(Clone)]
pub(crate) enum Mac {
    Sha1(Hmac<Sha1>),
    Sha256(Hmac<Sha256>),
    Sha384(Hmac<Sha384>),
}

impl Mac {
    fn new(enctype: Enctype, key: &[u8]) -> Mac {
        match enctype {
            Enctype::Aes128CtsHmacSha1 | Enctype::Aes256CtsHmacSha1 => {
                Mac::Sha1(KeyInit::new_from_slice(key).unwrap())
            }
            Enctype::Aes128CtsHmacSha256 => Mac::Sha256(KeyInit::new_from_slice(key).unwrap()),
            Enctype::Aes256CtsHmacSha384 => Mac::Sha384(KeyInit::new_from_slice(key).unwrap()),
        }
    }

    /// The full HMAC of the concatenated parts (callers truncate).
    pub(crate) fn compute(&self, parts: &[&[u8]]) -> [u8; 48] {
        fn run<M: hmac::Mac + Clone>(m: &M, parts: &[&[u8]]) -> [u8; 48] {
            let mut m = m.clone();
            for p in parts {
                m.update(p);
            }
            let r = m.finalize().into_bytes();
            let mut out = [0u8; 48];
            out[..r.len()].copy_from_slice(&r);
            out
        }
        match self {
            Mac::Sha1(m) => run(m, parts),
            Mac::Sha256(m) => run(m, parts),
            Mac::Sha384(m) => run(m, parts),
        }
    }
}

/// The keys derived from one base key for one key usage.
#[derive(Clone)]
pub(crate) struct UsageKeys {
    pub(crate) enctype: Enctype,
    ke: Aes,
    ki: Mac,
    kc: Mac,
}

/// Bytes a confounder takes (one AES block).
pub(crate) const CONFOUNDER: usize = 16;

impl UsageKeys {
    pub(crate) fn new(key: &Key, usage: u32) -> UsageKeys {
        let e = key.enctype;
        let mut kc = key.derive(usage, 0x99, e.mac_key_len());
        let mut ke = key.derive(usage, 0xAA, e.key_len());
        let mut ki = key.derive(usage, 0x55, e.mac_key_len());
        let k = UsageKeys {
            enctype: e,
            ke: Aes::new(&ke),
            ki: Mac::new(e, &ki),
            kc: Mac::new(e, &kc),
        };
        for v in [&mut kc, &mut ke, &mut ki] {
            v.fill(0);
        }
        k
    }

    pub(crate) fn mac_len(&self) -> usize {
        self.enctype.mac_len()
    }

    /// The keyed checksum (Kc) of the concatenated parts, truncated.
    pub(crate) fn checksum(&self, parts: &[&[u8]]) -> [u8; 48] {
        self.kc.compute(parts)
    }

    /// Encrypts in place: on entry `buf` is confounder | plaintext (the
    /// caller fills the confounder), and `tag` gets the integrity tag
    /// (`mac_len` bytes).
    pub(crate) fn encrypt(&self, buf: &mut [u8], tag: &mut [u8]) {
        debug_assert!(buf.len() >= CONFOUNDER);
        let n = self.mac_len();
        if self.enctype.sha2() {
            // RFC 8009 §5: encrypt, then HMAC over IV (zero) | ciphertext.
            self.ke.cts_encrypt(buf);
            let h = self.ki.compute(&[&[0u8; 16], buf]);
            tag.copy_from_slice(&h[..n]);
        } else {
            // RFC 3961 §5.3: HMAC over the plaintext, then encrypt.
            let h = self.ki.compute(&[buf]);
            tag.copy_from_slice(&h[..n]);
            self.ke.cts_encrypt(buf);
        }
    }

    /// Decrypts in place and checks the tag (in constant time); `false`
    /// leaves `buf` in an unspecified state.
    pub(crate) fn decrypt(&self, buf: &mut [u8], tag: &[u8]) -> bool {
        let n = self.mac_len();
        if buf.len() < CONFOUNDER || tag.len() != n {
            return false;
        }
        if self.enctype.sha2() {
            // Encrypt-then-MAC: nothing is decrypted unless the tag holds.
            let h = self.ki.compute(&[&[0u8; 16], buf]);
            if !ct_eq(&h[..n], tag) {
                return false;
            }
            self.ke.cts_decrypt(buf);
            true
        } else {
            self.ke.cts_decrypt(buf);
            let h = self.ki.compute(&[buf]);
            ct_eq(&h[..n], tag)
        }
    }
}

pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    fn key(e: Enctype, b: &[u8]) -> Key {
        Key::new(e, b).unwrap()
    }

    /// RFC 3962 appendix B: the last step of string-to-key is
    /// DK(PBKDF2 output, "kerberos"), which pins the DK of RFC 3961.
    #[test]
    fn rfc3962_dk() {
        let dk = |e, tkey: &[u8]| {
            let k = key(e, tkey);
            // DK with an arbitrary constant: n-fold the constant, chain AES.
            let aes = Aes::new(k.bytes());
            let mut blk: [u8; 16] = nfold(b"kerberos", 16).try_into().unwrap();
            let mut out = Vec::new();
            while out.len() < e.key_len() {
                aes.encrypt_block(&mut blk);
                out.extend_from_slice(&blk);
            }
            out
        };
        assert_eq!(
            dk(
                Enctype::Aes128CtsHmacSha1,
                &hex!("cdedb5281bb2f801565a1122b2563515")
            ),
            hex!("42263c6e89f4fc28b8df68ee09799f15")
        );
        assert_eq!(
            dk(
                Enctype::Aes256CtsHmacSha1,
                &hex!("cdedb5281bb2f801565a1122b25635150ad1f7a04bb9f3a333ecc0e2e1f70837")
            ),
            hex!("fe697b52bc0d3ce14432ba036a92e65bbb52280990a2fa27883998d72af30161")
        );
    }

    /// RFC 8009 appendix A: key derivation for usage 2.
    #[test]
    fn rfc8009_key_derivation() {
        let k = key(
            Enctype::Aes128CtsHmacSha256,
            &hex!("3705D96080C17728A0E800EAB6E0D23C"),
        );
        assert_eq!(
            k.derive(2, 0x99, 16),
            hex!("B31A018A48F54776F403E9A396325DC3")
        );
        assert_eq!(
            k.derive(2, 0xAA, 16),
            hex!("9B197DD1E8C5609D6E67C3E37C62C72E")
        );
        assert_eq!(
            k.derive(2, 0x55, 16),
            hex!("9FDA0E56AB2D85E1569A688696C26A6C")
        );
        let k = key(
            Enctype::Aes256CtsHmacSha384,
            &hex!("6D404D37FAF79F9DF0D33568D320669800EB4836472EA8A026D16B7182460C52"),
        );
        assert_eq!(
            k.derive(2, 0x99, 24),
            hex!("EF5718BE86CC84963D8BBB5031E9F5C4BA41F28FAF69E73D")
        );
        assert_eq!(
            k.derive(2, 0xAA, 32),
            hex!("56AB22BEE63D82D7BC5227F6773F8EA7A5EB1C825160C38312980C442E5C7E49")
        );
        assert_eq!(
            k.derive(2, 0x55, 24),
            hex!("69B16514E3CD8E56B82010D5C73012B622C4D00FFC23ED1F")
        );
    }

    /// RFC 8009 appendix A: encryption with a given confounder (usage 2),
    /// and checksums.
    #[test]
    fn rfc8009_encryption_and_checksum() {
        let k128 = key(
            Enctype::Aes128CtsHmacSha256,
            &hex!("3705D96080C17728A0E800EAB6E0D23C"),
        );
        let k256 = key(
            Enctype::Aes256CtsHmacSha384,
            &hex!("6D404D37FAF79F9DF0D33568D320669800EB4836472EA8A026D16B7182460C52"),
        );
        let p = hex!("000102030405060708090A0B0C0D0E0F1011121314");
        #[allow(clippy::type_complexity)]
        let cases: &[(&Key, &[u8], [u8; 16], &[u8])] = &[
            (
                &k128,
                &[],
                hex!("7E5895EAF2672435BAD817F545A37148"),
                &hex!("EF85FB890BB8472F4DAB20394DCA781DAD877EDA39D50C870C0D5A0A8E48C718"),
            ),
            (
                &k128,
                &p[..6],
                hex!("7BCA285E2FD4130FB55B1A5C83BC5B24"),
                &hex!("84D7F30754ED987BAB0BF3506BEB09CFB55402CEF7E6877CE99E247E52D16ED4421DFDF8976C"),
            ),
            (
                &k128,
                &p[..16],
                hex!("56AB21713FF62C0A1457200F6FA9948F"),
                &hex!("3517D640F50DDC8AD3628722B3569D2AE07493FA8263254080EA65C1008E8FC295FB4852E7D83E1E7C48C37EEBE6B0D3"),
            ),
            (
                &k128,
                &p[..21],
                hex!("A7A4E29A4728CE10664FB64E49AD3FAC"),
                &hex!("720F73B18D9859CD6CCB4346115CD336C70F58EDC0C4437C5573544C31C813BCE1E6D072C186B39A413C2F92CA9B8334A287FFCBFC"),
            ),
            (
                &k256,
                &[],
                hex!("F764E9FA15C276478B2C7D0C4E5F58E4"),
                &hex!("41F53FA5BFE7026D91FAF9BE959195A058707273A96A40F0A01960621AC612748B9BBFBE7EB4CE3C"),
            ),
            (
                &k256,
                &p[..6],
                hex!("B80D3251C1F6471494256FFE712D0B9A"),
                &hex!("4ED7B37C2BCAC8F74F23C1CF07E62BC7B75FB3F637B9F559C7F664F69EAB7B6092237526EA0D1F61CB20D69D10F2"),
            ),
            (
                &k256,
                &p[..16],
                hex!("53BF8A0D105265D4E276428624CE5E63"),
                &hex!("BC47FFEC7998EB91E8115CF8D19DAC4BBBE2E163E87DD37F49BECA92027764F68CF51F14D798C2273F35DF574D1F932E40C4FF255B36A266"),
            ),
            (
                &k256,
                &p[..21],
                hex!("763E65367E864F02F55153C7E3B58AF1"),
                &hex!("40013E2DF58E8751957D2878BCD2D6FE101CCFD556CB1EAE79DB3C3EE86429F2B2A602AC86FEF6ECB647D6295FAE077A1FEB517508D2C16B4192E01F62"),
            ),
        ];
        for (k, plain, conf, want) in cases {
            let u = UsageKeys::new(k, 2);
            let n = u.mac_len();
            let mut buf = conf.to_vec();
            buf.extend_from_slice(plain);
            let mut tag = vec![0u8; n];
            u.encrypt(&mut buf, &mut tag);
            buf.extend_from_slice(&tag);
            assert_eq!(&buf[..], *want, "{:?} {}", k.enctype(), plain.len());
            let (c, t) = buf.split_at_mut(want.len() - n);
            assert!(u.decrypt(c, t));
            assert_eq!(&c[..16], conf);
            assert_eq!(&c[16..], *plain);
        }
        let u = UsageKeys::new(&k128, 2);
        assert_eq!(
            &u.checksum(&[&p])[..16],
            hex!("D78367186643D67B411CBA9139FC1DEE")
        );
        let u = UsageKeys::new(&k256, 2);
        assert_eq!(
            &u.checksum(&[&p[..10], &p[10..]])[..24],
            hex!("45EE791567EEFCA37F4AC1E0222DE80D43C3BFA06699672A")
        );
    }
}
