//! QEMU TCG plugin (plugin API v1, as loaded by Debian's qemu-user 7.2) that logs every
//! executed translation block, for the `ptsim` Intel PT simulator.
//!
//! Load with `qemu-x86_64 -plugin libptsim_plugin.so,out=FILE prog args`.
//!
//! The log is a sequence of chunks, each `[kind u8][0u8; 3][tid u32][len u64]` followed by
//! `len` payload bytes (little-endian throughout):
//!
//! * `KIND_HEADER`: `pid u32`, `magic u32`.
//! * `KIND_TBS`: translated blocks, each `id u32, vaddr u64, n_insns u32, size u32,
//!   last_len u8, last instruction bytes, first_len u8, first instruction bytes`. Blocks
//!   are described once per translation, so executions cost 4 bytes each.
//! * `KIND_EXEC`: one thread's executions as `u32` block ids. `MARKER` followed by a
//!   `u64` clock (two `u32` words) says where the global instruction clock stood when the
//!   next block started; it is written whenever another thread ran in between.
//! * `KIND_MAPS`: `clock u64` then the text of `/proc/self/maps`, written whenever a
//!   block is translated outside every mapping of the last snapshot.
//!
//! Host time (`CLOCK_MONOTONIC`, ns) is in each thread's exec stream too (words reserved
//! for it: `u32::MAX - 1 ..= u32::MAX - 7`):
//!
//! * `HOST` (`u32::MAX - 1`) then `u64` ns: the host time at which the next block starts.
//!   Written at a thread's first block, at the start of every ring slot and every
//!   `STAMP_EVERY` blocks of the thread.
//! * `SYSCALL` (`u32::MAX - 2`) then `u32` number, `u64` ns: the thread entered that
//!   syscall (after the last block logged) at that host time.
//! * `SYSRET` (`u32::MAX - 3`) then `u64` return value (an `i64`), `u64` ns: the syscall
//!   returned. An `execve`/`execveat` without a `SYSRET` replaced the program: qemu-user
//!   runs the new one natively, untraced.
//! * `KIND_EXEC_CALL` chunks (kind 4): `ns u64`, then the path the thread asked
//!   `execve`/`execveat` to run (empty if unreadable), written at the call's entry,
//!   after the calling thread's buffer (without a ring, other threads' buffered blocks
//!   are lost by a successful exec; their rings are not).
//!
//! The global clock counts guest instructions over all threads: the nominal time base.
//!
//! With `ring=BYTES` the plugin is a flight recorder: each thread writes its executions
//! into a ring of slots in its own file `ring-PID-TID.bin` beside the log, mapped shared, so
//! what it holds survives however the process ends (a Ctrl-C or a crash kills qemu-user
//! without running plugin exit callbacks). Each slot is `[seq u64][used u32][size u32]`
//! (`size`: the slot's data capacity, so the file describes itself) and
//! `used` bytes of the exec stream, starting with a clock `MARKER`; the slot with the
//! lowest `seq` is reused. The recorder (ptscope) appends the slots, in `seq` order, to
//! the log as `KIND_EXEC` chunks once qemu has exited. Block and maps chunks are written
//! to the log at once, unbuffered, for the same reason.
//!
//! Triggers (`trigger=DEV:INO:OFFSET:PATH`, all hex, `PATH` hex-encoded bytes; repeatable):
//! the instruction at file offset `OFFSET` of the file (device `DEV` as `major<<32 |
//! minor`, inode `INO`, or that path) is found when its block is translated, through the
//! last maps snapshot, and only that block (or, inside a block, that instruction) gets
//! the hit callback: no cost on other blocks. A
//! hit writes `KIND_HIT`: `hit u32` (0, 1, … per process), `trigger u32` (argument order),
//! `block u32`, `0u32`, `clock u64` (the trigger block's start), `address u64` (the
//! trigger's); the chunk's tid is the hitting thread. Without `multi=1` the first hit stops the recording (the program runs on
//! untraced). With `multi=1` and a ring, every hit copies each thread's ring slots that
//! changed since the last hit into the log as `KIND_RING_COPY`: `hit u32`, `slots u32`
//! (the ring's slot count), `seq u64`, then the slot's used bytes; the chunk's tid is the
//! ring's thread. A snapshot is cut at its hit's clock by the reader.
//!
//! Forks: qemu-user forks the host process, plugin state included. The child (a
//! `pthread_atfork` handler) drops what it inherited and starts its own log beside the
//! first, `STEM-PID.log` for `STEM.log`, with `KIND_HEADER` (its pid), then `KIND_FORK`:
//! `parent pid u32`, `blocks u32` (ids below it are described in the parent's log and are
//! reused), `clock u64`; its rings are `ring-PID-TID.bin` as everyone's.
//!
//! QEMU ships no plugin header in Debian, so the few API functions used are declared here
//! from the QEMU 7.2 `qemu-plugin.h` prototypes.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Chunk kind: process header.
const KIND_HEADER: u8 = 0;
/// Chunk kind: translated-block descriptions.
const KIND_TBS: u8 = 1;
/// Chunk kind: one thread's block executions.
const KIND_EXEC: u8 = 2;
/// Chunk kind: a `/proc/self/maps` snapshot.
const KIND_MAPS: u8 = 3;
/// Chunk kind: a thread called `execve`/`execveat` (host ns, path).
const KIND_EXEC_CALL: u8 = 4;
/// Chunk kind: a trigger hit.
const KIND_HIT: u8 = 8;
/// Chunk kind: a ring slot copied at a trigger hit (`multi=1`).
const KIND_RING_COPY: u8 = 9;
/// Chunk kind: the log is a forked child's.
const KIND_FORK: u8 = 10;
/// Exec-stream word announcing a clock value.
const MARKER: u32 = u32::MAX;
/// Exec-stream word announcing a host time (ns) at which the next block starts.
const HOST: u32 = u32::MAX - 1;
/// Exec-stream word: syscall entry (`u32` number, `u64` host ns).
const SYSCALL: u32 = u32::MAX - 2;
/// Exec-stream word: syscall return (`u64` value, `u64` host ns).
const SYSRET: u32 = u32::MAX - 3;
/// Blocks of one thread between two host stamps: reading the clock (a vDSO call) costs
/// about as much as logging a block, so every 4096th keeps it under 0.1 %.
const STAMP_EVERY: u32 = 4096;
/// Syscall numbers that replace the program (x86-64).
const SYS_EXECVE: i64 = 59;
const SYS_EXECVEAT: i64 = 322;
/// Identifies the log format version.
const MAGIC: u32 = 0x5054_5332; // "PTS2"
/// Per-thread buffer size before it is handed to the file.
const FLUSH_AT: usize = 1 << 18;

