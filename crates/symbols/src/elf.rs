//! ELF files: mapping, load segments and function symbols.

use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use object::{
    Object, ObjectKind, ObjectSection, ObjectSegment, ObjectSymbol, SegmentFlags, SymbolKind,
};

use crate::demangle::{demangle, demangle_with_scheme, Scheme};
use crate::error::{Error, Result};

/// A file mapped read-only into memory; [`Elf`] and [`SymbolTable`] borrow from it.
pub struct MappedFile {
    path: PathBuf,
    map: Mmap,
}

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        // SAFETY: the mapping is read-only and private. A file truncated underneath us could
        // still fault; binaries being traced are not rewritten in place (linkers and package
        // managers write a new inode), which is the same assumption perf and gdb make.
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        Ok(MappedFile { path, map })
    }

    /// Maps `path` if it is a regular file: opened non-blocking and checked through the
    /// opened descriptor, so a FIFO or device named by a recording (perf names whatever
    /// was mapped) can neither block nor be read.
    pub fn open_regular(path: impl AsRef<Path>) -> Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = path.as_ref().to_path_buf();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        if !meta.is_file() {
            return Err(Error::malformed(&path, "ELF file", "not a regular file"));
        }
        // SAFETY: as in `open`.
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        Ok(MappedFile { path, map })
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Parses the bytes as ELF.
    pub fn elf(&self) -> Result<Elf<'_>> {
        Elf::parse(&self.map, &self.path)
    }
}

/// A `PT_LOAD` program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// Link-time virtual address (`p_vaddr`).
    pub vaddr: u64,
    /// Size in memory (`p_memsz`).
    pub memsz: u64,
    /// File offset (`p_offset`).
    pub offset: u64,
    /// Size in the file (`p_filesz`).
    pub filesz: u64,
    /// Whether the segment is executable (`PF_X`).
    pub executable: bool,
}

impl LoadSegment {
    /// True if the link-time address `vaddr` lies in the segment.
    pub fn contains(&self, vaddr: u64) -> bool {
        vaddr >= self.vaddr && vaddr - self.vaddr < self.memsz
    }
}

/// The link-time address of the file offset `offset` (perf prints the frames of a
/// sampled call stack as file offsets), if an executable segment of `segments` holds it.
pub(crate) fn address_of_offset(segments: &[LoadSegment], offset: u64) -> Option<u64> {
    let seg = segments.iter().find(|s| {
        s.executable && offset >= s.offset && offset - s.offset < s.filesz.max(s.memsz)
    })?;
    Some(seg.vaddr.wrapping_add(offset - seg.offset))
}

/// The file offset of the link-time address `vaddr`, if an executable load segment holds
/// it in the file (the inverse of [`address_of_offset`]).
pub(crate) fn offset_of_address(segments: &[LoadSegment], vaddr: u64) -> Option<u64> {
    let seg = (segments.iter())
        .find(|s| s.executable && vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)?;
    Some(seg.offset + (vaddr - seg.vaddr))
}

/// A parsed ELF file borrowing its bytes.
pub struct Elf<'a> {
    path: &'a Path,
    file: object::File<'a>,
}

impl<'a> Elf<'a> {
    /// Parses `data` as ELF; `path` only names the file in errors.
    pub fn parse(data: &'a [u8], path: &'a Path) -> Result<Self> {
        let elf_err = |source| Error::Elf {
            path: path.to_path_buf(),
            source,
        };
        let format = object::FileKind::parse(data).map_err(elf_err)?;
        if !matches!(format, object::FileKind::Elf32 | object::FileKind::Elf64) {
            return Err(Error::malformed(
                path,
                "ELF header",
                format!("not ELF but {format:?}"),
            ));
        }
        let file = object::File::parse(data).map_err(elf_err)?;
        Ok(Elf { path, file })
    }

