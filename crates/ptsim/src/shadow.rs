//! A check of the true stacks against a name-free shadow stack.
//!
//! [`crate::stacks`] names frames and follows non-local jumps by function, which needs
//! symbols; a shadow stack needs none. It replays the same steps knowing only return
//! addresses:
//!
//! - the first `Start` pushes the thread's root (return address 0);
//! - `Call`/`IndirectCall` push the address after the call;
//! - `Return` pops down to the innermost live entry holding its destination, and changes
//!   nothing when no call pushed that address;
//! - after a `Syscall` at `a` (resume address `a + len`) or an `Async` stop at `a` (resume
//!   address `a`), a `Start` at the resume address changes nothing;
//! - a `Start` after a syscall at the resume address of a signal entry, or at the syscall
//!   instruction a signal entry was delivered at the return of (the kernel restarts a
//!   syscall the signal interrupted), (else at the return
//!   address of any entry: a signal delivered between a return and its destination is
//!   invisible in the block log, so its handler seems to be that return's destination) is
//!   `rt_sigreturn`: it pops down to that entry, included;
//! - any other `Start` is a signal delivered there: the handler is pushed with the resume
//!   address as its return address, except after a syscall right after a return to an
//!   address no call pushed (a handler returning into the trampoline): that syscall was
//!   `rt_sigreturn`, and nothing changes. If the top entry is a signal entry, a new signal
//!   was delivered as it returned and its handler takes the old one's place and resume
//!   address; if not, the handler's own delivery was hidden (between an indirect call or
//!   jump and its target, which then seemed to be the handler) and the entry it ran in
//!   continues at the interrupted target;
//! - jumps change nothing.
//!
//! The replay's frames must then have exactly the shadow stack's return addresses at every
//! step. What a shadow stack cannot know, and the rule that allows it:
//!
//! - a tail call (a jump to another function's entry) renames the top frame, which keeps
//!   its return address: nothing to allow;
//! - a non-local exit (`longjmp`, an OCaml raise, a C++ landing pad reached by the
//!   unwinder's `ret`) drops frames without returning through them. After a jump or a
//!   return no call pushed, the replay may hold a proper prefix of the shadow stack; the
//!   shadow entries above it are marked dead and stop counting. A dead entry may never be
//!   returned into afterwards (a return whose only match is dead is a mismatch): the
//!   frames the replay dropped must really have been abandoned;
//! - except on a thread that has run Go's `gogo` (the one rule that uses a name): `gogo`
//!   switches goroutine stacks, so the frames it drops are only parked. Their goroutine
//!   may resume later on the same thread and return into them, which is then counted as
//!   a return to an address no call pushed.

use crate::perfscript::Symbols;
use crate::stacks::{DsoOf, Replay};
use crate::truth::{StepKind, ThreadTrace};

/// What the shadow stack saw on one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShadowStats {
    /// Steps replayed.
    pub steps: usize,
    /// Deepest stack.
    pub max_depth: usize,
    /// Signals delivered (handler pushed).
    pub signals: usize,
    /// `rt_sigreturn`s back into an interrupted frame.
    pub sigreturns: usize,
    /// Signals delivered as a handler's `rt_sigreturn` returned (counted in `signals` too).
    pub chained: usize,
    /// `rt_sigreturn`s of handlers whose delivery the block log hid (counted in `signals`).
    pub hidden: usize,
    /// Steps after which the replay dropped frames the shadow stack still held.
    pub cuts: usize,
    /// Returns to an address no call pushed.
    pub unmatched_returns: usize,
}

/// The replay and the shadow stack disagree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "thread {tid}, step {step} ({kind}): the true stack's return addresses {replay} differ \
     from the shadow stack's {shadow} ({why}; last frames dropped by a non-local exit: \
     {last_cut}); steps before it: {recent}"
)]
pub struct ShadowMismatch {
    /// Thread id.
    pub tid: u32,
    /// Index of the step after which they differ.
    pub step: usize,
    /// The step, printed.
    pub kind: String,
    /// The replay's top return addresses (innermost last), printed.
    pub replay: String,
    /// The shadow stack's live top return addresses, printed.
    pub shadow: String,
    /// Which rule was broken.
    pub why: &'static str,
    /// The last step after which the replay dropped frames, printed ("none" if none).
    pub last_cut: String,
    /// The steps before the mismatch, printed, for a look at what led to it.
    pub recent: String,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    ret: u64,
    signal: bool,
    /// A signal delivered at a syscall's return: the syscall instruction (else 0).
    restart: u64,
    dead: bool,
}

