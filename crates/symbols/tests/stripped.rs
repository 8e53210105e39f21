//! Function ranges of stripped binaries: names from a separate debug file (by
//! `.gnu_debuglink` or build id) when one is installed and trusted, else one range per
//! `.eh_frame` FDE named `FILE+0xSTART`. Checked against binutils (`nm`, `readelf`).

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{run, tool, TempDir};
use ptscope_event::StringTable;
use ptscope_symbols::{
    eh_frame_ranges, FileFunctions, FunctionRanges, MappedFile, Mappings, NameSource, Namer,
};

/// `nm`'s address of the (local or global) text symbol `name` in `file`.
fn nm_address(nm: &Path, file: &Path, name: &str) -> u64 {
    let out = Command::new(nm).arg(file).output().expect("run nm");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (a, k, n) = (f.next()?, f.next()?, f.next()?);
            (n == name && (k == "t" || k == "T")).then(|| u64::from_str_radix(a, 16).ok())?
        })
        .next()
        .unwrap_or_else(|| panic!("nm finds no text symbol {name} in {}", file.display()))
}

/// FDE start addresses as `readelf --debug-dump=frames` prints them (`pc=START..END`).
fn readelf_fdes(readelf: &Path, file: &Path) -> BTreeSet<(u64, u64)> {
    let out = Command::new(readelf)
        .arg("--debug-dump=frames")
        .arg(file)
        .output()
        .expect("run readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| {
            let (a, b) = l.split("pc=").nth(1)?.split_once("..")?;
            Some((
                u64::from_str_radix(a.trim(), 16).ok()?,
                u64::from_str_radix(b.trim(), 16).ok()?,
            ))
        })
        .collect()
}

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static long helper_one(long x) { return x * 3 + (x >> 2); }
__attribute__((noinline)) static long helper_two(long x) { return helper_one(x) ^ 0x5a; }
int main(int argc, char **argv) {
    long s = 0;
    for (long i = 0; i < argc * 1000; i++) s += helper_two(i);
    printf("%ld\n", s);
    return 0;
}
"#;

/// Builds `NAME` from PROGRAM (`-DVARIANT` changes its build id), moves its symbols and
/// DWARF to `NAME.debug`, strips it and links the two with `.gnu_debuglink`.
fn build_stripped(dir: &Path, name: &str, variant: &str) {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, format!("/* {variant} */\n{PROGRAM}")).unwrap();
    let exe = dir.join(name);
    let debug = dir.join(format!("{name}.debug"));
    run(Command::new("gcc")
        .args(["-O2", "-g", "-Wl,--build-id", "-o"])
        .arg(&exe)
        .arg(&src));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug));
    run(Command::new("strip").arg("--strip-all").arg(&exe));
    run(Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&exe));
}

#[test]
fn debuglink_names_a_stripped_program_only_from_a_trusted_matching_file() {
    let (Some(_), Some(_), Some(_), Some(nm)) =
        (tool("gcc"), tool("objcopy"), tool("strip"), tool("nm"))
    else {
        return;
    };
    let dir = TempDir::new("debuglink");
    build_stripped(dir.path(), "prog", "a");
    let exe = dir.path().join("prog");
    let debug = dir.path().join("prog.debug");
    let helper = nm_address(&nm, &debug, "helper_one");
    assert!(
        MappedFile::open(&exe)
            .unwrap()
            .elf()
            .unwrap()
            .symbols()
            .is_err(),
        "the program is stripped"
    );

    let r = FunctionRanges::load(&exe).unwrap();
    assert_eq!(r.source(), &NameSource::DebugFile(debug.clone()));
    let f = r.function_at(helper + 1).expect("helper_one found");
    assert_eq!((f.start, &*f.name), (helper, "helper_one"));

    // A directory anyone can write to could hold a planted debug file: not read.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = FunctionRanges::load(&exe).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(r.source(), &NameSource::EhFrame);
    let f = r.function_at(helper + 1).expect("helper_one's FDE");
    assert_eq!((f.start, &*f.name), (helper, &*format!("prog+{helper:#x}")));

    // The debug file of another build (another build id) would give wrong names.
    let other = TempDir::new("debuglink-other");
    build_stripped(other.path(), "prog", "b");
    std::fs::copy(other.path().join("prog.debug"), &debug).unwrap();
    let r = FunctionRanges::load(&exe).unwrap();
    assert_eq!(r.source(), &NameSource::EhFrame);
}

