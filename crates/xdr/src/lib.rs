//! XDR (RFC 4506) runtime and code generator.
//!
//! The runtime is two traits, [`Pack`] and [`Unpack`], implemented for the
//! primitive types and, by generated code, for every type of a `.x` spec.
//! Decoding works over [`bytes::Bytes`], so variable-length opaque data (for
//! example the payload of an NFS WRITE) is handed out as a slice of the
//! received record without copying.
//!
//! Decoding never trusts a length field: a count or length is checked against
//! the bytes actually present before anything is allocated, so a record
//! claiming 4 GiB of data is an error, not an allocation.
//!
//! The [`codegen`] module is used from build scripts (see the `proto` crate).

#![forbid(unsafe_code)]

pub mod codegen;

use bytes::{Bytes, BytesMut};

/// Why a decode failed. Every variant means "garbage arguments" to an RPC server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("input ends early: needed {needed} bytes, {remaining} left")]
    Short { needed: usize, remaining: usize },
    #[error("length {len} exceeds the limit {max}")]
    TooLong { len: u32, max: u32 },
    #[error("value {value} is not a member of enum {name}")]
    BadEnum { name: &'static str, value: i32 },
    #[error("discriminant {value} has no arm in union {name}")]
    BadUnion { name: &'static str, value: i32 },
    #[error("boolean encoded as {0}")]
    BadBool(u32),
    #[error("non-zero padding")]
    BadPadding,
}

pub type Result<T> = std::result::Result<T, Error>;

/// Encodes a value onto the end of a buffer. Encoding cannot fail: generated
/// types can only hold values that have an encoding.
pub trait Pack {
    fn pack(&self, out: &mut BytesMut);
}

/// Decodes a value from the front of a [`Decoder`].
pub trait Unpack: Sized {
    fn unpack(d: &mut Decoder) -> Result<Self>;
}

/// Reads XDR from a shared byte buffer.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
    pos: usize,
}

#[inline]
fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

