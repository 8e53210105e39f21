//! Ground truth: the exact branch trace of each thread, derived from executed blocks.
//!
//! Every translated block ends either at a control transfer or where QEMU chose to cut
//! it (page boundary, instruction limit, `rep` iteration). The last instruction, decoded
//! with iced-x86, and the start of the next executed block say which branch ran and
//! whether it was taken.

use crate::blocklog::{BlockLog, TbDef, ThreadLog};

pub use ptscope_blocklog::classify::{Flow, Interrupted};

/// Classifies the last instruction of `tb`.
pub fn classify(tb: &TbDef) -> Flow {
    ptscope_blocklog::classify::classify(&tb.last, tb.last_addr())
}

/// True when the block ends in a `rep`-prefixed instruction, which QEMU runs one
/// iteration per block execution.
fn ends_in_rep(tb: &TbDef) -> bool {
    ptscope_blocklog::classify::is_rep(&tb.last, tb.last_addr())
}

/// A signal's interrupted position that the block log leaves open, settled afterwards.
enum Pending {
    /// A conditional branch whose outcome is unknown; the stop is at step `at`.
    Jcc {
        at: usize,
        target: u64,
        fall: u64,
        len: u8,
    },
    /// A `rep` instruction at `rep`, stopped mid-iterations or done (`fall`).
    Rep { at: usize, rep: u64, fall: u64 },
}

fn interrupted(tb: &TbDef) -> Interrupted {
    ptscope_blocklog::classify::interrupted(&tb.first, tb.vaddr)
}

/// What one step of the branch trace is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// Tracing (re)starts at `to` (first block, return from a syscall or a signal).
    Start,
    /// Conditional branch, taken or not.
    Jcc {
        /// Whether the branch went to its target.
        taken: bool,
    },
    /// Direct jump.
    Jmp,
    /// Indirect jump.
    IndirectJmp,
    /// Direct call.
    Call,
    /// Indirect call.
    IndirectCall,
    /// Return.
    Return,
    /// Tracing stops at a syscall instruction at `from`.
    Syscall,
    /// Tracing stops asynchronously before the instruction at `from` (signal, exit of another thread).
    Async {
        /// The kind of instruction interrupted.
        before: Interrupted,
    },
}

/// One step of a thread's branch trace.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Global instruction clock at which the step completes.
    pub clock: u64,
    /// Kind of step.
    pub kind: StepKind,
    /// Address of the branch instruction (0 for [`StepKind::Start`]).
    pub from: u64,
    /// Destination (0 when tracing stops).
    pub to: u64,
    /// Length of the branch instruction, for return addresses of calls.
    pub len: u8,
}

/// A thread's steps.
#[derive(Clone, Debug, Default)]
pub struct ThreadTrace {
    /// Thread id.
    pub tid: u32,
    /// Steps in order.
    pub steps: Vec<Step>,
}

/// Statistics gathered while deriving the trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TruthStats {
    /// Block executions read.
    pub blocks: u64,
    /// Instructions executed (sum of block sizes).
    pub instructions: u64,
    /// Asynchronous transfers seen (signals and the like).
    pub async_transfers: u64,
    /// Conditional branches interrupted by a signal whose outcome had to be guessed.
    pub guessed_outcomes: u64,
}

/// Derives every thread's branch trace from a block log; `kernel_cycles` is the nominal
/// time a syscall or signal delivery spends in the kernel.
pub fn derive(log: &BlockLog, kernel_cycles: u64) -> (Vec<ThreadTrace>, TruthStats) {
    let mut out = Vec::with_capacity(log.threads.len());
    let stats = derive_each(log, kernel_cycles, |t| out.push(t));
    (out, stats)
}

/// [`derive()`], handing each thread's trace to `each` as soon as it is derived, so a
/// caller that keeps only part of it never holds every thread's steps at once.
pub fn derive_each(
    log: &BlockLog,
    kernel_cycles: u64,
    each: impl FnMut(ThreadTrace),
) -> TruthStats {
    derive_inner(log, kernel_cycles, true, |_| true, each)
}

