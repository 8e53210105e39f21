//! Structural checks of a decoded trace, shared by the tests of every ptscope crate.
//!
//! [`validate`] replays the records the way Perfetto's slice tracker and the Python
//! `fxt` package would and reports whatever either of them would drop, reject or draw
//! wrongly: unmatched or mismatched ends, per-thread time going backwards, complete
//! slices that overlap their parent, koids that do not fit 32 bits, records and
//! argument types the readers do not support, and read errors. It also counts events
//! per thread and per name so tests can assert on content.

use crate::format::object;
use crate::reader::{ArgValue, EventKind, ReadError, Reader, Record};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Most issues kept in [`Report::issues`]; the rest are only counted.
pub const MAX_ISSUES: usize = 1000;

/// A (process koid, thread koid) pair.
pub type ThreadKey = (u64, u64);

/// Something a trace viewer would reject, drop or show wrongly.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum IssueKind {
    /// The input could not be parsed past this point.
    Read(ReadError),
    /// The first record is not the magic record (Perfetto will not recognise the file).
    MagicNotFirst,
    /// A non-metadata record before any provider info (the Python reader rejects it).
    NoProviderInfo,
    /// An event before any initialization record (the Python reader rejects it).
    NoInitialization,
    /// A begin, end, instant or complete start earlier than the previous one on its thread.
    TimeWentBackwards {
        /// Thread.
        thread: ThreadKey,
        /// Previous timestamp.
        previous: u64,
        /// This event's timestamp.
        timestamp: u64,
    },
    /// An end with no open begin on its thread.
    UnmatchedEnd {
        /// Thread.
        thread: ThreadKey,
        /// The end's name.
        name: String,
    },
    /// An end whose name or category differs from the begin it closes.
    EndMismatch {
        /// Thread.
        thread: ThreadKey,
        /// `category:name` of the open begin.
        expected: String,
        /// `category:name` of the end.
        found: String,
    },
    /// A begin never closed by the end of the trace.
    UnclosedBegin {
        /// Thread.
        thread: ThreadKey,
        /// Its name.
        name: String,
    },
    /// A complete event whose end is before its start (Perfetto drops it).
    CompleteEndsBeforeStart {
        /// Thread.
        thread: ThreadKey,
        /// Its name.
        name: String,
    },
    /// A complete slice that ends after the slice enclosing it (Perfetto drops it).
    CompleteOverlapsParent {
        /// Thread.
        thread: ThreadKey,
        /// Its name.
        name: String,
    },
    /// A begin still open when an enclosing complete slice ended (Perfetto cuts it).
    BeginOutlivesParent {
        /// Thread.
        thread: ThreadKey,
        /// Its name.
        name: String,
    },
    /// A koid of 2^32 or more (Perfetto truncates koids to 32 bits).
    KoidTooLarge(u64),
    /// A thread kernel object without a koid argument `"process"`.
    ThreadWithoutProcess {
        /// The thread's koid.
        koid: u64,
    },
    /// A kernel object type other than process or thread (the Python reader rejects it).
    UnsupportedKernelObject(u8),
    /// An argument type the readers do not support.
    UnsupportedArgType(u8),
    /// An event type outside the spec.
    UnsupportedEventType(u8),
    /// A record type that Perfetto or the Python reader cannot handle.
    UnsupportedRecord {
        /// Record type.
        record_type: u8,
        /// The header word.
        header: u64,
    },
    /// A counter argument that is not a number (Perfetto ignores it).
    NonNumericCounterArg {
        /// Counter name.
        counter: String,
        /// Argument name.
        arg: String,
    },
}

