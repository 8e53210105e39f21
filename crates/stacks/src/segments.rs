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
//! use ptscope_stacks::segments::SegmentsWriter;
//! use ptscope_stacks::{StackWriter, WriterConfig};
//! use ptscope_stacks::transcript::TranscriptSink;
//!
//! let mut s = StringTable::new();
//! let (main, f, g) = (s.intern("main"), s.intern("f"), s.intern("g"));
//! let mut at = |ip, sym| s.intern_location(Location::new(ip, Symbol::FromPerf(sym), 0));
//! let br = |time, kind, src, dst| Event::Ok {
//!     thread: Thread { pid: Some(1), tid: Some(1) },
//!     time,
//!     in_transaction: false,
//!     data: EventData::Trace { change: None, kind: Some(kind), src, dst },
//! };
//! // The snapshot starts inside `f`; only the return reveals that `main` called it.
//! let events = [
//!     br(0, Kind::Call, at(0x110, f), at(0x200, g)),
//!     br(10, Kind::Return, at(0x210, g), at(0x115, f)),
//!     br(20, Kind::Return, at(0x120, f), at(0x30, main)),
//! ];
//! let mut w = SegmentsWriter::new(TranscriptSink::default(), WriterConfig::default());
//! for e in &events {
//!     w.write_event(e, &s);
//! }
//! let t = w.finish(&s);
//! assert_eq!(
//!     t.lines,
//!     [
//!         "->      0ns BEGIN main", "->      0ns BEGIN f", "->      0ns BEGIN g",
//!         "->     10ns END   g", "->     20ns END   f", "->     20ns END   main",
//!     ]
//! );
//! ```

use crate::sink::TraceSink;
use crate::transaction::Transaction;
use crate::{StackWriter, WriterConfig};
use ptscope_event::{Event, EventData, ProcessStart, StringTable, Thread};
use rustc_hash::FxHashMap;

mod bursts;
mod frames;
mod go;
mod ingest;
mod samples;
mod signals;
mod stitch;
mod store;
pub(crate) mod unwind;
mod write;

use frames::{close_segment, new_segment, Join, Locations, ThreadState};
use samples::flush_off_cpu_at_end;
use stitch::{add_main_caller, add_process_entry, extend_roots_backwards};

/// The segment-based stack writer.
pub struct SegmentsWriter<S: TraceSink> {
    sink: S,
    config: WriterConfig,
    threads: Vec<ThreadState<S::Thread>>,
    index: FxHashMap<Thread, usize>,
    last_thread: Option<(Thread, usize)>,
    locs: Locations,
    transaction: Transaction<()>,
    base_time: u64,
    warned_impossible: bool,
    warned_traps: bool,
    /// Sampled frames outside the scope were dropped and the user was told.
    warned_scope: bool,
    /// A sampled stack's frames in scope (reused: no allocation per sample).
    sample_frames: Vec<frames::Loc>,
    /// Changes of the `--filter` region: (trace time, events now written?).
    regions: Vec<(i64, bool)>,
    in_region: bool,
    tracks: crate::tracks::Tracks<S::Thread>,
    /// The recording has context switches ([`EventData::Switch`]): gaps between
    /// samples are then not taken as time off CPU, switches say exactly when it was.
    switches: bool,
    /// How each process started its program, by pid
    /// ([`StackWriter::set_process_start`]).
    starts: FxHashMap<u32, ProcessStart>,
    /// Bytes of a thread's frames (and of its stack changes) held in memory before
    /// they go to a temporary file (see [`store`]).
    spill_after: usize,
    /// Where those files are made (`None`: the system's temporary directory).
    spill_dir: Option<std::path::PathBuf>,
}

impl<S: TraceSink> SegmentsWriter<S> {
    /// A writer feeding `sink`.
    pub fn new(sink: S, config: WriterConfig) -> Self {
        let base_time = config.base_time();
        let mut w = SegmentsWriter {
            sink,
            config,
            threads: Vec::new(),
            index: FxHashMap::default(),
            last_thread: None,
            locs: Locations::default(),
            transaction: Transaction::default(),
            base_time,
            warned_impossible: false,
            warned_traps: false,
            warned_scope: false,
            sample_frames: Vec::new(),
            regions: Vec::new(),
            in_region: true,
            tracks: crate::tracks::Tracks::default(),
            switches: false,
            starts: FxHashMap::default(),
            spill_after: store::SPILL_AFTER,
            spill_dir: None,
        };
        w.write_hits();
        w
    }

