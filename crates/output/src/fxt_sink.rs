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

use crate::TraceOutput;
use ptscope_fxt::{
    format::MAX_ARGS, Arg as FxtArg, ArgValue as FxtValue, FxtWriter, NameToken, ThreadId,
};
use ptscope_stacks::{Arg, ArgValue, TraceSink};
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

/// A thread track and the names of its open slices.
struct SinkThread {
    id: ThreadId,
    /// The thread's and its group's koids, to write its name record again on a rename.
    koid: u32,
    group: u32,
    /// Names of open begins and their string-table tokens (the end reuses the slot
    /// without a lookup); entries past `depth` are kept for their capacity.
    open: Vec<(String, NameToken)>,
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
    fn over(writer: FxtWriter<W>, next_koid: u32, on_warning: H) -> Self {
        FxtSink {
            writer,
            next_koid,
            threads: Vec::new(),
            counter_ids: HashMap::new(),
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
            writer, threads, ..
        } = self;
        let Some(th) = threads.get_mut(i) else {
            return;
        };
        let Some(time) = th.held.take() else {
            return;
        };
        let Some((name, token)) = th.depth.checked_sub(1).and_then(|d| th.open.get_mut(d)) else {
            return;
        };
        *token = writer.begin_by_token(th.id, "", *token, name, time, &[]);
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
    fn convert<'a>(
        stats: &mut SinkStats,
        args: &[Arg<'a>],
        out: &mut [FxtArg<'a>; MAX_ARGS],
    ) -> usize {
        let n = args.len().min(MAX_ARGS);
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
        if let Some(start) = th.held.take() {
            // A leaf: its begin was held, so begin and end become one complete event.
            let (name, token) = th
                .open
                .get(depth)
                .map_or(("", NameToken::default()), |(n, t)| (n.as_str(), *t));
            writer.complete_by_token(th.id, "", token, name, start, time, &[]);
            return;
        }
        match th.open.get(depth) {
            Some((name, token)) => writer.end_token(th.id, "", *token, name, time, args),
            None => writer.end(th.id, "", "", time, args),
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
            let mut buf = [EMPTY_ARG; MAX_ARGS];
            let n = Self::convert(stats, args, &mut buf);
            writer.begin_token(th.id, "", name, time, &buf[..n])
        };
        if let Some((slot, slot_token)) = th.open.get_mut(th.depth) {
            slot.clear();
            slot.push_str(name);
            *slot_token = token;
        } else {
            th.open.push((name.to_string(), token));
        }
        th.depth += 1;
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
