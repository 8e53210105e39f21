//! Joining segments across gaps: which outermost frames after a decode error (or a
//! snapshot start) line up with the frames open before it, and the callers a later
//! segment reveals for earlier ones.

use super::bursts::is_short;
use super::frames::Segment;
use super::frames::{
    frame_path, plain_name, unversioned, Frame, Join, Locations, ThreadState, INFERRED_START, NONE,
    PROCESS_ENTRY, RETURN_LABEL, SENTINEL,
};
use super::go::Parked;
use super::write::{Open, ThreadWriter};
use crate::sink::TraceSink;
use ptscope_event::{Location, LocationHandle, ProcessStart, StringTable, Symbol};

/// Functions at the very bottom of a thread's stack (C's; Go's are
/// [`GO_THREAD_ROOTS`](super::go::GO_THREAD_ROOTS)): a stack known down to one of these
/// has nothing below it to carry over. See [`is_thread_root`].
pub(super) const THREAD_ROOTS: &[&str] = &["_start", "start_thread", "clone", "clone3"];

/// Is `name` (as perf names a function, version and all) at the very bottom of a thread's
/// or goroutine's stack?
pub(super) fn is_thread_root(name: &str) -> bool {
    let name = unversioned(name);
    THREAD_ROOTS.contains(&name) || super::go::is_go_root(name)
}

/// Is frame `f` at the very bottom of its thread's stack: named as a thread's first
/// function ([`is_thread_root`]), or the program's entry inferred below
/// `__libc_start_main` ([`PROCESS_ENTRY`], whatever its name)?
pub(super) fn is_root_frame<T>(
    ts: &ThreadState<T>,
    locs: &Locations,
    strings: &StringTable,
    f: u32,
) -> bool {
    let fr = &ts.frames[f as usize];
    fr.flags & PROCESS_ENTRY != 0
        || plain_name(strings, locs.get(strings, fr.loc).symbol).is_some_and(is_thread_root)
}
/// glibc's process start-up, whose callers are fixed by the ABI: the program's `_start`
/// calls `__libc_start_main`, which calls `__libc_start_call_main`, which calls `main`.
/// Names are compared without their symbol version (`@@GLIBC_2.34`).
pub(super) const LIBC_START_MAIN: &[&str] = &["__libc_start_main", "__libc_start_main_impl"];
/// The label in ld.so's `_start` where `_dl_start` returns: the same frame as `_start`.
pub(super) const LOADER_START_LABEL: &str = "_dl_start_user";
/// Called by `__libc_start_main` alone (glibc 2.34 and later).
pub(super) const LIBC_START_CALL_MAIN: &str = "__libc_start_call_main";
/// How many later segments are searched for evidence of what survived a gap.
pub(super) const MAX_LOOKAHEAD: usize = 64;

/// A segment whose outermost frame is `__libc_start_main` lost its caller to a gap or
/// the start of a snapshot, but the ABI names it: the program's entry, put below it
/// as an inferred frame. Without it, a decode error across the loader's jump to the
/// program left the rest of the run rooted one level short, and carried the loader's
/// open frames under it. `entry` is where the process entered its program, as the
/// trace names it (`sqlite3+0xa780` in a stripped program, whose entry has no symbol);
/// without it the frame is named `_start`, the entry's usual symbol.
pub(super) fn add_process_entry<T>(
    ts: &mut ThreadState<T>,
    locs: &mut Locations,
    strings: &StringTable,
    entry: Option<LocationHandle>,
) {
    let l = match entry {
        Some(h) => h.0,
        None => {
            let Some(start) = strings.lookup("_start") else {
                return;
            };
            locs.own(Location::new(0, Symbol::FromPerf(start), 0)).id
        }
    };
    for f in 0..ts.frames.len() {
        if f % (1 << 16) == 0 {
            // The scan reads every frame: pages read stay mapped until given back.
            ts.frames.release();
        }
        let Frame {
            loc, parent, flags, ..
        } = ts.frames[f];
        if flags & SENTINEL != 0 || parent == NONE {
            continue;
        }
        if ts.frames[parent as usize].flags & SENTINEL == 0 {
            continue;
        }
        let name = plain_name(strings, locs.get(strings, loc).symbol);
        if !name.is_some_and(|n| LIBC_START_MAIN.contains(&n)) {
            continue;
        }
        let entry = ts.frames.len() as u32;
        ts.frames
            .push(Frame::new(l, parent, INFERRED_START | PROCESS_ENTRY));
        ts.frames[f].parent = entry;
    }
}

