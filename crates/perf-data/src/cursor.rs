//! A bounds-checked reader of little- or big-endian fields over a byte slice: every read
//! past the end is `None`, never a panic.

/// Reads fixed-size fields from `bytes`, front to back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`, reading big-endian fields if `big`.
    pub(crate) fn new(bytes: &'a [u8], big: bool) -> Self {
        Cursor { bytes, pos: 0, big }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let b = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(b)
    }

    /// Everything not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    fn word<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut w: [u8; N] = self.take(N)?.try_into().ok()?;
        if self.big {
            w.reverse();
        }
        Some(w)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.word().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.word().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.word().map(u64::from_le_bytes)
    }
}

/// A little- or big-endian unsigned word of `n` (≤ 8) bytes at `at` of `b`, if `b` holds it.
pub(crate) fn word_at(b: &[u8], at: usize, n: usize, big: bool) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(n)?)?;
    let mut w = [0u8; 8];
    if big {
        w[8 - n..].copy_from_slice(bytes);
        Some(u64::from_be_bytes(w))
    } else {
        w[..n].copy_from_slice(bytes);
        Some(u64::from_le_bytes(w))
    }
}

/// The bytes of a NUL-terminated string (all of them without a NUL).
pub(crate) fn c_str(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end() {
        let b = [1u8, 0, 0, 0, 2, 0];
        let mut c = Cursor::new(&b, false);
        assert_eq!(c.u32(), Some(1));
        assert_eq!(c.u32(), None);
        assert_eq!(c.u16(), Some(2));
        assert_eq!(c.u8(), None);
        let mut c = Cursor::new(&b, true);
        assert_eq!(c.u16(), Some(0x0100));
        assert_eq!(word_at(&b, 4, 2, false), Some(2));
        assert_eq!(word_at(&b, 5, 2, false), None);
        assert_eq!(word_at(&b, usize::MAX, 2, false), None);
        assert_eq!(c_str(b"ab\0cd"), b"ab");
        assert_eq!(c_str(b"ab"), b"ab");
    }
}
