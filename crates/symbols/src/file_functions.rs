//! The functions of one ELF file as exact (emulate) traces name them, and the regions
//! between their bounds, which ptscope's qemu plugin uses to decide which jumps leave a
//! function.
//!
//! Names follow perf's choices (a debug file's symbol table if one is installed, else
//! the file's `.symtab`, else its `.dynsym`; among aliases perf's preferred one; C++
//! names without parameters, Rust's without their hash; `NAME@plt` for PLT entries),
//! with `.eh_frame` ranges ([`FunctionRanges`]) for code no symbol covers. Both the
//! plugin and the decoder load a file through [`FileFunctions::load`], so a jump the
//! plugin saw staying in one region always stays in one named function for the
//! decoder: the regions are cut at every start and end the naming uses.
//!
//! ```
//! use ptscope_symbols::FileFunctions;
//!
//! #[no_mangle]
//! pub extern "C" fn ptscope_file_functions_marker() -> u32 { 7 }
//!
//! let exe = std::env::current_exe().unwrap();
//! let f = FileFunctions::load(&exe).unwrap();
//! let addr = ptscope_file_functions_marker as usize as u64;
//! // This test binary is a PIE: find the link-time address of the marker through the
//! // mapping that holds it (as qemu's /proc/self/maps gives it).
//! let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
//! let (start, off) = maps.lines().find_map(|l| {
//!     let mut w = l.split_whitespace();
//!     let (a, b) = w.next()?.split_once('-')?;
//!     let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
//!     let off = u64::from_str_radix(w.nth(1)?, 16).ok()?;
//!     (addr >= a && addr < b).then_some((a, off))
//! }).unwrap();
//! let link = f.link_address(addr - start + off).unwrap();
//! let found = f.function_at(link).unwrap();
//! assert_eq!(found.name, "ptscope_file_functions_marker");
//! assert_eq!(f.region_of(link), f.region_of(found.start));
//! ```

use std::borrow::Cow;
use std::path::Path;
use std::sync::OnceLock;

use crate::elf::{strip_clone_suffixes, strip_param_list, LoadSegment, MappedFile};
use crate::error::Result;
use crate::functions::{find_debug_file, FunctionRanges};

/// A function found at an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundName<'a> {
    /// Its link-time start.
    pub start: u64,
    /// Its name as traces show it.
    pub name: Cow<'a, str>,
}

/// The region of code holding an address: every address of one region is named the same
/// function (or, `covered` false, none: code no symbol or FDE describes).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// The link-time address where the region starts (the largest bound at or below the
    /// address; 0 below the first).
    pub start: u64,
    /// Some function covers the region.
    pub covered: bool,
}

/// One ELF file's functions, by link-time address.
pub struct FileFunctions {
    /// `(start, end, name as shown)` from the chosen symbol table and the PLT, sorted by
    /// start, one per address.
    funcs: Vec<(u64, u64, Box<str>)>,
    /// Debug-file symbols and `.eh_frame` ranges, for what the symbols miss.
    ranges: Option<FunctionRanges>,
    segments: Vec<LoadSegment>,
    /// Every start and end above, sorted and unique: the naming is constant between two.
    bounds: Vec<u64>,
    /// Bit `j`: some function covers `bounds[j]..bounds[j + 1]` (made at the first
    /// [`Self::region_of`]: the qemu plugin asks at every translation).
    covered: OnceLock<Vec<u64>>,
}

impl FileFunctions {
    /// Loads `path`'s functions (and its debug file's, if one is installed and trusted).
    pub fn load(path: &Path) -> Result<Self> {
        let file = MappedFile::open_regular(path)?;
        let elf = file.elf()?;
        let debug = find_debug_file(&elf).and_then(|d| MappedFile::open_regular(d).ok());
        let mut funcs = debug
            .as_ref()
            .and_then(|d| d.elf().ok())
            .map(|d| function_symbols(d.object(), false))
            .unwrap_or_default();
        if funcs.is_empty() {
            funcs = function_symbols(elf.object(), false);
        }
        if funcs.is_empty() {
            funcs = function_symbols(elf.object(), true);
        }
        let plt = plt_symbols(elf.object());
        if !plt.is_empty() {
            funcs.extend(plt);
            funcs.sort_by_key(|f| f.0);
        }
        let ranges = FunctionRanges::from_elf(&elf).ok();
        let mut bounds: Vec<u64> = funcs.iter().flat_map(|f| [f.0, f.1]).collect();
        if let Some(r) = &ranges {
            bounds.extend(r.bounds());
        }
        bounds.sort_unstable();
        bounds.dedup();
        Ok(FileFunctions {
            funcs,
            ranges,
            segments: elf.load_segments(),
            bounds,
            covered: OnceLock::new(),
        })
    }

