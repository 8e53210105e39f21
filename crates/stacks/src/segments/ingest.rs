//! Taking in events: each one moves its thread's current leaf (a call, a return, a
//! jump, a sampled stack) and records the change; decode errors start new segments.

use super::frames::{
    new_segment, Entry, Flow, Frame, Join, Loc, Locations, ThreadState, GAPS, INFERRED_START,
    KERNEL_ENTRY, NONE, NO_HORIZON, RETURN_LABEL, SENTINEL, SIGNAL,
};
use super::store::Store;
use super::unwind::Exit;
use super::{signals, SegmentsWriter};
use crate::sink::TraceSink;
use crate::tracks::{ExtraTracks, Mark};
use crate::WriterConfig;
use ptscope_event::{
    is_kernel_address, ocaml_int64_hex, Event, EventData, Kind, Location, StringTable, Symbol,
    Thread, TraceScope, TraceStateChange,
};
use rustc_hash::FxHashMap;

/// How far up the stack a long return or unwind is looked for.
pub(super) const MAX_FIND_DEPTH: usize = 256;

impl<S: TraceSink> SegmentsWriter<S> {
    pub(super) fn thread_slot(&mut self, event: &Event) -> usize {
        let thread = event.thread();
        // Consecutive events are nearly always from the same thread.
        if let Some((t, i)) = self.last_thread {
            if t == thread {
                return i;
            }
        }
        if let Some(&i) = self.index.get(&thread) {
            self.last_thread = Some((thread, i));
            return i;
        }
        let (track, track_group_id) =
            self.tracks
                .allocate(&mut self.sink, thread, &self.config.process_names);
        let time = event
            .time()
            .map(|t| t.wrapping_sub(self.base_time) as i64)
            .unwrap_or(0);
        let mut ts = ThreadState {
            track,
            thread,
            extra_tracks: ExtraTracks::new(track_group_id),
            frames: Store::with_limit(self.spill_after).in_dir(self.spill_dir.as_deref()),
            entries: Store::with_limit(self.spill_after).in_dir(self.spill_dir.as_deref()),
            segments: Vec::new(),
            leaf: NONE,
            sentinel: NONE,
            last_time: time,
            handlers: Vec::new(),
            signals: signals::Signals::default(),
            last_known_ip: None,
            fresh: true,
            errors: Vec::new(),
            power: Vec::new(),
            ptwrites: Vec::new(),
            off_cpu: Vec::new(),
            last_sample: None,
            sampled: false,
            leaving: false,
            gaps: [0; GAPS],
            gap_count: 0,
            more_samples: FxHashMap::default(),
        };
        new_segment(&mut ts, time, Join::Never);
        self.threads.push(ts);
        let i = self.threads.len() - 1;
        self.index.insert(thread, i);
        self.last_thread = Some((thread, i));
        i
    }