/// A segment whose outermost frame is the program's `main` (known from the program's
/// code: glibc's `_start` passes it to `__libc_start_main`) lost its callers to a gap or
/// the start of a snapshot, but the C library names the one that calls `main`
/// (`__libc_start_call_main`): it is put below `main` as an inferred frame, and so lines
/// up after a gap with that frame, or (called by `__libc_start_main` alone) with
/// `__libc_start_main`. Without it, a gap from inside `__libc_start_main`'s lazy binding
/// (`_dl_runtime_resolve_xsave > _dl_fixup` open) into `main`, which never returns in
/// the trace, carried `main` on the binder's frames for the rest of the run. Only
/// segments begun by a decode error or a snapshot's start: one begun by a jump into
/// `main` (the unwinder landing in its handler) is placed by that jump. Run before
/// [`add_process_entry`]; `main`'s frame is told by its name and object.
pub(super) fn add_main_caller<T>(
    ts: &mut ThreadState<T>,
    locs: &Locations,
    strings: &StringTable,
    start: ProcessStart,
) {
    let (Some(main), Some(caller)) = (start.main, start.main_caller) else {
        return;
    };
    let main = strings.location(main);
    let after_gaps: rustc_hash::FxHashSet<u32> = (ts.segments.iter())
        .filter(|s| matches!(s.join, Join::Any | Join::Never))
        .map(|s| s.sentinel)
        .collect();
    for f in 0..ts.frames.len() {
        if f % (1 << 16) == 0 {
            // The scan reads every frame: pages read stay mapped until given back.
            ts.frames.release();
        }
        let Frame {
            loc, parent, flags, ..
        } = ts.frames[f];
        if flags & SENTINEL != 0 || parent == NONE {
            continue;
        }
        if ts.frames[parent as usize].flags & SENTINEL == 0 || !after_gaps.contains(&parent) {
            continue;
        }
        let at = locs.get(strings, loc);
        if at.symbol != main.symbol || at.dso != main.dso {
            continue;
        }
        let new = ts.frames.len() as u32;
        ts.frames.push(Frame::new(caller.0, parent, INFERRED_START));
        ts.frames[f].parent = new;
    }
}

/// Callers learnt after a gap (or after a jump the writer could not place) also ran
/// before it: when the stack after a gap holds
/// the outermost frames before it *above* further frames, those further frames are the
/// earlier segment's missing roots. Applied from the last gap back to the first, so a
/// root found late reaches every segment it lines up with.
pub(super) fn extend_roots_backwards<T>(
    ts: &mut ThreadState<T>,
    locs: &Locations,
    strings: &StringTable,
) {
    let mut before = Vec::new();
    let mut after = Vec::new();
    for k in (1..ts.segments.len()).rev() {
        // The next segment first, then, through a burst of decode errors (short segments
        // that may show too little of the stack to line up with), the segments after it:
        // a later stack that holds this segment's whole stack above further frames shows
        // what ran below it all along (see `extend_root` for what counts as evidence).
        for b in k..ts.segments.len().min(k + MAX_LOOKAHEAD) {
            if b > k {
                let prev = &ts.segments[b - 1];
                if !(is_short(prev) && prev.join == Join::Any) || ts.segments[b].join != Join::Any {
                    break;
                }
            }
            if extend_root(ts, locs, strings, k - 1, b, &mut before, &mut after) {
                break;
            }
        }
    }
}

