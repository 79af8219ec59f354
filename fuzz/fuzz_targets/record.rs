//! Record marking: a byte stream cut into arbitrary pieces gives the same
//! records as a one-pass reference parser, never a record over the limit,
//! and never reserves more than the limit allows.
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rpc::record::{Assembler, RecordError};

const MAX: usize = 4096;

/// The reference: whole records, or where it stops (`Err` = too large).
fn reference(mut s: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let mut out = Vec::new();
    let mut partial = Vec::new();
    while s.len() >= 4 {
        let h = u32::from_be_bytes([s[0], s[1], s[2], s[3]]);
        let len = (h & 0x7fff_ffff) as usize;
        if partial.len() + len > MAX {
            return (out, true);
        }
        if s.len() < 4 + len {
            break;
        }
        partial.extend_from_slice(&s[4..4 + len]);
        s = &s[4 + len..];
        if h & 0x8000_0000 != 0 {
            out.push(std::mem::take(&mut partial));
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    // The first byte chooses how the stream is cut into reads.
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let step = 1 + cut as usize % 61;
    let (want, too_large) = reference(stream);
    let mut a = Assembler::new(MAX);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut failed = false;
    'feed: for piece in stream.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match a.next(&mut buf) {
                Ok(Some(r)) => {
                    assert!(r.len() <= MAX);
                    got.push(r.to_vec());
                }
                Ok(None) => break,
                Err(RecordError::TooLarge(..)) => {
                    failed = true;
                    break 'feed;
                }
            }
            // Room is reserved for at most one fragment beyond what arrived.
            assert!(buf.capacity() <= 4 * (MAX + 4 + stream.len()));
        }
    }
    assert_eq!(failed, too_large);
    assert_eq!(got, want);
});
