//! The legacy streaming stack writer: magic-trace's `trace_writer.ml` behaviour, in Rust.
//!
//! This writer is the *reference*: it reproduces magic-trace's output slice for slice
//! (checked against magic-trace's own test transcripts), quirks included, so that the
//! segment-based writer can be measured against it. Where magic-trace would crash
//! (an "impossible" branch combination, a pushtrap on an empty stack) this writer warns
//! and carries on instead. Where magic-trace would leave a slice without its begin or
//! end, this writer closes it: a thread's time never goes backwards (damaged input),
//! the end of the trace is never before the last event's written time, a frame seen
//! only at trace time 0 is written when its thread closes rather than lost, and a
//! poptrap or entertrap pops silently only the pushtrap's own copy of a frame. None of
//! this changes magic-trace's fixtures; everything else is deliberately identical.
//!
//! ```
//! use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
//! use ptscope_stacks::legacy::LegacyWriter;
//! use ptscope_stacks::{StackWriter, WriterConfig};
//! use ptscope_stacks::transcript::TranscriptSink;
//!
//! let mut strings = StringTable::new();
//! let main = Symbol::FromPerf(strings.intern("main"));
//! let foo = Symbol::FromPerf(strings.intern("foo"));
//! let thread = Thread { pid: Some(1), tid: Some(1) };
//! let mut branch = |time, kind, src, dst| Event::Ok {
//!     thread,
//!     time,
//!     in_transaction: false,
//!     data: EventData::Trace {
//!         change: None,
//!         kind: Some(kind),
//!         src: strings.intern_location(Location::new(0x10, src, 0)),
//!         dst: strings.intern_location(Location::new(0x20, dst, 0)),
//!     },
//! };
//! let events = [branch(0, Kind::Call, main, foo), branch(10, Kind::Return, foo, main)];
//! let mut w = LegacyWriter::new(TranscriptSink::default(), WriterConfig::default());
//! for e in &events {
//!     w.write_event(e, &strings);
//! }
//! let sink = w.finish(&strings);
//! // Returning into `main`, whose call was never seen, infers it from the trace start.
//! assert_eq!(
//!     sink.lines,
//!     ["->      0ns BEGIN main", "->      0ns BEGIN foo", "->     10ns END   foo", "->     10ns END   main"]
//! );
//! ```

use crate::sink::{Arg, ArgValue, TraceSink};
use crate::tracks::{ExtraTracks, FrameBegin, Mark};
use crate::transaction::Transaction;
use crate::{StackWriter, WriterConfig};
use ptscope_event::{
    is_kernel_address, ocaml_int64_hex, Event, EventData, Kind, Location, StringTable, Symbol,
    Thread, TraceScope, TraceStateChange,
};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug)]
enum PendingKind {
    Call {
        addr: u64,
        offset: u64,
        from_untraced: bool,
    },
    Ret,
    RetFromUntraced {
        reset_time: i64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    symbol: Symbol,
    kind: PendingKind,
}

impl Pending {
    fn call(loc: &Location, from_untraced: bool) -> Self {
        Pending {
            symbol: loc.symbol,
            kind: PendingKind::Call {
                addr: loc.ip,
                offset: loc.offset,
                from_untraced,
            },
        }
    }

    fn consumes_time(&self) -> bool {
        matches!(self.kind, PendingKind::Call { .. })
    }
}

#[derive(Clone, Debug)]
struct Callstack {
    /// Bottom (root) first.
    stack: Vec<Location>,
    create_time: i64,
    /// The bottom frame is a pushtrap's copy of the frame that pushed it (no slice of
    /// its own), until it is popped.
    seeded: bool,
}

impl Callstack {
    fn new(create_time: i64) -> Self {
        Callstack {
            stack: Vec::new(),
            create_time,
            seeded: false,
        }
    }
}

enum OcamlState {
    /// Heuristic mode: count frame-descriptor lookups since the last raise.
    Heuristic { frames_to_unwind: i64 },
    /// Exact mode: remember where execution last was to find traps passed over.
    Exact { last_known_ip: Option<u64> },
}

struct ThreadInfo<T> {
    track: T,
    callstack: Callstack,
    inactive_callstacks: Vec<Callstack>,
    last_decode_error_time: i64,
    ocaml: OcamlState,
    pending_events: Vec<Pending>,
    pending_time: i64,
    start_events: VecDeque<(i64, Pending)>,
    /// Set while [`end_of_thread`] closes the stacks: nothing may be deferred then.
    closing: bool,
    last_event_time: i64,
    /// The time the last event was written at: `last_event_time`, or 1 ns later when
    /// it was slid past a decode error (or was the thread's first event).
    last_written_time: i64,
    /// Tracks of extra events' samples.
    extra_tracks: ExtraTracks<T>,
}

impl<T> ThreadInfo<T> {
    fn set_callstack(&mut self, is_kernel_address: bool, time: i64) {
        let create_time = if is_kernel_address {
            time
        } else {
            self.last_decode_error_time
        };
        self.callstack = Callstack::new(create_time);
    }