/// [`extend_roots_backwards`] for segment `a` and a later segment `b`: fills `a`'s
/// sentinel with the frames below `a`'s last stack in `b`'s first one; true if it did.
fn extend_root<T>(
    ts: &mut ThreadState<T>,
    locs: &Locations,
    strings: &StringTable,
    a: usize,
    b: usize,
    before: &mut Vec<u32>,
    after: &mut Vec<u32>,
) -> bool {
    let (sa, sb) = (&ts.segments[a], &ts.segments[b]);
    let unwound = sb.join == Join::Unwound;
    if !(sb.join == Join::Any || unwound) || sa.end <= sa.first || sb.end <= sb.first {
        return false;
    }
    let a_sentinel = sa.sentinel;
    frame_path(ts, ts.entries[sa.end - 1].leaf, before);
    frame_path(ts, ts.entries[sb.first].leaf, after);
    // A jump the writer could not place (`Join::Unwound`) left the frame that jumped:
    // only the frames below it can line up with the later stack (as its callers when
    // the jump turns out to be a tail jump, glibc's `mempcpy` into `memmove`).
    if unwound {
        before.pop();
    }
    // Through a burst, only a long segment's whole stack of two frames or more is
    // evidence enough: a short segment's, or a part of a stack, also lines up where the
    // same functions were called again from elsewhere in the burst (measured: a part of
    // three frames took `storm_bursts` seed 13 from 99.91 to 91.59 % exact outside gaps,
    // short segments lowered the marker writer's seed 14 from 100 to 99.85 %).
    if b > a + 1 && (before.len() < 2 || is_short(&ts.segments[a])) {
        return false;
    }
    let Some(&a0) = before.first() else {
        return false;
    };
    let sym = |ts: &ThreadState<T>, f: u32| locs.get(strings, ts.frames[f as usize].loc).symbol;
    if matches!(
        sym(ts, a0),
        Symbol::Untraced | Symbol::Syscall | Symbol::Returned | Symbol::Unknown
    ) {
        return false;
    }
    // The shallowest position j > 0 where the earlier stack lines up completely
    // (or for at least two frames) inside the later one.
    let found = (1..after.len()).find(|&j| {
        let run = before
            .iter()
            .zip(&after[j..])
            .take_while(|(x, y)| sym(ts, **x) == sym(ts, **y))
            .count();
        run >= before.len().min(if b > a + 1 { usize::MAX } else { 2 })
    });
    let Some(j) = found else { return false };
    // Fill the earlier segment's sentinel with after[j-1], then below it after[j-2]…
    let mut sentinel = a_sentinel;
    for &f in after[..j].iter().rev() {
        let Frame { loc, flags, .. } = ts.frames[f as usize];
        let new = ts.frames.len() as u32;
        ts.frames.push(Frame::sentinel());
        let fr = &mut ts.frames[sentinel as usize];
        fr.loc = loc;
        fr.parent = new;
        // A label root stays one: its real name may still be found across a gap.
        fr.flags = INFERRED_START | (flags & RETURN_LABEL);
        sentinel = new;
    }
    ts.segments[a].sentinel = sentinel;
    true
}

/// How the outermost frames after a gap line up with the frames open before it.
pub(super) struct Stitch {
    /// Open frames (by position) that continue below the new segment's frames.
    pub(super) base: usize,
    /// How many of the new segment's outermost frames continue open frames.
    pub(super) matched: usize,
    /// No frame lined up: the base is carried over on trust.
    pub(super) unverified: bool,
}

