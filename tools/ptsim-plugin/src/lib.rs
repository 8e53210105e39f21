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
//! The global clock counts guest instructions over all threads: the nominal time base.
//!
//! With `ring=BYTES` the plugin is a flight recorder: each thread writes its executions
//! into a ring of slots in its own file `ring-TID.bin` beside the log, mapped shared, so
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

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Chunk kind: process header.
const KIND_HEADER: u8 = 0;
/// Chunk kind: translated-block descriptions.
const KIND_TBS: u8 = 1;
/// Chunk kind: one thread's block executions.
const KIND_EXEC: u8 = 2;
/// Chunk kind: a `/proc/self/maps` snapshot.
const KIND_MAPS: u8 = 3;
/// Chunk kind: a trigger hit.
const KIND_HIT: u8 = 8;
/// Chunk kind: a ring slot copied at a trigger hit (`multi=1`).
const KIND_RING_COPY: u8 = 9;
/// Chunk kind: the log is a forked child's.
const KIND_FORK: u8 = 10;
/// Exec-stream word announcing a clock value.
const MARKER: u32 = u32::MAX;
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
    /// Every live thread's buffer, so the exit handler can flush them all.
    threads: Mutex<Vec<Arc<Mutex<ThreadBuf>>>>,
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

/// One thread's pending executions.
struct ThreadBuf {
    tid: u32,
    /// Clock value the next block starts at if no other thread runs first.
    expected: u64,
    buf: Vec<u8>,
    /// Flight recorder: the thread's mapped ring file, if it could be made.
    ring: Option<Ring>,
}

/// A thread's ring file, mapped shared: writes land in the page cache at once.
struct Ring {
    base: *mut u8,
    slots: usize,
    chunk: usize,
    /// Slot being filled, its sequence number and fill level.
    slot: usize,
    seq: u64,
    used: usize,
    /// Slots with a lower sequence number were copied at an earlier hit, unchanged since.
    copied: u64,
}

// SAFETY: the mapping is only touched by the thread owning the ring, under its mutex.
unsafe impl Send for Ring {}

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
            used: 0,
            copied: 0,
        };
        r.begin_slot();
        Some(r)
    }

    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        // SAFETY: `slot < slots`, inside the mapping.
        unsafe { self.base.add(slot * (SLOT_HEADER + self.chunk)) }
    }

    /// Starts the current slot: a new sequence number, nothing used yet.
    fn begin_slot(&mut self) {
        self.seq += 1;
        self.used = 0;
        let p = self.slot_ptr(self.slot);
        // SAFETY: the header lies inside the mapping; written with unaligned stores.
        unsafe {
            std::ptr::write_unaligned(p as *mut u64, self.seq);
            std::ptr::write_unaligned(p.add(8) as *mut u32, 0);
            std::ptr::write_unaligned(p.add(12) as *mut u32, self.chunk as u32);
        }
    }

    /// Appends exec-stream bytes; false when the slot is full (nothing written).
    fn append(&mut self, bytes: &[u8]) -> bool {
        if self.used + bytes.len() > self.chunk {
            return false;
        }
        let p = self.slot_ptr(self.slot);
        // SAFETY: `used + len <= chunk`: inside this slot's data.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                p.add(SLOT_HEADER + self.used),
                bytes.len(),
            );
            self.used += bytes.len();
            std::ptr::write_unaligned(p.add(8) as *mut u32, self.used as u32);
        }
        true
    }

    /// Writes the slots changed since the last copy to `out` as `KIND_RING_COPY` chunks.
    fn copy_to<W: Write + ?Sized>(&mut self, out: &mut W, hit: u32, tid: u32) {
        for slot in 0..self.slots {
            let p = self.slot_ptr(slot);
            // SAFETY: the header and `used <= chunk` data bytes lie inside the mapping;
            // only this ring's owner writes it, and it is locked out while we copy.
            let (seq, data) = unsafe {
                let seq = std::ptr::read_unaligned(p as *const u64);
                let used =
                    (std::ptr::read_unaligned(p.add(8) as *const u32) as usize).min(self.chunk);
                (seq, std::slice::from_raw_parts(p.add(SLOT_HEADER), used))
            };
            if seq < self.copied || seq == 0 || data.is_empty() {
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
        self.copied = self.seq;
    }

    /// Moves to the next slot, overwriting the oldest.
    fn next_slot(&mut self) {
        self.slot = (self.slot + 1) % self.slots;
        self.begin_slot();
    }
}

/// Owner of a thread's buffer: flushes it when the guest thread exits.
struct ThreadSlot(Arc<Mutex<ThreadBuf>>);

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        if let (Some(shared), Some(p)) = (SHARED.get(), proc()) {
            if let Ok(mut tb) = self.0.lock() {
                flush_thread(shared, &mut tb);
            }
            if let Ok(mut threads) = p.threads.lock() {
                threads.retain(|t| !Arc::ptr_eq(t, &self.0));
            }
        }
    }
}

