//! Function ranges of a (possibly stripped) ELF file, for naming code addresses that
//! perf could not name.
//!
//! A stripped binary (Debian's gzip, git, the sqlite3 shell) keeps no `.symtab`, so perf
//! names every sampled address on its own (`[unknown @ 0x…]`) and a trace gets one slice
//! name per *address*. Two sources still know where functions begin and end:
//!
//! 1. a separate debug file (`/usr/lib/debug/.build-id/xx/yyyy.debug`, or the file named
//!    by `.gnu_debuglink`), whose `.symtab` has the real names;
//! 2. the binary's own `.eh_frame`, which every x86-64 binary keeps for unwinding: one FDE
//!    per function (and per split-off `.cold` part), giving its address range but no name.
//!
//! [`FunctionRanges`] merges both (symbols win) and names an FDE-only function after its
//! file and start address, `gzip+0x1a2b0`: stable across samples and runs of the same
//! binary, and findable with `objdump --start-address`.

use std::borrow::Cow;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

use crate::elf::{Elf, LoadSegment, MappedFile};
use crate::error::{Error, Result};

/// Where Debian (and most distributions) install separate debug files.
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// One function: a link-time address range and, when a symbol table knows it, its name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    name: Option<Box<str>>,
}

/// Where a [`FunctionRanges`] got its names from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameSource {
    /// A separate debug file with a symbol table (found by build id or `.gnu_debuglink`).
    DebugFile(PathBuf),
    /// Only the file's own `.eh_frame`: functions are named `FILE+0xSTART`.
    EhFrame,
}

/// A function found for an address: its link-time start and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundFunction<'a> {
    /// Link-time start address.
    pub start: u64,
    /// The symbol's raw name, or `FILE+0xSTART` when only `.eh_frame` knows the function.
    pub name: Cow<'a, str>,
}

/// The functions of one ELF file, by link-time address.
#[derive(Clone, Debug)]
pub struct FunctionRanges {
    /// The file's name without directories, for `gzip+0x…` names.
    base: String,
    /// Sorted by start; symbols first, then FDE ranges that no symbol overlaps.
    ranges: Vec<Range>,
    segments: Vec<LoadSegment>,
    source: NameSource,
    build_id: Option<Vec<u8>>,
    unwind: Option<Unwind>,
}

/// An x86-64 file's `.eh_frame`, kept to ask where a function keeps its frame pointer.
#[derive(Clone, Debug)]
struct Unwind {
    data: Vec<u8>,
    eh_frame: u64,
    text: Option<u64>,
    got: Option<u64>,
    /// `.eh_frame_hdr`'s bytes and address: its sorted table finds a pc's FDE by binary
    /// search, where `.eh_frame` alone is a linear scan (seconds per lookup in a library
    /// the size of librustc_driver, paid once per distinct leaf pc).
    hdr: Option<(Vec<u8>, u64)>,
}

impl FunctionRanges {
    /// Reads `path`'s function ranges: symbols from its debug file if one is installed
    /// (and trusted, see [`find_debug_file`]), FDE ranges from its `.eh_frame`.
    pub fn load(path: &Path) -> Result<Self> {
        let file = MappedFile::open_regular(path)?;
        Self::from_elf(&file.elf()?)
    }

    /// [`FunctionRanges::load`] of a file already mapped and parsed.
    pub(crate) fn from_elf(elf: &Elf<'_>) -> Result<Self> {
        let mut ranges = Vec::new();
        let mut source = NameSource::EhFrame;
        if let Some(debug) = find_debug_file(elf) {
            if let Ok(dfile) = MappedFile::open_regular(&debug) {
                if let Ok(delf) = dfile.elf() {
                    if let Ok(syms) = delf.symbols() {
                        let funcs = syms.functions();
                        for (i, f) in funcs.iter().enumerate() {
                            let end = if f.size() > 0 {
                                f.address().saturating_add(f.size())
                            } else {
                                funcs[i + 1..]
                                    .iter()
                                    .map(|g| g.address())
                                    .find(|&a| a > f.address())
                                    .unwrap_or(f.address().saturating_add(1))
                            };
                            ranges.push(Range {
                                start: f.address(),
                                end,
                                name: Some(f.name().into()),
                            });
                        }
                        source = NameSource::DebugFile(debug);
                    }
                }
            }
        }
        let fdes = eh_frame_ranges(elf)?;
        let build_id = elf.build_id().map(<[u8]>::to_vec);
        let obj = elf.object();
        let unwind = (obj.architecture() == object::Architecture::X86_64)
            .then(|| obj.section_by_name(".eh_frame"))
            .flatten()
            .and_then(|sec| {
                Some(Unwind {
                    data: sec.data().ok()?.to_vec(),
                    eh_frame: sec.address(),
                    text: obj.section_by_name(".text").map(|t| t.address()),
                    got: obj.section_by_name(".got").map(|t| t.address()),
                    hdr: obj
                        .section_by_name(".eh_frame_hdr")
                        .and_then(|h| Some((h.data().ok()?.to_vec(), h.address()))),
                })
            });
        Ok(Self::from_parts(
            elf.path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            ranges,
            fdes,
            elf.load_segments(),
            source,
        )
        .with_build_id(build_id)
        .with_unwind(unwind))
    }

