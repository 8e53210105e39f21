//! Little-endian primitives of the format: a bounds-checked cursor for reading and
//! append/patch helpers for writing.

use crate::error::ErrorKind;

/// A read cursor over one packet's bytes; every getter fails instead of panicking.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], pos: usize) -> Self {
        Cursor { data, pos }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    #[inline]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], ErrorKind> {
        let end = self.pos.checked_add(N).ok_or(ErrorKind::UnexpectedEnd)?;
        let bytes = self
            .data
            .get(self.pos..end)
            .ok_or(ErrorKind::UnexpectedEnd)?;
        self.pos = end;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8, ErrorKind> {
        let b = *self.data.get(self.pos).ok_or(ErrorKind::UnexpectedEnd)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub(crate) fn u16(&mut self) -> Result<u16, ErrorKind> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    #[inline]
    pub(crate) fn u32(&mut self) -> Result<u32, ErrorKind> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    #[inline]
    pub(crate) fn u64(&mut self) -> Result<u64, ErrorKind> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    /// Variable-length integer: one byte below 253, else a tag selecting u16, i32 or i64.
    #[inline]
    pub(crate) fn vint(&mut self) -> Result<i64, ErrorKind> {
        match self.u8()? {
            253 => Ok(i64::from(self.u16()?)),
            254 => Ok(i64::from(self.u32()? as i32)),
            255 => Ok(self.u64()? as i64),
            b => Ok(i64::from(b)),
        }
    }

    /// NUL-terminated string, returned without its terminator.
    pub(crate) fn string(&mut self) -> Result<&'a [u8], ErrorKind> {
        let rest = self.data.get(self.pos..).ok_or(ErrorKind::UnexpectedEnd)?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(ErrorKind::UnterminatedString)?;
        self.pos += len + 1;
        Ok(&rest[..len])
    }
}

pub(crate) fn put_u8(b: &mut Vec<u8>, v: u8) {
    b.push(v);
}

pub(crate) fn put_u16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// Mirrors the reference encoder: 253/u16 for small non-negatives, 254/i32 when the
/// value fits a signed 32-bit int, 255/i64 otherwise.
pub(crate) fn put_vint(b: &mut Vec<u8>, v: i64) {
    if (0..=252).contains(&v) {
        b.push(v as u8);
    } else if (0..=0xffff).contains(&v) {
        b.push(253);
        put_u16(b, v as u16);
    } else if i32::try_from(v).is_ok() {
        b.push(254);
        put_u32(b, v as i32 as u32);
    } else {
        b.push(255);
        put_u64(b, v as u64);
    }
}

/// Writes a string cut at its first NUL (the terminator would otherwise end it early
/// on read and desynchronise everything after it).
pub(crate) fn put_string(b: &mut Vec<u8>, s: &[u8]) {
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    b.extend_from_slice(&s[..end]);
    b.push(0);
}

pub(crate) fn patch_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn patch_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn patch_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(v: i64) -> (Vec<u8>, i64) {
        let mut b = Vec::new();
        put_vint(&mut b, v);
        let mut c = Cursor::new(&b, 0);
        let back = c.vint().expect("decodes");
        assert_eq!(c.remaining(), 0);
        (b, back)
    }

    #[test]
    fn vint_tags_follow_reference_boundaries() {
        for (v, tag, len) in [
            (0i64, None, 1),
            (252, None, 1),
            (253, Some(253u8), 3),
            (65_535, Some(253), 3),
            (65_536, Some(254), 5),
            (i64::from(i32::MAX), Some(254), 5),
            (1 << 31, Some(255), 9),
            (-1, Some(254), 5),
            (i64::from(i32::MIN) - 1, Some(255), 9),
        ] {
            let (bytes, back) = roundtrip(v);
            assert_eq!(back, v);
            assert_eq!(bytes.len(), len, "length for {v}");
            if let Some(t) = tag {
                assert_eq!(bytes[0], t, "tag for {v}");
            }
        }
    }

    #[test]
    fn strings_are_cut_at_nul_and_unterminated_is_an_error() {
        let mut b = Vec::new();
        put_string(&mut b, b"ab\0cd");
        assert_eq!(b, b"ab\0");
        let mut c = Cursor::new(b"xyz", 0);
        assert_eq!(c.string(), Err(ErrorKind::UnterminatedString));
        let mut c = Cursor::new(&[1, 2, 3], 0);
        assert_eq!(c.u32(), Err(ErrorKind::UnexpectedEnd));
    }
}