    fn set_callstack_from_addr(&mut self, addr: u64, time: i64) {
        self.set_callstack(is_kernel_address(addr), time);
    }
}

/// Everything the per-thread operations need besides the thread itself.
struct Ctx<'a, S: TraceSink> {
    sink: &'a mut S,
    strings: &'a StringTable,
    config: &'a WriterConfig,
    in_filtered_region: bool,
    warned: &'a mut WarnedOnce,
}

#[derive(Default)]
struct WarnedOnce {
    trap_depth: bool,
    impossible: bool,
    scope: bool,
    pushtrap_empty: bool,
}

/// magic-trace's streaming stack writer.
pub struct LegacyWriter<S: TraceSink> {
    sink: S,
    config: WriterConfig,
    threads: Vec<ThreadInfo<S::Thread>>,
    thread_index: FxHashMap<Thread, usize>,
    in_filtered_region: bool,
    /// Events of an open TSX transaction, each with its `should_write`.
    transaction: Transaction<bool>,
    warned: WarnedOnce,
    base_time: u64,
    tracks: crate::tracks::Tracks<S::Thread>,
}

impl<S: TraceSink> LegacyWriter<S> {
    /// A writer feeding `sink`; writes the breakpoint hits at once.
    pub fn new(sink: S, config: WriterConfig) -> Self {
        let base_time = config.base_time();
        let mut w = LegacyWriter {
            sink,
            config,
            threads: Vec::new(),
            thread_index: FxHashMap::default(),
            in_filtered_region: true,
            transaction: Transaction::default(),
            warned: WarnedOnce::default(),
            base_time,
            tracks: crate::tracks::Tracks::default(),
        };
        w.write_hits();
        w
    }

    fn map_time(&self, t: u64) -> i64 {
        t.wrapping_sub(self.base_time) as i64
    }

    fn write_hits(&mut self) {
        crate::tracks::write_hits(&mut self.sink, &self.config.hits, self.base_time);
    }

    fn thread_slot(&mut self, event: &Event) -> usize {
        let thread = event.thread();
        if let Some(&i) = self.thread_index.get(&thread) {
            return i;
        }
        let effective_time = event.time().map(|t| self.map_time(t)).unwrap_or(0);
        let (track, track_group_id) =
            self.tracks
                .allocate(&mut self.sink, thread, &self.config.process_names);
        let ocaml = if self.config.ocaml_exception_info.is_some() {
            OcamlState::Exact {
                last_known_ip: None,
            }
        } else {
            OcamlState::Heuristic {
                frames_to_unwind: 0,
            }
        };
        self.threads.push(ThreadInfo {
            track,
            callstack: Callstack::new(effective_time),
            inactive_callstacks: Vec::new(),
            last_decode_error_time: effective_time,
            ocaml,
            pending_events: Vec::new(),
            pending_time: 0,
            start_events: VecDeque::new(),
            closing: false,
            last_event_time: effective_time,
            last_written_time: effective_time,
            extra_tracks: ExtraTracks::new(track_group_id),
        });
        let i = self.threads.len() - 1;
        self.thread_index.insert(thread, i);
        i
    }