/// One issue, with the index of the record (0-based) it was found at.
#[derive(Clone, Debug, PartialEq)]
pub struct Issue {
    /// Index of the record in the file.
    pub record: u64,
    /// What is wrong.
    pub kind: IssueKind,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "record #{}: ", self.record)?;
        match &self.kind {
            IssueKind::Read(e) => write!(f, "read error: {e}"),
            IssueKind::MagicNotFirst => write!(f, "first record is not the FXT magic"),
            IssueKind::NoProviderInfo => write!(f, "record before any provider info"),
            IssueKind::NoInitialization => write!(f, "event before the initialization record"),
            IssueKind::TimeWentBackwards {
                thread,
                previous,
                timestamp,
            } => write!(
                f,
                "time went backwards on {thread:?}: {timestamp} after {previous}"
            ),
            IssueKind::UnmatchedEnd { thread, name } => {
                write!(f, "end {name:?} on {thread:?} with no open begin")
            }
            IssueKind::EndMismatch {
                thread,
                expected,
                found,
            } => write!(f, "end {found:?} on {thread:?} closes begin {expected:?}"),
            IssueKind::UnclosedBegin { thread, name } => {
                write!(f, "begin {name:?} on {thread:?} never ends")
            }
            IssueKind::CompleteEndsBeforeStart { thread, name } => {
                write!(f, "complete {name:?} on {thread:?} ends before it starts")
            }
            IssueKind::CompleteOverlapsParent { thread, name } => {
                write!(f, "complete {name:?} on {thread:?} outlives its parent")
            }
            IssueKind::BeginOutlivesParent { thread, name } => write!(
                f,
                "begin {name:?} on {thread:?} outlives the complete enclosing it"
            ),
            IssueKind::KoidTooLarge(k) => write!(f, "koid {k} does not fit in 32 bits"),
            IssueKind::ThreadWithoutProcess { koid } => {
                write!(f, "thread object {koid} has no \"process\" koid argument")
            }
            IssueKind::UnsupportedKernelObject(t) => write!(f, "kernel object type {t}"),
            IssueKind::UnsupportedArgType(t) => write!(f, "argument type {t}"),
            IssueKind::UnsupportedEventType(t) => write!(f, "event type {t}"),
            IssueKind::UnsupportedRecord {
                record_type,
                header,
            } => write!(
                f,
                "unsupported record type {record_type} (header {header:#x})"
            ),
            IssueKind::NonNumericCounterArg { counter, arg } => {
                write!(f, "counter {counter:?} has non-numeric argument {arg:?}")
            }
        }
    }
}

/// Event counts and extent of one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadSummary {
    /// Duration begins.
    pub begins: u64,
    /// Duration ends.
    pub ends: u64,
    /// Duration completes.
    pub completes: u64,
    /// Instants.
    pub instants: u64,
    /// Counter samples.
    pub counters: u64,
    /// Async, flow and unknown events.
    pub other: u64,
    /// Deepest nesting of begin and complete slices seen.
    pub max_depth: usize,
    /// Earliest timestamp of any event.
    pub first_timestamp: Option<u64>,
    /// Latest timestamp of any event (complete ends included).
    pub last_timestamp: Option<u64>,
}

/// Name and owning process of a thread kernel object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadName {
    /// The `"process"` koid argument, if present.
    pub process: Option<u64>,
    /// Name.
    pub name: String,
}

/// The result of [`validate`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Records read.
    pub records: u64,
    /// Event records read.
    pub events: u64,
    /// The first [`MAX_ISSUES`] issues.
    pub issues: Vec<Issue>,
    /// All issues, including those not kept.
    pub issue_count: u64,
    /// Per-thread counts.
    pub threads: BTreeMap<ThreadKey, ThreadSummary>,
    /// Events per name, all threads together.
    pub names: HashMap<String, u64>,
    /// Process names by koid (from kernel objects).
    pub processes: BTreeMap<u64, String>,
    /// Thread names by koid (from kernel objects).
    pub thread_names: BTreeMap<u64, ThreadName>,
    /// From the initialization record.
    pub ticks_per_second: Option<u64>,
}

impl Report {
    /// Whether no issue was found.
    pub fn is_ok(&self) -> bool {
        self.issue_count == 0
    }

    /// Events with this name, over all threads.
    pub fn count(&self, name: &str) -> u64 {
        self.names.get(name).copied().unwrap_or(0)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} records, {} events, {} threads, {} processes, {} distinct names, {} issues",
            self.records,
            self.events,
            self.threads.len(),
            self.processes.len(),
            self.names.len(),
            self.issue_count
        )?;
        for issue in &self.issues {
            writeln!(f, "  {issue}")?;
        }
        if self.issue_count > self.issues.len() as u64 {
            writeln!(
                f,
                "  ... and {} more",
                self.issue_count - self.issues.len() as u64
            )?;
        }
        Ok(())
    }
}

/// An open slice on a thread's stack.
struct Frame {
    /// Whether this is a begin (end unknown) rather than a complete.
    begin: bool,
    category: String,
    name: String,
    /// End time for completes.
    end: u64,
    /// Latest time this slice may last: the end of the nearest enclosing complete.
    limit: u64,
}

#[derive(Default)]
struct ThreadState {
    stack: Vec<Frame>,
    last: Option<u64>,
}

