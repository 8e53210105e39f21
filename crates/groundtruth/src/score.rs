//! Comparing a reconstructed stack timeline with the truth.
//!
//! Scores are time-weighted over each thread's covered interval (first to last
//! retained event). Because several branches share a timestamp, the trace only orders
//! them; so an instant inside the timestamp window `[w_i, w_{i+1})` counts as exact if
//! the reconstructed stack equals *any* stack the program really had during that
//! window. `exact_strict` drops that tolerance (it also measures time smearing).
//!
//! Stacks are compared as handles ([`crate::names`]): a recording of millions of events
//! is scored in the memory of a few handles per stack change ([`score_interned`]); the
//! string forms ([`score`], [`mismatches`]) intern their input and score the same way.

use crate::gen::ThreadTruth;
use crate::names::{IdMap, Names, StackId, EMPTY};
use crate::sink::{Recon, ReconThread};
use ptscope_event::Thread;
use ptscope_stacks::UNKNOWN_FRAMES_MARKER;

/// Does `recon` (root first) equal `truth` where each `marker` frame in it stands for any
/// run of true frames, the empty run included?
fn matches_with_markers(truth: &[u32], recon: &[u32], marker: u32) -> bool {
    // ok[j]: recon[..i] matches truth[..j], row by row over i.
    let mut ok = vec![false; truth.len() + 1];
    ok[0] = true;
    for &r in recon {
        if r == marker {
            for j in 1..ok.len() {
                ok[j] = ok[j] || ok[j - 1];
            }
        } else {
            for j in (1..ok.len()).rev() {
                ok[j] = ok[j - 1] && truth[j - 1] == r;
            }
            ok[0] = false;
        }
    }
    ok[truth.len()]
}

/// How well a reconstruction matches the truth.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fidelity {
    /// Nanoseconds scored (sum over threads).
    pub covered_ns: u64,
    /// Share of time the whole stack equals a true stack of the same timestamp window.
    pub exact: f64,
    /// Like `exact`, with windows bounded only by events that change the stack: what a
    /// writer that ignores the timestamps of intra-function jumps can reach.
    pub exact_order: f64,
    /// Share of time the stack is right except for missing outermost frames (a suffix of
    /// a true stack of the window): what a writer can reach when the root is never seen.
    pub suffix_correct: f64,
    /// Share of time the root (outermost) frame equals the true root.
    pub root_correct: f64,
    /// `exact` over the time outside decode-error gaps.
    pub exact_outside_gaps: f64,
    /// `root_correct` over the time outside decode-error gaps.
    pub root_outside_gaps: f64,
    /// Share of time the stack equals the true stack at that very instant.
    pub exact_strict: f64,
    /// Like `exact`, where a [`UNKNOWN_FRAMES_MARKER`] frame (the segments writer's
    /// stand-in for frames a decode error hid) matches any run of true frames, none
    /// included: the stack claims nothing false.
    pub exact_or_marked: f64,
    /// `exact_or_marked` over the time outside decode-error gaps.
    pub exact_or_marked_outside_gaps: f64,
    /// Reconstructed slices of the marker frame (never phantoms: they name no function).
    pub marker_frames: u64,
    /// Reconstructed frames whose name is on no true stack anywhere during their interval
    /// (widened to the order windows it touches, so timing alone never makes a phantom).
    pub phantom_frames: u64,
    /// The phantom frames themselves (with absolute times), to see what went wrong.
    pub phantoms: Vec<crate::sink::Slice>,
    /// Reconstructed frames (slices) in total.
    pub frames: u64,
    /// Frames the writer marked as having an inferred start time.
    pub inferred_frames: u64,
    /// Threads in the truth with no reconstructed track.
    pub missing_threads: u64,
}

/// A thread's truth with interned stacks: [`ThreadTruth`] in a few bytes per piece.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Truth {
    /// The thread, as in the events.
    pub thread: Thread,
    /// Contiguous pieces `(start, end, stack)` of positive length.
    pub timeline: Vec<(u64, u64, StackId)>,
    /// As [`ThreadTruth::windows`].
    pub windows: Vec<u64>,
    /// As [`ThreadTruth::order_windows`].
    pub order_windows: Vec<u64>,
    /// As [`ThreadTruth::gaps`].
    pub gaps: Vec<(u64, u64)>,
}

