//! A streaming, constant-memory decoder of `perf script` text into ptscope [`Event`]s.
//!
//! ```
//! use ptscope_decode::Decoder;
//! use ptscope_event::{Event, EventData, Kind};
//!
//! let text = "\
//! 30549/30549 174427.938462629:  1  branches:uH:   call  7ffff7ddc143 _start+0x3 (/lib/ld.so) =>  7ffff7ddc850 _dl_start+0x0 (/lib/ld.so)
//! 30549/30549 174427.938463000:  250000 cpu-clock:
//! \t  4005d6 leaf+0x6 (/tmp/prog)
//! \t  400620 main+0x20 (/tmp/prog)
//! ";
//! let mut decoder = Decoder::new(text.as_bytes());
//! let mut names = Vec::new();
//! while let Some(event) = decoder.next_event()? {
//!     match event {
//!         Event::Ok { data: EventData::Trace { kind, dst, .. }, .. } => {
//!             assert_eq!(kind, Some(Kind::Call));
//!             // The string table can be borrowed between events.
//!             let strings = decoder.strings();
//!             names.push(strings.display(strings.location(dst).symbol).to_owned());
//!         }
//!         Event::Ok { data: EventData::StackSample { callstack }, .. } => {
//!             // Root first; the stack is interned in the decoder's table.
//!             let strings = decoder.strings();
//!             for frame in strings.stack(callstack) {
//!                 names.push(strings.display(frame.symbol).to_owned());
//!             }
//!         }
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! assert_eq!(names, ["_dl_start", "main", "leaf"]);
//! assert_eq!(decoder.stats().warnings, 0);
//! # Ok::<(), ptscope_decode::Error>(())
//! ```
//!
//! # Input contract
//!
//! The decoder accepts everything magic-trace's `perf_decode.ml` accepts and a
//! documented superset:
//!
//! - Lines are grouped like magic-trace: a header line plus the following lines that
//!   start with a tab; a blank (or whitespace-only) line ends a group.
//! - Headers are `pid/tid sec.frac: [period] event[/config][/sel]:[sel:] rest`. The
//!   period may be absent. pid/tid `0` (or negative) is `None`.
//! - `branches` → [`EventData::Trace`]; `cbr` → [`EventData::Power`]; `ptwrite` →
//!   [`EventData::Ptwrite`]; `branch-misses`/`cache-misses` → [`EventData::EventSample`];
//!   `psb` and PT power events are skipped ([`Stats::ignored`]); any other event
//!   (`cycles`, `cpu-clock`, `task-clock`, …) is a sample whose tab lines are the
//!   callchain, delivered **root first** in [`EventData::StackSample`]. A sample without
//!   a callchain uses the location on its own line, if any.
//! - ` instruction trace error …` lines → [`Event::DecodeError`].
//! - Side-band lines from `--show-task-events`: `PERF_RECORD_COMM[ exec]: NAME:PID/TID`
//!   → [`EventData::Comm`] on that thread, `PERF_RECORD_FORK(PID:TID):(PPID:PTID)` →
//!   [`EventData::Fork`] on the new thread; from `--show-switch-events` (sampling),
//!   `PERF_RECORD_SWITCH[_CPU_WIDE] OUT[ preempt]|IN` → [`EventData::Switch`] on the
//!   header's thread; other `PERF_RECORD_*` lines are skipped ([`Stats::ignored`]).
//! - Anything else is a [`Warning`], counted in [`Stats::warnings`]; the first few are
//!   kept verbatim. Nothing in the input aborts decoding; only I/O errors are
//!   returned as [`Error`].
//!
//! Bytes are parsed as bytes: invalid UTF-8 in names is replaced, never an error.
//! Memory is bounded: one line buffer (lines over [`MAX_LINE`] bytes are dropped with
//! a warning), the pending group, and the [`StringTable`], which grows only with
//! distinct names.

#![warn(missing_docs)]

pub mod header;
mod parse;
pub mod perf;
mod warning;

pub use perf::{PerfError, PerfProcess, PerfScript, PerfScriptOptions, RecordingKind};
pub use warning::{MissingField, Stats, Warning, WarningKind, PT_FIELDS, SAMPLING_FIELDS};

use parse::{EventClass, Scratch};
use ptscope_event::source::{EventSource, Finished, SourceError};
use ptscope_event::{
    Event, EventData, ExtraEvent, Location, StackHandle, StringTable, Sym, Thread, TraceStateChange,
};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

