//! Source locations: the string interner, the code → locations table and the
//! move-to-front location codec.

use rustc_hash::FxHashMap;

use crate::buf::{self, Cursor};
use crate::error::ErrorKind;

/// An interned string (filename or definition name); compare symbols, not strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

/// Deduplicates the filenames and definition names of a trace.
#[derive(Default, Debug)]
pub struct Interner {
    strings: Vec<Box<[u8]>>,
    index: FxHashMap<Box<[u8]>, Sym>,
}

impl Interner {
    /// The symbol of `s`, adding it if new.
    pub fn intern(&mut self, s: &[u8]) -> Sym {
        if let Some(&sym) = self.index.get(s) {
            return sym;
        }
        let sym = Sym(self.strings.len() as u32);
        self.strings.push(s.into());
        self.index.insert(s.into(), sym);
        sym
    }

    /// The bytes of a symbol.
    pub fn get(&self, sym: Sym) -> &[u8] {
        &self.strings[sym.0 as usize]
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// True when nothing has been interned.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// One source location of a backtrace slot (inlined frames give several per slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// Source file.
    pub filename: Sym,
    /// Enclosing definition (function) name.
    pub defname: Sym,
    /// Line (20 bits).
    pub line: u32,
    /// First column (8 bits).
    pub start_char: u32,
    /// Last column (10 bits).
    pub end_char: u32,
}

/// A location with its strings, as given to the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedLocation {
    /// Source file.
    pub filename: Vec<u8>,
    /// Enclosing definition name.
    pub defname: Vec<u8>,
    /// Line; out-of-range values are clamped to the field maximum.
    pub line: i64,
    /// First column; clamped like `line`.
    pub start_char: i64,
    /// Last column; clamped like `line`.
    pub end_char: i64,
}

impl OwnedLocation {
    /// What writers substitute for location lists too large to encode.
    pub fn unknown() -> OwnedLocation {
        OwnedLocation {
            filename: b"<unknown>".to_vec(),
            defname: b"??".to_vec(),
            line: 1,
            start_char: 1,
            end_char: 1,
        }
    }
}

/// Maps location codes to their location lists.
#[derive(Default, Debug)]
pub struct LocationTable {
    spans: FxHashMap<u64, (u32, u32)>,
    entries: Vec<Location>,
}

impl LocationTable {
    /// Locations of `code`, or `None` if it was never defined.
    #[inline]
    pub fn get(&self, code: u64) -> Option<&[Location]> {
        self.spans
            .get(&code)
            .map(|&(s, n)| &self.entries[s as usize..(s + n) as usize])
    }

    /// Number of distinct codes.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when no code is defined.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Adds a definition, checking a repeated code carries the same list.
    pub(crate) fn define(&mut self, code: u64, locs: &[Location]) -> Result<(), ErrorKind> {
        match self.get(code) {
            Some(old) if old == locs => Ok(()),
            Some(_) => Err(ErrorKind::InconsistentLocation(code)),
            None => {
                let start = self.entries.len() as u32;
                self.entries.extend_from_slice(locs);
                self.spans.insert(code, (start, locs.len() as u32));
                Ok(())
            }
        }
    }
}

const MTF_LEN: usize = 31;
const NOT_FOUND: u8 = 31;

/// Move-to-front table of at most 31 entries, most recent first.
#[derive(Clone, Debug)]
struct Mtf<T: Copy> {
    len: usize,
    slots: [T; MTF_LEN],
}

impl<T: Copy + Default> Mtf<T> {
    fn new() -> Self {
        Mtf {
            len: 0,
            slots: [T::default(); MTF_LEN],
        }
    }

    fn move_to_front(&mut self, i: usize) -> T {
        let e = self.slots[i];
        self.slots.copy_within(0..i, 1);
        self.slots[0] = e;
        e
    }

    fn push(&mut self, v: T) {
        self.slots.copy_within(0..MTF_LEN - 1, 1);
        self.slots[0] = v;
        self.len = (self.len + 1).min(MTF_LEN);
    }

    fn decode_hit(&mut self, code: u8) -> Result<T, ErrorKind> {
        if usize::from(code) >= self.len {
            return Err(ErrorKind::BadMtfIndex(code));
        }
        Ok(self.move_to_front(usize::from(code)))
    }
}

/// Per-domain decoder state: filename MTF whose entries own a defname MTF.
#[derive(Debug)]
pub(crate) struct LocReaderState {
    files: Mtf<(Sym, u32)>,
    tables: Vec<Mtf<Sym>>,
}

