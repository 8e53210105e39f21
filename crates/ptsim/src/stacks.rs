//! The true call stack of each thread over time, named as perf names functions, in the
//! shape the project's fidelity scoring uses (`ptscope-groundtruth`'s `ThreadTruth`
//! timeline): contiguous pieces `(start_ns, end_ns, stack root first)`.
//!
//! Conventions follow FIDELITY.md: a frame is a function; a return pops to the frame whose
//! call pushed its destination (call/return pairing, never names); a jump to another
//! function's entry is a tail call (the top frame changes function); a jump, or a return
//! to an address no call pushed, landing inside an ancestor's symbolised function unwinds
//! to it (exceptions, OCaml raise, `longjmp`); a signal handler is a frame on top of the
//! code it interrupted (delivered asynchronously or on the way back from a syscall), and
//! `rt_sigreturn` pops back to that code; `[syscall]` sits on top between a syscall and
//! the restart of tracing, `[untraced]` after an asynchronous stop. Code without a symbol
//! is named per address, and those names never decide the stack's shape.
//! [`crate::shadow`] checks the shape against a name-free shadow stack.

use crate::perfscript::Symbols;
use crate::truth::{Step, StepKind, ThreadTrace};
use std::io::Write;
use std::path::Path;

/// One frame: the function and the address its call returns to (0 if not called).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Frame {
    /// The function's entry: perf's symbol's, else the address the frame's code was
    /// reached at (such entries name a frame but never decide the stack's shape).
    entry: u64,
    /// `entry` is a symbol's.
    known: bool,
    name: String,
    ret: u64,
    /// A signal handler's frame: `ret` is where the interrupted code resumes.
    signal: bool,
    /// For a handler of a signal delivered at a syscall's return, the syscall
    /// instruction: its `rt_sigreturn` may resume there instead of at `ret` (the kernel
    /// restarts a syscall the signal interrupted). 0 otherwise.
    restart: u64,
    /// Return addresses of the calls this frame made: code of its own, whatever names say.
    sites: Vec<u64>,
}

impl Frame {
    fn new(f: Func, ret: u64) -> Self {
        Frame {
            entry: f.entry,
            known: f.known,
            name: f.name,
            ret,
            signal: false,
            restart: 0,
            sites: Vec::new(),
        }
    }
}

/// The function holding an address, as perf names it.
struct Func {
    name: String,
    entry: u64,
    /// Perf has a symbol for it (else `entry` is the address itself).
    known: bool,
}

/// A thread's true stacks over time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackTimeline {
    /// Thread id.
    pub tid: u32,
    /// Contiguous pieces `(start_ns, end_ns, stack root first)` of positive length.
    pub pieces: Vec<(u64, u64, Vec<String>)>,
}

impl StackTimeline {
    /// The stack at perf time `t`, if `t` is inside the timeline.
    pub fn at(&self, t: u64) -> Option<&[String]> {
        let i = self.pieces.partition_point(|p| p.1 <= t);
        self.pieces
            .get(i)
            .filter(|p| p.0 <= t)
            .map(|p| p.2.as_slice())
    }
}

/// Names code perf has no symbol for.
pub type DsoOf<'a> = &'a dyn Fn(u64) -> Option<&'a str>;

fn function(syms: &Symbols, dso: DsoOf<'_>, addr: u64) -> Func {
    match syms.function(addr) {
        Some((name, entry)) => Func {
            name: name.to_string(),
            entry,
            known: true,
        },
        // ptscope names a location perf calls `[unknown]` after its address and DSO; a
        // function without a symbol is named after its entry the same way.
        None => Func {
            name: format!(
                "[unknown @ {addr:#x} ({})]",
                dso(addr).unwrap_or("[unknown]")
            ),
            entry: addr,
            known: false,
        },
    }
}

