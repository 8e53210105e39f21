//! The exact writer: call stacks from [`ExactStep`]s, for a decoder that saw every call,
//! return, jump between functions, syscall and signal of a thread (the emulate backend).
//! No stitching, no inference, no memory of the past: one pass per thread, the stack as
//! it stands, each change written to the sink as it happens. Threads are independent,
//! so each can be written by its own [`ExactStack`] (in parallel, into its own sink).
//!
//! The stack follows FIDELITY.md's conventions (those of ptsim's true stacks): a
//! return pops to the frame whose call pushed its destination; a jump to another
//! function's entry, or to code no ancestor runs, is a tail call (the top frame changes
//! function); a jump or return into the middle of an ancestor's function unwinds to it
//! (exceptions, `longjmp`); a signal handler is a frame on top of the code it
//! interrupted until `rt_sigreturn`; `[syscall]` sits on top between a syscall and the
//! restart, `[untraced]` after an asynchronous stop.
//!
//! ```
//! use ptscope_event::exact::{ExactKind, ExactStep, Functions, Restart};
//! use ptscope_stacks::exact::ExactWriter;
//! use ptscope_stacks::transcript::TranscriptSink;
//!
//! let mut f = Functions::default();
//! let main = f.add(0x1000, true, "main");
//! let work = f.add(0x2000, true, "work");
//! let mut w = ExactWriter::new(TranscriptSink::default());
//! let t = w.thread(7, 7, "demo");
//! for s in [
//!     ExactStep::new(0, ExactKind::Start(Restart::First), main),
//!     ExactStep::new(2_000, ExactKind::Call { ret: 0x1005 }, work).at(0x2000),
//!     ExactStep::new(4_500, ExactKind::Return, main).at(0x1005),
//! ] {
//!     w.step(t, &s, &f);
//! }
//! w.end_thread(t, 5_000, &f);
//! assert_eq!(
//!     w.finish().render(),
//!     "->      0ns BEGIN main\n\
//!      ->      2us BEGIN work\n\
//!      ->    4.5us END   work\n\
//!      ->      5us END   main\n"
//! );
//! ```

use crate::segments::unwind::{exits_non_locally, fde_file};
use crate::sink::{Arg, ArgValue, Name, TraceSink};
use ptscope_event::exact::{ExactKind, ExactStep, FuncId, Functions, Restart, UNKNOWN_FUNC};
use std::borrow::Cow;

/// What marks a slice whose start is the stream's, not its own.
const INFERRED: &str = "[inferred start time]";
const INFERRED_ARGS: [Arg<'static>; 1] = [Arg {
    name: "inferred_start_time",
    value: ArgValue::Interned("true"),
}];

/// A frame of the stack.
#[derive(Clone, Debug)]
struct Frame {
    func: FuncId,
    /// The function's entry (0 for an unknown one).
    entry: u64,
    known: bool,
    /// Where its call returns to (0: nothing called it; a signal handler's frame: 0).
    ret: u64,
    /// A signal handler's frame.
    signal: bool,
    /// Where the return addresses of the calls this frame made (to tell a `longjmp` to
    /// one of them) start in [`ExactStack::sites`]; they end where the next frame's do.
    first_site: usize,
    /// Its start is not known (it was running when the stream began): its slice starts
    /// with the stream, marked so.
    inferred: bool,
}

impl Frame {
    fn new(func: FuncId, funcs: &Functions, ret: u64) -> Self {
        let (entry, known) = funcs.get(func).map_or((0, false), |f| (f.entry, f.known));
        Frame {
            func,
            entry,
            known,
            ret,
            signal: false,
            first_site: 0,
            inferred: false,
        }
    }
}

/// A synthetic frame on top while tracing is stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Overlay {
    Syscall,
    Untraced,
}

impl Overlay {
    fn name(self) -> &'static str {
        match self {
            Overlay::Syscall => "[syscall]",
            Overlay::Untraced => "[untraced]",
        }
    }
}

/// What the sink has open, bottom first.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Shown {
    Func(FuncId),
    Overlay(Overlay),
}

impl Shown {
    fn name(self, funcs: &Functions) -> &str {
        match self {
            Shown::Func(f) => funcs.name(f),
            Shown::Overlay(o) => o.name(),
        }
    }
}

