//! A perf dlfilter (`perf script --dlfilter`) that streams samples to ptscope as
//! compact binary records instead of text.
//!
//! The records go to perf's own `stdout` `FILE`, through the same stdio buffer perf
//! prints its text into, so whatever perf still prints (decode errors, events this
//! filter passes through) arrives interleaved in exactly the order perf produced it.
//! A sample this filter wrote is filtered out (return 1) so perf prints nothing for
//! it; a sample it cannot reproduce exactly is kept (return 0) and perf prints it as
//! text. Record layout: [`format`] and `docs/dlfilter.md`.
//!
//! `--dlarg` options: `keep-jumps` (do not drop jumps within one symbol), `null`
//! (drop everything and write nothing: the cost of perf's own decoding), `sideband`
//! (perf runs with `--show-mmap-events --show-task-events --show-bpf-events`: the caches
//! are checked against what perf prints instead of resolving every sample), `early` (do
//! the work in `filter_event_early`, before perf resolves the sample's own address; only
//! valid when perf is given no option that filters samples).
//!
//! This file and `format.rs` are compiled on their own with `rustc` by the reader
//! crate's build script, so they use nothing but `std`.

#![allow(non_upper_case_globals)]
#![allow(clippy::missing_safety_doc)]

pub mod format;

use format::{Class, NO_NAME};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};

/// `struct perf_dlfilter_sample` (perf 6.1; 208 bytes).
#[repr(C)]
pub struct Sample {
    /// Size perf filled in.
    pub size: u32,
    /// Instruction latency.
    pub ins_lat: u16,
    /// Pipeline stage cycles.
    pub p_stage_cyc: u16,
    /// Instruction pointer.
    pub ip: u64,
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Time in ns.
    pub time: u64,
    /// Branch target or data address.
    pub addr: u64,
    /// Sample id.
    pub id: u64,
    /// Stream id.
    pub stream_id: u64,
    /// Sample period.
    pub period: u64,
    /// Weight.
    pub weight: u64,
    /// Transaction.
    pub transaction: u64,
    /// Instruction count (IPC).
    pub insn_cnt: u64,
    /// Cycle count (IPC).
    pub cyc_cnt: u64,
    /// CPU.
    pub cpu: i32,
    /// `PERF_DLFILTER_FLAG_*`.
    pub flags: u32,
    /// Data source.
    pub data_src: u64,
    /// Physical address.
    pub phys_addr: u64,
    /// Data page size.
    pub data_page_size: u64,
    /// Code page size.
    pub code_page_size: u64,
    /// Cgroup.
    pub cgroup: u64,
    /// CPU mode.
    pub cpumode: u8,
    /// `resolve_addr` is meaningful.
    pub addr_correlates_sym: u8,
    /// Header misc bits.
    pub misc: u16,
    /// Raw data size.
    pub raw_size: u32,
    /// Raw data.
    pub raw_data: *const c_void,
    /// Branch stack entries.
    pub brstack_nr: u64,
    /// Branch stack.
    pub brstack: *const c_void,
    /// Raw callchain entries.
    pub raw_callchain_nr: u64,
    /// Raw callchain, with `PERF_CONTEXT_*` markers.
    pub raw_callchain: *const u64,
    /// Event name.
    pub event: *const c_char,
    /// Guest machine pid.
    pub machine_pid: i32,
    /// Guest vcpu.
    pub vcpu: i32,
}

/// `struct perf_dlfilter_al`.
#[repr(C)]
pub struct Al {
    /// Size of this struct, set by the caller of `resolve_address`.
    pub size: u32,
    /// Offset in the symbol (32 bits only; see [`offset`]).
    pub symoff: u32,
    /// Symbol name or NULL.
    pub sym: *const c_char,
    /// Address mapped into the DSO.
    pub addr: u64,
    /// Symbol start.
    pub sym_start: u64,
    /// Symbol end.
    pub sym_end: u64,
    /// DSO name or NULL.
    pub dso: *const c_char,
    /// ELF binding.
    pub sym_binding: u8,
    /// 64-bit DSO.
    pub is_64_bit: u8,
    /// Kernel address.
    pub is_kernel_ip: u8,
    /// Build-id size.
    pub buildid_size: u32,
    /// Build-id.
    pub buildid: *mut u8,
    /// Filtered out (resolve_ip only).
    pub filtered: u8,
    /// Command (resolve_ip only).
    pub comm: *const c_char,
}

type Ctx = *mut c_void;