/// Replays a thread's steps into its stack timeline; `ns` converts instruction clocks,
/// `dso` names the file mapped at an address.
pub fn timeline(
    t: &ThreadTrace,
    ns: &dyn Fn(u64) -> u64,
    syms: &Symbols,
    dso: DsoOf<'_>,
) -> StackTimeline {
    let times: Vec<u64> = t.steps.iter().map(|s| ns(s.clock)).collect();
    timeline_at(t, &times, syms, dso)
}

/// [`timeline`] with an explicit time for every step (`times[i]` for `t.steps[i]`).
pub fn timeline_at(
    t: &ThreadTrace,
    times: &[u64],
    syms: &Symbols,
    dso: DsoOf<'_>,
) -> StackTimeline {
    let mut replay = Replay::new(syms, dso);
    let mut pieces: Vec<(u64, u64, Vec<String>)> = Vec::new();
    let mut last: Option<(u64, Vec<String>)> = None;
    for (i, s) in t.steps.iter().enumerate() {
        let now = times.get(i).copied().unwrap_or(0);
        replay.apply(s);
        let stack = replay.names();
        match &last {
            Some((_, prev)) if *prev == stack => {}
            _ => {
                if let Some((start, prev)) = last.take() {
                    if now > start {
                        pieces.push((start, now, prev));
                    }
                }
                last = Some((now, stack));
            }
        }
    }
    if let (Some((start, stack)), Some(&end)) = (last, times.get(t.steps.len().wrapping_sub(1))) {
        if end > start {
            pieces.push((start, end, stack));
        }
    }
    // Merge neighbours that ended up equal after zero-length pieces were dropped.
    let mut merged: Vec<(u64, u64, Vec<String>)> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match merged.last_mut() {
            Some(m) if m.2 == p.2 && m.1 == p.0 => m.1 = p.1,
            _ => merged.push(p),
        }
    }
    StackTimeline {
        tid: t.tid,
        pieces: merged,
    }
}

/// The true stack replayed step by step: what [`timeline_at`] records after each step.
pub struct Replay<'a, 'b> {
    syms: &'a Symbols,
    dso: DsoOf<'b>,
    frames: Vec<Frame>,
    overlay: Option<&'static str>,
    stop: Option<Stop>,
    /// The last step was a return to an address no call pushed: a handler returning into
    /// the signal trampoline, whose next step is the `rt_sigreturn` syscall.
    trampoline: bool,
}

impl<'a, 'b> Replay<'a, 'b> {
    /// An empty stack, naming functions with `syms` (and `dso` where perf has no symbol).
    pub fn new(syms: &'a Symbols, dso: DsoOf<'b>) -> Self {
        Replay {
            syms,
            dso,
            frames: Vec::new(),
            overlay: None,
            stop: None,
            trampoline: false,
        }
    }

    /// The frames' return addresses, root first (0 for a frame nothing called).
    pub fn rets(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.frames.iter().map(|f| f.ret)
    }

