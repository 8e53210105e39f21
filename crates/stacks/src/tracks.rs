//! What both stack writers write the same way: process and thread tracks and their
//! names, trigger hits, and the events that are not part of a stack (extra events'
//! samples and ptwrite payloads).

use crate::sink::{Arg, ArgValue, TraceSink, ADDRESS_ARG, SYMBOL_ARG};
use ptscope_event::{EventData, ExtraEvent, Hit, Location, SourcePosition, StringTable, Thread};
use rustc_hash::FxHashMap;
use std::borrow::Cow;

/// The tracks of processes and threads, and the names perf gave them.
///
/// Threads sit in one track group per process; a group is named `COMM [pid=P]` after
/// its main thread (tid = pid), a track `COMM [tid=T]` after its thread, with the name
/// left out while perf has given none (`[pid=P]`, `[tid=T]`). Names come from
/// [`EventData::Comm`] and are inherited through [`EventData::Fork`], as the kernel
/// does; a later name (an exec, `pthread_setname_np`) renames the group or track.
/// A name from the writer's configuration (a command line) wins over perf's.
///
/// A thread whose process is unknown (perf script's default output prints the tid alone,
/// and no task events unless asked) has a group of its own named after its command,
/// `gzip [pid=?]`, renamed when the command changes (an exec): the text does not say
/// which threads share a process, and one nameless `[pid=?]` group for all of them
/// named none.
pub(crate) struct Tracks<T> {
    /// Latest name of each thread, by tid.
    comms: FxHashMap<u32, String>,
    /// Sink group of each process.
    groups: FxHashMap<GroupKey, u32>,
    /// Sink track of each thread.
    tracks: FxHashMap<Thread, T>,
}

impl<T: Copy> Default for Tracks<T> {
    fn default() -> Self {
        Tracks {
            comms: FxHashMap::default(),
            groups: FxHashMap::default(),
            tracks: FxHashMap::default(),
        }
    }
}

/// What a track group stands for: a process, or a thread whose process is unknown.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum GroupKey {
    Process(Option<u32>),
    Thread(u32),
}

impl GroupKey {
    fn of(thread: Thread) -> GroupKey {
        match (thread.pid, thread.tid) {
            (None, Some(tid)) => GroupKey::Thread(tid),
            (pid, _) => GroupKey::Process(pid),
        }
    }
}