#[test]
fn debian_gzip_has_one_function_per_fde() {
    let (Some(readelf), Some(_)) = (tool("readelf"), tool("gzip")) else {
        return;
    };
    let gzip = Path::new("/usr/bin/gzip");
    let file = MappedFile::open(gzip).unwrap();
    let elf = file.elf().unwrap();
    let ours: BTreeSet<(u64, u64)> = eh_frame_ranges(&elf).unwrap().into_iter().collect();
    let theirs = readelf_fdes(&readelf, gzip);
    assert!(theirs.len() > 50, "readelf lists {} FDEs", theirs.len());
    assert_eq!(ours, theirs, "our FDE ranges differ from readelf's");

    let r = FunctionRanges::load(gzip).unwrap();
    if r.source() != &NameSource::EhFrame {
        // gzip-dbgsym is installed: names come from it; nothing more to check here.
        return;
    }
    for &(start, end) in &theirs {
        for addr in [start, (start + end) / 2, end - 1] {
            let f = r.function_at(addr).expect("an FDE covers it");
            assert_eq!((f.start, &*f.name), (start, &*format!("gzip+{start:#x}")));
        }
    }
    // perf's frames are file offsets; gzip's text is mapped at its file offset.
    let (start, _) = *theirs.iter().next().unwrap();
    assert_eq!(r.address_of_offset(start), Some(start));
}

/// `contains` (the plugin's question at every translation: is this code in a function?)
/// answers as `function_at` does, at every address of Debian's stripped gzip, whose
/// functions are FDE ranges with names made on demand; and `FileFunctions` (symbols,
/// PLT entries, then those ranges) agrees with its own `function_at` the same way.
#[test]
fn contains_agrees_with_function_at_everywhere_in_gzip() {
    if tool("gzip").is_none() {
        return;
    }
    let gzip = Path::new("/usr/bin/gzip");
    let r = FunctionRanges::load(gzip).unwrap();
    let f = FileFunctions::load(gzip).unwrap();
    let file = MappedFile::open(gzip).unwrap();
    let elf = file.elf().unwrap();
    let fdes = eh_frame_ranges(&elf).unwrap();
    let lo = fdes.iter().map(|x| x.0).min().unwrap();
    let hi = fdes.iter().map(|x| x.1).max().unwrap();
    let (mut inside, mut outside) = (0, 0);
    // From below the first function to past the last: gaps between FDEs included.
    for addr in lo.saturating_sub(64)..hi + 64 {
        let found = r.function_at(addr).is_some();
        assert_eq!(r.contains(addr), found, "FunctionRanges at {addr:#x}");
        assert_eq!(
            f.region_of(addr).covered,
            f.function_at(addr).is_some(),
            "FileFunctions at {addr:#x}"
        );
        if found {
            inside += 1;
        } else {
            outside += 1;
        }
    }
    assert!(
        inside > 10_000 && outside > 100,
        "{inside} in, {outside} out"
    );
}

#[test]
fn libc_static_functions_from_its_debug_file_by_build_id() {
    let Some(nm) = tool("nm") else { return };
    let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let file = MappedFile::open(libc).unwrap();
    let elf = file.elf().unwrap();
    let id: String = elf
        .build_id()
        .expect("Debian's libc has a build id")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let debug = Path::new("/usr/lib/debug/.build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    if !debug.exists() {
        if std::env::var_os("CI").is_some() {
            panic!("{} is missing: apt-get install libc6-dbg", debug.display());
        }
        eprintln!("!!! SKIPPING: libc6-dbg is not installed (set CI=1 to make this a failure)");
        return;
    }
    let r = FunctionRanges::load(libc).unwrap();
    assert_eq!(r.source(), &NameSource::DebugFile(debug.clone()));
    // A static (local) function: not in libc's .dynsym, only in the debug file.
    let addr = nm_address(&nm, &debug, "__strchrnul_evex");
    let f = r.function_at(addr + 2).expect("found");
    assert_eq!((f.start, &*f.name), (addr, "__strchrnul_evex"));
}

#[test]
fn a_fifo_named_as_a_mapped_file_is_refused_without_blocking() {
    let dir = TempDir::new("fifo");
    let fifo = dir.path().join("perf-1.map");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = FunctionRanges::load(&fifo).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
}

/// A pipe-mode `perf.data` (16-byte header, then records) holding one executable
/// `PERF_RECORD_MMAP2` of `path` into process `pid`.
fn pipe_perf_data_with_mmap(pid: u32, start: u64, len: u64, pgoff: u64, path: &str) -> Vec<u8> {
    let mut name = path.as_bytes().to_vec();
    name.push(0);
    name.resize(name.len().next_multiple_of(8), 0);
    let size = 72 + name.len();
    let mut r = b"PERFILE2".to_vec();
    r.extend(16u64.to_le_bytes());
    r.extend(10u32.to_le_bytes()); // PERF_RECORD_MMAP2
    r.extend(2u16.to_le_bytes()); // PERF_RECORD_MISC_USER
    r.extend((size as u16).to_le_bytes());
    r.extend(pid.to_le_bytes());
    r.extend(pid.to_le_bytes());
    for v in [start, len, pgoff] {
        r.extend(v.to_le_bytes());
    }
    r.extend([0u8; 24]); // maj, min, ino, ino_generation
    r.extend(5u32.to_le_bytes()); // PROT_READ | PROT_EXEC
    r.extend(2u32.to_le_bytes()); // MAP_PRIVATE
    r.extend(name);
    r
}

