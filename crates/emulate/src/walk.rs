//! One thread's exec stream → its [`ExactStep`]s, in one pass with bounded memory.
//!
//! Each logged block's action is worked out once, at first sight, and cached by block
//! id: how its last instruction transfers control, and the functions of its start, its
//! last instruction, its direct target and its fall-through. A block's transfer is then
//! a step at once (a direct call or jump), or when the next logged block shows where it
//! went (a return, an indirect call or jump, a conditional branch leaving its function):
//! in stack mode code between two logged blocks never leaves one function, so the next
//! block's function is the destination's, and its address is the destination itself
//! when no instruction ran in between. A signal handler's entry that is no such
//! destination is a signal delivery; a transfer it interrupted before its destination
//! ran waits (with the handler's steps behind it) until the handler's `rt_sigreturn`
//! resumes the code and the next block settles it.
//!
//! Times are counted as ptsim's truth counts them: the thread's own instructions, one
//! more for each stop (a syscall, a signal), and at a restart the global clock if other
//! threads moved it further; then converted to the chosen clock ([`Clock`]).

use crate::clock::{Anchor, HostClock, TimeBase};
use crate::names::Namer;
use crate::recording::{ThreadInput, View};
use crate::{KERNEL_INSNS, NS_PER_INSN};
use ptscope_blocklog::classify::{classify, Flow};
use ptscope_blocklog::format::TB_HANDLER_ENTRY;
use ptscope_blocklog::{Word, Words};
use ptscope_event::exact::{
    exits_non_locally, ExactKind, ExactStep, FuncId, Functions, Restart, UNKNOWN_FUNC,
};
use std::collections::VecDeque;

/// `rt_sigreturn` on x86-64.
const SYS_RT_SIGRETURN: u32 = 15;
/// `execve` and `execveat` on x86-64.
const SYS_EXECVE: u32 = 59;
const SYS_EXECVEAT: u32 = 322;
/// Steps a transfer interrupted by a signal may hold back before it is settled as
/// unknown (a handler that never returns: `siglongjmp`).
const MAX_HELD: usize = 1 << 20;
/// Steps an asynchronous stop is held for, waiting for the function its handler made
/// the code resume in to return to where it stopped.
const MAX_INJECTED: usize = 1 << 16;
/// Return addresses remembered per thread.
const MAX_RETURNS: usize = 1 << 12;

/// What a block does, worked out at its first execution.
#[derive(Copy, Clone, Debug)]
struct Action {
    vaddr: u64,
    end: u64,
    n: u32,
    flow: Flow,
    handler: bool,
    /// The function of its first and last instructions, of its direct target, of its
    /// fall-through.
    start_fn: FuncId,
    last_fn: FuncId,
    target_fn: FuncId,
    fall_fn: FuncId,
    /// Its last instruction is in a PLT stub, whose indirect jump goes to an entry.
    plt: bool,
}

/// A transfer waiting for the next block to show where it went.
#[derive(Copy, Clone, Debug)]
enum Awaiting {
    Return,
    IndirectCall { ret: u64 },
    IndirectJmp { plt: bool },
    Cond { target: u64, target_fn: FuncId },
}

/// A transfer waiting, where its step goes in the output, and what it came from.
#[derive(Copy, Clone, Debug)]
struct Pending {
    what: Awaiting,
    /// Its step's place: the output's sequence number.
    seq: u64,
    time: Raw,
    /// The function it leaves.
    from_fn: FuncId,
}

/// A step's time before conversion: the truth's clock (`running`), the thread's own
/// instructions, whether it restarts tracing, and the virtual clock's kernel time.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Raw {
    running: u64,
    own: u64,
    restart: bool,
    kernel_ns: u64,
}

/// An output slot: a step, the place of one not yet settled, or of one that turned out
/// to be nothing (a transfer that stayed in its function).
enum Slot {
    Ready(ExactStep, Raw),
    Held,
    Nothing,
}

/// A signal handler running: what it interrupted.
#[derive(Copy, Clone, Debug)]
struct Context {
    /// The transfer it interrupted before its destination was seen.
    waiting: Option<Pending>,
    /// Where the interrupted code resumes, when known (a delivery at a syscall's return).
    resume: Option<u64>,
    /// Entered right after an indirect call, which may have called the handler's
    /// function: the places of the delivery's two steps and the handler's entry, undone
    /// if the handler returns where that call pushed.
    maybe_called: Option<(u64, u64, FuncId, u64)>,
    /// The asynchronous stop's step, held until the code resumes (where tells the
    /// instruction it interrupted): its place, the step and its time.
    stop: Option<(u64, ExactStep, Raw)>,
}

