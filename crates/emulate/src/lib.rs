//! Exact call traces without Intel PT: the `emulate` backend.
//!
//! The program runs under `qemu-x86_64` (qemu-user) with ptscope's TCG plugin
//! (`tools/ptsim-plugin`) in stack mode: it logs the blocks a call stack needs (calls,
//! returns, indirect jumps, syscalls, jumps between functions, signal handlers' entries)
//! and counts the instructions of the others inline. Decoding reads each thread's log in
//! one pass ([`walk`]), every block's action cached at its first execution, into the
//! thread's exact steps ([`ptscope_event::exact`]): every call and return that ran, at
//! the instruction, named from the ELF files the program mapped ([`names`]). Threads are
//! independent: each can be decoded on its own core, in memory that does not grow with
//! the recording.
//!
//! Limits: user space only, x86-64 on x86-64, no attach; each thread's last moments are
//! kept in a ring in the plugin (or everything), snapshot at exit or at a trigger
//! ([`trigger`], [`recording::Snapshot`]); forked children are traced as their own
//! processes. Times follow the host clock or a virtual one ([`clock`]).
//!
//! Decoding a recording, here one made by hand: `main` (at 0x1000, `call 0x2000`) calls
//! the leaf at 0x2000 (`ret`), which returns to the caller's next block.
//!
//! ```
//! use ptscope_blocklog::format::*;
//! use ptscope_emulate::{ClockKind, Decoding, Recording};
//! use ptscope_event::exact::ExactKind;
//!
//! let dir = tempfile::tempdir()?;
//! let mut log = Vec::new();
//! let mut chunk = |kind, tid, p: &[u8]| {
//!     log.extend_from_slice(&chunk_header(kind, tid, p.len() as u64));
//!     log.extend_from_slice(p);
//! };
//! chunk(KIND_HEADER, 0, &header_payload(7, MODE_STACK));
//! let mut tbs = Vec::new();
//! push_tb_record(&mut tbs, 0, 0x1000, 1, 5, &[0xe8, 0xfb, 0x0f, 0, 0], &[0xe8], 0);
//! push_tb_record(&mut tbs, 1, 0x2000, 1, 1, &[0xc3], &[0xc3], 0);
//! push_tb_record(&mut tbs, 2, 0x1005, 1, 2, &[0x0f, 0x05], &[0x0f, 0x05], 0);
//! chunk(KIND_TBS, 0, &tbs);
//! let words: Vec<u8> = [MARKER, 0, 0, 0, 1, 2].iter().flat_map(|w| w.to_le_bytes()).collect();
//! chunk(KIND_EXEC, 7, &words);
//! std::fs::write(dir.path().join(ptscope_emulate::LOG_NAME), &log)?;
//!
//! let rec = Recording::open(dir.path())?;
//! let view = rec.view()?;
//! let decoding = Decoding::new(&view, 0, ClockKind::Host, "demo");
//! let mut walker = decoding.walker(0);
//! let mut steps = Vec::new();
//! while walker.fill(&mut steps) {}
//! let kinds: Vec<ExactKind> = steps.iter().map(|s| s.kind).collect();
//! assert!(matches!(
//!     kinds[..],
//!     [ExactKind::Start(_), ExactKind::Call { ret: 0x1005 }, ExactKind::Return, ExactKind::Syscall { .. }]
//! ));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod clock;
mod decoding;
pub mod events;
pub mod names;
pub mod process;
pub mod recording;
pub mod session;
mod snapshot;
pub mod trigger;
pub mod walk;

pub use clock::{ClockKind, ExecNotice, TimeBase};
pub use decoding::{Decoding, ThreadInfo, FALLBACK_CLOCK};
pub use process::HitReport;
pub use recording::{Recording, View};
pub use trigger::TriggerPoint;

use anyhow::{bail, Context, Result};
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
        let ours = ((name.starts_with("ring-") || name.starts_with("blocks-"))
            && name.ends_with(".bin"))
            || recording::process_logs(dir)
                .map(|l| l.iter().skip(1).any(|(_, p)| *p == e.path()))
                .unwrap_or(false);
        if ours {
            std::fs::remove_file(e.path())
                .with_context(|| format!("cannot remove the old {}", e.path().display()))?;
        }
    }
    let mut spec = OsString::from(plugin.path().as_os_str());
    spec.push(",mode=stack,out=");
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