    /// Holds each thread's frames and stack changes in memory up to `bytes` each (2
    /// MiB by default), then in a temporary file whose pages the kernel keeps or writes
    /// out: the writer's memory stays bounded however long the trace (`usize::MAX`:
    /// always in memory). Applies to threads seen from now on.
    pub fn spill_after(mut self, bytes: usize) -> Self {
        self.spill_after = bytes;
        self
    }

    /// Makes the temporary files in `dir` (a test's missing directory).
    #[cfg(test)]
    fn spill_in(mut self, dir: &str) -> Self {
        self.spill_dir = Some(dir.into());
        self
    }

    /// Bytes of the threads' frames and stack changes held in the writer's own memory
    /// (what grows with the trace until it goes to a file).
    pub fn trace_memory(&self) -> usize {
        self.threads
            .iter()
            .map(|t| t.frames.memory_bytes() + t.entries.memory_bytes())
            .sum()
    }

    fn write_hits(&mut self) {
        let mut hits = self.config.hits.clone();
        hits.sort_by_key(|h| h.time);
        crate::tracks::write_hits(&mut self.sink, &hits, self.base_time);
    }
}

impl<S: TraceSink> StackWriter<S> for SegmentsWriter<S> {
    fn write_event(&mut self, event: &Event, strings: &StringTable) {
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
            if matches!(data, EventData::SwitchOutStack { .. }) {
                self.switches = true;
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
        if self.transaction.passes(event) {
            return self.ingest(event, strings);
        }
        let Some(admitted) = self.transaction.admit(event, ()) else {
            return;
        };
        for (e, ()) in admitted.earlier {
            self.ingest(&e, strings);
        }
        self.ingest(event, strings);
    }

    /// Frames are tracked outside ranges too, so a range starts with the right stack
    /// (its frames marked as inferred starts) and ends with every open frame closed.
    fn write_event_filtered(&mut self, event: &Event, should_write: bool, strings: &StringTable) {
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

    fn end_of_input(&mut self) {
        self.sink.end_of_input();
    }

    /// Ends a snapshot: every thread continues in a new segment that is never stitched.
    fn end_snapshot(&mut self, strings: &StringTable) {
        self.transaction.clear();
        for ts in self.threads.iter_mut() {
            let t = ts.last_time;
            flush_off_cpu_at_end(ts, &mut self.locs, strings, &self.config);
            new_segment(ts, t, Join::Never);
        }
    }

    fn set_process_start(&mut self, pid: u32, start: ProcessStart) {
        self.starts.insert(pid, start);
    }

    /// Writes everything and returns the sink.
    fn finish(mut self, strings: &StringTable) -> S {
        for (e, ()) in self.transaction.take() {
            self.ingest(&e, strings);
        }
        let mut threads = std::mem::take(&mut self.threads);
        let problem = threads
            .iter_mut()
            .filter_map(|ts| ts.frames.take_problem().or(ts.entries.take_problem()))
            .next();
        if let Some(e) = problem {
            self.sink.warning(&format!(
                "Warning: cannot hold the call stacks in a temporary file in {} ({e}): they \
                 were held in memory instead, which a long trace may exhaust (set TMPDIR to \
                 a directory with space)",
                self.spill_dir
                    .clone()
                    .unwrap_or_else(std::env::temp_dir)
                    .display()
            ));
        }
        for mut ts in threads {
            flush_off_cpu_at_end(&mut ts, &mut self.locs, strings, &self.config);
            close_segment(&mut ts);
            if self.config.stitch {
                let start = ts.thread.pid.and_then(|p| self.starts.get(&p).copied());
                if let Some(s) = start {
                    add_main_caller(&mut ts, &self.locs, strings, s);
                }
                add_process_entry(&mut ts, &mut self.locs, strings, start.map(|s| s.entry));
                extend_roots_backwards(&mut ts, &self.locs, strings);
            }
            let marker = self
                .config
                .mark_unknown_frames
                .then(|| frames::add_marker(&mut ts, &mut self.locs));
            let mut w = write::ThreadWriter::new(
                &mut self.sink,
                &ts,
                &self.locs,
                strings,
                &self.config,
                &self.regions,
            );
            w.marker = marker;
            w.write();
        }
        self.sink
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::TranscriptSink;
    use ptscope_event::{Kind, Location, Symbol, TraceStateChange};

    const THREAD: Thread = Thread {
        pid: Some(1),
        tid: Some(1),
    };

    /// A pseudo-random run of `n` branches on one thread: calls and returns among 40
    /// functions, returns above the known root (each gives every earlier stack a new
    /// caller), equal timestamps, and now and then a decode error.
    fn run(n: usize) -> (Vec<Event>, StringTable) {
        let mut s = StringTable::new();
        let names: Vec<_> = (0..40).map(|i| s.intern(&format!("f{i}"))).collect();
        let at = |s: &mut StringTable, f: usize, off: u64| {
            let loc = Location::new(
                0x1000 * (f as u64 + 1) + off,
                Symbol::FromPerf(names[f]),
                off,
            );
            s.intern_location(loc)
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let mut stack = vec![0usize];
        let mut time = 1_000u64;
        let mut events = Vec::with_capacity(n + n / 1000);
        for _ in 0..n {
            time += rand(3);
            let cur = *stack.last().unwrap_or(&0);
            let event = |kind, src, dst| Event::Ok {
                thread: THREAD,
                time,
                in_transaction: false,
                data: EventData::Trace {
                    change: None,
                    kind: Some(kind),
                    src,
                    dst,
                },
            };
            match rand(1000) {
                0 => {
                    let unknown = s.intern_location(Location::new(0, Symbol::Unknown, 0));
                    let resume = at(&mut s, cur, 0x18);
                    events.push(Event::DecodeError {
                        thread: THREAD,
                        time: Some(time),
                        ip: None,
                        message: s.intern("Overflow packet"),
                    });
                    events.push(Event::Ok {
                        thread: THREAD,
                        time,
                        in_transaction: false,
                        data: EventData::Trace {
                            change: Some(TraceStateChange::Start),
                            kind: None,
                            src: unknown,
                            dst: resume,
                        },
                    });
                }
                r if r < 520 && stack.len() < 30 => {
                    let callee = rand(40) as usize;
                    let (src, dst) = (at(&mut s, cur, 0x10), at(&mut s, callee, 0));
                    events.push(event(Kind::Call, src, dst));
                    stack.push(callee);
                }
                _ => {
                    stack.pop();
                    if stack.is_empty() {
                        // Above the known root: a caller no event showed yet.
                        stack.push(rand(40) as usize);
                    }
                    let caller = *stack.last().unwrap_or(&0);
                    let (src, dst) = (at(&mut s, cur, 0x20), at(&mut s, caller, 0x15));
                    events.push(event(Kind::Return, src, dst));
                }
            }
        }
        (events, s)
    }

    fn write(events: &[Event], s: &StringTable, spill_after: usize) -> (Vec<String>, usize) {
        let mut w = SegmentsWriter::new(TranscriptSink::default(), WriterConfig::default())
            .spill_after(spill_after);
        let mut held = 0;
        for e in events {
            w.write_event(e, s);
            held = held.max(w.trace_memory());
        }
        (w.finish(s).lines, held)
    }

    /// The writer's own memory for a thread's trace stops growing with the trace: past
    /// the limit it is held in a file (a 4× longer run holds no more).
    #[test]
    fn memory_held_is_bounded_by_the_limit_not_the_trace() {
        let limit = 64 << 10;
        let (short, s) = run(50_000);
        let (_, held_short) = write(&short, &s, limit);
        let (long, s) = run(200_000);
        let (_, held_long) = write(&long, &s, limit);
        // Two stores a thread, each at most twice its limit before it moves.
        assert!(held_short <= 4 * limit, "{held_short}");
        assert!(held_long <= 4 * limit, "{held_long}");
    }

    /// A trace held in files (moved early, grown, its pages given back again and again)
    /// is written exactly as one held in memory.
    #[test]
    fn a_trace_held_in_a_file_is_written_as_in_memory() {
        let (events, s) = run(200_000);
        let (in_memory, _) = write(&events, &s, usize::MAX);
        let (in_file, _) = write(&events, &s, 4096);
        assert!(in_memory.len() > 100_000, "{}", in_memory.len());
        assert!(in_memory.iter().any(|l| l.contains("Overflow")));
        assert_eq!(in_memory.len(), in_file.len());
        assert!(in_memory == in_file, "the transcripts differ");
    }

    /// Where no temporary file can be made the trace is written all the same, held in
    /// memory, and the user is told why and what to do.
    #[test]
    fn without_a_temporary_file_the_trace_is_written_and_the_user_told() {
        let (events, s) = run(20_000);
        let (in_memory, _) = write(&events, &s, usize::MAX);
        let mut w = SegmentsWriter::new(TranscriptSink::default(), WriterConfig::default())
            .spill_after(4096)
            .spill_in("/nonexistent/ptscope-spill-test");
        for e in &events {
            w.write_event(e, &s);
        }
        let t = w.finish(&s);
        assert!(t.lines == in_memory, "the transcripts differ");
        let said: Vec<_> = t
            .warnings
            .iter()
            .filter(|w| w.contains("temporary file"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", t.warnings);
        assert!(
            said[0].contains("/nonexistent/ptscope-spill-test"),
            "{}",
            said[0]
        );
        assert!(said[0].contains("TMPDIR"), "{}", said[0]);
    }
}