/// Longest line the decoder buffers; longer lines are dropped with a warning so
/// memory stays bounded whatever the input.
pub const MAX_LINE: usize = 1 << 20;

/// How many warnings are kept verbatim by default (all are counted).
pub const DEFAULT_KEPT_WARNINGS: usize = 20;

/// What can stop decoding or running perf.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the input failed.
    #[error("reading perf script output: {0}")]
    Io(#[from] io::Error),
    /// perf could not be started, or failed.
    #[error(transparent)]
    Perf(#[from] perf::PerfError),
    /// The recording's header could not be read.
    #[error(transparent)]
    Header(#[from] header::HeaderError),
}

/// The group whose header was read last and which further tab lines may extend.
#[derive(Debug)]
enum Group {
    /// No group is open; a tab line now is an orphan.
    None,
    /// The group's event (if any) is already out; tab lines are ignored.
    Done,
    /// A sample waiting for its callchain.
    Sample {
        /// A `sched:sched_switch` sample: the stack the thread left the CPU in.
        switch_out: bool,
        line: u64,
        thread: Thread,
        time: u64,
        period: Option<u64>,
        extra: Option<ExtraEvent>,
        inline: Option<Location>,
        rest_blank: bool,
        tab_lines: u32,
    },
}

/// Everything but the reader, so a line borrowed from the reader's buffer can be
/// parsed without copying.
#[derive(Debug)]
struct State {
    strings: StringTable,
    scratch: Scratch,
    group: Group,
    /// Callchain of the open sample, leaf first as perf prints it; reused.
    frames: Vec<Location>,
    /// Header text of an open sample that may turn out unusable (for its warning).
    header_text: Vec<u8>,
    ready: VecDeque<Event>,
    stats: Stats,
    warnings: Vec<Warning>,
    max_kept: usize,
    line_no: u64,
    /// Whether the first header had a `comm` column; later ones must agree, so a line
    /// with a field perf never prints there is not mistaken for a thread's name.
    has_comm: Option<bool>,
    /// The last `comm` each thread's samples carried, to name threads from perf's
    /// default output (which has no task events unless asked for).
    comms: HashMap<u32, Vec<u8>>,
    /// Each thread's process, from task events: perf's default output prints the tid alone.
    pids: HashMap<u32, u32>,
    /// Fields the input lacks (see [`MissingField`]), in the order first noticed.
    missing: Vec<MissingField>,
    /// Whether the previous line was blank, so callchains under empty headers (no
    /// `comm`, `tid` or `time` at all) are recognised.
    after_blank: bool,
    /// Branch lines still to check for `symoff`.
    symoff_checks: u32,
    /// Branch lines seen with a kind (`call`, `return`, …) and without, up to a few
    /// hundred: none with one means perf script ran without `flags`.
    branch_kinds: (u32, u32),
    /// Whether branch symbols may lack `+0xOFF (dso)` (see `Scratch::partial`).
    partial_branches: bool,
}

impl State {
    fn note_missing(&mut self, field: MissingField) {
        if !self.missing.contains(&field) {
            self.missing.push(field);
        }
    }

    fn warn(&mut self, line: u64, kind: WarningKind, text: &[u8]) {
        self.stats.warnings += 1;
        if self.warnings.len() < self.max_kept {
            let cut = &text[..text.len().min(Warning::MAX_TEXT)];
            self.warnings.push(Warning {
                line,
                kind,
                text: String::from_utf8_lossy(cut).into_owned(),
            });
        }
    }

    fn emit(&mut self, event: Event) {
        self.stats.events += 1;
        self.ready.push_back(event);
    }

    fn process_line(&mut self, line: &[u8], overlong: bool) {
        self.line_no += 1;
        self.stats.lines += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if overlong {
            self.warn(self.line_no, WarningKind::LineTooLong, line);
            if line.first() != Some(&b'\t') {
                self.close_group();
                self.group = Group::Done;
            }
            return;
        }
        let blank = match line.first() {
            None => {
                self.close_group();
                true
            }
            Some(b'\t') => {
                self.frame_line(line);
                false
            }
            Some(&b) if parse::is_ws(b) && line.iter().all(|&b| parse::is_ws(b)) => {
                self.close_group();
                true
            }
            Some(_) => {
                self.close_group();
                self.header_line(line);
                false
            }
        };
        self.after_blank = blank;
    }

    fn frame_line(&mut self, line: &[u8]) {
        let line_no = self.line_no;
        match &mut self.group {
            Group::Sample { tab_lines, .. } => {
                *tab_lines += 1;
                self.scratch.partial = true;
                match parse::parse_frame(line, &mut self.strings, &mut self.scratch) {
                    Ok(loc) => self.frames.push(loc),
                    Err(kind) => match parse::parse_bare_frame(line) {
                        Some(loc) => {
                            self.frames.push(loc);
                            self.note_missing(MissingField::Sym);
                        }
                        None => self.warn(line_no, kind, line),
                    },
                }
            }
            Group::Done => {}
            Group::None => {
                // A callchain right under an empty line: perf printed headers with
                // none of `comm`, `tid` and `time`.
                if self.after_blank && self.has_comm.is_none() {
                    self.note_missing(MissingField::Time);
                    self.note_missing(MissingField::Tid);
                }
                self.warn(line_no, WarningKind::OrphanFrame, line);
                // One warning per orphaned run is enough.
                self.group = Group::Done;
            }
        }
    }

    fn header_line(&mut self, line: &[u8]) {
        let line_no = self.line_no;
        self.group = Group::Done;
        if parse::is_trace_error(line) {
            match parse::parse_trace_error(line) {
                Ok(err) => {
                    if err.unknown_key {
                        self.warn(line_no, WarningKind::UnknownTraceErrorField, line);
                    }
                    let message = self.strings.intern_bytes(err.message);
                    self.emit(Event::DecodeError {
                        thread: err.thread,
                        time: err.time,
                        ip: err.ip,
                        message,
                    });
                }
                Err(kind) => self.warn(line_no, kind, line),
            }
            return;
        }
        let header = match parse::parse_header(line) {
            Ok(h) if h.class != EventClass::Task => h,
            Err(kind @ (WarningKind::NoTimeField | WarningKind::NoThreadField))
                if parse::parse_task_line(line).is_none() =>
            {
                self.note_missing(if kind == WarningKind::NoTimeField {
                    MissingField::Time
                } else {
                    MissingField::Tid
                });
                return self.warn(line_no, kind, line);
            }
            // Side-band lines (`PERF_RECORD_FORK(…)` is not even a header) are looked
            // for only here, off the path every branch and sample takes.
            other => match parse::parse_task_line(line) {
                Some(Ok((time, record))) => return self.task(time, record),
                Some(Err(kind)) => return self.warn(line_no, kind, line),
                None => match other {
                    Ok(_) => return self.warn(line_no, WarningKind::MalformedTaskEvent, line),
                    Err(kind) => return self.warn(line_no, kind, line),
                },
            },
        };
        let has_comm = header.comm.is_some();
        if *self.has_comm.get_or_insert(has_comm) != has_comm {
            return self.warn(line_no, WarningKind::MalformedHeader, line);
        }
        // Branch symbols are read as magic-trace reads them unless the header shows
        // perf's own field choice (magic-trace's is `pid/tid time: period event:`).
        self.partial_branches = has_comm || header.thread.pid.is_none() || header.no_event;
        self.scratch.partial = true;
        let (mut thread, time) = (header.thread, header.time);
        if let (None, Some(tid)) = (thread.pid, thread.tid) {
            thread.pid = self.pids.get(&tid).copied();
        }
        if let (Some(comm), Some(tid)) = (header.comm, thread.tid) {
            self.sample_comm(thread, time, tid, comm);
        }
        match header.class {
            EventClass::Branches => {
                self.scratch.partial = self.partial_branches;
                match parse::parse_branch(header.rest, &mut self.strings, &mut self.scratch) {
                    Ok(b) => {
                        if self.symoff_checks > 0 {
                            self.symoff_checks -= 1;
                            let unknown = |l: &Location| match l.symbol {
                                ptscope_event::Symbol::FromPerf(n) => {
                                    self.strings.get(n).starts_with("[unknown")
                                }
                                _ => true,
                            };
                            // perf prints `+0x` after every named symbol when asked for
                            // `symoff`; names it could not find are `[unknown]`.
                            let named = !unknown(&b.dst) || !unknown(&b.src);
                            let bare = memchr::memmem::find(header.rest, b"+0x").is_none();
                            // Read as magic-trace does, a symbol without `+0x… (dso)` is
                            // not even a name.
                            let strict_failed = !self.partial_branches
                                && (b.src.symbol == ptscope_event::Symbol::Unknown
                                    || b.dst.symbol == ptscope_event::Symbol::Unknown);
                            if bare && (named || strict_failed) {
                                self.note_missing(MissingField::Symoff);
                            }
                        }
                        let (with, without) = &mut self.branch_kinds;
                        if *with == 0 && *without < 256 {
                            if b.kind.is_some() || b.start || b.end {
                                *with += 1;
                            } else {
                                *without += 1;
                                if *without == 256 {
                                    self.note_missing(MissingField::Flags);
                                }
                            }
                        }
                        if b.unknown_flags {
                            self.warn(line_no, WarningKind::UnknownBranchFlags, line);
                        }
                        let change = match (b.start, b.end) {
                            (true, false) => Some(TraceStateChange::Start),
                            (false, true) => Some(TraceStateChange::End),
                            _ => None,
                        };
                        let src = self.strings.intern_location(b.src);
                        let dst = self.strings.intern_location(b.dst);
                        self.emit(Event::Ok {
                            thread,
                            time,
                            in_transaction: b.in_transaction,
                            data: EventData::Trace {
                                change,
                                kind: b.kind,
                                src,
                                dst,
                            },
                        });
                    }
                    Err(kind) => self.warn(line_no, kind, line),
                }
            }
            EventClass::Cbr => match parse::parse_cbr(header.rest) {
                Ok(freq_mhz) => self.emit(Event::Ok {
                    thread,
                    time,
                    in_transaction: false,
                    data: EventData::Power { freq_mhz },
                }),
                Err(kind) => self.warn(line_no, kind, line),
            },
            EventClass::Ptwrite => {
                match parse::parse_ptwrite(header.rest, &mut self.strings, &mut self.scratch) {
                    Ok((data, location)) => self.emit(Event::Ok {
                        thread,
                        time,
                        in_transaction: false,
                        data: EventData::Ptwrite { location, data },
                    }),
                    Err(kind) => self.warn(line_no, kind, line),
                }
            }
            EventClass::Ignored => self.stats.ignored += 1,
            EventClass::Task => self.warn(line_no, WarningKind::MalformedTaskEvent, line),
            EventClass::Extra(_) | EventClass::Sample | EventClass::SwitchOut => {
                let extra = match header.class {
                    EventClass::Extra(e) => Some(e),
                    _ => None,
                };
                let inline =
                    parse::parse_inline_location(header.rest, &mut self.strings, &mut self.scratch);
                let rest_blank = header.rest.iter().all(|&b| parse::is_ws(b));
                // Kept in case the group turns out unusable and needs a warning.
                if inline.is_none() {
                    self.header_text.clear();
                    self.header_text.extend_from_slice(line);
                }
                self.frames.clear();
                self.group = Group::Sample {
                    switch_out: header.class == EventClass::SwitchOut,
                    line: line_no,
                    thread,
                    time,
                    period: header.period,
                    extra,
                    inline,
                    rest_blank,
                    tab_lines: 0,
                };
            }
        }
    }

    /// Names a thread from its samples' `comm` column when that name is new, as a
    /// `PERF_RECORD_COMM` would.
    fn sample_comm(&mut self, thread: Thread, time: u64, tid: u32, comm: &[u8]) {
        if comm.is_empty() || self.comms.get(&tid).is_some_and(|c| c == comm) {
            return;
        }
        self.comms.insert(tid, comm.to_vec());
        let name = self.strings.intern_bytes(comm);
        self.emit(Event::Ok {
            thread,
            time,
            in_transaction: false,
            data: EventData::Comm { name, exec: false },
        });
    }

    /// Remembers a thread's process for headers that carry the tid alone.
    fn learn_pid(&mut self, thread: Thread) {
        if let (Some(pid), Some(tid)) = (thread.pid, thread.tid) {
            self.pids.insert(tid, pid);
        }
    }

    /// A thread's name or parent becomes an event; other side-band records are skipped.
    fn task(&mut self, time: u64, record: parse::TaskRecord<'_>) {
        let (thread, data) = match record {
            parse::TaskRecord::Comm { thread, name, exec } => {
                self.learn_pid(thread);
                if let Some(tid) = thread.tid {
                    self.comms.insert(tid, name.to_vec());
                }
                let name = self.strings.intern_bytes(name);
                (thread, EventData::Comm { name, exec })
            }
            parse::TaskRecord::Fork { thread, parent } => {
                self.learn_pid(thread);
                (thread, EventData::Fork { parent })
            }
            parse::TaskRecord::Switch {
                thread,
                out,
                preempt,
            } => (thread, EventData::Switch { out, preempt }),
            parse::TaskRecord::Other => {
                self.stats.ignored += 1;
                return;
            }
        };
        self.emit(Event::Ok {
            thread,
            time,
            in_transaction: false,
            data,
        });
    }

    fn close_group(&mut self) {
        let group = std::mem::replace(&mut self.group, Group::None);
        let Group::Sample {
            switch_out,
            line,
            thread,
            time,
            period,
            extra,
            inline,
            rest_blank,
            tab_lines,
        } = group
        else {
            return;
        };
        let data = match extra {
            Some(name) => match self.frames.first().copied().or(inline) {
                Some(location) => EventData::EventSample {
                    location,
                    // perf always prints the period for these; 1 is one event.
                    count: period.unwrap_or(1),
                    name,
                },
                None => {
                    let text = std::mem::take(&mut self.header_text);
                    self.warn(line, WarningKind::UnsupportedEvent, &text);
                    self.header_text = text;
                    return;
                }
            },
            None => {
                let callstack = if !self.frames.is_empty() || tab_lines > 0 {
                    self.strings.intern_stack(self.frames.iter().rev().copied())
                } else if let Some(loc) = inline {
                    self.strings.intern_stack([loc])
                } else if rest_blank {
                    // perf prints a sample's location or callchain whenever it has
                    // `ip`: a bare header means perf script ran without it.
                    self.note_missing(MissingField::Ip);
                    self.strings.intern_stack([])
                } else {
                    let text = std::mem::take(&mut self.header_text);
                    self.warn(line, WarningKind::UnsupportedEvent, &text);
                    self.header_text = text;
                    return;
                };
                if switch_out {
                    EventData::SwitchOutStack { callstack }
                } else {
                    EventData::StackSample { callstack }
                }
            }
        };
        self.frames.clear();
        self.emit(Event::Ok {
            thread,
            time,
            in_transaction: false,
            data,
        });
    }
}

/// Decodes `perf script` text from any [`BufRead`] into [`Event`]s, one group at a time.
///
/// The decoder owns the [`StringTable`] its events' [`Sym`]s refer
/// to; borrow it with [`Decoder::strings`] between events, or take it back with
/// [`Decoder::into_strings`].
#[derive(Debug)]
pub struct Decoder<R> {
    reader: R,
    /// Holds a line that straddles the reader's buffer; most lines are parsed in place.
    spill: Vec<u8>,
    overlong: bool,
    eof: bool,
    /// The input's size, when it is a file (for progress).
    size: Option<u64>,
    st: State,
}

impl Decoder<BufReader<File>> {
    /// Opens a file of `perf script` text with a large read buffer.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        Ok(Decoder::from_file(File::open(path)?))
    }

    /// Decodes an open file of `perf script` text; its size is the progress's total
    /// ([`EventSource::size`]).
    pub fn from_file(file: File) -> Self {
        let size = file.metadata().map(|m| m.len()).ok().filter(|&n| n > 0);
        let mut d = Decoder::new(BufReader::with_capacity(1 << 20, file));
        d.size = size;
        d
    }
}

impl<R: BufRead> Decoder<R> {
    /// A decoder with a fresh string table.
    pub fn new(reader: R) -> Self {
        Decoder::with_strings(reader, StringTable::new())
    }

    /// A decoder that interns into an existing table (e.g. one shared across snapshots).
    pub fn with_strings(reader: R, strings: StringTable) -> Self {
        Decoder {
            reader,
            spill: Vec::new(),
            overlong: false,
            eof: false,
            size: None,
            st: State {
                strings,
                scratch: Scratch::default(),
                group: Group::None,
                frames: Vec::new(),
                header_text: Vec::new(),
                ready: VecDeque::with_capacity(2),
                stats: Stats::default(),
                warnings: Vec::new(),
                max_kept: DEFAULT_KEPT_WARNINGS,
                line_no: 0,
                has_comm: None,
                comms: HashMap::new(),
                pids: HashMap::new(),
                missing: Vec::new(),
                after_blank: true,
                symoff_checks: 64,
                branch_kinds: (0, 0),
                partial_branches: false,
            },
        }
    }

    /// Keeps up to `n` warnings verbatim instead of [`DEFAULT_KEPT_WARNINGS`].
    pub fn with_kept_warnings(mut self, n: usize) -> Self {
        self.st.max_kept = n;
        self
    }

    /// The next event, `Ok(None)` at the end of input. An I/O error is returned once;
    /// events decoded before it are still delivered by later calls.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        loop {
            if let Some(event) = self.st.ready.pop_front() {
                return Ok(Some(event));
            }
            if self.eof {
                return Ok(None);
            }
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.finish_input();
                    return Err(Error::Io(e));
                }
            };
            if buf.is_empty() {
                self.finish_input();
                continue;
            }
            match memchr::memchr(b'\n', buf) {
                Some(pos) => {
                    if self.spill.is_empty() && !self.overlong {
                        self.st.process_line(&buf[..pos], false);
                    } else {
                        push_capped(&mut self.spill, &mut self.overlong, &buf[..pos]);
                        self.st.process_line(&self.spill, self.overlong);
                        self.spill.clear();
                        self.overlong = false;
                    }
                    self.st.stats.bytes += pos as u64 + 1;
                    self.reader.consume(pos + 1);
                }
                None => {
                    let n = buf.len();
                    push_capped(&mut self.spill, &mut self.overlong, buf);
                    self.st.stats.bytes += n as u64;
                    self.reader.consume(n);
                }
            }
        }
    }

    /// Ends the input: a final line without a newline still counts, and the open
    /// group is flushed.
    fn finish_input(&mut self) {
        if self.eof {
            return;
        }
        self.eof = true;
        if !self.spill.is_empty() || self.overlong {
            let line = std::mem::take(&mut self.spill);
            self.st.process_line(&line, self.overlong);
            self.overlong = false;
        }
        self.st.close_group();
    }

    /// The table the events' names are interned in.
    pub fn strings(&self) -> &StringTable {
        &self.st.strings
    }

    /// Interns a consumer's own name in the events' table (cheaper than
    /// [`Decoder::strings_mut`], which must assume the table was replaced).
    pub fn intern(&mut self, name: &str) -> Sym {
        self.st.strings.intern(name)
    }

    /// Interns a consumer's own stack in the events' table (as [`Decoder::intern`]).
    pub fn intern_stack(&mut self, frames: impl IntoIterator<Item = Location>) -> StackHandle {
        self.st.strings.intern_stack(frames)
    }

    /// Mutable access to the table. The decoder's symbol cache is dropped, since the
    /// table may be replaced through this; to add names, prefer [`Decoder::intern`].
    pub fn strings_mut(&mut self) -> &mut StringTable {
        self.st.scratch.invalidate();
        &mut self.st.strings
    }

    /// Gives the string table back, e.g. to decode the next snapshot into it.
    pub fn into_strings(self) -> StringTable {
        self.st.strings
    }

    /// Totals so far.
    pub fn stats(&self) -> &Stats {
        &self.st.stats
    }

    /// The `perf script` fields the input lacks, in the order noticed: the trace is
    /// poorer (or empty) without them, and each says how to get it.
    pub fn missing_fields(&self) -> &[MissingField] {
        &self.st.missing
    }

    /// The first warnings, verbatim; [`Stats::warnings`] counts them all.
    pub fn warnings(&self) -> &[Warning] {
        &self.st.warnings
    }

    /// The underlying reader.
    pub fn get_ref(&self) -> &R {
        &self.reader
    }

    /// True once the input has ended (or failed) and every event was returned.
    pub fn is_finished(&self) -> bool {
        self.eof && self.st.ready.is_empty()
    }
}

fn push_capped(spill: &mut Vec<u8>, overlong: &mut bool, bytes: &[u8]) {
    if *overlong {
        return;
    }
    let room = MAX_LINE.saturating_sub(spill.len());
    if bytes.len() > room {
        // Only the start is needed, for the warning.
        spill.truncate(Warning::MAX_TEXT);
        *overlong = true;
    } else {
        spill.extend_from_slice(bytes);
    }
}

impl<R: BufRead + Send> EventSource for Decoder<R> {
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        Ok(Decoder::next_event(self)?)
    }
    fn strings(&self) -> &StringTable {
        &self.st.strings
    }
    fn stats(&self) -> Stats {
        self.st.stats
    }
    fn warnings(&self) -> Vec<Warning> {
        self.st.warnings.clone()
    }
    fn size(&self) -> Option<u64> {
        self.size
    }
    fn finish(self: Box<Self>) -> Finished {
        // A field perf script was run without: say which, and how to get it.
        let notices = self.st.missing.iter().map(|m| m.to_string()).collect();
        Finished {
            notices,
            ..Finished::new(self.st.strings)
        }
    }
}

impl<R: BufRead> Iterator for Decoder<R> {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}
