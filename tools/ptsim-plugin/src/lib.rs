//! QEMU TCG plugin (plugin API v1, as loaded by Debian's qemu-user 7.2) that logs the
//! translation blocks a program executes: ptscope's `--backend emulate` and the `ptsim`
//! Intel PT simulator share it.
//!
//! Load with `qemu-x86_64 -plugin libptsim_plugin.so,out=FILE[,mode=stack] prog args`.
//! The log's format is `ptscope-blocklog`'s (its crate documentation describes it).
//!
//! Two modes, one log format:
//!
//! * every-block (the default; ptsim's ground truth): every executed block is logged,
//!   timed by a global instruction clock over all threads (an atomic add per block).
//! * `mode=stack` (ptscope's emulate backend): only the blocks a call stack needs get a
//!   callback and are logged — those ending in a call, return, indirect jump or syscall,
//!   a direct jump that leaves its function (a tail call, a `.cold` part: decided at
//!   translation from the functions of the ELF files, [`regions`]), any block of code no
//!   function covers, the entries of installed signal handlers (`rt_sigaction` is
//!   watched; a handler's block translated before it was installed is retranslated).
//!   Every other block only adds its instructions to an inline counter (a logged
//!   block's callback adds its own), so time stays exact: a `SKIP` word tells the
//!   instructions run between two logged blocks. The
//!   counter cannot tell threads apart, so a process that starts its second thread
//!   switches to every-block logging (the translation cache is flushed; what is logged
//!   from then on is every block, as in the other mode).
//!
//! Host time (`CLOCK_MONOTONIC`) is stamped in each thread's stream at its first block,
//! every chunk (ring slot) and every 4096 logged blocks, and at each syscall's entry and
//! return. Thread names given by `prctl(PR_SET_NAME)` or by writing a thread's
//! `/proc/…/comm` (what `pthread_setname_np` does) are logged as `KIND_COMM` chunks.
//!
//! With `ring=BYTES` the plugin is a flight recorder: each thread writes its stream into
//! a ring of slots in its own file `ring-PID-TID.bin` beside the log, mapped shared, so
//! what it holds survives however the process ends (a Ctrl-C or a crash kills qemu-user
//! without running plugin exit callbacks). Each slot is `[seq u64][used u32][size u32]`
//! (`size`: the slot's data capacity, so the file describes itself) and `used` bytes of
//! the exec stream, starting with a clock `MARKER`; the slot with the lowest `seq` is
//! reused. The recorder (ptscope) appends the slots, in `seq` order, to the log as
//! `KIND_EXEC` chunks once qemu has exited. Block and maps chunks are written to the log
//! at once, unbuffered, for the same reason.
//!
//! Triggers (`trigger=DEV:INO:OFFSET:PATH`, all hex, `PATH` hex-encoded bytes;
//! repeatable): the instruction at file offset `OFFSET` of the file (device `DEV` as
//! `major<<32 | minor`, inode `INO`, or that path) is found when its block is
//! translated, through the last maps snapshot, and only that block (or, inside a block,
//! that instruction) gets the hit callback. A hit writes `KIND_HIT`. Without `multi=1`
//! the first hit stops the recording (the program runs on untraced). With `multi=1` and a
//! ring, every hit copies each thread's ring slots that changed since the last hit into
//! the log as `KIND_RING_COPY`. A snapshot is cut at its hit's clock by the reader.
//!
//! Forks: qemu-user forks the host process, plugin state included. The child (a
//! `pthread_atfork` handler) drops what it inherited and starts its own log beside the
//! first, `STEM-PID.log` for `STEM.log`, with `KIND_HEADER` (its pid), then `KIND_FORK`;
//! its rings are `ring-PID-TID.bin` as everyone's.

mod api;
mod exec;
mod regions;
mod state;
mod syscalls;
mod translate;

use api::*;
use ptscope_blocklog::format::{
    header_payload, KIND_EXEC, KIND_FORK, KIND_HEADER, MODE_EVERY_BLOCK, MODE_STACK,
};
use ptscope_blocklog::parse_maps;
use regions::Regions;
use state::{write_chunk, write_maps, ThreadState, FIRST_EXPECTED, STATES};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The plugin API version this plugin was written against (QEMU checks it on load).
#[no_mangle]
pub static qemu_plugin_version: c_int = 1;

/// Per-thread buffer size before it is handed to the file.
const FLUSH_AT: usize = 1 << 18;