/// The plugin API version this plugin was written against (QEMU checks it on load).
#[no_mangle]
pub static qemu_plugin_version: c_int = 1;

type PluginId = u64;
type TbTransCb = extern "C" fn(PluginId, *mut c_void);
type ExecCb = extern "C" fn(c_uint, *mut c_void);
type AtExitCb = extern "C" fn(PluginId, *mut c_void);
type SyscallCb = extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
type SyscallRetCb = extern "C" fn(PluginId, c_uint, i64, i64);

extern "C" {
    fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, cb: TbTransCb);
    fn qemu_plugin_register_vcpu_tb_exec_cb(
        tb: *mut c_void,
        cb: ExecCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut c_void,
        cb: ExecCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    fn qemu_plugin_register_vcpu_syscall_cb(id: PluginId, cb: SyscallCb);
    fn qemu_plugin_register_vcpu_syscall_ret_cb(id: PluginId, cb: SyscallRetCb);
    fn qemu_plugin_register_atexit_cb(id: PluginId, cb: AtExitCb, userdata: *mut c_void);
    fn qemu_plugin_tb_n_insns(tb: *const c_void) -> usize;
    fn qemu_plugin_tb_vaddr(tb: *const c_void) -> u64;
    fn qemu_plugin_tb_get_insn(tb: *const c_void, idx: usize) -> *mut c_void;
    fn qemu_plugin_insn_data(insn: *const c_void) -> *const c_void;
    fn qemu_plugin_insn_size(insn: *const c_void) -> usize;
    fn qemu_plugin_insn_vaddr(insn: *const c_void) -> u64;
    fn qemu_plugin_outs(s: *const c_char);
}

/// `QEMU_PLUGIN_CB_NO_REGS`: the exec callback reads no guest registers.
const CB_NO_REGS: c_int = 0;

/// Header of a ring slot: `seq u64`, `used u32`, `size u32` (data bytes per slot).
const SLOT_HEADER: usize = 16;

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

/// One line of a maps snapshot.
struct MapLine {
    start: u64,
    end: u64,
    pgoff: u64,
    dev: (u32, u32),
    ino: u64,
    path: String,
}

/// The traced process's own state: a forked child replaces it with its own.
struct Proc {
    pid: u32,
    out: Mutex<BufWriter<File>>,
    /// Mappings of the last maps snapshot.
    maps: Mutex<Vec<MapLine>>,
    /// Every live thread's state (as addresses), so the exit handler can write what
    /// their buffers hold and a trigger hit can copy their rings.
    threads: Mutex<Vec<usize>>,
    /// Trigger hits so far.
    hits: AtomicU32,
}

static SHARED: OnceLock<Shared> = OnceLock::new();
/// The current process's [`Proc`] (leaked, never freed); null when it is not traced.
static PROC: AtomicPtr<Proc> = AtomicPtr::new(std::ptr::null_mut());