/// `struct perf_dlfilter_fns`, which perf fills in before `start`.
#[repr(C)]
pub struct Fns {
    /// Location of the sample's ip.
    pub resolve_ip: Option<unsafe extern "C" fn(Ctx) -> *const Al>,
    /// Location of the sample's addr.
    pub resolve_addr: Option<unsafe extern "C" fn(Ctx) -> *const Al>,
    /// `--dlarg` values.
    pub args: Option<unsafe extern "C" fn(Ctx, *mut c_int) -> *mut *mut c_char>,
    /// Location of any address.
    pub resolve_address: Option<unsafe extern "C" fn(Ctx, u64, *mut Al) -> i32>,
    /// Instruction bytes.
    pub insn: Option<unsafe extern "C" fn(Ctx, *mut u32) -> *const u8>,
    /// Source line.
    pub srcline: Option<unsafe extern "C" fn(Ctx, *mut u32) -> *const c_char>,
    /// Event attributes.
    pub attr: Option<unsafe extern "C" fn(Ctx) -> *mut c_void>,
    /// Object code.
    pub object_code: Option<unsafe extern "C" fn(Ctx, u64, *mut c_void, u32) -> i32>,
    /// Reserved by perf.
    pub reserved: [*mut c_void; 120],
}

/// Filled in by perf when it loads the filter.
#[no_mangle]
pub static mut perf_dlfilter_fns: Fns = Fns {
    resolve_ip: None,
    resolve_addr: None,
    args: None,
    resolve_address: None,
    insn: None,
    srcline: None,
    attr: None,
    object_code: None,
    reserved: [std::ptr::null_mut(); 120],
};

/// The head of glibc's `struct _IO_FILE`: the buffer pointers that glibc's own
/// `putc_unlocked` macro reads and advances, so they are part of its ABI.
#[repr(C)]
struct IoFile {
    flags: c_int,
    read_ptr: *mut u8,
    read_end: *mut u8,
    read_base: *mut u8,
    write_base: *mut u8,
    write_ptr: *mut u8,
    write_end: *mut u8,
}

/// Whether perf's `stdout` buffer can be read and written directly (glibc's layout).
const DIRECT_STDIO: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

extern "C" {
    static mut stdout: *mut c_void;
    fn fwrite_unlocked(ptr: *const c_void, size: usize, n: usize, stream: *mut c_void) -> usize;
    fn fflush(stream: *mut c_void) -> c_int;
    fn setvbuf(stream: *mut c_void, buf: *mut c_char, mode: c_int, size: usize) -> c_int;
}

/// `_IOFBF`: full buffering.
const IOFBF: c_int = 0;
/// perf's stdout buffer while the filter runs: 4 KB blocks mean one pipe write per
/// ~100 samples; larger blocks cut perf's syscalls (perf shares the buffer, so the
/// order of records and text is unchanged). 64 KB stays in the L2 cache and lets the
/// reader start on a block sooner: on the PT benchmark it decodes 10-15% faster (wall)
/// than with 256 KB blocks.
const STDOUT_BUF: usize = 64 << 10;

/// Callchain entries at or above this are `PERF_CONTEXT_*` markers, not addresses.
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
/// The marker before a callchain's user-space part.
const PERF_CONTEXT_USER: u64 = -512i64 as u64;
/// `cpumode` of a sample taken in the kernel (`PERF_RECORD_MISC_KERNEL`).
const CPUMODE_KERNEL: u8 = 1;

/// What is known about one event name.
#[derive(Copy, Clone)]
struct EventInfo {
    class: Class,
    clean: bool,
}

/// Where x86-64 kernel addresses begin.
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;

/// FxHash: callchain addresses are hashed millions of times, SipHash is too slow.
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Slices of integers (callchains) arrive here as bytes: take them 8 at a time.
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.write_u64(u64::from_le_bytes(a));
        }
        for &b in words.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// A location sent in a `LOC` record, and what perf resolved it from.
#[derive(Copy, Clone)]
struct Cached {
    id: u32,
    sym: u32,
    dso: u32,
    sym_ptr: usize,
    dso_ptr: usize,
}

/// What was sent for one process, so repeated addresses and callchains cost a lookup.
#[derive(Default)]
struct ProcCache {
    /// The comm perf reports for the process; a new one (exec) invalidates the cache.
    comm: usize,
    /// Callchain address → its location (printed DSO-relative, as perf prints frames).
    frames: FxMap<u64, Cached>,
    /// Branch end (absolute address) → its location (printed absolute, as perf does).
    ends: FxMap<u64, Cached>,
    /// Raw callchain → (chain id, symbol and DSO pointers the sample's ip resolved to).
    chains: FxMap<Box<[u64]>, (u32, usize, usize)>,
}

impl ProcCache {
    fn clear(&mut self) {
        self.frames.clear();
        self.ends.clear();
        self.chains.clear();
    }
}

/// One slot of the direct-mapped cache in front of the branch-end maps: most branches
/// of a trace go between a few thousand addresses, and one compare is cheaper than a
/// process lookup and a hash-table probe.
#[derive(Copy, Clone)]
struct Hot {
    addr: u64,
    pid: i32,
    c: Cached,
}

impl Hot {
    /// A slot that matches nothing (no process has pid `i32::MIN`).
    const EMPTY: Hot = Hot {
        addr: 0,
        pid: i32::MIN,
        c: Cached {
            id: 0,
            sym: 0,
            dso: 0,
            sym_ptr: 0,
            dso_ptr: 0,
        },
    };
}

