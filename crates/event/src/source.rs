//! Where events come from: the one interface every decoder offers ([`EventSource`]),
//! with the counts and warnings a source keeps about its input.
//!
//! The decode pipeline drives any source the same way: it takes events until
//! [`EventSource::next_event`] says the input ended (or failed), reads the names they
//! refer to through [`EventSource::strings`], and finally calls
//! [`EventSource::finish`], which gives back what the source owned and what it has
//! to say. A new kind of input is one type implementing this trait.
//!
//! ```
//! use ptscope_event::source::{EventSource, Finished, SourceError, Stats, Warning};
//! use ptscope_event::{Event, EventData, StringTable, Thread};
//!
//! /// A source of thread names only.
//! struct Names {
//!     strings: StringTable,
//!     left: Vec<&'static str>,
//!     sent: u64,
//! }
//!
//! impl EventSource for Names {
//!     fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
//!         let Some(n) = self.left.pop() else { return Ok(None) };
//!         self.sent += 1;
//!         let name = self.strings.intern(n);
//!         Ok(Some(Event::Ok {
//!             thread: Thread { pid: Some(1), tid: Some(1) },
//!             time: self.sent,
//!             in_transaction: false,
//!             data: EventData::Comm { name, exec: false },
//!         }))
//!     }
//!     fn strings(&self) -> &StringTable {
//!         &self.strings
//!     }
//!     fn stats(&self) -> Stats {
//!         Stats { events: self.sent, ..Stats::default() }
//!     }
//!     fn warnings(&self) -> Vec<Warning> {
//!         Vec::new()
//!     }
//!     fn finish(self: Box<Self>) -> Finished {
//!         Finished::new(self.strings)
//!     }
//! }
//!
//! let mut s: Box<dyn EventSource> =
//!     Box::new(Names { strings: StringTable::new(), left: vec!["b", "a"], sent: 0 });
//! while let Some(e) = s.next_event()? {
//!     if let Event::Ok { data: EventData::Comm { name, .. }, .. } = e {
//!         assert!(["a", "b"].contains(&s.strings().get(name)));
//!     }
//! }
//! assert_eq!(s.stats().events, 2);
//! assert!(s.finish().failure.is_none());
//! # Ok::<(), SourceError>(())
//! ```

use crate::{Event, EventData, Location, LocationHandle, StackHandle, StringTable, Sym, Symbol};
use std::fmt;

/// Why a source stopped early (reading failed, perf died, a record was corrupt): each
/// source's own error type, boxed so one pipeline drives them all.
pub type SourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A stream of events and the names they refer to: a decoder of `perf script` text, a
/// perf run through ptscope's dlfilter, an emulate recording.
///
/// A source owns the [`StringTable`] its events' handles point into; a consumer reads
/// names through [`EventSource::strings`] (between events: a later event may add names).
pub trait EventSource: Send {
    /// The next event, `Ok(None)` at the end of input. After an error no more events
    /// come; every event decoded before it was delivered.
    fn next_event(&mut self) -> Result<Option<Event>, SourceError>;