    /// The link-time address at file offset `offset`, if an executable segment holds it.
    pub fn link_address(&self, offset: u64) -> Option<u64> {
        crate::elf::address_of_offset(&self.segments, offset)
    }

    /// The function holding the link-time address `v`: the innermost symbol containing
    /// it, else what the debug file and `.eh_frame` know.
    pub fn function_at(&self, v: u64) -> Option<FoundName<'_>> {
        let i = self.funcs.partition_point(|x| x.0 <= v);
        let hit = self.funcs[..i]
            .iter()
            .rev()
            .take(16)
            .filter(|x| v < x.1)
            .min_by_key(|x| x.1 - x.0);
        if let Some(f) = hit {
            return Some(FoundName {
                start: f.0,
                name: Cow::Borrowed(&f.2),
            });
        }
        let r = self.ranges.as_ref()?.function_at(v)?;
        Some(FoundName {
            start: r.start,
            name: r.name,
        })
    }

    /// Whether a function holds the link-time address `v`: [`Self::function_at`]
    /// without making its name.
    fn covers(&self, v: u64) -> bool {
        let i = self.funcs.partition_point(|x| x.0 <= v);
        self.funcs[..i].iter().rev().take(16).any(|x| v < x.1)
            || self.ranges.as_ref().is_some_and(|r| r.contains(v))
    }

    /// The region holding the link-time address `v`.
    pub fn region_of(&self, v: u64) -> Region {
        let i = self.bounds.partition_point(|&b| b <= v);
        let Some(j) = i.checked_sub(1) else {
            // Below every function's start: nothing covers it.
            return Region {
                start: 0,
                covered: false,
            };
        };
        // What covers an address is the same all over its interval between two bounds
        // (every start and end is a bound), so it is worked out once per interval.
        let bits = self.covered.get_or_init(|| {
            let mut bits = vec![0u64; self.bounds.len().div_ceil(64)];
            for (k, &b) in self.bounds.iter().enumerate() {
                if self.covers(b) {
                    bits[k / 64] |= 1 << (k % 64);
                }
            }
            bits
        });
        Region {
            start: self.bounds[j],
            covered: bits[j / 64] >> (j % 64) & 1 != 0,
        }
    }
}

/// A symbol's name as perf prints it: C++ names demangled without their parameter list
/// (`std::error_category::error_category`), Rust's without their hash, so traces match
/// the other paths'.
pub fn perf_name(raw: &str) -> Cow<'_, str> {
    // Rust's names (v0 `_R…`, or legacy `_ZN…17h<hash>E`) as perf prints them: no hash.
    if let Some(r) = crate::demangle_rust(raw) {
        return r.into();
    }
    if !raw.starts_with("_Z") {
        return raw.into();
    }
    let Some(d) = crate::demangle_cpp(raw) else {
        return raw.into();
    };
    // Drop `[clone .cold]` suffixes (perf names a split-off part as its function), then
    // the trailing `(…)` (and a `const` after it), matching parentheses from the end.
    let body = strip_clone_suffixes(&d);
    let body = body.strip_suffix(" const").unwrap_or(body);
    if let Some(short) = strip_param_list(body) {
        return short.to_string().into();
    }
    d.into()
}

/// One candidate symbol at an address, with what perf's choice among aliases looks at.
struct Candidate<'a> {
    addr: u64,
    size: u64,
    weak: bool,
    global: bool,
    name: &'a str,
}

