//! The segment-based stack writer: whole-trace reconstruction in memory, then one
//! ordered write pass.
//!
//! magic-trace's streaming writer must decide every frame the moment it sees an event,
//! so it gets the frames nearest the root wrong (they are discovered only when the
//! program returns into them) and drops the whole stack at every decode error. This
//! writer keeps, per thread, the trace as **segments** — continuous, error-free runs
//! of events — and, inside each, every callstack as a pointer to an immutable
//! leaf→root list of frames ending in a *sentinel*. When a return goes above the
//! known root, the sentinel becomes the newly discovered caller and a new sentinel is
//! put below it: every earlier callstack of the segment gains that caller at once.
//!
//! After the input ends, adjacent segments are **stitched**: if the outermost frames
//! after a gap line up with frames open before it, those frames continue through the
//! gap (and the outer frames only known before the gap carry on below), so a decode
//! error no longer breaks the stack. Nothing is invented: only frames seen in the
//! trace are ever written; frames whose start or end was inferred carry an
//! `inferred_start_time`/`inferred_end_time` arg.
//!
//! The write pass emits only well-nested begin/end events in per-thread time order.
//!
//! ```
//! use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
//! use ptscope_stacks::segments::{SegmentsConfig, SegmentsWriter};
//! use ptscope_stacks::transcript::TranscriptSink;
//!
//! let mut s = StringTable::new();
//! let (main, f, g) = (s.intern("main"), s.intern("f"), s.intern("g"));
//! let at = |ip, sym| Location::new(ip, Symbol::FromPerf(sym), 0);
//! let br = |time, kind, src, dst| Event::Ok {
//!     thread: Thread { pid: Some(1), tid: Some(1) },
//!     time,
//!     in_transaction: false,
//!     data: EventData::Trace { change: None, kind: Some(kind), src, dst },
//! };
//! let mut w = SegmentsWriter::new(TranscriptSink::default(), SegmentsConfig::default());
//! // The snapshot starts inside `f`; only the return reveals that `main` called it.
//! w.write_event(&br(0, Kind::Call, at(0x110, f), at(0x200, g)), &s);
//! w.write_event(&br(10, Kind::Return, at(0x210, g), at(0x115, f)), &s);
//! w.write_event(&br(20, Kind::Return, at(0x120, f), at(0x30, main)), &s);
//! let t = w.finish(&s);
//! assert_eq!(
//!     t.lines,
//!     [
//!         "->      0ns BEGIN main", "->      0ns BEGIN f", "->      0ns BEGIN g",
//!         "->     10ns END   g", "->     20ns END   f", "->     20ns END   main",
//!     ]
//! );
//! ```

use crate::legacy::{LegacyConfig, GOGO_DESTINATIONS};
use crate::sink::{Arg, ArgValue, TraceSink};
use ptscope_event::{
    is_kernel_address, ocaml_int64_hex, Event, EventData, ExtraEvent, Hit, Kind, Location,
    OcamlExceptionInfo, SourcePosition, StringTable, Symbol, Thread, TraceScope, TraceStateChange,
};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

mod signals;
mod unwind;

/// Options of the segments writer.
#[derive(Clone, Debug)]
pub struct SegmentsConfig {
    /// Which privilege levels were traced.
    pub scope: TraceScope,
    /// Append ` [inferred start time]` to frames whose start was inferred (for transcripts).
    pub annotate_inferred_start_times: bool,
    /// OCaml trap addresses; `Some` switches exception tracking to the exact mode.
    pub ocaml_exception_info: Option<OcamlExceptionInfo>,
    /// perf time (ns) that becomes trace time 0.
    pub earliest_time: u64,
    /// Display names for processes, by pid.
    pub process_names: FxHashMap<u32, String>,
    /// Source positions of function starts, by start address.
    pub debug_info: FxHashMap<u64, SourcePosition>,
    /// Breakpoint hits to show on their own track.
    pub hits: Vec<Hit>,
    /// Join segments across decode errors when the stacks line up (on by default).
    pub stitch: bool,
    /// Every event has its own exact time (the emulate backend's instruction clock): stack
    /// changes sharing a time took no time between them (a call and the signal that
    /// stopped the code before the callee's first instruction), so that time is not
    /// spread over them as it is for Intel PT's coarse packet times.
    pub exact_times: bool,
}

impl Default for SegmentsConfig {
    fn default() -> Self {
        SegmentsConfig {
            scope: TraceScope::default(),
            annotate_inferred_start_times: false,
            ocaml_exception_info: None,
            earliest_time: 0,
            process_names: FxHashMap::default(),
            debug_info: FxHashMap::default(),
            hits: Vec::new(),
            stitch: true,
            exact_times: false,
        }
    }
}

impl From<LegacyConfig> for SegmentsConfig {
    /// The same options as the legacy writer's, with stitching on.
    fn from(c: LegacyConfig) -> Self {
        SegmentsConfig {
            scope: c.scope,
            annotate_inferred_start_times: c.annotate_inferred_start_times,
            ocaml_exception_info: c.ocaml_exception_info,
            earliest_time: c.earliest_time,
            process_names: c.process_names,
            debug_info: c.debug_info,
            hits: c.hits,
            stitch: true,
            exact_times: false,
        }
    }
}

const SENTINEL: u8 = 1;
const INFERRED_START: u8 = 2;
const KERNEL_ENTRY: u8 = 4;
/// A root learnt from a return landing on the first byte of its symbol. A return address
/// follows a call, so that call ended the code *before* the symbol: the symbol is a label
/// laid out after the real caller (ld.so's `_start` ends with `call _dl_start`, which
/// returns to `_dl_start_user`), and the frame's own name is unknown.
const RETURN_LABEL: u8 = 8;
/// A signal handler's frame (and the trampoline that replaces it when it returns): its
/// parent is the frame the signal interrupted (see [`signals`]).
const SIGNAL: u8 = 16;
const NONE: u32 = u32::MAX;
/// Functions at the very bottom of a thread's or goroutine's stack: a stack known down
/// to one of these has nothing below it to carry over.
const THREAD_ROOTS: &[&str] = &[
    "runtime.goexit",
    "runtime.goexit.abi0",
    "runtime.mstart",
    "runtime.rt0_go",
    "_start",
    "start_thread",
    "clone",
    "clone3",
];
/// glibc's process start-up, whose callers are fixed by the ABI: the program's `_start`
/// calls `__libc_start_main`, which calls `__libc_start_call_main`, which calls `main`.
/// Names are compared without their symbol version (`@@GLIBC_2.34`).
const LIBC_START_MAIN: &[&str] = &["__libc_start_main", "__libc_start_main_impl"];
/// The label in ld.so's `_start` where `_dl_start` returns: the same frame as `_start`.
const LOADER_START_LABEL: &str = "_dl_start_user";
/// Called by `__libc_start_main` alone (glibc 2.34 and later).
const LIBC_START_CALL_MAIN: &str = "__libc_start_call_main";
/// How many later segments are searched for evidence of what survived a gap.
const MAX_LOOKAHEAD: usize = 64;
/// How far up the stack a long return or unwind is looked for.
const MAX_FIND_DEPTH: usize = 256;

/// One stack frame: 12 bytes, so millions of calls stay cheap.
#[derive(Clone, Copy, Debug)]
struct Frame {
    loc: u32,
    parent: u32,
    flags: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Flow {
    /// The state at a segment's start.
    Start,
    Call,
    Return,
    Jump,
    /// A frame entered by a sampled stack: it was already running at the sample, so
    /// it takes no share of the time to the next event (unlike a traced call).
    Sampled,
}

/// The leaf of the callstack from `time` on: 16 bytes per stack change.
#[derive(Clone, Copy, Debug)]
struct Entry {
    time: i64,
    leaf: u32,
    flow: Flow,
    /// ns from `time` to the next event of any kind (not just the next stack change),
    /// which bounds how far this timestamp's calls are spread; `NO_HORIZON` if unknown.
    horizon: u16,
}

/// `Entry::horizon` when no later event was seen (or it was too far to store).
const NO_HORIZON: u16 = u16::MAX;

/// How a segment may continue the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Join {
    /// Unrelated (a new snapshot, an unmatched exception handler).
    Never,
    /// Only if its outermost frames line up with open ones (a goroutine switch: the
    /// resumed goroutine may be another one, whose stack is unrelated).
    Verified,
    /// Best effort (a decode error: the same thread went on running).
    Any,
    /// After a jump into the middle of a function the segment never saw, from a frame
    /// whose caller it does not know (an exception unwinding past the known stack):
    /// joined where its outermost frames line up with open ones; otherwise the jump is
    /// taken as a tail jump, as within a segment.
    Unwound,
    /// After the C++ unwinder jumped to a landing pad in a function the segment never
    /// saw (see [`unwind`]): joined where its outermost frames line up with open ones,
    /// never a tail jump. The innermost `skip` frames open before it (the unwinder and
    /// the frames its caller rules out) are not candidates.
    Landed { skip: u32 },
}