/// log2 of the number of [`Hot`] slots (96 KB of them).
const HOT_BITS: u32 = 11;

fn hot_index(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - HOT_BITS)) as usize
}

/// A process's cache of one kind is dropped past this many entries, bounding memory.
const MAX_CACHED: usize = 1 << 20;

/// The filter's state, created by `start`.
struct State {
    null: bool,
    keep_jumps: bool,
    /// Work in `filter_event_early`: perf has not resolved the sample's address yet, and
    /// a sample answered from the caches never makes it do so.
    early: bool,
    /// Caches are trusted until perf prints a side-band event that can change how an
    /// address resolves; otherwise every sample's address is resolved to check them.
    sideband: bool,
    /// Where perf's `stdout` write pointer was after our last record: if it moved, perf
    /// printed text since (see [`State::check_printed`]).
    mark: *mut u8,
    /// The first byte (a NUL marker) of our last record when it lies wholly in the
    /// buffer: a flush followed by perf's text past `mark` overwrites it.
    canary: *const u8,
    /// Name pointer → (id, length); perf's names live as long as their DSO, and the
    /// bytes are re-checked on each hit in case a pointer was reused for another name.
    by_ptr: HashMap<usize, u32>,
    by_name: HashMap<Vec<u8>, u32>,
    names: Vec<Vec<u8>>,
    events: HashMap<usize, EventInfo>,
    /// The last event name seen: nearly every sample has the same one.
    last_event: (usize, EventInfo),
    procs: FxMap<i32, ProcCache>,
    /// Class, pid, tid and time of the last sample record written, which `NEXT_*`
    /// records repeat.
    last: Option<(u8, i32, i32, u64)>,
    /// Branch flags seen so far → whether perf prints them as words.
    flag_table: Vec<(u32, bool)>,
    /// Direct-mapped front of every process's branch-end map (`sideband` only).
    hot: Vec<Hot>,
    next_loc: u32,
    next_chain: u32,
    ids: Vec<u32>,
    rec: Vec<u8>,
    def: Vec<u8>,
    seen: u64,
    sent: u64,
    dropped: u64,
    passed: u64,
    write_failed: bool,
}

fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn put_u64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn begin(v: &mut Vec<u8>, ty: u8) {
    v.clear();
    v.extend_from_slice(&[format::MARKER, ty, 0, 0, 0, 0]);
}

fn seal(v: &mut [u8]) {
    let len = (v.len() - format::HEADER_LEN) as u32;
    v[2..6].copy_from_slice(&len.to_le_bytes());
}

/// Appends `buf` to perf's `stdout`, straight into its buffer when it fits (what
/// glibc's `putc_unlocked` does), else through `fwrite_unlocked`. False on a failure.
unsafe fn write_out(buf: &[u8]) -> bool {
    if DIRECT_STDIO {
        let f = &mut *(stdout as *mut IoFile);
        if !f.write_ptr.is_null()
            && (f.write_end as usize).wrapping_sub(f.write_ptr as usize) >= buf.len()
            && f.write_end >= f.write_ptr
        {
            std::ptr::copy_nonoverlapping(buf.as_ptr(), f.write_ptr, buf.len());
            f.write_ptr = f.write_ptr.add(buf.len());
            return true;
        }
    }
    fwrite_unlocked(buf.as_ptr().cast(), 1, buf.len(), stdout) == buf.len()
}

/// Whether a line perf printed is a side-band event after which an address may
/// resolve differently: anything but a thread's exit, a new thread of the same process
/// (`PERF_RECORD_FORK(pid:tid):(ppid:ptid)` with pid = ppid) or a non-exec comm change.
fn sideband_changes_maps(line: &[u8]) -> bool {
    const TAG: &[u8] = b"PERF_RECORD_";
    let Some(at) = line.windows(TAG.len()).position(|w| w == TAG) else {
        return false;
    };
    let rest = &line[at + TAG.len()..];
    if rest.starts_with(b"EXIT") || rest.starts_with(b"COMM:") {
        return false;
    }
    if let Some(fork) = rest.strip_prefix(b"FORK(") {
        let pid = |s: &[u8]| -> Option<Vec<u8>> {
            let end = s.iter().position(|&b| b == b':')?;
            Some(s[..end].to_vec())
        };
        let child = pid(fork);
        let parent = fork
            .windows(2)
            .position(|w| w == b":(")
            .and_then(|i| pid(&fork[i + 2..]));
        return child.is_none() || child != parent;
    }
    true
}

/// The offset perf prints after `sym+0x`, when it can be computed from `al` alone.
pub fn offset(al: &Al) -> Option<u64> {
    // perf uses the map start for addresses past the symbol's end, which is not exposed.
    (al.addr < al.sym_end).then(|| al.addr.wrapping_sub(al.sym_start))
}

impl State {
    fn emit(&mut self, bytes_of: fn(&State) -> &Vec<u8>) {
        let buf = bytes_of(self);
        // SAFETY: the bytes are ours; `stdout` is libc's stream, valid for the process.
        let ok = unsafe { write_out(buf) };
        self.after_write(ok, buf.len());
    }

