//! Go's goroutine switches, as magic-trace isolates them in `Go_hacks`: `gogo` moves
//! the thread to another goroutine's stack, so what runs after it is joined to the
//! stack before it only when the two line up, and stacks of goroutines seen parking are
//! remembered to give a resumed goroutine its own outer frames back.

use super::frames::{plain_name, Flow, Frame, Join, Loc, Locations, ThreadState, KERNEL_ENTRY};
use super::ingest::Cx;
use super::stitch::Stitch;
use super::write::{Open, ThreadWriter};
use crate::legacy::GOGO_DESTINATIONS;
use crate::sink::TraceSink;
use ptscope_event::{StringTable, Symbol};

impl<T> Cx<'_, T> {
    pub(super) fn named_gogo_return(&self, src: &Loc) -> bool {
        matches!(src.symbol, Symbol::FromPerf(s) if self.strings.get(s) == "gogo")
    }

    /// Go's `gogo` switches goroutine stacks: the return from it lands in whatever
    /// goroutine runs next, often the one that just parked, but not always. So the
    /// resumed code starts a segment of its own, joined to the previous one only if its
    /// outermost frames (learnt from its later returns) line up with the parked stack;
    /// otherwise it is an unrelated stack, and no caller found on it is mistaken for a
    /// caller of the old one. The write pass also remembers the stacks of goroutines
    /// seen parking, and gives a resumed goroutine its own outer frames back when its
    /// callers single one out.
    pub(super) fn gogo(&mut self, dst: &Loc) {
        self.split(Join::Verified);
        self.ensure_current(dst);
    }

    /// Go's asynchronous preemption makes the interrupted code run
    /// `runtime.asyncPreempt`, which later returns to the interrupted instruction.
    /// Interrupted at a function's first instruction right after an indirect call, the
    /// signal hid where the call went, and the decoder took `asyncPreempt` for the
    /// callee; its return then lands on the entry of the function the call really
    /// entered, which takes `asyncPreempt`'s place. Read as an ordinary return (pop, then
    /// the caller going on in another function), the caller's frame went instead (four
    /// `runtime.doInit` where five were open, about one Go run in seventy under
    /// emulation). When the frame below already runs that function (the call was seen),
    /// the return is an ordinary one. True when the leaf was replaced.
    pub(super) fn async_preempt_onto_entry(&mut self, leaf: u32, dst: &Loc) -> bool {
        if dst.offset != 0 {
            return false;
        }
        let name = self.symbol(leaf).and_then(|s| plain_name(self.strings, s));
        if name.map(|n| n.strip_suffix(".abi0").unwrap_or(n)) != Some("runtime.asyncPreempt") {
            return false;
        }
        let fr = self.ts.frames[leaf as usize];
        if self.symbol(fr.parent) == Some(dst.symbol) {
            return false;
        }
        self.ts.frames.push(Frame {
            site: fr.site,
            ..Frame::new(dst.id, fr.parent, fr.flags & KERNEL_ENTRY)
        });
        self.ts.leaf = (self.ts.frames.len() - 1) as u32;
        self.record(Flow::Jump);
        true
    }
}

/// Go's thread and goroutine roots: the main thread's `runtime.rt0_go`, the threads the
/// runtime makes (`runtime.clone`, which calls `runtime.mstart`), and every goroutine's
/// `runtime.goexit`. A thread's root decides what a `gogo` into a goroutine no frame of
/// the thread runs does: known, that goroutine runs in `gogo`'s place, as on any thread
/// (see [`unwind`](super::unwind)); unknown, it started a segment of its own that nothing
/// lined up with, which dropped the thread's whole stack whenever the scheduler resumed a
/// goroutine on another thread than the one it parked on.
pub(super) const GO_THREAD_ROOTS: &[&str] = &[
    "runtime.goexit",
    "runtime.mstart",
    "runtime.rt0_go",
    "runtime.clone",
];

/// Is `name` one of [`GO_THREAD_ROOTS`], under its own name or its assembly's ABI0 one
/// (`runtime.clone.abi0`: perf names Go's assembly functions so)?
pub(super) fn is_go_root(name: &str) -> bool {
    let name = name.strip_suffix(".abi0").unwrap_or(name);
    GO_THREAD_ROOTS.contains(&name)
}

/// A goroutine's stack when it parked, root first, up to the function that parked.
pub(super) struct Parked {
    pub(super) frames: Vec<Open>,
    /// Known down to its root; otherwise only its upper part was ever seen.
    pub(super) complete: bool,
}

/// How many parked goroutine stacks are remembered per thread.
pub(super) const MAX_PARKED: usize = 64;
/// Revealed frames (the resumed `runtime.gopark` and its callers) needed before a
/// parked stack is believed to be the one resumed.
pub(super) const MIN_PARKED_EVIDENCE: usize = 4;

