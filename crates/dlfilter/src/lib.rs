//! A perf dlfilter (`perf script --dlfilter`) that streams samples to ptscope as
//! compact binary records instead of text.
//!
//! The records go to perf's own `stdout` `FILE`, through the same stdio buffer perf
//! prints its text into, so whatever perf still prints (decode errors, events this
//! filter passes through) arrives interleaved in exactly the order perf produced it.
//! A sample this filter wrote is filtered out (return 1) so perf prints nothing for
//! it; a sample it cannot reproduce exactly is kept (return 0) and perf prints it as
//! text. Record layout: [`format`](mod@format) and `docs/dlfilter.md`.
//!
//! `--dlarg` options: `keep-jumps` (do not drop jumps within one symbol), `null`
//! (drop everything and write nothing: the cost of perf's own decoding), `sideband`
//! (perf runs with `--show-mmap-events --show-task-events --show-bpf-events`: the caches
//! are checked against what perf prints instead of resolving every sample), `early` (do
//! the work in `filter_event_early`, before perf resolves the sample's own address; only
//! valid when perf is given no option that filters samples).
//!
//! This crate's files (this one, `ffi.rs`, `stdio.rs`, `cache.rs`, `format.rs`) are
//! compiled on their own with `rustc` by the reader crate's build script, so they use
//! nothing but `std`.
//!
//! The filter mirrors what perf would print, so the reader can tell the two paths agree:
//! an event's class by its name, and a branch's flags as perf's words.
//!
//! ```
//! use ptscope_dlfilter::format::{classify, flag_words, flags, Class};
//!
//! // A branch of an Intel PT trace, a timer sample, and a breakpoint event whose
//! // `mem:ADDR:x` name the text decoder cannot cut cleanly from its line.
//! assert_eq!(classify(b"branches"), (Class::Branches, true));
//! assert_eq!(classify(b"cpu-clock"), (Class::Sample, true));
//! assert_eq!(classify(b"mem:0x401126:x").1, false);
//! // `perf script -F flags` prints a call that starts tracing as `tr strt call`.
//! assert_eq!(
//!     flag_words(flags::BRANCH | flags::CALL | flags::TRACE_BEGIN),
//!     Some(("tr strt", "call"))
//! );
//! ```

#![allow(non_upper_case_globals)]
#![allow(clippy::missing_safety_doc)]

mod cache;
pub mod ffi;
pub mod format;
mod stdio;

use cache::{hot_index, Cached, FxMap, Hot, ProcCache, MAX_CACHED};
use ffi::Ctx;
pub use ffi::{
    filter_description, filter_event, filter_event_early, perf_dlfilter_fns, start, stop, Al, Fns,
    Sample,
};
use format::{Class, NO_NAME};
use std::collections::HashMap;
use std::ffi::{c_char, CStr};

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

/// The offset perf prints after `sym+0x`, when it can be computed from `al` alone.
pub fn offset(al: &Al) -> Option<u64> {
    // perf uses the map start for addresses past the symbol's end, which is not exposed.
    (al.addr < al.sym_end).then(|| al.addr.wrapping_sub(al.sym_start))
}

impl State {
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
            // Rare PT side events, and the stacks threads leave the CPU in (a DWARF
            // recording has only their kernel part here anyway): the text decoder reads
            // them as perf prints them.
            Class::Cbr | Class::Ptwrite | Class::Ignored | Class::SwitchOut => return None,
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
