//! Exact call traces without Intel PT: the `emulate` backend.
//!
//! The program runs under `qemu-x86_64` (qemu-user) with ptscope's TCG plugin
//! (`tools/ptsim-plugin`), which logs every executed translation block of every thread.
//! [`ptsim::truth`] turns the block log into the exact branch sequence of each thread, and
//! [`Events`] turns that sequence straight into [`ptscope_event::Event`]s — no Intel PT
//! encoding and no perf decoding — named from the ELF files the program mapped. The stack
//! writers then see every call and return that ran.
//!
//! Limits of this first version: user space only, x86-64 on x86-64, no attach; each
//! thread's last moments are kept in a ring in the plugin (or everything), snapshot at
//! exit or at a trigger ([`trigger`], `snapshot`); forked children are traced as their
//! own processes ([`process`]). Times follow the host clock or a virtual one ([`clock`]).
//!
//! From a block log to events: here one thread's log, made by hand, in which the block
//! at 0x1000 (`call 0x2000`) runs, then the leaf at 0x2000 (`ret`), then the caller's
//! next block. Every call and return is an event; conditional branches and jumps inside
//! a function are not.
//!
//! ```
//! use ptscope_emulate::Events;
//! use ptscope_event::{Event, EventData, Kind, StringTable};
//! use ptsim::blocklog::{BlockLog, Exec, TbDef, ThreadLog};
//!
//! let block = |vaddr, insn: &[u8]| {
//!     Some(TbDef { vaddr, n_insns: 1, size: insn.len() as u32, last: insn.to_vec(), first: insn.to_vec() })
//! };
//! let log = BlockLog {
//!     pid: 1,
//!     tbs: vec![
//!         block(0x1000, &[0xe8, 0xfb, 0x0f, 0x00, 0x00]), // call 0x2000
//!         block(0x2000, &[0xc3]),                         // ret
//!         block(0x1005, &[0x90]),                         // nop
//!     ],
//!     threads: vec![ThreadLog {
//!         tid: 1,
//!         execs: (0..3).map(|i| Exec { clock: i as u64, tb: i }).collect(),
//!         ..ThreadLog::default()
//!     }],
//!     ..BlockLog::default()
//! };
//! // One guest instruction = 1 ns.
//! let mut events = Events::from_log(&log, "demo", StringTable::new(), &|clock| clock);
//! let mut kinds = Vec::new();
//! while let Some(e) = events.next_event() {
//!     if let Event::Ok { data: EventData::Trace { kind: Some(k), src, dst, .. }, .. } = e {
//!         let strings = events.strings();
//!         kinds.push((k, strings.location(src).ip, strings.location(dst).ip));
//!     }
//! }
//! assert_eq!(kinds, [(Kind::Call, 0x1000, 0x2000), (Kind::Return, 0x2000, 0x1005)]);
//! ```

pub mod clock;
pub mod process;
mod snapshot;
pub mod trigger;

pub use process::{HitReport, Trace};
pub use trigger::TriggerPoint;

pub use clock::{ClockKind, ExecNotice};

use anyhow::{bail, Context, Result};
use ptscope_event::{
    Event, EventData, Kind, Location, LocationHandle, StringTable, Sym, Symbol, Thread,
    TraceStateChange,
};
use ptscope_symbols::{FunctionRanges, LoadSegment, MappedFile};
use ptsim::blocklog::BlockLog;
use ptsim::truth::{self, StepKind};
use rustc_hash::FxHashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// The block log's file name inside a working directory: its presence makes the
/// directory an emulate recording.
pub const LOG_NAME: &str = "emulate-blocks.log";

/// The plugin library's file name, as the workspace builds it.
pub const PLUGIN_NAME: &str = "libptsim_plugin.so";

/// The emulator binary.
pub const QEMU: &str = "qemu-x86_64";

/// Nanoseconds per guest instruction of the virtual clock (a nominal 1 GHz, one
/// instruction per cycle).
pub const NS_PER_INSN: u64 = 1;

/// Virtual instructions a syscall (or signal delivery) takes: the kernel's time is not
/// seen by qemu-user; one instruction keeps the return from the syscall apart from it.
pub const KERNEL_INSNS: u64 = 1;

/// Bytes of executed blocks each thread keeps by default (4 bytes a block: about 16 M
/// blocks, e.g. the last 6 M calls of a call-heavy loop, or half a second of gzip).
pub const DEFAULT_RING: u64 = 64 << 20;

/// What the trace's clock is when the log has no host times (an older plugin wrote it).
pub const FALLBACK_CLOCK: &str = "virtual instruction clock (1 guest instruction = 1 ns, \
    no syscall time): this recording has no host timestamps (written by an older plugin)";

