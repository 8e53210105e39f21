//! The writer's memory of a thread: frames (leaf→root lists ending in a sentinel),
//! the stack changes that point into them, and the segments those fall into.

use super::signals;
use super::store::Store;
use crate::tracks::ExtraTracks;
use ptscope_event::{Location, LocationHandle, StringTable, Symbol, Thread};
use rustc_hash::FxHashMap;

pub(super) const SENTINEL: u8 = 1;
pub(super) const INFERRED_START: u8 = 2;
pub(super) const KERNEL_ENTRY: u8 = 4;
/// A root learnt from a return landing on the first byte of its symbol. A return address
/// follows a call, so that call ended the code *before* the symbol: the symbol is a label
/// laid out after the real caller (ld.so's `_start` ends with `call _dl_start`, which
/// returns to `_dl_start_user`), and the frame's own name is unknown.
pub(super) const RETURN_LABEL: u8 = 8;
/// A signal handler's frame (and the trampoline that replaces it when it returns): its
/// parent is the frame the signal interrupted (see [`signals`]).
pub(super) const SIGNAL: u8 = 16;
pub(super) const NONE: u32 = u32::MAX;

/// One stack frame: 16 bytes, so millions of calls stay cheap.
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    pub(super) loc: u32,
    pub(super) parent: u32,
    /// Where the call that made this frame was (the call's source, a location id): its
    /// return goes back just after it, so a return elsewhere leaves more than this frame
    /// (see [`unwind`](super::unwind)). [`NONE`] if unknown (a frame learnt from a
    /// return, a signal handler, a sampled frame).
    pub(super) site: u32,
    pub(super) flags: u8,
    /// How many samples had this frame as their leaf, up to `u16::MAX` (more are
    /// counted in [`ThreadState::more_samples`]). It fills what would be padding: a
    /// map by frame cost a sampled trace as much again as its frames.
    pub(super) samples: u16,
}

const _: () = assert!(std::mem::size_of::<Frame>() == 16);

impl Frame {
    /// A frame running location `loc` on `parent`, its call site unknown, no samples yet.
    pub(super) fn new(loc: u32, parent: u32, flags: u8) -> Frame {
        Frame {
            loc,
            parent,
            site: NONE,
            flags,
            samples: 0,
        }
    }