/// Finds the one parked goroutine whose stack ends in exactly the frames a resumed
/// segment revealed (outermost first, down to its `runtime.gopark`), takes it out of
/// `parked`, and returns the frames below them. Several candidates, or too little
/// evidence, means no guess: another goroutine's frames must not be shown.
pub(super) fn pick_parked<T>(
    ts: &ThreadState<T>,
    locs: &Locations,
    strings: &StringTable,
    parked: &mut Vec<Parked>,
    path: &[u32],
) -> Option<Parked> {
    let sym = |f: u32| locs.get(strings, ts.frames[f as usize].loc).symbol;
    // How many of the revealed frames (outermost first, down to the function that
    // parked) a parked stack ends with.
    let evidence = |p: &Parked| -> Option<usize> {
        let p = &p.frames;
        let last = sym(p.last()?.frame);
        let n = path.iter().position(|&f| sym(f) == last)? + 1;
        let matched = n >= MIN_PARKED_EVIDENCE
            && p.len() > n
            && p[p.len() - n..]
                .iter()
                .zip(path)
                .all(|(o, &f)| sym(o.frame) == sym(f));
        matched.then_some(n)
    };
    let mut hits = parked
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, evidence(p)?)));
    let (i, n) = hits.next()?;
    if hits.next().is_some() {
        return None;
    }
    let mut stack = parked.remove(i);
    stack.frames.truncate(stack.frames.len() - n);
    Some(stack)
}

impl<S: TraceSink> ThreadWriter<'_, S> {
    /// Does `frame` run a function where a parked goroutine's stack switches away?
    fn is_gogo_destination(&self, frame: u32) -> bool {
        let sym = self
            .locs
            .get(self.strings, self.ts.frames[frame as usize].loc)
            .symbol;
        matches!(sym, Symbol::FromPerf(n) if GOGO_DESTINATIONS.contains(&self.strings.get(n)))
    }

    /// A resumed goroutine continues exactly below the `runtime.mcall` it parked in.
    pub(super) fn resumes_here(&self, st: &Stitch) -> bool {
        self.open
            .get(st.base + st.matched)
            .is_some_and(|o| self.is_gogo_destination(o.frame))
    }

    /// Where the open stack switched to the scheduler, if it did.
    fn mcall_at(&self) -> Option<usize> {
        self.open
            .iter()
            .position(|o| self.is_gogo_destination(o.frame))
    }

    /// At a goroutine switch: remembers the stack that parked, if nothing lines up with
    /// it, and returns the parked stack the resumed goroutine's callers single out.
    pub(super) fn goroutine_switch(&mut self, found: bool, at_a_root: bool) -> Option<Parked> {
        // Only what was known of the parked stack: frames carried under it on
        // trust are left out, or a wrong guess would be repeated as a fact.
        let just_parked = self.mcall_at().map(|m| {
            let known = self.open[..m]
                .iter()
                .rposition(|o| o.unverified)
                .map_or(0, |u| u + 1);
            Parked {
                frames: self.open[known..m].to_vec(),
                complete: known == 0,
            }
        });
        let mut resumed = None;
        if !found && !at_a_root {
            resumed = pick_parked(
                self.ts,
                self.locs,
                self.strings,
                &mut self.parked,
                &self.path,
            );
        }
        if let Some(p) = just_parked.filter(|_| !found) {
            if self.parked.len() == MAX_PARKED {
                self.parked.remove(0);
            }
            self.parked.push(p);
        }
        resumed
    }

    /// A goroutine resumed where nothing known lines up with the open stack.
    pub(super) fn unmatched_goroutine(&self) -> Option<Stitch> {
        // If the resumed frames are too few to tell, it may be the same goroutine: keep
        // what lay below its parked `runtime.gopark` (marked unverified, as magic-trace
        // keeps its whole old stack). If its callers contradict the parked stack, it is
        // another goroutine: keep only the outermost frame, which goroutines share
        // (`runtime.goexit` in Go).
        let refuted = self.path.len() >= 2;
        self.mcall_at().map(|mcall| Stitch {
            base: if refuted {
                mcall.saturating_sub(1).min(1)
            } else {
                mcall.saturating_sub(1)
            },
            matched: 0,
            unverified: true,
        })
    }

    /// The resumed goroutine's own outer frames reopen below the frames its segment
    /// revealed (their start is inferred). Only what is carried under them is
    /// unverified: they are remembered as known when it parks again.
    pub(super) fn reopen_parked(
        &mut self,
        stack: Vec<Open>,
        stitch: &mut Option<Stitch>,
        start: i64,
    ) {
        let ts = self.ts;
        if let Some(s) = stitch.as_mut().filter(|s| s.unverified) {
            for o in self.open.iter_mut() {
                o.unverified = true;
            }
            s.unverified = false;
        }
        let t = start.max(self.last_written);
        for o in stack {
            self.begin(&ts.frames[o.shown as usize], t, true);
            self.is_open.set(o.frame, true);
            self.open.push(Open {
                frame: o.frame,
                shown: o.shown,
                at_gap: false,
                unverified: false,
                samples: 0,
            });
        }
        self.last_written = t;
        if let Some(s) = stitch.as_mut() {
            s.base = self.open.len();
        }
    }
}