#[derive(Clone, Debug)]
struct Segment {
    /// Index of the segment's first entry (its `Flow::Start` entry).
    first: usize,
    /// One past its last entry.
    end: usize,
    /// Time of the segment's last event.
    end_time: i64,
    /// May this segment be joined to the previous one, and how?
    join: Join,
    /// The sentinel below the segment's outermost known frame (set when it closes).
    sentinel: u32,
    /// When the segment was opened: after a decode error, the error's time.
    opened_at: i64,
}

struct ThreadState<T> {
    track: T,
    track_group_id: u32,
    extra_tracks: [Option<T>; 2],
    frames: Vec<Frame>,
    entries: Vec<Entry>,
    segments: Vec<Segment>,
    /// The current leaf (a sentinel when nothing is known).
    leaf: u32,
    sentinel: u32,
    last_time: i64,
    /// OCaml: frames that pushed a trap, innermost last.
    handlers: Vec<u32>,
    /// Signal deliveries and the last stop of tracing.
    signals: signals::Signals,
    last_known_ip: Option<u64>,
    /// The current segment has seen no event yet: its start moves to the first one,
    /// so nothing it learns is shown during the gap before it.
    fresh: bool,
    /// Decode errors: (time, message), emitted as instants.
    errors: Vec<(i64, String)>,
    /// CPU frequency changes: (time, MHz).
    power: Vec<(i64, u32)>,
    /// Times off CPU since the last sample, oldest first: which frames they interrupt
    /// is known only at the next sample (those it shares with the last one).
    off_cpu: Vec<OffCpu>,
    /// Time of the last stack sample.
    last_sample: Option<i64>,
    /// The stack comes from samples (not branches): only then do switches matter.
    sampled: bool,
    /// The last gaps between consecutive samples (a ring), to estimate the sampling
    /// period when the recording has no context switches.
    gaps: [i64; GAPS],
    /// How many gaps were seen (the ring holds the last [`GAPS`]).
    gap_count: usize,
    /// Frame -> how many samples had it as their leaf: its slice carries the count
    /// (`samples`), so per-function self counts can be read from the trace. A map,
    /// not a field of [`Frame`]: traced frames (most of them) never need it.
    leaf_samples: FxHashMap<u32, u32>,
}

/// One interval a thread spent off CPU.
#[derive(Clone, Copy, Debug)]
struct OffCpu {
    /// When it was switched out.
    out: i64,
    /// When it was switched back in; `None` while it is still out.
    back: Option<i64>,
    /// Preempted (still runnable), not blocked.
    preempt: bool,
}

/// How many sample gaps the period estimate looks at.
const GAPS: usize = 16;
/// Off-CPU intervals held per thread between two samples; more are merged into the last.
const MAX_OFF_CPU: usize = 4096;

/// Locations interned per writer: frames refer to them by index.
#[derive(Default)]
struct Locations {
    map: FxHashMap<(u64, Symbol), u32>,
    list: Vec<Location>,
}

impl Locations {
    fn intern(&mut self, loc: &Location) -> u32 {
        let key = (loc.ip, loc.symbol);
        if let Some(&i) = self.map.get(&key) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(*loc);
        self.map.insert(key, i);
        i
    }
}

/// The segment-based stack writer.
pub struct SegmentsWriter<S: TraceSink> {
    sink: S,
    config: SegmentsConfig,
    threads: Vec<ThreadState<S::Thread>>,
    index: FxHashMap<Thread, usize>,
    last_thread: Option<(Thread, usize)>,
    locs: Locations,
    transaction: VecDeque<Event>,
    base_time: u64,
    warned_impossible: bool,
    warned_traps: bool,
    /// Sampled frames outside the scope were dropped and the user was told.
    warned_scope: bool,
    /// A sampled stack's frames in scope (reused: no allocation per sample).
    sample_frames: Vec<Location>,
    /// Changes of the `--filter` region: (trace time, events now written?).
    regions: Vec<(i64, bool)>,
    in_region: bool,
    tracks: crate::tracks::Tracks<S::Thread>,
    /// The recording has context switches ([`EventData::Switch`]): gaps between
    /// samples are then not taken as time off CPU, switches say exactly when it was.
    switches: bool,
}

impl<S: TraceSink> SegmentsWriter<S> {
    /// A writer feeding `sink`.
    pub fn new(sink: S, config: SegmentsConfig) -> Self {
        let base_time = config
            .hits
            .iter()
            .map(|h| h.time)
            .fold(config.earliest_time, u64::min);
        let mut w = SegmentsWriter {
            sink,
            config,
            threads: Vec::new(),
            index: FxHashMap::default(),
            last_thread: None,
            locs: Locations::default(),
            transaction: VecDeque::new(),
            base_time,
            warned_impossible: false,
            warned_traps: false,
            warned_scope: false,
            sample_frames: Vec::new(),
            regions: Vec::new(),
            in_region: true,
            tracks: crate::tracks::Tracks::default(),
            switches: false,
        };
        w.write_hits();
        w
    }

    fn write_hits(&mut self) {
        let mut hits = self.config.hits.clone();
        hits.sort_by_key(|h| h.time);
        crate::tracks::write_hits(&mut self.sink, &hits, self.base_time);
    }

    /// The sink (e.g. to mark the end of input in a transcript).
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Feeds one event; `should_write` is false outside a `--filter` range. Frames are
    /// tracked outside ranges too, so a range starts with the right stack (its frames
    /// marked as inferred starts) and ends with every open frame closed.
    pub fn write_event_filtered(
        &mut self,
        event: &Event,
        should_write: bool,
        strings: &StringTable,
    ) {
        if event.is_task() {
            // Names are not part of the stacks; a filter does not hide them.
            return self.write_event(event, strings);
        }
        if should_write != self.in_region {
            self.in_region = should_write;
            let t = event
                .time()
                .map(|t| t.wrapping_sub(self.base_time) as i64)
                .or_else(|| self.regions.last().map(|r| r.0))
                .unwrap_or(0);
            self.regions.push((t, should_write));
        }
        self.write_event(event, strings);
    }

    /// Feeds one event.
    pub fn write_event(&mut self, event: &Event, strings: &StringTable) {
        if let Event::Ok { thread, data, .. } = event {
            if data.is_task() {
                let process_names = &self.config.process_names;
                self.tracks
                    .observe(&mut self.sink, *thread, data, strings, process_names);
                if matches!(data, EventData::Comm { exec: true, .. }) {
                    self.exec(event, *thread);
                }
                return;
            }
            if matches!(data, EventData::Switch { .. }) {
                self.switches = true;
                // A thread never sampled has no stack to interrupt, and no track; a
                // branch trace is exact about when its thread ran (its clock stays).
                if !self
                    .index
                    .get(thread)
                    .is_some_and(|&i| self.threads[i].sampled)
                {
                    return;
                }
            }
        }
        // TSX: events inside a transaction count only if it commits.
        match event {
            Event::Ok {
                data,
                in_transaction,
                ..
            } => {
                let abort = matches!(
                    data,
                    EventData::Trace {
                        kind: Some(Kind::TxAbort),
                        ..
                    }
                );
                if abort {
                    self.transaction.clear();
                } else if *in_transaction {
                    self.transaction.push_back(event.clone());
                    return;
                } else {
                    while let Some(e) = self.transaction.pop_front() {
                        self.ingest(&e, strings);
                    }
                }
            }
            Event::DecodeError { .. } => self.transaction.clear(),
        }
        self.ingest(event, strings);
    }

