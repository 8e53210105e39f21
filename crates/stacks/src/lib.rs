//! Call-stack reconstruction: from a stream of branch events to well-nested slices.
//!
//! - [`legacy`] reproduces magic-trace's streaming writer exactly; it is the reference
//!   the segment-based writer is measured against.
//! - [`transcript`] renders what a writer emits in magic-trace's test-transcript form.
//! - [`segments`] rebuilds whole segments in memory, stitches them across decode
//!   errors and writes well-nested, time-ordered slices (the default).
//! - [`exact`] writes the stacks of exact steps (the emulate backend's) in one pass per
//!   thread, with nothing to stitch or infer.
//! - [`ordered`] restores per-thread time order for writers that emit slices late.
//! - [`sink`] is the interface every output (FXT, transcript) implements.
//!
//! Both writers implement [`StackWriter`] and take a [`WriterConfig`]. A call and its
//! return on one thread, through the segments writer, as a magic-trace transcript:
//!
//! ```
//! use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
//! use ptscope_stacks::segments::SegmentsWriter;
//! use ptscope_stacks::transcript::TranscriptSink;
//! use ptscope_stacks::{StackWriter, WriterConfig};
//!
//! let mut strings = StringTable::new();
//! let main = Symbol::FromPerf(strings.intern("main"));
//! let work = Symbol::FromPerf(strings.intern("work"));
//! // A branch's ends are locations interned in the same table as the names.
//! let mut branch = |time, kind, src, dst| Event::Ok {
//!     thread: Thread { pid: Some(42), tid: Some(42) },
//!     time,
//!     in_transaction: false,
//!     data: EventData::Trace {
//!         change: None,
//!         kind: Some(kind),
//!         src: strings.intern_location(Location::new(0x1000, src, 0x10)),
//!         dst: strings.intern_location(Location::new(0x2000, dst, 0)),
//!     },
//! };
//! let events = [
//!     branch(5_000, Kind::Call, main, work),   // main calls work at 5 us...
//!     branch(7_500, Kind::Return, work, main), // ...which returns 2.5 us later
//! ];
//! // Trace time 0 is perf time 5 us.
//! let config = WriterConfig { earliest_time: 5_000, ..WriterConfig::default() };
//! let mut writer = SegmentsWriter::new(TranscriptSink::default(), config);
//! for event in &events {
//!     writer.write_event(event, &strings);
//! }
//! writer.end_of_input();
//! let transcript = writer.finish(&strings).render();
//! print!("{transcript}");
//! // `main` was running before the call: its start is the trace's.
//! assert_eq!(
//!     transcript,
//!     "INPUT TRACE STREAM ENDED, any lines printed below this were deferred\n\
//!      ->      0ns BEGIN main\n\
//!      ->      0ns BEGIN work\n\
//!      ->    2.5us END   work\n\
//!      ->    2.5us END   main\n"
//! );
//! ```

pub mod exact;
pub mod legacy;
pub mod ordered;
pub mod segments;
pub mod sink;
mod tracks;
mod transaction;
pub mod transcript;

pub use sink::{Arg, ArgValue, Name, TraceSink, ADDRESS_ARG, SYMBOL_ARG};

use ptscope_event::{
    Event, Hit, OcamlExceptionInfo, ProcessStart, SourcePosition, StringTable, TraceScope,
};
use rustc_hash::FxHashMap;

/// Options of both stack writers.
///
/// The fields after `hits` are the segments writer's own: the legacy writer, which
/// reproduces magic-trace, ignores them.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Which privilege levels were traced.
    pub scope: TraceScope,
    /// Append ` [inferred start time]` to frames whose start was inferred (the test
    /// transcripts use it).
    pub annotate_inferred_start_times: bool,
    /// OCaml trap addresses; `Some` switches exception tracking to the exact,
    /// address-based mode.
    pub ocaml_exception_info: Option<OcamlExceptionInfo>,
    /// perf time (ns) that becomes trace time 0; usually the first event's time.
    pub earliest_time: u64,
    /// Display names for processes, by pid (e.g. the command line).
    pub process_names: FxHashMap<u32, String>,
    /// Source positions of function starts, by function start address.
    pub debug_info: FxHashMap<u64, SourcePosition>,
    /// Breakpoint hits to show on their own track.
    pub hits: Vec<Hit>,
    /// Segments writer: join segments across decode errors when the stacks line up
    /// (on by default).
    pub stitch: bool,
    /// Segments writer: every event has its own exact time (the emulate backend's
    /// instruction clock): stack changes sharing a time took no time between them (a
    /// call and the signal that stopped the code before the callee's first
    /// instruction), so that time is not spread over them as it is for Intel PT's
    /// coarse packet times.
    pub exact_times: bool,
    /// Segments writer: where frames carried across a decode error are not proven by
    /// anything later in the trace (they may have returned in the gap, or others may have
    /// been called there), show one [`UNKNOWN_FRAMES_MARKER`] frame in their place instead
    /// of guessing that they survived. On by default (issue 25: where the trace cannot
    /// decide, a marker, never an invented function); off, the writer guesses, which is
    /// right more often than not but wrong where it is wrong.
    pub mark_unknown_frames: bool,
}

/// The frame the segments writer shows, with [`WriterConfig::mark_unknown_frames`], for
/// frames a decode error hid: any number of frames, none included, stands there.
pub const UNKNOWN_FRAMES_MARKER: &str = "[unknown frames lost in decode error]";

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            scope: TraceScope::default(),
            annotate_inferred_start_times: false,
            ocaml_exception_info: None,
            earliest_time: 0,
            process_names: FxHashMap::default(),
            debug_info: FxHashMap::default(),
            hits: Vec::new(),
            stitch: true,
            exact_times: false,
            mark_unknown_frames: true,
        }
    }
}

impl WriterConfig {
    /// The perf time that becomes trace time 0: `earliest_time`, or an earlier hit's.
    fn base_time(&self) -> u64 {
        self.hits
            .iter()
            .map(|h| h.time)
            .fold(self.earliest_time, u64::min)
    }
}

/// A stack reconstruction strategy: events in, slices out to a [`TraceSink`].
///
/// Implemented by every writer so tools (the CLI, the fidelity harness) can swap them;
/// it is the writers' only interface besides their constructors.
pub trait StackWriter<S: TraceSink> {
    /// Feeds one event (all of it is written: no filter range); `strings` resolves the
    /// event's names.
    fn write_event(&mut self, event: &Event, strings: &StringTable);
    /// Feeds one event that is outside a `--filter` range when `should_write` is false.
    fn write_event_filtered(&mut self, event: &Event, should_write: bool, strings: &StringTable);
    /// Tells the sink the input has ended: what the writer emits from now on was
    /// deferred (see [`TraceSink::end_of_input`]).
    fn end_of_input(&mut self);
    /// Ends a snapshot: the next events come from an unrelated later recording.
    fn end_snapshot(&mut self, strings: &StringTable);
    /// Writes whatever is still pending and returns the sink.
    fn finish(self, strings: &StringTable) -> S;
    /// How process `pid` started its program (locations in the table `finish` gets):
    /// a writer that infers the program's entry below `__libc_start_main` (its caller
    /// lost to a decode error) names that frame as the trace would have, and one that
    /// sees `main` with its callers lost knows what called it. Call it before
    /// [`StackWriter::finish`]; writers that infer no such frames ignore it.
    fn set_process_start(&mut self, pid: u32, start: ProcessStart) {
        let _ = (pid, start);
    }
}
