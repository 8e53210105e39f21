//! Signal delivery in a user-space branch trace.
//!
//! With only user space traced, the kernel is a hole between a `tr end` and the next
//! `tr strt`. Tracing normally resumes where it stopped: after the syscall instruction, or
//! at the instruction an asynchronous stop interrupted. A `tr strt` anywhere else is the
//! kernel delivering a signal there: the handler runs *on top of* the interrupted frame,
//! returns into the signal trampoline (`sa_restorer`, glibc's `__restore_rt`), whose
//! `rt_sigreturn` syscall resumes the interrupted code where it would have resumed. The
//! writer used to take that `tr strt` as "tracing resumes where it stopped", so the handler
//! replaced the interrupted frame, and its return (into the trampoline) was learnt as a
//! caller of the whole stack.
//!
//! Each delivery seen is remembered (the frame it interrupted and the resume address), so
//! the `rt_sigreturn` that resumes there pops the handler, and a signal delivered as a
//! handler's `rt_sigreturn` returns (a pending one, say) replaces that handler. A handler
//! left by `siglongjmp` leaves a stale delivery, dropped as soon as its frame is no longer
//! on the stack.

use super::frames::{plain_name, Flow, Frame, Loc, INFERRED_START, RETURN_LABEL, SENTINEL, SIGNAL};
use super::ingest::{Cx, MAX_FIND_DEPTH};
use ptscope_event::{Kind, TraceStateChange};

/// Signal trampolines (`sa_restorer`) by name: their one syscall is `rt_sigreturn`.
/// glibc's and musl's `__restore_rt` (and i386's `__restore`), Go's restorer.
const TRAMPOLINES: &[&str] = &[
    "__restore_rt",
    "__restore",
    "runtime.sigreturn__sigaction",
    "runtime.sigreturn",
];

/// [`Delivery::resume`] of a delivery whose interrupted code is not known yet.
const RESUME_UNKNOWN: u64 = 0;

/// Longest syscall instruction: `syscall`, `sysenter` and `int 0x80` are all 2 bytes.
const SYSCALL_LEN: u64 = 2;
/// Deliveries remembered per thread (handlers interrupted by handlers); older ones are
/// forgotten, as a `siglongjmp` out of many nested handlers would leave them.
const MAX_DELIVERIES: usize = 64;

/// Where tracing stopped, and where it resumes if nothing intervenes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stop {
    /// The instruction after the syscall, or the one an asynchronous stop interrupted.
    resume: u64,
    /// Stopped at a syscall: only a syscall can be `rt_sigreturn`.
    syscall: bool,
}

/// A signal delivered on top of a frame.
#[derive(Clone, Copy, Debug)]
struct Delivery {
    /// The frame the signal interrupted: the handler's parent.
    interrupted: u32,
    /// Where the interrupted code resumes after `rt_sigreturn`.
    resume: u64,
}

/// Per-thread signal state of the writer.
#[derive(Debug, Default)]
pub(super) struct Signals {
    /// The last `tr end`, until the next `tr strt`.
    stop: Option<Stop>,
    /// Deliveries whose `rt_sigreturn` has not been seen, innermost last.
    deliveries: Vec<Delivery>,
    /// The last branch was a handler returning into the signal trampoline (kept across
    /// the trampoline's syscall): a signal delivered as that syscall returns replaces the
    /// handler instead of interrupting the trampoline.
    trampoline: bool,
    /// The last branch was a return onto the first byte of a symbol (kept across the
    /// syscall that follows): a return address follows a call, so that is a handler
    /// returning into the trampoline, maybe one whose delivery the trace did not hold.
    label_return: bool,
}

impl Signals {
    /// Forgets everything: a new segment's frames are unrelated to the old ones.
    pub(super) fn clear(&mut self) {
        *self = Signals::default();
    }
}