/// [`derive_each`], keeping only the steps `keep` accepts as they are made: a caller that
/// wants a small part of the steps (a decoder drops conditional branches) never holds the
/// rest. `keep` must accept every `Start`, `Syscall` and `Async` step (the signal fix-ups
/// look for them); a conditional branch settled after a signal is offered to `keep` too.
/// The fix-ups' look-ahead (a million steps) counts kept steps, so it reaches further
/// than [`derive_each`]'s; within that, the kept steps are exactly [`derive_each`]'s
/// steps that `keep` accepts.
pub fn derive_each_kept(
    log: &BlockLog,
    kernel_cycles: u64,
    keep: impl FnMut(&Step) -> bool,
    each: impl FnMut(ThreadTrace),
) -> TruthStats {
    derive_inner(log, kernel_cycles, false, keep, each)
}

/// The derivation; `all` when `keep` accepts everything (the steps are then reserved
/// up front, one per block at most).
fn derive_inner(
    log: &BlockLog,
    kernel_cycles: u64,
    all: bool,
    mut keep: impl FnMut(&Step) -> bool,
    mut each: impl FnMut(ThreadTrace),
) -> TruthStats {
    let flows: Vec<Flow> = log
        .tbs
        .iter()
        .map(|t| t.as_ref().map(classify).unwrap_or(Flow::Other))
        .collect();
    let starts: rustc_hash::FxHashMap<u64, Interrupted> = log
        .tbs
        .iter()
        .flatten()
        .map(|t| (t.vaddr, interrupted(t)))
        .filter(|&(_, i)| i != Interrupted::Other)
        .collect();
    let mut stats = TruthStats::default();
    for t in &log.threads {
        let n_execs = t.len();
        let mut steps = Vec::with_capacity(if all { n_execs + 16 } else { 16 });
        crate::advise_huge(&steps);
        let mut traced = false;
        let mut pending: Vec<Pending> = Vec::new();
        // A thread's own clock: its instructions, plus time spent blocked while tracing
        // was off. The global clock also counts other threads' instructions; following
        // it mid-code would stretch a thread's time whenever another ran in parallel.
        let mut running = 0u64;
        // Return addresses of the calls made, to tell a return from a signal delivered
        // right after it (whose handler is the next block the log shows).
        let mut returns: Vec<u64> = Vec::new();
        let hidden = hidden_handlers(log, &flows, t);
        // A compact thread's clocks: given at some executions, else where the last ended.
        let mut given = t.compact.clocks.iter().peekable();
        let mut ended = 0u64;
        for i in 0..n_execs {
            let id = t.tb_id(i);
            let tb = log.tb_by_id(id);
            let e_clock = match t.execs.get(i) {
                Some(e) => e.clock,
                None => match given.peek() {
                    Some(&&(k, c)) if k == i => {
                        given.next();
                        c
                    }
                    _ => ended,
                },
            };
            ended = e_clock.saturating_add(tb.n_insns as u64);
            stats.blocks += 1;
            stats.instructions += tb.n_insns as u64;
            let start = if traced {
                running
            } else if i == 0 {
                e_clock
            } else {
                (running + kernel_cycles).max(e_clock)
            };
            if !traced {
                steps.push(Step {
                    clock: start,
                    kind: StepKind::Start,
                    from: 0,
                    to: tb.vaddr,
                    len: 0,
                });
                traced = true;
            }
            let clock = start + tb.n_insns as u64;
            running = clock;
            let from = tb.last_addr();
            let len = tb.last.len() as u8;
            let fall = tb.end();
            let next = (i + 1 < n_execs).then(|| log.tb_by_id(t.tb_id(i + 1)).vaddr);
            let step = |kind, to| Step {
                clock,
                kind,
                from,
                to,
                len,
            };
            // Where execution continues if nothing asynchronous happens; None for indirect.
            let (expected, branch): (Option<u64>, Option<Step>) = match flows[id as usize] {
                Flow::Cond { target } => match next {
                    Some(n) if n == target && target != fall => {
                        (Some(n), Some(step(StepKind::Jcc { taken: true }, target)))
                    }
                    Some(n) if n == fall => {
                        (Some(n), Some(step(StepKind::Jcc { taken: false }, fall)))
                    }
                    // The outcome is unknown when a signal or the end follows.
                    _ => (None, None),
                },
                Flow::Jmp { target } => (Some(target), Some(step(StepKind::Jmp, target))),
                Flow::Call { target } => {
                    returns.push(fall);
                    (Some(target), Some(step(StepKind::Call, target)))
                }
                Flow::IndirectJmp => {
                    let to = hidden.get(&i).copied().or(next);
                    (to, to.map(|n| step(StepKind::IndirectJmp, n)))
                }
                Flow::IndirectCall => {
                    returns.push(fall);
                    let to = hidden.get(&i).copied().or(next);
                    (to, to.map(|n| step(StepKind::IndirectCall, n)))
                }
                Flow::Return => {
                    let top = returns.last().copied();
                    let to = match (next, top) {
                        (Some(n), Some(r))
                            if n != r
                                && (hidden.contains_key(&i)
                                    || signalled_after(log, &flows, t, i, r)) =>
                        {
                            // Where the handler's `rt_sigreturn` resumed, when a call
                            // pushed it: a non-local exit (`longjmp`) left the calls it
                            // abandoned on `returns`, so the top is stale (the thread
                            // "returned" into `__longjmp`'s caller). Else the top: a
                            // handler may resume elsewhere (Go's `asyncPreempt`, which
                            // returns to the interrupted pc later).
                            match hidden.get(&i) {
                                Some(&h) if returns.contains(&h) => Some(h),
                                _ => Some(r),
                            }
                        }
                        _ => next,
                    };
                    // A return elsewhere (a handler's into its trampoline) leaves the stack.
                    if let Some(k) = returns.iter().rposition(|&r| Some(r) == to) {
                        returns.truncate(k);
                    }
                    (to, to.map(|n| step(StepKind::Return, n)))
                }
                Flow::Syscall => {
                    steps.push(step(StepKind::Syscall, 0));
                    traced = false;
                    continue;
                }
                Flow::Abandoned => (Some(from), None),
                Flow::Other => match next {
                    // A `rep` string instruction iterates by re-running its own block.
                    Some(n) if n == from && ends_in_rep(tb) => (Some(n), None),
                    _ => (Some(fall), None),
                },
            };
            let unknown = branch.is_none() && expected.is_none();
            let resume = match (branch, expected) {
                (Some(b), _) => {
                    if keep(&b) {
                        steps.push(b);
                    }
                    b.to
                }
                (None, Some(x)) => x,
                // Unknown outcome, settled after the loop: for now the async stop sits
                // on the branch itself.
                (None, None) => from,
            };
            if unknown && next.is_some() {
                if let Flow::Cond { target } = flows[id as usize] {
                    pending.push(Pending::Jcc {
                        at: steps.len(),
                        target,
                        fall,
                        len,
                    });
                }
            }
            if flows[id as usize] == Flow::Other
                && next.is_some_and(|n| n != resume)
                && ends_in_rep(tb)
            {
                pending.push(Pending::Rep {
                    at: steps.len(),
                    rep: from,
                    fall,
                });
            }
            if next.is_some_and(|n| n != resume || unknown) {
                stats.async_transfers += 1;
                steps.push(Step {
                    clock,
                    kind: StepKind::Async {
                        before: starts.get(&resume).copied().unwrap_or(Interrupted::Other),
                    },
                    from: resume,
                    to: 0,
                    len: 0,
                });
                traced = false;
            }
        }
        // A signal delivered right after a conditional branch hides its outcome from the
        // block log, and one between two iterations of a `rep` instruction hides whether
        // it had finished. The decoder cannot stop on a conditional branch, so decide: by
        // where the thread resumes after `rt_sigreturn` if that is one of the candidates,
        // otherwise as not taken / not finished (counted in `guessed_outcomes`).
        // A handler can make the code resume elsewhere (Go's asynchronous preemption:
        // `rt_sigreturn` enters `runtime.asyncPreempt`, which returns to the interrupted
        // pc later, maybe after the goroutine ran on other threads). That return goes to
        // an address no call since pushed: the first such return to a candidate decides.
        let resumed_at = |steps: &[Step], at: usize, a: u64, b: u64| {
            let after = &steps[at + 1..];
            after
                .windows(2)
                .take(1_000_000)
                .find(|w| {
                    w[0].kind == StepKind::Syscall
                        && w[1].kind == StepKind::Start
                        && (w[1].to == a || w[1].to == b)
                })
                .map(|w| w[1].to)
                .or_else(|| {
                    let mut pushed = Vec::new();
                    after.iter().take(1_000_000).find_map(|s| match s.kind {
                        StepKind::Call | StepKind::IndirectCall => {
                            pushed.push(s.from + u64::from(s.len));
                            None
                        }
                        StepKind::Return if (s.to == a || s.to == b) && !pushed.contains(&s.to) => {
                            Some(s.to)
                        }
                        _ => None,
                    })
                })
        };
        for p in pending.iter().rev() {
            match *p {
                Pending::Jcc {
                    at,
                    target,
                    fall,
                    len,
                } => {
                    let Some(stop) = steps.get(at).copied() else {
                        continue;
                    };
                    let resumed = resumed_at(&steps, at, target, fall);
                    if resumed.is_none() {
                        stats.guessed_outcomes += 1;
                    }
                    let taken = resumed == Some(target) && target != fall;
                    let to = if taken { target } else { fall };
                    let jcc = Step {
                        clock: stop.clock,
                        kind: StepKind::Jcc { taken },
                        from: stop.from,
                        to,
                        len,
                    };
                    steps[at].from = to;
                    steps[at].kind = StepKind::Async {
                        before: starts.get(&to).copied().unwrap_or(Interrupted::Other),
                    };
                    if keep(&jcc) {
                        steps.insert(at, jcc);
                    }
                }
                Pending::Rep { at, rep, fall } => {
                    if at >= steps.len() {
                        continue;
                    }
                    let resumed = resumed_at(&steps, at, rep, fall);
                    if resumed.is_none() {
                        stats.guessed_outcomes += 1;
                    }
                    // Interrupted mid-iterations, the FUP is the `rep` instruction itself.
                    if resumed != Some(fall) {
                        steps[at].from = rep;
                        steps[at].kind = StepKind::Async {
                            before: Interrupted::Other,
                        };
                    }
                }
            }
        }
        each(ThreadTrace { tid: t.tid, steps });
    }
    stats
}