    /// The file's path (for messages).
    pub fn path(&self) -> &'a Path {
        self.path
    }

    /// The underlying `object` file, for anything this crate does not wrap.
    pub fn object(&self) -> &object::File<'a> {
        &self.file
    }

    /// True for `ET_DYN` (PIE executables and shared libraries), which load at a bias.
    pub fn is_position_independent(&self) -> bool {
        self.file.kind() == ObjectKind::Dynamic
    }

    /// The link-time address where the program starts (`e_entry`), if the file is a
    /// program: `ET_EXEC`, or `ET_DYN` with an interpreter (a PIE). Shared libraries
    /// have an `e_entry` too, which nothing runs; glibc's `libc.so.6`, which has an
    /// interpreter to print its version when run, is the one exception a caller must
    /// tell apart (by which file a process mapped first).
    pub fn program_entry(&self) -> Option<u64> {
        let program = match self.file.kind() {
            ObjectKind::Executable => true,
            ObjectKind::Dynamic => self.file.section_by_name(".interp").is_some(),
            _ => false,
        };
        (program && self.file.entry() != 0).then(|| self.file.entry())
    }

    /// The file offset of the link-time address `vaddr`, if an executable load segment
    /// holds it in the file.
    pub fn offset_of_address(&self, vaddr: u64) -> Option<u64> {
        offset_of_address(&self.load_segments(), vaddr)
    }

    /// The file named by `.gnu_debuglink`, where a stripped binary's symbols and DWARF live.
    pub fn debuglink(&self) -> Option<String> {
        let (name, _crc) = self.file.gnu_debuglink().ok().flatten()?;
        Some(String::from_utf8_lossy(name).into_owned())
    }

    /// The GNU build id, if any.
    pub fn build_id(&self) -> Option<&'a [u8]> {
        self.file.build_id().ok().flatten()
    }

    /// The `PT_LOAD` segments in file order.
    pub fn load_segments(&self) -> Vec<LoadSegment> {
        self.file
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                LoadSegment {
                    vaddr: s.address(),
                    memsz: s.size(),
                    offset,
                    filesz,
                    executable: matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0),
                }
            })
            .collect()
    }

    /// The load segment containing the link-time address `vaddr`.
    pub fn segment_of(&self, vaddr: u64) -> Result<LoadSegment> {
        self.load_segments()
            .into_iter()
            .find(|s| s.contains(vaddr))
            .ok_or_else(|| Error::NoSegment {
                path: self.path.to_path_buf(),
                address: vaddr,
            })
    }

    /// A section's link-time address, if the section exists.
    pub fn section_address(&self, name: &str) -> Option<u64> {
        self.file.section_by_name(name).map(|s| s.address())
    }

    /// Every function symbol's raw name and link-time address (`.symtab` and `.dynsym`,
    /// unsorted, exported ones twice), without the demangling [`Elf::symbols`] does for
    /// lookups by name: node's 200 000 symbols took 15 s to demangle in a debug build,
    /// for a caller that needs only where each function starts.
    pub fn function_starts(&self) -> Vec<(&'a str, u64)> {
        let all = self.file.symbols().chain(self.file.dynamic_symbols());
        all.filter(|s| {
            s.kind() == SymbolKind::Text && s.is_definition() && s.section_index().is_some()
        })
        .filter_map(|s| Some((s.name().ok().filter(|n| !n.is_empty())?, s.address())))
        .collect()
    }

    /// The function symbols from `.symtab` and `.dynsym`, merged.
    ///
    /// Fails with [`Error::NoSymbols`] (naming the `.gnu_debuglink` file, if any) when there
    /// are none.
    pub fn symbols(&self) -> Result<SymbolTable<'a>> {
        let mut syms: Vec<FunctionSymbol<'a>> = Vec::new();
        let all = self.file.symbols().chain(self.file.dynamic_symbols());
        for s in all {
            if s.kind() != SymbolKind::Text || !s.is_definition() || s.section_index().is_none() {
                continue;
            }
            let Ok(name) = s.name() else { continue };
            if name.is_empty() {
                continue;
            }
            syms.push(FunctionSymbol::new(
                name,
                s.address(),
                s.size(),
                s.is_global(),
            ));
        }
        if syms.is_empty() {
            return Err(Error::NoSymbols {
                path: self.path.to_path_buf(),
                debuglink: self.debuglink(),
            });
        }
        Ok(SymbolTable::new(self.path, syms))
    }
}

