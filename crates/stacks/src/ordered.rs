//! Restoring per-thread time order for writers that emit some slices late.
//!
//! The legacy writer learns about a frame's start only after it has written later
//! events (a return into a caller it never saw, a frame opened before the snapshot),
//! and writes such frames at the end with their earlier timestamps, as magic-trace
//! does. Perfetto sorts on import, but a file whose per-thread times go backwards is
//! harder for every other reader. [`OrderedSink`] sits between a writer and its real
//! sink and re-emits everything in per-thread time order.
//!
//! Memory stays bounded: events arriving in order (nearly all of them) are spooled —
//! in memory up to a limit (16 MiB), then to an unnamed temporary file — and only the
//! few *late* events are held in memory. At [`OrderedSink::finish`] the spool is
//! replayed and each late event is slotted in before the first spooled event of its
//! thread with a later time. Ties keep arrival order (late events after in-order events
//! with the same time), as Perfetto's stable sort reads magic-trace's files, except
//! for starts the writer marks as deferred
//! ([`TraceSink::duration_begin_deferred`]): those began before everything already
//! written, so they go first among events at their time even when that time is not
//! earlier than the thread's latest.
//!
//! Sorting alone does not keep slices well nested, and a trace viewer drops or cuts
//! slices that are not (magic-trace's late `[unknown]` slices overlap frames opened
//! after them, and damaged input can end a frame before it began). So the replay
//! delivers slices as a stack: an end closes the innermost open begin, as every trace
//! reader matches it, and one with nothing open is dropped; complete slices become a
//! begin and an end; when a slice ends while slices opened inside it are still open,
//! those are closed with it and reopened at once (split in two) instead of crossing
//! their parent; and whatever is still open at the end is ended at its thread's last
//! time. What had to be adjusted is counted in [`OrderedStats`].
//!
//! ```
//! use ptscope_stacks::ordered::OrderedSink;
//! use ptscope_stacks::transcript::TranscriptSink;
//! use ptscope_stacks::TraceSink;
//!
//! let mut s = OrderedSink::new(TranscriptSink::default());
//! let t = s.allocate_thread(1, "main");
//! s.duration_begin(t, "inner", 10, &[]);
//! s.duration_end(t, "inner", 20, &[]);
//! s.duration_begin(t, "outer", 0, &[]); // learnt late
//! s.duration_end(t, "outer", 30, &[]);
//! let inner = s.finish().expect("no I/O error");
//! assert_eq!(
//!     inner.lines,
//!     ["->      0ns BEGIN outer", "->     10ns BEGIN inner", "->     20ns END   inner", "->     30ns END   outer"]
//! );
//! ```

use crate::sink::{Arg, ArgValue, TraceSink};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};

/// Spooled bytes kept in memory before spilling to a temporary file.
const DEFAULT_MEMORY_LIMIT: usize = 16 << 20;

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Op {
    Begin = 1,
    End = 2,
    Complete = 3,
    Instant = 4,
    Counter = 5,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Begin,
            2 => Op::End,
            3 => Op::Complete,
            4 => Op::Instant,
            5 => Op::Counter,
            _ => return None,
        })
    }

    /// Whether the record opens a slice (and carries its id).
    fn starts(self) -> bool {
        matches!(self, Op::Begin | Op::Complete)
    }
}

/// One buffered call, with names as ids into the sink's string table.
#[derive(Clone, Debug)]
struct Rec {
    op: Op,
    thread: u32,
    time: i64,
    end: i64,
    /// The slice a begin or complete opens (ends close the innermost open begin).
    id: u64,
    name: u32,
    args: Vec<(u32, RecArg)>,
}

#[derive(Copy, Clone, Debug)]
enum RecArg {
    Int(i64),
    Str(u32),
    Interned(u32),
    Pointer(u64),
    Float(f64),
}

enum Spool {
    Memory(Vec<u8>),
    /// An unnamed file (`O_TMPFILE`): private, and gone however ptscope exits.
    File(BufWriter<File>),
}