    fn thread_slot(&mut self, event: &Event) -> usize {
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
            track_group_id,
            extra_tracks: [None, None],
            frames: Vec::new(),
            entries: Vec::new(),
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
            off_cpu: Vec::new(),
            last_sample: None,
            sampled: false,
            gaps: [0; GAPS],
            gap_count: 0,
            leaf_samples: FxHashMap::default(),
        };
        new_segment(&mut ts, time, Join::Never);
        self.threads.push(ts);
        let i = self.threads.len() - 1;
        self.index.insert(thread, i);
        self.last_thread = Some((thread, i));
        i
    }

    fn ingest(&mut self, event: &Event, strings: &StringTable) {
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
                EventData::Trace {
                    change,
                    kind,
                    src,
                    dst,
                } => {
                    // A branch trace is exact about when the thread ran: switches are
                    // for sampled stacks only (a `perf script` of PT may print them).
                    cx.ts.off_cpu.clear();
                    cx.ts.sampled = false;
                    if let Some(w) = cx.branch(*kind, *change, src, dst) {
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
                EventData::StackSample { callstack } => {
                    // perf samples whole callchains whatever the event's `u`/`k`:
                    // keep only the frames of the levels the trace is about.
                    let scope = cx.config.scope;
                    let callstack = strings.stack(*callstack);
                    let all = callstack.len();
                    let kept = &mut self.sample_frames;
                    kept.clear();
                    kept.extend(callstack.filter(|l| scope.includes_address(l.ip)));
                    cx.sample(kept);
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
                    let idx = (*name == ExtraEvent::CacheMisses) as usize;
                    let track = match ts_track(&mut self.threads[slot], idx) {
                        Some(t) => t,
                        None => {
                            let g = self.threads[slot].track_group_id;
                            let t = self.sink.allocate_thread(g, name.name());
                            self.threads[slot].extra_tracks[idx] = Some(t);
                            t
                        }
                    };
                    let mut args = vec![
                        Arg::new("timestamp", ArgValue::Int(time)),
                        Arg::new("symbol", ArgValue::Str(strings.display(location.symbol))),
                        Arg::new("addr", ArgValue::Pointer(location.ip)),
                        Arg::new("count", ArgValue::Int(*count as i64)),
                    ];
                    if let Some(pid) = thread.pid {
                        args.push(Arg::new("pid", ArgValue::Int(pid as i64)));
                    }
                    if let Some(tid) = thread.tid {
                        args.push(Arg::new("tid", ArgValue::Int(tid as i64)));
                    }
                    self.sink
                        .duration_complete(track, name.name(), time, time, &args);
                }
                EventData::Ptwrite { location, data } => {
                    // Shown as an error-free marker; it does not change the stack.
                    let _ = (location, data);
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
    fn exec(&mut self, event: &Event, thread: Thread) {
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

    /// Ends a snapshot: every thread continues in a new segment that is never stitched.
    pub fn end_snapshot(&mut self, strings: &StringTable) {
        self.transaction.clear();
        for ts in self.threads.iter_mut() {
            let t = ts.last_time;
            flush_off_cpu_at_end(ts, &mut self.locs, strings, &self.config);
            new_segment(ts, t, Join::Never);
        }
    }

    /// Writes everything and returns the sink.
    pub fn finish(mut self, strings: &StringTable) -> S {
        while let Some(e) = self.transaction.pop_front() {
            self.ingest(&e, strings);
        }
        let threads = std::mem::take(&mut self.threads);
        for mut ts in threads {
            flush_off_cpu_at_end(&mut ts, &mut self.locs, strings, &self.config);
            close_segment(&mut ts);
            if self.config.stitch {
                add_process_entry(&mut ts, &mut self.locs, strings);
                extend_roots_backwards(&mut ts, &self.locs);
            }
            write_thread(
                &mut self.sink,
                &ts,
                &self.locs,
                strings,
                &self.config,
                &self.regions,
            );
        }
        self.sink
    }
}

fn ts_track<T: Copy>(ts: &mut ThreadState<T>, idx: usize) -> Option<T> {
    ts.extra_tracks[idx]
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Warn {
    Impossible,
    Traps,
}

fn new_segment<T>(ts: &mut ThreadState<T>, time: i64, join: Join) {
    close_segment(ts);
    let sentinel = ts.frames.len() as u32;
    ts.frames.push(Frame {
        loc: NONE,
        parent: NONE,
        flags: SENTINEL,
    });
    ts.sentinel = sentinel;
    ts.leaf = sentinel;
    ts.handlers.clear();
    ts.signals.clear();
    ts.fresh = true;
    ts.segments.push(Segment {
        first: ts.entries.len(),
        end: ts.entries.len() + 1,
        end_time: time,
        join,
        sentinel,
        opened_at: time,
    });
    ts.entries.push(Entry {
        time,
        leaf: sentinel,
        flow: Flow::Start,
        horizon: NO_HORIZON,
    });
}

fn close_segment<T>(ts: &mut ThreadState<T>) {
    let n = ts.entries.len();
    let last_time = ts.last_time;
    let sentinel = ts.sentinel;
    if let Some(seg) = ts.segments.last_mut() {
        seg.end = n;
        seg.end_time = seg.end_time.max(last_time);
        seg.sentinel = sentinel;
    }
}

/// A symbol's name without its version (`__libc_start_main@@GLIBC_2.34`).
fn unversioned(name: &str) -> &str {
    name.split('@').next().unwrap_or(name)
}

/// The name of `symbol` if perf named it, without its version.
fn plain_name(strings: &StringTable, symbol: Symbol) -> Option<&str> {
    match symbol {
        Symbol::FromPerf(n) => Some(unversioned(strings.get(n))),
        _ => None,
    }
}

/// A segment whose outermost frame is `__libc_start_main` lost its caller to a gap or
/// the start of a snapshot, but the ABI names it: the program's `_start`, put below it
/// as an inferred frame. Without it, a decode error across the loader's jump to the
/// program left the rest of the run rooted one level short, and carried the loader's
/// open frames under it.
fn add_process_entry<T>(ts: &mut ThreadState<T>, locs: &mut Locations, strings: &StringTable) {
    let Some(start) = strings.lookup("_start") else {
        return;
    };
    let mut start_loc = None;
    for f in 0..ts.frames.len() {
        let Frame { loc, parent, flags } = ts.frames[f];
        if flags & SENTINEL != 0 || parent == NONE {
            continue;
        }
        if ts.frames[parent as usize].flags & SENTINEL == 0 {
            continue;
        }
        let name = plain_name(strings, locs.list[loc as usize].symbol);
        if !name.is_some_and(|n| LIBC_START_MAIN.contains(&n)) {
            continue;
        }
        let l = *start_loc
            .get_or_insert_with(|| locs.intern(&Location::new(0, Symbol::FromPerf(start), 0)));
        let entry = ts.frames.len() as u32;
        ts.frames.push(Frame {
            loc: l,
            parent,
            flags: INFERRED_START,
        });
        ts.frames[f].parent = entry;
    }
}

/// Callers learnt after a gap also ran before it: when the stack after a gap holds
/// the outermost frames before it *above* further frames, those further frames are the
/// earlier segment's missing roots. Applied from the last gap back to the first, so a
/// root found late reaches every segment it lines up with.
fn extend_roots_backwards<T>(ts: &mut ThreadState<T>, locs: &Locations) {
    let mut before = Vec::new();
    let mut after = Vec::new();
    for k in (1..ts.segments.len()).rev() {
        let (a, b) = (&ts.segments[k - 1], &ts.segments[k]);
        if b.join != Join::Any || a.end <= a.first || b.end <= b.first {
            continue;
        }
        let a_sentinel = a.sentinel;
        frame_path(ts, ts.entries[a.end - 1].leaf, &mut before);
        frame_path(ts, ts.entries[b.first].leaf, &mut after);
        let Some(&a0) = before.first() else { continue };
        let sym =
            |ts: &ThreadState<T>, f: u32| locs.list[ts.frames[f as usize].loc as usize].symbol;
        if matches!(
            sym(ts, a0),
            Symbol::Untraced | Symbol::Syscall | Symbol::Returned | Symbol::Unknown
        ) {
            continue;
        }
        // The shallowest position j > 0 where the earlier stack lines up completely
        // (or for at least two frames) inside the later one.
        let found = (1..after.len()).find(|&j| {
            let run = before
                .iter()
                .zip(&after[j..])
                .take_while(|(x, y)| sym(ts, **x) == sym(ts, **y))
                .count();
            run >= before.len().min(2)
        });
        let Some(j) = found else { continue };
        // Fill the earlier segment's sentinel with after[j-1], then below it after[j-2]…
        let mut sentinel = a_sentinel;
        for &f in after[..j].iter().rev() {
            let Frame { loc, flags, .. } = ts.frames[f as usize];
            let new = ts.frames.len() as u32;
            ts.frames.push(Frame {
                loc: NONE,
                parent: NONE,
                flags: SENTINEL,
            });
            let fr = &mut ts.frames[sentinel as usize];
            fr.loc = loc;
            fr.parent = new;
            // A label root stays one: its real name may still be found across a gap.
            fr.flags = INFERRED_START | (flags & RETURN_LABEL);
            sentinel = new;
        }
        ts.segments[k - 1].sentinel = sentinel;
    }
}

/// Ingestion context for one event on one thread.
struct Cx<'a, T> {
    ts: &'a mut ThreadState<T>,
    locs: &'a mut Locations,
    strings: &'a StringTable,
    config: &'a SegmentsConfig,
    time: i64,
    /// The recording has context switches.
    switches: bool,
}

/// A thread's last times off CPU, with no sample after them to tell which frames
/// they interrupted: every frame ends when it first left the CPU. Its last switch-out
/// (at exit, or when recording stopped) shows no interval: its end is not known.
fn flush_off_cpu_at_end<T>(
    ts: &mut ThreadState<T>,
    locs: &mut Locations,
    strings: &StringTable,
    config: &SegmentsConfig,
) {
    let last_out = match ts.off_cpu.last() {
        Some(o) if o.back.is_none() => Some(o.out),
        _ => None,
    };
    if last_out.is_some() {
        ts.off_cpu.pop();
    }
    let time = ts.last_time;
    let mut cx = Cx {
        ts,
        locs,
        strings,
        config,
        time,
        switches: true,
    };
    cx.flush_off_cpu(0);
    if let Some(out) = last_out {
        if !cx.is_sentinel(cx.ts.leaf) {
            cx.time = cx.ts.entries.last().map_or(out, |e| out.max(e.time));
            cx.ts.leaf = cx.ts.sentinel;
            cx.record(Flow::Return);
        }
    }
}

impl<T> Cx<'_, T> {
    fn symbol(&self, frame: u32) -> Option<Symbol> {
        let f = self.ts.frames[frame as usize];
        if f.flags & SENTINEL != 0 {
            None
        } else {
            Some(self.locs.list[f.loc as usize].symbol)
        }
    }

    fn is_sentinel(&self, frame: u32) -> bool {
        self.ts.frames[frame as usize].flags & SENTINEL != 0
    }

    fn record(&mut self, flow: Flow) {
        let leaf = self.ts.leaf;
        if let Some(last) = self.ts.entries.last_mut() {
            // A stack change at the same time that undoes nothing needs no entry.
            if last.leaf == leaf && last.time == self.time && flow != Flow::Start {
                return;
            }
        }
        self.ts.entries.push(Entry {
            time: self.time,
            leaf,
            flow,
            horizon: NO_HORIZON,
        });
    }

    fn push(&mut self, loc: &Location, flags: u8) {
        self.push_as(loc, flags, Flow::Call)
    }

    fn push_as(&mut self, loc: &Location, flags: u8, flow: Flow) {
        let l = self.locs.intern(loc);
        self.ts.frames.push(Frame {
            loc: l,
            parent: self.ts.leaf,
            flags,
        });
        self.ts.leaf = (self.ts.frames.len() - 1) as u32;
        self.record(flow);
    }

    /// The sentinel becomes `loc`, a caller found above the known root; a new
    /// sentinel goes below it. Every earlier stack of the segment gains the caller.
    fn discover_root(&mut self, loc: &Location) -> u32 {
        let l = self.locs.intern(loc);
        let old = self.ts.sentinel;
        let new = self.ts.frames.len() as u32;
        self.ts.frames.push(Frame {
            loc: NONE,
            parent: NONE,
            flags: SENTINEL,
        });
        let f = &mut self.ts.frames[old as usize];
        f.loc = l;
        f.parent = new;
        f.flags = INFERRED_START;
        self.ts.sentinel = new;
        old
    }

    /// Inserts `loc` as the caller of kernel-entry frame `entry` (a kernel return went
    /// above the first kernel frame seen); it inherits the entry mark.
    fn insert_caller(&mut self, entry: u32, loc: &Location) -> u32 {
        let l = self.locs.intern(loc);
        let e = self.ts.frames[entry as usize];
        let new = self.ts.frames.len() as u32;
        self.ts.frames.push(Frame {
            loc: l,
            parent: e.parent,
            flags: INFERRED_START | KERNEL_ENTRY,
        });
        let f = &mut self.ts.frames[entry as usize];
        f.parent = new;
        f.flags &= !KERNEL_ENTRY;
        new
    }

    /// Nearest frame at or above the leaf running `symbol`, without crossing a kernel
    /// entry. The search is bounded: a stack that only grows (returns never seen)
    /// must not make every mismatch cost its whole depth.
    fn find(&self, symbol: Symbol) -> Option<u32> {
        let mut f = self.ts.leaf;
        for _ in 0..MAX_FIND_DEPTH {
            let fr = self.ts.frames[f as usize];
            if fr.flags & SENTINEL != 0 {
                return None;
            }
            if self.locs.list[fr.loc as usize].symbol == symbol {
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
    fn ensure_current(&mut self, loc: &Location) {
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

    fn replace_leaf(&mut self, loc: &Location) {
        let leaf = self.ts.leaf;
        let fr = self.ts.frames[leaf as usize];
        if fr.flags & SENTINEL != 0 {
            self.ts.leaf = self.discover_root(loc);
            return;
        }
        let l = self.locs.intern(loc);
        self.ts.frames.push(Frame {
            loc: l,
            parent: fr.parent,
            // A handler's tail call still returns into the signal trampoline.
            flags: fr.flags & (KERNEL_ENTRY | SIGNAL),
        });
        self.ts.leaf = (self.ts.frames.len() - 1) as u32;
        self.record(Flow::Jump);
    }

    /// Uses a branch's source only to learn the function running at a segment's
    /// start: elsewhere the source often lies in an adjacent symbol the code fell
    /// through into (`__write` into `__write_nocancel`), which is not a call.
    fn ensure_src(&mut self, src: &Location) {
        if src.ip != 0 && self.is_sentinel(self.ts.leaf) {
            self.ts.leaf = self.discover_root(src);
        }
    }

    fn call(&mut self, src: &Location, dst: &Location) {
        self.ensure_src(src);
        self.push(dst, 0);
    }

    fn ret(&mut self, src: &Location, dst: &Location) {
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
        if self.symbol(self.ts.leaf) == Some(dst.symbol) {
            return;
        }
        // A long return (exception, longjmp) lands in an ancestor; otherwise the
        // caller had tail-called away from the frame we knew.
        if let Some(f) = self.find(dst.symbol) {
            self.ts.leaf = f;
            self.record(Flow::Return);
        } else {
            self.replace_leaf(dst);
        }
    }

    /// A return landing on the very first byte of a named symbol (see [`RETURN_LABEL`]).
    /// perf names addresses without a symbol `[unknown @ …]` at offset 0: not a label.
    fn is_return_label(&self, dst: &Location) -> bool {
        dst.offset == 0
            && matches!(dst.symbol, Symbol::FromPerf(n) if !self.strings.get(n).starts_with("[unknown"))
    }

    fn jump(&mut self, src: &Location, dst: &Location) {
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
        // A jump into the middle of an ancestor is a non-local exit (`longjmp`, an
        // unwinder, Go's `gogo`) when it comes from code that makes them; from ordinary
        // code it goes on in the same function (a `.cold` part GCC split off, named on
        // its own, which an outer call of that function may be running too). A jump to
        // a function's start is a tail call.
        if dst.offset != 0 {
            let found = self
                .find(dst.symbol)
                .filter(|_| self.may_exit_non_locally(src, dst));
            if let Some(f) = found {
                self.ts.leaf = f;
                self.record(Flow::Return);
                return;
            }
            let leaf = self.ts.frames[self.ts.leaf as usize];
            if leaf.flags & SENTINEL == 0 && self.is_sentinel(leaf.parent) {
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

    fn synthetic(&mut self, symbol: Symbol) {
        self.push(&Location::locationless(symbol), 0);
    }

    fn leaf_is_synthetic(&self) -> bool {
        matches!(
            self.symbol(self.ts.leaf),
            Some(Symbol::Untraced | Symbol::Syscall | Symbol::Returned)
        )
    }

    /// Starts a new segment; `join` says whether it may continue this one. A split
    /// made while handling a branch starts at that branch, not at the next event.
    fn split(&mut self, join: Join) {
        let t = self.time;
        new_segment(self.ts, t, join);
        self.ts.fresh = false;
    }

    fn enter_kernel(&mut self, src: &Location, dst: &Location) {
        self.ensure_src(src);
        self.push(dst, KERNEL_ENTRY);
    }

    fn leave_kernel(&mut self, dst: &Location) {
        // Pop the kernel frames back to what was interrupted.
        loop {
            let leaf = self.ts.leaf;
            let fr = self.ts.frames[leaf as usize];
            if fr.flags & SENTINEL != 0 {
                break;
            }
            let loc = self.locs.list[fr.loc as usize];
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

    fn track_traps(&mut self, src: &Location, dst: &Location) -> Option<Warn> {
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
    fn enter_trap(&mut self, dst: &Location) -> Option<Warn> {
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

    fn is_entertrap(&self, dst: &Location) -> bool {
        self.config
            .ocaml_exception_info
            .as_ref()
            .is_some_and(|i| i.is_entertrap(dst.ip))
    }

    fn branch(
        &mut self,
        kind: Option<Kind>,
        change: Option<TraceStateChange>,
        src: &Location,
        dst: &Location,
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

    fn leave_kernel_to_untraced(&mut self) {
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

    fn named_gogo_return(&self, src: &Location) -> bool {
        matches!(src.symbol, Symbol::FromPerf(s) if self.strings.get(s) == "gogo")
    }

    /// Go's `gogo` switches goroutine stacks: the return from it lands in whatever
    /// goroutine runs next, often the one that just parked, but not always. So the
    /// resumed code starts a segment of its own, joined to the previous one only if its
    /// outermost frames (learnt from its later returns) line up with the parked stack;
    /// otherwise it is an unrelated stack, and no caller found on it is mistaken for a
    /// caller of the old one. The write pass also remembers the stacks of goroutines
    /// seen parking, and gives a resumed goroutine its own outer frames back when its
    /// callers single one out.
    fn gogo(&mut self, dst: &Location) {
        self.split(Join::Verified);
        self.ensure_current(dst);
    }

    /// The thread left the CPU or came back.
    fn switch(&mut self, out: bool, preempt: bool) {
        if !self.ts.sampled {
            return;
        }
        let time = self.time;
        let off = &mut self.ts.off_cpu;
        let full = off.len() >= MAX_OFF_CPU;
        let still_out = off.last().is_some_and(|o| o.back.is_none());
        if !out {
            // An in without an out (recording began while it was off CPU) ends nothing.
            if let Some(l) = off.last_mut().filter(|_| still_out) {
                l.back = Some(time);
            }
        } else if still_out {
            // Switched out twice (a lost switch-in): the first time counts.
        } else if let Some(l) = off.last_mut().filter(|_| full) {
            // So many short wake-ups without a sample: they become one interval.
            l.back = None;
        } else {
            off.push(OffCpu {
                out: time,
                back: None,
                preempt,
            });
        }
    }

    /// Shows the held times off CPU, ending every frame above the first `keep` of the
    /// current stack when the thread first left the CPU; each interval becomes a
    /// synthetic `[off-cpu]` frame on top of those that stayed.
    fn flush_off_cpu(&mut self, keep: usize) {
        if self.ts.off_cpu.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.ts.off_cpu);
        let mut base = self.ts.leaf;
        let mut depth = 0;
        let mut f = self.ts.leaf;
        while !self.is_sentinel(f) {
            depth += 1;
            f = self.ts.frames[f as usize].parent;
        }
        for _ in keep.min(depth)..depth {
            base = self.ts.frames[base as usize].parent;
        }
        let now = self.time;
        // Entries stay in time order whatever came between (perf's times can step back).
        let floor = self.ts.entries.last().map_or(i64::MIN, |e| e.time);
        for o in pending {
            self.time = o.out.max(floor);
            self.ts.leaf = base;
            self.record(Flow::Return);
            let symbol = if o.preempt {
                Symbol::Preempted
            } else {
                Symbol::OffCpu
            };
            self.push_as(&Location::locationless(symbol), 0, Flow::Sampled);
            self.time = o.back.unwrap_or(now).max(self.time);
            self.ts.leaf = base;
            self.record(Flow::Return);
        }
        self.time = now;
    }

    /// The sampling period, estimated from the gaps between this thread's samples (a
    /// low quantile: timers fire late under load, and a thread that blocks often has
    /// long gaps); `None` until enough were seen.
    fn period_estimate(&self) -> Option<i64> {
        let n = self.ts.gap_count.min(GAPS);
        if n < GAPS / 2 {
            return None;
        }
        let mut g = self.ts.gaps;
        let g = &mut g[..n];
        g.sort_unstable();
        Some(g[n / 4]).filter(|&p| p > 0)
    }

    fn sample(&mut self, callstack: &[Location]) {
        // Without context switches, a gap of over two periods since the last sample is
        // time off CPU (cpu-clock only fires while the thread runs): frames it left
        // ended about one period after their last sample, not at the next one.
        let mut ended_at = None;
        if let Some(last) = self.ts.last_sample {
            let gap = self.time - last;
            if !self.switches {
                ended_at = self
                    .period_estimate()
                    .filter(|&p| gap > 2 * p)
                    .map(|p| last + p);
            }
            self.ts.gaps[self.ts.gap_count % GAPS] = gap;
            self.ts.gap_count += 1;
        }
        self.ts.last_sample = Some(self.time);
        self.ts.sampled = true;
        // Current stack, root first (below the sentinel nothing is known).
        let mut cur = Vec::new();
        let mut f = self.ts.leaf;
        while !self.is_sentinel(f) {
            cur.push(f);
            f = self.ts.frames[f as usize].parent;
        }
        cur.reverse();
        let cur_len = cur.len();
        let mut keep = 0;
        for (i, (&fr, loc)) in cur.iter().zip(callstack).enumerate() {
            let known = self.locs.list[self.ts.frames[fr as usize].loc as usize];
            // The user-space leaf under a sample's `[kernel: …]` frame (the naming step's
            // one synthetic last frame, at address 0) is a leaf too: its pc is where it
            // entered the kernel, and another pc there is not another call of it.
            let under_kernel_cur = i + 2 == cur_len
                && self.locs.list[self.ts.frames[cur[i + 1] as usize].loc as usize].ip == 0;
            let under_kernel_new = i + 2 == callstack.len() && callstack[i + 1].ip == 0;
            let at_a_leaf = i + 1 == cur_len
                || i + 1 == callstack.len()
                || under_kernel_cur
                || under_kernel_new;
            // Callers are matched by call site; a leaf moves within its function.
            if known.symbol != loc.symbol || (!at_a_leaf && known.ip != loc.ip) {
                break;
            }
            if known.ip != loc.ip {
                // The same call, now seen from another pc (a leaf that has since
                // called something): later samples match it by this call site.
                let l = self.locs.intern(loc);
                self.ts.frames[fr as usize].loc = l;
            }
            keep += 1;
        }
        if !self.ts.off_cpu.is_empty() {
            // Frames both samples share ran before and after: the time off CPU was
            // spent inside them. The others ended when the thread first left the CPU.
            self.flush_off_cpu(keep);
        } else if keep < cur_len {
            self.ts.leaf = if keep == 0 {
                self.ts.sentinel
            } else {
                cur[keep - 1]
            };
            let now = self.time;
            if let Some(t) = ended_at {
                let last_entry = self.ts.entries.last().map_or(t, |e| e.time);
                self.time = t.max(last_entry).min(now);
            }
            self.record(Flow::Return);
            self.time = now;
        }
        for loc in &callstack[keep..] {
            self.push_as(loc, 0, Flow::Sampled);
        }
        // An empty stack (everything out of scope) has no leaf to count it against.
        if !callstack.is_empty() && !self.is_sentinel(self.ts.leaf) {
            *self.ts.leaf_samples.entry(self.ts.leaf).or_insert(0) += 1;
        }
    }
}

/// A frame open in the output, with what its end needs.
#[derive(Clone, Copy)]
struct Open {
    frame: u32,
    /// The frame whose name the slice was opened with: a frame continued across a gap
    /// under another name (a [`RETURN_LABEL`] root) ends under the name it began with.
    shown: u32,
    /// Open at a segment's end: if closed at the boundary, its end is a guess.
    at_gap: bool,
    /// Carried across a gap without the stacks lining up (the segment after the
    /// gap never returned into a known frame): plausible, not proven.
    unverified: bool,
    /// Leaf samples of frames this slice stood for before it continued under
    /// another frame id (across a gap): the slice's count includes them.
    samples: u32,
}

fn frame_path<T>(ts: &ThreadState<T>, leaf: u32, out: &mut Vec<u32>) {
    out.clear();
    let mut f = leaf;
    while ts.frames[f as usize].flags & SENTINEL == 0 {
        out.push(f);
        f = ts.frames[f as usize].parent;
    }
    out.reverse();
}

fn display<'a>(locs: &Locations, strings: &'a StringTable, frame: &Frame) -> &'a str {
    strings.display(locs.list[frame.loc as usize].symbol)
}

struct WriteCx<'a, S: TraceSink> {
    sink: &'a mut S,
    track: S::Thread,
    locs: &'a Locations,
    strings: &'a StringTable,
    config: &'a SegmentsConfig,
    /// False outside a `--filter` range: frames are tracked, nothing is written.
    enabled: bool,
}

impl<S: TraceSink> WriteCx<'_, S> {
    /// Applies the filter-range changes up to `upto`: leaving a range closes every
    /// open frame, entering one reopens the current stack as inferred starts.
    fn regions(
        &mut self,
        regions: &[(i64, bool)],
        next: &mut usize,
        upto: i64,
        open: &[Open],
        frames: &[Frame],
        last_written: &mut i64,
    ) {
        while *next < regions.len() && regions[*next].0 <= upto {
            let (t, on) = regions[*next];
            *next += 1;
            if on == self.enabled {
                continue;
            }
            let t = t.max(*last_written);
            if on {
                self.enabled = true;
                for o in open {
                    self.begin(&frames[o.shown as usize], t, true);
                }
            } else {
                for o in open.iter().rev() {
                    self.end(&frames[o.shown as usize], t, false, o.unverified, 0);
                }
                self.enabled = false;
            }
            *last_written = t;
        }
    }

    fn begin(&mut self, frame: &Frame, time: i64, inferred: bool) {
        if !self.enabled {
            return;
        }
        let loc = self.locs.list[frame.loc as usize];
        let name = self.strings.display(loc.symbol);
        let mut args: [Arg<'_>; 6] = [Arg::new("", ArgValue::Int(0)); 6];
        let mut n = 0;
        if loc.ip != 0 {
            args[n] = Arg::new("address", ArgValue::Pointer(loc.ip));
            n += 1;
        }
        let debug = self.config.debug_info.get(&loc.ip.wrapping_sub(loc.offset));
        if let Some(pos) = debug {
            args[n] = Arg::new("line", ArgValue::Int(pos.line));
            args[n + 1] = Arg::new("col", ArgValue::Int(pos.col));
            n += 2;
        }
        args[n] = Arg::new("symbol", ArgValue::Interned(name));
        n += 1;
        if let Some(f) = debug.and_then(|p| p.file.as_deref()) {
            args[n] = Arg::new("file", ArgValue::Interned(f));
            n += 1;
        }
        if inferred {
            args[n] = Arg::new("inferred_start_time", ArgValue::Interned("true"));
            n += 1;
        }
        if inferred && self.config.annotate_inferred_start_times {
            let annotated = format!("{name} [inferred start time]");
            self.sink
                .duration_begin(self.track, &annotated, time, &args[..n]);
        } else {
            self.sink.duration_begin(self.track, name, time, &args[..n]);
        }
    }

    /// Ends `frame`'s slice; `samples` (leaf samples it held) goes on the end event,
    /// which a viewer merges into the slice's args (its begin came before the count).
    fn end(&mut self, frame: &Frame, time: i64, inferred: bool, unverified: bool, samples: u32) {
        if !self.enabled {
            return;
        }
        let name = display(self.locs, self.strings, frame);
        let mut args = [Arg::new("", ArgValue::Int(0)); 3];
        let mut n = 0;
        if samples > 0 {
            args[n] = Arg::new("samples", ArgValue::Int(samples as i64));
            n += 1;
        }
        if inferred {
            args[n] = Arg::new("inferred_end_time", ArgValue::Interned("true"));
            n += 1;
        }
        if unverified {
            args[n] = Arg::new("crossed_gap", ArgValue::Interned("unverified"));
            n += 1;
        }
        self.sink.duration_end(self.track, name, time, &args[..n]);
    }
}

/// Spreads equal timestamps: the time up to the next distinct timestamp is shared
/// evenly by the calls and jumps at that timestamp, so nested frames stay visible.
fn smear(entries: &[Entry], end_time: i64, out: &mut Vec<i64>) {
    out.clear();
    let mut i = 0;
    while i < entries.len() {
        let t = entries[i].time;
        let mut j = i;
        while j < entries.len() && entries[j].time == t {
            j += 1;
        }
        let mut next = if j < entries.len() {
            entries[j].time
        } else {
            end_time.max(t)
        };
        let horizon = entries[j - 1].horizon;
        if horizon != NO_HORIZON {
            next = next.min(t + horizon as i64);
        }
        let count = entries[i..j]
            .iter()
            .filter(|e| matches!(e.flow, Flow::Call | Flow::Jump))
            .count() as i64;
        let total = next - t;
        let mut offset = 0i64;
        let mut used = 0i64;
        for e in &entries[i..j] {
            out.push(t + offset);
            if matches!(e.flow, Flow::Call | Flow::Jump) {
                used += 1;
                offset += (total - offset) / (count - used + 1);
            }
        }
        i = j;
    }
}

/// How the outermost frames after a gap line up with the frames open before it.
struct Stitch {
    /// Open frames (by position) that continue below the new segment's frames.
    base: usize,
    /// How many of the new segment's outermost frames continue open frames.
    matched: usize,
    /// No frame lined up: the base is carried over on trust.
    unverified: bool,
}

fn find_stitch<T>(
    ts: &ThreadState<T>,
    locs: &Locations,
    strings: &StringTable,
    open: &[Open],
    after: &[u32],
) -> Option<Stitch> {
    let first = *after.first()?;
    let sym = |f: u32| locs.list[ts.frames[f as usize].loc as usize].symbol;
    let b0 = sym(first);
    if matches!(
        b0,
        Symbol::Untraced | Symbol::Syscall | Symbol::Returned | Symbol::Unknown
    ) {
        return None;
    }
    // A root named after the label its return landed on is the open frame whose callee
    // it returned from: it lines up by what it called, in the same object.
    let label = ts.frames[first as usize].flags & RETURN_LABEL != 0;
    let dso = |f: u32| locs.list[ts.frames[f as usize].loc as usize].dso;
    let name = |f: u32| plain_name(strings, sym(f));
    let is_root = |f: u32| name(f).is_some_and(|n| THREAD_ROOTS.contains(&n));
    let mut best: Option<(usize, usize, usize)> = None; // (cost, run, i)
    for i in 0..open.len() {
        // A label root continues the open frame that called what returned to it. That
        // frame may have called others since: ld.so's `_start` is `_dl_start_user` once
        // `_dl_start` returned, then calls `_dl_init`; it lines up with the thread's root
        // in the same object.
        let head = sym(open[i].frame) == b0
            || (label
                && dso(open[i].frame) == dso(first)
                && after
                    .get(1)
                    .zip(open.get(i + 1))
                    .is_some_and(|(&a, o)| sym(o.frame) == sym(a)))
            || ((label || name(first) == Some(LOADER_START_LABEL))
                && i == 0
                && is_root(open[0].frame)
                && dso(open[0].frame) == dso(first));
        if !head {
            continue;
        }
        let mut run = 1;
        while i + run < open.len()
            && run < after.len()
            && sym(open[i + run].frame) == sym(after[run])
        {
            run += 1;
        }
        // What the gap must have done for this alignment: return from the open frames
        // above the matched ones, then call the new segment's frames above them. The
        // head is open more than once only in a recursion; counting the returns alone
        // there always chose its innermost occurrence, however many calls that meant
        // within a gap of a few dozen branches, and a recursion at a steady depth grew
        // a level that never returns at every gap (python3.11: 58 % suffix-correct).
        let cost = (open.len() - (i + run)) + (after.len() - run);
        if best.is_none_or(|(c, r, _)| cost < c || (cost == c && run > r)) {
            best = Some((cost, run, i));
        }
    }
    Some(match best {
        Some((_, run, i)) => Stitch {
            base: i,
            matched: run,
            unverified: false,
        },
        // Nothing lines up. If the new stack shares no function with the open one, its
        // frames were most likely called during the gap on top of what was running
        // (outer frames rarely return within a short loss). If it shares some but not
        // at its root, it knows other callers than the open stack: carrying the open
        // frames under it would stack two versions of the same calls.
        None => {
            // Nothing is below a thread's first function.
            if is_root(first) {
                return None;
            }
            // Called by `__libc_start_main` alone: the gap returned to it, then called.
            if name(first) == Some(LIBC_START_CALL_MAIN) {
                let caller = open
                    .iter()
                    .rposition(|o| name(o.frame).is_some_and(|n| LIBC_START_MAIN.contains(&n)));
                if let Some(i) = caller {
                    return Some(Stitch {
                        base: i + 1,
                        matched: 0,
                        unverified: false,
                    });
                }
            }
            let shared = after
                .iter()
                .any(|&f| open.iter().any(|o| sym(o.frame) == sym(f)));
            if shared {
                return None;
            }
            Stitch {
                base: open.len(),
                matched: 0,
                unverified: true,
            }
        }
    })
}

/// A goroutine's stack when it parked, root first, up to the function that parked.
struct Parked {
    frames: Vec<Open>,
    /// Known down to its root; otherwise only its upper part was ever seen.
    complete: bool,
}

/// How many parked goroutine stacks are remembered per thread.
const MAX_PARKED: usize = 64;
/// Revealed frames (the resumed `runtime.gopark` and its callers) needed before a
/// parked stack is believed to be the one resumed.
const MIN_PARKED_EVIDENCE: usize = 4;

/// Finds the one parked goroutine whose stack ends in exactly the frames a resumed
/// segment revealed (outermost first, down to its `runtime.gopark`), takes it out of
/// `parked`, and returns the frames below them. Several candidates, or too little
/// evidence, means no guess: another goroutine's frames must not be shown.
fn pick_parked<T>(
    ts: &ThreadState<T>,
    locs: &Locations,
    parked: &mut Vec<Parked>,
    path: &[u32],
) -> Option<Parked> {
    let sym = |f: u32| locs.list[ts.frames[f as usize].loc as usize].symbol;
    // How many of the revealed frames (outermost first, down to the function that
    // parked) a parked stack ends with.
    let evidence = |p: &Parked| -> Option<usize> {
        let p = &p.frames;
        let last = sym(p.last()?.frame);
        let n = path.iter().position(|&f| sym(f) == last)? + 1;
        let matched = n >= MIN_PARKED_EVIDENCE
            && p.len() > n
            && p[p.len() - n..]
                .iter()
                .zip(path)
                .all(|(o, &f)| sym(o.frame) == sym(f));
        matched.then_some(n)
    };
    let mut hits = parked
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, evidence(p)?)));
    let (i, n) = hits.next()?;
    if hits.next().is_some() {
        return None;
    }
    let mut stack = parked.remove(i);
    stack.frames.truncate(stack.frames.len() - n);
    Some(stack)
}

fn write_thread<S: TraceSink>(
    sink: &mut S,
    ts: &ThreadState<S::Thread>,
    locs: &Locations,
    strings: &StringTable,
    config: &SegmentsConfig,
    regions: &[(i64, bool)],
) {
    let mut cx = WriteCx {
        sink,
        track: ts.track,
        locs,
        strings,
        config,
        enabled: true,
    };
    let mut region = 0usize;
    let mut open: Vec<Open> = Vec::new();
    let mut is_open = vec![false; ts.frames.len()];
    // Taken as slices end, so a frame shown twice (reopened) counts its samples once.
    let mut samples = ts.leaf_samples.clone();
    let take = |samples: &mut FxHashMap<u32, u32>, o: &Open| {
        o.samples + samples.remove(&o.frame).unwrap_or(0)
    };
    let mut path = Vec::new();
    let mut times = Vec::new();
    let mut errors = ts.errors.iter().peekable();
    let mut power = ts.power.iter().peekable();
    let mut last_written = i64::MIN;
    let mut prev_end = 0i64;
    // Stacks of goroutines seen parking (root first, up to their `runtime.gopark`),
    // most recent last: a resumed goroutine whose revealed callers single one out
    // continues on its own stack rather than on the one that just parked.
    let mut parked: Vec<Parked> = Vec::new();
    let counter =
        |cx: &mut WriteCx<'_, S>,
         upto: i64,
         power: &mut std::iter::Peekable<std::slice::Iter<'_, (i64, u32)>>| {
            while let Some(&&(t, f)) = power.peek() {
                if t > upto {
                    break;
                }
                power.next();
                if !cx.enabled {
                    continue;
                }
                cx.sink.counter(
                    cx.track,
                    "CPU",
                    t,
                    &[Arg::new("freq (MHz)", ArgValue::Int(f as i64))],
                );
            }
        };
    for (si, seg) in ts.segments.iter().enumerate() {
        let entries = &ts.entries[seg.first..seg.end];
        if entries.is_empty() {
            continue;
        }
        if config.exact_times {
            times.clear();
            times.extend(entries.iter().map(|e| e.time));
        } else {
            smear(entries, seg.end_time, &mut times);
        }
        let start = times[0].max(last_written);
        // Segment boundary: stitch onto what is open, or close it.
        frame_path(ts, entries[0].leaf, &mut path);
        // A resumed goroutine continues exactly below the `runtime.mcall` it parked in.
        let resumes_here = |stack: &[Open], st: &Stitch| -> bool {
            stack.get(st.base + st.matched).is_some_and(|o| {
                let sym = locs.list[ts.frames[o.frame as usize].loc as usize].symbol;
                matches!(sym, Symbol::FromPerf(n) if GOGO_DESTINATIONS.contains(&strings.get(n)))
            })
        };
        let mcall_at = |stack: &[Open]| {
            stack.iter().position(|o| {
                let sym = locs.list[ts.frames[o.frame as usize].loc as usize].symbol;
                matches!(sym, Symbol::FromPerf(n) if GOGO_DESTINATIONS.contains(&strings.get(n)))
            })
        };
        let mut resumed: Option<Parked> = None;
        let mut stitch = if si > 0 && seg.join != Join::Never && config.stitch {
            let candidates = match seg.join {
                Join::Landed { skip } => &open[..open.len().saturating_sub(skip as usize)],
                _ => &open[..],
            };
            let found = find_stitch(ts, locs, strings, candidates, &path).filter(|st| {
                // After a goroutine switch, a lone `runtime.gopark` proves nothing:
                // every goroutine resumes there. A caller must line up too.
                seg.join == Join::Any
                    || (matches!(seg.join, Join::Unwound | Join::Landed { .. }) && !st.unverified)
                    || (seg.join == Join::Verified
                        && !st.unverified
                        && resumes_here(&open, st)
                        && st.matched >= 2)
            });
            let at_a_root = path.first().is_some_and(|&f| {
                let sym = locs.list[ts.frames[f as usize].loc as usize].symbol;
                matches!(sym, Symbol::FromPerf(n) if THREAD_ROOTS.contains(&strings.get(n)))
            });
            if seg.join == Join::Verified && config.stitch {
                // Only what was known of the parked stack: frames carried under it on
                // trust are left out, or a wrong guess would be repeated as a fact.
                let just_parked = mcall_at(&open).map(|m| {
                    let known = open[..m]
                        .iter()
                        .rposition(|o| o.unverified)
                        .map_or(0, |u| u + 1);
                    Parked {
                        frames: open[known..m].to_vec(),
                        complete: known == 0,
                    }
                });
                if found.is_none() && !at_a_root {
                    resumed = pick_parked(ts, locs, &mut parked, &path);
                }
                if let Some(p) = just_parked.filter(|_| found.is_none()) {
                    if parked.len() == MAX_PARKED {
                        parked.remove(0);
                    }
                    parked.push(p);
                }
            }
            if resumed.as_ref().is_some_and(|p| p.complete) {
                // Everything open belongs to the goroutine that parked.
                Some(Stitch {
                    base: 0,
                    matched: 0,
                    unverified: false,
                })
            } else if found.is_none() && seg.join == Join::Verified && !at_a_root {
                // Nothing known lines up. If the resumed frames are too few to tell, it may
                // be the same goroutine: keep what lay below its parked `runtime.gopark`
                // (marked unverified, as magic-trace keeps its whole old stack). If its
                // callers contradict the parked stack, it is another goroutine: keep only
                // the outermost frame, which goroutines share (`runtime.goexit` in Go).
                let refuted = path.len() >= 2;
                mcall_at(&open).map(|mcall| Stitch {
                    base: if refuted {
                        mcall.saturating_sub(1).min(1)
                    } else {
                        mcall.saturating_sub(1)
                    },
                    matched: 0,
                    unverified: true,
                })
            } else if found.is_none() && seg.join == Join::Unwound && path.len() == 1 {
                // Nothing known lines up and the target revealed no caller: a tail jump
                // after all (into a `.cold` part, say), replacing the frame that jumped.
                Some(Stitch {
                    base: open.len().saturating_sub(1),
                    matched: 0,
                    unverified: false,
                })
            } else {
                found
            }
        } else {
            None
        };
        if let Some(st) = stitch.as_mut().filter(|st| st.unverified) {
            // Nothing lines up here; a later segment may show how much of the old
            // stack survived the gap: keep only that much.
            let mut later_path = Vec::new();
            for later in ts.segments[si + 1..].iter().take(MAX_LOOKAHEAD) {
                if later.join != Join::Any || later.end <= later.first {
                    break;
                }
                frame_path(ts, ts.entries[later.first].leaf, &mut later_path);
                if let Some(found) = find_stitch(ts, locs, strings, &open, &later_path) {
                    if !found.unverified {
                        st.base = found.base + 1;
                        break;
                    }
                }
            }
        }
        let keep = match &stitch {
            Some(s) => s.base + s.matched,
            None => 0,
        };
        while open.len() > keep {
            let o = open.pop().unwrap_or(Open {
                frame: 0,
                shown: 0,
                at_gap: false,
                unverified: false,
                samples: 0,
            });
            is_open[o.frame as usize] = false;
            let t = prev_end.max(last_written);
            cx.end(
                &ts.frames[o.shown as usize],
                t,
                o.at_gap,
                o.unverified,
                take(&mut samples, &o),
            );
            last_written = t;
        }
        if let Some(stack) = resumed.take().map(|p| p.frames) {
            // The resumed goroutine's own outer frames reopen below the frames its
            // segment revealed (their start is inferred). Only what is carried under
            // them is unverified: they are remembered as known when it parks again.
            if let Some(s) = stitch.as_mut().filter(|s| s.unverified) {
                for o in open.iter_mut() {
                    o.unverified = true;
                }
                s.unverified = false;
            }
            let t = start.max(last_written);
            for o in stack {
                cx.begin(&ts.frames[o.shown as usize], t, true);
                is_open[o.frame as usize] = true;
                open.push(Open {
                    frame: o.frame,
                    shown: o.shown,
                    at_gap: false,
                    unverified: false,
                    samples: 0,
                });
            }
            last_written = t;
            if let Some(s) = stitch.as_mut() {
                s.base = open.len();
            }
        }
        if let Some(s) = &stitch {
            if s.unverified {
                for o in open.iter_mut() {
                    o.unverified = true;
                }
            }
            // The matched frames continue: same slices, now under this segment's ids.
            for k in 0..s.matched {
                let o = &mut open[s.base + k];
                is_open[o.frame as usize] = false;
                o.samples += samples.remove(&o.frame).unwrap_or(0);
                o.frame = path[k];
                is_open[path[k] as usize] = true;
            }
        }
        counter(&mut cx, start, &mut power);
        while let Some(&&(t, ref name)) = errors.peek() {
            if t > start && si + 1 < ts.segments.len() {
                break;
            }
            errors.next();
            let t = t.max(last_written);
            if cx.enabled {
                cx.sink.duration_instant(cx.track, name, t, &[]);
            }
            last_written = t;
            if t >= start {
                break;
            }
        }
        let base = match &stitch {
            Some(s) => s.base,
            None => 0,
        };
        for (k, e) in entries.iter().enumerate() {
            cx.regions(
                regions,
                &mut region,
                times[k],
                &open,
                &ts.frames,
                &mut last_written,
            );
            let t_before = last_written;
            let t = times[k].max(last_written);
            counter(&mut cx, t, &mut power);
            // Walk up from the new leaf to the first frame already open.
            path.clear();
            let mut f = e.leaf;
            while ts.frames[f as usize].flags & SENTINEL == 0 && !is_open[f as usize] {
                path.push(f);
                f = ts.frames[f as usize].parent;
            }
            let keep = if ts.frames[f as usize].flags & SENTINEL != 0 {
                base
            } else {
                open.iter()
                    .rposition(|o| o.frame == f)
                    .map_or(base, |p| p + 1)
            };
            while open.len() > keep {
                if let Some(o) = open.pop() {
                    is_open[o.frame as usize] = false;
                    cx.end(
                        &ts.frames[o.shown as usize],
                        t,
                        false,
                        o.unverified,
                        take(&mut samples, &o),
                    );
                }
            }
            // A label root continued across a gap under its caller's name: the return
            // onto the label is where the frame's code becomes the label's, so its slice
            // goes on under that name from here (as it would without the gap).
            let symbol = |f: u32| locs.list[ts.frames[f as usize].loc as usize].symbol;
            if let Some(o) = open.last_mut().filter(|o| {
                o.frame == e.leaf
                    && symbol(o.shown) != symbol(o.frame)
                    && e.flow == Flow::Return
                    && ts.frames[o.frame as usize].flags & RETURN_LABEL != 0
            }) {
                // The label's own samples stay with the slice that goes on under it.
                cx.end(
                    &ts.frames[o.shown as usize],
                    t,
                    false,
                    o.unverified,
                    o.samples,
                );
                cx.begin(&ts.frames[o.frame as usize], t, false);
                o.shown = o.frame;
                o.samples = 0;
            }
            // After a decode error the frames the new segment knew from its start were,
            // as far as anyone can tell, running when the gap began: show them from the
            // error on (as magic-trace does), except the innermost, which is often the
            // one the segment returns from at once.
            let back_to = (k == 0 && si > 0 && seg.join == Join::Any)
                .then(|| seg.opened_at.max(t_before))
                .filter(|&b| b < t);
            for (depth, &f) in path.iter().rev().enumerate() {
                let fr = ts.frames[f as usize];
                let inferred = e.flow == Flow::Start || fr.flags & INFERRED_START != 0;
                let at = match back_to {
                    Some(b) if depth + 1 < path.len() => b,
                    _ => t,
                };
                cx.begin(&fr, at, inferred);
                open.push(Open {
                    frame: f,
                    shown: f,
                    at_gap: false,
                    unverified: false,
                    samples: 0,
                });
                is_open[f as usize] = true;
            }
            last_written = t;
        }
        // Frames still open at a segment's end may have ended anywhere in the gap.
        for o in open.iter_mut() {
            o.at_gap = true;
        }
        prev_end = seg.end_time.max(last_written);
    }
    for (t, name) in errors {
        let t = (*t).max(last_written);
        if cx.enabled {
            cx.sink.duration_instant(cx.track, name, t, &[]);
        }
        last_written = t;
    }
    counter(&mut cx, i64::MAX, &mut power);
    let t = prev_end.max(last_written);
    while let Some(o) = open.pop() {
        cx.end(
            &ts.frames[o.shown as usize],
            t,
            false,
            o.unverified,
            take(&mut samples, &o),
        );
    }
}

impl<S: TraceSink> crate::StackWriter<S> for SegmentsWriter<S> {
    fn write_event(&mut self, event: &Event, strings: &StringTable) {
        SegmentsWriter::write_event(self, event, strings)
    }
    fn write_event_filtered(&mut self, event: &Event, should_write: bool, strings: &StringTable) {
        SegmentsWriter::write_event_filtered(self, event, should_write, strings)
    }
    fn sink_mut(&mut self) -> &mut S {
        SegmentsWriter::sink_mut(self)
    }
    fn end_snapshot(&mut self, strings: &StringTable) {
        SegmentsWriter::end_snapshot(self, strings)
    }
    fn finish(self, strings: &StringTable) -> S {
        SegmentsWriter::finish(self, strings)
    }
}
