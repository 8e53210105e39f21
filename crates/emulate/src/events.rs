//! An emulate recording as an [`EventSource`]: the threads' exact steps as branch
//! events, merged in time order, for what takes events (the legacy writer, reports).
//! Traces are written from the steps directly (`ptscope_stacks::exact`); this is the way
//! for everything else.

use crate::decoding::Decoding;
use crate::recording::{Recording, View};
use crate::walk::Walker;
use crate::{ClockKind, TimeBase};
use anyhow::Result;
use ptscope_event::exact::{
    exits_non_locally, ExactKind, ExactStep, Functions, Restart, UNKNOWN_FUNC,
};
use ptscope_event::source::{EventSource, Finished, SourceError, Stats};
use ptscope_event::{
    Event, EventData, Kind, Location, LocationHandle, StringTable, Symbol, Thread, TraceStateChange,
};
use rustc_hash::FxHashMap;
use std::collections::BinaryHeap;
use std::path::Path;

/// One thread's walk and where it is.
struct Part {
    walker: Walker<'static, 'static>,
    thread: Thread,
    buf: Vec<ExactStep>,
    next: usize,
    comm_sent: bool,
    name: String,
    /// Where the thread is: the last step's destination.
    here: LocationHandle,
    /// The thread's functions, as interned locations at their entries.
    entries: FxHashMap<u32, LocationHandle>,
    /// Return addresses of the calls made, and their functions: a return whose
    /// destination the walker knows only by function goes to the innermost one there.
    returns: Vec<(u64, u32)>,
    /// The function running: the last step's destination.
    current: u32,
}

/// The recording kept alive for the walkers borrowing it: the view is dropped before
/// the recording it borrows (fields drop in order).
struct Held {
    _view: Box<View<'static>>,
    _recording: Box<Recording>,
}

/// Snapshot events of an emulate recording, in time order.
pub struct Events {
    parts: Vec<Part>,
    heap: BinaryHeap<std::cmp::Reverse<(u64, usize)>>,
    strings: StringTable,
    null: LocationHandle,
    notices: Vec<String>,
    markers: Vec<(u64, String)>,
    produced: u64,
    /// Where time 0 is, on the time base.
    origin: u64,
    // Last: the walkers borrow it.
    _held: Held,
}

impl Events {
    /// The events of snapshot `snapshot` of the recording in `dir`; `comm` names the
    /// threads that did not name themselves; times follow `clock`.
    pub fn open(dir: &Path, comm: &str, snapshot: usize, clock: ClockKind) -> Result<Self> {
        Self::open_as(dir, |v| Decoding::new(v, snapshot, clock, comm))
    }

    /// [`Events::open`] with times counted in `base` (the instruction clock, to compare
    /// with ptsim's truth; [`Events::origin`] gives them back their own start).
    pub fn open_with_time_base(
        dir: &Path,
        comm: &str,
        snapshot: usize,
        base: TimeBase,
    ) -> Result<Self> {
        Self::open_as(dir, |v| Decoding::with_time_base(v, snapshot, base, comm))
    }