/// What [`OrderedSink`] changed to deliver well-nested, time-ordered slices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderedStats {
    /// Events that arrived earlier than their thread's latest time and were moved back.
    pub late_events: u64,
    /// Ends with no open begin on their thread (dropped).
    pub dropped_ends: u64,
    /// Ends earlier than the start of the slice they close (moved to that start).
    pub raised_ends: u64,
    /// Slices closed and reopened because an enclosing slice ended first.
    pub split_slices: u64,
    /// Slices the writer never closed, ended at their thread's last time.
    pub closed_at_finish: u64,
}

/// Whether a start is late by the writer's word.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Deferred {
    No,
    /// [`TraceSink::duration_begin_deferred`].
    Yes,
    /// [`TraceSink::duration_begin_enclosing`].
    Enclosing,
}

/// An event that arrived after a later one on its thread.
struct Late {
    thread: u32,
    time: i64,
    /// A deferred start: it goes before in-order events at the same time.
    first: bool,
    /// An enclosing start: before other deferred ones at its time, the last first.
    enclosing: bool,
    seq: u64,
    rec: Rec,
}

impl Late {
    /// Whether this goes before an in-order event at `time`.
    fn precedes(&self, time: i64) -> bool {
        self.time < time || (self.time == time && self.first)
    }
}

/// A slice open in the inner sink during the replay.
struct Open {
    id: u64,
    /// Its begin, kept to reopen it after a split.
    rec: Rec,
    /// The end of a complete slice (known in advance); `None` for a begin.
    end: Option<i64>,
}

/// Per-thread state while the replay delivers events to the inner sink.
#[derive(Default)]
struct Delivery {
    stack: Vec<Open>,
    /// Slices ended by a split at `suspended_at`, outermost first, reopened lazily so
    /// that their own end at that very time needs no zero-length piece.
    suspended: Vec<Open>,
    suspended_at: i64,
    /// Ends of open complete slices: (time, id).
    ends: BinaryHeap<Reverse<(i64, u64)>>,
    last: i64,
}

/// A [`TraceSink`] adapter that delivers events to `S` in per-thread time order.
pub struct OrderedSink<S: TraceSink> {
    inner: S,
    threads: Vec<S::Thread>,
    last_time: Vec<i64>,
    strings: FxHashMap<Box<str>, u32>,
    string_list: Vec<Box<str>>,
    spool: Spool,
    spooled: u64,
    late: Vec<Late>,
    seq: u64,
    next_id: u64,
    memory_limit: usize,
    error: Option<io::Error>,
    buf: Vec<u8>,
    stats: OrderedStats,
    delivery: Vec<Delivery>,
}