    /// [`Replay::names`] without copying them: a scorer replaying millions of steps
    /// compares each step's names with the last step's instead of allocating.
    pub fn names_iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.frames
            .iter()
            .map(|f| f.name.as_str())
            .chain(self.overlay)
    }

    /// The stack's names, root first, with `[syscall]` or `[untraced]` on top while
    /// tracing is stopped.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.frames.iter().map(|f| f.name.clone()).collect();
        if let Some(o) = self.overlay {
            v.push(o.to_string());
        }
        v
    }

    /// Applies one step.
    ///
    /// The shape follows call/return pairing (the return address each call pushed), never
    /// names: a return pops to the innermost frame whose return address it targets. Only
    /// a transfer no call explains (a jump out of the top function, a return to an address
    /// no call pushed) consults symbols: landing inside an ancestor's function (by perf's
    /// symbol, never a per-address name) unwinds to that ancestor (`longjmp`, an OCaml
    /// raise, a C++ landing pad), as does, without a symbol, an indirect jump to the
    /// return address of a call an ancestor made (`longjmp` to its `setjmp`); otherwise
    /// the top frame continues there (a tail call, or a signal handler returning into the
    /// signal trampoline).
    pub fn apply(&mut self, s: &Step) {
        let (syms, dso) = (self.syms, self.dso);
        let frames = &mut self.frames;
        let trampoline = std::mem::take(&mut self.trampoline);
        match s.kind {
            StepKind::Start => {
                self.overlay = None;
                let f = function(syms, dso, s.to);
                match self.stop.take() {
                    // Tracing resumes where it stopped.
                    Some(stop) if stop.resume == s.to => rename_top(frames, f),
                    Some(stop) => {
                        // rt_sigreturn resumes the code a signal interrupted: pop its handler.
                        // A signal delivered between a return and its destination leaves
                        // no trace in the block log (the return seems to go to the
                        // handler), so the handler can run in the returning frame's place:
                        // its rt_sigreturn then goes to that frame's return address.
                        let back = frames
                            .iter()
                            .rposition(|fr| fr.signal && (fr.ret == s.to || fr.restart == s.to))
                            .or_else(|| frames.iter().rposition(|fr| fr.ret == s.to))
                            .filter(|_| stop.syscall);
                        match back {
                            Some(i) => {
                                frames.truncate(i);
                                rename_top(frames, f);
                            }
                            // A signal delivered on the way back from the kernel: its
                            // handler runs on top of the interrupted code and returns,
                            // through the trampoline and rt_sigreturn, to where it stopped.
                            None => match frames.last_mut() {
                                // The syscall was a finished handler's rt_sigreturn: the
                                // kernel restored the interrupted code, then delivered this
                                // signal there, so this handler replaces that one.
                                Some(top) if top.signal && trampoline && stop.syscall => {
                                    *top = Frame {
                                        signal: true,
                                        restart: top.restart,
                                        ..Frame::new(f, top.ret)
                                    };
                                }
                                // rt_sigreturn of a handler whose delivery the block log
                                // hid (between an indirect call or jump and its target,
                                // which then seemed to be the handler): the frame it ran in
                                // continues at the interrupted target.
                                Some(_) if trampoline && stop.syscall => rename_top(frames, f),
                                _ => frames.push(Frame {
                                    signal: true,
                                    restart: if stop.syscall { stop.at } else { 0 },
                                    ..Frame::new(f, stop.resume)
                                }),
                            },
                        }
                    }
                    None => rename_top(frames, f),
                }
            }
            StepKind::Call | StepKind::IndirectCall => {
                let f = function(syms, dso, s.to);
                let ret = s.from + s.len as u64;
                if let Some(top) = frames.last_mut() {
                    if !top.sites.contains(&ret) {
                        top.sites.push(ret);
                    }
                }
                frames.push(Frame::new(f, ret));
            }
            StepKind::Return => {
                let f = function(syms, dso, s.to);
                match frames.iter().rposition(|fr| fr.ret == s.to) {
                    Some(i) => {
                        frames.truncate(i);
                        rename_top(frames, f);
                    }
                    // A handler returns into the signal trampoline (`sa_restorer`), which
                    // runs in its frame's place until rt_sigreturn; the trampoline's code
                    // can be an ancestor's (a signal delivered as an earlier rt_sigreturn
                    // returned), which must not look like a non-local exit.
                    None if frames.last().is_some_and(|fr| fr.signal) => {
                        rename_top(frames, f);
                        self.trampoline = true;
                    }
                    None => {
                        leave(frames, f, false);
                        self.trampoline = true;
                    }
                }
            }
            StepKind::Jmp | StepKind::IndirectJmp | StepKind::Jcc { taken: true } => {
                let f = function(syms, dso, s.to);
                if frames.last().is_none_or(|fr| fr.entry != f.entry) {
                    // Without a symbol, an indirect jump to where a call made by a frame
                    // below returns lands in that frame (`longjmp` to its `setjmp`'s
                    // return address), unless the top frame made such a call itself.
                    let owner = match frames.split_last() {
                        Some((top, below))
                            if s.kind == StepKind::IndirectJmp
                                && !f.known
                                && !top.sites.contains(&s.to) =>
                        {
                            below.iter().rposition(|fr| fr.sites.contains(&s.to))
                        }
                        _ => None,
                    };
                    match owner {
                        Some(i) => {
                            frames.truncate(i + 1);
                            rename_top(frames, f);
                        }
                        None => {
                            let at_entry = s.to == f.entry;
                            leave(frames, f, at_entry);
                        }
                    }
                }
            }
            StepKind::Jcc { taken: false } => {}
            StepKind::Syscall => {
                self.trampoline = trampoline;
                self.overlay = Some("[syscall]");
                self.stop = Some(Stop {
                    syscall: true,
                    at: s.from,
                    resume: s.from + s.len as u64,
                });
            }
            StepKind::Async { .. } => {
                self.overlay = Some("[untraced]");
                self.stop = Some(Stop {
                    syscall: false,
                    at: s.from,
                    resume: s.from,
                });
            }
        }
    }
}