impl<T> Cx<'_, T> {
    /// Notes every branch: a `tr end` stops tracing (remembered until the next `tr
    /// strt`); anything but the trampoline's syscall ends the trampoline.
    pub(super) fn signals_observe(
        &mut self,
        kind: Option<Kind>,
        change: Option<TraceStateChange>,
        src: &Loc,
    ) {
        let sig = &mut self.ts.signals;
        match change {
            Some(TraceStateChange::End) => {
                let syscall = kind == Some(Kind::Syscall);
                // Only user space resumes by the kernel's choice: in a kernel trace every
                // `tr strt` is a kernel entry, and a branch that leaves a traced range
                // (a call or return out of an address filter) comes back anywhere.
                let resumable = matches!(
                    kind,
                    None | Some(Kind::Syscall | Kind::Async | Kind::Interrupt)
                );
                let user = src.ip != 0 && !ptscope_event::is_kernel_address(src.ip);
                sig.stop = (resumable && user).then(|| Stop {
                    resume: if syscall {
                        src.ip + SYSCALL_LEN
                    } else {
                        src.ip
                    },
                    syscall,
                });
                if !syscall {
                    sig.trampoline = false;
                    sig.label_return = false;
                }
            }
            Some(TraceStateChange::Start) => {}
            None => {
                sig.stop = None;
                sig.trampoline = false;
                sig.label_return = false;
            }
        }
    }

    /// A `tr strt` at `dst`: true when it was a signal delivery or an `rt_sigreturn`
    /// (and the stack is updated), false when tracing resumes where it stopped.
    pub(super) fn signal_start(&mut self, dst: &Loc) -> bool {
        let sig = &mut self.ts.signals;
        let trampoline = std::mem::take(&mut sig.trampoline);
        let label_return = std::mem::take(&mut sig.label_return);
        let Some(stop) = sig.stop.take() else {
            return false;
        };
        if dst.ip == 0 || dst.ip == stop.resume || ptscope_event::is_kernel_address(dst.ip) {
            return false;
        }
        if stop.syscall && self.sigreturn(dst) {
            return true;
        }
        if stop.syscall && label_return && self.unseen_handler_redelivered(dst) {
            return true;
        }
        if stop.syscall && label_return && self.unseen_sigreturn(dst) {
            return true;
        }
        if stop.syscall && self.trampoline_root_returns(dst) {
            return true;
        }
        let leaf = self.ts.leaf;
        let fr = self.ts.frames[leaf as usize];
        if stop.syscall && trampoline && fr.flags & SIGNAL != 0 {
            // The trampoline's rt_sigreturn restored the interrupted code and the kernel
            // delivered another signal there: its handler takes the finished one's place.
            self.replace_signal_frame(dst);
            return true;
        }
        // A signal delivered as the kernel returned: its handler runs on top of the code
        // that stopped, which resumes at `stop.resume` after the handler's rt_sigreturn.
        if self.ts.signals.deliveries.len() == MAX_DELIVERIES {
            self.ts.signals.deliveries.remove(0);
        }
        self.ts.signals.deliveries.push(Delivery {
            interrupted: leaf,
            resume: stop.resume,
        });
        self.push(dst, SIGNAL);
        true
    }

    /// `rt_sigreturn` back into the frame a delivery interrupted, if `dst` is where one
    /// resumes; deliveries whose frames are no longer on the stack are dropped.
    fn sigreturn(&mut self, dst: &Loc) -> bool {
        while let Some(d) = self.ts.signals.deliveries.last().copied() {
            if !self.on_stack(d.interrupted) {
                self.ts.signals.deliveries.pop();
                continue;
            }
            // A delivery whose interrupted code is not known resumes anywhere but at a
            // handler's first byte.
            let unknown = d.resume == RESUME_UNKNOWN && dst.offset != 0;
            if d.resume != dst.ip && !unknown {
                return false;
            }
            self.ts.signals.deliveries.pop();
            self.ts.leaf = d.interrupted;
            self.record(Flow::Return);
            let fr = self.ts.frames[d.interrupted as usize];
            if fr.flags & RETURN_LABEL != 0 && fr.flags & SENTINEL == 0 {
                self.name_interrupted(d.interrupted, dst);
            } else if !self.is_sentinel(self.ts.leaf) {
                self.ensure_current(dst);
            } else {
                self.ensure_src(dst);
            }
            return true;
        }
        false
    }

    /// Is `frame` the leaf or one of its callers (within the search bound)?
    fn on_stack(&self, frame: u32) -> bool {
        let mut f = self.ts.leaf;
        for _ in 0..MAX_FIND_DEPTH {
            if f == frame {
                return true;
            }
            let fr = self.ts.frames[f as usize];
            if fr.flags & SENTINEL != 0 {
                return false;
            }
            f = fr.parent;
        }
        false
    }

    /// The `rt_sigreturn` of a handler whose delivery is not in the segment (a snapshot
    /// or a decode gap began inside it): the handler's return onto the trampoline's
    /// first byte was learnt as the segment's root, named after the trampoline. That
    /// root is the interrupted frame, which `dst` names: the trampoline becomes its own
    /// frame on top of it, from the handler's return on. True when handled so.
    fn unseen_sigreturn(&mut self, dst: &Loc) -> bool {
        let Some(root) = self.trampoline_label_root() else {
            return false;
        };
        self.split_trampoline(root);
        self.name_interrupted(root, dst);
        self.ts.leaf = root;
        self.record(Flow::Return);
        true
    }

    /// The leaf, if it is a root learnt from a return onto a label (a handler's return into
    /// the trampoline whose delivery the segment does not hold).
    fn trampoline_label_root(&self) -> Option<u32> {
        let root = self.ts.leaf;
        let fr = self.ts.frames[root as usize];
        (fr.flags & (SENTINEL | RETURN_LABEL) == RETURN_LABEL && self.is_sentinel(fr.parent))
            .then_some(root)
    }

    /// The label root stands for the interrupted frame, the trampoline ran on top of it:
    /// since the handler's return onto the trampoline, the root's entries (the return, the
    /// end of the syscall) are a trampoline frame's, as is the syscall's synthetic frame.
    fn split_trampoline(&mut self, root: u32) {
        let fr = self.ts.frames[root as usize];
        let trampoline = self.ts.frames.len() as u32;
        self.ts.frames.push(Frame::new(fr.loc, root, SIGNAL));
        let first = self.ts.segments.last().map_or(0, |s| s.first);
        let mut i = self.ts.entries.len();
        while i > first + 1 {
            i -= 1;
            let leaf = self.ts.entries[i].leaf;
            if leaf == root {
                self.ts.entries[i].leaf = trampoline;
                let before = self.ts.entries[i - 1].leaf;
                if before != root && self.ts.frames[before as usize].parent != root {
                    break;
                }
            } else if self.ts.frames[leaf as usize].parent == root
                && self.ts.frames[leaf as usize].loc != fr.loc
                && self.leaf_is_synthetic_frame(leaf)
            {
                self.ts.frames[leaf as usize].parent = trampoline;
            } else {
                break;
            }
        }
    }

    /// The interrupted frame, a label root until now, runs `dst`'s function (where the
    /// `rt_sigreturn` resumed it).
    fn name_interrupted(&mut self, root: u32, dst: &Loc) {
        let l = dst.id;
        let r = &mut self.ts.frames[root as usize];
        r.loc = l;
        r.flags = INFERRED_START;
    }

    /// A signal delivered as the `rt_sigreturn` of a handler whose delivery the segment does
    /// not hold returns (a pending one, say): tracing restarts at a handler's first byte,
    /// not in the interrupted code. The new handler runs on the interrupted frame, the
    /// label root, which keeps its label's name until its own `rt_sigreturn` says what
    /// the interrupted code was. Taken for that `rt_sigreturn`, the handler became the
    /// root's name, one handler level too many for the rest of the run. True when handled
    /// so.
    fn unseen_handler_redelivered(&mut self, dst: &Loc) -> bool {
        if dst.offset != 0 {
            return false;
        }
        let Some(root) = self.trampoline_label_root() else {
            return false;
        };
        self.split_trampoline(root);
        self.ts.leaf = root;
        self.record(Flow::Return);
        if self.ts.signals.deliveries.len() == MAX_DELIVERIES {
            self.ts.signals.deliveries.remove(0);
        }
        self.ts.signals.deliveries.push(Delivery {
            interrupted: root,
            resume: RESUME_UNKNOWN,
        });
        self.push(dst, SIGNAL);
        true
    }

    /// The `rt_sigreturn` of a signal trampoline that is the segment's outermost known
    /// frame (a decode gap or a snapshot began between the handler's return into it and
    /// its syscall, so neither the delivery nor the handler is in the segment): tracing
    /// resumes in the interrupted code, the frame the trampoline ran on top of, which is
    /// the trampoline's caller from the segment's start. Taken as a new delivery, the
    /// interrupted function was shown as a handler on top of the trampoline for the rest
    /// of the run. True when handled so.
    fn trampoline_root_returns(&mut self, dst: &Loc) -> bool {
        let leaf = self.ts.leaf;
        if self.is_sentinel(leaf) || !self.is_sentinel(self.ts.frames[leaf as usize].parent) {
            return false;
        }
        let trampoline = self
            .symbol(leaf)
            .is_some_and(|s| plain_name(self.strings, s).is_some_and(|n| TRAMPOLINES.contains(&n)));
        if !trampoline {
            return false;
        }
        let interrupted = self.discover_root(dst);
        self.land_in(interrupted);
        true
    }

    /// Is `frame` a synthetic `[syscall]`, `[untraced]` or `[returned]` frame?
    fn leaf_is_synthetic_frame(&self, frame: u32) -> bool {
        use ptscope_event::Symbol;
        matches!(
            self.symbol(frame),
            Some(Symbol::Untraced | Symbol::Syscall | Symbol::Returned)
        )
    }

    /// A return from a signal handler's frame goes to the signal trampoline, which runs
    /// in the handler's place until its `rt_sigreturn`: true when handled so.
    pub(super) fn handler_return(&mut self, dst: &Loc) -> bool {
        let leaf = self.ts.leaf;
        if self.ts.frames[leaf as usize].flags & SIGNAL == 0 {
            self.ts.signals.label_return = dst.offset == 0 && dst.ip != 0;
            return false;
        }
        if self.injected_call_return(dst) || self.handler_leaves(dst) {
            return true;
        }
        self.replace_signal_frame(dst);
        self.ts.signals.trampoline = true;
        true
    }

    /// A handler returning straight into the middle of a function an older frame runs
    /// (a hand-written unwinder, a user-level thread switching out of a handler) lands in
    /// that frame, like any return that skips frames; the handler's frame and the ones it
    /// interrupted are left. A handler returns into its trampoline otherwise, whose code no
    /// frame outside a handler's runs. True when handled so.
    fn handler_leaves(&mut self, dst: &Loc) -> bool {
        if dst.offset == 0 {
            return false;
        }
        let mut f = self.ts.frames[self.ts.leaf as usize].parent;
        for _ in 0..MAX_FIND_DEPTH {
            let fr = self.ts.frames[f as usize];
            if fr.flags & SENTINEL != 0 {
                return false;
            }
            if fr.flags & SIGNAL == 0 && self.symbol(f) == Some(dst.symbol) {
                self.land_in(f);
                return true;
            }
            f = fr.parent;
        }
        false
    }

    /// A handler may make the interrupted code resume in a function of its choosing, as
    /// if that function had been called where the code stopped (Go's asynchronous
    /// preemption pushes the interrupted pc and resumes in `runtime.asyncPreempt`): the
    /// function, in the handler's place since the `rt_sigreturn`, returns to where the
    /// delivery stopped the code. That return ends the delivery, like an `rt_sigreturn`
    /// resuming there; taken as a handler's return into its trampoline, it left the
    /// function's frame on the stack for good. True when handled so.
    fn injected_call_return(&mut self, dst: &Loc) -> bool {
        let Some(d) = self.ts.signals.deliveries.last().copied() else {
            return false;
        };
        let leaf = self.ts.leaf;
        if d.resume != dst.ip || self.ts.frames[leaf as usize].parent != d.interrupted {
            return false;
        }
        self.ts.signals.deliveries.pop();
        self.ts.leaf = d.interrupted;
        self.record(Flow::Return);
        if self.is_sentinel(self.ts.leaf) {
            self.ensure_src(dst);
        } else {
            self.ensure_current(dst);
        }
        true
    }

    /// The leaf, a signal frame, now runs `loc` (the trampoline, or the next handler).
    fn replace_signal_frame(&mut self, loc: &Loc) {
        let leaf = self.ts.leaf;
        let fr = self.ts.frames[leaf as usize];
        let l = loc.id;
        self.ts.frames.push(Frame::new(l, fr.parent, SIGNAL));
        self.ts.leaf = (self.ts.frames.len() - 1) as u32;
        self.record(Flow::Jump);
    }
}