fn proc() -> Option<&'static Proc> {
    // SAFETY: PROC holds null or a leaked `Box<Proc>`, never freed.
    unsafe { PROC.load(Ordering::Acquire).as_ref() }
}
static CLOCK: AtomicU64 = AtomicU64::new(0);
static NEXT_TB: AtomicU32 = AtomicU32::new(0);
/// Set (under the log's lock) once the exit handler wrote every thread's buffer: what
/// threads still running write afterwards must not be written twice.
static EXITED: AtomicBool = AtomicBool::new(false);

/// One thread's recording state, reached from the hot path through a plain thread-local
/// pointer. Only its own thread writes it; without a ring, the exit handler of another
/// thread reads `tid`, `data` (fixed then) and `published`.
struct ThreadState {
    tid: u32,
    /// Clock value the next block starts at if no other thread runs first.
    expected: u64,
    /// Blocks left before the next host stamp.
    countdown: u32,
    /// The current chunk's bytes: a ring slot's data, or `buf`.
    data: *mut u8,
    /// Bytes of the current chunk used and its capacity.
    used: usize,
    cap: usize,
    /// Where `used` is published after every write: the ring slot's header (so the file
    /// describes itself however qemu ends), or `own_used`.
    published: *const AtomicU32,
    own_used: AtomicU32,
    /// Without a ring: the chunk being filled.
    buf: Box<[u8]>,
    /// Flight recorder: the thread's mapped ring file, if it could be made.
    ring: Option<Ring>,
}

/// A thread's ring file, mapped shared: writes land in the page cache at once.
struct Ring {
    base: *mut u8,
    slots: usize,
    chunk: usize,
    /// Slot being filled and its sequence number.
    slot: usize,
    seq: u64,
    /// Slots with a lower sequence number were copied at an earlier hit, unchanged
    /// since. Only the copier (under [`Proc::threads`]) touches it.
    copied: u64,
}

impl Ring {
    /// Creates `dir/ring-PID-TID.bin` (new, private, not following links) and maps it.
    fn create(
        dir: &std::path::Path,
        pid: u32,
        tid: u32,
        slots: usize,
        chunk: usize,
    ) -> Option<Ring> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let size = slots * (SLOT_HEADER + chunk);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(format!("ring-{pid}-{tid}.bin")))
            .ok()?;
        f.set_len(size as u64).ok()?;
        // SAFETY: a fresh shared mapping of a file we just sized; unmapped never (it
        // must outlive every write, and the process ends anyway).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let mut r = Ring {
            base: base as *mut u8,
            slots,
            chunk,
            slot: 0,
            seq: 0,
            copied: 0,
        };
        r.begin_slot();
        Some(r)
    }

    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        // SAFETY: `slot < slots`, inside the mapping.
        unsafe { self.base.add(slot * (SLOT_HEADER + self.chunk)) }
    }

    /// Starts the current slot: a new sequence number, nothing used yet. Returns the
    /// slot's data and its `used` word (4-aligned: slot sizes are multiples of 8).
    fn begin_slot(&mut self) -> (*mut u8, *const AtomicU32) {
        self.seq += 1;
        let p = self.slot_ptr(self.slot);
        // SAFETY: the header lies inside the mapping, 8-aligned.
        unsafe {
            std::ptr::write(p as *mut u64, self.seq);
            std::ptr::write(p.add(8) as *mut u32, 0);
            std::ptr::write(p.add(12) as *mut u32, self.chunk as u32);
            (p.add(SLOT_HEADER), p.add(8) as *const AtomicU32)
        }
    }

    /// Writes the slots changed since the last copy to `out` as `KIND_RING_COPY` chunks.
    fn copy_to<W: Write + ?Sized>(&self, copied: &mut u64, out: &mut W, hit: u32, tid: u32) {
        for slot in 0..self.slots {
            let p = self.slot_ptr(slot);
            // SAFETY: the header and `used <= chunk` data bytes lie inside the mapping;
            // its owner may be writing the slot now:
            // the reader cuts each copy at the hit's clock.
            let (seq, data) = unsafe {
                let seq = std::ptr::read_unaligned(p as *const u64);
                let used =
                    (std::ptr::read_unaligned(p.add(8) as *const u32) as usize).min(self.chunk);
                (seq, std::slice::from_raw_parts(p.add(SLOT_HEADER), used))
            };
            if seq < *copied || seq == 0 || data.is_empty() {
                continue;
            }
            let mut payload = Vec::with_capacity(16 + data.len());
            payload.extend_from_slice(&hit.to_le_bytes());
            payload.extend_from_slice(&(self.slots as u32).to_le_bytes());
            payload.extend_from_slice(&seq.to_le_bytes());
            payload.extend_from_slice(data);
            write_chunk(out, KIND_RING_COPY, tid, &payload);
        }
        // The slot being filled grows: copied again at the next hit.
        *copied = self.seq;
    }

    /// Moves to the next slot, overwriting the oldest.
    fn next_slot(&mut self) -> (*mut u8, *const AtomicU32) {
        self.slot = (self.slot + 1) % self.slots;
        self.begin_slot()
    }
}