/// Finds `qemu-x86_64` on `PATH`, or says which package provides it.
pub fn find_qemu() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let cand = dir.join(QEMU);
        if cand.is_file() {
            return Ok(cand);
        }
    }
    bail!(
        "{QEMU} was not found on PATH: the emulate backend runs the program under qemu-user. \
         Install it with `apt install qemu-user` (Debian/Ubuntu package qemu-user)"
    )
}

/// Finds the TCG plugin: `$PTSCOPE_EMULATE_PLUGIN`, else [`PLUGIN_NAME`] next to the running
/// executable (where `cargo build -p ptsim-plugin` puts it beside `ptscope`), and checks
/// it as [`load_plugin`] does.
pub fn find_plugin() -> Result<PathBuf> {
    let (path, _) = load_plugin()?;
    Ok(path)
}

/// The TCG plugin ([`find_plugin`]'s), opened for qemu to load: qemu is handed
/// `/proc/PID/fd/N`, the descriptor ptscope checked, never the path again (an ancestor
/// swapped after a check would otherwise make qemu load another user's library as
/// root). The file must belong to root or the user and be writable by nobody else, and
/// so must every directory above it (`ptscope_rootsafe::Loadable::trusted_file`).
pub fn load_plugin() -> Result<(PathBuf, ptscope_rootsafe::Loadable)> {
    let cand = match std::env::var_os("PTSCOPE_EMULATE_PLUGIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().context("cannot locate ptscope's own binary")?;
            exe.parent()
                .context("ptscope's binary has no directory")?
                .join(PLUGIN_NAME)
        }
    };
    if !cand.is_file() {
        bail!(
            "the emulate backend's qemu plugin {} is missing: build it with \
             `cargo build -p ptsim-plugin` (it goes next to ptscope), or point \
             PTSCOPE_EMULATE_PLUGIN at it",
            cand.display()
        );
    }
    let code = ptscope_rootsafe::Loadable::trusted_file(&cand).map_err(|e| {
        anyhow::anyhow!(
            "refusing to load the qemu plugin {}: {e}; qemu runs it with ptscope's \
             privileges, so it must be out of other users' reach (PTSCOPE_EMULATE_PLUGIN \
             names another copy)",
            cand.display()
        )
    })?;
    Ok((cand, code))
}

/// Checks that `exe` is something qemu-user can run: an ELF file, not a script (the
/// kernel runs `#!` interpreters, qemu-user does not).
pub fn check_program(exe: &Path) -> Result<()> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(exe)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("cannot read the program {}", exe.display()))?;
    let head = &head[..n];
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
        bail!(
            "{} is a script (#!{}): qemu-user runs only ELF programs; run its interpreter \
             under the emulate backend instead, e.g. `ptscope run --backend emulate -- \
             INTERPRETER {}`",
            exe.display(),
            String::from_utf8_lossy(line).trim(),
            exe.display()
        );
    }
    if !head.starts_with(b"\x7fELF") {
        bail!(
            "{} is not an ELF program: the emulate backend runs x86-64 ELF programs only",
            exe.display()
        );
    }
    Ok(())
}

/// Runs `argv` under qemu with the plugin, writing the block log to `dir/`[`LOG_NAME`].
/// `exe` is the program's path (qemu does not search `PATH`); the program still sees
/// `argv[0]` as given.
///
/// `dir` must be private to the user (a working directory ptscope created or was given).
/// With `ring`, each thread keeps only its last `ring` bytes of executions (4 per block),
/// written when it ends: a flight recorder; without, everything is written.
pub fn record(argv: &[OsString], exe: &Path, dir: &Path, ring: Option<u64>) -> Result<ExitStatus> {
    record_with(argv, exe, dir, ring, &[], false, &|_| {})
}