/// Where tracing stopped and would resume if nothing intervened.
#[derive(Copy, Clone, Debug)]
struct Stop {
    /// Stopped at a syscall (only a syscall can be `rt_sigreturn`).
    syscall: bool,
    /// The syscall instruction, or the instruction an asynchronous stop interrupted.
    at: u64,
    /// The instruction after the syscall, or the one an asynchronous stop interrupted.
    resume: u64,
}

/// The top frame now runs `f`'s code (its name follows; the stack's shape does not).
fn rename_top(frames: &mut Vec<Frame>, f: Func) {
    match frames.last_mut() {
        Some(top) => {
            if top.entry != f.entry {
                top.entry = f.entry;
                top.known = f.known;
                top.name = f.name;
            }
        }
        // The thread's root, or code reached after everything known was left.
        None => frames.push(Frame::new(f, 0)),
    }
}

/// Control left the top frame's function by a jump, or by a return to an address no call
/// pushed (see also the return-site rule for indirect jumps in `apply`): inside an
/// ancestor's (symbolised) function that is a non-local exit to the
/// innermost such ancestor; at a function's entry (`at_entry`) or anywhere else the top
/// frame continues there (a tail call, a trampoline).
///
/// libgcc's `_Unwind_Resume` (called at the end of a cleanup landing pad) resumes unwinding
/// past its caller, whose cleanup just ran: the pad it jumps to belongs to a frame strictly
/// above that caller, even when both run the same function (a recursion whose every level
/// has a cleanup), so the innermost such ancestor is looked for above the caller.
fn leave(frames: &mut Vec<Frame>, f: Func, at_entry: bool) {
    if frames.last().is_some_and(|top| top.entry == f.entry) {
        return;
    }
    if f.known && !at_entry {
        let resumes_past_caller = frames
            .last()
            .is_some_and(|top| top.known && top.name.split('@').next() == Some("_Unwind_Resume"));
        let below = frames
            .len()
            .saturating_sub(1 + usize::from(resumes_past_caller));
        if let Some(i) = frames[..below]
            .iter()
            .rposition(|fr| fr.known && fr.entry == f.entry)
        {
            frames.truncate(i + 1);
            return;
        }
    }
    rename_top(frames, f);
}

/// Writes timelines as TSV: `tid start_ns end_ns frame;frame;…` (root first).
pub fn write_tsv(path: &Path, timelines: &[StackTimeline]) -> anyhow::Result<()> {
    use anyhow::Context;
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let res = (|| -> std::io::Result<()> {
        writeln!(
            w,
            "# ptsim true stacks v1: tid start_ns end_ns frames (root first, ';'-separated)"
        )?;
        for t in timelines {
            for (a, b, stack) in &t.pieces {
                writeln!(w, "{}\t{a}\t{b}\t{}", t.tid, stack.join(";"))?;
            }
        }
        w.flush()
    })();
    res.with_context(|| format!("cannot write {}", path.display()))
}