impl ThreadState {
    /// Appends bytes that fit (`used + b.len() <= cap`).
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        // SAFETY: the caller checked the room; `data` holds `cap` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), self.data.add(self.used), b.len());
            self.used += b.len();
            (*self.published).store(self.used as u32, Ordering::Release);
        }
    }

    /// Appends one whole record. When the chunk is full the next one is started, opening
    /// with the clock `clock` and the host time, so every chunk (ring slot) is dated.
    fn append(&mut self, rec: &[u8], clock: u64) {
        if self.used + rec.len() > self.cap {
            self.next_chunk();
            let mut head = Rec::default();
            head.word(MARKER).u64(clock).word(HOST).u64(now_ns());
            self.put(head.bytes());
            self.countdown = STAMP_EVERY;
        }
        self.put(rec);
    }

    /// Ends the current chunk: the ring moves to its next slot, the buffer goes to the log.
    fn next_chunk(&mut self) {
        if let Some(r) = self.ring.as_mut() {
            let (data, published) = r.next_slot();
            self.data = data;
            self.published = published;
        } else {
            self.flush();
        }
        self.used = 0;
    }

    /// Writes the buffer to the log (not with a ring: its file holds the data already).
    fn flush(&mut self) {
        if self.ring.is_some() || self.used == 0 {
            return;
        }
        if let Some(p) = proc() {
            if let Ok(mut out) = p.out.lock() {
                if !EXITED.load(Ordering::Relaxed) {
                    write_chunk(&mut *out, KIND_EXEC, self.tid, &self.buf[..self.used]);
                }
            }
        }
        self.used = 0;
        self.own_used.store(0, Ordering::Release);
    }
}

/// A small record built on the stack.
struct Rec {
    b: [u8; 48],
    n: usize,
}

impl Default for Rec {
    fn default() -> Self {
        Rec { b: [0; 48], n: 0 }
    }
}

impl Rec {
    fn word(&mut self, w: u32) -> &mut Self {
        self.b[self.n..self.n + 4].copy_from_slice(&w.to_le_bytes());
        self.n += 4;
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.b[self.n..self.n + 8].copy_from_slice(&v.to_le_bytes());
        self.n += 8;
        self
    }
    fn bytes(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

/// The host's monotonic clock in ns.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Owner of a thread's state: writes what it holds when the guest thread exits, and
/// frees it.
struct Owner(*mut ThreadState);

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = STATE.try_with(|s| s.set(std::ptr::null_mut()));
        // SAFETY: the state is this thread's own, created by `new_state` (a forked
        // child forgets the parent's owner instead of dropping it: `in_child`).
        let mut st = unsafe { Box::from_raw(self.0) };
        st.flush();
        if let Some(p) = proc() {
            if let Ok(mut threads) = p.threads.lock() {
                threads.retain(|&t| t != self.0 as usize);
            }
        }
    }
}

thread_local! {
    /// This thread's state, or null before its first block (and in a forked child).
    static STATE: Cell<*mut ThreadState> = const { Cell::new(std::ptr::null_mut()) };
    /// Frees the state when the thread ends (a destructor the hot path does not touch).
    static OWNER: RefCell<Option<Owner>> = const { RefCell::new(None) };
}