/// [`record`] with triggers: the recording stops at the first hit of any of `triggers`
/// (the program runs on, untraced), or with `multi` each hit takes a snapshot of every
/// thread's ring (needs `ring`). `say` tells the user what the recording waits for.
pub fn record_with(
    argv: &[OsString],
    exe: &Path,
    dir: &Path,
    ring: Option<u64>,
    triggers: &[TriggerPoint],
    multi: bool,
    say: &dyn Fn(&str),
) -> Result<ExitStatus> {
    let qemu = find_qemu()?;
    // Held open until qemu has exited: qemu (and each forked child's) loads it from it.
    let (_, plugin) = load_plugin()?;
    check_program(exe)?;
    let Some((argv0, args)) = argv.split_first() else {
        bail!("no program to run");
    };
    let log = dir.join(LOG_NAME);
    // The plugin creates the file itself: make sure nothing (a link) is in its place.
    match std::fs::symlink_metadata(&log) {
        Ok(_) => std::fs::remove_file(&log)
            .with_context(|| format!("cannot remove the old block log {}", log.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot check {}", log.display())),
    }
    // A reused working directory must not mix an earlier run's children or rings in.
    for e in std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = (name.starts_with("ring-") && name.ends_with(".bin"))
            || process::process_logs(dir)
                .map(|l| l.iter().skip(1).any(|(_, p)| *p == e.path()))
                .unwrap_or(false);
        if ours {
            std::fs::remove_file(e.path())
                .with_context(|| format!("cannot remove the old {}", e.path().display()))?;
        }
    }
    let mut spec = OsString::from(plugin.path().as_os_str());
    spec.push(",out=");
    spec.push(log.as_os_str());
    if let Some(r) = ring {
        spec.push(format!(",ring={}", r.max(4096)));
    }
    for t in triggers {
        spec.push(format!(",trigger={}", t.plugin_arg()));
    }
    if multi {
        spec.push(",multi=1");
    }
    let base = ptscope_interrupt::presses();
    // The program's children (each a qemu of its own) may outlive it: as their reaper,
    // ptscope waits for them, so their logs and rings are whole when gathered.
    let reaper = process::Reaper::start();
    let mut cmd = std::process::Command::new(&qemu);
    cmd.arg("-plugin")
        .arg(spec)
        .arg("-0")
        .arg(argv0)
        .arg(exe)
        .args(args);
    // qemu stays in ptscope's process group, so a terminal's Ctrl-C reaches the program
    // as it would without ptscope; it dies with ptscope (its children: the sentinel).
    ptscope_interrupt::children::die_with_ptscope(&mut cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", qemu.display()))?;
    let status = process::wait_stopping_at_press(&mut child, base)
        .with_context(|| format!("lost track of {}", qemu.display()))?;
    reaper.wait_for_orphans(say);
    if ring.is_some() {
        append_rings(dir, &log)?;
    }
    Ok(status)
}

/// Header of a ring slot in a `ring-PID-TID.bin` file: `seq u64`, `used u32`, `size u32`
/// (the data bytes of every slot of the file).
const SLOT_HEADER: usize = 16;

/// A ring file's used slots, oldest first; empty if the file is not one the plugin wrote.
/// Only slot headers and used bytes are read: a short-lived process's ring is a mostly
/// unwritten (sparse) file of the full ring size.
fn ring_slots(path: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut head = [0u8; SLOT_HEADER];
    if f.read_exact_at(&mut head, 0).is_err() {
        return Ok(Vec::new());
    }
    let size = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as u64;
    let stride = SLOT_HEADER as u64 + size;
    if size == 0 || !len.is_multiple_of(stride) {
        return Ok(Vec::new());
    }
    let mut slots: Vec<(u64, Vec<u8>)> = Vec::new();
    for at in (0..len).step_by(stride as usize) {
        f.read_exact_at(&mut head, at)?;
        let seq = u64::from_le_bytes(head[..8].try_into().unwrap_or([0; 8]));
        let used = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as u64;
        if seq == 0 || used == 0 || used > size {
            continue;
        }
        let mut data = vec![0u8; used as usize];
        f.read_exact_at(&mut data, at + SLOT_HEADER as u64)?;
        slots.push((seq, data));
    }
    slots.sort_by_key(|s| s.0);
    Ok(slots.into_iter().map(|s| s.1).collect())
}

/// After qemu has exited (however: a Ctrl-C or a crash runs no plugin exit code), moves
/// every thread's ring file (`ring-PID-TID.bin`) into its process's block log: the first
/// process's is `log`, a forked child's is beside it.
fn append_rings(dir: &Path, log: &Path) -> Result<()> {
    let mut rings: Vec<(u32, u32, PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (pid, tid) = name
                .strip_prefix("ring-")?
                .strip_suffix(".bin")?
                .split_once('-')?;
            Some((pid.parse().ok()?, tid.parse().ok()?, e.path()))
        })
        .collect();
    rings.sort();
    let main_pid = std::fs::read(log).ok().and_then(|d| {
        d.get(16..20)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    });
    let mut at = 0;
    while at < rings.len() {
        let pid = rings[at].0;
        let n = rings[at..].iter().take_while(|r| r.0 == pid).count();
        let target = if Some(pid) == main_pid {
            log.to_path_buf()
        } else {
            dir.join(process::child_log_name(pid))
        };
        let these: Vec<(u32, PathBuf)> = rings[at..at + n]
            .iter()
            .map(|(_, tid, p)| (*tid, p.clone()))
            .collect();
        if target.is_file() {
            append_process_rings(&target, these)?;
        } else {
            // No log to name its blocks (the child could not make one): nothing to keep.
            for (_, p) in these {
                let _ = std::fs::remove_file(p);
            }
        }
        at += n;
    }
    Ok(())
}

/// Appends one process's ring files to its log: their used slots, oldest first, become
/// the threads' exec chunks. The log is first cut back to its last whole chunk (qemu may
/// have died while writing one), so what follows still parses. The ring files are removed.
fn append_process_rings(log: &Path, rings: Vec<(u32, PathBuf)>) -> Result<()> {
    use ptsim::blocklog::{chunk_header, whole_chunks_len, KIND_EXEC};
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::OpenOptionsExt;
    if rings.is_empty() {
        return Ok(());
    }
    let mut out = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)
        .with_context(|| format!("cannot open the block log {}", log.display()))?;
    let data = std::fs::read(log).with_context(|| format!("cannot read {}", log.display()))?;
    out.set_len(whole_chunks_len(&data) as u64)
        .and_then(|_| out.seek(SeekFrom::End(0)))
        .with_context(|| format!("cannot write {}", log.display()))?;
    let mut w = std::io::BufWriter::new(out);
    for (tid, path) in &rings {
        let slots = ring_slots(path)
            .with_context(|| format!("cannot read the ring file {}", path.display()))?;
        for data in slots {
            w.write_all(&chunk_header(KIND_EXEC, *tid, data.len() as u64))
                .and_then(|_| w.write_all(&data))
                .with_context(|| format!("cannot write {}", log.display()))?;
        }
    }
    w.flush()
        .with_context(|| format!("cannot write {}", log.display()))?;
    for (_, path) in rings {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// One ELF file's functions, by link-time address.
struct FileSyms {
    /// `(start, end, name)` from its symbol table, sorted by start.
    funcs: Vec<(u64, u64, Sym)>,
    /// Debug-file symbols and `.eh_frame` ranges, for stripped files.
    ranges: Option<FunctionRanges>,
    segments: Vec<LoadSegment>,
    dso: Sym,
}

/// A symbol's name as perf prints it: C++ names demangled without their parameter list
/// (`std::error_category::error_category`), Rust's without their hash, so traces match
/// the other paths'.
fn perf_name(raw: &str) -> std::borrow::Cow<'_, str> {
    // Rust's names (v0 `_R…`, or legacy `_ZN…17h<hash>E`) as perf prints them: no hash.
    if let Some(r) = ptscope_symbols::demangle_rust(raw) {
        return r.into();
    }
    if !raw.starts_with("_Z") {
        return raw.into();
    }
    let Some(d) = ptscope_symbols::demangle_cpp(raw) else {
        return raw.into();
    };
    // Drop `[clone .cold]` suffixes (perf names a split-off part as its function), then
    // the trailing `(…)` (and a `const` after it), matching parentheses from the end.
    let mut body = d.as_str();
    while let Some(i) = body.rfind(" [clone ").filter(|_| body.ends_with(']')) {
        body = &body[..i];
    }
    let body = body.strip_suffix(" const").unwrap_or(body);
    if body.ends_with(')') {
        let mut depth = 0i32;
        for (i, c) in body.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        if i > 0 {
                            return body[..i].to_string().into();
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
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
    if let (Some(da), Some(db)) = (
        ptscope_symbols::demangle_rust(a.name),
        ptscope_symbols::demangle_rust(b.name),
    ) {
        return da.len() > db.len();
    }
    a.name.len() > b.name.len()
}

/// The function symbols of one table (`.symtab`, or `.dynsym` when `dynamic`), one per
/// address, as `(start, end, name)` sorted by start; a symbol without a size ends where
/// the next one starts.
fn function_symbols(
    obj: &object::File<'_>,
    dynamic: bool,
    strings: &mut StringTable,
) -> Vec<(u64, u64, Sym)> {
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
    let mut best: Vec<Candidate<'_>> = Vec::new();
    for c in cands {
        match best.last_mut() {
            Some(b) if b.addr == c.addr => {
                if better(&c, b) {
                    *b = c;
                }
            }
            _ => best.push(c),
        }
    }
    let mut out = Vec::with_capacity(best.len());
    for (i, c) in best.iter().enumerate() {
        let end = if c.size > 0 {
            c.addr.saturating_add(c.size)
        } else {
            best.get(i + 1).map_or(c.addr.saturating_add(1), |n| n.addr)
        };
        out.push((c.addr, end, strings.intern(&perf_name(c.name))));
    }
    out
}

/// `NAME@plt` for each PLT entry, as perf names them: the `.rela.plt` relocations in
/// order, one 16-byte entry each, in `.plt.sec` when the file has one (IBT), else in
/// `.plt` after its 16-byte header.
fn plt_symbols(obj: &object::File<'_>, strings: &mut StringTable) -> Vec<(u64, u64, Sym)> {
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
        out.push((start, start + ENTRY, strings.intern(&format!("{name}@plt"))));
    }
    out
}

/// A code mapping of the traced process.
#[derive(Clone)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    path: String,
}

/// Names addresses from the files the program mapped, caching every answer.
struct Resolver {
    maps: Vec<Mapping>,
    files: FxHashMap<String, Option<FileSyms>>,
    /// Address → its location, interned in the events' table.
    cache: FxHashMap<u64, LocationHandle>,
    /// Functions already named by an entry address, so a stripped function keeps one name.
    unknown: Sym,
}

impl Resolver {
    fn new(log: &BlockLog, strings: &mut StringTable) -> Self {
        let mut maps: Vec<Mapping> = Vec::new();
        // Later snapshots first: a reused range (dlclose + dlopen) names the newest file.
        for snap in log.maps.iter().rev() {
            for m in &snap.entries {
                if !m.path.starts_with('/') {
                    continue;
                }
                if maps
                    .iter()
                    .any(|o| o.start == m.start && o.end == m.end && o.path == m.path)
                {
                    continue;
                }
                maps.push(Mapping {
                    start: m.start,
                    end: m.end,
                    pgoff: m.pgoff,
                    path: m.path.clone(),
                });
            }
        }
        Resolver {
            maps,
            files: FxHashMap::default(),
            cache: FxHashMap::default(),
            unknown: strings.intern("[unknown]"),
        }
    }

    fn load(path: &str, strings: &mut StringTable) -> Option<FileSyms> {
        let file = MappedFile::open_regular(path).ok()?;
        let elf = file.elf().ok()?;
        // As perf does: a debug file's symbol table if one is installed, else the file's
        // own `.symtab`, else its `.dynsym`.
        let debug =
            ptscope_symbols::find_debug_file(&elf).and_then(|d| MappedFile::open_regular(d).ok());
        let mut funcs = debug
            .as_ref()
            .and_then(|d| d.elf().ok())
            .map(|d| function_symbols(d.object(), false, strings))
            .unwrap_or_default();
        if funcs.is_empty() {
            funcs = function_symbols(elf.object(), false, strings);
        }
        if funcs.is_empty() {
            funcs = function_symbols(elf.object(), true, strings);
        }
        let plt = plt_symbols(elf.object(), strings);
        if !plt.is_empty() {
            funcs.extend(plt);
            funcs.sort_by_key(|f| f.0);
        }
        Some(FileSyms {
            funcs,
            ranges: FunctionRanges::load(Path::new(path)).ok(),
            segments: elf.load_segments(),
            dso: strings.intern(path),
        })
    }

    fn locate(&mut self, ip: u64, strings: &mut StringTable) -> LocationHandle {
        if let Some(&h) = self.cache.get(&ip) {
            return h;
        }
        let loc = self.resolve(ip, strings);
        let h = strings.intern_location(loc);
        self.cache.insert(ip, h);
        h
    }

    fn resolve(&mut self, ip: u64, strings: &mut StringTable) -> Location {
        let Some(m) = self
            .maps
            .iter()
            .find(|m| ip >= m.start && ip < m.end)
            .cloned()
        else {
            // JIT code or code in an anonymous mapping: nothing names it.
            return Location::new(ip, Symbol::FromPerf(self.unknown), 0);
        };
        if !self.files.contains_key(&m.path) {
            let f = Self::load(&m.path, strings);
            self.files.insert(m.path.clone(), f);
        }
        let dso = strings.intern(&m.path);
        let Some(Some(f)) = self.files.get(&m.path) else {
            let name = strings.intern(&format!("[unknown @ {ip:#x} ({})]", m.path));
            return Location {
                ip,
                symbol: Symbol::FromPerf(name),
                offset: 0,
                dso: Some(dso),
            };
        };
        let off = ip - m.start + m.pgoff;
        let vaddr = f
            .segments
            .iter()
            .find(|s| s.executable && off >= s.offset && off - s.offset < s.filesz.max(s.memsz))
            .map(|s| s.vaddr.wrapping_add(off - s.offset));
        let found = vaddr.and_then(|v| {
            let i = f.funcs.partition_point(|x| x.0 <= v);
            let hit = f.funcs[..i]
                .iter()
                .rev()
                .take(16)
                .filter(|x| v < x.1)
                .min_by_key(|x| x.1 - x.0)
                .map(|x| (x.0, x.2));
            hit.or_else(|| {
                let r = f.ranges.as_ref()?.function_at(v)?;
                Some((r.start, strings.intern(&r.name)))
            })
            .map(|(start, name)| (v - start, name))
        });
        match found {
            Some((offset, name)) => Location {
                ip,
                symbol: Symbol::FromPerf(name),
                offset,
                dso: Some(f.dso),
            },
            None => {
                let name = strings.intern(&format!("[unknown @ {ip:#x} ({})]", m.path));
                Location {
                    ip,
                    symbol: Symbol::FromPerf(name),
                    offset: 0,
                    dso: Some(f.dso),
                }
            }
        }
    }
}

/// Figures about one conversion.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Guest instructions executed.
    pub instructions: u64,
    /// Block executions logged.
    pub blocks: u64,
    /// Threads traced.
    pub threads: u64,
    /// Branch events produced.
    pub events: u64,
}