pub(super) fn find_stitch<T>(
    ts: &ThreadState<T>,
    locs: &Locations,
    strings: &StringTable,
    open: &[Open],
    after: &[u32],
) -> Option<Stitch> {
    let first = *after.first()?;
    let sym = |f: u32| locs.get(strings, ts.frames[f as usize].loc).symbol;
    let b0 = sym(first);
    if matches!(
        b0,
        Symbol::Untraced | Symbol::Syscall | Symbol::Returned | Symbol::Unknown
    ) {
        return None;
    }
    // A root named after the label its return landed on is the open frame whose callee
    // it returned from: it lines up by what it called, in the same object.
    let label = ts.frames[first as usize].flags & RETURN_LABEL != 0;
    let dso = |f: u32| locs.get(strings, ts.frames[f as usize].loc).dso;
    let name = |f: u32| plain_name(strings, sym(f));
    let is_root = |f: u32| is_root_frame(ts, locs, strings, f);
    let mut best: Option<(usize, usize, usize)> = None; // (cost, run, i)
    for i in 0..open.len() {
        // A label root continues the open frame that called what returned to it. That
        // frame may have called others since: ld.so's `_start` is `_dl_start_user` once
        // `_dl_start` returned, then calls `_dl_init`; it lines up with the thread's root
        // in the same object.
        let head = sym(open[i].frame) == b0
            || (label
                && dso(open[i].frame) == dso(first)
                && after
                    .get(1)
                    .zip(open.get(i + 1))
                    .is_some_and(|(&a, o)| sym(o.frame) == sym(a)))
            || ((label || name(first) == Some(LOADER_START_LABEL))
                && i == 0
                && is_root(open[0].frame)
                && dso(open[0].frame) == dso(first));
        if !head {
            continue;
        }
        let mut run = 1;
        while i + run < open.len()
            && run < after.len()
            && sym(open[i + run].frame) == sym(after[run])
        {
            run += 1;
        }
        // What the gap must have done for this alignment: return from the open frames
        // above the matched ones, then call the new segment's frames above them. The
        // head is open more than once only in a recursion; counting the returns alone
        // there always chose its innermost occurrence, however many calls that meant
        // within a gap of a few dozen branches, and a recursion at a steady depth grew
        // a level that never returns at every gap (python3.11: 58 % suffix-correct).
        let cost = (open.len() - (i + run)) + (after.len() - run);
        if best.is_none_or(|(c, r, _)| cost < c || (cost == c && run > r)) {
            best = Some((cost, run, i));
        }
    }
    Some(match best {
        Some((_, run, i)) => Stitch {
            base: i,
            matched: run,
            unverified: false,
        },
        // Nothing lines up: the new frames were most likely called during the gap on top
        // of what was running (outer frames rarely return within a short loss), even when
        // they share functions with the open stack (a function called again from another
        // caller, as in a burst of gaps). Dropping the open frames instead lost the
        // thread's root for the rest of the run. The carried frames are marked
        // unverified, and a later segment that lines up narrows them.
        None => {
            // Nothing is below a thread's first function.
            if is_root(first) {
                return None;
            }
            // Called by `__libc_start_main` alone: the gap returned to it, then called.
            if name(first) == Some(LIBC_START_CALL_MAIN) {
                let caller = open
                    .iter()
                    .rposition(|o| name(o.frame).is_some_and(|n| LIBC_START_MAIN.contains(&n)));
                if let Some(i) = caller {
                    return Some(Stitch {
                        base: i + 1,
                        matched: 0,
                        unverified: false,
                    });
                }
            }
            // A function the new stack runs is open too, but under other callers: the gap
            // returned from that open frame (the new stack shows it called afresh), so only
            // the frames below the outermost such one are carried. Carrying them all put
            // two versions of the same calls on one stack, wrong in the middle
            // (`decode_error_gaps` seed 4: 55.9 -> 12.9 % suffix; now 55.9 % exact).
            let base = open
                .iter()
                .position(|o| after.iter().any(|&f| sym(o.frame) == sym(f)))
                .unwrap_or(open.len());
            Stitch {
                base,
                matched: 0,
                unverified: true,
            }
        }
    })
}

