//! The byte-level reader and writer every binary format of the engine is built on
//! (rows, snapshots, captures).
//!
//! It owns framing only: little-endian integers, length-prefixed byte strings, and
//! bounds. It never trusts a length it reads: every read is checked against what
//! is left, so a truncated or hostile input is an error, never a panic or an
//! allocation the input chose.

use thiserror::Error;

/// Why a byte string could not be decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("unexpected end of data at byte {offset}: needed {needed} more bytes")]
    Truncated { offset: usize, needed: usize },
    #[error("invalid {what} at byte {offset}: {detail}")]
    Invalid { what: &'static str, offset: usize, detail: String },
    #[error("{count} trailing bytes after the end at byte {offset}")]
    Trailing { offset: usize, count: usize },
}

/// Appends fixed-width little-endian values and length-prefixed strings.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer into `buf`, cleared first (its capacity is kept: hot paths
    /// reuse one buffer instead of allocating per record).
    pub fn reusing(mut buf: Vec<u8>) -> Self {
        buf.clear();
        Self { buf }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn i128(&mut self, v: i128) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_bits().to_le_bytes());
        self
    }

    /// A byte string, prefixed with its length as u32.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Lengths past u32 cannot occur: rows and slots are bounded far below.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(v);
        self
    }

    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    /// An unsigned LEB128 varint: 7 bits a byte, low first.
    pub fn uvarint(&mut self, mut v: u128) -> &mut Self {
        if let Ok(small) = u64::try_from(v) {
            return self.uvarint64(small);
        }
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }

    /// [`uvarint`](Self::uvarint) of a 64-bit value, in 64-bit arithmetic
    /// (the same bytes).
    pub fn uvarint64(&mut self, mut u: u64) -> &mut Self {
        while u >= 0x80 {
            self.buf.push((u as u8) | 0x80);
            u >>= 7;
        }
        self.buf.push(u as u8);
        self
    }

    /// A signed varint, zigzag-mapped so small magnitudes take few bytes.
    pub fn ivarint(&mut self, v: i128) -> &mut Self {
        // Within i64 the zigzag value is the 64-bit one: the same bytes,
        // without 128-bit arithmetic (a decimal's unscaled value, say).
        if let Ok(v) = i64::try_from(v) {
            return self.ivarint64(v);
        }
        self.uvarint(((v << 1) ^ (v >> 127)) as u128)
    }

    /// A signed varint of a 64-bit value (the common case, in 64-bit arithmetic).
    pub fn ivarint64(&mut self, v: i64) -> &mut Self {
        self.uvarint64(((v << 1) ^ (v >> 63)) as u64)
    }
}