/// The events of an emulate recording, in time order.
pub struct Events {
    notices: Vec<String>,
    /// What the user should know that does not make the trace incomplete.
    infos: Vec<String>,
    /// The clock the times follow; `None`: the fallback instruction clock.
    clock: Option<ClockKind>,
    /// Threads that exec'd (untraced afterwards).
    execs: Vec<ExecNotice>,
    /// Time of the first event, where the trace's time 0 is.
    origin: u64,
    strings: StringTable,
    resolver: Resolver,
    pid: u32,
    comm: Sym,
    threads: Vec<ThreadSteps>,
    /// `(time of a thread's next event, thread index)`, smallest first.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>>,
    produced: u64,
    stats: Stats,
}

/// One thread's steps that become events (clocks already in nanoseconds), and how far
/// they were handed out.
struct ThreadSteps {
    tid: u32,
    steps: Vec<truth::Step>,
    next: usize,
    comm_sent: bool,
}

/// The event one step (kept by [`Events::from_log`]) becomes.
fn step_event(
    res: &mut Resolver,
    strings: &mut StringTable,
    thread: Thread,
    s: &truth::Step,
) -> Event {
    let null = strings.intern_location(Location::new(0, Symbol::Unknown, 0));
    let (change, kind, src, dst) = match s.kind {
        StepKind::Start => (
            Some(TraceStateChange::Start),
            None,
            null,
            res.locate(s.to, strings),
        ),
        StepKind::Jcc { .. } | StepKind::Jmp | StepKind::IndirectJmp => (
            None,
            Some(Kind::Jump),
            res.locate(s.from, strings),
            res.locate(s.to, strings),
        ),
        StepKind::Call | StepKind::IndirectCall => (
            None,
            Some(Kind::Call),
            res.locate(s.from, strings),
            res.locate(s.to, strings),
        ),
        StepKind::Return => (
            None,
            Some(Kind::Return),
            res.locate(s.from, strings),
            res.locate(s.to, strings),
        ),
        StepKind::Syscall => (
            Some(TraceStateChange::End),
            Some(Kind::Syscall),
            res.locate(s.from, strings),
            null,
        ),
        StepKind::Async { .. } => (
            Some(TraceStateChange::End),
            Some(Kind::Async),
            res.locate(s.from, strings),
            null,
        ),
    };
    Event::Ok {
        thread,
        time: s.clock,
        in_transaction: false,
        data: EventData::Trace {
            change,
            kind,
            src,
            dst,
        },
    }
}