/// True when the thread, after block `i` (a return whose next block is not `ret`, the
/// address its call pushed), resumes at `ret` at its first `rt_sigreturn`-like syscall
/// (the first one not followed by its own fall-through nor by the handler again): a signal was delivered right
/// after the return, and the next block is its handler. QEMU delivers signals between
/// blocks, so the block log alone shows the handler as the return's destination.
fn signalled_after(log: &BlockLog, flows: &[Flow], t: &ThreadLog, i: usize, ret: u64) -> bool {
    let len = t.len();
    if i + 1 >= len {
        return false;
    }
    let handler = log.tb_by_id(t.tb_id(i + 1)).vaddr;
    for j in i + 1..len.min(i + 1 + 1_000_000) {
        let e = t.tb_id(j);
        if flows[e as usize] != Flow::Syscall {
            continue;
        }
        if j + 1 >= len {
            return false;
        }
        let to = log.tb_by_id(t.tb_id(j + 1)).vaddr;
        // A signal pending at `rt_sigreturn` re-enters the handler: look on.
        if to != log.tb_by_id(e).end() && to != handler {
            return to == ret;
        }
    }
    false
}

/// The returns, indirect jumps and indirect calls (by index into the thread's blocks)
/// right after which a signal handler ran, with where that handler's `rt_sigreturn`
/// resumed. QEMU delivers signals between blocks, so the block log shows the handler as
/// the branch's destination; [`signalled_after`] sees it only where the code resumes
/// where a return's call pushed, not after the handler changed where the code resumes
/// (Go's asynchronous preemption resumes in `runtime.asyncPreempt`, which returns to the
/// interrupted pc later), nor after an indirect branch (Go's `gogo` entering a
/// goroutine).
///
/// A handler is known by its shape: the code after the branch returns, at its own depth
/// and before any visible asynchronous transfer, to an address no call pushed, and that
/// block ends in a syscall that resumes neither after itself nor in the code again (the
/// signal trampoline's `rt_sigreturn`). Ordinary code returns where a call pushed; a
/// handler returning into its trampoline has the trampoline's syscall next, before any
/// return of its own. One pass: branches awaiting the return that ends their code are kept
/// on a stack, deepest last, and a return settles those its depth drops below.
fn hidden_handlers(
    log: &BlockLog,
    flows: &[Flow],
    t: &ThreadLog,
) -> rustc_hash::FxHashMap<usize, u64> {
    let n = t.len();
    let mut found = rustc_hash::FxHashMap::default();
    let mut depth = 0i64;
    let mut returns: Vec<u64> = Vec::new();
    // (branch index, depth of the code after it), depths never decreasing.
    let mut waiting: Vec<(usize, i64)> = Vec::new();
    // A branch whose handler's rt_sigreturn delivered another signal, still waiting.
    let mut redelivered: Option<(usize, i64)> = None;
    let vaddr = |k: usize| (k < n).then(|| log.tb_by_id(t.tb_id(k)).vaddr);
    for i in 0..n {
        let id = t.tb_id(i);
        let tb = log.tb_by_id(id);
        let Some(next) = vaddr(i + 1) else {
            break;
        };
        let fall = tb.end();
        // Where a branch of known outcome continues: elsewhere, an asynchronous
        // transfer (a visible signal delivery) began code that is not the one awaited.
        let expected = match flows[id as usize] {
            Flow::Cond { target } => (next == target || next == fall).then_some(next),
            Flow::Jmp { target } => Some(target),
            Flow::Call { target } => {
                depth += 1;
                returns.push(fall);
                Some(target)
            }
            Flow::IndirectCall => {
                depth += 1;
                returns.push(fall);
                waiting.push((i, depth));
                Some(next)
            }
            Flow::IndirectJmp => {
                waiting.push((i, depth));
                Some(next)
            }
            Flow::Return => {
                depth -= 1;
                // The code the branches at this depth began returns here.
                let mut settled = None;
                while let Some(&(b, d)) = waiting.last() {
                    if d <= depth {
                        break;
                    }
                    waiting.pop();
                    // The latest such branch began the code that returns.
                    settled.get_or_insert(b);
                }
                if let Some(b) = settled {
                    // Where the trampoline's rt_sigreturn went.
                    let resumed = (!returns.contains(&next) && (i + 1 < n))
                        .then(|| {
                            let s = t.tb_id(i + 1);
                            (flows[s as usize] == Flow::Syscall)
                                .then(|| vaddr(i + 2))
                                .flatten()
                                .filter(|&r| r != log.tb_by_id(s).end())
                        })
                        .flatten();
                    match resumed {
                        // A signal pending at rt_sigreturn entered the handler again:
                        // its return into the trampoline tells.
                        Some(r) if Some(r) == vaddr(b + 1) => redelivered = Some((b, depth)),
                        Some(r) => {
                            found.insert(b, r);
                        }
                        None => {}
                    }
                }
                let top = returns.last().copied();
                if let Some(k) = returns.iter().rposition(|&r| r == next) {
                    returns.truncate(k);
                }
                if top.is_some_and(|r| r != next) {
                    waiting.push((i, depth));
                }
                Some(next)
            }
            Flow::Syscall => Some(fall),
            Flow::Abandoned => Some(tb.last_addr()),
            Flow::Other => Some(if next == tb.last_addr() && ends_in_rep(tb) {
                next
            } else {
                fall
            }),
        };
        if expected != Some(next) {
            waiting.clear();
            // Except the branch whose handler runs again.
            if let Some(r) = redelivered.take() {
                waiting.push(r);
            }
        }
    }
    found
}