/// Where tracing stopped.
#[derive(Copy, Clone, Debug)]
struct Stop {
    /// At `rt_sigreturn`.
    sigreturn: bool,
}

/// One thread's stack, written to a sink as it changes.
#[derive(Debug, Default)]
pub struct ExactStack {
    frames: Vec<Frame>,
    /// Every frame's call sites, bottom frame's first (one vector for the stack, not
    /// one per frame: no allocation per call).
    sites: Vec<u64>,
    overlay: Option<Overlay>,
    stop: Option<Stop>,
    /// The last step was a handler's return into the signal trampoline.
    trampoline: bool,
    shown: Vec<Shown>,
    /// The lowest frame changed since the last write.
    dirty: usize,
    /// The last step's time.
    last: u64,
    /// The stream starts mid-run (a flight recorder, a snapshot, a forked child): the
    /// frames below its first one are learnt from the returns into them.
    mid_run: bool,
    /// Mark inferred starts in slice names (transcripts), else in an argument.
    annotate: bool,
    /// The first step's time: where inferred frames start.
    first_time: Option<u64>,
    /// Callers revealed below the stack by the last step, not yet written.
    revealed: Vec<FuncId>,
    /// What each function's name says of its exits, read once per function.
    names: NameTraits,
}

/// What a function's name tells the stack about how control leaves it.
#[derive(Copy, Clone, Debug, Default)]
struct Traits {
    /// Worked out (the entry is filled).
    known: bool,
    /// An unwinder or `longjmp` ([`exits_non_locally`]).
    exits: bool,
    /// libgcc's `_Unwind_Resume` (any symbol version).
    unwind_resume: bool,
    /// The object of code named only by its FDE (`FILE+0xSTART`), as a number of
    /// [`NameTraits::files`]; `None` for a name that says what the function is.
    file: Option<u32>,
}

/// Each function's [`Traits`], worked out at its first use: the name searches ran on
/// every jump between functions (python3's hot and `.cold` parts: ~9 % of its decode).
/// A stack is used with one [`Functions`] table, which only grows, so a number keeps
/// its function.
#[derive(Debug, Default)]
struct NameTraits {
    by_func: Vec<Traits>,
    /// The objects of [`Traits::file`], each once.
    files: Vec<Box<str>>,
}

impl NameTraits {
    /// `f`'s traits (a number the table does not hold is named `[unknown]`).
    fn of(&mut self, f: FuncId, funcs: &Functions) -> Traits {
        let i = f as usize;
        if let Some(t) = self.by_func.get(i).filter(|t| t.known) {
            return *t;
        }
        let name = funcs.name(f);
        let file = fde_file(name).map(|file| match self.files.iter().position(|x| **x == *file) {
            Some(k) => k as u32,
            None => {
                self.files.push(file.into());
                (self.files.len() - 1) as u32
            }
        });
        let t = Traits {
            known: true,
            exits: exits_non_locally(name),
            unwind_resume: name.split('@').next() == Some("_Unwind_Resume"),
            file,
        };
        if i < funcs.len() {
            if self.by_func.len() <= i {
                self.by_func.resize(funcs.len(), Traits::default());
            }
            self.by_func[i] = t;
        }
        t
    }
}

/// Whether control leaving the top frame of `frames` for the middle of `to` may be a
/// non-local exit into an ancestor (the segments writer's rule, `segments::unwind`):
/// only code made for it (`longjmp`, the unwinders) jumps so. Ordinary code jumps into
/// the middle of another symbol where GCC split a function into hot and `.cold` parts:
/// stripped, each part is named after its FDE (`python3.11+0x4517d5`), and an outer
/// call of the same function may be running in the part the inner call jumps to
/// (python3's nested evaluation loops: taken for an unwind, ten frames vanished).
fn may_exit_non_locally(
    frames: &[Frame],
    names: &mut NameTraits,
    to: FuncId,
    funcs: &Functions,
) -> bool {
    let Some((top, below)) = frames.split_last() else {
        return true;
    };
    // Unnamed code called by an unwinder (`__longjmp` in a stripped libc).
    if below.last().is_some_and(|c| names.of(c.func, funcs).exits) {
        return true;
    }
    let src = names.of(top.func, funcs);
    if src.exits {
        return true;
    }
    if funcs.get(top.func).is_some() && src.file.is_none() {
        // Named code that is no unwinder.
        return false;
    }
    // Unnamed code: the parts of one function are in one object.
    match (src.file, names.of(to, funcs).file) {
        (Some(a), Some(b)) => a != b,
        _ => true,
    }
}