    /// Writes a record built on the stack.
    fn emit_bytes(&mut self, buf: &[u8]) {
        // SAFETY: as in `emit`.
        let ok = unsafe { write_out(buf) };
        self.after_write(ok, buf.len());
    }

    fn after_write(&mut self, ok: bool, len: usize) {
        if !ok {
            self.write_failed = true;
        }
        if DIRECT_STDIO {
            // SAFETY: glibc's `stdout` starts with `IoFile`'s fields.
            unsafe {
                let f = &*(stdout as *const IoFile);
                self.mark = f.write_ptr;
                self.canary = if (f.write_ptr as usize).wrapping_sub(f.write_base as usize) >= len
                    && len > 0
                {
                    f.write_ptr.sub(len)
                } else {
                    std::ptr::null()
                };
            }
        }
    }

    /// Called before each sample when `sideband`: if perf printed since our last
    /// record, reads what it printed and forgets every cached location if that may
    /// change how addresses resolve (a mapping, an exec, a new process, kernel symbols).
    /// Perf updates its maps when it prints the event, after delivering every sample
    /// before it, so no sample can be answered from a stale cache.
    unsafe fn check_printed(&mut self) {
        let f = &*(stdout as *const IoFile);
        let ptr = f.write_ptr;
        // perf's text (never NUL) over our last record's marker: the buffer was flushed
        // and refilled, even if the write pointer came back to the mark.
        let overwritten = !self.canary.is_null() && *self.canary != format::MARKER;
        if ptr == self.mark && !overwritten {
            return;
        }
        // After a flush (the pointer behind the mark, or the marker overwritten) what
        // perf printed is gone: assume the worst.
        let intact = !overwritten && !self.canary.is_null() && ptr > self.mark;
        let stale = !intact || {
            let printed =
                std::slice::from_raw_parts(self.mark, ptr.offset_from(self.mark) as usize);
            printed.split(|&b| b == b'\n').any(sideband_changes_maps)
        };
        if stale {
            self.forget_all();
        }
        if !intact {
            // Nothing of ours is known to be in the buffer until our next record.
            self.canary = std::ptr::null();
        }
        self.mark = ptr;
    }

    /// Empties every process's caches (locations, chains); ids already sent stay valid.
    fn forget_all(&mut self) {
        for p in self.procs.values_mut() {
            p.clear();
        }
        self.hot.fill(Hot::EMPTY);
    }

    /// A branch end's cached location (`sideband` only: no check against perf), from
    /// the direct-mapped front cache or the process's map.
    fn known_end(&mut self, pid: i32, addr: u64) -> Option<Cached> {
        let i = hot_index(addr);
        let h = &self.hot[i];
        if h.addr == addr && h.pid == pid {
            return Some(h.c);
        }
        let c = *self.procs.get(&pid)?.ends.get(&addr)?;
        self.hot[i] = Hot { addr, pid, c };
        Some(c)
    }

