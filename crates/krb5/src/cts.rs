//! AES in CBC mode with ciphertext stealing as Kerberos uses it (RFC 3962
//! §5; RFC 2040's CBC-CTS): the IV is zero (GSS never chains cipher
//! state), the input is at least one block, and the last two blocks are
//! always swapped, even when the input is a whole number of blocks.

use aes::cipher::consts::U16;
use aes::cipher::generic_array::GenericArray;
use aes::cipher::inout::InOutBuf;
use aes::cipher::{
    BlockCipher, BlockDecrypt, BlockDecryptMut, BlockEncrypt, BlockEncryptMut, BlockSizeUser,
    InnerIvInit,
};

pub(crate) trait Cipher:
    BlockCipher + BlockSizeUser<BlockSize = U16> + BlockEncrypt + BlockDecrypt + Clone
{
}
impl<C: BlockCipher + BlockSizeUser<BlockSize = U16> + BlockEncrypt + BlockDecrypt + Clone> Cipher
    for C
{
}

fn block(b: &mut [u8]) -> &mut GenericArray<u8, U16> {
    GenericArray::from_mut_slice(b)
}

/// `buf` (at least 16 bytes) as n blocks, the last holding d bytes
/// (1..=16): Some((where the last starts, d)); None for a single block,
/// which `one` has then en- or decrypted as it stands (no stealing).
fn split_last(
    buf: &mut [u8],
    one: impl FnOnce(&mut GenericArray<u8, U16>),
) -> Option<(usize, usize)> {
    let len = buf.len();
    assert!(len >= 16, "CTS needs at least one block");
    if len == 16 {
        one(block(buf));
        return None;
    }
    let head = (len - 1) / 16 * 16;
    Some((head, len - head))
}

/// Encrypts `buf` (at least 16 bytes) in place.
pub(crate) fn encrypt<C: Cipher>(cipher: &C, buf: &mut [u8]) {
    let Some((head, d)) = split_last(buf, |b| cipher.encrypt_block(b)) else {
        return;
    };
    let (blocks, _) = InOutBuf::from(&mut buf[..head]).into_chunks::<U16>();
    cbc::Encryptor::<C>::inner_iv_init(cipher.clone(), &Default::default())
        .encrypt_blocks_inout_mut(blocks);
    let mut prev = [0u8; 16];
    prev.copy_from_slice(&buf[head - 16..head]);
    // The short last block is zero-padded, chained and encrypted...
    let mut last = prev;
    for (l, p) in last.iter_mut().zip(&buf[head..]) {
        *l ^= p;
    }
    cipher.encrypt_block(block(&mut last));
    // ...and goes before the (truncated) one it was chained from.
    buf[head - 16..head].copy_from_slice(&last);
    buf[head..].copy_from_slice(&prev[..d]);
}

/// Decrypts `buf` (at least 16 bytes) in place. All but the last two
/// blocks go through the CBC decryptor, which runs several AES-NI blocks
/// at once (CBC decryption has no chain dependency).
pub(crate) fn decrypt<C: Cipher>(cipher: &C, buf: &mut [u8]) {
    let Some((head, d)) = split_last(buf, |b| cipher.decrypt_block(b)) else {
        return;
    };
    let pre = head - 16;
    // The ciphertext block the second-to-last plaintext block chains from.
    let mut chain = [0u8; 16];
    if pre > 0 {
        chain.copy_from_slice(&buf[pre - 16..pre]);
    }
    let (blocks, _) = InOutBuf::from(&mut buf[..pre]).into_chunks::<U16>();
    cbc::Decryptor::<C>::inner_iv_init(cipher.clone(), &Default::default())
        .decrypt_blocks_inout_mut(blocks);
    // Transmitted: C[n] (full), then C[n-1] cut to d bytes. D(C[n]) is
    // C[n-1] xor (P[n] | zeros), so its tail restores the cut bytes.
    let mut dn = [0u8; 16];
    dn.copy_from_slice(&buf[pre..head]);
    cipher.decrypt_block(block(&mut dn));
    let mut cn1 = dn;
    cn1[..d].copy_from_slice(&buf[head..]);
    for i in 0..d {
        buf[head + i] = dn[i] ^ cn1[i];
    }
    cipher.decrypt_block(block(&mut cn1));
    for i in 0..16 {
        buf[pre + i] = cn1[i] ^ chain[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::KeyInit;
    use aes::Aes128;
    use hex_literal::hex;

    /// RFC 3962 appendix B: AES-128 key "chicken teriyaki", zero IV.
    #[test]
    fn rfc3962_vectors() {
        let key = Aes128::new(&hex!("636869636b656e207465726979616b69").into());
        let plain = hex!(
            "4920776f756c64206c696b6520746865"
            "2047656e6572616c2047617527732043"
            "6869636b656e2c20706c656173652c20"
            "616e6420776f6e746f6e20736f75702e"
        );
        let cases: &[(usize, &[u8])] = &[
            (17, &hex!("c6353568f2bf8cb4d8a580362da7ff7f97")),
            (
                31,
                &hex!("fc00783e0efdb2c1d445d4c8eff7ed22 97687268d6ecccc0c07b25e25ecfe5"),
            ),
            (
                32,
                &hex!("39312523a78662d5be7fcbcc98ebf5a8 97687268d6ecccc0c07b25e25ecfe584"),
            ),
            (
                47,
                &hex!(
                    "97687268d6ecccc0c07b25e25ecfe584 b3fffd940c16a18c1b5549d2f838029e"
                    "39312523a78662d5be7fcbcc98ebf5"
                ),
            ),
            (
                48,
                &hex!(
                    "97687268d6ecccc0c07b25e25ecfe584 9dad8bbb96c4cdc03bc103e1a194bbd8"
                    "39312523a78662d5be7fcbcc98ebf5a8"
                ),
            ),
            (
                64,
                &hex!(
                    "97687268d6ecccc0c07b25e25ecfe584 39312523a78662d5be7fcbcc98ebf5a8"
                    "4807efe836ee89a526730dbc2f7bc840 9dad8bbb96c4cdc03bc103e1a194bbd8"
                ),
            ),
        ];
        for (len, want) in cases {
            let mut b = plain[..*len].to_vec();
            encrypt(&key, &mut b);
            assert_eq!(&b[..], *want, "encrypt {len}");
            decrypt(&key, &mut b);
            assert_eq!(&b[..], &plain[..*len], "decrypt {len}");
        }
    }

    #[test]
    fn roundtrip_every_length() {
        let key = Aes128::new(&[7u8; 16].into());
        for len in 16..300 {
            let p: Vec<u8> = (0..len).map(|i| (i * 31 + 5) as u8).collect();
            let mut b = p.clone();
            encrypt(&key, &mut b);
            assert_ne!(b, p);
            decrypt(&key, &mut b);
            assert_eq!(b, p, "{len}");
        }
    }
}