impl ExactStack {
    /// An empty stack.
    pub fn new() -> Self {
        ExactStack::default()
    }

    /// An empty stack for a stream that starts mid-run: the first frames' callers are
    /// learnt from the returns into them, and written as slices enclosing what was
    /// written ([`TraceSink::duration_begin_enclosing`]: the sink must put them in order,
    /// e.g. `ptscope_stacks::ordered::OrderedSink`). `annotate`: mark inferred starts in
    /// the slice's name (transcripts), not only in an argument.
    pub fn mid_run(annotate: bool) -> Self {
        ExactStack {
            mid_run: true,
            annotate,
            ..ExactStack::default()
        }
    }

    /// How deep the stack is (frames, not counting `[syscall]`/`[untraced]`).
    pub fn depth(&self) -> usize {
        self.frames.len()
    }

    /// The time of the last step.
    pub fn last_time(&self) -> u64 {
        self.last
    }

    fn touch(&mut self, i: usize) {
        self.dirty = self.dirty.min(i);
    }

    fn truncate(&mut self, i: usize) {
        if i < self.frames.len() {
            self.sites.truncate(self.frames[i].first_site);
            self.frames.truncate(i);
            self.touch(i);
        }
    }

    fn push(&mut self, f: Frame) {
        self.touch(self.frames.len());
        self.frames.push(Frame {
            first_site: self.sites.len(),
            ..f
        });
    }

    /// The top frame now runs `to`'s code (its name follows; the stack's shape does not).
    fn rename_top(&mut self, to: FuncId, funcs: &Functions) {
        if to == UNKNOWN_FUNC && !self.frames.is_empty() {
            return;
        }
        match self.frames.last_mut() {
            Some(top) => {
                if top.func != to {
                    let f = Frame::new(to, funcs, top.ret);
                    top.func = to;
                    top.entry = f.entry;
                    top.known = f.known;
                    let i = self.frames.len() - 1;
                    self.touch(i);
                }
            }
            // The thread's root, or code reached after everything known was left.
            None => self.push(Frame::new(to, funcs, 0)),
        }
    }

    /// Control left the top frame's function by a jump, or by a return to an address no
    /// call pushed: inside an ancestor's (named) function that is a non-local exit to
    /// the innermost such ancestor (for a jump, only from code that may exit so); at a
    /// function's entry, or anywhere else, the top frame continues there (a tail call,
    /// a trampoline).
    fn leave(&mut self, to: FuncId, at_entry: bool, jump: bool, funcs: &Functions) {
        if self.frames.last().is_some_and(|top| top.func == to) {
            return;
        }
        let known = funcs.get(to).is_some_and(|f| f.known);
        if known
            && !at_entry
            && (!jump || may_exit_non_locally(&self.frames, &mut self.names, to, funcs))
        {
            // libgcc's `_Unwind_Resume` (at the end of a cleanup pad) resumes unwinding
            // past its caller, whose cleanup just ran: the pad it jumps to is a frame's
            // strictly above that caller, even of the same function (a recursion whose
            // every level has a cleanup).
            let resumes_past_caller = match self.frames.last() {
                Some(top) => top.known && self.names.of(top.func, funcs).unwind_resume,
                None => false,
            };
            let below = self
                .frames
                .len()
                .saturating_sub(1 + usize::from(resumes_past_caller));
            if let Some(i) = self.frames[..below]
                .iter()
                .rposition(|fr| fr.known && fr.func == to)
            {
                self.truncate(i + 1);
                return;
            }
        }
        self.rename_top(to, funcs);
    }