/// What a branch into Debian's stripped sort is called in a trace: every address of one
/// `.eh_frame` function gets that function's name and start, two functions two names,
/// whatever the load address (a PIE, mapped here at an arbitrary base).
#[test]
fn debian_sort_branches_are_named_per_function() {
    let Some(sort) = tool("sort") else { return };
    let sort = std::fs::canonicalize(sort).unwrap();
    let path = sort.to_str().unwrap();
    let file = MappedFile::open(&sort).unwrap();
    let elf = file.elf().unwrap();
    let text = elf
        .load_segments()
        .into_iter()
        .find(|s| s.executable)
        .expect("sort has an executable segment");
    let fdes: Vec<(u64, u64)> = eh_frame_ranges(&elf)
        .unwrap()
        .into_iter()
        .filter(|&(s, e)| e - s >= 16 && text.contains(s) && text.contains(e - 1))
        .collect();
    assert!(fdes.len() > 50, "sort has {} FDEs in its text", fdes.len());
    let ((a, a_end), (b, b_end)) = (fdes[fdes.len() / 3], fdes[2 * fdes.len() / 3]);

    let (pid, base) = (4242, 0x5555_0000_0000u64);
    let data = pipe_perf_data_with_mmap(pid, base + text.vaddr, text.memsz, text.offset, path);
    let mut strings = StringTable::new();
    let dso = strings.intern(path);
    let mut namer = Namer::new(true, true);
    assert_eq!(
        namer.function_at_address(Some(pid), dso, base + a + 3, &mut strings),
        None,
        "nothing is named without the recording's mappings"
    );
    namer.set_mappings(Mappings::parse(&data));
    let mut at = |addr: u64| {
        let (name, start) = namer
            .function_at_address(Some(pid), dso, base + addr, &mut strings)
            .unwrap_or_else(|| panic!("no function at {addr:#x}"));
        (strings.get(name).to_string(), start)
    };
    let (a_first, a_last) = (at(a + 1), at(a_end - 1));
    let (b_first, b_last) = (at(b), at(b_end - 2));
    assert_eq!(a_first, a_last, "one function, one name");
    assert_eq!(b_first, b_last, "one function, one name");
    assert_ne!(a_first.0, b_first.0, "two functions, two names");
    assert_eq!(
        (a_first.1, b_first.1),
        (base + a, base + b),
        "runtime starts"
    );
    if FunctionRanges::load(&sort).unwrap().source() == &NameSource::EhFrame {
        assert_eq!(a_first.0, format!("sort+{a:#x}"));
    }
}

/// Where a process entered its program (`Namer::process_entry`), for a writer that lost
/// ld.so's jump there to a decode error: Debian's stripped `sort` has no `_start`, so
/// the entry is named as a branch there is (`sort+0x…`, its `.eh_frame` function), at
/// `e_entry` moved to where the process mapped the file; nothing without the mappings.
#[test]
fn a_stripped_programs_entry_is_named_as_a_branch_there() {
    let Some(sort) = tool("sort") else { return };
    let sort = std::fs::canonicalize(sort).unwrap();
    let path = sort.to_str().unwrap();
    let bytes = std::fs::read(&sort).unwrap();
    let e_entry = u64::from_le_bytes(bytes[0x18..0x20].try_into().unwrap());
    let file = MappedFile::open(&sort).unwrap();
    let elf = file.elf().unwrap();
    let text = elf
        .load_segments()
        .into_iter()
        .find(|s| s.executable && s.contains(e_entry))
        .expect("sort's entry is in an executable segment");
    let (pid, base) = (4243, 0x5555_0000_0000u64);
    let data = pipe_perf_data_with_mmap(pid, base + text.vaddr, text.memsz, text.offset, path);
    let mut strings = StringTable::new();
    let mut namer = Namer::new(true, true);
    assert_eq!(
        namer.process_entry(pid, &mut strings),
        None,
        "no mappings, no entry"
    );
    namer.set_mappings(Mappings::parse(&data));
    assert_eq!(
        namer.process_entry(pid + 1, &mut strings),
        None,
        "another process"
    );
    let h = namer
        .process_entry(pid, &mut strings)
        .expect("sort's entry is found");
    let loc = *strings.location(h);
    assert_eq!(loc.ip, base + e_entry);
    let dso = strings.intern(path);
    assert_eq!(loc.dso, Some(dso));
    let (name, start) = namer
        .function_at_address(Some(pid), dso, base + e_entry, &mut strings)
        .expect("a branch to the entry is named");
    assert_eq!(loc.symbol, ptscope_event::Symbol::FromPerf(name));
    assert_eq!(loc.offset, base + e_entry - start);
    if FunctionRanges::load(&sort).unwrap().source() == &NameSource::EhFrame {
        assert!(
            strings.get(name).starts_with("sort+0x"),
            "{}",
            strings.get(name)
        );
    }
}