impl Decoder {
    pub fn new(buf: Bytes) -> Self {
        Decoder { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Offset of the next byte to be read.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Everything not yet consumed, without copying.
    pub fn rest(&self) -> Bytes {
        self.buf.slice(self.pos..)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.remaining() < n {
            return Err(Error::Short {
                needed: n,
                remaining: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub fn i32(&mut self) -> Result<i32> {
        Ok(self.u32()? as i32)
    }

    #[inline]
    pub fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    #[inline]
    pub fn bool(&mut self) -> Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::BadBool(v)),
        }
    }

    fn skip_padding(&mut self, len: usize) -> Result<()> {
        let p = pad_len(len);
        if p > 0 && self.take(p)?.iter().any(|&b| b != 0) {
            return Err(Error::BadPadding);
        }
        Ok(())
    }

    /// Fixed-length opaque data of `N` bytes.
    pub fn opaque_fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        self.skip_padding(N)?;
        Ok(out)
    }

    /// A length or count: TooLong past `max` where one is declared.
    fn u32_at_most(&mut self, max: Option<u32>) -> Result<u32> {
        let len = self.u32()?;
        match max {
            Some(max) if len > max => Err(Error::TooLong { len, max }),
            _ => Ok(len),
        }
    }

    /// Variable-length opaque data or string, at most `max` bytes if given.
    /// Returns a slice of the input: no copy, no allocation.
    pub fn opaque(&mut self, max: Option<u32>) -> Result<Bytes> {
        let len = self.u32_at_most(max)? as usize;
        if len > self.remaining() {
            return Err(Error::Short {
                needed: len,
                remaining: self.remaining(),
            });
        }
        let out = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        self.skip_padding(len)?;
        Ok(out)
    }

    /// The element count of a variable-length array, checked against the
    /// declared maximum and against the bytes present (every XDR item takes at
    /// least four bytes), so the caller may allocate for it.
    pub fn count(&mut self, max: Option<u32>) -> Result<usize> {
        let n = self.u32_at_most(max)?;
        if n as usize > self.remaining() / 4 {
            return Err(Error::Short {
                needed: n as usize * 4,
                remaining: self.remaining(),
            });
        }
        Ok(n as usize)
    }

    /// A variable-length array.
    pub fn array<T: Unpack>(&mut self, max: Option<u32>) -> Result<Vec<T>> {
        let n = self.count(max)?;
        // Grow as items really decode: a large count backed by few bytes fails
        // early instead of reserving memory for items that are not there.
        let mut v = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            v.push(T::unpack(self)?);
        }
        Ok(v)
    }

    /// A fixed-length array of `N` items.
    pub fn array_fixed<T: Unpack, const N: usize>(&mut self) -> Result<[T; N]> {
        if N > self.remaining() / 4 {
            return Err(Error::Short {
                needed: N * 4,
                remaining: self.remaining(),
            });
        }
        let mut v = Vec::with_capacity(N);
        for _ in 0..N {
            v.push(T::unpack(self)?);
        }
        Ok(v.try_into().unwrap_or_else(|_| unreachable!()))
    }

    /// An XDR linked list (`struct T { ...; T *next; }`), decoded iteratively
    /// into a vector so that long lists cannot exhaust the stack.
    pub fn list<T: Unpack>(&mut self) -> Result<Vec<T>> {
        let mut v = Vec::new();
        while self.bool()? {
            v.push(T::unpack(self)?);
        }
        Ok(v)
    }
}

/// Appends padding to a multiple of four bytes.
#[inline]
pub fn pack_padding(len: usize, out: &mut BytesMut) {
    // Nothing to add must not grow the buffer: a READ reply's buffer is
    // sized to its data, and growing it moved a whole MiB.
    let pad = pad_len(len);
    if pad > 0 {
        out.extend_from_slice(&[0; 4][..pad]);
    }
}

/// Variable-length opaque data or string.
#[inline]
pub fn pack_opaque(data: &[u8], out: &mut BytesMut) {
    // Room for all of it at once: the padding's 4-byte store must not
    // find the buffer full after a large body (a WRITE's data), which
    // would reallocate and copy the whole of it again.
    out.reserve(8 + data.len());
    put_word(out, (data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    pack_padding(data.len(), out);
}

/// Fixed-length opaque data.
#[inline]
pub fn pack_opaque_fixed(data: &[u8], out: &mut BytesMut) {
    out.reserve(4 + data.len());
    out.extend_from_slice(data);
    pack_padding(data.len(), out);
}

/// A variable-length array.
pub fn pack_array<T: Pack>(items: &[T], out: &mut BytesMut) {
    put_word(out, (items.len() as u32).to_be_bytes());
    for i in items {
        i.pack(out);
    }
}

/// A fixed-length array.
pub fn pack_array_fixed<T: Pack>(items: &[T], out: &mut BytesMut) {
    for i in items {
        i.pack(out);
    }
}

/// An XDR linked list: each item preceded by TRUE, the end marked by FALSE.
pub fn pack_list<T: Pack>(items: &[T], out: &mut BytesMut) {
    for i in items {
        put_word(out, 1u32.to_be_bytes());
        i.pack(out);
    }
    put_word(out, 0u32.to_be_bytes());
}

/// Appends a big-endian word. `BytesMut::extend_from_slice` is inlined
/// (with the length known, the copy is one store), while `BufMut::put_u32`
/// and friends go through an out-of-line `put_slice` and a `memcpy` call per
/// word, which showed up as a fifth of READDIRPLUS encoding.
#[inline]
pub fn put_word<const N: usize>(out: &mut BytesMut, bytes: [u8; N]) {
    out.extend_from_slice(&bytes);
}

macro_rules! prim {
    ($t:ty, $get:ident) => {
        impl Pack for $t {
            #[inline]
            fn pack(&self, out: &mut BytesMut) {
                put_word(out, self.to_be_bytes());
            }
        }
        impl Unpack for $t {
            #[inline]
            fn unpack(d: &mut Decoder) -> Result<Self> {
                d.$get()
            }
        }
    };
}
prim!(u32, u32);
prim!(i32, i32);
prim!(u64, u64);

impl Pack for i64 {
    #[inline]
    fn pack(&self, out: &mut BytesMut) {
        put_word(out, self.to_be_bytes());
    }
}
impl Unpack for i64 {
    #[inline]
    fn unpack(d: &mut Decoder) -> Result<Self> {
        Ok(d.u64()? as i64)
    }
}

impl Pack for bool {
    #[inline]
    fn pack(&self, out: &mut BytesMut) {
        put_word(out, (*self as u32).to_be_bytes());
    }
}
impl Unpack for bool {
    #[inline]
    fn unpack(d: &mut Decoder) -> Result<Self> {
        d.bool()
    }
}

/// Unbounded variable-length opaque data (`opaque x<>` or `string x<>`).
impl Pack for Bytes {
    #[inline]
    fn pack(&self, out: &mut BytesMut) {
        pack_opaque(self, out);
    }
}
impl Unpack for Bytes {
    #[inline]
    fn unpack(d: &mut Decoder) -> Result<Self> {
        d.opaque(None)
    }
}

/// Fixed-length opaque data (`opaque x[N]`).
impl<const N: usize> Pack for [u8; N] {
    #[inline]
    fn pack(&self, out: &mut BytesMut) {
        pack_opaque_fixed(self, out);
    }
}
impl<const N: usize> Unpack for [u8; N] {
    #[inline]
    fn unpack(d: &mut Decoder) -> Result<Self> {
        d.opaque_fixed::<N>()
    }
}

/// Unbounded variable-length array (`T x<>`).
impl<T: Pack> Pack for Vec<T> {
    fn pack(&self, out: &mut BytesMut) {
        pack_array(self, out);
    }
}
impl<T: Unpack> Unpack for Vec<T> {
    fn unpack(d: &mut Decoder) -> Result<Self> {
        d.array(None)
    }
}

/// Optional data (`T *x`), which is also the shape of a union switched on a
/// bool with one void arm.
impl<T: Pack> Pack for Option<T> {
    #[inline]
    fn pack(&self, out: &mut BytesMut) {
        match self {
            Some(v) => {
                put_word(out, 1u32.to_be_bytes());
                v.pack(out);
            }
            None => put_word(out, 0u32.to_be_bytes()),
        }
    }
}
impl<T: Unpack> Unpack for Option<T> {
    #[inline]
    fn unpack(d: &mut Decoder) -> Result<Self> {
        if d.bool()? {
            Ok(Some(T::unpack(d)?))
        } else {
            Ok(None)
        }
    }
}

impl<T: Pack> Pack for Box<T> {
    #[inline]
    fn pack(&self, out: &mut BytesMut) {
        (**self).pack(out);
    }
}
impl<T: Unpack> Unpack for Box<T> {
    #[inline]
    fn unpack(d: &mut Decoder) -> Result<Self> {
        Ok(Box::new(T::unpack(d)?))
    }
}

/// Encodes a value into a fresh buffer (convenient for tests and clients).
pub fn to_bytes<T: Pack>(v: &T) -> Bytes {
    let mut b = BytesMut::new();
    v.pack(&mut b);
    b.freeze()
}

/// Decodes a value that must use the whole input.
pub fn from_bytes<T: Unpack>(b: Bytes) -> Result<T> {
    let mut d = Decoder::new(b);
    let v = T::unpack(&mut d)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn huge_length_is_an_error_not_an_allocation() {
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]));
        assert!(matches!(d.opaque(None), Err(Error::Short { .. })));
        let mut d = Decoder::new(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1]));
        assert!(matches!(d.array::<u32>(None), Err(Error::Short { .. })));
    }

    #[test]
    fn bounds_and_padding() {
        let b = to_bytes(&Bytes::from_static(b"abcde"));
        assert_eq!(b.len(), 12);
        let mut d = Decoder::new(b.clone());
        assert_eq!(d.opaque(Some(4)), Err(Error::TooLong { len: 5, max: 4 }));
        let mut bad = b.to_vec();
        bad[11] = 1;
        let mut d = Decoder::new(bad.into());
        assert_eq!(d.opaque(None), Err(Error::BadPadding));
    }

    #[test]
    fn list_roundtrip() {
        let mut out = BytesMut::new();
        pack_list(&[1u32, 2, 3], &mut out);
        let mut d = Decoder::new(out.freeze());
        assert_eq!(d.list::<u32>().unwrap(), vec![1, 2, 3]);
        assert_eq!(d.remaining(), 0);
    }

    proptest! {
        #[test]
        fn primitives_roundtrip(a: u32, b: i64, c: bool, v in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut out = BytesMut::new();
            a.pack(&mut out); b.pack(&mut out); c.pack(&mut out);
            Bytes::from(v.clone()).pack(&mut out);
            let mut d = Decoder::new(out.freeze());
            prop_assert_eq!(u32::unpack(&mut d).unwrap(), a);
            prop_assert_eq!(i64::unpack(&mut d).unwrap(), b);
            prop_assert_eq!(bool::unpack(&mut d).unwrap(), c);
            prop_assert_eq!(&Bytes::unpack(&mut d).unwrap()[..], &v[..]);
            prop_assert_eq!(d.remaining(), 0);
        }

        #[test]
        fn garbage_never_panics(v in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut d = Decoder::new(v.into());
            let _ = d.array::<Vec<Bytes>>(None);
        }
    }
}