    /// Applies one step (times must not go backwards).
    pub fn apply(&mut self, s: &ExactStep, funcs: &Functions) {
        self.last = self.last.max(s.time);
        let first = *self.first_time.get_or_insert(s.time);
        let trampoline = std::mem::take(&mut self.trampoline);
        match s.kind {
            ExactKind::Start(r) => {
                if self.overlay.take().is_some() {
                    self.touch(self.frames.len());
                }
                let stop = self.stop.take();
                match r {
                    Restart::First if self.mid_run && self.frames.is_empty() => {
                        self.push(Frame {
                            inferred: true,
                            ..Frame::new(s.to, funcs, 0)
                        });
                    }
                    Restart::First | Restart::Resume => self.rename_top(s.to, funcs),
                    Restart::Handler => match self.frames.last_mut() {
                        // The kernel restored the interrupted code at the last handler's
                        // rt_sigreturn, then delivered this signal there: this handler
                        // replaces that one.
                        Some(top)
                            if top.signal && trampoline && stop.is_some_and(|s| s.sigreturn) =>
                        {
                            let ret = top.ret;
                            let i = self.frames.len() - 1;
                            self.truncate(i);
                            self.push(Frame {
                                signal: true,
                                ..Frame::new(s.to, funcs, ret)
                            });
                        }
                        _ => self.push(Frame {
                            signal: true,
                            ..Frame::new(s.to, funcs, 0)
                        }),
                    },
                    Restart::Sigreturn => match self.frames.iter().rposition(|f| f.signal) {
                        Some(i) => {
                            let interrupted = i.checked_sub(1).map(|j| self.frames[j].func);
                            if interrupted == Some(s.to) || s.to == UNKNOWN_FUNC {
                                self.truncate(i);
                            } else {
                                // The handler changed where the code resumes (Go's
                                // asynchronous preemption: `asyncPreempt` runs, and
                                // returns to the interrupted code later): it runs in
                                // the handler's place.
                                self.truncate(i + 1);
                                let ret = self.frames[i].ret;
                                self.truncate(i);
                                self.push(Frame {
                                    signal: true,
                                    ..Frame::new(s.to, funcs, ret)
                                });
                            }
                        }
                        None => self.rename_top(s.to, funcs),
                    },
                }
            }
            ExactKind::Call { ret } => {
                if let Some(top) = self.frames.last() {
                    if !self.sites[top.first_site..].contains(&ret) {
                        self.sites.push(ret);
                    }
                }
                self.push(Frame::new(s.to, funcs, ret));
            }
            ExactKind::Return => {
                // Mid-run, a return out of the oldest frame known goes to its caller,
                // which was running since before the stream began.
                if self.mid_run
                    && self.frames.len() == 1
                    && self.frames[0].ret == 0
                    && !self.frames[0].signal
                    && s.to != UNKNOWN_FUNC
                    && self.frames[0].func != s.to
                {
                    let _ = first;
                    self.frames[0].ret = s.to_addr;
                    self.frames.insert(
                        0,
                        Frame {
                            inferred: true,
                            ..Frame::new(s.to, funcs, 0)
                        },
                    );
                    self.dirty = self.dirty.saturating_add(1);
                    self.revealed.push(s.to);
                }
                let n = self.frames.len();
                let back = if s.to == UNKNOWN_FUNC {
                    n.checked_sub(1)
                } else if s.to_addr != 0 {
                    self.frames
                        .iter()
                        .rposition(|f| f.ret == s.to_addr && f.ret != 0)
                } else {
                    // Only the function is known: the innermost frame whose caller runs it.
                    (1..n)
                        .rev()
                        .find(|&i| !self.frames[i].signal && self.frames[i - 1].func == s.to)
                };
                match back {
                    Some(i) => {
                        self.truncate(i);
                        self.rename_top(s.to, funcs);
                    }
                    // Code a handler made the interrupted code resume in (Go's
                    // `asyncPreempt`) returns to the code the signal interrupted.
                    None if n >= 2
                        && self.frames[n - 1].signal
                        && self.frames[n - 2].func == s.to =>
                    {
                        self.truncate(n - 1);
                    }
                    // A handler returns into the signal trampoline (`sa_restorer`), which
                    // runs in its frame's place until rt_sigreturn.
                    None if self.frames.last().is_some_and(|f| f.signal) => {
                        self.rename_top(s.to, funcs);
                        self.trampoline = true;
                    }
                    None => {
                        self.leave(s.to, false, false, funcs);
                        self.trampoline = true;
                    }
                }
            }
            ExactKind::Jump { indirect } => {
                if self.frames.last().is_none_or(|fr| fr.func != s.to) {
                    // Without a symbol, an indirect jump to where a call made by a frame
                    // below returns lands in that frame (`longjmp` to its `setjmp`).
                    let known = funcs.get(s.to).is_some_and(|f| f.known);
                    let owner = match self.frames.split_last() {
                        Some((top, below))
                            if indirect
                                && !known
                                && s.to_addr != 0
                                && !self.sites[top.first_site..].contains(&s.to_addr)
                                && may_exit_non_locally(
                                    &self.frames,
                                    &mut self.names,
                                    s.to,
                                    funcs,
                                ) =>
                        {
                            (0..below.len()).rev().find(|&i| {
                                let end = self.frames[i + 1].first_site;
                                self.sites[below[i].first_site..end].contains(&s.to_addr)
                            })
                        }
                        _ => None,
                    };
                    match owner {
                        Some(i) => {
                            self.truncate(i + 1);
                            self.rename_top(s.to, funcs);
                        }
                        None => self.leave(s.to, s.at_entry(funcs), true, funcs),
                    }
                }
            }
            ExactKind::Syscall { sigreturn, .. } => {
                self.trampoline = trampoline;
                self.overlay = Some(Overlay::Syscall);
                self.stop = Some(Stop { sigreturn });
                self.touch(self.frames.len());
            }
            ExactKind::Async => {
                self.overlay = Some(Overlay::Untraced);
                self.stop = Some(Stop { sigreturn: false });
                self.touch(self.frames.len());
            }
        }
    }