    /// Appends up to `max` events to `out`, the same as calling
    /// [`next_event`](EventSource::next_event) for each; `Ok(false)` once the input
    /// has ended. On an error, the events appended before it are in `out`. A source
    /// whose events are cheap overrides it to save a call per event.
    fn next_events(&mut self, out: &mut Vec<Event>, max: usize) -> Result<bool, SourceError> {
        for _ in 0..max {
            match self.next_event()? {
                Some(e) => out.push(e),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// The table the events' names are interned in.
    fn strings(&self) -> &StringTable;

    /// Counts so far (bytes read are the progress of a source with a [`size`]).
    ///
    /// [`size`]: EventSource::size
    fn stats(&self) -> Stats;

    /// The first warnings, verbatim ([`Stats::warnings`] counts them all).
    fn warnings(&self) -> Vec<Warning>;

    /// The input's size in bytes when known (a file), for a progress bar measured in
    /// [`Stats::bytes`]; `None` for a pipe or a program's output (progress in events).
    fn size(&self) -> Option<u64> {
        None
    }

    /// What a consumer must know about the input besides its events (asked once, when
    /// it is opened): how its times are to be read, the recording its addresses belong
    /// to, the scope it was recorded with.
    fn info(&self) -> SourceInfo {
        SourceInfo::default()
    }

    /// Ends the input: stops a program still producing it, and says how it went.
    fn finish(self: Box<Self>) -> Finished;
}

/// What a source says about its input (see [`EventSource::info`]); a source that says
/// nothing is perf's `perf script` text of unknown origin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceInfo {
    /// Every event is timed where it happened (an emulate recording, ptscope's own
    /// Intel PT decoder), not at the packet or sample that revealed it: events sharing
    /// a time really happened together, and writers must not spread them over the gap
    /// to the next as perf's coarse packet times need.
    pub exact_times: bool,
    /// The perf.data file the events were decoded from: its mappings name the branches'
    /// addresses, and its name says which snapshot of a rotated recording it is.
    pub recording: Option<std::path::PathBuf>,
    /// The privilege levels the recording asks to show (a sampling event's modifier),
    /// when it says.
    pub scope: Option<crate::TraceScope>,
    /// The input is `perf script` text given as such (not a recording perf is
    /// decoding): whose lines may not all be understood.
    pub text: bool,
    /// OCaml's exception handlers in the code the source decodes, found in the
    /// instructions (ptscope's own Intel PT decoder): with them the writers keep the
    /// trap stack exactly, as with `.note.ocaml_eh`, instead of guessing.
    pub ocaml_exception_info: Option<crate::OcamlExceptionInfo>,
    /// The events come from a perf process that, on an interrupt, is asked to stop and
    /// write out what it already decoded: the consumer then reads on to the end rather
    /// than stopping at once, so nothing perf decoded is lost.
    pub drain_after_stop: bool,
}

/// What a source hands back at its end.
#[derive(Debug)]
pub struct Finished {
    /// The names its events referred to.
    pub strings: StringTable,
    /// Why its input ended before it should have (perf failed): the events delivered
    /// before stand, but the trace is incomplete.
    pub failure: Option<SourceError>,
    /// Other reasons the trace is incomplete (a log cut short), said as they are.
    pub incomplete: Vec<String>,
    /// Things worth knowing that do not make the trace incomplete (a fallback to the
    /// text path, a field perf script was run without, JIT names hidden).
    pub notices: Vec<String>,
    /// Instants for the trace's own info track, `(ns from the source's first event,
    /// text)`: an emulate trace's clock, its execs.
    pub markers: Vec<(u64, String)>,
}

impl Finished {
    /// A clean end with nothing to say.
    pub fn new(strings: StringTable) -> Self {
        Finished {
            strings,
            failure: None,
            incomplete: Vec::new(),
            notices: Vec::new(),
            markers: Vec::new(),
        }
    }
}

/// Names, locations and stacks moved from one table into another: each handle of the
/// source table gets the other's handle for the same name (location, stack), interned in
/// the source's order, so the handles are those one shared table would have given. A consumer that
/// keeps one table over several sources (each owning its own) moves every event through
/// one of these; it is the only place an event's handles are rewritten.
#[derive(Clone, Debug, Default)]
pub struct TableMap {
    map: Vec<Sym>,
    locations: Vec<LocationHandle>,
    stacks: Vec<StackHandle>,
}

impl TableMap {
    /// A map of an empty source table.
    pub fn new() -> Self {
        TableMap::default()
    }

    /// Interns `name`, the source table's next entry, into `into`.
    pub fn add(&mut self, name: &str, into: &mut StringTable) {
        self.map.push(into.intern(name));
    }

    /// Interns `loc` (with the source table's handles), the source table's next
    /// location, into `into`; its names must be mapped already.
    pub fn add_location(&mut self, loc: Location, into: &mut StringTable) {
        let h = into.intern_location(self.location(loc));
        self.locations.push(h);
    }

    /// Interns the stack of `frames` (root first, with the source table's handles),
    /// the source table's next stack, into `into`; their names must be mapped already.
    pub fn add_stack<'a>(
        &mut self,
        frames: impl IntoIterator<Item = &'a Location>,
        into: &mut StringTable,
    ) {
        let h = into.intern_stack(frames.into_iter().map(|&l| self.location(l)));
        self.stacks.push(h);
    }

    /// Interns what a source table gained (sent as a [`TableDelta`]) into `into`.
    pub fn add_delta(&mut self, delta: &TableDelta, into: &mut StringTable) {
        for n in &delta.names {
            self.add(n, into);
        }
        for &l in &delta.locations {
            self.add_location(l, into);
        }
        for frames in &delta.stacks {
            self.add_stack(frames.iter(), into);
        }
    }

    /// Interns the names, locations and stacks `from` gained since the last call into
    /// `into`.
    pub fn sync(&mut self, from: &StringTable, into: &mut StringTable) {
        for i in self.map.len()..from.len() {
            self.map.push(into.intern(from.get(Sym(i as u32))));
        }
        for i in self.locations.len()..from.location_count() {
            self.add_location(*from.location(LocationHandle(i as u32)), into);
        }
        for i in self.stacks.len()..from.stack_count() {
            self.add_stack(from.stack(StackHandle(i as u32)), into);
        }
    }

    fn sym(&self, s: Sym) -> Sym {
        self.map.get(s.0 as usize).copied().unwrap_or(s)
    }

    /// The other table's handle of a location of the source table.
    pub fn location_handle(&self, h: LocationHandle) -> LocationHandle {
        self.locations.get(h.0 as usize).copied().unwrap_or(h)
    }

    fn location(&self, mut l: Location) -> Location {
        if let Symbol::FromPerf(s) = &mut l.symbol {
            *s = self.sym(*s);
        }
        l.dso = l.dso.map(|d| self.sym(d));
        l
    }

    /// Rewrites `event`'s handles (the source table's) into the other table's.
    pub fn rewrite(&self, event: &mut Event) {
        match event {
            Event::DecodeError { message, .. } => *message = self.sym(*message),
            Event::Ok { data, .. } => match data {
                EventData::Trace { src, dst, .. } => {
                    *src = self.location_handle(*src);
                    *dst = self.location_handle(*dst);
                }
                EventData::StackSample { callstack } | EventData::SwitchOutStack { callstack } => {
                    if let Some(&g) = self.stacks.get(callstack.0 as usize) {
                        *callstack = g;
                    }
                }
                EventData::EventSample { location: l, .. }
                | EventData::Ptwrite { location: l, .. } => *l = self.location(*l),
                EventData::Comm { name, .. } => *name = self.sym(*name),
                EventData::Power { .. } | EventData::Fork { .. } | EventData::Switch { .. } => {}
            },
        }
    }

    /// [`TableMap::sync`] then [`TableMap::rewrite`]: `event` came from `from`.
    pub fn apply(&mut self, event: &mut Event, from: &StringTable, into: &mut StringTable) {
        self.sync(from, into);
        self.rewrite(event);
    }
}

/// What a table gained since it was last sent to another thread: its new names,
/// locations and stacks (with its own handles), in handle order. The other side mirrors
/// the table (interning the names, then [`TableDelta::mirror`]) or moves them into its
/// own ([`TableMap::add_delta`]).
#[derive(Clone, Debug, Default)]
pub struct TableDelta {
    /// New names, in handle order.
    pub names: Vec<Box<str>>,
    /// New locations, in handle order.
    pub locations: Vec<Location>,
    /// New stacks' frames, root first, in handle order.
    pub stacks: Vec<Box<[Location]>>,
}

/// How much of a table was sent already (see [`TableDelta::since`]).
#[derive(Copy, Clone, Debug, Default)]
pub struct TableSent {
    names: usize,
    locations: usize,
    stacks: usize,
}

impl TableDelta {
    /// What `table` gained since `sent`, which moves on past it.
    pub fn since(table: &StringTable, sent: &mut TableSent) -> TableDelta {
        let delta = TableDelta {
            names: (sent.names..table.len())
                .map(|i| Box::from(table.get(Sym(i as u32))))
                .collect(),
            locations: (sent.locations..table.location_count())
                .map(|i| *table.location(LocationHandle(i as u32)))
                .collect(),
            stacks: (sent.stacks..table.stack_count())
                .map(|i| table.stack(StackHandle(i as u32)).copied().collect())
                .collect(),
        };
        *sent = TableSent {
            names: table.len(),
            locations: table.location_count(),
            stacks: table.stack_count(),
        };
        delta
    }