impl<S: TraceSink> ThreadWriter<'_, S> {
    /// How segment `si` (its first stack in `self.path`) continues the frames open
    /// before it, and the parked goroutine stack it resumes, if any.
    pub(super) fn stitch(&mut self, si: usize, seg: &Segment) -> (Option<Stitch>, Option<Parked>) {
        if !(si > 0 && seg.join != Join::Never && self.config.stitch) {
            return (None, None);
        }
        // A jump the writer could not place began the segment: the frame it entered
        // starts at the jump, whatever its callers turn out to be.
        self.entered_by_jump = seg.join == Join::Unwound;
        let (ts, locs, strings) = (self.ts, self.locs, self.strings);
        let candidates = match seg.join {
            Join::Landed { skip } => &self.open[..self.open.len().saturating_sub(skip as usize)],
            _ => &self.open[..],
        };
        let found = find_stitch(ts, locs, strings, candidates, &self.path).filter(|st| {
            // After a goroutine switch, a lone `runtime.gopark` proves nothing:
            // every goroutine resumes there. A caller must line up too.
            seg.join == Join::Any
                || (matches!(seg.join, Join::Unwound | Join::Landed { .. }) && !st.unverified)
                // Landed past the root of a segment begun by a decode error, in a
                // function no frame below it runs: the gap hid the frames between, and
                // the landing is one of them. The frames carried across that gap stay
                // under it, unverified, as when nothing lines up after a gap; closing
                // them lost the thread's root for the rest of the run.
                || (matches!(seg.join, Join::Landed { .. })
                    && ts.segments[si - 1].join == Join::Any)
                || (seg.join == Join::Verified
                    && !st.unverified
                    && self.resumes_here(st)
                    && st.matched >= 2)
        });
        let at_a_root = self.path.first().is_some_and(|&f| {
            let sym = locs.get(strings, ts.frames[f as usize].loc).symbol;
            matches!(sym, Symbol::FromPerf(n) if is_thread_root(strings.get(n)))
        });
        let mut resumed = None;
        if seg.join == Join::Verified && self.config.stitch {
            resumed = self.goroutine_switch(found.is_some(), at_a_root);
        }
        let stitch = if resumed.as_ref().is_some_and(|p| p.complete) {
            // Everything open belongs to the goroutine that parked.
            Some(Stitch {
                base: 0,
                matched: 0,
                unverified: false,
            })
        } else if found.is_none() && seg.join == Join::Verified && !at_a_root {
            self.unmatched_goroutine()
        } else if found.is_none() && seg.join == Join::Unwound && self.path.len() == 1 {
            // Nothing known lines up and the target revealed no caller: a tail jump
            // after all (into a `.cold` part, say), replacing the frame that jumped.
            Some(Stitch {
                base: self.open.len().saturating_sub(1),
                matched: 0,
                unverified: false,
            })
        } else if found.is_none() && seg.join == Join::Unwound {
            self.survivors_of_unwind(si).map(|k| Stitch {
                base: k,
                matched: 0,
                unverified: false,
            })
        } else {
            found
        };
        let stitch = match stitch {
            Some(st) if seg.join == Join::Any && is_short(seg) => {
                Some(self.respect_survivors(si, st))
            }
            other => other,
        };
        (stitch, resumed)
    }

    /// Nothing lines up after segment `si`'s gap; a later segment may show how much of
    /// the old stack survived the gap: keep only that much.
    pub(super) fn narrow_unverified(&self, si: usize, st: &mut Stitch) {
        let ts = self.ts;
        // Not in a burst: the segments after a short one line up with the open frames
        // that survived *their* gaps, often by a single coincidental name, which cut
        // frames still running under this one.
        if is_short(&ts.segments[si]) {
            return;
        }
        let verified = self
            .later_line_ups(si)
            .find_map(|(_, found)| found.filter(|f| !f.unverified));
        if let Some(found) = verified {
            st.base = found.base + 1;
        }
    }

    /// With [`WriterConfig::mark_unknown_frames`](crate::WriterConfig::mark_unknown_frames):
    /// nothing lined up after segment `si`'s gap, and the open frames carried under it
    /// are a guess. Those that no later segment of the burst lines up with (after the
    /// burst, by two frames or more; a thread's first function is proven by being one)
    /// may have returned in this gap or in a
    /// later one, and frames may have been called in between: the trace does not say
    /// (`storm_bursts` seeds 14 and 15, FIDELITY.md). They give way to one marker frame,
    /// which stands for any number of frames, none included. Returns whether a marker is
    /// to be opened at `st.base` (false when one already stands there, or all are proven).
    pub(super) fn mark_unproven(&self, si: usize, st: &mut Stitch, short: bool) -> bool {
        let Some(marker) = self.marker else {
            return false;
        };
        // After a long segment, the frames an open marker stands for may run a function
        // of the new stack, which the shared-function rule of [`find_stitch`] cannot see:
        // as that rule does, the gap is taken to have returned from them (`decode_error_gaps`
        // seed 4: 57.89 % exact outside gaps carried, 14.37 % on the marker without this).
        // A short segment reveals too little for that rule: its marker stays.
        if !short {
            if let Some(p) = self.open[..st.base].iter().position(|o| o.frame == marker) {
                st.base = p;
            }
        }
        let (ts, locs, strings) = (self.ts, self.locs, self.strings);
        let root = (self.open.first()).is_some_and(|o| is_root_frame(ts, locs, strings, o.frame));
        let mut proven = usize::from(root);
        // Past the burst (its first long segment included) the stack has run on for a
        // while: a later line-up by one name is most often that function called again,
        // not the carried frame still running (`storm_bursts` seed 5: `fn_35`, returned
        // in the gap, "proven" by a segment of the next storm 22 µs on, 70.18 % exact or
        // marked outside gaps; 99.68 % when such a proof needs two frames).
        let mut past_burst = false;
        // Through jumps the writer could not place too (`Join::Unwound`, as
        // `survivors_of_unwind` looks): a frame such a segment lines up with is as proven
        // as after a decode error. Stopping at the first one put the marker over frames
        // the next segments showed running (`unwind_jumps_gaps` seed 9: root 77.89 %
        // carried, 74.05 % marked; exact or marked 73.00 % against 76.93 % carried).
        // And through landings (`Join::Landed`: a hand-written unwinder's `ret` into a
        // saved frame after the gap): stopping there left the marker standing for
        // `__libc_start_main > … > main` for the rest of the run, the landing lined up
        // with none of it (`realworld_sim::c_hand_written_unwinds`, late faults: 69.16 %
        // exact outside gaps, 99.99 % carried).
        let through = |j| matches!(j, Join::Any | Join::Unwound | Join::Landed { .. });
        for (later, found) in self.line_ups_after(si, through) {
            let weak = past_burst;
            past_burst |= !is_short(later);
            if let Some(f) = found.filter(|f| !f.unverified && (!weak || f.matched >= 2)) {
                proven = proven.max(f.base + f.matched);
            }
        }
        if proven >= st.base {
            return false;
        }
        if self.open.get(proven).is_some_and(|o| o.frame == marker) {
            st.base = proven + 1;
            return false;
        }
        st.base = proven;
        true
    }
}