impl Events {
    /// Reads the block log at `log` and derives every thread's events; `comm` names the
    /// threads (the program's file name). Names are interned into `strings`.
    ///
    /// A log cut short (qemu killed while writing, e.g. by a second Ctrl-C) is read up to
    /// its last whole chunk, with a notice ([`Events::notices`]).
    ///
    /// Times follow `clock`; a log without host times falls back to the instruction
    /// clock, with a notice ([`Events::infos`]).
    pub fn open(log: &Path, comm: &str, strings: StringTable, clock: ClockKind) -> Result<Self> {
        // Mapped, not read: the parse copies what it keeps, and the file's pages (already
        // in the page cache) are neither copied nor held once it is done.
        let file = MappedFile::open_regular(log)
            .with_context(|| format!("cannot read the emulate block log {}", log.display()))?;
        let data = file.bytes();
        let mut notices = Vec::new();
        let blocks = match BlockLog::parse_compact(data) {
            Ok(b) => b,
            Err(ptsim::blocklog::LogError::Malformed { offset, what })
                if offset > 0
                    && (what.contains("past the end") || what.contains("truncated chunk")) =>
            {
                notices.push(format!(
                    "the block log {} ends mid-write (qemu was stopped while writing it): \
                     the trace keeps the {offset} bytes written whole; the last moments \
                     of some threads are missing",
                    log.display()
                ));
                BlockLog::parse_compact(&data[..offset]).with_context(|| {
                    format!("cannot read the emulate block log {}", log.display())
                })?
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot read the emulate block log {}", log.display())
                })
            }
        };
        drop(file);
        let mut ev = Self::from_log_clocked(&blocks, comm, strings, clock);
        ev.notices = notices;
        Ok(ev)
    }

    /// [`Events::from_log`] with times following `clock` (the fallback instruction clock,
    /// with a notice in [`Events::infos`], for a log without host times).
    pub fn from_log_clocked(
        blocks: &BlockLog,
        comm: &str,
        strings: StringTable,
        clock: ClockKind,
    ) -> Self {
        let timeline = clock::Timeline::new(blocks, clock);
        let global = |c: u64| c.saturating_mul(NS_PER_INSN);
        let mut ev = Self::build(blocks, comm, strings, &global, timeline.as_ref());
        match timeline {
            Some(t) => {
                ev.clock = Some(clock);
                ev.infos.push(format!(
                    "emulate backend: times are the {}",
                    clock.describe()
                ));
                for e in &t.execs {
                    ev.infos.push(format!(
                        "thread {} exec'd {} at {:.6} s: qemu-user runs the new program \
                         natively, so nothing after the exec is traced",
                        e.tid,
                        if e.path.is_empty() {
                            "another program".to_string()
                        } else {
                            e.path.clone()
                        },
                        e.time as f64 / 1e9
                    ));
                }
                ev.execs = t.execs;
            }
            None => ev.infos.push(format!(
                "emulate backend: times are the {FALLBACK_CLOCK}; --clock {} cannot apply",
                clock.name()
            )),
        }
        ev
    }

    /// What makes this recording incomplete (a log cut short).
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// What the user should know about the trace that does not make it incomplete: the
    /// clock its times follow, threads that exec'd.
    pub fn infos(&self) -> &[String] {
        &self.infos
    }

    /// The clock the times follow; `None` for a log without host times (the instruction
    /// clock, [`FALLBACK_CLOCK`]).
    pub fn clock(&self) -> Option<ClockKind> {
        self.clock
    }

    /// Threads that exec'd: what ran after is not traced.
    pub fn execs(&self) -> &[ExecNotice] {
        &self.execs
    }

    /// Time of the first event (where the trace's time 0 is).
    pub fn origin(&self) -> u64 {
        self.origin
    }

    /// Instants for the trace itself, as `(ns from the trace's first event, text)`: the
    /// clock the times follow (at 0), then each exec.
    pub fn markers(&self) -> Vec<(u64, String)> {
        let clock = match self.clock {
            Some(c) => format!("clock: {}", c.describe()),
            None => format!("clock: {FALLBACK_CLOCK}"),
        };
        let mut out = vec![(0, clock)];
        for e in &self.execs {
            out.push((
                e.time.saturating_sub(self.origin),
                format!(
                    "exec: thread {} ran {}; qemu-user runs it natively, nothing after this \
                     is traced",
                    e.tid,
                    if e.path.is_empty() {
                        "another program"
                    } else {
                        &e.path
                    }
                ),
            ));
        }
        out.sort_by_key(|m| m.0);
        out
    }

    /// The events of a block log already read, with `time` turning the global instruction
    /// clock into nanoseconds (a syscall takes [`KERNEL_INSNS`]: `ptsim::truth::derive(log,
    /// KERNEL_INSNS)` gives the same steps).
    ///
    /// Each thread's steps are cut down, as soon as they are derived, to those that become
    /// events (calls, returns, jumps between functions, stops and starts); the events are
    /// made one at a time from those, merged across threads in time order. A step is 40
    /// bytes against an event's 136, and most steps (conditional branches, jumps inside a
    /// function) make no event: the whole trace is never held as events.
    pub fn from_log(
        blocks: &BlockLog,
        comm: &str,
        strings: StringTable,
        time: &dyn Fn(u64) -> u64,
    ) -> Self {
        Self::build(blocks, comm, strings, time, None)
    }

    /// [`Events::from_log`], with each thread's times from `timeline` when given.
    fn build(
        blocks: &BlockLog,
        comm: &str,
        mut strings: StringTable,
        time: &dyn Fn(u64) -> u64,
        timeline: Option<&clock::Timeline>,
    ) -> Self {
        let mut res = Resolver::new(blocks, &mut strings);
        let comm = strings.intern(&comm.chars().take(15).collect::<String>());
        let mut threads: Vec<ThreadSteps> = Vec::new();
        // Whether a jump (source, destination) makes an event, in a direct-mapped cache:
        // most blocks end in the same few jumps, and one compare is cheaper than naming
        // both ends again (two hash probes), for tens of millions of taken branches.
        const JUMP_CACHE: usize = 1 << 13;
        let mut jumps: Vec<(u64, u64, bool)> = vec![(0, 0, false); JUMP_CACHE];
        let keep = |s: &truth::Step| match s.kind {
            StepKind::Jcc { taken: false } => false,
            StepKind::Jcc { taken: true } | StepKind::Jmp | StepKind::IndirectJmp => {
                let h = (s.from ^ s.to.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let slot = &mut jumps[(h >> 51) as usize];
                // (0, 0) never matches: no jump leaves address 0 for address 0.
                if slot.0 == s.from && slot.1 == s.to && (s.from | s.to) != 0 {
                    return slot.2;
                }
                // Jumps inside a function change no stack; across functions they are
                // tail calls (or PLT stubs) and must be seen.
                let src = res.locate(s.from, &mut strings);
                let dst = res.locate(s.to, &mut strings);
                let (src, dst) = (strings.location(src), strings.location(dst));
                let keep = src.symbol != dst.symbol || dst.offset == 0;
                *slot = (s.from, s.to, keep);
                keep
            }
            _ => true,
        };
        // Steps are cut as they are made: the dropped ones (most of them) are never held.
        // `derive_each_kept` hands the threads over in log order.
        let mut index = 0;
        let tstats = truth::derive_each_kept(blocks, KERNEL_INSNS, keep, |t| {
            let ti = index;
            index += 1;
            let mut steps = t.steps;
            steps.shrink_to_fit();
            if let Some(tl) = timeline {
                tl.convert(ti, &mut steps);
            }
            if !steps.is_empty() {
                threads.push(ThreadSteps {
                    tid: t.tid,
                    steps,
                    next: 0,
                    comm_sent: false,
                });
            }
        });
        // The clock conversion is applied once per step, up front: it may be any function.
        if timeline.is_none() {
            for t in &mut threads {
                for s in &mut t.steps {
                    s.clock = time(s.clock);
                }
            }
        }
        let total: u64 = threads.iter().map(|t| t.steps.len() as u64 + 1).sum();
        let mut heap = std::collections::BinaryHeap::with_capacity(threads.len());
        for (i, t) in threads.iter().enumerate() {
            heap.push(std::cmp::Reverse((t.steps[0].clock, i)));
        }
        let origin = heap.peek().map_or(0, |r| r.0 .0);
        let stats = Stats {
            instructions: tstats.instructions,
            blocks: tstats.blocks,
            threads: threads.len() as u64,
            events: total,
        };
        Events {
            notices: Vec::new(),
            infos: Vec::new(),
            clock: None,
            execs: Vec::new(),
            origin,
            strings,
            resolver: res,
            pid: blocks.pid,
            comm,
            threads,
            heap,
            produced: 0,
            stats,
        }
    }

    /// The next event, in time order (a thread's own order kept at equal times, the
    /// threads in log order).
    pub fn next_event(&mut self) -> Option<Event> {
        let std::cmp::Reverse((_, i)) = self.heap.pop()?;
        let t = &mut self.threads[i];
        let thread = Thread {
            pid: Some(self.pid),
            tid: Some(t.tid),
        };
        let event = if !t.comm_sent {
            t.comm_sent = true;
            Event::Ok {
                thread,
                time: t.steps[0].clock,
                in_transaction: false,
                data: EventData::Comm {
                    name: self.comm,
                    exec: false,
                },
            }
        } else {
            let s = t.steps[t.next];
            t.next += 1;
            step_event(&mut self.resolver, &mut self.strings, thread, &s)
        };
        let t = &self.threads[i];
        if let Some(s) = t.steps.get(t.next) {
            self.heap.push(std::cmp::Reverse((s.clock, i)));
        } else {
            // Done with this thread: give its steps back.
            self.threads[i].steps = Vec::new();
        }
        self.produced += 1;
        Some(event)
    }

    /// The names the events refer to.
    pub fn strings(&self) -> &StringTable {
        &self.strings
    }

    /// The names, for interning more (the naming step).
    pub fn strings_mut(&mut self) -> &mut StringTable {
        &mut self.strings
    }

    /// Figures about the recording.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The name the events give the function holding `ip` (e.g. to compare with names
    /// from elsewhere).
    pub fn function_name(&mut self, ip: u64) -> String {
        let loc = self.resolver.locate(ip, &mut self.strings);
        let symbol = self.strings.location(loc).symbol;
        self.strings.display(symbol).to_string()
    }

    /// Gives the names back, for the next input.
    pub fn into_strings(self) -> StringTable {
        self.strings
    }

    /// Events not yet handed out.
    pub fn remaining(&self) -> usize {
        (self.stats.events - self.produced) as usize
    }
}

impl ptscope_event::EventSource for Events {
    fn next_event(&mut self) -> Result<Option<Event>, ptscope_event::source::SourceError> {
        Ok(Events::next_event(self))
    }
    fn strings(&self) -> &StringTable {
        &self.strings
    }
    fn stats(&self) -> ptscope_event::source::Stats {
        ptscope_event::source::Stats {
            events: self.produced,
            ..Default::default()
        }
    }
    fn warnings(&self) -> Vec<ptscope_event::source::Warning> {
        Vec::new()
    }
    fn finish(self: Box<Self>) -> ptscope_event::source::Finished {
        let markers = self.markers();
        ptscope_event::source::Finished {
            // A log cut short makes the trace incomplete.
            incomplete: self.notices,
            markers,
            ..ptscope_event::source::Finished::new(self.strings)
        }
    }
}