/// Reads what [`Writer`] wrote, checking every length against the bytes left.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    pub fn offset(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn is_at_end(&self) -> bool {
        self.pos == self.data.len()
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.is_at_end() {
            Ok(())
        } else {
            Err(DecodeError::Trailing { offset: self.pos, count: self.remaining() })
        }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated { offset: self.pos, needed: n - self.remaining() });
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_le_bytes)
    }

    pub fn i128(&mut self) -> Result<i128, DecodeError> {
        self.array().map(i128::from_le_bytes)
    }

    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        self.array().map(|b| f64::from_bits(u64::from_le_bytes(b)))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    /// An unsigned varint of at most `max_bits` significant bits (a longer or
    /// wider one is invalid, never wrapped).
    pub fn uvarint(&mut self, max_bits: u32) -> Result<u128, DecodeError> {
        // One byte, the common case (tags, small deltas, dictionary indices):
        // what the loop below returns for it, without the loop.
        if let Some(&byte) = self.data.get(self.pos) {
            if byte < 0x80 && max_bits >= 7 {
                self.pos += 1;
                return Ok(u128::from(byte));
            }
        }
        let at = self.pos;
        let mut value: u128 = 0;
        let mut shift = 0u32;
        loop {
            let byte = self.u8()?;
            let bits = u128::from(byte & 0x7f);
            if shift >= max_bits || (shift > 0 && bits >> (max_bits - shift).min(127) != 0) {
                return Err(self.invalid_at("varint", at, format!("wider than {max_bits} bits")));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    /// A zigzag varint of a value that fits `bits` signed bits.
    pub fn ivarint(&mut self, bits: u32) -> Result<i128, DecodeError> {
        let u = self.uvarint(bits)?;
        Ok(((u >> 1) as i128) ^ -((u & 1) as i128))
    }

    /// A varint length of at most the bytes left (a hostile length cannot make
    /// a reader allocate).
    pub fn varint_len(&mut self) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.uvarint(64)?;
        if n > self.remaining() as u128 {
            return Err(self.invalid_at(
                "length",
                at,
                format!("{n} bytes cannot fit in the {} left", self.remaining()),
            ));
        }
        Ok(n as usize)
    }

    pub fn str(&mut self) -> Result<&'a str, DecodeError> {
        let at = self.pos;
        let bytes = self.bytes()?;
        std::str::from_utf8(bytes).map_err(|e| self.invalid_at("UTF-8 string", at, e.to_string()))
    }

    /// A count of items that will each take at least `min_item_bytes`: refused
    /// when the bytes left could not hold that many, so a hostile count cannot
    /// make a reader allocate.
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item_bytes.max(1)) > self.remaining() {
            return Err(self.invalid_at(
                "item count",
                at,
                format!("{n} items cannot fit in the {} bytes left", self.remaining()),
            ));
        }
        Ok(n)
    }

    pub fn invalid(&self, what: &'static str, detail: impl Into<String>) -> DecodeError {
        self.invalid_at(what, self.pos, detail.into())
    }

    fn invalid_at(&self, what: &'static str, offset: usize, detail: String) -> DecodeError {
        DecodeError::Invalid { what, offset, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The varint bytes by the 128-bit definition alone (no fast path).
    fn varint_by_definition(mut v: u128) -> Vec<u8> {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    #[test]
    fn the_64_bit_fast_paths_write_the_bytes_of_the_128_bit_definition() {
        let edges = [0i128, 1, -1, 63, -64, 64, -65, i64::MAX.into(), i64::MIN.into()];
        let around = [i128::from(i64::MAX) + 1, i128::from(i64::MIN) - 1, i128::MAX, i128::MIN];
        for v in edges.into_iter().chain(around).chain((0..64).map(|b| 1i128 << b).flat_map(|p| [p, -p, p - 1])) {
            let mut w = Writer::new();
            w.ivarint(v);
            assert_eq!(w.into_bytes(), varint_by_definition(((v << 1) ^ (v >> 127)) as u128), "ivarint {v}");
            let u = v.unsigned_abs();
            let mut w = Writer::new();
            w.uvarint(u);
            assert_eq!(w.into_bytes(), varint_by_definition(u), "uvarint {u}");
        }
    }

    #[test]
    fn varints_round_trip_at_their_extremes_and_refuse_overlong_ones() {
        let mut w = Writer::new();
        let values = [0i128, 1, -1, 63, -64, 64, i64::MAX as i128, i64::MIN as i128, i128::MAX, i128::MIN];
        for v in values {
            w.ivarint(v);
        }
        w.uvarint(u64::MAX as u128);
        let bytes = w.into_bytes();
        let mut r = Reader::new(&bytes);
        for v in values {
            assert_eq!(r.ivarint(128).unwrap(), v);
        }
        assert_eq!(r.uvarint(64).unwrap(), u64::MAX as u128);
        assert!(r.finish().is_ok());
        // One bit past 64 bits, and eleven continuation bytes, are refused.
        let mut w = Writer::new();
        w.uvarint(1u128 << 64);
        assert!(Reader::new(&w.into_bytes()).uvarint(64).is_err());
        assert!(Reader::new(&[0x80; 11]).uvarint(64).is_err());
        assert!(Reader::new(&[0x80]).uvarint(64).is_err(), "a cut varint");
    }

    #[test]
    fn round_trips_every_width() {
        let mut w = Writer::new();
        w.u8(7).u32(9).u64(u64::MAX).i64(-5).i128(-(1 << 100)).f64(-0.0).str("héllo");
        let bytes = w.into_bytes();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 9);
        assert_eq!(r.u64().unwrap(), u64::MAX);
        assert_eq!(r.i64().unwrap(), -5);
        assert_eq!(r.i128().unwrap(), -(1 << 100));
        assert_eq!(r.f64().unwrap().to_bits(), (-0.0f64).to_bits());
        assert_eq!(r.str().unwrap(), "héllo");
        r.finish().unwrap();
    }

    #[test]
    fn a_length_past_the_end_is_truncation_not_a_panic() {
        let mut w = Writer::new();
        w.u32(1_000_000);
        let bytes = w.into_bytes();
        assert!(matches!(Reader::new(&bytes).bytes(), Err(DecodeError::Truncated { .. })));
    }

    #[test]
    fn a_hostile_count_is_refused_before_allocating() {
        let mut w = Writer::new();
        w.u32(u32::MAX).u8(0);
        let bytes = w.into_bytes();
        assert!(matches!(Reader::new(&bytes).count(8), Err(DecodeError::Invalid { .. })));
    }

    #[test]
    fn trailing_bytes_are_reported() {
        let bytes = [1u8, 2, 3];
        let mut r = Reader::new(&bytes);
        r.u8().unwrap();
        assert_eq!(r.finish(), Err(DecodeError::Trailing { offset: 1, count: 2 }));
    }
}