impl<'a, S: TraceSink> ThreadWriter<'a, S> {
    /// A jump the writer could not place began segment `si` (`Join::Unwound`) and
    /// nothing open lines up with it for sure: how many open frames (outermost first) a
    /// later segment shows still running, lining up with them by two frames or more
    /// (the first such segment, up to [`MAX_LOOKAHEAD`], through decode errors and
    /// further such jumps). Those frames ran under this segment too. Closing them
    /// instead lost the thread's root for the rest of the run: sqlite3 under simulated
    /// PT, an overflow in `sqlite3_free` then two jumps out of frames whose callers the
    /// gap hid (`realworld_sim::sqlite3_queries_with_faults`, 86 % exact).
    fn survivors_of_unwind(&self, si: usize) -> Option<usize> {
        self.line_ups_after(si, |j| matches!(j, Join::Any | Join::Unwound))
            .find_map(|(_, found)| found.filter(|f| !f.unverified && f.matched >= 2))
            .map(|f| f.base + f.matched)
    }

    /// The segments after segment `si`, each begun by a decode error (up to
    /// [`MAX_LOOKAHEAD`], up to the first that is not or is empty), with how the first
    /// stack of each lines up with the frames open now: what they say of the frames that
    /// survived the gaps.
    pub(super) fn later_line_ups<'s>(
        &'s self,
        si: usize,
    ) -> impl Iterator<Item = (&'a Segment, Option<Stitch>)> + 's {
        self.line_ups_after(si, |j| j == Join::Any)
    }

    /// [`ThreadWriter::later_line_ups`] through the segments whose join `through` accepts.
    fn line_ups_after<'s>(
        &'s self,
        si: usize,
        through: fn(Join) -> bool,
    ) -> impl Iterator<Item = (&'a Segment, Option<Stitch>)> + 's {
        let (ts, locs, strings) = (self.ts, self.locs, self.strings);
        let mut later_path = Vec::new();
        ts.segments[si + 1..]
            .iter()
            .take(MAX_LOOKAHEAD)
            .take_while(move |later| through(later.join) && later.end > later.first)
            .map(move |later| {
                frame_path(ts, ts.entries[later.first].leaf, &mut later_path);
                let found = find_stitch(ts, locs, strings, &self.open, &later_path);
                (later, found)
            })
    }
}
