//! [`FxtSink`]: a [`TraceSink`] that writes a Fuchsia trace for Perfetto.
//!
//! Mapping choices:
//! - Track groups and threads get synthetic koids from one counter starting at 1, as
//!   magic-trace does, so they never collide and always fit Perfetto's 32-bit koids.
//! - Every event has the empty category.
//! - [`ArgValue::Interned`] becomes an indexed (table) string, [`ArgValue::Str`] an
//!   inline string: one-off values should not evict recurring names from the table.
//! - A duration end is written with the name of the begin it closes (kept on a
//!   per-thread stack), because the Python `fxt` reader rejects ends whose name
//!   differs; an end with nothing open is dropped (Perfetto ignores it anyway).
//! - Negative times become 0 and a complete ending before it starts is shortened to
//!   zero length: FXT ticks are unsigned and Perfetto drops inverted slices.
//! - Counters get one id per counter name.
//! - A begin is held back until its thread's next event; when that is its end (a leaf
//!   call: most calls are), the two are written as one complete event, 3 words instead
//!   of 4 and one record instead of two. Viewers show the same slice; the bytes saved
//!   are what gzip and the reader would pay for.
//! - A rename writes the process's or thread's kernel object record again with the
//!   same koid; Perfetto and the `fxt` checker keep the last name.
//! - A numbered name ([`TraceSink::duration_begin_name`]) keeps its text, copied at its
//!   first use, and its string-table token by number: its slices are named without
//!   looking the text up (once per fragment, when the table was cut), and its open
//!   slices hold the number, not a copy of the text.

use crate::TraceOutput;
use ptscope_fxt::{
    format::MAX_ARGS, same_text, Arg as FxtArg, ArgValue as FxtValue, FxtWriter, NameToken,
    ThreadId,
};
use ptscope_stacks::{Arg, ArgValue, Name, TraceSink};
use std::collections::HashMap;
use std::io::{self, Write};

/// The sink's handle for a thread track.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FxtThread(u32);

/// What the sink changed or dropped to keep the trace valid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Duration ends with no open begin on their thread.
    pub dropped_ends: u64,
    /// Negative timestamps raised to 0.
    pub clamped_times: u64,
    /// Complete slices whose end was before their start.
    pub clamped_completes: u64,
    /// Arguments beyond the format's 15 per event.
    pub dropped_args: u64,
    /// Events whose thread handle did not come from this sink.
    pub invalid_threads: u64,
    /// Koid allocations after the 32-bit koid space ran out (the last koid is reused).
    pub koid_overflows: u64,
}

/// Numbers of [`Name`]s the sink keeps an entry for; a larger one goes by its text
/// (the entries are a vector indexed by number).
const MAX_KEYS: u32 = 1 << 20;
/// An open slice named by its text, not by a numbered name.
const NO_KEY: u32 = u32::MAX;

/// A numbered name: its text, copied at its first use, and its string-table token as
/// last used (stale once the table has been cut or the slot reused: then the text is
/// looked up again).
struct Keyed {
    text: Box<str>,
    /// Where the caller's text was when last compared: the same place and length is
    /// the same name (its text is compared only when it moved, or another text comes).
    at: usize,
    token: NameToken,
}

/// The name of an open slice.
struct OpenName {
    /// The number of the [`Keyed`] entry naming it, or [`NO_KEY`]: then `text` and `token`.
    key: u32,
    /// The name (kept for its capacity when the slice is keyed).
    text: String,
    token: NameToken,
}

impl OpenName {
    /// The slice's text and token.
    #[inline]
    fn get<'a>(&'a self, names: &'a [Option<Keyed>]) -> (&'a str, NameToken) {
        if self.key != NO_KEY {
            if let Some(Some(k)) = names.get(self.key as usize) {
                return (&k.text, k.token);
            }
        }
        (&self.text, self.token)
    }

    /// Keeps `token`, the name's token as the writer now has it.
    #[inline]
    fn set_token(&mut self, names: &mut [Option<Keyed>], token: NameToken) {
        match names.get_mut(self.key as usize) {
            Some(Some(k)) => k.token = token,
            _ => self.token = token,
        }
    }
}