impl<S: TraceSink> OrderedSink<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        OrderedSink {
            inner,
            threads: Vec::new(),
            last_time: Vec::new(),
            strings: FxHashMap::default(),
            string_list: Vec::new(),
            spool: Spool::Memory(Vec::new()),
            spooled: 0,
            late: Vec::new(),
            seq: 0,
            next_id: 0,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            error: None,
            buf: Vec::with_capacity(256),
            stats: OrderedStats::default(),
            delivery: Vec::new(),
        }
    }

    /// Spills the spool to a temporary file beyond `bytes` (default 16 MiB).
    pub fn with_memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// How many events arrived out of order (and were held in memory).
    pub fn late_events(&self) -> usize {
        self.late.len()
    }

    /// The wrapped sink, e.g. for its statistics.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.string_list.len() as u32;
        self.string_list.push(s.into());
        self.strings.insert(s.into(), id);
        id
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        op: Op,
        deferred: Deferred,
        thread: u32,
        time: i64,
        end: i64,
        name: &str,
        args: &[Arg<'_>],
    ) {
        let t = thread as usize;
        if t >= self.last_time.len() {
            // Not a handle this sink gave out: there is no track to put it on.
            return;
        }
        let (end, id) = match op {
            Op::Begin | Op::Complete => {
                self.next_id += 1;
                if end < time {
                    self.stats.raised_ends += 1;
                }
                (end.max(time), self.next_id)
            }
            Op::End | Op::Instant | Op::Counter => (end, 0),
        };
        let name = self.intern(name);
        let args = args
            .iter()
            .map(|a| {
                let v = match a.value {
                    ArgValue::Int(i) => RecArg::Int(i),
                    ArgValue::Str(s) => RecArg::Str(self.intern(s)),
                    ArgValue::Interned(s) => RecArg::Interned(self.intern(s)),
                    ArgValue::Pointer(p) => RecArg::Pointer(p),
                    ArgValue::Float(f) => RecArg::Float(f),
                };
                (self.intern(a.name), v)
            })
            .collect();
        let rec = Rec {
            op,
            thread,
            time,
            end,
            id,
            name,
            args,
        };
        // A deferred start at the thread's latest time still goes before what is
        // there: the writer says it began first.
        let first = deferred != Deferred::No;
        if time < self.last_time[t] || (first && time == self.last_time[t]) {
            self.seq += 1;
            self.stats.late_events += 1;
            self.late.push(Late {
                thread,
                time,
                first,
                enclosing: deferred == Deferred::Enclosing,
                seq: self.seq,
                rec,
            });
            return;
        }
        self.last_time[t] = time;
        self.spool_rec(&rec);
    }

    fn spool_rec(&mut self, rec: &Rec) {
        if self.error.is_some() {
            return;
        }
        self.buf.clear();
        encode(rec, &mut self.buf);
        self.spooled += 1;
        let result = match &mut self.spool {
            Spool::Memory(v) => {
                v.extend_from_slice(&self.buf);
                if v.len() > self.memory_limit {
                    self.spill()
                } else {
                    Ok(())
                }
            }
            Spool::File(out) => out.write_all(&self.buf),
        };
        if let Err(e) = result {
            self.error = Some(e);
        }
    }

    fn spill(&mut self) -> io::Result<()> {
        let file = tempfile::tempfile().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot create a temporary file in {} for reordering the trace: {e}",
                    std::env::temp_dir().display()
                ),
            )
        })?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        if let Spool::Memory(v) = &self.spool {
            out.write_all(v)?;
        }
        self.spool = Spool::File(out);
        Ok(())
    }

    /// Replays everything into the inner sink in order and returns it.
    pub fn finish(self) -> io::Result<S> {
        self.finish_with_stats().map(|(s, _)| s)
    }

    /// Like [`finish`](Self::finish), also returning what was adjusted.
    pub fn finish_with_stats(mut self) -> io::Result<(S, OrderedStats)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let threads = self.threads.len();
        self.delivery = (0..threads).map(|_| Delivery::default()).collect();
        for d in &mut self.delivery {
            d.last = i64::MIN;
        }
        // Late events per thread, by time, enclosing starts first (the last arrived
        // first), then deferred starts, ties in arrival order.
        let mut late = std::mem::take(&mut self.late);
        late.sort_by_key(|l| {
            let rank = if l.enclosing {
                0
            } else {
                1 + u8::from(!l.first)
            };
            let order = if l.enclosing { u64::MAX - l.seq } else { l.seq };
            (l.thread, l.time, rank, order)
        });
        let mut starts: Vec<usize> = vec![late.len(); threads + 1];
        for (i, l) in late.iter().enumerate().rev() {
            starts[l.thread as usize] = i;
        }
        let mut next: Vec<usize> = (0..threads).map(|t| starts[t]).collect();
        let spool = std::mem::replace(&mut self.spool, Spool::Memory(Vec::new()));
        match spool {
            Spool::Memory(v) => self.replay(&mut &v[..], &late, &mut next)?,
            Spool::File(out) => {
                let mut file = out.into_inner().map_err(|e| e.into_error())?;
                file.rewind()?;
                let mut r = BufReader::with_capacity(1 << 20, file);
                self.replay(&mut r, &late, &mut next)?;
            }
        }
        // Late events later than every spooled event of their thread.
        for t in 0..threads {
            while next[t] < late.len() && late[next[t]].thread as usize == t {
                let rec = late[next[t]].rec.clone();
                self.deliver(rec);
                next[t] += 1;
            }
        }
        for t in 0..threads {
            self.close_thread(t);
        }
        Ok((self.inner, self.stats))
    }

    fn replay(&mut self, r: &mut impl Read, late: &[Late], next: &mut [usize]) -> io::Result<()> {
        for _ in 0..self.spooled {
            let mut rec = Rec {
                op: Op::Begin,
                thread: 0,
                time: 0,
                end: 0,
                id: 0,
                name: 0,
                args: Vec::new(),
            };
            decode(r, &mut rec)?;
            let t = rec.thread as usize;
            if t >= next.len() {
                return Err(corrupt());
            }
            while next[t] < late.len()
                && late[next[t]].thread as usize == t
                && late[next[t]].precedes(rec.time)
            {
                let l = late[next[t]].rec.clone();
                self.deliver(l);
                next[t] += 1;
            }
            self.deliver(rec);
        }
        Ok(())
    }

    /// Delivers one event in time order, keeping the thread's slices well nested.
    fn deliver(&mut self, rec: Rec) {
        let t = rec.thread as usize;
        let time = rec.time;
        // An end at the very time a split closed slices: it ends the innermost begin
        // among them, which has ended already.
        if rec.op == Op::End && time == self.delivery[t].suspended_at {
            let d = &mut self.delivery[t];
            if let Some(i) = d.suspended.iter().rposition(|o| o.end.is_none()) {
                d.suspended.remove(i);
                return;
            }
        }
        // Complete slices ending before this event (at it too, unless it is an end,
        // which may belong to a slice inside the complete one).
        while let Some(&Reverse((end, id))) = self.delivery[t].ends.peek() {
            if end > time || (end == time && rec.op == Op::End) {
                break;
            }
            self.delivery[t].ends.pop();
            self.reopen(t);
            self.close(t, id, end);
        }
        self.reopen(t);
        self.delivery[t].last = self.delivery[t].last.max(time);
        match rec.op {
            Op::Begin => {
                self.emit(&rec);
                let id = rec.id;
                self.delivery[t].stack.push(Open { id, rec, end: None });
            }
            // An end closes the innermost open begin, as every trace reader matches it.
            Op::End => match self.delivery[t].stack.iter().rposition(|o| o.end.is_none()) {
                Some(i) => {
                    let id = self.delivery[t].stack[i].id;
                    self.close(t, id, time);
                }
                None => self.stats.dropped_ends += 1,
            },
            Op::Complete => {
                let begin = Rec {
                    op: Op::Begin,
                    ..rec
                };
                self.emit(&begin);
                let d = &mut self.delivery[t];
                d.ends.push(Reverse((begin.end, begin.id)));
                d.stack.push(Open {
                    id: begin.id,
                    end: Some(begin.end),
                    rec: begin,
                });
            }
            Op::Instant | Op::Counter => self.emit(&rec),
        }
    }

    /// Reopens the slices a split closed, at the time they were closed.
    fn reopen(&mut self, t: usize) {
        if self.delivery[t].suspended.is_empty() {
            return;
        }
        let suspended = std::mem::take(&mut self.delivery[t].suspended);
        let at = self.delivery[t].suspended_at;
        for mut o in suspended {
            o.rec.time = at;
            self.emit(&o.rec);
            self.delivery[t].stack.push(o);
        }
    }

    /// Ends slice `id` at `time`, with everything opened inside it and still open.
    fn close(&mut self, t: usize, id: u64, time: i64) {
        // Not open: a complete slice that a split already ended at its end time.
        let Some(pos) = self.delivery[t].stack.iter().rposition(|o| o.id == id) else {
            return;
        };
        let mut suspended = Vec::new();
        while self.delivery[t].stack.len() > pos {
            let Some(o) = self.delivery[t].stack.pop() else {
                break;
            };
            self.end(t, &o.rec, time);
            // A complete slice due to end by now is over; anything else goes on.
            let over = o.id == id || o.end.is_some_and(|e| e <= time);
            if !over {
                self.stats.split_slices += 1;
                suspended.push(o);
            }
        }
        suspended.reverse();
        let d = &mut self.delivery[t];
        d.suspended = suspended;
        d.suspended_at = time;
    }

    /// Ends what is still open on thread `t` once everything has been delivered.
    fn close_thread(&mut self, t: usize) {
        while let Some(Reverse((end, id))) = self.delivery[t].ends.pop() {
            self.reopen(t);
            self.close(t, id, end);
            self.delivery[t].last = self.delivery[t].last.max(end);
        }
        // Split slices whose end never came: they ended with their parent.
        self.delivery[t].suspended.clear();
        let last = self.delivery[t].last;
        while let Some(o) = self.delivery[t].stack.pop() {
            self.stats.closed_at_finish += 1;
            self.end(t, &o.rec, last);
        }
    }

    fn end(&mut self, t: usize, begin: &Rec, time: i64) {
        let thread = self.threads[t];
        let name = &self.string_list[begin.name as usize];
        self.inner.duration_end(thread, name, time, &[]);
    }

    fn emit(&mut self, rec: &Rec) {
        let thread = self.threads[rec.thread as usize];
        let strs = &self.string_list;
        let args: Vec<Arg<'_>> = rec
            .args
            .iter()
            .map(|(n, v)| Arg {
                name: &strs[*n as usize],
                value: match *v {
                    RecArg::Int(i) => ArgValue::Int(i),
                    RecArg::Str(s) => ArgValue::Str(&strs[s as usize]),
                    RecArg::Interned(s) => ArgValue::Interned(&strs[s as usize]),
                    RecArg::Pointer(p) => ArgValue::Pointer(p),
                    RecArg::Float(f) => ArgValue::Float(f),
                },
            })
            .collect();
        let name = &strs[rec.name as usize];
        match rec.op {
            Op::Begin => self.inner.duration_begin(thread, name, rec.time, &args),
            Op::End => self.inner.duration_end(thread, name, rec.time, &args),
            Op::Complete => self
                .inner
                .duration_complete(thread, name, rec.time, rec.end, &args),
            Op::Instant => self.inner.duration_instant(thread, name, rec.time, &args),
            Op::Counter => self.inner.counter(thread, name, rec.time, &args),
        }
    }
}