    fn from_parts(
        base: String,
        mut ranges: Vec<Range>,
        fdes: Vec<(u64, u64)>,
        segments: Vec<LoadSegment>,
        source: NameSource,
    ) -> Self {
        // Several symbols at one address (aliases) keep the first, as sorted by the table
        // (global before local); ranges inside another (a local label) are kept too and
        // found first by the innermost search below.
        ranges.sort_by(|a, b| (a.start, b.end).cmp(&(b.start, a.end)));
        ranges.dedup_by(|b, a| a.start == b.start && a.end == b.end);
        let named = ranges.clone();
        let covered = |start: u64| {
            let i = named.partition_point(|r| r.start <= start);
            named[..i].iter().rev().take(64).any(|r| r.end > start)
        };
        for (start, end) in fdes {
            if end > start && !covered(start) {
                ranges.push(Range {
                    start,
                    end,
                    name: None,
                });
            }
        }
        ranges.sort_by(|a, b| (a.start, b.end).cmp(&(b.start, a.end)));
        FunctionRanges {
            base,
            ranges,
            segments,
            source,
            build_id: None,
            unwind: None,
        }
    }

    fn with_unwind(mut self, unwind: Option<Unwind>) -> Self {
        self.unwind = unwind;
        self
    }

    /// Whether, at the link-time address `addr`, the function has set up its own frame
    /// (x86-64 only). `Some(false)` when its CFA is still `rsp`-based and `rbp` not yet
    /// saved: `rbp` is then its caller's frame pointer, and a frame-pointer walk from
    /// here goes straight to the caller's caller (GCC's leaf functions, any function's
    /// first instruction). `None` when `.eh_frame` does not say.
    pub fn frame_set_up_at(&self, addr: u64) -> Option<bool> {
        use gimli::{CfaRule, RegisterRule, UnwindSection, X86_64};
        let u = self.unwind.as_ref()?;
        let eh = gimli::EhFrame::new(&u.data[..], gimli::LittleEndian);
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(u.eh_frame);
        if let Some(t) = u.text {
            bases = bases.set_text(t);
        }
        if let Some(g) = u.got {
            bases = bases.set_got(g);
        }
        let mut ctx = gimli::UnwindContext::new();
        let parsed_hdr = u.hdr.as_ref().and_then(|(data, address)| {
            let hdr_bases = bases.clone().set_eh_frame_hdr(*address);
            gimli::EhFrameHdr::new(&data[..], gimli::LittleEndian)
                .parse(&hdr_bases, 8)
                .ok()
                .map(|parsed| (parsed, hdr_bases))
        });
        let row = match parsed_hdr
            .as_ref()
            .and_then(|(parsed, hdr_bases)| Some((parsed.table()?, hdr_bases)))
        {
            Some((table, hdr_bases)) => table
                .unwind_info_for_address(
                    &eh,
                    hdr_bases,
                    &mut ctx,
                    addr,
                    gimli::EhFrame::cie_from_offset,
                )
                .ok()?,
            None => eh
                .unwind_info_for_address(&bases, &mut ctx, addr, gimli::EhFrame::cie_from_offset)
                .ok()?,
        };
        let rsp_based = matches!(row.cfa(), CfaRule::RegisterAndOffset { register, .. } if *register == X86_64::RSP);
        let rbp_kept = matches!(
            row.register(X86_64::RBP),
            None | Some(RegisterRule::Undefined | RegisterRule::SameValue)
        );
        Some(!(rsp_based && rbp_kept))
    }

