//! A mid-run thread into FXT in time order without reordering its events.
//!
//! A stream that starts mid-run (a flight recorder's) learns its first frame's callers
//! from the returns into them, long after their slices began (at the stream's start):
//! [`ExactStack::mid_run`](ptscope_stacks::exact::ExactStack::mid_run) writes them as
//! [`TraceSink::duration_begin_enclosing`] begins, and everything else in time order.
//! Instead of spooling every event to put those few begins first (what
//! `ptscope_stacks::ordered::OrderedSink` does, a third of a flight recorder's decode),
//! [`CallersFirst`] writes the thread's FXT as it comes and holds the finished
//! fragments back (in memory up to 16 MiB, then in an unnamed temporary file); at
//! [`CallersFirst::finish`] the callers' begins go out first, outermost first, in a
//! fragment of their own, then the held fragments. The callers' ends are written where
//! they happen, past the FXT sink (which never saw their begins), so the file holds the
//! same records the reordering gave.

use super::{no_warning, Fragment, Sending};
use ptscope_fxt::ThreadId;
use ptscope_output::{FxtSink, FxtThread};
use ptscope_stacks::{Arg, ArgValue, Name, TraceSink};
use std::fs::File;
use std::io::{self, Read, Seek, Write};

/// Bytes of held fragments kept in memory before they go to a temporary file.
pub(super) const MEMORY_LIMIT: usize = 16 << 20;

/// Finished fragments held back, in order: those in the file come first.
#[derive(Default)]
pub(super) struct Held {
    /// The temporary file and the length of each fragment in it.
    file: Option<(File, Vec<usize>)>,
    /// Fragments kept in memory (after those in the file).
    memory: Vec<Vec<u8>>,
    memory_bytes: usize,
    limit: usize,
    /// Why the file could not be used (everything then stays in memory).
    error: Option<io::Error>,
}

impl Held {
    /// Holds up to `limit` bytes in memory.
    pub(super) fn new(limit: usize) -> Self {
        Held {
            limit,
            ..Held::default()
        }
    }

    /// Holds a finished fragment.
    pub(super) fn push(&mut self, bytes: Vec<u8>) {
        if self.error.is_none() && self.memory_bytes + bytes.len() > self.limit {
            if let Err(e) = self.spill(&bytes) {
                self.error = Some(e);
            } else {
                return;
            }
        }
        self.memory_bytes += bytes.len();
        self.memory.push(bytes);
    }

    /// Writes what memory holds, then `bytes`, to the file (made the first time). On an
    /// error the file is cut back to its last whole fragment.
    fn spill(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            self.file = Some((tempfile::tempfile()?, Vec::new()));
        }
        let Some((file, lens)) = &mut self.file else {
            return Ok(());
        };
        for frag in std::mem::take(&mut self.memory)
            .iter()
            .map(Vec::as_slice)
            .chain([bytes])
        {
            if let Err(e) = file.write_all(frag) {
                let whole: usize = lens.iter().sum();
                let _ = file.set_len(whole as u64);
                let _ = file.seek(io::SeekFrom::Start(whole as u64));
                return Err(e);
            }
            lens.push(frag.len());
            self.memory_bytes = self.memory_bytes.saturating_sub(frag.len());
        }
        Ok(())
    }

    /// Hands every held fragment to `send`, in order; says what went wrong.
    pub(super) fn drain(mut self, mut send: impl FnMut(Vec<u8>)) -> Option<HeldProblem> {
        let mut problem = self.error.take().map(HeldProblem::KeptInMemory);
        if let Some((mut file, lens)) = self.file.take() {
            let read = file.rewind().and_then(|()| {
                for len in lens {
                    let mut frag = vec![0; len];
                    file.read_exact(&mut frag)?;
                    send(frag);
                }
                Ok(())
            });
            if let Err(e) = read {
                problem = Some(HeldProblem::Lost(e));
            }
        }
        for frag in self.memory {
            send(frag);
        }
        problem
    }
}

/// What went wrong holding a thread's fragments.
#[derive(Debug)]
pub(super) enum HeldProblem {
    /// The temporary file could not be made or written: the rest stayed in memory.
    KeptInMemory(io::Error),
    /// What the file held could not be read back: that part of the trace is lost.
    Lost(io::Error),
}