    fn write_event_inner(&mut self, event: &Event, should_write: bool, strings: &StringTable) {
        let slot = self.thread_slot(event);
        let time = {
            let base = self.base_time;
            let ti = &mut self.threads[slot];
            let unadjusted = match event.time() {
                // Decode errors sometimes lack a time: pretend they happened with the last event.
                None => ti.last_event_time,
                Some(t) => {
                    // A thread's time never goes back: perf orders a thread's events,
                    // so an earlier time is damage, and writing it would end frames
                    // before they begin. (Identical to magic-trace on ordered input.)
                    let m = (t.wrapping_sub(base) as i64).max(ti.last_event_time);
                    ti.last_event_time = m;
                    m
                }
            };
            // magic-trace #155: an event at exactly the time of the previous decode
            // error is slid 1 ns later so stacks close and reopen in the right order.
            let time = if unadjusted == ti.last_decode_error_time && ti.last_decode_error_time != 0
            {
                unadjusted + 1
            } else {
                unadjusted
            };
            // Nor does the time it is written at: a stack closed at a slid time must not
            // see its next event written before it.
            let time = time.max(ti.last_written_time);
            ti.last_written_time = time;
            time
        };
        self.maybe_start_filtered_region(should_write, time, strings);
        self.maybe_stop_filtered_region(should_write, strings);

        let mut ctx = Ctx {
            sink: &mut self.sink,
            strings,
            config: &self.config,
            in_filtered_region: self.in_filtered_region,
            warned: &mut self.warned,
        };
        let ti = &mut self.threads[slot];
        match event {
            Event::DecodeError { ip, message, .. } => {
                let message = strings.get(*message);
                let warning = match ip {
                    None => {
                        format!("Warning: perf reported an error decoding the trace: '{message}'")
                    }
                    Some(ip) => format!(
                        "Warning: perf reported an error decoding the trace: '{message}' @ IP {}.",
                        ocaml_int64_hex(*ip)
                    ),
                };
                ctx.sink.warning(&warning);
                let name = format!("[decode error: {message}]");
                ctx.instant(ti.track, &name, time, &[]);
                let kernel = ip.is_some_and(is_kernel_address);
                end_of_thread(&mut ctx, ti, time, kernel);
            }
            Event::Ok { thread, data, .. } => write_ok(&mut ctx, ti, *thread, time, data),
        }
    }

    fn maybe_start_filtered_region(
        &mut self,
        should_write: bool,
        time: i64,
        strings: &StringTable,
    ) {
        if self.in_filtered_region || !should_write {
            return;
        }
        {
            let mut ctx = Ctx {
                sink: &mut self.sink,
                strings,
                config: &self.config,
                in_filtered_region: self.in_filtered_region,
                warned: &mut self.warned,
            };
            for ti in self.threads.iter_mut() {
                flush(&mut ctx, ti, time);
                ti.start_events.clear();
            }
        }
        self.in_filtered_region = true;
        let mut ctx = Ctx {
            sink: &mut self.sink,
            strings,
            config: &self.config,
            in_filtered_region: true,
            warned: &mut self.warned,
        };
        for ti in self.threads.iter_mut() {
            // Re-open every frame still on the stacks: the region starts mid-execution.
            let mut stacks = std::mem::take(&mut ti.inactive_callstacks);
            for cs in stacks.iter_mut() {
                rewrite_callstack(&mut ctx, ti.track, cs, time);
            }
            ti.inactive_callstacks = stacks;
            let mut cs = std::mem::replace(&mut ti.callstack, Callstack::new(0));
            rewrite_callstack(&mut ctx, ti.track, &mut cs, time);
            ti.callstack = cs;
        }
    }

    fn maybe_stop_filtered_region(&mut self, should_write: bool, strings: &StringTable) {
        if self.in_filtered_region && !should_write {
            self.end_of_trace(None, strings);
            self.in_filtered_region = false;
        }
    }

    fn end_of_trace(&mut self, to_time: Option<u64>, strings: &StringTable) {
        let mapped = to_time.map(|t| self.map_time(t));
        let mut ctx = Ctx {
            sink: &mut self.sink,
            strings,
            config: &self.config,
            in_filtered_region: self.in_filtered_region,
            warned: &mut self.warned,
        };
        for ti in self.threads.iter_mut() {
            // Not before the last event was written: magic-trace closes at its unslid
            // time, 1 ns before the frames it opened, which a reader then cannot match.
            let t = ti.last_event_time.max(ti.last_written_time);
            end_of_thread(&mut ctx, ti, t, false);
            if let Some(m) = mapped {
                ti.pending_time = m;
                ti.last_event_time = m;
                ti.last_written_time = m;
                ti.callstack.create_time = m;
            }
        }
    }
}