/// A syscall stop awaiting its restart.
#[derive(Copy, Clone, Debug)]
struct Stopped {
    resume: u64,
    func: FuncId,
    /// The function the instruction after the syscall is in.
    resume_fn: FuncId,
    num: Option<u32>,
    /// The stop's step is written (it waits for the syscall's number).
    written: bool,
    time: Raw,
}

/// Figures about one thread's walk.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Logged blocks read.
    pub blocks: u64,
    /// Instructions the thread ran (logged and not).
    pub instructions: u64,
    /// Steps made.
    pub steps: u64,
    /// Signals delivered.
    pub signals: u64,
    /// Transfers whose destination was never seen (settled as unknown).
    pub unknown: u64,
}

/// One thread's walk.
pub struct Walker<'v, 'a> {
    view: &'v View<'a>,
    proc: usize,
    input: ThreadInput,
    piece: usize,
    words: Option<Words<'a>>,
    actions: Vec<Option<Action>>,
    namer: Namer,
    clock: TimeBase,
    host: HostClock,
    /// Added to every virtual-clock time (a thread's start on the main thread's clock).
    virtual_base: u64,
    /// Taken from every time: where the trace's time 0 is.
    origin: u64,

    running: u64,
    own: u64,
    global: u64,
    kernel_ns: u64,
    traced: bool,
    started: bool,
    pending_skip: u64,
    pending_clock: Option<u64>,
    pending_host: Option<u64>,
    syscall_entry_ns: Option<u64>,

    /// The last logged block's flow and end (not its whole action: copied per block).
    last: Option<(Flow, u64)>,
    awaiting: Option<Pending>,
    stopped: Option<Stopped>,
    /// Signal handlers running, innermost last.
    contexts: Vec<Context>,
    /// An asynchronous stop whose handler made the code resume in another function (Go's
    /// `asyncPreempt`), held until that function returns to where the code stopped.
    injected: Option<(u64, ExactStep, Raw)>,
    /// The return addresses the calls seen pushed, innermost last (at most
    /// [`MAX_RETURNS`]): where a return a signal interrupted was going.
    rets: Vec<u64>,
    /// Where the thread is (the function of the last destination seen).
    here: FuncId,

    out: VecDeque<Slot>,
    /// Sequence number of `out`'s front.
    front: u64,
    done: bool,
    /// Why the walk stopped early, if it did.
    pub problem: Option<String>,
    /// Figures so far.
    pub stats: WalkStats,
    /// The thread exec'd (a successful `execve`): `(time in ns, its host time)`.
    pub exec_at: Option<(u64, u64)>,
}

impl<'v, 'a> Walker<'v, 'a> {
    /// A walk of `input`'s stream, naming with `namer`, times on `clock`.
    pub fn new(
        view: &'v View<'a>,
        input: ThreadInput,
        namer: Namer,
        clock: TimeBase,
        virtual_base: u64,
        origin: u64,
    ) -> Self {
        Walker {
            view,
            proc: input.proc,
            input,
            piece: 0,
            words: None,
            actions: Vec::new(),
            namer,
            clock,
            host: HostClock::default(),
            virtual_base,
            origin,
            running: 0,
            own: 0,
            global: 0,
            kernel_ns: 0,
            traced: false,
            started: false,
            pending_skip: 0,
            pending_clock: None,
            pending_host: None,
            syscall_entry_ns: None,
            last: None,
            awaiting: None,
            stopped: None,
            contexts: Vec::new(),
            injected: None,
            rets: Vec::new(),
            here: UNKNOWN_FUNC,
            out: VecDeque::new(),
            front: 0,
            done: false,
            problem: None,
            stats: WalkStats::default(),
            exec_at: None,
        }
    }

    /// The thread.
    pub fn tid(&self) -> u32 {
        self.input.tid
    }

    /// Bytes of the stream read so far (for progress).
    pub fn position(&self) -> u64 {
        let done: usize = self.input.pieces[..self.piece.saturating_sub(1)]
            .iter()
            .map(|p| p.1)
            .sum();
        let here = match (self.piece.checked_sub(1), &self.words) {
            (Some(i), Some(w)) => w.offset().saturating_sub(self.input.pieces[i].0),
            _ => 0,
        };
        (done + here) as u64
    }

    /// The function holding `ip` (named as the steps name functions).
    pub fn function_of(&mut self, ip: u64) -> FuncId {
        self.namer.function(ip)
    }

    /// The functions the steps refer to.
    pub fn functions(&self) -> &Functions {
        &self.namer.funcs
    }