impl Truth {
    /// `t` with its stacks interned in `names`.
    pub fn intern(t: &ThreadTruth, names: &mut Names) -> Self {
        Truth {
            thread: t.thread,
            timeline: t
                .timeline
                .iter()
                .map(|(a, b, s)| (*a, *b, names.stack(s)))
                .collect(),
            windows: t.windows.clone(),
            order_windows: t.order_windows.clone(),
            gaps: t.gaps.clone(),
        }
    }

    /// Start of the scored interval (the first retained event).
    pub fn start(&self) -> u64 {
        self.timeline.first().map_or(0, |p| p.0)
    }

    /// End of the scored interval (the last retained event).
    pub fn end(&self) -> u64 {
        self.timeline.last().map_or(0, |p| p.1)
    }
}

#[derive(Default)]
struct Acc {
    total: u64,
    exact: u64,
    root: u64,
    out_total: u64,
    out_exact: u64,
    out_root: u64,
    marked: u64,
    out_marked: u64,
    strict: u64,
    order: u64,
    suffix: u64,
}

type Pieces = [(u64, u64, StackId)];

/// Timestamp windows: window k is `[starts[k], starts[k+1])` (the last ends at the
/// covered interval's end); `pieces[k]` is the range of truth pieces overlapping it.
struct Windows {
    starts: Vec<u64>,
    pieces: Vec<std::ops::Range<usize>>,
}

impl Windows {
    fn new(times: &[u64], lo: u64, hi: u64, truth: &Pieces) -> Self {
        let mut starts: Vec<u64> = times
            .iter()
            .copied()
            .filter(|w| *w >= lo && *w < hi)
            .collect();
        if starts.first() != Some(&lo) {
            starts.insert(0, lo);
        }
        let mut pieces = Vec::with_capacity(starts.len());
        let mut p = 0;
        for k in 0..starts.len() {
            let (a, b) = (starts[k], starts.get(k + 1).copied().unwrap_or(hi));
            while p < truth.len() && truth[p].1 <= a {
                p += 1;
            }
            let mut q = p;
            while q < truth.len() && truth[q].0 < b {
                q += 1;
            }
            pieces.push(p..q);
        }
        Windows { starts, pieces }
    }

    /// The truth pieces of the window containing `a`; `k` is a cursor for increasing `a`.
    fn at<'t>(&self, k: &mut usize, a: u64, truth: &'t Pieces) -> &'t Pieces {
        while *k + 1 < self.starts.len() && self.starts[*k + 1] <= a {
            *k += 1;
        }
        &truth[self.pieces[*k].clone()]
    }

    /// Index of the window containing `x`.
    fn index(&self, x: u64) -> usize {
        self.starts.partition_point(|w| *w <= x).saturating_sub(1)
    }
}

/// Scores every thread of `truth` against the matching reconstructed thread.
pub fn score(truth: &[ThreadTruth], recon: &[ReconThread]) -> Fidelity {
    let mut names = Names::new();
    let truth: Vec<Truth> = truth.iter().map(|t| Truth::intern(t, &mut names)).collect();
    let recon: Vec<Recon> = recon.iter().map(|r| Recon::intern(r, &mut names)).collect();
    score_interned(&truth, &recon, &names)
}

/// [`score`] on interned stacks; `names` holds the handles of both sides.
pub fn score_interned(truth: &[Truth], recon: &[Recon], names: &Names) -> Fidelity {
    let mut acc = Acc::default();
    let mut f = Fidelity::default();
    let empty = Recon::default();
    for t in truth {
        let r = recon
            .iter()
            .find(|r| r.thread == t.thread)
            .unwrap_or_else(|| {
                f.missing_threads += 1;
                &empty
            });
        score_thread(t, r, names, &mut acc, &mut f, None);
    }
    let share = |n: u64, d: u64| if d == 0 { 1.0 } else { n as f64 / d as f64 };
    f.covered_ns = acc.total;
    f.exact = share(acc.exact, acc.total);
    f.root_correct = share(acc.root, acc.total);
    f.exact_outside_gaps = share(acc.out_exact, acc.out_total);
    f.root_outside_gaps = share(acc.out_root, acc.out_total);
    f.exact_strict = share(acc.strict, acc.total);
    f.exact_or_marked = share(acc.marked, acc.total);
    f.exact_or_marked_outside_gaps = share(acc.out_marked, acc.out_total);
    f.exact_order = share(acc.order, acc.total);
    f.suffix_correct = share(acc.suffix, acc.total);
    f
}