/// True when `a` is the better name than `b` for one address, by perf's rule: a sized
/// symbol, then a non-weak one, then a global one, then fewer leading underscores, then
/// the longer name, then the first seen.
fn better(a: &Candidate<'_>, b: &Candidate<'_>) -> bool {
    let under = |n: &str| n.len() - n.trim_start_matches('_').len();
    if (a.size > 0) != (b.size > 0) {
        return a.size > 0;
    }
    if a.weak != b.weak {
        return !a.weak;
    }
    if a.global != b.global {
        return a.global;
    }
    if under(a.name) != under(b.name) {
        return under(a.name) < under(b.name);
    }
    // perf compares the names it shows: Rust's demangled (`<usize as Display>::fmt`
    // over `<u64 as Display>::fmt`, one function under two mangled names of one length).
    if let (Some(da), Some(db)) = (crate::demangle_rust(a.name), crate::demangle_rust(b.name)) {
        return da.len() > db.len();
    }
    a.name.len() > b.name.len()
}

/// The function symbols of one table (`.symtab`, or `.dynsym` when `dynamic`), one per
/// address, as `(start, end, name as shown)` sorted by start; a symbol without a size
/// ends where the next one starts.
fn function_symbols(obj: &object::File<'_>, dynamic: bool) -> Vec<(u64, u64, Box<str>)> {
    use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SymbolKind};
    let mut cands: Vec<Candidate<'_>> = Vec::new();
    let table: Box<dyn Iterator<Item = object::Symbol<'_, '_>>> = if dynamic {
        Box::new(obj.dynamic_symbols())
    } else {
        Box::new(obj.symbols())
    };
    for s in table {
        // perf also takes labels (untyped symbols in code, such as ld.so's `_start`).
        let label = s.kind() == SymbolKind::Unknown
            && s
                .section_index()
                .and_then(|i| obj.section_by_index(i).ok())
                // By flags: in a debug file `.text` holds no bytes (NOBITS).
                .is_some_and(|sec| {
                    matches!(sec.flags(), SectionFlags::Elf { sh_flags, .. } if sh_flags.0 & 0x4 != 0)
                });
        if !(s.kind() == SymbolKind::Text || label)
            || s.section_index().is_none()
            || s.address() == 0
        {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        if name.is_empty() {
            continue;
        }
        cands.push(Candidate {
            addr: s.address(),
            size: s.size(),
            weak: s.is_weak(),
            global: s.is_global(),
            name,
        });
    }
    cands.sort_by_key(|c| c.addr);
    let best = crate::perfnames::best_per_start(cands, |c| c.addr, better);
    let mut out = Vec::with_capacity(best.len());
    for (i, c) in best.iter().enumerate() {
        let end = if c.size > 0 {
            c.addr.saturating_add(c.size)
        } else {
            best.get(i + 1).map_or(c.addr.saturating_add(1), |n| n.addr)
        };
        out.push((c.addr, end, perf_name(c.name).into()));
    }
    out
}

/// `NAME@plt` for each PLT entry, as perf names them: the `.rela.plt` relocations in
/// order, one 16-byte entry each, in `.plt.sec` when the file has one (IBT), else in
/// `.plt` after its 16-byte header.
fn plt_symbols(obj: &object::File<'_>) -> Vec<(u64, u64, Box<str>)> {
    use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SymbolIndex};
    const ENTRY: u64 = 16;
    let Some(rela) = obj.section_by_name(".rela.plt") else {
        return Vec::new();
    };
    let Ok(data) = rela.data() else {
        return Vec::new();
    };
    let (base, end) = match obj
        .section_by_name(".plt.sec")
        .map(|s| (s.address(), s.address() + s.size()))
    {
        Some(r) => r,
        None => match obj.section_by_name(".plt") {
            Some(s) => (s.address() + ENTRY, s.address() + s.size()),
            None => return Vec::new(),
        },
    };
    let Some(dynsym) = obj.dynamic_symbol_table() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, r) in data.chunks_exact(24).enumerate() {
        let start = base + i as u64 * ENTRY;
        if start + ENTRY > end {
            break;
        }
        let mut info = [0u8; 8];
        info.copy_from_slice(&r[8..16]);
        let sym = (u64::from_le_bytes(info) >> 32) as usize;
        // An IRELATIVE entry has no symbol: perf calls it plain `@plt`.
        let name = if sym == 0 {
            String::new()
        } else {
            match dynsym
                .symbol_by_index(SymbolIndex(sym))
                .ok()
                .and_then(|s| s.name().ok().map(str::to_owned))
            {
                Some(n) => n,
                None => continue,
            }
        };
        let name = perf_name(&name);
        out.push((start, start + ENTRY, format!("{name}@plt").into()));
    }
    out
}