/// Step times on perf's clock: each step takes the time perf printed for its branch (steps
/// perf does not report, like not-taken conditionals, take the next reported time), and
/// steps sharing a timestamp are spread evenly up to the next one, as true times would be.
///
/// Scoring a writer against this truth measures its stack logic alone: PT timestamps
/// belong to packets, so perf's time for a branch can be after it (a TNT packet is emitted
/// when full) or before it (direct branches walked ahead of the next packet). Works for a
/// thread whose reported branches are exactly the tail of its true ones (full or snapshot
/// recordings without faults or unpredictable stretches), but for an unwalked tail
/// ([`crate::pt::Encoded::unwalked_tail`]: direct calls and jumps after the last packet
/// of a stream that ends traced, which perf never reports; those steps take the last
/// reported time); `None` otherwise.
pub fn perf_clock_times(
    t: &ThreadTrace,
    reported: &[crate::expected::Branch],
    ns: &dyn Fn(u64) -> u64,
) -> Option<Vec<u64>> {
    let truth: Vec<crate::expected::Branch> = crate::expected::truth_iter(t, ns).collect();
    if reported.is_empty() {
        return None;
    }
    let unwalked = crate::pt::packetless_tail(&t.steps);
    let aligned = |walked: usize| {
        let offset = walked.checked_sub(reported.len())?;
        truth[offset..walked]
            .iter()
            .zip(reported)
            .all(|(a, b)| a.kind == b.kind && a.from == b.from && a.to == b.to)
            .then_some(offset)
    };
    let offset = (0..=unwalked.min(truth.len())).find_map(|u| aligned(truth.len() - u))?;
    let mut times = vec![0u64; t.steps.len()];
    let mut k = 0usize; // index into the true branches
    let mut pending: Vec<usize> = Vec::new();
    for (i, s) in t.steps.iter().enumerate() {
        pending.push(i);
        if crate::expected::to_branch(s, t.tid, ns).is_some() {
            let at = reported[k.saturating_sub(offset).min(reported.len() - 1)].time;
            for j in pending.drain(..) {
                times[j] = at;
            }
            k += 1;
        }
    }
    let last = reported[reported.len() - 1].time;
    for j in pending {
        times[j] = last;
    }
    let mut i = 0;
    while i < times.len() {
        let t0 = times[i];
        let mut j = i;
        while j < times.len() && times[j] == t0 {
            j += 1;
        }
        let t1 = times.get(j).copied().unwrap_or(t0 + 1);
        let m = (j - i) as u64;
        for (n, x) in times[i..j].iter_mut().enumerate() {
            *x = t0 + t1.saturating_sub(t0) * n as u64 / m;
        }
        i = j;
    }
    Some(times)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::truth::Step;

    /// A recursion whose every level has a cleanup: each pad ends in `_Unwind_Resume`,
    /// whose jump lands in the pad of the *next outer* level, never in its own caller.
    #[test]
    fn unwind_resume_lands_above_its_caller() {
        let syms = Symbols::parse(
            "1000 main+0x0 => 2000 parse+0x0\n\
             2040 parse+0x40 => 3000 _Unwind_Resume+0x0\n\
             3080 _Unwind_Resume+0x80 => 2030 parse+0x30\n\
             2080 parse+0x80 => 4000 __restore_rt+0x0\n",
        );
        let none = |_: u64| None;
        let mut r = Replay::new(&syms, &none);
        let step = |kind, from, to| Step {
            clock: 0,
            kind,
            from,
            to,
            len: 5,
        };
        r.apply(&step(StepKind::Start, 0, 0x1000));
        r.apply(&step(StepKind::Call, 0x1008, 0x2000));
        for _ in 0..3 {
            r.apply(&step(StepKind::Call, 0x2010, 0x2000));
        }
        // Any other jump into an ancestor's function lands in the innermost one (the
        // thrower's own pad, reached by `_Unwind_RaiseException`, say).
        r.apply(&step(StepKind::Call, 0x2050, 0x4000));
        r.apply(&step(StepKind::IndirectJmp, 0x4010, 0x2030));
        assert_eq!(r.names(), ["main", "parse", "parse", "parse", "parse"]);
        // Each level's pad: the cleanup, then `_Unwind_Resume`, then the next pad out.
        for depth in (1..4).rev() {
            r.apply(&step(StepKind::Call, 0x2040, 0x3000));
            r.apply(&step(StepKind::IndirectJmp, 0x3080, 0x2030));
            assert_eq!(r.names().len(), 1 + depth, "{:?}", r.names());
        }
    }

    /// A signal delivered as a blocking syscall returns (interrupted: the kernel will
    /// restart it): the handler's `rt_sigreturn` resumes at the syscall instruction,
    /// not after it, and the handler's frame goes. Before, the handler's frame stayed,
    /// renamed to the function that made the syscall (`futex > futex` for as long as the
    /// restarted syscall blocked: 6.6 % of a Go run).
    #[test]
    fn a_restarted_syscall_returns_from_the_handler() {
        let syms = Symbols::parse(
            "1000 main+0x0 => 2000 futex+0x0\n\
             2021 futex+0x21 => 2023 futex+0x23\n\
             5000 handler+0x0 => 6000 restorer+0x0\n",
        );
        let none = |_: u64| None;
        let mut r = Replay::new(&syms, &none);
        let step = |kind, from, to, len| Step {
            clock: 0,
            kind,
            from,
            to,
            len,
        };
        r.apply(&step(StepKind::Start, 0, 0x1000, 0));
        r.apply(&step(StepKind::Call, 0x1008, 0x2000, 5));
        r.apply(&step(StepKind::Syscall, 0x2021, 0, 2));
        // The signal's handler runs and returns into the restorer's rt_sigreturn.
        r.apply(&step(StepKind::Start, 0, 0x5000, 0));
        assert_eq!(r.names(), ["main", "futex", "handler"]);
        r.apply(&step(StepKind::Return, 0x5010, 0x6000, 1));
        r.apply(&step(StepKind::Syscall, 0x6007, 0, 2));
        // The kernel restarts futex: the code resumes at its syscall instruction.
        r.apply(&step(StepKind::Start, 0, 0x2021, 0));
        assert_eq!(r.names(), ["main", "futex"]);
        r.apply(&step(StepKind::Syscall, 0x2021, 0, 2));
        r.apply(&step(StepKind::Start, 0, 0x2023, 0));
        assert_eq!(r.names(), ["main", "futex"]);
    }

    /// A thread killed in user code: perf reported neither the call nor the jump after
    /// its last packet. Their steps take the last reported time; any other mismatch is
    /// refused.
    #[test]
    fn perf_clock_times_allow_an_unwalked_tail() {
        let step = |clock, kind, from, to| Step {
            clock,
            kind,
            from,
            to,
            len: 5,
        };
        let t = ThreadTrace {
            tid: 1,
            steps: vec![
                step(10, StepKind::Start, 0, 0x1000),
                step(20, StepKind::IndirectCall, 0x1004, 0x2000),
                step(30, StepKind::Return, 0x2004, 0x1009),
                step(40, StepKind::Call, 0x1010, 0x3000),
                step(50, StepKind::Jmp, 0x3004, 0x3100),
            ],
        };
        let ns = |c: u64| c;
        let truth: Vec<crate::expected::Branch> = crate::expected::truth_iter(&t, &ns)
            .map(|b| crate::expected::Branch {
                time: b.time + 1,
                ..b
            })
            .collect();
        let whole = perf_clock_times(&t, &truth, &ns).expect("all reported");
        assert_eq!(whole, [11, 21, 31, 41, 51]);
        let walked = perf_clock_times(&t, &truth[..3], &ns).expect("the tail unwalked");
        assert_eq!(walked[..3], [11, 21, 31]);
        assert!(walked[3..].iter().all(|&x| x >= 31), "{walked:?}");
        // Missing more than the direct branches at the end is not an unwalked tail.
        assert_eq!(perf_clock_times(&t, &truth[..2], &ns), None);
    }
}