impl<S: TraceSink> StackWriter<S> for LegacyWriter<S> {
    fn write_event(&mut self, event: &Event, strings: &StringTable) {
        self.write_event_filtered(event, true, strings)
    }

    fn write_event_filtered(&mut self, event: &Event, should_write: bool, strings: &StringTable) {
        // Names apply whatever the filter says, and are not part of the stacks.
        if let Event::Ok { thread, data, .. } = event {
            if data.is_task() {
                let process_names = &self.config.process_names;
                self.tracks
                    .observe(&mut self.sink, *thread, data, strings, process_names);
                return;
            }
            // magic-trace's algorithm knows no context switches: a sampled frame lasts
            // until a sample without it, through any time off CPU (docs/sampling.md).
            if matches!(data, EventData::Switch { .. }) {
                return;
            }
        }
        // TSX: events inside a transaction only happened if it commits, so hold them
        // until we know; an abort discards them.
        let Some(admitted) = self.transaction.admit(event, should_write) else {
            return;
        };
        if admitted.dropped_at_error {
            self.sink.warning(
                "Warning: error received during transaction, dropping all transaction events",
            );
        }
        for (ev, sw) in admitted.earlier {
            self.write_event_inner(&ev, sw, strings);
        }
        self.write_event_inner(event, should_write, strings);
    }

    /// Closes every open frame at each thread's last event, keeping the writer usable.
    fn end_snapshot(&mut self, strings: &StringTable) {
        self.end_of_trace(None, strings);
    }

    /// Closes every open frame and returns the sink.
    fn finish(mut self, strings: &StringTable) -> S {
        self.end_of_trace(None, strings);
        self.sink
    }

    fn end_of_input(&mut self) {
        self.sink.end_of_input();
    }
}

impl<S: TraceSink> Ctx<'_, S> {
    fn begin(&mut self, t: S::Thread, name: &str, time: i64, args: &[Arg<'_>], deferred: bool) {
        if !self.in_filtered_region {
        } else if deferred {
            self.sink.duration_begin_deferred(t, name, time, args);
        } else {
            self.sink.duration_begin(t, name, time, args);
        }
    }
    fn end(&mut self, t: S::Thread, name: &str, time: i64) {
        if self.in_filtered_region {
            self.sink.duration_end(t, name, time, &[]);
        }
    }
    fn complete(
        &mut self,
        t: S::Thread,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
        deferred: bool,
    ) {
        if !self.in_filtered_region {
        } else if deferred {
            self.sink
                .duration_complete_deferred(t, name, start, end, args);
        } else {
            self.sink.duration_complete(t, name, start, end, args);
        }
    }
    fn instant(&mut self, t: S::Thread, name: &str, time: i64, args: &[Arg<'_>]) {
        if self.in_filtered_region {
            self.sink.duration_instant(t, name, time, args);
        }
    }
    fn counter(&mut self, t: S::Thread, name: &str, time: i64, args: &[Arg<'_>]) {
        if self.in_filtered_region {
            self.sink.counter(t, name, time, args);
        }
    }
    fn is_named(&self, symbol: Symbol, names: &[&str]) -> bool {
        match symbol {
            Symbol::FromPerf(s) => names.contains(&self.strings.get(s)),
            _ => false,
        }
    }
    fn scope_warning(&mut self, allowed: &[TraceScope], event: &str) {
        if !allowed.contains(&self.config.scope) && !self.warned.scope {
            self.warned.scope = true;
            self.sink.warning(&format!(
                "Warning: saw a {event} event, which should not happen when tracing with scope '{}'; the stacks around it may be wrong",
                self.config.scope
            ));
        }
    }
}

fn write_pending_now<S: TraceSink>(ctx: &mut Ctx<'_, S>, track: S::Thread, time: i64, ev: Pending) {
    write_pending_as(ctx, track, time, ev, false)
}

/// Writes a pending event; `deferred` marks a start event written after later events.
fn write_pending_as<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    track: S::Thread,
    time: i64,
    ev: Pending,
    deferred: bool,
) {
    let display = ctx.strings.display(ev.symbol);
    match ev.kind {
        PendingKind::Call {
            addr,
            offset,
            from_untraced,
        } => {
            let config = ctx.config;
            let debug = config.debug_info.get(&addr.wrapping_sub(offset));
            let annotate = config.annotate_inferred_start_times;
            let begin = FrameBegin::new(display, Some(addr), debug, from_untraced, annotate);
            ctx.begin(track, begin.name(), time, begin.args(), deferred);
        }
        PendingKind::Ret => ctx.end(track, display, time),
        PendingKind::RetFromUntraced { reset_time } => {
            ctx.complete(track, "[unknown]", reset_time, time, &[], deferred)
        }
    }
}

fn write_pending<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    ev: Pending,
) {
    match ev.kind {
        // Frames whose start was inferred belong at the very start of the stack, before
        // anything already written, so they wait until the thread is closed.
        PendingKind::RetFromUntraced { .. }
        | PendingKind::Call {
            from_untraced: true,
            ..
        } => ti.start_events.push_front((time, ev)),
        // Deferring while the thread is being closed would lose the frame (magic-trace
        // drops it: the ends are written now and nothing writes the begins before them).
        PendingKind::Call { .. } if time == 0 && !ti.closing => {
            ti.start_events.push_back((time, ev))
        }
        _ => write_pending_now(ctx, ti.track, time, ev),
    }
}