fn id(v: Option<u32>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

impl<T: Copy> Tracks<T> {
    fn process_name(&self, pid: Option<u32>, configured: &FxHashMap<u32, String>) -> String {
        let shown = pid.and_then(|p| configured.get(&p).or_else(|| self.comms.get(&p)));
        match shown {
            Some(name) => format!("{name} [pid={}]", id(pid)),
            None => format!("[pid={}]", id(pid)),
        }
    }

    /// The name of the group `thread` is in: its process's, or for a thread whose
    /// process is unknown, its own command's.
    fn group_name(&self, thread: Thread, configured: &FxHashMap<u32, String>) -> String {
        match GroupKey::of(thread) {
            GroupKey::Thread(tid) => match self.comms.get(&tid) {
                Some(name) => format!("{name} [pid=?]"),
                None => "[pid=?]".into(),
            },
            GroupKey::Process(pid) => self.process_name(pid, configured),
        }
    }

    fn thread_name(&self, thread: Thread) -> String {
        match thread.tid.and_then(|t| self.comms.get(&t)) {
            Some(name) => format!("{name} [tid={}]", id(thread.tid)),
            None => format!("[tid={}]", id(thread.tid)),
        }
    }

    /// The track of a thread seen for the first time, and its group (created with the
    /// process's first thread).
    pub(crate) fn allocate<S: TraceSink<Thread = T>>(
        &mut self,
        sink: &mut S,
        thread: Thread,
        configured: &FxHashMap<u32, String>,
    ) -> (T, u32) {
        let key = GroupKey::of(thread);
        let group = match self.groups.get(&key) {
            Some(&g) => g,
            None => {
                let g = sink.allocate_pid(&self.group_name(thread, configured));
                self.groups.insert(key, g);
                g
            }
        };
        let track = sink.allocate_thread(group, &self.thread_name(thread));
        self.tracks.insert(thread, track);
        (track, group)
    }

    /// Takes in a [`EventData::Comm`] or [`EventData::Fork`] of `thread` (anything else
    /// is ignored), renaming what was already allocated under the old name.
    pub(crate) fn observe<S: TraceSink<Thread = T>>(
        &mut self,
        sink: &mut S,
        thread: Thread,
        data: &EventData,
        strings: &StringTable,
        configured: &FxHashMap<u32, String>,
    ) {
        let Some(tid) = thread.tid else {
            return;
        };
        let name = match data {
            EventData::Comm { name, .. } => strings.get(*name).to_string(),
            EventData::Fork { parent } => {
                match parent.tid.and_then(|p| self.comms.get(&p)) {
                    Some(n) => n.clone(),
                    // A parent perf never named: the child stays unnamed until it is.
                    None => return,
                }
            }
            _ => return,
        };
        if self.comms.get(&tid) == Some(&name) {
            return;
        }
        self.comms.insert(tid, name);
        if let Some(&track) = self.tracks.get(&thread) {
            sink.rename_thread(track, &self.thread_name(thread));
        }
        if thread.pid == Some(tid) || thread.pid.is_none() {
            if let Some(&group) = self.groups.get(&GroupKey::of(thread)) {
                if !configured.contains_key(&tid) {
                    sink.rename_pid(group, &self.group_name(thread, configured));
                }
            }
        }
    }
}

/// Writes trigger hits as `hit SYMBOL` slices on a track of their own. A stop
/// indicator's passed start time begins the slice, if it is plausible (an old stop
/// indicator passes garbage).
pub(crate) fn write_hits<S: TraceSink>(sink: &mut S, hits: &[Hit], base_time: u64) {
    if hits.is_empty() {
        return;
    }
    let pid = sink.allocate_pid("Snapshot symbol hits");
    let thread = sink.allocate_thread(pid, "hits");
    for hit in hits {
        let time = hit.time.wrapping_sub(base_time) as i64;
        let valid = hit.passed_time > base_time && hit.passed_time < hit.time;
        let start = if hit.is_stop_indicator && valid {
            hit.passed_time.wrapping_sub(base_time) as i64
        } else {
            time
        };
        let mut args = Vec::with_capacity(5);
        if hit.is_stop_indicator {
            args.push(Arg::new(
                "timestamp_passed",
                ArgValue::Int(hit.passed_time as i64),
            ));
            args.push(Arg::new("arg", ArgValue::Int(hit.passed_value)));
        }
        args.push(Arg::new("timestamp", ArgValue::Int(hit.time as i64)));
        args.push(Arg::new("tid", ArgValue::Int(hit.tid as i64)));
        args.push(Arg::new("ip", ArgValue::Pointer(hit.ip)));
        sink.duration_complete(thread, &format!("hit {}", hit.symbol), start, time, &args);
    }
}

/// Where and when an event that is not part of the stack happened.
#[derive(Clone, Copy)]
pub(crate) struct Mark<'a> {
    /// The thread it happened on.
    pub(crate) thread: Thread,
    /// Trace time (ns).
    pub(crate) time: i64,
    /// The instruction it happened at.
    pub(crate) location: &'a Location,
}

impl<'a> Mark<'a> {
    /// What happened on `thread` at `time`, at `location`.
    pub(crate) fn at(thread: Thread, time: i64, location: &'a Location) -> Self {
        Mark {
            thread,
            time,
            location,
        }
    }

    /// Writes the mark as a zero-length slice `name` on `track`, with its place and
    /// `value` as args.
    fn write<S: TraceSink>(
        &self,
        sink: &mut S,
        track: S::Thread,
        name: &str,
        value: Arg<'_>,
        strings: &StringTable,
    ) {
        let mut args = vec![
            Arg::new("timestamp", ArgValue::Int(self.time)),
            Arg::new(
                "symbol",
                ArgValue::Str(strings.display(self.location.symbol)),
            ),
            Arg::new("addr", ArgValue::Pointer(self.location.ip)),
            value,
        ];
        if let Some(pid) = self.thread.pid {
            args.push(Arg::new("pid", ArgValue::Int(pid as i64)));
        }
        if let Some(tid) = self.thread.tid {
            args.push(Arg::new("tid", ArgValue::Int(tid as i64)));
        }
        sink.duration_complete(track, name, self.time, self.time, &args);
    }