    /// Appends the next steps to `out` (at least one unless the walk is over); false
    /// when there are no more.
    pub fn fill(&mut self, out: &mut Vec<ExactStep>) -> bool {
        let before = out.len();
        while out.len() == before {
            self.drain(out);
            if out.len() > before {
                break;
            }
            if self.done {
                self.finish();
                self.drain(out);
                return out.len() > before;
            }
            self.advance();
        }
        true
    }

    /// Reads up to a few thousand words.
    fn advance(&mut self) {
        for _ in 0..4096 {
            let w = match self.words.as_mut().and_then(Iterator::next) {
                Some(Ok(w)) => w,
                Some(Err(e)) => {
                    self.problem = Some(format!("its exec stream is damaged: {e}"));
                    self.done = true;
                    return;
                }
                None => {
                    // The piece read is not read again by this walk.
                    if let Some(&done) = self
                        .piece
                        .checked_sub(1)
                        .and_then(|i| self.input.pieces.get(i))
                    {
                        self.view
                            .release(self.view.procs[self.proc].index.stream(done));
                    }
                    let Some(&piece) = self.input.pieces.get(self.piece) else {
                        self.done = true;
                        return;
                    };
                    self.piece += 1;
                    let data = self.view.procs[self.proc].index.stream(piece);
                    self.words = Some(Words::new(data, piece.0));
                    continue;
                }
            };
            match w {
                Word::Block(id) => self.block(id),
                Word::SkipBlock(k, id) => {
                    self.pending_skip = self.pending_skip.saturating_add(u64::from(k));
                    self.block(id);
                }
                Word::Skip(k) => self.pending_skip = self.pending_skip.saturating_add(u64::from(k)),
                Word::Clock(c) => self.pending_clock = Some(c),
                Word::Host(ns) => self.pending_host = Some(ns),
                Word::SyscallEntry { num, ns } => self.syscall_entry(num, ns),
                Word::SyscallReturn { ns, .. } => self.syscall_return(ns),
            }
            if self.done {
                return;
            }
        }
    }

    /// The action of block `id`, worked out at its first sight.
    fn action(&mut self, id: u32) -> Option<Action> {
        let i = id as usize;
        if let Some(Some(a)) = self.actions.get(i) {
            return Some(*a);
        }
        let tb = self.view.tb(self.proc, id)?;
        let last_addr = tb.last_addr();
        let flow = classify(tb.last, last_addr);
        let (start_fn, last_fn) = (
            self.namer.function(tb.vaddr),
            self.namer.function(last_addr),
        );
        let target_fn = match flow {
            Flow::Call { target } | Flow::Jmp { target } | Flow::Cond { target } => {
                self.namer.function(target)
            }
            _ => UNKNOWN_FUNC,
        };
        let fall_fn = self.namer.function(tb.end());
        let plt = self.namer.funcs.name(last_fn).ends_with("@plt");
        let a = Action {
            vaddr: tb.vaddr,
            end: tb.end(),
            n: tb.n_insns,
            flow,
            handler: tb.flags & TB_HANDLER_ENTRY != 0,
            start_fn,
            last_fn,
            target_fn,
            fall_fn,
            plt,
        };
        if self.actions.len() <= i {
            self.actions.resize(i + 1, None);
        }
        self.actions[i] = Some(a);
        Some(a)
    }

    /// Appends a step to the output.
    fn emit(&mut self, s: ExactStep, raw: Raw) {
        self.out.push_back(Slot::Ready(s, raw));
    }

    /// Reserves the output's next place for a step settled later.
    fn hold(&mut self) -> u64 {
        self.out.push_back(Slot::Held);
        self.front + self.out.len() as u64 - 1
    }

    /// Fills a reserved place.
    fn settle(&mut self, seq: u64, s: ExactStep, raw: Raw) {
        if let Some(slot) = seq
            .checked_sub(self.front)
            .and_then(|i| self.out.get_mut(i as usize))
        {
            *slot = Slot::Ready(s, raw);
        }
    }

    /// A reserved place settled as "nothing happened" (the transfer stayed in its
    /// function).
    fn settle_nothing(&mut self, p: &Pending) {
        if let Some(slot) = p
            .seq
            .checked_sub(self.front)
            .and_then(|i| self.out.get_mut(i as usize))
        {
            *slot = Slot::Nothing;
        }
    }