fn flush<S: TraceSink>(ctx: &mut Ctx<'_, S>, ti: &mut ThreadInfo<S::Thread>, to_time: i64) {
    // perf gives many branches the same timestamp; spread the time until the next
    // timestamp evenly over the calls so nested frames stay visible.
    let mut pending = std::mem::take(&mut ti.pending_events);
    let count = pending.iter().filter(|e| e.consumes_time()).count() as i64;
    let total_ns = to_time - ti.pending_time;
    let mut ns_offset = 0i64;
    let mut shares_consumed = 0i64;
    for ev in pending.drain(..) {
        let share = if ev.consumes_time() {
            shares_consumed += 1;
            (total_ns - ns_offset) / (count - shares_consumed + 1)
        } else {
            0
        };
        let time = ti.pending_time + ns_offset;
        ns_offset += share;
        write_pending(ctx, ti, time, ev);
    }
    ti.pending_events = pending;
    ti.pending_time = to_time;
}

fn add_event<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    ev: Pending,
) {
    if time != ti.pending_time {
        flush(ctx, ti, time);
    }
    ti.pending_events.push(ev);
}

fn call<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    loc: &Location,
) {
    add_event(ctx, ti, time, Pending::call(loc, false));
    ti.callstack.stack.push(*loc);
}

fn ret_plain<S: TraceSink>(ctx: &mut Ctx<'_, S>, ti: &mut ThreadInfo<S::Thread>, time: i64) {
    let popped = ti.callstack.stack.pop();
    if ti.callstack.stack.is_empty() {
        ti.callstack.seeded = false;
    }
    match popped {
        Some(loc) => add_event(
            ctx,
            ti,
            time,
            Pending {
                symbol: loc.symbol,
                kind: PendingKind::Ret,
            },
        ),
        None => {
            // Returning out of a frame whose call predates the snapshot.
            let reset_time = ti.callstack.create_time;
            add_event(
                ctx,
                ti,
                time,
                Pending {
                    symbol: Symbol::Unknown,
                    kind: PendingKind::RetFromUntraced { reset_time },
                },
            )
        }
    }
}

fn clear_callstack<S: TraceSink>(ctx: &mut Ctx<'_, S>, ti: &mut ThreadInfo<S::Thread>, time: i64) {
    while !ti.callstack.stack.is_empty() {
        ret_plain(ctx, ti, time);
    }
}

fn clear_all_callstacks<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
) {
    clear_callstack(ctx, ti, time);
    while let Some(cs) = ti.inactive_callstacks.pop() {
        ti.callstack = cs;
        clear_callstack(ctx, ti, time);
    }
}

fn end_of_thread<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    is_kernel: bool,
) {
    let to_time = ti.pending_time;
    while let Some((t, ev)) = ti.start_events.pop_front() {
        write_pending_as(ctx, ti.track, t, ev, true);
    }
    ti.closing = true;
    clear_all_callstacks(ctx, ti, time);
    flush(ctx, ti, to_time);
    ti.closing = false;
    ti.last_decode_error_time = time;
    ti.set_callstack(is_kernel, time);
}

/// Where Go's `gogo` returns to when it resumes a goroutine (both writers use it).
pub(crate) const GOGO_DESTINATIONS: &[&str] = &["runtime.mcall", "runtime.morestack.abi0"];