    fn with_build_id(mut self, id: Option<Vec<u8>>) -> Self {
        self.build_id = id;
        self
    }

    /// The file's GNU build id, if it has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// Where the names come from.
    pub fn source(&self) -> &NameSource {
        &self.source
    }

    /// Number of functions known.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True when neither a debug file nor `.eh_frame` gave any function.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Every range's start and end, for callers cutting code into regions named alike.
    pub fn bounds(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranges.iter().flat_map(|r| [r.start, r.end])
    }

    /// The link-time address of the file offset `offset` (perf prints the frames of a
    /// sampled call stack as file offsets), if an executable segment holds it.
    pub fn address_of_offset(&self, offset: u64) -> Option<u64> {
        crate::elf::address_of_offset(&self.segments, offset)
    }

    /// The file offset where the function named `name` (by its raw symbol name, as
    /// [`FunctionRanges::function_at`] gives it) starts, if a symbol of that name starts
    /// in an executable segment. A linear scan: for a few names per decode.
    pub fn offset_of_function(&self, name: &str) -> Option<u64> {
        let start = self
            .ranges
            .iter()
            .find(|r| r.name.as_deref() == Some(name))?
            .start;
        crate::elf::offset_of_address(&self.segments, start)
    }

    /// Whether a function contains the link-time address `addr`: [`Self::function_at`]
    /// without making the name (a range without a symbol formats one).
    pub fn contains(&self, addr: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.start <= addr);
        self.ranges[..i].iter().rev().take(64).any(|r| addr < r.end)
    }

    /// The innermost function containing the link-time address `addr`.
    pub fn function_at(&self, addr: u64) -> Option<FoundFunction<'_>> {
        let i = self.ranges.partition_point(|r| r.start <= addr);
        // Nested ranges are few (a symbol inside another); look back a little.
        let r = self.ranges[..i]
            .iter()
            .rev()
            .take(64)
            .filter(|r| addr < r.end)
            .min_by_key(|r| r.end - r.start)?;
        Some(FoundFunction {
            start: r.start,
            name: match &r.name {
                Some(n) => Cow::Borrowed(n),
                None => Cow::Owned(format!("{}+{:#x}", self.base, r.start)),
            },
        })
    }
}

/// The `[start, end)` link-time ranges of the FDEs in `elf`'s `.eh_frame`.
///
/// A malformed entry ends the walk (the ranges before it are kept): unwinding tables of
/// real binaries are well-formed, and a partial table still names what it covers.
pub fn eh_frame_ranges(elf: &Elf<'_>) -> Result<Vec<(u64, u64)>> {
    use gimli::UnwindSection;
    let obj = elf.object();
    let Some(section) = obj.section_by_name(".eh_frame") else {
        return Ok(Vec::new());
    };
    let data = section.data().map_err(|source| Error::Elf {
        path: elf.path().to_path_buf(),
        source,
    })?;
    let endian = if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut eh = gimli::EhFrame::new(data, endian);
    eh.set_address_size(if obj.is_64() { 8 } else { 4 });
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = obj.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|eh, bases, off| eh.cie_from_offset(bases, off)) else {
            continue;
        };
        let start = fde.initial_address();
        out.push((start, start.saturating_add(fde.len())));
    }
    out.sort_unstable();
    Ok(out)
}