fn write_chunk<W: Write + ?Sized>(out: &mut W, kind: u8, tid: u32, payload: &[u8]) {
    let mut head = [0u8; 16];
    head[0] = kind;
    head[4..8].copy_from_slice(&tid.to_le_bytes());
    head[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    // A failed write cannot be reported to the guest; the reader detects truncation.
    let _ = out.write_all(&head);
    let _ = out.write_all(payload);
}

/// `(block id, trigger address)` of every block given a trigger callback: hits are rare,
/// and the address would not fit the callback's user-data word.
static TRIGGER_BLOCKS: Mutex<Vec<(u32, u64)>> = Mutex::new(Vec::new());

/// Set when nothing more is recorded: the (single-snapshot) trigger hit, or a forked
/// child whose log could not be made.
static STOPPED: AtomicBool = AtomicBool::new(false);

/// `pthread_atfork` child handler: the child is traced as its own process. What it
/// inherited (the parent's log buffer, thread buffers and rings, shared with the parent)
/// is left untouched and leaked; it gets its own log and rings.
extern "C" fn in_child() {
    let parent = proc();
    // Nothing of the parent's may be written from here: not even by a failure path below.
    PROC.store(std::ptr::null_mut(), Ordering::Release);
    // The forking thread is the child's only one; its state is the parent's: left
    // untouched (never written, never freed), so the child makes its own.
    let _ = STATE.try_with(|s| s.set(std::ptr::null_mut()));
    let _ = OWNER.try_with(|o| {
        if let Ok(mut o) = o.try_borrow_mut() {
            std::mem::forget(o.take());
        }
    });
    let (Some(shared), Some(parent)) = (SHARED.get(), parent) else {
        return;
    };
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { getpid() } as u32;
    let path = child_log_path(&shared.out_path, pid);
    let Some(mut file) = create_private(std::path::Path::new(&path)) else {
        STOPPED.store(true, Ordering::Relaxed);
        say(&format!(
            "ptsim-plugin: cannot create {path}: the child process {pid} is not traced\n"
        ));
        return;
    };
    write_chunk(&mut file, KIND_HEADER, 0, &header(pid));
    let mut fork = Vec::with_capacity(16);
    fork.extend_from_slice(&parent.pid.to_le_bytes());
    fork.extend_from_slice(&NEXT_TB.load(Ordering::Relaxed).to_le_bytes());
    fork.extend_from_slice(&CLOCK.load(Ordering::Relaxed).to_le_bytes());
    write_chunk(&mut file, KIND_FORK, 0, &fork);
    let child = Proc {
        pid,
        out: Mutex::new(BufWriter::with_capacity(1 << 20, file)),
        maps: Mutex::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
        hits: AtomicU32::new(0),
    };
    // The child's log names its own mappings (the same as the parent's at the fork).
    if let Ok(text) = std::fs::read_to_string("/proc/self/maps") {
        if let Ok(mut out) = child.out.lock() {
            let mut payload = CLOCK.load(Ordering::Relaxed).to_le_bytes().to_vec();
            payload.extend_from_slice(text.as_bytes());
            write_chunk(&mut *out, KIND_MAPS, 0, &payload);
            let _ = out.flush();
        }
        if let Ok(mut m) = child.maps.lock() {
            *m = parse_maps(&text);
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

/// The `KIND_HEADER` payload.
fn header(pid: u32) -> Vec<u8> {
    let mut head = Vec::with_capacity(8);
    head.extend_from_slice(&pid.to_le_bytes());
    head.extend_from_slice(&MAGIC.to_le_bytes());
    head
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc_syscall(186) as u32 }
}

extern "C" {
    #[link_name = "syscall"]
    fn libc_syscall(num: i64, ...) -> i64;
    fn getpid() -> c_int;
}

/// This thread's state, made at its first use; `None` in a forked child or after the
/// thread's destructors ran.
#[inline]
fn state() -> Option<&'static mut ThreadState> {
    let p = STATE.try_with(|s| s.get()).ok()?;
    if !p.is_null() {
        // SAFETY: a non-null STATE is this thread's own live state.
        return Some(unsafe { &mut *p });
    }
    new_state()
}

#[cold]
fn new_state() -> Option<&'static mut ThreadState> {
    let shared = SHARED.get()?;
    let p = proc()?;
    let tid = gettid();
    let ring = shared
        .ring
        .as_ref()
        .and_then(|(dir, slots)| Ring::create(dir, p.pid, tid, *slots, shared.chunk));
    if shared.ring.is_some() && ring.is_none() {
        say(&format!("ptsim-plugin: cannot create the ring file of thread {tid}; its executions are written to the log\n"));
    }
    let buf = if ring.is_some() {
        Box::default()
    } else {
        vec![0u8; shared.chunk].into_boxed_slice()
    };
    let st = Box::into_raw(Box::new(ThreadState {
        tid,
        expected: u64::MAX,
        countdown: 0,
        data: std::ptr::null_mut(),
        used: 0,
        cap: shared.chunk,
        published: std::ptr::null(),
        own_used: AtomicU32::new(0),
        buf,
        ring,
    }));
    // SAFETY: just made; fields point into the state's own buffer or its ring.
    let s = unsafe { &mut *st };
    match s.ring.as_ref() {
        Some(r) => {
            s.data = r.slot_ptr(r.slot).wrapping_add(SLOT_HEADER);
            s.published = r.slot_ptr(r.slot).wrapping_add(8) as *const AtomicU32;
        }
        None => {
            s.data = s.buf.as_mut_ptr();
            s.published = &s.own_used;
        }
    }
    if let Ok(mut threads) = p.threads.lock() {
        threads.push(st as usize);
    }
    if OWNER
        .try_with(|o| *o.borrow_mut() = Some(Owner(st)))
        .is_err()
    {
        // The thread is ending: its destructors ran already.
        return None;
    }
    let _ = STATE.try_with(|c| c.set(st));
    Some(s)
}

/// Runs at every block: the hot path. Appends the block id to the thread's chunk when
/// nothing else is due (same thread as before, no host stamp due, room left).
extern "C" fn on_exec(_vcpu: c_uint, userdata: *mut c_void) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let ud = userdata as usize as u64;
    let id = (ud >> 16) as u32;
    let n = ud & 0xffff;
    let start = CLOCK.fetch_add(n, Ordering::Relaxed);
    let p = STATE.with(|s| s.get());
    // SAFETY: a non-null STATE is this thread's own live state.
    if let Some(st) = unsafe { p.as_mut() } {
        if start == st.expected && st.countdown != 0 && st.used + 4 <= st.cap {
            st.put(&id.to_le_bytes());
            st.expected = start + n;
            st.countdown -= 1;
            return;
        }
    }
    exec_slow(id, start, n);
}