/// A return that knows about Go's `gogo`, which switches goroutine stacks: control
/// comes back as if from the last `runtime.mcall`/`runtime.morestack`, or, at start-up,
/// on a fresh stack.
fn ret<S: TraceSink>(ctx: &mut Ctx<'_, S>, ti: &mut ThreadInfo<S::Thread>, time: i64) {
    let returned_from = ti.callstack.stack.last().map(|l| l.symbol);
    ret_plain(ctx, ti, time);
    let from_gogo = returned_from.is_some_and(|s| ctx.is_named(s, &["gogo"]));
    if !from_gogo {
        return;
    }
    let has_destination = ti
        .callstack
        .stack
        .iter()
        .any(|l| ctx.is_named(l.symbol, GOGO_DESTINATIONS));
    if has_destination {
        while let Some(loc) = ti.callstack.stack.last().copied() {
            ret_plain(ctx, ti, time);
            // The destination itself was jumped into; the jump out of it becomes a
            // ret+call to its caller, so pop one frame past it.
            if ctx.is_named(loc.symbol, GOGO_DESTINATIONS) {
                ret_plain(ctx, ti, time);
                break;
            }
        }
    } else {
        end_of_thread(ctx, ti, time, false);
    }
}

fn check_current_symbol<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    loc: &Location,
) {
    // After every branch the symbol under the pc should be the top frame; a mismatch
    // means a tail call, a PLT jump or a return above the known stack.
    match ti.callstack.stack.last() {
        Some(top) if top.symbol != loc.symbol => {
            ret(ctx, ti, time);
            call(ctx, ti, time, loc);
        }
        Some(_) => {}
        None => {
            // Returned into a function whose call predates the trace: it started no
            // later than the stack was (re)created.
            let t = ti.callstack.create_time;
            write_pending(ctx, ti, t, Pending::call(loc, true));
            ti.callstack.stack.push(*loc);
        }
    }
}

fn ret_track_exn_data<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
) {
    if let OcamlState::Heuristic { .. } = ti.ocaml {
        let top = ti.callstack.stack.last().map(|l| l.symbol);
        if let Some(Symbol::FromPerf(s)) = top {
            match ctx.strings.get(s) {
                "caml_next_frame_descriptor" | "caml_stash_backtrace" => {
                    if let OcamlState::Heuristic { frames_to_unwind } = &mut ti.ocaml {
                        *frames_to_unwind += 1;
                    }
                }
                "caml_raise_exn" => unwind_stack(ctx, ti, time, -2),
                "caml_raise_exception" => unwind_stack(ctx, ti, time, 1),
                _ => {}
            }
        }
    }
    ret_plain(ctx, ti, time);
}

fn unwind_stack<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    diff: i64,
) {
    let frames = match &mut ti.ocaml {
        OcamlState::Heuristic { frames_to_unwind } => std::mem::take(frames_to_unwind),
        OcamlState::Exact { .. } => return,
    };
    for _ in 0..(frames + diff + 1).max(0) {
        ret_plain(ctx, ti, time);
    }
}

fn clear_trap_stack<S: TraceSink>(ctx: &mut Ctx<'_, S>, ti: &mut ThreadInfo<S::Thread>, time: i64) {
    clear_callstack(ctx, ti, time);
    ti.callstack = ti
        .inactive_callstacks
        .pop()
        .unwrap_or_else(|| Callstack::new(time));
}

fn check_current_symbol_track_entertraps<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    dst: &Location,
) {
    let is_entertrap = matches!(ti.ocaml, OcamlState::Exact { .. })
        && ctx
            .config
            .ocaml_exception_info
            .as_ref()
            .is_some_and(|i| i.is_entertrap(dst.ip));
    if is_entertrap {
        // The trap's callstack begins with a synthetic copy of the frame that pushed
        // the trap; drop it so only the real frames are closed.
        if ti.callstack.seeded && !ti.callstack.stack.is_empty() {
            ti.callstack.stack.remove(0);
        }
        clear_trap_stack(ctx, ti, time);
    } else {
        check_current_symbol(ctx, ti, time, dst);
    }
}

