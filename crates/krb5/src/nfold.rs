//! RFC 3961 §5.1 n-fold: only used to derive keys, once per context, so it
//! is written for clarity (bit by bit), not speed.

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Folds `input` to `out_len` bytes: lcm(len, out_len) bytes made of copies
/// of the input, each rotated 13 bits further right than the previous one,
/// added up as `out_len`-byte big-endian numbers with end-around carry.
pub(crate) fn nfold(input: &[u8], out_len: usize) -> Vec<u8> {
    assert!(!input.is_empty() && out_len > 0);
    let k = input.len();
    let kbits = 8 * k;
    let l = k / gcd(k, out_len) * out_len;
    let mut total = vec![0u8; l];
    for j in 0..l / k {
        let r = (13 * j) % kbits;
        for i in 0..kbits {
            // Rotating right by r: output bit i is input bit i - r.
            let src = (i + kbits - r) % kbits;
            if input[src / 8] & (0x80 >> (src % 8)) != 0 {
                let dst = j * kbits + i;
                total[dst / 8] |= 0x80 >> (dst % 8);
            }
        }
    }
    let mut sum = vec![0u8; out_len];
    for chunk in total.chunks(out_len) {
        let mut carry = 0u32;
        for i in (0..out_len).rev() {
            let s = sum[i] as u32 + chunk[i] as u32 + carry;
            sum[i] = s as u8;
            carry = s >> 8;
        }
        // One's complement: the carry out of the top goes back in at the bottom.
        while carry != 0 {
            for i in (0..out_len).rev() {
                let s = sum[i] as u32 + carry;
                sum[i] = s as u8;
                carry = s >> 8;
                if carry == 0 {
                    break;
                }
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::nfold;

    fn h(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 3961 appendix A.1.
    #[test]
    fn rfc3961_vectors() {
        let cases: &[(&str, usize, &str)] = &[
            ("012345", 64, "be072631276b1955"),
            ("password", 56, "78a07b6caf85fa"),
            ("Rough Consensus, and Running Code", 64, "bb6ed30870b7f0e0"),
            (
                "password",
                168,
                "59e4a8ca7c0385c3c37b3f6d2000247cb6e6bd5b3e",
            ),
            (
                "MASSACHVSETTS INSTITVTE OF TECHNOLOGY",
                192,
                "db3b0d8f0b061e603282b308a50841229ad798fab9540c1b",
            ),
            ("Q", 168, "518a54a215a8452a518a54a215a8452a518a54a215"),
            ("ba", 168, "fb25d531ae8974499f52fd92ea9857c4ba24cf297e"),
            ("kerberos", 64, "6b65726265726f73"),
            ("kerberos", 128, "6b65726265726f737b9b5b2b93132b93"),
            (
                "kerberos",
                168,
                "8372c236344e5f1550cd0747e15d62ca7a5a3bcea4",
            ),
            (
                "kerberos",
                256,
                "6b65726265726f737b9b5b2b93132b935c9bdcdad95c9899c4cae4dee6d6cae4",
            ),
        ];
        for (input, bits, want) in cases {
            assert_eq!(nfold(input.as_bytes(), bits / 8), h(want), "{input} {bits}");
        }
    }
}