/// A block whose record needs a clock marker, a host stamp or a new chunk.
#[cold]
#[inline(never)]
fn exec_slow(id: u32, start: u64, n: u64) {
    let Some(st) = state() else { return };
    let mut rec = Rec::default();
    // Every chunk starts with the clock and the host time, so the ring slots left after
    // older ones were overwritten still say when their first block ran.
    let fresh = st.used == 0;
    if start != st.expected || fresh {
        rec.word(MARKER).u64(start);
    }
    if st.countdown == 0 || fresh {
        rec.word(HOST).u64(now_ns());
        st.countdown = STAMP_EVERY;
    }
    rec.word(id);
    st.append(rec.bytes(), start);
    st.expected = start + n;
    st.countdown -= 1;
}

/// Reads a NUL-terminated string of the guest (an x86-64 guest on an x86-64 host runs at
/// guest base 0: guest addresses are host addresses), without faulting on a bad pointer.
fn guest_string(addr: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: reads into our own buffer; a bad remote range fails with EFAULT (partial
    // reads stop at the first unmapped page).
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n <= 0 {
        return Vec::new();
    }
    buf.truncate(n as usize);
    match buf.iter().position(|&b| b == 0) {
        Some(end) => buf.truncate(end),
        None => buf.clear(),
    }
    buf
}

/// Syscall entry: dated in the thread's stream; an `exec` also says what it runs, and
/// everything buffered goes to the file first (a successful exec ends qemu at once).
extern "C" fn on_syscall(
    _id: PluginId,
    _vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    _a3: u64,
    _a4: u64,
    _a5: u64,
    _a6: u64,
    _a7: u64,
    _a8: u64,
) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let Some(st) = state() else { return };
    let ns = now_ns();
    let mut rec = Rec::default();
    rec.word(SYSCALL).word(num as u32).u64(ns);
    st.append(rec.bytes(), st.expected);
    if num == SYS_EXECVE || num == SYS_EXECVEAT {
        let path = guest_string(if num == SYS_EXECVE { a1 } else { a2 });
        st.flush();
        let Some(p) = proc() else { return };
        if let Ok(mut out) = p.out.lock() {
            let mut payload = ns.to_le_bytes().to_vec();
            payload.extend_from_slice(&path);
            write_chunk(&mut *out, KIND_EXEC_CALL, st.tid, &payload);
            let _ = out.flush();
        }
    }
}

/// Syscall return: dated in the thread's stream.
extern "C" fn on_syscall_ret(_id: PluginId, _vcpu: c_uint, _num: i64, ret: i64) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let Some(st) = state() else { return };
    let mut rec = Rec::default();
    rec.word(SYSRET).u64(ret as u64).u64(now_ns());
    st.append(rec.bytes(), st.expected);
}

/// The exec callback of a trigger's block: logs it as any block, then the hit.
extern "C" fn on_trigger(vcpu: c_uint, userdata: *mut c_void) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    on_exec(vcpu, userdata);
    on_trigger_insn(vcpu, userdata);
}

/// The exec callback of a trigger inside a block (a source line's first instruction, say):
/// the block was logged when it began; this is the hit.
extern "C" fn on_trigger_insn(_vcpu: c_uint, userdata: *mut c_void) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let (Some(shared), Some(p)) = (SHARED.get(), proc()) else {
        return;
    };
    let ud = userdata as usize as u64;
    let n = ud & 0xffff;
    // The block's start on the clock: what the thread expects next, less this block.
    let Some((tid, clock)) = state().map(|st| (st.tid, st.expected.wrapping_sub(n))) else {
        return;
    };
    // Only the first hit counts without `multi`: it ends the recording.
    if !shared.multi && STOPPED.swap(true, Ordering::Relaxed) {
        return;
    }
    let hit = p.hits.fetch_add(1, Ordering::Relaxed);
    let mut payload = Vec::with_capacity(24);
    payload.extend_from_slice(&hit.to_le_bytes());
    payload.extend_from_slice(&((ud >> 48) as u32).to_le_bytes());
    payload.extend_from_slice(&((ud >> 16) as u32).to_le_bytes());
    payload.extend_from_slice(&0u32.to_le_bytes());
    payload.extend_from_slice(&clock.to_le_bytes());
    let id = (ud >> 16) as u32;
    // try_lock: a forked child may have inherited it locked by a thread it does not have.
    let at = TRIGGER_BLOCKS
        .try_lock()
        .ok()
        .and_then(|b| b.iter().find(|x| x.0 == id).map(|x| x.1))
        .unwrap_or(0);
    payload.extend_from_slice(&at.to_le_bytes());
    if let Ok(mut out) = p.out.lock() {
        write_chunk(&mut *out, KIND_HIT, tid, &payload);
        let _ = out.flush();
    }
    if !shared.multi {
        // Nothing more is recorded: what the threads hold goes out now, so the log is
        // whole however the program ends (their rings hold theirs already).
        write_published(p);
        return;
    }
    // Each ring as it stands now (later blocks are cut off by the reader at `clock`).
    if let Ok(threads) = p.threads.lock() {
        if let Ok(mut out) = p.out.lock() {
            for &t in threads.iter() {
                let t = t as *mut ThreadState;
                // SAFETY: registered states stay alive until their owner removes them
                // under `threads`, which we hold; a ring's geometry is fixed once made,
                // and `copied` is only touched here, under that lock.
                unsafe {
                    let tid = std::ptr::read(std::ptr::addr_of!((*t).tid));
                    if let Some(r) = (*std::ptr::addr_of_mut!((*t).ring)).as_mut() {
                        let mut copied = r.copied;
                        r.copy_to(&mut copied, &mut *out, hit, tid);
                        r.copied = copied;
                    }
                }
            }
            let _ = out.flush();
        }
    }
}