fn track_traps_in_range<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    src: &Location,
    dst: &Location,
    time: i64,
) {
    let Some(info) = ctx.config.ocaml_exception_info.as_ref() else {
        return;
    };
    let last_known = match ti.ocaml {
        OcamlState::Exact { last_known_ip } => last_known_ip,
        OcamlState::Heuristic { .. } => return,
    };
    if let Some(from) = last_known {
        for &(addr, is_push) in info.traps_in_range(from, src.ip) {
            if is_push {
                // A `try` block runs on its own callstack, seeded with the current top
                // frame so code in the block that makes no calls infers nothing.
                let top = ti.callstack.stack.last().copied();
                if top.is_none() && !ctx.warned.pushtrap_empty {
                    ctx.warned.pushtrap_empty = true;
                    ctx.sink.warning(&format!(
                        "Warning: OCaml pushtrap at {} with an empty callstack; exception stacks may be wrong",
                        ocaml_int64_hex(addr)
                    ));
                }
                let old = std::mem::replace(&mut ti.callstack, Callstack::new(time));
                ti.inactive_callstacks.push(old);
                if let Some(top) = top {
                    ti.callstack.stack.push(top);
                    ti.callstack.seeded = true;
                }
            } else if ti.callstack.stack.len() != 1 {
                if !ctx.warned.trap_depth {
                    ctx.warned.trap_depth = true;
                    ctx.sink.warning(&format!(
                        "WARNING: expected callstack depth to be the same going into a [try] block as when leaving it, but it wasn't (depth {}, poptrap at {}). Did Intel Processor Trace drop some data? Will attempt to recover. Further errors will be suppressed.",
                        ti.callstack.stack.len() as i64 - 1,
                        ocaml_int64_hex(addr)
                    ));
                }
            } else {
                if ti.callstack.seeded {
                    ti.callstack.stack.pop();
                } else {
                    // Not the pushtrap's seed copy but a real frame (no pushtrap, or
                    // one with an empty stack): dropping it silently would leave its
                    // slice open forever.
                    ret_plain(ctx, ti, time);
                }
                clear_trap_stack(ctx, ti, time);
            }
        }
    }
    ti.ocaml = OcamlState::Exact {
        last_known_ip: Some(dst.ip),
    };
}

fn rewrite_callstack<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    track: S::Thread,
    cs: &mut Callstack,
    time: i64,
) {
    for loc in &cs.stack {
        write_pending_now(ctx, track, time, Pending::call(loc, true));
    }
    // Later untraced returns must start before the frames just re-opened.
    cs.create_time = time - 1;
}

fn write_ok<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    thread: Thread,
    time: i64,
    data: &EventData,
) {
    match data {
        EventData::EventSample {
            location,
            count,
            name,
        } => {
            let mark = Mark::at(thread, time, location);
            let write = ctx.in_filtered_region;
            let extra = &mut ti.extra_tracks;
            extra.write_sample(ctx.sink, *name, mark, *count, write, ctx.strings);
        }
        EventData::Ptwrite { location, data } => {
            if ctx.in_filtered_region {
                let mark = Mark::at(thread, time, location);
                mark.write_ptwrite(ctx.sink, ti.track, *data, ctx.strings);
            }
        }
        EventData::Power { freq_mhz } => {
            let args = [Arg::new("freq (MHz)", ArgValue::Int(*freq_mhz as i64))];
            ctx.counter(ti.track, "CPU", time, &args);
        }
        // Taken by `write_event_filtered` before a thread's stack is touched.
        EventData::Comm { .. } | EventData::Fork { .. } | EventData::Switch { .. } => {}
        // magic-trace's algorithm knows nothing of time off CPU (as of switches).
        EventData::SwitchOutStack { .. } => {}
        EventData::StackSample { callstack } => {
            let callstack = ctx.strings.stack(*callstack);
            // Keep the common prefix (by address) of the old and new stacks; return out
            // of the rest and call into the new frames. Synthetic frames share address 0
            // (`[kernel: read]`, `[kernel: openat]`): their names tell them apart.
            let matching = ti
                .callstack
                .stack
                .iter()
                .zip(callstack.clone())
                .take_while(|(a, b)| a.ip == b.ip && a.symbol == b.symbol)
                .count();
            let how_many_ret = ti.callstack.stack.len() - matching;
            for _ in 0..how_many_ret {
                ret(ctx, ti, time);
            }
            let depth = ti.callstack.stack.len();
            for loc in callstack.skip(depth) {
                call(ctx, ti, time, loc);
            }
        }
        EventData::Trace {
            change,
            kind,
            src,
            dst,
        } => {
            let (src, dst) = (*ctx.strings.location(*src), *ctx.strings.location(*dst));
            track_traps_in_range(ctx, ti, &src, &dst, time);
            write_branch(ctx, ti, time, *kind, *change, &dst);
        }
    }
}