    /// The events of the snapshot `decoding` makes of the recording in `dir`.
    fn open_as(
        dir: &Path,
        decoding: impl FnOnce(&'static View<'static>) -> Decoding<'static, 'static>,
    ) -> Result<Self> {
        let recording = Box::new(Recording::open(dir)?);
        // SAFETY: the view borrows the recording, which is boxed (never moves) and
        // dropped after the walkers and the view (`_held` is the last field, and the
        // view is dropped before the recording inside it).
        let rec: &'static Recording = unsafe { &*(recording.as_ref() as *const Recording) };
        let view = Box::new(rec.view()?);
        // SAFETY: as above, for the boxed view.
        let v: &'static View<'static> = unsafe { &*(view.as_ref() as *const View<'static>) };
        let decoding = decoding(v);
        let mut strings = StringTable::new();
        let null = strings.intern_location(Location::new(0, Symbol::Unknown, 0));
        let mut parts = Vec::new();
        for (i, t) in decoding.threads().iter().enumerate() {
            parts.push(Part {
                walker: decoding.walker(i),
                thread: Thread {
                    pid: Some(t.pid),
                    tid: Some(t.tid),
                },
                buf: Vec::new(),
                next: 0,
                comm_sent: false,
                name: t.name.clone(),
                here: null,
                entries: FxHashMap::default(),
                returns: Vec::new(),
                current: UNKNOWN_FUNC,
            });
        }
        let mut notices = v.notices.clone();
        notices.dedup();
        let mut ev = Events {
            parts,
            heap: BinaryHeap::new(),
            strings,
            null,
            notices,
            markers: vec![(0, decoding.clock_marker())],
            produced: 0,
            origin: decoding.origin(),
            _held: Held {
                _view: view,
                _recording: recording,
            },
        };
        for i in 0..ev.parts.len() {
            ev.refill(i);
        }
        Ok(ev)
    }

    /// Makes sure part `i` has a step at hand, and queues it.
    fn refill(&mut self, i: usize) {
        let p = &mut self.parts[i];
        if p.next >= p.buf.len() {
            p.buf.clear();
            p.next = 0;
            p.walker.fill(&mut p.buf);
        }
        if let Some(s) = p.buf.get(p.next) {
            self.heap.push(std::cmp::Reverse((s.time, i)));
        } else if let Some(problem) = p.walker.problem.take() {
            self.notices.push(format!(
                "thread {}: {problem}; the trace keeps what came before",
                p.walker.tid()
            ));
        }
    }

    fn location(part: &mut Part, strings: &mut StringTable, s: &ExactStep) -> LocationHandle {
        let funcs: &Functions = part.walker.functions();
        let Some(f) = funcs.get(s.to).filter(|_| s.to != UNKNOWN_FUNC) else {
            return strings.intern_location(Location::new(s.to_addr, Symbol::Unknown, 0));
        };
        let sym = strings.intern(&f.name);
        if s.to_addr == 0 && matches!(s.kind, ExactKind::Start(_)) {
            // Somewhere in the function, not at its entry.
            return strings.intern_location(Location::new(0, Symbol::FromPerf(sym), 0));
        }
        if s.to_addr == 0 || s.to_addr == f.entry {
            if let Some(&h) = part.entries.get(&s.to) {
                return h;
            }
            let h = strings.intern_location(Location::new(f.entry, Symbol::FromPerf(sym), 0));
            part.entries.insert(s.to, h);
            return h;
        }
        strings.intern_location(Location::new(
            s.to_addr,
            Symbol::FromPerf(sym),
            s.to_addr.wrapping_sub(f.entry),
        ))
    }

    /// Whether the running function, or the one that called it, is code made for
    /// non-local exits (a stripped libc's `__longjmp` is unnamed, called by `longjmp`).
    fn exiting(part: &Part) -> bool {
        let funcs = part.walker.functions();
        let exits = |f: u32| f != UNKNOWN_FUNC && exits_non_locally(funcs.name(f));
        exits(part.current) || part.returns.last().is_some_and(|r| exits(r.1))
    }

    /// The next event, in time order (threads in log order at equal times).
    pub fn next_event(&mut self) -> Option<Event> {
        let std::cmp::Reverse((time, i)) = self.heap.pop()?;
        let (strings, null) = (&mut self.strings, self.null);
        let p = &mut self.parts[i];
        let thread = p.thread;
        if !p.comm_sent {
            p.comm_sent = true;
            let name = strings.intern(&p.name);
            self.heap.push(std::cmp::Reverse((time, i)));
            self.produced += 1;
            return Some(Event::Ok {
                thread,
                time,
                in_transaction: false,
                data: EventData::Comm { name, exec: false },
            });
        }
        let mut s = p.buf[p.next];
        p.next += 1;
        match s.kind {
            ExactKind::Call { ret } => {
                let f = p.walker.function_of(ret);
                p.returns.push((ret, f));
            }
            ExactKind::Return => {
                let at = if s.to_addr != 0 {
                    p.returns.iter().rposition(|r| r.0 == s.to_addr)
                } else if s.to == UNKNOWN_FUNC {
                    // Where its call pushed, wherever that is.
                    p.returns.len().checked_sub(1)
                } else {
                    p.returns.iter().rposition(|r| r.1 == s.to)
                };
                if let Some(i) = at {
                    s.to_addr = p.returns[i].0;
                    if s.to == UNKNOWN_FUNC {
                        s.to = p.returns[i].1;
                    }
                    p.returns.truncate(i);
                }
            }
            // A jump from code made for non-local exits (`longjmp`, or unnamed code it
            // called) into a function an open frame runs lands in that frame: the calls
            // it made since are gone. Settled by function only (stack-mode logs do not
            // log the block it landed in), it lands somewhere in that frame's body: given
            // the entry, the writers would take it for a tail call and open the frame
            // again on top of the unwound ones, at every later jump. The innermost open
            // call made from that function gives an address in its body. From ordinary
            // code it stays a jump to the entry (an indirect tail call), as the exact
            // writer reads it.
            ExactKind::Jump { indirect: true } if s.to != UNKNOWN_FUNC && Self::exiting(p) => {
                if let Some(i) = p.returns.iter().rposition(|r| r.1 == s.to) {
                    if s.to_addr == 0 {
                        s.to_addr = p.returns[i].0;
                    }
                    p.returns.truncate(i);
                }
            }
            _ => {}
        }
        let to = Self::location(p, strings, &s);
        let src = p.here;
        let (change, kind, src, dst) = match s.kind {
            ExactKind::Start(
                Restart::First | Restart::Resume | Restart::Handler | Restart::Sigreturn,
            ) => (Some(TraceStateChange::Start), None, null, to),
            ExactKind::Call { .. } => (None, Some(Kind::Call), src, to),
            ExactKind::Return => (None, Some(Kind::Return), src, to),
            ExactKind::Jump { .. } => (None, Some(Kind::Jump), src, to),
            ExactKind::Syscall { resume, .. } => {
                // Tracing stops at the syscall instruction (two bytes before its return).
                let at = ExactStep {
                    to_addr: resume.saturating_sub(2),
                    ..s
                };
                let src = Self::location(p, strings, &at);
                (Some(TraceStateChange::End), Some(Kind::Syscall), src, null)
            }
            // Where the code stopped, when the walk saw where it resumed.
            ExactKind::Async if s.to_addr != 0 => {
                (Some(TraceStateChange::End), Some(Kind::Async), to, null)
            }
            ExactKind::Async => (Some(TraceStateChange::End), Some(Kind::Async), src, null),
        };
        if !matches!(s.kind, ExactKind::Syscall { .. } | ExactKind::Async) {
            p.here = to;
            p.current = s.to;
        }
        self.refill(i);
        self.produced += 1;
        Some(Event::Ok {
            thread,
            time: s.time,
            in_transaction: false,
            data: EventData::Trace {
                change,
                kind,
                src,
                dst,
            },
        })
    }

    /// Where the events' time 0 is, on their time base.
    pub fn origin(&self) -> u64 {
        self.origin
    }

    /// The functions' names, by the address they hold (a thread's code: the first
    /// process's maps), to compare with names from elsewhere.
    pub fn function_name(&self, ip: u64) -> String {
        self._held._view.function_name(0, ip)
    }

    /// What makes the recording incomplete (a log cut short, a damaged thread).
    pub fn notices(&self) -> &[String] {
        &self.notices
    }
}

impl EventSource for Events {
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        Ok(Events::next_event(self))
    }
    fn strings(&self) -> &StringTable {
        &self.strings
    }
    fn stats(&self) -> Stats {
        Stats {
            events: self.produced,
            ..Default::default()
        }
    }
    fn warnings(&self) -> Vec<ptscope_event::source::Warning> {
        Vec::new()
    }
    fn finish(self: Box<Self>) -> Finished {
        let Events {
            strings,
            notices,
            markers,
            ..
        } = *self;
        Finished {
            incomplete: notices,
            markers,
            ..Finished::new(strings)
        }
    }
}