/// A ring file's used slots (sequence number, offset of the data in the file, bytes
/// used), oldest first; empty if the file is not one the plugin wrote.
/// Only slot headers are read: a short-lived process's ring is a mostly unwritten
/// (sparse) file of the full ring size.
fn ring_slots(f: &std::fs::File) -> std::io::Result<Vec<(u64, u64, u64)>> {
    use std::os::unix::fs::FileExt;
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
    let mut slots = Vec::new();
    for at in (0..len).step_by(stride as usize) {
        f.read_exact_at(&mut head, at)?;
        let seq = u64::from_le_bytes(head[..8].try_into().unwrap_or([0; 8]));
        let used = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as u64;
        if seq == 0 || used == 0 || used > size {
            continue;
        }
        slots.push((seq, at + SLOT_HEADER as u64, used));
    }
    slots.sort_by_key(|s| s.0);
    Ok(slots)
}

/// Appends `len` bytes of `from` at `at` to `out` (at its file position): in the kernel
/// (`copy_file_range`, no copy through this process's memory), else by reading them.
fn append_range(
    out: &mut std::fs::File,
    from: &std::fs::File,
    at: u64,
    len: u64,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let (mut off, end) = (at as libc::loff_t, (at + len) as libc::loff_t);
    while off < end {
        // SAFETY: both descriptors are open for the call; `off` is a valid loff_t that
        // the kernel advances; a null out-offset means `out`'s own file position.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off,
                out.as_raw_fd(),
                std::ptr::null_mut(),
                (end - off) as usize,
                0,
            )
        };
        if n > 0 {
            continue;
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        // Not supported here (an old kernel, a file system that refuses): copy in memory.
        let mut data = vec![0u8; (end - off) as usize];
        from.read_exact_at(&mut data, off as u64)?;
        return out.write_all(&data);
    }
    Ok(())
}

/// After qemu has exited (however: a Ctrl-C or a crash runs no plugin exit code), moves
/// every thread's ring file (`ring-PID-TID.bin`) into its process's block log: the first
/// process's is `log`, a forked child's is beside it.
fn append_rings(dir: &Path, log: &Path) -> Result<()> {
    let main_pid = std::fs::File::open(log).ok().and_then(|f| {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 4];
        f.read_exact_at(&mut b, 16).ok()?;
        Some(u32::from_le_bytes(b))
    });
    let target = |pid: u32| {
        if Some(pid) == main_pid {
            log.to_path_buf()
        } else {
            dir.join(recording::child_log_name(pid))
        }
    };
    // First each process's block descriptions, which its rings' blocks refer to.
    let blocks: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid = name.strip_prefix("blocks-")?.strip_suffix(".bin")?;
            Some((pid.parse().ok()?, e.path()))
        })
        .collect();
    for (pid, path) in blocks {
        let to = target(pid);
        if to.is_file() {
            append_blocks(&to, &path)?;
        }
        let _ = std::fs::remove_file(path);
    }
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
    let mut at = 0;
    while at < rings.len() {
        let pid = rings[at].0;
        let n = rings[at..].iter().take_while(|r| r.0 == pid).count();
        let target = target(pid);
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

/// Appends a process's blocks file (`blocks-PID.bin`: `used u64`, then whole chunks the
/// plugin wrote there instead of to the log) to its log, after cutting the log back to
/// its last whole chunk; what the file holds past its last whole chunk is left out.
fn append_blocks(log: &Path, blocks: &Path) -> Result<()> {
    use ptscope_blocklog::whole_chunks_len;
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let f =
        std::fs::File::open(blocks).with_context(|| format!("cannot open {}", blocks.display()))?;
    let len = f.metadata()?.len();
    let mut head = [0u8; 8];
    if f.read_exact_at(&mut head, 0).is_err() {
        return Ok(());
    }
    let used = u64::from_le_bytes(head).min(len.saturating_sub(8));
    let mut data = vec![0u8; used as usize];
    f.read_exact_at(&mut data, 8)
        .with_context(|| format!("cannot read {}", blocks.display()))?;
    data.truncate(whole_chunks_len(&data));
    open_to_append(log)?
        .write_all(&data)
        .with_context(|| format!("cannot write {}", log.display()))
}

/// Opens a process's log (not following a link) to append to it, cut back first to its
/// last whole chunk: qemu may have died while writing one, and what follows must parse.
fn open_to_append(log: &Path) -> Result<std::fs::File> {
    use ptscope_blocklog::whole_chunks_len;
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut out = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)
        .with_context(|| format!("cannot open the block log {}", log.display()))?;
    let old = std::fs::read(log).with_context(|| format!("cannot read {}", log.display()))?;
    out.set_len(whole_chunks_len(&old) as u64)
        .and_then(|_| out.seek(SeekFrom::End(0)))
        .with_context(|| format!("cannot write {}", log.display()))?;
    Ok(out)
}