fn write_branch<S: TraceSink>(
    ctx: &mut Ctx<'_, S>,
    ti: &mut ThreadInfo<S::Thread>,
    time: i64,
    kind: Option<Kind>,
    change: Option<TraceStateChange>,
    dst: &Location,
) {
    use Kind::*;
    use TraceStateChange::{End, Start};
    let untraced = Location::locationless(Symbol::Untraced);
    match (kind, change) {
        (Some(Call), None | Some(End)) => call(ctx, ti, time, dst),
        (Some(_), Some(Start))
        | (Some(Async), None)
        | (Some(HardwareInterrupt | Jump | TxAbort), Some(End)) => {
            // magic-trace raises here; a trace is more useful with this one event skipped.
            if !ctx.warned.impossible {
                ctx.warned.impossible = true;
                ctx.sink.warning(&format!(
                    "Warning: skipped a branch that should be impossible ({kind:?} with trace state change {change:?}); the stack around it may be wrong"
                ));
            }
        }
        (None | Some(Async) | Some(Interrupt), Some(End)) => call(ctx, ti, time, &untraced),
        (Some(Syscall), Some(End)) => {
            ctx.scope_warning(&[TraceScope::Userspace], "syscall trace-end");
            call(ctx, ti, time, &Location::locationless(Symbol::Syscall));
        }
        (Some(Return), Some(End)) => call(ctx, ti, time, &Location::locationless(Symbol::Returned)),
        (Some(Return), None) => {
            ret_track_exn_data(ctx, ti, time);
            // caml_raise_exn adjusts the stack and returns; compiled OCaml code uses jumps.
            check_current_symbol_track_entertraps(ctx, ti, time, dst);
        }
        (None, Some(Start)) => {
            if ctx.config.scope == TraceScope::Kernel {
                // Back in the kernel after user space: a brand-new stack.
                clear_callstack(ctx, ti, time);
                ti.set_callstack_from_addr(dst.ip, time);
            } else if ti.callstack.stack.is_empty() {
                // The very first start of a thread's trace has nothing to return from.
                call(ctx, ti, time, dst);
            } else {
                // A trace stop was shown as a call into [untraced]; restarting returns
                // from it. The pc usually does not change, so no symbol check here.
                ret_track_exn_data(ctx, ti, time);
            }
        }
        (Some(k @ (Syscall | HardwareInterrupt)), None) => {
            let allowed: &[TraceScope] = if k == HardwareInterrupt {
                &[TraceScope::UserspaceAndKernel, TraceScope::Kernel]
            } else {
                &[TraceScope::UserspaceAndKernel]
            };
            ctx.scope_warning(allowed, "syscall/interrupt");
            // Kernel entries run on a stack of their own, stacked over the interrupted one.
            let old = std::mem::replace(&mut ti.callstack, Callstack::new(0));
            ti.inactive_callstacks.push(old);
            ti.set_callstack_from_addr(dst.ip, time);
            call(ctx, ti, time, dst);
        }
        (Some(Iret | Sysret), Some(End)) => {
            ctx.scope_warning(&[TraceScope::Kernel], "iret/sysret trace-end");
            clear_callstack(ctx, ti, time);
            call(ctx, ti, time, &untraced);
        }
        (Some(k @ (Iret | Sysret)), None) => {
            let allowed: &[TraceScope] = if k == Iret {
                &[TraceScope::UserspaceAndKernel, TraceScope::Kernel]
            } else {
                &[TraceScope::UserspaceAndKernel]
            };
            ctx.scope_warning(allowed, "iret/sysret");
            clear_callstack(ctx, ti, time);
            match ti.inactive_callstacks.pop() {
                Some(cs) => ti.callstack = cs,
                None => {
                    ti.set_callstack_from_addr(dst.ip, time);
                    check_current_symbol(ctx, ti, time, dst);
                }
            }
        }
        (Some(TxAbort), None) => check_current_symbol(ctx, ti, time, dst),
        (Some(Jump | Interrupt), None) => check_current_symbol_track_entertraps(ctx, ti, time, dst),
        (None, None) => {}
    }
}