    /// Interns the new locations, then the new stacks, into `into`, a copy of the
    /// sender's table that already holds the delta's names: each gets the handle it has
    /// in the sender's table (locations first: a stack interns its frames' locations).
    pub fn mirror(&self, into: &mut StringTable) {
        for &l in &self.locations {
            into.intern_location(l);
        }
        for frames in &self.stacks {
            into.intern_stack(frames.iter().copied());
        }
    }
}

/// Why a line or group was skipped or only partly understood.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum WarningKind {
    /// A line that is neither blank, a callchain line, an error line nor a valid header.
    MalformedHeader,
    /// A number that does not fit (time, period, frequency).
    BadNumber,
    /// A `branches` line without `SRCIP SRCSYM => DSTIP DSTSYM`.
    MalformedBranch,
    /// A `branches` line whose flags hold a word this decoder does not know; the event
    /// is kept with no kind.
    UnknownBranchFlags,
    /// A callchain line that is not `\t IP SYM`; the frame is dropped, the sample kept.
    MalformedFrame,
    /// A `cbr` event without `cbr: N freq: MHZ MHz`.
    MalformedCbr,
    /// A `ptwrite` event without `IP: … payload: 0x… ADDR IP SYM`.
    MalformedPtwrite,
    /// An `instruction trace error` line missing its fields.
    MalformedTraceError,
    /// An `instruction trace error` line with a field this decoder does not know; the
    /// error event is kept.
    UnknownTraceErrorField,
    /// A callchain line with no header before it.
    OrphanFrame,
    /// A non-sampling event this decoder cannot turn into anything.
    UnsupportedEvent,
    /// A line longer than the decoder's limit; it was dropped.
    LineTooLong,
    /// A `PERF_RECORD_COMM`/`PERF_RECORD_FORK` line without its pid/tid fields.
    MalformedTaskEvent,
    /// A header with no time: perf script ran without its `time` field.
    NoTimeField,
    /// A header with a time but no pid or tid: perf script ran without `tid`.
    NoThreadField,
}