/// A frame of the true call stack.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Entry address of the called function.
    pub func: u64,
    /// Address the call returns to.
    pub ret: u64,
    /// Clock of the call.
    pub since: u64,
}

/// Replays calls and returns to give the call stack after each step.
///
/// A return pops down to the frame whose return address it targets, so `longjmp`-style
/// unwinding that ends in a return is followed exactly; a return matching no frame pops one.
#[derive(Clone, Debug, Default)]
pub struct StackReplay {
    /// Current frames, outermost first.
    pub frames: Vec<Frame>,
}

impl StackReplay {
    /// Applies one step.
    pub fn apply(&mut self, s: &Step) {
        match s.kind {
            StepKind::Call | StepKind::IndirectCall => self.frames.push(Frame {
                func: s.to,
                ret: s.from + s.len as u64,
                since: s.clock,
            }),
            StepKind::Return => {
                if let Some(i) = self.frames.iter().rposition(|f| f.ret == s.to) {
                    self.frames.truncate(i);
                } else {
                    self.frames.pop();
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocklog::Exec;

    /// A one-instruction block at `vaddr`.
    fn tb(vaddr: u64, insn: &[u8]) -> Option<TbDef> {
        Some(TbDef {
            vaddr,
            n_insns: 1,
            size: insn.len() as u32,
            last: insn.to_vec(),
            first: insn.to_vec(),
        })
    }

    /// `blocks` executed in order by one thread, one instruction each.
    fn log(blocks: &[Option<TbDef>], order: &[u32]) -> BlockLog {
        BlockLog {
            pid: 1,
            tbs: blocks.to_vec(),
            threads: vec![ThreadLog {
                tid: 1,
                execs: order
                    .iter()
                    .enumerate()
                    .map(|(i, &tb)| Exec {
                        clock: i as u64,
                        tb,
                    })
                    .collect(),
                ..ThreadLog::default()
            }],
            ..BlockLog::default()
        }
    }

    /// The steps of `blocks` executed once each, in order: (kind, from, to).
    fn steps_of(blocks: &[Option<TbDef>]) -> Vec<(StepKind, u64, u64)> {
        let order: Vec<u32> = (0..blocks.len() as u32).collect();
        let (traces, _) = derive(&log(blocks, &order), 1);
        traces[0]
            .steps
            .iter()
            .map(|s| (s.kind, s.from, s.to))
            .collect()
    }

    /// An asynchronous stop in code that is no syscall.
    const ASYNC_STOP: StepKind = StepKind::Async {
        before: Interrupted::Other,
    };

    const RET: &[u8] = &[0xc3];
    const SYSCALL: &[u8] = &[0x0f, 0x05];
    const NOP: &[u8] = &[0x90];

    /// `call 0x2000` at 0x1000.
    fn call_0x2000() -> Option<TbDef> {
        tb(0x1000, &[0xe8, 0xfb, 0x0f, 0x00, 0x00])
    }

    /// A signal delivered as `f` returns to 0x1005, whose handler makes the code resume
    /// elsewhere (Go's asynchronous preemption: `rt_sigreturn` enters `asyncPreempt`,
    /// which returns to 0x1005 later). The return still went to 0x1005, where the
    /// signal stopped the code; before, the handler passed for the return's destination.
    #[test]
    fn signal_after_a_return_whose_handler_redirects_the_resumption() {
        let blocks = [
            call_0x2000(),       // 0: call f
            tb(0x2000, RET),     // 1: f returns to 0x1005
            tb(0x3000, RET),     // 2: the handler returns into the trampoline
            tb(0x4000, SYSCALL), // 3: rt_sigreturn
            tb(0x5000, RET),     // 4: the injected call returns to 0x1005
            tb(0x1005, NOP),     // 5: the caller goes on
        ];
        assert_eq!(
            steps_of(&blocks),
            [
                (StepKind::Start, 0, 0x1000),
                (StepKind::Call, 0x1000, 0x2000),
                (StepKind::Return, 0x2000, 0x1005),
                (ASYNC_STOP, 0x1005, 0),
                (StepKind::Start, 0, 0x3000),
                (StepKind::Return, 0x3000, 0x4000),
                (StepKind::Syscall, 0x4000, 0),
                (StepKind::Start, 0, 0x5000),
                (StepKind::Return, 0x5000, 0x1005),
            ]
        );
    }

    /// A signal delivered right after a return that follows a `longjmp`: the call the
    /// jump abandoned (0x2005) is still the last one pushed, but the return went where
    /// `rt_sigreturn` resumes, 0x1005, which a live call pushed. Before, the stale 0x2005
    /// passed for its destination (a thread "returning" into `__longjmp`'s caller, which
    /// the shadow stack refused: the lj test's recordings, about one in ten).
    #[test]
    fn signal_after_a_return_past_calls_a_longjmp_abandoned() {
        let blocks = [
            call_0x2000(),                         // 0: main calls worker
            tb(0x2000, &[0xe8, 0xfb, 0x3f, 0, 0]), // 1: worker calls 0x6000 (lj)
            tb(0x6000, &[0xff, 0xe0]),             // 2: lj jumps back into worker
            tb(0x2010, RET),                       // 3: worker returns to 0x1005
            tb(0x3000, RET),                       // 4: the handler returns into the trampoline
            tb(0x4000, SYSCALL),                   // 5: rt_sigreturn
            tb(0x1005, NOP),                       // 6: main goes on
        ];
        let returns: Vec<(u64, u64)> = steps_of(&blocks)
            .into_iter()
            .filter(|s| s.0 == StepKind::Return)
            .map(|s| (s.1, s.2))
            .collect();
        assert_eq!(returns, [(0x2010, 0x1005), (0x3000, 0x4000)]);
    }

    /// A handler that returns into its trampoline is not a signal after a return, even
    /// when the interrupted code does not resume at the last call's return address.
    #[test]
    fn handler_returning_into_its_trampoline_is_a_return() {
        let blocks = [
            call_0x2000(),       // 0: call f
            tb(0x2000, NOP),     // 1: f runs; a signal interrupts it after this block
            tb(0x3000, RET),     // 2: the handler returns into the trampoline
            tb(0x4000, SYSCALL), // 3: rt_sigreturn
            tb(0x2001, RET),     // 4: f goes on and returns
        ];
        let returns: Vec<(u64, u64)> = steps_of(&blocks)
            .into_iter()
            .filter(|s| s.0 == StepKind::Return)
            .map(|s| (s.1, s.2))
            .collect();
        assert_eq!(returns, [(0x3000, 0x4000)]);
    }

    /// A signal delivered right after a conditional branch, whose handler makes the code
    /// resume elsewhere (Go's asynchronous preemption): the injected call's return says
    /// where the branch went (taken, 0x1010). Before, the outcome was guessed (not
    /// taken), so the truth's handler frame returned to an address it did not expect and
    /// stayed on the stack under the interrupted function's name (`os.newFile >
    /// os.newFile` in the Go test, about one run in forty).
    #[test]
    fn signal_after_a_branch_whose_handler_redirects_the_resumption() {
        let blocks = [
            tb(0x1000, &[0x74, 0x0e]), // 0: je 0x1010
            tb(0x3000, RET),           // 1: the handler returns into the trampoline
            tb(0x4000, SYSCALL),       // 2: rt_sigreturn, resuming at 0x5000
            tb(0x5000, RET),           // 3: the injected call returns to 0x1010
            tb(0x1010, NOP),           // 4: the branch's target goes on
        ];
        let steps = steps_of(&blocks);
        assert_eq!(
            steps[..3],
            [
                (StepKind::Start, 0, 0x1000),
                (StepKind::Jcc { taken: true }, 0x1000, 0x1010),
                (ASYNC_STOP, 0x1010, 0),
            ]
        );
        assert_eq!(steps.last(), Some(&(StepKind::Return, 0x5000, 0x1010)));
    }

    /// A signal delivered right after an indirect jump (Go's `gogo` entering a new
    /// goroutine): the jump went where the handler's `rt_sigreturn` resumes; before, the
    /// handler passed for its target.
    #[test]
    fn signal_after_an_indirect_jump() {
        let blocks = [
            tb(0x1000, &[0xff, 0xe0]), // 0: jmp *%rax
            tb(0x3000, RET),           // 1: the handler returns into the trampoline
            tb(0x4000, SYSCALL),       // 2: rt_sigreturn
            tb(0x2000, NOP),           // 3: the jump's target runs
        ];
        assert_eq!(
            steps_of(&blocks),
            [
                (StepKind::Start, 0, 0x1000),
                (StepKind::IndirectJmp, 0x1000, 0x2000),
                (ASYNC_STOP, 0x2000, 0),
                (StepKind::Start, 0, 0x3000),
                (StepKind::Return, 0x3000, 0x4000),
                (StepKind::Syscall, 0x4000, 0),
                (StepKind::Start, 0, 0x2000),
            ]
        );
    }

    /// A signal delivered right after an indirect call, whose handler's `rt_sigreturn`
    /// has another signal delivered (the handler runs again): the call went where the
    /// second `rt_sigreturn` resumes; before, the handler passed for its target.
    #[test]
    fn signal_after_an_indirect_call_delivered_twice() {
        let blocks = [
            tb(0x1000, &[0xff, 0xd0]), // 0: call *%rax, returns to 0x1002
            tb(0x3000, RET),           // 1: the handler returns into the trampoline
            tb(0x4000, SYSCALL),       // 2: rt_sigreturn
            tb(0x2000, NOP),           // 3: the call's target
        ];
        // The handler runs twice, then the call's target.
        let (traces, _) = derive(&log(&blocks, &[0, 1, 2, 1, 2, 3]), 1);
        let calls: Vec<(u64, u64)> = traces[0]
            .steps
            .iter()
            .filter(|s| s.kind == StepKind::IndirectCall)
            .map(|s| (s.from, s.to))
            .collect();
        assert_eq!(calls, [(0x1000, 0x2000)]);
    }

    /// A function reached by an indirect jump that returns where a call pushed, into a
    /// syscall at whose return a signal is delivered, is no handler: the jump goes to it.
    #[test]
    fn return_into_a_syscall_interrupted_by_a_signal_is_no_handler() {
        let blocks = [
            tb(0x1000, &[0xff, 0xd0]), // 0: call *%rax, returns to 0x1002
            tb(0x2000, &[0xff, 0xe3]), // 1: jmp *%rbx
            tb(0x3000, RET),           // 2: returns to 0x1002
            tb(0x1002, SYSCALL),       // 3: a signal is delivered at its return
            tb(0x5000, RET),           // 4: the handler returns into the trampoline
            tb(0x6000, SYSCALL),       // 5: rt_sigreturn
            tb(0x1004, NOP),           // 6: after the first syscall
        ];
        let branches: Vec<(StepKind, u64, u64)> = steps_of(&blocks)
            .into_iter()
            .filter(|s| !matches!(s.0, StepKind::Start | StepKind::Syscall))
            .collect();
        assert_eq!(
            branches,
            [
                (StepKind::IndirectCall, 0x1000, 0x2000),
                (StepKind::IndirectJmp, 0x2000, 0x3000),
                (StepKind::Return, 0x3000, 0x1002),
                (StepKind::Return, 0x5000, 0x6000),
            ]
        );
    }
}