/// A function symbol.
#[derive(Clone, Debug)]
pub struct FunctionSymbol<'a> {
    name: &'a str,
    demangled: Cow<'a, str>,
    /// The demangled name without its C++ parameter list, when that differs.
    short: Option<String>,
    address: u64,
    size: u64,
    global: bool,
}

impl<'a> FunctionSymbol<'a> {
    fn new(name: &'a str, address: u64, size: u64, global: bool) -> Self {
        let (demangled, short) = match demangle_with_scheme(name) {
            Some((d, Scheme::Cpp)) => {
                let short = strip_cpp_params(&d).map(str::to_owned);
                (Cow::Owned(d), short)
            }
            Some((d, _)) => (Cow::Owned(d), None),
            None => (demangle(name), None),
        };
        FunctionSymbol {
            name,
            demangled,
            short,
            address,
            size,
            global,
        }
    }

    /// The raw (mangled) name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The demangled name (the raw name if it is not mangled).
    pub fn demangled(&self) -> &str {
        &self.demangled
    }

    /// The demangled name without a C++ parameter list (`ns::f` for `ns::f(int)`).
    pub fn short_name(&self) -> &str {
        self.short.as_deref().unwrap_or(&self.demangled)
    }

    /// Link-time start address.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Size in bytes, 0 when the symbol table does not say.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// True for `STB_GLOBAL`/`STB_WEAK` symbols.
    pub fn is_global(&self) -> bool {
        self.global
    }
}

/// Removes the trailing `(params)` and cv/ref qualifiers from a demangled C++ name.
pub(crate) fn strip_cpp_params(d: &str) -> Option<&str> {
    let mut s = d.trim_end();
    loop {
        let before = s;
        for q in [" const", " volatile", " &&", " &", " noexcept"] {
            s = s.strip_suffix(q).unwrap_or(s);
        }
        if s == before {
            break;
        }
    }
    strip_param_list(s)
}