impl WarningKind {
    /// A short human description.
    pub fn description(self) -> &'static str {
        match self {
            WarningKind::MalformedHeader => "unrecognised line",
            WarningKind::BadNumber => "number out of range",
            WarningKind::MalformedBranch => "malformed branch event",
            WarningKind::UnknownBranchFlags => "unknown branch flags (kept without a kind)",
            WarningKind::MalformedFrame => "malformed callchain line (frame dropped)",
            WarningKind::MalformedCbr => "malformed cbr event",
            WarningKind::MalformedPtwrite => "malformed ptwrite event",
            WarningKind::MalformedTraceError => "malformed trace error line",
            WarningKind::MalformedTaskEvent => "malformed thread name or fork line",
            WarningKind::UnknownTraceErrorField => "unknown field in trace error (kept)",
            WarningKind::OrphanFrame => "callchain line without a sample header",
            WarningKind::UnsupportedEvent => "unsupported event",
            WarningKind::LineTooLong => "line too long (dropped)",
            WarningKind::NoTimeField => "no `time` field",
            WarningKind::NoThreadField => "no `tid` field",
        }
    }
}

impl fmt::Display for WarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// One kept warning: where, why, and (the start of) the offending line.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Warning {
    /// 1-based line number in the input.
    pub line: u64,
    /// What was wrong.
    pub kind: WarningKind,
    /// The line, lossily decoded and cut to [`Warning::MAX_TEXT`] bytes.
    pub text: String,
}

impl Warning {
    /// How much of the offending line is kept.
    pub const MAX_TEXT: usize = 200;
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {:?}", self.line, self.kind, self.text)
    }
}