/// A thread track and the names of its open slices.
struct SinkThread {
    id: ThreadId,
    /// The thread's and its group's koids, to write its name record again on a rename.
    koid: u32,
    group: u32,
    /// Names of open begins and their string-table tokens (the end reuses the slot
    /// without a lookup); entries past `depth` are kept for their capacity.
    open: Vec<OpenName>,
    depth: usize,
    /// The time of the innermost open begin when it is not written yet (its name and
    /// token are that slice's entry in `open`). Only begins without arguments are held:
    /// copying arguments until the end cost more than the bytes it saved.
    held: Option<u64>,
}

/// A [`TraceSink`] writing FXT through [`FxtWriter`]; the writers' warnings (decode
/// errors met) go to `H`, as the caller wants them shown: the sink prints nothing.
pub struct FxtSink<W: Write, H: FnMut(&str) = fn(&str)> {
    writer: FxtWriter<W>,
    next_koid: u32,
    threads: Vec<SinkThread>,
    counter_ids: HashMap<String, u64>,
    /// Numbered names by number ([`TraceSink::duration_begin_name`]).
    names: Vec<Option<Keyed>>,
    stats: SinkStats,
    on_warning: H,
}

impl<W: Write> FxtSink<W> {
    /// Starts a trace on `out` (the FXT header is written immediately); warnings are
    /// dropped.
    pub fn new(out: W) -> Self {
        FxtSink::with_warnings(out, (|_: &str| {}) as fn(&str))
    }
}

impl<W: Write, H: FnMut(&str)> FxtSink<W, H> {
    /// Starts a trace on `out`, handing each warning to `on_warning`.
    pub fn with_warnings(out: W, on_warning: H) -> Self {
        FxtSink::over(FxtWriter::new(out), 1, on_warning)
    }

    /// A sink writing a fragment of a trace (see [`FxtWriter::fragment`]): no header,
    /// threads attached by the koids another sink gave them ([`FxtSink::attach_thread`]).
    pub fn fragment(out: W, on_warning: H) -> Self {
        FxtSink::over(FxtWriter::fragment(out), u32::MAX, on_warning)
    }

    /// A sink over `writer`, numbering the kernel objects it makes from `next_koid`.
    fn over(mut writer: FxtWriter<W>, next_koid: u32, on_warning: H) -> Self {
        // Every frame begin names its arguments so.
        writer.frequent_arg_names(&[ptscope_stacks::ADDRESS_ARG, ptscope_stacks::SYMBOL_ARG]);
        FxtSink {
            writer,
            next_koid,
            threads: Vec::new(),
            counter_ids: HashMap::new(),
            names: Vec::new(),
            stats: SinkStats::default(),
            on_warning,
        }
    }

    /// A track for thread `tid` of process `pid` (koids another sink allocated and
    /// named), without writing its kernel object again.
    pub fn attach_thread(&mut self, pid: u32, tid: u32) -> FxtThread {
        let id = self.writer.thread(pid, tid);
        let handle = FxtThread(self.threads.len() as u32);
        self.threads.push(SinkThread {
            id,
            koid: tid,
            group: pid,
            open: Vec::new(),
            depth: 0,
            held: None,
        });
        handle
    }

    /// The koids of a thread track: `(process, thread)`.
    pub fn thread_koids(&self, t: FxtThread) -> Option<(u32, u32)> {
        self.threads.get(t.0 as usize).map(|th| (th.group, th.koid))
    }

    /// Ends the current fragment ([`FxtWriter::cut`]), with every held begin in it.
    pub fn cut(&mut self) {
        self.release_all();
        self.writer.cut();
    }

    /// The underlying writer. Begins the sink holds back (see the module's notes) are
    /// not in it yet: [`FxtSink::cut`] and [`FxtSink::finish`] write them.
    pub fn writer_mut(&mut self) -> &mut FxtWriter<W> {
        &mut self.writer
    }

    /// What the sink adjusted so far.
    pub fn stats(&self) -> &SinkStats {
        &self.stats
    }

