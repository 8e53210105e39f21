//! `--trigger` for the emulate backend: the trigger is resolved before the program runs,
//! to a file and an offset in it (qemu-user loads PIEs and libraries anywhere), and the
//! plugin finds the block starting there when it translates it: the hit is exact (the
//! function's entry block) and costs nothing on other blocks.

use anyhow::{anyhow, bail, Context, Result};
use ptscope_record::trigger::{TriggerSpec, STOP_INDICATOR, STOP_INDICATOR_WITH};
use ptscope_symbols::{Elf, MappedFile};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where a trigger fires: the entry of a function (or a line's first address) in one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerPoint {
    /// The name hits are reported with.
    pub name: String,
    /// The ELF file holding it.
    pub file: PathBuf,
    /// Its link-time address in that file.
    pub address: u64,
    /// Its offset in the file: what the plugin compares with the maps.
    pub offset: u64,
    dev: (u32, u32),
    ino: u64,
}

impl TriggerPoint {
    /// The plugin's `trigger=DEV:INO:OFFSET:PATH` value (hex; the path hex-encoded, as
    /// qemu splits plugin arguments at commas).
    pub fn plugin_arg(&self) -> String {
        use std::os::unix::ffi::OsStrExt;
        let path: String = self
            .file
            .as_os_str()
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dev = (u64::from(self.dev.0) << 32) | u64::from(self.dev.1);
        format!("{dev:x}:{:x}:{:x}:{path}", self.ino, self.offset)
    }

    fn new(name: String, file: &Path, elf: &Elf<'_>, address: u64) -> Result<Self> {
        let seg = elf
            .load_segments()
            .into_iter()
            .find(|s| s.executable && address >= s.vaddr && address - s.vaddr < s.filesz)
            .with_context(|| {
                format!(
                    "--trigger {name}: {address:#x} is not in an executable segment of {} \
                     (the emulate backend takes link-time addresses, as `nm` prints them)",
                    file.display()
                )
            })?;
        let file = std::fs::canonicalize(file)
            .with_context(|| format!("cannot find {}", file.display()))?;
        let meta =
            std::fs::metadata(&file).with_context(|| format!("cannot stat {}", file.display()))?;
        let dev = meta.dev();
        // glibc's gnu_dev_major/minor: how /proc/PID/maps prints a device.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        Ok(TriggerPoint {
            name,
            offset: address - seg.vaddr + seg.offset,
            file,
            address,
            dev: (major as u32, minor as u32),
            ino: meta.ino(),
        })
    }
}

/// Resolves `spec` for the program `exe` before it runs: a symbol in the executable,
/// else in the shared libraries it needs (found as the dynamic loader would, by
/// `DT_NEEDED`, `DT_RUNPATH`/`DT_RPATH`, `LD_LIBRARY_PATH` and the system directories;
/// not libraries it `dlopen`s); an address or a line in the executable, by its link-time
/// addresses.
pub fn resolve(spec: &TriggerSpec, exe: &Path) -> Result<Vec<TriggerPoint>> {
    let file = MappedFile::open(exe)
        .with_context(|| format!("cannot read the program {}", exe.display()))?;
    let elf = file.elf()?;
    match spec {
        TriggerSpec::Address(a) => Ok(vec![TriggerPoint::new(format!("{a:#x}"), exe, &elf, *a)?]),
        TriggerSpec::Line { file: f, line, col } => {
            let table = elf.line_table()?;
            table
                .addresses_for_line(f, *line, *col)?
                .into_iter()
                .map(|a| TriggerPoint::new(format!("{}:{}", a.file, a.line), exe, &elf, a.address))
                .collect()
        }
        TriggerSpec::Symbol(name) => {
            let exe_err = match lookup(&elf, exe, name)? {
                Ok(p) => return Ok(vec![p]),
                Err(e) => e,
            };
            for lib in needed_libraries(exe) {
                let Ok(f) = MappedFile::open(&lib) else {
                    continue;
                };
                let Ok(e) = f.elf() else { continue };
                if let Ok(Ok(p)) = lookup(&e, &lib, name) {
                    return Ok(vec![p]);
                }
            }
            Err(anyhow!("--trigger {name}: {exe_err}"))
        }
        TriggerSpec::StopIndicator => {
            let mut out = Vec::new();
            let mut objects = vec![exe.to_path_buf()];
            objects.extend(needed_libraries(exe));
            for name in [STOP_INDICATOR, STOP_INDICATOR_WITH] {
                for obj in &objects {
                    let Ok(f) = MappedFile::open(obj) else {
                        continue;
                    };
                    let Ok(e) = f.elf() else { continue };
                    if let Ok(Ok(p)) = lookup(&e, obj, name) {
                        out.push(p);
                        break;
                    }
                }
            }
            if out.is_empty() {
                bail!(
                    "--trigger .: {} has no `{STOP_INDICATOR}` function (nor do the libraries \
                     it needs); link the ptscope-stop-indicator crate or include ptscope.h and \
                     call ptscope_stop_indicator() where the trace should end",
                    exe.display()
                );
            }
            Ok(out)
        }
    }
}