/// Parses `/proc/self/maps` text. All mappings count: qemu-user maps guest code without
/// host execute permission.
fn parse_maps(maps: &str) -> Vec<MapLine> {
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), _, Some(off), Some(dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.collect::<Vec<_>>().join(" ");
        let hex = |s: &str| u64::from_str_radix(s, 16).ok();
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Some(start), Some(end)) = (hex(a), hex(b)) else {
            continue;
        };
        let dev = dev
            .split_once(':')
            .and_then(|(a, b)| Some((hex(a)? as u32, hex(b)? as u32)))
            .unwrap_or((0, 0));
        out.push(MapLine {
            start,
            end,
            pgoff: hex(off).unwrap_or(0),
            dev,
            ino: ino.parse().unwrap_or(0),
            path,
        });
    }
    out
}

/// The first trigger inside the block `[vaddr, vaddr + size)`, by the file and offset
/// mapped there: its index and address.
fn trigger_at(shared: &Shared, maps: &[MapLine], vaddr: u64, size: u64) -> Option<(usize, u64)> {
    let m = maps.iter().find(|m| vaddr >= m.start && vaddr < m.end)?;
    let off = vaddr - m.start + m.pgoff;
    shared.triggers.iter().enumerate().find_map(|(i, t)| {
        let same_file = (t.ino != 0 && t.dev == m.dev && t.ino == m.ino) || t.path == m.path;
        (same_file && t.offset >= off && t.offset - off < size.max(1))
            .then(|| (i, vaddr + (t.offset - off)))
    })
}

/// Parses a `trigger=DEV:INO:OFFSET:PATH` value (hex numbers, hex-encoded path).
fn parse_trigger(v: &str) -> Option<Trigger> {
    let mut f = v.split(':');
    let dev = u64::from_str_radix(f.next()?, 16).ok()?;
    let ino = u64::from_str_radix(f.next()?, 16).ok()?;
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let hex = f.next().unwrap_or("");
    let bytes: Option<Vec<u8>> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    Some(Trigger {
        dev: ((dev >> 32) as u32, dev as u32),
        ino,
        offset,
        path: String::from_utf8(bytes?).ok()?,
    })
}