    /// Settles a waiting transfer: it went to `to` (at `addr` when known).
    fn settle_pending(&mut self, p: Pending, to: FuncId, addr: Option<u64>) {
        let time = self.time(p.time);
        match p.what {
            Awaiting::Return => {
                let s = ExactStep::new(time, ExactKind::Return, to);
                let s = addr.map_or(s, |a| s.at(a));
                self.settle(p.seq, s, p.time);
            }
            Awaiting::IndirectCall { ret } => {
                self.push_return(ret);
                let s = ExactStep::new(time, ExactKind::Call { ret }, to);
                let entry = self.namer.entry_of(to);
                let s = s.at(addr.unwrap_or(entry));
                self.settle(p.seq, s, p.time);
            }
            Awaiting::IndirectJmp { plt } => {
                if to == p.from_fn || to == UNKNOWN_FUNC {
                    self.settle_nothing(&p);
                    return;
                }
                self.abandon_calls(p.from_fn, to);
                let s = ExactStep::new(time, ExactKind::Jump { indirect: true }, to);
                // A PLT stub jumps to a function's entry.
                let addr = addr.or_else(|| plt_entry(plt, self.namer.entry_of(to)));
                let s = addr.map_or(s, |a| s.at(a));
                self.settle(p.seq, s, p.time);
            }
            Awaiting::Cond { target, target_fn } => {
                let taken = match addr {
                    Some(a) => a == target,
                    None => to == target_fn && to != p.from_fn,
                };
                if taken && target_fn != p.from_fn {
                    let s = ExactStep::new(time, ExactKind::Jump { indirect: false }, target_fn)
                        .at(target);
                    self.settle(p.seq, s, p.time);
                } else {
                    self.settle_nothing(&p);
                }
            }
        }
    }

    /// The time of a step at `raw` on the instruction or virtual clock; host-clock
    /// times are filled in when the step leaves the output ([`Walker::drain`]).
    fn time(&self, raw: Raw) -> u64 {
        match self.clock {
            TimeBase::Virtual => self
                .virtual_base
                .saturating_add(raw.own.saturating_mul(NS_PER_INSN))
                .saturating_add(raw.kernel_ns),
            TimeBase::Host => 0,
            TimeBase::Instructions => raw.running.saturating_mul(NS_PER_INSN),
        }
    }

    fn raw(&self, running: u64, own: u64, restart: bool) -> Raw {
        Raw {
            running,
            own,
            restart,
            kernel_ns: self.kernel_ns,
        }
    }

    /// Hands the steps that are settled (and, on the host clock, datable) to `out`.
    fn drain(&mut self, out: &mut Vec<ExactStep>) {
        if self.out.len() > MAX_INJECTED {
            self.release_injected();
        }
        // A transfer a signal interrupted that never settles is given up on.
        if self.out.len() > MAX_HELD {
            if let Some(i) = self
                .contexts
                .iter()
                .position(|c| c.waiting.is_some() || c.stop.is_some())
            {
                let c = &mut self.contexts[i];
                let (waiting, stop) = (c.waiting.take(), c.stop.take());
                c.maybe_called = None;
                if let Some((seq, s, raw)) = stop {
                    self.settle(seq, s, raw);
                }
                if let Some(p) = waiting {
                    self.stats.unknown += 1;
                    self.settle_pending(p, UNKNOWN_FUNC, None);
                }
            }
        }
        loop {
            let (mut s, raw) = match self.out.front() {
                Some(Slot::Ready(s, raw)) => (*s, *raw),
                Some(Slot::Nothing) => {
                    self.out.pop_front();
                    self.front += 1;
                    continue;
                }
                _ => break,
            };
            if self.clock == TimeBase::Host {
                match self.host.at(raw.own, raw.restart, self.done) {
                    Some(t) => s.time = t,
                    None => break,
                }
            }
            self.out.pop_front();
            self.front += 1;
            self.stats.steps += 1;
            s.time = s.time.saturating_sub(self.origin);
            out.push(s);
        }
        if self.clock == TimeBase::Host {
            if let Some(Slot::Ready(_, raw)) = self.out.front() {
                self.host.forget_before(raw.own);
            }
        }
    }

    /// A syscall's entry: the stop's step can be written now that its number is known.
    fn syscall_entry(&mut self, num: u32, ns: u64) {
        self.host.push(Anchor {
            own: self.own,
            ns,
            restart: false,
        });
        self.syscall_entry_ns = Some(ns);
        if let Some(mut st) = self.stopped.take() {
            st.num = Some(num);
            self.write_stop(&mut st);
            self.stopped = Some(st);
        }
    }

    fn syscall_return(&mut self, ns: u64) {
        self.host.push(Anchor {
            own: self.own,
            ns,
            restart: true,
        });
        if let Some(e) = self.syscall_entry_ns.take() {
            self.kernel_ns = self.kernel_ns.saturating_add(ns.saturating_sub(e));
        }
        if let Some(st) = self.stopped.as_mut() {
            // Returned: not an exec that replaced the program.
            if matches!(st.num, Some(SYS_EXECVE | SYS_EXECVEAT)) {
                st.num = Some(u32::MAX);
            }
        }
    }

