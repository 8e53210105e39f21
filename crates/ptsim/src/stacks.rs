//! The true call stack of each thread over time, named as perf names functions, in the
//! shape the project's fidelity scoring uses (`ptscope-groundtruth`'s `ThreadTruth`
//! timeline): contiguous pieces `(start_ns, end_ns, stack root first)`.
//!
//! Conventions follow FIDELITY.md: a frame is a function; a jump to another function's
//! entry is a tail call (the top frame changes function); a jump or return landing inside
//! an ancestor's function unwinds to it (exceptions, OCaml raise, `longjmp`); `[syscall]`
//! sits on top between a syscall and the restart of tracing, `[untraced]` after an
//! asynchronous stop.

use crate::perfscript::Symbols;
use crate::truth::{Step, StepKind, ThreadTrace};
use std::io::Write;
use std::path::Path;

/// One frame: the function and the address its call returns to (0 if not called).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Frame {
    entry: u64,
    name: String,
    ret: u64,
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

fn function(syms: &Symbols, dso: DsoOf<'_>, addr: u64) -> (String, u64) {
    match syms.function(addr) {
        Some((name, entry)) => (name.to_string(), entry),
        // ptscope names a location perf calls `[unknown]` after its address and DSO; a
        // function without a symbol is named after its entry the same way.
        None => (
            format!(
                "[unknown @ {addr:#x} ({})]",
                dso(addr).unwrap_or("[unknown]")
            ),
            addr,
        ),
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
    after_stop: Option<(StepKind, u64)>,
}

impl<'a, 'b> Replay<'a, 'b> {
    /// An empty stack, naming functions with `syms` (and `dso` where perf has no symbol).
    pub fn new(syms: &'a Symbols, dso: DsoOf<'b>) -> Self {
        Replay {
            syms,
            dso,
            frames: Vec::new(),
            overlay: None,
            after_stop: None,
        }
    }

    /// The frames' return addresses, root first (0 for a frame nothing called).
    pub fn rets(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.frames.iter().map(|f| f.ret)
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
    pub fn apply(&mut self, s: &Step) {
        let (syms, dso) = (self.syms, self.dso);
        let frames = &mut self.frames;
        match s.kind {
            StepKind::Start => {
                self.overlay = None;
                let (name, entry) = function(syms, dso, s.to);
                match self.after_stop {
                    // A signal handler runs on top of the interrupted code.
                    Some((StepKind::Async { .. }, at)) if !frames.is_empty() => {
                        if frames.last().is_none_or(|f| f.entry != entry) {
                            frames.push(Frame {
                                entry,
                                name,
                                ret: at,
                            });
                        }
                    }
                    _ => {
                        // rt_sigreturn back into interrupted code pops the handler.
                        if let Some(i) = frames.iter().rposition(|f| f.ret == s.to) {
                            frames.truncate(i);
                        }
                        land(frames, entry, name, true);
                    }
                }
                self.after_stop = None;
            }
            StepKind::Call | StepKind::IndirectCall => {
                let (name, entry) = function(syms, dso, s.to);
                frames.push(Frame {
                    entry,
                    name,
                    ret: s.from + s.len as u64,
                });
            }
            StepKind::Return => {
                if let Some(i) = frames.iter().rposition(|f| f.ret == s.to) {
                    frames.truncate(i);
                } else {
                    frames.pop();
                }
                let (name, entry) = function(syms, dso, s.to);
                land(frames, entry, name, false);
            }
            StepKind::Jmp | StepKind::IndirectJmp | StepKind::Jcc { taken: true } => {
                let (name, entry) = function(syms, dso, s.to);
                if frames.last().is_none_or(|f| f.entry != entry) {
                    land(frames, entry, name, s.to == entry);
                }
            }
            StepKind::Jcc { taken: false } => {}
            StepKind::Syscall => {
                self.overlay = Some("[syscall]");
                self.after_stop = Some((s.kind, s.from));
            }
            StepKind::Async { .. } => {
                self.overlay = Some("[untraced]");
                self.after_stop = Some((s.kind, s.from));
            }
        }
    }
}

/// Execution continues in function `entry`: unwind to an ancestor running it, else the
/// top frame becomes it (a tail call when `at_entry`, or code reached some other way).
fn land(frames: &mut Vec<Frame>, entry: u64, name: String, at_entry: bool) {
    if frames.last().is_some_and(|f| f.entry == entry) {
        return;
    }
    if !at_entry {
        if let Some(i) = frames.iter().rposition(|f| f.entry == entry) {
            frames.truncate(i + 1);
            return;
        }
    }
    match frames.last_mut() {
        Some(top) => {
            top.entry = entry;
            top.name = name;
        }
        None => frames.push(Frame {
            entry,
            name,
            ret: 0,
        }),
    }
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
/// recordings without faults or unpredictable stretches); `None` otherwise.
pub fn perf_clock_times(
    t: &ThreadTrace,
    reported: &[crate::expected::Branch],
    ns: &dyn Fn(u64) -> u64,
) -> Option<Vec<u64>> {
    let truth: Vec<crate::expected::Branch> = crate::expected::truth_iter(t, ns).collect();
    let offset = truth.len().checked_sub(reported.len())?;
    let same = truth[offset..]
        .iter()
        .zip(reported)
        .all(|(a, b)| a.kind == b.kind && a.from == b.from && a.to == b.to);
    if !same || reported.is_empty() {
        return None;
    }
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