    /// Writes a ptwrite's payload as a `PTWRITE` slice on its thread's `track`.
    pub(crate) fn write_ptwrite<S: TraceSink>(
        &self,
        sink: &mut S,
        track: S::Thread,
        data: u64,
        strings: &StringTable,
    ) {
        let payload = format!("0x{data:x}");
        let value = Arg::new("data", ArgValue::Str(&payload));
        self.write(sink, track, "PTWRITE", value, strings);
    }
}

/// A thread's tracks for extra events' samples, one per [`ExtraEvent`], made in the
/// thread's group on first use.
pub(crate) struct ExtraTracks<T> {
    group: u32,
    tracks: [Option<T>; 2],
}

impl<T: Copy> ExtraTracks<T> {
    /// No tracks yet, to be made in track group `group`.
    pub(crate) fn new(group: u32) -> Self {
        ExtraTracks {
            group,
            tracks: [None, None],
        }
    }

    /// Writes a sample of `event` (`count` occurrences at `mark`) on its track, which is
    /// made even when the sample is not written (`write` false: outside a filter range).
    pub(crate) fn write_sample<S: TraceSink<Thread = T>>(
        &mut self,
        sink: &mut S,
        event: ExtraEvent,
        mark: Mark<'_>,
        count: u64,
        write: bool,
        strings: &StringTable,
    ) {
        let idx = match event {
            ExtraEvent::BranchMisses => 0,
            ExtraEvent::CacheMisses => 1,
        };
        let track = match self.tracks[idx] {
            Some(t) => t,
            None => {
                let t = sink.allocate_thread(self.group, event.name());
                self.tracks[idx] = Some(t);
                t
            }
        };
        if write {
            let value = Arg::new("count", ArgValue::Int(count as i64));
            mark.write(sink, track, event.name(), value, strings);
        }
    }
}

/// A frame's begin as both writers show it: its name, marked when its start was
/// inferred and the output asks for it (the transcripts), and its args.
pub(crate) struct FrameBegin<'a> {
    name: Cow<'a, str>,
    args: [Arg<'a>; 6],
    n: usize,
}

impl<'a> FrameBegin<'a> {
    /// The begin of frame `name` at `address` (if known), starting at `debug` in the
    /// source; `inferred`: its start is a guess, shown in its name if `annotate`.
    pub(crate) fn new(
        name: &'a str,
        address: Option<u64>,
        debug: Option<&'a SourcePosition>,
        inferred: bool,
        annotate: bool,
    ) -> Self {
        let mut args: [Arg<'a>; 6] = [Arg::new("", ArgValue::Int(0)); 6];
        let mut n = 0;
        if let Some(a) = address {
            args[n] = Arg::new(ADDRESS_ARG, ArgValue::Pointer(a));
            n += 1;
        }
        if let Some(pos) = debug {
            args[n] = Arg::new("line", ArgValue::Int(pos.line));
            args[n + 1] = Arg::new("col", ArgValue::Int(pos.col));
            n += 2;
        }
        args[n] = Arg::new(SYMBOL_ARG, ArgValue::Interned(name));
        n += 1;
        if let Some(f) = debug.and_then(|p| p.file.as_deref()) {
            args[n] = Arg::new("file", ArgValue::Interned(f));
            n += 1;
        }
        if inferred {
            args[n] = Arg::new("inferred_start_time", ArgValue::Interned("true"));
            n += 1;
        }
        let name = if inferred && annotate {
            Cow::Owned(format!("{name} [inferred start time]"))
        } else {
            Cow::Borrowed(name)
        };
        FrameBegin { name, args, n }
    }

    /// The slice's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether the slice is named by the frame's name as given (not annotated).
    pub(crate) fn plain(&self) -> bool {
        matches!(self.name, Cow::Borrowed(_))
    }

    /// The slice's args.
    pub(crate) fn args(&self) -> &[Arg<'a>] {
        &self.args[..self.n]
    }
}