    /// The id of a name, announcing it with a `NAME` record the first time.
    fn name_id(&mut self, p: *const c_char) -> u32 {
        if p.is_null() {
            return NO_NAME;
        }
        // SAFETY: perf hands out NUL-terminated names valid during this callback.
        let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
        if let Some(&id) = self.by_ptr.get(&(p as usize)) {
            if self.names[id as usize] == bytes {
                return id;
            }
        }
        let id = match self.by_name.get(bytes) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u32;
                self.names.push(bytes.to_vec());
                self.by_name.insert(bytes.to_vec(), id);
                begin(&mut self.def, format::REC_NAME);
                put_u32(&mut self.def, id);
                self.def.extend_from_slice(bytes);
                seal(&mut self.def);
                self.emit(|s| &s.def);
                id
            }
        };
        self.by_ptr.insert(p as usize, id);
        id
    }

    /// Appends a location to the record; `None` if perf's text would differ from
    /// what the reader can rebuild.
    fn loc(&mut self, printed_ip: u64, al: &Al) -> Option<()> {
        let (sym, dso, off) = self.loc_fields(al)?;
        put_u64(&mut self.rec, printed_ip);
        put_u32(&mut self.rec, sym);
        put_u32(&mut self.rec, dso);
        put_u64(&mut self.rec, off);
        Some(())
    }

    fn loc_fields(&mut self, al: &Al) -> Option<(u32, u32, u64)> {
        let sym = self.name_id(al.sym);
        let dso = self.name_id(al.dso);
        let off = if al.sym.is_null() { 0 } else { offset(al)? };
        Some((sym, dso, off))
    }

    /// Sends a `LOC` record for a resolved address; `None` if perf's text would differ
    /// from what the reader can rebuild.
    fn new_loc(&mut self, printed_ip: u64, al: &Al) -> Option<Cached> {
        let (sym, dso, off) = self.loc_fields(al)?;
        let id = self.next_loc;
        self.next_loc = id.checked_add(1)?;
        begin(&mut self.def, format::REC_LOC);
        put_u32(&mut self.def, id);
        put_u64(&mut self.def, printed_ip);
        put_u32(&mut self.def, sym);
        put_u32(&mut self.def, dso);
        put_u64(&mut self.def, off);
        seal(&mut self.def);
        self.emit(|s| &s.def);
        Some(Cached {
            id,
            sym,
            dso,
            sym_ptr: al.sym as usize,
            dso_ptr: al.dso as usize,
        })
    }

    /// A callchain address's location, resolved (and sent) only the first time it is
    /// seen in this process.
    unsafe fn frame(&mut self, pid: i32, ip: u64, ctx: Ctx) -> Option<Cached> {
        if let Some(&c) = self.procs.get(&pid).and_then(|p| p.frames.get(&ip)) {
            return Some(c);
        }
        let resolve = (*std::ptr::addr_of!(perf_dlfilter_fns)).resolve_address?;
        let mut al: Al = std::mem::zeroed();
        al.size = std::mem::size_of::<Al>() as u32;
        if resolve(ctx, ip, &mut al) != 0 {
            return None;
        }
        // perf prints callchain addresses relative to their DSO, but kernel addresses
        // whole (its kernel map is identity-mapped) even when a damaged recording
        // misnames the kernel's map and resolving the address alone makes it relative.
        let printed = if ip >= KERNEL_SPACE { ip } else { al.addr };
        let c = self.new_loc(printed, &al)?;
        let p = self.procs.entry(pid).or_default();
        if p.frames.len() >= MAX_CACHED {
            p.frames.clear();
        }
        p.frames.insert(ip, c);
        Some(c)
    }

    /// A branch end's location (printed as the absolute address), from the cache or
    /// from `al` (perf's resolution of it), sent the first time.
    fn end(&mut self, pid: i32, addr: u64, al: &Al) -> Option<Cached> {
        let c = self.new_loc(addr, al)?;
        let p = self.procs.entry(pid).or_default();
        if p.ends.len() >= MAX_CACHED {
            p.ends.clear();
        }
        p.ends.insert(addr, c);
        if self.sideband {
            self.hot[hot_index(addr)] = Hot { addr, pid, c };
        }
        Some(c)
    }

    /// The process's cache, emptied first when its mappings may have changed: a new
    /// comm (exec), or no location for the sample's own address.
    fn proc_cache(&mut self, pid: i32, ip_al: Option<&Al>) -> &mut ProcCache {
        let comm = ip_al.map_or(0, |a| a.comm as usize);
        let p = self.procs.entry(pid).or_default();
        if ip_al.is_none() || p.comm != comm {
            p.clear();
            p.comm = comm;
        }
        p
    }

    /// The id of a callchain, sending its frames' locations and a `CHAIN` record the
    /// first time it is seen in this process. `sp`, `dp`: where the sample's ip resolved.
    unsafe fn new_chain(
        &mut self,
        pid: i32,
        chain: &[u64],
        ctx: Ctx,
        (sp, dp): (usize, usize),
    ) -> Option<u32> {
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        for &ip in chain {
            if ip >= PERF_CONTEXT_MAX {
                continue;
            }
            match self.frame(pid, ip, ctx) {
                Some(c) => ids.push(c.id),
                None => {
                    self.ids = ids;
                    return None;
                }
            }
        }
        if ids.is_empty() {
            // perf prints a bare header; what the text decoder makes of it depends on the name.
            self.ids = ids;
            return None;
        }
        if self.next_chain >= format::MAX_CHAINS {
            // Start the ids again: every process resends its chains as they recur.
            for p in self.procs.values_mut() {
                p.chains.clear();
            }
            self.next_chain = 0;
        }
        let id = self.next_chain;
        self.next_chain += 1;
        begin(&mut self.def, format::REC_CHAIN);
        put_u32(&mut self.def, id);
        put_u32(&mut self.def, ids.len() as u32);
        for &l in &ids {
            put_u32(&mut self.def, l);
        }
        seal(&mut self.def);
        self.emit(|s| &s.def);
        self.ids = ids;
        self.procs
            .entry(pid)
            .or_default()
            .chains
            .insert(chain.into(), (id, sp, dp));
        Some(id)
    }

    fn common(&mut self, ty: u8, class: Class, s: &Sample) {
        let r = &mut self.rec;
        begin(r, ty);
        r.extend_from_slice(&[class as u8, s.cpumode, 0, 0]);
        r.extend_from_slice(&s.pid.to_le_bytes());
        r.extend_from_slice(&s.tid.to_le_bytes());
        put_u64(r, s.time);
        r.extend_from_slice(&s.cpu.to_le_bytes());
        put_u32(r, s.flags);
        put_u64(r, s.period);
        put_u64(r, s.ip);
        put_u64(r, s.addr);
        put_u64(r, s.insn_cnt);
        put_u64(r, s.cyc_cnt);
    }

    fn event_info(&mut self, p: *const c_char) -> EventInfo {
        if self.last_event.0 == p as usize && !p.is_null() {
            return self.last_event.1;
        }
        if let Some(&e) = self.events.get(&(p as usize)) {
            self.last_event = (p as usize, e);
            return e;
        }
        let name: &[u8] = if p.is_null() {
            b""
        } else {
            // SAFETY: perf's event names are NUL-terminated and live for the session.
            unsafe { CStr::from_ptr(p) }.to_bytes()
        };
        let (class, clean) = format::classify(name);
        let e = EventInfo { class, clean };
        self.events.insert(p as usize, e);
        self.last_event = (p as usize, e);
        e
    }

    /// Handles one sample: `Some(true)` written, `Some(false)` dropped, `None` left
    /// for perf to print as text.
    unsafe fn sample(&mut self, s: &Sample, ctx: Ctx) -> Option<bool> {
        let fns = &*std::ptr::addr_of!(perf_dlfilter_fns);
        let ev = self.event_info(s.event);
        match ev.class {
            Class::Sample | Class::BranchMisses | Class::CacheMisses => {}
            Class::Branches => return self.branch(s, ctx, ev),
            // Rare PT side events: the text decoder reads them as perf prints them.
            Class::Cbr | Class::Ptwrite | Class::Ignored => return None,
        }
        if s.raw_callchain.is_null() {
            if !ev.clean {
                return None;
            }
            let al = (fns.resolve_ip?)(ctx).as_ref()?;
            self.common(format::REC_INLINE, ev.class, s);
            self.loc(s.ip, al)?;
            self.last = Some((ev.class as u8, s.pid, s.tid, s.time));
            self.emit_rec();
            return Some(true);
        }
        let chain = std::slice::from_raw_parts(s.raw_callchain, s.raw_callchain_nr as usize);
        // A DWARF-unwound recording holds only the kernel's part of a kernel sample's
        // callchain; perf unwinds the user part from the stack copy when it prints it, so
        // such a sample is left to the text path, which gets the whole stack.
        if s.cpumode == CPUMODE_KERNEL && !chain.contains(&PERF_CONTEXT_USER) {
            return None;
        }
        let (ptrs, hit) = if self.sideband {
            // The caches are known to be current: no need to resolve anything on a hit.
            let hit = self
                .procs
                .get(&s.pid)
                .and_then(|p| p.chains.get(chain))
                .map(|&(id, _, _)| id);
            ((0, 0), hit)
        } else {
            let ip_al = fns.resolve_ip.and_then(|f| f(ctx).as_ref());
            let ptrs = ip_al.map_or((0, 0), |a| (a.sym as usize, a.dso as usize));
            let p = self.proc_cache(s.pid, ip_al);
            let hit = match p.chains.get(chain) {
                Some(&(id, sp, dp)) if (sp, dp) == ptrs => Some(id),
                hit => {
                    // The sample's own address resolving elsewhere than when this chain
                    // (or that address) was cached means new mappings (dlopen, JIT).
                    let stale_frame = p
                        .frames
                        .get(&s.ip)
                        .is_some_and(|c| (c.sym_ptr, c.dso_ptr) != ptrs);
                    if hit.is_some() || stale_frame {
                        p.clear();
                    }
                    None
                }
            };
            (ptrs, hit)
        };
        let id = match hit {
            Some(id) => id,
            None => self.new_chain(s.pid, chain, ctx, ptrs)?,
        };
        if let Some(dt) = self.next_delta(ev.class, s) {
            let mut r = next_header(format::REC_NEXT_STACK, dt);
            let at = format::HEADER_LEN + 4;
            r[at..at + 4].copy_from_slice(&id.to_le_bytes());
            r[at + 4..at + 12].copy_from_slice(&s.period.to_le_bytes());
            self.emit_bytes(&r);
            return Some(true);
        }
        let mut r = [0u8; format::HEADER_LEN + format::STACK_LEN];
        short_common(&mut r, format::REC_STACK, format::STACK_LEN, ev.class, s);
        let at = format::HEADER_LEN + format::SHORT_LEN;
        r[at..at + 8].copy_from_slice(&s.period.to_le_bytes());
        r[at + 8..at + 12].copy_from_slice(&id.to_le_bytes());
        self.emit_bytes(&r);
        Some(true)
    }

    /// The time since the previous sample record when this sample, about to be
    /// written, can be a `NEXT_*` record (same class, pid and tid, not earlier, within
    /// 4 s); it becomes the previous sample record either way.
    fn next_delta(&mut self, class: Class, s: &Sample) -> Option<u32> {
        let (c, pid, tid, t) = self.last.replace((class as u8, s.pid, s.tid, s.time))?;
        if (c, pid, tid) != (class as u8, s.pid, s.tid) {
            return None;
        }
        u32::try_from(s.time.checked_sub(t)?).ok()
    }

    /// Whether perf prints `flags` as words the reader can rebuild, from a small table
    /// of the flag sets seen so far (a trace has a handful).
    fn printable(&mut self, flags: u32) -> bool {
        if let Some(&(_, ok)) = self.flag_table.iter().find(|e| e.0 == flags) {
            return ok;
        }
        let ok = format::flag_words(flags).is_some();
        if self.flag_table.len() < 32 {
            self.flag_table.push((flags, ok));
        }
        ok
    }

    /// Seals and writes the record built in `rec`.
    fn emit_rec(&mut self) {
        seal(&mut self.rec);
        self.emit(|s| &s.rec);
    }

    unsafe fn branch(&mut self, s: &Sample, ctx: Ctx, ev: EventInfo) -> Option<bool> {
        use format::flags::*;
        let fns = &*std::ptr::addr_of!(perf_dlfilter_fns);
        if !ev.clean || !self.printable(s.flags) || s.addr_correlates_sym == 0 {
            return None;
        }
        let (src, dst) = if self.sideband {
            (self.known_end(s.pid, s.ip), self.known_end(s.pid, s.addr))
        } else {
            (None, None)
        };
        let src = match src {
            Some(c) => c,
            None => {
                let src_al = (fns.resolve_ip?)(ctx).as_ref()?;
                if self.sideband {
                    self.end(s.pid, s.ip, src_al)?
                } else {
                    let p = self.proc_cache(s.pid, Some(src_al));
                    let src_ptrs = (src_al.sym as usize, src_al.dso as usize);
                    match p.ends.get(&s.ip) {
                        Some(&c) if (c.sym_ptr, c.dso_ptr) == src_ptrs => c,
                        hit => {
                            if hit.is_some() {
                                // The address resolves elsewhere now: new mappings.
                                p.clear();
                            }
                            self.end(s.pid, s.ip, src_al)?
                        }
                    }
                }
            }
        };
        let dst = match dst {
            Some(c) => c,
            None => match self.procs.get(&s.pid).and_then(|p| p.ends.get(&s.addr)) {
                Some(&c) => c,
                None => {
                    let dst_al = (fns.resolve_addr?)(ctx).as_ref()?;
                    self.end(s.pid, s.addr, dst_al)?
                }
            },
        };
        // Same test as the reader's `is_dropped_jump`, so a fallback can skip exactly
        // what was delivered; the name (not the address) is what stack writers compare.
        // Names are interned by content, so equal ids are equal names.
        let plain_jump = s.flags & IN_TX == 0
            && matches!(s.flags & !AUX, f if f == BRANCH || f == BRANCH | CONDITIONAL);
        if plain_jump
            && !self.keep_jumps
            && src.sym != NO_NAME
            && src.dso != NO_NAME
            && src.sym == dst.sym
            && src.dso == dst.dso
        {
            return Some(false);
        }
        if let Some(dt) = self.next_delta(ev.class, s) {
            let mut r = next_header(format::REC_NEXT_BRANCH, dt);
            let at = format::HEADER_LEN + 4;
            r[at..at + 4].copy_from_slice(&s.flags.to_le_bytes());
            r[at + 4..at + 8].copy_from_slice(&src.id.to_le_bytes());
            r[at + 8..at + 12].copy_from_slice(&dst.id.to_le_bytes());
            self.emit_bytes(&r);
            return Some(true);
        }
        let mut r = [0u8; format::HEADER_LEN + format::BRANCH_LEN];
        short_common(&mut r, format::REC_BRANCH, format::BRANCH_LEN, ev.class, s);
        let at = format::HEADER_LEN + format::SHORT_LEN;
        r[at..at + 4].copy_from_slice(&s.flags.to_le_bytes());
        r[at + 4..at + 8].copy_from_slice(&src.id.to_le_bytes());
        r[at + 8..at + 12].copy_from_slice(&dst.id.to_le_bytes());
        self.emit_bytes(&r);
        Some(true)
    }
}

