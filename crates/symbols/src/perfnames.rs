//! Function names as perf gives them to a code address, for decoders that do not run
//! perf (ptscope's own Intel PT decoder): the same symbol table perf builds for a DSO —
//! `.symtab` of the installed debug file or the file itself, else `.dynsym`; functions
//! and GNU ifuncs in executable sections; one symbol per address chosen by perf's rules;
//! sizeless symbols running to the next; `NAME@plt` for PLT entries — looked up by file
//! offset, as perf does (`map_ip`: address − mapping start + page offset), and
//! demangled.
//!
//! ```
//! use ptscope_symbols::PerfSymbols;
//!
//! #[no_mangle]
//! #[inline(never)]
//! pub extern "C" fn ptscope_perfnames_doc() -> u32 { std::hint::black_box(7) }
//!
//! // Used, so the linker keeps it.
//! assert_eq!(ptscope_perfnames_doc(), 7);
//! let syms = PerfSymbols::load(std::path::Path::new("/proc/self/exe")).unwrap();
//! // The doc test's own function, at its file offset (ELF vaddr → offset).
//! let exe = ptscope_symbols::MappedFile::open("/proc/self/exe").unwrap();
//! let elf = exe.elf().unwrap();
//! let vaddr = elf.symbols().unwrap().lookup("ptscope_perfnames_doc").unwrap().address();
//! let seg = elf.segment_of(vaddr).unwrap();
//! let offset = vaddr - seg.vaddr + seg.offset;
//! assert_eq!(syms.lookup(offset + 1), Some(("ptscope_perfnames_doc", offset)));
//! ```

use crate::elf::{Elf, MappedFile};
use crate::error::Result;
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use std::path::Path;

/// One symbol: where it starts and ends (file offsets) and its name as perf shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sym {
    start: u64,
    end: u64,
    name: Box<str>,
}

/// A candidate before duplicates are resolved, with what perf's choice looks at.
struct Candidate {
    start: u64,
    size: u64,
    /// The end of its section: a sizeless symbol runs no further.
    limit: u64,
    weak: bool,
    global: bool,
    name: String,
    /// Its table gave it no size (its end was fixed up).
    sizeless: bool,
}

/// A DSO's symbols as perf names code (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct PerfSymbols {
    /// Sorted by start; ends fixed up.
    syms: Vec<Sym>,
    /// Running maximum of the ends, so a lookup stops early.
    max_end: Vec<u64>,
}

impl PerfSymbols {
    /// The symbols of the file at `path` (and of its installed debug file).
    pub fn load(path: &Path) -> Result<Self> {
        let file = MappedFile::open_regular(path)?;
        let elf = file.elf()?;
        let debug = crate::find_debug_file(&elf).and_then(|p| MappedFile::open_regular(p).ok());
        let debug_elf = debug.as_ref().and_then(|d| d.elf().ok());
        Ok(Self::from_elf(&elf, debug_elf.as_ref()))
    }