/// One interval where the reconstruction shows no stack the program had then.
#[derive(Clone, Debug)]
pub struct Mismatch {
    /// Interval start (ns).
    pub start: u64,
    /// Interval end (ns).
    pub end: u64,
    /// The true stack at `start`.
    pub truth: Vec<String>,
    /// The reconstructed stack.
    pub recon: Vec<String>,
    /// It is still a suffix of a true stack of the window (only outer frames missing).
    pub suffix: bool,
    /// Its outermost frame is still the true root.
    pub root: bool,
}

/// The first `limit` non-exact intervals of one thread, to see *why* a writer scores low.
pub fn mismatches(t: &ThreadTruth, r: &ReconThread, limit: usize) -> Vec<Mismatch> {
    let mut names = Names::new();
    let t = Truth::intern(t, &mut names);
    let r = Recon::intern(r, &mut names);
    mismatches_interned(&t, &r, &names, limit)
}

/// [`mismatches`] on interned stacks.
pub fn mismatches_interned(t: &Truth, r: &Recon, names: &Names, limit: usize) -> Vec<Mismatch> {
    let mut acc = Acc::default();
    let mut f = Fidelity::default();
    let mut out = Vec::new();
    score_thread(
        t,
        r,
        names,
        &mut acc,
        &mut f,
        Some(&mut |m| {
            if out.len() < limit {
                out.push(m)
            }
        }),
    );
    out
}

/// What a reconstructed stack is worth against one window's true stacks.
#[derive(Clone, Copy)]
struct Verdict {
    exact: bool,
    /// Exact, or exact with the marker frames standing for the true frames they hide.
    marked: bool,
    suffix: bool,
    root: bool,
}