/// A `NEXT_*` record with its header and time delta filled in.
fn next_header(ty: u8, dt: u32) -> [u8; format::HEADER_LEN + format::NEXT_LEN] {
    let mut r = [0u8; format::HEADER_LEN + format::NEXT_LEN];
    r[0] = format::MARKER;
    r[1] = ty;
    r[2..6].copy_from_slice(&(format::NEXT_LEN as u32).to_le_bytes());
    r[6..10].copy_from_slice(&dt.to_le_bytes());
    r
}

/// Fills the header and short common part of a `STACK` or `BRANCH` record.
fn short_common(r: &mut [u8], ty: u8, len: usize, class: Class, s: &Sample) {
    r[0] = format::MARKER;
    r[1] = ty;
    r[2..6].copy_from_slice(&(len as u32).to_le_bytes());
    let c = format::HEADER_LEN;
    r[c] = class as u8;
    r[c + 4..c + 8].copy_from_slice(&s.pid.to_le_bytes());
    r[c + 8..c + 12].copy_from_slice(&s.tid.to_le_bytes());
    r[c + 12..c + 20].copy_from_slice(&s.time.to_le_bytes());
}

/// Reads `--dlarg`s and announces the stream.
#[no_mangle]
pub unsafe extern "C" fn start(data: *mut *mut c_void, ctx: *mut c_void) -> c_int {
    let mut st = Box::new(State {
        null: false,
        keep_jumps: false,
        early: false,
        sideband: false,
        mark: std::ptr::null_mut(),
        canary: std::ptr::null(),
        by_ptr: HashMap::new(),
        by_name: HashMap::new(),
        names: Vec::new(),
        events: HashMap::new(),
        last_event: (
            0,
            EventInfo {
                class: Class::Sample,
                clean: false,
            },
        ),
        procs: FxMap::default(),
        last: None,
        flag_table: Vec::new(),
        hot: vec![Hot::EMPTY; 1 << HOT_BITS],
        next_loc: 0,
        next_chain: 0,
        ids: Vec::new(),
        rec: Vec::with_capacity(4096),
        def: Vec::with_capacity(256),
        seen: 0,
        sent: 0,
        dropped: 0,
        passed: 0,
        write_failed: false,
    });
    let fns = &*std::ptr::addr_of!(perf_dlfilter_fns);
    if let Some(args) = fns.args {
        let mut argc: c_int = 0;
        let argv = args(ctx, &mut argc);
        for i in 0..argc.max(0) as usize {
            if argv.is_null() {
                break;
            }
            let a = *argv.add(i);
            if a.is_null() {
                continue;
            }
            match CStr::from_ptr(a).to_bytes() {
                b"null" => st.null = true,
                b"keep-jumps" => st.keep_jumps = true,
                // Without glibc's stdio layout, what perf printed cannot be read back.
                b"sideband" => st.sideband = DIRECT_STDIO,
                b"early" => st.early = true,
                _ => return -22,
            }
        }
    }
    if !st.null {
        // Leaked on purpose: perf may still print through it after `stop`.
        let buf: &'static mut [u8] = Box::leak(vec![0u8; STDOUT_BUF].into_boxed_slice());
        // glibc flushes what is pending before switching buffers; failure costs only speed.
        setvbuf(stdout, buf.as_mut_ptr().cast(), IOFBF, buf.len());
        begin(&mut st.rec, format::REC_HELLO);
        put_u32(&mut st.rec, format::VERSION);
        seal(&mut st.rec);
        st.emit(|s| &s.rec);
    }
    *data = Box::into_raw(st).cast();
    0
}