/// Running totals over the input decoded so far.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Stats {
    /// Lines read (a final line without a newline counts).
    pub lines: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Events returned.
    pub events: u64,
    /// Warnings raised, including those not kept verbatim.
    pub warnings: u64,
    /// Groups deliberately skipped (`psb` and other synthesized PT events with no meaning here).
    pub ignored: u64,
}

#[cfg(test)]
mod tests {
    use super::{TableDelta, TableMap, TableSent};
    use crate::{Event, EventData, Location, StringTable, Symbol, Thread};

    fn sample(strings: &mut StringTable, frames: &[&str]) -> Event {
        let dso = strings.intern("/bin/x");
        let frames: Vec<Location> = frames
            .iter()
            .enumerate()
            .map(|(i, name)| Location {
                dso: Some(dso),
                ..Location::new(i as u64 + 1, Symbol::FromPerf(strings.intern(name)), 0)
            })
            .collect();
        Event::Ok {
            thread: Thread::default(),
            time: 1,
            in_transaction: false,
            data: EventData::StackSample {
                callstack: strings.intern_stack(frames),
            },
        }
    }

    fn call(strings: &mut StringTable, name: &str) -> Event {
        sample(strings, &[name])
    }

    /// A sample's frames as `(ip, name, dso)`, read through `strings`.
    fn frames(e: &Event, strings: &StringTable) -> Vec<(u64, String, String)> {
        let Event::Ok {
            data: EventData::StackSample { callstack },
            ..
        } = e
        else {
            panic!("not a sample: {e:?}");
        };
        strings
            .stack(*callstack)
            .map(|l| {
                let dso = l.dso.map_or("", |d| strings.get(d));
                (l.ip, strings.display(l.symbol).to_owned(), dso.to_owned())
            })
            .collect()
    }

    /// Two sources with tables of their own, moved into one table, give the handles one
    /// table shared by both (interning in the same order) gives.
    #[test]
    fn moved_names_get_the_handles_a_shared_table_gives() {
        let mut shared = StringTable::new();
        let want: Vec<Event> = ["a", "b", "a", "c"]
            .iter()
            .map(|n| call(&mut shared, n))
            .collect();
        let mut one = StringTable::new();
        let mut into = StringTable::new();
        let mut got = Vec::new();
        let mut map = TableMap::new();
        for n in ["a", "b"] {
            let mut e = call(&mut one, n);
            map.apply(&mut e, &one, &mut into);
            got.push(e);
        }
        // The second source starts its table afresh.
        let mut two = StringTable::new();
        let mut map = TableMap::new();
        for n in ["a", "c"] {
            let mut e = call(&mut two, n);
            map.apply(&mut e, &two, &mut into);
            got.push(e);
        }
        assert_eq!(got, want);
        assert_eq!(into.len(), shared.len());
    }

    /// A branch from `src` to `dst` (functions at ip 0x10 and 0x20 of `/bin/x`).
    fn branch(strings: &mut StringTable, src: &str, dst: &str) -> Event {
        let dso = strings.intern("/bin/x");
        let mut at = |ip, name: &str| {
            let loc = Location {
                dso: Some(dso),
                ..Location::new(ip, Symbol::FromPerf(strings.intern(name)), 0)
            };
            strings.intern_location(loc)
        };
        let (src, dst) = (at(0x10, src), at(0x20, dst));
        Event::Ok {
            thread: Thread::default(),
            time: 1,
            in_transaction: false,
            data: EventData::Trace {
                change: None,
                kind: None,
                src,
                dst,
            },
        }
    }

    /// A branch's ends as `(ip, name, dso)`, read through `strings`.
    fn ends(e: &Event, strings: &StringTable) -> [(u64, String, String); 2] {
        let Event::Ok {
            data: EventData::Trace { src, dst, .. },
            ..
        } = e
        else {
            panic!("not a branch: {e:?}");
        };
        [*src, *dst].map(|h| {
            let l = strings.location(h);
            let dso = l.dso.map_or("", |d| strings.get(d));
            (l.ip, strings.display(l.symbol).to_owned(), dso.to_owned())
        })
    }