/// The installed debug file of `elf`, if a trusted one exists: by build id
/// (`/usr/lib/debug/.build-id/xx/yyyy.debug`, what Debian's `-dbgsym` and `-dbg`
/// packages install), else by `.gnu_debuglink` (`/usr/lib/debug/DIR/NAME`, `DIR/NAME`,
/// `DIR/.debug/NAME`, where DIR is the binary's directory).
///
/// ptscope runs as root: a file qualifies only if root or the binary's owner owns it and
/// neither group nor others can write it or its directory, and it carries the same
/// build id as the binary when both have one (a debug file of another build would give
/// wrong names).
pub fn find_debug_file(elf: &Elf<'_>) -> Option<PathBuf> {
    let owner = fs::metadata(elf.path()).ok().map(|m| m.uid());
    let build_id = elf.build_id();
    let mut candidates = Vec::new();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        candidates.push(
            Path::new(DEBUG_ROOT)
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..])),
        );
    }
    if let Some(link) = elf
        .debuglink()
        .filter(|l| !l.contains('/') && !l.is_empty())
    {
        let dir = fs::canonicalize(elf.path())
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        if let Some(dir) = dir {
            let rel = dir.strip_prefix("/").unwrap_or(&dir);
            candidates.push(Path::new(DEBUG_ROOT).join(rel).join(&link));
            candidates.push(dir.join(&link));
            candidates.push(dir.join(".debug").join(&link));
        }
    }
    candidates.into_iter().find(|c| {
        trusted(c, owner)
            && (build_id.is_none()
                || MappedFile::open_regular(c)
                    .ok()
                    .and_then(|f| f.elf().ok().map(|e| e.build_id() == build_id))
                    .unwrap_or(false))
    })
}

/// Owned by root or `owner`, a regular file, and neither it nor its directory writable
/// by group or others.
fn trusted(path: &Path, owner: Option<u32>) -> bool {
    let ok = |m: &fs::Metadata| (m.uid() == 0 || Some(m.uid()) == owner) && m.mode() & 0o022 == 0;
    let Ok(meta) = fs::metadata(path) else {
        return false;
    };
    let dir_ok = path
        .parent()
        .and_then(|d| fs::metadata(d).ok())
        .is_some_and(|m| ok(&m));
    meta.is_file() && ok(&meta) && dir_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(vaddr: u64, offset: u64, size: u64) -> LoadSegment {
        LoadSegment {
            vaddr,
            memsz: size,
            offset,
            filesz: size,
            executable: true,
        }
    }

    #[test]
    fn symbols_win_and_fdes_fill_the_gaps() {
        let r = FunctionRanges::from_parts(
            "prog".into(),
            vec![Range {
                start: 0x1000,
                end: 0x1100,
                name: Some("known".into()),
            }],
            vec![(0x1000, 0x1100), (0x1100, 0x1180), (0x1200, 0x1300)],
            vec![seg(0x401000, 0x1000, 0x1000)],
            NameSource::EhFrame,
        );
        let n = |a| r.function_at(a).map(|f| (f.start, f.name.into_owned()));
        assert_eq!(n(0x1050), Some((0x1000, "known".into())));
        assert_eq!(n(0x117f), Some((0x1100, "prog+0x1100".into())));
        assert_eq!(n(0x1180), None);
        assert_eq!(n(0x12ff), Some((0x1200, "prog+0x1200".into())));
        assert_eq!(r.address_of_offset(0x1010), Some(0x401010));
        assert_eq!(r.address_of_offset(0x10), None);
        assert_eq!(r.address_of_offset(0x5000), None);
    }

    /// The `.eh_frame_hdr` table must answer as the linear `.eh_frame` scan does, at
    /// the first, second and last byte of FDEs and just past them, in the real libc.
    #[test]
    fn the_hdr_table_answers_as_the_linear_scan_in_libc() {
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let with_hdr = FunctionRanges::load(libc).expect("libc loads");
        assert!(
            with_hdr.unwind.as_ref().is_some_and(|u| u.hdr.is_some()),
            "libc has an .eh_frame_hdr"
        );
        let mut linear = with_hdr.clone();
        if let Some(u) = linear.unwind.as_mut() {
            u.hdr = None;
        }
        let file = MappedFile::open_regular(libc).expect("libc opens");
        let fdes = eh_frame_ranges(&file.elf().expect("libc parses")).expect("libc's FDEs");
        assert!(fdes.len() > 1000, "{} FDEs", fdes.len());
        let (mut set_up, mut not) = (0, 0);
        // Every 32nd FDE: the linear scan is the slow side.
        for &(start, end) in fdes.iter().step_by(32) {
            for a in [start, start + 1, end.saturating_sub(1), end] {
                let got = with_hdr.frame_set_up_at(a);
                assert_eq!(got, linear.frame_set_up_at(a), "at {a:#x}");
                match got {
                    Some(true) => set_up += 1,
                    Some(false) => not += 1,
                    None => {}
                }
            }
        }
        // Both answers occur, so the comparison above compared something.
        assert!(set_up > 0 && not > 0, "{set_up} set up, {not} not");
    }
}