/// Writes the `END` record, whose absence tells the reader perf stopped early.
#[no_mangle]
pub unsafe extern "C" fn stop(data: *mut c_void, _ctx: *mut c_void) -> c_int {
    if data.is_null() {
        return 0;
    }
    let mut st = Box::from_raw(data.cast::<State>());
    if st.null {
        return 0;
    }
    let (seen, sent, dropped, passed) = (st.seen, st.sent, st.dropped, st.passed);
    let r = &mut st.rec;
    begin(r, format::REC_END);
    for x in [seen, sent, dropped, passed] {
        put_u64(r, x);
    }
    seal(r);
    st.emit(|s| &s.rec);
    if fflush(stdout) != 0 || st.write_failed {
        return -5;
    }
    0
}

/// Handles a sample after perf resolved its address, unless the `early` callback did.
#[no_mangle]
pub unsafe extern "C" fn filter_event(
    data: *mut c_void,
    sample: *const Sample,
    ctx: *mut c_void,
) -> c_int {
    if data.is_null() || sample.is_null() {
        return 0;
    }
    let st = &mut *data.cast::<State>();
    if st.early {
        // Only samples `filter_event_early` left to perf get here: perf prints them.
        return 0;
    }
    handle(st, &*sample, ctx)
}

/// Handles a sample before perf resolves its address (with `--dlarg early`): a sample
/// answered from the caches then costs perf no symbol lookup at all.
#[no_mangle]
pub unsafe extern "C" fn filter_event_early(
    data: *mut c_void,
    sample: *const Sample,
    ctx: *mut c_void,
) -> c_int {
    if data.is_null() || sample.is_null() {
        return 0;
    }
    let st = &mut *data.cast::<State>();
    if !st.early {
        return 0;
    }
    handle(st, &*sample, ctx)
}

/// Writes a handled sample as a record (and tells perf not to print it).
unsafe fn handle(st: &mut State, sample: &Sample, ctx: Ctx) -> c_int {
    if st.null {
        return 1;
    }
    if st.sideband {
        st.check_printed();
    }
    st.seen += 1;
    match st.sample(sample, ctx) {
        Some(true) => {
            st.sent += 1;
            1
        }
        Some(false) => {
            st.dropped += 1;
            1
        }
        None => {
            st.passed += 1;
            0
        }
    }
}

/// One-line description for `perf script --list-dlfilters`.
#[no_mangle]
pub unsafe extern "C" fn filter_description(long: *mut *const c_char) -> *const c_char {
    if !long.is_null() {
        *long = c"Streams samples to ptscope as binary records on stdout; dlargs: keep-jumps, null, sideband, early"
            .as_ptr();
    }
    c"ptscope binary sample stream".as_ptr()
}