fn score_thread(
    t: &Truth,
    r: &Recon,
    names: &Names,
    acc: &mut Acc,
    f: &mut Fidelity,
    mut report: Option<&mut dyn FnMut(Mismatch)>,
) {
    let (lo, hi) = (t.start(), t.end());
    let truth = &t.timeline[..];
    let marker = names.find_frame(UNKNOWN_FRAMES_MARKER);
    let recon: Vec<(u64, u64, StackId)> = r
        .timeline
        .iter()
        .filter(|(a, b, _)| *b > 0 && a < b)
        .map(|(a, b, s)| ((*a).max(0) as u64, *b as u64, *s))
        .collect();
    let tight = Windows::new(&t.windows, lo, hi, truth);
    let order = Windows::new(&t.order_windows, lo, hi, truth);
    let windows = &tight.starts;

    // Sweep the elementary intervals between all boundaries.
    let mut cuts: Vec<u64> = Vec::with_capacity(truth.len() + recon.len() * 2 + windows.len());
    cuts.extend(truth.iter().map(|x| x.0));
    cuts.extend(recon.iter().flat_map(|x| [x.0, x.1]));
    cuts.extend(windows.iter().copied());
    cuts.extend(order.starts.iter().copied());
    cuts.extend(t.gaps.iter().flat_map(|g| [g.0, g.1]));
    cuts.push(hi);
    cuts.retain(|c| *c >= lo && *c <= hi);
    cuts.sort_unstable();
    cuts.dedup();
    let (mut ti, mut ri, mut gi) = (0, 0, 0);
    let (mut wi, mut oi) = (0, 0);
    // A window can hold a whole snapshot's truth (timing unknown within it), and the same
    // reconstructed stack recurs interval after interval: its verdict against one window is
    // computed once (comparing it with every candidate each time was quadratic).
    let mut verdicts: IdMap<StackId, Verdict> = IdMap::default();
    let mut order_verdicts: IdMap<StackId, bool> = IdMap::default();
    let (mut memo_wi, mut memo_oi) = (usize::MAX, usize::MAX);
    for pair in cuts.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let len = b - a;
        while ti + 1 < truth.len() && truth[ti].1 <= a {
            ti += 1;
        }
        while ri < recon.len() && recon[ri].1 <= a {
            ri += 1;
        }
        let candidates = tight.at(&mut wi, a, truth);
        let order_candidates = order.at(&mut oi, a, truth);
        while gi < t.gaps.len() && t.gaps[gi].1 <= a {
            gi += 1;
        }
        let rs = match recon.get(ri) {
            Some(x) if x.0 <= a => x.2,
            _ => EMPTY,
        };
        let ts = truth.get(ti).map_or(EMPTY, |x| x.2);
        if memo_wi != wi {
            verdicts.clear();
            memo_wi = wi;
        }
        if memo_oi != oi {
            order_verdicts.clear();
            memo_oi = oi;
        }
        let v = *verdicts.entry(rs).or_insert_with(|| {
            let root = names.root(rs);
            let exact = candidates.iter().any(|c| c.2 == rs);
            let marked = exact
                || marker.is_some_and(|m| {
                    names.contains(rs, m) && {
                        let r = names.frames(rs);
                        candidates
                            .iter()
                            .any(|c| matches_with_markers(&names.frames(c.2), &r, m))
                    }
                });
            Verdict {
                exact,
                marked,
                suffix: rs != EMPTY && candidates.iter().any(|c| names.ends_with(c.2, rs)),
                root: rs != EMPTY && candidates.iter().any(|c| names.root(c.2) == root),
            }
        });
        let in_order = *order_verdicts
            .entry(rs)
            .or_insert_with(|| order_candidates.iter().any(|c| c.2 == rs));
        if let (false, Some(report)) = (v.exact, report.as_mut()) {
            report(Mismatch {
                start: a,
                end: b,
                truth: names.names(ts),
                recon: names.names(rs),
                suffix: v.suffix,
                root: v.root,
            });
        }
        let in_gap = t.gaps.get(gi).is_some_and(|g| g.0 <= a);
        let part = |yes: bool| if yes { len } else { 0 };
        acc.total += len;
        acc.exact += part(v.exact);
        acc.marked += part(v.marked);
        acc.root += part(v.root);
        acc.strict += part(rs == ts);
        acc.order += part(in_order);
        acc.suffix += part(v.suffix);
        if !in_gap {
            acc.out_total += len;
            acc.out_exact += part(v.exact);
            acc.out_marked += part(v.marked);
            acc.out_root += part(v.root);
        }
    }
    drop(cuts);

    // Phantoms: a frame is real if its name is on some true stack during the (order)
    // windows its interval touches.
    // Zero-length slices are invisible in a viewer, so they are not counted.
    for s in r.slices.iter().filter(|s| s.end > s.start) {
        f.frames += 1;
        if s.inferred {
            f.inferred_frames += 1;
        }
        let (a, b) = (s.start.max(0) as u64, s.end.max(0) as u64);
        if b < lo || a > hi {
            continue;
        }
        // The marker names no function: it invents nothing.
        if Some(s.frame) == marker {
            f.marker_frames += 1;
            continue;
        }
        // The end is exclusive: a frame closed at a window's start did not reach it.
        // Order windows, so a real frame merely smeared in time is not a phantom.
        let (ka, kb) = (order.index(a.max(lo)), order.index((b - 1).min(hi).max(a)));
        let range = order.pieces[ka].start..order.pieces[kb].end.max(order.pieces[ka].start);
        let real = truth[range].iter().any(|p| names.contains(p.2, s.frame));
        if !real {
            f.phantom_frames += 1;
            f.phantoms.push(s.resolve(names));
        }
    }
}

#[cfg(test)]
mod marker_tests {
    use super::matches_with_markers;

    #[test]
    fn a_marker_stands_for_any_run_of_frames_the_empty_one_included() {
        const M: u32 = 99;
        let truth = [1, 2, 3, 4];
        for (recon, yes) in [
            (&[1, 2, 3, 4][..], true),
            (&[1, M, 4], true),
            (&[1, 2, M, 3, 4], true),
            (&[M], true),
            (&[1, M, 3, M], true),
            (&[M, 2, 4], false),
            (&[1, 2, 3], false),
            (&[1, M, 5], false),
            (&[1, 2, 3, 4, M, 5], false),
        ] {
            assert_eq!(matches_with_markers(&truth, recon, M), yes, "{recon:?}");
        }
        assert!(!matches_with_markers(&[], &[1], M));
        assert!(matches_with_markers(&[], &[M], M));
    }
}