    pub(super) fn ingest(&mut self, event: &Event, strings: &StringTable) {
        let slot = self.thread_slot(event);
        let base = self.base_time;
        let ts = &mut self.threads[slot];
        let time = match event.time() {
            // perf's times can step back a little across CPUs; keep each thread monotone.
            Some(t) => (t.wrapping_sub(base) as i64).max(ts.last_time),
            None => ts.last_time,
        };
        if time > ts.last_time {
            // The first event past the last stack change's timestamp ends the window
            // that timestamp's calls may be spread over.
            if let Some(e) = ts.entries.last_mut() {
                if e.time == ts.last_time && e.horizon == NO_HORIZON {
                    e.horizon = (time - e.time).min(NO_HORIZON as i64 - 1) as u16;
                }
            }
        }
        ts.last_time = time;
        if ts.fresh && !matches!(event, Event::DecodeError { .. }) {
            ts.fresh = false;
            if let Some(seg) = ts.segments.last() {
                let first = seg.first;
                ts.entries[first].time = time;
            }
        }
        let mut cx = Cx {
            ts,
            locs: &mut self.locs,
            strings,
            config: &self.config,
            time,
            switches: self.switches,
        };
        match event {
            Event::DecodeError { ip, message, .. } => {
                let msg = strings.get(*message);
                let warning = match ip {
                    None => format!("Warning: perf reported an error decoding the trace: '{msg}'"),
                    Some(ip) => format!(
                        "Warning: perf reported an error decoding the trace: '{msg}' @ IP {}.",
                        ocaml_int64_hex(*ip)
                    ),
                };
                cx.ts.errors.push((time, format!("[decode error: {msg}]")));
                cx.flush_off_cpu(0);
                // After an error the new segment starts with the next decoded event.
                new_segment(cx.ts, time, Join::Any);
                self.sink.warning(&warning);
            }
            Event::Ok { thread, data, .. } => match data {
                &EventData::Trace {
                    change,
                    kind,
                    src,
                    dst,
                } => {
                    let (src, dst) = (&Loc::of(src, strings), &Loc::of(dst, strings));
                    // A branch trace is exact about when the thread ran: switches are
                    // for sampled stacks only (a `perf script` of PT may print them).
                    cx.ts.off_cpu.clear();
                    cx.ts.sampled = false;
                    if let Some(w) = cx.branch(kind, change, src, dst) {
                        if !self.warned_impossible && w == Warn::Impossible {
                            self.warned_impossible = true;
                            self.sink.warning(&format!(
                                "Warning: skipped a branch that should be impossible ({kind:?} with trace state change {change:?})"
                            ));
                        }
                        if !self.warned_traps && w == Warn::Traps {
                            self.warned_traps = true;
                            self.sink.warning(
                                "Warning: OCaml exception traps out of sync with the trace (did Intel PT drop data?); the stack was split there",
                            );
                        }
                    }
                }
                EventData::StackSample { callstack } | EventData::SwitchOutStack { callstack } => {
                    // perf samples whole callchains whatever the event's `u`/`k`:
                    // keep only the frames of the levels the trace is about.
                    let scope = cx.config.scope;
                    let handles = strings.stack_handles(*callstack);
                    let all = handles.len();
                    let kept = &mut self.sample_frames;
                    kept.clear();
                    kept.extend(
                        handles
                            .iter()
                            .map(|&h| Loc::of(h, strings))
                            .filter(|l| scope.includes_address(l.ip)),
                    );
                    match data {
                        EventData::SwitchOutStack { .. } => cx.switch_stack(kept),
                        _ => cx.sample(kept),
                    }
                    if kept.len() != all && !self.warned_scope {
                        self.warned_scope = true;
                        let (left, keep) = match scope {
                            TraceScope::Kernel => ("user-space", "k"),
                            _ => ("kernel", "u"),
                        };
                        self.sink.warning(&format!(
                            "Note: sampled stacks hold {left} frames, left out of the trace as the scope is `{keep}` (decode with --scope uk to keep them)"
                        ));
                    }
                }
                EventData::Power { freq_mhz } => cx.ts.power.push((time, *freq_mhz)),
                EventData::EventSample {
                    location,
                    count,
                    name,
                } => {
                    let mark = Mark::at(*thread, time, location);
                    let extra = &mut self.threads[slot].extra_tracks;
                    extra.write_sample(&mut self.sink, *name, mark, *count, true, strings);
                }
                EventData::Ptwrite { location, data } => {
                    // It does not change the stack: written by the write pass, in time
                    // order on the thread's track, as the legacy writer shows it.
                    if self.in_region {
                        cx.ts.ptwrites.push((time, *location, *data));
                    }
                }
                // Taken by `write_event` before a thread's stack is touched.
                EventData::Comm { .. } | EventData::Fork { .. } => {}
                EventData::Switch { out, preempt } => cx.switch(*out, *preempt),
            },
        }
    }

    /// `execve` replaced `thread`'s program: its syscall never returns, so the old
    /// program's frames end here, and the new program's first `tr strt` (the loader's
    /// entry) starts a segment of its own rather than passing for a signal delivery on
    /// top of `execve`.
    pub(super) fn exec(&mut self, event: &Event, thread: Thread) {
        let Some(&slot) = self.index.get(&thread) else {
            return;
        };
        let base = self.base_time;
        let ts = &mut self.threads[slot];
        let time = event.time().map_or(ts.last_time, |t| {
            (t.wrapping_sub(base) as i64).max(ts.last_time)
        });
        ts.last_time = time;
        new_segment(ts, time, Join::Never);
    }
}