/// Removes the trailing `(params)` of a demangled C++ name, matching parentheses from
/// the end; `None` when it does not end with one, or the list is all there is.
pub(crate) fn strip_param_list(s: &str) -> Option<&str> {
    if !s.ends_with(')') {
        return None;
    }
    let mut depth = 0i32;
    for (i, c) in s.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return (i > 0).then(|| &s[..i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Drops the `[clone .cold]`-style suffixes of a demangled C++ name (GCC's split-off or
/// specialised copies of a function): perf names such a part as its function.
pub(crate) fn strip_clone_suffixes(mut s: &str) -> &str {
    while let Some(i) = s.rfind(" [clone ").filter(|_| s.ends_with(']')) {
        s = &s[..i];
    }
    s
}

/// Function symbols sorted by address, with name and containment lookups.
pub struct SymbolTable<'a> {
    path: &'a Path,
    /// Sorted by (address, local after global, name).
    syms: Vec<FunctionSymbol<'a>>,
    /// End of each symbol; zero-size symbols extend to the next symbol's start.
    ends: Vec<u64>,
    /// Running maximum of `ends`, so containment search can stop early.
    max_end: Vec<u64>,
    /// Indices into `syms`, sorted by raw name.
    by_name: Vec<u32>,
    /// Indices into `syms`, sorted by demangled name.
    by_demangled: Vec<u32>,
    /// Indices into `syms` with a distinct short name, sorted by it.
    by_short: Vec<u32>,
}

impl<'a> SymbolTable<'a> {
    fn new(path: &'a Path, mut syms: Vec<FunctionSymbol<'a>>) -> Self {
        syms.sort_by(|a, b| (a.address, !a.global, a.name).cmp(&(b.address, !b.global, b.name)));
        // `.symtab` and `.dynsym` repeat the exported functions.
        syms.dedup_by(|b, a| a.address == b.address && a.name == b.name);
        let n = syms.len();
        let mut ends = Vec::with_capacity(n);
        for (i, s) in syms.iter().enumerate() {
            let end = if s.size > 0 {
                s.address.saturating_add(s.size)
            } else {
                syms[i + 1..]
                    .iter()
                    .map(|t| t.address)
                    .find(|&a| a > s.address)
                    .unwrap_or(s.address.saturating_add(1))
            };
            ends.push(end);
        }
        let mut max_end = Vec::with_capacity(n);
        let mut m = 0;
        for &e in &ends {
            m = m.max(e);
            max_end.push(m);
        }
        let idx = |f: &dyn Fn(&FunctionSymbol<'a>) -> bool| -> Vec<u32> {
            (0..n as u32).filter(|&i| f(&syms[i as usize])).collect()
        };
        let mut by_name = idx(&|_| true);
        by_name.sort_by(|&a, &b| syms[a as usize].name.cmp(syms[b as usize].name));
        let mut by_demangled = idx(&|s| s.demangled != s.name);
        by_demangled.sort_by(|&a, &b| syms[a as usize].demangled.cmp(&syms[b as usize].demangled));
        let mut by_short = idx(&|s| s.short.is_some());
        by_short.sort_by(|&a, &b| {
            syms[a as usize]
                .short_name()
                .cmp(syms[b as usize].short_name())
        });
        SymbolTable {
            path,
            syms,
            ends,
            max_end,
            by_name,
            by_demangled,
            by_short,
        }
    }

    /// All function symbols, by address.
    pub fn functions(&self) -> &[FunctionSymbol<'a>] {
        &self.syms
    }

    /// The file the table came from.
    pub fn path(&self) -> &'a Path {
        self.path
    }

    /// Every symbol whose raw, demangled or short (no C++ parameters) name is `name`;
    /// global symbols first.
    pub fn lookup_all(&self, name: &str) -> Vec<&FunctionSymbol<'a>> {
        let search = |index: &[u32], key: &dyn for<'s> Fn(&'s FunctionSymbol<'a>) -> &'s str| {
            let lo = index.partition_point(|&i| key(&self.syms[i as usize]) < name);
            index[lo..]
                .iter()
                .copied()
                .take_while(|&i| key(&self.syms[i as usize]) == name)
                .collect::<Vec<u32>>()
        };
        let mut out = search(&self.by_name, &|s| s.name);
        if out.is_empty() {
            out = search(&self.by_demangled, &|s| s.demangled());
        }
        if out.is_empty() {
            out = search(&self.by_short, &|s| s.short_name());
        }
        out.sort_unstable();
        out.dedup();
        let mut v: Vec<&FunctionSymbol<'a>> = out.iter().map(|&i| &self.syms[i as usize]).collect();
        v.sort_by_key(|s| !s.global);
        v
    }

    /// The symbol named `name` (raw or demangled), preferring global ones; otherwise
    /// [`Error::SymbolNotFound`] with up to three suggestions.
    pub fn lookup(&self, name: &str) -> Result<&FunctionSymbol<'a>> {
        match self.lookup_all(name).first() {
            Some(s) => Ok(s),
            None => Err(Error::SymbolNotFound {
                path: self.path.to_path_buf(),
                name: name.to_owned(),
                suggestions: self.suggest(name, 3),
            }),
        }
    }

    /// The innermost function containing the link-time address `addr`.
    pub fn containing(&self, addr: u64) -> Option<&FunctionSymbol<'a>> {
        let mut i = self.syms.partition_point(|s| s.address <= addr);
        let mut hit: Option<usize> = None;
        while i > 0 {
            i -= 1;
            if self.max_end[i] <= addr {
                break;
            }
            if let Some(h) = hit {
                // Keep walking only through aliases at the hit's address, so the preferred
                // (global, first by name) alias wins.
                if self.syms[i].address != self.syms[h].address {
                    break;
                }
            }
            if addr < self.ends[i] {
                hit = Some(i);
            }
        }
        hit.map(|h| &self.syms[h])
    }

    /// Up to `limit` distinct display names close to `query`, best first (for "did you
    /// mean" and for a fuzzy picker).
    ///
    /// Case-insensitive substring matches rank first (shortest first), then names within an
    /// edit distance of about a third of the query's length, compared against both the whole
    /// demangled name and its last path component.
    pub fn suggest(&self, query: &str, limit: usize) -> Vec<String> {
        let q: Vec<char> = query.to_lowercase().chars().collect();
        if q.is_empty() || limit == 0 {
            return Vec::new();
        }
        let qs: String = q.iter().collect();
        let max_dist = (q.len() / 3).max(1);
        let mut scored: Vec<(usize, usize, &str)> = Vec::new();
        for s in &self.syms {
            let cand = s.short_name();
            let lower = cand.to_lowercase();
            if lower.contains(&qs) {
                scored.push((0, cand.len(), cand));
                continue;
            }
            let last = last_component(&lower);
            let d = [lower.as_str(), last]
                .iter()
                .filter_map(|c| bounded_levenshtein(&q, c, max_dist))
                .min();
            if let Some(d) = d {
                scored.push((1 + d, cand.len(), cand));
            }
        }
        scored.sort();
        let mut out: Vec<String> = Vec::new();
        for (_, _, c) in scored {
            if !out.iter().any(|o| o == c) {
                out.push(c.to_owned());
                if out.len() == limit {
                    break;
                }
            }
        }
        out
    }
}