thread_local! {
    static SLOT: RefCell<Option<ThreadSlot>> = const { RefCell::new(None) };
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

/// Writes the thread's pending executions to the log (not with a ring: its file holds
/// them already).
fn flush_thread(_shared: &Shared, tb: &mut ThreadBuf) {
    if tb.buf.is_empty() {
        return;
    }
    if let Some(p) = proc() {
        if let Ok(mut out) = p.out.lock() {
            write_chunk(&mut *out, KIND_EXEC, tb.tid, &tb.buf);
        }
    }
    tb.buf.clear();
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
    // The forking thread is the child's only one; its buffer is the parent's.
    let _ = SLOT.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            std::mem::forget(s.take());
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
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()
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

fn new_slot(shared: &Shared) -> ThreadSlot {
    let tid = gettid();
    let p = proc();
    let pid = p.map_or(0, |p| p.pid);
    let ring = shared
        .ring
        .as_ref()
        .and_then(|(dir, slots)| Ring::create(dir, pid, tid, *slots, shared.chunk));
    if shared.ring.is_some() && ring.is_none() {
        say(&format!("ptsim-plugin: cannot create the ring file of thread {tid}; its executions are written to the log\n"));
    }
    let buf = Arc::new(Mutex::new(ThreadBuf {
        tid,
        expected: u64::MAX,
        buf: Vec::with_capacity(shared.chunk + 16),
        ring,
    }));
    if let Some(mut threads) = p.and_then(|p| p.threads.lock().ok()) {
        threads.push(buf.clone());
    }
    ThreadSlot(buf)
}

extern "C" fn on_exec(_vcpu: c_uint, userdata: *mut c_void) {
    let Some(shared) = SHARED.get() else { return };
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let ud = userdata as usize as u64;
    let id = (ud >> 16) as u32;
    let n = ud & 0xffff;
    let start = CLOCK.fetch_add(n, Ordering::Relaxed);
    let _ = SLOT.try_with(|slot| {
        let mut slot = slot.borrow_mut();
        let slot = slot.get_or_insert_with(|| new_slot(shared));
        let Ok(mut tb) = slot.0.lock() else { return };
        let tb = &mut *tb;
        if let Some(r) = tb.ring.as_mut() {
            // Every slot starts with the clock, so the slots left after older ones were
            // overwritten still say when their first block ran.
            let clocked = start == tb.expected && r.used > 0;
            let mut word = [0u8; 16];
            let len = if clocked {
                word[..4].copy_from_slice(&id.to_le_bytes());
                4
            } else {
                word[..4].copy_from_slice(&MARKER.to_le_bytes());
                word[4..12].copy_from_slice(&start.to_le_bytes());
                word[12..16].copy_from_slice(&id.to_le_bytes());
                16
            };
            if !r.append(&word[..len]) {
                r.next_slot();
                word[..4].copy_from_slice(&MARKER.to_le_bytes());
                word[4..12].copy_from_slice(&start.to_le_bytes());
                word[12..16].copy_from_slice(&id.to_le_bytes());
                r.append(&word);
            }
            tb.expected = start + n;
            return;
        }
        if start != tb.expected {
            tb.buf.extend_from_slice(&MARKER.to_le_bytes());
            tb.buf.extend_from_slice(&start.to_le_bytes());
        }
        tb.buf.extend_from_slice(&id.to_le_bytes());
        tb.expected = start + n;
        if tb.buf.len() >= shared.chunk {
            flush_thread(shared, tb);
        }
    });
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
    let Ok(Some((tid, clock))) = SLOT.try_with(|s| {
        let s = s.borrow();
        let tb = s.as_ref()?.0.lock().ok()?;
        Some((tb.tid, tb.expected.wrapping_sub(n)))
    }) else {
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
        // whole however the program ends.
        let threads = p.threads.lock().map(|t| t.clone()).unwrap_or_default();
        for t in threads {
            if let Ok(mut tb) = t.lock() {
                flush_thread(shared, &mut tb);
            }
        }
        if let Ok(mut out) = p.out.lock() {
            let _ = out.flush();
        }
        return;
    }
    // Each ring as it stands now (later blocks are cut off by the reader at `clock`).
    // Every thread is locked out of its ring while it is copied.
    let threads = p.threads.lock().map(|t| t.clone()).unwrap_or_default();
    for t in threads {
        let Ok(mut tb) = t.lock() else { continue };
        let tid = tb.tid;
        if let (Some(r), Ok(mut out)) = (tb.ring.as_mut(), p.out.lock()) {
            r.copy_to(&mut *out, hit, tid);
        }
    }
    if let Ok(mut out) = p.out.lock() {
        let _ = out.flush();
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
    let (Some(shared), Some(p)) = (SHARED.get(), proc()) else {
        return;
    };
    let threads = p.threads.lock().map(|t| t.clone()).unwrap_or_default();
    for t in threads {
        if let Ok(mut tb) = t.lock() {
            flush_thread(shared, &mut tb);
        }
    }
    if let Ok(mut out) = p.out.lock() {
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
    let mut file = match File::create(&out_path) {
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
    let chunk = ring_bytes.map_or(FLUSH_AT, |r| (r / 8).clamp(1024, FLUSH_AT));
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
        qemu_plugin_register_atexit_cb(id, on_exit, std::ptr::null_mut());
    }
    0
}