#[derive(PartialEq, Eq, Clone, Copy)]
pub(super) enum Warn {
    Impossible,
    Traps,
}

/// Ingestion context for one event on one thread.
pub(super) struct Cx<'a, T> {
    pub(super) ts: &'a mut ThreadState<T>,
    pub(super) locs: &'a mut Locations,
    pub(super) strings: &'a StringTable,
    pub(super) config: &'a WriterConfig,
    pub(super) time: i64,
    /// The recording has context switches.
    pub(super) switches: bool,
}

impl<T> Cx<'_, T> {
    pub(super) fn symbol(&self, frame: u32) -> Option<Symbol> {
        let f = self.ts.frames[frame as usize];
        if f.flags & SENTINEL != 0 {
            None
        } else {
            Some(self.locs.get(self.strings, f.loc).symbol)
        }
    }

    pub(super) fn is_sentinel(&self, frame: u32) -> bool {
        self.ts.frames[frame as usize].flags & SENTINEL != 0
    }

    pub(super) fn record(&mut self, flow: Flow) {
        // A stack change at the same time that undoes nothing needs no entry.
        if flow != Flow::Start && !self.changes_stack() {
            return;
        }
        let leaf = self.ts.leaf;
        self.ts.entries.push(Entry {
            time: self.time,
            leaf,
            flow,
            horizon: NO_HORIZON,
        });
    }

    pub(super) fn push(&mut self, loc: &Loc, flags: u8) {
        self.push_as(loc, flags, Flow::Call)
    }

    pub(super) fn push_as(&mut self, loc: &Loc, flags: u8, flow: Flow) {
        self.push_frame(loc, NONE, flags, flow);
    }

    /// Pushes a frame running `loc` on the leaf, called from `site` (a location id, or
    /// [`NONE`]).
    pub(super) fn push_frame(&mut self, loc: &Loc, site: u32, flags: u8, flow: Flow) {
        self.enter(loc, site, flags);
        self.record(flow);
    }

    /// A new leaf frame, with no stack change recorded (the caller records one for
    /// several frames entered at once).
    pub(super) fn enter(&mut self, loc: &Loc, site: u32, flags: u8) {
        self.ts.frames.push(Frame {
            site,
            ..Frame::new(loc.id, self.ts.leaf, flags)
        });
        self.ts.leaf = (self.ts.frames.len() - 1) as u32;
    }

    /// Is the current leaf, now, a change from the last entry?
    pub(super) fn changes_stack(&self) -> bool {
        let leaf = self.ts.leaf;
        self.ts
            .entries
            .last()
            .is_none_or(|last| last.leaf != leaf || last.time != self.time)
    }

    /// The sentinel becomes `loc`, a caller found above the known root; a new
    /// sentinel goes below it. Every earlier stack of the segment gains the caller.
    pub(super) fn discover_root(&mut self, loc: &Loc) -> u32 {
        let l = loc.id;
        let old = self.ts.sentinel;
        let new = self.ts.frames.len() as u32;
        self.ts.frames.push(Frame::sentinel());
        let f = &mut self.ts.frames[old as usize];
        f.loc = l;
        f.parent = new;
        f.flags = INFERRED_START;
        self.ts.sentinel = new;
        old
    }

    /// Inserts `loc` as the caller of kernel-entry frame `entry` (a kernel return went
    /// above the first kernel frame seen); it inherits the entry mark.
    pub(super) fn insert_caller(&mut self, entry: u32, loc: &Loc) -> u32 {
        let l = loc.id;
        let e = self.ts.frames[entry as usize];
        let new = self.ts.frames.len() as u32;
        self.ts
            .frames
            .push(Frame::new(l, e.parent, INFERRED_START | KERNEL_ENTRY));
        let f = &mut self.ts.frames[entry as usize];
        f.parent = new;
        f.flags &= !KERNEL_ENTRY;
        new
    }

    /// Nearest frame at or above the leaf running `symbol`, without crossing a kernel
    /// entry. The search is bounded: a stack that only grows (returns never seen)
    /// must not make every mismatch cost its whole depth.
    pub(super) fn find(&self, symbol: Symbol) -> Option<u32> {
        self.find_from(self.ts.leaf, symbol)
    }

    /// Nearest frame at or above `from` running `symbol`, as [`find`](Self::find) from
    /// the leaf.
    pub(super) fn find_from(&self, from: u32, symbol: Symbol) -> Option<u32> {
        let mut f = from;
        for _ in 0..MAX_FIND_DEPTH {
            let fr = self.ts.frames[f as usize];
            if fr.flags & SENTINEL != 0 {
                return None;
            }
            if self.locs.get(self.strings, fr.loc).symbol == symbol {
                return Some(f);
            }
            if fr.flags & KERNEL_ENTRY != 0 {
                return None;
            }
            f = fr.parent;
        }
        None
    }

    /// Makes the leaf run `loc`'s function: learn it at the root, return to it if it
    /// is an ancestor (a missed return), or replace the leaf (a missed tail call).
    pub(super) fn ensure_current(&mut self, loc: &Loc) {
        let leaf = self.ts.leaf;
        if self.is_sentinel(leaf) {
            self.ts.leaf = self.discover_root(loc);
            return;
        }
        if self.symbol(leaf) == Some(loc.symbol) {
            return;
        }
        if let Some(f) = self.find(loc.symbol) {
            self.ts.leaf = f;
            self.record(Flow::Return);
            return;
        }
        self.replace_leaf(loc);
    }

    pub(super) fn replace_leaf(&mut self, loc: &Loc) {
        let leaf = self.ts.leaf;
        let fr = self.ts.frames[leaf as usize];
        if fr.flags & SENTINEL != 0 {
            self.ts.leaf = self.discover_root(loc);
            return;
        }
        let l = loc.id;
        self.ts.frames.push(Frame {
            // A tail call returns where the replaced frame's call was made.
            site: fr.site,
            // A handler's tail call still returns into the signal trampoline.
            ..Frame::new(l, fr.parent, fr.flags & (KERNEL_ENTRY | SIGNAL))
        });
        self.ts.leaf = (self.ts.frames.len() - 1) as u32;
        self.record(Flow::Jump);
    }

    /// Uses a branch's source only to learn the function running at a segment's
    /// start: elsewhere the source often lies in an adjacent symbol the code fell
    /// through into (`__write` into `__write_nocancel`), which is not a call.
    pub(super) fn ensure_src(&mut self, src: &Loc) {
        if src.ip != 0 && self.is_sentinel(self.ts.leaf) {
            self.ts.leaf = self.discover_root(src);
        }
    }

    pub(super) fn call(&mut self, src: &Loc, dst: &Loc) {
        self.ensure_src(src);
        let site = if src.ip != 0 { src.id } else { NONE };
        self.push_frame(dst, site, 0, Flow::Call);
    }

    pub(super) fn ret(&mut self, src: &Loc, dst: &Loc) {
        self.ensure_src(src);
        let leaf = self.ts.leaf;
        let fr = self.ts.frames[leaf as usize];
        if fr.flags & KERNEL_ENTRY != 0 && is_kernel_address(dst.ip) {
            // A kernel return above the first kernel frame seen: its caller was there
            // since the kernel was entered.
            let caller = self.insert_caller(leaf, dst);
            self.ts.leaf = caller;
            self.record(Flow::Return);
            return;
        }
        if self.async_preempt_onto_entry(leaf, dst) {
            return;
        }
        self.ts.leaf = fr.parent;
        if self.is_sentinel(self.ts.leaf) {
            self.ts.leaf = self.discover_root(dst);
            if self.is_return_label(dst) {
                self.ts.frames[self.ts.leaf as usize].flags |= RETURN_LABEL;
            }
            self.record(Flow::Return);
            return;
        }
        self.record(Flow::Return);
        // A return elsewhere than after the call that made the frame leaves more frames
        // than its own (see `unwind`). One to a function's entry is a jump in disguise (a
        // return thunk), never into a frame's middle.
        if dst.offset != 0
            && self.returns_after(fr.site, dst) == Some(false)
            && self.long_return(dst)
        {
            return;
        }
        if self.symbol(self.ts.leaf) == Some(dst.symbol) {
            return;
        }
        // A long return (exception, longjmp) lands in an ancestor; otherwise the caller's
        // code went on in another symbol (a label, an alias) or tail-called away from the
        // frame we knew.
        if let Some(f) = self.find(dst.symbol) {
            self.land_in(f);
        } else {
            self.replace_leaf(dst);
        }
    }

    /// A return landing on the very first byte of a named symbol (see [`RETURN_LABEL`]).
    /// perf names addresses without a symbol `[unknown @ …]` at offset 0: not a label.
    pub(super) fn is_return_label(&self, dst: &Loc) -> bool {
        dst.offset == 0
            && matches!(dst.symbol, Symbol::FromPerf(n) if !self.strings.get(n).starts_with("[unknown"))
    }

    pub(super) fn jump(&mut self, src: &Loc, dst: &Loc) {
        if src.symbol == dst.symbol {
            if self.is_sentinel(self.ts.leaf) {
                self.ts.leaf = self.discover_root(dst);
            } else if self.symbol(self.ts.leaf) != Some(dst.symbol) {
                self.ensure_current(dst);
            }
            return;
        }
        self.ensure_src(src);
        if self.landing_pad(src, dst) {
            return;
        }
        // A jump into the middle of an ancestor's function lands in that frame, unwinding
        // the frames between (`longjmp`, an unwinder, a coroutine switch), unless the two
        // may be parts of one function (a `.cold` part GCC split off, named on its own,
        // which an outer call of that function may be running too): see `unwind`. A jump
        // to a function's start is a tail call.
        if dst.offset != 0 {
            let exit = self.exit_by_jump(src, dst);
            if exit != Exit::No {
                if let Some(f) = self.find(dst.symbol) {
                    self.land_in(f);
                    return;
                }
            }
            // From code made for non-local exits, a function no known frame runs is
            // beyond the known root, never a tail jump.
            if exit == Exit::Certain && self.land_beyond_root(dst) {
                return;
            }
            let leaf = self.ts.frames[self.ts.leaf as usize];
            let beyond = self.is_sentinel(leaf.parent) || (exit != Exit::No && self.root_unknown());
            if leaf.flags & SENTINEL == 0 && beyond {
                // The target may be an ancestor beyond what this segment knows (libgcc
                // unwinding to a landing pad after a decode error). Taken as a tail
                // jump, the callers the target reveals later would become the callers
                // of every earlier stack of the segment: the unwound frames between
                // would vanish. A segment of its own is lined up by the write pass.
                self.split(Join::Unwound);
                self.ensure_current(dst);
                return;
            }
        }
        self.replace_leaf(dst);
    }

    pub(super) fn synthetic(&mut self, symbol: Symbol) {
        let loc = self.locs.own(Location::locationless(symbol));
        self.push(&loc, 0);
    }

    pub(super) fn leaf_is_synthetic(&self) -> bool {
        matches!(
            self.symbol(self.ts.leaf),
            Some(Symbol::Untraced | Symbol::Syscall | Symbol::Returned)
        )
    }

    /// Starts a new segment; `join` says whether it may continue this one. A split
    /// made while handling a branch starts at that branch, not at the next event.
    pub(super) fn split(&mut self, join: Join) {
        let t = self.time;
        new_segment(self.ts, t, join);
        self.ts.fresh = false;
    }

    pub(super) fn enter_kernel(&mut self, src: &Loc, dst: &Loc) {
        self.ensure_src(src);
        self.push(dst, KERNEL_ENTRY);
    }

    pub(super) fn leave_kernel(&mut self, dst: &Loc) {
        // Pop the kernel frames back to what was interrupted.
        loop {
            let leaf = self.ts.leaf;
            let fr = self.ts.frames[leaf as usize];
            if fr.flags & SENTINEL != 0 {
                break;
            }
            let loc = *self.locs.get(self.strings, fr.loc);
            let kernel_frame = is_kernel_address(loc.ip) || fr.flags & KERNEL_ENTRY != 0;
            if !kernel_frame && !self.leaf_is_synthetic() {
                break;
            }
            self.ts.leaf = fr.parent;
            self.record(Flow::Return);
            if fr.flags & KERNEL_ENTRY != 0 {
                break;
            }
        }
        self.ensure_current(dst);
    }

    pub(super) fn track_traps(&mut self, src: &Loc, dst: &Loc) -> Option<Warn> {
        let info = self.config.ocaml_exception_info.as_ref()?;
        let mut warn = None;
        if let Some(from) = self.ts.last_known_ip {
            for &(_, push) in info.traps_in_range(from, src.ip) {
                if push {
                    let leaf = self.ts.leaf;
                    self.ts.handlers.push(leaf);
                } else if self.ts.handlers.pop().is_none() {
                    warn = Some(Warn::Traps);
                }
            }
        }
        self.ts.last_known_ip = Some(dst.ip);
        warn
    }

    /// A jump or return onto an exception handler: back to the frame that installed it.
    pub(super) fn enter_trap(&mut self, dst: &Loc) -> Option<Warn> {
        match self.ts.handlers.pop() {
            Some(h) => {
                self.ts.leaf = h;
                self.record(Flow::Return);
                self.ensure_current(dst);
                None
            }
            None => {
                // Unmatched: guessing would build a wrong stack, so start afresh.
                self.split(Join::Never);
                self.ensure_current(dst);
                Some(Warn::Traps)
            }
        }
    }

    pub(super) fn is_entertrap(&self, dst: &Loc) -> bool {
        self.config
            .ocaml_exception_info
            .as_ref()
            .is_some_and(|i| i.is_entertrap(dst.ip))
    }

    pub(super) fn branch(
        &mut self,
        kind: Option<Kind>,
        change: Option<TraceStateChange>,
        src: &Loc,
        dst: &Loc,
    ) -> Option<Warn> {
        use Kind::*;
        use TraceStateChange::{End, Start};
        let mut warn = self.track_traps(src, dst);
        self.signals_observe(kind, change, src);
        match (kind, change) {
            (Some(Call), None) => self.call(src, dst),
            (Some(Call), Some(End)) => {
                self.call(src, dst);
            }
            (Some(_), Some(Start))
            | (Some(Async), None)
            | (Some(HardwareInterrupt | Jump | TxAbort), Some(End)) => {
                warn = Some(Warn::Impossible);
            }
            (None | Some(Async) | Some(Interrupt), Some(End)) => {
                self.ensure_src(src);
                self.synthetic(Symbol::Untraced)
            }
            (Some(Syscall), Some(End)) => {
                self.ensure_src(src);
                self.synthetic(Symbol::Syscall)
            }
            (Some(Return), Some(End)) => {
                self.ensure_src(src);
                self.synthetic(Symbol::Returned)
            }
            (Some(Return), None) => {
                if self.is_entertrap(dst) {
                    self.ensure_src(src);
                    return self.enter_trap(dst).or(warn);
                }
                if self.named_gogo_return(src) {
                    self.gogo(dst);
                } else if !self.handler_return(dst) {
                    self.ret(src, dst);
                }
            }
            (None, Some(Start)) => {
                if self.config.scope == TraceScope::Kernel && !is_kernel_address(dst.ip) {
                    return warn;
                }
                if self.leaf_is_synthetic() {
                    let parent = self.ts.frames[self.ts.leaf as usize].parent;
                    self.ts.leaf = parent;
                    self.record(Flow::Return);
                }
                if self.signal_start(dst) {
                    return warn;
                }
                // Tracing resumes where it stopped (a page fault restarts the faulting
                // instruction), so the symbol is not checked, except to learn the root.
                self.ensure_src(dst);
            }
            (Some(Syscall | HardwareInterrupt), None) => self.enter_kernel(src, dst),
            (Some(Iret | Sysret), Some(End)) => {
                self.leave_kernel_to_untraced();
            }
            (Some(Iret | Sysret), None) => self.leave_kernel(dst),
            (Some(TxAbort), None) => self.ensure_current(dst),
            (Some(Jump | Interrupt), None) => {
                if self.is_entertrap(dst) {
                    self.ensure_src(src);
                    return self.enter_trap(dst).or(warn);
                }
                self.jump(src, dst)
            }
            (None, None) => {}
        }
        warn
    }

    pub(super) fn leave_kernel_to_untraced(&mut self) {
        loop {
            let leaf = self.ts.leaf;
            let fr = self.ts.frames[leaf as usize];
            if fr.flags & SENTINEL != 0 {
                break;
            }
            self.ts.leaf = fr.parent;
            self.record(Flow::Return);
            if fr.flags & KERNEL_ENTRY != 0 {
                break;
            }
        }
        self.synthetic(Symbol::Untraced);
    }
}
