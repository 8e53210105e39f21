//! DWARF line tables: `FILE:LINE[:COL]` → addresses, and addresses → source positions.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};
use ptscope_event::SourcePosition;
use rustc_hash::FxHashMap;

use crate::elf::Elf;
use crate::error::{Error, Result};

/// An address where a source line starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineAddress {
    /// Link-time address.
    pub address: u64,
    /// The source file, as the line table names it (directory joined).
    pub file: String,
    /// 1-based line.
    pub line: u64,
    /// Column, 0 when unknown.
    pub col: u64,
}

#[derive(Clone, Copy, Debug)]
struct Row {
    address: u64,
    unit: u32,
    file: u32,
    line: u32,
    col: u32,
    is_stmt: bool,
    end_sequence: bool,
}

/// Every line-table row of an ELF file, sorted by address; owns its data so it outlives the
/// mapping.
pub struct LineTable {
    path: PathBuf,
    files: Vec<String>,
    rows: Vec<Row>,
}

type R<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// Rejects a compressed section whose header claims more than its data can expand to.
///
/// `object` reserves the claimed uncompressed size before inflating, so a corrupt header
/// (any u64; the fuzzer found 0xd0000000_0000) asks for terabytes: that fails only if the
/// allocator refuses, with a message that names no section, and a claim of a few GB is
/// reserved outright. DEFLATE (`ELFCOMPRESS_ZLIB`) cannot expand more than 1032:1; zstd
/// could in theory, but real debug sections compress about 3-10:1, so the same bound
/// (with a 1 MiB floor) turns away only corrupt headers.
fn check_claimed_size(s: &object::Section<'_, '_>, path: &Path, name: &str) -> Result<()> {
    let Ok(c) = s.compressed_data() else {
        // `uncompressed_data` reports the same problem with its own message.
        return Ok(());
    };
    if c.format == object::CompressionFormat::None {
        return Ok(());
    }
    let most = (c.data.len() as u64).saturating_mul(1032).max(1 << 20);
    if c.uncompressed_size > most {
        return Err(Error::malformed(
            path,
            "compressed debug section",
            format!(
                "{name} claims {} bytes uncompressed from {} compressed",
                c.uncompressed_size,
                c.data.len()
            ),
        ));
    }
    Ok(())
}

/// The byte order gimli reads `obj`'s DWARF in.
pub(crate) fn endian(obj: &object::File<'_>) -> gimli::RunTimeEndian {
    if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// The bytes of DWARF section `id` of `obj` (of the file at `path`), uncompressed after
/// checking the size it claims; empty when there is no such section.
pub(crate) fn section_data<'a>(
    obj: &object::File<'a>,
    path: &Path,
    id: gimli::SectionId,
) -> Result<Cow<'a, [u8]>> {
    match obj.section_by_name(id.name()) {
        Some(s) => {
            check_claimed_size(&s, path, id.name())?;
            s.uncompressed_data().map_err(|source| Error::Elf {
                path: path.to_path_buf(),
                source,
            })
        }
        None => Ok(Cow::Borrowed(&[][..])),
    }
}