fn corrupt() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "corrupt ptscope spool file")
}

fn encode(rec: &Rec, out: &mut Vec<u8>) {
    out.push(rec.op as u8);
    out.extend_from_slice(&rec.thread.to_le_bytes());
    out.extend_from_slice(&rec.time.to_le_bytes());
    if rec.op == Op::Complete {
        out.extend_from_slice(&rec.end.to_le_bytes());
    }
    if rec.op.starts() {
        out.extend_from_slice(&rec.id.to_le_bytes());
    }
    out.extend_from_slice(&rec.name.to_le_bytes());
    out.push(rec.args.len().min(255) as u8);
    for (name, v) in rec.args.iter().take(255) {
        out.extend_from_slice(&name.to_le_bytes());
        let (tag, bits) = match *v {
            RecArg::Int(i) => (0u8, i as u64),
            RecArg::Str(s) => (1, s as u64),
            RecArg::Interned(s) => (2, s as u64),
            RecArg::Pointer(p) => (3, p),
            RecArg::Float(f) => (4, f.to_bits()),
        };
        out.push(tag);
        out.extend_from_slice(&bits.to_le_bytes());
    }
}

fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn decode(r: &mut impl Read, rec: &mut Rec) -> io::Result<()> {
    let [op] = read_array::<1>(r)?;
    rec.op = Op::from_u8(op).ok_or_else(corrupt)?;
    rec.thread = u32::from_le_bytes(read_array(r)?);
    rec.time = i64::from_le_bytes(read_array(r)?);
    rec.end = if rec.op == Op::Complete {
        i64::from_le_bytes(read_array(r)?)
    } else {
        rec.time
    };
    rec.id = if rec.op.starts() {
        u64::from_le_bytes(read_array(r)?)
    } else {
        0
    };
    rec.name = u32::from_le_bytes(read_array(r)?);
    let [n] = read_array::<1>(r)?;
    rec.args.clear();
    for _ in 0..n {
        let name = u32::from_le_bytes(read_array(r)?);
        let [tag] = read_array::<1>(r)?;
        let bits = u64::from_le_bytes(read_array(r)?);
        let v = match tag {
            0 => RecArg::Int(bits as i64),
            1 => RecArg::Str(bits as u32),
            2 => RecArg::Interned(bits as u32),
            3 => RecArg::Pointer(bits),
            4 => RecArg::Float(f64::from_bits(bits)),
            _ => return Err(corrupt()),
        };
        rec.args.push((name, v));
    }
    Ok(())
}

