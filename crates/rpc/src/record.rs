//! Record marking (RFC 5531 section 11): a record is one or more fragments,
//! each preceded by a four-byte header whose top bit marks the last fragment.
//! Pure code: bytes in, whole records out.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Default maximum record: a 1 MiB READ or WRITE plus generous room for headers.
pub const DEFAULT_MAX_RECORD: usize = (1 << 20) + (64 << 10);

/// The least a read asks for: small records come many to a read, and at
/// most this much of a large record is read before its mark is seen (and
/// copied when its own buffer is made).
pub const MIN_READ: usize = 8 << 10;

const LAST: u32 = 0x8000_0000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record of at least {0} bytes exceeds the maximum of {1}")]
    TooLarge(usize, usize),
}

/// Reassembles records from a byte stream.
#[derive(Debug)]
pub struct Assembler {
    max: usize,
    /// Fragments of a record whose last fragment has not arrived yet.
    partial: BytesMut,
}

impl Assembler {
    pub fn new(max: usize) -> Self {
        Assembler {
            max,
            partial: BytesMut::new(),
        }
    }

    /// Takes the next whole record off the front of `buf`, if one is there.
    /// A single-fragment record (the usual case) is split off without copying.
    /// When a fragment is incomplete, `buf` is left as it is, with room
    /// reserved for the rest of the fragment.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, RecordError> {
        loop {
            if buf.len() < 4 {
                return Ok(None);
            }
            let h = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let len = (h & !LAST) as usize;
            let total = self.partial.len() + len;
            if total > self.max {
                return Err(RecordError::TooLarge(total, self.max));
            }
            if buf.len() < 4 + len {
                // The rest of the fragment and the next mark: what
                // `prepare_read` asks for, so its room is already there.
                make_room(buf, 4 + len - buf.len() + 4);
                return Ok(None);
            }
            buf.advance(4);
            let frag = buf.split_to(len);
            if h & LAST != 0 {
                if self.partial.is_empty() {
                    return Ok(Some(frag.freeze()));
                }
                self.partial.extend_from_slice(&frag);
                return Ok(Some(self.partial.split().freeze()));
            }
            self.partial.extend_from_slice(&frag);
        }
    }

    /// Reserves room in `buf` for the next read off the stream and returns
    /// how much to read: the rest of the fragment under way and the next
    /// fragment's mark, or [`MIN_READ`] between fragments. (Not MIN_READ
    /// near a fragment's end: that room would be a new buffer, with the
    /// fragment received so far copied into it.) Reading no
    /// further than the next mark means a large record's room is reserved
    /// (by [`Assembler::next`]) while little of it has arrived, so it lands
    /// in one buffer and is split off without being copied; room reserved
    /// blindly would fill with the start of the record and have it copied
    /// when the buffer grows to the record's size.
    pub fn prepare_read(&self, buf: &mut BytesMut) -> usize {
        let rest = match buf.get(..4) {
            Some(h) => {
                let len = (u32::from_be_bytes([h[0], h[1], h[2], h[3]]) & !LAST) as usize;
                (4 + len.min(self.max)).saturating_sub(buf.len())
            }
            None => 0,
        };
        let want = if rest > 0 { rest + 4 } else { MIN_READ };
        make_room(buf, want);
        want
    }

    /// Whether part of a record has arrived (in `buf` or in earlier
    /// fragments) and the rest is awaited.
    pub fn mid_record(&self, buf: &[u8]) -> bool {
        !buf.is_empty() || !self.partial.is_empty()
    }
}

/// Room in `buf` for `additional` more bytes, copying no more than the
/// bytes it holds: its allocation reused if nothing else holds on to it
/// (records split off it were dropped), else a new one. (`reserve` would
/// grow the old allocation in place, copying the records taken before.)
pub fn make_room(buf: &mut BytesMut, additional: usize) {
    if buf.capacity() - buf.len() >= additional || buf.try_reclaim(additional) {
        return;
    }
    let mut fresh = BytesMut::with_capacity(buf.len() + additional);
    fresh.extend_from_slice(buf);
    *buf = fresh;
}

/// Reserves the record mark at the start of a reply buffer.
pub fn begin(out: &mut BytesMut) {
    out.put_u32(0);
}

/// Fills in the record mark reserved by [`begin`]: the whole buffer is one
/// last fragment.
pub fn finish(out: &mut BytesMut) {
    finish_with(out, 0)
}