impl LineTable {
    /// Reads `.debug_line` (through `.debug_info`'s units) of `elf`.
    ///
    /// Sequences at address 0 or at a DWARF 5 tombstone are dropped: they belong to functions
    /// the linker discarded and would otherwise shadow real code.
    pub fn new(elf: &Elf<'_>) -> Result<Self> {
        let path = elf.path().to_path_buf();
        let file = elf.object();
        if file.section_by_name(".debug_line").is_none() {
            return Err(Error::NoDebugInfo {
                path,
                debuglink: elf.debuglink(),
            });
        }
        let endian = endian(file);
        let sections = gimli::DwarfSections::load(|id| section_data(file, &path, id))?;
        let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, endian));
        let dwarf_err = |source| Error::Dwarf {
            path: path.clone(),
            source,
        };
        let mut table = LineTable {
            path: path.clone(),
            files: Vec::new(),
            rows: Vec::new(),
        };
        let mut file_ids: FxHashMap<String, u32> = FxHashMap::default();
        let mut units = dwarf.units();
        let mut unit_no = 0u32;
        while let Some(header) = units.next().map_err(dwarf_err)? {
            let unit = dwarf.unit(header).map_err(dwarf_err)?;
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            // Per-unit cache: file index → global file id.
            let mut local: FxHashMap<u64, u32> = FxHashMap::default();
            let mut seq: Vec<Row> = Vec::new();
            let mut rows = program.rows();
            while let Some((header, row)) = rows.next_row().map_err(dwarf_err)? {
                let fidx = row.file_index();
                let file_id = match local.get(&fidx) {
                    Some(&id) => id,
                    None => {
                        let name = file_name(&dwarf, &unit, header, fidx);
                        let next = table.files.len() as u32;
                        let id = *file_ids.entry(name.clone()).or_insert_with(|| {
                            table.files.push(name);
                            next
                        });
                        local.insert(fidx, id);
                        id
                    }
                };
                seq.push(Row {
                    address: row.address(),
                    unit: unit_no,
                    file: file_id,
                    line: row
                        .line()
                        .map_or(0, |l| u32::try_from(l.get()).unwrap_or(u32::MAX)),
                    col: match row.column() {
                        gimli::ColumnType::LeftEdge => 0,
                        gimli::ColumnType::Column(c) => u32::try_from(c.get()).unwrap_or(u32::MAX),
                    },
                    is_stmt: row.is_stmt(),
                    end_sequence: row.end_sequence(),
                });
                if row.end_sequence() {
                    let start = seq.first().map_or(0, |r| r.address);
                    if start != 0 && start < u64::MAX - 1 {
                        table.rows.append(&mut seq);
                    }
                    seq.clear();
                }
            }
            unit_no += 1;
        }
        // Stable, and sequence ends first, so a row starting the next function at the same
        // address is not hidden by the previous sequence's end.
        table.rows.sort_by_key(|r| (r.address, !r.end_sequence));
        Ok(table)
    }

    /// The file the table came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The source position of the link-time address `addr` (the first statement row at the
    /// greatest row address ≤ `addr`), or `None` outside any sequence.
    pub fn position(&self, addr: u64) -> Option<SourcePosition> {
        let i = self.rows.partition_point(|r| r.address <= addr);
        let at = self.rows.get(i.checked_sub(1)?)?.address;
        let lo = self.rows.partition_point(|r| r.address < at);
        let same = &self.rows[lo..i];
        let row = same
            .iter()
            .find(|r| !r.end_sequence && r.is_stmt)
            .or_else(|| same.iter().find(|r| !r.end_sequence))?;
        Some(SourcePosition {
            file: self.files.get(row.file as usize).cloned(),
            line: i64::from(row.line),
            col: i64::from(row.col),
        })
    }

    /// Source positions of many addresses (e.g. function starts for slice args); addresses
    /// without line info are left out.
    pub fn positions(
        &self,
        addrs: impl IntoIterator<Item = u64>,
    ) -> FxHashMap<u64, SourcePosition> {
        addrs
            .into_iter()
            .filter_map(|a| Some((a, self.position(a)?)))
            .collect()
    }

    /// The addresses where `file:line[:col]` starts: for each compilation unit with a
    /// statement row for it, the lowest such address (what magic-trace's `-trigger FILE:LINE`
    /// uses). `file` matches a table path exactly or as a trailing sequence of components.
    pub fn addresses_for_line(
        &self,
        file: &str,
        line: u64,
        col: Option<u64>,
    ) -> Result<Vec<LineAddress>> {
        let wanted: Vec<bool> = self.files.iter().map(|f| path_matches(f, file)).collect();
        if !wanted.iter().any(|&w| w) {
            return Err(Error::SourceFileNotFound {
                path: self.path.clone(),
                file: file.to_owned(),
            });
        }
        let mut best: FxHashMap<u32, &Row> = FxHashMap::default();
        for r in &self.rows {
            if r.end_sequence
                || !r.is_stmt
                || !wanted[r.file as usize]
                || u64::from(r.line) != line
                || col.is_some_and(|c| u64::from(r.col) != c)
            {
                continue;
            }
            // Rows are in address order, so the first per unit is the lowest.
            best.entry(r.unit).or_insert(r);
        }
        if best.is_empty() {
            let mut lines: Vec<u64> = self
                .rows
                .iter()
                .filter(|r| !r.end_sequence && wanted[r.file as usize])
                .map(|r| u64::from(r.line))
                .collect();
            lines.sort_unstable();
            lines.dedup();
            lines.sort_by_key(|&l| (l.abs_diff(line), l));
            lines.truncate(3);
            return Err(Error::LineNotFound {
                path: self.path.clone(),
                file: file.to_owned(),
                line,
                col,
                nearest: lines,
            });
        }
        let mut out: Vec<LineAddress> = best
            .values()
            .map(|r| LineAddress {
                address: r.address,
                file: self.files[r.file as usize].clone(),
                line: u64::from(r.line),
                col: u64::from(r.col),
            })
            .collect();
        out.sort_by_key(|a| a.address);
        out.dedup_by_key(|a| a.address);
        Ok(out)
    }

    /// Every `(file, line)` with a statement row, sorted; the choices of a `line:?` picker.
    pub fn source_lines(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(u32, u32)> = self
            .rows
            .iter()
            .filter(|r| r.is_stmt && !r.end_sequence && r.line > 0)
            .map(|r| (r.file, r.line))
            .collect();
        v.sort_unstable();
        v.dedup();
        let mut out: Vec<(&str, u64)> = v
            .into_iter()
            .map(|(f, l)| (self.files[f as usize].as_str(), u64::from(l)))
            .collect();
        out.sort_unstable();
        out
    }
}

fn path_matches(full: &str, query: &str) -> bool {
    let query = query.strip_prefix("./").unwrap_or(query);
    full == query
        || full
            .strip_suffix(query)
            .is_some_and(|rest| rest.ends_with('/'))
}

/// The full path of a line-table file entry: comp_dir / include dir / name, as far as known.
fn file_name(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &gimli::Unit<R<'_>>,
    header: &gimli::LineProgramHeader<R<'_>>,
    index: u64,
) -> String {
    let Some(entry) = header.file(index) else {
        return format!("<file {index}>");
    };
    let attr = |v: gimli::AttributeValue<R<'_>>| -> Option<String> {
        dwarf
            .attr_string(unit, v)
            .ok()
            .map(|s| String::from_utf8_lossy(s.slice()).into_owned())
    };
    let name = attr(entry.path_name()).unwrap_or_default();
    if name.starts_with('/') {
        return name;
    }
    let mut path = PathBuf::new();
    if let Some(comp) = unit.comp_dir {
        path.push(String::from_utf8_lossy(comp.slice()).as_ref());
    }
    if let Some(dir) = entry.directory(header).and_then(attr) {
        path.push(dir);
    }
    path.push(name);
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::path_matches;

    #[test]
    fn file_matching() {
        assert!(path_matches("/src/proj/a/foo.c", "foo.c"));
        assert!(path_matches("/src/proj/a/foo.c", "a/foo.c"));
        assert!(path_matches("/src/proj/a/foo.c", "./a/foo.c"));
        assert!(path_matches("/src/proj/a/foo.c", "/src/proj/a/foo.c"));
        assert!(!path_matches("/src/proj/a/barfoo.c", "foo.c"));
    }
}
