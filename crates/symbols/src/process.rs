//! `/proc/PID/maps` and runtime (load-biased) addresses of symbols.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::elf::{Elf, LoadSegment, MappedFile};
use crate::error::{Error, Result};

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp`/`rwxs` flags as written by the kernel.
    pub perms: [u8; 4],
    /// File offset of `start`.
    pub offset: u64,
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Inode (0 for anonymous mappings).
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, …); empty for anonymous mappings.
    pub path: String,
}

impl MapEntry {
    /// True if the mapping is executable.
    pub fn is_executable(&self) -> bool {
        self.perms[2] == b'x'
    }

    /// True if the mapping is backed by a file (not anonymous or `[pseudo]`).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }

    /// The path without the kernel's ` (deleted)` suffix.
    pub fn file_path(&self) -> &str {
        self.path.strip_suffix(" (deleted)").unwrap_or(&self.path)
    }
}

/// The parsed mappings of a process.
#[derive(Clone, Debug)]
pub struct ProcMaps {
    pid: Option<u32>,
    entries: Vec<MapEntry>,
}

impl ProcMaps {
    /// Reads `/proc/PID/maps`.
    pub fn read(pid: u32) -> Result<Self> {
        let origin = PathBuf::from(format!("/proc/{pid}/maps"));
        let text = fs::read_to_string(&origin).map_err(|e| Error::io(&origin, e))?;
        let mut maps = Self::parse(&text, &origin)?;
        maps.pid = Some(pid);
        Ok(maps)
    }

    /// Parses maps text; `origin` names it in errors. Any malformed line is an error, since a
    /// silently skipped line could hide the mapping an address must come from.
    pub fn parse(text: &str, origin: &Path) -> Result<Self> {
        let entries = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(n, l)| {
                parse_line(l).ok_or_else(|| {
                    Error::malformed(origin, "maps line", format!("line {}: {l:?}", n + 1))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ProcMaps { pid: None, entries })
    }

    /// All mappings, in address order.
    pub fn entries(&self) -> &[MapEntry] {
        &self.entries
    }

    /// The distinct mapped files, in order of first appearance (the executable is usually
    /// first, then the dynamic loader and libraries).
    pub fn files(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for e in self.entries.iter().filter(|e| e.is_file()) {
            if !out.contains(&e.file_path()) {
                out.push(e.file_path());
            }
        }
        out
    }

    /// The mappings of the file at `path`, matched by path or else by device and inode.
    pub fn mappings_of(&self, path: &Path) -> Vec<&MapEntry> {
        let canon = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let by_path: Vec<&MapEntry> = self
            .entries
            .iter()
            .filter(|e| {
                e.is_file()
                    && (Path::new(e.file_path()) == canon || Path::new(e.file_path()) == path)
            })
            .collect();
        if !by_path.is_empty() {
            return by_path;
        }
        // Covers paths reached through symlinks or other mount namespaces.
        let Ok(md) = fs::metadata(path) else {
            return Vec::new();
        };
        let (maj, min) = split_dev(md.dev());
        self.entries
            .iter()
            .filter(|e| e.inode == md.ino() && e.dev_major == maj && e.dev_minor == min)
            .collect()
    }

    /// The load bias of `elf` in this process: runtime address minus link-time address.
    ///
    /// Computed from the mapping that holds the first executable segment (falling back to
    /// any segment): `mapping start − mapping offset + p_offset − p_vaddr`. This is 0 for
    /// non-PIE executables and the load base for PIE executables and shared libraries.
    pub fn load_bias(&self, elf: &Elf<'_>) -> Result<u64> {
        let segs = elf.load_segments();
        let maps = self.mappings_of(elf.path());
        let not_mapped = || Error::NotMapped {
            pid: self.pid().unwrap_or(0),
            path: elf.path().to_path_buf(),
        };
        if maps.is_empty() {
            return Err(not_mapped());
        }
        let mut ordered: Vec<&LoadSegment> = segs.iter().filter(|s| s.executable).collect();
        ordered.extend(segs.iter().filter(|s| !s.executable));
        for seg in ordered {
            if let Some(b) = bias_from(seg, &maps) {
                return Ok(b);
            }
        }
        Err(not_mapped())
    }

    /// The runtime address of the link-time address `vaddr` of `elf`.
    pub fn runtime_address(&self, elf: &Elf<'_>, vaddr: u64) -> Result<u64> {
        let seg = elf.segment_of(vaddr)?;
        let maps = self.mappings_of(elf.path());
        let bias = bias_from(&seg, &maps).ok_or_else(|| Error::NotMapped {
            pid: self.pid().unwrap_or(0),
            path: elf.path().to_path_buf(),
        })?;
        Ok(vaddr.wrapping_add(bias))
    }

    /// The process the maps were read from (`None` when parsed from text).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }
}

/// The bias implied by the mapping that holds `seg`'s first byte.
fn bias_from(seg: &LoadSegment, maps: &[&MapEntry]) -> Option<u64> {
    let holds = |m: &&&MapEntry| seg.offset >= m.offset && seg.offset - m.offset < m.end - m.start;
    // Adjacent segments can share a file page, so prefer a mapping whose permissions fit.
    let m = maps
        .iter()
        .filter(holds)
        .find(|m| m.is_executable() == seg.executable)
        .or_else(|| maps.iter().find(holds))?;
    Some(
        m.start
            .wrapping_sub(m.offset)
            .wrapping_add(seg.offset)
            .wrapping_sub(seg.vaddr),
    )
}

fn split_dev(dev: u64) -> (u32, u32) {
    // glibc's `gnu_dev_major`/`gnu_dev_minor` encoding.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

fn parse_line(line: &str) -> Option<MapEntry> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.as_bytes();
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let (maj, min) = it.next()?.split_once(':')?;
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start().to_owned();
    let (s, e) = range.split_once('-')?;
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    if end < start || perms.len() != 4 {
        return None;
    }
    Some(MapEntry {
        start,
        end,
        perms: [perms[0], perms[1], perms[2], perms[3]],
        offset,
        dev_major: u32::from_str_radix(maj, 16).ok()?,
        dev_minor: u32::from_str_radix(min, 16).ok()?,
        inode,
        path,
    })
}

/// A symbol resolved to its runtime address in a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedSymbol {
    /// The ELF file defining it.
    pub object: PathBuf,
    /// Raw symbol name.
    pub name: String,
    /// Demangled name.
    pub demangled: String,
    /// Link-time address.
    pub file_address: u64,
    /// Address in the process.
    pub runtime_address: u64,
    /// Size in bytes (0 if unknown).
    pub size: u64,
}

/// A running process's executable and mapped ELF objects.
#[derive(Clone, Debug)]
pub struct Process {
    pid: u32,
    exe: PathBuf,
    maps: ProcMaps,
}

impl Process {
    /// Reads the process's maps and executable path.
    pub fn open(pid: u32) -> Result<Self> {
        let link = PathBuf::from(format!("/proc/{pid}/exe"));
        let exe = fs::read_link(&link).map_err(|e| Error::io(&link, e))?;
        Ok(Process {
            pid,
            exe,
            maps: ProcMaps::read(pid)?,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The executable's path (as `/proc/PID/exe` names it).
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// The process's mappings.
    pub fn maps(&self) -> &ProcMaps {
        &self.maps
    }

    /// The executable, then every other mapped file, in map order.
    pub fn objects(&self) -> Vec<PathBuf> {
        let mut out = vec![self.exe.clone()];
        for f in self.maps.files() {
            if Path::new(f) != self.exe {
                out.push(PathBuf::from(f));
            }
        }
        out
    }

    /// Maps `path`, falling back to the process's root so other mount namespaces work.
    pub fn open_object(&self, path: &Path) -> Result<MappedFile> {
        MappedFile::open(path).or_else(|e| {
            let rel = path.strip_prefix("/").unwrap_or(path);
            MappedFile::open(Path::new(&format!("/proc/{}/root", self.pid)).join(rel))
                .map_err(|_| e)
        })
    }

    /// The runtime address of the link-time address `vaddr` of `elf`.
    pub fn runtime_address(&self, elf: &Elf<'_>, vaddr: u64) -> Result<u64> {
        self.maps.runtime_address(elf, vaddr)
    }

    /// Finds the function `name` (raw or demangled) in the executable, then in the mapped
    /// libraries in map order, and gives its runtime address.
    ///
    /// Non-ELF and symbol-less mappings are skipped. On failure the suggestions come from the
    /// executable. GNU ifunc symbols resolve to their resolver, not the selected
    /// implementation.
    pub fn resolve(&self, name: &str) -> Result<ResolvedSymbol> {
        let mut first_err: Option<Error> = None;
        for path in self.objects() {
            let file = match self.open_object(&path) {
                Ok(f) => f,
                Err(e) => {
                    first_err.get_or_insert(e);
                    continue;
                }
            };
            let Ok(elf) = Elf::parse(file.bytes(), &path) else {
                continue;
            };
            let syms = match elf.symbols() {
                Ok(s) => s,
                Err(e) => {
                    first_err.get_or_insert(e);
                    continue;
                }
            };
            match syms.lookup(name) {
                Ok(s) => {
                    return Ok(ResolvedSymbol {
                        object: path.clone(),
                        name: s.name().to_owned(),
                        demangled: s.demangled().to_owned(),
                        file_address: s.address(),
                        runtime_address: self.maps.runtime_address(&elf, s.address())?,
                        size: s.size(),
                    })
                }
                Err(e) => {
                    if first_err.is_none() || path == self.exe {
                        first_err = Some(e);
                    }
                }
            }
        }
        Err(first_err.unwrap_or_else(|| Error::SymbolNotFound {
            path: self.exe.clone(),
            name: name.to_owned(),
            suggestions: Vec::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234 /usr/bin/prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 fd:01 1234 /usr/bin/prog
55d0c0a02000-55d0c0a03000 r--p 00002000 fd:01 1234 /usr/bin/prog
55d0c1b00000-55d0c1b21000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn parses_maps_and_bias() {
        let m = ProcMaps::parse(MAPS, Path::new("/proc/42/maps")).unwrap();
        assert_eq!(m.entries().len(), 6);
        assert_eq!(m.files(), vec!["/usr/bin/prog"]);
        assert_eq!(m.pid(), None);
        let e = &m.entries()[1];
        assert!(e.is_executable() && e.offset == 0x1000 && e.dev_major == 0xfd && e.inode == 1234);
        assert_eq!(m.entries()[4].path, "");
        let maps: Vec<&MapEntry> = m.entries()[..3].iter().collect();
        let seg = LoadSegment {
            vaddr: 0x1000,
            memsz: 0x200,
            offset: 0x1000,
            filesz: 0x200,
            executable: true,
        };
        assert_eq!(bias_from(&seg, &maps), Some(0x55d0c0a00000));
        let err = ProcMaps::parse("zz-1 r-xp 0 0:0 0\n", Path::new("/proc/1/maps")).unwrap_err();
        assert!(
            err.to_string()
                .contains("/proc/1/maps: malformed maps line: line 1"),
            "{err}"
        );
    }
}