/// `Ok(Ok(point))` when `elf` defines `name`, `Ok(Err(why))` when it does not.
fn lookup(
    elf: &Elf<'_>,
    path: &Path,
    name: &str,
) -> Result<std::result::Result<TriggerPoint, ptscope_symbols::Error>> {
    let syms = match elf.symbols() {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    match syms.lookup(name) {
        Ok(s) => Ok(Ok(TriggerPoint::new(
            s.demangled().to_owned(),
            path,
            elf,
            s.address(),
        )?)),
        Err(e) => Ok(Err(e)),
    }
}

/// The shared libraries `exe` needs, transitively, breadth first.
fn needed_libraries(exe: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut queue = vec![exe.to_path_buf()];
    let mut i = 0;
    while i < queue.len() && out.len() < 256 {
        let obj = queue[i].clone();
        i += 1;
        let Some((needed, dirs)) = dynamic_info(&obj) else {
            continue;
        };
        for n in needed {
            let found = if n.contains('/') {
                Some(PathBuf::from(&n))
            } else {
                dirs.iter().map(|d| d.join(&n)).find(|p| p.is_file())
            };
            if let Some(p) = found {
                if !out.contains(&p) {
                    out.push(p.clone());
                    queue.push(p);
                }
            }
        }
    }
    out
}

/// `DT_NEEDED` names of `path`, and the directories to look for them in.
fn dynamic_info(path: &Path) -> Option<(Vec<String>, Vec<PathBuf>)> {
    use object::read::elf::{Dyn, ElfFile64, FileHeader};
    let file = MappedFile::open(path).ok()?;
    let data = file.bytes();
    let elf = ElfFile64::<object::Endianness>::parse(data).ok()?;
    let endian = elf.endian();
    let sections = elf.elf_header().sections(endian, data).ok()?;
    let (dyns, link) = sections.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, link).ok()?;
    let mut needed = Vec::new();
    let mut search = Vec::new();
    for d in dyns {
        let tag = d.tag32(endian).unwrap_or(0);
        if !matches!(tag, 1 | 15 | 29) {
            continue;
        }
        let Ok(s) = d.string(endian, strings) else {
            continue;
        };
        let s = String::from_utf8_lossy(s).into_owned();
        match tag {
            1 => needed.push(s),
            _ => search.extend(s.split(':').map(str::to_owned)),
        }
    }
    let origin = path.parent().unwrap_or(Path::new("/"));
    let mut dirs: Vec<PathBuf> = search
        .iter()
        .filter(|d| !d.is_empty())
        .map(|d| {
            PathBuf::from(
                d.replace("${ORIGIN}", &origin.to_string_lossy())
                    .replace("$ORIGIN", &origin.to_string_lossy()),
            )
        })
        .collect();
    if let Some(l) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&l));
    }
    dirs.extend(
        [
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib64",
            "/usr/lib64",
            "/lib",
            "/usr/lib",
            "/usr/local/lib",
        ]
        .iter()
        .map(PathBuf::from),
    );
    Some((needed, dirs))
}