fn tail(v: &[u64]) -> String {
    let from = v.len().saturating_sub(6);
    let items: Vec<String> = v[from..].iter().map(|a| format!("{a:#x}")).collect();
    format!(
        "depth {}: {}[{}]",
        v.len(),
        if from > 0 { "…" } else { "" },
        items.join(", ")
    )
}

/// Replays `t` with [`Replay`] (as [`crate::stacks::timeline_at`] does) and with a shadow
/// stack, and checks that they agree after every step (rules in the module comment).
pub fn check(
    t: &ThreadTrace,
    syms: &Symbols,
    dso: DsoOf<'_>,
) -> Result<ShadowStats, Box<ShadowMismatch>> {
    let mut replay = Replay::new(syms, dso);
    let mut shadow: Vec<Entry> = Vec::new();
    // (after a syscall, resume address, the stopping instruction) while tracing is stopped.
    let mut stop: Option<(bool, u64, u64)> = None;
    let mut stats = ShadowStats::default();
    let mut got: Vec<u64> = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    let mut last_cut: Option<usize> = None;
    let push = |shadow: &mut Vec<Entry>, ret: u64, signal: bool, restart: u64| {
        shadow.push(Entry {
            ret,
            signal,
            restart,
            dead: false,
        })
    };
    // The previous step was a return to an address no call pushed (a trampoline).
    let mut after_unmatched = false;
    // The thread has switched goroutines: frames dropped since may be resumed.
    let mut ran_gogo = false;
    for (i, s) in t.steps.iter().enumerate() {
        replay.apply(s);
        if !ran_gogo && matches!(s.kind, StepKind::IndirectJmp) {
            ran_gogo = syms.function(s.from).is_some_and(|(name, _)| {
                matches!(name, "gogo" | "runtime.gogo" | "runtime.gogo.abi0")
            });
        }
        let trampoline = std::mem::take(&mut after_unmatched);
        let mut may_cut = false;
        let mut why = "the stacks differ";
        let mut into_dead = false;
        match s.kind {
            StepKind::Start => match stop.take() {
                None => {
                    if shadow.is_empty() {
                        push(&mut shadow, 0, false, 0);
                    }
                }
                Some((_, resume, _)) if s.to == resume => {}
                Some((syscall, resume, at)) => {
                    let back = shadow
                        .iter()
                        .rposition(|e| !e.dead && e.signal && (e.ret == s.to || e.restart == s.to))
                        .or_else(|| shadow.iter().rposition(|e| !e.dead && e.ret == s.to))
                        .filter(|_| syscall);
                    match back {
                        Some(k) => {
                            shadow.truncate(k);
                            stats.sigreturns += 1;
                        }
                        None => {
                            stats.signals += 1;
                            let top = shadow.iter().rev().find(|e| !e.dead);
                            match top {
                                // A handler's rt_sigreturn returned into a new signal: it
                                // takes the old one's place and resume address.
                                Some(e) if syscall && trampoline && e.signal => {
                                    stats.chained += 1;
                                }
                                // The rt_sigreturn of a handler whose delivery the block log
                                // hid: the entry it ran in continues.
                                Some(_) if syscall && trampoline => stats.hidden += 1,
                                _ => push(&mut shadow, resume, true, if syscall { at } else { 0 }),
                            }
                        }
                    }
                }
            },
            StepKind::Call | StepKind::IndirectCall => {
                push(&mut shadow, s.from + s.len as u64, false, 0);
            }
            StepKind::Return => match shadow.iter().rposition(|e| !e.dead && e.ret == s.to) {
                Some(k) => shadow.truncate(k),
                None => {
                    stats.unmatched_returns += 1;
                    after_unmatched = true;
                    if !ran_gogo && shadow.iter().any(|e| e.dead && e.ret == s.to) {
                        why = "a return went into a frame the true stack had dropped";
                        into_dead = true;
                    } else {
                        may_cut = true;
                    }
                }
            },
            StepKind::Jmp | StepKind::IndirectJmp | StepKind::Jcc { taken: true } => {
                may_cut = true;
            }
            StepKind::Jcc { taken: false } => {}
            StepKind::Syscall => {
                stop = Some((true, s.from + s.len as u64, s.from));
                after_unmatched = trampoline;
            }
            StepKind::Async { .. } => stop = Some((false, s.from, s.from)),
        }
        got.clear();
        got.extend(replay.rets());
        live.clear();
        live.extend(shadow.iter().filter(|e| !e.dead).map(|e| e.ret));
        if got != live || into_dead {
            if !into_dead && may_cut && got.len() < live.len() && live.starts_with(&got) {
                stats.cuts += 1;
                last_cut = Some(i);
                let keep = got.len();
                for e in shadow.iter_mut().filter(|e| !e.dead).skip(keep) {
                    e.dead = true;
                }
            } else {
                if why == "the stacks differ" && got.len() != live.len() {
                    why = if may_cut {
                        "the true stack is not a prefix of the shadow stack after a jump"
                    } else {
                        "a step that cannot unwind changed the depth differently"
                    };
                }
                return Err(Box::new(ShadowMismatch {
                    tid: t.tid,
                    step: i,
                    kind: format!("{:?} {:#x} -> {:#x}", s.kind, s.from, s.to),
                    replay: tail(&got),
                    shadow: tail(&live),
                    why,
                    last_cut: match last_cut {
                        Some(k) => {
                            let c = &t.steps[k];
                            format!("step {k}, {:?} {:#x} -> {:#x}", c.kind, c.from, c.to)
                        }
                        None => "none".into(),
                    },
                    recent: t.steps[i.saturating_sub(40)..i]
                        .iter()
                        .map(|c| format!("{:?} {:#x}->{:#x}", c.kind, c.from, c.to))
                        .collect::<Vec<_>>()
                        .join(", "),
                }));
            }
        }
        stats.max_depth = stats.max_depth.max(got.len());
        stats.steps += 1;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::truth::Step;

    /// Two goroutines on one thread: goroutine 1 (`main` → `A` → `gopark` → `{gogo}`)
    /// parks, `{gogo}` jumps into goroutine 2 (resuming in `main`), which parks in turn,
    /// and `{gogo}` resumes goroutine 1 in `gopark`, which then returns into `A` and `A`
    /// into `main`: into frames the replay dropped at the first switch.
    fn two_goroutines(gogo: &str) -> Result<ShadowStats, Box<ShadowMismatch>> {
        let name = |a: u64| match a {
            0x1000..=0x1fff => ("main", a - 0x1000),
            0x2000..=0x2fff => ("A", a - 0x2000),
            0x3000..=0x3fff => ("gopark", a - 0x3000),
            _ => (gogo, a - 0x4000),
        };
        let steps: Vec<(StepKind, u64, u64)> = vec![
            (StepKind::Start, 0, 0x1000),
            (StepKind::Call, 0x1010, 0x2000),
            (StepKind::Call, 0x2010, 0x3000),
            (StepKind::Call, 0x3010, 0x4000),
            (StepKind::IndirectJmp, 0x4010, 0x1030),
            (StepKind::Call, 0x1020, 0x3000),
            (StepKind::Call, 0x3010, 0x4000),
            (StepKind::IndirectJmp, 0x4010, 0x3015),
            (StepKind::Return, 0x3020, 0x2015),
            (StepKind::Return, 0x2020, 0x1015),
        ];
        let text: String = steps
            .iter()
            .filter(|s| s.1 != 0)
            .map(|&(_, from, to)| {
                let (f, fo) = name(from);
                let (t, to_off) = name(to);
                format!("{from:x} {f}+0x{fo:x} => {to:x} {t}+0x{to_off:x}\n")
            })
            .chain(std::iter::once(
                "0 [unknown] => 1000 main+0x0\n".to_string(),
            ))
            .collect();
        let syms = Symbols::parse(&text);
        let trace = ThreadTrace {
            tid: 7,
            steps: steps
                .iter()
                .enumerate()
                .map(|(i, &(kind, from, to))| Step {
                    clock: i as u64 * 10,
                    kind,
                    from,
                    to,
                    len: 5,
                })
                .collect(),
        };
        check(&trace, &syms, &|_| None)
    }

    #[test]
    fn a_goroutine_resumed_by_gogo_may_return_into_frames_a_switch_dropped() {
        let stats = two_goroutines("gogo").expect("goroutine 1 returns into its own frames");
        assert_eq!(stats.steps, 10);
        assert!(stats.cuts >= 2, "{stats:?}");
        assert!(stats.unmatched_returns >= 1, "{stats:?}");
    }

    #[test]
    fn without_gogo_a_return_into_dropped_frames_is_refused() {
        let err = two_goroutines("switch_stacks").expect_err("dropped frames were returned into");
        assert_eq!(
            err.why, "a return went into a frame the true stack had dropped",
            "{err}"
        );
    }
}