impl Default for Sym {
    fn default() -> Self {
        Sym(u32::MAX)
    }
}

impl LocReaderState {
    pub(crate) fn new() -> Self {
        LocReaderState {
            files: Mtf::new(),
            tables: Vec::new(),
        }
    }

    /// Decodes one location event body into `out`, returning its code.
    pub(crate) fn read(
        &mut self,
        c: &mut Cursor<'_>,
        strings: &mut Interner,
        out: &mut Vec<Location>,
    ) -> Result<u64, ErrorKind> {
        out.clear();
        let code = c.u64()?;
        let nlocs = c.u8()?;
        for _ in 0..nlocs {
            let low = u64::from(c.u32()?);
            let high = u64::from(c.u16()?);
            let enc = (high << 32) | low;
            let line = (enc & 0xfffff) as u32;
            let start_char = ((enc >> 20) & 0xff) as u32;
            let end_char = ((enc >> 28) & 0x3ff) as u32;
            let fcode = ((enc >> 38) & 0x1f) as u8;
            let dcode = ((enc >> 43) & 0x1f) as u8;
            let (filename, table) = if fcode == NOT_FOUND {
                let name = strings.intern(c.string()?);
                // A full table drops slot 30; its defname table is reused for the
                // new file, as the v1 writer assumed (v1 traces rely on it).
                let table = if self.files.len == MTF_LEN {
                    self.files.slots[MTF_LEN - 1].1
                } else {
                    self.tables.push(Mtf::new());
                    (self.tables.len() - 1) as u32
                };
                self.files.push((name, table));
                (name, table)
            } else {
                self.files.decode_hit(fcode)?
            };
            let defs = &mut self.tables[table as usize];
            let defname = if dcode == NOT_FOUND {
                let name = strings.intern(c.string()?);
                defs.push(name);
                name
            } else {
                defs.decode_hit(dcode)?
            };
            out.push(Location {
                filename,
                defname,
                line,
                start_char,
                end_char,
            });
        }
        Ok(code)
    }
}

/// Largest encoded location event the writer produces before substituting `<unknown>`.
pub(crate) const LOC_MAX_LENGTH: usize = 4096;

/// Per-domain encoder state.
#[derive(Debug, Default)]
pub(crate) struct LocWriterState {
    files: Vec<(Vec<u8>, Vec<Vec<u8>>)>,
}

fn mtf_encode<T>(
    v: &mut Vec<T>,
    key: &[u8],
    name: impl Fn(&T) -> &[u8],
    make: impl FnOnce() -> T,
) -> u8 {
    match v.iter().position(|e| name(e) == key) {
        Some(i) => {
            let e = v.remove(i);
            v.insert(0, e);
            i as u8
        }
        None => {
            v.insert(0, make());
            v.truncate(MTF_LEN);
            NOT_FOUND
        }
    }
}

impl LocWriterState {
    /// Encodes a location event body (after its event header).
    pub(crate) fn put(&mut self, b: &mut Vec<u8>, code: u64, locs: &[OwnedLocation]) {
        let worst = locs.iter().fold(9usize, |sz, l| {
            sz + 6 + (l.filename.len() + 1) + (l.defname.len() + 1)
        });
        let unknown;
        let locs = if locs.len() <= 255 && worst <= LOC_MAX_LENGTH {
            locs
        } else {
            unknown = [OwnedLocation::unknown()];
            &unknown[..]
        };
        buf::put_u64(b, code);
        buf::put_u8(b, locs.len() as u8);
        for l in locs {
            let clamp = |n: i64, lim: i64| if n < 0 || n > lim { lim } else { n } as u64;
            let fcode = mtf_encode(
                &mut self.files,
                &l.filename,
                |e| &e.0,
                || (l.filename.clone(), Vec::new()),
            );
            let defs = &mut self.files[0].1;
            let dcode = mtf_encode(defs, &l.defname, |e| e, || l.defname.clone());
            let enc = clamp(l.line, 0xfffff)
                | (clamp(l.start_char, 0xff) << 20)
                | (clamp(l.end_char, 0x3ff) << 28)
                | (u64::from(fcode) << 38)
                | (u64::from(dcode) << 43);
            buf::put_u32(b, enc as u32);
            buf::put_u16(b, (enc >> 32) as u16);
            if fcode == NOT_FOUND {
                buf::put_string(b, &l.filename);
            }
            if dcode == NOT_FOUND {
                buf::put_string(b, &l.defname);
            }
        }
    }
}