    /// The name of a slice whose start is inferred: marked in transcripts (`annotate`),
    /// as is otherwise (its argument says so).
    fn inferred_name<'a>(&self, name: &'a str) -> Cow<'a, str> {
        if self.annotate {
            Cow::Owned(format!("{name} {INFERRED}"))
        } else {
            Cow::Borrowed(name)
        }
    }

    /// Writes what changed since the last write to `track` at `time`: the slices that
    /// ended, then those that began.
    pub fn write<S: TraceSink>(
        &mut self,
        sink: &mut S,
        track: S::Thread,
        time: u64,
        funcs: &Functions,
    ) {
        let t0 = i64::try_from(self.first_time.unwrap_or(0)).unwrap_or(i64::MAX);
        for f in std::mem::take(&mut self.revealed) {
            let name = self.inferred_name(funcs.name(f));
            sink.duration_begin_enclosing(track, &name, t0, &INFERRED_ARGS);
            self.shown.insert(0, Shown::Func(f));
        }
        let want = |i: usize| -> Option<Shown> {
            match self.frames.get(i) {
                Some(f) => Some(Shown::Func(f.func)),
                None if i == self.frames.len() => self.overlay.map(Shown::Overlay),
                None => None,
            }
        };
        let mut d = self.dirty.min(self.shown.len());
        while d < self.shown.len() && want(d) == Some(self.shown[d]) {
            d += 1;
        }
        let t = i64::try_from(time).unwrap_or(i64::MAX);
        while self.shown.len() > d {
            let name = self.shown.pop().map_or("", |s| s.name(funcs));
            sink.duration_end(track, name, t, &[]);
        }
        while let Some(w) = want(self.shown.len()) {
            let i = self.shown.len();
            let inferred = self.frames.get(i).is_some_and(|f| f.inferred);
            let name = w.name(funcs);
            match w {
                _ if inferred => {
                    sink.duration_begin(track, &self.inferred_name(name), t, &INFERRED_ARGS)
                }
                // By the function's number: the sink need not look its name up.
                Shown::Func(f) => sink.duration_begin_name(track, Name::new(f, name), t, &[]),
                Shown::Overlay(_) => sink.duration_begin(track, name, t, &[]),
            }
            self.shown.push(w);
        }
        self.dirty = self.frames.len();
    }

    /// Applies a step and writes what it changed.
    pub fn step<S: TraceSink>(
        &mut self,
        sink: &mut S,
        track: S::Thread,
        s: &ExactStep,
        funcs: &Functions,
    ) {
        self.apply(s, funcs);
        self.write(sink, track, s.time, funcs);
    }

    /// Ends every open slice at `time` (the thread's or the snapshot's end); the stack is
    /// forgotten.
    pub fn close<S: TraceSink>(
        &mut self,
        sink: &mut S,
        track: S::Thread,
        time: u64,
        funcs: &Functions,
    ) {
        let time = time.max(self.last);
        self.frames.clear();
        self.sites.clear();
        self.overlay = None;
        self.stop = None;
        self.trampoline = false;
        self.revealed.clear();
        self.dirty = 0;
        self.write(sink, track, time, funcs);
    }
}