impl std::fmt::Display for HeldProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = std::env::temp_dir();
        match self {
            HeldProblem::KeptInMemory(e) => write!(
                f,
                "cannot hold its trace in a temporary file in {} ({e}): it was held in \
                 memory instead (set TMPDIR to a directory with space)",
                dir.display()
            ),
            HeldProblem::Lost(e) => write!(
                f,
                "part of its trace is missing: cannot read it back from its temporary file \
                 in {} ({e})",
                dir.display()
            ),
        }
    }
}

/// An argument kept until the begin it belongs to is written.
#[derive(Clone, Debug)]
enum OwnedValue {
    Int(i64),
    Str(String),
    Interned(String),
    Pointer(u64),
    Float(f64),
}

/// A caller learnt late: its slice began at `time`.
struct Caller {
    name: String,
    time: i64,
    args: Vec<(String, OwnedValue)>,
}

/// A [`TraceSink`] for one mid-run thread of [`ExactStack`](ptscope_stacks::exact::ExactStack)
/// into FXT fragments: the callers learnt late first, everything else as written (see
/// the module's notes). Only [`TraceSink::duration_begin_enclosing`] is put first.
pub(super) struct CallersFirst<'t> {
    out: Sending<'t>,
    /// The writer's handle of the thread, for the callers' ends.
    writer_thread: Option<ThreadId>,
    /// Callers learnt late, innermost (first learnt) first.
    callers: Vec<Caller>,
    /// How many of them have ended (the innermost end first).
    ended: usize,
    /// Slices open in the FXT sink (begun after the stream's start).
    depth: usize,
}

impl<'t> CallersFirst<'t> {
    /// Writes through `out`, whose finished fragments are held back.
    pub(super) fn new(mut out: Sending<'t>, limit: usize) -> Self {
        out.hold = Some(Held::new(limit));
        CallersFirst {
            out,
            writer_thread: None,
            callers: Vec::new(),
            ended: 0,
            depth: 0,
        }
    }

    /// Sends the callers' begins, then everything held; says what went wrong.
    pub(super) fn finish(mut self) -> Option<HeldProblem> {
        self.out.send();
        let held = self.out.hold.take().unwrap_or_default();
        if !self.callers.is_empty() {
            let mut head: Fragment = FxtSink::fragment(Vec::new(), no_warning);
            let t = head.attach_thread(self.out.koids.0, self.out.koids.1);
            for c in self.callers.iter().rev() {
                let args: Vec<Arg<'_>> = c.args.iter().map(|(n, v)| borrowed(n, v)).collect();
                head.duration_begin(t, &c.name, c.time, &args);
            }
            head.cut();
            let _ = self
                .out
                .tx
                .send(std::mem::take(head.writer_mut().inner_mut()));
        }
        let tx = self.out.tx;
        held.drain(|frag| {
            let _ = tx.send(frag);
        })
    }
}

fn owned(v: &ArgValue<'_>) -> OwnedValue {
    match *v {
        ArgValue::Int(i) => OwnedValue::Int(i),
        ArgValue::Str(s) => OwnedValue::Str(s.to_string()),
        ArgValue::Interned(s) => OwnedValue::Interned(s.to_string()),
        ArgValue::Pointer(p) => OwnedValue::Pointer(p),
        ArgValue::Float(f) => OwnedValue::Float(f),
    }
}

fn borrowed<'a>(name: &'a str, v: &'a OwnedValue) -> Arg<'a> {
    let value = match v {
        OwnedValue::Int(i) => ArgValue::Int(*i),
        OwnedValue::Str(s) => ArgValue::Str(s),
        OwnedValue::Interned(s) => ArgValue::Interned(s),
        OwnedValue::Pointer(p) => ArgValue::Pointer(*p),
        OwnedValue::Float(f) => ArgValue::Float(*f),
    };
    Arg::new(name, value)
}