impl<S: TraceSink> TraceSink for OrderedSink<S> {
    type Thread = u32;

    fn allocate_pid(&mut self, name: &str) -> u32 {
        self.inner.allocate_pid(name)
    }

    fn allocate_thread(&mut self, pid: u32, name: &str) -> u32 {
        let t = self.inner.allocate_thread(pid, name);
        self.threads.push(t);
        self.last_time.push(i64::MIN);
        (self.threads.len() - 1) as u32
    }

    fn rename_pid(&mut self, pid: u32, name: &str) {
        self.inner.rename_pid(pid, name);
    }

    fn rename_thread(&mut self, thread: u32, name: &str) {
        // Names are not timed: they go straight through, ahead of the held slices.
        if let Some(&t) = self.threads.get(thread as usize) {
            self.inner.rename_thread(t, name);
        }
    }

    fn duration_begin(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::Begin, Deferred::No, thread, time, time, name, args);
    }

    fn duration_end(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::End, Deferred::No, thread, time, time, name, args);
    }

    fn duration_complete(
        &mut self,
        thread: u32,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    ) {
        self.push(Op::Complete, Deferred::No, thread, start, end, name, args);
    }

    fn duration_begin_deferred(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::Begin, Deferred::Yes, thread, time, time, name, args);
    }
    fn duration_begin_enclosing(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(
            Op::Begin,
            Deferred::Enclosing,
            thread,
            time,
            time,
            name,
            args,
        );
    }

    fn duration_complete_deferred(
        &mut self,
        thread: u32,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    ) {
        self.push(Op::Complete, Deferred::Yes, thread, start, end, name, args);
    }

    fn duration_instant(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::Instant, Deferred::No, thread, time, time, name, args);
    }

    fn counter(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::Counter, Deferred::No, thread, time, time, name, args);
    }

    fn warning(&mut self, message: &str) {
        self.inner.warning(message);
    }

    // `end_of_input` stays the default no-op: a marker passed on now would land before
    // the slices still held here, which were emitted before it.
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::TranscriptSink;

    fn script(s: &mut OrderedSink<TranscriptSink>) {
        let a = s.allocate_thread(1, "a");
        let b = s.allocate_thread(1, "b");
        for i in 0..1000 {
            s.duration_begin(a, "f", 100 + i * 10, &[Arg::new("i", ArgValue::Int(i))]);
            s.duration_end(a, "f", 105 + i * 10, &[]);
            s.counter(b, "c", 100 + i, &[Arg::new("v", ArgValue::Float(i as f64))]);
        }
        s.duration_begin(a, "late-root", 50, &[Arg::new("s", ArgValue::Str("x"))]);
        s.duration_complete(b, "late-complete", 10, 99999, &[]);
        s.duration_begin(a, "late-mid", 155, &[]);
        s.duration_end(a, "late-root", 20_000, &[]);
    }

    #[test]
    fn spilled_and_in_memory_replays_are_identical_and_ordered() {
        let mut mem = OrderedSink::new(TranscriptSink::default());
        script(&mut mem);
        let mut disk = OrderedSink::new(TranscriptSink::default()).with_memory_limit(100);
        script(&mut disk);
        assert!(matches!(disk.spool, Spool::File(_)));
        assert_eq!(mem.late_events(), 3);
        let mem = mem.finish().expect("mem");
        let disk = disk.finish().expect("disk");
        assert_eq!(mem.lines, disk.lines);
        assert_eq!(mem.lines[0], "->     50ns BEGIN late-root");
        assert_eq!(mem.lines[1], "->    100ns BEGIN f");
        assert_eq!(mem.lines[3], "->     10ns BEGIN late-complete");
        // late-mid (155) goes after f@150's begin/end... and before f@160.
        let i = mem
            .lines
            .iter()
            .position(|l| l.ends_with("late-mid"))
            .expect("late-mid");
        assert_eq!(mem.lines[i - 1], "->    155ns END   f");
        assert_eq!(mem.lines[i + 1], "->    160ns BEGIN f");
    }
}