    fn write_stop(&mut self, st: &mut Stopped) {
        if st.written {
            return;
        }
        st.written = true;
        let s = ExactStep::new(
            self.time(st.time),
            ExactKind::Syscall {
                resume: st.resume,
                sigreturn: st.num == Some(SYS_RT_SIGRETURN),
            },
            st.func,
        );
        self.emit(s, st.time);
    }

    /// Where the restart after a stop happens (the truth's rule: one instruction in the
    /// kernel, or the global clock if other threads moved it further), with `skip`
    /// instructions of the thread's own between it and the block starting at global
    /// clock `gstart`.
    fn restart_at(&self, gstart: u64, skip: u64) -> u64 {
        self.running
            .saturating_add(KERNEL_INSNS)
            .max(gstart.saturating_sub(skip))
    }

    /// One logged block.
    fn block(&mut self, id: u32) {
        let Some(a) = self.action(id) else {
            self.problem = Some(format!(
                "it ran block {id}, which its process's log does not describe"
            ));
            self.done = true;
            return;
        };
        let skip = std::mem::take(&mut self.pending_skip);
        let clock = self.pending_clock.take();
        // The global clock at the block's start.
        self.global = match clock {
            Some(c) => c,
            None => self.global.saturating_add(skip),
        };
        let gstart = self.global;
        self.global = self.global.saturating_add(u64::from(a.n));
        if self.input.since.is_some_and(|s| gstart <= s) {
            // Before the snapshot: not traced; the next block starts it afresh.
            self.pending_host = None;
            return;
        }
        if self.input.until.is_some_and(|u| gstart > u) {
            // After the snapshot's end: this block only settles what waits.
            if let Some(p) = self.awaiting.take() {
                let immediate = skip == 0;
                self.settle_pending(p, a.start_fn, immediate.then_some(a.vaddr));
            }
            self.done = true;
            return;
        }
        self.stats.blocks += 1;
        self.stats.instructions = self
            .stats
            .instructions
            .saturating_add(u64::from(a.n))
            .saturating_add(skip);
        let immediate = skip == 0;
        let own_start = self.own.saturating_add(skip);
        if let Some(ns) = self.pending_host.take() {
            self.host.push(Anchor {
                own: own_start,
                ns,
                restart: false,
            });
        }

        if !self.started {
            // The thread's (or the snapshot's) first block; with a skip, its first
            // instructions were not logged (a forked child's first block is the fork's
            // return): it started `skip` instructions earlier, in the same function.
            self.started = true;
            self.traced = true;
            // A snapshot starts after the previous one's last block, even where the
            // instructions skipped before this block began inside that one.
            let floor = self.input.since.map_or(0, |s| s.saturating_add(1));
            let start = gstart.saturating_sub(skip).max(floor).min(gstart);
            let skip = gstart - start;
            self.running = start;
            self.own = 0;
            let raw = self.raw(start, 0, true);
            self.here = a.start_fn;
            self.emit(
                ExactStep::new(self.time(raw), ExactKind::Start(Restart::First), a.start_fn)
                    .at(if skip == 0 { a.vaddr } else { 0 }),
                raw,
            );
            self.running = start.saturating_add(skip);
            self.own = skip;
            self.run(&a);
            return;
        }

        // A signal handler's entry no transfer explains is a delivery.
        let explained = immediate
            && self.stopped.is_none()
            && match self.last {
                Some((flow, end)) => match flow {
                    Flow::Call { target } | Flow::Jmp { target } => target == a.vaddr,
                    Flow::Cond { target } => target == a.vaddr || end == a.vaddr,
                    // A signal delivered right after an indirect branch shows its
                    // handler as the branch's destination: taken for a delivery (a
                    // call through a pointer is undone when the handler returns).
                    Flow::IndirectCall | Flow::IndirectJmp => false,
                    Flow::Other | Flow::Abandoned => end == a.vaddr,
                    Flow::Return | Flow::Syscall => false,
                },
                None => false,
            };
        if a.handler && !explained {
            self.deliver(&a, skip, gstart);
            return;
        }

        if let Some(mut st) = self.stopped.take() {
            // The restart after a syscall.
            self.write_stop(&mut st);
            if matches!(st.num, Some(SYS_EXECVE | SYS_EXECVEAT)) {
                // An exec that did not return: what follows is not this program.
                self.done = true;
                return;
            }
            let at = self.restart_at(gstart, skip);
            let raw = self.raw(at, self.own, true);
            let sigreturn = st.num == Some(SYS_RT_SIGRETURN);
            let kind = if sigreturn {
                Restart::Sigreturn
            } else {
                Restart::Resume
            };
            // rt_sigreturn resumes the interrupted code: where, if the delivery said.
            let mut context = if sigreturn { self.contexts.pop() } else { None };
            let addr = if sigreturn {
                context
                    .and_then(|c| c.resume)
                    .or((skip == 0).then_some(a.vaddr))
            } else {
                Some(st.resume)
            };
            if let (Some(c), Some(at)) = (context.as_mut(), addr) {
                self.return_resumed_at(c, at);
            }
            let to = if sigreturn { a.start_fn } else { st.resume_fn };
            self.emit(
                ExactStep::new(self.time(raw), ExactKind::Start(kind), to).at(addr.unwrap_or(0)),
                raw,
            );
            self.running = at.saturating_add(skip);
            self.own = self.own.saturating_add(skip);
            self.traced = true;
            // The code the handler interrupted resumes: its stop and waiting transfer, if
            // any, are settled by this block.
            if let Some((seq, mut s, raw)) = context.and_then(|c| c.stop) {
                let indirect = context.and_then(|c| c.waiting).is_some_and(|p| {
                    matches!(
                        p.what,
                        Awaiting::IndirectCall { .. } | Awaiting::IndirectJmp { .. }
                    )
                });
                if indirect && skip == 0 {
                    // It stopped at the indirect branch's target, which runs now.
                    s.to = a.start_fn;
                    s.to_addr = a.vaddr;
                    self.settle(seq, s, raw);
                } else if s.to_addr != 0 {
                    self.settle(seq, s, raw);
                } else if s.to == a.start_fn {
                    if skip == 0 {
                        s.to_addr = a.vaddr;
                    }
                    self.settle(seq, s, raw);
                } else {
                    self.release_injected();
                    self.injected = Some((seq, s, raw));
                }
            }
            if let Some(p) = context.and_then(|c| c.waiting) {
                // A return went where its call pushed; the handler may have made the code
                // resume elsewhere (Go's `asyncPreempt`), so this block does not say which
                // function that is.
                match p.what {
                    Awaiting::Return => match context.and_then(|c| c.stop).map(|c| c.1) {
                        Some(stop) if stop.to_addr != 0 => {
                            self.pop_returns(stop.to_addr);
                            self.settle_pending(p, stop.to, Some(stop.to_addr));
                        }
                        _ => self.settle_pending(p, UNKNOWN_FUNC, None),
                    },
                    // An indirect branch went to the block that runs now, unless
                    // unlogged instructions ran before it. Settled without its address,
                    // a jump into the middle of a function (`longjmp`, Go's `gogo`)
                    // read as a tail call to its entry.
                    _ => self.settle_pending(p, a.start_fn, (skip == 0).then_some(a.vaddr)),
                }
            }
            self.here = a.start_fn;
            self.run(&a);
            return;
        }

        // Tracing continues: the last block's waiting transfer went here (tested before
        // it is taken: taking copies it whole, and many blocks have none).
        let waiting = if self.awaiting.is_some() {
            self.awaiting.take()
        } else {
            None
        };
        if let Some(p) = waiting {
            if matches!(p.what, Awaiting::Return) && !immediate {
                self.rets.pop();
            }
            if matches!(p.what, Awaiting::Return) && immediate {
                self.pop_returns(a.vaddr);
                self.undo_delivery(a.vaddr);
                if let Some((seq, mut s, raw)) = self.injected.take() {
                    if s.to == a.start_fn {
                        s.to_addr = a.vaddr;
                        self.settle(seq, s, raw);
                    } else {
                        self.injected = Some((seq, s, raw));
                    }
                }
            }
            self.settle_pending(p, a.start_fn, immediate.then_some(a.vaddr));
        }
        self.running = self.running.saturating_add(skip);
        self.own = self.own.saturating_add(skip);
        self.here = a.start_fn;
        self.run(&a);
    }