impl ThreadState {
    /// Drops completes that ended by `t`, as Perfetto's slice tracker does.
    fn pop_finished(&mut self, t: u64) {
        while let Some(f) = self.stack.last() {
            if !f.begin && f.end <= t {
                self.stack.pop();
            } else {
                break;
            }
        }
    }

    fn limit(&self) -> u64 {
        self.stack.last().map_or(u64::MAX, |f| f.limit)
    }
}

struct Checker {
    report: Report,
    states: HashMap<ThreadKey, ThreadState>,
    index: u64,
    saw_provider: bool,
    saw_init: bool,
}

impl Checker {
    fn issue(&mut self, kind: IssueKind) {
        self.report.issue_count += 1;
        if self.report.issues.len() < MAX_ISSUES {
            self.report.issues.push(Issue {
                record: self.index,
                kind,
            });
        }
    }

    fn koid(&mut self, k: u64) {
        if k > u64::from(u32::MAX) {
            self.issue(IssueKind::KoidTooLarge(k));
        }
    }

    fn record(&mut self, r: &Record<'_>) {
        if self.index == 0 && !matches!(r, Record::Magic) {
            self.issue(IssueKind::MagicNotFirst);
        }
        let is_metadata = matches!(
            r,
            Record::Magic
                | Record::ProviderInfo { .. }
                | Record::ProviderSection { .. }
                | Record::ProviderEvent { .. }
        ) || matches!(r, Record::Other { record_type, .. } if *record_type == 0);
        if !is_metadata && !self.saw_provider {
            self.saw_provider = true; // report once
            self.issue(IssueKind::NoProviderInfo);
        }
        match r {
            Record::ProviderInfo { .. } => self.saw_provider = true,
            Record::Initialization { ticks_per_second } => {
                self.saw_init = true;
                self.report.ticks_per_second = Some(*ticks_per_second);
            }
            Record::Thread { pid, tid, .. } => {
                self.koid(*pid);
                self.koid(*tid);
            }
            Record::KernelObject(k) => {
                self.koid(k.koid);
                for a in k.args.iter() {
                    self.arg(a.value);
                }
                match k.obj_type {
                    object::PROCESS => {
                        self.report.processes.insert(k.koid, k.name.to_string());
                    }
                    object::THREAD => {
                        let process = match k.args.get("process") {
                            Some(ArgValue::Koid(p)) => Some(p),
                            _ => None,
                        };
                        if process.is_none() {
                            self.issue(IssueKind::ThreadWithoutProcess { koid: k.koid });
                        }
                        self.report.thread_names.insert(
                            k.koid,
                            ThreadName {
                                process,
                                name: k.name.to_string(),
                            },
                        );
                    }
                    t => self.issue(IssueKind::UnsupportedKernelObject(t)),
                }
            }
            Record::Event(e) => self.event(e),
            Record::Other {
                record_type,
                header,
                ..
            } => {
                // Blobs, userspace objects, scheduling and log records are fine for
                // both readers; everything else is rejected or desyncs one of them.
                let fine = matches!(*record_type, 5 | 6 | 8 | 9);
                if !fine {
                    self.issue(IssueKind::UnsupportedRecord {
                        record_type: *record_type,
                        header: *header,
                    });
                }
            }
            Record::Magic
            | Record::ProviderSection { .. }
            | Record::ProviderEvent { .. }
            | Record::String { .. } => {}
        }
    }

    fn arg(&mut self, v: ArgValue<'_>) {
        if let ArgValue::Unknown { arg_type } = v {
            self.issue(IssueKind::UnsupportedArgType(arg_type));
        }
    }