/// Like [`finish`], for a record that also carries `extra` bytes sent
/// from elsewhere (file data spliced in, see `zero_copy`).
pub fn finish_with(out: &mut BytesMut, extra: usize) {
    let len = (out.len() - 4 + extra) as u32;
    out[..4].copy_from_slice(&(LAST | len).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frag(data: &[u8], last: bool) -> Vec<u8> {
        let mut v = ((data.len() as u32) | if last { LAST } else { 0 })
            .to_be_bytes()
            .to_vec();
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn multi_fragment_record() {
        let mut a = Assembler::new(100);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&frag(b"abc", false));
        assert_eq!(a.next(&mut buf).unwrap(), None);
        buf.extend_from_slice(&frag(b"de", true));
        buf.extend_from_slice(&frag(b"x", true));
        assert_eq!(&a.next(&mut buf).unwrap().unwrap()[..], b"abcde");
        assert_eq!(&a.next(&mut buf).unwrap().unwrap()[..], b"x");
        assert_eq!(a.next(&mut buf).unwrap(), None);
    }

    #[test]
    fn mid_record_between_fragments_and_inside_one() {
        let mut a = Assembler::new(100);
        let mut buf = BytesMut::new();
        assert!(!a.mid_record(&buf));
        // A whole first fragment taken in: the record is still open.
        buf.extend_from_slice(&frag(b"abc", false));
        assert_eq!(a.next(&mut buf).unwrap(), None);
        assert!(buf.is_empty() && a.mid_record(&buf));
        // Half of the last fragment.
        let last = frag(b"defg", true);
        buf.extend_from_slice(&last[..6]);
        assert_eq!(a.next(&mut buf).unwrap(), None);
        assert!(a.mid_record(&buf));
        buf.extend_from_slice(&last[6..]);
        assert_eq!(&a.next(&mut buf).unwrap().unwrap()[..], b"abcdefg");
        assert!(!a.mid_record(&buf));
    }

    #[test]
    fn huge_fragment_is_refused_before_reading_it() {
        let mut a = Assembler::new(DEFAULT_MAX_RECORD);
        let mut buf = BytesMut::from(&0xffff_ffffu32.to_be_bytes()[..]);
        assert!(matches!(a.next(&mut buf), Err(RecordError::TooLarge(..))));
        // Fragments that add up past the limit are refused too.
        let mut a = Assembler::new(10);
        let mut buf = BytesMut::from(&frag(b"123456", false)[..]);
        buf.extend_from_slice(&frag(b"123456", true));
        assert!(matches!(
            a.next(&mut buf),
            Err(RecordError::TooLarge(12, 10))
        ));
    }

    #[test]
    fn large_records_are_read_into_one_buffer_each_with_little_copied() {
        // Socket reads of many sizes: some leave a record's last few
        // bytes (less than MIN_READ) for a read of their own.
        // (1 << 20) + 4 - MIN_READ - 4000: after the first read, a
        // record's last 4000 bytes.
        let short_end = (1 << 20) + 4 - MIN_READ - 4000;
        for step in [100 << 10, 64 << 10, 1 << 20, short_end, 333_333] {
            let mut a = Assembler::new(DEFAULT_MAX_RECORD);
            let rec = frag(&vec![7u8; 1 << 20], true);
            let stream = rec.repeat(3);
            let mut buf = BytesMut::new();
            let (mut at, mut got, mut copied) = (0, vec![], 0);
            while got.len() < 3 {
                // Bytes a reallocation moved (held records keep the old
                // buffer: it cannot grow in place).
                let (ptr, len) = (buf.as_ptr(), buf.len());
                while let Some(r) = a.next(&mut buf).unwrap() {
                    got.push(r);
                }
                // Taking records moves the start by what they took; anything
                // else is a new buffer.
                if buf.as_ptr() != ptr.wrapping_add(len - buf.len()) {
                    copied += buf.len();
                }
                // As a socket would: at most what was asked for, `step` at a time.
                let ptr = buf.as_ptr();
                let n = a.prepare_read(&mut buf).min(step).min(stream.len() - at);
                if buf.as_ptr() != ptr {
                    copied += buf.len();
                }
                assert!(
                    buf.capacity() - buf.len() >= n,
                    "room for the read reserved"
                );
                buf.extend_from_slice(&stream[at..at + n]);
                at += n;
            }
            assert!(got
                .iter()
                .all(|r| r.len() == 1 << 20 && r.iter().all(|&b| b == 7)));
            // What a record's first read took (MIN_READ at most: a read
            // that ends where a record does is followed by one of
            // MIN_READ, the mark not yet known), never more.
            assert!(
                copied <= 3 * (MIN_READ + 4),
                "reads of {step}: {copied} bytes copied"
            );
        }
    }

    proptest! {
        #[test]
        fn any_split_of_the_stream_gives_the_same_records(
            recs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 1..5),
            cut in 0usize..400,
        ) {
            let mut stream = Vec::new();
            for r in &recs {
                let (a, b) = r.split_at(r.len() / 2);
                stream.extend(frag(a, false));
                stream.extend(frag(b, true));
            }
            let cut = cut.min(stream.len());
            let mut a = Assembler::new(1000);
            let mut buf = BytesMut::from(&stream[..cut]);
            let mut got = Vec::new();
            while let Some(r) = a.next(&mut buf).unwrap() { got.push(r.to_vec()); }
            buf.extend_from_slice(&stream[cut..]);
            while let Some(r) = a.next(&mut buf).unwrap() { got.push(r.to_vec()); }
            prop_assert_eq!(got, recs);
        }
    }
}