fn last_component(s: &str) -> &str {
    let a = s.rfind("::").map(|i| i + 2).unwrap_or(0);
    let b = s.rfind('.').map(|i| i + 1).unwrap_or(0);
    &s[a.max(b)..]
}

/// Edit distance (optimal string alignment: a swap of neighbours counts once) between `a`
/// and `b`, or `None` once it must exceed `max`.
fn bounded_levenshtein(a: &[char], b: &str, max: usize) -> Option<usize> {
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        let mut row_min = cur[0];
        for (j, cb) in b.iter().enumerate() {
            let mut d = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
            if i > 0 && j > 0 && *ca == b[j - 1] && a[i - 1] == *cb {
                d = d.min(prev2[j - 1] + 1);
            }
            cur[j + 1] = d;
            row_min = row_min.min(d);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    let d = prev[b.len()];
    (d <= max).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_params_are_stripped() {
        assert_eq!(strip_cpp_params("ns::f(int, char)"), Some("ns::f"));
        assert_eq!(strip_cpp_params("S::get() const &"), Some("S::get"));
        assert_eq!(
            strip_cpp_params("(anonymous namespace)::g(std::pair<int, int>)"),
            Some("(anonymous namespace)::g")
        );
        assert_eq!(strip_cpp_params("plain"), None);
    }

    #[test]
    fn levenshtein() {
        let q: Vec<char> = "mian".chars().collect();
        assert_eq!(bounded_levenshtein(&q, "main", 2), Some(1));
        assert_eq!(bounded_levenshtein(&q, "xyz", 5), Some(4));
        assert_eq!(bounded_levenshtein(&q, "mainx", 1), None);
        assert_eq!(bounded_levenshtein(&q, "mian", 0), Some(0));
    }

    fn table(syms: &[(&'static str, u64, u64)]) -> SymbolTable<'static> {
        let v = syms
            .iter()
            .map(|&(n, a, s)| FunctionSymbol::new(n, a, s, !n.starts_with("local")))
            .collect();
        SymbolTable::new(Path::new("t"), v)
    }

    #[test]
    fn containment_and_aliases() {
        let t = table(&[
            ("big", 0x100, 0x100),
            ("inner", 0x140, 0x10),
            ("local_alias", 0x300, 0x10),
            ("alias", 0x300, 0x10),
            ("nosize", 0x400, 0),
            ("after", 0x480, 0x10),
        ]);
        let c = |a| t.containing(a).map(|s| s.name());
        assert_eq!(c(0xff), None);
        assert_eq!(c(0x100), Some("big"));
        assert_eq!(c(0x145), Some("inner"));
        assert_eq!(c(0x150), Some("big"));
        assert_eq!(c(0x1ff), Some("big"));
        assert_eq!(c(0x200), None);
        assert_eq!(c(0x305), Some("alias"));
        assert_eq!(c(0x47f), Some("nosize"));
        assert_eq!(c(0x48f), Some("after"));
        assert_eq!(c(0x490), None);
        assert_eq!(t.lookup("alias").map(|s| s.address()).ok(), Some(0x300));
        let e = t.lookup("alais").unwrap_err().to_string();
        assert!(e.contains("did you mean `alias`"), "{e}");
    }
}