    fn event(&mut self, e: &crate::reader::Event<'_>) {
        self.report.events += 1;
        if !self.saw_init {
            self.saw_init = true; // report once
            self.issue(IssueKind::NoInitialization);
        }
        self.koid(e.pid);
        self.koid(e.tid);
        for a in e.args.iter() {
            self.arg(a.value);
        }
        match self.report.names.get_mut(e.name) {
            Some(c) => *c += 1,
            None => {
                self.report.names.insert(e.name.to_string(), 1);
            }
        }
        let key = (e.pid, e.tid);
        let mut issues = Vec::new();
        let summary = self.report.threads.entry(key).or_default();
        let state = self.states.entry(key).or_default();
        let last_ts = match e.kind {
            EventKind::Complete { end } => end.max(e.timestamp),
            _ => e.timestamp,
        };
        summary.first_timestamp = Some(
            summary
                .first_timestamp
                .map_or(e.timestamp, |t| t.min(e.timestamp)),
        );
        summary.last_timestamp = Some(summary.last_timestamp.map_or(last_ts, |t| t.max(last_ts)));
        let ordered = matches!(
            e.kind,
            EventKind::Begin | EventKind::End | EventKind::Instant | EventKind::Complete { .. }
        );
        if ordered {
            if let Some(prev) = state.last {
                if e.timestamp < prev {
                    issues.push(IssueKind::TimeWentBackwards {
                        thread: key,
                        previous: prev,
                        timestamp: e.timestamp,
                    });
                }
            }
            state.last = Some(state.last.map_or(e.timestamp, |p| p.max(e.timestamp)));
        }
        let t = e.timestamp;
        match e.kind {
            EventKind::Begin => {
                summary.begins += 1;
                state.pop_finished(t);
                let limit = state.limit();
                state.stack.push(Frame {
                    begin: true,
                    category: e.category.to_string(),
                    name: e.name.to_string(),
                    end: 0,
                    limit,
                });
            }
            EventKind::End => {
                summary.ends += 1;
                state.pop_finished(t);
                // A complete still open here started inside this begin but ends after it.
                while state.stack.last().is_some_and(|f| !f.begin) {
                    if let Some(f) = state.stack.pop() {
                        issues.push(IssueKind::CompleteOverlapsParent {
                            thread: key,
                            name: f.name,
                        });
                    }
                }
                match state.stack.pop() {
                    None => issues.push(IssueKind::UnmatchedEnd {
                        thread: key,
                        name: e.name.to_string(),
                    }),
                    Some(f) => {
                        if f.category != e.category || f.name != e.name {
                            issues.push(IssueKind::EndMismatch {
                                thread: key,
                                expected: format!("{}:{}", f.category, f.name),
                                found: format!("{}:{}", e.category, e.name),
                            });
                        }
                        if t > f.limit {
                            issues.push(IssueKind::BeginOutlivesParent {
                                thread: key,
                                name: f.name,
                            });
                        }
                    }
                }
            }
            EventKind::Complete { end } => {
                summary.completes += 1;
                state.pop_finished(t);
                let end = if end < t {
                    issues.push(IssueKind::CompleteEndsBeforeStart {
                        thread: key,
                        name: e.name.to_string(),
                    });
                    t
                } else {
                    end
                };
                let limit = state.limit();
                if end > limit {
                    issues.push(IssueKind::CompleteOverlapsParent {
                        thread: key,
                        name: e.name.to_string(),
                    });
                } else {
                    state.stack.push(Frame {
                        begin: false,
                        category: String::new(),
                        name: e.name.to_string(),
                        end,
                        limit: end,
                    });
                }
            }
            EventKind::Instant => {
                summary.instants += 1;
                state.pop_finished(t);
            }
            EventKind::Counter { .. } => {
                summary.counters += 1;
                for a in e.args.iter() {
                    if !a.value.is_numeric() {
                        issues.push(IssueKind::NonNumericCounterArg {
                            counter: e.name.to_string(),
                            arg: a.name.to_string(),
                        });
                    }
                }
            }
            EventKind::Unknown(t) => {
                summary.other += 1;
                issues.push(IssueKind::UnsupportedEventType(t));
            }
            _ => summary.other += 1,
        }
        summary.max_depth = summary.max_depth.max(state.stack.len());
        for i in issues {
            self.issue(i);
        }
    }

    fn finish(mut self) -> Report {
        let mut open: Vec<(ThreadKey, String)> = Vec::new();
        for (key, state) in &self.states {
            for f in state.stack.iter().filter(|f| f.begin) {
                open.push((*key, f.name.clone()));
            }
        }
        open.sort();
        for (thread, name) in open {
            self.issue(IssueKind::UnclosedBegin { thread, name });
        }
        self.report
    }
}

/// Checks a stream of records (as produced by [`Reader`]) and summarises it.
pub fn validate<'a, I>(records: I) -> Report
where
    I: IntoIterator<Item = Result<Record<'a>, ReadError>>,
{
    let mut c = Checker {
        report: Report::default(),
        states: HashMap::new(),
        index: 0,
        saw_provider: false,
        saw_init: false,
    };
    for r in records {
        match r {
            Ok(r) => c.record(&r),
            Err(e) => {
                c.issue(IssueKind::Read(e));
                break;
            }
        }
        c.report.records += 1;
        c.index += 1;
    }
    c.finish()
}

/// Reads and checks an uncompressed FXT byte slice.
pub fn validate_bytes(data: &[u8]) -> Report {
    validate(Reader::new(data))
}