    /// A segment's sentinel: nothing is known below it.
    pub(super) fn sentinel() -> Frame {
        Frame::new(NONE, NONE, SENTINEL)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Flow {
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
pub(super) struct Entry {
    pub(super) time: i64,
    pub(super) leaf: u32,
    pub(super) flow: Flow,
    /// ns from `time` to the next event of any kind (not just the next stack change),
    /// which bounds how far this timestamp's calls are spread; `NO_HORIZON` if unknown.
    pub(super) horizon: u16,
}

/// `Entry::horizon` when no later event was seen (or it was too far to store).
pub(super) const NO_HORIZON: u16 = u16::MAX;

/// How a segment may continue the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Join {
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
    /// saw (see [`unwind`](super::unwind)): joined where its outermost frames line up
    /// with open ones, never a tail jump. The innermost `skip` frames open before it
    /// (the unwinder and the frames its caller rules out) are not candidates.
    Landed { skip: u32 },
}

#[derive(Clone, Debug)]
pub(super) struct Segment {
    /// Index of the segment's first entry (its `Flow::Start` entry).
    pub(super) first: usize,
    /// One past its last entry.
    pub(super) end: usize,
    /// Time of the segment's last event.
    pub(super) end_time: i64,
    /// May this segment be joined to the previous one, and how?
    pub(super) join: Join,
    /// The sentinel below the segment's outermost known frame (set when it closes).
    pub(super) sentinel: u32,
    /// When the segment was opened: after a decode error, the error's time.
    pub(super) opened_at: i64,
    /// Stack changes recorded together with the next one in a single entry (a sample's
    /// return and the frames it enters): they still count as changes the segment saw.
    pub(super) merged: usize,
}

pub(super) struct ThreadState<T> {
    pub(super) track: T,
    /// The thread it is.
    pub(super) thread: Thread,
    /// Tracks of extra events' samples.
    pub(super) extra_tracks: ExtraTracks<T>,
    /// Every frame the thread's stacks went through (see [`Store`]).
    pub(super) frames: Store<Frame>,
    /// Every stack change (see [`Store`]).
    pub(super) entries: Store<Entry>,
    pub(super) segments: Vec<Segment>,
    /// The current leaf (a sentinel when nothing is known).
    pub(super) leaf: u32,
    pub(super) sentinel: u32,
    pub(super) last_time: i64,
    /// OCaml: frames that pushed a trap, innermost last.
    pub(super) handlers: Vec<u32>,
    /// Signal deliveries and the last stop of tracing.
    pub(super) signals: signals::Signals,
    pub(super) last_known_ip: Option<u64>,
    /// The current segment has seen no event yet: its start moves to the first one,
    /// so nothing it learns is shown during the gap before it.
    pub(super) fresh: bool,
    /// Decode errors: (time, message), emitted as instants.
    pub(super) errors: Vec<(i64, String)>,
    /// CPU frequency changes: (time, MHz).
    pub(super) power: Vec<(i64, u32)>,
    /// ptwrite payloads inside a `--filter` range: (time, where, payload).
    pub(super) ptwrites: Vec<(i64, Location, u64)>,
    /// Times off CPU since the last sample, oldest first: which frames they interrupt
    /// is known only at the next sample (those it shares with the last one).
    pub(super) off_cpu: Vec<OffCpu>,
    /// Time of the last stack sample.
    pub(super) last_sample: Option<i64>,
    /// The stack comes from samples (not branches): only then do switches matter.
    pub(super) sampled: bool,
    /// The current stack is the one the thread is leaving the CPU in (a `sched_switch`
    /// stack was the thread's last event): its next switch-out is
    /// [`OffCpu::stacked`].
    pub(super) leaving: bool,
    /// The last gaps between consecutive samples (a ring), to estimate the sampling
    /// period when the recording has no context switches.
    pub(super) gaps: [i64; GAPS],
    /// How many gaps were seen (the ring holds the last [`GAPS`]).
    pub(super) gap_count: usize,
    /// Frame -> leaf samples beyond the `u16::MAX` its [`Frame::samples`] holds (a
    /// slice carries its count, so per-function self counts can be read from the trace).
    pub(super) more_samples: FxHashMap<u32, u32>,
}

/// One interval a thread spent off CPU.
#[derive(Clone, Copy, Debug)]
pub(super) struct OffCpu {
    /// When it was switched out.
    pub(super) out: i64,
    /// When it was switched back in; `None` while it is still out.
    pub(super) back: Option<i64>,
    /// Preempted (still runnable), not blocked.
    pub(super) preempt: bool,
    /// The stack the thread left in is known (a `sched_switch` stack came just before
    /// the switch-out): the interval nests in every frame open then.
    pub(super) stacked: bool,
}

/// How many sample gaps the period estimate looks at.
pub(super) const GAPS: usize = 16;
/// Off-CPU intervals held per thread between two samples; more are merged into the last.
pub(super) const MAX_OFF_CPU: usize = 4096;

/// Frames refer to the locations the events carry by their handles in the pipeline's
/// [`StringTable`] (`LocationHandle.0`): nothing is interned again here. The few
/// locations no event carries, which the writer makes itself (one per synthetic frame,
/// `[untraced]`, `[syscall]`, `[returned]`, off-CPU, and an inferred `_start`), are kept
/// apart, with ids from [`OWN`] up.
#[derive(Default)]
pub(super) struct Locations {
    own: Vec<Location>,
}

/// The first id of a location the writer made itself (table handles stay below it).
pub(super) const OWN: u32 = 1 << 31;

impl Locations {
    /// The id of `loc`, one the writer made itself; there are only a handful of them, so
    /// a search finds an earlier copy.
    pub(super) fn own(&mut self, loc: Location) -> Loc {
        let i = match self.own.iter().position(|o| *o == loc) {
            Some(i) => i,
            None => {
                self.own.push(loc);
                self.own.len() - 1
            }
        };
        Loc {
            id: OWN + i as u32,
            at: loc,
        }
    }

    /// The location behind a frame's id.
    #[inline]
    pub(super) fn get<'a>(&'a self, strings: &'a StringTable, id: u32) -> &'a Location {
        match id.checked_sub(OWN) {
            Some(i) => &self.own[i as usize],
            None => strings.location(LocationHandle(id)),
        }
    }
}

/// A location as the writer takes it in: the id a frame stores and the location itself.
#[derive(Clone, Copy, Debug)]
pub(super) struct Loc {
    pub(super) id: u32,
    pub(super) at: Location,
}

impl Loc {
    /// An event's location, by its handle in `strings`.
    #[inline]
    pub(super) fn of(h: LocationHandle, strings: &StringTable) -> Loc {
        Loc {
            id: h.0,
            at: *strings.location(h),
        }
    }
}

impl std::ops::Deref for Loc {
    type Target = Location;
    #[inline]
    fn deref(&self) -> &Location {
        &self.at
    }
}

/// Where the marker frame's location (`[unknown]`, at an address no code has) says it
/// is the [`UNKNOWN_FRAMES_MARKER`](crate::UNKNOWN_FRAMES_MARKER), not a frame of the trace.
pub(super) const MARKER_IP: u64 = u64::MAX;

/// Is `loc` the marker frame's (see [`add_marker`])?
pub(super) fn is_marker(loc: &Location) -> bool {
    loc.ip == MARKER_IP && loc.symbol == Symbol::Unknown
}

/// Adds the frame that stands for frames a decode error hid (see
/// [`WriterConfig::mark_unknown_frames`](crate::WriterConfig::mark_unknown_frames)); it
/// has no parent: the write pass puts it on the open stack itself.
pub(super) fn add_marker<T>(ts: &mut ThreadState<T>, locs: &mut Locations) -> u32 {
    let loc = locs.own(Location::new(MARKER_IP, Symbol::Unknown, 0)).id;
    ts.frames.push(Frame::new(loc, NONE, 0));
    ts.frames.len() as u32 - 1
}

pub(super) fn new_segment<T>(ts: &mut ThreadState<T>, time: i64, join: Join) {
    close_segment(ts);
    let sentinel = ts.frames.len() as u32;
    ts.frames.push(Frame::sentinel());
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
        merged: 0,
    });
    ts.entries.push(Entry {
        time,
        leaf: sentinel,
        flow: Flow::Start,
        horizon: NO_HORIZON,
    });
}

pub(super) fn close_segment<T>(ts: &mut ThreadState<T>) {
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
pub(super) fn unversioned(name: &str) -> &str {
    name.split('@').next().unwrap_or(name)
}

/// The name of `symbol` if perf named it, without its version.
pub(super) fn plain_name(strings: &StringTable, symbol: Symbol) -> Option<&str> {
    match symbol {
        Symbol::FromPerf(n) => Some(unversioned(strings.get(n))),
        _ => None,
    }
}

pub(super) fn frame_path<T>(ts: &ThreadState<T>, leaf: u32, out: &mut Vec<u32>) {
    out.clear();
    let mut f = leaf;
    while ts.frames[f as usize].flags & SENTINEL == 0 {
        out.push(f);
        f = ts.frames[f as usize].parent;
    }
    out.reverse();
}
