//! Functions inlined at a code address, from DWARF: what `perf report --inline` and
//! samply show as frames of their own, read in-process instead of through perf's
//! `addr2line` child (one process per DSO, text over pipes: 42.8 CPU-s of `perf script`
//! on a `make -j2` recording that takes 0.51 s with `--no-inline`, and on node's a
//! lookup that never answered).
//!
//! A compiler that inlines `mix` into `step` and `step` into `work` leaves one machine
//! function, `work`, whose symbol perf names; DWARF keeps the calls as nested
//! `DW_TAG_inlined_subroutine` entries with their address ranges. [`InlineInfo::inlined_at`]
//! lists the ones holding an address, outermost first, each with where that inlined copy
//! begins: a sampled stack's frame `work` becomes `work` → `step` → `mix`.
//!
//! DWARF is read from the file itself or from its separate debug file (found by build id
//! or `.gnu_debuglink`, with the same trust rules as names: [`crate::find_debug_file`]);
//! units are parsed lazily, per address looked up (the `addr2line` crate).

use std::path::Path;
use std::sync::Arc;

use object::{Object, ObjectSection};

use crate::elf::{Elf, LoadSegment, MappedFile};
use crate::error::{Error, Result};

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// One inlined call holding an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inlined {
    /// The inlined function's name as DWARF has it (the linkage name when there is one,
    /// so C++ and Rust names demangle like symbols).
    pub name: String,
    /// The link-time address where this inlined copy begins (its lowest address): the
    /// same for every address inside the copy, different for another copy of the same
    /// function, so it tells one inlined call from the next as a call site does.
    pub entry: u64,
}

/// The inlined calls of one ELF file, by address.
pub struct InlineInfo {
    context: addr2line::Context<Reader>,
    segments: Vec<LoadSegment>,
    build_id: Option<Vec<u8>>,
}

impl std::fmt::Debug for InlineInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineInfo")
            .field("segments", &self.segments)
            .finish_non_exhaustive()
    }
}

impl InlineInfo {
    /// Reads `path`'s DWARF (its own, else its trusted debug file's). `Ok(None)` when
    /// neither has `.debug_info`: nothing is known to be inlined.
    pub fn load(path: &Path) -> Result<Option<Self>> {
        let file = MappedFile::open_regular(path)?;
        let elf = file.elf()?;
        let segments = elf.load_segments();
        let build_id = elf.build_id().map(<[u8]>::to_vec);
        if has_debug_info(&elf) {
            return Ok(Some(Self::from_elf(&elf, segments, build_id)?));
        }
        let Some(debug) = crate::functions::find_debug_file(&elf) else {
            return Ok(None);
        };
        let dfile = MappedFile::open_regular(&debug)?;
        let delf = dfile.elf()?;
        if !has_debug_info(&delf) {
            return Ok(None);
        }
        // A debug file's sections sit at the binary's addresses; the binary's segments
        // map its file offsets to them.
        Ok(Some(Self::from_elf(&delf, segments, build_id)?))
    }

    fn from_elf(
        elf: &Elf<'_>,
        segments: Vec<LoadSegment>,
        build_id: Option<Vec<u8>>,
    ) -> Result<Self> {
        let path = elf.path();
        let obj = elf.object();
        let endian = crate::dwarf::endian(obj);
        let load = |id: gimli::SectionId| -> Result<Reader> {
            let data: Arc<[u8]> = Arc::from(crate::dwarf::section_data(obj, path, id)?.as_ref());
            Ok(gimli::EndianArcSlice::new(data, endian))
        };
        let dwarf = gimli::Dwarf::load(load)?;
        let context = addr2line::Context::from_dwarf(dwarf).map_err(|source| Error::Dwarf {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(InlineInfo {
            context,
            segments,
            build_id,
        })
    }

    /// The binary's GNU build id, if it has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// The link-time address of the file offset `offset` (how perf prints a sampled
    /// stack's frames), if an executable segment holds it.
    pub fn address_of_offset(&self, offset: u64) -> Option<u64> {
        let seg = self.segments.iter().find(|s| {
            s.executable && offset >= s.offset && offset - s.offset < s.filesz.max(s.memsz)
        })?;
        Some(seg.vaddr.wrapping_add(offset - seg.offset))
    }

    /// The file offset of the link-time address `addr` (the inverse of
    /// [`InlineInfo::address_of_offset`]).
    pub fn offset_of_address(&self, addr: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .find(|s| s.executable && s.contains(addr))?;
        Some(addr - seg.vaddr + seg.offset)
    }

    /// The calls inlined at the link-time address `addr`, outermost first, without the
    /// machine function that holds them (the symbol perf names). Empty where nothing is
    /// inlined or DWARF does not cover `addr`; a malformed unit gives nothing rather
    /// than an error, as a frame is still shown by its symbol.
    pub fn inlined_at(&self, addr: u64) -> Vec<Inlined> {
        let Ok(mut frames) = self.context.find_frames(addr).skip_all_loads() else {
            return Vec::new();
        };
        // Innermost first; the last is the machine function itself.
        let mut found = Vec::new();
        while let Ok(Some(frame)) = frames.next() {
            found.push((
                frame.dw_die_offset,
                frame
                    .function
                    .as_ref()
                    .and_then(|f| f.raw_name().ok().map(|n| n.into_owned())),
            ));
        }
        if found.len() < 2 {
            return Vec::new();
        }
        found.pop();
        let Some(unit) = self.context.find_dwarf_and_unit(addr).skip_all_loads() else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(found.len());
        for (offset, name) in found.into_iter().rev() {
            let entry = offset
                .and_then(|o| unit.entry(o).ok())
                .and_then(|e| lowest_address(&unit, &e))
                .unwrap_or(addr);
            out.push(Inlined {
                name: name.unwrap_or_else(|| "[inlined]".into()),
                entry,
            });
        }
        out
    }
}

/// The lowest address of a DIE's ranges.
fn lowest_address(
    unit: &gimli::UnitRef<'_, Reader>,
    entry: &gimli::DebuggingInformationEntry<Reader>,
) -> Option<u64> {
    let mut ranges = unit.die_ranges(entry).ok()?;
    let mut lowest: Option<u64> = None;
    while let Ok(Some(r)) = ranges.next() {
        if r.end > r.begin {
            lowest = Some(lowest.map_or(r.begin, |l| l.min(r.begin)));
        }
    }
    lowest
}

fn has_debug_info(elf: &Elf<'_>) -> bool {
    elf.object()
        .section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0)
}