    /// A signal delivered before block `a` (its handler's entry).
    fn deliver(&mut self, a: &Action, skip: u64, gstart: u64) {
        self.stats.signals += 1;
        // The interrupted code ran `skip` more instructions, then stopped.
        self.running = self.running.saturating_add(skip);
        self.own = self.own.saturating_add(skip);
        let restarting = self.stopped.take();
        let stop_seq = self.front + self.out.len() as u64;
        // Delivered as the last handler's rt_sigreturn returned: the kernel restored the
        // code that handler interrupted and delivered this signal there.
        let replaced = match restarting {
            Some(st) if st.num == Some(SYS_RT_SIGRETURN) => self.contexts.pop(),
            _ => None,
        };
        let resume = match restarting {
            Some(mut st) if replaced.is_some() => {
                self.write_stop(&mut st);
                replaced.and_then(|c| c.resume)
            }
            // Delivered as a syscall returned: the syscall is the stop, and the code
            // resumes after it.
            Some(mut st) => {
                self.write_stop(&mut st);
                Some(st.resume)
            }
            None => None,
        };
        let stop = match (restarting, replaced) {
            (_, Some(c)) => c.stop,
            (Some(_), None) => None,
            (None, None) => {
                let raw = self.raw(self.running, self.own, false);
                let s = ExactStep::new(self.time(raw), ExactKind::Async, self.here);
                // The instruction it stopped at, where the last block's flow says.
                let at = match self.last {
                    Some((flow, end)) if skip == 0 => match flow {
                        Flow::Other => Some(end),
                        Flow::Call { target } | Flow::Jmp { target } => Some(target),
                        Flow::Cond { target } if target == end => Some(target),
                        // Where its call pushed.
                        Flow::Return => self.rets.last().copied(),
                        _ => None,
                    },
                    _ => None,
                };
                let s = match at {
                    Some(x) if l_is_return(self.last) => {
                        let f = self.namer.function(x);
                        ExactStep { to: f, ..s }.at(x)
                    }
                    Some(x) => s.at(x),
                    None => s,
                };
                Some((self.hold(), s, raw))
            }
        };
        // A transfer waiting for its destination waits until the handler is done.
        let waiting = match replaced {
            Some(c) => c.waiting,
            None => self.awaiting.take(),
        };
        let start_seq = self.front + self.out.len() as u64;
        let maybe_called = match waiting {
            Some(Pending {
                what: Awaiting::IndirectCall { .. },
                ..
            }) if skip == 0 && restarting.is_none() => {
                Some((stop_seq, start_seq, a.start_fn, a.vaddr))
            }
            _ => None,
        };
        self.contexts.push(Context {
            waiting,
            resume,
            maybe_called,
            stop,
        });
        let at = self.restart_at(gstart, 0);
        let raw = self.raw(at, self.own, true);
        self.emit(
            ExactStep::new(
                self.time(raw),
                ExactKind::Start(Restart::Handler),
                a.start_fn,
            )
            .at(a.vaddr),
            raw,
        );
        self.running = at;
        self.traced = true;
        self.here = a.start_fn;
        self.run(a);
    }