extern "C" fn on_translate(_id: PluginId, tb: *mut c_void) {
    let Some(shared) = SHARED.get() else { return };
    // SAFETY: `tb` is the live translation-block handle QEMU passes to this callback,
    // and instruction handles and data stay valid for the callback's duration.
    let (vaddr, n, last_vaddr, last, first) = unsafe {
        let n = qemu_plugin_tb_n_insns(tb);
        if n == 0 {
            return;
        }
        let bytes = |insn: *const c_void| {
            let len = qemu_plugin_insn_size(insn).min(15);
            let data = qemu_plugin_insn_data(insn) as *const u8;
            std::slice::from_raw_parts(data, len).to_vec()
        };
        let last = qemu_plugin_tb_get_insn(tb, n - 1);
        let first = qemu_plugin_tb_get_insn(tb, 0);
        (
            qemu_plugin_tb_vaddr(tb),
            n,
            qemu_plugin_insn_vaddr(last),
            bytes(last),
            bytes(first),
        )
    };
    let id = NEXT_TB.fetch_add(1, Ordering::Relaxed);
    let size = (last_vaddr + last.len() as u64).saturating_sub(vaddr);

    let mut rec = Vec::with_capacity(40);
    rec.extend_from_slice(&id.to_le_bytes());
    rec.extend_from_slice(&vaddr.to_le_bytes());
    rec.extend_from_slice(&(n as u32).to_le_bytes());
    rec.extend_from_slice(&(size as u32).to_le_bytes());
    rec.push(last.len() as u8);
    rec.extend_from_slice(&last);
    // The first instruction tells what a signal interrupted when it lands on this block.
    rec.push(first.len() as u8);
    rec.extend_from_slice(&first);

    let Some(p) = proc() else { return };
    let covered = p
        .maps
        .lock()
        .map(|r| r.iter().any(|m| vaddr >= m.start && vaddr < m.end))
        .unwrap_or(true);
    let maps = if covered {
        None
    } else {
        std::fs::read_to_string("/proc/self/maps").ok()
    };
    if let Ok(mut out) = p.out.lock() {
        if let Some(maps) = maps {
            let mut payload = CLOCK.load(Ordering::Relaxed).to_le_bytes().to_vec();
            payload.extend_from_slice(maps.as_bytes());
            write_chunk(&mut *out, KIND_MAPS, 0, &payload);
            if let Ok(mut r) = p.maps.lock() {
                *r = parse_maps(&maps);
            }
        }
        write_chunk(&mut *out, KIND_TBS, 0, &rec);
        // With a ring, the log must be complete however qemu ends (no exit callback runs
        // when a signal kills the program): every block description goes out at once.
        if shared.ring.is_some() {
            let _ = out.flush();
        }
    }
    // The block id and instruction count travel in the callback's user-data word (and a
    // trigger's index above them, for its block only).
    let ud = ((id as u64) << 16) | (n as u64 & 0xffff);
    let trigger = if shared.triggers.is_empty() {
        None
    } else {
        p.maps
            .lock()
            .ok()
            .and_then(|m| trigger_at(shared, &m, vaddr, size))
    };
    if let (Some((_, at)), Ok(mut b)) = (trigger, TRIGGER_BLOCKS.try_lock()) {
        b.push((id, at));
    }
    let (cb, ud): (ExecCb, u64) = match trigger {
        Some((t, at)) if at == vaddr => (on_trigger, ud | ((t as u64) << 48)),
        Some((t, at)) => {
            // Inside the block: a callback on that instruction only.
            // SAFETY: `tb` is still the block being translated; its instruction handles
            // are valid during this callback, and registering on one is the API's use.
            unsafe {
                if let Some(insn) = (0..n)
                    .map(|i| qemu_plugin_tb_get_insn(tb, i))
                    .find(|&i| qemu_plugin_insn_vaddr(i) == at)
                {
                    let tud = ud | ((t as u64) << 48);
                    qemu_plugin_register_vcpu_insn_exec_cb(
                        insn,
                        on_trigger_insn,
                        CB_NO_REGS,
                        tud as usize as *mut c_void,
                    );
                }
            }
            (on_exec, ud)
        }
        None => (on_exec, ud),
    };
    // SAFETY: registering an exec callback on the block being translated is the
    // documented use of this API.
    unsafe { qemu_plugin_register_vcpu_tb_exec_cb(tb, cb, CB_NO_REGS, ud as usize as *mut c_void) };
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
            let t = t as *const ThreadState;
            // SAFETY: registered states stay alive until their owner removes them under
            // `threads`, which we hold; `tid` and `data` are fixed without a ring, and
            // the bytes below `own_used` are complete (released after writing).
            unsafe {
                if (*std::ptr::addr_of!((*t).ring)).is_some() {
                    continue;
                }
                let used = (*std::ptr::addr_of!((*t).own_used)).load(Ordering::Acquire) as usize;
                let data = std::ptr::read(std::ptr::addr_of!((*t).data));
                let tid = std::ptr::read(std::ptr::addr_of!((*t).tid));
                if used > 0 {
                    let bytes = std::slice::from_raw_parts(data, used);
                    write_chunk(&mut *out, KIND_EXEC, tid, bytes);
                }
            }
        }
        EXITED.store(true, Ordering::Relaxed);
        let _ = out.flush();
    }
}

fn say(msg: &str) {
    if let Ok(s) = std::ffi::CString::new(msg) {
        // SAFETY: `s` is a valid NUL-terminated string for the duration of the call.
        unsafe { qemu_plugin_outs(s.as_ptr()) };
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
    for i in 0..argc.max(0) as usize {
        // SAFETY: QEMU passes `argc` valid C strings.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) }.to_string_lossy();
        match arg.split_once('=') {
            Some(("out", path)) => out_path = Some(path.to_string()),
            Some(("trigger", t)) => match parse_trigger(t) {
                Some(t) => triggers.push(t),
                None => {
                    say(&format!(
                        "ptsim-plugin: trigger={t:?} is not DEV:INO:OFFSET:PATH (hex)\n"
                    ));
                    return -1;
                }
            },
            Some(("multi", "1")) => multi = true,
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
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { getpid() } as u32;
    write_chunk(&mut file, KIND_HEADER, 0, &header(pid));
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
    let p = Proc {
        pid,
        out: Mutex::new(BufWriter::with_capacity(1 << 20, file)),
        maps: Mutex::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
        hits: AtomicU32::new(0),
    };
    PROC.store(Box::into_raw(Box::new(p)), Ordering::Release);
    // SAFETY: registering a fork handler with no preconditions.
    unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    // SAFETY: registering callbacks with the id QEMU gave us.
    unsafe {
        qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
        qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, on_syscall_ret);
        qemu_plugin_register_atexit_cb(id, on_exit, std::ptr::null_mut());
    }
    0
}