/// The log's buffer, for the small chunks (blocks translated, maps, syscalls). It is
/// smaller than a thread's chunk of executions, which [`write_chunk`] hands to the file
/// directly: copying each into the buffer was ~4 % of recording a call-heavy program.
const LOG_BUFFER: usize = 1 << 16;

/// State shared by all threads (and kept by forked children).
struct Shared {
    /// Flight recorder: `(directory of the ring files, slots per thread)`; `None`: the
    /// exec stream is written to the log.
    ring: Option<(std::path::PathBuf, usize)>,
    /// Bytes of executions per chunk (a ring slot's data).
    chunk: usize,
    /// The first process's log path: children's logs are named after it.
    out_path: String,
    /// Trigger blocks, in argument order.
    triggers: Vec<Trigger>,
    /// A snapshot per trigger hit instead of stopping at the first.
    multi: bool,
}

/// Where a trigger function's entry block lies: a file offset in one file.
struct Trigger {
    dev: (u32, u32),
    ino: u64,
    offset: u64,
    path: String,
}

/// The traced process's own state: a forked child replaces it with its own.
struct Proc {
    pid: u32,
    out: Mutex<BufWriter<File>>,
    /// The last maps snapshot and the functions of the files in it.
    regions: Mutex<Regions>,
    /// Every live thread's state (as addresses), so the exit handler can write what
    /// their buffers hold and a trigger hit can copy their rings.
    threads: Mutex<Vec<usize>>,
    /// Trigger hits so far.
    hits: AtomicU32,
    /// Open descriptors of threads' `comm` files: `(fd, thread)`.
    comm_fds: Mutex<Vec<(i64, u32)>>,
    /// Flight recorder: where block descriptions go (`None`: to the log, each flushed).
    blocks: Mutex<Option<state::BlocksFile>>,
}

/// The blocks file of process `pid` when there is a ring (its directory); `None` without
/// one, or when it cannot be made (descriptions then go to the log).
fn blocks_file(shared: &Shared, pid: u32) -> Option<state::BlocksFile> {
    let (dir, _) = shared.ring.as_ref()?;
    state::BlocksFile::create(dir, pid)
}

static SHARED: OnceLock<Shared> = OnceLock::new();
/// The current process's [`Proc`] (leaked, never freed); null when it is not traced.
static PROC: AtomicPtr<Proc> = AtomicPtr::new(std::ptr::null_mut());

fn proc() -> Option<&'static Proc> {
    // SAFETY: PROC holds null or a leaked `Box<Proc>`, never freed.
    unsafe { PROC.load(Ordering::Acquire).as_ref() }
}