/// Appends one process's ring files to its log (cut back to its last whole chunk first,
/// [`open_to_append`]): their used slots, oldest first, become the threads' exec chunks.
/// The ring files are removed.
fn append_process_rings(log: &Path, rings: Vec<(u32, PathBuf)>) -> Result<()> {
    use ptscope_blocklog::format::{chunk_header, KIND_EXEC, KIND_RING_WRAPPED};
    use std::io::Write;
    if rings.is_empty() {
        return Ok(());
    }
    let mut out = open_to_append(log)?;
    for (tid, path) in &rings {
        let (slots, ring) = std::fs::File::open(path)
            .and_then(|f| Ok((ring_slots(&f)?, f)))
            .with_context(|| format!("cannot read the ring file {}", path.display()))?;
        // Slot 1 overwritten: the thread's first moments are gone, its stack's bottom
        // is not known (the decoder infers it from the returns it sees).
        if slots.first().is_some_and(|s| s.0 > 1) {
            out.write_all(&chunk_header(KIND_RING_WRAPPED, *tid, 0))
                .with_context(|| format!("cannot write {}", log.display()))?;
        }
        for (_, at, used) in slots {
            out.write_all(&chunk_header(KIND_EXEC, *tid, used))
                .and_then(|_| append_range(&mut out, &ring, at, used))
                .with_context(|| format!("cannot write {}", log.display()))?;
        }
    }
    for (_, path) in rings {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_blocklog::format::{
        chunk_header, header_payload, KIND_EXEC, KIND_HEADER, KIND_RING_WRAPPED, KIND_TBS,
        MODE_STACK,
    };
    use ptscope_blocklog::Chunks;

    /// The log's chunks as (kind, thread, payload), which must all be whole.
    fn log_chunks(log: &Path) -> Vec<(u8, u32, Vec<u8>)> {
        let d = std::fs::read(log).expect("log");
        Chunks::new(&d)
            .map(|c| c.expect("whole chunks"))
            .map(|c| (c.kind, c.tid, c.payload.to_vec()))
            .collect()
    }

    fn chunk(kind: u8, tid: u32, payload: &[u8]) -> Vec<u8> {
        let mut c = chunk_header(kind, tid, payload.len() as u64).to_vec();
        c.extend_from_slice(payload);
        c
    }

    /// After a flight recording, the process's blocks file (whole chunks, then a torn one:
    /// qemu killed mid-copy) goes into the log (cut back to its whole chunks) before its
    /// ring's slots, and both files are removed; without a ring file (a thread whose ring
    /// could not be made writes to the log), the log still ends on a whole chunk.
    #[test]
    fn a_blocks_file_goes_into_the_log_before_the_rings() {
        for with_ring in [true, false] {
            blocks_then_rings(with_ring);
        }
    }

    fn blocks_then_rings(with_ring: bool) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let log = dir.path().join(LOG_NAME);
        let mut l = chunk(KIND_HEADER, 0, &header_payload(42, MODE_STACK));
        l.extend_from_slice(&chunk_header(KIND_TBS, 0, 100)[..9]);
        std::fs::write(&log, &l).expect("log");
        let mut blocks = chunk(KIND_TBS, 0, b"first");
        blocks.extend(chunk(KIND_TBS, 0, b"second"));
        let whole = blocks.len();
        blocks.extend(chunk(KIND_TBS, 0, b"torn")[..12].iter());
        let mut file = (whole as u64 + 12).to_le_bytes().to_vec();
        file.extend_from_slice(&blocks);
        file.resize(4096, 0);
        std::fs::write(dir.path().join("blocks-42.bin"), &file).expect("blocks file");
        // One ring slot of 16 bytes, 8 used.
        let mut ring = 1u64.to_le_bytes().to_vec();
        ring.extend_from_slice(&8u32.to_le_bytes());
        ring.extend_from_slice(&16u32.to_le_bytes());
        ring.extend_from_slice(b"execexec\0\0\0\0\0\0\0\0");
        if with_ring {
            std::fs::write(dir.path().join("ring-42-43.bin"), &ring).expect("ring file");
        }

        append_rings(dir.path(), &log).expect("append");

        let got = log_chunks(&log);
        let mut want = vec![
            (KIND_TBS, 0, b"first".to_vec()),
            (KIND_TBS, 0, b"second".to_vec()),
        ];
        if with_ring {
            want.push((KIND_EXEC, 43, b"execexec".to_vec()));
        }
        assert_eq!(got[1..], want);
        assert_eq!(got[0].0, KIND_HEADER);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from(LOG_NAME)]);
    }

    /// A ring that wrapped (slot 1 overwritten): a wrapped marker, then the used bytes of
    /// each slot, oldest first, whatever their place in the file; an unused slot and the
    /// unused tail of a slot are not copied.
    #[test]
    fn a_wrapped_ring_goes_into_the_log_oldest_slot_first() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let log = dir.path().join(LOG_NAME);
        std::fs::write(&log, chunk(KIND_HEADER, 0, &header_payload(42, MODE_STACK))).expect("log");
        let size = 4096u32;
        let mut ring = Vec::new();
        for (seq, used, fill) in [
            (4u64, 24u32, b'd'),
            (0, 0, 0),
            (2, 4096, b'b'),
            (3, 8, b'c'),
        ] {
            ring.extend_from_slice(&seq.to_le_bytes());
            ring.extend_from_slice(&used.to_le_bytes());
            ring.extend_from_slice(&size.to_le_bytes());
            let mut data: Vec<u8> = (0..size).map(|i| fill ^ (i % 251) as u8).collect();
            data[used as usize..].fill(0xee);
            ring.extend_from_slice(&data);
        }
        std::fs::write(dir.path().join("ring-42-7.bin"), &ring).expect("ring file");

        append_rings(dir.path(), &log).expect("append");

        let got = log_chunks(&log);
        let slot = |fill: u8, used: u32| -> Vec<u8> {
            (0..used).map(|i| fill ^ (i % 251) as u8).collect()
        };
        let want = vec![
            (KIND_RING_WRAPPED, 7, Vec::new()),
            (KIND_EXEC, 7, slot(b'b', 4096)),
            (KIND_EXEC, 7, slot(b'c', 8)),
            (KIND_EXEC, 7, slot(b'd', 24)),
        ];
        assert_eq!(got[1..], want);
    }

    /// A range of one file is appended at the other's position, after what it already
    /// holds, however long.
    #[test]
    fn append_range_copies_the_range_at_the_position() {
        use std::io::{Seek, Write};
        let dir = tempfile::tempdir().expect("temporary directory");
        let from: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
        std::fs::write(dir.path().join("from"), &from).expect("from");
        let src = std::fs::File::open(dir.path().join("from")).expect("open");
        let mut out = std::fs::File::create(dir.path().join("out")).expect("out");
        out.write_all(b"head").expect("head");
        append_range(&mut out, &src, 12_345, 2_500_000).expect("append");
        out.write_all(b"tail").expect("tail");
        assert_eq!(out.stream_position().expect("pos"), 2_500_008);
        let got = std::fs::read(dir.path().join("out")).expect("read");
        assert_eq!(&got[..4], b"head");
        assert!(got[4..2_500_004] == from[12_345..2_512_345]);
        assert_eq!(&got[2_500_004..], b"tail");
        // Past the end of the file: an error, not a short copy.
        assert!(append_range(&mut out, &src, 2_999_000, 2_000).is_err());
    }

    /// Where the kernel refuses `copy_file_range` (here: an output opened to append, which
    /// it rejects with `EBADF` on every kernel that has the call), the range is read and
    /// written instead, with the same result.
    #[test]
    fn append_range_copies_through_memory_where_the_kernel_refuses() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("temporary directory");
        let from: Vec<u8> = (0..300_000u32).map(|i| (i * 11 % 251) as u8).collect();
        std::fs::write(dir.path().join("from"), &from).expect("from");
        let src = std::fs::File::open(dir.path().join("from")).expect("open");
        std::fs::write(dir.path().join("out"), b"head").expect("out");
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("out"))
            .expect("open to append");
        append_range(&mut out, &src, 1_000, 250_000).expect("append");
        out.write_all(b"tail").expect("tail");
        let got = std::fs::read(dir.path().join("out")).expect("read");
        assert_eq!(got.len(), 250_008);
        assert_eq!(&got[..4], b"head");
        assert!(got[4..250_004] == from[1_000..251_000]);
        assert_eq!(&got[250_004..], b"tail");
    }
}