impl TraceSink for CallersFirst<'_> {
    type Thread = FxtThread;

    fn allocate_pid(&mut self, name: &str) -> u32 {
        self.out.allocate_pid(name)
    }
    fn allocate_thread(&mut self, pid: u32, name: &str) -> FxtThread {
        self.out.allocate_thread(pid, name)
    }
    fn rename_thread(&mut self, thread: FxtThread, name: &str) {
        self.out.rename_thread(thread, name);
    }
    fn duration_begin(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.depth += 1;
        self.out.duration_begin(t, name, time, args);
    }
    fn duration_begin_name(&mut self, t: FxtThread, name: Name<'_>, time: i64, args: &[Arg<'_>]) {
        self.depth += 1;
        self.out.duration_begin_name(t, name, time, args);
    }
    fn duration_end(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        if self.depth > 0 || self.ended == self.callers.len() {
            self.depth = self.depth.saturating_sub(1);
            return self.out.duration_end(t, name, time, args);
        }
        // The innermost open caller ends; the sink has nothing open, so nothing it
        // holds back comes after this. The exact stack's ends carry no arguments.
        debug_assert!(args.is_empty());
        let (pid, tid) = self.out.koids;
        let frag = &mut self.out.frag;
        let id = *self
            .writer_thread
            .get_or_insert_with(|| frag.writer_mut().thread(pid, tid));
        let name = &self.callers[self.ended].name;
        let time = u64::try_from(time).unwrap_or(0);
        frag.writer_mut().end(id, "", name, time, &[]);
        self.ended += 1;
        self.out.maybe_send();
    }
    fn duration_complete(&mut self, t: FxtThread, name: &str, a: i64, b: i64, args: &[Arg<'_>]) {
        self.out.duration_complete(t, name, a, b, args);
    }
    fn duration_begin_enclosing(&mut self, _: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.callers.push(Caller {
            name: name.to_string(),
            time,
            args: args
                .iter()
                .map(|a| (a.name.to_string(), owned(&a.value)))
                .collect(),
        });
    }
    fn duration_instant(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.out.duration_instant(t, name, time, args);
    }
    fn counter(&mut self, t: FxtThread, name: &str, time: i64, args: &[Arg<'_>]) {
        self.out.counter(t, name, time, args);
    }
    fn warning(&mut self, message: &str) {
        self.out.warning(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_event::exact::{ExactKind, ExactStep, Functions, Restart};
    use ptscope_fxt::reader::{self, EventKind};
    use ptscope_stacks::exact::ExactStack;
    use ptscope_stacks::ordered::OrderedSink;
    use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

    /// A slice as a reader rebuilds it: name, start, end, depth, args.
    type Slice = (String, u64, u64, usize, String);

    /// A mid-run thread: `inner` runs when the stream starts; `mid` and then `main` are
    /// learnt from returns into them, `main` after `mid` ended; `calls` leaf calls
    /// and deeper calls in between (enough for several fragments).
    fn steps(f: &mut Functions, calls: u64) -> Vec<ExactStep> {
        let inner = f.add(0x3000, true, "inner");
        let mid = f.add(0x2000, true, "mid");
        let main = f.add(0x1000, true, "main");
        let leaf = f.add(0x4000, true, "leaf");
        let work = f.add(0x5000, true, "work");
        let mut t = 10;
        let mut s = vec![ExactStep::new(t, ExactKind::Start(Restart::First), inner)];
        let mut at = |kind, to, addr| {
            t += 3;
            ExactStep::new(t, kind, to).at(addr)
        };
        for (caller, ret) in [(inner, 0x3010), (mid, 0x2010), (main, 0x1010)] {
            for i in 0..calls {
                s.push(at(ExactKind::Call { ret }, work, 0x5000));
                if i % 3 == 0 {
                    s.push(at(ExactKind::Call { ret: 0x5010 }, leaf, 0x4000));
                    s.push(at(ExactKind::Return, work, 0x5010));
                }
                s.push(at(ExactKind::Return, caller, ret));
            }
            // Out of `inner` into `mid` (learnt), out of `mid` into `main` (learnt).
            if caller != main {
                s.push(at(
                    ExactKind::Return,
                    if caller == inner { mid } else { main },
                    0,
                ));
            }
        }
        s
    }

    fn channel() -> (SyncSender<Vec<u8>>, Receiver<Vec<u8>>) {
        sync_channel(1 << 16)
    }

    /// The header naming the thread (koids 1 and 2), then every fragment sent.
    fn trace(rx: Receiver<Vec<u8>>) -> Vec<u8> {
        let mut head: Fragment = FxtSink::with_warnings(Vec::new(), no_warning);
        let g = head.allocate_pid("p [pid=1]");
        let t = head.allocate_thread(g, "p [tid=1]");
        assert_eq!(head.thread_koids(t), Some((1, 2)));
        let mut out = head.finish().expect("in memory");
        for frag in rx.try_iter() {
            out.extend_from_slice(&frag);
        }
        out
    }

    /// Every slice, in the order their ends are read; the thread's times never go back.
    fn slices(bytes: &[u8]) -> Vec<Slice> {
        let mut open: Vec<(String, u64, String)> = Vec::new();
        let mut out = Vec::new();
        let mut last = 0;
        for e in reader::read_events(bytes).expect("the trace reads back") {
            assert!(
                e.timestamp >= last,
                "{} at {} after {last}",
                e.name,
                e.timestamp
            );
            last = e.timestamp;
            let args = format!("{:?}", e.args.iter().collect::<Vec<_>>());
            match e.kind {
                EventKind::Begin => open.push((e.name.to_string(), e.timestamp, args)),
                EventKind::End => {
                    let (name, start, args) = open.pop().expect("an end closes a begin");
                    out.push((name, start, e.timestamp, open.len(), args));
                }
                EventKind::Complete { end } => {
                    out.push((e.name.to_string(), e.timestamp, end, open.len(), args))
                }
                _ => {}
            }
        }
        assert!(open.is_empty(), "left open: {open:?}");
        out
    }

    /// Writes the steps through `sink`, as the pipeline walks a thread.
    fn walk<S: TraceSink>(sink: &mut S, steps: &[ExactStep], f: &Functions) {
        let t = sink.allocate_thread(0, "");
        let mut st = ExactStack::mid_run(false);
        for s in steps {
            st.step(sink, t, s, f);
        }
        let end = st.last_time() + 5;
        st.close(sink, t, end, f);
    }

    fn sending(tx: &SyncSender<Vec<u8>>) -> Sending<'_> {
        Sending {
            frag: FxtSink::fragment(Vec::new(), no_warning),
            tx,
            koids: (1, 2),
            hold: None,
        }
    }

    /// The callers learnt late come first, as the reordering put them: the same slices
    /// at the same depths, in time order, whether the held fragments stay in memory or
    /// go to a temporary file.
    #[test]
    fn callers_first_gives_the_slices_the_reordering_gave() {
        let mut f = Functions::default();
        let steps = steps(&mut f, 40_000);
        let (tx, rx) = channel();
        let mut ordered = OrderedSink::new(sending(&tx));
        walk(&mut ordered, &steps, &f);
        drop(ordered.finish().expect("in memory"));
        let want = slices(&trace(rx));
        assert_eq!(want.iter().filter(|s| s.0 == "work").count(), 120_000);
        let outer: Vec<_> = want.iter().filter(|s| s.3 == 0).map(|s| &s.0).collect();
        assert_eq!(outer, ["main"]);
        for limit in [MEMORY_LIMIT, 64 << 10] {
            let (tx, rx) = channel();
            let mut first = CallersFirst::new(sending(&tx), limit);
            walk(&mut first, &steps, &f);
            if limit < MEMORY_LIMIT {
                let held = first.out.hold.as_ref().expect("held");
                assert!(held.file.is_some(), "past {limit} bytes, a file holds them");
            }
            assert!(first.finish().is_none());
            let frags: Vec<Vec<u8>> = rx.try_iter().collect();
            assert!(frags.len() > 3, "{} fragments", frags.len());
            let (tx2, rx2) = channel();
            for frag in frags {
                tx2.send(frag).expect("open");
            }
            drop(tx2);
            assert_eq!(
                slices(&trace(rx2)),
                want,
                "held up to {limit} bytes in memory"
            );
        }
    }

    /// A thread whose stream never returns below its first frame has no callers to
    /// put first: its slices are as written.
    #[test]
    fn without_callers_learnt_late_the_trace_is_as_written() {
        let mut f = Functions::default();
        let mut steps = steps(&mut f, 5);
        steps.truncate(15);
        let (tx, rx) = channel();
        let mut ordered = OrderedSink::new(sending(&tx));
        walk(&mut ordered, &steps, &f);
        drop(ordered.finish().expect("in memory"));
        let want = slices(&trace(rx));
        let (tx, rx) = channel();
        let mut first = CallersFirst::new(sending(&tx), MEMORY_LIMIT);
        walk(&mut first, &steps, &f);
        assert!(first.callers.is_empty());
        assert!(first.finish().is_none());
        assert_eq!(slices(&trace(rx)), want);
    }
}