    /// What the underlying writer did to stay within FXT limits.
    pub fn writer_stats(&self) -> &ptscope_fxt::WriterStats {
        self.writer.stats()
    }

    /// The first I/O error met so far, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.writer.io_error()
    }

    /// Flushes the trace and returns the output, or the first I/O error.
    pub fn finish(mut self) -> io::Result<W> {
        self.release_all();
        self.writer.finish()
    }

    /// Writes every held begin.
    fn release_all(&mut self) {
        for i in 0..self.threads.len() {
            self.release(i);
        }
    }

    /// Writes thread `i`'s held begin, if any: something other than its end follows.
    #[inline]
    fn release(&mut self, i: usize) {
        if self.threads.get(i).is_some_and(|th| th.held.is_some()) {
            self.release_held(i);
        }
    }

    #[inline(never)]
    fn release_held(&mut self, i: usize) {
        let FxtSink {
            writer,
            threads,
            names,
            ..
        } = self;
        let Some(th) = threads.get_mut(i) else {
            return;
        };
        let Some(time) = th.held.take() else {
            return;
        };
        let Some(open) = th.depth.checked_sub(1).and_then(|d| th.open.get_mut(d)) else {
            return;
        };
        let (name, token) = open.get(names);
        let token = writer.begin_by_token(th.id, "", token, name, time, &[]);
        open.set_token(names, token);
    }

    fn koid(&mut self) -> u32 {
        let k = self.next_koid;
        match self.next_koid.checked_add(1) {
            Some(n) => self.next_koid = n,
            None => self.stats.koid_overflows += 1,
        }
        k
    }

    fn time(&mut self, t: i64) -> u64 {
        u64::try_from(t).unwrap_or_else(|_| {
            self.stats.clamped_times += 1;
            0
        })
    }

    /// Converts up to 15 arguments into `out`; returns how many.
    fn convert<'a>(stats: &mut SinkStats, args: &[Arg<'a>], out: &mut [FxtArg<'a>]) -> usize {
        // `out` is at most MAX_ARGS wide, and as wide as `args` when narrower.
        let n = args.len().min(out.len()).min(MAX_ARGS);
        stats.dropped_args += (args.len() - n) as u64;
        for (a, o) in args.iter().zip(out.iter_mut()) {
            let value = match a.value {
                ArgValue::Int(v) => FxtValue::Int(v),
                ArgValue::Str(s) => FxtValue::InlineStr(s),
                ArgValue::Interned(s) => FxtValue::Str(s),
                ArgValue::Pointer(p) => FxtValue::Pointer(p),
                ArgValue::Float(f) => FxtValue::Double(f),
            };
            *o = FxtArg::new(a.name, value);
        }
        n
    }

    /// `args` converted ([`FxtSink::convert`]) into an array only as wide as needed,
    /// handed to `write`: a frame's begin has two to six, and clearing the format's
    /// fifteen on every begin cost more than converting them.
    #[inline]
    fn with_converted<'a, R>(
        stats: &mut SinkStats,
        args: &[Arg<'a>],
        write: impl FnOnce(&[FxtArg<'a>]) -> R,
    ) -> R {
        if args.len() <= FEW_ARGS {
            let mut buf = [EMPTY_ARG; FEW_ARGS];
            let n = Self::convert(stats, args, &mut buf);
            write(&buf[..n])
        } else {
            let mut buf = [EMPTY_ARG; MAX_ARGS];
            let n = Self::convert(stats, args, &mut buf);
            write(&buf[..n])
        }
    }

    /// Ends `thread`'s innermost open slice (its begin's name: the end names it too).
    fn end_open(&mut self, thread: FxtThread, time: u64, args: &[FxtArg<'_>]) {
        let i = thread.0 as usize;
        if !args.is_empty()
            || self
                .threads
                .get(i)
                .is_some_and(|th| th.held.is_some_and(|h| time < h))
        {
            // Not a plain leaf end: a complete event would lose the args or invert.
            self.release(i);
        }
        let FxtSink {
            writer,
            threads,
            stats,
            names,
            ..
        } = self;
        let Some(th) = threads.get_mut(thread.0 as usize) else {
            stats.invalid_threads += 1;
            return;
        };
        let Some(depth) = th.depth.checked_sub(1) else {
            stats.dropped_ends += 1;
            return;
        };
        th.depth = depth;
        let held = th.held.take();
        let Some(open) = th.open.get_mut(depth) else {
            match held {
                Some(start) => writer.complete(th.id, "", "", start, time, &[]),
                None => writer.end(th.id, "", "", time, args),
            }
            return;
        };
        let (name, token) = open.get(names);
        let token = match held {
            // A leaf: its begin was held, so begin and end become one complete event.
            Some(start) => writer.complete_by_token(th.id, "", token, name, start, time, &[]),
            None => writer.end_token(th.id, "", token, name, time, args),
        };
        open.set_token(names, token);
    }

    /// Pushes an open slice on thread `th`: numbered `key`, or named `text`.
    fn push_open(th: &mut SinkThread, key: u32, text: &str, token: NameToken) {
        if let Some(o) = th.open.get_mut(th.depth) {
            o.key = key;
            o.token = token;
            if key == NO_KEY {
                o.text.clear();
                o.text.push_str(text);
            }
        } else {
            let text = if key == NO_KEY {
                text.to_string()
            } else {
                String::new()
            };
            th.open.push(OpenName { key, text, token });
        }
        th.depth += 1;
    }

    /// Whether numbered name `name` has its entry (made at its first use): not when its
    /// number is too large or already names another text (the text then names the slice).
    fn keyed(names: &mut Vec<Option<Keyed>>, name: Name<'_>) -> bool {
        if name.key >= MAX_KEYS {
            return false;
        }
        let k = name.key as usize;
        if names.len() <= k {
            names.resize_with(k + 1, || None);
        }
        let at = name.text.as_ptr() as usize;
        match names.get_mut(k) {
            Some(Some(e)) if e.at == at && e.text.len() == name.text.len() => true,
            Some(Some(e)) => {
                let same = same_text(&e.text, name.text);
                if same {
                    e.at = at;
                }
                same
            }
            Some(slot) => {
                *slot = Some(Keyed {
                    text: name.text.into(),
                    at,
                    token: NameToken::default(),
                });
                true
            }
            None => false,
        }
    }

    fn thread_id(&mut self, t: FxtThread) -> Option<ThreadId> {
        match self.threads.get(t.0 as usize) {
            Some(th) => Some(th.id),
            None => {
                self.stats.invalid_threads += 1;
                None
            }
        }
    }
}

impl<H: FnMut(&str)> FxtSink<TraceOutput, H> {
    /// Finishes the trace and then the file (writing the gzip trailer if compressed);
    /// returns the trace's size before compression.
    pub fn finish_output(self) -> io::Result<u64> {
        let out = self.finish()?;
        let bytes = out.written();
        out.finish()?;
        Ok(bytes)
    }
}

/// Arguments converted without the format's full fifteen ([`FxtSink::with_converted`]).
const FEW_ARGS: usize = 6;

const EMPTY_ARG: FxtArg<'static> = FxtArg {
    name: "",
    value: FxtValue::Null,
};

impl<W: Write, H: FnMut(&str)> TraceSink for FxtSink<W, H> {
    type Thread = FxtThread;

    fn warning(&mut self, message: &str) {
        (self.on_warning)(message);
    }

    fn allocate_pid(&mut self, name: &str) -> u32 {
        let koid = self.koid();
        self.writer.process(koid, name);
        koid
    }

    fn allocate_thread(&mut self, pid: u32, name: &str) -> FxtThread {
        let tid = self.koid();
        self.writer.thread_object(tid, pid, name);
        self.attach_thread(pid, tid)
    }

    fn rename_pid(&mut self, pid: u32, name: &str) {
        // A second kernel object record for the koid: viewers keep the latest name.
        self.writer.process(pid, name);
    }

    fn rename_thread(&mut self, thread: FxtThread, name: &str) {
        self.release(thread.0 as usize);
        match self.threads.get(thread.0 as usize) {
            Some(th) => {
                let (koid, group) = (th.koid, th.group);
                self.writer.thread_object(koid, group, name);
            }
            None => self.stats.invalid_threads += 1,
        }
    }

    fn duration_begin(&mut self, thread: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        let i = thread.0 as usize;
        self.release(i);
        let time = self.time(time);
        let FxtSink {
            writer,
            threads,
            stats,
            ..
        } = self;
        let Some(th) = threads.get_mut(i) else {
            stats.invalid_threads += 1;
            return;
        };
        let token = if args.is_empty() {
            // Held: written as a begin when anything but its end comes next on the
            // thread. The name's token comes from the caller's text: the copy kept
            // here sits at an address the writer's recent-lookup cache has not seen.
            th.held = Some(time);
            writer.name_token(name)
        } else {
            Self::with_converted(stats, args, |a| {
                writer.begin_token(th.id, "", name, time, a)
            })
        };
        Self::push_open(th, NO_KEY, name, token);
    }

    fn duration_begin_name(
        &mut self,
        thread: FxtThread,
        name: Name<'_>,
        time: i64,
        args: &[Arg<'_>],
    ) {
        if !Self::keyed(&mut self.names, name) {
            return self.duration_begin(thread, name.text, time, args);
        }
        let i = thread.0 as usize;
        self.release(i);
        let time = self.time(time);
        let FxtSink {
            writer,
            threads,
            stats,
            names,
            ..
        } = self;
        let Some(th) = threads.get_mut(i) else {
            stats.invalid_threads += 1;
            return;
        };
        let Some(Some(entry)) = names.get_mut(name.key as usize) else {
            return;
        };
        entry.token = if args.is_empty() {
            // Held, as a begin by text is.
            th.held = Some(time);
            writer.name_token_again(entry.token, &entry.text)
        } else {
            // The caller's text, not the copy: an argument naming the same text (a
            // frame's `symbol`) is then known to be the name without a lookup.
            let token = entry.token;
            Self::with_converted(stats, args, |a| {
                writer.begin_by_token(th.id, "", token, name.text, time, a)
            })
        };
        Self::push_open(th, name.key, "", entry.token);
    }

    fn duration_end(&mut self, thread: FxtThread, _name: &str, time: i64, args: &[Arg<'_>]) {
        let time = self.time(time);
        if args.is_empty() {
            // Most slices carry none: no argument array to convert.
            self.end_open(thread, time, &[]);
        } else {
            let mut buf = [EMPTY_ARG; MAX_ARGS];
            let n = Self::convert(&mut self.stats, args, &mut buf);
            self.end_open(thread, time, &buf[..n]);
        }
    }

    fn duration_complete(
        &mut self,
        thread: FxtThread,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    ) {
        self.release(thread.0 as usize);
        let Some(id) = self.thread_id(thread) else {
            return;
        };
        let start = self.time(start);
        let mut end = self.time(end);
        if end < start {
            self.stats.clamped_completes += 1;
            end = start;
        }
        let mut buf = [EMPTY_ARG; MAX_ARGS];
        let n = Self::convert(&mut self.stats, args, &mut buf);
        self.writer.complete(id, "", name, start, end, &buf[..n]);
    }

    fn duration_instant(&mut self, thread: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.release(thread.0 as usize);
        let Some(id) = self.thread_id(thread) else {
            return;
        };
        let time = self.time(time);
        let mut buf = [EMPTY_ARG; MAX_ARGS];
        let n = Self::convert(&mut self.stats, args, &mut buf);
        self.writer.instant(id, "", name, time, &buf[..n]);
    }

    fn counter(&mut self, thread: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.release(thread.0 as usize);
        let Some(id) = self.thread_id(thread) else {
            return;
        };
        let time = self.time(time);
        let next = self.counter_ids.len() as u64;
        let counter_id = match self.counter_ids.get(name) {
            Some(&c) => c,
            None => {
                self.counter_ids.insert(name.to_string(), next);
                next
            }
        };
        let mut buf = [EMPTY_ARG; MAX_ARGS];
        let n = Self::convert(&mut self.stats, args, &mut buf);
        self.writer
            .counter(id, "", name, time, counter_id, &buf[..n]);
    }
}