    /// A signal delivered right after a return stopped the code where the innermost
    /// call pushed, the return's usual destination. A non-local exit (`longjmp`) leaves
    /// the calls it abandoned pushed, so that guess can be one of theirs: where
    /// `rt_sigreturn` resumes, `at`, when a call pushed it, is where the return went.
    /// Elsewhere the handler moved the code (Go's `asyncPreempt` returns to the
    /// interrupted pc later) and the guess stands.
    fn return_resumed_at(&mut self, c: &mut Context, at: u64) {
        let Some(Pending {
            what: Awaiting::Return,
            ..
        }) = c.waiting
        else {
            return;
        };
        if let Some((_, s, _)) = c.stop.as_mut() {
            if s.to_addr != at && self.rets.contains(&at) {
                s.to = self.namer.function(at);
                s.to_addr = at;
            }
        }
    }

    /// A jump from code made for non-local exits (`longjmp`, an unwinder, or unnamed
    /// code one called) into `to`, a function with an open call: that call and the ones
    /// made since are abandoned. Left pushed, each round of a `setjmp`/`longjmp` loop
    /// added its calls until trimming dropped the oldest, the thread's real callers with
    /// them, and a return's destination guessed from the top was one of the abandoned.
    fn abandon_calls(&mut self, from: FuncId, to: FuncId) {
        let caller = self.rets.last().map(|&r| self.namer.function(r));
        let funcs = &self.namer.funcs;
        let exits = |f: FuncId| f != UNKNOWN_FUNC && exits_non_locally(funcs.name(f));
        if !exits(from) && !caller.is_some_and(exits) {
            return;
        }
        for i in (0..self.rets.len()).rev() {
            if self.namer.function(self.rets[i]) == to {
                self.rets.truncate(i);
                return;
            }
        }
    }

    fn push_return(&mut self, ret: u64) {
        if self.rets.len() == MAX_RETURNS {
            // The oldest half goes (deep recursion): amortized, no shifting per call.
            self.rets.drain(..MAX_RETURNS / 2);
        }
        self.rets.push(ret);
    }

    /// A return went to `to`: the calls it returns from are done.
    fn pop_returns(&mut self, to: u64) {
        if let Some(i) = self.rets.iter().rposition(|&r| r == to) {
            self.rets.truncate(i);
        }
    }

    /// The held asynchronous stop goes out as it is.
    fn release_injected(&mut self) {
        if let Some((seq, s, raw)) = self.injected.take() {
            self.settle(seq, s, raw);
        }
    }