/// Every-block mode's clock: instructions over all threads, one atomic add per block.
static CLOCK: AtomicU64 = AtomicU64::new(0);
/// Stack mode's clock: the instructions run so far. An unlogged block adds its count by
/// an inline op (generated code does a plain add: exact while one thread runs); a logged
/// block's callback adds its own ([`set_icount`]): one op less per logged block.
static mut ICOUNT: u64 = 0;
/// The logging mode now (`MODE_STACK` switches to `MODE_EVERY_BLOCK` once, for good).
static MODE: AtomicU32 = AtomicU32::new(MODE_EVERY_BLOCK);
static NEXT_TB: AtomicU32 = AtomicU32::new(0);
/// Set (under the log's lock) once the exit handler wrote every thread's buffer: what
/// threads still running write afterwards must not be written twice.
static EXITED: AtomicBool = AtomicBool::new(false);
/// `(block id, trigger address)` of every block given a trigger callback: hits are rare,
/// and the address would not fit the callback's user-data word.
static TRIGGER_BLOCKS: Mutex<Vec<(u32, u64)>> = Mutex::new(Vec::new());
/// Set when nothing more is recorded: the (single-snapshot) trigger hit, or a forked
/// child whose log could not be made.
static STOPPED: AtomicBool = AtomicBool::new(false);
/// Entries of the signal handlers installed so far.
static HANDLERS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Start addresses of the blocks translated so far, in translation order (to know
/// whether a new handler's block needs translating again: a rare question, answered by
/// a scan). Appended at every translation: a hash set's insert (a cache miss into a
/// table of ~40 000 entries on python3) showed in profiles, a push does not.
static TRANSLATED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Entries of [`TRANSLATED`] past which it is sorted and deduplicated (retranslations of
/// the same blocks after qemu flushed its code cache).
const TRANSLATED_COMPACT: usize = 1 << 22;

/// Notes that a block starting at `vaddr` was translated.
pub(crate) fn note_translated(vaddr: u64) {
    if let Ok(mut t) = TRANSLATED.lock() {
        if t.len() >= TRANSLATED_COMPACT && t.len() == t.capacity() {
            t.sort_unstable();
            t.dedup();
        }
        t.push(vaddr);
    }
}
/// vCPUs (threads) created in this process so far.
static VCPUS: AtomicU32 = AtomicU32::new(0);
/// The id QEMU gave the plugin, to register again after a reset.
static PLUGIN_ID: AtomicU64 = AtomicU64::new(0);
/// A reset is under way; another one was asked for meanwhile.
static RESETTING: AtomicBool = AtomicBool::new(false);
static RESET_AGAIN: AtomicBool = AtomicBool::new(false);

/// The inline counter's address, for the translator.
fn icount_ptr() -> *mut c_void {
    std::ptr::addr_of_mut!(ICOUNT) as *mut c_void
}

/// The inline counter's value.
#[inline(always)]
fn icount() -> u64 {
    // SAFETY: a plain read of a static that generated code and the stack-mode callback
    // write; a torn or stale read is impossible for an aligned u64 on x86-64.
    unsafe { std::ptr::read_volatile(std::ptr::addr_of!(ICOUNT)) }
}

/// Sets the inline counter: a logged block's callback counts its own instructions (its
/// block has no inline add), so the next block sees the count at its start.
#[inline(always)]
fn set_icount(v: u64) {
    // SAFETY: a plain store to an aligned static; in stack mode one thread runs guest
    // code (a second thread switches the process to every-block mode), as for the adds
    // of generated code.
    unsafe { std::ptr::write_volatile(std::ptr::addr_of_mut!(ICOUNT), v) }
}

/// The clock of the current mode (for chunks dated by it).
fn current_clock() -> u64 {
    if MODE.load(Ordering::Relaxed) == MODE_STACK {
        icount()
    } else {
        CLOCK.load(Ordering::Relaxed)
    }
}

/// True when a signal handler starts at `vaddr`.
fn is_handler(vaddr: u64) -> bool {
    HANDLERS.lock().is_ok_and(|h| h.contains(&vaddr))
}

/// Notes a newly installed signal handler; its entry block, if translated already
/// without the flag (a function also called directly), is translated again.
fn add_handler(handler: u64) {
    let Ok(mut h) = HANDLERS.lock() else { return };
    if h.contains(&handler) {
        return;
    }
    h.push(handler);
    drop(h);
    let translated = TRANSLATED.lock().is_ok_and(|t| t.contains(&handler));
    if translated {
        request_reset();
    }
}

/// Flushes QEMU's translation cache (and our callbacks with it): every block is
/// translated again under the plugin's current choices. A request during a reset is
/// made again once it is done.
fn request_reset() {
    if RESETTING.swap(true, Ordering::AcqRel) {
        RESET_AGAIN.store(true, Ordering::Release);
        return;
    }
    // SAFETY: the id is the one QEMU gave us; the callback re-registers everything.
    unsafe { qemu_plugin_reset(PLUGIN_ID.load(Ordering::Relaxed), after_reset) };
}

/// Runs once the translation cache is flushed and our callbacks are gone, with no
/// vCPU running: every-block mode's clock continues stack mode's counter.
extern "C" fn after_reset(id: PluginId) {
    if MODE.load(Ordering::Relaxed) == MODE_EVERY_BLOCK {
        let c = icount();
        if c > CLOCK.load(Ordering::Relaxed) {
            CLOCK.store(c, Ordering::Relaxed);
        }
    }
    if let Ok(mut t) = TRANSLATED.lock() {
        t.clear();
    }
    register(id);
    RESETTING.store(false, Ordering::Release);
    // A reset asked for during this one (QEMU ignores it) is asked for at the next
    // syscall or thread start (`retry_reset`).
}

/// Asks again for a reset that was asked for while another ran.
fn retry_reset() {
    if RESET_AGAIN.load(Ordering::Relaxed)
        && !RESETTING.load(Ordering::Acquire)
        && RESET_AGAIN.swap(false, Ordering::AcqRel)
    {
        request_reset();
    }
}

/// A new vCPU: a new thread. Its index may be a dead thread's, so the fast entry is
/// cleared; the second thread of a stack-mode process switches it to every-block mode.
extern "C" fn on_vcpu_init(_id: PluginId, vcpu: c_uint) {
    if let Some(s) = STATES.get(vcpu as usize) {
        s.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
    let n = VCPUS.fetch_add(1, Ordering::Relaxed) + 1;
    if n >= 2 && MODE.swap(MODE_EVERY_BLOCK, Ordering::Relaxed) == MODE_STACK {
        request_reset();
    } else {
        retry_reset();
    }
}

extern "C" fn on_exit(_id: PluginId, _p: *mut c_void) {
    if let Some(p) = proc() {
        write_published(p);
    }
}

/// Writes what every thread without a ring has published to the log, once: threads
/// still running (this is not a synchronised point) keep their state, and nothing they
/// write afterwards goes out (`EXITED`).
fn write_published(p: &Proc) {
    let Ok(threads) = p.threads.lock() else {
        return;
    };
    if let Ok(mut out) = p.out.lock() {
        if EXITED.load(Ordering::Relaxed) {
            return;
        }
        for &t in threads.iter() {
            // SAFETY: registered states stay alive until their owner removes them under
            // `threads`, which we hold.
            if let Some((tid, bytes)) = unsafe { ThreadState::published_bytes(t as *const _) } {
                if !bytes.is_empty() {
                    write_chunk(&mut *out, KIND_EXEC, tid, bytes);
                }
            }
        }
        EXITED.store(true, Ordering::Relaxed);
        let _ = out.flush();
    }
}

/// `pthread_atfork` child handler: the child is traced as its own process. What it
/// inherited (the parent's log buffer, thread buffers and rings, shared with the parent)
/// is left untouched and leaked; it gets its own log and rings.
extern "C" fn in_child() {
    let parent = proc();
    // Nothing of the parent's may be written from here: not even by a failure path below.
    PROC.store(std::ptr::null_mut(), Ordering::Release);
    state::forget_own();
    // The child runs one thread: a stack-mode parent's child stays in stack mode.
    VCPUS.store(1, Ordering::Relaxed);
    let (Some(shared), Some(parent)) = (SHARED.get(), parent) else {
        return;
    };
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let pid = getpid();
    let path = child_log_path(&shared.out_path, pid);
    let Some(mut file) = create_private(std::path::Path::new(&path)) else {
        STOPPED.store(true, Ordering::Relaxed);
        say(&format!(
            "ptsim-plugin: cannot create {path}: the child process {pid} is not traced\n"
        ));
        return;
    };
    let clock = current_clock();
    // The child's thread starts at the fork's clock (its first block is the fork's
    // return), wherever its first logged block is.
    FIRST_EXPECTED.store(clock, Ordering::Relaxed);
    write_chunk(
        &mut file,
        KIND_HEADER,
        0,
        &header_payload(pid, MODE.load(Ordering::Relaxed)),
    );
    let mut fork = Vec::with_capacity(16);
    fork.extend_from_slice(&parent.pid.to_le_bytes());
    fork.extend_from_slice(&NEXT_TB.load(Ordering::Relaxed).to_le_bytes());
    fork.extend_from_slice(&clock.to_le_bytes());
    write_chunk(&mut file, KIND_FORK, 0, &fork);
    // The parent's functions, unless another of its threads held them at the fork.
    let regions = match parent.regions.try_lock() {
        Ok(r) => r.inherit(),
        Err(_) => Regions::default(),
    };
    let child = Proc {
        pid,
        out: Mutex::new(BufWriter::with_capacity(LOG_BUFFER, file)),
        regions: Mutex::new(regions),
        threads: Mutex::new(Vec::new()),
        hits: AtomicU32::new(0),
        comm_fds: Mutex::new(Vec::new()),
        // Its own: the parent's mapping is shared with the parent.
        blocks: Mutex::new(blocks_file(shared, pid)),
    };
    // The child's log names its own mappings (the same as the parent's at the fork).
    if let Ok(text) = std::fs::read_to_string("/proc/self/maps") {
        if let Ok(mut out) = child.out.lock() {
            write_maps(&mut *out, clock, &text);
            let _ = out.flush();
        }
        if let Ok(mut r) = child.regions.lock() {
            r.set_maps(parse_maps(&text));
        }
    }
    PROC.store(Box::into_raw(Box::new(child)), Ordering::Release);
}

/// `STEM-PID.log` beside `STEM.log` (or `PATH-PID`).
fn child_log_path(out_path: &str, pid: u32) -> String {
    match out_path.strip_suffix(".log") {
        Some(stem) => format!("{stem}-{pid}.log"),
        None => format!("{out_path}-{pid}"),
    }
}

/// Creates a new file only we can read, failing if anything (a link) is in its place.
fn create_private(path: &std::path::Path) -> Option<File> {
    ptscope_rootsafe::create_new(path).ok()
}

/// Registers every callback (at install, and again after each reset).
fn register(id: PluginId) {
    // SAFETY: registering callbacks with the id QEMU gave us.
    unsafe {
        qemu_plugin_register_vcpu_tb_trans_cb(id, translate::on_translate);
        qemu_plugin_register_vcpu_syscall_cb(id, syscalls::on_syscall);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, syscalls::on_syscall_ret);
        qemu_plugin_register_atexit_cb(id, on_exit, std::ptr::null_mut());
        qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
    }
}

/// Plugin entry point called by QEMU once at load; arguments are `key=value` strings.
///
/// # Safety
/// Called by QEMU with `argc` valid C strings in `argv`.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    _info: *const c_void,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    let mut out_path = None;
    let mut ring_bytes = None;
    let mut triggers = Vec::new();
    let mut multi = false;
    let mut mode = MODE_EVERY_BLOCK;
    for i in 0..argc.max(0) as usize {
        // SAFETY: QEMU passes `argc` valid C strings.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) }.to_string_lossy();
        match arg.split_once('=') {
            Some(("out", path)) => out_path = Some(path.to_string()),
            Some(("trigger", t)) => match translate::parse_trigger(t) {
                Some(t) => triggers.push(t),
                None => {
                    say(&format!(
                        "ptsim-plugin: trigger={t:?} is not DEV:INO:OFFSET:PATH (hex)\n"
                    ));
                    return -1;
                }
            },
            Some(("multi", "1")) => multi = true,
            Some(("mode", "stack")) => mode = MODE_STACK,
            Some(("mode", "every-block")) => mode = MODE_EVERY_BLOCK,
            Some(("ring", bytes)) => match bytes.parse::<usize>() {
                Ok(b) if b >= 4096 => ring_bytes = Some(b),
                _ => {
                    say(&format!(
                        "ptsim-plugin: ring={bytes:?} is not a size of at least 4096 bytes\n"
                    ));
                    return -1;
                }
            },
            _ => {
                say(&format!("ptsim-plugin: unknown argument {arg:?}\n"));
                return -1;
            }
        }
    }
    let Some(out_path) = out_path else {
        say("ptsim-plugin: missing out=FILE argument\n");
        return -1;
    };
    // A new file, never through a link or into someone's file (qemu may run as root):
    // whoever runs the plugin removes an old log first.
    let mut file = match ptscope_rootsafe::create_new(std::path::Path::new(&out_path)) {
        Ok(f) => f,
        Err(e) => {
            say(&format!("ptsim-plugin: cannot create {out_path}: {e}\n"));
            return -1;
        }
    };
    let pid = getpid();
    write_chunk(&mut file, KIND_HEADER, 0, &header_payload(pid, mode));
    // A ring of several slots at least, so reusing one loses little.
    // Slot sizes are multiples of 8, so every slot header is aligned.
    let chunk = ring_bytes.map_or(FLUSH_AT, |r| (r / 8).clamp(1024, FLUSH_AT) & !7);
    let ring = ring_bytes.map(|r| {
        let dir = std::path::Path::new(&out_path)
            .parent()
            .map_or_else(|| std::path::PathBuf::from("."), |d| d.to_path_buf());
        (dir, (r / chunk).max(2))
    });
    let shared = Shared {
        ring,
        chunk,
        out_path,
        triggers,
        multi,
    };
    if SHARED.set(shared).is_err() {
        return -1;
    }
    MODE.store(mode, Ordering::Relaxed);
    PLUGIN_ID.store(id, Ordering::Relaxed);
    let p = Proc {
        pid,
        out: Mutex::new(BufWriter::with_capacity(LOG_BUFFER, file)),
        regions: Mutex::new(Regions::default()),
        threads: Mutex::new(Vec::new()),
        hits: AtomicU32::new(0),
        comm_fds: Mutex::new(Vec::new()),
        blocks: Mutex::new(SHARED.get().and_then(|s| blocks_file(s, pid))),
    };
    PROC.store(Box::into_raw(Box::new(p)), Ordering::Release);
    // SAFETY: registering a fork handler with no preconditions.
    unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    register(id);
    0
}