    /// The symbols of `binary`, with `.symtab` from `debug` when it has one.
    pub fn from_elf(binary: &Elf<'_>, debug: Option<&Elf<'_>>) -> Self {
        let segments = binary.load_segments();
        // Link-time address → file offset, through the binary's own segments.
        let offset_of = |vaddr: u64| {
            segments
                .iter()
                .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz.max(1))
                .map(|s| vaddr - s.vaddr + s.offset)
        };
        let has_symtab = |e: &Elf<'_>| e.object().symbols().any(|s| s.kind() == SymbolKind::Text);
        let source = match debug {
            Some(d) if has_symtab(d) => d,
            _ => binary,
        };
        let symtab = has_symtab(source);
        let mut tables: Vec<Vec<Candidate>> = Vec::new();
        for (from, static_table) in [(source, true), (binary, false)] {
            if static_table && !symtab {
                continue;
            }
            let syms: Box<dyn Iterator<Item = object::Symbol<'_, '_>>> = if static_table {
                Box::new(from.object().symbols())
            } else {
                Box::new(from.object().dynamic_symbols())
            };
            let mut cands = Vec::new();
            collect(from, syms, &offset_of, &mut cands);
            tables.push(cands);
        }
        let mut plt = Vec::new();
        let header = plt_symbols(binary, &offset_of, &mut plt);
        Self::from_candidates(tables, plt, header)
    }

    /// Adds one symbol table to `kept` as perf 6.1 loads one (`dso__load_sym_internal`):
    /// its symbols go after those already there with the same start (perf's tree puts
    /// equal starts to the right), sizeless ones run to the next symbol (the last to the
    /// end of its page and one more), then duplicates are chosen between. Per table:
    /// OCaml's sizeless `camlM__code_begin` runs past the function at its address when
    /// `.symtab` alone is fixed up, and then wins by its longer name, as perf shows it.
    fn add_table(kept: Vec<Candidate>, table: Vec<Candidate>) -> Vec<Candidate> {
        let mut cands = kept;
        cands.extend(table);
        cands.sort_by_key(|c| c.start);
        let n = cands.len();
        let mut ends = vec![0u64; n];
        for i in 0..n {
            let c = &cands[i];
            ends[i] = if c.size > 0 {
                c.start.saturating_add(c.size)
            } else {
                match cands.get(i + 1) {
                    Some(d) => d.start,
                    None => (c.start / 4096 + 2) * 4096,
                }
                .min(c.limit.max(c.start))
            };
        }
        for (c, &e) in cands.iter_mut().zip(&ends) {
            c.size = e - c.start;
        }
        best_per_start(cands, |c| c.start, better)
    }

    /// Loads the tables in order (`.symtab`, then `.dynsym`) by perf's rules, then adds
    /// the PLT entries. (perf 6.1 lets a sizeless `_init` run on over `.plt` and names
    /// stubs after it; here a sizeless symbol ends with its section and a stub is
    /// `NAME@plt` — but what of `.plt`, `[start, end)` of `plt`, has no name of its own
    /// (its header) is named as perf names it: after the sizeless symbol before it.)
    fn from_candidates(
        tables: Vec<Vec<Candidate>>,
        stubs: Vec<Candidate>,
        plt: Option<(u64, u64)>,
    ) -> Self {
        let mut kept: Vec<Candidate> = Vec::new();
        for t in tables {
            kept = Self::add_table(kept, t);
        }
        if let Some((p0, p1)) = plt {
            let i = kept.partition_point(|c| c.start < p0);
            if i > 0 && kept[i - 1].sizeless && kept.get(i).is_none_or(|c| c.start >= p1) {
                let before = &mut kept[i - 1];
                before.size = before.size.max(p1 - before.start);
            }
        }
        let mut syms: Vec<Sym> = kept
            .iter()
            .map(|c| Sym {
                start: c.start,
                end: c.start + c.size,
                name: perf_demangle(&c.name).into(),
            })
            .collect();
        for c in stubs {
            if kept.binary_search_by_key(&c.start, |k| k.start).is_err() {
                syms.push(Sym {
                    start: c.start,
                    end: c.start + c.size,
                    name: perf_demangle(&c.name).into(),
                });
            }
        }
        syms.sort_by_key(|s| s.start);
        let mut max_end = Vec::with_capacity(syms.len());
        let mut m = 0;
        for s in &syms {
            m = m.max(s.end);
            max_end.push(m);
        }
        PerfSymbols { syms, max_end }
    }

    /// The symbol at file offset `offset`: its name and start offset (the innermost,
    /// when symbols overlap).
    pub fn lookup(&self, offset: u64) -> Option<(&str, u64)> {
        let mut j = self.syms.partition_point(|s| s.start <= offset);
        while j > 0 {
            j -= 1;
            if self.max_end[j] <= offset {
                break;
            }
            let s = &self.syms[j];
            if offset < s.end {
                return Some((&s.name, s.start));
            }
        }
        None
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True when the file has no function symbols.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// A name as perf shows it: C++ demangled without its parameter list, Rust and OCaml
/// demangled; a PLT entry's `@plt` kept after the demangled name.
fn perf_demangle(name: &str) -> String {
    let (base, plt) = match name.strip_suffix("@plt") {
        Some(b) => (b, "@plt"),
        None => (name, ""),
    };
    if let Some(d) = perf_ocaml(base) {
        return format!("{d}{plt}");
    }
    let d = match crate::demangle_with_scheme(base) {
        Some((d, crate::Scheme::Cpp)) => {
            // perf leaves out a clone's suffix too: `f(int) [clone .cold]` is `f`.
            let t = crate::elf::strip_clone_suffixes(&d);
            crate::elf::strip_cpp_params(t).unwrap_or(t).to_owned()
        }
        Some((d, _)) => d,
        None => base.to_owned(),
    };
    format!("{d}{plt}")
}

/// perf's OCaml names: `camlModule__name_123` is `Module.name_123` (the id suffix
/// kept), `$xx` an escaped byte.
fn perf_ocaml(name: &str) -> Option<String> {
    let rest = name.strip_prefix("caml")?;
    if !rest.as_bytes().first().is_some_and(u8::is_ascii_uppercase) {
        return None;
    }
    let b = rest.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'_' if b.get(i + 1) == Some(&b'_') => {
                out.push(b'.');
                i += 2;
            }
            b'$' => match (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => {
                    out.push(b'$');
                    i += 1;
                }
            },
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// perf's `elf_sym__is_label`: a named STT_NOTYPE symbol in a section, not hidden or
/// internal (`_start` of ld.so is one); perf keeps those in executable sections.
fn is_label(s: &object::Symbol<'_, '_>) -> bool {
    match s.flags() {
        object::SymbolFlags::Elf { st_info, st_other } => {
            st_info.st_type() == object::elf::STT_NOTYPE
                && s.section_index().is_some()
                && !matches!(
                    st_other.visibility(),
                    object::elf::STV_HIDDEN | object::elf::STV_INTERNAL
                )
        }
        _ => false,
    }
}

/// Adds the function symbols (and labels) of `syms`, in executable sections of `from`,
/// at their file offsets.
fn collect<'d>(
    from: &Elf<'d>,
    syms: Box<dyn Iterator<Item = object::Symbol<'d, '_>> + '_>,
    offset_of: &dyn Fn(u64) -> Option<u64>,
    cands: &mut Vec<Candidate>,
) {
    // An executable section's end (file offset), `None` for another section. A debug
    // file's `.text` is NOBITS: its flags still say executable.
    let text_section = |idx| {
        let s = from.object().section_by_index(idx).ok()?;
        let exec = s.kind() == SectionKind::Text
            || matches!(s.flags(), object::SectionFlags::Elf { sh_flags, .. } if sh_flags.0 & 4 != 0);
        exec.then(|| {
            offset_of(s.address() + s.size().saturating_sub(1)).map_or(u64::MAX, |o| o + 1)
        })
    };
    for s in syms {
        if s.kind() != SymbolKind::Text && !is_label(&s) {
            continue;
        }
        let Some(idx) = s.section_index() else {
            continue;
        };
        let Some(limit) = text_section(idx) else {
            continue;
        };
        let Ok(name) = s.name() else { continue };
        if name.is_empty() {
            continue;
        }
        let Some(start) = offset_of(s.address()) else {
            continue;
        };
        cands.push(Candidate {
            start,
            size: s.size(),
            sizeless: s.size() == 0,
            limit,
            weak: s.is_weak(),
            global: s.is_global() && !s.is_weak(),
            name: name.to_owned(),
        });
    }
}

/// One symbol of each run of equal starts in `sorted` (sorted by start), chosen as perf
/// chooses among aliases: a later one replaces the one kept only when `better` says so.
pub(crate) fn best_per_start<T>(
    sorted: Vec<T>,
    start: impl Fn(&T) -> u64,
    better: impl Fn(&T, &T) -> bool,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(sorted.len());
    for c in sorted {
        match out.last_mut() {
            Some(k) if start(k) == start(&c) => {
                if better(&c, k) {
                    *k = c;
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// perf's `choose_best_symbol`: is `a` better than `b` (same start)?
fn better(a: &Candidate, b: &Candidate) -> bool {
    if (a.size > 0) != (b.size > 0) {
        return a.size > 0;
    }
    if a.weak != b.weak {
        return !a.weak;
    }
    if a.global != b.global {
        return a.global;
    }
    let underscores = |s: &str| s.bytes().take_while(|&c| c == b'_').count();
    let (ua, ub) = (underscores(&a.name), underscores(&b.name));
    if ua != ub {
        return ua < ub;
    }
    if a.name.len() != b.name.len() {
        return a.name.len() > b.name.len();
    }
    false
}

/// `NAME@plt` for each entry of `.plt` (after its 16-byte header) or `.plt.sec`, in the
/// order of `.rela.plt`, as perf synthesizes them (an IRELATIVE entry, without a
/// symbol, is `@plt`).
fn plt_symbols(
    elf: &Elf<'_>,
    offset_of: &dyn Fn(u64) -> Option<u64>,
    out: &mut Vec<Candidate>,
) -> Option<(u64, u64)> {
    let obj = elf.object();
    if !obj.is_64() || !obj.is_little_endian() {
        return None;
    }
    // `.plt`: its header (the lazy-binding trampoline every stub jumps to first) has no
    // name of its own.
    let header = obj
        .section_by_name(".plt")
        .and_then(|s| offset_of(s.address()).map(|o| (o, o + s.size())));
    let (plt, skip) = match obj.section_by_name(".plt.sec") {
        Some(s) => (s, 0),
        None => match obj.section_by_name(".plt") {
            Some(s) => (s, 16),
            None => return header,
        },
    };
    let Some(rela) = obj.section_by_name(".rela.plt").and_then(|s| s.data().ok()) else {
        return header;
    };
    let mut dynsyms: Vec<&str> = Vec::new();
    for s in obj.dynamic_symbols() {
        let i = s.index().0;
        if dynsyms.len() <= i {
            dynsyms.resize(i + 1, "");
        }
        dynsyms[i] = s.name().unwrap_or("");
    }
    let (Some(mut at), Some(start)) = (offset_of(plt.address() + skip), offset_of(plt.address()))
    else {
        return header;
    };
    let end = start + plt.size();
    // Elf64_Rela: r_offset, r_info (symbol index << 32 | type), r_addend.
    for r in rela.chunks_exact(24) {
        if at + 16 > end {
            break;
        }
        let info = u64::from_le_bytes(r[8..16].try_into().unwrap_or_default());
        let sym = (info >> 32) as usize;
        let name = dynsyms.get(sym).copied().unwrap_or("");
        out.push(Candidate {
            start: at,
            size: 16,
            limit: at + 16,
            weak: false,
            global: true,
            name: format!("{name}@plt"),
            sizeless: false,
        });
        at += 16;
    }
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(start: u64, size: u64, name: &str) -> Candidate {
        Candidate {
            start,
            size,
            limit: 0x10_0000,
            weak: false,
            global: true,
            name: name.into(),
            sizeless: size == 0,
        }
    }

    /// `ocamlopt`'s module start label shares its address with the first function:
    /// fixed up within `.symtab` it runs to the next function, past the first one's
    /// size, and wins by its longer name (perf 6.1 shows `Exn.code_begin`); the same
    /// two in `.dynsym` change nothing. Fixed up over both tables at once it would have
    /// lost (`camlExn__leaf_83`).
    #[test]
    fn tables_are_fixed_up_one_at_a_time() {
        let symtab = vec![
            cand(0x2e50, 0x81, "camlExn__leaf_83"),
            cand(0x2e50, 0, "camlExn__code_begin"),
            cand(0x2ee0, 0x12, "camlExn__middle_86"),
        ];
        let dynsym = vec![
            cand(0x2e50, 0, "camlExn__code_begin"),
            cand(0x2e50, 0x81, "camlExn__leaf_83"),
            cand(0x2ee0, 0x12, "camlExn__middle_86"),
        ];
        let s = PerfSymbols::from_candidates(vec![symtab, dynsym], Vec::new(), None);
        assert_eq!(s.lookup(0x2e50), Some(("Exn.code_begin", 0x2e50)));
        assert_eq!(s.lookup(0x2ecf), Some(("Exn.code_begin", 0x2e50)));
        assert_eq!(s.lookup(0x2ee0), Some(("Exn.middle_86", 0x2ee0)));
        // A sized function alone at its address keeps its own name and end.
        let s = PerfSymbols::from_candidates(
            vec![vec![cand(0x100, 0x10, "f"), cand(0x200, 0, "g")]],
            Vec::new(),
            None,
        );
        assert_eq!(s.lookup(0x108), Some(("f", 0x100)));
        assert_eq!(s.lookup(0x118), None);
    }
}