    /// A return to `to`: if the innermost handler was entered right after an indirect
    /// call and this is where that call pushed, the call went to the handler's function
    /// (no signal): its delivery's steps are undone and the call settled.
    fn undo_delivery(&mut self, to: u64) {
        let Some(c) = self.contexts.last().copied() else {
            return;
        };
        let (Some(p), Some((stop_seq, start_seq, func, entry))) = (c.waiting, c.maybe_called)
        else {
            return;
        };
        if !matches!(p.what, Awaiting::IndirectCall { ret } if ret == to) {
            return;
        }
        self.contexts.pop();
        self.stats.signals = self.stats.signals.saturating_sub(1);
        for seq in [stop_seq, start_seq] {
            if let Some(slot) = seq
                .checked_sub(self.front)
                .and_then(|i| self.out.get_mut(i as usize))
            {
                *slot = Slot::Nothing;
            }
        }
        self.settle_pending(p, func, Some(entry));
    }

    /// Block `a` runs: its own transfer.
    fn run(&mut self, a: &Action) {
        let end_running = self.running.saturating_add(u64::from(a.n));
        self.running = end_running;
        self.own = self.own.saturating_add(u64::from(a.n));
        self.last = Some((a.flow, a.end));
        let raw = self.raw(end_running, self.own, false);
        let time = self.time(raw);
        let pending = |s: &mut Self, what| {
            let seq = s.hold();
            s.awaiting = Some(Pending {
                what,
                seq,
                time: raw,
                from_fn: a.last_fn,
            });
        };
        match a.flow {
            Flow::Call { target } => {
                self.push_return(a.end);
                self.emit(
                    ExactStep::new(time, ExactKind::Call { ret: a.end }, a.target_fn).at(target),
                    raw,
                );
                self.here = a.target_fn;
            }
            Flow::IndirectCall => pending(self, Awaiting::IndirectCall { ret: a.end }),
            Flow::Return => pending(self, Awaiting::Return),
            Flow::IndirectJmp => pending(self, Awaiting::IndirectJmp { plt: a.plt }),
            Flow::Jmp { target } => {
                if a.target_fn != a.last_fn {
                    self.emit(
                        ExactStep::new(time, ExactKind::Jump { indirect: false }, a.target_fn)
                            .at(target),
                        raw,
                    );
                }
                self.here = a.target_fn;
            }
            Flow::Cond { target } => {
                if a.target_fn != a.last_fn {
                    pending(
                        self,
                        Awaiting::Cond {
                            target,
                            target_fn: a.target_fn,
                        },
                    );
                }
            }
            Flow::Syscall => {
                self.traced = false;
                self.stopped = Some(Stopped {
                    resume: a.end,
                    func: a.last_fn,
                    resume_fn: a.fall_fn,
                    num: None,
                    written: false,
                    time: raw,
                });
            }
            Flow::Other | Flow::Abandoned => {}
        }
    }

    /// The stream ended: what still waits is settled as unknown.
    fn finish(&mut self) {
        self.release_injected();
        if let Some(p) = self.awaiting.take() {
            self.stats.unknown += 1;
            self.settle_pending(p, UNKNOWN_FUNC, None);
        }
        while let Some(c) = self.contexts.pop() {
            if let Some((seq, s, raw)) = c.stop {
                self.settle(seq, s, raw);
            }
            if let Some(p) = c.waiting {
                self.stats.unknown += 1;
                self.settle_pending(p, UNKNOWN_FUNC, None);
            }
        }
        if let Some(mut st) = self.stopped.take() {
            self.write_stop(&mut st);
            if matches!(st.num, Some(SYS_EXECVE | SYS_EXECVEAT)) {
                let time = match self.clock {
                    TimeBase::Host => self.host.at(st.time.own, false, true).unwrap_or(0),
                    _ => self.time(st.time),
                };
                self.exec_at = Some((
                    time.saturating_sub(self.origin),
                    self.syscall_entry_ns.unwrap_or(0),
                ));
            }
        }
        // Nothing can still be held: every reserved place was settled above.
        for slot in self.out.iter_mut() {
            if matches!(slot, Slot::Held) {
                *slot = Slot::Nothing;
            }
        }
    }
}

/// The last block ended in a return.
fn l_is_return(last: Option<(Flow, u64)>) -> bool {
    last.is_some_and(|(flow, _)| matches!(flow, Flow::Return))
}

/// A PLT stub's indirect jump goes to a function's entry.
fn plt_entry(plt: bool, entry: u64) -> Option<u64> {
    (plt && entry != 0).then_some(entry)
}