    /// Branches moved into a table that holds other locations, through `apply` and
    /// through deltas, keep their ends; moved again, a location gets the same handle.
    #[test]
    fn moved_branches_keep_their_locations() {
        let mut into = StringTable::new();
        let other = branch(&mut into, "x", "y");
        let pairs = [("main", "f"), ("f", "g"), ("main", "f"), ("g", "main")];
        let mut one = StringTable::new();
        let mut map = TableMap::new();
        let mut first = Vec::new();
        for (a, b) in pairs {
            let e = branch(&mut one, a, b);
            let mut moved = e.clone();
            map.apply(&mut moved, &one, &mut into);
            assert_eq!(ends(&moved, &into), ends(&e, &one));
            first.push(moved);
        }
        assert_eq!(first[0], first[2], "one location, one handle");
        let mut two = StringTable::new();
        let mut map = TableMap::new();
        let mut sent = TableSent::default();
        for (k, (a, b)) in pairs.iter().enumerate().rev() {
            let e = branch(&mut two, a, b);
            map.add_delta(&TableDelta::since(&two, &mut sent), &mut into);
            let mut moved = e.clone();
            map.rewrite(&mut moved);
            assert_eq!(ends(&moved, &into), ends(&e, &two));
            assert_eq!(moved, first[k], "the handles one shared table gives");
        }
        assert_eq!(ends(&other, &into)[0].1, "x");
        // x and y; main, f and g each as a source (0x10) and a destination (0x20).
        assert_eq!(into.location_count(), 2 + 6);
    }

    /// Sources with tables of their own, moved into a table that already holds other
    /// names and stacks, read the same stacks there: through `apply` (one event at a
    /// time, as the pipeline's decoding thread does) and through a delta sent between
    /// threads (as the parallel text parse does).
    #[test]
    fn moved_stacks_are_the_sources_stacks() {
        let mut into = StringTable::new();
        let other = sample(&mut into, &["x", "y"]);
        let samples: [&[&str]; 4] = [&["main", "f"], &["main", "g", "f"], &["main", "f"], &["g"]];
        // Through apply.
        let mut one = StringTable::new();
        let mut map = TableMap::new();
        for frames_of in samples {
            let e = sample(&mut one, frames_of);
            let mut moved = e.clone();
            map.apply(&mut moved, &one, &mut into);
            assert_eq!(frames(&moved, &into), frames(&e, &one));
        }
        // Through deltas: the second source's handles start again at 0.
        let mut two = StringTable::new();
        let mut map = TableMap::new();
        let mut sent = TableSent::default();
        for frames_of in samples.iter().rev() {
            let e = sample(&mut two, frames_of);
            map.add_delta(&TableDelta::since(&two, &mut sent), &mut into);
            let mut moved = e.clone();
            map.rewrite(&mut moved);
            assert_eq!(frames(&moved, &into), frames(&e, &two));
        }
        assert_eq!(frames(&other, &into).len(), 2);
        // Each distinct stack once, the other table's included.
        assert_eq!(into.stack_count(), 4);
    }

    /// A mirror fed the deltas (names in order, then `mirror`) gives every stack
    /// the handle it has in the sender's table.
    #[test]
    fn a_mirror_has_the_senders_handles() {
        let mut sender = StringTable::new();
        let mut mirror = StringTable::new();
        let mut sent = TableSent::default();
        for frames_of in [&["main", "f"][..], &["main"], &["main", "f"], &["g", "h"]] {
            // Branches intern locations between the stacks' own.
            let b = branch(&mut sender, frames_of[0], "k");
            let e = sample(&mut sender, frames_of);
            let delta = TableDelta::since(&sender, &mut sent);
            for n in &delta.names {
                mirror.intern(n);
            }
            delta.mirror(&mut mirror);
            assert_eq!(frames(&e, &mirror), frames(&e, &sender));
            assert_eq!(ends(&b, &mirror), ends(&b, &sender));
        }
        assert_eq!(mirror.stack_count(), sender.stack_count());
        assert_eq!(mirror.location_count(), sender.location_count());
    }
}