/// Several threads' [`ExactStack`]s written into one sink, each thread on its own track
/// (`NAME [tid=T]`) in its process's group (`NAME [pid=P]`), as the other writers name
/// them.
pub struct ExactWriter<S: TraceSink> {
    sink: S,
    groups: Vec<(u32, u32)>,
    threads: Vec<(S::Thread, ExactStack)>,
}

impl<S: TraceSink> ExactWriter<S> {
    /// A writer into `sink`.
    pub fn new(sink: S) -> Self {
        ExactWriter {
            sink,
            groups: Vec::new(),
            threads: Vec::new(),
        }
    }

    /// A new thread `tid` of process `pid`, named `name`; the process's group is made
    /// with its first thread. Returns the thread's number for [`ExactWriter::step`].
    pub fn thread(&mut self, pid: u32, tid: u32, name: &str) -> usize {
        let group = match self.groups.iter().find(|g| g.0 == pid) {
            Some(g) => g.1,
            None => {
                let g = self.sink.allocate_pid(&format!("{name} [pid={pid}]"));
                self.groups.push((pid, g));
                g
            }
        };
        let track = self
            .sink
            .allocate_thread(group, &format!("{name} [tid={tid}]"));
        self.threads.push((track, ExactStack::new()));
        self.threads.len() - 1
    }

    /// Gives thread `t` (of process `pid`, thread `tid`) a new name.
    pub fn rename(&mut self, t: usize, tid: u32, name: &str) {
        if let Some((track, _)) = self.threads.get(t) {
            self.sink
                .rename_thread(*track, &format!("{name} [tid={tid}]"));
        }
    }

    /// Applies one step of thread `t` and writes what it changed.
    pub fn step(&mut self, t: usize, s: &ExactStep, funcs: &Functions) {
        if let Some((track, stack)) = self.threads.get_mut(t) {
            stack.step(&mut self.sink, *track, s, funcs);
        }
    }

    /// Ends thread `t`'s open slices at `time` (its end, or its snapshot's).
    pub fn end_thread(&mut self, t: usize, time: u64, funcs: &Functions) {
        if let Some((track, stack)) = self.threads.get_mut(t) {
            stack.close(&mut self.sink, *track, time, funcs);
        }
    }

