//! Branch ends as perf names them: `SYMBOL+OFFSET (DSO)` from the DSO's symbol table
//! (`ptscope_symbols::PerfSymbols`), `[unknown @ ADDR (DSO)]` where it has none, and
//! `[unknown @ ADDR ([unknown])]` outside every mapping — the same locations the text
//! and dlfilter paths give for perf's output, so one trace comes out of every decoder.

use crate::image::{Space, NO_FILE};
use ptscope_event::{write_ocaml_int64_hex, Location, LocationHandle, StringTable, Sym, Symbol};
use ptscope_symbols::PerfSymbols;
use rustc_hash::FxHashMap;

/// log2 of the direct-mapped location cache's slots.
const CACHE_BITS: u32 = 14;

/// Names code addresses into a [`StringTable`], caching by (context's image, address).
pub(crate) struct Namer {
    /// (image, ip) → handle, direct-mapped in front of `map`.
    /// (A fixed-size array: the slot needs no bounds check.)
    cache: Box<[(u32, u64, u32); 1 << CACHE_BITS]>,
    map: FxHashMap<(u32, u64), LocationHandle>,
    unknown_dso: Option<Sym>,
    zero: Option<LocationHandle>,
    scratch: String,
    /// Each file's symbols, loaded on first use (`None`: it has none usable).
    symbols: FxHashMap<u32, Option<PerfSymbols>>,
}

impl Namer {
    pub(crate) fn new() -> Self {
        Namer {
            cache: vec![(u32::MAX, 0, 0); 1 << CACHE_BITS]
                .into_boxed_slice()
                .try_into()
                .unwrap_or_else(|_| unreachable!("the vector has the array's length")),
            map: FxHashMap::default(),
            unknown_dso: None,
            zero: None,
            scratch: String::new(),
            symbols: FxHashMap::default(),
        }
    }

    /// The location of `ip` in context `ctx`, whose image is `image` (`ip` 0: perf's
    /// `0 [unknown]`, the other end of a trace start or end).
    #[inline(always)]
    pub(crate) fn location(
        &mut self,
        space: &Space,
        strings: &mut StringTable,
        ctx: u32,
        image: u32,
        ip: u64,
    ) -> LocationHandle {
        // Inlined into the source's merge: the direct-mapped hit, twice per branch.
        // (`ip` 0 would match an empty slot: it takes the slow path.)
        let slot = (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_BITS)) as usize;
        let (i, a, h) = self.cache[slot];
        if i == image && a == ip && ip != 0 {
            return LocationHandle(h);
        }
        self.location_slow(space, strings, ctx, image, ip, slot)
    }

    /// [`Namer::location`] past the direct-mapped table.
    #[inline(never)]
    fn location_slow(
        &mut self,
        space: &Space,
        strings: &mut StringTable,
        ctx: u32,
        image: u32,
        ip: u64,
        slot: usize,
    ) -> LocationHandle {
        if ip == 0 {
            if let Some(z) = self.zero {
                return z;
            }
            let z = self.unknown(strings, 0, None);
            self.zero = Some(z);
            return z;
        }
        let h = match self.map.get(&(image, ip)) {
            Some(&h) => h,
            None => {
                let h = self.name(space, strings, ctx, ip);
                self.map.insert((image, ip), h);
                h
            }
        };
        self.cache[slot] = (image, ip, h.0);
        h
    }

    fn name(
        &mut self,
        space: &Space,
        strings: &mut StringTable,
        ctx: u32,
        ip: u64,
    ) -> LocationHandle {
        let Some(m) = space.map_at(ctx, ip).copied() else {
            return self.unknown(strings, ip, None);
        };
        if m.file == NO_FILE {
            return self.unknown(strings, ip, None);
        }
        let offset = ip - m.start + m.pgoff;
        let Some(file) = space.files.get(m.file as usize) else {
            return self.unknown(strings, ip, None);
        };
        let dso = strings.intern(&file.path);
        let syms = self
            .symbols
            .entry(m.file)
            .or_insert_with(|| match &file.from {
                Some(p) if p.is_absolute() => PerfSymbols::load(p).ok(),
                // The vDSO read from memory.
                _ => file.bytes().and_then(|b| {
                    let elf =
                        ptscope_symbols::Elf::parse(b, std::path::Path::new("[vdso]")).ok()?;
                    Some(PerfSymbols::from_elf(&elf, None))
                }),
            });
        let found = syms.as_ref().and_then(|s| s.lookup(offset));
        match found {
            Some((name, start)) => {
                let name = strings.intern(name);
                strings.intern_location(Location {
                    ip,
                    symbol: Symbol::FromPerf(name),
                    offset: (offset - start) & (u64::MAX >> 1),
                    dso: Some(dso),
                })
            }
            None => self.unknown(strings, ip, Some(dso)),
        }
    }

    /// `[unknown @ ADDR (DSO)]`, as the text decoder names perf's `[unknown]`.
    fn unknown(&mut self, strings: &mut StringTable, ip: u64, dso: Option<Sym>) -> LocationHandle {
        let dso = match dso {
            Some(d) => d,
            None => *self
                .unknown_dso
                .get_or_insert_with(|| strings.intern("[unknown]")),
        };
        self.scratch.clear();
        self.scratch.push_str("[unknown @ ");
        write_ocaml_int64_hex(&mut self.scratch, ip);
        self.scratch.push_str(" (");
        self.scratch.push_str(strings.get(dso));
        self.scratch.push_str(")]");
        let name = strings.intern(&self.scratch);
        strings.intern_location(Location {
            ip,
            symbol: Symbol::FromPerf(name),
            offset: 0,
            dso: Some(dso),
        })
    }
}
