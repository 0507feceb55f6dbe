//! A minimal protobuf wire-format reader over a borrowed byte slice, for the receiver's
//! allocation-free decoding of hot messages (see `logs_wire`).
//!
//! It accepts exactly what prost accepts for the shapes it handles and gives up
//! ([`Unsupported`]) on anything else — malformed input included — so the caller can hand
//! the request to prost, which then either decodes it or produces the error the client sees.

/// The walker cannot (or will not) decode this input; prost must decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unsupported;

/// One field's payload, borrowed from the message bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Field<'a> {
    /// The payload of a length-delimited field; any other wire type is a prost decode error.
    #[inline]
    pub(crate) fn bytes(self) -> Result<&'a [u8], Unsupported> {
        match self {
            Field::Bytes(b) => Ok(b),
            _ => Err(Unsupported),
        }
    }

    /// A `string` field: length-delimited and valid UTF-8, as prost requires.
    #[inline]
    pub(crate) fn string(self) -> Result<&'a str, Unsupported> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Unsupported)
    }

    /// A varint-encoded field (int32/int64/uint32/bool/enum).
    #[inline]
    pub(crate) fn varint(self) -> Result<u64, Unsupported> {
        match self {
            Field::Varint(v) => Ok(v),
            _ => Err(Unsupported),
        }
    }

    /// A `fixed64`/`double` field.
    #[inline]
    pub(crate) fn fixed64(self) -> Result<u64, Unsupported> {
        match self {
            Field::Fixed64(v) => Ok(v),
            _ => Err(Unsupported),
        }
    }

    /// A `fixed32` field.
    #[inline]
    pub(crate) fn fixed32(self) -> Result<u32, Unsupported> {
        match self {
            Field::Fixed32(v) => Ok(v),
            _ => Err(Unsupported),
        }
    }
}

/// Iterates the fields of one message: `(field number, payload)`.
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// prost's varint rules: at most 10 bytes, the 10th at most 1 (no u64 overflow).
    #[inline]
    fn varint(&mut self) -> Result<u64, Unsupported> {
        // Tags, lengths and small ints are mostly one byte: that case stays inlined.
        if let Some((&b, rest)) = self.buf.split_first() {
            if b < 0x80 {
                self.buf = rest;
                return Ok(u64::from(b));
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, Unsupported> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self.buf.get(i).ok_or(Unsupported)?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    return Err(Unsupported);
                }
                self.buf = self.buf.get(i + 1..).ok_or(Unsupported)?;
                return Ok(v);
            }
        }
        Err(Unsupported)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], Unsupported> {
        let head = self.buf.get(..n).ok_or(Unsupported)?;
        self.buf = self.buf.get(n..).ok_or(Unsupported)?;
        Ok(head)
    }

    #[inline]
    fn field(&mut self) -> Result<(u32, Field<'a>), Unsupported> {
        let key = self.varint()?;
        let key = u32::try_from(key).map_err(|_| Unsupported)?;
        let tag = key >> 3;
        if tag == 0 {
            return Err(Unsupported);
        }
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| Unsupported)?;
                Field::Fixed64(u64::from_le_bytes(b))
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| Unsupported)?;
                Field::Bytes(self.take(len)?)
            }
            5 => {
                let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| Unsupported)?;
                Field::Fixed32(u32::from_le_bytes(b))
            }
            // Groups (3, 4) are legal but unused by OTLP; 6 and 7 are invalid: prost decides.
            _ => return Err(Unsupported),
        };
        Ok((tag, field))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Field<'a>), Unsupported>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let r = self.field();
        if r.is_err() {
            // Stop after the first error: the rest cannot be framed.
            self.buf = &[];
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(buf: &[u8]) -> Result<Vec<(u32, Field<'_>)>, Unsupported> {
        Fields::new(buf).collect()
    }

    #[test]
    fn reads_each_wire_type() {
        let buf = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x11, 1, 0, 0, 0, 0, 0, 0, 0, // 2: fixed64 1
            0x1a, 2, b'h', b'i', // 3: bytes "hi"
            0x25, 7, 0, 0, 0, // 4: fixed32 7
        ];
        assert_eq!(
            all(&buf),
            Ok(vec![
                (1, Field::Varint(150)),
                (2, Field::Fixed64(1)),
                (3, Field::Bytes(b"hi")),
                (4, Field::Fixed32(7)),
            ])
        );
    }

    #[test]
    fn malformed_framing_is_unsupported() {
        // Truncated varint, length past the end, tag 0, group, invalid wire type 7.
        for bad in [
            &[0x08, 0x96][..],
            &[0x0a, 5, 1],
            &[0x00, 1],
            &[0x0b],
            &[0x0f],
            &[0xff, 0xff, 0xff, 0x0f],
        ] {
            assert_eq!(all(bad), Err(Unsupported), "{bad:?}");
        }
        // A 10-byte varint may only carry one bit in its last byte.
        let mut max = vec![0x08];
        max.extend([0xff; 9]);
        max.push(0x01);
        assert_eq!(all(&max), Ok(vec![(1, Field::Varint(u64::MAX))]));
        *max.last_mut().unwrap() = 0x02;
        assert_eq!(all(&max), Err(Unsupported));
    }

    #[test]
    fn strings_must_be_utf8() {
        assert_eq!(Field::Bytes(b"ok").string(), Ok("ok"));
        assert_eq!(Field::Bytes(&[0xff]).string(), Err(Unsupported));
        assert_eq!(Field::Varint(1).string(), Err(Unsupported));
    }
}