    /// The sink, to write more (an info track).
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Hands the sink back.
    pub fn finish(self) -> S {
        self.sink
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ordered::OrderedSink;
    use crate::transcript::TranscriptSink;
    use ptscope_event::exact::ExactStep;

    /// A stream that starts mid-run learns the callers of its first frame from the
    /// returns into them: each slice starts with the stream, outermost first.
    #[test]
    fn callers_below_a_mid_run_start_enclose_it() {
        let mut f = Functions::default();
        let inner = f.add(0x3000, true, "inner");
        let mid = f.add(0x2000, true, "mid");
        let main = f.add(0x1000, true, "main");
        let leaf = f.add(0x4000, true, "leaf");
        let mut sink = OrderedSink::new(TranscriptSink::default());
        let t = sink.allocate_thread(0, "t");
        let mut st = ExactStack::mid_run(true);
        for s in [
            ExactStep::new(10, ExactKind::Start(Restart::First), inner),
            ExactStep::new(20, ExactKind::Return, mid),
            ExactStep::new(30, ExactKind::Call { ret: 0x2010 }, leaf).at(0x4000),
            ExactStep::new(40, ExactKind::Return, mid).at(0x2010),
            ExactStep::new(50, ExactKind::Return, main),
        ] {
            st.step(&mut sink, t, &s, &f);
        }
        st.close(&mut sink, t, 60, &f);
        let out = sink.finish().expect("in memory").render();
        assert_eq!(
            out,
            "->     10ns BEGIN main [inferred start time]\n\
             ->     10ns BEGIN mid [inferred start time]\n\
             ->     10ns BEGIN inner [inferred start time]\n\
             ->     20ns END   inner [inferred start time]\n\
             ->     30ns BEGIN leaf\n\
             ->     40ns END   leaf\n\
             ->     50ns END   mid [inferred start time]\n\
             ->     60ns END   main [inferred start time]\n"
        );
    }

    /// The frames' function names, outermost first.
    fn names(st: &ExactStack, f: &Functions) -> Vec<String> {
        st.frames
            .iter()
            .map(|fr| f.name(fr.func).to_string())
            .collect()
    }

    /// python3's evaluation loop jumps into its stripped `.cold` part while an outer call
    /// of the loop runs in that part: no unwind, the inner frame goes on there (before,
    /// the frames between were dropped); a jump from `longjmp` still unwinds.
    #[test]
    fn a_jump_into_an_ancestors_cold_part_is_no_unwind_but_longjmp_is() {
        let mut f = Functions::default();
        let main = f.add(0x1000, true, "main");
        let eval = f.add(0x2000, true, "_PyEval_EvalFrameDefault");
        let cold = f.add(0x4517d5, true, "python3.11+0x4517d5");
        let lj = f.add(0x9000, true, "__longjmp_chk@@GLIBC_2.11");
        let mut st = ExactStack::new();
        let jump = |t, to, at| ExactStep::new(t, ExactKind::Jump { indirect: true }, to).at(at);
        for s in [
            ExactStep::new(1, ExactKind::Start(Restart::First), main).at(0x1000),
            ExactStep::new(2, ExactKind::Call { ret: 0x1010 }, eval).at(0x2000),
            jump(3, cold, 0x4517d5),
            ExactStep::new(4, ExactKind::Call { ret: 0x4517e0 }, eval).at(0x2000),
            jump(5, cold, 0x451800),
        ] {
            st.apply(&s, &f);
        }
        assert_eq!(
            names(&st, &f),
            ["main", "python3.11+0x4517d5", "python3.11+0x4517d5"]
        );
        st.apply(&ExactStep::new(6, ExactKind::Return, cold).at(0x4517e0), &f);
        assert_eq!(names(&st, &f), ["main", "python3.11+0x4517d5"]);
        // longjmp back into the middle of main unwinds.
        st.apply(
            &ExactStep::new(7, ExactKind::Call { ret: 0x451810 }, lj).at(0x9000),
            &f,
        );
        st.apply(&jump(8, main, 0x1020), &f);
        assert_eq!(names(&st, &f), ["main"]);
    }

    /// A recursion whose every level has a cleanup: each pad ends in `_Unwind_Resume`,
    /// whose jump lands in the pad of the next outer level, never in its own caller.
    #[test]
    fn unwind_resume_lands_above_its_caller() {
        let mut f = Functions::default();
        let main = f.add(0x1000, true, "main");
        let parse = f.add(0x2000, true, "parse");
        let resume = f.add(0x3000, true, "_Unwind_Resume@@GCC_3.0");
        let mut st = ExactStack::new();
        st.apply(
            &ExactStep::new(1, ExactKind::Start(Restart::First), main).at(0x1000),
            &f,
        );
        st.apply(
            &ExactStep::new(2, ExactKind::Call { ret: 0x1008 }, parse).at(0x2000),
            &f,
        );
        for t in 3..6 {
            st.apply(
                &ExactStep::new(t, ExactKind::Call { ret: 0x2010 }, parse).at(0x2000),
                &f,
            );
        }
        assert_eq!(st.frames.len(), 5);
        for depth in (1..4).rev() {
            let t = 10 * depth as u64;
            st.apply(
                &ExactStep::new(t, ExactKind::Call { ret: 0x2045 }, resume).at(0x3000),
                &f,
            );
            let pad = ExactStep::new(t + 1, ExactKind::Jump { indirect: true }, parse).at(0x2030);
            st.apply(&pad, &f);
            assert_eq!(st.frames.len(), 1 + depth, "{:?}", names(&st, &f));
        }
    }
}
